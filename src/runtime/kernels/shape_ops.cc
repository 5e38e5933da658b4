// shape kernels.
#include "kernel_util.h"

namespace autopar::runtime {

void register_shape_kernels(KernelRegistry& registry) {}

}  // namespace autopar::runtime
