// The CUDA backend against the CPU executor: every kernel on random data in float32, bfloat16
// and float16 (float32 within 1e-5 relative, half types within 1e-2, every output element
// written over a poisoned arena), and one training step of each tiny zoo model. Skips, saying
// why, where no GPU can be used.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"
#include "testing/cuda_cases.h"
#include "testing/run_node.h"

namespace autopar::runtime {
namespace {

using testing::boolean;
using testing::f32;
using testing::i64;
using testing::index_tensor;
using testing::NodeRun;
using testing::random_tensor;

// Without a GPU the cases still run their host side (the CPU result and the lowering) and
// the test skips at its end, saying why.
bool have_gpu() { return cuda_unavailable_reason().empty(); }
#define SKIP_WITHOUT_GPU()                                                            \
  do {                                                                                \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason(); \
  } while (0)

// ‖a − b‖ / ‖b‖ (absolute when b is zero); NaN anywhere is infinite.
double relative_error(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    const double x = a.float_at(i), y = b.float_at(i);
    if (std::isnan(x) != std::isnan(y)) return INFINITY;
    if (std::isnan(x)) continue;
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

double tolerance_for(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16 ? 1e-2 : 1e-5;
}

// Runs the node on the CPU and on the GPU (arena poisoned) and compares every output.
void expect_agrees(NodeRun node, const std::string& what, double tolerance = -1) {
  std::vector<Feed> feeds;
  auto built = node.build(&feeds);
  ASSERT_TRUE(built.is_ok()) << what << ": " << built.status().message();
  const Graph& g = *built;
  ExecutorOptions cpu_options;
  cpu_options.num_threads = 2;
  auto cpu = Executor::create(g, cpu_options);
  ASSERT_TRUE(cpu.is_ok()) << what << ": " << cpu.status().message();
  auto expected = cpu->run(feeds);
  ASSERT_TRUE(expected.is_ok()) << what << ": " << expected.status().message();
  CudaOptions options;
  options.poison_arena = true;
  auto lowering = lower_for_cuda(g, options);
  ASSERT_TRUE(lowering.is_ok()) << what << ": " << lowering.status().message();
  if (!have_gpu()) return;
  auto gpu = CudaExecutor::create(g, options);
  ASSERT_TRUE(gpu.is_ok()) << what << ": " << gpu.status().message();
  auto got = (*gpu)->run(feeds);
  ASSERT_TRUE(got.is_ok()) << what << ": " << got.status().message();
  ASSERT_EQ(got->size(), expected->size());
  for (size_t i = 0; i < got->size(); ++i) {
    const Tensor& e = *(*expected)[i];
    const Tensor& a = *(*got)[i];
    ASSERT_EQ(a.dims(), e.dims()) << what;
    const double tol = tolerance >= 0 ? tolerance : tolerance_for(e.dtype());
    if (!is_floating(e.dtype())) {
      EXPECT_EQ(a.to_int64_vector(), e.to_int64_vector()) << what << " output " << i;
      continue;
    }
    EXPECT_LE(relative_error(a, e), tol) << what << " output " << i;
  }
}

// Each kernel test runs its cases' host side everywhere and skips at the end without a GPU.
class CudaKernels : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!have_gpu() && !HasFailure())
      GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

const std::vector<DType>& float_types() {
  static const std::vector<DType> types = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  return types;
}

std::string label(const std::string& op, DType dtype) {
  return op + " " + std::string(dtype_name(dtype));
}

TEST_F(CudaKernels, UnaryOps) {
  for (DType t : float_types()) {
    for (const char* op : {"Relu", "Sigmoid", "Tanh", "Exp", "Erf", "Neg", "Abs", "Softplus",
                           "Softsign", "HardSwish", "Floor", "Ceil", "Sign"}) {
      expect_agrees(NodeRun(op).input(random_tensor(t, {3, 5, 67}, 1, -3, 3)), label(op, t));
    }
    for (const char* op : {"Log", "Sqrt", "Reciprocal"})
      expect_agrees(NodeRun(op).input(random_tensor(t, {3, 5, 67}, 2, 0.1, 4)), label(op, t));
    expect_agrees(NodeRun("LeakyRelu").input(random_tensor(t, {1000}, 3)).attr("alpha", 0.2f),
                  label("LeakyRelu", t));
    expect_agrees(NodeRun("Elu").input(random_tensor(t, {1000}, 3)), label("Elu", t));
    expect_agrees(NodeRun("Gelu", 17, std::string(kTrainingDomain))
                      .input(random_tensor(t, {4, 300}, 4, -4, 4)),
                  label("Gelu", t));
  }
}

TEST_F(CudaKernels, BinaryOpsWithBroadcasting) {
  for (DType t : float_types()) {
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
      expect_agrees(
          NodeRun(op).input(random_tensor(t, {4, 5, 6}, 5)).input(random_tensor(t, {6}, 6, 0.5, 2)),
          label(op, t) + " row");
      expect_agrees(NodeRun(op)
                        .input(random_tensor(t, {4, 1, 6}, 7))
                        .input(random_tensor(t, {4, 5, 1}, 8, 0.5, 2)),
                    label(op, t) + " outer");
    }
    expect_agrees(NodeRun("Pow")
                      .input(random_tensor(t, {4, 64}, 9, 0.1, 3))
                      .input(random_tensor(t, {64}, 10, -2, 2)),
                  label("Pow", t));
    for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
      Tensor a = random_tensor(t, {3, 40}, 11);
      expect_agrees(NodeRun(op).input(a).input(random_tensor(t, {40}, 12)), label(op, t));
    }
    expect_agrees(NodeRun("GeluGrad", 17, std::string(kTrainingDomain))
                      .input(random_tensor(t, {8, 96}, 13))
                      .input(random_tensor(t, {8, 96}, 14, -3, 3)),
                  label("GeluGrad", t));
  }
  Tensor cond(DType::kBool, {4, 9});
  for (int64_t i = 0; i < cond.num_elements(); ++i) cond.set_from_int(i, (i * 7) % 3 == 0);
  expect_agrees(NodeRun("Where")
                    .input(cond)
                    .input(random_tensor(DType::kFloat32, {4, 9}, 15))
                    .input(random_tensor(DType::kFloat32, {9}, 16)),
                "Where");
  expect_agrees(NodeRun("Div").input(index_tensor({50}, 1000, 17)).input(i64({1}, {7})),
                "Div int64");
  expect_agrees(NodeRun("Sum")
                    .input(random_tensor(DType::kFloat32, {3, 8}, 18))
                    .input(random_tensor(DType::kFloat32, {8}, 19))
                    .input(random_tensor(DType::kFloat32, {3, 8}, 20)),
                "Sum of 3");
  expect_agrees(NodeRun("Clip")
                    .input(random_tensor(DType::kFloat32, {100}, 21, -2, 2))
                    .constant(f32({}, {-0.5f}))
                    .constant(f32({}, {0.7f})),
                "Clip");
}

