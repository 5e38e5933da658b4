// Every gradient rule against central differences in f64, over several shapes including
// broadcasting.
#include <gtest/gtest.h>

#include "testing/gradient_check.h"
#include "testing/run_node.h"

namespace autopar {
namespace {

using testing::GradientCheck;
using testing::random_f64;

Tensor ints(std::vector<int64_t> values) { return Tensor::vector_int64(values); }

// Positive inputs for ops defined on (0, ∞).
Tensor positive(std::vector<int64_t> dims, uint64_t seed) {
  return random_f64(std::move(dims), seed, 0.5, 2.0);
}

TEST(GradientRules, BinaryArithmeticWithBroadcasting) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    EXPECT_EQ(GradientCheck(op).wrt(random_f64({2, 3}, 1)).wrt(positive({2, 3}, 2)).check(), "")
        << op;
    EXPECT_EQ(GradientCheck(op).wrt(random_f64({2, 3, 4}, 3)).wrt(positive({3, 1}, 4)).check(), "")
        << op;
    EXPECT_EQ(GradientCheck(op).wrt(random_f64({4}, 5)).wrt(positive({2, 1, 4}, 6)).check(), "")
        << op;
    EXPECT_EQ(GradientCheck(op).wrt(random_f64({}, 7)).wrt(positive({3}, 8)).check(), "") << op;
  }
  EXPECT_EQ(GradientCheck("Pow").wrt(positive({2, 3}, 9)).wrt(random_f64({3}, 10)).check(), "");
  EXPECT_EQ(
      GradientCheck("Pow").wrt(positive({2, 3}, 11)).constant(testing::f64({}, {2.0})).check(), "");
}

TEST(GradientRules, UnaryMath) {
  for (const char* op : {"Neg", "Exp", "Erf", "Tanh", "Sigmoid", "Relu", "Abs", "Softplus",
                         "Softsign", "Identity"}) {
    EXPECT_EQ(GradientCheck(op).wrt(random_f64({3, 4}, 20)).check(), "") << op;
    EXPECT_EQ(GradientCheck(op).wrt(random_f64({5}, 21)).check(), "") << op;
  }
  for (const char* op : {"Sqrt", "Reciprocal", "Log"}) {
    EXPECT_EQ(GradientCheck(op).wrt(positive({3, 4}, 22)).check(), "") << op;
  }
}

TEST(GradientRules, ActivationsWithAttributes) {
  EXPECT_EQ(GradientCheck("LeakyRelu").wrt(random_f64({3, 4}, 30)).attr("alpha", 0.1f).check(), "");
  EXPECT_EQ(GradientCheck("Elu").wrt(random_f64({3, 4}, 31)).attr("alpha", 0.7f).check(), "");
  EXPECT_EQ(GradientCheck("Selu").wrt(random_f64({3, 4}, 32)).check(), "");
  EXPECT_EQ(
      GradientCheck("HardSigmoid").wrt(random_f64({3, 4}, 33, -4, 4)).attr("alpha", 0.25f).check(),
      "");
  EXPECT_EQ(GradientCheck("HardSwish").wrt(random_f64({4, 5}, 34, -5, 5)).check(), "");
  EXPECT_EQ(
      GradientCheck("PRelu").wrt(random_f64({2, 3, 4}, 35)).wrt(random_f64({3, 1}, 36)).check(),
      "");
}

TEST(GradientRules, ClipWithInputsAndAttributes) {
  EXPECT_EQ(GradientCheck("Clip")
                .wrt(random_f64({3, 4}, 40))
                .constant(testing::f64({}, {-0.5}))
                .constant(testing::f64({}, {0.5}))
                .check(),
            "");
  EXPECT_EQ(GradientCheck("Clip")
                .wrt(random_f64({3, 4}, 41))
                .omitted()
                .constant(testing::f64({}, {0.3}))
                .check(),
            "");
  EXPECT_EQ(GradientCheck("Clip", 9)
                .wrt(random_f64({6}, 42))
                .attr("min", -0.2f)
                .attr("max", 0.6f)
                .check(),
            "");
}

