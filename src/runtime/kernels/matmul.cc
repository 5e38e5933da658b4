// matmul kernels.
#include "kernel_util.h"

namespace autopar::runtime {

void register_matmul_kernels(KernelRegistry& registry) {}

}  // namespace autopar::runtime