TEST_F(CudaKernels, Casts) {
  auto cast = [](Tensor x, DType to) {
    return std::move(
        NodeRun("Cast").input(std::move(x)).attr("to", static_cast<int64_t>(dtype_to_onnx(to))));
  };
  expect_agrees(cast(random_tensor(DType::kFloat32, {100}, 22, -50, 50), DType::kInt64),
                "Cast f32->i64");
  expect_agrees(cast(index_tensor({100}, 1000, 23), DType::kFloat32), "Cast i64->f32");
  expect_agrees(cast(random_tensor(DType::kFloat32, {100}, 24), DType::kBFloat16), "Cast f32->bf16",
                0);
  expect_agrees(cast(random_tensor(DType::kFloat32, {100}, 25), DType::kFloat16), "Cast f32->f16",
                0);
  expect_agrees(cast(random_tensor(DType::kBFloat16, {100}, 26), DType::kFloat32), "Cast bf16->f32",
                0);
  expect_agrees(cast(random_tensor(DType::kFloat32, {100}, 27, -2, 2), DType::kBool),
                "Cast f32->bool");
}

TEST_F(CudaKernels, MatMulAndGemm) {
  for (DType t : float_types()) {
    expect_agrees(NodeRun("MatMul")
                      .input(random_tensor(t, {2, 3, 64, 32}, 30))
                      .input(random_tensor(t, {32, 48}, 31)),
                  label("MatMul shared weight", t));
    expect_agrees(NodeRun("MatMul")
                      .input(random_tensor(t, {2, 3, 64, 32}, 32))
                      .input(random_tensor(t, {2, 3, 32, 40}, 33)),
                  label("MatMul batched", t));
    expect_agrees(NodeRun("MatMul")
                      .input(random_tensor(t, {2, 1, 16, 8}, 34))
                      .input(random_tensor(t, {1, 3, 8, 24}, 35)),
                  label("MatMul broadcast", t));
    expect_agrees(NodeRun("Gemm")
                      .input(random_tensor(t, {40, 24}, 36))
                      .input(random_tensor(t, {56, 40}, 37))
                      .input(random_tensor(t, {56}, 38))
                      .attr("transA", int64_t{1})
                      .attr("transB", int64_t{1})
                      .attr("alpha", 0.5f)
                      .attr("beta", 2.0f),
                  label("Gemm", t));
  }
}

