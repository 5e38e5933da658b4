// Recomputation's choices: none, selective (the attention core), nonparametric (everything but
// parameterised ops, norms and collectives) or full.
#include "dimensions.h"

namespace autopar::space {

Status parse_recompute(const YAML::Node& node, const Reader& r, SearchSpace& space) {
  const std::vector<Recompute> all = {Recompute::kNone, Recompute::kSelective,
                                      Recompute::kNonParametric, Recompute::kFull};
  std::vector<std::string> names;
  for (Recompute x : all) names.emplace_back(recompute_name(x));
  ASSIGN_OR_RETURN(std::vector<size_t> picked, r.names(node, "recompute", names));
  space.recompute.clear();
  for (size_t i : picked) space.recompute.push_back(all[i]);
  return Status::ok();
}

std::vector<Scheme> expand_recompute(const Scheme& base, const SearchSpace& space, int32_t) {
  return one_per(base, space.recompute, [](Scheme& s, Recompute r) { s.recompute = r; });
}

}  // namespace autopar::space
