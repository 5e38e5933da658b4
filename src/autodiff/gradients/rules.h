// The gradient rule families register_all_gradients() lists, and what their rules share.
#pragma once

#include <initializer_list>
#include <string_view>

#include "autopar/autodiff/gradient_builder.h"
#include "autopar/ops/op_def.h"

namespace autopar {

void register_elementwise_gradients(OpRegistry& registry);
void register_matmul_gradients(OpRegistry& registry);
void register_normalization_gradients(OpRegistry& registry);
void register_conv_gradients(OpRegistry& registry);
void register_shape_gradients(OpRegistry& registry);
void register_reduce_gradients(OpRegistry& registry);

// Attaches a rule to an ai.onnx op's OpDef; the op must be registered.
void add_gradient(OpRegistry& registry, std::string_view op_type, GradientFn rule);
// Marks ops whose outputs carry no gradient.
void add_no_gradient(OpRegistry& registry, std::initializer_list<std::string_view> op_types);

// Sets input i's gradient when it needs one, computing it only then.
template <typename F>
Status maybe_grad(GradientBuilder& b, size_t i, F&& compute) {
  if (!b.needs_grad(i)) return Status::ok();
  return b.set_grad(i, compute());
}

}  // namespace autopar
