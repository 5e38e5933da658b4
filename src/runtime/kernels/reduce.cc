// reduce kernels.
#include "kernel_util.h"

namespace autopar::runtime {

void register_reduce_kernels(KernelRegistry& registry) {}

}  // namespace autopar::runtime
