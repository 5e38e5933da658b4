// Softmax, LogSoftmax, LayerNormalization and BatchNormalization kernels against naive
// double-precision loops, in every opset form.
#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/run_node.h"

namespace autopar {
namespace {

using ::testing::ElementsAre;
using testing::f32;
using testing::f64;
using testing::NodeRun;
using testing::random_f32;
using testing::values_of;

using Dims = std::vector<int64_t>;

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected,
                     double tolerance, const std::string& what = "") {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance * (1 + std::abs(expected[i])))
        << what << " element " << i;
  }
}

int64_t product(const Dims& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t d = begin; d < end; ++d) p *= dims[d];
  return p;
}

// Softmax over `length` values spaced `inner` apart, for each of outer × inner positions.
std::vector<double> naive_softmax(const std::vector<double>& x, int64_t outer, int64_t length,
                                  int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t i) { return (o * length + i) * inner + j; };
      double max = -INFINITY, sum = 0;
      for (int64_t i = 0; i < length; ++i) max = std::max(max, x[at(i)]);
      for (int64_t i = 0; i < length; ++i) sum += std::exp(x[at(i)] - max);
      for (int64_t i = 0; i < length; ++i) {
        y[at(i)] = log ? x[at(i)] - max - std::log(sum) : std::exp(x[at(i)] - max) / sum;
      }
    }
  }
  return y;
}

TEST(RuntimeNormalization, SoftmaxOfOneRowByHand) {
  const double total = std::exp(-2.0) + std::exp(-1.0) + 1.0;
  expect_near_all(values_of(NodeRun("Softmax").input(f32({3}, {1, 2, 3})).run1()),
                  {std::exp(-2.0) / total, std::exp(-1.0) / total, 1.0 / total}, 1e-6);
  expect_near_all(values_of(NodeRun("LogSoftmax").input(f32({3}, {1, 2, 3})).run1()),
                  {-2 - std::log(total), -1 - std::log(total), -std::log(total)}, 1e-6);
}

// From opset 13 one axis is normalised; each axis of a 3-D tensor exercises contiguous rows
// (the last) and strided lanes (the others).
TEST(RuntimeNormalization, SoftmaxOverEachAxisFromOpset13) {
  const Tensor x = random_f32({3, 4, 5}, 1);
  for (bool log : {false, true}) {
    const char* op = log ? "LogSoftmax" : "Softmax";
    for (int64_t axis = -3; axis < 3; ++axis) {
      const int64_t a = axis < 0 ? axis + 3 : axis;
      const Tensor y = NodeRun(op, 13).input(x).attr("axis", axis).run1();
      expect_near_all(values_of(y),
                      naive_softmax(values_of(x), product(x.dims(), 0, a), x.dims()[a],
                                    product(x.dims(), a + 1, 3), log),
                      1e-6, std::string(op) + " axis " + std::to_string(axis));
    }
  }
}

// Before opset 13 the input is coerced to 2-D at axis: one row holds every dim from axis on.
TEST(RuntimeNormalization, SoftmaxBeforeOpset13CoercesTo2D) {
  const Tensor x = random_f32({2, 3, 4}, 2);
  for (bool log : {false, true}) {
    const char* op = log ? "LogSoftmax" : "Softmax";
    for (int64_t axis : {0, 1, 2, -1}) {
      const int64_t a = axis < 0 ? axis + 3 : axis;
      const Tensor y = NodeRun(op, 11).input(x).attr("axis", axis).run1();
      expect_near_all(
          values_of(y),
          naive_softmax(values_of(x), product(x.dims(), 0, a), product(x.dims(), a, 3), 1, log),
          1e-6, std::string(op) + " axis " + std::to_string(axis));
    }
  }
}

TEST(RuntimeNormalization, SoftmaxDefaultAxisChangesInOpset13) {
  const Tensor x = random_f32({2, 3, 4}, 3);
  expect_near_all(values_of(NodeRun("Softmax", 12).input(x).run1()),
                  naive_softmax(values_of(x), 2, 12, 1, false), 1e-6);
  expect_near_all(values_of(NodeRun("Softmax", 13).input(x).run1()),
                  naive_softmax(values_of(x), 6, 4, 1, false), 1e-6);
}

TEST(RuntimeNormalization, SoftmaxIsStableForLargeValues) {
  const Tensor x = f32({2, 3}, {1000, 1001, 1002, -1000, -1001, -1002});
  const std::vector<double> expected = naive_softmax({0, 1, 2, 0, -1, -2}, 2, 3, 1, false);
  expect_near_all(values_of(NodeRun("Softmax").input(x).run1()), expected, 1e-6);
  const std::vector<double> log = values_of(NodeRun("LogSoftmax").input(x).run1());
  for (size_t i = 0; i < log.size(); ++i) EXPECT_NEAR(log[i], std::log(expected[i]), 1e-5);
}

