// The paradigms' configure functions, one file each; paradigms() lists them in order.
#pragma once

#include "autopar/parallel/lowering.h"

namespace autopar::paradigm_files {

Status configure_data(const Scheme& scheme, const Graph& graph, int32_t layers,
                      LoweringPolicy& policy);
Status configure_attribute(const Scheme& scheme, const Graph& graph, int32_t layers,
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

}  // namespace autopar::paradigm_files
