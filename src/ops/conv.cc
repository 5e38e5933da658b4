// Convolution and pooling: Conv, ConvTranspose, MaxPool, AveragePool, GlobalAveragePool, and
// MaxPool's gradient as one op (ai.autopar.training::MaxPoolGrad).
#include <algorithm>
#include <limits>

#include "families.h"

namespace autopar {
namespace {

// The window attributes every op of this family shares, read and checked against the
// number of spatial dims.
struct Window {
  std::string auto_pad = "NOTSET";
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
};

Status read_window(const InferenceContext& ctx, size_t spatial, Window& w) {
  RETURN_IF_ERROR(read_string(ctx, "auto_pad", w.auto_pad));
  if (w.auto_pad != "NOTSET" && w.auto_pad != "VALID" && w.auto_pad != "SAME_UPPER" &&
      w.auto_pad != "SAME_LOWER") {
    return ctx.fail("auto_pad '{}' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER", w.auto_pad);
  }
  w.strides.assign(spatial, 1);
  w.dilations.assign(spatial, 1);
  w.pads.assign(2 * spatial, 0);
  RETURN_IF_ERROR(read_ints(ctx, "strides", w.strides));
  RETURN_IF_ERROR(read_ints(ctx, "dilations", w.dilations));
  RETURN_IF_ERROR(read_ints(ctx, "pads", w.pads));
  RETURN_IF_ERROR(read_ints(ctx, "kernel_shape", w.kernel));
  auto check = [&](const char* name, const std::vector<int64_t>& v, size_t size,
                   int64_t min) -> Status {
    if (v.size() != size) {
      return ctx.fail("attribute '{}' has {} values, expected {} for {} spatial dims", name,
                      v.size(), size, spatial);
    }
    for (int64_t x : v) {
      if (x < min || x > kMaxElements) {
        return ctx.fail("attribute '{}' value {} is out of range (must be >= {})", name, x, min);
      }
    }
    return Status::ok();
  };
  RETURN_IF_ERROR(check("strides", w.strides, spatial, 1));
  RETURN_IF_ERROR(check("dilations", w.dilations, spatial, 1));
  RETURN_IF_ERROR(check("pads", w.pads, 2 * spatial, 0));
  if (!w.kernel.empty() || has_attr(ctx, "kernel_shape")) {
    RETURN_IF_ERROR(check("kernel_shape", w.kernel, spatial, 1));
  }
  if (w.auto_pad != "NOTSET" && has_attr(ctx, "pads")) {
    return ctx.fail("attribute 'pads' cannot be given with auto_pad {}", w.auto_pad);
  }
  return Status::ok();
}

// Window arithmetic runs in 128 bits: every operand is at most 2^56 (attributes and input
// dims are bounded), so products cannot overflow before the result is range-checked.
using Wide = __int128;

// (k − 1)·d + 1, the input extent one window covers.
Wide effective_kernel(const Window& w, size_t i) {
  return Wide{w.kernel[i] - 1} * w.dilations[i] + 1;
}

// Checks one output extent and stores it.
Status narrow(const InferenceContext& ctx, size_t i, Wide extent, int64_t& out) {
  if (extent > kMaxElements) return ctx.fail("spatial dim {} of the output exceeds 2^56", i);
  if (extent < 1) {
    Wide floor = std::numeric_limits<int64_t>::min();
    return ctx.fail("spatial dim {} of the output computes to {} (must be >= 1)", i,
                    static_cast<int64_t>(std::max(extent, floor)));
  }
  out = static_cast<int64_t>(extent);
  return Status::ok();
}

// Output extent of a window sliding over one spatial dim (ONNX's rule for Conv and pools;
// ceil_mode rounds the window count up, as ONNX's shape inference does).
Status window_output(const InferenceContext& ctx, const Window& w, size_t i, int64_t in,
                     bool ceil_mode, int64_t& out) {
  Wide stride = w.strides[i];
  if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
    return narrow(ctx, i, (in + stride - 1) / stride, out);
  }
  Wide padded = in;
  if (w.auto_pad != "VALID") padded += Wide{w.pads[i]} + w.pads[i + w.kernel.size()];
  Wide extent = effective_kernel(w, i);
  if (padded < extent) {
    return ctx.fail("spatial dim {} of size {} (padded {}) is smaller than the kernel extent {}", i,
                    in, static_cast<int64_t>(padded),
                    static_cast<int64_t>(std::min<Wide>(extent, kMaxElements)));
  }
  Wide span = padded - extent;
  return narrow(ctx, i, (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1, out);
}

// Checks shared by Conv and ConvTranspose: ranks, dtypes, group, and the window attributes
// against the weight's kernel dims.
Status check_conv_operands(InferenceContext& ctx, int64_t& group, Window& w) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 3, 1, 1));
  const auto& x = ctx.input_dims(0);
  const auto& w_dims = ctx.input_dims(1);
  if (x.size() < 3)
    return ctx.fail("{} must have rank >= 3 (N, C, spatial...)", input_text(ctx, 0));
  if (w_dims.size() != x.size()) {
    return ctx.fail("weight {} must have the rank of {}", input_text(ctx, 1), input_text(ctx, 0));
  }
  if (ctx.input_dtype(1) != ctx.input_dtype(0)) {
    return ctx.fail("input types {} and {} differ", dtype_name(ctx.input_dtype(0)),
                    dtype_name(ctx.input_dtype(1)));
  }
  group = 1;
  RETURN_IF_ERROR(read_int(ctx, "group", group));
  if (group < 1) return ctx.fail("group {} must be >= 1", group);
  RETURN_IF_ERROR(read_window(ctx, x.size() - 2, w));
  std::vector<int64_t> weight_kernel(w_dims.begin() + 2, w_dims.end());
  if (w.kernel.empty()) {
    w.kernel = weight_kernel;
    for (int64_t k : w.kernel) {
      if (k < 1) return ctx.fail("weight {} has an empty kernel", input_text(ctx, 1));
    }
  } else if (w.kernel != weight_kernel) {
    return ctx.fail("kernel_shape [{}] differs from weight {}", fmt::join(w.kernel, ","),
                    input_text(ctx, 1));
  }
  return Status::ok();
}

