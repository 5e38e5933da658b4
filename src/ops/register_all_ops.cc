// The one explicit list of supported op families.
#include "families.h"

namespace autopar {

void register_all_ops(OpRegistry& registry) {
  register_matmul_ops(registry);
  register_elementwise_ops(registry);
}

}  // namespace autopar
