// GradientBuilder: the forward node's view for gradient rules.
#include "autopar/autodiff/gradient_builder.h"

namespace autopar {

GradientBuilder::GradientBuilder(Graph& graph, NodeId forward, std::vector<ValueId> output_grads,
                                 std::vector<bool> needs_input_grad, bool fused)
    : Emitter(graph, "grad/" + graph.node(forward).name, Phase::kBackward,
              graph.node(forward).layer),
      node_(graph.node(forward)),
      output_grads_(std::move(output_grads)),
      needs_(std::move(needs_input_grad)),
      input_grads_(node_.inputs.size(), kNoId),
      fused_(fused) {}

Status GradientBuilder::set_grad(size_t i, ValueId grad) {
  if (!status().is_ok()) return status();
  const Value& in = value(I(i));
  const Value& g = value(grad);
  if (g.dtype != in.dtype || g.shape.dims != in.shape.dims) {
    return fail("the gradient of input {} is {}[{}], the input is {}[{}]", i, dtype_name(g.dtype),
                fmt::join(g.shape.dims, ","), dtype_name(in.dtype), fmt::join(in.shape.dims, ","));
  }
  input_grads_.at(i) = grad;
  return Status::ok();
}

}  // namespace autopar
