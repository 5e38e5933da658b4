// Cross-entropy over a vocabulary split over tp, as Megatron-LM's vocab_parallel_cross_entropy
// runs it: the logits stay on their class shards. Each row's maximum is all-reduced (max) over
// tp, its sum of exponentials and its label's score (held by one shard) all-reduced (sum):
//   loss_n = log Σ_c exp(x_nc − m_n) + m_n − x_n,label
// three all-reduces of a row each instead of gathering rows × vocabulary scores. The Softmax
// of the same scores that the loss's gradient takes runs the same way, its output left on the
// shards for the head's gradient.
#include "autopar/autodiff/emitter.h"
#include "autopar/parallel/primitives.h"
#include "spmd_pass.h"

namespace autopar::spmd_detail {
namespace {

// The scores of a loss the handler splits: input 0 of a SoftmaxCrossEntropyLoss averaging
// over [N, C] without weights, ignored labels or log-probabilities.
bool plain_cross_entropy(const Graph& g, const Node& n) {
  return n.domain.empty() && n.op_type == "SoftmaxCrossEntropyLoss" && n.inputs.size() == 2 &&
         n.output(1) == kNoId && !n.attr("ignore_index") &&
         n.attr_string("reduction", "mean") == "mean" && g.value(n.inputs[0]).shape.rank() == 2;
}

// A Softmax over the classes of such a loss's scores (the loss's gradient).
bool loss_softmax(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.op_type != "Softmax" || g.value(n.inputs[0]).shape.rank() != 2)
    return false;
  const int64_t axis = n.attr_int("axis", -1);
  if (axis != 1 && axis != -1) return false;
  for (NodeId c : g.value(n.inputs[0]).consumers) {
    if (plain_cross_entropy(g, g.node(c))) return true;
  }
  return false;
}

// The loss whose gradient compares its labels with a table of class ids in `n` (the one-hot
// Equal of the gradient: Unsqueeze(labels) against a constant [1, C]), or null.
const Node* one_hot_loss(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.op_type != "Equal" || n.inputs.size() != 2) return nullptr;
  for (int k = 0; k < 2; ++k) {
    const Value& table = g.value(n.inputs[k]);
    const NodeId unsqueeze = g.value(n.inputs[1 - k]).producer;
    if (table.kind != ValueKind::kConstant || table.shape.rank() != 2 || unsqueeze == kNoId ||
        g.node(unsqueeze).op_type != "Unsqueeze")
      continue;
    for (NodeId c : g.value(g.node(unsqueeze).inputs[0]).consumers) {
      const Node& loss = g.node(c);
      if (plain_cross_entropy(g, loss) && loss.inputs[1] == g.node(unsqueeze).inputs[0] &&
          g.value(loss.inputs[0]).shape.dims[1] == table.shape.dims[1])
        return &loss;
    }
  }
  return nullptr;
}

// A reduction over dim 1 keeping it, with its axes as the graph's opset takes them.
ValueId reduce_classes(Emitter& e, std::string_view op, ValueId x) {
  const int64_t opset = e.graph().opset("");
  const bool axes_input = op == "ReduceSum" ? opset >= 13 : opset >= 18;
  if (axes_input) return e.op(op, {x, e.ints({1})}, {{"keepdims", int64_t{1}}});
  return e.op(op, {x}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}});
}

}  // namespace

