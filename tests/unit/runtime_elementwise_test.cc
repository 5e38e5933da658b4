// Elementwise kernels: broadcasting against a naive index loop, integer semantics, every
// activation, the opset forms of Clip and Dropout, Cast between every dtype pair.
#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "autopar/parallel/layout.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/plan_runner.h"
#include "testing/run_node.h"

namespace autopar {
namespace {

using testing::boolean;
using ::testing::ElementsAre;
using testing::f32;
using testing::f64;
using ::testing::HasSubstr;
using testing::i64;
using testing::NodeRun;
using testing::random_f32;
using testing::values_of;

using Dims = std::vector<int64_t>;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <typename T>
Tensor typed(DType dtype, Dims dims, std::vector<T> values) {
  Tensor t(dtype, std::move(dims));
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.num_elements());
  std::copy(values.begin(), values.end(), t.mutable_data<T>().begin());
  return t;
}
Tensor i32(Dims dims, std::vector<int32_t> v) { return typed(DType::kInt32, std::move(dims), v); }
Tensor i8(Dims dims, std::vector<int8_t> v) { return typed(DType::kInt8, std::move(dims), v); }
Tensor u8(Dims dims, std::vector<uint8_t> v) { return typed(DType::kUInt8, std::move(dims), v); }

template <typename T>
std::vector<T> data(const Tensor& t) {
  return std::vector<T>(t.data<T>().begin(), t.data<T>().end());
}

Tensor bool_scalar(bool value) { return boolean({}, {value}); }

// Index into an operand of `dims` for output element `flat` under numpy broadcasting.
int64_t broadcast_index(const Dims& dims, const Dims& out, int64_t flat) {
  int64_t index = 0, scale = 1;
  const size_t shift = out.size() - dims.size();
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t coord = flat % out[d];
    flat /= out[d];
    if (d < shift) continue;
    index += (dims[d - shift] == 1 ? 0 : coord) * scale;
    scale *= dims[d - shift];
  }
  return index;
}

Dims broadcast(const Dims& a, const Dims& b) {
  Dims out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// A float op on two floats is computed exactly in double and rounded once, so rounding the
// double result to float gives the kernel's bits.
TEST(RuntimeElementwise, BroadcastArithmeticMatchesTheNaiveLoop) {
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {3, 1}}, {{1, 5}, {4, 1}},       {{2, 1, 4}, {3, 1}},
      {{}, {2, 3}},           {{2, 3}, {}},        {{4, 1, 1}, {1, 3, 1}}, {{3, 1, 5}, {1, 4, 5}},
      {{1}, {1, 1}},          {{6, 1}, {6, 7}}};
  struct Op {
    const char* name;
    double (*apply)(double, double);
  };
  const Op ops[] = {{"Add", [](double a, double b) { return a + b; }},
                    {"Sub", [](double a, double b) { return a - b; }},
                    {"Mul", [](double a, double b) { return a * b; }},
                    {"Div", [](double a, double b) { return a / b; }}};
  uint64_t seed = 1;
  for (const auto& [a_dims, b_dims] : shapes) {
    const Tensor a = random_f32(a_dims, seed++), b = random_f32(b_dims, seed++);
    const Dims out = broadcast(a_dims, b_dims);
    const std::vector<double> av = values_of(a), bv = values_of(b);
    for (const Op& op : ops) {
      const Tensor y = NodeRun(op.name).input(a).input(b).run1();
      ASSERT_EQ(y.dims(), out) << op.name;
      for (int64_t i = 0; i < y.num_elements(); ++i) {
        const float expected = static_cast<float>(
            op.apply(av[broadcast_index(a_dims, out, i)], bv[broadcast_index(b_dims, out, i)]));
        ASSERT_EQ(y.data<float>()[i], expected) << op.name << " element " << i;
      }
    }
  }
}

TEST(RuntimeElementwise, ArithmeticByHand) {
  const Tensor a = f32({2, 2}, {1, 2, 3, 4}), b = f32({2}, {10, 20});
  EXPECT_THAT(values_of(NodeRun("Add").input(a).input(b).run1()), ElementsAre(11, 22, 13, 24));
  EXPECT_THAT(values_of(NodeRun("Sub").input(a).input(b).run1()), ElementsAre(-9, -18, -7, -16));
  EXPECT_THAT(values_of(NodeRun("Mul").input(b).input(a).run1()), ElementsAre(10, 40, 30, 80));
  EXPECT_THAT(values_of(NodeRun("Div").input(a).input(f32({}, {2})).run1()),
              ElementsAre(0.5, 1, 1.5, 2));
  const Tensor d = NodeRun("Div").input(f64({2}, {1, 1})).input(f64({2}, {3, 0})).run1();
  EXPECT_EQ(d.dtype(), DType::kFloat64);
  EXPECT_THAT(values_of(d), ElementsAre(1.0 / 3.0, INFINITY));
}

