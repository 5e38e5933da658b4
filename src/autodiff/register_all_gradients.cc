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

// RMSNormalization: dX and X̂ from one RMSNormalizationGrad; dScale = Σ dY·X̂ over the rows.
Status rms_norm_rule(GradientBuilder& b) {
  Attributes attrs;
  for (const char* name : {"axis", "epsilon"}) {
    if (const Attribute* a = b.node().attr(name)) attrs[name] = *a;
  }
  const std::vector<ValueId> fused = b.op_n("RMSNormalizationGrad", {b.GO(0), b.I(0), b.I(1)},
                                            std::move(attrs), 2, kTrainingDomain);
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] { return fused[0]; }));
  return maybe_grad(b, 1, [&] {
    return b.unbroadcast(b.op("Mul", {b.GO(0), fused[1]}), b.dims(b.I(1)));
  });
}

// RotaryEmbedding is a rotation per position: its gradient rotates back. The tables are
// constants.
Status rotary_rule(GradientBuilder& b) {
  if (b.node().attr_int("inverse", 0) != 0)
    return b.fail("an inverse RotaryEmbedding is not differentiated");
  return maybe_grad(b, 0, [&] {
    return b.op_n("RotaryEmbedding", {b.GO(0), b.I(1), b.I(2)}, {{"inverse", int64_t{1}}}, 1,
                  kTrainingDomain)[0];
  });
}

// SwiGLU: both gradients from one SwiGLUGrad.
Status swiglu_rule(GradientBuilder& b) {
  const std::vector<ValueId> fused =
      b.op_n("SwiGLUGrad", {b.GO(0), b.I(0), b.I(1)}, {}, 2, kTrainingDomain);
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] { return fused[0]; }));
  return maybe_grad(b, 1, [&] { return fused[1]; });
}

// Attention: dQ, dK and dV from one AttentionGrad, which reads the forward's output and its
// rows' log-sum-exp rather than scores it never held.
Status attention_rule(GradientBuilder& b) {
  if (b.node().outputs.size() < 2 || b.O(1) == kNoId)
    return b.fail("Attention is differentiated from its log-sum-exp output, which it lacks");
  Attributes attrs;
  for (const char* name : {"scale", "causal"}) {
    if (const Attribute* a = b.node().attr(name)) attrs[name] = *a;
  }
  const std::vector<ValueId> fused =
      b.op_n("AttentionGrad", {b.GO(0), b.I(0), b.I(1), b.I(2), b.O(0), b.O(1)}, std::move(attrs),
             3, kTrainingDomain);
  for (size_t i = 0; i < 3; ++i) RETURN_IF_ERROR(maybe_grad(b, i, [&] { return fused[i]; }));
  return Status::ok();
}

void add_training_gradient(OpRegistry& registry, std::string_view op_type, GradientFn rule) {
  OpDef* def = registry.find_mutable(kTrainingDomain, op_type);  // ai.autopar.training
  assert(def && def->gradient_kind == GradientKind::kUndeclared);
  def->gradient_kind = GradientKind::kRule;
  def->gradient = std::move(rule);
}

}  // namespace

void register_all_gradients(OpRegistry& registry) {
  register_elementwise_gradients(registry);    // arithmetic, activations, Where, Cast ...
  register_matmul_gradients(registry);         // MatMul Gemm
  register_normalization_gradients(registry);  // Softmax LayerNorm BatchNorm losses
  register_conv_gradients(registry);           // Conv ConvTranspose pooling
  register_shape_gradients(registry);          // Reshape Transpose Slice Gather Pad ...
  register_reduce_gradients(registry);         // ReduceMean ReduceSum ReduceMax
  add_training_gradient(registry, "Gelu", gelu_rule);
  add_training_gradient(registry, "RMSNormalization", rms_norm_rule);
  add_training_gradient(registry, "RotaryEmbedding", rotary_rule);
  add_training_gradient(registry, "SwiGLU", swiglu_rule);
  add_training_gradient(registry, "Attention", attention_rule);
}

}  // namespace autopar
