// Scheme and plan errors: one line naming the scheme file and field (or the plan file), exit 2.
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "autopar/runtime/cuda_executor.h"
#include "testing/testing.h"

namespace autopar {
namespace {

using testing::run_autopar;

class PlanErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string scheme(const std::string& text) {
    std::ofstream(dir_ + "/s.yaml") << text;
    return "s.yaml";
  }
  void expect_error(const std::vector<std::string>& args, const std::string& line) {
    const testing::CommandResult r = run_autopar(args, dir_);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, line + "\n");
  }
  void expect_transform_error(const std::string& model, const std::string& text,
                              const std::string& line) {
    expect_error({"transform", model, "--scheme", scheme(text), "-o", "plan"}, line);
  }

  std::string dir_;
};

// --dump-after names a pass of the lowering that runs under the scheme.
TEST_F(PlanErrors, DumpAfter) {
  const std::string s = scheme("mesh: {dp: 2}\nbatch: {global: 8}\n");
  expect_error({"transform", "mlp", "--scheme", s, "--dump-after", "lowering"},
               "autopar: error: --dump-after lowering: no such pass (the passes: "
               "split-projections, mixed-precision, training-graph, batch-norm-statistics, "
               "gradient-casts, spmd, roles)");
  expect_error({"transform", "mlp", "--scheme", s, "--dump-after", "spmd", "--json"},
               "autopar: error: --dump-after: not with --json");
  expect_error({"transform", "mlp", "--scheme", s, "--dump-after", "mixed-precision"},
               "autopar: error: --dump-after mixed-precision: the pass does not run under s.yaml "
               "(it runs for the forward narrowed to bf16 or fp16 with fp32 master weights)");
}

// The hardware a plan's strategies are priced on: --nodes only with --hw, and enough devices.
TEST_F(PlanErrors, TransformHardware) {
  const std::string s = scheme("mesh: {dp: 16}\nbatch: {global: 16}\n");
  expect_error({"transform", "mlp", "--scheme", s, "--nodes", "2"},
               "autopar: error: --nodes 2: needs --hw");
  expect_error({"transform", "mlp", "--scheme", s, "--hw", "dgx-a100-80g"},
               "autopar: error: --nodes 1: 1 nodes of 8 devices hold 8, the scheme needs 16");
  expect_error({"transform", "mlp", "--scheme", s, "--hw", "no-such-profile"},
               "autopar: error: --hw no-such-profile: no such file or profile (profiles: "
               "dgx-a100-80g, dgx-h100, hgx-h200)");
}

TEST_F(PlanErrors, MeshProductIsNotTheDevices) {
  expect_transform_error("mlp", "mesh: {dp: 2, tp: 2}\ndevices: 8\n",
                         "autopar: error: s.yaml: mesh: {dp: 2, tp: 2} has 4 devices, but "
                         "devices is 8");
}

TEST_F(PlanErrors, TpDividesNoParameterDim) {
  expect_transform_error("mlp", "mesh: {tp: 3}\nbatch: {global: 3}\n",
                         "autopar: error: s.yaml: mesh.tp: 3 divides no dim of a parameter the "
                         "model splits (e.g. fc.0.weight f32[64,64])");
}

TEST_F(PlanErrors, SpDividesNoSequenceDim) {
  expect_transform_error("mlp", "mesh: {sp: 2}\nbatch: {global: 4}\n",
                         "autopar: error: s.yaml: mesh.sp: 2 divides no sequence or height dim of "
                         "the inputs (x [4,64], labels [4])");
}

TEST_F(PlanErrors, MoreStagesThanLayers) {
  expect_transform_error("mlp", "mesh: {pp: 8}\n",
                         "autopar: error: s.yaml: mesh.pp: 8 stages for a model of 4 layers");
}

TEST_F(PlanErrors, MicroDoesNotDivideTheReplicaBatch) {
  expect_transform_error("mlp", "mesh: {dp: 2}\nbatch: {global: 8, micro: 3}\n",
                         "autopar: error: s.yaml: batch.micro: 3 does not divide global / dp = "
                         "8 / 2 = 4");
}

TEST_F(PlanErrors, GlobalBatchDoesNotSplitOverDp) {
  expect_transform_error("mlp", "mesh: {dp: 3}\nbatch: {global: 4}\n",
                         "autopar: error: s.yaml: batch.global: 4 is not divisible by dp = 3");
}