TEST(RuntimeElementwise, IntegerDivisionTruncatesAndNeverTraps) {
  const Tensor a = i64({6}, {7, -7, 7, -7, 5, std::numeric_limits<int64_t>::min()});
  const Tensor b = i64({6}, {2, 2, -2, -2, 0, -1});
  EXPECT_THAT(data<int64_t>(NodeRun("Div").input(a).input(b).run1()),
              ElementsAre(3, -3, -3, 3, 0, std::numeric_limits<int64_t>::min()));
  const Tensor c = i32({3}, {-9, std::numeric_limits<int32_t>::min(), 9});
  const Tensor d = i32({3}, {4, -1, 0});
  EXPECT_THAT(data<int32_t>(NodeRun("Div").input(c).input(d).run1()),
              ElementsAre(-2, std::numeric_limits<int32_t>::min(), 0));
}

TEST(RuntimeElementwise, IntegerArithmeticWraps) {
  const int32_t max = std::numeric_limits<int32_t>::max();
  EXPECT_THAT(data<int32_t>(NodeRun("Add").input(i32({2}, {max, 5})).input(i32({}, {1})).run1()),
              ElementsAre(std::numeric_limits<int32_t>::min(), 6));
  EXPECT_THAT(
      data<int32_t>(NodeRun("Mul").input(i32({1}, {65536})).input(i32({1}, {65536})).run1()),
      ElementsAre(0));
  EXPECT_THAT(
      data<uint8_t>(NodeRun("Add").input(u8({3}, {250, 1, 2})).input(u8({3}, {10, 2, 3})).run1()),
      ElementsAre(4, 3, 5));
  EXPECT_THAT(data<uint8_t>(NodeRun("Sub").input(u8({1}, {1})).input(u8({1}, {2})).run1()),
              ElementsAre(255));
  EXPECT_THAT(data<int8_t>(NodeRun("Mul").input(i8({2}, {100, -3})).input(i8({2}, {2, 5})).run1()),
              ElementsAre(-56, -15));
  EXPECT_THAT(
      data<int64_t>(NodeRun("Sub").input(i64({2, 1}, {10, 20})).input(i64({3}, {1, 2, 3})).run1()),
      ElementsAre(9, 8, 7, 19, 18, 17));
}

TEST(RuntimeElementwise, PowTakesExponentsOfOtherTypes) {
  const Tensor base = f32({3}, {2, 4, -2});
  EXPECT_THAT(values_of(NodeRun("Pow").input(base).input(f32({3}, {3, 0.5f, 2})).run1()),
              ElementsAre(8, 2, 4));
  EXPECT_THAT(values_of(NodeRun("Pow").input(base).input(i64({}, {3})).run1()),
              ElementsAre(8, 64, -8));
  EXPECT_THAT(values_of(NodeRun("Pow").input(base).input(u8({1}, {2})).run1()),
              ElementsAre(4, 16, 4));
  // Integer powers are exact; a negative exponent truncates 1 / b^e to 0 unless |b| = 1.
  const Tensor ints = i64({5}, {3, 2, -1, 1, 5});
  EXPECT_THAT(
      data<int64_t>(NodeRun("Pow").input(ints).input(i64({5}, {21, 62, -3, -4, -1})).run1()),
      ElementsAre(10460353203, int64_t{1} << 62, -1, 1, 0));
  // An integer base with a float exponent truncates the float power.
  EXPECT_THAT(
      data<int32_t>(NodeRun("Pow").input(i32({3}, {2, 2, 3})).input(f32({3}, {0.5f, 3, 2})).run1()),
      ElementsAre(1, 8, 9));
  EXPECT_THAT(values_of(NodeRun("Pow").input(f64({2}, {2, 9})).input(f64({1}, {-0.5})).run1()),
              ElementsAre(std::pow(2.0, -0.5), 1.0 / 3.0));
}

TEST(RuntimeElementwise, ComparisonsProduceBool) {
  const Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, kNaN});
  const Tensor b = f32({3}, {2, 2, 2});
  auto run = [&](const char* op) {
    const Tensor y = NodeRun(op).input(a).input(b).run1();
    EXPECT_EQ(y.dtype(), DType::kBool);
    return data<uint8_t>(y);
  };
  EXPECT_THAT(run("Equal"), ElementsAre(0, 1, 0, 0, 0, 0));
  EXPECT_THAT(run("Less"), ElementsAre(1, 0, 0, 0, 0, 0));
  EXPECT_THAT(run("Greater"), ElementsAre(0, 0, 1, 1, 1, 0));
  EXPECT_THAT(run("LessOrEqual"), ElementsAre(1, 1, 0, 0, 0, 0));
  EXPECT_THAT(run("GreaterOrEqual"), ElementsAre(0, 1, 1, 1, 1, 0));
  EXPECT_THAT(
      data<uint8_t>(NodeRun("Less", 9).input(i64({3}, {-1, 0, 1})).input(i64({}, {0})).run1()),
      ElementsAre(1, 0, 0));
  EXPECT_THAT(data<uint8_t>(NodeRun("Equal")
                                .input(boolean({2, 1}, {true, false}))
                                .input(boolean({2}, {true, false}))
                                .run1()),
              ElementsAre(1, 0, 0, 1));
  // 0.3 < 0.1 + 0.2 in double, not in float.
  EXPECT_THAT(data<uint8_t>(
                  NodeRun("Less").input(f64({2}, {0.1, 0.3})).input(f64({1}, {0.1 + 0.2})).run1()),
              ElementsAre(1, 1));
}