TEST_F(CudaKernels, ReductionsAndRowOps) {
  for (DType t : float_types()) {
    const Tensor x = random_tensor(t, {6, 50, 33}, 40);
    expect_agrees(NodeRun("ReduceSum").input(x).constant(i64({1}, {1})),
                  label("ReduceSum axis 1", t));
    expect_agrees(NodeRun("ReduceMean", 17)
                      .input(x)
                      .attr("axes", std::vector<int64_t>{-1})
                      .attr("keepdims", int64_t{0}),
                  label("ReduceMean last", t));
    expect_agrees(NodeRun("ReduceMax", 17).input(x).attr("axes", std::vector<int64_t>{0, 2}),
                  label("ReduceMax", t));
    expect_agrees(
        NodeRun("ReduceSum").input(random_tensor(t, {5000, 4}, 41)).constant(i64({1}, {0})),
        label("ReduceSum long", t));
    expect_agrees(NodeRun("Softmax").input(x), label("Softmax last", t));
    expect_agrees(NodeRun("Softmax").input(x).attr("axis", int64_t{1}), label("Softmax middle", t));
    expect_agrees(NodeRun("LogSoftmax").input(random_tensor(t, {4, 1500}, 42, -5, 5)),
                  label("LogSoftmax", t));
    expect_agrees(NodeRun("LayerNormalization")
                      .input(random_tensor(t, {4, 7, 96}, 43))
                      .input(random_tensor(t, {96}, 44))
                      .input(random_tensor(t, {96}, 45))
                      .attr("stash_type", int64_t{1})
                      .outputs(3),
                  label("LayerNormalization", t));
    expect_agrees(NodeRun("LayerNormalizationGrad", 17, std::string(kTrainingDomain))
                      .input(random_tensor(t, {4, 7, 96}, 46))
                      .input(random_tensor(t, {4, 7, 96}, 47))
                      .input(random_tensor(t, {96}, 48))
                      .outputs(2),
                  label("LayerNormalizationGrad", t));
    expect_agrees(NodeRun("GlobalAveragePool").input(random_tensor(t, {2, 8, 9, 9}, 49)),
                  label("GlobalAveragePool", t));
  }
  expect_agrees(NodeRun("SoftmaxCrossEntropyLoss")
                    .input(random_tensor(DType::kFloat32, {64, 300}, 55, -4, 4))
                    .input(index_tensor({64}, 300, 56))
                    .outputs(2),
                "SoftmaxCrossEntropyLoss mean");
  expect_agrees(NodeRun("SoftmaxCrossEntropyLoss")
                    .input(random_tensor(DType::kFloat32, {4, 10, 7}, 57))
                    .input(index_tensor({4, 7}, 10, 58))
                    .attr("reduction", std::string("none")),
                "SoftmaxCrossEntropyLoss none");
}

TEST_F(CudaKernels, ShapeOps) {
  const Tensor x = random_tensor(DType::kFloat32, {4, 6, 10}, 60);
  expect_agrees(NodeRun("Transpose").input(x).attr("perm", std::vector<int64_t>{2, 0, 1}),
                "Transpose");
  expect_agrees(NodeRun("Slice")
                    .input(x)
                    .constant(i64({2}, {1, -8}))
                    .constant(i64({2}, {4, 100}))
                    .constant(i64({2}, {1, 2}))
                    .constant(i64({2}, {1, 2})),
                "Slice with steps");
  expect_agrees(NodeRun("Concat")
                    .input(x)
                    .input(random_tensor(DType::kFloat32, {4, 3, 10}, 61))
                    .attr("axis", int64_t{1}),
                "Concat");
  expect_agrees(
      NodeRun("Split").input(x).constant(i64({2}, {2, 4})).attr("axis", int64_t{1}).outputs(2),
      "Split");
  expect_agrees(NodeRun("Expand")
                    .input(random_tensor(DType::kFloat32, {4, 1, 10}, 62))
                    .constant(i64({3}, {4, 6, 10})),
                "Expand");
  expect_agrees(
      NodeRun("Tile").input(random_tensor(DType::kFloat32, {2, 3}, 63)).constant(i64({2}, {3, 2})),
      "Tile");
  expect_agrees(
      NodeRun("Pad").input(x).constant(i64({6}, {0, 1, 2, 0, 2, -1})).constant(f32({}, {0.5f})),
      "Pad");
  expect_agrees(NodeRun("Reshape").input(x).constant(i64({2}, {24, 10})), "Reshape");
}

