// Reading an activation node's kind and parameters (see activation.h).
#include "activation.h"

#include <limits>

namespace autopar::runtime {
namespace {

template <typename T>
std::optional<Activation> clip_of(const Graph& graph, const Node& node) {
  double lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  if (graph.opset(node.domain) < 11) {
    for (auto [name, bound] : {std::pair{"min", &lo}, std::pair{"max", &hi}}) {
      const Attribute* a = node.attr(name);
      if (!a) continue;
      // As the Clip kernel reads it: the attribute converted to T.
      *bound =
          static_cast<T>(a->kind() == Attribute::Kind::kInt ? static_cast<double>(a->i()) : a->f());
    }
  } else {
    for (auto [input, bound] : {std::pair{size_t{1}, &lo}, std::pair{size_t{2}, &hi}}) {
      if (input >= node.inputs.size() || node.inputs[input] == kNoId) continue;
      const Value& v = graph.value(node.inputs[input]);
      if (!v.is_initializer() || !v.data || v.dtype != graph.value(node.inputs[0]).dtype ||
          v.data->num_elements() != 1)
        return std::nullopt;
      *bound = v.data->data<T>()[0];
    }
  }
  return Activation{Activation::Kind::kClip, lo, hi};
}

}  // namespace

std::optional<Activation> activation_of(const Graph& graph, const Node& node) {
  if (!node.domain.empty() || node.inputs.empty() || node.inputs[0] == kNoId ||
      node.outputs.size() != 1)
    return std::nullopt;
  const DType dtype = graph.value(node.inputs[0]).dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) return std::nullopt;
  const std::string& op = node.op_type;
  if (op == "Relu") return Activation{Activation::Kind::kRelu};
  if (op == "HardSwish") return Activation{Activation::Kind::kHardSwish};
  // Attributes are float32 in ONNX; the kernels convert them to the tensor's type.
  if (op == "LeakyRelu")
    return Activation{Activation::Kind::kLeakyRelu, node.attr_float("alpha", 0.01f)};
  if (op == "HardSigmoid") {
    return Activation{Activation::Kind::kHardSigmoid, node.attr_float("alpha", 0.2f),
                      node.attr_float("beta", 0.5f)};
  }
  if (op == "Clip") {
    return dtype == DType::kFloat32 ? clip_of<float>(graph, node) : clip_of<double>(graph, node);
  }
  return std::nullopt;
}

}  // namespace autopar::runtime
