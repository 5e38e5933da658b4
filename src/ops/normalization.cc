// Normalising ops: Softmax, LogSoftmax, LayerNormalization and BatchNormalization.
#include <algorithm>

#include "families.h"

namespace autopar {
namespace {

// The normalised axis: default 1 before opset 13 (where the input is coerced to 2-D at
// it), -1 from 13 (one axis only).
int64_t softmax_default_axis(int64_t opset) { return opset < 13 ? 1 : -1; }

Status infer_softmax(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  int64_t axis = softmax_default_axis(ctx.opset());
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  int64_t rank = ctx.input_rank(0);
  // A scalar has nothing to normalise over; ONNX demands rank >= 1.
  if (rank == 0) return ctx.fail("{} must have rank >= 1", input_text(ctx, 0));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", rank, axis));
  if (!is_floating(ctx.input_dtype(0))) {
    return ctx.fail("{} must be floating", input_text(ctx, 0));
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

// Elements of one normalised row: dims[axis:] before opset 13, dims[axis] from 13.
double softmax_row_length(const Graph& g, const Node& n) {
  const auto& dims = input_dims_of(g, n, 0);
  int64_t rank = static_cast<int64_t>(dims.size());
  int64_t opset = g.opset(n.domain);
  int64_t axis = n.attr_int("axis", softmax_default_axis(opset));
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return 0.0;
  if (opset < 13) return product(std::span(dims).subspan(static_cast<size_t>(axis)));
  return static_cast<double>(dims[axis]);
}

// Per element: max compare, subtract the max, exp, add to the sum, divide by the sum.
double softmax_flops(const Graph& g, const Node& n) { return 5.0 * input_elements(g, n); }

// Per element: max compare, subtract, exp, add to the sum, subtract log(sum); per row: log.
double log_softmax_flops(const Graph& g, const Node& n) {
  double elements = input_elements(g, n);
  double row = softmax_row_length(g, n);
  return 5.0 * elements + (row > 0 ? elements / row : 0.0);
}

// Scale / bias of a normalisation must broadcast one way onto the normalised dims.
Status check_broadcasts_onto(const InferenceContext& ctx, size_t i,
                             const std::vector<int64_t>& target) {
  if (!ctx.has_input(i)) return Status::ok();
  const auto& dims = ctx.input_dims(i);
  auto joined = broadcast_shapes(dims, target);
  if (dims.size() > target.size() || !joined || *joined != target) {
    return ctx.fail("{} does not broadcast to the normalised shape {}", input_text(ctx, i),
                    dims_text(ctx.input_dtype(0), target));
  }
  return Status::ok();
}

Status infer_layer_norm(InferenceContext& ctx) {
  if (ctx.opset() < 17) {
    return ctx.fail("LayerNormalization needs ai.onnx opset 17, the graph has {}", ctx.opset());
  }
  RETURN_IF_ERROR(check_arity(ctx, 2, 3, 1, 3));
  int64_t axis = -1, stash_type = 1;
  float epsilon = 1e-5f;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  RETURN_IF_ERROR(read_int(ctx, "stash_type", stash_type));
  RETURN_IF_ERROR(read_float(ctx, "epsilon", epsilon));
  const auto& x = ctx.input_dims(0);
  int64_t rank = ctx.input_rank(0);
  if (rank == 0) return ctx.fail("{} must have rank >= 1", input_text(ctx, 0));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", rank, axis));
  std::vector<int64_t> normalized(x.begin() + axis, x.end());
  RETURN_IF_ERROR(check_broadcasts_onto(ctx, 1, normalized));
  RETURN_IF_ERROR(check_broadcasts_onto(ctx, 2, normalized));
  std::optional<DType> stats_dtype;
  if (stash_type > 0 && stash_type <= INT32_MAX) {
    stats_dtype = dtype_from_onnx(static_cast<int32_t>(stash_type));
  }
  if (!stats_dtype || !is_floating(*stats_dtype)) {
    return ctx.fail("attribute 'stash_type' = {} is not a floating ONNX data type", stash_type);
  }
  RETURN_IF_ERROR(set_output_checked(ctx, 0, ctx.input_dtype(0), x));
  // Mean and InvStdDev keep the leading dims and have 1 for every normalised dim.
  std::vector<int64_t> stats(x.begin(), x.begin() + axis);
  stats.resize(x.size(), 1);
  RETURN_IF_ERROR(set_output_checked(ctx, 1, *stats_dtype, stats));
  return set_output_checked(ctx, 2, *stats_dtype, stats);
}

// Per element: add to the mean's sum, subtract the mean, square, add to the variance's sum,
// multiply by 1/σ, multiply by scale, add bias (when present). Per row: divide the two sums
// by the row length, add epsilon, sqrt, reciprocal.
double layer_norm_flops(const Graph& g, const Node& n) {
  const auto& dims = input_dims_of(g, n, 0);
  int64_t rank = static_cast<int64_t>(dims.size());
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return 0.0;
  double elements = product(dims);
  double rows = product(std::span(dims).first(static_cast<size_t>(axis)));
  double per_element = n.input(2) != kNoId ? 7.0 : 6.0;
  return per_element * elements + 5.0 * rows;
}

// Training mode: an attribute from opset 14; before, the presence of statistics outputs.
bool batch_norm_training(const Graph& g, const Node& n) {
  if (g.opset(n.domain) >= 14) return n.attr_int("training_mode", 0) != 0;
  for (size_t i = 1; i < n.outputs.size(); ++i) {
    if (n.outputs[i] != kNoId) return true;
  }
  return false;
}

Status infer_batch_norm(InferenceContext& ctx) {
  int64_t opset = ctx.opset();
  // Outputs: Y, running mean, running var; before 14 also the saved mean and var.
  RETURN_IF_ERROR(check_arity(ctx, 5, 5, 1, opset < 14 ? 5 : 3));
  int64_t training_mode = 0;
  float epsilon = 1e-5f, momentum = 0.9f;
  RETURN_IF_ERROR(read_int(ctx, "training_mode", training_mode));
  RETURN_IF_ERROR(read_float(ctx, "epsilon", epsilon));
  RETURN_IF_ERROR(read_float(ctx, "momentum", momentum));
  if (ctx.input_rank(0) < 2) {
    return ctx.fail("{} must have rank >= 2 (N, C, ...)", input_text(ctx, 0));
  }
  int64_t channels = ctx.input_dims(0)[1];
  static constexpr const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (size_t i = 1; i < 5; ++i) {
    if (ctx.input_dims(i) != std::vector<int64_t>{channels}) {
      return ctx.fail("{} {} must have shape [{}] (the channels of X)", kNames[i],
                      input_text(ctx, i), channels);
    }
  }
  if (opset >= 14 && training_mode == 0 && ctx.num_outputs() > 1 &&
      (ctx.has_output(1) || ctx.has_output(2))) {
    return ctx.fail("running mean and var outputs need training_mode=1");
  }
  RETURN_IF_ERROR(set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0)));
  for (size_t i = 1; i < ctx.num_outputs(); ++i) {
    RETURN_IF_ERROR(set_output_checked(ctx, i, ctx.input_dtype(3), {channels}));
  }
  return Status::ok();
}

// Inference folds the statistics into one scale and shift: 2 per element. Training computes
// them: per element the mean sum, subtract, square, variance sum, multiply by 1/σ, scale and
// shift (7); per channel two divides by the count, add epsilon, sqrt, reciprocal (5) and the
// running updates momentum·r + (1−momentum)·s for mean and var (3 each, 6).
double batch_norm_flops(const Graph& g, const Node& n) {
  double elements = input_elements(g, n, 0);
  if (!batch_norm_training(g, n)) return 2.0 * elements;
  const auto& x = input_dims_of(g, n, 0);
  double channels = x.size() >= 2 ? static_cast<double>(x[1]) : 0.0;
  return 7.0 * elements + 11.0 * channels;
}

// The normalised axes are read whole: one axis from opset 13, every axis from `axis` on before
// (the 2-D coercion).
std::optional<IterationSpace> softmax_space(const Graph& g, const Node& n) {
  const int64_t rank = g.value(n.inputs[0]).shape.rank();
  int64_t axis = n.attr_int("axis", g.opset(n.domain) >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  std::vector<int64_t> whole = {axis};
  if (g.opset(n.domain) < 13) {
    for (int64_t d = axis + 1; d < rank; ++d) whole.push_back(d);
  }
  return space_with_whole_axes(g, n, whole);
}

std::optional<IterationSpace> layer_norm_space(const Graph& g, const Node& n) {
  return space_normalized_from_axis(g, n, 0);
}

// Per-channel statistics and parameters [C] against X [N, C, ...]. In training the batch
// statistics read N and the spatial dims whole.
std::optional<IterationSpace> batch_norm_space(const Graph& g, const Node& n) {
  const std::vector<int64_t>& x = g.value(n.inputs[0]).shape.dims;
  const bool training = batch_norm_training(g, n);
  IterationSpace space;
  for (size_t d = 0; d < x.size(); ++d) {
    const std::string name = d == 0 ? "n" : d == 1 ? "c" : fmt::format("s{}", d - 2);
    space.loops.push_back({name, x[d], LoopKind::kParallel, !training || d == 1});
  }
  std::vector<int> all;
  for (size_t d = 0; d < x.size(); ++d) all.push_back(static_cast<int>(d));
  space.inputs = {all, {1}, {1}, {1}, {1}};
  for (size_t i = 0; i < n.outputs.size(); ++i)
    space.outputs.push_back(i == 0 ? all : std::vector<int>{1});
  return space;
}

}  // namespace

void register_normalization_ops(OpRegistry& registry) {
  registry.add(
      with_semantics(make_op("Softmax", infer_softmax, softmax_flops,
                             "5 per element: max compare, subtract max, exp (counts 1), add to "
                             "sum, divide"),
                     softmax_space));
  registry.add(with_semantics(make_op("LogSoftmax", infer_softmax, log_softmax_flops,
                                      "5 per element (max compare, subtract max, exp, add to sum, "
                                      "subtract log-sum) + 1 log per normalised row"),
                              softmax_space));
  registry.add(
      with_semantics(make_op("LayerNormalization", infer_layer_norm, layer_norm_flops,
                             "per element 6 (mean sum, subtract, square, variance sum, ×1/σ, "
                             "×scale) + 1 with bias; per row 5 (two divides, +ε, sqrt, "
                             "reciprocal)"),
                     layer_norm_space));
  registry.add(
      with_semantics(make_op("BatchNormalization", infer_batch_norm, batch_norm_flops,
                             "inference 2 per element (folded scale and shift); training 7 per "
                             "element + 11 per channel (statistics, 1/σ, running updates)",
                             {3, 4}),
                     batch_norm_space));
}

}  // namespace autopar