TEST_F(CudaKernels, IndexingOps) {
  for (DType t : float_types()) {
    expect_agrees(NodeRun("Gather")
                      .input(random_tensor(t, {100, 64}, 70))
                      .input(index_tensor({3, 16}, 100, 71)),
                  label("Gather rows", t));
  }
  expect_agrees(NodeRun("Gather")
                    .input(random_tensor(DType::kFloat32, {5, 9, 4}, 72))
                    .input(i64({3}, {8, -1, 0}))
                    .attr("axis", int64_t{1}),
                "Gather axis 1, negative index");
  for (testing::OpCase& c : testing::indexing_op_cases(DType::kFloat32))
    expect_agrees(std::move(c.node), c.what, 1e-5);
  expect_agrees(NodeRun("ScatterND")
                    .input(random_tensor(DType::kFloat32, {5, 6, 7}, 79))
                    .input(i64({2, 2}, {0, 1, 4, 5}))
                    .input(random_tensor(DType::kFloat32, {2, 7}, 80)),
                "ScatterND");
  // Adding many updates into a few rows (an embedding's gradient over two token types) runs
  // the kernel that sums per row in shared memory first; 1000 tuples into 3 rows of 300, one
  // of them out of its negative range's wrap (-1 is row 2).
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    Tensor rows = index_tensor({1000, 1}, 3, 81);
    rows.set_from_int(7, -1);
    expect_agrees(NodeRun("ScatterND", 16)
                      .input(random_tensor(t, {3, 300}, 82))
                      .input(rows)
                      .input(random_tensor(t, {1000, 300}, 83))
                      .attr("reduction", std::string("add")),
                  label("ScatterND add into few rows", t));
  }
  Tensor ids = index_tensor({640, 1}, 5, 84);
  expect_agrees(NodeRun("ScatterND", 16)
                    .input(index_tensor({5, 33}, 100, 85))
                    .input(ids)
                    .input(index_tensor({640, 33}, 100, 86))
                    .attr("reduction", std::string("add")),
                "ScatterND add into few rows, int64");
}

TEST_F(CudaKernels, ConvolutionsAndPools) {
  for (DType t : float_types()) {
    for (testing::OpCase& c : testing::conv_op_cases(t)) expect_agrees(std::move(c.node), c.what);
  }
  for (testing::OpCase& c : testing::resize_op_cases()) expect_agrees(std::move(c.node), c.what);
}

TEST_F(CudaKernels, TrainingOps) {
  for (DType t : {DType::kFloat32}) {
    Tensor rate = random_tensor(t, {1}, 100, 1e-3, 1e-3);
    Tensor eps = random_tensor(t, {1}, 101, 1e-8, 1e-8);
    Tensor c(t, {5});
    for (int64_t i = 0; i < 5; ++i)
      c.set_from_double(i, std::vector<double>{0.9, 0.1, 0.999, 0.001, 1.0}[i]);
    expect_agrees(NodeRun("Adam", 17, std::string(kTrainingDomain))
                      .input(random_tensor(t, {1000}, 102))
                      .input(random_tensor(t, {1000}, 103))
                      .input(random_tensor(t, {1000}, 104))
                      .input(random_tensor(t, {1000}, 105, 0, 1))
                      .input(rate)
                      .input(eps)
                      .input(c)
                      .outputs(3),
                  label("Adam", t));
  }
  expect_agrees(NodeRun("Dropout", 13)
                    .input(random_tensor(DType::kFloat32, {4, 500}, 106))
                    .constant(f32({}, {0.25f}))
                    .constant(boolean({}, {true}))
                    .attr("seed", int64_t{7})
                    .outputs(2),
                "Dropout training");
}

