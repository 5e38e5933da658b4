// Precision's choices: fp32, or mixed precision computing in bf16 or fp16.
#include "dimensions.h"

namespace autopar::space {

Status parse_precision(const YAML::Node& node, const Reader& r, SearchSpace& space) {
  const std::vector<Precision> all = {Precision::kFp32, Precision::kBf16, Precision::kFp16};
  std::vector<std::string> names;
  for (Precision p : all) names.emplace_back(precision_name(p));
  ASSIGN_OR_RETURN(std::vector<size_t> picked, r.names(node, "precision", names));
  space.precision.clear();
  for (size_t i : picked) space.precision.push_back(all[i]);
  return Status::ok();
}

std::vector<Scheme> expand_precision(const Scheme& base, const SearchSpace& space, int32_t) {
  return one_per(base, space.precision, [](Scheme& s, Precision p) { s.precision = p; });
}

}  // namespace autopar::space
