// Context parallelism: the sequence split over cp through the whole layer, attention included.
// Attention runs fused (FlashAttention's Attention op) in one of two forms: ring attention
// (each rank's key/value block passed around the cp ring, partial softmax results combined
// online; the sequence laid out as chunk pairs r and 2·cp − 1 − r so causal work is
// balanced, as Megatron-LM does) or all-to-all over heads (DeepSpeed-Ulysses: queries, keys and
// values exchanged onto head shards, attention over the whole sequence, the output exchanged
// back).
#include "paradigms.h"

namespace autopar {
namespace {

const std::initializer_list<std::pair<const char*, ContextForm>> kContext = {
    {"ring", ContextForm::kRing}, {"all-to-all", ContextForm::kAllToAll}};

}  // namespace

const char* context_form_name(ContextForm form) { return name_of(form, kContext); }

std::string_view zigzag_axis(const Scheme& scheme) {
  return scheme.cp() > 1 && scheme.context == ContextForm::kRing ? "cp" : "";
}

}  // namespace autopar

namespace autopar::paradigm_files {

Status configure_context(const Scheme& scheme, const Graph& graph, int32_t,
                         LoweringPolicy& policy) {
  const int64_t cp = scheme.cp();
  if (cp <= 1) return Status::ok();
  const bool ring = scheme.context == ContextForm::kRing;
  // The ring's chunk pairs cut each sequence into 2·cp chunks.
  const int64_t chunks = ring ? 2 * cp : cp;
  for (ValueId v : graph.inputs()) {
    const Value& value = graph.value(v);
    const int64_t dim = attribute_dim(value);
    if (dim >= 0 && value.shape.dims[dim] % chunks != 0) {
      return error("mesh.cp: input '{}' has {} positions, which do not split into {} {}",
                   value.name, value.shape.dims[dim], chunks,
                   ring ? fmt::format("chunks (2 per rank of a ring of {})", cp) : "ranks");
    }
  }
  policy.spmd.axes.push_back("cp");
  policy.spmd.context_axis = "cp";
  policy.spmd.ring_attention = ring;
  policy.input_layouts.push_back([](const Value& v, Layout layout) {
    const int64_t dim = attribute_dim(v);
    if (dim < 0) return layout;
    return layout.with_split(dim, "cp");
  });
  return Status::ok();
}

Status parse_context(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
  if (const YAML::Node context = root["context"]) {
    ASSIGN_OR_RETURN(s.context, r.choice(context, "context", kContext));
  }
  return Status::ok();
}

// The forms a space lists, each under cp > 1; without cp the form changes nothing.
StatusOr<Expansion> search_context(const YAML::Node& value, const SchemeReader& r) {
  ASSIGN_OR_RETURN(std::vector<ContextForm> forms, listed(value, r, "context", kContext));
  return Expansion([forms](const Scheme& base, const SearchContext&) {
    return one_per(base, base.cp() > 1 ? forms : std::vector<ContextForm>{forms.front()},
                   [](Scheme& s, ContextForm c) { s.context = c; });
  });
}

}  // namespace autopar::paradigm_files
