// Index kernels: Range, Size, GatherElements and GatherND.
#include "kernel_util.h"

namespace autopar::runtime {
namespace {

template <typename T>
Status range(KernelContext& ctx) {
  const T start = data_of<T>(ctx.input(0))[0];
  const T delta = data_of<T>(ctx.input(2))[0];
  Tensor& out = ctx.allocate_output(0);
  T* y = mutable_data_of<T>(out);
  for (int64_t i = 0; i < out.num_elements(); ++i)
    y[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  return Status::ok();
}

// Normalises index `i` against `extent`; false when it is out of range.
bool wrap(int64_t& i, int64_t extent) {
  if (i < -extent || i >= extent) return false;
  if (i < 0) i += extent;
  return true;
}

template <typename T>
Status gather_elements(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const int64_t rank = data.rank();
  const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), rank);
  Tensor& out = ctx.allocate_output(0);
  const std::vector<int64_t> data_strides = strides_of(data.dims());
  const std::vector<int64_t>& index_dims = indices.dims();
  const T* x = data_of<T>(data);
  T* y = mutable_data_of<T>(out);
  std::vector<int64_t> at(rank, 0);
  for (int64_t e = 0; e < out.num_elements(); ++e) {
    int64_t index = indices.int_at(e);
    if (!wrap(index, data.dims()[axis])) {
      return ctx.fail("index {} is out of range for axis {} of size {}", index, axis,
                      data.dims()[axis]);
    }
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d) offset += (d == axis ? index : at[d]) * data_strides[d];
    y[e] = x[offset];
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++at[d] < index_dims[d]) break;
      at[d] = 0;
    }
  }
  return Status::ok();
}

template <typename T>
Status gather_nd(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const int64_t batch_dims = ctx.node().attr_int("batch_dims", 0);
  const int64_t k = indices.dims().back();
  const std::vector<int64_t> data_strides = strides_of(data.dims());
  int64_t batch = 1;
  for (int64_t d = 0; d < batch_dims; ++d) batch *= data.dims()[d];
  const int64_t tuples = batch == 0 ? 0 : indices.num_elements() / k / batch;  // per batch item
  int64_t slice = 1;
  for (int64_t d = batch_dims + k; d < data.rank(); ++d) slice *= data.dims()[d];
  const int64_t batch_stride = batch_dims > 0 ? data_strides[batch_dims - 1] : 0;
  Tensor& out = ctx.allocate_output(0);
  const T* x = data_of<T>(data);
  T* y = mutable_data_of<T>(out);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < tuples; ++t) {
      const int64_t tuple = b * tuples + t;
      int64_t offset = b * batch_stride;
      for (int64_t j = 0; j < k; ++j) {
        int64_t index = indices.int_at(tuple * k + j);
        const int64_t extent = data.dims()[batch_dims + j];
        if (!wrap(index, extent))
          return ctx.fail("index {} is out of range for a dim of {}", index, extent);
        offset += index * data_strides[batch_dims + j];
      }
      std::copy(x + offset, x + offset + slice, y + tuple * slice);
    }
  }
  return Status::ok();
}

}  // namespace

void register_indexing_kernels(KernelRegistry& registry) {
  registry.add("", "Range", [](KernelContext& ctx) {
    return dispatch_numeric(ctx, ctx.input(0).dtype(),
                            [&](auto t) { return range<decltype(t)>(ctx); });
  });
  registry.add("", "Size", [](KernelContext& ctx) {
    ctx.allocate_output(0).set_from_int(0, ctx.input(0).num_elements());
    return Status::ok();
  });
  registry.add("", "GatherElements", [](KernelContext& ctx) {
    return dispatch_by_size(ctx, ctx.input(0).dtype(),
                            [&](auto t) { return gather_elements<decltype(t)>(ctx); });
  });
  registry.add("", "GatherND", [](KernelContext& ctx) {
    return dispatch_by_size(ctx, ctx.input(0).dtype(),
                            [&](auto t) { return gather_nd<decltype(t)>(ctx); });
  });
}

}  // namespace autopar::runtime
