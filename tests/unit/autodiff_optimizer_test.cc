// Optimizer updates of the training graph against the formulas (PyTorch's semantics) computed
// by hand in double, over two steps so state and bias correction are exercised.
#include <cmath>

#include <gtest/gtest.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/builder.h"
#include "autopar/runtime/executor.h"

namespace autopar {
namespace {

constexpr int kRows = 4, kIn = 3, kOut = 2;

// y = x·W, W [3, 2] with fixed values.
Graph linear_model() {
  GraphBuilder b("linear");
  b.set_seed(5);
  const ValueId x = b.input("x", DType::kFloat32, {kRows, kIn});
  const ValueId w = b.parameter("w", {kIn, kOut}, ParamInit::normal(0.5f));
  b.output(b.op1("MatMul", {x, w}), "y");
  return b.finish();
}

std::vector<double> data(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) v.push_back(t.float_at(i));
  return v;
}

// dL/dW of L = mean((x·W − t)²).
std::vector<double> mse_gradient(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>& t) {
  std::vector<double> g(kIn * kOut, 0.0);
  for (int r = 0; r < kRows; ++r) {
    for (int o = 0; o < kOut; ++o) {
      double y = 0;
      for (int i = 0; i < kIn; ++i) y += x[r * kIn + i] * w[i * kOut + o];
      const double residual = 2.0 * (y - t[r * kOut + o]) / (kRows * kOut);
      for (int i = 0; i < kIn; ++i) g[i * kOut + o] += x[r * kIn + i] * residual;
    }
  }
  return g;
}

void check_two_steps(const OptimizerSpec& spec, bool fused = false) {
  const Graph model = linear_model();
  auto training = build_training_graph(model, {LossKind::kMse, ""}, spec, {.fused = fused});
  ASSERT_TRUE(training.is_ok()) << training.status().message();
  const Graph& g = training->graph;
  auto executor = runtime::Executor::create(g, {.num_threads = 1});
  ASSERT_TRUE(executor.is_ok()) << executor.status().message();

  Tensor x(DType::kFloat32, {kRows, kIn}), t(DType::kFloat32, {kRows, kOut});
  for (int64_t i = 0; i < x.num_elements(); ++i)
    x.set_from_double(i, 0.1 * static_cast<double>(i % 7) - 0.3);
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.set_from_double(i, 0.2 * static_cast<double>(i % 3) - 0.1);
  const ValueId w_id = *g.find_value("w");
  std::vector<double> w = data(*g.value(w_id).data);
  std::vector<double> m(w.size(), 0.0), v(w.size(), 0.0);
  const double lr = spec.learning_rate(), decay = spec.decay();

  std::vector<TensorPtr> state;
  for (const auto& [value, next] : training->updates) state.push_back(g.value(value).data);
  for (int step = 1; step <= 2; ++step) {
    std::vector<runtime::Feed> feeds = {{*g.find_value("x"), std::make_shared<const Tensor>(x)},
                                        {training->labels, std::make_shared<const Tensor>(t)}};
    for (size_t k = 0; k < state.size(); ++k)
      feeds.emplace_back(training->updates[k].first, state[k]);
    auto outputs = executor->run(feeds);
    ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
    for (size_t k = 0; k < state.size(); ++k) state[k] = (*outputs)[k + 1];

    std::vector<double> grad = mse_gradient(data(x), w, data(t));
    for (size_t i = 0; i < w.size(); ++i) {
      if (spec.kind == OptimizerKind::kSgd) {
        grad[i] += decay * w[i];
        m[i] = spec.momentum * m[i] + grad[i];
        w[i] -= lr * m[i];
      } else {
        if (spec.kind == OptimizerKind::kAdam) grad[i] += decay * w[i];
        if (spec.kind == OptimizerKind::kAdamW) w[i] *= 1 - lr * decay;
        m[i] = spec.beta1 * m[i] + (1 - spec.beta1) * grad[i];
        v[i] = spec.beta2 * v[i] + (1 - spec.beta2) * grad[i] * grad[i];
        const double m_hat = m[i] / (1 - std::pow(spec.beta1, step));
        const double v_hat = v[i] / (1 - std::pow(spec.beta2, step));
        w[i] -= lr * m_hat / (std::sqrt(v_hat) + spec.epsilon);
      }
    }
    size_t w_slot = 0;
    for (size_t k = 0; k < training->updates.size(); ++k) {
      if (training->updates[k].first == w_id) w_slot = k;
    }
    const std::vector<double> got = data(*state[w_slot]);
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(got[i], w[i], 1e-6 * std::max(1.0, std::fabs(w[i])))
          << optimizer_name(spec.kind) << " step " << step << " element " << i;
    }
  }
}

TEST(Optimizers, SgdWithMomentumAndWeightDecay) {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kSgd;
  spec.lr = 0.1;
  spec.weight_decay = 0.01;
  check_two_steps(spec);
}

TEST(Optimizers, PlainSgd) {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kSgd;
  spec.momentum = 0;
  check_two_steps(spec);
}

TEST(Optimizers, AdamWithL2) {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kAdam;
  spec.lr = 0.01;
  spec.weight_decay = 0.1;
  check_two_steps(spec);
}

TEST(Optimizers, AdamWDecouplesTheDecay) {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kAdamW;
  spec.lr = 0.01;
  spec.beta1 = 0.8;
  spec.beta2 = 0.95;
  check_two_steps(spec);
}

