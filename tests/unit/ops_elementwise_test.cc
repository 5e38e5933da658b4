// Elementwise ops: broadcasting, dtypes, opset forms of Clip and Dropout, FLOPs and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace autopar {
namespace {

using ops_test::OpCase;
using ::testing::HasSubstr;

Tensor bool_scalar(bool value) {
  Tensor t(DType::kBool, {});
  t.mutable_bytes()[0] = value ? 1 : 0;
  return t;
}

TEST(OpsElementwise, BinaryOpsBroadcast) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) {
    OpCase c(op);
    c.in({2, 3, 4}).in({3, 1});
    EXPECT_EQ(c.infer(), "f32[2,3,4]") << op;
    EXPECT_EQ(c.flops(), 24) << op;
  }
  EXPECT_EQ(OpCase("Add").in({1, 5}).in({4, 1}).infer(), "f32[4,5]");
  EXPECT_EQ(OpCase("Mul").in({2, 3}).in({}).infer(), "f32[2,3]");
  EXPECT_EQ(OpCase("Add").in({0, 3}).in({1, 3}).infer(), "f32[0,3]");
}

TEST(OpsElementwise, RejectsShapesThatDoNotBroadcast) {
  EXPECT_EQ(OpCase("Add").in({2, 3}).in({4, 3}).infer(),
            "error: node 'n' (Add): inputs f32[2,3] and f32[4,3] do not broadcast");
  EXPECT_THAT(OpCase("Sub").in({2, 3}).in(DType::kFloat16, {2, 3}).infer(),
              HasSubstr("input types f32 and f16 differ"));
}

TEST(OpsElementwise, PowTakesAnExponentOfAnotherType) {
  EXPECT_EQ(OpCase("Pow").in({2, 3}).in(DType::kInt64, {}).infer(), "f32[2,3]");
}

TEST(OpsElementwise, EqualProducesBool) {
  OpCase c("Equal");
  c.in(DType::kInt64, {4, 1}).in(DType::kInt64, {3});
  EXPECT_EQ(c.infer(), "bool[4,3]");
  EXPECT_EQ(c.flops(), 12);
}

TEST(OpsElementwise, UnaryOpsKeepShapeAndCountOnePerElement) {
  for (const char* op : {"Sqrt", "Reciprocal", "Neg", "Exp", "Log", "Erf", "Tanh", "Relu",
                         "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish"}) {
    OpCase c(op);
    c.in(DType::kFloat16, {2, 5});
    EXPECT_EQ(c.infer(), "f16[2,5]") << op;
    EXPECT_EQ(c.flops(), 10) << op;
  }
  EXPECT_EQ(OpCase("LeakyRelu").in({2}).attr("alpha", 0.1f).infer(), "f32[2]");
  EXPECT_THAT(OpCase("LeakyRelu").in({2}).attr("alpha", "big").infer(),
              HasSubstr("attribute 'alpha' must be a float, got string"));
  EXPECT_THAT(OpCase("HardSigmoid").in({2}).attr("beta", std::vector<int64_t>{1}).infer(),
              HasSubstr("attribute 'beta' must be a float, got ints"));
}

TEST(OpsElementwise, ClipBoundsMoveFromAttributesToInputsInOpset11) {
  EXPECT_EQ(OpCase("Clip", 9).in({2, 3}).attr("min", 0.0f).attr("max", 6.0f).infer(), "f32[2,3]");
  EXPECT_THAT(OpCase("Clip", 9).in({2, 3}).in({}).infer(), HasSubstr("expects 1 input, got 2"));
  OpCase c("Clip", 13);
  c.in({2, 3}).none().in({});
  EXPECT_EQ(c.infer(), "f32[2,3]");
  EXPECT_EQ(c.flops(), 6);
  EXPECT_THAT(OpCase("Clip").in({2, 3}).in({2}).infer(),
              HasSubstr("bound input 'in1' f32[2] must be a scalar"));
  EXPECT_THAT(OpCase("Clip").in({2, 3}).in(DType::kFloat16, {}).infer(),
              HasSubstr("must have the type of input f32"));
}

TEST(OpsElementwise, WhereBroadcastsThreeWays) {
  OpCase c("Where");
  c.in(DType::kBool, {2, 1}).in({1, 3}).in({});
  EXPECT_EQ(c.infer(), "f32[2,3]");
  EXPECT_EQ(c.flops(), 6);
  EXPECT_EQ(OpCase("Where").in(DType::kBool, {4, 1, 1}).in({2, 1}).in({3}).infer(), "f32[4,2,3]");
  EXPECT_THAT(OpCase("Where").in({2, 1}).in({2}).in({2}).infer(),
              HasSubstr("condition input 'in0' f32[2,1] must be bool"));
  EXPECT_THAT(OpCase("Where").in(DType::kBool, {3}).in({2, 2}).in({2}).infer(),
              HasSubstr("condition input 'in0' bool[3] does not broadcast with f32[2,2]"));
  EXPECT_THAT(OpCase("Where").in(DType::kBool, {2}).in({3}).in({2}).infer(),
              HasSubstr("inputs f32[3] and f32[2] do not broadcast"));
}

