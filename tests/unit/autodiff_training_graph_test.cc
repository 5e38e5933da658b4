// The training graph: structure, phases and layers, state updates, losses and errors.
#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/verify.h"
#include "autopar/onnx/onnx_check.h"
#include "autopar/onnx/onnx_export.h"
#include "autopar/runtime/executor.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

Graph zoo(const std::string& name, std::optional<int64_t> classes = std::nullopt) {
  ZooOptions options;
  options.batch = 2;
  options.classes = classes;
  auto g = build_zoo_model(name, options);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return g.is_ok() ? std::move(g).value() : Graph();
}

int64_t count_phase(const Graph& g, Phase phase) {
  int64_t n = 0;
  for (const Node& node : g.nodes()) n += node.phase == phase ? 1 : 0;
  return n;
}

TEST(TrainingGraph, GptTinyWithAdam) {
  const Graph model = zoo("gpt-tiny");
  auto training = build_training_graph(model, {}, {});
  ASSERT_TRUE(training.is_ok()) << training.status().message();
  const Graph& g = training->graph;
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).message();
  const int64_t params = static_cast<int64_t>(model.parameters().size());
  // Adam: m and v per parameter, the parameter itself, and one step counter.
  EXPECT_EQ(static_cast<int64_t>(training->updates.size()), 3 * params + 1);
  EXPECT_EQ(static_cast<int64_t>(training->gradients.size()), params);
  EXPECT_EQ(g.outputs().size(), training->updates.size() + 1);
  EXPECT_EQ(g.outputs()[0], training->loss);
  EXPECT_EQ(g.value(training->loss).shape.rank(), 0);
  EXPECT_EQ(g.value(training->labels).dtype, DType::kInt64);
  EXPECT_EQ(g.value(training->labels).shape.dims, (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(g.opset(), 17);
  // The model's own forward nodes stay (minus none: every one feeds the loss), then the loss.
  EXPECT_EQ(count_phase(g, Phase::kForward), model.num_nodes() + 3);
  EXPECT_GT(count_phase(g, Phase::kBackward), model.num_nodes());
  // Backward nodes keep their forward node's layer: the four identical blocks get equal counts.
  std::map<int32_t, int64_t> backward_per_layer;
  for (const Node& n : g.nodes()) {
    if (n.phase == Phase::kBackward && n.layer >= 0) ++backward_per_layer[n.layer];
  }
  ASSERT_EQ(backward_per_layer.size(), 4u);
  for (const auto& [layer, count] : backward_per_layer)
    EXPECT_EQ(count, backward_per_layer[0]) << layer;
  for (const auto& [state, next] : training->updates) {
    EXPECT_EQ(g.value(next).name, g.value(state).name + ".updated");
    EXPECT_EQ(g.value(next).shape.dims, g.value(state).shape.dims);
  }
  // The tied embedding gets one gradient summed from its two uses.
  const ValueId wte = *g.find_value("wte.weight");
  int summed = 0;
  for (const auto& [param, grad] : training->gradients) {
    if (param == wte) summed += g.node(g.value(grad).producer).op_type == "Add" ? 1 : 0;
  }
  EXPECT_EQ(summed, 1);
  EXPECT_TRUE(check_onnx_model(export_onnx(g), "train.onnx").is_ok());
}

TEST(TrainingGraph, ResnetBatchNormTrainsWithBatchStatistics) {
  const Graph model = zoo("resnet-tiny");
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::kSgd;
  auto training = build_training_graph(model, {}, sgd);
  ASSERT_TRUE(training.is_ok()) << training.status().message();
  const Graph& g = training->graph;
  int64_t batch_norms = 0;
  for (const Node& n : g.nodes()) {
    if (n.op_type != "BatchNormalization") continue;
    ++batch_norms;
    EXPECT_EQ(n.attr_int("training_mode", 0), 1) << n.name;
    EXPECT_EQ(n.outputs.size(), 3u);
  }
  EXPECT_GT(batch_norms, 0);
  const int64_t params = static_cast<int64_t>(model.parameters().size());
  // SGD with momentum: parameter and velocity each; BatchNorm: two running statistics.
  EXPECT_EQ(static_cast<int64_t>(training->updates.size()), 2 * params + 2 * batch_norms);
  EXPECT_TRUE(verify(g).is_ok());
}

TEST(TrainingGraph, MseForRegressionOutputs) {
  const Graph model = zoo("mlp", 1);
  EXPECT_EQ(default_loss(model), LossKind::kMse);
  LossSpec mse;
  mse.kind = LossKind::kMse;
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.momentum = 0;
  auto training = build_training_graph(model, mse, sgd);
  ASSERT_TRUE(training.is_ok()) << training.status().message();
  const Value& targets = training->graph.value(training->labels);
  EXPECT_EQ(targets.dtype, DType::kFloat32);
  EXPECT_EQ(targets.shape.dims, model.value(model.outputs()[0]).shape.dims);
  // Plain SGD keeps no state: one update per parameter.
  EXPECT_EQ(training->updates.size(), model.parameters().size());
  EXPECT_EQ(default_loss(zoo("mlp")), LossKind::kCrossEntropy);
}

TEST(TrainingGraph, Errors) {
  const Graph regression = zoo("mlp", 1);
  EXPECT_EQ(build_training_graph(regression, {LossKind::kCrossEntropy, ""}, {}).status().message(),
            "cross_entropy: output 'logits' f32[2,1] has no class axis (its last dim must count at "
            "least 2 classes); use --loss mse");
  OptimizerSpec bad;
  bad.lr = -1;
  EXPECT_EQ(build_training_graph(regression, {LossKind::kMse, ""}, bad).status().message(),
            "--lr -1: must be positive and finite");
  OptimizerSpec beta;
  beta.beta2 = 1.0;
  EXPECT_EQ(beta.validate().message(), "--beta2 1: must be in [0, 1)");
  OptimizerSpec momentum;
  momentum.kind = OptimizerKind::kSgd;
  momentum.momentum = 1.5;
  EXPECT_EQ(momentum.validate().message(), "--momentum 1.5: must be in [0, 1)");
  Graph old = regression;
  old.opsets[""] = 11;
  EXPECT_EQ(build_training_graph(old, {LossKind::kMse, ""}, {}).status().message(),
            "training needs ai.onnx opset 13 or newer (the model imports 11)");
  EXPECT_EQ(parse_loss("hinge").status().message(), "--loss hinge: expected cross_entropy or mse");
  EXPECT_EQ(parse_optimizer("lion").status().message(),
            "--optimizer lion: expected sgd, adam or adamw");
}

}  // namespace
}  // namespace autopar

