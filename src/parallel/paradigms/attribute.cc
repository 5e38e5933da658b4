// Attribute parallelism: a sample's attribute dim split over sp, the sequence of token inputs
// ([batch, seq] integers; a float [batch, features] input has no attribute dim) and of
// embedded sequences ([batch, seq, hidden]), the height of images
// ([N, C, H, W]). Ops whose loops read that dim whole (attention's keys, a convolution's
// window) get it gathered by the SPMD pass.
#include "paradigms.h"

namespace autopar::paradigm_files {

Status configure_attribute(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  if (scheme.sp() <= 1) return Status::ok();
  policy.spmd.axes.push_back("sp");
  policy.batch_norm_as_reductions = true;
  const int64_t sp = scheme.sp();
  policy.input_layouts.push_back([sp](const Value& v, Layout layout) {
    const int64_t dim = attribute_dim(v);
    if (dim < 0 || v.shape.dims[dim] % sp != 0) return layout;
    return layout.with_split(dim, "sp");
  });
  return Status::ok();
}

}  // namespace autopar::paradigm_files
