// Context parallelism's choices: how attention runs with the sequence split over cp.
#include "dimensions.h"

namespace autopar::space {

Status parse_context(const YAML::Node& node, const Reader& r, SearchSpace& space) {
  const std::vector<ContextForm> all = {ContextForm::kRing, ContextForm::kAllToAll};
  std::vector<std::string> names;
  for (ContextForm c : all) names.emplace_back(context_form_name(c));
  ASSIGN_OR_RETURN(std::vector<size_t> picked, r.names(node, "context", names));
  space.context.clear();
  for (size_t i : picked) space.context.push_back(all[i]);
  return Status::ok();
}

// One scheme per form under cp > 1; without cp the form changes nothing.
std::vector<Scheme> expand_context(const Scheme& base, const SearchSpace& space, int32_t) {
  const std::vector<ContextForm> tried =
      base.cp() > 1 ? space.context : std::vector<ContextForm>{space.context.front()};
  return one_per(base, tried, [](Scheme& s, ContextForm c) { s.context = c; });
}

}  // namespace autopar::space
