// Plans on the CUDA backend against their single-device reference on the CPU (`autopar verify
// --backend cuda`): every device a thread on one GPU, communicating through the host, in the
// float64 instance the CPU verification uses. The host side (every program of every device
// lowers in float64, its communication as host steps) runs everywhere; the runs skip, saying
// why, where no GPU can be used.
#include <gtest/gtest.h>

#include "autopar/ir/precision.h"
#include "autopar/parallel/lowering.h"
#include "autopar/parallel/scheme.h"
#include "autopar/parallel/verify.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/plan_runner.h"
#include "autopar/zoo/zoo.h"
#include "testing/cuda_cases.h"

namespace autopar::runtime {
namespace {

struct PlanCase {
  std::string model;
  std::string scheme;
  int64_t batch;
  double dropout = 0;
};

const std::vector<PlanCase>& plan_cases() {
  static const std::vector<PlanCase> cases = {
      {"gpt-tiny", "mesh: {dp: 2, tp: 2}\nbatch: {global: 4, micro: 2}\ntensor: megatron-sp\n", 4},
      {"mlp", "mesh: {pp: 2, dp: 2}\nbatch: {global: 8, micro: 2}\npipeline: {schedule: 1f1b}\n",
       8},
      {"bert-tiny", "mesh: {dp: 2, tp: 2}\nbatch: {global: 4, micro: 2}\nzero: 3\n", 4},
      {"resnet-tiny", "mesh: {dp: 2}\nbatch: {global: 4, micro: 2}\n", 4},
      {"vit-tiny", "mesh: {dp: 2, tp: 2}\nbatch: {global: 4, micro: 2}\ntensor: auto\n", 4},
      // Llama: fused attention (grouped-query heads), RMS norm, rotary embeddings and SwiGLU
      // on the device; the ring attention of context parallelism on the host.
      {"llama-tiny",
       "mesh: {dp: 2, tp: 2}\nbatch: {global: 8, micro: 2}\ntensor: megatron-sp\nkernels: "
       "{attention: flash}\n",
       8},
      {"llama-tiny", "mesh: {dp: 2, cp: 2}\ncontext: ring\nbatch: {global: 4, micro: 1}\n", 4},
      // Sharded Dropout in every microbatch: the device draws what the CPU reference draws.
      {"gpt-tiny", "mesh: {dp: 2, tp: 2}\nbatch: {global: 4, micro: 2}\ntensor: megatron-sp\n", 4,
       0.1}};
  return cases;
}

struct Lowered {
  Graph model;
  Plan plan;
};

// The float64 instance of the case's plan, as `autopar verify` runs it.
Lowered float64_plan(const PlanCase& c) {
  auto scheme = parse_scheme(c.scheme, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  ZooOptions zoo;
  zoo.batch = c.batch;
  zoo.with_weights = true;
  if (c.dropout > 0) zoo.dropout = c.dropout;
  auto model = build_zoo_model(c.model, zoo);
  EXPECT_TRUE(model.is_ok());
  Graph wide = *model;
  change_float_type(wide, DType::kFloat32, DType::kFloat64);
  auto plan = lower(wide, *scheme, LoweringOptions{});
  EXPECT_TRUE(plan.is_ok()) << c.model << ": " << plan.status().message();
  return {std::move(wide), plan.is_ok() ? std::move(plan).value() : Plan{}};
}

TEST(CudaPlans, VerifyOnOneGpuThroughTheHost) {
  for (const PlanCase& c : plan_cases()) {
    SCOPED_TRACE(c.model + ": " + c.scheme);
    Lowered l = float64_plan(c);
    const int64_t devices = l.plan.scheme.mesh.num_devices();
    ASSERT_GT(devices, 1);
    int64_t host_steps = 0;
    const Status lowered = testing::lower_every_program(
        l.plan, CudaCommunication::kHost,
        [&](int64_t, const Program&, const Graph&, const CudaLowering& lowering) {
          const auto& kinds = summarize(lowering).launches_by_kind;
          if (kinds.count("host")) host_steps += kinds.at("host");
        });
    ASSERT_TRUE(lowered.is_ok()) << lowered.message();
    EXPECT_GT(host_steps, 0);
    if (!cuda_unavailable_reason().empty()) continue;
    auto feeds = synthetic_plan_feeds(l.model, l.plan, LoweringOptions{}, 1, 0);
    ASSERT_TRUE(feeds.is_ok()) << feeds.status().message();
    PlanRunOptions run;
    run.backend = PlanBackend::kCuda;
    auto compared = verify_plan(l.model, l.plan, LoweringOptions{}, *feeds, run);
    ASSERT_TRUE(compared.is_ok()) << compared.status().message();
    EXPECT_GT(compared->differences.size(), 1u);
    EXPECT_LE(compared->worst(), 1e-6) << compared->differences.front().name;
  }
  if (!cuda_unavailable_reason().empty())
    GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
}

}  // namespace
}  // namespace autopar::runtime
