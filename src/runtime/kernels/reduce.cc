// Reduction kernels: ReduceSum, ReduceMean and ReduceMax over any set of axes.
#include <cmath>
#include <concepts>
#include <limits>
#include <type_traits>

#include "kernel_util.h"

namespace autopar::runtime {
namespace {

enum class Reduction { kSum, kMean, kMax };

// The input seen as kept and reduced dims, with size-1 dims dropped and neighbours of the
// same kind merged: reducing trailing axes becomes one contiguous run per output element,
// reducing leading ones becomes rows of contiguous output lanes.
struct ReduceLayout {
  std::vector<int64_t> kept_dims, kept_strides;
  std::vector<int64_t> reduced_dims, reduced_strides;
  int64_t output_count = 1;
  int64_t reduced_count = 1;
  bool innermost_kept = false;
};

ReduceLayout layout_of(const std::vector<int64_t>& dims, const std::vector<bool>& reduced) {
  ReduceLayout layout;
  const std::vector<int64_t> strides = strides_of(dims);
  enum class Kind { kNone, kKept, kReduced } last = Kind::kNone;
  for (size_t d = 0; d < dims.size(); ++d) {
    (reduced[d] ? layout.reduced_count : layout.output_count) *= dims[d];
    if (dims[d] == 1) continue;
    const Kind kind = reduced[d] ? Kind::kReduced : Kind::kKept;
    auto& merged_dims = reduced[d] ? layout.reduced_dims : layout.kept_dims;
    auto& merged_strides = reduced[d] ? layout.reduced_strides : layout.kept_strides;
    if (kind == last) {
      merged_dims.back() *= dims[d];
      merged_strides.back() = strides[d];
    } else {
      merged_dims.push_back(dims[d]);
      merged_strides.push_back(strides[d]);
    }
    last = kind;
  }
  layout.innermost_kept = last == Kind::kKept;
  return layout;
}

// Offset of the flat index `flat` over the first `rank` of dims/strides (row-major).
int64_t offset_of(int64_t flat, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& strides, size_t rank) {
  int64_t offset = 0;
  for (size_t d = rank; d-- > 0;) {
    offset += (flat % dims[d]) * strides[d];
    flat /= dims[d];
  }
  return offset;
}

// NaN wins, as in numpy's maximum.
template <typename T>
T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
  }
  return b > a || b != b ? b : a;
}

// Sums of floats are pairwise; integer sums wrap (in unsigned arithmetic, where overflow is
// defined), and since wrapping addition is associative their order does not matter.
template <typename T>
struct SumTypeOf {
  using type = T;
};
template <std::integral T>
struct SumTypeOf<T> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using SumType = typename SumTypeOf<T>::type;

template <typename T>
T finish_sum(SumType<T> sum, Reduction kind, int64_t count) {
  const T total = static_cast<T>(sum);
  if (kind != Reduction::kMean) return total;
  if constexpr (std::is_floating_point_v<T>) {
    return total / static_cast<T>(count);
  } else {
    return static_cast<T>(static_cast<int64_t>(total) / count);
  }
}

// What a reduction over no elements gives: 0 for a sum, NaN for a float mean (0 for an
// integer one), and the lowest value (−∞ for floats) for a max, as ONNX opset 18 specifies.
template <typename T>
T empty_reduction(Reduction kind) {
  switch (kind) {
    case Reduction::kSum:
      return T(0);
    case Reduction::kMean:
      return std::numeric_limits<T>::has_quiet_NaN ? std::numeric_limits<T>::quiet_NaN() : T(0);
    case Reduction::kMax:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
  }
  return T(0);
}

// The innermost merged dim is reduced: every output element reduces runs of
// `run_length` contiguous inputs, one run per index of the other reduced dims.
template <typename T>
void reduce_runs(const T* x, T* y, const ReduceLayout& layout, Reduction kind) {
  const int64_t run_length = layout.reduced_dims.back();
  const int64_t runs = layout.reduced_count / run_length;
  const size_t outer_rank = layout.reduced_dims.size() - 1;
  auto run_start = [&](int64_t base, int64_t run) {
    return x + base + offset_of(run, layout.reduced_dims, layout.reduced_strides, outer_rank);
  };
  parallel_for(layout.output_count, grain_for(layout.reduced_count),
               [&](int64_t begin, int64_t end) {
                 for (int64_t o = begin; o < end; ++o) {
                   const int64_t base =
                       offset_of(o, layout.kept_dims, layout.kept_strides, layout.kept_dims.size());
                   if (kind == Reduction::kMax) {
                     T best = *run_start(base, 0);
                     for (int64_t r = 0; r < runs; ++r) {
                       const T* run = run_start(base, r);
                       for (int64_t i = 0; i < run_length; ++i) best = max_of(best, run[i]);
                     }
                     y[o] = best;
                     continue;
                   }
                   using Sum = SumType<T>;
                   const Sum sum = pairwise_sum<Sum>(runs, [&](int64_t r) {
                     const T* run = run_start(base, r);
                     return pairwise_sum<Sum>(
                         run_length, [run](int64_t i) { return static_cast<Sum>(run[i]); });
                   });
                   y[o] = finish_sum<T>(sum, kind, layout.reduced_count);
                 }
               });
}

