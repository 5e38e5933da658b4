// Gradient rules of ReduceMean, ReduceSum and ReduceMax.
#include "rules.h"

namespace autopar {
namespace {

// The reduced axes (attribute before opset 13 for every reduce, input for ReduceSum from 13),
// normalised; empty means all unless noop_with_empty_axes.
std::vector<int64_t> reduced_axes(const GradientBuilder& b) {
  const int64_t rank = b.rank(b.I(0));
  std::vector<int64_t> axes = b.node().attr_ints("axes");
  if (axes.empty() && b.num_inputs() > 1 && b.has_input(1)) {
    if (const Tensor* data = b.data(b.I(1))) axes = data->to_int64_vector();
  }
  if (axes.empty()) {
    if (b.node().attr_int("noop_with_empty_axes", 0) != 0) return {};
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  return axes;
}

// GO brought back to X's shape: reshaped to the kept-dims shape, then expanded.
ValueId spread(GradientBuilder& b, ValueId go, const std::vector<int64_t>& axes) {
  std::vector<int64_t> kept = b.dims(b.I(0));
  for (int64_t a : axes) kept[a] = 1;
  return b.op("Expand", {b.reshape(go, kept), b.ints(b.dims(b.I(0)))});
}

int64_t reduced_count(const GradientBuilder& b, const std::vector<int64_t>& axes) {
  int64_t count = 1;
  for (int64_t a : axes) count *= b.dims(b.I(0))[a];
  return count;
}

Status reduce_sum_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] { return spread(b, b.GO(0), reduced_axes(b)); });
}

Status reduce_mean_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] {
    const std::vector<int64_t> axes = reduced_axes(b);
    const ValueId scaled = b.op(
        "Div", {b.GO(0), b.scalar(static_cast<double>(reduced_count(b, axes)), b.dtype(b.I(0)))});
    return spread(b, scaled, axes);
  });
}

// The gradient goes to every element equal to the maximum.
Status reduce_max_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] {
    const std::vector<int64_t> axes = reduced_axes(b);
    const ValueId is_max = b.op("Equal", {b.I(0), spread(b, b.O(0), axes)});
    return b.op("Where", {is_max, spread(b, b.GO(0), axes), b.scalar(0.0, b.dtype(b.I(0)))});
  });
}

}  // namespace

void register_reduce_gradients(OpRegistry& registry) {
  add_gradient(registry, "ReduceSum", reduce_sum_rule);
  add_gradient(registry, "ReduceMean", reduce_mean_rule);
  add_gradient(registry, "ReduceMax", reduce_max_rule);
}

}  // namespace autopar
