// What the CPU kernels share: the families register_all_kernels() lists, dtype dispatch,
// deterministic parallel loops and sums, strides and broadcasting, and attribute readers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>
#include <tbb/partitioner.h>

#include "autopar/runtime/kernel.h"

namespace autopar::runtime {

void register_elementwise_kernels(KernelRegistry& registry);
void register_matmul_kernels(KernelRegistry& registry);
void register_conv_kernels(KernelRegistry& registry);
void register_normalization_kernels(KernelRegistry& registry);
void register_reduce_kernels(KernelRegistry& registry);
void register_shape_kernels(KernelRegistry& registry);
void register_loss_kernels(KernelRegistry& registry);
void register_indexing_kernels(KernelRegistry& registry);
void register_comm_kernels(KernelRegistry& registry);
void register_training_kernels(KernelRegistry& registry);
void register_attention_kernels(KernelRegistry& registry);

// The devices of an ai.autopar node's group: its explicit `group`, or the devices sharing
// every coordinate but those of its `axes` with this one.
StatusOr<std::vector<int64_t>> comm_group(const KernelContext& ctx, const Communicator& comm);

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
// Elementwise work runs in tiles of this many elements, at offsets that are multiples of it:
// Eigen's vectorised math (exp, erf, tanh) then splits every tensor into the same packets and
// scalar tails whether a node runs alone or fused with its neighbours.
inline constexpr int64_t kElementwiseTile = 1024;

inline int64_t grain_for(int64_t work_per_item, int64_t work_per_chunk = 1 << 15) {
  return std::max<int64_t>(1, work_per_chunk / std::max<int64_t>(work_per_item, 1));
}

// ---- summation ----------------------------------------------------------------------

// Σ term(i) for i in [0, n) in numpy's pairwise order: halves split at multiples of 8 down
// to blocks of at most 128 terms, each summed by 8 interleaved accumulators. The rounding
// error grows with log n instead of n, and the order depends only on n. Halves of very long
// sums run as parallel tasks, which changes when they run, not how they combine; `term`
// must therefore be safe to call from several threads.
template <typename T, typename Term>
T pairwise_sum(int64_t n, const Term& term, int64_t first = 0) {
  constexpr int64_t kBlock = 128;
  constexpr int64_t kParallelTerms = int64_t{1} << 16;
  if (n <= 0) return T(0);
  if (n < 8) {
    T sum = term(first);
    for (int64_t i = 1; i < n; ++i) sum += term(first + i);
    return sum;
  }
  if (n <= kBlock) {
    T acc[8];
    for (int64_t j = 0; j < 8; ++j) acc[j] = term(first + j);
    int64_t i = 8;
    for (; i + 8 <= n; i += 8) {
      for (int64_t j = 0; j < 8; ++j) acc[j] += term(first + i + j);
    }
    T sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; ++i) sum += term(first + i);
    return sum;
  }
  int64_t half = n / 2;
  half -= half % 8;
  T low, high;
  if (n >= kParallelTerms) {
    tbb::parallel_invoke([&] { low = pairwise_sum<T>(half, term, first); },
                         [&] { high = pairwise_sum<T>(n - half, term, first + half); });
  } else {
    low = pairwise_sum<T>(half, term, first);
    high = pairwise_sum<T>(n - half, term, first + half);
  }
  return low + high;
}

// out[j] += values[j]. Blocks of a fixed 16 lanes let -O2 vectorise the loop.
template <typename T>
void add_into(T* __restrict out, const T* __restrict values, int64_t n) {
  constexpr int64_t kLanes = 16;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) out[j + k] += values[j + k];
  }
  for (; j < n; ++j) out[j] += values[j];
}

// out[j] = Σ_r row(r)[j] for j in [0, width), where row(r) points at `width` contiguous
// values: runs of up to 128 rows are added in order (lane by lane, so the loop vectorises)
// and runs combine pairwise, so the order depends only on `rows`.
template <typename T, typename Row>
void pairwise_sum_rows(int64_t rows, int64_t width, const Row& row, T* out, int64_t first = 0) {
  constexpr int64_t kBlock = 128;
  if (rows <= 0) {
    std::fill(out, out + width, T(0));
    return;
  }
  if (rows <= kBlock) {
    const T* start = row(first);
    std::copy(start, start + width, out);
    for (int64_t r = 1; r < rows; ++r) add_into(out, row(first + r), width);
    return;
  }
  const int64_t half = rows / 2;
  pairwise_sum_rows(half, width, row, out, first);
  std::vector<T> high(static_cast<size_t>(width));
  pairwise_sum_rows(rows - half, width, row, high.data(), first + half);
  add_into(out, high.data(), width);
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
