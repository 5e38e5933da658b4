// normalization kernels.
#include "kernel_util.h"

namespace autopar::runtime {

void register_normalization_kernels(KernelRegistry& registry) {}

}  // namespace autopar::runtime
