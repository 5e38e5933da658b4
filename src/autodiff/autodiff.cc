// Reverse-mode differentiation: which nodes lie between the wrt values and the loss, and
// their gradient rules run in reverse order with contributions summed.
#include "autopar/autodiff/autodiff.h"

#include <cassert>
#include <string_view>
#include <unordered_map>

#include "autopar/autodiff/gradient_builder.h"
#include "autopar/ops/op_def.h"

namespace autopar {
namespace {

// Inputs a gradient can flow into: floating, and not configuration (shapes, axes, indices).
bool differentiable_input(const Graph& g, const Node& node, const OpDef* def, size_t i) {
  const ValueId in = node.input(i);
  if (in == kNoId || !is_floating(g.value(in).dtype)) return false;
  return !def || !def->is_config_input(static_cast<int>(i));
}

// Sums the contributions to one value's gradient. The sum belongs with the backward nodes
// that produced the contributions (the consumers' layer: a residual stream's gradient is
// summed where its two uses are), or with `fallback` when they come from several layers.
ValueId accumulate(Graph& g, const std::vector<ValueId>& parts, int32_t fallback) {
  if (parts.empty()) return kNoId;
  if (parts.size() == 1) return parts[0];
  std::optional<int32_t> layer;
  bool common = true;
  for (ValueId part : parts) {
    const NodeId producer = g.value(part).producer;
    const int32_t part_layer = producer == kNoId ? -1 : g.node(producer).layer;
    common = common && (!layer || *layer == part_layer);
    layer = part_layer;
  }
  Emitter emit(g, "grad/accumulate", Phase::kBackward, common ? *layer : fallback);
  return parts.size() == 2 ? emit.op("Add", {parts[0], parts[1]}) : emit.op("Sum", parts);
}

}  // namespace

StatusOr<std::vector<ValueId>> add_gradients(Graph& g, ValueId loss,
                                             const std::vector<ValueId>& wrt, bool fused,
                                             std::vector<std::pair<NodeId, NodeId>>* forward_of) {
  const OpRegistry& registry = op_registry();
  const NodeId forward_nodes = g.num_nodes();
  // Values that depend on a wrt value through differentiable inputs.
  std::vector<bool> depends(g.num_values(), false);
  for (ValueId w : wrt) depends[w] = is_floating(g.value(w).dtype);
  for (NodeId id = 0; id < forward_nodes; ++id) {
    const Node& node = g.node(id);
    const OpDef* def = registry.find(node.domain, node.op_type);
    if (def && def->gradient_kind == GradientKind::kNone) continue;
    bool any = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      any = any || (differentiable_input(g, node, def, i) && depends[node.inputs[i]]);
    }
    if (!any) continue;
    for (ValueId out : node.outputs) {
      if (out != kNoId && is_floating(g.value(out).dtype)) depends[out] = true;
    }
  }
  // Values the loss depends on.
  std::vector<bool> reaches(g.num_values(), false);
  reaches[loss] = true;
  for (NodeId id = forward_nodes - 1; id >= 0; --id) {
    const Node& node = g.node(id);
    bool any = false;
    for (ValueId out : node.outputs) any = any || (out != kNoId && reaches[out]);
    if (!any) continue;
    for (ValueId in : node.inputs) {
      if (in != kNoId) reaches[in] = true;
    }
  }

  // Indexed by forward values only (the loss, node operands, wrt), all older than anything
  // emitted below.
  std::vector<std::vector<ValueId>> contributions(g.num_values());
  {
    Emitter seed(g, "grad/loss", Phase::kBackward, -1);
    const Value& l = g.value(loss);
    Tensor one(l.dtype, l.shape.dims);
    for (int64_t i = 0; i < one.num_elements(); ++i) one.set_from_double(i, 1.0);
    contributions[loss].push_back(seed.constant(std::move(one)));
  }
  for (NodeId id = forward_nodes - 1; id >= 0; --id) {
    const Node node = g.node(id);
    const OpDef* def = registry.find(node.domain, node.op_type);
    std::vector<bool> needs(node.inputs.size(), false);
    bool any_needed = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId in = node.inputs[i];
      needs[i] = differentiable_input(g, node, def, i) && depends[in] && reaches[in];
      any_needed = any_needed || needs[i];
    }
    if (!any_needed) continue;
    bool any_grad = false;
    for (ValueId out : node.outputs)
      any_grad = any_grad || (out != kNoId && !contributions[out].empty());
    if (!any_grad) continue;
    if (!def || def->gradient_kind == GradientKind::kUndeclared) {
      return error("node '{}' ({}): no gradient rule for {}", node.name, node.op_type,
                   node.op_type);
    }
    if (def->gradient_kind == GradientKind::kNone) continue;
    std::vector<ValueId> output_grads;
    for (ValueId out : node.outputs) {
      output_grads.push_back(out == kNoId ? kNoId : accumulate(g, contributions[out], node.layer));
    }
    const NodeId first = g.num_nodes();
    GradientBuilder builder(g, id, std::move(output_grads), needs, fused);
    RETURN_IF_ERROR(def->gradient(builder));
    RETURN_IF_ERROR(builder.status());
    if (forward_of) {
      for (NodeId n = first; n < g.num_nodes(); ++n) forward_of->emplace_back(n, id);
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!needs[i]) continue;
      const ValueId grad = builder.input_grads()[i];
      if (grad == kNoId) return builder.fail("the rule gave no gradient for input {}", i);
      contributions[node.inputs[i]].push_back(grad);
    }
  }
  std::vector<ValueId> result;
  for (ValueId w : wrt) {
    ValueId grad = accumulate(g, contributions[w], -1);
    result.push_back(grad);
  }
  return result;
}

std::vector<NodeId> forward_nodes(const TrainingGraph& training) {
  const Graph& g = training.graph;
  std::unordered_map<std::string_view, NodeId> named;
  for (NodeId n = 0; n < g.num_nodes(); ++n) named.emplace(g.node(n).name, n);
  std::vector<NodeId> forward(static_cast<size_t>(g.num_nodes()), kNoId);
  for (const auto& [backward, of] : training.forward_of) {
    auto b = named.find(backward), f = named.find(of);
    if (b != named.end() && f != named.end()) forward[b->second] = f->second;
  }
  return forward;
}

TrainingGraph with_rewritten_graph(const TrainingGraph& training, Graph rewritten) {
  const Graph& old = training.graph;
  auto same = [&](ValueId v) {
    if (v == kNoId) return kNoId;
    const std::optional<ValueId> found = rewritten.find_value(old.value(v).name);
    assert(found && "a training-graph rewrite keeps the names it is referred to by");
    return *found;
  };
  TrainingGraph out;
  out.loss = same(training.loss);
  out.labels = same(training.labels);
  for (const auto& [s, next] : training.updates) out.updates.emplace_back(same(s), same(next));
  for (const auto& [p, g] : training.gradients) out.gradients.emplace_back(same(p), same(g));
  for (const auto& [s, p] : training.slots) out.slots.emplace_back(same(s), same(p));
  out.forward_of = training.forward_of;
  for (ValueId s : training.statistics) out.statistics.push_back(same(s));
  out.graph = std::move(rewritten);
  return out;
}

}  // namespace autopar
