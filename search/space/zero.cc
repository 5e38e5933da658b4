// ZeRO's choices: which of optimizer state (1), gradients (2) and parameters (3) dp shards.
#include "dimensions.h"

namespace autopar::space {

Status parse_zero(const YAML::Node& node, const Reader& r, SearchSpace& space) {
  ASSIGN_OR_RETURN(std::vector<size_t> picked, r.names(node, "zero", {"0", "1", "2", "3"}));
  space.zero.clear();
  for (size_t i : picked) space.zero.push_back(static_cast<int>(i));
  return Status::ok();
}

}  // namespace autopar::space