TEST(RuntimeElementwise, LogicBroadcasts) {
  const Tensor a = boolean({2, 2}, {true, true, false, false});
  const Tensor b = boolean({2}, {true, false});
  EXPECT_THAT(data<uint8_t>(NodeRun("And").input(a).input(b).run1()), ElementsAre(1, 0, 0, 0));
  EXPECT_THAT(data<uint8_t>(NodeRun("Or").input(a).input(b).run1()), ElementsAre(1, 1, 1, 0));
  EXPECT_THAT(data<uint8_t>(NodeRun("Not").input(b).run1()), ElementsAre(0, 1));
}

TEST(RuntimeElementwise, WhereBroadcastsThreeWaysAndMovesAnyDtype) {
  const Tensor condition = boolean({2, 1}, {true, false});
  const Tensor y =
      NodeRun("Where").input(condition).input(f32({1, 3}, {1, 2, 3})).input(f32({}, {-1})).run1();
  EXPECT_EQ(y.dims(), (Dims{2, 3}));
  EXPECT_THAT(values_of(y), ElementsAre(1, 2, 3, -1, -1, -1));
  const Tensor longs = NodeRun("Where")
                           .input(boolean({3}, {false, true, false}))
                           .input(i64({3}, {1, 2, 3}))
                           .input(i64({2, 3}, {4, 5, 6, 7, 8, 9}))
                           .run1();
  EXPECT_THAT(data<int64_t>(longs), ElementsAre(4, 2, 6, 7, 2, 9));
  Tensor half_x(DType::kFloat16, {2}), half_y(DType::kFloat16, {2});
  half_x.mutable_data<uint16_t>()[0] = 0x3c00;  // 1.0
  half_x.mutable_data<uint16_t>()[1] = 0x4000;  // 2.0
  half_y.mutable_data<uint16_t>()[0] = 0xbc00;  // -1.0
  half_y.mutable_data<uint16_t>()[1] = 0xc000;  // -2.0
  const Tensor halves =
      NodeRun("Where").input(boolean({2}, {false, true})).input(half_x).input(half_y).run1();
  EXPECT_EQ(halves.dtype(), DType::kFloat16);
  EXPECT_THAT(values_of(halves), ElementsAre(-1, 2));
}

