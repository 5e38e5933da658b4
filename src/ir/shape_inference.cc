// Whole-graph shape inference with the registry's shape rules.
#include "autopar/ir/shape_inference.h"

#include "autopar/ops/op_def.h"

namespace autopar {
namespace {

std::string shape_text(DType dtype, const Shape& shape) {
  if (!shape.known) return fmt::format("{}[?]", dtype_name(dtype));
  return fmt::format("{}[{}]", dtype_name(dtype), fmt::join(shape.dims, ","));
}

}  // namespace

Status infer_node(Graph& graph, NodeId node_id) {
  const Node& node = graph.node(node_id);
  const OpDef* def = op_registry().find(node.domain, node.op_type);
  if (!def) {
    return error("node '{}' ({}{}{}): unsupported op type", node.name, node.domain,
                 node.domain.empty() ? "" : "::", node.op_type);
  }
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] == kNoId) continue;
    const Value& in = graph.value(node.inputs[i]);
    if (!in.shape.is_static()) {
      return error("node '{}' ({}): input '{}' has no static shape ({})", node.name, node.op_type,
                   in.name, shape_text(in.dtype, in.shape));
    }
  }
  InferenceContext ctx(graph, node);
  RETURN_IF_ERROR(def->infer(ctx));
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    ValueId out = node.outputs[i];
    if (out == kNoId) continue;
    const auto& [dtype, shape] = ctx.outputs()[i];
    if (dtype == DType::kUndefined) {
      return error("node '{}' ({}): output {} has no inferred type", node.name, node.op_type, i);
    }
    Value& v = graph.mutable_value(out);
    if (v.shape.known && v.shape.rank() == shape.rank() && v.dtype != DType::kUndefined) {
      bool agrees = v.dtype == dtype;
      for (size_t d = 0; d < shape.dims.size() && agrees; ++d) {
        agrees = v.shape.dims[d] == kUnknownDim || v.shape.dims[d] == shape.dims[d];
      }
      if (!agrees) {
        return error("node '{}' ({}): output '{}' is declared {} but computes to {}", node.name,
                     node.op_type, v.name, shape_text(v.dtype, v.shape), shape_text(dtype, shape));
      }
    }
    std::vector<std::string> symbols = v.shape.symbols;
    v.dtype = dtype;
    v.shape = shape;
    if (symbols.size() == v.shape.dims.size()) v.shape.symbols = std::move(symbols);
  }
  return Status::ok();
}

Status infer_shapes(Graph& graph) {
  for (NodeId id = 0; id < graph.num_nodes(); ++id) RETURN_IF_ERROR(infer_node(graph, id));
  return Status::ok();
}

}  // namespace autopar
