// Gradient rules of elementwise ops: arithmetic, activations, Clip, Where, variadic ops.
#include <cmath>
#include <numbers>

#include "rules.h"

namespace autopar {
namespace {

ValueId zero(GradientBuilder& b, ValueId like) { return b.scalar(0.0, b.dtype(like)); }
ValueId scalar_like(GradientBuilder& b, double v, ValueId like) {
  return b.scalar(v, b.dtype(like));
}

// A rule for a unary op whose dX = GO · f(X, Y), with f built by `local`.
GradientFn unary(std::function<ValueId(GradientBuilder&, ValueId x, ValueId y)> local) {
  return [local = std::move(local)](GradientBuilder& b) -> Status {
    return maybe_grad(b, 0, [&] { return b.op("Mul", {b.GO(0), local(b, b.I(0), b.O(0))}); });
  };
}

// dX = Where(X > 0, positive, negative).
ValueId by_sign(GradientBuilder& b, ValueId x, ValueId positive, ValueId negative) {
  return b.op("Where", {b.op("Greater", {x, zero(b, x)}), positive, negative});
}

Status add_rule(GradientBuilder& b) {
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] { return b.unbroadcast(b.GO(0), b.dims(b.I(0))); }));
  return maybe_grad(b, 1, [&] { return b.unbroadcast(b.GO(0), b.dims(b.I(1))); });
}

Status sub_rule(GradientBuilder& b) {
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] { return b.unbroadcast(b.GO(0), b.dims(b.I(0))); }));
  return maybe_grad(b, 1, [&] { return b.unbroadcast(b.op("Neg", {b.GO(0)}), b.dims(b.I(1))); });
}

Status mul_rule(GradientBuilder& b) {
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    return b.unbroadcast(b.op("Mul", {b.GO(0), b.I(1)}), b.dims(b.I(0)));
  }));
  return maybe_grad(b, 1, [&] {
    return b.unbroadcast(b.op("Mul", {b.GO(0), b.I(0)}), b.dims(b.I(1)));
  });
}

// d(a/b)/da = 1/b, d(a/b)/db = -y/b.
Status div_rule(GradientBuilder& b) {
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    return b.unbroadcast(b.op("Div", {b.GO(0), b.I(1)}), b.dims(b.I(0)));
  }));
  return maybe_grad(b, 1, [&] {
    const ValueId ratio = b.op("Div", {b.O(0), b.I(1)});
    return b.unbroadcast(b.op("Neg", {b.op("Mul", {b.GO(0), ratio})}), b.dims(b.I(1)));
  });
}

// d(x^e)/dx = e·x^(e-1), d(x^e)/de = y·ln x.
Status pow_rule(GradientBuilder& b) {
  const ValueId x = b.I(0);
  ValueId e = b.I(1);
  if (b.dtype(e) != b.dtype(x)) e = b.op("Cast", {e}, {{"to", int64_t{dtype_to_onnx(b.dtype(x))}}});
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    const ValueId e_minus_1 = b.op("Sub", {e, scalar_like(b, 1.0, x)});
    const ValueId local = b.op("Mul", {e, b.op("Pow", {x, e_minus_1})});
    return b.unbroadcast(b.op("Mul", {b.GO(0), local}), b.dims(x));
  }));
  return maybe_grad(b, 1, [&] {
    const ValueId local = b.op("Mul", {b.O(0), b.op("Log", {x})});
    return b.unbroadcast(b.op("Mul", {b.GO(0), local}), b.dims(b.I(1)));
  });
}

double float_attr(const GradientBuilder& b, const char* name, double fallback) {
  return b.node().attr_float(name, static_cast<float>(fallback));
}

Status leaky_relu_rule(GradientBuilder& b) {
  const double alpha = float_attr(b, "alpha", 0.01);
  return maybe_grad(b, 0, [&] {
    const ValueId scaled = b.op("Mul", {b.GO(0), scalar_like(b, alpha, b.I(0))});
    return by_sign(b, b.I(0), b.GO(0), scaled);
  });
}

// y = clamp(αx + β, 0, 1): the slope α inside the linear part, 0 outside.
Status hard_sigmoid_rule(GradientBuilder& b) {
  const double alpha = float_attr(b, "alpha", 0.2), beta = float_attr(b, "beta", 0.5);
  return maybe_grad(b, 0, [&] {
    const ValueId x = b.I(0);
    const ValueId z =
        b.op("Add", {b.op("Mul", {x, scalar_like(b, alpha, x)}), scalar_like(b, beta, x)});
    const ValueId inside =
        b.op("And", {b.op("Greater", {z, zero(b, x)}), b.op("Less", {z, scalar_like(b, 1.0, x)})});
    return b.op("Where", {inside, b.op("Mul", {b.GO(0), scalar_like(b, alpha, x)}), zero(b, x)});
  });
}

