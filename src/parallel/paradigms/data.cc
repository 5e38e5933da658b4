// Data parallelism: samples split over dp. Each replica runs the whole model on its share of
// the batch; weight gradients come out of the backward as partial sums over dp (the MatMul
// and Conv rules contract over the split batch) and are reduced where the update reads them.
// BatchNorm's batch statistics become means over the split batch, i.e. partial sums that are
// reduced across replicas (synchronised BatchNorm).
#include "paradigms.h"

namespace autopar::paradigm_files {

Status configure_data(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  if (scheme.dp() <= 1) return Status::ok();
  policy.spmd.axes.push_back("dp");
  policy.batch_norm_as_reductions = true;
  policy.input_layouts.push_back([](const Value& v, Layout layout) {
    return v.shape.rank() >= 1 ? layout.with_split(0, "dp") : layout;
  });
  return Status::ok();
}

}  // namespace autopar::paradigm_files
