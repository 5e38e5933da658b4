// The memory model against closed forms on gpt-tiny plans: Adam with fp32 state keeps 4 bytes
// of parameter, 4 of accumulated gradient and 8 of moments per parameter (16 in all); ZeRO 3
// divides all of it by dp; the schedule decides how many microbatches' stashes are alive.
#include <gtest/gtest.h>

#include "autopar/cost/memory.h"
#include "autopar/parallel/lowering.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

struct Lowered {
  Plan plan;
  double parameters = 0;  // elements of the model
};

Lowered lowered(const std::string& scheme_yaml, int64_t micro_global,
                Recompute recompute = Recompute::kNone) {
  auto scheme = parse_scheme(scheme_yaml, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  scheme->recompute = recompute;
  ZooOptions zoo;
  zoo.batch = micro_global;
  auto model = build_zoo_model("gpt-tiny", zoo);
  EXPECT_TRUE(model.is_ok());
  auto plan = lower(*model, *scheme, LoweringOptions{});
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  return {std::move(plan).value(), static_cast<double>(model->num_parameter_elements())};
}

// The optimizer step counter is the one piece of optimizer state that is not per parameter.
double step_counter_bytes(const Plan& plan) {
  for (const StateSpec& s : plan.state) {
    if (s.name == "optimizer.step") return static_cast<double>(dtype_size(s.dtype));
  }
  return 0;
}

TEST(Memory, AdamKeepsSixteenBytesPerParameter) {
  const Lowered l = lowered("mesh: {dp: 2}\nbatch: {global: 4, micro: 1}\n", 2);
  const std::vector<RoleMemory> m = plan_memory(l.plan);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].parameter_bytes, 4 * l.parameters);
  EXPECT_EQ(m[0].gradient_bytes, 4 * l.parameters);
  EXPECT_EQ(m[0].optimizer_bytes, 8 * l.parameters + step_counter_bytes(l.plan));
}

TEST(Memory, ZeroThreeDividesEverythingByDp) {
  const Lowered l = lowered("mesh: {dp: 2}\nbatch: {global: 4, micro: 1}\nzero: 3\n", 2);
  const std::vector<RoleMemory> m = plan_memory(l.plan);
  EXPECT_EQ(m[0].parameter_bytes, 4 * l.parameters / 2);
  EXPECT_EQ(m[0].gradient_bytes, 4 * l.parameters / 2);
  EXPECT_EQ(m[0].optimizer_bytes, 8 * l.parameters / 2 + step_counter_bytes(l.plan));
}

TEST(Memory, SchedulesDecideTheMicrobatchesInFlight) {
  // Microbatches of 16 samples, so stashed activations outweigh the update's temporaries.
  const std::vector<RoleMemory> gpipe = plan_memory(
      lowered("mesh: {pp: 2}\nbatch: {global: 64, micro: 16}\npipeline: {schedule: gpipe}\n", 16)
          .plan);
  const std::vector<RoleMemory> one_f_one_b =
      plan_memory(lowered("mesh: {pp: 2}\nbatch: {global: 64, micro: 16}\n", 16).plan);
  ASSERT_EQ(gpipe.size(), 2u);
  EXPECT_EQ(gpipe[0].in_flight, 4);  // GPipe: every microbatch
  EXPECT_EQ(gpipe[1].in_flight, 4);
  EXPECT_EQ(one_f_one_b[0].in_flight, 2);  // 1F1B: min(m, p − stage)
  EXPECT_EQ(one_f_one_b[1].in_flight, 1);
  EXPECT_GT(gpipe[0].activation_bytes, one_f_one_b[0].activation_bytes);
  EXPECT_GE(gpipe[0].activation_bytes, 4 * gpipe[0].stash_bytes);
  EXPECT_GE(one_f_one_b[0].activation_bytes, 2 * one_f_one_b[0].stash_bytes);
}

// Full recomputation keeps each layer's input and re-runs the rest of the layer; the head and
// the loss, outside the layers, keep what their backward reads. gpt-tiny's second stage (layers
// 2 and 3, s 16, h 64, vocabulary 256, fp32, one sample): the two layers' inputs (the first
// received), the last layer's output (the final norm's backward reads it), the final norm's
// output, the logits, the head's transposed copy of the tied embedding and the flattened labels.
TEST(Memory, FullRecomputationKeepsEachLayersInput) {
  const Lowered kept = lowered("mesh: {pp: 2}\nbatch: {global: 2, micro: 1}\n", 1);
  const Lowered recomputed =
      lowered("mesh: {pp: 2}\nbatch: {global: 2, micro: 1}\n", 1, Recompute::kFull);
  const double kept_stash = plan_memory(kept.plan)[1].stash_bytes;
  const double recomputed_stash = plan_memory(recomputed.plan)[1].stash_bytes;
  const double residual = 16 * 64 * 4;
  EXPECT_EQ(recomputed_stash, 4 * residual + 16 * 256 * 4 + 256 * 64 * 4 + 16 * 8);
  EXPECT_LT(recomputed_stash, kept_stash / 2);
}

}  // namespace
}  // namespace autopar
