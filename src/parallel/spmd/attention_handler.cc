// Attention under context parallelism: the sequence is split over the context axis through the
// whole layer, and attention takes one of two forms. Ring attention keeps queries, keys and
// values on their sequence shards and runs RingAttention (the key/value blocks passed around
// the axis's ring); all-to-all takes the strategies that split the heads over the axis, so the
// reshards before and after attention are all-to-alls (DeepSpeed-Ulysses).
#include "spmd_pass.h"

namespace autopar::spmd_detail {

Status Spmd::lower_context_attention(NodeId id, const StrategySet& own,
                                     const std::vector<std::string>& axes) {
  const Node& node = src_.node(id);
  const std::string& cp = policy_.context_axis;
  constexpr int kHeadsLoop = 1, kQueryLoop = 2, kKeyLoop = 3;
  constexpr int64_t kSequenceDim = 2;
  std::vector<Candidate> candidates;
  if (policy_.ring_attention) {
    std::vector<std::string> others;
    for (const std::string& a : axes) {
      if (a != cp) others.push_back(a);
    }
    for (const OpStrategy& base : strategies_->get(src_, node, mesh_, others)->strategies) {
      // The ring's positions are its members' chunk pairs: no other axis splits the sequence.
      bool sequence_split = false;
      for (const auto& [axis, loop] : base.assignment)
        sequence_split = sequence_split || loop == kQueryLoop || loop == kKeyLoop;
      if (sequence_split) continue;
      Candidate c{base, std::nullopt, true};
      c.strategy.assignment.emplace_back(cp, kQueryLoop);
      bool valid = true;
      auto add_split = [&](std::vector<Layout>& layouts, const std::vector<ValueId>& values) {
        for (size_t i = 0; i < layouts.size() && i < values.size(); ++i) {
          if (values[i] == kNoId) continue;
          layouts[i] = layouts[i].with_split(kSequenceDim, cp);
          valid = valid && layouts[i].validate(src_.value(values[i]).shape.dims, mesh_).is_ok();
        }
      };
      add_split(c.strategy.inputs, node.inputs);
      add_split(c.strategy.outputs, node.outputs);
      if (valid) candidates.push_back(std::move(c));
    }
  } else {
    for (const OpStrategy& s : own.strategies) {
      for (const auto& [axis, loop] : s.assignment) {
        if (axis == cp && loop == kHeadsLoop) candidates.push_back({s, std::nullopt, false});
      }
    }
  }
  if (candidates.empty()) {
    const Value& q = src_.value(node.inputs[node.op_type == "AttentionGrad" ? 1 : 0]);
    const Value& k = src_.value(node.inputs[node.op_type == "AttentionGrad" ? 2 : 1]);
    if (policy_.ring_attention) {
      return error(
          "context: ring: node '{}' ({}): the {} positions of queries {} and keys {} do not "
          "split over {} = {} with the other axes",
          node.name, node.op_type, q.shape.dims.at(2), fmt::join(q.shape.dims, "x"),
          fmt::join(k.shape.dims, "x"), cp, mesh_.size(cp));
    }
    return error(
        "context: all-to-all: node '{}' ({}): the heads of queries {} and keys {} do not split "
        "over {} = {} with the other axes",
        node.name, node.op_type, fmt::join(q.shape.dims, "x"), fmt::join(k.shape.dims, "x"), cp,
        mesh_.size(cp));
  }
  const Candidate* best = &candidates.front();
  double best_cost = kInfinite;
  for (const Candidate& c : candidates) {
    const double cost = strategy_cost(id, c.strategy);
    if (cost < best_cost) {
      best_cost = cost;
      best = &c;
    }
  }
  return emit(node, best->strategy, nullptr, nullptr, best->ring);
}

bool Spmd::context_forbids(const Node& node, const OpStrategy& s,
                           const IterationSpace* space) const {
  if (!space || node.op_type != "Gather" || !node.domain.empty()) return false;
  const int rows = space->find("v");
  for (const auto& [axis, loop] : s.assignment) {
    if (axis == policy_.context_axis && loop == rows) return true;
  }
  return false;
}

}  // namespace autopar::spmd_detail