TEST(RuntimeNormalization, SoftmaxInDoublePrecision) {
  const Tensor x = f64({2, 2}, {0.5, -0.25, 3, 3});
  const Tensor y = NodeRun("Softmax").input(x).run1();
  EXPECT_EQ(y.dtype(), DType::kFloat64);
  expect_near_all(values_of(y), naive_softmax(values_of(x), 2, 2, 1, false), 1e-15);
  expect_near_all(values_of(NodeRun("LogSoftmax", 13).input(x).attr("axis", 0).run1()),
                  naive_softmax(values_of(x), 1, 2, 2, true), 1e-15);
}

TEST(RuntimeNormalization, SoftmaxOfEmptyTensors) {
  EXPECT_EQ(NodeRun("Softmax").input(Tensor(DType::kFloat32, {0, 3})).run1().num_elements(), 0);
  EXPECT_EQ(NodeRun("LogSoftmax").input(Tensor(DType::kFloat32, {2, 0})).run1().num_elements(), 0);
}

TEST(RuntimeNormalization, SoftmaxOneAndTwoThreadsGiveIdenticalBits) {
  for (const Dims& dims : {Dims{256, 1000}, Dims{16, 300, 96}}) {
    const Tensor x = random_f32(dims, 4);
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      const int64_t axis = dims.size() == 3 ? 1 : -1;
      const Tensor one = NodeRun(op).input(x).attr("axis", axis).threads(1).run1();
      const Tensor two = NodeRun(op).input(x).attr("axis", axis).threads(2).run1();
      EXPECT_EQ(one, two) << op;
    }
  }
}

// ---- LayerNormalization ----------------------------------------------------------------

struct LayerNormResult {
  std::vector<double> y, mean, inv_std;
};

LayerNormResult naive_layer_norm(const Tensor& x, const Tensor& scale, const Tensor* bias,
                                 int64_t axis, double epsilon) {
  const int64_t rank = x.rank();
  if (axis < 0) axis += rank;
  const int64_t rows = product(x.dims(), 0, axis), length = product(x.dims(), axis, rank);
  const std::vector<double> v = values_of(x), s = values_of(scale);
  const std::vector<double> b = bias ? values_of(*bias) : std::vector<double>();
  LayerNormResult r;
  for (int64_t row = 0; row < rows; ++row) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < length; ++i) mean += v[row * length + i];
    mean /= length;
    for (int64_t i = 0; i < length; ++i) var += std::pow(v[row * length + i] - mean, 2);
    var /= length;
    const double inv_std = 1 / std::sqrt(var + epsilon);
    for (int64_t i = 0; i < length; ++i) {
      // scale and bias broadcast onto the normalised dims: trailing-aligned, 1 = repeat.
      const double si = s.size() == 1 ? s[0] : s[i % s.size()];
      const double bi = b.empty() ? 0 : (b.size() == 1 ? b[0] : b[i % b.size()]);
      r.y.push_back((v[row * length + i] - mean) * inv_std * si + bi);
    }
    r.mean.push_back(mean);
    r.inv_std.push_back(inv_std);
  }
  return r;
}

TEST(RuntimeNormalization, LayerNormOfOneRowByHand) {
  // mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25.
  const Tensor x = f32({1, 4}, {1, 2, 3, 4});
  const auto outputs = NodeRun("LayerNormalization")
                           .input(x)
                           .input(f32({4}, {1, 2, 1, 1}))
                           .input(f32({4}, {0, 0, 0, 10}))
                           .attr("epsilon", 0.0f)
                           .outputs(3)
                           .run();
  ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
  const double inv = 1 / std::sqrt(1.25);
  expect_near_all(values_of((*outputs)[0]), {-1.5 * inv, -1.0 * inv, 0.5 * inv, 1.5 * inv + 10},
                  1e-6);
  EXPECT_EQ((*outputs)[1].dims(), (Dims{1, 1}));
  EXPECT_THAT(values_of((*outputs)[1]), ElementsAre(2.5));
  expect_near_all(values_of((*outputs)[2]), {inv}, 1e-7);
}

