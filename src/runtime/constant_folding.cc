// Constant folding through the ops' shape rules and CPU kernels.
#include "autopar/runtime/constant_folding.h"

#include <set>

#include "autopar/ir/shape_inference.h"
#include "autopar/ops/op_def.h"
#include "autopar/runtime/kernel.h"

namespace autopar {
namespace {

const std::set<std::string, std::less<>>& foldable() {
  static const std::set<std::string, std::less<>> ops = {
      "Constant", "Shape",      "Size",      "ConstantOfShape",
      "Range",    "Cast",       "Identity",  "Reshape",
      "Flatten",  "Squeeze",    "Unsqueeze", "Concat",
      "Gather",   "Slice",      "Expand",    "Transpose",
      "Where",    "Max",        "Min",       "Add",
      "Sub",      "Mul",        "Div",       "Equal",
      "Less",     "Greater",    "Neg",       "Abs",
      "Sqrt",     "Reciprocal", "Floor",     "Ceil",
      "Not"};
  return ops;
}

// Shape and Size read only the input's static shape: no data, however large the input.
Tensor shape_fold(const Node& node, const Shape& shape) {
  if (node.op_type == "Size") return Tensor::scalar_int64(shape.num_elements());
  const int64_t rank = shape.rank();
  int64_t start = node.attr_int("start", 0), end = node.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  return Tensor::vector_int64(
      std::vector<int64_t>(shape.dims.begin() + start, shape.dims.begin() + std::max(start, end)));
}

}  // namespace

bool is_foldable_op(const Node& node) {
  return node.domain.empty() && foldable().count(node.op_type) > 0;
}

Status fold_node(Graph& graph, NodeId id, bool& folded) {
  folded = false;
  const Node& node = graph.node(id);
  if (!is_foldable_op(node) || node.outputs.empty() || node.output(0) == kNoId) return Status::ok();
  const bool shape_only = node.op_type == "Shape" || node.op_type == "Size";
  for (ValueId in : node.inputs) {
    if (in == kNoId) continue;
    const Value& v = graph.value(in);
    if (shape_only ? !v.shape.is_static() : (v.kind != ValueKind::kConstant || !v.data))
      return Status::ok();
  }
  if (shape_only) {
    graph.make_constant(node.outputs[0], shape_fold(node, graph.value(node.inputs[0]).shape));
    folded = true;
    return Status::ok();
  }
  const runtime::Kernel* kernel = runtime::kernel_registry().find(node.domain, node.op_type);
  if (!kernel || !op_registry().find(node.domain, node.op_type)) return Status::ok();
  RETURN_IF_ERROR(infer_node(graph, id));
  for (ValueId out : node.outputs) {
    if (out != kNoId && graph.value(out).shape.num_elements() > kMaxFoldElements)
      return Status::ok();
  }
  std::vector<const Tensor*> inputs;
  for (ValueId in : node.inputs)
    inputs.push_back(in == kNoId ? nullptr : graph.value(in).data.get());
  // Half-type constants fold widened to float32 and rounded back, as the executor runs them.
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<Tensor>> outputs,
                   runtime::run_on_host(graph, id, std::move(inputs)));
  const std::vector<ValueId> outs = graph.node(id).outputs;
  for (size_t i = 0; i < outs.size() && i < outputs.size(); ++i) {
    if (outs[i] == kNoId || !outputs[i]) continue;
    graph.make_constant(outs[i], std::move(*outputs[i]));
  }
  folded = true;
  return Status::ok();
}

StatusOr<int> fold_constants(Graph& graph) {
  int count = 0;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    bool folded = false;
    RETURN_IF_ERROR(fold_node(graph, id, folded));
    count += folded ? 1 : 0;
  }
  graph.remove_dead_nodes();
  return count;
}

}  // namespace autopar