// Llama's fused training ops, lowered as maps, row reductions and GEMMs (the shared cases:
// RMS norm and its gradient, rotary embeddings both ways, SwiGLU and its gradient, attention
// with grouped-query heads, causal and not, forward and backward).
TEST_F(CudaKernels, LlamaOps) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    for (testing::OpCase& c : testing::llama_op_cases(t)) expect_agrees(std::move(c.node), c.what);
  }
}

// ‖a − b‖ / ‖b‖, or over sqrt(n)·1e-6 where b is smaller: a gradient that is zero but for
// round-off (a key bias's: softmax ignores a shift of its row) is noise on both sides.
double step_error(const Tensor& a, const Tensor& b) {
  double norm = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) norm += b.float_at(i) * b.float_at(i);
  const double floor = 1e-6 * std::sqrt(static_cast<double>(b.num_elements()));
  const double relative = relative_error(a, b);
  return std::sqrt(norm) >= floor ? relative : relative * std::sqrt(norm) / floor;
}

// One training step of each tiny zoo model: the loss and every updated state on the GPU
// against the CPU. SGD with momentum: its velocities after one step are the gradients, so
// they are compared directly (Adam's first step divides each gradient by its own magnitude,
// which turns the round-off of a zero gradient into a full step of either sign; its kernel
// is checked in TrainingOps and its training in CapturedStepsTrainGptTiny).
void expect_step_agrees(const std::string& name, bool fused) {
  const testing::TrainingStep step = testing::tiny_training_step(name, fused);
  const TrainingGraph& training = step.training;
  const Graph& g = training.graph;
  const std::vector<Feed>& feeds = step.feeds;
  ExecutorOptions cpu_options;
  cpu_options.num_threads = 2;
  auto expected = Executor::create(g, cpu_options)->run(feeds);
  ASSERT_TRUE(expected.is_ok()) << expected.status().message();
  CudaOptions cuda_options;
  cuda_options.updates = training.updates;
  cuda_options.poison_arena = true;
  auto lowering = lower_for_cuda(g, cuda_options);
  ASSERT_TRUE(lowering.is_ok()) << name << ": " << lowering.status().message();
  if (!have_gpu()) return;
  auto gpu = CudaExecutor::create(g, cuda_options);
  ASSERT_TRUE(gpu.is_ok()) << name << ": " << gpu.status().message();
  auto got = (*gpu)->run(feeds);
  ASSERT_TRUE(got.is_ok()) << name << ": " << got.status().message();
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_LE(step_error(*(*got)[i], *(*expected)[i]), 1e-4)
        << name << (fused ? " (fused)" : "") << " output " << g.value(g.outputs()[i]).name;
  }
  // The state written back on the device is the step's result.
  for (const auto& [state, next] : training.updates) {
    auto now = (*gpu)->read(state);
    ASSERT_TRUE(now.is_ok());
    size_t k = 0;
    while (g.outputs()[k] != next) ++k;
    EXPECT_LE(step_error(*now, *(*expected)[k]), 1e-4) << name << " state " << g.value(state).name;
  }
}

TEST(CudaTraining, TinyZooStepsAgreeWithTheCpu) {
  for (const char* name :
       {"mlp", "gpt-tiny", "bert-tiny", "resnet-tiny", "vit-tiny", "llama-tiny"}) {
    expect_step_agrees(name, false);
    expect_step_agrees(name, true);
  }
  SKIP_WITHOUT_GPU();
}

// Replays of the captured graph train: the loss falls over steps as on the CPU.
TEST(CudaTraining, CapturedStepsTrainGptTiny) {
  SKIP_WITHOUT_GPU();
  ZooOptions zoo;
  zoo.batch = 4;
  zoo.with_weights = true;
  const Graph model = *build_zoo_model("gpt-tiny", zoo);
  SyntheticTrainingOptions options;
  options.steps = 12;
  options.batches = 1;
  options.num_threads = 2;
  auto cpu = train_synthetic(model, {default_loss(model), ""}, OptimizerSpec{}, options);
  options.cuda = true;
  auto gpu = train_synthetic(model, {default_loss(model), ""}, OptimizerSpec{}, options);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().message();
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().message();
  ASSERT_EQ(gpu->losses.size(), 12u);
  for (size_t s = 0; s < 12; ++s)
    EXPECT_NEAR(gpu->losses[s], cpu->losses[s], 1e-3 * std::abs(cpu->losses[s]));
  EXPECT_LT(gpu->losses.back(), gpu->losses.front());
}

}  // namespace
}  // namespace autopar::runtime
