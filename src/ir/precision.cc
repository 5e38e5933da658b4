// change_float_type: one pass over values, data and type-carrying attributes.
#include "autopar/ir/precision.h"

namespace autopar {
namespace {

TensorPtr converted(const TensorPtr& t, DType from, DType to) {
  if (!t || t->dtype() != from) return t;
  Tensor out(to, t->dims());
  const int64_t n = t->num_elements();
  if (from == DType::kFloat32 && (to == DType::kBFloat16 || to == DType::kFloat16)) {
    // The common narrowing in one tight loop (the same rounding as set_from_double).
    const auto* in = reinterpret_cast<const float*>(t->bytes().data());
    auto* dst = reinterpret_cast<uint16_t*>(out.mutable_bytes().data());
    if (to == DType::kBFloat16) {
      for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(in[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(in[i]);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out.set_from_double(i, t->float_at(i));
  }
  return std::make_shared<const Tensor>(std::move(out));
}

}  // namespace

void change_float_type(Graph& graph, DType from, DType to) {
  for (ValueId id = 0; id < graph.num_values(); ++id) {
    Value& v = graph.mutable_value(id);
    if (v.dtype != from) continue;
    v.dtype = to;
    v.data = converted(v.data, from, to);
  }
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    Node& node = graph.mutable_node(id);
    // LayerNormalization's statistics are computed in stash_type (default f32).
    if (node.op_type == "LayerNormalization" &&
        node.attr_int("stash_type", dtype_to_onnx(DType::kFloat32)) == dtype_to_onnx(from)) {
      node.attrs["stash_type"] = int64_t{dtype_to_onnx(to)};
    }
    for (auto& [name, attr] : node.attrs) {
      if (attr.kind() == Attribute::Kind::kTensor) {
        attr = Attribute(converted(attr.tensor(), from, to));
      } else if (node.op_type == "Cast" && name == "to" && attr.kind() == Attribute::Kind::kInt &&
                 attr.i() == dtype_to_onnx(from)) {
        attr = Attribute(int64_t{dtype_to_onnx(to)});
      }
    }
  }
}

}  // namespace autopar
