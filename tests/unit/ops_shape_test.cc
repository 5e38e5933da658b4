// Shape ops: every op's output shape across opset forms, clamping, constant inputs and errors.
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace autopar {
namespace {

using ops_test::OpCase;
using ::testing::HasSubstr;

using Ints = std::vector<int64_t>;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(OpsFlatten, SplitsDimsAtTheAxis) {
  EXPECT_EQ(OpCase("Flatten").in({2, 3, 4, 5}).attr("axis", 2).infer(), "f32[6,20]");
  EXPECT_EQ(OpCase("Flatten").in({2, 3, 4, 5}).infer(), "f32[2,60]");
  EXPECT_EQ(OpCase("Flatten").in({2, 3, 4, 5}).attr("axis", 0).infer(), "f32[1,120]");
  EXPECT_EQ(OpCase("Flatten").in({2, 3, 4, 5}).attr("axis", 4).infer(), "f32[120,1]");
  EXPECT_EQ(OpCase("Flatten").in({2, 3, 4, 5}).attr("axis", -1).infer(), "f32[24,5]");
  EXPECT_THAT(OpCase("Flatten").in({2, 3}).attr("axis", 3).infer(),
              HasSubstr("axis 3 is out of range [-2, 2] for input 'in0' f32[2,3]"));
}

TEST(OpsReshape, CopiesZerosAndInfersMinusOne) {
  OpCase c("Reshape");
  c.in({2, 3, 4}).ints({0, -1});
  EXPECT_EQ(c.infer(), "f32[2,12]");
  EXPECT_EQ(c.flops(), 0);
  EXPECT_EQ(OpCase("Reshape").in({2, 3, 4}).ints({-1, 4}).infer(), "f32[6,4]");
  EXPECT_EQ(OpCase("Reshape").in({2, 3, 4}).ints({4, 0, 2}).infer(), "f32[4,3,2]");
  EXPECT_EQ(OpCase("Reshape").in({0, 4}).ints({0, 4}).attr("allowzero", 1).infer(), "f32[0,4]");
  EXPECT_EQ(OpCase("Reshape").in({6}).ints({}).infer(),
            "error: node 'n' (Reshape): cannot "
            "reshape input 'in0' f32[6] (6 "
            "elements) to [] (1 elements)");
}

TEST(OpsReshape, RequiresAConstantShape) {
  EXPECT_EQ(OpCase("Reshape").in({2, 3}).in(DType::kInt64, {2}).infer(),
            "error: node 'n' (Reshape): shape input 'in1' is not a constant");
  EXPECT_THAT(OpCase("Reshape").in({2, 3}).floats({6}).infer(),
              HasSubstr("shape input 'in1' must be an integer tensor, got f32"));
}

TEST(OpsReshape, RejectsBadShapes) {
  EXPECT_THAT(OpCase("Reshape").in({2, 3, 4}).ints({5, 5}).infer(),
              HasSubstr("cannot reshape input 'in0' f32[2,3,4] (24 elements) to [5,5] (25 "
                        "elements)"));
  EXPECT_THAT(OpCase("Reshape").in({2, 3, 4}).ints({-1, -1}).infer(),
              HasSubstr("shape [-1,-1] has more than one -1"));
  EXPECT_THAT(OpCase("Reshape").in({2, 3, 4}).ints({5, -1}).infer(),
              HasSubstr("24 elements do not divide by 5"));
  EXPECT_THAT(OpCase("Reshape").in({2, 3}).ints({2, 3, 0}).infer(),
              HasSubstr("shape [2,3,0] copies dim 2 (0) but input 'in0' f32[2,3] has rank 2"));
  EXPECT_THAT(OpCase("Reshape").in({2, 3}).ints({-2, 3}).infer(),
              HasSubstr("shape [-2,3] has invalid dim -2"));
  EXPECT_THAT(OpCase("Reshape").in({0, 3}).ints({0, -1}).attr("allowzero", 1).infer(),
              HasSubstr("has both 0 and -1 with allowzero=1"));
  EXPECT_THAT(OpCase("Reshape").in({2}).ints({kMax, kMax, 0}).attr("allowzero", 1).infer(),
              HasSubstr("more than 2^56 elements"));
}

TEST(OpsTranspose, DefaultReversesAndPermValidates) {
  EXPECT_EQ(OpCase("Transpose").in({2, 3, 4}).infer(), "f32[4,3,2]");
  EXPECT_EQ(OpCase("Transpose").in({2, 3, 4}).attr("perm", Ints{0, 2, 1}).infer(), "f32[2,4,3]");
  EXPECT_EQ(OpCase("Transpose").in({2, 3, 4}).attr("perm", Ints{0, 0, 1}).infer(),
            "error: node 'n' (Transpose): perm [0,0,1] is not a permutation of 3 dims");
  EXPECT_THAT(OpCase("Transpose").in({2, 3}).attr("perm", Ints{0, 1, 2}).infer(),
              HasSubstr("is not a permutation of 2 dims"));
  EXPECT_THAT(OpCase("Transpose").in({2, 3}).attr("perm", Ints{0, 5}).infer(),
              HasSubstr("is not a permutation of 2 dims"));
}

TEST(OpsConcat, JoinsAlongTheAxis) {
  EXPECT_EQ(OpCase("Concat").in({2, 3}).in({2, 5}).in({2, 1}).attr("axis", -1).infer(), "f32[2,9]");
  EXPECT_THAT(OpCase("Concat").in({2, 3}).in({3, 3}).attr("axis", 1).infer(),
              HasSubstr("input 'in1' f32[3,3] does not match input 'in0' f32[2,3] outside axis 1"));
  EXPECT_THAT(OpCase("Concat").in({2, 3}).in(DType::kInt64, {2, 3}).attr("axis", 0).infer(),
              HasSubstr("does not match"));
  EXPECT_THAT(OpCase("Concat").in({2, 3}).infer(),
              HasSubstr("required attribute 'axis' is missing"));
  EXPECT_THAT(OpCase("Concat").in({2, 3}).none().attr("axis", 0).infer(),
              HasSubstr("required input 1 is missing"));
  EXPECT_THAT(OpCase("Concat").attr("axis", 0).infer(), HasSubstr("expects at least 1 input"));
}

TEST(OpsSplit, EqualOrGivenSizesAcrossOpsets) {
  EXPECT_EQ(OpCase("Split").in({6, 4}).outputs(3).infer(), "f32[2,4] f32[2,4] f32[2,4]");
  EXPECT_EQ(OpCase("Split").in({6, 4}).ints({1, 5}).outputs(2).infer(), "f32[1,4] f32[5,4]");
  EXPECT_EQ(
      OpCase("Split", 11).in({6, 4}).attr("split", Ints{1, 3}).attr("axis", -1).outputs(2).infer(),
      "f32[6,1] f32[6,3]");
  EXPECT_THAT(OpCase("Split", 11).in({6, 4}).ints({3, 3}).outputs(2).infer(),
              HasSubstr("expects 1 input, got 2"));
  EXPECT_THAT(OpCase("Split").in({7, 4}).outputs(3).infer(),
              HasSubstr("dim 0 of size 7 does not split equally into 3 outputs"));
  EXPECT_THAT(OpCase("Split").in({6, 4}).ints({1, 2}).outputs(2).infer(),
              HasSubstr("split [1,2] sums to 3, but dim 0 of input 'in0' f32[6,4] is 6"));
  EXPECT_THAT(OpCase("Split").in({6, 4}).ints({6}).outputs(2).infer(),
              HasSubstr("split [6] has 1 sizes for 2 outputs"));
  EXPECT_THAT(OpCase("Split").in({6, 4}).ints({7, -1}).outputs(2).infer(),
              HasSubstr("split size -1 is invalid"));
}

TEST(OpsSlice, ClampsNegativeIndicesAndSteps) {
  OpCase c("Slice");
  c.in({10, 20, 30}).ints({1, -5}).ints({kMax, -1}).ints({0, 2});
  EXPECT_EQ(c.infer(), "f32[9,20,4]");
  EXPECT_EQ(c.flops(), 0);
  // Backwards from the end with step -2 over 20 elements: 19, 17, ..., 1.
  EXPECT_EQ(OpCase("Slice").in({10, 20, 30}).ints({-1}).ints({kMin}).ints({1}).ints({-2}).infer(),
            "f32[10,10,30]");
  EXPECT_EQ(OpCase("Slice").in({10, 20, 30}).ints({-1}).ints({kMin}).ints({1}).ints({-3}).infer(),
            "f32[10,7,30]");
  EXPECT_EQ(OpCase("Slice").in({10}).ints({15}).ints({20}).infer(), "f32[0]");
  EXPECT_EQ(OpCase("Slice").in({10}).ints({8}).ints({2}).none().ints({kMin}).infer(), "f32[1]");
  EXPECT_EQ(OpCase("Slice").in({10}).ints({0}).ints({10}).none().ints({3}).infer(), "f32[4]");
}

TEST(OpsSlice, ReadsAttributesBeforeOpset10) {
  EXPECT_EQ(OpCase("Slice", 9).in({10, 20}).attr("starts", Ints{0}).attr("ends", Ints{2}).infer(),
            "f32[2,20]");
  EXPECT_EQ(OpCase("Slice", 9)
                .in({10, 20})
                .attr("starts", Ints{5})
                .attr("ends", Ints{-1})
                .attr("axes", Ints{-1})
                .infer(),
            "f32[10,14]");
  EXPECT_THAT(OpCase("Slice", 9).in({10}).attr("starts", Ints{0}).infer(),
              HasSubstr("attributes 'starts' and 'ends' are required before opset 10"));
}

TEST(OpsSlice, RejectsBadParameters) {
  EXPECT_THAT(OpCase("Slice").in({10}).ints({0}).ints({5}).none().ints({0}).infer(),
              HasSubstr("step for axis 0 is 0"));
  EXPECT_THAT(OpCase("Slice").in({10, 4}).ints({0, 0}).ints({5, 5}).ints({0, -2}).infer(),
              HasSubstr("axes repeat axis 0"));
  EXPECT_THAT(OpCase("Slice").in({10}).in(DType::kInt64, {1}).ints({5}).infer(),
              HasSubstr("starts input 'in1' is not a constant"));
  EXPECT_THAT(OpCase("Slice").in({10}).ints({0, 1}).ints({5}).infer(),
              HasSubstr("starts has 2 values but ends has 1"));
  EXPECT_THAT(OpCase("Slice").in({10}).ints({0}).ints({5}).ints({1}).infer(),
              HasSubstr("axes 1 is out of range for rank 1"));
}

TEST(OpsGather, InsertsIndexDims) {
  EXPECT_EQ(OpCase("Gather").in({100, 16}).in(DType::kInt64, {2, 5}).infer(), "f32[2,5,16]");
  EXPECT_EQ(
      OpCase("Gather").in({4, 10, 6}).constant(Tensor::scalar_int64(-10)).attr("axis", -2).infer(),
      "f32[4,6]");
  EXPECT_EQ(OpCase("Gather").in({4, 8}).in(DType::kInt32, {3}).attr("axis", 1).infer(), "f32[4,3]");
  EXPECT_THAT(OpCase("Gather").in({4, 8}).ints({5}).infer(),
              HasSubstr("index 5 is out of range for dim 0 of size 4"));
  EXPECT_THAT(OpCase("Gather").in({4, 8}).in({2}).infer(),
              HasSubstr("indices input 'in1' f32[2] must be i32 or i64"));
  EXPECT_THAT(OpCase("Gather").in({4, 8}).in(DType::kInt64, {2}).attr("axis", 2).infer(),
              HasSubstr("axis 2 is out of range for rank 2"));
}

TEST(OpsUnsqueeze, AxesMoveFromAttributeToInputInOpset13) {
  EXPECT_EQ(OpCase("Unsqueeze").in({3, 4}).ints({0, -1}).infer(), "f32[1,3,4,1]");
  EXPECT_EQ(OpCase("Unsqueeze", 11).in({3, 4}).attr("axes", Ints{1}).infer(), "f32[3,1,4]");
  EXPECT_EQ(OpCase("Unsqueeze").in({}).ints({0}).infer(), "f32[1]");
  EXPECT_THAT(OpCase("Unsqueeze", 11).in({3, 4}).infer(),
              HasSubstr("required attribute 'axes' is missing"));
  EXPECT_THAT(OpCase("Unsqueeze").in({3, 4}).infer(), HasSubstr("expects 2 inputs, got 1"));
  EXPECT_THAT(OpCase("Unsqueeze").in({3, 4}).ints({3}).infer(),
              HasSubstr("axes 3 is out of range for rank 3"));
  EXPECT_THAT(OpCase("Unsqueeze").in({3, 4}).ints({0, -4}).infer(),
              HasSubstr("axes repeat axis 0"));
}

TEST(OpsSqueeze, RemovesGivenOrAllUnitDims) {
  EXPECT_EQ(OpCase("Squeeze").in({1, 3, 1, 4}).infer(), "f32[3,4]");
  EXPECT_EQ(OpCase("Squeeze").in({1, 3, 1, 4}).ints({-2}).infer(), "f32[1,3,4]");
  EXPECT_EQ(OpCase("Squeeze", 11).in({1, 3, 1, 4}).attr("axes", Ints{0}).infer(), "f32[3,1,4]");
  EXPECT_EQ(OpCase("Squeeze").in({1, 1}).infer(), "f32[]");
  EXPECT_THAT(OpCase("Squeeze").in({1, 3, 1, 4}).ints({1}).infer(),
              HasSubstr("cannot squeeze dim 1 of size 3 of input 'in0' f32[1,3,1,4]"));
}

TEST(OpsExpand, BroadcastsToTheConstantShape) {
  EXPECT_EQ(OpCase("Expand").in({3, 1}).ints({2, 1, 4}).infer(), "f32[2,3,4]");
  EXPECT_EQ(OpCase("Expand").in({3, 4}).ints({1, 1}).infer(), "f32[3,4]");
  EXPECT_THAT(OpCase("Expand").in({3}).ints({2, 2}).infer(),
              HasSubstr("input 'in0' f32[3] does not broadcast with shape [2,2]"));
  EXPECT_THAT(OpCase("Expand").in({3}).ints({-1}).infer(),
              HasSubstr("shape [-1] has negative dim -1"));
}

TEST(OpsShape, RankVectorWithOpset15Bounds) {
  EXPECT_EQ(OpCase("Shape").in({2, 3, 4}).infer(), "i64[3]");
  EXPECT_EQ(OpCase("Shape", 15).in({2, 3, 4}).attr("start", 1).infer(), "i64[2]");
  EXPECT_EQ(OpCase("Shape", 15).in({2, 3, 4}).attr("end", -1).infer(), "i64[2]");
  EXPECT_EQ(OpCase("Shape", 15).in({2, 3, 4}).attr("start", -10).attr("end", 10).infer(), "i64[3]");
  EXPECT_EQ(OpCase("Shape", 15).in({2, 3, 4}).attr("start", 2).attr("end", 1).infer(), "i64[0]");
  EXPECT_EQ(OpCase("Shape", 13).in({2, 3, 4}).attr("start", 1).infer(), "i64[3]");
}

TEST(OpsTile, MultipliesDimsByRepeats) {
  EXPECT_EQ(OpCase("Tile").in({2, 3}).ints({2, 1}).infer(), "f32[4,3]");
  EXPECT_THAT(OpCase("Tile").in({2, 3}).ints({2}).infer(),
              HasSubstr("repeats [2] has 1 values for input 'in0' f32[2,3]"));
  EXPECT_THAT(OpCase("Tile").in({2, 3}).ints({-1, 1}).infer(),
              HasSubstr("repeat -1 of dim 0 is negative or overflows"));
  EXPECT_THAT(OpCase("Tile").in({2, 3}).ints({kMax, 1}).infer(),
              HasSubstr("repeat 9223372036854775807 of dim 0 is negative or overflows"));
}

TEST(OpsPad, PadsFromInputsOrAttributes) {
  EXPECT_EQ(OpCase("Pad").in({2, 3}).ints({1, 0, 1, 2}).infer(), "f32[4,5]");
  EXPECT_EQ(OpCase("Pad").in({2, 3}).ints({0, -1, 0, 0}).infer(), "f32[2,2]");
  EXPECT_EQ(OpCase("Pad").in({2, 3}).ints({1, 1}).none().ints({1}).attr("mode", "reflect").infer(),
            "f32[2,5]");
  EXPECT_EQ(OpCase("Pad", 9).in({2, 3}).attr("pads", Ints{1, 1, 1, 1}).attr("value", 1.0f).infer(),
            "f32[4,5]");
  EXPECT_THAT(OpCase("Pad").in({2, 3}).ints({0, -4, 0, 0}).infer(),
              HasSubstr("pads [0,-4,0,0] crop dim 1 of input 'in0' f32[2,3] below zero"));
  EXPECT_THAT(OpCase("Pad").in({2, 3}).ints({1, 1}).infer(),
              HasSubstr("pads [1,1] has 2 values, expected 4 for input 'in0' f32[2,3]"));
  EXPECT_THAT(OpCase("Pad").in({2, 3}).ints({0, 0, 0, 0}).attr("mode", "mirror").infer(),
              HasSubstr("mode 'mirror' is not constant, reflect, edge or wrap"));
  EXPECT_THAT(OpCase("Pad", 9).in({2, 3}).infer(),
              HasSubstr("required attribute 'pads' is missing"));
}

TEST(OpsResize, ScalesOrSizesWithEmptyTensorsAsAbsent) {
  OpCase nearest("Resize", 13);
  nearest.in({1, 3, 8, 8}).none().floats({1, 1, 2, 2});
  EXPECT_EQ(nearest.infer(), "f32[1,3,16,16]");
  EXPECT_EQ(nearest.flops(), 0);
  OpCase linear("Resize", 13);
  linear.in({1, 3, 8, 8}).none().floats({1, 1, 2, 2}).attr("mode", "linear");
  ASSERT_EQ(linear.infer(), "f32[1,3,16,16]");
  EXPECT_EQ(linear.flops(), 2 * 4 * 768);
  EXPECT_EQ(OpCase("Resize", 13).in({1, 3, 8, 8}).floats({}).floats({}).ints({1, 3, 5, 5}).infer(),
            "f32[1,3,5,5]");
  EXPECT_EQ(OpCase("Resize", 10).in({1, 3, 8, 8}).floats({1, 1, 0.5f, 0.5f}).infer(),
            "f32[1,3,4,4]");
  EXPECT_THAT(
      OpCase("Resize", 13).in({1, 3, 8, 8}).none().floats({1, 1, 2, 2}).ints({1, 3, 5, 5}).infer(),
      HasSubstr("exactly one of scales and sizes must be given"));
  EXPECT_THAT(OpCase("Resize", 13).in({1, 3, 8, 8}).none().floats({2, 2}).infer(),
              HasSubstr("scales [2,2] has 2 values for input 'in0' f32[1,3,8,8]"));
  EXPECT_THAT(OpCase("Resize", 13).in({1, 3, 8, 8}).none().floats({1, 1, -2, 2}).infer(),
              HasSubstr("scale -2 for dim 2 is not positive or overflows"));
  EXPECT_THAT(OpCase("Resize", 13)
                  .in({1, 3, 8, 8})
                  .none()
                  .floats({1, 1, 2, 2})
                  .attr("mode", "area")
                  .infer(),
              HasSubstr("mode 'area' is not nearest, linear or cubic"));
}

TEST(OpsConstant, OutputTakesTheValueAttribute) {
  auto tensor = std::make_shared<const Tensor>(Tensor::from_int64({2, 2}, Ints{1, 2, 3, 4}));
  EXPECT_EQ(OpCase("Constant").attr("value", TensorPtr(tensor)).infer(), "i64[2,2]");
  EXPECT_EQ(OpCase("Constant").attr("value_float", 1.5f).infer(), "f32[]");
  EXPECT_EQ(OpCase("Constant").attr("value_floats", std::vector<float>{1, 2}).infer(), "f32[2]");
  EXPECT_EQ(OpCase("Constant").attr("value_int", 3).infer(), "i64[]");
  EXPECT_EQ(OpCase("Constant").attr("value_ints", Ints{1, 2, 3}).infer(), "i64[3]");
  EXPECT_THAT(OpCase("Constant").infer(), HasSubstr("expects exactly one value attribute, got 0"));
  EXPECT_THAT(OpCase("Constant").attr("value_int", 1.0f).infer(),
              HasSubstr("attribute 'value_int' must be int, got float"));
  EXPECT_THAT(OpCase("Constant").attr("sparse_value", 1).infer(),
              HasSubstr("attribute 'sparse_value' is not a supported Constant value"));
  EXPECT_THAT(OpCase("Constant").attr("value", TensorPtr()).infer(),
              HasSubstr("attribute 'value' holds no tensor"));
}

}  // namespace
}  // namespace autopar