// Each op against its formula in double, with the attribute defaults ONNX gives as floats.
TEST(RuntimeElementwise, UnaryFloatOpsMatchTheirFormulas) {
  const Tensor x = f32({8}, {-20, -3, -1, -0.25f, 0, 0.5f, 2, 30});
  const Tensor positive = f32({5}, {0.01f, 0.5f, 1, 4, 1e6f});
  struct Case {
    const char* op;
    const Tensor* input;
    double (*formula)(double);
  };
  const Case cases[] = {
      {"Sqrt", &positive, [](double v) { return std::sqrt(v); }},
      {"Log", &positive, [](double v) { return std::log(v); }},
      {"Reciprocal", &positive, [](double v) { return 1 / v; }},
      {"Exp", &x, [](double v) { return std::exp(v); }},
      {"Erf", &x, [](double v) { return std::erf(v); }},
      {"Tanh", &x, [](double v) { return std::tanh(v); }},
      {"Sigmoid", &x, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"Softplus", &x, [](double v) { return std::log(std::exp(v) + 1); }},
      {"Softsign", &x, [](double v) { return v / (1 + std::abs(v)); }},
      {"HardSwish", &x, [](double v) { return v * std::clamp(v / 6 + 0.5, 0.0, 1.0); }},
      {"Relu", &x, [](double v) { return std::max(v, 0.0); }},
      {"LeakyRelu", &x, [](double v) { return v < 0 ? double{0.01f} * v : v; }},
      {"HardSigmoid", &x, [](double v) { return std::clamp(double{0.2f} * v + 0.5, 0.0, 1.0); }},
      {"Elu", &x, [](double v) { return v < 0 ? std::exp(v) - 1 : v; }},
      {"Selu", &x,
       [](double v) {
         return 1.05070102214813232421875 *
                (v > 0 ? v : 1.67326319217681884765625 * (std::exp(v) - 1));
       }},
      {"Neg", &x, [](double v) { return -v; }},
      {"Abs", &x, [](double v) { return std::abs(v); }},
      {"Sign", &x, [](double v) { return v > 0 ? 1.0 : (v < 0 ? -1.0 : 0.0); }},
  };
  for (const Case& c : cases) {
    const std::vector<double> in = values_of(*c.input);
    const std::vector<double> out = values_of(NodeRun(c.op).input(*c.input).run1());
    ASSERT_EQ(out.size(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const double expected = c.formula(in[i]);
      EXPECT_NEAR(out[i], expected, 1e-6 * std::max(1.0, std::abs(expected)))
          << c.op << "(" << in[i] << ")";
    }
    const Tensor d = NodeRun(c.op).input(f64(c.input->dims(), in)).run1();
    EXPECT_EQ(d.dtype(), DType::kFloat64) << c.op;
    const std::vector<double> dv = values_of(d);
    for (size_t i = 0; i < in.size(); ++i) {
      const double expected = c.formula(in[i]);
      EXPECT_NEAR(dv[i], expected, 1e-13 * std::max(1.0, std::abs(expected)))
          << c.op << "(" << in[i] << ") in f64";
    }
  }
}

TEST(RuntimeElementwise, ActivationsStayFiniteAtExtremes) {
  const Tensor x = f32({2}, {-100, 100});
  const std::vector<double> sigmoid = values_of(NodeRun("Sigmoid").input(x).run1());
  EXPECT_GT(sigmoid[0], 0);
  EXPECT_LT(sigmoid[0], 1e-40);
  EXPECT_EQ(sigmoid[1], 1);
  const std::vector<double> softplus = values_of(NodeRun("Softplus").input(x).run1());
  EXPECT_GT(softplus[0], 0);
  EXPECT_EQ(softplus[1], 100);
  // NaN passes through Relu, Sign and Clip as in numpy.
  EXPECT_TRUE(std::isnan(values_of(NodeRun("Relu").input(f32({1}, {kNaN})).run1())[0]));
  EXPECT_TRUE(std::isnan(values_of(NodeRun("Sign").input(f32({1}, {kNaN})).run1())[0]));
}

TEST(RuntimeElementwise, ActivationAttributes) {
  const Tensor x = f32({3}, {-2, 0.5f, 4});
  EXPECT_THAT(values_of(NodeRun("LeakyRelu").input(x).attr("alpha", 0.5f).run1()),
              ElementsAre(-1, 0.5, 4));
  EXPECT_THAT(
      values_of(NodeRun("HardSigmoid").input(x).attr("alpha", 0.25f).attr("beta", 0.25f).run1()),
      ElementsAre(0, 0.375, 1));
  const std::vector<double> elu = values_of(NodeRun("Elu").input(x).attr("alpha", 2.0f).run1());
  EXPECT_NEAR(elu[0], 2 * (std::exp(-2.0) - 1), 1e-6);
  EXPECT_EQ(elu[2], 4);
  const std::vector<double> selu =
      values_of(NodeRun("Selu").input(x).attr("alpha", 2.0f).attr("gamma", 3.0f).run1());
  EXPECT_NEAR(selu[0], 3 * 2 * (std::exp(-2.0) - 1), 1e-5);
  EXPECT_EQ(selu[1], 1.5);
  // A float attribute written as an integer is accepted by the shape rule.
  EXPECT_THAT(values_of(NodeRun("LeakyRelu").input(x).attr("alpha", 2).run1()),
              ElementsAre(-4, 0.5, 4));
}

TEST(RuntimeElementwise, IntegerUnaryOps) {
  const int64_t min = std::numeric_limits<int64_t>::min();
  const Tensor x = i64({4}, {-5, 0, 7, min});
  EXPECT_THAT(data<int64_t>(NodeRun("Neg").input(x).run1()), ElementsAre(5, 0, -7, min));
  EXPECT_THAT(data<int64_t>(NodeRun("Abs").input(x).run1()), ElementsAre(5, 0, 7, min));
  EXPECT_THAT(data<int64_t>(NodeRun("Sign").input(x).run1()), ElementsAre(-1, 0, 1, -1));
  EXPECT_THAT(data<int64_t>(NodeRun("Relu").input(x).run1()), ElementsAre(0, 0, 7, 0));
  EXPECT_THAT(data<int32_t>(NodeRun("Abs").input(i32({2}, {-3, 3})).run1()), ElementsAre(3, 3));
  EXPECT_THAT(data<uint8_t>(NodeRun("Sign").input(u8({2}, {0, 200})).run1()), ElementsAre(0, 1));
}

TEST(RuntimeElementwise, PReluSlopeBroadcastsToX) {
  const Tensor x = f32({2, 3, 2}, {-1, 1, -2, 2, -3, 3, -4, 4, -5, 5, -6, 6});
  const Tensor slope = f32({3, 1}, {0.5f, 2, -1});
  EXPECT_THAT(values_of(NodeRun("PRelu").input(x).input(slope).run1()),
              ElementsAre(-0.5, 1, -4, 2, 3, 3, -2, 4, -10, 5, 6, 6));
  EXPECT_THAT(values_of(NodeRun("PRelu").input(f64({2}, {-4, 4})).input(f64({}, {0.25})).run1()),
              ElementsAre(-1, 4));
  EXPECT_THAT(
      data<int64_t>(NodeRun("PRelu").input(i64({2}, {-4, 4})).input(i64({2}, {3, 3})).run1()),
      ElementsAre(-12, 4));
}

TEST(RuntimeElementwise, ClipBoundsAreAttributesBeforeOpset11) {
  const Tensor x = f32({5}, {-3, -1, 0, 2, 7});
  EXPECT_THAT(values_of(NodeRun("Clip", 9).input(x).attr("min", -1.5f).attr("max", 2.5f).run1()),
              ElementsAre(-1.5, -1, 0, 2, 2.5));
  EXPECT_THAT(values_of(NodeRun("Clip", 9).input(x).attr("max", 1.0f).run1()),
              ElementsAre(-3, -1, 0, 1, 1));
  EXPECT_THAT(values_of(NodeRun("Clip", 10).input(x).run1()), ElementsAre(-3, -1, 0, 2, 7));
}

TEST(RuntimeElementwise, ClipBoundsAreOptionalInputsFromOpset11) {
  const Tensor x = f32({5}, {-3, -1, 0, 2, 7});
  EXPECT_THAT(
      values_of(NodeRun("Clip", 11).input(x).input(f32({}, {-1})).input(f32({}, {1})).run1()),
      ElementsAre(-1, -1, 0, 1, 1));
  EXPECT_THAT(values_of(NodeRun("Clip", 13).input(x).omitted().input(f32({}, {0})).run1()),
              ElementsAre(-3, -1, 0, 0, 0));
  EXPECT_THAT(values_of(NodeRun("Clip", 13).input(x).input(f32({1}, {0})).run1()),
              ElementsAre(0, 0, 0, 2, 7));
  EXPECT_THAT(values_of(NodeRun("Clip", 13).input(x).run1()), ElementsAre(-3, -1, 0, 2, 7));
  // min > max: every value becomes max.
  EXPECT_THAT(
      values_of(NodeRun("Clip", 13).input(x).input(f32({}, {5})).input(f32({}, {1})).run1()),
      ElementsAre(1, 1, 1, 1, 1));
  EXPECT_TRUE(std::isnan(
      values_of(NodeRun("Clip", 13).input(f32({1}, {kNaN})).input(f32({}, {0})).run1())[0]));
  EXPECT_THAT(
      data<int8_t>(NodeRun("Clip", 13).input(i8({3}, {-128, 5, 127})).input(i8({}, {-10})).run1()),
      ElementsAre(-10, 5, 127));
  EXPECT_THAT(data<int64_t>(NodeRun("Clip", 13)
                                .input(i64({3}, {-9, 5, 9}))
                                .input(i64({}, {-1}))
                                .input(i64({}, {6}))
                                .run1()),
              ElementsAre(-1, 5, 6));
}

TEST(RuntimeElementwise, VariadicOpsFoldBroadcastInputs) {
  const Tensor a = f32({2, 1}, {1, 5}), b = f32({3}, {2, 3, 4}), c = f32({}, {3});
  EXPECT_THAT(values_of(NodeRun("Max").input(a).input(b).input(c).run1()),
              ElementsAre(3, 3, 4, 5, 5, 5));
  EXPECT_THAT(values_of(NodeRun("Min").input(a).input(b).input(c).run1()),
              ElementsAre(1, 1, 1, 2, 3, 3));
  EXPECT_THAT(values_of(NodeRun("Sum").input(a).input(b).input(c).run1()),
              ElementsAre(6, 7, 8, 10, 11, 12));
  EXPECT_THAT(values_of(NodeRun("Mean").input(a).input(b).input(c).run1()),
              ElementsAre(2, 7.0f / 3, 8.0f / 3, 10.0f / 3, 11.0f / 3, 4));
  EXPECT_EQ(NodeRun("Sum").input(b).run1(), b);
  EXPECT_THAT(
      values_of(NodeRun("Max").input(f32({2}, {kNaN, 1})).input(f32({2}, {1, kNaN})).run1()),
      ::testing::Each(::testing::IsNan()));
  EXPECT_THAT(data<int32_t>(NodeRun("Sum")
                                .input(i32({2}, {1, 2}))
                                .input(i32({2}, {10, 20}))
                                .input(i32({1}, {100}))
                                .run1()),
              ElementsAre(111, 122));
  EXPECT_THAT(
      data<uint8_t>(NodeRun("Max").input(u8({2}, {3, 200})).input(u8({2}, {100, 7})).run1()),
      ElementsAre(100, 200));
  EXPECT_THAT(values_of(NodeRun("Mean").input(f64({1}, {1})).input(f64({1}, {2})).run1()),
              ElementsAre(1.5));
}

TEST(RuntimeElementwise, IdentityCopiesAnyDtype) {
  const Tensor b = boolean({3}, {true, false, true});
  EXPECT_EQ(NodeRun("Identity").input(b).run1(), b);
  const Tensor l = i64({2, 2}, {1, -2, 3, -4});
  EXPECT_EQ(NodeRun("Identity").input(l).run1(), l);
}

// Every pair of the 13 dtypes, on values every dtype holds exactly, against Tensor's own
// element conversions.
TEST(RuntimeElementwise, CastBetweenEveryDtypePair) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                          DType::kInt8,    DType::kInt16,   DType::kInt32,   DType::kInt64,
                          DType::kUInt8,   DType::kUInt16,  DType::kUInt32,  DType::kUInt64,
                          DType::kBool};
  const std::vector<double> values = {0, 1, 2, 7, 100, 0};
  for (DType from : dtypes) {
    Tensor x(from, {static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i)
      x.set_from_double(static_cast<int64_t>(i), values[i]);
    for (DType to : dtypes) {
      const Tensor y = NodeRun("Cast").input(x).attr("to", dtype_to_onnx(to)).run1();
      ASSERT_EQ(y.dtype(), to) << dtype_name(from) << " to " << dtype_name(to);
      for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(y.float_at(static_cast<int64_t>(i)),
                  to == DType::kBool ? x.float_at(i) != 0 : x.float_at(i))
            << dtype_name(from) << " to " << dtype_name(to) << " element " << i;
      }
    }
  }
}

