// What the CPU kernels share: the families register_all_kernels() lists, dtype dispatch,
// deterministic parallel loops, strides and broadcasting, and attribute readers.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include "autopar/runtime/kernel.h"

namespace autopar::runtime {

void register_elementwise_kernels(KernelRegistry& registry);
void register_matmul_kernels(KernelRegistry& registry);
void register_conv_kernels(KernelRegistry& registry);
void register_normalization_kernels(KernelRegistry& registry);
void register_reduce_kernels(KernelRegistry& registry);
void register_shape_kernels(KernelRegistry& registry);

// ---- parallel loops ----------------------------------------------------------------

// Runs body(begin, end) over [0, n) in chunks of at least `grain` items. The partition
// depends only on n, grain and the thread count (static partitioner), and every item is
// computed by exactly one chunk, so results do not depend on scheduling.
template <typename Body>
void parallel_for(int64_t n, int64_t grain, const Body& body) {
  if (n <= 0) return;
  if (n <= grain) {
    body(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, n, std::max<int64_t>(grain, 1)),
      [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); },
      tbb::static_partitioner());
}

// Items per chunk so that each chunk does about `work_per_chunk` units of work.
inline int64_t grain_for(int64_t work_per_item, int64_t work_per_chunk = 1 << 15) {
  return std::max<int64_t>(1, work_per_chunk / std::max<int64_t>(work_per_item, 1));
}

// ---- dtype dispatch -----------------------------------------------------------------

// Calls f(T{}) with T the C++ type of `dtype` among float and double; other dtypes are an
// error naming the node.
template <typename F>
Status dispatch_float(const KernelContext& ctx, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    default:
      return ctx.fail("dtype {} is not supported by the CPU kernel", dtype_name(dtype));
  }
}

// The same over float, double, int64, int32 (arithmetic that ONNX defines on integers too).
template <typename F>
Status dispatch_numeric(const KernelContext& ctx, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kInt32:
      return f(int32_t{});
    default:
      return ctx.fail("dtype {} is not supported by the CPU kernel", dtype_name(dtype));
  }
}

// Data movement by element size (1, 2, 4 or 8 bytes): any dtype.
template <typename F>
Status dispatch_by_size(const KernelContext& ctx, DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      return ctx.fail("dtype {} is not supported by the CPU kernel", dtype_name(dtype));
  }
}

// ---- shapes -------------------------------------------------------------------------

// Row-major strides in elements.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims);

// Strides of `dims` seen through numpy broadcasting to `out_dims`: 0 on broadcast dims and
// on the leading dims `dims` lacks.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& out_dims);

// Maps axis from [-rank, rank) to [0, rank); the shape rule has already checked it.
inline int64_t normalize_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// Axes from attribute `axes` (older opsets) or from input `input_index` (newer ones);
// nullopt when neither is given. Normalised to [0, rank).
std::optional<std::vector<int64_t>> read_axes(const KernelContext& ctx, size_t input_index,
                                              int64_t rank);

// Typed views of tensor data.
template <typename T>
const T* data_of(const Tensor& t) {
  return reinterpret_cast<const T*>(t.bytes().data());
}
template <typename T>
T* mutable_data_of(Tensor& t) {
  return reinterpret_cast<T*>(t.mutable_bytes().data());
}

}  // namespace autopar::runtime
