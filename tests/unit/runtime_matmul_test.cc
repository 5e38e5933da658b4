// MatMul and Gemm kernels against hand-computed values and a naive triple loop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/run_node.h"

namespace autopar {
namespace {

using ::testing::ElementsAre;
using testing::f32;
using testing::f64;
using ::testing::HasSubstr;
using testing::NodeRun;
using testing::random_f32;
using testing::values_of;

Tensor to_f64(const Tensor& t) { return f64(t.dims(), values_of(t)); }

// Reference batched product in double: both operands at least 2-D, batch dims broadcast.
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b,
                                 const std::vector<int64_t>& out_batch) {
  const auto& ad = a.dims();
  const auto& bd = b.dims();
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  const std::vector<double> av = values_of(a), bv = values_of(b);
  // Index of a broadcast batch coordinate in an operand with `batch` leading dims.
  auto operand_matrix = [&](const std::vector<int64_t>& dims, int64_t flat) {
    const size_t rank = dims.size() - 2;
    int64_t index = 0, scale = 1;
    for (size_t d = out_batch.size(); d-- > 0;) {
      const int64_t coord = flat % out_batch[d];
      flat /= out_batch[d];
      const size_t shift = out_batch.size() - rank;
      if (d < shift) continue;
      const int64_t dim = dims[d - shift];
      index += (dim == 1 ? 0 : coord) * scale;
      scale *= dim;
    }
    return index;
  };
  int64_t batch = 1;
  for (int64_t d : out_batch) batch *= d;
  std::vector<double> out;
  for (int64_t p = 0; p < batch; ++p) {
    const int64_t ai = operand_matrix(ad, p), bi = operand_matrix(bd, p);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l) {
          sum += av[ai * m * k + i * k + l] * bv[bi * k * n + l * n + j];
        }
        out.push_back(sum);
      }
    }
  }
  return out;
}

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected,
                     double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance) << "at element " << i;
  }
}

TEST(RuntimeMatMul, MultipliesMatrices) {
  Tensor y = NodeRun("MatMul")
                 .input(f32({2, 3}, {1, 2, 3, 4, 5, 6}))
                 .input(f32({3, 2}, {7, 8, 9, 10, 11, 12}))
                 .run1();
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(values_of(y), ElementsAre(58, 64, 139, 154));
}

TEST(RuntimeMatMul, PromotesAndSqueezesVectors) {
  const Tensor matrix = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor row = NodeRun("MatMul").input(f32({3}, {1, 0, -1})).input(matrix).run1();
  EXPECT_EQ(row.dims(), (std::vector<int64_t>{2}));
  EXPECT_THAT(values_of(row), ElementsAre(-4, -4));

  Tensor column = NodeRun("MatMul").input(matrix).input(f32({2}, {1, -1})).run1();
  EXPECT_EQ(column.dims(), (std::vector<int64_t>{3}));
  EXPECT_THAT(values_of(column), ElementsAre(-1, -1, -1));

  Tensor dot = NodeRun("MatMul").input(f32({3}, {1, 2, 3})).input(f32({3}, {4, 5, 6})).run1();
  EXPECT_EQ(dot.dims(), std::vector<int64_t>{});
  EXPECT_THAT(values_of(dot), ElementsAre(32));

  // A batched B with a vector A: [3] x [2, 3, 2] -> [2, 2].
  Tensor batched = NodeRun("MatMul")
                       .input(f32({3}, {1, 1, 1}))
                       .input(f32({2, 3, 2}, {1, 2, 3, 4, 5, 6, 0, 1, 0, 1, 0, 1}))
                       .run1();
  EXPECT_EQ(batched.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(values_of(batched), ElementsAre(9, 12, 0, 3));

  // A batched A with a vector B: [2, 2, 3] x [3] -> [2, 2].
  Tensor batched_a = NodeRun("MatMul")
                         .input(f32({2, 2, 3}, {1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 0, 1}))
                         .input(f32({3}, {1, 10, 100}))
                         .run1();
  EXPECT_EQ(batched_a.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(values_of(batched_a), ElementsAre(321, 654, 1, 100));
}

TEST(RuntimeMatMul, BroadcastsBatchDimsOfBothOperands) {
  const Tensor a = random_f32({2, 1, 3, 4}, 1);
  const Tensor b = random_f32({5, 4, 6}, 2);
  Tensor y = NodeRun("MatMul").input(a).input(b).run1();
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 5, 3, 6}));
  expect_near_all(values_of(y), naive_matmul(a, b, {2, 5}), 1e-5);

  // B broadcast over A's batch; A broadcast over B's.
  const Tensor a3 = random_f32({3, 4, 5}, 3);
  const Tensor b1 = random_f32({1, 5, 2}, 4);
  expect_near_all(values_of(NodeRun("MatMul").input(a3).input(b1).run1()),
                  naive_matmul(a3, b1, {3}), 1e-5);
  const Tensor a1 = random_f32({4, 5}, 5);
  const Tensor b3 = random_f32({3, 5, 2}, 6);
  expect_near_all(values_of(NodeRun("MatMul").input(a1).input(b3).run1()),
                  naive_matmul(a1, b3, {3}), 1e-5);
}