namespace autopar {
namespace {

using ops_test::OpCase;

TEST(OpsShape, ScatterOpsKeepTheDataShape) {
  EXPECT_EQ(OpCase("ScatterElements")
                .in({3, 4})
                .in(DType::kInt64, {2, 4})
                .in({2, 4})
                .attr("reduction", "add")
                .infer(),
            "f32[3,4]");
  EXPECT_EQ(
      OpCase("ScatterElements").in({3, 4}).in(DType::kInt64, {2, 4}).in({2, 3}).infer(),
      "error: node 'n' (ScatterElements): indices input 'in1' i64[2,4] and updates input 'in2' "
      "f32[2,3] differ in shape");
  EXPECT_EQ(OpCase("ScatterND")
                .in({100, 8})
                .in(DType::kInt64, {2, 5, 1})
                .in({2, 5, 8})
                .attr("reduction", "add")
                .infer(),
            "f32[100,8]");
  EXPECT_EQ(OpCase("ScatterND").in({100, 8}).in(DType::kInt64, {2, 5, 1}).in({2, 8}).infer(),
            "error: node 'n' (ScatterND): updates input 'in2' f32[2,8] must be f32[2,5,8]");
  EXPECT_EQ(OpCase("ConstantOfShape").constant(Tensor::vector_int64({2, 3})).infer(), "f32[2,3]");
}

TEST(OpsElementwiseLogic, ComparisonsGiveBool) {
  EXPECT_EQ(OpCase("Greater").in({2, 3}).in({3}).infer(), "bool[2,3]");
  EXPECT_EQ(OpCase("And").in(DType::kBool, {2, 1}).in(DType::kBool, {3}).infer(), "bool[2,3]");
  EXPECT_EQ(OpCase("Not").in({2}).infer(),
            "error: node 'n' (Not): input 'in0' f32[2] must be bool");
}

}  // namespace
}  // namespace autopar
