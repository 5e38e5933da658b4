// The one explicit list of gradient rule families; each family's file lists its ops.
#include <cassert>

#include "gradients/rules.h"

namespace autopar {

void add_gradient(OpRegistry& registry, std::string_view op_type, GradientFn rule) {
  OpDef* def = registry.find_mutable("", op_type);
  assert(def && "a gradient rule needs the op's OpDef");
  assert(def->gradient_kind == GradientKind::kUndeclared && "one rule per op");
  def->gradient_kind = GradientKind::kRule;
  def->gradient = std::move(rule);
}

void add_no_gradient(OpRegistry& registry, std::initializer_list<std::string_view> op_types) {
  for (std::string_view op : op_types) {
    OpDef* def = registry.find_mutable("", op);
    assert(def && "a gradient declaration needs the op's OpDef");
    def->gradient_kind = GradientKind::kNone;
  }
}

namespace {

// Gelu (the fused training graph's): dX = GeluGrad(dY, X), one node.
Status gelu_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] {
    Attributes attrs;
    if (const Attribute* form = b.node().attr("approximate")) attrs["approximate"] = *form;
    return b.op_n("GeluGrad", {b.GO(0), b.I(0)}, std::move(attrs), 1, kTrainingDomain)[0];
  });
}

}  // namespace

void register_all_gradients(OpRegistry& registry) {
  register_elementwise_gradients(registry);    // arithmetic, activations, Where, Cast ...
  register_matmul_gradients(registry);         // MatMul Gemm
  register_normalization_gradients(registry);  // Softmax LayerNorm BatchNorm losses
  register_conv_gradients(registry);           // Conv ConvTranspose pooling
  register_shape_gradients(registry);          // Reshape Transpose Slice Gather Pad ...
  register_reduce_gradients(registry);         // ReduceMean ReduceSum ReduceMax
  OpDef* gelu = registry.find_mutable(kTrainingDomain, "Gelu");  // ai.autopar.training
  assert(gelu && gelu->gradient_kind == GradientKind::kUndeclared);
  gelu->gradient_kind = GradientKind::kRule;
  gelu->gradient = gelu_rule;
}

}  // namespace autopar
