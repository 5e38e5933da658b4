// Mixed precision: bf16 or fp16 arithmetic in the forward and backward, fp32 master weights,
// gradients and optimizer state (the casts' gradients bring the gradients back to fp32).
#include "paradigms.h"

namespace autopar {
namespace {

const std::initializer_list<std::pair<const char*, Precision>> kPrecision = {
    {"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}};

}  // namespace

const char* precision_name(Precision p) { return name_of(p, kPrecision); }

}  // namespace autopar

namespace autopar::paradigm_files {

Status configure_precision(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  switch (scheme.precision) {
    case Precision::kFp32:
      policy.compute = DType::kFloat32;
      break;
    case Precision::kBf16:
      policy.compute = DType::kBFloat16;
      break;
    case Precision::kFp16:
      policy.compute = DType::kFloat16;
      break;
  }
  return Status::ok();
}

Status parse_precision(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
  if (const YAML::Node precision = root["precision"]) {
    ASSIGN_OR_RETURN(s.precision, r.choice(precision, "precision", kPrecision));
  }
  return Status::ok();
}

StatusOr<Expansion> search_precision(const YAML::Node& value, const SchemeReader& r) {
  ASSIGN_OR_RETURN(std::vector<Precision> listed_precisions,
                   listed(value, r, "precision", kPrecision));
  return Expansion([listed_precisions](const Scheme& base, const SearchContext&) {
    return one_per(base, listed_precisions, [](Scheme& s, Precision p) { s.precision = p; });
  });
}

}  // namespace autopar::paradigm_files