TEST_F(PlanErrors, ChunksWithoutInterleaving) {
  expect_transform_error("mlp", "mesh: {pp: 2}\npipeline: {schedule: 1f1b, chunks: 2}\n",
                         "autopar: error: s.yaml: pipeline.chunks: 2 chunks need schedule "
                         "interleaved, not 1f1b");
}

TEST_F(PlanErrors, InterleavedMicrobatchesNotAMultipleOfPp) {
  expect_transform_error(
      "mlp",
      "mesh: {pp: 2}\nbatch: {global: 3, micro: 1}\npipeline: {schedule: interleaved, chunks: 2}\n",
      "autopar: error: s.yaml: pipeline.schedule: interleaved needs the microbatches (3) to be a "
      "multiple of pp (2)");
}

TEST_F(PlanErrors, ZeroStageOutOfRange) {
  expect_transform_error("mlp", "mesh: {dp: 2}\nbatch: {global: 4}\nzero: 5\n",
                         "autopar: error: s.yaml: zero: 5 is not a ZeRO stage (0, 1, 2 or 3)");
}

TEST_F(PlanErrors, OverrideMatchesNoNode) {
  expect_transform_error(
      "mlp", "mesh: {tp: 2}\nbatch: {global: 4}\ntensor:\n  \"nothing*\": \"[_, tp]\"\n",
      "autopar: error: s.yaml: tensor.nothing*: the pattern matches no node");
}

TEST_F(PlanErrors, OverrideLayoutTheNodeCannotProduce) {
  expect_transform_error(
      "mlp", "mesh: {tp: 2}\nbatch: {global: 4}\ntensor:\n  \"fc.1/MatMul\": \"[_, _, tp]\"\n",
      "autopar: error: s.yaml: tensor.fc.1/MatMul: node 'fc.1/MatMul' (MatMul) cannot give its "
      "output the layout [_, _, tp] (it can: [_, _], [tp, _], [_, tp], [_, _] partial(tp))");
}

TEST_F(PlanErrors, OverrideLayoutWithTooManyAxisNames) {
  // Axis names are interned process-wide, 254 at most; pp, dp, tp and sp come first.
  std::vector<std::string> names;
  for (int i = 0; i < 260; ++i) names.push_back(fmt::format("a{}", i));
  const std::string layout = fmt::format("[{}, _]", fmt::join(names, "*"));
  expect_transform_error(
      "mlp",
      fmt::format("mesh: {{tp: 2}}\nbatch: {{global: 4}}\ntensor:\n  \"fc.1/MatMul\": \"{}\"\n",
                  layout),
      fmt::format("autopar: error: s.yaml: tensor.fc.1/MatMul: '{0}' is not a layout (layout "
                  "'{0}': axis 'a250': more than 254 distinct axis names)",
                  layout));
}

// Context parallelism: an unknown form; a ring whose chunk pairs do not divide the sequence
// (llama-tiny has 16 positions: 2 · 16 chunks is too many); all-to-all over more ranks than
// key/value heads (llama-tiny has 2).
TEST_F(PlanErrors, ContextParallelism) {
  expect_transform_error(
      "llama-tiny", "mesh: {cp: 2}\ncontext: spiral\n",
      "autopar: error: s.yaml: context: 'spiral' is not one of ring, all-to-all");
  expect_error({"transform", "llama-tiny", "--batch", "1", "--scheme",
                scheme("mesh: {cp: 16}\ncontext: ring\nbatch: {global: 1}\n"), "-o", "plan"},
               "autopar: error: s.yaml: mesh.cp: input 'input_ids' has 16 positions, which do not "
               "split into 32 chunks (2 per rank of a ring of 16)");
  expect_error({"transform", "llama-tiny", "--batch", "1", "--scheme",
                scheme("mesh: {cp: 4}\ncontext: all-to-all\nbatch: {global: 1}\n"), "-o", "plan"},
               "autopar: error: s.yaml: context: all-to-all: node "
               "'model/layers.0/self_attn/Softmax/Attention' (Attention): the heads of queries "
               "1x4x16x16 and keys 1x2x16x16 do not split over cp = 4 with the other axes");
}

