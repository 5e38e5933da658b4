// Elementwise ops: broadcast arithmetic and comparison, unary math and activations, Clip,
// Where, Identity, Cast and Dropout.
#include <algorithm>
#include <limits>

#include "families.h"

namespace autopar {
namespace {

bool is_comparison(std::string_view op) {
  return op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" ||
         op == "GreaterOrEqual";
}

Status broadcast_error(const InferenceContext& ctx, size_t a, size_t b) {
  return ctx.fail("inputs {} and {} do not broadcast",
                  dims_text(ctx.input_dtype(a), ctx.input_dims(a)),
                  dims_text(ctx.input_dtype(b), ctx.input_dims(b)));
}

Status infer_binary(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  DType a = ctx.input_dtype(0), b = ctx.input_dtype(1);
  // Pow's exponent may have its own type; every other op needs matching types.
  if (a != b && ctx.node().op_type != "Pow") {
    return ctx.fail("input types {} and {} differ", dtype_name(a), dtype_name(b));
  }
  auto shape = broadcast_shapes(ctx.input_dims(0), ctx.input_dims(1));
  if (!shape) return broadcast_error(ctx, 0, 1);
  return set_output_checked(ctx, 0, is_comparison(ctx.node().op_type) ? DType::kBool : a,
                            std::move(*shape));
}

// And, Or: bool operands, broadcast.
Status infer_logical(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  for (size_t i = 0; i < 2; ++i) {
    if (ctx.input_dtype(i) != DType::kBool) return ctx.fail("{} must be bool", input_text(ctx, i));
  }
  auto shape = broadcast_shapes(ctx.input_dims(0), ctx.input_dims(1));
  if (!shape) return broadcast_error(ctx, 0, 1);
  return set_output_checked(ctx, 0, DType::kBool, std::move(*shape));
}

Status infer_not(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  if (ctx.input_dtype(0) != DType::kBool) return ctx.fail("{} must be bool", input_text(ctx, 0));
  return set_output_checked(ctx, 0, DType::kBool, ctx.input_dims(0));
}

// Max, Min, Sum, Mean: any number of inputs of one type, broadcast together.
Status infer_variadic(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, std::numeric_limits<size_t>::max(), 1, 1));
  std::vector<int64_t> dims = ctx.input_dims(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.fail("input {} is missing", i);
    if (ctx.input_dtype(i) != ctx.input_dtype(0)) {
      return ctx.fail("input types {} and {} differ", dtype_name(ctx.input_dtype(0)),
                      dtype_name(ctx.input_dtype(i)));
    }
    auto joined = broadcast_shapes(dims, ctx.input_dims(i));
    if (!joined) {
      return ctx.fail("{} does not broadcast with {}", input_text(ctx, i),
                      dims_text(ctx.input_dtype(0), dims));
    }
    dims = std::move(*joined);
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(dims));
}