TEST(GradientRules, VariadicAndSelection) {
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) {
    EXPECT_EQ(GradientCheck(op)
                  .wrt(random_f64({2, 3}, 50))
                  .wrt(random_f64({3}, 51))
                  .wrt(random_f64({2, 1}, 52))
                  .check(),
              "")
        << op;
  }
  EXPECT_EQ(GradientCheck("Where")
                .constant(testing::boolean({2, 3}, {true, false, true, false, false, true}))
                .wrt(random_f64({2, 3}, 53))
                .wrt(random_f64({3}, 54))
                .check(),
            "");
}

TEST(GradientRules, MatMulShapes) {
  EXPECT_EQ(GradientCheck("MatMul").wrt(random_f64({3, 4}, 60)).wrt(random_f64({4, 5}, 61)).check(),
            "");
  EXPECT_EQ(
      GradientCheck("MatMul").wrt(random_f64({2, 3, 4}, 62)).wrt(random_f64({4, 5}, 63)).check(),
      "");
  EXPECT_EQ(GradientCheck("MatMul")
                .wrt(random_f64({2, 1, 3, 4}, 64))
                .wrt(random_f64({3, 4, 2}, 65))
                .check(),
            "");
  EXPECT_EQ(GradientCheck("MatMul").wrt(random_f64({4}, 66)).wrt(random_f64({2, 4, 3}, 67)).check(),
            "");
  EXPECT_EQ(GradientCheck("MatMul").wrt(random_f64({2, 3, 4}, 68)).wrt(random_f64({4}, 69)).check(),
            "");
  EXPECT_EQ(GradientCheck("MatMul").wrt(random_f64({4}, 70)).wrt(random_f64({4}, 71)).check(), "");
}

TEST(GradientRules, GemmTranspositionsAndBias) {
  for (int64_t ta : {0, 1}) {
    for (int64_t tb : {0, 1}) {
      std::vector<int64_t> a = ta ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4};
      std::vector<int64_t> b = tb ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5};
      EXPECT_EQ(GradientCheck("Gemm")
                    .wrt(random_f64(a, 80))
                    .wrt(random_f64(b, 81))
                    .wrt(random_f64({5}, 82))
                    .attr("transA", ta)
                    .attr("transB", tb)
                    .attr("alpha", 0.5f)
                    .attr("beta", 2.0f)
                    .check(),
                "")
          << ta << tb;
    }
  }
  EXPECT_EQ(GradientCheck("Gemm").wrt(random_f64({3, 4}, 83)).wrt(random_f64({4, 5}, 84)).check(),
            "");
}

TEST(GradientRules, SoftmaxFamilies) {
  EXPECT_EQ(GradientCheck("Softmax").wrt(random_f64({3, 5}, 90)).check(), "");
  EXPECT_EQ(
      GradientCheck("Softmax").wrt(random_f64({2, 3, 4}, 91)).attr("axis", int64_t{1}).check(), "");
  EXPECT_EQ(GradientCheck("LogSoftmax").wrt(random_f64({3, 5}, 92)).check(), "");
  EXPECT_EQ(
      GradientCheck("LogSoftmax").wrt(random_f64({2, 3, 4}, 93)).attr("axis", int64_t{0}).check(),
      "");
}

TEST(GradientRules, LayerNormalization) {
  EXPECT_EQ(GradientCheck("LayerNormalization")
                .wrt(random_f64({2, 3, 6}, 100))
                .wrt(random_f64({6}, 101))
                .wrt(random_f64({6}, 102))
                .attr("axis", int64_t{-1})
                .attr("stash_type", int64_t{11})
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("LayerNormalization")
                .wrt(random_f64({2, 3, 4}, 103))
                .wrt(random_f64({3, 4}, 104))
                .attr("axis", int64_t{1})
                .attr("stash_type", int64_t{11})
                .check(1e-5),
            "");
}