// The kernels: an unknown attention kernel, fusion or memory format, fusions not as a list, an
// unknown field of `kernels`, and unfused attention under context parallelism (which runs the
// fused form).
TEST_F(PlanErrors, AttentionKernel) {
  expect_transform_error(
      "gpt-tiny", "kernels: {attention: fast}\n",
      "autopar: error: s.yaml: kernels.attention: 'fast' is not one of unfused, flash");
  expect_transform_error(
      "gpt-tiny", "kernels: {fusions: [bias_relu]}\n",
      "autopar: error: s.yaml: kernels.fusions: 'bias_relu' is not one of "
      "op_kernels, bias_gelu, bias_dropout_add, scale_mask_softmax, cross_entropy");
  expect_transform_error(
      "gpt-tiny", "kernels: {fusions: op_kernels}\n",
      "autopar: error: s.yaml: kernels.fusions: expected a list, e.g. [op_kernels] ([] for none)");
  expect_transform_error("gpt-tiny", "kernels: {fuse: [op_kernels]}\n",
                         "autopar: error: s.yaml: kernels.fuse: unknown field (known: attention, "
                         "fusions, memory_format)");
  expect_transform_error("gpt-tiny", "kernels: flash\n",
                         "autopar: error: s.yaml: kernels: expected {attention: flash|unfused, "
                         "fusions: [op_kernels], memory_format: nhwc|nchw}");
  expect_transform_error(
      "resnet-tiny", "kernels: {memory_format: channels_first}\n",
      "autopar: error: s.yaml: kernels.memory_format: 'channels_first' is not one of nhwc, nchw");
  expect_transform_error(
      "llama-tiny", "mesh: {cp: 2}\nkernels: {attention: unfused}\n",
      "autopar: error: s.yaml: kernels.attention: unfused, but context parallelism (mesh.cp 2) "
      "runs attention as one fused kernel");
}

TEST_F(PlanErrors, UnknownMeshAxis) {
  expect_transform_error("mlp", "mesh: {foo: 2}\n",
                         "autopar: error: s.yaml: mesh.foo: no paradigm splits over 'foo' (the "
                         "axes are pp, dp, tp, sp and cp)");
}

TEST_F(PlanErrors, SimulateWithAMissingOrBrokenProfile) {
  const testing::CommandResult t = run_autopar(
      {"transform", "mlp", "--scheme", scheme("mesh: {dp: 2}\nbatch: {global: 4}\n"), "-o", "plan"},
      dir_);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const testing::CommandResult missing = run_autopar({"simulate", "plan", "--hw", "nowhere"}, dir_);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.err.rfind("autopar: error: --hw nowhere: no such file", 0), 0u) << missing.err;
  std::ofstream(dir_ + "/broken.yaml") << "name: broken\ndevice: {peak_flops: {fp32: -1}}\n";
  expect_error({"simulate", "plan", "--hw", "broken.yaml"},
               "autopar: error: broken.yaml: device.peak_flops.fp32: -1 must be positive");
}

TEST_F(PlanErrors, CalibrateOtherBackends) {
  expect_error({"calibrate", "--backend", "gpu", "-o", "p.yaml"},
               "autopar: error: --backend gpu: expected cpu or cuda");
  expect_error({"calibrate", "--hw", "hgx-h200", "-o", "p.yaml"},
               "autopar: error: --hw hgx-h200: a base profile applies to --backend cuda only (the "
               "CPU calibration measures every number)");
  expect_error({"calibrate", "--sweeps", "-1", "-o", "p.yaml"},
               "autopar: error: --sweeps -1: must be at least 1");
  expect_error(
      {"calibrate", "--comm", "mpi", "-o", "p.yaml"},
      "autopar: error: --comm mpi: calibration measures the inproc communicator (threads)");
  expect_error({"profile", "plan", "--backend", "tpu", "--hw", "hgx-h200"},
               "autopar: error: --backend tpu: expected cpu or cuda");
}

// Where no GPU can be used, --backend cuda says why in one line, after the flags and files are
// checked (where one can, these commands measure it instead).
TEST_F(PlanErrors, CudaBackendWithoutAGpu) {
  const std::string why = runtime::cuda_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a GPU can be used here: " << runtime::cuda_device_description();
  expect_error({"calibrate", "--backend", "cuda", "-o", "p.yaml"},
               "autopar: error: --backend cuda: " + why);
  expect_error({"calibrate", "--backend", "cuda", "--hw", "dgx-h100", "--quick", "-o", "p.yaml"},
               "autopar: error: --backend cuda: " + why);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/p.yaml"));
  const testing::CommandResult t = run_autopar(
      {"transform", "mlp", "--scheme", scheme("mesh: {dp: 2}\nbatch: {global: 4}\n"), "-o", "plan"},
      dir_);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  expect_error({"profile", "plan", "--backend", "cuda", "--hw", "hgx-h200"},
               "autopar: error: --backend cuda: " + why);
}