// y = x·clamp(x/6 + 1/2, 0, 1): 0 below -3, 1 above 3, (2x + 3)/6 between.
Status hard_swish_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] {
    const ValueId x = b.I(0);
    const ValueId middle = b.op(
        "Div", {b.op("Add", {b.op("Mul", {x, scalar_like(b, 2.0, x)}), scalar_like(b, 3.0, x)}),
                scalar_like(b, 6.0, x)});
    const ValueId upper = b.op("Where", {b.op("Greater", {x, scalar_like(b, 3.0, x)}), b.GO(0),
                                         b.op("Mul", {b.GO(0), middle})});
    return b.op("Where", {b.op("Less", {x, scalar_like(b, -3.0, x)}), zero(b, x), upper});
  });
}

// x > 0: 1; else α·eˣ = y + α.
Status elu_rule(GradientBuilder& b) {
  const double alpha = float_attr(b, "alpha", 1.0);
  return maybe_grad(b, 0, [&] {
    const ValueId negative =
        b.op("Mul", {b.GO(0), b.op("Add", {b.O(0), scalar_like(b, alpha, b.I(0))})});
    return by_sign(b, b.I(0), b.GO(0), negative);
  });
}

// x > 0: γ; else γ·α·eˣ = y + γ·α.
Status selu_rule(GradientBuilder& b) {
  const double alpha = float_attr(b, "alpha", 1.67326319217681884765625);
  const double gamma = float_attr(b, "gamma", 1.05070102214813232421875);
  return maybe_grad(b, 0, [&] {
    const ValueId x = b.I(0);
    const ValueId positive = b.op("Mul", {b.GO(0), scalar_like(b, gamma, x)});
    const ValueId negative =
        b.op("Mul", {b.GO(0), b.op("Add", {b.O(0), scalar_like(b, gamma * alpha, x)})});
    return by_sign(b, x, positive, negative);
  });
}

Status prelu_rule(GradientBuilder& b) {
  const ValueId x = b.I(0), slope = b.I(1);
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    return by_sign(b, x, b.GO(0), b.op("Mul", {b.GO(0), slope}));
  }));
  return maybe_grad(b, 1, [&] {
    return b.unbroadcast(by_sign(b, x, zero(b, x), b.op("Mul", {b.GO(0), x})), b.dims(slope));
  });
}

// The gradient passes where min ≤ x ≤ max (bounds from inputs from opset 11, else attributes).
Status clip_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] {
    const ValueId x = b.I(0);
    ValueId inside = kNoId;
    auto bound = [&](size_t input, const char* attr, const char* compare) {
      ValueId limit = kNoId;
      if (b.opset() >= 11) {
        if (b.has_input(input)) limit = b.I(input);
      } else if (b.node().attr(attr)) {
        limit = scalar_like(b, b.node().attr_float(attr, 0.0f), x);
      }
      if (limit == kNoId) return;
      const ValueId test = b.op(compare, {x, limit});
      inside = inside == kNoId ? test : b.op("And", {inside, test});
    };
    bound(1, "min", "GreaterOrEqual");
    bound(2, "max", "LessOrEqual");
    if (inside == kNoId) return b.GO(0);
    return b.op("Where", {inside, b.GO(0), zero(b, x)});
  });
}

// Max and Min: each input gets the gradient where it is the result.
Status extremum_rule(GradientBuilder& b) {
  for (size_t i = 0; i < b.num_inputs(); ++i) {
    RETURN_IF_ERROR(maybe_grad(b, i, [&] {
      const ValueId picked = b.op("Equal", {b.I(i), b.O(0)});
      return b.unbroadcast(b.op("Where", {picked, b.GO(0), zero(b, b.I(i))}), b.dims(b.I(i)));
    }));
  }
  return Status::ok();
}

Status sum_rule(GradientBuilder& b) {
  for (size_t i = 0; i < b.num_inputs(); ++i) {
    RETURN_IF_ERROR(maybe_grad(b, i, [&] { return b.unbroadcast(b.GO(0), b.dims(b.I(i))); }));
  }
  return Status::ok();
}

Status mean_rule(GradientBuilder& b) {
  const double n = static_cast<double>(b.num_inputs());
  for (size_t i = 0; i < b.num_inputs(); ++i) {
    RETURN_IF_ERROR(maybe_grad(b, i, [&] {
      return b.unbroadcast(b.op("Div", {b.GO(0), scalar_like(b, n, b.I(i))}), b.dims(b.I(i)));
    }));
  }
  return Status::ok();
}

Status where_rule(GradientBuilder& b) {
  const ValueId condition = b.I(0);
  RETURN_IF_ERROR(maybe_grad(b, 1, [&] {
    return b.unbroadcast(b.op("Where", {condition, b.GO(0), zero(b, b.I(1))}), b.dims(b.I(1)));
  }));
  return maybe_grad(b, 2, [&] {
    return b.unbroadcast(b.op("Where", {condition, zero(b, b.I(2)), b.GO(0)}), b.dims(b.I(2)));
  });
}

Status cast_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] {
    return b.op("Cast", {b.GO(0)}, {{"to", int64_t{dtype_to_onnx(b.dtype(b.I(0)))}}});
  });
}

