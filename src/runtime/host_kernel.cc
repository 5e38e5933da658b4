// One node through its CPU kernel outside an executor (constant folding, host-known values).
#include <map>

#include "autopar/runtime/kernel.h"

namespace autopar::runtime {

StatusOr<std::vector<std::shared_ptr<Tensor>>> run_on_host(const Graph& graph, NodeId id,
                                                           std::vector<const Tensor*> inputs) {
  const Node& node = graph.node(id);
  const Kernel* kernel = kernel_registry().find(node.domain, node.op_type);
  if (!kernel) {
    return error("node '{}' ({}): the CPU runtime has no kernel for this op", node.name,
                 node.op_type);
  }
  bool widen = false;
  if (node.op_type != "Cast" && node.domain != kAutoparDomain) {
    for (ValueId v : node.inputs) widen = widen || (v != kNoId && is_half(graph.value(v).dtype));
    for (ValueId v : node.outputs) widen = widen || (v != kNoId && is_half(graph.value(v).dtype));
  }
  if (!widen) {
    KernelContext ctx(graph, node, std::move(inputs), 1);
    RETURN_IF_ERROR((*kernel)(ctx));
    return std::move(ctx.outputs());
  }
  // The node alone in a graph of its own, its half-type values in float32.
  Graph wide;
  wide.opsets = graph.opsets;
  std::map<ValueId, ValueId> widened;
  auto widen_value = [&](ValueId v, ValueKind kind) {
    if (v == kNoId) return kNoId;
    if (auto it = widened.find(v); it != widened.end()) return it->second;
    Value value = graph.value(v);
    value.kind = kind;
    value.producer = kNoId;
    value.consumers.clear();
    value.data = nullptr;
    if (is_half(value.dtype)) value.dtype = DType::kFloat32;
    return widened[v] = wide.add_value(std::move(value));
  };
  Node copy = node;
  for (ValueId& v : copy.inputs) v = widen_value(v, ValueKind::kInput);
  for (ValueId& v : copy.outputs) v = widen_value(v, ValueKind::kIntermediate);
  const NodeId wide_id = wide.add_node(std::move(copy));
  std::vector<Tensor> wide_inputs;
  wide_inputs.reserve(inputs.size());
  for (const Tensor*& t : inputs) {
    if (!t || !is_half(t->dtype())) continue;
    wide_inputs.push_back(float_converted(*t, DType::kFloat32));
    t = &wide_inputs.back();
  }
  KernelContext ctx(wide, wide.node(wide_id), std::move(inputs), 1);
  RETURN_IF_ERROR((*kernel)(ctx));
  std::vector<std::shared_ptr<Tensor>> outputs = std::move(ctx.outputs());
  for (size_t i = 0; i < outputs.size() && i < node.outputs.size(); ++i) {
    if (!outputs[i] || node.outputs[i] == kNoId) continue;
    const DType want = graph.value(node.outputs[i]).dtype;
    if (outputs[i]->dtype() != want)
      outputs[i] = std::make_shared<Tensor>(float_converted(*outputs[i], want));
  }
  return outputs;
}

}  // namespace autopar::runtime
