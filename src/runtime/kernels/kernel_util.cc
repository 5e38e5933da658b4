// Shared kernel helpers: strides, broadcasting, axes.
#include "kernel_util.h"

namespace autopar::runtime {

std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  return strides;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& out_dims) {
  std::vector<int64_t> out(out_dims.size(), 0);
  const std::vector<int64_t> own = strides_of(dims);
  const size_t shift = out_dims.size() - dims.size();
  for (size_t d = 0; d < dims.size(); ++d) out[d + shift] = dims[d] == 1 ? 0 : own[d];
  return out;
}

std::optional<std::vector<int64_t>> read_axes(const KernelContext& ctx, size_t input_index,
                                              int64_t rank) {
  std::vector<int64_t> axes;
  if (const Attribute* a = ctx.node().attr("axes"); a && a->kind() == Attribute::Kind::kInts) {
    axes = a->ints();
  } else if (ctx.has_input(input_index)) {
    axes = ctx.input(input_index).to_int64_vector();
  } else {
    return std::nullopt;
  }
  for (int64_t& axis : axes) axis = normalize_axis(axis, rank);
  return axes;
}

}  // namespace autopar::runtime