namespace autopar {
namespace {

// One SGD step (lr 1) of a zoo model with its standard training graph and with its fused one:
// every updated state tensor, by name, and the fused graph's training-domain ops, by type.
struct Steps {
  std::map<std::string, std::vector<float>> stepped[2];
  std::map<std::string, int> fused_ops;
};

Steps step_both_ways(const std::string& name, bool attention = false) {
  Steps steps;
  ZooOptions options;
  options.batch = 2;
  auto model = build_zoo_model(name, options);
  EXPECT_TRUE(model.is_ok());
  if (!model.is_ok()) return steps;
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.lr = 1.0;
  sgd.momentum = 0;
  for (int fused = 0; fused < 2; ++fused) {
    auto training =
        build_training_graph(*model, {LossKind::kCrossEntropy, ""}, sgd,
                             {.fused = fused == 1, .fuse_attention = fused == 1 && attention});
    EXPECT_TRUE(training.is_ok()) << training.status().message();
    if (!training.is_ok()) return steps;
    const Graph& g = training->graph;
    for (const Node& n : g.nodes()) {
      if (fused == 1 && n.domain == kTrainingDomain) ++steps.fused_ops[n.op_type];
      if (fused == 0) {
        EXPECT_TRUE(n.domain.empty()) << n.op_type;
      }
    }
    auto executor = runtime::Executor::create(g, {.num_threads = 1});
    EXPECT_TRUE(executor.is_ok()) << executor.status().message();
    if (!executor.is_ok()) return steps;
    std::vector<runtime::Feed> feeds;
    for (ValueId in : g.inputs()) {
      const Value& v = g.value(in);
      if (v.is_initializer()) continue;
      Tensor t(v.dtype, v.shape.dims);
      for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, (i * 7) % 13);
      feeds.push_back({in, std::make_shared<const Tensor>(std::move(t))});
    }
    for (const auto& [state, next] : training->updates)
      feeds.push_back({state, g.value(state).data});
    auto out = executor->run(feeds);
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    if (!out.is_ok()) return steps;
    for (size_t k = 0; k < training->updates.size(); ++k) {
      const Tensor& t = *(*out)[k + 1];
      std::vector<float>& values = steps.stepped[fused][g.value(training->updates[k].first).name];
      for (int64_t i = 0; i < t.num_elements(); ++i)
        values.push_back(static_cast<float>(t.float_at(i)));
    }
  }
  return steps;
}

void expect_same_step(const Steps& steps) {
  ASSERT_EQ(steps.stepped[0].size(), steps.stepped[1].size());
  for (const auto& [name, values] : steps.stepped[0]) {
    const std::vector<float>& other = steps.stepped[1].at(name);
    ASSERT_EQ(values.size(), other.size()) << name;
    for (size_t i = 0; i < values.size(); ++i)
      ASSERT_NEAR(values[i], other[i], 2e-5 * std::max(1.0f, std::fabs(values[i])))
          << name << " " << i;
  }
}

// Fused training ops compute what the standard ones do: one SGD step of gpt-tiny (whose norms
// are LayerNormalizations, their gradients one fused node each, and whose MLPs' erf GELUs are
// one Gelu node each, with one GeluGrad) moves every parameter as the standard graph's step
// does, to float32 rounding.
TEST(TrainingGraph, FusedOpsTrainAsTheStandardOnes) {
  const Steps steps = step_both_ways("gpt-tiny");
  EXPECT_EQ(steps.fused_ops.at("LayerNormalizationGrad"), 9);  // 4 layers × 2, the final norm
  EXPECT_EQ(steps.fused_ops.at("Gelu"), 4);
  EXPECT_EQ(steps.fused_ops.at("GeluGrad"), 4);
  expect_same_step(steps);
}

// The same for llama-tiny, whose written-out RMSNorms, rotary embeddings (of queries and keys)
// and SwiGLUs the training graph fuses: the rotations' gradients are inverse rotations.
TEST(TrainingGraph, FusedLlamaOpsTrainAsTheStandardOnes) {
  const Steps steps = step_both_ways("llama-tiny");
  const std::map<std::string, int> expected = {{"RMSNormalization", 9},
                                               {"RMSNormalizationGrad", 9},
                                               {"RotaryEmbedding", 16},
                                               {"SwiGLU", 4},
                                               {"SwiGLUGrad", 4}};
  EXPECT_EQ(steps.fused_ops, expected);
  expect_same_step(steps);
}

// With attention fused too (as context parallelism lowers it): each layer's causal,
// grouped-query softmax(Q·Kᵀ/√d + mask)·V (its mask computed from positions, its keys and values
// repeated onto the query heads) is one Attention, differentiated by one AttentionGrad, and the
// step moves every parameter as the standard graph's does. GPT-2's attention, whose keys are
// transposed straight from [b, s, heads, d] to [b, heads, d, s], fuses too: the keys reach
// Attention through one Transpose to [b, heads, s, d].
TEST(TrainingGraph, FusedAttentionTrainsAsTheStandardOne) {
  const Steps steps = step_both_ways("llama-tiny", true);
  const std::map<std::string, int> expected = {{"Attention", 4},        {"AttentionGrad", 4},
                                               {"RMSNormalization", 9}, {"RMSNormalizationGrad", 9},
                                               {"RotaryEmbedding", 16}, {"SwiGLU", 4},
                                               {"SwiGLUGrad", 4}};
  EXPECT_EQ(steps.fused_ops, expected);
  expect_same_step(steps);
  const Steps gpt = step_both_ways("gpt-tiny", true);
  EXPECT_EQ(gpt.fused_ops.at("Attention"), 4);
  EXPECT_EQ(gpt.fused_ops.at("AttentionGrad"), 4);
  expect_same_step(gpt);
}

}  // namespace
}  // namespace autopar
