// Softmax, LogSoftmax, LayerNormalization and BatchNormalization: axes across opsets,
// statistics outputs, FLOPs and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace autopar {
namespace {

using ops_test::OpCase;
using ::testing::HasSubstr;

TEST(OpsSoftmax, KeepsShapeAndCountsFivePerElement) {
  OpCase c("Softmax");
  c.in({2, 3, 4});
  EXPECT_EQ(c.infer(), "f32[2,3,4]");
  EXPECT_EQ(c.flops(), 5 * 24);
  EXPECT_EQ(OpCase("Softmax").in({2, 3}).attr("axis", -2).infer(), "f32[2,3]");
}

TEST(OpsSoftmax, LogSoftmaxDefaultAxisChangesInOpset13) {
  // Before 13 the default axis 1 coerces [2,3,4] to 2 rows of 12.
  OpCase old_opset("LogSoftmax", 11);
  old_opset.in({2, 3, 4});
  ASSERT_EQ(old_opset.infer(), "f32[2,3,4]");
  EXPECT_EQ(old_opset.flops(), 5 * 24 + 2);
  // From 13 the default is the last axis: 6 rows of 4.
  OpCase new_opset("LogSoftmax", 13);
  new_opset.in({2, 3, 4});
  ASSERT_EQ(new_opset.infer(), "f32[2,3,4]");
  EXPECT_EQ(new_opset.flops(), 5 * 24 + 6);
}

TEST(OpsSoftmax, RejectsBadAxisAndTypes) {
  EXPECT_EQ(OpCase("Softmax").in({2, 3, 4}).attr("axis", 3).infer(),
            "error: node 'n' (Softmax): axis 3 is out of range for rank 3");
  EXPECT_THAT(OpCase("Softmax").in({}).infer(), HasSubstr("must have rank >= 1"));
  EXPECT_THAT(OpCase("Softmax").in(DType::kInt64, {3}).infer(),
              HasSubstr("input 'in0' i64[3] must be floating"));
}

TEST(OpsLayerNorm, OutputsStatisticsWithReducedShape) {
  OpCase c("LayerNormalization");
  c.in({2, 5, 8}).in({8}).in({8}).outputs(3);
  EXPECT_EQ(c.infer(), "f32[2,5,8] f32[2,5,1] f32[2,5,1]");
  EXPECT_EQ(c.flops(), 7 * 80 + 5 * 10);

  OpCase no_bias("LayerNormalization");
  no_bias.in(DType::kFloat16, {2, 5, 8}).in(DType::kFloat16, {5, 8}).attr("axis", 1).outputs(3);
  EXPECT_EQ(no_bias.infer(), "f16[2,5,8] f32[2,1,1] f32[2,1,1]");
  EXPECT_EQ(no_bias.flops(), 6 * 80 + 5 * 2);

  EXPECT_EQ(OpCase("LayerNormalization").in({2, 5, 8}).in({8}).outputs(3).omit_output(1).infer(),
            "f32[2,5,8] - f32[2,5,1]");
}

TEST(OpsLayerNorm, RejectsBadScaleAxisAndOpset) {
  EXPECT_THAT(OpCase("LayerNormalization").in({2, 5, 8}).in({5}).attr("axis", 1).infer(),
              HasSubstr("input 'in1' f32[5] does not broadcast to the normalised shape f32[5,8]"));
  EXPECT_THAT(OpCase("LayerNormalization").in({2, 8}).in({8}).attr("axis", 2).infer(),
              HasSubstr("axis 2 is out of range for rank 2"));
  EXPECT_THAT(OpCase("LayerNormalization", 13).in({2, 8}).in({8}).infer(),
              HasSubstr("LayerNormalization needs ai.onnx opset 17, the graph has 13"));
  EXPECT_THAT(OpCase("LayerNormalization").in({2, 8}).infer(),
              HasSubstr("expects 2 to 3 inputs, got 1"));
  EXPECT_THAT(OpCase("LayerNormalization").in({2, 8}).in({8}).attr("stash_type", 7).infer(),
              HasSubstr("attribute 'stash_type' = 7 is not a floating ONNX data type"));
}

OpCase batch_norm(int64_t opset, int outputs) {
  OpCase c("BatchNormalization", opset);
  c.in({2, 3, 4, 4}).in({3}).in({3}).in({3}).in({3}).outputs(outputs);
  return c;
}

TEST(OpsBatchNorm, InferenceFoldsScaleAndShift) {
  OpCase c = batch_norm(15, 1);
  EXPECT_EQ(c.infer(), "f32[2,3,4,4]");
  EXPECT_EQ(c.flops(), 2 * 96);
}

TEST(OpsBatchNorm, TrainingModeOutputsRunningStatistics) {
  OpCase c = batch_norm(15, 3);
  c.attr("training_mode", 1);
  EXPECT_EQ(c.infer(), "f32[2,3,4,4] f32[3] f32[3]");
  EXPECT_EQ(c.flops(), 7 * 96 + 11 * 3);
  // Before opset 14 training is marked by the statistics outputs; there are five.
  OpCase old = batch_norm(9, 5);
  EXPECT_EQ(old.infer(), "f32[2,3,4,4] f32[3] f32[3] f32[3] f32[3]");
  EXPECT_EQ(old.flops(), 7 * 96 + 11 * 3);
}

TEST(OpsBatchNorm, RejectsBadStatistics) {
  OpCase c("BatchNormalization");
  c.in({2, 3, 4, 4}).in({4}).in({3}).in({3}).in({3});
  EXPECT_THAT(c.infer(),
              HasSubstr("scale input 'in1' f32[4] must have shape [3] (the channels of X)"));
  EXPECT_THAT(batch_norm(15, 3).infer(),
              HasSubstr("running mean and var outputs need training_mode=1"));
  EXPECT_THAT(batch_norm(15, 5).infer(), HasSubstr("expects 1 to 3 outputs, got 5"));
  EXPECT_THAT(OpCase("BatchNormalization").in({3}).in({3}).in({3}).in({3}).in({3}).infer(),
              HasSubstr("must have rank >= 2 (N, C, ...)"));
}

}  // namespace
}  // namespace autopar
