// ReduceMean, ReduceSum and ReduceMax: axes as attribute or input, keepdims, no-op axes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace autopar {
namespace {

using ops_test::OpCase;
using ::testing::HasSubstr;

using Ints = std::vector<int64_t>;

TEST(OpsReduce, AxesAttributeWithKeepdims) {
  OpCase mean("ReduceMean");
  mean.in({2, 3, 4}).attr("axes", Ints{1});
  EXPECT_EQ(mean.infer(), "f32[2,1,4]");
  EXPECT_EQ(mean.flops(), 24 + 8);  // adds, then one divide per output
  EXPECT_EQ(
      OpCase("ReduceMean").in({2, 3, 4}).attr("axes", Ints{1, -1}).attr("keepdims", 0).infer(),
      "f32[2]");
  OpCase max("ReduceMax");
  max.in({2, 3, 4}).attr("axes", Ints{0}).attr("keepdims", 0);
  EXPECT_EQ(max.infer(), "f32[3,4]");
  EXPECT_EQ(max.flops(), 24);
}

TEST(OpsReduce, AxesInputFromOpset13) {
  OpCase sum("ReduceSum", 13);
  sum.in({2, 3, 4}).ints({-1}).attr("keepdims", 0);
  EXPECT_EQ(sum.infer(), "f32[2,3]");
  EXPECT_EQ(sum.flops(), 24);
  // Opset 18 moved the other reductions' axes to an input; the input form is accepted too.
  EXPECT_EQ(OpCase("ReduceMax").in({2, 3, 4}).ints({0, 2}).infer(), "f32[1,3,1]");
  EXPECT_THAT(OpCase("ReduceSum").in({2, 3, 4}).in(DType::kInt64, {1}).infer(),
              HasSubstr("axes input 'in1' is not a constant"));
  EXPECT_THAT(OpCase("ReduceSum").in({2, 3, 4}).ints({1}).attr("axes", Ints{1}).infer(),
              HasSubstr("axes are given both as an attribute and as an input"));
}

TEST(OpsReduce, EmptyAxesReduceAllUnlessNoop) {
  EXPECT_EQ(OpCase("ReduceSum").in({2, 3, 4}).infer(), "f32[1,1,1]");
  EXPECT_EQ(OpCase("ReduceMean").in({2, 3, 4}).attr("keepdims", 0).infer(), "f32[]");
  OpCase noop("ReduceSum");
  noop.in({2, 3, 4}).ints({}).attr("noop_with_empty_axes", 1);
  EXPECT_EQ(noop.infer(), "f32[2,3,4]");
  EXPECT_EQ(noop.flops(), 0);
}

TEST(OpsReduce, RejectsBadAxes) {
  EXPECT_EQ(OpCase("ReduceMean").in({2, 3, 4}).attr("axes", Ints{3}).infer(),
            "error: node 'n' (ReduceMean): axes 3 is out of range for rank 3");
  EXPECT_THAT(OpCase("ReduceMean").in({2, 3, 4}).attr("axes", Ints{1, -2}).infer(),
              HasSubstr("axes repeat axis 1"));
  EXPECT_THAT(OpCase("ReduceMean").in({2, 3, 4}).attr("axes", 1).infer(),
              HasSubstr("attribute 'axes' must be ints, got int"));
}

}  // namespace
}  // namespace autopar
