// Counts over a graph: op histogram, parameters, bytes, forward FLOPs, layers.
#include "autopar/ir/model_summary.h"

#include <set>

#include "autopar/ops/op_def.h"

namespace autopar {

std::string qualified_op_type(const Node& node) {
  return node.domain.empty() ? node.op_type : node.domain + "::" + node.op_type;
}

ModelSummary summarize(const Graph& graph) {
  ModelSummary s;
  const OpRegistry& registry = op_registry();
  std::set<std::string> unsupported;
  s.nodes = graph.num_nodes();
  for (const Node& node : graph.nodes()) {
    const std::string type = qualified_op_type(node);
    ++s.ops[type];
    const OpDef* def = registry.find(node.domain, node.op_type);
    if (!def) unsupported.insert(type);
    bool static_shapes = true;
    for (ValueId id : node.inputs) {
      static_shapes = static_shapes && (id == kNoId || graph.value(id).shape.is_static());
    }
    for (ValueId id : node.outputs) {
      static_shapes = static_shapes && (id == kNoId || graph.value(id).shape.is_static());
    }
    if (!def || !static_shapes) {
      ++s.nodes_without_flops;
      continue;
    }
    if (node.phase != Phase::kForward) continue;
    s.flops_forward += node_flops(graph, node);
    for (ValueId id : node.outputs) {
      if (id != kNoId) s.activation_bytes += graph.value(id).num_bytes();
    }
  }
  s.unsupported_ops.assign(unsupported.begin(), unsupported.end());
  for (const Value& v : graph.values()) {
    if (!v.shape.is_static()) continue;
    switch (v.kind) {
      case ValueKind::kParameter:
        s.params += v.shape.num_elements();
        s.param_bytes += v.num_bytes();
        break;
      case ValueKind::kConstant:
        s.constant_bytes += v.num_bytes();
        break;
      case ValueKind::kInput:
        s.input_bytes += v.num_bytes();
        break;
      case ValueKind::kIntermediate:
        break;
    }
    if (v.is_initializer() && !v.data && v.shape.num_elements() > 0) s.shape_only = true;
  }
  s.layers = layer_structure(graph);
  return s;
}

}  // namespace autopar
