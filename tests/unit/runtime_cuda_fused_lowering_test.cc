// Llama's fused training ops as the CUDA lowering composes them (maps, row reductions,
// batched GEMMs), run on the host interpreter of device programs against the CPU kernels:
// the strides, GEMM parameters and launch order are checked without a GPU.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"
#include "testing/program_interpreter.h"
#include "testing/run_node.h"

namespace autopar::runtime {
namespace {

using testing::NodeRun;

Tensor random_tensor(DType dtype, std::vector<int64_t> dims, uint64_t seed, double lo = -1,
                     double hi = 1) {
  Tensor t(dtype, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(lo, hi);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, uniform(rng));
  return t;
}

// max |a − b| / max |b|, or over `floor` where b is smaller (a gradient that is zero but for
// round-off, as a key bias's: softmax ignores a shift of its row, is noise on both sides).
double relative_error(const Tensor& a, const Tensor& b, double floor = 1e-12) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    diff = std::max(diff, std::fabs(a.float_at(i) - b.float_at(i)));
    scale = std::max(scale, std::fabs(b.float_at(i)));
  }
  return diff / std::max(scale, floor);
}

// The node lowered and interpreted against the CPU executor, output by output; returns the
// launches' kinds.
std::string expect_interpreted(NodeRun node, const std::string& what, double tolerance) {
  std::vector<Feed> feeds;
  auto built = node.build(&feeds);
  EXPECT_TRUE(built.is_ok()) << what << ": " << built.status().message();
  if (!built.is_ok()) return "";
  const Graph& g = *built;
  auto cpu = Executor::create(g, ExecutorOptions{});
  EXPECT_TRUE(cpu.is_ok()) << what;
  auto expected = cpu->run(feeds);
  EXPECT_TRUE(expected.is_ok()) << what << ": " << expected.status().message();
  auto lowering = lower_for_cuda(g, CudaOptions{});
  EXPECT_TRUE(lowering.is_ok()) << what << ": " << lowering.status().message();
  if (!expected.is_ok() || !lowering.is_ok()) return "";
  testing::ProgramInterpreter device(**lowering);
  for (const auto& [id, t] : feeds) device.write(id, *t);
  const std::string failure = device.run();
  EXPECT_EQ(failure, "") << what;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value& v = g.value(g.outputs()[i]);
    const Tensor got = device.read(g.outputs()[i], v.dtype, v.shape.dims);
    EXPECT_LE(relative_error(got, *(*expected)[i]), tolerance) << what << " output " << v.name;
  }
  std::string kinds;
  for (const auto& [kind, n] : summarize(**lowering).launches_by_kind)
    kinds += (kinds.empty() ? "" : " ") + kind + " " + std::to_string(n);
  return kinds;
}

TEST(CudaFusedLowering, RmsNormAndItsGradient) {
  const std::string training(kTrainingDomain);
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    const double tol = t == DType::kBFloat16 ? 2e-2 : 1e-5;
    EXPECT_EQ(expect_interpreted(NodeRun("RMSNormalization", 17, training)
                                     .input(random_tensor(t, {6, 4, 32}, 200))
                                     .input(random_tensor(t, {32}, 201, 0.5, 1.5))
                                     .attr("axis", int64_t{1})
                                     .attr("epsilon", 1e-5f),
                                 "RMSNormalization", tol),
              "map 1 reduce 1");
    EXPECT_EQ(expect_interpreted(NodeRun("RMSNormalizationGrad", 17, training)
                                     .input(random_tensor(t, {6, 32}, 202))
                                     .input(random_tensor(t, {6, 32}, 203))
                                     .input(random_tensor(t, {32}, 204, 0.5, 1.5))
                                     .outputs(2),
                                 "RMSNormalizationGrad", tol),
              "map 2 reduce 2");
  }
}

TEST(CudaFusedLowering, RotaryEmbeddingBothWays) {
  const std::string training(kTrainingDomain);
  for (int64_t inverse : {0, 1}) {
    EXPECT_EQ(expect_interpreted(NodeRun("RotaryEmbedding", 17, training)
                                     .input(random_tensor(DType::kFloat32, {2, 3, 8, 16}, 205))
                                     .input(random_tensor(DType::kFloat32, {8, 16}, 206))
                                     .input(random_tensor(DType::kFloat32, {8, 16}, 207))
                                     .attr("inverse", inverse),
                                 "RotaryEmbedding inverse " + std::to_string(inverse), 1e-6),
              "map 1");
  }
}

TEST(CudaFusedLowering, SwiGluAndItsGradient) {
  const std::string training(kTrainingDomain);
  EXPECT_EQ(expect_interpreted(NodeRun("SwiGLU", 17, training)
                                   .input(random_tensor(DType::kFloat32, {4, 50}, 208, -3, 3))
                                   .input(random_tensor(DType::kFloat32, {4, 50}, 209)),
                               "SwiGLU", 1e-6),
            "map 1");
  EXPECT_EQ(expect_interpreted(NodeRun("SwiGLUGrad", 17, training)
                                   .input(random_tensor(DType::kFloat32, {4, 50}, 210))
                                   .input(random_tensor(DType::kFloat32, {4, 50}, 211, -3, 3))
                                   .input(random_tensor(DType::kFloat32, {4, 50}, 212))
                                   .outputs(2),
                               "SwiGLUGrad", 1e-6),
            "map 1");
}