TEST(RuntimeMatMul, FoldsContiguousBatchesIntoOneProduct) {
  // [4, 70, 100] x [100, 200]: the batch folds into 280 rows, split into 96-row panels.
  const Tensor a = random_f32({4, 70, 100}, 7);
  const Tensor b = random_f32({100, 200}, 8);
  Tensor y = NodeRun("MatMul").input(a).input(b).run1();
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{4, 70, 200}));
  expect_near_all(values_of(y), naive_matmul(a, b, {4}), 1e-4);
}

TEST(RuntimeMatMul, SplitsLargeProductsIntoRowPanels) {
  // 301 rows in 96-row panels: 4 panels, the last one ragged.
  const Tensor a = random_f32({301, 200}, 9);
  const Tensor b = random_f32({200, 200}, 10);
  Tensor two = NodeRun("MatMul").input(a).input(b).threads(2).run1();
  expect_near_all(values_of(two), naive_matmul(a, b, {}), 1e-4);
  Tensor one = NodeRun("MatMul").input(a).input(b).threads(1).run1();
  EXPECT_EQ(one, two);  // bit for bit
}

TEST(RuntimeMatMul, BatchedResultsDoNotDependOnThreads) {
  const Tensor a = random_f32({6, 1, 64, 40}, 11);
  const Tensor b = random_f32({3, 40, 72}, 12);
  Tensor one = NodeRun("MatMul").input(a).input(b).threads(1).run1();
  Tensor two = NodeRun("MatMul").input(a).input(b).threads(2).run1();
  EXPECT_EQ(one, two);
  expect_near_all(values_of(two), naive_matmul(a, b, {6, 3}), 1e-4);
}

TEST(RuntimeMatMul, ComputesInDouble) {
  const Tensor a = f64({2, 2}, {1.0 / 3.0, 1e-12, 2, 4});
  const Tensor b = f64({2, 1}, {3, 1e12});
  Tensor y = NodeRun("MatMul").input(a).input(b).run1();
  ASSERT_EQ(y.dtype(), DType::kFloat64);
  EXPECT_DOUBLE_EQ(values_of(y)[0], 2.0);  // 1 + 1 exactly; f32 would lose 1e-12 · 1e12
  EXPECT_DOUBLE_EQ(values_of(y)[1], 6.0 + 4e12);

  const Tensor a64 = to_f64(random_f32({3, 20, 30}, 13));
  const Tensor b64 = to_f64(random_f32({30, 10}, 14));
  expect_near_all(values_of(NodeRun("MatMul").input(a64).input(b64).run1()),
                  naive_matmul(a64, b64, {3}), 1e-12);
}

TEST(RuntimeMatMul, EmptyInnerDimGivesZeros) {
  Tensor y = NodeRun("MatMul").input(f32({2, 0}, {})).input(f32({0, 3}, {})).run1();
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(values_of(y), ElementsAre(0, 0, 0, 0, 0, 0));
  Tensor empty = NodeRun("MatMul").input(f32({0, 4}, {})).input(random_f32({4, 3}, 1)).run1();
  EXPECT_EQ(empty.dims(), (std::vector<int64_t>{0, 3}));
}

TEST(RuntimeMatMul, RejectsIntegerOperands) {
  auto result = NodeRun("MatMul")
                    .input(Tensor::from_int64({2, 2}, std::vector<int64_t>{1, 2, 3, 4}))
                    .input(Tensor::from_int64({2, 2}, std::vector<int64_t>{1, 0, 0, 1}))
                    .run();
  ASSERT_FALSE(result.is_ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("node 'n' (MatMul): dtype i64 is not supported by the CPU kernel"));
}

// Reference Gemm in double.
std::vector<double> naive_gemm(const Tensor& a, const Tensor& b, const Tensor* c, bool trans_a,
                               bool trans_b, double alpha, double beta) {
  const int64_t m = trans_a ? a.dims()[1] : a.dims()[0];
  const int64_t k = trans_a ? a.dims()[0] : a.dims()[1];
  const int64_t n = trans_b ? b.dims()[0] : b.dims()[1];
  const std::vector<double> av = values_of(a), bv = values_of(b);
  std::vector<double> out;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l) {
        sum += av[trans_a ? l * m + i : i * k + l] * bv[trans_b ? j * k + l : l * n + j];
      }
      double value = alpha * sum;
      if (c) {
        // C is [], [N], [1, N], [M, 1] or [M, N].
        const auto& cd = c->dims();
        const int64_t rows = cd.size() == 2 ? cd[0] : 1;
        const int64_t cols = cd.empty() ? 1 : cd.back();
        value += beta * c->float_at((rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j));
      }
      out.push_back(value);
    }
  }
  return out;
}