TEST(RuntimeNormalization, LayerNormOverEachAxisWithStatistics) {
  const Tensor x = random_f32({2, 3, 4}, 5);
  for (int64_t axis : {0, 1, 2, -1, -2}) {
    const int64_t a = axis < 0 ? axis + 3 : axis;
    const Dims normalized(x.dims().begin() + a, x.dims().end());
    const Tensor scale = random_f32(normalized, 6), bias = random_f32(normalized, 7);
    const auto outputs = NodeRun("LayerNormalization")
                             .input(x)
                             .input(scale)
                             .input(bias)
                             .attr("axis", axis)
                             .attr("epsilon", 1e-3f)
                             .outputs(3)
                             .run();
    ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
    const LayerNormResult expected = naive_layer_norm(x, scale, &bias, axis, 1e-3);
    const std::string what = "axis " + std::to_string(axis);
    expect_near_all(values_of((*outputs)[0]), expected.y, 1e-5, what);
    expect_near_all(values_of((*outputs)[1]), expected.mean, 1e-6, what);
    expect_near_all(values_of((*outputs)[2]), expected.inv_std, 1e-5, what);
    Dims stats_dims(x.dims().begin(), x.dims().begin() + a);
    stats_dims.resize(3, 1);
    EXPECT_EQ((*outputs)[1].dims(), stats_dims) << what;
  }
}

// Scale and bias may have fewer dims than the normalised shape, or 1s that repeat.
TEST(RuntimeNormalization, LayerNormBroadcastsScaleAndOmitsBias) {
  const Tensor x = random_f32({3, 2, 4}, 8);
  const Tensor scale = f32({1, 4}, {0.5, 1, 2, -1});
  const Tensor y = NodeRun("LayerNormalization").input(x).input(scale).attr("axis", 1).run1();
  expect_near_all(values_of(y), naive_layer_norm(x, scale, nullptr, 1, 1e-5).y, 1e-5);
  const Tensor scalar_scale = f32({}, {3});
  const Tensor bias = f32({4}, {1, 2, 3, 4});
  const Tensor z = NodeRun("LayerNormalization").input(x).input(scalar_scale).input(bias).run1();
  expect_near_all(values_of(z), naive_layer_norm(x, scalar_scale, &bias, -1, 1e-5).y, 1e-5);
}

TEST(RuntimeNormalization, LayerNormStashTypeSetsTheStatisticsPrecision) {
  const Tensor x = random_f32({4, 16}, 9);
  const Tensor scale = f32({16}, std::vector<float>(16, 1));
  const auto outputs =
      NodeRun("LayerNormalization").input(x).input(scale).attr("stash_type", 11).outputs(3).run();
  ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
  EXPECT_EQ((*outputs)[0].dtype(), DType::kFloat32);
  EXPECT_EQ((*outputs)[1].dtype(), DType::kFloat64);
  EXPECT_EQ((*outputs)[2].dtype(), DType::kFloat64);
  const LayerNormResult expected = naive_layer_norm(x, scale, nullptr, -1, 1e-5);
  // f32 inputs are exact in double, so double statistics match the double reference closely.
  expect_near_all(values_of((*outputs)[1]), expected.mean, 1e-14);
  expect_near_all(values_of((*outputs)[2]), expected.inv_std, 1e-12);
  expect_near_all(values_of((*outputs)[0]), expected.y, 1e-6);
}

TEST(RuntimeNormalization, LayerNormInDoublePrecision) {
  const Tensor x = f64({2, 3}, {0.1, 0.2, 0.6, -1, 0, 4});
  const Tensor scale = f64({3}, {1, 1, 1});
  const auto outputs = NodeRun("LayerNormalization").input(x).input(scale).outputs(2).run();
  ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
  EXPECT_EQ((*outputs)[0].dtype(), DType::kFloat64);
  // The default stash type is float: the mean is stored as a float, but computed (and the
  // output normalised) in double, as ONNX Runtime and PyTorch do for double inputs.
  EXPECT_EQ((*outputs)[1].dtype(), DType::kFloat32);
  const LayerNormResult expected = naive_layer_norm(x, scale, nullptr, -1, 1e-5);
  expect_near_all(values_of((*outputs)[0]), expected.y, 1e-10);  // epsilon is a float attribute
  expect_near_all(values_of((*outputs)[1]), expected.mean, 1e-7);
}

TEST(RuntimeNormalization, LayerNormOneAndTwoThreadsGiveIdenticalBits) {
  const Tensor x = random_f32({512, 768}, 10);
  const Tensor scale = random_f32({768}, 11), bias = random_f32({768}, 12);
  auto run = [&](int threads) {
    return NodeRun("LayerNormalization").input(x).input(scale).input(bias).threads(threads).run1();
  };
  EXPECT_EQ(run(1), run(2));
}

// ---- BatchNormalization ----------------------------------------------------------------

struct BatchStats {
  std::vector<double> mean, var;
};

