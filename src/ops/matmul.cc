// MatMul (numpy batched matrix product) and Gemm.
#include <algorithm>

#include "families.h"

namespace autopar {
namespace {

Status infer_matmul(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  if (ctx.input_dtype(0) != ctx.input_dtype(1)) {
    return ctx.fail("input types {} and {} differ", dtype_name(ctx.input_dtype(0)),
                    dtype_name(ctx.input_dtype(1)));
  }
  std::vector<int64_t> a = ctx.input_dims(0), b = ctx.input_dims(1);
  if (a.empty() || b.empty()) {
    return ctx.fail("inputs {} and {} must have rank >= 1",
                    dims_text(ctx.input_dtype(0), ctx.input_dims(0)),
                    dims_text(ctx.input_dtype(1), ctx.input_dims(1)));
  }
  // 1-D operands are promoted to matrices and the added dim is dropped from the result.
  bool a_vector = a.size() == 1, b_vector = b.size() == 1;
  if (a_vector) a.insert(a.begin(), 1);
  if (b_vector) b.push_back(1);
  if (a.back() != b[b.size() - 2]) {
    return ctx.fail("inner dims differ: {} x {}", dims_text(ctx.input_dtype(0), ctx.input_dims(0)),
                    dims_text(ctx.input_dtype(1), ctx.input_dims(1)));
  }
  std::vector<int64_t> batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  auto batch = broadcast_shapes(batch_a, batch_b);
  if (!batch) {
    return ctx.fail("batch dims of {} and {} do not broadcast",
                    dims_text(ctx.input_dtype(0), ctx.input_dims(0)),
                    dims_text(ctx.input_dtype(1), ctx.input_dims(1)));
  }
  std::vector<int64_t> out = *batch;
  if (!a_vector) out.push_back(a[a.size() - 2]);
  if (!b_vector) out.push_back(b.back());
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// Every output element is a K-long dot product; K is A's last dim (its only dim when 1-D).
double matmul_flops(const Graph& g, const Node& n) {
  const auto& a = input_dims_of(g, n, 0);
  if (a.empty()) return 0.0;
  return 2.0 * static_cast<double>(a.back()) * output_elements(g, n);
}

struct GemmDims {
  int64_t m = 0, n = 0, k = 0;
};

Status gemm_dims(const InferenceContext& ctx, GemmDims& dims) {
  int64_t trans_a = 0, trans_b = 0;
  RETURN_IF_ERROR(read_int(ctx, "transA", trans_a));
  RETURN_IF_ERROR(read_int(ctx, "transB", trans_b));
  const auto& a = ctx.input_dims(0);
  const auto& b = ctx.input_dims(1);
  if (a.size() != 2 || b.size() != 2) {
    return ctx.fail("A and B must be matrices, got {} and {}", dims_text(ctx.input_dtype(0), a),
                    dims_text(ctx.input_dtype(1), b));
  }
  dims.m = trans_a ? a[1] : a[0];
  dims.k = trans_a ? a[0] : a[1];
  int64_t k_b = trans_b ? b[1] : b[0];
  dims.n = trans_b ? b[0] : b[1];
  if (dims.k != k_b) {
    return ctx.fail("inner dims differ: {} (transA={}) x {} (transB={})",
                    dims_text(ctx.input_dtype(0), a), trans_a, dims_text(ctx.input_dtype(1), b),
                    trans_b);
  }
  return Status::ok();
}

Status infer_gemm(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 3, 1, 1));
  if (ctx.opset() < 11 && !ctx.has_input(2)) {
    return ctx.fail("input C is required before opset 11 (opset {})", ctx.opset());
  }
  float alpha = 1, beta = 1;
  RETURN_IF_ERROR(read_float(ctx, "alpha", alpha));
  RETURN_IF_ERROR(read_float(ctx, "beta", beta));
  GemmDims dims;
  RETURN_IF_ERROR(gemm_dims(ctx, dims));
  DType dtype = ctx.input_dtype(0);
  for (size_t i = 1; i < 3; ++i) {
    if (ctx.has_input(i) && ctx.input_dtype(i) != dtype) {
      return ctx.fail("input types {} and {} differ", dtype_name(dtype),
                      dtype_name(ctx.input_dtype(i)));
    }
  }
  std::vector<int64_t> out = {dims.m, dims.n};
  if (ctx.has_input(2)) {
    // C broadcasts one way only: onto [M, N].
    const auto& c = ctx.input_dims(2);
    auto joined = broadcast_shapes(c, out);
    if (c.size() > 2 || !joined || *joined != out) {
      return ctx.fail("C {} does not broadcast to {}", dims_text(dtype, c), dims_text(dtype, out));
    }
  }
  return set_output_checked(ctx, 0, dtype, std::move(out));
}

double gemm_flops(const Graph& g, const Node& n) {
  const auto& y = output_dims_of(g, n, 0);
  const auto& a = input_dims_of(g, n, 0);
  if (y.size() != 2 || a.size() != 2) return 0.0;
  double m = static_cast<double>(y[0]), cols = static_cast<double>(y[1]);
  double k = static_cast<double>(n.attr_int("transA", 0) ? a[0] : a[1]);
  double flops = 2.0 * m * cols * k;
  if (n.attr_float("alpha", 1.0f) != 1.0f) flops += m * cols;
  if (n.input(2) != kNoId) flops += m * cols;
  return flops;
}

// Y[b.., m, n] = Σ_k A[b.., m, k]·B[b.., k, n]: batch, m and n parallel, k a reduction (a
// 1-D operand has no m or n). Batch dims broadcast right-aligned.
std::optional<IterationSpace> matmul_space(const Graph& g, const Node& n) {
  const std::vector<int64_t>& a = g.value(n.inputs[0]).shape.dims;
  const std::vector<int64_t>& b = g.value(n.inputs[1]).shape.dims;
  const std::vector<int64_t>& y = g.value(n.outputs[0]).shape.dims;
  const bool has_m = a.size() >= 2, has_n = b.size() >= 2;
  const size_t batch = y.size() - (has_m ? 1 : 0) - (has_n ? 1 : 0);
  IterationSpace space;
  for (size_t i = 0; i < batch; ++i)
    space.loops.push_back({fmt::format("b{}", i), y[i], LoopKind::kParallel, true});
  const int m = has_m ? static_cast<int>(space.loops.size()) : -1;
  if (has_m) space.loops.push_back({"m", a[a.size() - 2], LoopKind::kParallel, true});
  const int nn = has_n ? static_cast<int>(space.loops.size()) : -1;
  if (has_n) space.loops.push_back({"n", b.back(), LoopKind::kParallel, true});
  const int k = static_cast<int>(space.loops.size());
  space.loops.push_back({"k", a.back(), LoopKind::kReduction, true});
  auto batch_map = [&](const std::vector<int64_t>& dims, size_t own_batch) {
    std::vector<int> map;
    for (size_t i = 0; i < own_batch; ++i) {
      const size_t at = batch - own_batch + i;
      map.push_back(dims[i] == y[at] ? static_cast<int>(at) : -1);
    }
    return map;
  };
  std::vector<int> a_map = batch_map(a, has_m ? a.size() - 2 : 0);
  if (has_m) a_map.push_back(m);
  a_map.push_back(k);
  std::vector<int> b_map = batch_map(b, has_n ? b.size() - 2 : 0);
  b_map.push_back(k);
  if (has_n) b_map.push_back(nn);
  std::vector<int> y_map;
  for (size_t i = 0; i < batch; ++i) y_map.push_back(static_cast<int>(i));
  if (has_m) y_map.push_back(m);
  if (has_n) y_map.push_back(nn);
  space.inputs = {a_map, b_map};
  space.outputs = {y_map};
  return space;
}

// Y[m, n] = α·Σ_k A'[m, k]·B'[k, n] + β·C[m, n]; transA/transB swap an operand's dims.
std::optional<IterationSpace> gemm_space(const Graph& g, const Node& n) {
  const std::vector<int64_t>& y = g.value(n.outputs[0]).shape.dims;
  const std::vector<int64_t>& a = g.value(n.inputs[0]).shape.dims;
  const bool trans_a = n.attr_int("transA", 0) != 0, trans_b = n.attr_int("transB", 0) != 0;
  IterationSpace space;
  space.loops = {{"m", y[0], LoopKind::kParallel, true},
                 {"n", y[1], LoopKind::kParallel, true},
                 {"k", trans_a ? a[0] : a[1], LoopKind::kReduction, true}};
  space.inputs = {trans_a ? std::vector<int>{2, 0} : std::vector<int>{0, 2},
                  trans_b ? std::vector<int>{1, 2} : std::vector<int>{2, 1}};
  if (n.input(2) != kNoId) {
    const std::vector<int64_t>& c = g.value(n.inputs[2]).shape.dims;
    std::vector<int> c_map;
    for (size_t d = 0; d < c.size(); ++d) {
      const size_t at = 2 - c.size() + d;
      c_map.push_back(c[d] == y[at] ? static_cast<int>(at) : -1);
    }
    space.inputs.push_back(c_map);
    space.additive = {false, false, true};
  }
  space.outputs = {{0, 1}};
  return space;
}

}  // namespace

void register_matmul_ops(OpRegistry& registry) {
  registry.add(
      with_semantics(make_op("MatMul", infer_matmul, matmul_flops,
                             "2·M·N·K per broadcast batch element (a multiply-add counts 2)"),
                     matmul_space));
  registry.add(
      with_semantics(make_op("Gemm", infer_gemm, gemm_flops,
                             "2·M·N·K, + M·N when alpha != 1, + M·N when C is present (beta's "
                             "scaling of C is folded into that addition)"),
                     gemm_space));
}

}  // namespace autopar