TEST(RuntimeElementwise, CastEdgeCases) {
  auto cast = [](const Tensor& x, DType to) {
    return NodeRun("Cast").input(x).attr("to", dtype_to_onnx(to)).run1();
  };
  // Float to integer truncates toward zero, saturates, and maps NaN to 0.
  const Tensor floats = f32({6}, {2.7f, -2.7f, 300, -1, kNaN, 1e20f});
  EXPECT_THAT(data<int32_t>(cast(floats, DType::kInt32)),
              ElementsAre(2, -2, 300, -1, 0, std::numeric_limits<int32_t>::max()));
  EXPECT_THAT(data<uint8_t>(cast(floats, DType::kUInt8)), ElementsAre(2, 0, 255, 0, 0, 255));
  // Anything non-zero, NaN included, is true.
  EXPECT_THAT(data<uint8_t>(cast(f32({4}, {0, -0.5f, kNaN, -0.0f}), DType::kBool)),
              ElementsAre(0, 1, 1, 0));
  // Integers narrow modulo 2^bits.
  EXPECT_THAT(data<int8_t>(cast(i32({3}, {300, -129, 127}), DType::kInt8)),
              ElementsAre(44, 127, 127));
  EXPECT_THAT(data<uint16_t>(cast(i64({2}, {-1, 65537}), DType::kUInt16)), ElementsAre(65535, 1));
  // Unsigned 64-bit values above INT64_MAX keep their value in floating point.
  const Tensor big = typed<uint64_t>(DType::kUInt64, {1}, {(uint64_t{1} << 63) + 4096});
  EXPECT_EQ(data<double>(cast(big, DType::kFloat64))[0], 9223372036854779904.0);
  // Rounding to nearest even into the 16-bit formats: 1/3 is 0x3555 in f16, 0x3eab in bf16.
  const Tensor third = f32({1}, {1.0f / 3});
  EXPECT_EQ(data<uint16_t>(cast(third, DType::kFloat16))[0], 0x3555);
  EXPECT_EQ(data<uint16_t>(cast(third, DType::kBFloat16))[0], 0x3eab);
  EXPECT_EQ(data<float>(cast(cast(third, DType::kFloat16), DType::kFloat32))[0],
            half_to_float(0x3555));
  EXPECT_THAT(values_of(cast(boolean({2}, {true, false}), DType::kFloat64)), ElementsAre(1, 0));
  EXPECT_THAT(data<int64_t>(cast(f64({2}, {-7.99, 7.99}), DType::kInt64)), ElementsAre(-7, 7));
}

