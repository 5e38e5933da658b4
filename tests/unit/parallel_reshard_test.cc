// reshard: the collective sequences between layouts.
#include <gtest/gtest.h>

#include "autopar/parallel/reshard.h"

namespace autopar {
namespace {

std::string plan(const std::string& from, const std::string& to,
                 std::vector<int64_t> shape = {8, 8, 8}) {
  const DeviceMesh mesh = *DeviceMesh::create({{"dp", 2}, {"sp", 2}, {"tp", 2}});
  auto steps = reshard_steps(*Layout::parse(from), *Layout::parse(to), shape, mesh);
  if (!steps.is_ok()) return "error: " + steps.status().message();
  std::vector<std::string> parts;
  for (const ReshardStep& s : *steps) parts.push_back(s.to_string());
  return fmt::format("{}", fmt::join(parts, "; "));
}

TEST(Reshard, SingleCollectives) {
  EXPECT_EQ(plan("[_, _, _] partial(tp)", "[_, _, _]"), "all-reduce(tp)");
  EXPECT_EQ(plan("[_, _, _] partial(tp)", "[_, _, tp]"), "reduce-scatter(tp, dim 2)");
  EXPECT_EQ(plan("[_, _, tp]", "[_, _, _]"), "all-gather(tp, dim 2)");
  EXPECT_EQ(plan("[_, sp, _]", "[_, _, sp]"), "all-to-all(sp, dim 1 -> 2)");
  EXPECT_EQ(plan("[_, _, _]", "[dp, _, _]"), "slice(dp, dim 0)");
  EXPECT_EQ(plan("[dp, _, tp]", "[dp, _, tp]"), "");
}

TEST(Reshard, Sequences) {
  // Megatron's row-parallel output, partial over tp, into sequence parallelism.
  EXPECT_EQ(plan("[dp, _, _] partial(tp)", "[dp, tp, _]"), "reduce-scatter(tp, dim 1)");
  // Gathers run before the slices that reuse the axis elsewhere.
  EXPECT_EQ(plan("[dp*tp, _, _]", "[dp, _, tp]"), "all-to-all(tp, dim 0 -> 2)");
  EXPECT_EQ(plan("[tp*dp, _, _]", "[dp, _, tp]"),
            "all-gather(dp, dim 0); all-to-all(tp, dim 0 -> 2); slice(dp, dim 0)");
  EXPECT_EQ(plan("[dp, sp, _] partial(tp)", "[_, _, _]"),
            "all-gather(dp, dim 0); all-gather(sp, dim 1); all-reduce(tp)");
}

// A replicated tensor becomes a partial sum by one member keeping it (an additive operand, a
// bias, of a split reduction).
TEST(Reshard, ReplicatedBecomesPartialByOneMemberKeepingIt) {
  EXPECT_EQ(plan("[_, _, _]", "[_, _, _] partial(tp)"), "share(tp)");
  EXPECT_EQ(plan("[dp, _, _]", "[_, _, _] partial(tp)"), "all-gather(dp, dim 0); share(tp)");
}

TEST(Reshard, Errors) {
  EXPECT_EQ(plan("[tp, _, _]", "[_, _, _] partial(tp)"),
            "error: a tensor split over tp cannot become a partial sum over it");
  EXPECT_EQ(plan("[_, _, _]", "[_, _, tp]", {8, 8, 3}),
            "error: dim 2 of [8,8,3]: 3 is not divisible by tp = 2");
}

}  // namespace
}  // namespace autopar

namespace autopar {
namespace {

// Only the most minor split of a dim is contiguous per device: it alone may leave the dim or
// have another split land under it. Each case was a wrong plan found by the property test.
TEST(Reshard, MinorSplitsMoveFirst) {
  const auto plan = [](const std::string& from, const std::string& to) {
    const DeviceMesh mesh = *DeviceMesh::create({{"dp", 2}, {"sp", 2}, {"tp", 4}});
    auto steps = reshard_steps(*Layout::parse(from), *Layout::parse(to), {16, 16, 16, 16}, mesh);
    if (!steps.is_ok()) return "error: " + steps.status().message();
    std::vector<std::string> parts;
    for (const ReshardStep& s : *steps) parts.push_back(s.to_string());
    return fmt::format("{}", fmt::join(parts, "; "));
  };
  // tp is major in dim 0: it cannot move by all-to-all before dp below it is gathered.
  EXPECT_EQ(plan("[tp*dp, _, _, _]", "[dp, tp, _, _]"),
            "all-gather(dp, dim 0); all-to-all(tp, dim 0 -> 1); slice(dp, dim 0)");
  // A reduce-scatter may not land dp under tp where the target wants dp alone.
  EXPECT_EQ(plan("[tp, _, _, _] partial(dp)", "[dp, tp, _, _]"),
            "all-reduce(dp); all-to-all(tp, dim 0 -> 1); slice(dp, dim 0)");
  // sp leaves first (it is minor), then dp, which has become minor.
  EXPECT_EQ(plan("[dp*sp, _, _, _]", "[_, _, dp, sp]"),
            "all-to-all(sp, dim 0 -> 3); all-to-all(dp, dim 0 -> 2)");
}

}  // namespace
}  // namespace autopar
