// Recomputation: the backward program recomputes forward values instead of keeping them
// from the forward program. `full` keeps only what the stage received and recomputes the
// rest of the layer; `selective` is Megatron-LM's: it recomputes the attention core (the
// scores, their scaling, mask, softmax and dropout, and the product with V) and keeps the rest;
// `nonparametric` keeps only the outputs of parameterised ops (projections, convolutions,
// normalisations) and of communication, and recomputes the attention core and the elementwise
// ops between them (partially_recomputed says which nodes each re-runs).
#include "paradigms.h"

namespace autopar {
namespace {

const std::initializer_list<std::pair<const char*, Recompute>> kRecompute = {
    {"none", Recompute::kNone},
    {"selective", Recompute::kSelective},
    {"nonparametric", Recompute::kNonParametric},
    {"full", Recompute::kFull}};

}  // namespace

const char* recompute_name(Recompute r) { return name_of(r, kRecompute); }

}  // namespace autopar

namespace autopar::paradigm_files {

Status configure_recompute(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  policy.recompute = scheme.recompute;
  return Status::ok();
}

Status parse_recompute(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
  if (const YAML::Node recompute = root["recompute"]) {
    ASSIGN_OR_RETURN(s.recompute, r.choice(recompute, "recompute", kRecompute));
  }
  return Status::ok();
}

}  // namespace autopar::paradigm_files
