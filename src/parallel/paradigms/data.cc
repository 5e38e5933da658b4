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

Status parse_data(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
  const YAML::Node batch = root["batch"];
  if (!batch) return Status::ok();
  if (!batch.IsMap()) return r.fail("batch", "expected {{global: N, micro: M}}");
  RETURN_IF_ERROR(r.known_keys(batch, "batch", {"global", "micro"}));
  if (batch["global"]) {
    ASSIGN_OR_RETURN(s.global_batch, r.integer(batch["global"], "batch.global"));
  }
  if (batch["micro"]) {
    ASSIGN_OR_RETURN(s.micro_batch, r.integer(batch["micro"], "batch.micro"));
  }
  if (batch["global"] && s.global_batch < 1)
    return r.fail("batch.global", "{} must be at least 1", s.global_batch);
  if (batch["micro"] && s.micro_batch < 1)
    return r.fail("batch.micro", "{} must be at least 1", s.micro_batch);
  if (s.micro_batch > 0 && s.global_batch == 0) return r.fail("batch.micro", "needs batch.global");
  if (s.global_batch > 0) {
    if (s.global_batch % s.dp() != 0)
      return r.fail("batch.global", "{} is not divisible by dp = {}", s.global_batch, s.dp());
    const int64_t per_replica = s.global_batch / s.dp();
    if (s.micro_batch == 0) s.micro_batch = per_replica;
    if (per_replica % s.micro_batch != 0) {
      return r.fail("batch.micro", "{} does not divide global / dp = {} / {} = {}", s.micro_batch,
                    s.global_batch, s.dp(), per_replica);
    }
  }
  return Status::ok();
}

}  // namespace autopar::paradigm_files
