// What the SPMD pass's choices cost: reshards as the collectives they become, a strategy's
// share of its node's work, all priced by the cost models on the policy's profile
// (StrategyPricing).
#include <algorithm>

#include "spmd_pass.h"

namespace autopar::spmd_detail {

bool Spmd::is_weight(ValueId v) const {
  static const char* const kMoves[] = {"Transpose", "Reshape", "Cast",
                                       "Identity",  "Squeeze", "Unsqueeze"};
  for (int depth = 0; depth < 8 && v != kNoId; ++depth) {
    const Value& value = src_.value(v);
    if (value.kind == ValueKind::kParameter) return true;
    if (value.producer == kNoId) return false;
    const Node& p = src_.node(value.producer);
    if (!p.domain.empty() || p.inputs.empty() ||
        std::none_of(std::begin(kMoves), std::end(kMoves),
                     [&](const char* op) { return p.op_type == op; }))
      return false;
    v = p.inputs[0];
  }
  return false;
}

bool Spmd::mirrors_forward(ValueId v, const Layout& want) const {
  const Value& value = src_.value(v);
  if (!in_.forward_of || value.producer == kNoId ||
      static_cast<size_t>(value.producer) >= in_.forward_of->size())
    return false;
  const NodeId forward = (*in_.forward_of)[value.producer];
  if (forward == kNoId) return false;
  for (ValueId x : src_.node(forward).inputs) {
    if (x == kNoId || !layout_[x] || is_weight(x)) continue;
    if (src_.value(x).shape == value.shape && *layout_[x] == want) return true;
  }
  return false;
}

bool Spmd::aligned_update(ValueId v, const Layout& want, const Node& consumer) const {
  if (consumer.phase != Phase::kOptimizer) return false;
  for (ValueId other : consumer.inputs) {
    if (other != kNoId && other != v && layout_[other] && *layout_[other] == want) return true;
  }
  return false;
}

bool Spmd::allowed_free(const Layout& want, const Node& consumer) const {
  const Layout held = without_partial_sums(want);
  if (!held.splits_only_over("tp")) return false;
  return !held.uses("tp") || policy_.parameter_split(src_, consumer, "tp");
}

double Spmd::input_cost(ValueId v, const Layout& want, const Node& consumer) const {
  if (v == kNoId) return 0.0;
  if (is_free(v)) return free_cost(v, want, consumer);
  const Value& value = src_.value(v);
  std::optional<Layout> unplaced;  // a value not placed yet: replicated, or a slot's storage
  if (!layout_[v])
    unplaced = maps_.slot_param.count(v) ? slot_storage(v) : Layout::replicated(value.shape.rank());
  const Layout& from = layout_[v] ? *layout_[v] : *unplaced;
  if (from == want) return 0.0;
  if (resharded(v, want)) return 0.0;
  return reshard_cost(v, from, want, consumer);
}

double Spmd::free_cost(ValueId v, const Layout& want, const Node& consumer) const {
  if (!allowed_free(want, consumer)) return kInfinite;
  // A parameter held whole where it could be split costs every device its memory and its
  // share of the update: count the bytes it keeps beyond its shard like bytes moved.
  const Value& value = src_.value(v);
  const int64_t tp = has_axis("tp") ? mesh_.size("tp") : 1;
  const double kept =
      static_cast<double>(value.num_bytes()) *
      (1.0 / static_cast<double>(want.split_degree(mesh_)) - 1.0 / static_cast<double>(tp));
  return pricing_.moved(kept, kTpAxis);
}

double Spmd::reshard_cost(ValueId v, const Layout& from, const Layout& want,
                          const Node& consumer) const {
  if (from == want) return 0.0;
  const Value& value = src_.value(v);
  // Strategies ask for the same reshards again and again: plan each (from, to, shape) once.
  const auto& steps = planned_reshard(from, want, value.shape.dims);
  if (!steps.is_ok()) return kInfinite;
  // (A fill, ConstantOfShape's zeros, slices as freely as a constant: each device can fill its
  // own block.)
  const bool constant =
      (value.kind == ValueKind::kConstant && !maps_.is_state[v]) || is_zero_fill(src_, v);
  double cost = 0.0;
  for (const ReshardStep& step : steps.value()) {
    cost = step_cost(step, v, from, want, consumer, constant, cost);
    if (cost >= kInfinite) return kInfinite;
  }
  return cost;
}

double Spmd::step_cost(const ReshardStep& step, ValueId v, const Layout& from, const Layout& want,
                       const Node& consumer, bool constant, double cost) const {
  const Value& value = src_.value(v);
  const double bytes =
      static_cast<double>(value.num_bytes()) / static_cast<double>(from.split_degree(mesh_));
  const uint8_t axis = step.axis_id;
  const bool over_tp = axis == kTpAxis, over_dp = axis == kDpAxis;
  // (The update slices whole values onto its state's shards: that is no activation.)
  const bool update_slice =
      step.kind == ReshardStep::Kind::kSlice && consumer.phase == Phase::kOptimizer;
  // (Megatron-SP's backward reshards as it must: its projections keep to their parameter
  // shards by the strategy choice, and a gradient may take any split, as an embedding's
  // scatter into its table's shard needs.)
  const bool sp_backward = policy_.tp_activations == SpmdPolicy::TpActivations::kReduceScatter &&
                           consumer.phase == Phase::kBackward;
  // Nor does a backward move a parameter between tp shards, under megatron-sp or auto: its
  // products with the weights use them as the forward stores them (a moved weight costs its
  // whole shard in traffic each microbatch, to save a gather of the activations' gradient).
  if (over_tp && consumer.phase == Phase::kBackward &&
      policy_.tp_activations != SpmdPolicy::TpActivations::kFromParameters && is_weight(v))
    return kInfinite;
  if (over_tp && !constant && !update_slice && !sp_backward &&
      policy_.tp_activations != SpmdPolicy::TpActivations::kAny && !is_weight(v)) {
    // Megatron-SP enters a sequence-parallel region by reduce-scattering a row projection's
    // sum onto the sequence ([batch, seq, hidden]) or the image rows, or by slicing a whole
    // activation (or moving another split) onto it, as Megatron-LM scatters the embeddings'
    // output, so that the residual stream and its norms run on shards. (The projections still
    // run on their parameter shards: the strategy choice gathers their inputs.)
    const int64_t onto = step.kind == ReshardStep::Kind::kAllToAll ? step.to_dim : step.dim;
    const bool onto_sequence =
        (step.kind == ReshardStep::Kind::kReduceScatter || step.kind == ReshardStep::Kind::kSlice ||
         step.kind == ReshardStep::Kind::kAllToAll) &&
        onto == attribute_dim(value);
    if (step.kind != ReshardStep::Kind::kAllGather && step.kind != ReshardStep::Kind::kAllReduce &&
        (policy_.tp_activations == SpmdPolicy::TpActivations::kFromParameters || !onto_sequence)) {
      return kInfinite;
    }
  }
  const auto n = static_cast<double>(mesh_.size_of(axis));
  switch (step.kind) {
    case ReshardStep::Kind::kAllReduce:
      cost += pricing_.collective(Collective::kAllReduce, bytes, axis);
      break;
    case ReshardStep::Kind::kAllGather:
      cost += pricing_.collective(Collective::kAllGather, bytes * n, axis);
      break;
    // A reduce-scatter leaves a split the consumers after this one usually gather again:
    // count that gather too, or it always undercuts the all-reduce it stands for.
    // (Megatron-SP scatters the row projection's sum onto the sequence by design: the norms
    // and the residual between the projections run on shards, so it pays the real cost.)
    // So does ZeRO's sharded update reading accumulated gradients: it runs on the shards.
    case ReshardStep::Kind::kReduceScatter:
      cost += pricing_.collective(Collective::kReduceScatter, bytes, axis);
      // (Nor under auto does a backward's reduce-scatter that lands a gradient in the split its
      // forward activation was held in: the backward reads it there, as the forward did.)
      if (!((over_tp && policy_.tp_activations == SpmdPolicy::TpActivations::kReduceScatter) ||
            (over_tp && policy_.tp_activations == SpmdPolicy::TpActivations::kAny &&
             consumer.phase == Phase::kBackward && mirrors_forward(v, want)) ||
            (over_dp && policy_.zero >= 1 && consumer.phase == Phase::kOptimizer))) {
        // What is gathered is what the consumer makes of its shard, in the consumer's type
        // (a cast to fp32 doubles a bf16 gradient).
        double gathered = bytes;
        if (consumer.outputs.size() == 1 && consumer.outputs[0] != kNoId) {
          const Value& made = src_.value(consumer.outputs[0]);
          if (made.shape == value.shape)
            gathered = static_cast<double>(made.num_bytes()) /
                       static_cast<double>(from.split_degree(mesh_));
        }
        cost += pricing_.collective(Collective::kAllGather, gathered, axis);
      }
      break;
    case ReshardStep::Kind::kAllToAll:
      cost += pricing_.collective(Collective::kAllToAll, bytes, axis);
      break;
    // Slicing is free for constants, and in the update where another operand already has
    // the split (state in its storage layout: the update runs where its state lives); for
    // activations it stands for the gather that a later consumer will need to undo it.
    case ReshardStep::Kind::kSlice:
      // Megatron-SP's scatter onto the sequence is local; what gathers it again is priced
      // where that happens (before the next column projection).
      if (over_tp && policy_.tp_activations == SpmdPolicy::TpActivations::kReduceScatter &&
          step.dim == attribute_dim(value))
        break;
      if (!constant && !aligned_update(v, want, consumer))
        cost += pricing_.collective(Collective::kAllGather, bytes, axis);
      break;
    // A local product with the member's entry of a one-hot vector.
    case ReshardStep::Kind::kShare:
      cost += pricing_.local(bytes);
      break;
  }
  return cost;
}

double Spmd::strategy_cost(NodeId id, const OpStrategy& s) const {
  const Node& node = src_.node(id);
  double cost = 0.0;
  for (size_t i = 0; i < s.inputs.size() && i < node.inputs.size(); ++i) {
    cost += input_cost(node.inputs[i], s.inputs[i], node);
    if (cost >= kInfinite) return kInfinite;
  }
  int64_t degree = 1;
  for (const auto& [axis, loop] : s.assignment) degree *= mesh_.size(axis);
  return cost + pricing_.compute(id, static_cast<double>(degree)) + storage_cost(node, s) +
         constant_split_cost(node, s);
}

double Spmd::constant_split_cost(const Node& node, const OpStrategy& s) const {
  if (node.phase == Phase::kOptimizer || s.outputs.empty() || node.outputs.empty() ||
      node.outputs[0] == kNoId)
    return 0.0;
  const Value& out = src_.value(node.outputs[0]);
  double cost = 0.0;
  for (const auto& [axis, loop] : s.assignment) {
    if (!s.outputs[0].uses(axis)) continue;
    bool sliced = false, carried = false;
    for (size_t i = 0; i < s.inputs.size() && i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v == kNoId || !s.inputs[i].uses(axis)) continue;
      const Value& value = src_.value(v);
      const bool constant =
          (value.kind == ValueKind::kConstant && !maps_.is_state[v]) || is_zero_fill(src_, v);
      (constant ? sliced : carried) = true;
    }
    if (!sliced || carried) continue;
    const double gathered = static_cast<double>(out.num_bytes()) /
                            static_cast<double>(s.outputs[0].split_degree(mesh_)) *
                            static_cast<double>(mesh_.size(axis));
    cost += pricing_.collective(Collective::kAllGather, gathered, find_axis(axis));
  }
  return cost;
}