// Four query heads over two key/value heads, a value width of its own, causal and not.
TEST(CudaFusedLowering, GroupedQueryAttentionForwardAndBackward) {
  const std::string training(kTrainingDomain);
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const double tol = t == DType::kBFloat16 ? 3e-2 : 1e-5;
    for (int64_t causal : {0, 1}) {
      const std::string what =
          "causal " + std::to_string(causal) + " " + std::string(dtype_name(t));
      EXPECT_EQ(expect_interpreted(NodeRun("Attention", 17, training)
                                       .input(random_tensor(t, {2, 4, 8, 16}, 213))
                                       .input(random_tensor(t, {2, 2, 8, 16}, 214))
                                       .input(random_tensor(t, {2, 2, 8, 12}, 215))
                                       .attr("causal", causal)
                                       .attr("scale", 0.25f)
                                       .outputs(2),
                                   "Attention " + what, tol),
                causal ? "map 4 matmul 2 reduce 2" : "map 3 matmul 2 reduce 2");
      EXPECT_EQ(expect_interpreted(NodeRun("AttentionGrad", 17, training)
                                       .input(random_tensor(t, {2, 4, 8, 12}, 216))
                                       .input(random_tensor(t, {2, 4, 8, 16}, 213))
                                       .input(random_tensor(t, {2, 2, 8, 16}, 214))
                                       .input(random_tensor(t, {2, 2, 8, 12}, 215))
                                       .input(random_tensor(t, {2, 4, 8, 12}, 217))
                                       .input(random_tensor(t, {2, 4, 8}, 218, 1, 2))
                                       .attr("causal", causal)
                                       .attr("scale", 0.25f)
                                       .outputs(3),
                                   "AttentionGrad " + what, tol),
                causal ? "map 4 matmul 5 reduce 1" : "map 3 matmul 5 reduce 1");
    }
  }
}

// One training step of each tiny zoo model that needs no convolution (the interpreter runs no
// cuDNN launch: resnet-tiny and vit-tiny's patch embedding are left to the GPU), lowered with
// its updates
// written back in place and run on the interpreter against the CPU executor: the loss and
// every updated state. SGD: an update is the gradient itself, so round-off in a gradient that
// is zero stays round-off (Adam's first step would scale it to the learning rate).
TEST(CudaFusedLowering, TinyTrainingStepsRunOnTheInterpreter) {
  for (const char* name : {"mlp", "gpt-tiny", "bert-tiny", "llama-tiny"}) {
    for (bool fused : {false, true}) {
      SCOPED_TRACE(std::string(name) + (fused ? " fused" : ""));
      ZooOptions zoo;
      zoo.batch = 4;
      zoo.with_weights = true;
      const Graph model = *build_zoo_model(name, zoo);
      TrainingOptions options;
      options.fused = fused;
      OptimizerSpec sgd;
      sgd.kind = OptimizerKind::kSgd;
      auto training = build_training_graph(model, {default_loss(model), ""}, sgd, options);
      ASSERT_TRUE(training.is_ok()) << training.status().message();
      const Graph& g = training->graph;
      std::vector<Feed> feeds;
      const std::vector<TensorPtr> inputs = synthetic_inputs(model, 3);
      for (size_t i = 0; i < inputs.size(); ++i)
        feeds.emplace_back(*g.find_value(model.value(model.inputs()[i]).name), inputs[i]);
      const Value& labels = g.value(training->labels);
      Tensor label_values(labels.dtype, labels.shape.dims);
      for (int64_t i = 0; i < label_values.num_elements(); ++i) label_values.set_from_int(i, i % 3);
      feeds.emplace_back(training->labels, std::make_shared<const Tensor>(std::move(label_values)));
      auto expected = Executor::create(g, ExecutorOptions{})->run(feeds);
      ASSERT_TRUE(expected.is_ok()) << expected.status().message();
      CudaOptions cuda_options;
      cuda_options.updates = training->updates;
      auto lowering = lower_for_cuda(g, cuda_options);
      ASSERT_TRUE(lowering.is_ok()) << lowering.status().message();
      testing::ProgramInterpreter device(**lowering);
      for (const auto& [id, t] : feeds) device.write(id, *t);
      ASSERT_EQ(device.run(), "");
      int64_t compared = 0;
      for (size_t i = 0; i < g.outputs().size(); ++i) {
        const Value& v = g.value(g.outputs()[i]);
        const Tensor got = device.read(g.outputs()[i], v.dtype, v.shape.dims);
        EXPECT_LE(relative_error(got, *(*expected)[i], 1e-6), 1e-4) << v.name;
        ++compared;
      }
      EXPECT_GT(compared, 2);
    }
  }
}

}  // namespace
}  // namespace autopar::runtime