// The fused ops of Llama-style models (ai.autopar.training), whose rules build their Grad ops.
TEST(GradientRules, RMSNormalization) {
  EXPECT_EQ(GradientCheck("RMSNormalization")
                .domain(std::string(kTrainingDomain))
                .wrt(random_f64({2, 3, 6}, 110))
                .wrt(random_f64({6}, 111))
                .attr("axis", int64_t{-1})
                .attr("epsilon", 1e-5f)
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("RMSNormalization")
                .domain(std::string(kTrainingDomain))
                .wrt(random_f64({2, 3, 4}, 112))
                .wrt(random_f64({3, 4}, 113))
                .attr("axis", int64_t{1})
                .check(1e-5),
            "");
}

TEST(GradientRules, RotaryEmbedding) {
  // X [batch, heads, seq, d] against tables [seq, d]; the tables are constants.
  Tensor cos = random_f64({5, 6}, 121), sin = random_f64({5, 6}, 122);
  EXPECT_EQ(GradientCheck("RotaryEmbedding")
                .domain(std::string(kTrainingDomain))
                .wrt(random_f64({2, 3, 5, 6}, 120))
                .constant(cos)
                .constant(sin)
                .check(1e-6),
            "");
  EXPECT_EQ(GradientCheck("RotaryEmbedding")
                .domain(std::string(kTrainingDomain))
                .wrt(random_f64({5, 6}, 123))
                .constant(cos)
                .constant(sin)
                .check(1e-6),
            "");
}

TEST(GradientRules, SwiGLU) {
  EXPECT_EQ(GradientCheck("SwiGLU")
                .domain(std::string(kTrainingDomain))
                .wrt(random_f64({2, 3, 8}, 130, -3.0, 3.0))
                .wrt(random_f64({2, 3, 8}, 131))
                .check(1e-6),
            "");
}

// FlashAttention's form: the gradients from the output and its rows' log-sum-exp. Grouped
// queries (4 query heads on 2 key/value heads), with and without the causal mask, and a
// value width unlike the key's.
TEST(GradientRules, Attention) {
  for (int64_t causal : {0, 1}) {
    EXPECT_EQ(GradientCheck("Attention")
                  .domain(std::string(kTrainingDomain))
                  .wrt(random_f64({2, 4, 5, 3}, 140))
                  .wrt(random_f64({2, 2, 5, 3}, 141))
                  .wrt(random_f64({2, 2, 5, 6}, 142))
                  .attr("scale", Attribute(0.7f))
                  .attr("causal", Attribute(causal))
                  .outputs(2)
                  .loss_outputs({0})
                  .check(1e-6),
              "")
        << "causal " << causal;
  }
}

TEST(GradientRules, BatchNormalizationTrainingAndInference) {
  EXPECT_EQ(GradientCheck("BatchNormalization", 15)
                .wrt(random_f64({3, 2, 2, 3}, 110))
                .wrt(random_f64({2}, 111))
                .wrt(random_f64({2}, 112))
                .constant(testing::f64({2}, {0.1, -0.2}))
                .constant(testing::f64({2}, {1.5, 0.7}))
                .attr("training_mode", int64_t{1})
                .outputs(3)
                .loss_outputs({0})
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("BatchNormalization", 15)
                .wrt(random_f64({3, 2, 4}, 113))
                .wrt(random_f64({2}, 114))
                .wrt(random_f64({2}, 115))
                .constant(testing::f64({2}, {0.1, -0.2}))
                .constant(testing::f64({2}, {1.5, 0.7}))
                .check(),
            "");
}

TEST(GradientRules, SoftmaxCrossEntropyLoss) {
  for (const char* reduction : {"mean", "sum", "none"}) {
    EXPECT_EQ(GradientCheck("SoftmaxCrossEntropyLoss")
                  .wrt(random_f64({4, 5}, 120))
                  .constant(ints({0, 4, 2, 2}))
                  .attr("reduction", reduction)
                  .check(1e-5),
              "")
        << reduction;
  }
  EXPECT_EQ(GradientCheck("SoftmaxCrossEntropyLoss")
                .wrt(random_f64({2, 3, 4}, 121))
                .constant(Tensor::from_int64({2, 4}, std::vector<int64_t>{0, 1, 2, 1, 2, 2, 0, 1}))
                .constant(testing::f64({3}, {0.5, 1.0, 2.0}))
                .attr("ignore_index", int64_t{1})
                .check(1e-5),
            "");
}