bool Spmd::becomes_gradient(ValueId v) const {
  for (int hops = 0; hops < 3; ++hops) {
    if (maps_.parameter_of.count(v)) return true;
    const std::vector<NodeId>& readers = src_.value(v).consumers;
    if (readers.size() != 1 || src_.is_output(v)) return false;
    const Node& reader = src_.node(readers[0]);
    const bool carries =
        reader.domain.empty() && reader.outputs.size() == 1 &&
        (reader.op_type == "Cast" || reader.op_type == "Sum" || reader.op_type == "Add");
    if (!carries) return false;
    v = reader.outputs[0];
  }
  return false;
}

double Spmd::storage_cost(const Node& node, const OpStrategy& s) const {
  if (node.phase == Phase::kBackward) {
    // A parameter's gradient left a partial sum over an axis other than dp is reduced over it
    // before the update, whatever reads it: the strategy answers for that reduction, at the
    // least a reduce-scatter onto the update's shards (a sequence-split embedding gradient, a
    // whole table per rank, costs a table-sized reduction that gathering the sequence's rows
    // first does not).
    double cost = 0.0;
    for (size_t j = 0; j < s.outputs.size() && j < node.outputs.size(); ++j) {
      if (node.outputs[j] == kNoId || !s.outputs[j].is_partial() ||
          !becomes_gradient(node.outputs[j]))
        continue;
      const double bytes = static_cast<double>(src_.value(node.outputs[j]).num_bytes()) /
                           static_cast<double>(s.outputs[j].split_degree(mesh_));
      for (const std::string& axis : s.outputs[j].partial_axes()) {
        if (axis != "dp")
          cost += pricing_.collective(Collective::kReduceScatter, bytes, find_axis(axis));
      }
    }
    return cost;
  }
  if (node.phase != Phase::kOptimizer) return 0.0;
  double cost = 0.0;
  for (size_t j = 0; j < s.outputs.size() && j < node.outputs.size(); ++j) {
    auto it = maps_.state_of.find(node.outputs[j]);
    if (it == maps_.state_of.end() || !layout_[it->second]) continue;
    cost += reshard_cost(node.outputs[j], s.outputs[j], *layout_[it->second], node);
    if (cost >= kInfinite) return kInfinite;
  }
  return cost;
}

}  // namespace autopar::spmd_detail