TEST(OpsElementwise, IdentityAndCastCostNothing) {
  OpCase id("Identity");
  id.in(DType::kInt32, {7});
  EXPECT_EQ(id.infer(), "i32[7]");
  EXPECT_EQ(id.flops(), 0);
  OpCase cast("Cast");
  cast.in({2, 3}).attr("to", 7);
  EXPECT_EQ(cast.infer(), "i64[2,3]");
  EXPECT_EQ(cast.flops(), 0);
  EXPECT_EQ(OpCase("Cast").in({2}).attr("to", 10).infer(), "f16[2]");
  EXPECT_EQ(OpCase("Cast").in({2}).attr("to", 9).infer(), "bool[2]");
}

TEST(OpsElementwise, CastRejectsBadTargets) {
  EXPECT_THAT(OpCase("Cast").in({2}).attr("to", 99).infer(),
              HasSubstr("attribute 'to' = 99 is not a supported ONNX data type"));
  EXPECT_THAT(OpCase("Cast").in({2}).attr("to", -1).infer(),
              HasSubstr("attribute 'to' = -1 is not a supported ONNX data type"));
  EXPECT_THAT(OpCase("Cast").in({2}).infer(), HasSubstr("required attribute 'to' is missing"));
}

TEST(OpsElementwise, DropoutMaskTypeAndRatioFollowTheOpset) {
  EXPECT_EQ(OpCase("Dropout").in({2, 3}).outputs(2).infer(), "f32[2,3] bool[2,3]");
  EXPECT_EQ(OpCase("Dropout", 9).in({2, 3}).outputs(2).infer(), "f32[2,3] f32[2,3]");
  EXPECT_EQ(OpCase("Dropout", 10).in({2, 3}).attr("ratio", 0.1f).outputs(2).infer(),
            "f32[2,3] bool[2,3]");
  EXPECT_EQ(OpCase("Dropout").in({2, 3}).outputs(2).omit_output(1).infer(), "f32[2,3] -");
  EXPECT_THAT(OpCase("Dropout", 10).in({2, 3}).attr("ratio", 1.5f).infer(),
              HasSubstr("ratio 1.5 is not in [0, 1)"));
  EXPECT_THAT(OpCase("Dropout", 10).in({2, 3}).in({}).infer(), HasSubstr("expects 1 input, got 2"));
  EXPECT_THAT(OpCase("Dropout").in({2, 3}).in({2}).infer(),
              HasSubstr("ratio input 'in1' f32[2] must be a scalar"));
}

TEST(OpsElementwise, DropoutCountsOnlyInTrainingMode) {
  OpCase inference("Dropout");
  inference.in({2, 3}).in({});
  ASSERT_EQ(inference.infer(), "f32[2,3]");
  EXPECT_EQ(inference.flops(), 0);
  OpCase training("Dropout");
  training.in({2, 3}).in({}).constant(bool_scalar(true)).outputs(2);
  ASSERT_EQ(training.infer(), "f32[2,3] bool[2,3]");
  EXPECT_EQ(training.flops(), 12);
  OpCase off("Dropout");
  off.in({2, 3}).in({}).constant(bool_scalar(false));
  ASSERT_EQ(off.infer(), "f32[2,3]");
  EXPECT_EQ(off.flops(), 0);
}

}  // namespace
}  // namespace autopar

namespace autopar {
namespace {

using ops_test::OpCase;

TEST(OpsElementwise, VariadicOpsBroadcastAllInputs) {
  OpCase max("Max");
  max.in({2, 1, 4}).in({3, 1}).in({4});
  EXPECT_EQ(max.infer(), "f32[2,3,4]");
  EXPECT_DOUBLE_EQ(max.flops(), 2.0 * 24);
  OpCase mean("Mean");
  mean.in({5}).in({5});
  EXPECT_EQ(mean.infer(), "f32[5]");
  EXPECT_DOUBLE_EQ(mean.flops(), 2.0 * 5);
  EXPECT_EQ(OpCase("Sum").in({2}).in({3}).infer(),
            "error: node 'n' (Sum): input 'in1' f32[3] does not broadcast with f32[2]");
}

TEST(OpsElementwise, PReluSlopeBroadcastsToX) {
  EXPECT_EQ(OpCase("PRelu").in({2, 3, 4, 4}).in({3, 1, 1}).infer(), "f32[2,3,4,4]");
  EXPECT_EQ(OpCase("PRelu").in({3}).in({2, 3}).infer(),
            "error: node 'n' (PRelu): slope input 'in1' f32[2,3] does not broadcast to X input "
            "'in0' f32[3]");
}

}  // namespace
}  // namespace autopar