TEST_F(PlanErrors, NotAPlanDirectory) {
  std::filesystem::create_directory(dir_ + "/empty");
  expect_error({"verify", "empty"},
               "autopar: error: empty: no plan here (manifest.yaml is missing)");
}

TEST_F(PlanErrors, EditedRoleFile) {
  const testing::CommandResult t = run_autopar(
      {"transform", "mlp", "--scheme", scheme("mesh: {dp: 2}\nbatch: {global: 4}\n"), "-o", "plan"},
      dir_);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  std::ofstream(dir_ + "/plan/role_0.onnx", std::ios::app) << "x";
  expect_error({"run", "plan"},
               "autopar: error: plan/role_0.onnx: differs from the lowering of mlp with the "
               "recorded scheme (the plan was edited or the model changed); run `autopar "
               "transform` again");
}

TEST_F(PlanErrors, PlanWithBatchFlag) {
  const testing::CommandResult t = run_autopar(
      {"transform", "mlp", "--scheme", scheme("mesh: {dp: 2}\nbatch: {global: 4}\n"), "-o", "plan"},
      dir_);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  expect_error({"run", "plan", "--batch", "3"},
               "autopar: error: plan: a plan runs as it was made: --batch, --dim, --inputs and "
               "--outputs do not apply");
  expect_error({"run", "plan", "--comm", "nccl"},
               "autopar: error: --comm nccl: expected inproc or mpi");
  // Flags that would do nothing for a plan, or for inference, are errors too.
  expect_error({"run", "plan", "--lr", "0.01"},
               "autopar: error: plan: a plan trains with the loss and optimizer it was made "
               "with, a thread per device: --lr does not apply");
  expect_error({"run", "plan", "--optimizer", "sgd", "--threads", "2"},
               "autopar: error: plan: a plan trains with the loss and optimizer it was made "
               "with, a thread per device: --optimizer, --threads do not apply");
  expect_error({"run", "mlp", "--lr", "0.01"}, "autopar: error: --lr: only with --train");
  expect_error({"run", "plan", "--repeat", "3"},
               "autopar: error: plan: a plan trains with the loss and optimizer it was made "
               "with, a thread per device: --repeat does not apply");
  expect_error({"run", "mlp", "--train", "--repeat", "2"},
               "autopar: error: --repeat: inference only (training runs --steps)");
  expect_error({"run", "mlp", "--repeat", "0"}, "autopar: error: --repeat 0: must be at least 1");
}

// A plan whose run needs more memory than any machine has (GPT-3 175B on one device: its
// weights alone are 650 GiB) is refused in one line before its weights are made, by every
// command that runs it.
TEST_F(PlanErrors, PlanTooLargeForThisMachine) {
  const testing::CommandResult t =
      run_autopar({"transform", "gpt3-175b", "--scheme",
                   scheme("mesh: {dp: 1}\nbatch: {global: 1}\n"), "-o", "plan"},
                  dir_);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::regex line(
      "autopar: error: plan: running the plan needs about 3548\\.2 GiB \\(1 device in this "
      "process: state and activations 2897\\.7 GiB; the model's weights 650\\.5 GiB\\) and "
      "this machine has [0-9]+\\.[0-9] GiB available\n");
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"run", "plan"},
        {"verify", "plan"},
        {"profile", "plan", "--hw", testing::source_path("tests/data/hw/fixture.yaml")}}) {
    const testing::CommandResult r = run_autopar(command, dir_);
    EXPECT_EQ(r.exit_code, 2) << command[0] << ": " << r.err;
    EXPECT_TRUE(std::regex_match(r.err, line)) << command[0] << ": " << r.err;
  }
}

// So is a one-device training run of such a model, before its weights are made.
TEST_F(PlanErrors, TrainingTooLargeForThisMachine) {
  const testing::CommandResult r =
      run_autopar({"run", "gpt3-175b", "--train", "--batch", "1", "--steps", "1"}, dir_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(std::regex_match(
      r.err, std::regex("autopar: error: gpt3-175b: training on one device needs about 3548\\.2 "
                        "GiB \\(1 device in this process: state and activations 2897\\.7 GiB; "
                        "the model's weights 650\\.5 GiB\\) and this machine has [0-9]+\\.[0-9] "
                        "GiB available\n")))
      << r.err;
}

}  // namespace
}  // namespace autopar
