// MatMul and Gemm kernels: single-threaded Eigen GEMM calls over row panels and broadcast batches.
#include <algorithm>
#include <type_traits>

#include <Eigen/Core>

#include "conv_simd.h"
#include "kernel_util.h"

namespace autopar::runtime {
namespace {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix<T>>;
template <typename T>
using MatrixMap = Eigen::Map<RowMajorMatrix<T>>;

// One Eigen call computes a panel of whole output rows over the full K, so every output
// element comes from one call. Panels depend on the shape only, never on the thread count:
// Eigen's summation order depends on the operand sizes it is given, and a partition that
// followed the thread count would change results in the last bits.
constexpr int64_t kPanelMultiplyAdds = int64_t{1} << 20;
// A multiple of every Eigen register block height (mr) for float and double up to AVX-512,
// so that only the last panel of a matrix takes Eigen's remainder path.
constexpr int64_t kPanelRowAlignment = 48;
// Every call packs all of B; 96 rows keep that copy to about 1% of the panel's work.
constexpr int64_t kMinPanelRows = 2 * kPanelRowAlignment;

int64_t rows_per_panel(int64_t m, int64_t n, int64_t k) {
  const int64_t per_row = std::max<int64_t>(n * std::max<int64_t>(k, 1), 1);
  int64_t rows = std::max((kPanelMultiplyAdds + per_row - 1) / per_row, kMinPanelRows);
  rows = (rows + kPanelRowAlignment - 1) / kPanelRowAlignment * kPanelRowAlignment;
  return std::min(rows, std::max<int64_t>(m, 1));
}

// The output rows of one panel: `count` rows from `begin`.
struct PanelRows {
  int64_t begin, count;
};
PanelRows panel_span(int64_t panel, int64_t rows, int64_t m) {
  const int64_t begin = panel * rows;
  return {begin, std::min(rows, m - begin)};
}

// Offsets (in elements) of each broadcast batch's matrix in one operand.
std::vector<int64_t> batch_offsets(const std::vector<int64_t>& operand_batch,
                                   const std::vector<int64_t>& out_batch, int64_t matrix_size) {
  const std::vector<int64_t> strides = broadcast_strides(operand_batch, out_batch);
  const int64_t count = element_count(out_batch);
  std::vector<int64_t> offsets(static_cast<size_t>(count), 0);
  std::vector<int64_t> index(out_batch.size(), 0);
  int64_t offset = 0;
  for (int64_t b = 0; b < count; ++b) {
    offsets[b] = offset * matrix_size;
    for (int64_t d = static_cast<int64_t>(out_batch.size()) - 1; d >= 0; --d) {
      offset += strides[d];
      if (++index[d] < out_batch[d]) break;
      offset -= strides[d] * out_batch[d];
      index[d] = 0;
    }
  }
  return offsets;
}

template <typename T>
Status run_matmul(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& y = ctx.allocate_output(0);
  // 1-D operands are a [1, K] row and a [K, 1] column; the output dims already omit them.
  std::vector<int64_t> a_dims = a.dims(), b_dims = b.dims();
  if (a_dims.size() == 1) a_dims.insert(a_dims.begin(), 1);
  if (b_dims.size() == 1) b_dims.push_back(1);
  const int64_t m = a_dims[a_dims.size() - 2], k = a_dims.back(), n = b_dims.back();
  assert(b_dims[b_dims.size() - 2] == k);
  const std::vector<int64_t> a_batch(a_dims.begin(), a_dims.end() - 2);
  const std::vector<int64_t> b_batch(b_dims.begin(), b_dims.end() - 2);
  const std::vector<int64_t> out_batch = *broadcast_shapes(a_batch, b_batch);
  const int64_t batch = element_count(out_batch);
  if (y.num_elements() == 0 || k == 0) return Status::ok();  // zero-filled is the answer

  const T* a_data = data_of<T>(a);
  const T* b_data = data_of<T>(b);
  T* y_data = mutable_data_of<T>(y);
  // A batch of contiguous A matrices times one B is a single [batch·M, K] × [K, N] product.
  const bool fold_batch = element_count(b_batch) == 1 && element_count(a_batch) == batch;
  const int64_t rows = fold_batch ? batch * m : m;
  const int64_t matrices = fold_batch ? 1 : batch;
  std::vector<int64_t> a_offsets{0}, b_offsets{0};
  if (!fold_batch) {
    a_offsets = batch_offsets(a_batch, out_batch, m * k);
    b_offsets = batch_offsets(b_batch, out_batch, k * n);
  }
  const int64_t panel_rows = rows_per_panel(rows, n, k);
  const int64_t panels = (rows + panel_rows - 1) / panel_rows;
  parallel_for(matrices * panels, grain_for(panel_rows * n * k, kPanelMultiplyAdds),
               [&](int64_t begin, int64_t end) {
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t matrix = item / panels;
                   const PanelRows span = panel_span(item % panels, panel_rows, rows);
                   MatrixMap<T> out(y_data + matrix * rows * n + span.begin * n, span.count, n);
                   ConstMatrixMap<T> lhs(a_data + a_offsets[matrix] + span.begin * k, span.count,
                                         k);
                   ConstMatrixMap<T> rhs(b_data + b_offsets[matrix], k, n);
                   // The output starts zero-filled: accumulating skips Eigen's own zeroing.
                   out.noalias() += lhs * rhs;
                 }
               });
  return Status::ok();
}

// Y = alpha·op(A)·op(B) + beta·C, C broadcast to [M, N]. Each panel writes beta·C into its
// rows and accumulates the product on top.
template <typename T>
Status run_gemm(KernelContext& ctx) {
  const Node& node = ctx.node();
  const bool trans_a = node.attr_int("transA", 0) != 0;
  const bool trans_b = node.attr_int("transB", 0) != 0;
  const T alpha = static_cast<T>(node.attr_float("alpha", 1.0f));
  const T beta = static_cast<T>(node.attr_float("beta", 1.0f));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& y = ctx.allocate_output(0);
  const int64_t m = y.dims()[0], n = y.dims()[1];
  const int64_t k = trans_a ? a.dims()[0] : a.dims()[1];
  const bool with_c = ctx.has_input(2);
  if (y.num_elements() == 0) return Status::ok();

  const T* a_data = data_of<T>(a);
  const T* b_data = data_of<T>(b);
  T* y_data = mutable_data_of<T>(y);
  const T* c_data = with_c ? data_of<T>(ctx.input(2)) : nullptr;
  std::vector<int64_t> c_strides;
  if (with_c) c_strides = broadcast_strides(ctx.input(2).dims(), {m, n});
  // A stored as [K, M] under transA; its transpose's rows are the stored columns.
  ConstMatrixMap<T> a_stored(a_data, trans_a ? k : m, trans_a ? m : k);
  ConstMatrixMap<T> b_stored(b_data, trans_b ? n : k, trans_b ? k : n);

  // One float32 row times a transposed B (a batch-1 linear layer) on AVX-512: dot products of
  // B's rows with it, plus C, in blocks of B's rows (conv_simd.h).
  if constexpr (std::is_same_v<T, float>) {
    const bool c_is_row = !with_c || (c_strides[0] == 0 && c_strides[1] == 1);
    if (m == 1 && trans_b && !trans_a && alpha == 1 && beta == 1 && c_is_row && k > 0 &&
        cpu_has_avx512()) {
      constexpr int64_t kBlockRows = 64;
      parallel_for((n + kBlockRows - 1) / kBlockRows, grain_for(kBlockRows * k, kPanelMultiplyAdds),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t block = begin; block < end; ++block) {
                       const int64_t first = block * kBlockRows;
                       const int64_t rows = std::min(kBlockRows, n - first);
                       gemm_avx512(b_data + first * k, k, rows, k, a_data, 1, 1,
                                   with_c ? c_data + first : nullptr, nullptr, y_data + first, 1);
                     }
                   });
      return Status::ok();
    }
  }
  const int64_t panel_rows = rows_per_panel(m, n, k);
  const int64_t panels = (m + panel_rows - 1) / panel_rows;
  parallel_for(panels, grain_for(panel_rows * n * std::max<int64_t>(k, 1), kPanelMultiplyAdds),
               [&](int64_t begin, int64_t end) {
                 for (int64_t panel = begin; panel < end; ++panel) {
                   const PanelRows span = panel_span(panel, panel_rows, m);
                   MatrixMap<T> out(y_data + span.begin * n, span.count, n);
                   if (with_c) {
                     for (int64_t i = 0; i < span.count; ++i) {
                       const T* c_row = c_data + (span.begin + i) * c_strides[0];
                       for (int64_t j = 0; j < n; ++j) out(i, j) = beta * c_row[j * c_strides[1]];
                     }
                   }
                   if (k == 0) continue;
                   // The rows hold beta·C or the allocation's zeros.
                   auto multiply = [&](const auto& lhs) {
                     if (trans_b) {
                       out.noalias() += alpha * lhs * b_stored.transpose();
                     } else {
                       out.noalias() += alpha * lhs * b_stored;
                     }
                   };
                   if (trans_a) {
                     multiply(a_stored.middleCols(span.begin, span.count).transpose());
                   } else {
                     multiply(a_stored.middleRows(span.begin, span.count));
                   }
                 }
               });
  return Status::ok();
}

}  // namespace

void register_matmul_kernels(KernelRegistry& registry) {
  registry.add("", "MatMul", [](KernelContext& ctx) {
    return dispatch_float(ctx, ctx.input(0).dtype(),
                          [&](auto zero) { return run_matmul<decltype(zero)>(ctx); });
  });
  registry.add("", "Gemm", [](KernelContext& ctx) {
    return dispatch_float(ctx, ctx.input(0).dtype(),
                          [&](auto zero) { return run_gemm<decltype(zero)>(ctx); });
  });
}

}  // namespace autopar::runtime
