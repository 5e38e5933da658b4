// conv kernels.
#include "kernel_util.h"

namespace autopar::runtime {

void register_conv_kernels(KernelRegistry& registry) {}

}  // namespace autopar::runtime
