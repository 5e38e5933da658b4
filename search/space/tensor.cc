// Operator (tensor) parallelism's choices: how activations are laid out over tp.
#include "dimensions.h"

namespace autopar::space {

Status parse_tensor(const YAML::Node& node, const Reader& r, SearchSpace& space) {
  const std::vector<TensorStrategy> all = {TensorStrategy::kMegatron, TensorStrategy::kMegatronSp,
                                           TensorStrategy::kAuto};
  std::vector<std::string> names;
  for (TensorStrategy t : all) names.emplace_back(tensor_strategy_name(t));
  ASSIGN_OR_RETURN(std::vector<size_t> picked, r.names(node, "tensor", names));
  space.tensor.clear();
  for (size_t i : picked) space.tensor.push_back(all[i]);
  return Status::ok();
}

// One scheme per tensor strategy under tp > 1; without tp the strategy changes nothing.
std::vector<Scheme> expand_tensor(const Scheme& base, const SearchSpace& space, int32_t) {
  const std::vector<TensorStrategy> tried =
      base.tp() > 1 ? space.tensor : std::vector<TensorStrategy>{space.tensor.front()};
  return one_per(base, tried, [](Scheme& s, TensorStrategy t) { s.tensor = t; });
}

}  // namespace autopar::space
