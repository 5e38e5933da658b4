// GraphCopy.
#include "autopar/ir/graph_copy.h"

namespace autopar {

Value detached(const Value& value) {
  Value copy;
  copy.name = value.name;
  copy.dtype = value.dtype;
  copy.shape = value.shape;
  copy.kind = value.kind;
  copy.data = value.data;
  return copy;
}

GraphCopy::GraphCopy(const Graph& src, Graph& dst) : src_(src), dst_(dst) {
  dst_.name = src_.name;
  dst_.opsets = src_.opsets;
}

ValueId GraphCopy::value(ValueId v) {
  auto it = map_.find(v);
  if (it != map_.end()) return it->second;
  return map_[v] = dst_.add_value(detached(src_.value(v)));
}

NodeId GraphCopy::node(const Node& node) {
  Node copy = node;
  for (ValueId& in : copy.inputs) {
    if (in != kNoId) in = value(in);
  }
  for (ValueId& out : copy.outputs) {
    if (out != kNoId) out = value(out);
  }
  return dst_.add_node(std::move(copy));
}

void GraphCopy::inputs_and_initializers() {
  for (ValueId in : src_.inputs()) dst_.add_input(value(in));
  for (ValueId v = 0; v < src_.num_values(); ++v) {
    if (src_.value(v).is_initializer()) value(v);
  }
}

void GraphCopy::outputs() {
  std::vector<ValueId> outs;
  for (ValueId o : src_.outputs()) outs.push_back(value(o));
  dst_.set_outputs(std::move(outs));
}

}  // namespace autopar
