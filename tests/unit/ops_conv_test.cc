// Conv, ConvTranspose and pooling: windows, padding modes, groups, FLOPs and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace autopar {
namespace {

using ops_test::OpCase;
using ::testing::HasSubstr;

using Ints = std::vector<int64_t>;

TEST(OpsConv, StridedPaddedConvWithBias) {
  OpCase c("Conv");
  c.in({1, 3, 32, 32}).in({8, 3, 3, 3}).in({8});
  c.attr("pads", Ints{1, 1, 1, 1}).attr("strides", Ints{2, 2});
  EXPECT_EQ(c.infer(), "f32[1,8,16,16]");
  EXPECT_EQ(c.flops(), 2.0 * 1 * 8 * 3 * 9 * 256 + 8 * 256);  // 112640
}

TEST(OpsConv, GroupsDilationsAndOneSpatialDim) {
  OpCase grouped("Conv");
  grouped.in({2, 8, 10, 10}).in({16, 4, 3, 3}).attr("group", 2);
  EXPECT_EQ(grouped.infer(), "f32[2,16,8,8]");
  EXPECT_EQ(grouped.flops(), 2.0 * 2 * 16 * 4 * 9 * 64);
  EXPECT_EQ(
      OpCase("Conv").in({1, 1, 10, 10}).in({1, 1, 3, 3}).attr("dilations", Ints{2, 2}).infer(),
      "f32[1,1,6,6]");
  EXPECT_EQ(OpCase("Conv").in({1, 2, 10}).in({4, 2, 3}).infer(), "f32[1,4,8]");
  EXPECT_EQ(OpCase("Conv").in({1, 2, 10}).in({4, 2, 3}).attr("kernel_shape", Ints{3}).infer(),
            "f32[1,4,8]");
}

TEST(OpsConv, AutoPadModes) {
  auto conv = [](const char* mode, int64_t size) {
    OpCase c("Conv");
    c.in({1, 1, size, size}).in({1, 1, 3, 3}).attr("strides", Ints{2, 2}).attr("auto_pad", mode);
    return c.infer();
  };
  EXPECT_EQ(conv("SAME_UPPER", 7), "f32[1,1,4,4]");
  EXPECT_EQ(conv("SAME_LOWER", 8), "f32[1,1,4,4]");
  EXPECT_EQ(conv("VALID", 7), "f32[1,1,3,3]");
  EXPECT_EQ(conv("NOTSET", 7), "f32[1,1,3,3]");
  EXPECT_THAT(conv("SAME", 7), HasSubstr("auto_pad 'SAME' is not NOTSET, VALID, SAME_UPPER"));
}

TEST(OpsConv, RejectsInconsistentOperands) {
  EXPECT_EQ(OpCase("Conv").in({1, 3, 32, 32}).in({8, 4, 3, 3}).infer(),
            "error: node 'n' (Conv): input 'in0' f32[1,3,32,32] has 3 channels; with group 1 "
            "the weight input 'in1' f32[8,4,3,3] needs dim 1 = 3");
  EXPECT_THAT(OpCase("Conv").in({1, 1, 2, 2}).in({1, 1, 3, 3}).infer(),
              HasSubstr("spatial dim 0 of size 2 (padded 2) is smaller than the kernel extent 3"));
  EXPECT_THAT(OpCase("Conv").in({1, 1, 5, 5}).in({1, 1, 3, 3}).attr("pads", Ints{1, 1}).infer(),
              HasSubstr("attribute 'pads' has 2 values, expected 4 for 2 spatial dims"));
  EXPECT_THAT(OpCase("Conv").in({1, 1, 5, 5}).in({1, 1, 3, 3}).attr("strides", Ints{0, 1}).infer(),
              HasSubstr("attribute 'strides' value 0 is out of range (must be >= 1)"));
  EXPECT_THAT(OpCase("Conv").in({1, 4, 5, 5}).in({6, 2, 3, 3}).attr("group", 4).infer(),
              HasSubstr("needs dim 1 = 1"));
  EXPECT_EQ(OpCase("Conv").in({1, 6, 5, 5}).in({4, 2, 3, 3}).attr("group", 4).infer(),
            "error: node 'n' (Conv): input 'in0' f32[1,6,5,5] has 6 channels, not divisible by "
            "group 4");
  EXPECT_THAT(OpCase("Conv").in({1, 4, 5, 5}).in({6, 2, 3, 3}).attr("group", 0).infer(),
              HasSubstr("group 0 must be >= 1"));
  EXPECT_THAT(OpCase("Conv").in({1, 1, 5, 5}).in({2, 1, 3, 3}).in({3}).infer(),
              HasSubstr("bias input 'in2' f32[3] must have shape [2]"));
  EXPECT_THAT(OpCase("Conv").in({1, 1, 5, 5}).in({1, 1, 3}).infer(),
              HasSubstr("must have the rank of"));
  EXPECT_THAT(
      OpCase("Conv").in({1, 1, 5, 5}).in({1, 1, 3, 3}).attr("kernel_shape", Ints{2, 2}).infer(),
      HasSubstr("kernel_shape [2,2] differs from weight"));
  EXPECT_THAT(OpCase("Conv")
                  .in({1, 1, 5, 5})
                  .in({1, 1, 3, 3})
                  .attr("pads", Ints{1, 1, 1, 1})
                  .attr("auto_pad", "VALID")
                  .infer(),
              HasSubstr("attribute 'pads' cannot be given with auto_pad VALID"));
}

TEST(OpsConv, HugeAttributesFailWithoutOverflow) {
  int64_t big = int64_t{1} << 56;
  EXPECT_THAT(
      OpCase("Conv").in({1, 1, 5, 5}).in({1, 1, 3, 3}).attr("dilations", Ints{big, big}).infer(),
      HasSubstr("is smaller than the kernel extent"));
  EXPECT_THAT(
      OpCase("Conv").in({1, 1, 5, 5}).in({1, 1, 3, 3}).attr("strides", Ints{big * 2, 1}).infer(),
      HasSubstr("out of range"));
  EXPECT_THAT(OpCase("ConvTranspose")
                  .in({1, 1, 5, 5})
                  .in({1, 1, 3, 3})
                  .attr("strides", Ints{big, big})
                  .infer(),
              HasSubstr("exceeds 2^56"));
}

TEST(OpsConvTranspose, UpsamplesWithStridesPadsAndOutputPadding) {
  OpCase c("ConvTranspose");
  c.in({1, 4, 5, 5}).in({4, 2, 3, 3}).attr("strides", Ints{2, 2});
  EXPECT_EQ(c.infer(), "f32[1,2,11,11]");
  EXPECT_EQ(c.flops(), 2.0 * 4 * 2 * 9 * 25);  // C_in · C_out/group · k · input spatial
  EXPECT_EQ(OpCase("ConvTranspose")
                .in({1, 4, 5, 5})
                .in({4, 2, 3, 3})
                .attr("strides", Ints{2, 2})
                .attr("pads", Ints{1, 1, 1, 1})
                .attr("output_padding", Ints{1, 1})
                .infer(),
            "f32[1,2,10,10]");
  EXPECT_EQ(OpCase("ConvTranspose").in({1, 4, 5, 5}).in({4, 3, 3, 3}).attr("group", 2).infer(),
            "f32[1,6,7,7]");
  EXPECT_EQ(OpCase("ConvTranspose")
                .in({1, 4, 5, 5})
                .in({4, 2, 3, 3})
                .attr("output_shape", Ints{20, 20})
                .infer(),
            "f32[1,2,20,20]");
  EXPECT_EQ(OpCase("ConvTranspose")
                .in({1, 4, 5, 5})
                .in({4, 2, 3, 3})
                .attr("strides", Ints{2, 2})
                .attr("auto_pad", "SAME_UPPER")
                .infer(),
            "f32[1,2,10,10]");
  OpCase bias("ConvTranspose");
  bias.in({1, 4, 5, 5}).in({4, 2, 3, 3}).in({2});
  ASSERT_EQ(bias.infer(), "f32[1,2,7,7]");
  EXPECT_EQ(bias.flops(), 2.0 * 4 * 2 * 9 * 25 + 2 * 49);
}

TEST(OpsConvTranspose, RejectsMismatchedWeight) {
  EXPECT_THAT(OpCase("ConvTranspose").in({1, 4, 5, 5}).in({3, 2, 3, 3}).infer(),
              HasSubstr("weight input 'in1' f32[3,2,3,3] dim 0 must equal the 4 channels"));
  EXPECT_THAT(OpCase("ConvTranspose")
                  .in({1, 4, 5, 5})
                  .in({4, 2, 3, 3})
                  .attr("pads", Ints{3, 3, 4, 4})
                  .infer(),
              HasSubstr("spatial dim 0 of the output computes to 0 (must be >= 1)"));
  EXPECT_THAT(OpCase("ConvTranspose")
                  .in({1, 4, 5, 5})
                  .in({4, 2, 3, 3})
                  .attr("pads", Ints{4, 4, 4, 4})
                  .infer(),
              HasSubstr("spatial dim 0 of the output computes to -1 (must be >= 1)"));
}

TEST(OpsPool, MaxPoolWithCeilModeAndIndices) {
  OpCase c("MaxPool");
  c.in({1, 3, 7, 7}).attr("kernel_shape", Ints{3, 3}).attr("strides", Ints{2, 2});
  EXPECT_EQ(c.infer(), "f32[1,3,3,3]");
  EXPECT_EQ(c.flops(), 9 * 27);
  OpCase ceil("MaxPool");
  ceil.in({1, 3, 8, 8}).attr("kernel_shape", Ints{3, 3}).attr("strides", Ints{2, 2});
  ceil.attr("ceil_mode", 1).outputs(2);
  EXPECT_EQ(ceil.infer(), "f32[1,3,4,4] i64[1,3,4,4]");
  EXPECT_EQ(OpCase("MaxPool")
                .in({1, 3, 8, 8})
                .attr("kernel_shape", Ints{3, 3})
                .attr("strides", Ints{2, 2})
                .infer(),
            "f32[1,3,3,3]");
  EXPECT_EQ(OpCase("MaxPool")
                .in({1, 3, 112, 112})
                .attr("kernel_shape", Ints{3, 3})
                .attr("strides", Ints{2, 2})
                .attr("pads", Ints{1, 1, 1, 1})
                .infer(),
            "f32[1,3,56,56]");
}

TEST(OpsPool, AveragePoolCountsAddsAndADivide) {
  OpCase c("AveragePool");
  c.in({1, 3, 7, 7}).attr("kernel_shape", Ints{3, 3}).attr("strides", Ints{2, 2});
  c.attr("count_include_pad", 1);
  EXPECT_EQ(c.infer(), "f32[1,3,3,3]");
  EXPECT_EQ(c.flops(), 10 * 27);
  EXPECT_THAT(
      OpCase("AveragePool").in({1, 3, 7, 7}).attr("kernel_shape", Ints{3, 3}).outputs(2).infer(),
      HasSubstr("expects 1 output, got 2"));
  EXPECT_THAT(OpCase("MaxPool").in({1, 3, 7, 7}).infer(),
              HasSubstr("required attribute 'kernel_shape' is missing"));
  EXPECT_THAT(OpCase("MaxPool").in({3, 7}).attr("kernel_shape", Ints{3}).infer(),
              HasSubstr("input 'in0' f32[3,7] must have rank >= 3 (N, C, spatial...)"));
}

TEST(OpsPool, GlobalAveragePoolKeepsSpatialRank) {
  OpCase c("GlobalAveragePool");
  c.in({2, 8, 7, 7});
  EXPECT_EQ(c.infer(), "f32[2,8,1,1]");
  EXPECT_EQ(c.flops(), 2 * 8 * 49 + 2 * 8);
  EXPECT_EQ(OpCase("GlobalAveragePool").in({2, 8, 5}).infer(), "f32[2,8,1]");
}

}  // namespace
}  // namespace autopar