// The innermost merged dim is kept: each output row is `lanes` contiguous elements, reduced
// over rows of the input; tiles of lanes are the parallel items.
template <typename T>
void reduce_lanes(const T* x, T* y, const ReduceLayout& layout, Reduction kind) {
  constexpr int64_t kTile = 512;
  const int64_t lanes = layout.kept_dims.back();
  const int64_t tiles = (lanes + kTile - 1) / kTile;
  const int64_t output_rows = layout.output_count / lanes;
  const size_t outer_rank = layout.kept_dims.size() - 1;
  const int64_t rows = layout.reduced_count;
  auto row_offset = [&](int64_t r) {
    return offset_of(r, layout.reduced_dims, layout.reduced_strides, layout.reduced_dims.size());
  };
  parallel_for(output_rows * tiles, grain_for(rows * std::min(lanes, kTile)),
               [&](int64_t begin, int64_t end) {
                 std::vector<SumType<T>> wide_sums;
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t output_row = item / tiles, first_lane = (item % tiles) * kTile;
                   const int64_t width = std::min(kTile, lanes - first_lane);
                   const T* base =
                       x +
                       offset_of(output_row, layout.kept_dims, layout.kept_strides, outer_rank) +
                       first_lane;
                   T* out = y + output_row * lanes + first_lane;
                   if (kind == Reduction::kMax) {
                     std::copy(base, base + width, out);
                     for (int64_t r = 1; r < rows; ++r) {
                       const T* values = base + row_offset(r);
                       for (int64_t j = 0; j < width; ++j) out[j] = max_of(out[j], values[j]);
                     }
                   } else if constexpr (std::is_floating_point_v<T>) {
                     pairwise_sum_rows<T>(
                         rows, width, [&](int64_t r) { return base + row_offset(r); }, out);
                     if (kind == Reduction::kMean) {
                       for (int64_t j = 0; j < width; ++j) out[j] /= static_cast<T>(rows);
                     }
                   } else {
                     wide_sums.assign(static_cast<size_t>(width), 0);
                     for (int64_t r = 0; r < rows; ++r) {
                       const T* values = base + row_offset(r);
                       for (int64_t j = 0; j < width; ++j)
                         wide_sums[j] += static_cast<SumType<T>>(values[j]);
                     }
                     for (int64_t j = 0; j < width; ++j)
                       out[j] = finish_sum<T>(wide_sums[j], kind, rows);
                   }
                 }
               });
}

template <typename T>
void reduce(const Tensor& input, Tensor& output, const std::vector<bool>& reduced, Reduction kind) {
  const ReduceLayout layout = layout_of(input.dims(), reduced);
  assert(layout.output_count == output.num_elements());
  if (layout.output_count == 0) return;
  T* y = mutable_data_of<T>(output);
  if (layout.reduced_count == 0) {
    std::fill(y, y + layout.output_count, empty_reduction<T>(kind));
    return;
  }
  // Only size-1 dims are reduced: the output holds the input's elements in the same order.
  if (layout.reduced_dims.empty()) {
    output.mutable_bytes() = input.bytes();
    return;
  }
  if (layout.innermost_kept) {
    reduce_lanes(data_of<T>(input), y, layout, kind);
  } else {
    reduce_runs(data_of<T>(input), y, layout, kind);
  }
}

Kernel reduce_kernel(Reduction kind) {
  return [kind](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.allocate_output(0);
    const int64_t rank = x.rank();
    std::optional<std::vector<int64_t>> axes = read_axes(ctx, 1, rank);
    std::vector<bool> reduced(static_cast<size_t>(rank), false);
    if (!axes || axes->empty()) {
      // No axes: reduce everything, unless noop_with_empty_axes makes the op an identity.
      if (ctx.node().attr_int("noop_with_empty_axes", 0) != 0) {
        y.mutable_bytes() = x.bytes();
        return Status::ok();
      }
      reduced.assign(static_cast<size_t>(rank), true);
    } else {
      for (int64_t axis : *axes) reduced[static_cast<size_t>(axis)] = true;
    }
    return dispatch_numeric(ctx, x.dtype(), [&](auto tag) {
      reduce<decltype(tag)>(x, y, reduced, kind);
      return Status::ok();
    });
  };
}

}  // namespace

void register_reduce_kernels(KernelRegistry& registry) {
  registry.add("", "ReduceSum", reduce_kernel(Reduction::kSum));
  registry.add("", "ReduceMean", reduce_kernel(Reduction::kMean));
  registry.add("", "ReduceMax", reduce_kernel(Reduction::kMax));
}

}  // namespace autopar::runtime
