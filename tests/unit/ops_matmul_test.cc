// MatMul and Gemm: output shapes, broadcasting, vector promotion, FLOPs and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace autopar {
namespace {

using ops_test::OpCase;
using ::testing::HasSubstr;

TEST(OpsMatMul, BroadcastsBatchDims) {
  OpCase c("MatMul");
  c.in({2, 3, 4}).in({4, 5});
  EXPECT_EQ(c.infer(), "f32[2,3,5]");
  EXPECT_EQ(c.flops(), 2 * 2 * 3 * 5 * 4);  // 240

  OpCase both("MatMul");
  both.in({2, 1, 3, 4}).in({5, 4, 6});
  EXPECT_EQ(both.infer(), "f32[2,5,3,6]");
  EXPECT_EQ(both.flops(), 2.0 * 4 * (2 * 5 * 3 * 6));
}

TEST(OpsMatMul, PromotesVectors) {
  EXPECT_EQ(OpCase("MatMul").in({4}).in({4, 5}).infer(), "f32[5]");
  EXPECT_EQ(OpCase("MatMul").in({2, 3, 4}).in({4}).infer(), "f32[2,3]");
  OpCase dot("MatMul");
  dot.in({4}).in({4});
  EXPECT_EQ(dot.infer(), "f32[]");
  EXPECT_EQ(dot.flops(), 8);
}

TEST(OpsMatMul, RejectsMismatchedOperands) {
  EXPECT_EQ(OpCase("MatMul").in({2, 3}).in({4, 5}).infer(),
            "error: node 'n' (MatMul): inner dims differ: f32[2,3] x f32[4,5]");
  EXPECT_THAT(OpCase("MatMul").in({2, 3, 4}).in({3, 4, 5}).infer(),
              HasSubstr("batch dims of f32[2,3,4] and f32[3,4,5] do not broadcast"));
  EXPECT_THAT(OpCase("MatMul").in({}).in({4}).infer(), HasSubstr("must have rank >= 1"));
  EXPECT_THAT(OpCase("MatMul").in({2, 3}).in(DType::kFloat16, {3, 4}).infer(),
              HasSubstr("input types f32 and f16 differ"));
}

TEST(OpsGemm, TransposesAndAddsC) {
  OpCase c("Gemm");
  c.in({3, 4}).in({5, 4}).in({5}).attr("transB", 1);
  EXPECT_EQ(c.infer(), "f32[3,5]");
  EXPECT_EQ(c.flops(), 2 * 3 * 5 * 4 + 3 * 5);  // 135

  OpCase scaled("Gemm");
  scaled.in({4, 3}).in({4, 5}).in({3, 1}).attr("transA", 1).attr("alpha", 0.5f);
  EXPECT_EQ(scaled.infer(), "f32[3,5]");
  EXPECT_EQ(scaled.flops(), 2 * 3 * 5 * 4 + 15 + 15);

  OpCase no_c("Gemm");
  no_c.in({3, 4}).in({4, 5});
  EXPECT_EQ(no_c.infer(), "f32[3,5]");
  EXPECT_EQ(no_c.flops(), 120);
}

TEST(OpsGemm, RejectsBadOperands) {
  EXPECT_THAT(OpCase("Gemm", 9).in({3, 4}).in({4, 5}).infer(),
              HasSubstr("input C is required before opset 11"));
  EXPECT_THAT(OpCase("Gemm").in({3, 4}).in({4, 5}).in({5, 3}).infer(),
              HasSubstr("C f32[5,3] does not broadcast to f32[3,5]"));
  EXPECT_THAT(OpCase("Gemm").in({3, 4}).in({5, 4}).infer(),
              HasSubstr("inner dims differ: f32[3,4] (transA=0) x f32[5,4] (transB=0)"));
  EXPECT_THAT(OpCase("Gemm").in({2, 3, 4}).in({4, 5}).infer(),
              HasSubstr("A and B must be matrices, got f32[2,3,4] and f32[4,5]"));
  EXPECT_THAT(OpCase("Gemm").in({3, 4}).in({4, 5}).attr("transA", "yes").infer(),
              HasSubstr("attribute 'transA' must be an int, got string"));
}

}  // namespace
}  // namespace autopar
