// Mixed precision: bf16 or fp16 arithmetic in the forward and backward, fp32 master weights,
// gradients and optimizer state (the casts' gradients bring the gradients back to fp32).
#include "paradigms.h"

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

}  // namespace autopar::paradigm_files