TEST(RuntimeElementwise, DropoutIsACopyInInference) {
  const Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto outputs = NodeRun("Dropout", 10).input(x).attr("ratio", 0.3f).outputs(2).run();
  ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
  EXPECT_EQ((*outputs)[0], x);
  EXPECT_EQ((*outputs)[1].dtype(), DType::kBool);
  EXPECT_THAT(data<uint8_t>((*outputs)[1]), ::testing::Each(1));
  // Opset 9's mask has the data's type.
  outputs = NodeRun("Dropout", 9).input(x).outputs(2).run();
  ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
  EXPECT_EQ((*outputs)[1].dtype(), DType::kFloat32);
  EXPECT_THAT(values_of((*outputs)[1]), ::testing::Each(1.0));
  // From opset 12: a ratio input alone, or training_mode false, is still inference.
  EXPECT_EQ(NodeRun("Dropout").input(x).constant(f32({}, {0.5f})).run1(), x);
  EXPECT_EQ(
      NodeRun("Dropout").input(x).constant(f32({}, {0.5f})).constant(bool_scalar(false)).run1(), x);
  // Training with ratio 0 keeps everything.
  outputs = NodeRun("Dropout")
                .input(x)
                .constant(f32({}, {0}))
                .constant(bool_scalar(true))
                .outputs(2)
                .run();
  ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
  EXPECT_EQ((*outputs)[0], x);
  EXPECT_THAT(data<uint8_t>((*outputs)[1]), ::testing::Each(1));
}

TEST(RuntimeElementwise, DropoutTrainingDrawsASeededMask) {
  const int64_t n = 100000;
  const Tensor x = random_f32({n}, 21);
  auto train = [&](int64_t seed, int threads) {
    auto outputs = NodeRun("Dropout")
                       .input(x)
                       .constant(f32({}, {0.25f}))
                       .constant(bool_scalar(true))
                       .attr("seed", seed)
                       .outputs(2)
                       .threads(threads)
                       .run();
    EXPECT_TRUE(outputs.is_ok()) << outputs.status().message();
    return outputs.is_ok() ? *outputs : std::vector<Tensor>(2);
  };
  const std::vector<Tensor> first = train(7, 2);
  const std::vector<double> in = values_of(x), out = values_of(first[0]);
  const std::vector<uint8_t> mask = data<uint8_t>(first[1]);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (mask[i]) {
      ++kept;
      ASSERT_EQ(out[i], static_cast<float>(in[i] * static_cast<float>(1 / 0.75))) << i;
    } else {
      ASSERT_EQ(out[i], 0) << i;
    }
  }
  // 75 000 expected kept; the standard deviation is about 137.
  EXPECT_NEAR(static_cast<double>(kept), 75000, 1000);
  EXPECT_EQ(train(7, 1), first);
  EXPECT_NE(train(8, 2)[1], first[1]);
  // Without the seed attribute the seed is 0, still deterministic.
  EXPECT_EQ(train(0, 1), train(0, 2));
}

