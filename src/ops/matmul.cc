// MatMul (numpy batched matrix product) and Gemm.
#include <algorithm>

#include "families.h"

namespace autopar {
namespace {

Status infer_matmul(InferenceContext& ctx) {
  if (ctx.num_inputs() != 2 || !ctx.has_input(0) || !ctx.has_input(1)) {
    return ctx.fail("expects 2 inputs, got {}", ctx.num_inputs());
  }
  if (ctx.input_dtype(0) != ctx.input_dtype(1)) {
    return ctx.fail("input types {} and {} differ", dtype_name(ctx.input_dtype(0)),
                    dtype_name(ctx.input_dtype(1)));
  }
  std::vector<int64_t> a = ctx.input_dims(0), b = ctx.input_dims(1);
  if (a.empty() || b.empty()) return ctx.fail("inputs must have rank >= 1");
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
  ctx.set_output(0, ctx.input_dtype(0), out);
  return Status::ok();
}

// 2·K per output element: each is a K-long dot product of multiply-adds.
double matmul_flops(const Graph& g, const Node& n) {
  const auto& a = g.value(n.inputs[0]).shape.dims;
  return 2.0 * static_cast<double>(a.back()) * output_elements(g, n);
}

}  // namespace

void register_matmul_ops(OpRegistry& registry) {
  registry.add({.op_type = "MatMul",
                .infer = infer_matmul,
                .flops = matmul_flops,
                .flops_doc = "2·M·N·K per broadcast batch element"});
}

}  // namespace autopar
