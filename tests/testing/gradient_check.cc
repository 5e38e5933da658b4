// Numeric gradient checks through autodiff and the executor.
#include "testing/gradient_check.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/autodiff/emitter.h"
#include "autopar/ir/shape_inference.h"
#include "autopar/runtime/executor.h"

namespace autopar::testing {

Tensor random_f64(std::vector<int64_t> dims, uint64_t seed, double low, double high) {
  Tensor t(DType::kFloat64, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(low, high);
  for (double& v : t.mutable_data<double>()) v = uniform(rng);
  return t;
}

GradientCheck::GradientCheck(std::string op_type, int64_t opset)
    : op_type_(std::move(op_type)), opset_(opset) {}

GradientCheck& GradientCheck::wrt(Tensor t) {
  inputs_.emplace_back(std::move(t), 0);
  return *this;
}
GradientCheck& GradientCheck::constant(Tensor t) {
  inputs_.emplace_back(std::move(t), 1);
  return *this;
}
GradientCheck& GradientCheck::omitted() {
  inputs_.emplace_back(Tensor(), 2);
  return *this;
}
GradientCheck& GradientCheck::attr(const std::string& name, Attribute value) {
  attrs_[name] = std::move(value);
  return *this;
}
GradientCheck& GradientCheck::outputs(int count) {
  num_outputs_ = count;
  return *this;
}
GradientCheck& GradientCheck::domain(std::string domain) {
  domain_ = std::move(domain);
  return *this;
}
GradientCheck& GradientCheck::loss_outputs(std::vector<int> outputs) {
  loss_outputs_ = std::move(outputs);
  return *this;
}

std::string GradientCheck::check(double rtol, double atol) {
  Graph g;
  g.opsets = {{"", opset_}};
  if (!domain_.empty()) g.opsets[domain_] = 1;
  Node node;
  node.name = "n";
  node.op_type = op_type_;
  node.domain = domain_;
  node.attrs = attrs_;
  std::vector<ValueId> wrt_ids;
  std::vector<TensorPtr> wrt_values;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const auto& [tensor, kind] = inputs_[i];
    if (kind == 2) {
      node.inputs.push_back(kNoId);
      continue;
    }
    Value v;
    v.name = fmt::format("in{}", i);
    v.dtype = tensor.dtype();
    v.shape = Shape(tensor.dims());
    v.kind = kind == 0 ? ValueKind::kInput : ValueKind::kConstant;
    if (kind == 1) v.data = std::make_shared<const Tensor>(tensor);
    const ValueId id = g.add_value(std::move(v));
    if (kind == 0) {
      g.add_input(id);
      wrt_ids.push_back(id);
      wrt_values.push_back(std::make_shared<const Tensor>(tensor));
    }
    node.inputs.push_back(id);
  }
  for (int i = 0; i < num_outputs_; ++i) {
    Value v;
    v.name = fmt::format("out{}", i);
    v.shape = Shape::unknown();
    node.outputs.push_back(g.add_value(std::move(v)));
  }
  const NodeId id = g.add_node(std::move(node));
  if (Status s = infer_node(g, id); !s.is_ok()) return "shape rule: " + s.message();

  // loss = Σ_k ReduceSum(out_k · R_k)
  Emitter emit(g, "loss", Phase::kForward, -1);
  std::vector<int> used = loss_outputs_;
  if (used.empty()) {
    for (int i = 0; i < num_outputs_; ++i) {
      if (is_floating(g.value(g.node(id).outputs[i]).dtype)) used.push_back(i);
    }
  }
  ValueId loss = kNoId;
  uint64_t seed = 1000;
  for (int k : used) {
    const ValueId out = g.node(id).outputs[k];
    Tensor weights = random_f64(g.value(out).shape.dims, seed++);
    if (g.value(out).dtype != DType::kFloat64) return "the loss needs f64 outputs";
    const ValueId term = emit.op(
        "ReduceSum", {emit.op("Mul", {out, emit.constant(std::move(weights))}), emit.ints({})},
        {{"keepdims", int64_t{0}}});
    loss = loss == kNoId ? term : emit.op("Add", {loss, term});
  }
  if (!emit.status().is_ok()) return "loss: " + emit.status().message();
  auto grads = add_gradients(g, loss, wrt_ids);
  if (!grads.is_ok()) return "autodiff: " + grads.status().message();
  std::vector<ValueId> outs = {loss};
  for (ValueId grad : *grads) {
    if (grad == kNoId) return "an input got no gradient";
    outs.push_back(grad);
  }
  g.set_outputs(outs);
  runtime::ExecutorOptions options;
  options.num_threads = 1;
  auto executor = runtime::Executor::create(g, options);
  if (!executor.is_ok()) return "executor: " + executor.status().message();
  auto analytic = executor->run_inputs(wrt_values);
  if (!analytic.is_ok()) return "run: " + analytic.status().message();

  auto loss_at = [&](std::vector<TensorPtr> values) -> double {
    auto result = executor->run_inputs(values);
    return result.is_ok() ? (*result)[0]->float_at(0) : std::nan("");
  };
  for (size_t w = 0; w < wrt_ids.size(); ++w) {
    const Tensor& x = *wrt_values[w];
    const Tensor& grad = *(*analytic)[w + 1];
    for (int64_t e = 0; e < x.num_elements(); ++e) {
      const double h = 1e-6 * std::max(1.0, std::fabs(x.float_at(e)));
      std::vector<TensorPtr> plus = wrt_values, minus = wrt_values;
      Tensor xp = x, xm = x;
      xp.set_from_double(e, x.float_at(e) + h);
      xm.set_from_double(e, x.float_at(e) - h);
      plus[w] = std::make_shared<const Tensor>(std::move(xp));
      minus[w] = std::make_shared<const Tensor>(std::move(xm));
      const double numeric = (loss_at(plus) - loss_at(minus)) / (2 * h);
      const double a = grad.float_at(e);
      if (!(std::fabs(a - numeric) <= atol + rtol * std::fabs(numeric))) {
        return fmt::format("input {} element {}: analytic {:.10g}, numeric {:.10g}", w, e, a,
                           numeric);
      }
    }
  }
  return "";
}

}  // namespace autopar::testing
