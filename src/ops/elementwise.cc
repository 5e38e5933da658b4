// Elementwise ops: numpy-broadcast binary arithmetic, unary math and activations.
#include <algorithm>

#include "families.h"

namespace autopar {

std::optional<std::vector<int64_t>> broadcast_shapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::string dims_text(DType dtype, const std::vector<int64_t>& dims) {
  return fmt::format("{}[{}]", dtype_name(dtype), fmt::join(dims, ","));
}

double output_elements(const Graph& graph, const Node& node, size_t output) {
  ValueId id = node.output(output);
  return id == kNoId ? 0.0 : static_cast<double>(graph.value(id).shape.num_elements());
}

namespace {

Status infer_binary(InferenceContext& ctx) {
  if (ctx.num_inputs() != 2 || !ctx.has_input(0) || !ctx.has_input(1)) {
    return ctx.fail("expects 2 inputs, got {}", ctx.num_inputs());
  }
  if (ctx.num_outputs() != 1) return ctx.fail("expects 1 output, got {}", ctx.num_outputs());
  DType a = ctx.input_dtype(0), b = ctx.input_dtype(1);
  // Pow's exponent may have its own type; every other op needs matching types.
  if (a != b && ctx.node().op_type != "Pow") {
    return ctx.fail("input types {} and {} differ", dtype_name(a), dtype_name(b));
  }
  auto shape = broadcast_shapes(ctx.input_dims(0), ctx.input_dims(1));
  if (!shape) {
    return ctx.fail("inputs {} and {} do not broadcast", dims_text(a, ctx.input_dims(0)),
                    dims_text(b, ctx.input_dims(1)));
  }
  ctx.set_output(0, ctx.node().op_type == "Equal" ? DType::kBool : a, *shape);
  return Status::ok();
}

Status infer_unary(InferenceContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.fail("expects an input");
  if (ctx.num_outputs() < 1) return ctx.fail("expects an output");
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::ok();
}

double one_per_output(const Graph& g, const Node& n) { return output_elements(g, n); }

}  // namespace

void register_elementwise_ops(OpRegistry& registry) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Equal"}) {
    registry.add({.op_type = op,
                  .infer = infer_binary,
                  .flops = one_per_output,
                  .flops_doc = "1 per output element"});
  }
  for (const char* op :
       {"Sqrt", "Reciprocal", "Neg", "Exp", "Log", "Erf", "Tanh", "Relu", "Sigmoid"}) {
    registry.add({.op_type = op,
                  .infer = infer_unary,
                  .flops = one_per_output,
                  .flops_doc = "1 per element (a transcendental function counts 1)"});
  }
  registry.add({.op_type = "Identity",
                .infer = infer_unary,
                .flops = [](const Graph&, const Node&) { return 0.0; },
                .flops_doc = "0"});
}

}  // namespace autopar
