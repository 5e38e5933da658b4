// Whole-model gradient checks: the training graph's parameter gradients of every tiny zoo
// model, in f64, against central differences of its loss.
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/precision.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

// The first disagreement, or "" when every checked element agrees.
// `attention`: with attention fused into Attention ops (each layer's must fuse).
std::string check_model(const std::string& name, int elements_per_parameter, bool fused = false,
                        bool attention = false) {
  ZooOptions zoo;
  zoo.batch = 2;
  zoo.with_weights = true;
  auto model = build_zoo_model(name, zoo);
  if (!model.is_ok()) return model.status().message();
  change_float_type(*model, DType::kFloat32, DType::kFloat64);
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.momentum = 0;
  LossSpec loss;
  loss.kind = default_loss(*model);
  auto training =
      build_training_graph(*model, loss, sgd, {.fused = fused, .fuse_attention = attention});
  if (!training.is_ok()) return training.status().message();
  Graph g = training->graph;
  if (attention) {
    int fused_attention = 0, gradients = 0;
    for (NodeId n = 0; n < g.num_nodes(); ++n) {
      fused_attention += g.node(n).op_type == "Attention";
      gradients += g.node(n).op_type == "AttentionGrad";
    }
    int layers = 0;
    for (NodeId n = 0; n < model->num_nodes(); ++n)
      layers = std::max(layers, model->node(n).layer + 1);
    if (fused_attention != layers || gradients != layers)
      return fmt::format("{}: {} Attention and {} AttentionGrad nodes for {} layers", name,
                         fused_attention, gradients, layers);
  }
  std::vector<ValueId> outputs = {training->loss};
  for (const auto& [param, grad] : training->gradients) outputs.push_back(grad);
  g.set_outputs(outputs);

  std::vector<runtime::Feed> feeds;
  const std::vector<TensorPtr> inputs = runtime::synthetic_inputs(*model, 3);
  for (size_t i = 0; i < inputs.size(); ++i) {
    feeds.emplace_back(*g.find_value(model->value(model->inputs()[i]).name), inputs[i]);
  }
  const Value& labels = g.value(training->labels);
  Tensor label_data(labels.dtype, labels.shape.dims);
  std::mt19937_64 rng(11);
  const int64_t classes = model->value(model->outputs()[0]).shape.dims.back();
  for (int64_t i = 0; i < label_data.num_elements(); ++i) {
    if (is_floating(labels.dtype)) {
      label_data.set_from_double(i, std::uniform_real_distribution<double>(-1, 1)(rng));
    } else {
      label_data.set_from_int(i, std::uniform_int_distribution<int64_t>(0, classes - 1)(rng));
    }
  }
  feeds.emplace_back(training->labels, std::make_shared<const Tensor>(std::move(label_data)));

  runtime::ExecutorOptions options;
  options.num_threads = 2;
  auto executor = runtime::Executor::create(g, options);
  if (!executor.is_ok()) return executor.status().message();
  auto analytic = executor->run(feeds);
  if (!analytic.is_ok()) return analytic.status().message();
  auto loss_with = [&](ValueId param, const Tensor& value) {
    std::vector<runtime::Feed> perturbed = feeds;
    perturbed.emplace_back(param, std::make_shared<const Tensor>(value));
    auto result = executor->run(perturbed);
    return result.is_ok() ? (*result)[0]->float_at(0) : std::nan("");
  };
  for (size_t k = 0; k < training->gradients.size(); ++k) {
    const ValueId param = training->gradients[k].first;
    const Tensor& value = *g.value(param).data;
    const Tensor& grad = *(*analytic)[k + 1];
    std::mt19937_64 pick(k);
    for (int e = 0; e < elements_per_parameter; ++e) {
      const int64_t at = std::uniform_int_distribution<int64_t>(0, value.num_elements() - 1)(pick);
      const double h = 1e-6;
      Tensor plus = value, minus = value;
      plus.set_from_double(at, value.float_at(at) + h);
      minus.set_from_double(at, value.float_at(at) - h);
      const double numeric = (loss_with(param, plus) - loss_with(param, minus)) / (2 * h);
      const double a = grad.float_at(at);
      if (!(std::fabs(a - numeric) <= 1e-7 + 1e-4 * std::fabs(numeric))) {
        return fmt::format("{}: parameter '{}' element {}: analytic {:.10g}, numeric {:.10g}", name,
                           g.value(param).name, at, a, numeric);
      }
    }
  }
  return "";
}

TEST(ModelGradients, Mlp) { EXPECT_EQ(check_model("mlp", 3), ""); }
TEST(ModelGradients, GptTiny) { EXPECT_EQ(check_model("gpt-tiny", 2), ""); }
// Llama's RMSNorm, rotary embeddings, grouped-query attention and SwiGLU, written out as the
// exporter writes them and fused (ai.autopar.training ops) as the lowering trains them.
TEST(ModelGradients, LlamaTiny) { EXPECT_EQ(check_model("llama-tiny", 2), ""); }
TEST(ModelGradients, LlamaTinyFused) { EXPECT_EQ(check_model("llama-tiny", 2, true), ""); }
// FlashAttention's form: Attention and AttentionGrad (grouped-query, causal) in every layer.
TEST(ModelGradients, LlamaTinyFusedAttention) {
  EXPECT_EQ(check_model("llama-tiny", 2, true, true), "");
}
TEST(ModelGradients, BertTiny) { EXPECT_EQ(check_model("bert-tiny", 2), ""); }
TEST(ModelGradients, ResnetTiny) { EXPECT_EQ(check_model("resnet-tiny", 2), ""); }
TEST(ModelGradients, VitTiny) { EXPECT_EQ(check_model("vit-tiny", 2), ""); }

}  // namespace
}  // namespace autopar