TEST(RuntimeMatMul, GemmTransposesScalesAndAddsC) {
  // A^T with A = [[1, 4], [2, 5], [3, 6]] is [[1, 2, 3], [4, 5, 6]]; B^T is [[1, 0], [0, 1],
  // [1, 1]]: A^T·B^T = [[4, 5], [10, 11]]; 2·that + 0.5·[10, 20].
  Tensor y = NodeRun("Gemm")
                 .input(f32({3, 2}, {1, 4, 2, 5, 3, 6}))
                 .input(f32({2, 3}, {1, 0, 1, 0, 1, 1}))
                 .input(f32({2}, {10, 20}))
                 .attr("transA", 1)
                 .attr("transB", 1)
                 .attr("alpha", 2.0f)
                 .attr("beta", 0.5f)
                 .run1();
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(values_of(y), ElementsAre(13, 20, 25, 32));
}

TEST(RuntimeMatMul, GemmBroadcastsEveryFormOfC) {
  const Tensor a = random_f32({5, 4}, 21);
  const Tensor b = random_f32({4, 3}, 22);
  for (const std::vector<int64_t>& c_dims :
       std::vector<std::vector<int64_t>>{{}, {1}, {3}, {1, 3}, {5, 1}, {5, 3}, {1, 1}}) {
    const Tensor c = random_f32(c_dims, 23);
    Tensor y = NodeRun("Gemm").input(a).input(b).input(c).attr("beta", 3.0f).run1();
    expect_near_all(values_of(y), naive_gemm(a, b, &c, false, false, 1.0, 3.0), 1e-5);
  }
}

TEST(RuntimeMatMul, GemmWithoutCFromOpset11) {
  const Tensor a = random_f32({4, 6}, 31);
  const Tensor b = random_f32({5, 6}, 32);
  Tensor y = NodeRun("Gemm", 11).input(a).input(b).attr("transB", 1).attr("alpha", 0.25f).run1();
  expect_near_all(values_of(y), naive_gemm(a, b, nullptr, false, true, 0.25, 0), 1e-5);
  // Before opset 11 C is required; the shape rule says so.
  auto old = NodeRun("Gemm", 9).input(a).input(b).attr("transB", 1).run();
  EXPECT_FALSE(old.is_ok());
}

TEST(RuntimeMatMul, GemmLargeTransposedPanelsMatchAcrossThreads) {
  // transA with several row panels: each panel reads a strided block of A's columns.
  const Tensor a = random_f32({150, 260}, 41);  // stored [K, M]
  const Tensor b = random_f32({180, 150}, 42);  // stored [N, K]
  const Tensor c = random_f32({260, 1}, 43);
  auto run = [&](int threads) {
    return NodeRun("Gemm")
        .input(a)
        .input(b)
        .input(c)
        .attr("transA", 1)
        .attr("transB", 1)
        .attr("alpha", 0.5f)
        .attr("beta", -2.0f)
        .threads(threads)
        .run1();
  };
  Tensor two = run(2);
  EXPECT_EQ(two.dims(), (std::vector<int64_t>{260, 180}));
  expect_near_all(values_of(two), naive_gemm(a, b, &c, true, true, 0.5, -2.0), 1e-4);
  EXPECT_EQ(run(1), two);
}

// A batch-1 linear layer (one row of A, B transposed, C a row or absent) takes the dot-product
// path where the CPU has it: the same values, whatever the thread count.
TEST(RuntimeMatMul, GemmOfOneRowMatchesTheReference) {
  const Tensor a = random_f32({1, 200}, 61);
  const Tensor b = random_f32({150, 200}, 62);
  for (const std::vector<int64_t>& c_dims :
       std::vector<std::vector<int64_t>>{{150}, {1, 150}, {}, {1, 1}}) {
    const Tensor c = random_f32(c_dims, 63);
    auto run = [&](int threads) {
      return NodeRun("Gemm").input(a).input(b).input(c).attr("transB", 1).threads(threads).run1();
    };
    Tensor two = run(2);
    expect_near_all(values_of(two), naive_gemm(a, b, &c, false, true, 1.0, 1.0), 1e-5);
    EXPECT_EQ(run(1), two);
  }
  Tensor y = NodeRun("Gemm", 11).input(a).input(b).attr("transB", 1).run1();
  expect_near_all(values_of(y), naive_gemm(a, b, nullptr, false, true, 1.0, 0), 1e-5);
}

TEST(RuntimeMatMul, GemmInDouble) {
  const Tensor a = to_f64(random_f32({7, 9}, 51));
  const Tensor b = to_f64(random_f32({9, 4}, 52));
  const Tensor c = to_f64(random_f32({7, 4}, 53));
  Tensor y = NodeRun("Gemm").input(a).input(b).input(c).attr("alpha", 1.5f).run1();
  ASSERT_EQ(y.dtype(), DType::kFloat64);
  expect_near_all(values_of(y), naive_gemm(a, b, &c, false, false, 1.5, 1.0), 1e-12);
}

TEST(RuntimeMatMul, GemmEmptyInnerDimLeavesBetaC) {
  Tensor y = NodeRun("Gemm")
                 .input(f32({2, 0}, {}))
                 .input(f32({0, 2}, {}))
                 .input(f32({2}, {1, 2}))
                 .attr("beta", 2.0f)
                 .run1();
  EXPECT_THAT(values_of(y), ElementsAre(2, 4, 2, 4));
}

}  // namespace
}  // namespace autopar
