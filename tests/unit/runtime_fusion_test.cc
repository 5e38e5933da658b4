// Elementwise fusion gives the bits of node-by-node execution, and never more memory.
#include <gtest/gtest.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"

namespace autopar::runtime {
namespace {

void expect_same_step(const std::string& name, OptimizerKind optimizer) {
  ZooOptions zoo;
  zoo.batch = 2;
  zoo.with_weights = true;
  const Graph model = *build_zoo_model(name, zoo);
  OptimizerSpec spec;
  spec.kind = optimizer;
  auto training = build_training_graph(model, {default_loss(model), ""}, spec);
  ASSERT_TRUE(training.is_ok()) << training.status().message();
  const Graph& g = training->graph;
  std::vector<Feed> feeds;
  const std::vector<TensorPtr> inputs = synthetic_inputs(model, 4);
  for (size_t i = 0; i < inputs.size(); ++i)
    feeds.emplace_back(*g.find_value(model.value(model.inputs()[i]).name), inputs[i]);
  feeds.emplace_back(training->labels,
                     std::make_shared<const Tensor>(g.value(training->labels).dtype,
                                                    g.value(training->labels).shape.dims));
  RunStats fused_stats, plain_stats;
  ExecutorOptions fused_options;
  fused_options.num_threads = 2;
  ExecutorOptions plain_options = fused_options;
  plain_options.fuse_elementwise = false;
  auto fused = Executor::create(g, fused_options)->run(feeds, &fused_stats);
  auto plain = Executor::create(g, plain_options)->run(feeds, &plain_stats);
  ASSERT_TRUE(fused.is_ok()) << fused.status().message();
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  ASSERT_EQ(fused->size(), plain->size());
  for (size_t i = 0; i < fused->size(); ++i) {
    EXPECT_EQ(*(*fused)[i], *(*plain)[i]) << name << " output " << g.value(g.outputs()[i]).name;
  }
  EXPECT_LE(fused_stats.peak_activation_bytes, plain_stats.peak_activation_bytes);
}

TEST(ElementwiseFusion, GptTinyAdamStepIsBitIdentical) {
  expect_same_step("gpt-tiny", OptimizerKind::kAdam);
}
TEST(ElementwiseFusion, ResnetTinySgdStepIsBitIdentical) {
  expect_same_step("resnet-tiny", OptimizerKind::kSgd);
}
TEST(ElementwiseFusion, MlpAdamWStepIsBitIdentical) {
  expect_same_step("mlp", OptimizerKind::kAdamW);
}

}  // namespace
}  // namespace autopar::runtime
