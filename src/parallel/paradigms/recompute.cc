// Recomputation: the backward program recomputes forward values instead of keeping them
// from the forward program. `full` keeps only what the stage received and recomputes the
// rest of the layer; `selective` also keeps the outputs of parameterised ops (projections,
// convolutions, normalisations) and of communication, and recomputes the attention core and
// the elementwise ops between them.
#include "paradigms.h"

namespace autopar::paradigm_files {

Status configure_recompute(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  policy.recompute = scheme.recompute;
  return Status::ok();
}

}  // namespace autopar::paradigm_files
