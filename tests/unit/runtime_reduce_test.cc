// ReduceSum, ReduceMean and ReduceMax kernels against a naive loop over every axis set.
#include <cmath>
#include <limits>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/run_node.h"

namespace autopar {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using testing::f32;
using testing::f64;
using testing::i64;
using testing::NodeRun;
using testing::random_f32;
using testing::values_of;

using Axes = std::vector<int64_t>;

// Integer values in [-50, 50] stored as f32: every sum of them is exact in float and
// double, so any summation order must give the naive loop's result bit for bit.
Tensor integer_valued_f32(std::vector<int64_t> dims, uint64_t seed) {
  Tensor t(DType::kFloat32, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> values(-50, 50);
  for (float& v : t.mutable_data<float>()) v = static_cast<float>(values(rng));
  return t;
}

Tensor i32(std::vector<int64_t> dims, std::vector<int32_t> values) {
  Tensor t(DType::kInt32, std::move(dims));
  for (size_t i = 0; i < values.size(); ++i) t.mutable_data<int32_t>()[i] = values[i];
  return t;
}

// The reference: visit every input element and fold it into the output element whose
// index has the reduced coordinates dropped. Sums are in double; the result is converted
// to float with one division for the mean, as the kernel does.
std::vector<double> naive_reduce(const Tensor& x, const Axes& axes, const std::string& op) {
  const auto& dims = x.dims();
  std::vector<bool> reduced(dims.size(), axes.empty());
  for (int64_t a : axes) reduced[a < 0 ? a + x.rank() : a] = true;
  int64_t outputs = 1, count = 1;
  for (size_t d = 0; d < dims.size(); ++d) (reduced[d] ? count : outputs) *= dims[d];
  std::vector<double> acc(outputs, op == "ReduceMax" ? -INFINITY : 0.0);
  const std::vector<double> values = values_of(x);
  for (int64_t flat = 0; flat < x.num_elements(); ++flat) {
    int64_t rest = flat, out = 0, scale = 1;
    for (size_t d = dims.size(); d-- > 0;) {
      const int64_t coord = rest % dims[d];
      rest /= dims[d];
      if (reduced[d]) continue;
      out += coord * scale;
      scale *= dims[d];
    }
    acc[out] = op == "ReduceMax" ? std::max(acc[out], values[flat]) : acc[out] + values[flat];
  }
  if (op == "ReduceMean") {
    for (double& v : acc) v = static_cast<float>(v) / static_cast<float>(count);
  }
  return acc;
}

std::vector<int64_t> reduced_dims(const std::vector<int64_t>& dims, const Axes& axes,
                                  bool keepdims) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    bool reduced = axes.empty();
    for (int64_t a : axes)
      reduced = reduced || a == d || a + static_cast<int64_t>(dims.size()) == d;
    if (!reduced) {
      out.push_back(dims[d]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  return out;
}

// Every subset of axes of a 4-D tensor, with and without keepdims, through the attribute
// form of opset 11: covers contiguous runs, strided lanes and mixes of both.
TEST(RuntimeReduce, EveryAxisSubsetMatchesTheNaiveLoop) {
  const Tensor x = integer_valued_f32({3, 4, 5, 6}, 7);
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    for (int mask = 1; mask < 16; ++mask) {
      Axes axes;
      for (int d = 0; d < 4; ++d) {
        if (mask & (1 << d)) axes.push_back(d);
      }
      for (int keepdims : {0, 1}) {
        const Tensor y =
            NodeRun(op, 11).input(x).attr("axes", axes).attr("keepdims", keepdims).run1();
        EXPECT_EQ(y.dims(), reduced_dims(x.dims(), axes, keepdims)) << op << " mask " << mask;
        EXPECT_EQ(values_of(y), naive_reduce(x, axes, op)) << op << " mask " << mask;
      }
    }
  }
}

TEST(RuntimeReduce, HandComputedSumMeanAndMax) {
  const Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(values_of(NodeRun("ReduceSum", 11).input(x).attr("axes", Axes{1}).run1()),
              ElementsAre(6, 15));
  EXPECT_THAT(values_of(NodeRun("ReduceSum", 11).input(x).attr("axes", Axes{0}).run1()),
              ElementsAre(5, 7, 9));
  EXPECT_THAT(values_of(NodeRun("ReduceMean", 11).input(x).attr("axes", Axes{0}).run1()),
              ElementsAre(2.5, 3.5, 4.5));
  EXPECT_THAT(values_of(NodeRun("ReduceMax", 11).input(x).attr("axes", Axes{-1}).run1()),
              ElementsAre(3, 6));
  const Tensor all = NodeRun("ReduceMean", 11).input(x).attr("keepdims", 0).run1();
  EXPECT_TRUE(all.dims().empty());
  EXPECT_THAT(values_of(all), ElementsAre(3.5));
}

TEST(RuntimeReduce, AxesInputFromOpset13) {
  const Tensor x = f32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor y = NodeRun("ReduceSum", 13).input(x).constant(i64({2}, {0, -1})).run1();
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 2, 1}));
  EXPECT_THAT(values_of(y), ElementsAre(1 + 2 + 5 + 6, 3 + 4 + 7 + 8));
  // No axes at all reduce everything.
  EXPECT_THAT(values_of(NodeRun("ReduceSum", 13).input(x).run1()), ElementsAre(36));
  // An empty axes input reduces everything too, unless noop_with_empty_axes is set.
  EXPECT_THAT(values_of(NodeRun("ReduceSum", 13).input(x).constant(i64({0}, {})).run1()),
              ElementsAre(36));
  const Tensor noop = NodeRun("ReduceSum", 13)
                          .input(x)
                          .constant(i64({0}, {}))
                          .attr("noop_with_empty_axes", 1)
                          .run1();
  EXPECT_EQ(noop, x);
}

