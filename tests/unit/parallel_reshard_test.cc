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

TEST(Reshard, Errors) {
  EXPECT_EQ(plan("[_, _, _]", "[_, _, _] partial(tp)"),
            "error: a tensor replicated over tp cannot become a partial sum over it");
  EXPECT_EQ(plan("[tp, _, _]", "[_, _, _] partial(tp)"),
            "error: a tensor split over tp cannot become a partial sum over it");
  EXPECT_EQ(plan("[_, _, _]", "[_, _, tp]", {8, 8, 3}),
            "error: dim 2 of [8,8,3]: 3 is not divisible by tp = 2");
}

}  // namespace
}  // namespace autopar
