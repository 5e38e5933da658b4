// Scheme YAML: fields, defaults, round trip through to_yaml, and one-line errors.
#include <filesystem>

#include <gtest/gtest.h>

#include "autopar/parallel/scheme.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

Scheme parse(const std::string& yaml) {
  auto s = parse_scheme(yaml, "s.yaml");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(s).value() : Scheme();
}

std::string error_of(const std::string& yaml) {
  auto s = parse_scheme(yaml, "s.yaml");
  EXPECT_FALSE(s.is_ok());
  return s.is_ok() ? "" : s.status().message();
}

TEST(Scheme, EveryField) {
  const Scheme s = parse(R"(
mesh: {pp: 2, dp: 2, tp: 2}
batch: {global: 8, micro: 2}
pipeline: {schedule: 1f1b, chunks: 1, stages: auto}
tensor: megatron
zero: 1
recompute: full
precision: bf16
)");
  EXPECT_EQ(s.mesh.to_string(), "{pp: 2, dp: 2, tp: 2}");
  EXPECT_EQ(s.global_batch, 8);
  EXPECT_EQ(s.micro_batch, 2);
  EXPECT_EQ(s.microbatches(), 2);
  EXPECT_EQ(s.schedule, PipelineSchedule::kOneForwardOneBackward);
  EXPECT_EQ(s.zero, 1);
  EXPECT_EQ(s.recompute, Recompute::kFull);
  EXPECT_EQ(s.precision, Precision::kBf16);
  EXPECT_EQ(parse(s.to_yaml()), s);
}

TEST(Scheme, Defaults) {
  const Scheme s = parse("");
  EXPECT_EQ(s.mesh.to_string(), "{dp: 1}");
  EXPECT_EQ(s.schedule, PipelineSchedule::kOneForwardOneBackward);
  EXPECT_EQ(s.chunks, 1);
  EXPECT_TRUE(s.stages.empty());
  EXPECT_EQ(s.tensor, TensorStrategy::kMegatron);
  EXPECT_EQ(s.zero, 0);
  EXPECT_EQ(s.recompute, Recompute::kNone);
  EXPECT_EQ(s.precision, Precision::kFp32);
  EXPECT_EQ(s.to_yaml(),
            "mesh: {dp: 1}\npipeline: {schedule: 1f1b, chunks: 1, stages: auto}\ntensor: "
            "megatron\nzero: 0\n"
            "recompute: none\nprecision: fp32\n");
  // micro defaults to global / dp.
  EXPECT_EQ(parse("mesh: {dp: 4}\nbatch: {global: 16}").micro_batch, 4);
}

TEST(Scheme, StagesOverridesAndInterleaving) {
  const Scheme s = parse(R"(
mesh: {pp: 2, dp: 1}
pipeline: {schedule: interleaved, chunks: 2, stages: [[0, 0], [1, 1], [2, 2], [3, 3]]}
tensor: {default: auto, "h.*.mlp*": megatron}
)");
  ASSERT_EQ(s.stages.size(), 4u);
  EXPECT_EQ(s.stages[3], (std::pair<int32_t, int32_t>{3, 3}));
  EXPECT_EQ(s.tensor, TensorStrategy::kAuto);
  ASSERT_EQ(s.overrides.size(), 1u);
  EXPECT_EQ(s.overrides[0].pattern, "h.*.mlp*");
  EXPECT_EQ(parse(s.to_yaml()), s);
}

// The kernel choices a scheme may make in place of the profile's, and their round trip.
TEST(Scheme, KernelChoices) {
  const Scheme both = parse("kernels: {attention: flash, fusions: [op_kernels]}\n");
  EXPECT_EQ(both.attention, AttentionKernel::kFlash);
  EXPECT_EQ(both.fusions, (std::set<Fusion>{Fusion::kOpKernels}));
  EXPECT_NE(both.to_yaml().find("kernels: {attention: flash, fusions: [op_kernels]}\n"),
            std::string::npos);
  EXPECT_EQ(parse(both.to_yaml()), both);
  const Scheme none = parse("kernels: {fusions: []}\n");
  EXPECT_FALSE(none.attention);
  EXPECT_EQ(none.fusions, std::set<Fusion>{});
  EXPECT_NE(none.to_yaml().find("kernels: {fusions: []}\n"), std::string::npos);
  EXPECT_EQ(parse(none.to_yaml()), none);
  EXPECT_FALSE(parse("").fusions);
  const Scheme nchw = parse("kernels: {memory_format: nchw}\n");
  EXPECT_EQ(nchw.memory_format, MemoryFormat::kNchw);
  EXPECT_FALSE(nchw.fusions);
  EXPECT_NE(nchw.to_yaml().find("kernels: {memory_format: nchw}\n"), std::string::npos);
  EXPECT_EQ(parse(nchw.to_yaml()), nchw);
  EXPECT_FALSE(parse("").memory_format);
}