Status infer_conv(InferenceContext& ctx) {
  int64_t group = 1;
  Window w;
  RETURN_IF_ERROR(check_conv_operands(ctx, group, w));
  const auto& x = ctx.input_dims(0);
  const auto& w_dims = ctx.input_dims(1);
  size_t spatial = x.size() - 2;
  int64_t channels = x[1], out_channels = w_dims[0];
  if (channels % group != 0) {
    return ctx.fail("{} has {} channels, not divisible by group {}", input_text(ctx, 0), channels,
                    group);
  }
  if (channels / group != w_dims[1]) {
    return ctx.fail("{} has {} channels; with group {} the weight {} needs dim 1 = {}",
                    input_text(ctx, 0), channels, group, input_text(ctx, 1), channels / group);
  }
  if (out_channels % group != 0) {
    return ctx.fail("weight {} has {} output channels, not divisible by group {}",
                    input_text(ctx, 1), out_channels, group);
  }
  if (ctx.has_input(2) && ctx.input_dims(2) != std::vector<int64_t>{out_channels}) {
    return ctx.fail("bias {} must have shape [{}]", input_text(ctx, 2), out_channels);
  }
  std::vector<int64_t> out = {x[0], out_channels};
  for (size_t i = 0; i < spatial; ++i) {
    int64_t extent = 0;
    RETURN_IF_ERROR(window_output(ctx, w, i, x[i + 2], false, extent));
    out.push_back(extent);
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// Each output element is a dot product over (C_in/group)·prod(kernel) inputs.
double conv_flops(const Graph& g, const Node& n) {
  const auto& w = input_dims_of(g, n, 1);
  if (w.size() < 2) return 0.0;
  double out = output_elements(g, n);
  double macs = product(std::span(w).subspan(1));  // (C_in/group)·prod(kernel)
  double bias = n.input(2) != kNoId ? out : 0.0;
  return 2.0 * macs * out + bias;
}

Status infer_conv_transpose(InferenceContext& ctx) {
  int64_t group = 1;
  Window w;
  RETURN_IF_ERROR(check_conv_operands(ctx, group, w));
  const auto& x = ctx.input_dims(0);
  const auto& w_dims = ctx.input_dims(1);
  size_t spatial = x.size() - 2;
  // The weight is [C_in, C_out/group, k...].
  if (w_dims[0] != x[1]) {
    return ctx.fail("weight {} dim 0 must equal the {} channels of {}", input_text(ctx, 1), x[1],
                    input_text(ctx, 0));
  }
  if (x[1] % group != 0) return ctx.fail("{} channels are not divisible by group {}", x[1], group);
  auto out_channels = checked_product(w_dims[1], group);
  if (!out_channels) return ctx.fail("output channels overflow");
  if (ctx.has_input(2) && ctx.input_dims(2) != std::vector<int64_t>{*out_channels}) {
    return ctx.fail("bias {} must have shape [{}]", input_text(ctx, 2), *out_channels);
  }
  std::vector<int64_t> output_padding(spatial, 0), output_shape;
  RETURN_IF_ERROR(read_ints(ctx, "output_padding", output_padding));
  RETURN_IF_ERROR(read_ints(ctx, "output_shape", output_shape));
  if (output_padding.size() != spatial) {
    return ctx.fail("attribute 'output_padding' has {} values, expected {}", output_padding.size(),
                    spatial);
  }
  // output_shape may list the spatial dims only or the whole output shape.
  if (!output_shape.empty() && output_shape.size() != spatial &&
      output_shape.size() != spatial + 2) {
    return ctx.fail("attribute 'output_shape' has {} values, expected {}", output_shape.size(),
                    spatial);
  }
  for (int64_t p : output_padding) {
    if (p < 0 || p > kMaxElements) return ctx.fail("output_padding value {} is out of range", p);
  }
  std::vector<int64_t> out = {x[0], *out_channels};
  for (size_t i = 0; i < spatial; ++i) {
    Wide extent = 0;
    if (!output_shape.empty()) {
      extent = output_shape[output_shape.size() - spatial + i];
    } else if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
      extent = Wide{x[i + 2]} * w.strides[i];
    } else {
      Wide pads = w.auto_pad == "VALID" ? 0 : Wide{w.pads[i]} + w.pads[i + spatial];
      extent =
          Wide{w.strides[i]} * (x[i + 2] - 1) + output_padding[i] + effective_kernel(w, i) - pads;
    }
    int64_t narrowed = 0;
    RETURN_IF_ERROR(narrow(ctx, i, extent, narrowed));
    out.push_back(narrowed);
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// Every input element scatters into C_out/group·prod(kernel) outputs:
// 2·N·C_in·(C_out/group)·prod(kernel)·prod(input spatial), + bias once per output element.
double conv_transpose_flops(const Graph& g, const Node& n) {
  const auto& w = input_dims_of(g, n, 1);
  if (w.size() < 2) return 0.0;
  double macs = product(std::span(w).subspan(1));  // (C_out/group)·prod(kernel)
  double bias = n.input(2) != kNoId ? output_elements(g, n) : 0.0;
  return 2.0 * macs * input_elements(g, n, 0) + bias;
}

// The output dims of a pool over input `x_input` (N, C, then the window's spatial dims).
Status pool_output_dims(InferenceContext& ctx, size_t x_input, std::vector<int64_t>& out) {
  const auto& x = ctx.input_dims(x_input);
  if (x.size() < 3)
    return ctx.fail("{} must have rank >= 3 (N, C, spatial...)", input_text(ctx, x_input));
  size_t spatial = x.size() - 2;
  Window w;
  RETURN_IF_ERROR(read_window(ctx, spatial, w));
  if (w.kernel.empty()) return ctx.fail("required attribute 'kernel_shape' is missing");
  int64_t ceil_mode = 0, count_include_pad = 0, storage_order = 0;
  RETURN_IF_ERROR(read_int(ctx, "ceil_mode", ceil_mode));
  RETURN_IF_ERROR(read_int(ctx, "count_include_pad", count_include_pad));
  RETURN_IF_ERROR(read_int(ctx, "storage_order", storage_order));
  out = {x[0], x[1]};
  for (size_t i = 0; i < spatial; ++i) {
    int64_t extent = 0;
    RETURN_IF_ERROR(window_output(ctx, w, i, x[i + 2], ceil_mode != 0, extent));
    out.push_back(extent);
  }
  return Status::ok();
}

Status infer_pool(InferenceContext& ctx) {
  bool is_max = ctx.node().op_type == "MaxPool";
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, is_max ? 2 : 1));
  std::vector<int64_t> out;
  RETURN_IF_ERROR(pool_output_dims(ctx, 0, out));
  RETURN_IF_ERROR(set_output_checked(ctx, 0, ctx.input_dtype(0), out));
  return set_output_checked(ctx, 1, DType::kInt64, out);
}

// MaxPoolGrad(dY, X) -> dX (ai.autopar.training): each output's gradient added at its window's
// maximum, found as MaxPool finds it (the first of equal maxima in row-major kernel order; NaN
// never wins against a number), under MaxPool's attributes (storage_order 0).
Status infer_max_pool_grad(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  const DType dtype = ctx.input_dtype(1);
  if (!is_floating(dtype)) return ctx.fail("{} must be floating", input_text(ctx, 1));
  if (ctx.node().attr_int("storage_order", 0) != 0)
    return ctx.fail("storage_order 1 is not supported (row-major windows only)");
  std::vector<int64_t> out;
  RETURN_IF_ERROR(pool_output_dims(ctx, 1, out));
  if (ctx.input_dims(0) != out || ctx.input_dtype(0) != dtype)
    return ctx.fail("{} must be {}, MaxPool's output over {}", input_text(ctx, 0),
                    dims_text(dtype, out), input_text(ctx, 1));
  return set_output_checked(ctx, 0, dtype, ctx.input_dims(1));
}

// prod(kernel) compares and one add per output element.
double max_pool_grad_flops(const Graph& g, const Node& n) {
  return (product(n.attr_ints("kernel_shape")) + 1.0) * input_elements(g, n, 0);
}

// MaxPool: prod(kernel) compares per output element. AveragePool: prod(kernel) adds and one
// divide per output element.
double pool_flops(const Graph& g, const Node& n) {
  double window = product(n.attr_ints("kernel_shape"));
  double out = output_elements(g, n);
  return n.op_type == "MaxPool" ? window * out : (window + 1.0) * out;
}

Status infer_global_pool(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  const auto& x = ctx.input_dims(0);
  if (x.size() < 3)
    return ctx.fail("{} must have rank >= 3 (N, C, spatial...)", input_text(ctx, 0));
  std::vector<int64_t> out = {x[0], x[1]};
  out.resize(x.size(), 1);
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// One add per input element and one divide per output element.
double global_pool_flops(const Graph& g, const Node& n) {
  return input_elements(g, n, 0) + output_elements(g, n);
}

// Conv Y[n,m,o..] = Σ_c,k X[n,c,o+k..]·W[m,c,k..] and ConvTranspose (W[c,m,k..]): loops n and
// m parallel, c a reduction (without groups); the spatial loops slide a window over the input,
// so they are read whole (a spatial split needs a halo exchange, which the lowering does not
// derive from this declaration).
std::optional<IterationSpace> conv_space(const Graph& g, const Node& n) {
  const std::vector<int64_t>& x = g.value(n.inputs[0]).shape.dims;
  const std::vector<int64_t>& y = g.value(n.outputs[0]).shape.dims;
  const bool grouped = n.attr_int("group", 1) != 1;
  const bool transpose = n.op_type == "ConvTranspose";
  IterationSpace space;
  space.loops = {{"n", x[0], LoopKind::kParallel, true},
                 {"m", y[1], LoopKind::kParallel, !grouped},
                 {"c", x[1], LoopKind::kReduction, !grouped}};
  std::vector<int> x_map = {0, 2}, y_map = {0, 1},
                   w_map = transpose ? std::vector<int>{2, 1} : std::vector<int>{1, 2};
  for (size_t d = 2; d < y.size(); ++d) {
    y_map.push_back(static_cast<int>(space.loops.size()));
    space.loops.push_back({fmt::format("o{}", d - 2), y[d], LoopKind::kParallel, false});
    x_map.push_back(-1);
    w_map.push_back(-1);
  }
  space.inputs = {x_map, w_map};
  if (n.inputs.size() > 2) {
    space.inputs.push_back(n.input(2) == kNoId ? std::vector<int>{} : std::vector<int>{1});
    space.additive = {false, false, n.input(2) != kNoId};
  }
  space.outputs = {y_map};
  return space;
}

// Pooling: n and c parallel, the window's spatial loops read whole.
std::optional<IterationSpace> pool_space(const Graph& g, const Node& n) {
  if (n.outputs.size() > 1 && n.output(1) != kNoId) return std::nullopt;  // MaxPool indices
  const std::vector<int64_t>& y = g.value(n.outputs[0]).shape.dims;
  IterationSpace space;
  space.loops = {{"n", y[0], LoopKind::kParallel, true}, {"c", y[1], LoopKind::kParallel, true}};
  std::vector<int> x_map = {0, 1}, y_map = {0, 1};
  for (size_t d = 2; d < y.size(); ++d) {
    y_map.push_back(static_cast<int>(space.loops.size()));
    space.loops.push_back({fmt::format("o{}", d - 2), y[d], LoopKind::kParallel, false});
    x_map.push_back(-1);
  }
  space.inputs = {x_map};
  space.outputs = {y_map};
  for (size_t k = 1; k < n.outputs.size(); ++k) space.outputs.emplace_back();
  return space;
}

// MaxPoolGrad: n and c parallel; the input's spatial loops, which windows overlap, whole.
std::optional<IterationSpace> max_pool_grad_space(const Graph& g, const Node& n) {
  const std::vector<int64_t>& x = g.value(n.inputs[1]).shape.dims;
  IterationSpace space;
  space.loops = {{"n", x[0], LoopKind::kParallel, true}, {"c", x[1], LoopKind::kParallel, true}};
  std::vector<int> dy_map = {0, 1}, x_map = {0, 1};
  for (size_t d = 2; d < x.size(); ++d) {
    x_map.push_back(static_cast<int>(space.loops.size()));
    space.loops.push_back({fmt::format("i{}", d - 2), x[d], LoopKind::kParallel, false});
    dy_map.push_back(-1);
  }
  space.inputs = {dy_map, x_map};
  space.outputs = {x_map};
  return space;
}

}  // namespace

void register_conv_ops(OpRegistry& registry) {
  registry.add(with_semantics(make_op("Conv", infer_conv, conv_flops,
                                      "2·N·C_out·(C_in/group)·prod(kernel)·prod(output spatial), "
                                      "+ N·C_out·prod(output spatial) with bias"),
                              conv_space));
  registry.add(with_semantics(make_op("ConvTranspose", infer_conv_transpose, conv_transpose_flops,
                                      "2·N·C_out·(C_in/group)·prod(kernel)·prod(input spatial), + "
                                      "N·C_out·prod(output spatial) with bias"),
                              conv_space));
  registry.add(with_semantics(
      make_op("MaxPool", infer_pool, pool_flops, "prod(kernel) compares per output element"),
      pool_space));
  OpDef max_pool_grad =
      with_semantics(make_op("MaxPoolGrad", infer_max_pool_grad, max_pool_grad_flops,
                             "prod(kernel) compares + 1 add per output element"),
                     max_pool_grad_space);
  max_pool_grad.gradient_kind = GradientKind::kNone;
  registry.add(in_domain(std::string(kTrainingDomain), std::move(max_pool_grad)));
  registry.add(with_semantics(make_op("AveragePool", infer_pool, pool_flops,
                                      "prod(kernel) adds + 1 divide per output element"),
                              pool_space));
  registry.add(with_semantics(make_op("GlobalAveragePool", infer_global_pool, global_pool_flops,
                                      "1 add per input element + 1 divide per output element"),
                              pool_space));
}

}  // namespace autopar
