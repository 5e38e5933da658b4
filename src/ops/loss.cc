// Loss ops: SoftmaxCrossEntropyLoss.
#include "families.h"

namespace autopar {
namespace {

// scores [N, C, d1..dk], labels [N, d1..dk] (integer class ids); reduction none gives the
// per-sample loss [N, d1..dk], mean and sum a scalar; the optional log_prob output is
// scores' shape.
Status infer_softmax_cross_entropy(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 3, 1, 2));
  const auto& scores = ctx.input_dims(0);
  const auto& labels = ctx.input_dims(1);
  if (!is_floating(ctx.input_dtype(0)))
    return ctx.fail("scores {} must be floating", input_text(ctx, 0));
  if (ctx.input_dtype(1) != DType::kInt32 && ctx.input_dtype(1) != DType::kInt64) {
    return ctx.fail("labels {} must be i32 or i64", input_text(ctx, 1));
  }
  if (scores.size() < 2) return ctx.fail("scores {} must be [N, C, ...]", input_text(ctx, 0));
  std::vector<int64_t> expected = {scores[0]};
  expected.insert(expected.end(), scores.begin() + 2, scores.end());
  if (labels != expected) {
    return ctx.fail("labels {} must be {} for scores {}", input_text(ctx, 1),
                    dims_text(ctx.input_dtype(1), expected), input_text(ctx, 0));
  }
  if (ctx.has_input(2) && (ctx.input_rank(2) != 1 || ctx.input_dims(2)[0] != scores[1])) {
    return ctx.fail("weights {} must be [{}]", input_text(ctx, 2), scores[1]);
  }
  std::string reduction = "mean";
  RETURN_IF_ERROR(read_string(ctx, "reduction", reduction));
  if (reduction != "mean" && reduction != "sum" && reduction != "none") {
    return ctx.fail("reduction '{}' is not mean, sum or none", reduction);
  }
  int64_t ignore_index = 0;
  RETURN_IF_ERROR(read_int(ctx, "ignore_index", ignore_index));
  RETURN_IF_ERROR(set_output_checked(ctx, 0, ctx.input_dtype(0),
                                     reduction == "none" ? expected : std::vector<int64_t>{}));
  return set_output_checked(ctx, 1, ctx.input_dtype(0), scores);
}

// Per score: the log-softmax (5) and the pick and sum (1).
double softmax_cross_entropy_flops(const Graph& g, const Node& n) {
  return 6.0 * input_elements(g, n, 0);
}

// Without weights, ignore_index and log_prob, the loss is a mean (or sum) over samples and
// positions: loops n and d1..dk are reductions into the scalar (a mean over equal shards is
// the mean of the shards' means), c is the softmax axis, read whole. With reduction none they
// are parallel loops of the per-sample output.
std::optional<IterationSpace> softmax_cross_entropy_space(const Graph& g, const Node& n) {
  if (n.input(2) != kNoId || n.output(1) != kNoId || n.attr("ignore_index")) return std::nullopt;
  const std::string reduction = n.attr_string("reduction", "mean");
  const std::vector<int64_t>& scores = g.value(n.inputs[0]).shape.dims;
  const LoopKind kind = reduction == "none" ? LoopKind::kParallel : LoopKind::kReduction;
  IterationSpace space;
  space.combine = reduction == "mean" ? Combine::kMean : Combine::kSum;
  std::vector<int> score_map, label_map;
  for (size_t d = 0; d < scores.size(); ++d) {
    const bool classes = d == 1;
    space.loops.push_back({classes ? "c" : fmt::format("d{}", d), scores[d],
                           classes ? LoopKind::kParallel : kind, !classes});
    score_map.push_back(static_cast<int>(d));
    if (!classes) label_map.push_back(static_cast<int>(d));
  }
  space.inputs = {score_map, label_map};
  if (n.inputs.size() > 2) space.inputs.emplace_back();
  space.outputs = {reduction == "none" ? label_map : std::vector<int>{}};
  if (n.outputs.size() > 1) space.outputs.emplace_back();
  return space;
}

}  // namespace

void register_loss_ops(OpRegistry& registry) {
  registry.add(with_semantics(
      make_op("SoftmaxCrossEntropyLoss", infer_softmax_cross_entropy, softmax_cross_entropy_flops,
              "6 per score: log-softmax (5) and the label pick and reduction (1)", {1, 2}),
      softmax_cross_entropy_space));
}

}  // namespace autopar