StatusOr<bool> Spmd::lower_vocab_parallel(NodeId id, const StrategySet& own) {
  const Node& node = src_.node(id);
  if (!mesh_.has_axis("tp")) return false;
  auto vocab_split = [&](ValueId scores) {
    return layout_[scores] && !layout_[scores]->is_partial() &&
           layout_[scores]->dim_axes(1) == std::vector<std::string>{"tp"};
  };
  // The gradient's one-hot labels take the scores' split: each device compares its labels with
  // its own class ids (a constant's slice), as the difference with the softmax needs.
  if (const Node* of = one_hot_loss(src_, node)) {
    // Only where the gradient's softmax stayed on the shards.
    bool softmax_split = false;
    for (NodeId c : src_.value(of->inputs[0]).consumers) {
      const Node& softmax = src_.node(c);
      if (loss_softmax(src_, softmax) && layout_[softmax.outputs[0]])
        softmax_split = softmax_split ||
                        layout_[softmax.outputs[0]]->dim_axes(1) == std::vector<std::string>{"tp"};
    }
    if (!softmax_split || !vocab_split(of->inputs[0])) return false;
    const Layout& scores = *layout_[of->inputs[0]];
    for (const OpStrategy& s : own.strategies) {
      if (s.outputs.at(0).dim_axes(1) == std::vector<std::string>{"tp"} &&
          s.outputs.at(0).dim_axes(0) == scores.dim_axes(0) && strategy_cost(id, s) < kInfinite) {
        RETURN_IF_ERROR(emit(node, s, nullptr, &own));
        return true;
      }
    }
    return false;
  }
  const bool loss = plain_cross_entropy(src_, node);
  if (!loss && !loss_softmax(src_, node)) return false;
  const ValueId scores = node.inputs[0];
  if (!vocab_split(scores)) return false;
  const Layout& held = *layout_[scores];
  // The op's own strategy for the rows as they are held; the classes then stay on tp.
  const Layout rows = held.without("tp");
  const OpStrategy* base = nullptr;
  for (const OpStrategy& s : own.strategies) {
    if (s.inputs.at(0) == rows) {
      base = &s;
      break;
    }
  }
  if (!base) return false;
  // Where a row's collectives cost more than gathering the classes (few classes, links whose
  // latency dominates), the op runs on whole rows instead.
  const std::vector<int64_t> local_rows = rows.shard_shape(src_.value(scores).shape.dims, mesh_);
  const double row_bytes = static_cast<double>(local_rows[0]) *
                           static_cast<double>(dtype_size(src_.value(scores).dtype));
  const int reductions = loss ? 3 : 2;
  const double on_shards =
      reductions * pricing_.collective(Collective::kAllReduce, row_bytes, kTpAxis);
  if (on_shards >= input_cost(scores, rows, node)) return false;

  Graph& dst = result_.graph;
  const NodeId first = dst.num_nodes();
  ASSIGN_OR_RETURN(const ValueId x, local_as(scores, held, node));
  const DType t = dst.value(x).dtype;
  const int64_t classes = src_.value(scores).shape.dims[1];
  const Phase phase = node.phase;
  Emitter e(dst, node.name, phase, node.layer);
  auto all_reduce = [&](ValueId v, const char* op) -> StatusOr<ValueId> {
    RETURN_IF_ERROR(e.status());
    ASSIGN_OR_RETURN(const ValueId r, augment(dst, v, {ReshardStep::Kind::kAllReduce, "tp"}, mesh_,
                                              phase, node.layer));
    dst.mutable_node(dst.value(r).producer).attrs["op"] = std::string(op);
    return r;
  };
  ASSIGN_OR_RETURN(const ValueId max, all_reduce(reduce_classes(e, "ReduceMax", x), "max"));
  const ValueId exp = e.op("Exp", {e.op("Sub", {x, max})});
  ASSIGN_OR_RETURN(const ValueId sum, all_reduce(reduce_classes(e, "ReduceSum", exp), "sum"));
  ValueId out;
  Layout out_layout = held;
  if (!loss) {
    out = e.op("Div", {exp, sum});
  } else {
    // The label's score: the shard holding the label's class finds it, the others add 0.
    Tensor ids(src_.value(node.inputs[1]).dtype, {1, classes});
    for (int64_t c = 0; c < classes; ++c) ids.set_from_int(c, c);
    ASSIGN_OR_RETURN(const ValueId mine,
                     augment(dst, e.constant(std::move(ids)), {ReshardStep::Kind::kSlice, "tp", 1},
                             mesh_, phase, node.layer));
    ASSIGN_OR_RETURN(const ValueId labels, local_as(node.inputs[1], base->inputs.at(1), node));
    const ValueId one_hot =
        e.op("Cast", {e.op("Equal", {e.op("Unsqueeze", {labels, e.ints({1})}), mine})},
             {{"to", int64_t{dtype_to_onnx(t)}}});
    ASSIGN_OR_RETURN(const ValueId picked,
                     all_reduce(reduce_classes(e, "ReduceSum", e.op("Mul", {x, one_hot})), "sum"));
    const ValueId per_row = e.op("Sub", {e.op("Add", {e.op("Log", {sum}), max}), picked});
    // The mean over this device's rows; over rows split n ways, a partial sum of means / n.
    const int64_t opset = dst.opset("");
    out = opset >= 18 ? e.op("ReduceMean", {per_row}, {{"keepdims", int64_t{0}}})
                      : e.op("ReduceMean", {per_row},
                             {{"axes", std::vector<int64_t>{0, 1}}, {"keepdims", int64_t{0}}});
    out_layout = base->outputs.at(0);
    const int64_t rows_split = rows.split_degree(mesh_);
    if (rows_split > 1)
      out = e.op("Mul", {out, e.scalar(1.0 / static_cast<double>(rows_split), t)});
  }
  RETURN_IF_ERROR(e.status());
  // The nodes carry out the source op (kernels group by it).
  for (NodeId n = first; n < dst.num_nodes(); ++n) {
    if (dst.node(n).domain != kAutoparDomain) dst.mutable_node(n).source = node.source;
  }
  local_[node.outputs[0]] = out;
  layout_[node.outputs[0]] = out_layout;
  return true;
}

}  // namespace autopar::spmd_detail
