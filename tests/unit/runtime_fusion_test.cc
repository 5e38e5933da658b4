// Elementwise fusion gives the bits of node-by-node execution, and never more memory.
#include <cmath>

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

// Exp, Erf and Tanh run in tiles at fixed offsets, so Eigen's vector and scalar paths cover
// the same elements whatever the thread count: one and two threads give the same bits.
TEST(ElementwiseFusion, TranscendentalsDoNotDependOnTheThreadCount) {
  for (const char* op : {"Exp", "Erf", "Tanh"}) {
    Graph g;
    Value x;
    x.name = "x";
    x.dtype = DType::kFloat32;
    x.shape = Shape({3, 1111});
    x.kind = ValueKind::kInput;
    const ValueId xi = g.add_value(std::move(x));
    g.add_input(xi);
    Value y;
    y.name = "y";
    y.shape = Shape::unknown();
    const ValueId yi = g.add_value(std::move(y));
    Node n;
    n.name = "n";
    n.op_type = op;
    n.inputs = {xi};
    n.outputs = {yi};
    g.add_node(std::move(n));
    g.mutable_value(yi).dtype = DType::kFloat32;
    g.mutable_value(yi).shape = Shape({3, 1111});
    g.add_output(yi);
    Tensor input(DType::kFloat32, {3, 1111});
    for (int64_t i = 0; i < input.num_elements(); ++i)
      input.set_from_double(i, std::sin(0.37 * static_cast<double>(i)) * 4.0);
    const std::vector<TensorPtr> inputs = {std::make_shared<const Tensor>(input)};
    ExecutorOptions one, two;
    one.num_threads = 1;
    two.num_threads = 2;
    auto a = Executor::create(g, one)->run_inputs(inputs);
    auto b = Executor::create(g, two)->run_inputs(inputs);
    ASSERT_TRUE(a.is_ok() && b.is_ok()) << op;
    EXPECT_EQ(*(*a)[0], *(*b)[0]) << op;
  }
}

}  // namespace
}  // namespace autopar::runtime