BatchStats naive_batch_stats(const Tensor& x) {
  const int64_t n = x.dims()[0], c = x.dims()[1], plane = product(x.dims(), 2, x.rank());
  const std::vector<double> v = values_of(x);
  BatchStats s{std::vector<double>(c, 0), std::vector<double>(c, 0)};
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t i = 0; i < plane; ++i) s.mean[ch] += v[(b * c + ch) * plane + i];
    }
    s.mean[ch] /= n * plane;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t i = 0; i < plane; ++i) {
        s.var[ch] += std::pow(v[(b * c + ch) * plane + i] - s.mean[ch], 2);
      }
    }
    s.var[ch] /= n * plane;
  }
  return s;
}

std::vector<double> naive_batch_norm(const Tensor& x, const std::vector<double>& scale,
                                     const std::vector<double>& bias,
                                     const std::vector<double>& mean,
                                     const std::vector<double>& var, double epsilon) {
  const int64_t c = x.dims()[1], plane = product(x.dims(), 2, x.rank());
  const std::vector<double> v = values_of(x);
  std::vector<double> y(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t ch = (static_cast<int64_t>(i) / plane) % c;
    y[i] = scale[ch] * (v[i] - mean[ch]) / std::sqrt(var[ch] + epsilon) + bias[ch];
  }
  return y;
}

TEST(RuntimeNormalization, BatchNormInferenceByHand) {
  // ONNX's example: x[1,2,1,3], channel 0 holds -1 0 1, channel 1 holds 2 3 4.
  const Tensor x = f32({1, 2, 1, 3}, {-1, 0, 1, 2, 3, 4});
  const Tensor y = NodeRun("BatchNormalization", 15)
                       .input(x)
                       .input(f32({2}, {1.0f, 1.5f}))
                       .input(f32({2}, {0, 1}))
                       .input(f32({2}, {0, 3}))
                       .input(f32({2}, {1, 1.5f}))
                       .run1();
  const double a0 = 1 / std::sqrt(1 + 1e-5), a1 = 1.5 / std::sqrt(1.5 + 1e-5);
  expect_near_all(values_of(y), {-a0, 0, a0, -a1 + 1, 1, a1 + 1}, 1e-6);
}

TEST(RuntimeNormalization, BatchNormInferenceMatchesTheReference) {
  for (const Dims& dims : {Dims{3, 4}, Dims{2, 3, 5}, Dims{2, 3, 4, 5}}) {
    const Tensor x = random_f32(dims, 13);
    const std::vector<double> scale = {0.5, 2, -1, 1}, bias = {0.1, 0.2, 0.3, 0.4};
    const std::vector<double> mean = {0.1, -0.2, 0.05, 0}, var = {0.5, 1, 2, 0.25};
    const int64_t c = dims[1];
    auto channels = [c](const std::vector<double>& v) {
      return f32({c}, std::vector<float>(v.begin(), v.begin() + c));
    };
    const Tensor y = NodeRun("BatchNormalization", 9)
                         .input(x)
                         .input(channels(scale))
                         .input(channels(bias))
                         .input(channels(mean))
                         .input(channels(var))
                         .attr("epsilon", 1e-3f)
                         .run1();
    expect_near_all(values_of(y),
                    naive_batch_norm(x, values_of(channels(scale)), values_of(channels(bias)),
                                     values_of(channels(mean)), values_of(channels(var)), 1e-3),
                    1e-5, "rank " + std::to_string(dims.size()));
  }
}

// Opset 14+: training_mode = 1 normalises with the batch's statistics and returns the
// running statistics moved toward them by (1 - momentum).
TEST(RuntimeNormalization, BatchNormTrainingModeFromOpset14) {
  const Tensor x = random_f32({4, 3, 2, 5}, 14);
  const Tensor scale = f32({3}, {1, 0.5f, 2}), bias = f32({3}, {0, 1, -1});
  const Tensor mean = f32({3}, {0.5f, -0.5f, 0}), var = f32({3}, {1, 2, 0.5f});
  const auto outputs = NodeRun("BatchNormalization", 15)
                           .input(x)
                           .input(scale)
                           .input(bias)
                           .input(mean)
                           .input(var)
                           .attr("training_mode", 1)
                           .attr("momentum", 0.8f)
                           .outputs(3)
                           .run();
  ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
  const BatchStats batch = naive_batch_stats(x);
  expect_near_all(
      values_of((*outputs)[0]),
      naive_batch_norm(x, values_of(scale), values_of(bias), batch.mean, batch.var, 1e-5), 1e-5);
  const double momentum = static_cast<double>(0.8f);
  std::vector<double> running_mean, running_var;
  for (int c = 0; c < 3; ++c) {
    running_mean.push_back(values_of(mean)[c] * momentum + batch.mean[c] * (1 - momentum));
    running_var.push_back(values_of(var)[c] * momentum + batch.var[c] * (1 - momentum));
  }
  expect_near_all(values_of((*outputs)[1]), running_mean, 1e-6);
  expect_near_all(values_of((*outputs)[2]), running_var, 1e-6);
}

