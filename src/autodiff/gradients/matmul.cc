// Gradient rules of MatMul and Gemm.
#include "rules.h"

namespace autopar {
namespace {

// Swaps the last two dims.
std::vector<int64_t> swap_last(int64_t rank) {
  std::vector<int64_t> perm(rank);
  for (int64_t i = 0; i < rank; ++i) perm[i] = i;
  std::swap(perm[rank - 1], perm[rank - 2]);
  return perm;
}

// Numpy matmul: 1-D operands are promoted ([K] → [1, K] on the left, [K, 1] on the right)
// and the promoted dim dropped from Y; batch dims broadcast. On the promoted 2-D forms
// dA = GO·Bᵀ and dB = Aᵀ·GO, summed over the dims each operand was broadcast along.
Status matmul_rule(GradientBuilder& b) {
  const ValueId a = b.I(0), bm = b.I(1);
  std::vector<int64_t> a_dims = b.dims(a), b_dims = b.dims(bm);
  if (a_dims.size() == 1) a_dims.insert(a_dims.begin(), 1);
  if (b_dims.size() == 1) b_dims.push_back(1);
  const ValueId a2 = b.reshape(a, a_dims);
  const ValueId b2 = b.reshape(bm, b_dims);
  // GO in the promoted output shape: batch dims, M, N.
  std::vector<int64_t> y_dims = b.dims(b.O(0));
  if (b.dims(a).size() == 1) y_dims.insert(y_dims.end() - (b.dims(bm).size() == 1 ? 0 : 1), 1);
  if (b.dims(bm).size() == 1) y_dims.push_back(1);
  const ValueId go = b.reshape(b.GO(0), y_dims);
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    const ValueId grad = b.op("MatMul", {go, b.transpose(b2, swap_last(b_dims.size()))});
    return b.reshape(b.unbroadcast(grad, a_dims), b.dims(a));
  }));
  return maybe_grad(b, 1, [&] {
    if (b_dims.size() == 2 && a_dims.size() > 2) {
      // A weight shared by every batch item: one GEMM over the flattened rows,
      // Aᵀ[K, rows]·GO[rows, N], instead of a product per item summed afterwards.
      const int64_t k = a_dims.back(), n = b_dims.back();
      const ValueId rows_a = b.reshape(a2, {b.value(a2).shape.num_elements() / k, k});
      const ValueId rows_go = b.reshape(go, {b.value(go).shape.num_elements() / n, n});
      return b.reshape(b.op("Gemm", {rows_a, rows_go}, {{"transA", int64_t{1}}}), b.dims(bm));
    }
    const ValueId grad = b.op("MatMul", {b.transpose(a2, swap_last(a_dims.size())), go});
    return b.reshape(b.unbroadcast(grad, b_dims), b.dims(bm));
  });
}

// Y = α·A'·B' + β·C with A' = Aᵀ when transA, B' = Bᵀ when transB.
Status gemm_rule(GradientBuilder& b) {
  const ValueId a = b.I(0), bm = b.I(1);
  const bool trans_a = b.node().attr_int("transA", 0) != 0;
  const bool trans_b = b.node().attr_int("transB", 0) != 0;
  const double alpha = b.node().attr_float("alpha", 1.0f);
  const double beta = b.node().attr_float("beta", 1.0f);
  const ValueId go = b.GO(0);
  auto t = [&](ValueId x) { return b.transpose(x, {1, 0}); };
  auto scale = [&](ValueId x, double s) {
    return s == 1.0 ? x : b.op("Mul", {x, b.scalar(s, b.dtype(x))});
  };
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    const ValueId b_prime = trans_b ? t(bm) : bm;                     // B'
    const ValueId grad = trans_a ? b.op("MatMul", {b_prime, t(go)})   // (GO·B'ᵀ)ᵀ = B'·GOᵀ
                                 : b.op("MatMul", {go, t(b_prime)});  // GO·B'ᵀ
    return scale(grad, alpha);
  }));
  RETURN_IF_ERROR(maybe_grad(b, 1, [&] {
    const ValueId a_prime = trans_a ? t(a) : a;                       // A'
    const ValueId grad = trans_b ? b.op("MatMul", {t(go), a_prime})   // (A'ᵀ·GO)ᵀ = GOᵀ·A'
                                 : b.op("MatMul", {t(a_prime), go});  // A'ᵀ·GO
    return scale(grad, alpha);
  }));
  if (b.num_inputs() > 2 && b.has_input(2)) {
    return maybe_grad(b, 2, [&] { return b.unbroadcast(scale(go, beta), b.dims(b.I(2))); });
  }
  return Status::ok();
}

}  // namespace

void register_matmul_gradients(OpRegistry& registry) {
  add_gradient(registry, "MatMul", matmul_rule);
  add_gradient(registry, "Gemm", gemm_rule);
}

}  // namespace autopar