TEST(GradientRules, Reductions) {
  EXPECT_EQ(GradientCheck("ReduceSum").wrt(random_f64({2, 3, 4}, 130)).constant(ints({1})).check(),
            "");
  EXPECT_EQ(GradientCheck("ReduceSum")
                .wrt(random_f64({2, 3, 4}, 131))
                .constant(ints({0, 2}))
                .attr("keepdims", int64_t{0})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("ReduceSum").wrt(random_f64({2, 3}, 132)).check(), "");
  EXPECT_EQ(GradientCheck("ReduceMean")
                .wrt(random_f64({2, 3, 4}, 133))
                .attr("axes", std::vector<int64_t>{-1})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("ReduceMean")
                .wrt(random_f64({2, 3, 4}, 134))
                .attr("keepdims", int64_t{0})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("ReduceMax")
                .wrt(random_f64({2, 3, 4}, 135))
                .attr("axes", std::vector<int64_t>{1})
                .check(),
            "");
}

TEST(GradientRules, DataMovement) {
  EXPECT_EQ(
      GradientCheck("Reshape").wrt(random_f64({2, 3, 4}, 140)).constant(ints({6, -1})).check(), "");
  EXPECT_EQ(
      GradientCheck("Flatten").wrt(random_f64({2, 3, 4}, 141)).attr("axis", int64_t{2}).check(),
      "");
  EXPECT_EQ(GradientCheck("Unsqueeze").wrt(random_f64({2, 3}, 142)).constant(ints({0, 3})).check(),
            "");
  EXPECT_EQ(GradientCheck("Squeeze").wrt(random_f64({2, 1, 3}, 143)).constant(ints({1})).check(),
            "");
  EXPECT_EQ(GradientCheck("Transpose")
                .wrt(random_f64({2, 3, 4}, 144))
                .attr("perm", std::vector<int64_t>{2, 0, 1})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("Transpose").wrt(random_f64({2, 3}, 145)).check(), "");
  EXPECT_EQ(GradientCheck("Concat")
                .wrt(random_f64({2, 3}, 146))
                .wrt(random_f64({2, 1}, 147))
                .attr("axis", int64_t{1})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("Split")
                .wrt(random_f64({2, 5}, 148))
                .constant(ints({2, 3}))
                .attr("axis", int64_t{1})
                .outputs(2)
                .check(),
            "");
  EXPECT_EQ(
      GradientCheck("Split").wrt(random_f64({6, 2}, 149)).outputs(3).loss_outputs({0, 2}).check(),
      "");
  EXPECT_EQ(GradientCheck("Expand").wrt(random_f64({3, 1}, 150)).constant(ints({2, 3, 4})).check(),
            "");
  EXPECT_EQ(GradientCheck("Tile").wrt(random_f64({2, 3}, 151)).constant(ints({2, 3})).check(), "");
}

TEST(GradientRules, GatherAccumulatesRepeatedIndices) {
  EXPECT_EQ(
      GradientCheck("Gather").wrt(random_f64({5, 3}, 160)).constant(ints({0, 4, 0, -1})).check(),
      "");
  EXPECT_EQ(GradientCheck("Gather")
                .wrt(random_f64({2, 5, 3}, 161))
                .constant(Tensor::from_int64({2, 2}, std::vector<int64_t>{1, 1, 3, 0}))
                .attr("axis", int64_t{1})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("Gather")
                .wrt(random_f64({2, 3, 4}, 162))
                .constant(Tensor::scalar_int64(2))
                .attr("axis", int64_t{2})
                .check(),
            "");
}

TEST(GradientRules, CastAndDropout) {
  EXPECT_EQ(GradientCheck("Cast").wrt(random_f64({3}, 170)).attr("to", int64_t{11}).check(), "");
  EXPECT_EQ(GradientCheck("Dropout").wrt(random_f64({3, 4}, 171)).check(), "");
}