TEST(RuntimeReduce, DoublesAndIntegers) {
  const Tensor d = f64({2, 2}, {0.1, 0.2, 0.3, 0.4});
  EXPECT_THAT(values_of(NodeRun("ReduceSum", 11).input(d).attr("axes", Axes{1}).run1()),
              ElementsAre(0.1 + 0.2, 0.3 + 0.4));
  EXPECT_THAT(values_of(NodeRun("ReduceMean", 11).input(d).attr("axes", Axes{0}).run1()),
              ElementsAre((0.1 + 0.3) / 2, (0.2 + 0.4) / 2));
  const Tensor longs = i64({2, 3}, {5, -7, 9, 1, 2, -3});
  EXPECT_THAT(values_of(NodeRun("ReduceSum", 11).input(longs).attr("axes", Axes{0}).run1()),
              ElementsAre(6, -5, 6));
  EXPECT_THAT(values_of(NodeRun("ReduceMax", 11).input(longs).attr("axes", Axes{1}).run1()),
              ElementsAre(9, 2));
  // An integer mean truncates toward zero: (5 - 7 + 9) / 3 = 7 / 3 → 2, (1 + 2 - 3 - 4) / 4 → -1.
  const Tensor ints = i32({2, 3}, {5, -7, 9, 1, 2, -7});
  const Tensor mean = NodeRun("ReduceMean", 11).input(ints).attr("axes", Axes{1}).run1();
  EXPECT_EQ(mean.dtype(), DType::kInt32);
  EXPECT_THAT(values_of(mean), ElementsAre(2, -1));
}

TEST(RuntimeReduce, IntegerSumsWrapAround) {
  const int32_t big = std::numeric_limits<int32_t>::max();
  const Tensor x = i32({3}, {big, 1, 1});
  const Tensor y = NodeRun("ReduceSum", 11).input(x).attr("keepdims", 0).run1();
  EXPECT_EQ(y.data<int32_t>()[0], std::numeric_limits<int32_t>::min() + 1);
}