TEST(Scheme, Errors) {
  EXPECT_EQ(error_of("mesh: {dp: 2, tp: 2}\ndevices: 8"),
            "s.yaml: mesh: {dp: 2, tp: 2} has 4 devices, but devices is 8");
  EXPECT_EQ(error_of("mesh: {dp: 4}\nbatch: {global: 10}"),
            "s.yaml: batch.global: 10 is not divisible by dp = 4");
  EXPECT_EQ(error_of("mesh: {dp: 2}\nbatch: {global: 16, micro: 3}"),
            "s.yaml: batch.micro: 3 does not divide global / dp = 16 / 2 = 8");
  EXPECT_EQ(error_of("pipeline: {schedule: 1f1b, chunks: 2}"),
            "s.yaml: pipeline.chunks: 2 chunks need schedule interleaved, not 1f1b");
  EXPECT_EQ(error_of("pipeline: {schedule: interleaved}"),
            "s.yaml: pipeline.chunks: schedule interleaved needs chunks of at least 2");
  EXPECT_EQ(error_of("pipeline: {schedule: zigzag}"),
            "s.yaml: pipeline.schedule: 'zigzag' is not one of gpipe, 1f1b, interleaved");
  EXPECT_EQ(error_of("zero: 4"), "s.yaml: zero: 4 is not a ZeRO stage (0, 1, 2 or 3)");
  EXPECT_EQ(error_of("mesh: {dp: 0}"),
            "s.yaml: mesh: mesh axis 'dp' has size 0 (must be at least 1)");
  EXPECT_EQ(error_of("mesh: {dp: two}"), "s.yaml: mesh.dp: 'two' is not an integer");
  EXPECT_EQ(error_of("memory_policy: nemo"),
            "s.yaml: memory_policy: 'nemo' is not one of autopar, megatron, deepspeed, fsdp");
  EXPECT_EQ(error_of("meshes: {dp: 2}"),
            "s.yaml: meshes: unknown field (known: mesh, devices, batch, context, tensor, zero, "
            "memory_policy, pipeline, recompute, precision, kernels)");
  EXPECT_EQ(error_of("mesh: {pp: 2}\npipeline: {stages: [[0, 1], [3, 4]]}"),
            "s.yaml: pipeline.stages[1]: [3, 4] must start at layer 2 and not end before it");
  EXPECT_EQ(error_of("mesh: {pp: 2}\npipeline: {stages: [[0, 3]]}"),
            "s.yaml: pipeline.stages: 1 ranges given for 2 stages (pp = 2)");
  EXPECT_EQ(error_of("mesh: [dp, 2"), "s.yaml: line 1: end of sequence flow not found");
  EXPECT_EQ(error_of("recompute: sometimes"),
            "s.yaml: recompute: 'sometimes' is not one of none, selective, nonparametric, full");
}

TEST(Scheme, ValidatedAgainstAModel) {
  ZooOptions options;
  options.batch = 2;
  const Graph gpt = *build_zoo_model("gpt-tiny", options);
  EXPECT_TRUE(validate_scheme(parse("mesh: {pp: 4}"), gpt, "s.yaml").is_ok());
  EXPECT_EQ(validate_scheme(parse("mesh: {pp: 8}"), gpt, "s.yaml").message(),
            "s.yaml: mesh.pp: 8 stages for a model of 4 layers");
  EXPECT_EQ(validate_scheme(parse("mesh: {pp: 4}\npipeline: {schedule: interleaved, chunks: 2}"),
                            gpt, "s.yaml")
                .message(),
            "s.yaml: mesh.pp: 8 stages (pp 4 × chunks 2) for a model of 4 layers");
  EXPECT_EQ(
      validate_scheme(parse("mesh: {pp: 2}\npipeline: {stages: [[0, 1], [2, 2]]}"), gpt, "s.yaml")
          .message(),
      "s.yaml: pipeline.stages: the ranges end at layer 2, the model's last layer is 3");
}

}  // namespace
}  // namespace autopar

namespace autopar {
namespace {

TEST(Scheme, ExampleConfigsParse) {
  const std::filesystem::path dir =
      std::filesystem::path(AUTOPAR_SOURCE_DIR) / "configs" / "schemes";
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    auto scheme = read_scheme_file(entry.path().string());
    EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
    parsed += scheme.is_ok() ? 1 : 0;
  }
  EXPECT_EQ(parsed, 12);
}

}  // namespace
}  // namespace autopar