TEST(GradientRules, ConvolutionShapesGroupsStridesPadsDilations) {
  EXPECT_EQ(GradientCheck("Conv")
                .wrt(random_f64({2, 3, 5, 5}, 200))
                .wrt(random_f64({4, 3, 3, 3}, 201))
                .wrt(random_f64({4}, 202))
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("Conv")
                .wrt(random_f64({1, 4, 7, 6}, 203))
                .wrt(random_f64({6, 2, 3, 2}, 204))
                .attr("group", int64_t{2})
                .attr("strides", std::vector<int64_t>{2, 2})
                .attr("pads", std::vector<int64_t>{1, 0, 1, 1})
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("Conv")
                .wrt(random_f64({2, 2, 9}, 205))
                .wrt(random_f64({3, 2, 3}, 206))
                .attr("dilations", std::vector<int64_t>{2})
                .attr("strides", std::vector<int64_t>{2})
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("Conv")
                .wrt(random_f64({1, 3, 5, 5}, 207))
                .wrt(random_f64({3, 1, 3, 3}, 208))
                .attr("group", int64_t{3})
                .attr("auto_pad", "SAME_UPPER")
                .check(1e-5),
            "");
}

TEST(GradientRules, ConvTranspose) {
  EXPECT_EQ(GradientCheck("ConvTranspose")
                .wrt(random_f64({2, 3, 4, 4}, 210))
                .wrt(random_f64({3, 2, 3, 3}, 211))
                .wrt(random_f64({2}, 212))
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("ConvTranspose")
                .wrt(random_f64({1, 4, 3, 3}, 213))
                .wrt(random_f64({4, 1, 3, 3}, 214))
                .attr("group", int64_t{2})
                .attr("strides", std::vector<int64_t>{2, 2})
                .attr("pads", std::vector<int64_t>{1, 1, 1, 1})
                .attr("output_padding", std::vector<int64_t>{1, 0})
                .check(1e-5),
            "");
}

TEST(GradientRules, ConvTransposeOutputShape) {
  // output_shape longer than the natural extent (the end extended) and shorter (cut).
  EXPECT_EQ(GradientCheck("ConvTranspose")
                .wrt(random_f64({1, 2, 3, 3}, 215))
                .wrt(random_f64({2, 2, 3, 3}, 216))
                .attr("strides", std::vector<int64_t>{2, 2})
                .attr("output_shape", std::vector<int64_t>{8, 6})
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("ConvTranspose")
                .wrt(random_f64({1, 2, 3, 3}, 217))
                .wrt(random_f64({2, 1, 2, 2}, 218))
                .attr("strides", std::vector<int64_t>{3, 3})
                .attr("auto_pad", "SAME_LOWER")
                .attr("output_shape", std::vector<int64_t>{7, 10})
                .check(1e-5),
            "");
}

TEST(GradientRules, Pooling) {
  EXPECT_EQ(GradientCheck("MaxPool")
                .wrt(random_f64({2, 2, 5, 5}, 220))
                .attr("kernel_shape", std::vector<int64_t>{2, 2})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("MaxPool")
                .wrt(random_f64({1, 2, 6, 6}, 221))
                .attr("kernel_shape", std::vector<int64_t>{3, 3})
                .attr("strides", std::vector<int64_t>{2, 2})
                .attr("pads", std::vector<int64_t>{1, 1, 1, 1})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("AveragePool")
                .wrt(random_f64({2, 2, 5, 5}, 222))
                .attr("kernel_shape", std::vector<int64_t>{2, 2})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("AveragePool")
                .wrt(random_f64({1, 2, 6, 7}, 223))
                .attr("kernel_shape", std::vector<int64_t>{3, 3})
                .attr("strides", std::vector<int64_t>{2, 2})
                .attr("pads", std::vector<int64_t>{1, 1, 1, 1})
                .attr("ceil_mode", int64_t{1})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("AveragePool")
                .wrt(random_f64({1, 1, 5, 5}, 224))
                .attr("kernel_shape", std::vector<int64_t>{3, 3})
                .attr("pads", std::vector<int64_t>{1, 1, 1, 1})
                .attr("count_include_pad", int64_t{1})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("GlobalAveragePool").wrt(random_f64({2, 3, 4, 5}, 225)).check(), "");
}

