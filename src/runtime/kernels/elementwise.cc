// Elementwise kernels.
#include "kernel_util.h"

namespace autopar::runtime {

void register_elementwise_kernels(KernelRegistry& registry) {}

}  // namespace autopar::runtime