TEST(Optimizers, FusedAdamAndAdamW) {
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    OptimizerSpec spec;
    spec.kind = kind;
    spec.lr = 0.01;
    spec.weight_decay = 0.1;
    check_two_steps(spec, /*fused=*/true);
  }
}

// Adam is one fused node per parameter, in its own domain, whose outputs are the next
// parameter and moments.
TEST(Optimizers, AdamIsOneFusedNodePerParameter) {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kAdamW;
  // By default the training graph is standard ONNX.
  auto standard = build_training_graph(linear_model(), {LossKind::kMse, ""}, spec);
  ASSERT_TRUE(standard.is_ok()) << standard.status().message();
  for (const Node& n : standard->graph.nodes()) EXPECT_TRUE(n.domain.empty()) << n.op_type;
  auto training = build_training_graph(linear_model(), {LossKind::kMse, ""}, spec, {.fused = true});
  ASSERT_TRUE(training.is_ok()) << training.status().message();
  const Graph& g = training->graph;
  int fused = 0, update_nodes = 0;
  for (const Node& n : g.nodes()) {
    if (n.phase != Phase::kOptimizer) continue;
    ++update_nodes;
    if (n.domain == kTrainingDomain && n.op_type == "Adam") {
      ++fused;
      EXPECT_EQ(g.value(n.outputs[0]).name, "w.updated");
      EXPECT_EQ(g.value(n.outputs[1]).name, "w.adam_m.updated");
      EXPECT_EQ(g.value(n.outputs[2]).name, "w.adam_v.updated");
    }
  }
  EXPECT_EQ(fused, 1);
  // The step count and the two bias-corrected scalars every parameter shares: 9 nodes.
  EXPECT_EQ(update_nodes, 1 + 9);
  EXPECT_EQ(g.opset(kTrainingDomain), 1);
}

// The fused kernel computes what the elementwise chain it replaces computes, bit for bit.
void expect_fused_adam_matches_chain(DType dtype) {
  constexpr int64_t kN = 1000;
  const double b1 = 0.9, b2 = 0.999, keep = 1 - 1e-3 * 0.01;
  GraphBuilder b("adam");
  auto in = [&](const char* name) { return b.input(name, dtype, {kN}); };
  const ValueId p = in("p"), grad = in("g"), m = in("m"), v = in("v");
  auto scalar = [&](const char* name, double value) {
    Tensor t(dtype, {});
    t.set_from_double(0, value);
    return b.constant(name, std::move(t));
  };
  const ValueId rate = scalar("rate", 1e-3 * std::sqrt(1 - b2) / (1 - b1));
  const ValueId eps = scalar("eps", 1e-8 * std::sqrt(1 - b2));
  Tensor c(dtype, {5});
  const double cs[] = {b1, 1 - b1, b2, 1 - b2, keep};
  for (int64_t i = 0; i < 5; ++i) c.set_from_double(i, cs[i]);
  std::vector<ValueId> fused =
      b.op("Adam", {p, grad, m, v, rate, eps, b.constant("c", c)}, {}, 3, kTrainingDomain);
  auto mul = [&](ValueId x, ValueId y) { return b.op1("Mul", {x, y}); };
  auto add = [&](ValueId x, ValueId y) { return b.op1("Add", {x, y}); };
  const ValueId m_next = add(mul(scalar("b1", b1), m), mul(scalar("r1", 1 - b1), grad));
  const ValueId v_next = add(mul(scalar("b2", b2), v), mul(scalar("r2", 1 - b2), mul(grad, grad)));
  const ValueId direction = b.op1("Div", {m_next, add(b.op1("Sqrt", {v_next}), eps)});
  const ValueId p_next = b.op1("Sub", {mul(scalar("keep", keep), p), mul(rate, direction)});
  for (ValueId out : {fused[0], fused[1], fused[2], p_next, m_next, v_next}) b.output(out);
  const Graph g = b.finish();
  auto executor = runtime::Executor::create(g, {.num_threads = 2});
  ASSERT_TRUE(executor.is_ok()) << executor.status().message();
  std::vector<runtime::Feed> feeds;
  int salt = 0;
  for (ValueId x : {p, grad, m, v}) {
    Tensor t(dtype, {kN});
    ++salt;
    for (int64_t i = 0; i < kN; ++i) {
      const double u = std::sin(static_cast<double>(i * 7 + salt * 13)) * 0.5;
      t.set_from_double(i, x == v ? u * u : u);  // second moments are not negative
    }
    feeds.push_back({x, std::make_shared<const Tensor>(std::move(t))});
  }
  auto out = executor->run(feeds);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  for (int k = 0; k < 3; ++k) {
    const Tensor& a = *(*out)[k];
    const Tensor& e = *(*out)[k + 3];
    ASSERT_EQ(a.num_elements(), kN);
    for (int64_t i = 0; i < kN; ++i)
      ASSERT_EQ(a.float_at(i), e.float_at(i)) << dtype_name(dtype) << " output " << k << " " << i;
  }
}

TEST(Optimizers, FusedAdamIsBitIdenticalToItsChain) {
  expect_fused_adam_matches_chain(DType::kFloat32);
  expect_fused_adam_matches_chain(DType::kFloat64);
}

}  // namespace
}  // namespace autopar
