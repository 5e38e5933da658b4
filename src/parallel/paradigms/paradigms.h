// The paradigms' functions, one file each: the scheme fields each reads and checks (parse_*),
// its decisions on the policy (configure_*) and its choices in a search space (search_*);
// paradigms() lists them in order.
#pragma once

#include "autopar/parallel/lowering.h"
#include "autopar/parallel/scheme_reader.h"

namespace autopar::paradigm_files {

Status configure_data(const Scheme& scheme, const Graph& graph, int32_t layers,
                      LoweringPolicy& policy);
Status configure_attribute(const Scheme& scheme, const Graph& graph, int32_t layers,
                           LoweringPolicy& policy);
Status configure_context(const Scheme& scheme, const Graph& graph, int32_t layers,
                         LoweringPolicy& policy);
Status configure_operator(const Scheme& scheme, const Graph& graph, int32_t layers,
                          LoweringPolicy& policy);
Status configure_zero(const Scheme& scheme, const Graph& graph, int32_t layers,
                      LoweringPolicy& policy);
Status configure_pipeline(const Scheme& scheme, const Graph& graph, int32_t layers,
                          LoweringPolicy& policy);
Status configure_precision(const Scheme& scheme, const Graph& graph, int32_t layers,
                           LoweringPolicy& policy);
Status configure_recompute(const Scheme& scheme, const Graph& graph, int32_t layers,
                           LoweringPolicy& policy);
Status configure_kernels(const Scheme& scheme, const Graph& graph, int32_t layers,
                         LoweringPolicy& policy);

// Each reads the top-level scheme fields its paradigm owns from `root` into `scheme`.
Status parse_data(const YAML::Node& root, const SchemeReader& r, Scheme& scheme);
Status parse_context(const YAML::Node& root, const SchemeReader& r, Scheme& scheme);
Status parse_operator(const YAML::Node& root, const SchemeReader& r, Scheme& scheme);
Status parse_zero(const YAML::Node& root, const SchemeReader& r, Scheme& scheme);
Status parse_pipeline(const YAML::Node& root, const SchemeReader& r, Scheme& scheme);
Status parse_recompute(const YAML::Node& root, const SchemeReader& r, Scheme& scheme);
Status parse_precision(const YAML::Node& root, const SchemeReader& r, Scheme& scheme);
Status parse_kernels(const YAML::Node& root, const SchemeReader& r, Scheme& scheme);

// Each reads its search-space field's choices (SearchDimension::parse).
StatusOr<Expansion> search_context(const YAML::Node& value, const SchemeReader& r);
StatusOr<Expansion> search_operator(const YAML::Node& value, const SchemeReader& r);
StatusOr<Expansion> search_zero(const YAML::Node& value, const SchemeReader& r);
StatusOr<Expansion> search_pipeline(const YAML::Node& value, const SchemeReader& r);
StatusOr<Expansion> search_recompute(const YAML::Node& value, const SchemeReader& r);
StatusOr<Expansion> search_precision(const YAML::Node& value, const SchemeReader& r);

// The values among `options` a space's field lists by name (one name alone: a list of one).
template <typename Enum>
StatusOr<std::vector<Enum>> listed(const YAML::Node& value, const SchemeReader& r,
                                   std::string_view field,
                                   std::initializer_list<std::pair<const char*, Enum>> options) {
  std::vector<std::string> names;
  std::vector<Enum> all;
  for (const auto& [name, e] : options) {
    names.emplace_back(name);
    all.push_back(e);
  }
  ASSIGN_OR_RETURN(std::vector<size_t> picked, r.names(value, field, names));
  std::vector<Enum> out;
  for (size_t i : picked) out.push_back(all[i]);
  return out;
}

// One scheme per value of `values`, `set` giving it to a copy of `base`.
template <typename T, typename Set>
std::vector<Scheme> one_per(const Scheme& base, const std::vector<T>& values, Set set) {
  std::vector<Scheme> out;
  for (const T& value : values) {
    out.push_back(base);
    set(out.back(), value);
  }
  return out;
}

}  // namespace autopar::paradigm_files