// In inference (no true training_mode) Dropout is the identity. In training the kept
// elements were scaled by 1/(1 − ratio): the mask output says which.
Status dropout_rule(GradientBuilder& b) {
  bool training = false;
  double ratio = 0.5;
  if (b.opset() >= 12) {
    if (b.has_input(2)) {
      const Tensor* mode = b.data(b.I(2));
      if (!mode) return b.fail("training_mode must be a constant to differentiate Dropout");
      training = mode->int_at(0) != 0;
    }
    if (b.has_input(1)) {
      const Tensor* r = b.data(b.I(1));
      if (!r) return b.fail("ratio must be a constant to differentiate Dropout");
      ratio = r->float_at(0);
    }
  }
  if (!training || ratio == 0) return maybe_grad(b, 0, [&] { return b.GO(0); });
  if (b.num_outputs() < 2 || b.O(1) == kNoId) {
    return b.fail("Dropout in training mode needs its mask output to be differentiated");
  }
  return maybe_grad(b, 0, [&] {
    const ValueId mask = b.op("Cast", {b.O(1)}, {{"to", int64_t{dtype_to_onnx(b.dtype(b.I(0)))}}});
    return b.op("Mul", {b.op("Mul", {b.GO(0), mask}), scalar_like(b, 1.0 / (1.0 - ratio), b.I(0))});
  });
}

}  // namespace

void register_elementwise_gradients(OpRegistry& registry) {
  add_gradient(registry, "Add", add_rule);
  add_gradient(registry, "Sub", sub_rule);
  add_gradient(registry, "Mul", mul_rule);
  add_gradient(registry, "Div", div_rule);
  add_gradient(registry, "Pow", pow_rule);
  add_gradient(registry, "Sqrt", unary([](GradientBuilder& b, ValueId, ValueId y) {
                 return b.op("Reciprocal", {b.op("Mul", {y, scalar_like(b, 2.0, y)})});
               }));
  add_gradient(registry, "Reciprocal", unary([](GradientBuilder& b, ValueId, ValueId y) {
                 return b.op("Neg", {b.op("Mul", {y, y})});
               }));
  add_gradient(registry, "Neg", [](GradientBuilder& b) {
    return maybe_grad(b, 0, [&] { return b.op("Neg", {b.GO(0)}); });
  });
  add_gradient(registry, "Exp", unary([](GradientBuilder&, ValueId, ValueId y) { return y; }));
  add_gradient(registry, "Log", unary([](GradientBuilder& b, ValueId x, ValueId) {
                 return b.op("Reciprocal", {x});
               }));
  add_gradient(registry, "Erf", unary([](GradientBuilder& b, ValueId x, ValueId) {
                 const ValueId minus_square = b.op("Neg", {b.op("Mul", {x, x})});
                 return b.op("Mul", {b.op("Exp", {minus_square}),
                                     scalar_like(b, 2.0 / std::sqrt(std::numbers::pi), x)});
               }));
  add_gradient(registry, "Tanh", unary([](GradientBuilder& b, ValueId, ValueId y) {
                 return b.op("Sub", {scalar_like(b, 1.0, y), b.op("Mul", {y, y})});
               }));
  add_gradient(registry, "Sigmoid", unary([](GradientBuilder& b, ValueId, ValueId y) {
                 return b.op("Mul", {y, b.op("Sub", {scalar_like(b, 1.0, y), y})});
               }));
  add_gradient(registry, "Relu", [](GradientBuilder& b) {
    return maybe_grad(b, 0, [&] { return by_sign(b, b.I(0), b.GO(0), zero(b, b.I(0))); });
  });
  add_gradient(registry, "LeakyRelu", leaky_relu_rule);
  add_gradient(registry, "HardSigmoid", hard_sigmoid_rule);
  add_gradient(registry, "HardSwish", hard_swish_rule);
  add_gradient(registry, "Abs",
               unary([](GradientBuilder& b, ValueId x, ValueId) { return b.op("Sign", {x}); }));
  add_gradient(registry, "Softplus",
               unary([](GradientBuilder& b, ValueId x, ValueId) { return b.op("Sigmoid", {x}); }));
  add_gradient(
      registry, "Softsign", unary([](GradientBuilder& b, ValueId x, ValueId) {
        const ValueId denominator = b.op("Add", {scalar_like(b, 1.0, x), b.op("Abs", {x})});
        return b.op("Reciprocal", {b.op("Mul", {denominator, denominator})});
      }));
  add_gradient(registry, "Elu", elu_rule);
  add_gradient(registry, "Selu", selu_rule);
  add_gradient(registry, "PRelu", prelu_rule);
  add_gradient(registry, "Clip", clip_rule);
  add_gradient(registry, "Max", extremum_rule);
  add_gradient(registry, "Min", extremum_rule);
  add_gradient(registry, "Sum", sum_rule);
  add_gradient(registry, "Mean", mean_rule);
  add_gradient(registry, "Where", where_rule);
  add_gradient(registry, "Identity",
               [](GradientBuilder& b) { return maybe_grad(b, 0, [&] { return b.GO(0); }); });
  add_gradient(registry, "Cast", cast_rule);
  add_gradient(registry, "Dropout", dropout_rule);
  add_no_gradient(registry, {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And",
                             "Or", "Not", "Sign", "Floor", "Ceil"});
}

}  // namespace autopar
