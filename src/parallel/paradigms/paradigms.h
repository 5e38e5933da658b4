// The paradigms' functions, one file each: the scheme fields each reads and checks (parse_*)
// and its decisions on the policy (configure_*); paradigms() lists them in order.
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

}  // namespace autopar::paradigm_files