// A plan's Dropout runs on a shard and draws what the whole tensor's Dropout draws for the same
// elements: its `layout` attribute (and `zigzag_axis` for ring attention's chunk pairs) and the
// device's place on the mesh give each element's place in the whole. The run's random stream
// (a plan's step and microbatch) draws other masks, alike for shard and whole.
TEST(RuntimeElementwise, DropoutShardsDrawTheWholeTensorsMask) {
  const Tensor x = random_f32({4, 8, 6}, 3);
  struct Case {
    const char* first;  // the mesh's axes, 2 devices each
    const char* second;
    const char* layout;
    const char* zigzag;
  };
  const Case cases[] = {{"dp", "tp", "[dp, tp, _]", ""},
                        {"tp", "dp", "[_, _, tp]", ""},
                        {"dp", "cp", "[dp, cp, _]", "cp"},
                        {"cp", "tp", "[_, cp*tp, _]", ""}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.layout);
    auto mesh = DeviceMesh::create({{c.first, 2}, {c.second, 2}});
    ASSERT_TRUE(mesh.is_ok()) << mesh.status().message();
    auto layout = Layout::parse(c.layout);
    ASSERT_TRUE(layout.is_ok());
    auto run = [&](const Tensor& input, runtime::Communicator* comm, uint64_t stream) {
      NodeRun node("Dropout");
      node.input(input)
          .constant(f32({}, {0.3f}))
          .constant(bool_scalar(true))
          .attr("seed", int64_t{5})
          .outputs(2);
      if (comm) node.attr("layout", std::string(c.layout));
      if (comm && *c.zigzag) node.attr("zigzag_axis", std::string(c.zigzag));
      std::vector<std::pair<ValueId, std::shared_ptr<const Tensor>>> feeds;
      auto g = node.build(&feeds);
      EXPECT_TRUE(g.is_ok()) << g.status().message();
      runtime::ExecutorOptions options;
      options.communicator = comm;
      auto executor = runtime::Executor::create(std::move(g).value(), options);
      EXPECT_TRUE(executor.is_ok()) << executor.status().message();
      auto outputs = executor->run(feeds, nullptr, stream);
      EXPECT_TRUE(outputs.is_ok()) << outputs.status().message();
      return std::vector<Tensor>{*outputs.value()[0], *outputs.value()[1]};
    };
    auto world = runtime::create_inproc_world(4, std::chrono::milliseconds(1000));
    for (const uint64_t stream : {uint64_t{0}, uint64_t{3}}) {
      const std::vector<Tensor> whole = run(x, nullptr, stream);
      int64_t dropped = 0;
      for (int64_t d = 0; d < 4; ++d) {
        world[d]->set_mesh(*mesh);
        const std::vector<int64_t> coords = mesh->coords(d);
        const Tensor shard = runtime::shard_of(x, *layout, *mesh, coords, c.zigzag);
        const std::vector<Tensor> part = run(shard, world[d].get(), stream);
        EXPECT_EQ(part[0], runtime::shard_of(whole[0], *layout, *mesh, coords, c.zigzag)) << d;
        EXPECT_EQ(part[1], runtime::shard_of(whole[1], *layout, *mesh, coords, c.zigzag)) << d;
        for (uint8_t k : data<uint8_t>(part[1])) dropped += k == 0;
      }
      EXPECT_GT(dropped, 0);
    }
    EXPECT_NE(run(x, nullptr, 0)[1], run(x, nullptr, 3)[1]);
  }
}

TEST(RuntimeElementwise, DropoutRejectsARatioOfOneAtRunTime) {
  const auto result = NodeRun("Dropout")
                          .input(f32({2}, {1, 2}))
                          .input(f32({}, {1}))
                          .constant(bool_scalar(true))
                          .run();
  ASSERT_FALSE(result.is_ok());
  EXPECT_THAT(result.status().message(), HasSubstr("ratio 1 is not in [0, 1)"));
}

TEST(RuntimeElementwise, EmptyAndScalarTensors) {
  const Tensor empty(DType::kFloat32, {0, 3});
  const Tensor sum = NodeRun("Add").input(empty).input(f32({1, 3}, {1, 2, 3})).run1();
  EXPECT_EQ(sum.dims(), (Dims{0, 3}));
  EXPECT_EQ(NodeRun("Exp").input(empty).run1().num_elements(), 0);
  EXPECT_EQ(NodeRun("Cast").input(empty).attr("to", 7).run1().dims(), (Dims{0, 3}));
  EXPECT_EQ(NodeRun("Where")
                .input(boolean({0, 1}, {}))
                .input(f32({3}, {1, 2, 3}))
                .input(f32({}, {0}))
                .run1()
                .dims(),
            (Dims{0, 3}));
  EXPECT_EQ(NodeRun("Max").input(empty).input(f32({3}, {1, 2, 3})).run1().num_elements(), 0);
  const Tensor scalar = NodeRun("Mul").input(f32({}, {3})).input(f32({}, {4})).run1();
  EXPECT_TRUE(scalar.dims().empty());
  EXPECT_THAT(values_of(scalar), ElementsAre(12));
  EXPECT_THAT(values_of(NodeRun("Sub").input(f32({1, 1}, {3})).input(f32({}, {4})).run1()),
              ElementsAre(-1));
}