TEST(RuntimeNormalization, BatchNormTrainingModeWithoutStatisticsOutputs) {
  const Tensor x = f32({2, 1, 2}, {1, 3, 5, 7});
  const Tensor one = f32({1}, {1}), zero = f32({1}, {0});
  const Tensor y = NodeRun("BatchNormalization", 14)
                       .input(x)
                       .input(one)
                       .input(zero)
                       .input(zero)
                       .input(one)
                       .attr("training_mode", 1)
                       .attr("epsilon", 0.0f)
                       .run1();
  // Batch mean 4, biased variance (9 + 1 + 1 + 9) / 4 = 5.
  const double s = 1 / std::sqrt(5.0);
  expect_near_all(values_of(y), {-3 * s, -1 * s, 1 * s, 3 * s}, 1e-6);
}

// Opsets 9 to 13 train when statistics outputs are present: running mean and variance, then
// the batch's own mean and biased variance.
TEST(RuntimeNormalization, BatchNormTrainingBeforeOpset14ReturnsSavedStatistics) {
  const Tensor x = f32({2, 2, 2}, {1, 2, 10, 20, 3, 4, 30, 40});
  const Tensor ones = f32({2}, {1, 1}), zeros = f32({2}, {0, 0});
  const auto outputs = NodeRun("BatchNormalization", 9)
                           .input(x)
                           .input(ones)
                           .input(zeros)
                           .input(zeros)
                           .input(ones)
                           .outputs(5)
                           .run();
  ASSERT_TRUE(outputs.is_ok()) << outputs.status().message();
  // Channel 0 holds 1 2 3 4 (mean 2.5, variance 1.25); channel 1 holds 10 20 30 40 (mean 25,
  // variance 125). Default momentum 0.9.
  expect_near_all(values_of((*outputs)[1]), {0.1 * 2.5, 0.1 * 25}, 1e-6);
  expect_near_all(values_of((*outputs)[2]), {0.9 + 0.1 * 1.25, 0.9 + 0.1 * 125}, 1e-6);
  expect_near_all(values_of((*outputs)[3]), {2.5, 25}, 1e-6);
  expect_near_all(values_of((*outputs)[4]), {1.25, 125}, 1e-6);
  const BatchStats batch = naive_batch_stats(x);
  expect_near_all(values_of((*outputs)[0]),
                  naive_batch_norm(x, {1, 1}, {0, 0}, batch.mean, batch.var, 1e-5), 1e-5);
}

TEST(RuntimeNormalization, BatchNormInDoublePrecisionWithMixedParameterTypes) {
  const Tensor x = f64({2, 2}, {1, 2, 3, 4});
  const Tensor y = NodeRun("BatchNormalization", 15)
                       .input(x)
                       .input(f32({2}, {2, 3}))
                       .input(f32({2}, {1, 1}))
                       .input(f64({2}, {1, 2}))
                       .input(f64({2}, {4, 9}))
                       .attr("epsilon", 0.0f)
                       .run1();
  EXPECT_EQ(y.dtype(), DType::kFloat64);
  expect_near_all(values_of(y), {1, 1, 2 * 2.0 / 2 + 1, 3 * 2.0 / 3 + 1}, 1e-15);
}

TEST(RuntimeNormalization, BatchNormOneAndTwoThreadsGiveIdenticalBits) {
  const Tensor x = random_f32({16, 8, 32, 32}, 15);
  const Tensor scale = random_f32({8}, 16), bias = random_f32({8}, 17);
  const Tensor mean = random_f32({8}, 18), var = f32({8}, std::vector<float>(8, 1));
  auto run = [&](int threads) {
    auto outputs = NodeRun("BatchNormalization", 15)
                       .input(x)
                       .input(scale)
                       .input(bias)
                       .input(mean)
                       .input(var)
                       .attr("training_mode", 1)
                       .outputs(3)
                       .threads(threads)
                       .run();
    EXPECT_TRUE(outputs.is_ok()) << outputs.status().message();
    return outputs.is_ok() ? *outputs : std::vector<Tensor>();
  };
  EXPECT_EQ(run(1), run(2));
}

}  // namespace
}  // namespace autopar