// PRelu's slope broadcasts to X (unidirectionally); the output has X's shape.
Status infer_prelu(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  if (ctx.input_dtype(0) != ctx.input_dtype(1)) {
    return ctx.fail("input types {} and {} differ", dtype_name(ctx.input_dtype(0)),
                    dtype_name(ctx.input_dtype(1)));
  }
  auto joined = broadcast_shapes(ctx.input_dims(0), ctx.input_dims(1));
  if (!joined || *joined != ctx.input_dims(0)) {
    return ctx.fail("slope {} does not broadcast to X {}", input_text(ctx, 1), input_text(ctx, 0));
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

Status infer_unary(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

// Unary ops whose float attributes (alpha, beta) must have the right kind.
ShapeFn unary_with_floats(std::vector<std::string> float_attrs) {
  return [float_attrs = std::move(float_attrs)](InferenceContext& ctx) -> Status {
    for (const std::string& name : float_attrs) {
      float value = 0;
      RETURN_IF_ERROR(read_float(ctx, name, value));
    }
    return infer_unary(ctx);
  };
}

Status infer_clip(InferenceContext& ctx) {
  if (ctx.opset() < 11) {
    RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
    float bound = 0;
    RETURN_IF_ERROR(read_float(ctx, "min", bound));
    RETURN_IF_ERROR(read_float(ctx, "max", bound));
  } else {
    // From opset 11 the bounds are optional scalar inputs of the data's type.
    RETURN_IF_ERROR(check_arity(ctx, 1, 3, 1, 1));
    for (size_t i = 1; i < 3; ++i) {
      if (!ctx.has_input(i)) continue;
      if (ctx.input(i).shape.num_elements() != 1 || ctx.input_rank(i) > 1) {
        return ctx.fail("bound {} must be a scalar", input_text(ctx, i));
      }
      if (ctx.input_dtype(i) != ctx.input_dtype(0)) {
        return ctx.fail("bound {} must have the type of input {}", input_text(ctx, i),
                        dtype_name(ctx.input_dtype(0)));
      }
    }
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

Status infer_where(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 3, 3, 1, 1));
  if (ctx.input_dtype(0) != DType::kBool) {
    return ctx.fail("condition {} must be bool", input_text(ctx, 0));
  }
  if (ctx.input_dtype(1) != ctx.input_dtype(2)) {
    return ctx.fail("input types {} and {} differ", dtype_name(ctx.input_dtype(1)),
                    dtype_name(ctx.input_dtype(2)));
  }
  auto xy = broadcast_shapes(ctx.input_dims(1), ctx.input_dims(2));
  if (!xy) return broadcast_error(ctx, 1, 2);
  auto all = broadcast_shapes(ctx.input_dims(0), *xy);
  if (!all) {
    return ctx.fail("condition {} does not broadcast with {}", input_text(ctx, 0),
                    dims_text(ctx.input_dtype(1), *xy));
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(1), std::move(*all));
}

Status infer_cast(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  int64_t to = 0;
  RETURN_IF_ERROR(require_int(ctx, "to", to));
  std::optional<DType> dtype;
  if (to > 0 && to <= INT32_MAX) dtype = dtype_from_onnx(static_cast<int32_t>(to));
  if (!dtype) return ctx.fail("attribute 'to' = {} is not a supported ONNX data type", to);
  return set_output_checked(ctx, 0, *dtype, ctx.input_dims(0));
}

// Dropout's ratio is an attribute before opset 12 and an optional input (with training_mode)
// from 12; its mask output is bool from opset 10 and the data's type before.
Status infer_dropout(InferenceContext& ctx) {
  int64_t opset = ctx.opset();
  RETURN_IF_ERROR(check_arity(ctx, 1, opset < 12 ? 1 : 3, 1, 2));
  if (opset < 12) {
    float ratio = 0.5f;
    RETURN_IF_ERROR(read_float(ctx, "ratio", ratio));
    if (!(ratio >= 0.0f && ratio < 1.0f)) return ctx.fail("ratio {} is not in [0, 1)", ratio);
  } else {
    if (ctx.has_input(1) && ctx.input(1).shape.num_elements() != 1) {
      return ctx.fail("ratio {} must be a scalar", input_text(ctx, 1));
    }
    if (ctx.has_input(2) &&
        (ctx.input(2).shape.num_elements() != 1 || ctx.input_dtype(2) != DType::kBool)) {
      return ctx.fail("training_mode {} must be a bool scalar", input_text(ctx, 2));
    }
  }
  RETURN_IF_ERROR(set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0)));
  DType mask = opset < 10 ? ctx.input_dtype(0) : DType::kBool;
  return set_output_checked(ctx, 1, mask, ctx.input_dims(0));
}

// Training mode draws the mask (one compare per element) and scales the kept values (one
// multiply); inference is a copy. Only a constant true training_mode input counts as
// training, since that is how exported training graphs mark it.
double dropout_flops(const Graph& g, const Node& n) {
  ValueId mode = n.input(2);
  if (g.opset(n.domain) < 12 || mode == kNoId) return 0.0;
  const TensorPtr& data = g.value(mode).data;
  if (!data || data->num_elements() != 1 || data->int_at(0) == 0) return 0.0;
  return 2.0 * input_elements(g, n, 0);
}

double one_per_output(const Graph& g, const Node& n) { return output_elements(g, n); }

// n inputs combine with n - 1 operations per output element (Mean adds one divide).
double variadic_flops(const Graph& g, const Node& n) {
  const double extra = n.op_type == "Mean" ? 1.0 : 0.0;
  return output_elements(g, n) * (static_cast<double>(n.inputs.size()) - 1.0 + extra);
}

void add_elementwise(OpRegistry& registry, const char* op, ShapeFn infer, const char* doc,
                     std::vector<int> config_inputs = {}) {
  registry.add(
      with_semantics(make_op(op, std::move(infer), one_per_output, doc, std::move(config_inputs)),
                     broadcast_space));
}

}  // namespace

void register_elementwise_ops(OpRegistry& registry) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) {
    add_elementwise(registry, op, infer_binary, "1 per output element (numpy broadcast)");
  }
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    add_elementwise(registry, op, infer_binary, "1 compare per output element");
  }
  add_elementwise(registry, "And", infer_logical, "1 per output element");
  add_elementwise(registry, "Or", infer_logical, "1 per output element");
  add_elementwise(registry, "Not", infer_not, "1 per element");
  for (const char* op :
       {"Sqrt", "Reciprocal", "Neg", "Exp", "Log", "Erf", "Tanh", "Relu", "Sigmoid", "HardSwish",
        "Abs", "Softplus", "Softsign", "Sign", "Floor", "Ceil"}) {
    add_elementwise(registry, op, infer_unary,
                    "1 per element (a transcendental or piecewise function counts 1)");
  }
  add_elementwise(registry, "LeakyRelu", unary_with_floats({"alpha"}),
                  "1 per element (a piecewise function counts 1)");
  add_elementwise(registry, "HardSigmoid", unary_with_floats({"alpha", "beta"}),
                  "1 per element (a piecewise function counts 1)");
  add_elementwise(registry, "Elu", unary_with_floats({"alpha"}),
                  "1 per element (a piecewise function counts 1)");
  add_elementwise(registry, "Selu", unary_with_floats({"alpha", "gamma"}),
                  "1 per element (a piecewise function counts 1)");
  add_elementwise(registry, "PRelu", infer_prelu, "1 per element (a piecewise function counts 1)");
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) {
    registry.add(with_semantics(make_op(op, infer_variadic, variadic_flops,
                                        "n - 1 per output element for n inputs (Mean: n)"),
                                broadcast_space));
  }
  add_elementwise(registry, "Clip", infer_clip, "1 per element (the clamp counts 1)", {1, 2});
  add_elementwise(registry, "Where", infer_where, "1 select per output element", {0});
  registry.add(
      with_semantics(make_op("Identity", infer_unary, zero_flops, "0 (a copy)"), broadcast_space));
  registry.add(
      with_semantics(make_op("Cast", infer_cast, zero_flops, "0 (a copy)"), broadcast_space));
  registry.add(with_semantics(make_op("Dropout", infer_dropout, dropout_flops,
                                      "0 in inference; 2 per element (mask compare, scale) when "
                                      "training_mode is a constant true",
                                      {1, 2}),
                              broadcast_space));
}

}  // namespace autopar