// Half types are storage: their ops run the float32 kernel on widened copies and round the
// result (1 + 2^-11 is not a float16: 1 + 1.0009765625 rounds to 2.0009765625 → 2).
TEST(RuntimeElementwise, HalfTypesComputeInFloat32AndRound) {
  Tensor a(DType::kFloat16, {2}), b(DType::kFloat16, {2});
  a.set_from_double(0, 1.0);
  a.set_from_double(1, 3.0);
  b.set_from_double(0, 1.0009765625);
  b.set_from_double(1, -0.5);
  const auto result = NodeRun("Add").input(a).input(b).run();
  ASSERT_TRUE(result.is_ok()) << result.status().message();
  EXPECT_EQ(result->at(0).dtype(), DType::kFloat16);
  EXPECT_EQ(result->at(0).float_at(0), 2.0);
  EXPECT_EQ(result->at(0).float_at(1), 2.5);
  EXPECT_FALSE(NodeRun("Exp").input(i64({1}, {1})).run().is_ok());
}

TEST(RuntimeElementwise, OneAndTwoThreadsGiveIdenticalBits) {
  const Tensor a = random_f32({300, 1000}, 31), row = random_f32({1000}, 32);
  const Tensor column = random_f32({300, 1}, 33);
  const Tensor mask = NodeRun("Greater").input(a).input(row).run1();
  auto both = [](NodeRun run) {
    NodeRun one = run;
    return std::make_pair(one.threads(1).run1(), run.threads(2).run1());
  };
  for (const auto& [one, two] :
       {both(NodeRun("Add").input(a).input(row)), both(NodeRun("Div").input(column).input(a)),
        both(NodeRun("Pow").input(a).input(f32({}, {2}))), both(NodeRun("Exp").input(a)),
        both(NodeRun("Sigmoid").input(a)),
        both(NodeRun("Where").input(mask).input(a).input(column)),
        both(NodeRun("Mean").input(a).input(row).input(column)),
        both(NodeRun("Cast").input(a).attr("to", 10)),
        both(NodeRun("Dropout").input(a).constant(f32({}, {0.5f})).constant(bool_scalar(true)))}) {
    EXPECT_GT(one.num_elements(), 0);
    EXPECT_EQ(one, two);
  }
}

// ai.autopar.training's Gelu in both forms against the formulas in double precision, and
// GeluGrad against central differences of the forward kernel.
TEST(RuntimeElementwise, TrainingGeluBothFormsAndTheirGradients) {
  const std::vector<double> xs = {-4.0, -1.5, -0.3, 0.0, 0.2, 1.0, 2.5, 6.0};
  const Dims dims = {static_cast<int64_t>(xs.size())};
  auto gelu = [&](const std::string& form, std::vector<double> x) {
    return values_of(NodeRun("Gelu", 17, "ai.autopar.training")
                         .input(f64(dims, std::move(x)))
                         .attr("approximate", Attribute(form))
                         .run1());
  };
  const std::vector<double> erf_form = gelu("none", xs);
  const std::vector<double> tanh_form = gelu("tanh", xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    EXPECT_NEAR(erf_form[i], 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))), 1e-15) << x;
    const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
    EXPECT_NEAR(tanh_form[i], 0.5 * x * (1 + std::tanh(u)), 1e-15) << x;
  }
  // The two forms differ (by up to about 5e-4 near |x| = 2), so a kernel that ignored the
  // attribute would fail here.
  EXPECT_GT(std::abs(erf_form[6] - tanh_form[6]), 1e-5);
  const double h = 1e-6;
  std::vector<double> dy(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) dy[i] = 0.5 + 0.25 * static_cast<double>(i);
  for (const std::string form : {"none", "tanh"}) {
    std::vector<double> plus = xs, minus = xs;
    for (double& v : plus) v += h;
    for (double& v : minus) v -= h;
    const std::vector<double> up = gelu(form, plus), down = gelu(form, minus);
    const std::vector<double> dx = values_of(NodeRun("GeluGrad", 17, "ai.autopar.training")
                                                 .input(f64(dims, dy))
                                                 .input(f64(dims, xs))
                                                 .attr("approximate", Attribute(form))
                                                 .run1());
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_NEAR(dx[i], dy[i] * (up[i] - down[i]) / (2 * h), 1e-8) << form << " at " << xs[i];
    }
  }
  auto bad = NodeRun("Gelu", 17, "ai.autopar.training")
                 .input(f64(dims, xs))
                 .attr("approximate", Attribute(std::string("fast")))
                 .run();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("approximate 'fast' is neither 'none' nor 'tanh'"));
}

}  // namespace
}  // namespace autopar
