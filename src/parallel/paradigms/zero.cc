// ZeRO: optimizer state (stage 1), accumulated gradients (2) and parameters (3) held as dp
// shards. The update runs on each replica's shard; the new parameters are all-gathered into
// their storage layout (stages 1, 2) or stay shards that every use gathers (3).
#include "paradigms.h"

namespace autopar::paradigm_files {

Status configure_zero(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  policy.spmd.zero = scheme.dp() > 1 ? scheme.zero : 0;
  return Status::ok();
}

}  // namespace autopar::paradigm_files