TEST(RuntimeReduce, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = f32({2, 3}, {1, nan, 3, nan, 5, 6});
  const std::vector<double> rows =
      values_of(NodeRun("ReduceMax", 11).input(x).attr("axes", Axes{1}).run1());
  EXPECT_TRUE(std::isnan(rows[0]) && std::isnan(rows[1]));
  const std::vector<double> columns =
      values_of(NodeRun("ReduceMax", 11).input(x).attr("axes", Axes{0}).run1());
  EXPECT_TRUE(std::isnan(columns[0]) && std::isnan(columns[1]));
  EXPECT_EQ(columns[2], 6);
}

TEST(RuntimeReduce, EmptyReductionsGiveTheIdentity) {
  const Tensor x(DType::kFloat32, {2, 0, 3});
  const Tensor sum = NodeRun("ReduceSum", 11).input(x).attr("axes", Axes{1}).run1();
  EXPECT_EQ(sum.dims(), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_THAT(values_of(sum), ElementsAre(0, 0, 0, 0, 0, 0));
  const Tensor max = NodeRun("ReduceMax", 11).input(x).attr("axes", Axes{1}).run1();
  for (double v : values_of(max)) EXPECT_EQ(v, -INFINITY);
  const Tensor mean = NodeRun("ReduceMean", 11).input(x).attr("axes", Axes{1}).run1();
  for (double v : values_of(mean)) EXPECT_TRUE(std::isnan(v));
  const Tensor int_max =
      NodeRun("ReduceMax", 11).input(Tensor(DType::kInt64, {0, 2})).attr("axes", Axes{0}).run1();
  EXPECT_THAT(int_max.data<int64_t>(), ElementsAre(std::numeric_limits<int64_t>::min(),
                                                   std::numeric_limits<int64_t>::min()));
  // A zero-size kept dim leaves nothing to compute.
  const Tensor none = NodeRun("ReduceSum", 11).input(x).attr("axes", Axes{2}).run1();
  EXPECT_EQ(none.dims(), (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(none.num_elements(), 0);
}

TEST(RuntimeReduce, ScalarsAndSizeOneAxesCopy) {
  const Tensor scalar = f32({}, {4.5f});
  EXPECT_EQ(NodeRun("ReduceSum", 11).input(scalar).run1(), scalar);
  const Tensor x = f32({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor y =
      NodeRun("ReduceMean", 11).input(x).attr("axes", Axes{1}).attr("keepdims", 0).run1();
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(values_of(y), ElementsAre(1, 2, 3, 4, 5, 6));
}

// A sequential float sum of a million 0.1f drifts to about 100958 (of a quarter million, to
// about 24940); pairwise summation stays within a few ulps, whether the values form one run
// or rows of lanes.
TEST(RuntimeReduce, FloatSumsArePairwise) {
  const int64_t n = 1000000;
  const Tensor ones = f32({n}, std::vector<float>(n, 0.1f));
  const float run =
      NodeRun("ReduceSum", 11).input(ones).attr("keepdims", 0).run1().data<float>()[0];
  EXPECT_NEAR(run, 100000.0, 0.2);
  const Tensor rows = f32({n / 4, 4}, std::vector<float>(n, 0.1f));
  const Tensor lanes = NodeRun("ReduceSum", 11).input(rows).attr("axes", Axes{0}).run1();
  for (double v : values_of(lanes)) EXPECT_NEAR(v, 25000.0, 0.05);
}

TEST(RuntimeReduce, OneAndTwoThreadsGiveIdenticalBits) {
  const Tensor x = random_f32({96, 50, 70}, 3);
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    for (const Axes& axes : {Axes{0}, Axes{1}, Axes{2}, Axes{0, 2}, Axes{}}) {
      const Tensor one = NodeRun(op, 11).input(x).attr("axes", axes).threads(1).run1();
      const Tensor two = NodeRun(op, 11).input(x).attr("axes", axes).threads(2).run1();
      ASSERT_EQ(one.num_elements(), two.num_elements());
      EXPECT_EQ(one, two) << op << " over " << axes.size() << " axes";
      std::vector<double> expected = naive_reduce(x, axes, op);
      const std::vector<double> actual = values_of(two);
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_NEAR(actual[i], expected[i], 1e-5 * (1 + std::abs(expected[i]))) << op << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace autopar