TEST(GradientRules, SlicePadResize) {
  EXPECT_EQ(GradientCheck("Slice")
                .wrt(random_f64({4, 6}, 230))
                .constant(ints({1, -4}))
                .constant(ints({3, 100}))
                .check(),
            "");
  EXPECT_EQ(GradientCheck("Slice")
                .wrt(random_f64({5, 6}, 231))
                .constant(ints({-1, 0}))
                .constant(ints({INT64_MIN, 6}))
                .constant(ints({0, 1}))
                .constant(ints({-2, 2}))
                .check(),
            "");
  EXPECT_EQ(GradientCheck("Pad").wrt(random_f64({2, 3}, 232)).constant(ints({1, 0, 2, 1})).check(),
            "");
  EXPECT_EQ(
      GradientCheck("Pad").wrt(random_f64({4, 5}, 233)).constant(ints({-1, 2, 1, -2})).check(), "");
  EXPECT_EQ(GradientCheck("Pad")
                .wrt(random_f64({3, 4}, 234))
                .constant(ints({2, 1, 1, 3}))
                .attr("mode", "reflect")
                .check(),
            "");
  EXPECT_EQ(GradientCheck("Pad")
                .wrt(random_f64({3, 4}, 235))
                .constant(ints({0, 2, 1, 3}))
                .attr("mode", "edge")
                .check(),
            "");
  EXPECT_EQ(GradientCheck("Resize")
                .wrt(random_f64({1, 2, 3, 4}, 236))
                .omitted()
                .constant(testing::f64({4}, {1.0, 1.0, 2.0, 1.5}))
                .attr("mode", "linear")
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("Resize")
                .wrt(random_f64({1, 1, 4, 4}, 237))
                .omitted()
                .omitted()
                .constant(ints({1, 1, 3, 7}))
                .attr("mode", "cubic")
                .attr("coordinate_transformation_mode", "align_corners")
                .check(1e-5),
            "");
  EXPECT_EQ(GradientCheck("Resize")
                .wrt(random_f64({1, 2, 2, 3}, 238))
                .omitted()
                .constant(testing::f64({4}, {1.0, 1.0, 2.0, 2.0}))
                .attr("mode", "nearest")
                .check(),
            "");
}

TEST(GradientRules, GathersAndScatters) {
  const Tensor idx = Tensor::from_int64({2, 3}, std::vector<int64_t>{0, 2, 1, 1, 0, -1});
  EXPECT_EQ(GradientCheck("GatherElements")
                .wrt(random_f64({3, 3}, 240))
                .constant(idx)
                .attr("axis", int64_t{0})
                .check(),
            "");
  EXPECT_EQ(GradientCheck("GatherND")
                .wrt(random_f64({4, 3}, 241))
                .constant(Tensor::from_int64({2, 1}, std::vector<int64_t>{3, 1}))
                .check(),
            "");
  EXPECT_EQ(GradientCheck("ScatterElements")
                .wrt(random_f64({3, 3}, 242))
                .constant(Tensor::from_int64({1, 3}, std::vector<int64_t>{2, 0, 1}))
                .wrt(random_f64({1, 3}, 243))
                .check(),
            "");
  EXPECT_EQ(GradientCheck("ScatterElements")
                .wrt(random_f64({3, 3}, 244))
                .constant(idx)
                .wrt(random_f64({2, 3}, 245))
                .attr("reduction", "add")
                .check(),
            "");
  EXPECT_EQ(GradientCheck("ScatterND")
                .wrt(random_f64({5, 2}, 246))
                .constant(Tensor::from_int64({2, 1}, std::vector<int64_t>{4, 0}))
                .wrt(random_f64({2, 2}, 247))
                .check(),
            "");
}

}  // namespace
}  // namespace autopar
