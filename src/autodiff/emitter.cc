// Emitter: nodes and constants with inferred types.
#include "autopar/autodiff/emitter.h"

#include "autopar/ir/shape_inference.h"

namespace autopar {

std::string Emitter::fresh_name(std::string_view base) {
  const std::string name = prefix_.empty() ? std::string(base) : prefix_ + "/" + std::string(base);
  return graph_.unique_value_name(name);
}

std::vector<ValueId> Emitter::op_n(std::string_view op_type, std::vector<ValueId> inputs,
                                   Attributes attrs, int num_outputs, std::string_view domain) {
  Node node;
  node.name = graph_.unique_node_name(prefix_ + "/" + std::string(op_type));
  node.op_type = std::string(op_type);
  node.domain = std::string(domain);
  if (!node.domain.empty()) graph_.opsets.try_emplace(node.domain, 1);
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  node.phase = phase_;
  node.layer = layer_;
  std::vector<ValueId> outputs;
  for (int i = 0; i < num_outputs; ++i) {
    Value v;
    v.name = fresh_name(num_outputs == 1 ? std::string(op_type) : fmt::format("{}_{}", op_type, i));
    v.shape = Shape::unknown();
    outputs.push_back(graph_.add_value(std::move(v)));
  }
  node.outputs = outputs;
  const NodeId id = graph_.add_node(std::move(node));
  if (status_.is_ok()) {
    Status inferred = infer_node(graph_, id);
    if (!inferred.is_ok()) status_ = inferred;
  }
  return outputs;
}

ValueId Emitter::constant(Tensor data) {
  Value v;
  v.name = fresh_name("const");
  v.dtype = data.dtype();
  v.shape = Shape(data.dims());
  v.kind = ValueKind::kConstant;
  v.data = std::make_shared<const Tensor>(std::move(data));
  return graph_.add_value(std::move(v));
}

ValueId Emitter::scalar(double value, DType dtype) {
  Tensor t(dtype, {});
  t.set_from_double(0, value);
  return constant(std::move(t));
}

ValueId Emitter::ints(const std::vector<int64_t>& values) {
  return constant(Tensor::vector_int64(values));
}

ValueId Emitter::zeros_like(ValueId id) {
  const DType dtype = graph_.value(id).dtype;
  const std::vector<int64_t> dims = graph_.value(id).shape.dims;
  Tensor zero(dtype, {1});
  Attributes attrs;
  attrs["value"] = Attribute(std::make_shared<const Tensor>(std::move(zero)));
  return op("ConstantOfShape", {ints(dims)}, std::move(attrs));
}

ValueId Emitter::reshape(ValueId x, std::vector<int64_t> dims) {
  if (graph_.value(x).shape.dims == dims) return x;
  return op("Reshape", {x, ints(dims)});
}

ValueId Emitter::unbroadcast(ValueId grad, std::vector<int64_t> dims) {
  const std::vector<int64_t> from = graph_.value(grad).shape.dims;
  if (from == dims) return grad;
  // Axes of `from` that `dims` lacks (leading) or holds as 1 are summed.
  const size_t shift = from.size() - dims.size();
  std::vector<int64_t> axes;
  for (size_t d = 0; d < from.size(); ++d) {
    if (d < shift || (dims[d - shift] == 1 && from[d] != 1))
      axes.push_back(static_cast<int64_t>(d));
  }
  ValueId summed = grad;
  if (!axes.empty()) {
    summed = op("ReduceSum", {grad, ints(axes)}, {{"keepdims", int64_t{1}}});
  }
  return reshape(summed, std::move(dims));
}

ValueId Emitter::transpose(ValueId x, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity) return x;
  return op("Transpose", {x}, {{"perm", perm}});
}

}  // namespace autopar
