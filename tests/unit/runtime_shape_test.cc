// Data-movement kernels and Resize: every opset form, dtypes, clamping, run-time index errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/run_node.h"

namespace autopar {
namespace {

using testing::boolean;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using testing::f32;
using testing::f64;
using ::testing::HasSubstr;
using testing::i64;
using testing::NodeRun;
using ::testing::Pointwise;
using testing::random_f32;
using testing::values_of;

using Ints = std::vector<int64_t>;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// 0, 1, 2, ... as f32.
Tensor ramp(const Ints& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return f32(dims, v);
}

Tensor i32(const Ints& dims, const std::vector<int64_t>& values) {
  Tensor t(DType::kInt32, dims);
  for (size_t i = 0; i < values.size(); ++i) t.set_from_int(static_cast<int64_t>(i), values[i]);
  return t;
}

// Row-major coordinates of `flat` in `dims`.
Ints coords_of(int64_t flat, const Ints& dims) {
  Ints c(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    c[d] = flat % dims[d];
    flat /= dims[d];
  }
  return c;
}

int64_t flat_of(const Ints& coords, const Ints& dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + coords[d];
  return flat;
}

// ---- Flatten, Reshape, Squeeze, Unsqueeze ------------------------------------------

TEST(RuntimeShape, ReshapingOpsKeepTheBytes) {
  const Tensor x = ramp({2, 3, 4});
  Tensor flat = NodeRun("Flatten").input(x).attr("axis", 2).run1();
  EXPECT_EQ(flat.dims(), (Ints{6, 4}));
  EXPECT_EQ(values_of(flat), values_of(x));

  Tensor reshaped = NodeRun("Reshape").input(x).constant(i64({3}, {0, -1, 2})).run1();
  EXPECT_EQ(reshaped.dims(), (Ints{2, 6, 2}));
  EXPECT_EQ(reshaped.bytes(), x.bytes());

  // Integer and bool data move as bytes too.
  const Tensor ints = i64({1, 3, 1}, {7, -8, 9});
  Tensor squeezed = NodeRun("Squeeze").input(ints).constant(i64({1}, {0})).run1();
  EXPECT_EQ(squeezed.dims(), (Ints{3, 1}));
  EXPECT_EQ(squeezed.to_int64_vector(), (Ints{7, -8, 9}));
  Tensor squeezed_all = NodeRun("Squeeze", 11).input(ints).run1();
  EXPECT_EQ(squeezed_all.dims(), (Ints{3}));
  Tensor squeezed_attr = NodeRun("Squeeze", 11).input(ints).attr("axes", Ints{-1}).run1();
  EXPECT_EQ(squeezed_attr.dims(), (Ints{1, 3}));

  const Tensor flags = boolean({2}, {true, false});
  Tensor unsqueezed = NodeRun("Unsqueeze").input(flags).constant(i64({2}, {0, 2})).run1();
  EXPECT_EQ(unsqueezed.dims(), (Ints{1, 2, 1}));
  EXPECT_EQ(unsqueezed.dtype(), DType::kBool);
  EXPECT_EQ(unsqueezed.to_int64_vector(), (Ints{1, 0}));
  Tensor unsqueezed_attr = NodeRun("Unsqueeze", 11).input(flags).attr("axes", Ints{1}).run1();
  EXPECT_EQ(unsqueezed_attr.dims(), (Ints{2, 1}));
}

// ---- Transpose ------------------------------------------------------------------------

// out[o] = x[coordinates permuted back].
std::vector<double> naive_transpose(const Tensor& x, const Ints& perm) {
  Ints out_dims;
  for (int64_t p : perm) out_dims.push_back(x.dims()[p]);
  std::vector<double> out;
  for (int64_t e = 0; e < x.num_elements(); ++e) {
    const Ints o = coords_of(e, out_dims);
    Ints i(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) i[perm[d]] = o[d];
    out.push_back(x.float_at(flat_of(i, x.dims())));
  }
  return out;
}

TEST(RuntimeShape, TransposeMatchesDirectPermutation) {
  const Tensor x = ramp({2, 3, 4, 5});
  for (const Ints& perm : std::vector<Ints>{
           {3, 2, 1, 0}, {0, 1, 3, 2}, {2, 0, 3, 1}, {0, 2, 1, 3}, {1, 0, 2, 3}, {0, 1, 2, 3}}) {
    Tensor y = NodeRun("Transpose").input(x).attr("perm", perm).run1();
    EXPECT_EQ(values_of(y), naive_transpose(x, perm)) << ::testing::PrintToString(perm);
  }
  // The default reverses the dims.
  Tensor reversed = NodeRun("Transpose").input(ramp({2, 3, 4})).run1();
  EXPECT_EQ(reversed.dims(), (Ints{4, 3, 2}));
  EXPECT_EQ(values_of(reversed), naive_transpose(ramp({2, 3, 4}), {2, 1, 0}));
}

TEST(RuntimeShape, TransposeTilesLargeMatricesOfEveryElementSize) {
  // 70x45 crosses several 32-wide tiles with ragged edges; batched via perm [0, 2, 1].
  const Tensor matrix = ramp({70, 45});
  Tensor t = NodeRun("Transpose").input(matrix).threads(2).run1();
  EXPECT_EQ(values_of(t), naive_transpose(matrix, {1, 0}));
  EXPECT_EQ(NodeRun("Transpose").input(matrix).threads(1).run1(), t);

  const Tensor batched = random_f32({3, 40, 33}, 5);
  Tensor b = NodeRun("Transpose").input(batched).attr("perm", Ints{0, 2, 1}).run1();
  EXPECT_EQ(values_of(b), naive_transpose(batched, {0, 2, 1}));

  const Tensor wide = f64({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(values_of(NodeRun("Transpose").input(wide).run1()), ElementsAre(1, 3, 5, 2, 4, 6));
  const Tensor longs = i64({2, 3}, {1, 2, 3, 4, 5, kMax});
  EXPECT_EQ(NodeRun("Transpose").input(longs).run1().to_int64_vector(),
            (Ints{1, 4, 2, 5, 3, kMax}));
  const Tensor half(DType::kFloat16, {2, 2}, {1, 0, 2, 0, 3, 0, 4, 0});  // 16-bit elements
  EXPECT_EQ(NodeRun("Transpose").input(half).run1().bytes(),
            (std::vector<uint8_t>{1, 0, 3, 0, 2, 0, 4, 0}));
  const Tensor flags = boolean({2, 2}, {true, true, false, false});
  EXPECT_EQ(NodeRun("Transpose").input(flags).run1().to_int64_vector(), (Ints{1, 0, 1, 0}));
}

// ---- Concat and Split -------------------------------------------------------------------

TEST(RuntimeShape, ConcatJoinsAlongTheAxis) {
  Tensor y = NodeRun("Concat")
                 .input(f32({2, 1}, {1, 2}))
                 .input(f32({2, 0}, {}))
                 .input(f32({2, 2}, {3, 4, 5, 6}))
                 .attr("axis", -1)
                 .run1();
  EXPECT_EQ(y.dims(), (Ints{2, 3}));
  EXPECT_THAT(values_of(y), ElementsAre(1, 3, 4, 2, 5, 6));

  Tensor rows = NodeRun("Concat")
                    .input(i32({1, 2}, {1, 2}))
                    .input(i32({2, 2}, {3, 4, 5, 6}))
                    .attr("axis", 0)
                    .run1();
  EXPECT_EQ(rows.dtype(), DType::kInt32);
  EXPECT_EQ(rows.to_int64_vector(), (Ints{1, 2, 3, 4, 5, 6}));

  // A middle axis of a 3-D tensor, larger than one chunk, across thread counts.
  const Tensor a = random_f32({64, 30, 16}, 1);
  const Tensor b = random_f32({64, 10, 16}, 2);
  auto run = [&](int threads) {
    return NodeRun("Concat").input(a).input(b).attr("axis", 1).threads(threads).run1();
  };
  Tensor joined = run(2);
  EXPECT_EQ(joined, run(1));
  EXPECT_EQ(joined.float_at(flat_of({5, 31, 7}, {64, 40, 16})),
            b.float_at(flat_of({5, 1, 7}, {64, 10, 16})));
  EXPECT_EQ(joined.float_at(flat_of({63, 29, 15}, {64, 40, 16})),
            a.float_at(flat_of({63, 29, 15}, {64, 30, 16})));
}

TEST(RuntimeShape, SplitTakesSizesFromAttributeInputOrEqualParts) {
  const Tensor x = ramp({2, 6});
  auto split = [&](NodeRun run) {
    auto result = run.run();
    EXPECT_TRUE(result.is_ok()) << result.status().message();
    std::vector<std::vector<double>> parts;
    if (result.is_ok()) {
      for (const Tensor& t : *result) parts.push_back(values_of(t));
    }
    return parts;
  };
  // Before opset 13: attribute.
  auto by_attr =
      split(NodeRun("Split", 11).input(x).attr("axis", 1).attr("split", Ints{1, 3, 2}).outputs(3));
  ASSERT_EQ(by_attr.size(), 3u);
  EXPECT_THAT(by_attr[0], ElementsAre(0, 6));
  EXPECT_THAT(by_attr[1], ElementsAre(1, 2, 3, 7, 8, 9));
  EXPECT_THAT(by_attr[2], ElementsAre(4, 5, 10, 11));
  // From opset 13: input, with a zero-size part.
  auto by_input =
      split(NodeRun("Split").input(x).constant(i64({3}, {4, 0, 2})).attr("axis", -1).outputs(3));
  ASSERT_EQ(by_input.size(), 3u);
  EXPECT_THAT(by_input[0], ElementsAre(0, 1, 2, 3, 6, 7, 8, 9));
  EXPECT_TRUE(by_input[1].empty());
  EXPECT_THAT(by_input[2], ElementsAre(4, 5, 10, 11));
  // Equal parts along axis 0.
  auto equal = split(NodeRun("Split").input(x).outputs(2));
  ASSERT_EQ(equal.size(), 2u);
  EXPECT_THAT(equal[0], ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(equal[1], ElementsAre(6, 7, 8, 9, 10, 11));
}

// ---- Slice --------------------------------------------------------------------------------

TEST(RuntimeShape, SliceReadsAttributesBeforeOpset10) {
  Tensor y = NodeRun("Slice", 9)
                 .input(ramp({3, 4}))
                 .attr("starts", Ints{1, -3})
                 .attr("ends", Ints{kMax, -1})
                 .attr("axes", Ints{0, 1})
                 .run1();
  EXPECT_EQ(y.dims(), (Ints{2, 2}));
  EXPECT_THAT(values_of(y), ElementsAre(5, 6, 9, 10));
  // Axes default to the leading dims.
  Tensor leading =
      NodeRun("Slice", 9).input(ramp({3, 4})).attr("starts", Ints{2}).attr("ends", Ints{3}).run1();
  EXPECT_THAT(values_of(leading), ElementsAre(8, 9, 10, 11));
}

TEST(RuntimeShape, SliceStepsAndClampsLikePython) {
  const Tensor x = ramp({3, 10});
  auto slice = [&](Ints starts, Ints ends, Ints axes, Ints steps) {
    const int64_t n = static_cast<int64_t>(starts.size());
    return NodeRun("Slice")
        .input(x)
        .constant(i64({n}, starts))
        .constant(i64({n}, ends))
        .constant(i64({n}, axes))
        .constant(i64({n}, steps))
        .run1();
  };
  // Negative step from the end: x[:, 8:1:-3] = columns 8, 5, 2.
  Tensor back = slice({8}, {1}, {1}, {-3});
  EXPECT_EQ(back.dims(), (Ints{3, 3}));
  EXPECT_THAT(values_of(back), ElementsAre(8, 5, 2, 18, 15, 12, 28, 25, 22));
  // Start past the end with a negative step clamps to the last element; INT64_MIN end runs to
  // the front: x[2, ::-4] over rows reversed too.
  Tensor reversed = slice({100, kMax}, {kMin, kMin}, {1, 0}, {-4, -2});
  EXPECT_EQ(reversed.dims(), (Ints{2, 3}));
  EXPECT_THAT(values_of(reversed), ElementsAre(29, 25, 21, 9, 5, 1));
  // Out-of-range starts give empty slices; negative axes count from the end.
  Tensor empty = slice({12}, {20}, {-1}, {1});
  EXPECT_EQ(empty.dims(), (Ints{3, 0}));
  Tensor stepped = slice({-9, 0}, {kMax, 2}, {-1, -2}, {4, 1});
  EXPECT_THAT(values_of(stepped), ElementsAre(1, 5, 9, 11, 15, 19));

  // Omitted axes and steps; int32 starts and ends.
  Tensor plain =
      NodeRun("Slice").input(x).constant(i32({2}, {1, 7})).constant(i32({2}, {2, 100})).run1();
  EXPECT_THAT(values_of(plain), ElementsAre(17, 18, 19));
  // Any element size: i64 data.
  Tensor longs = NodeRun("Slice")
                     .input(i64({4}, {1, 2, 3, 4}))
                     .constant(i64({1}, {-1}))
                     .constant(i64({1}, {kMin}))
                     .constant(i64({1}, {0}))
                     .constant(i64({1}, {-1}))
                     .run1();
  EXPECT_EQ(longs.to_int64_vector(), (Ints{4, 3, 2, 1}));
}

// ---- Gather ---------------------------------------------------------------------------------

TEST(RuntimeShape, GatherPicksAlongAnyAxisWithNegativeIndices) {
  const Tensor x = ramp({3, 4});
  Tensor rows = NodeRun("Gather").input(x).constant(i64({2, 2}, {2, 0, -1, 1})).run1();
  EXPECT_EQ(rows.dims(), (Ints{2, 2, 4}));
  EXPECT_THAT(values_of(rows), ElementsAre(8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7));
  Tensor cols = NodeRun("Gather").input(x).input(i32({3}, {3, -4, 1})).attr("axis", 1).run1();
  EXPECT_EQ(cols.dims(), (Ints{3, 3}));
  EXPECT_THAT(values_of(cols), ElementsAre(3, 0, 1, 7, 4, 5, 11, 8, 9));
  // A scalar index drops the axis.
  Tensor scalar = NodeRun("Gather").input(x).input(i64({}, {-2})).attr("axis", 0).run1();
  EXPECT_EQ(scalar.dims(), (Ints{4}));
  EXPECT_THAT(values_of(scalar), ElementsAre(4, 5, 6, 7));
}

TEST(RuntimeShape, GatherFailsOnAnIndexOutOfRangeAtRunTime) {
  auto result = NodeRun("Gather").input(ramp({3, 4})).input(i64({2}, {1, 4})).attr("axis", 1).run();
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().message(),
            "node 'n' (Gather): index 4 is out of range for axis 1 of size 4");
  auto negative = NodeRun("Gather").input(ramp({3, 4})).input(i64({1}, {-4})).run();
  ASSERT_FALSE(negative.is_ok());
  EXPECT_THAT(negative.status().message(),
              HasSubstr("index -4 is out of range for axis 0 of size 3"));
}

// ---- Expand, Tile, Shape ------------------------------------------------------------------

TEST(RuntimeShape, ExpandBroadcastsToTheShape) {
  Tensor y = NodeRun("Expand").input(f32({3, 1}, {1, 2, 3})).constant(i64({3}, {2, 1, 2})).run1();
  EXPECT_EQ(y.dims(), (Ints{2, 3, 2}));
  EXPECT_THAT(values_of(y), ElementsAre(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3));
  // The shape may be smaller than the input's: the input's dims win.
  Tensor kept = NodeRun("Expand").input(i64({2, 2}, {1, 2, 3, 4})).constant(i64({1}, {1})).run1();
  EXPECT_EQ(kept.to_int64_vector(), (Ints{1, 2, 3, 4}));
  Tensor scalar = NodeRun("Expand").input(f64({}, {2.5})).constant(i64({2}, {2, 2})).run1();
  EXPECT_THAT(values_of(scalar), ElementsAre(2.5, 2.5, 2.5, 2.5));
}

TEST(RuntimeShape, TileRepeatsEachDim) {
  Tensor y = NodeRun("Tile").input(f32({2, 2}, {1, 2, 3, 4})).constant(i64({2}, {2, 3})).run1();
  EXPECT_EQ(y.dims(), (Ints{4, 6}));
  EXPECT_THAT(values_of(y), ElementsAreArray({1., 2., 1., 2., 1., 2., 3., 4., 3., 4., 3., 4.,
                                              1., 2., 1., 2., 1., 2., 3., 4., 3., 4., 3., 4.}));
  Tensor once = NodeRun("Tile").input(i64({3}, {1, 2, 3})).constant(i64({1}, {1})).run1();
  EXPECT_EQ(once.to_int64_vector(), (Ints{1, 2, 3}));
}

TEST(RuntimeShape, ShapeTakesStartAndEndFromOpset15) {
  const Tensor x = ramp({2, 3, 4, 5});
  EXPECT_EQ(NodeRun("Shape").input(x).run1().to_int64_vector(), (Ints{2, 3, 4, 5}));
  EXPECT_EQ(NodeRun("Shape").input(x).attr("start", 1).attr("end", -1).run1().to_int64_vector(),
            (Ints{3, 4}));
  EXPECT_EQ(NodeRun("Shape").input(x).attr("start", -10).attr("end", 2).run1().to_int64_vector(),
            (Ints{2, 3}));
  EXPECT_TRUE(
      NodeRun("Shape").input(x).attr("start", 3).attr("end", 1).run1().to_int64_vector().empty());
  // Before opset 15 the attributes do not exist.
  EXPECT_EQ(NodeRun("Shape", 13).input(x).attr("start", 1).run1().to_int64_vector(),
            (Ints{2, 3, 4, 5}));
}

// ---- Pad --------------------------------------------------------------------------------

TEST(RuntimeShape, PadConstantFromInputOrAttribute) {
  const Tensor x = f32({2, 2}, {1, 2, 3, 4});
  Tensor y = NodeRun("Pad").input(x).constant(i64({4}, {0, 1, 1, 0})).constant(f32({}, {9})).run1();
  EXPECT_EQ(y.dims(), (Ints{3, 3}));
  EXPECT_THAT(values_of(y), ElementsAre(9, 1, 2, 9, 3, 4, 9, 9, 9));
  // Without constant_value: zeros.
  Tensor zeros = NodeRun("Pad").input(x).constant(i64({4}, {1, 0, 0, 0})).run1();
  EXPECT_THAT(values_of(zeros), ElementsAre(0, 0, 1, 2, 3, 4));
  // constant_value may be computed at run time.
  Tensor fed = NodeRun("Pad").input(x).constant(i64({4}, {0, 0, 0, 1})).input(f32({}, {-1})).run1();
  EXPECT_THAT(values_of(fed), ElementsAre(1, 2, -1, 3, 4, -1));
  // Opset 2..10: attributes, the value converted to the data's type.
  Tensor old =
      NodeRun("Pad", 9).input(i64({2}, {5, 6})).attr("pads", Ints{2, 1}).attr("value", 7.9f).run1();
  EXPECT_EQ(old.to_int64_vector(), (Ints{7, 7, 5, 6, 7}));
}

TEST(RuntimeShape, PadReflectEdgeWrapAndCrop) {
  const Tensor x = f32({1, 4}, {1, 2, 3, 4});
  auto pad = [&](const char* mode, Ints pads) {
    return values_of(NodeRun("Pad").input(x).constant(i64({4}, pads)).attr("mode", mode).run1());
  };
  // reflect does not repeat the edge and keeps reflecting past the far end.
  EXPECT_THAT(pad("reflect", {0, 2, 0, 5}), ElementsAre(3, 2, 1, 2, 3, 4, 3, 2, 1, 2, 3));
  EXPECT_THAT(pad("edge", {0, 2, 0, 1}), ElementsAre(1, 1, 1, 2, 3, 4, 4));
  EXPECT_THAT(pad("wrap", {0, 1, 0, 2}), ElementsAre(4, 1, 2, 3, 4, 1, 2));
  // Negative pads crop; they mix with growing pads on other sides.
  EXPECT_THAT(pad("constant", {0, -1, 0, 1}), ElementsAre(2, 3, 4, 0));
  EXPECT_THAT(pad("reflect", {1, -2, 0, 0}), ElementsAre(3, 4, 3, 4));  // row reflects itself

  // 2-D reflect against numpy's np.pad(x, ((1, 2), (2, 1)), 'reflect') on a 3x3 ramp.
  Tensor y = NodeRun("Pad")
                 .input(ramp({3, 3}))
                 .constant(i64({4}, {1, 2, 2, 1}))
                 .attr("mode", "reflect")
                 .run1();
  EXPECT_EQ(y.dims(), (Ints{6, 6}));
  EXPECT_THAT(values_of(y), ElementsAreArray({5., 4., 3., 4., 5., 4., 2., 1., 0., 1., 2., 1.,
                                              5., 4., 3., 4., 5., 4., 8., 7., 6., 7., 8., 7.,
                                              5., 4., 3., 4., 5., 4., 2., 1., 0., 1., 2., 1.}));
  // A size-1 dim reflects onto itself.
  EXPECT_THAT(values_of(NodeRun("Pad")
                            .input(f32({1}, {7}))
                            .constant(i64({2}, {2, 1}))
                            .attr("mode", "reflect")
                            .run1()),
              ElementsAre(7, 7, 7, 7));
}

TEST(RuntimeShape, PadCannotExtendAnEmptyDimByCopying) {
  auto result = NodeRun("Pad")
                    .input(f32({0, 2}, {}))
                    .constant(i64({4}, {1, 0, 0, 0}))
                    .attr("mode", "edge")
                    .run();
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().message(), "node 'n' (Pad): cannot pad dim 0 of size 0 in mode edge");
}

// ---- Constant and ConstantOfShape ---------------------------------------------------------

TEST(RuntimeShape, ConstantFromEachAttributeForm) {
  auto tensor = std::make_shared<const Tensor>(i64({2}, {4, 5}));
  EXPECT_EQ(NodeRun("Constant").attr("value", Attribute(tensor)).run1(), *tensor);
  Tensor single = NodeRun("Constant").attr("value_float", 1.5f).run1();
  EXPECT_EQ(single.dims(), Ints{});
  EXPECT_THAT(values_of(single), ElementsAre(1.5));
  EXPECT_THAT(values_of(NodeRun("Constant").attr("value_floats", std::vector<float>{1, 2}).run1()),
              ElementsAre(1, 2));
  EXPECT_EQ(NodeRun("Constant").attr("value_int", int64_t{-3}).run1().to_int64_vector(),
            (Ints{-3}));
  Tensor ints = NodeRun("Constant").attr("value_ints", Ints{1, 2, 3}).run1();
  EXPECT_EQ(ints.dtype(), DType::kInt64);
  EXPECT_EQ(ints.to_int64_vector(), (Ints{1, 2, 3}));
}

TEST(RuntimeShape, ConstantOfShapeRepeatsTheValue) {
  Tensor zeros = NodeRun("ConstantOfShape").constant(i64({2}, {2, 3})).run1();
  EXPECT_EQ(zeros.dtype(), DType::kFloat32);
  EXPECT_THAT(values_of(zeros), ElementsAre(0, 0, 0, 0, 0, 0));
  auto seven = std::make_shared<const Tensor>(i64({1}, {7}));
  Tensor sevens =
      NodeRun("ConstantOfShape").constant(i64({1}, {3})).attr("value", Attribute(seven)).run1();
  EXPECT_EQ(sevens.to_int64_vector(), (Ints{7, 7, 7}));
  auto half = std::make_shared<const Tensor>(f64({1}, {0.5}));
  Tensor halves =
      NodeRun("ConstantOfShape").constant(i64({2}, {1, 2})).attr("value", Attribute(half)).run1();
  EXPECT_EQ(halves.dtype(), DType::kFloat64);
  EXPECT_THAT(values_of(halves), ElementsAre(0.5, 0.5));
}

// ---- ScatterElements and ScatterND ---------------------------------------------------------

TEST(RuntimeShape, ScatterElementsAlongAnAxis) {
  // ONNX's example: data 1x5, indices [[1, 3]], updates [[1.1, 2.1]], axis 1.
  Tensor y = NodeRun("ScatterElements")
                 .input(f32({1, 5}, {1, 2, 3, 4, 5}))
                 .input(i64({1, 2}, {1, -2}))
                 .input(f32({1, 2}, {1.1f, 2.1f}))
                 .attr("axis", 1)
                 .run1();
  EXPECT_THAT(values_of(y), Pointwise(DoubleNear(1e-6), {1., 1.1, 3., 2.1, 5.}));
  // Axis 0 of a 3x3.
  Tensor rows = NodeRun("ScatterElements")
                    .input(f32({3, 3}, std::vector<float>(9, 0)))
                    .input(i64({2, 3}, {1, 0, 2, 0, 2, 1}))
                    .input(f32({2, 3}, {1, 1.1f, 1.2f, 2, 2.1f, 2.2f}))
                    .run1();
  EXPECT_THAT(values_of(rows),
              Pointwise(DoubleNear(1e-6), {2., 1.1, 0., 1., 0., 2.2, 0., 2.1, 1.2}));
}

TEST(RuntimeShape, ScatterElementsReducesRepeatedIndicesInOrder) {
  const Tensor data = i64({1, 4}, {1, 2, 3, 4});
  const Tensor indices = i64({1, 4}, {1, 1, 3, 1});
  const Tensor updates = i64({1, 4}, {10, 20, 5, -7});
  auto scatter = [&](const char* reduction) {
    return NodeRun("ScatterElements")
        .input(data)
        .input(indices)
        .input(updates)
        .attr("axis", 1)
        .attr("reduction", reduction)
        .run1()
        .to_int64_vector();
  };
  EXPECT_EQ(scatter("none"), (Ints{1, -7, 3, 5}));  // the last update wins
  EXPECT_EQ(scatter("add"), (Ints{1, 25, 3, 9}));
  EXPECT_EQ(scatter("mul"), (Ints{1, -2800, 3, 20}));
  EXPECT_EQ(scatter("max"), (Ints{1, 20, 3, 5}));
  EXPECT_EQ(scatter("min"), (Ints{1, -7, 3, 4}));
}

TEST(RuntimeShape, ScatterElementsFailsOnAnIndexOutOfRange) {
  auto result = NodeRun("ScatterElements")
                    .input(f32({2, 2}, {0, 0, 0, 0}))
                    .input(i64({1, 2}, {0, 2}))
                    .input(f32({1, 2}, {1, 1}))
                    .run();
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().message(),
            "node 'n' (ScatterElements): index 2 is out of range for axis 0 of size 2");
}

TEST(RuntimeShape, ScatterNdWritesSlicesAndReduces) {
  // ONNX's example: data 4x4x4, indices [[0], [2]], updates two 4x4 slices.
  std::vector<float> data(64);
  for (int i = 0; i < 64; ++i) data[i] = static_cast<float>(i % 8 + 1);
  std::vector<float> slices(32);
  for (int i = 0; i < 32; ++i) slices[i] = static_cast<float>(5 + i / 16);
  Tensor y = NodeRun("ScatterND")
                 .input(f32({4, 4, 4}, data))
                 .input(i64({2, 1}, {0, 2}))
                 .input(f32({2, 4, 4}, slices))
                 .run1();
  const std::vector<double> v = values_of(y);
  EXPECT_EQ(v[0], 5);
  EXPECT_EQ(v[15], 5);
  EXPECT_EQ(v[16], 1);  // slice 1 untouched
  EXPECT_EQ(v[32], 6);  // slice 2 replaced
  EXPECT_EQ(v[63], 8);  // slice 3 untouched

  // Element indices with repeats, added in order; a negative index.
  Tensor added = NodeRun("ScatterND")
                     .input(f64({2, 2}, {1, 2, 3, 4}))
                     .input(i64({3, 2}, {0, 1, -1, 0, 0, 1}))
                     .input(f64({3}, {10, 20, 30}))
                     .attr("reduction", "add")
                     .run1();
  EXPECT_THAT(values_of(added), ElementsAre(1, 42, 23, 4));
  Tensor multiplied = NodeRun("ScatterND")
                          .input(f32({3}, {1, 2, 3}))
                          .input(i64({2, 1}, {2, 2}))
                          .input(f32({2}, {2, 5}))
                          .attr("reduction", "mul")
                          .run1();
  EXPECT_THAT(values_of(multiplied), ElementsAre(1, 2, 30));

  auto result = NodeRun("ScatterND")
                    .input(f32({2, 3}, {0, 0, 0, 0, 0, 0}))
                    .input(i64({1, 2}, {1, 3}))
                    .input(f32({1}, {1}))
                    .run();
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().message(),
            "node 'n' (ScatterND): index 3 (entry 1 of index tuple 0) is out of range for dim 1 "
            "of size 3");
}

TEST(RuntimeShape, ScatterReductionsNeedArithmeticTypes) {
  auto result = NodeRun("ScatterElements")
                    .input(boolean({2}, {true, false}))
                    .input(i64({1}, {0}))
                    .input(boolean({1}, {true}))
                    .attr("reduction", "add")
                    .run();
  ASSERT_FALSE(result.is_ok());
  EXPECT_THAT(result.status().message(), HasSubstr("dtype bool is not supported"));
}

// ---- Resize -----------------------------------------------------------------------------

// Resize from opset 11: X, roi, scales, sizes; `scales` or `sizes` empty means omitted.
NodeRun resize(const Tensor& x, std::vector<float> scales, Ints sizes = {},
               std::vector<float> roi = {}) {
  NodeRun run("Resize");
  run.input(x);
  if (roi.empty()) {
    run.omitted();
  } else {
    run.constant(f32({static_cast<int64_t>(roi.size())}, roi));
  }
  if (scales.empty()) {
    run.omitted();
  } else {
    run.constant(f32({static_cast<int64_t>(scales.size())}, scales));
  }
  if (!sizes.empty()) run.constant(i64({static_cast<int64_t>(sizes.size())}, sizes));
  return run;
}

TEST(RuntimeShape, ResizeNearestModes) {
  // 1-D [10, 20, 30, 40] to 6 with asymmetric coordinates: x = o / 1.5 = 0, .67, 1.33, 2,
  // 2.67, 3.33.
  const Tensor x = f32({4}, {10, 20, 30, 40});
  auto nearest = [&](const char* mode) {
    return values_of(resize(x, {1.5f})
                         .attr("coordinate_transformation_mode", "asymmetric")
                         .attr("nearest_mode", mode)
                         .run1());
  };
  EXPECT_THAT(nearest("floor"), ElementsAre(10, 10, 20, 30, 30, 40));
  EXPECT_THAT(nearest("ceil"), ElementsAre(10, 20, 30, 30, 40, 40));  // 3.33 clamps to 3
  EXPECT_THAT(nearest("round_prefer_floor"), ElementsAre(10, 20, 20, 30, 40, 40));
  // Ties: 2x with asymmetric puts x at .5 steps.
  auto tie = [&](const char* mode) {
    return values_of(resize(f32({2}, {1, 2}), {2.0f})
                         .attr("coordinate_transformation_mode", "asymmetric")
                         .attr("nearest_mode", mode)
                         .run1());
  };
  EXPECT_THAT(tie("round_prefer_floor"), ElementsAre(1, 1, 2, 2));  // 0, .5, 1, 1.5
  EXPECT_THAT(tie("round_prefer_ceil"), ElementsAre(1, 2, 2, 2));
  // Defaults (half_pixel, round_prefer_floor), on int64 data: x = (o + .5)/2 − .5.
  Tensor ints = resize(i64({1, 3}, {1, 2, 3}), {1.0f, 2.0f}).run1();
  EXPECT_EQ(ints.dtype(), DType::kInt64);
  EXPECT_EQ(ints.to_int64_vector(), (Ints{1, 1, 2, 2, 3, 3}));
  // Sizes instead of scales, align_corners: x = o·3/2 = 0, 1.5, 3.
  Tensor corners = resize(x, {}, {3})
                       .attr("coordinate_transformation_mode", "align_corners")
                       .attr("nearest_mode", "round_prefer_ceil")
                       .run1();
  EXPECT_THAT(values_of(corners), ElementsAre(10, 30, 40));
}

TEST(RuntimeShape, ResizeOpset10UsesAsymmetricFloorUpAndCeilDown) {
  // Upsampling by 3 repeats (floor(o / 3)); downsampling by 0.6 takes ceil(o / 0.6).
  Tensor up = NodeRun("Resize", 10).input(f32({2}, {1, 2})).constant(f32({1}, {3})).run1();
  EXPECT_THAT(values_of(up), ElementsAre(1, 1, 1, 2, 2, 2));
  Tensor down =
      NodeRun("Resize", 10).input(f32({4}, {1, 2, 3, 4})).constant(f32({1}, {0.6f})).run1();
  EXPECT_THAT(values_of(down), ElementsAre(1, 3));
  Tensor linear = NodeRun("Resize", 10)
                      .input(f32({2}, {1, 2}))
                      .constant(f32({1}, {2}))
                      .attr("mode", "linear")
                      .run1();
  EXPECT_THAT(values_of(linear), ElementsAre(1, 1.5, 2, 2));
}

TEST(RuntimeShape, ResizeLinearTransforms) {
  const Tensor x = f32({4}, {1, 2, 3, 4});
  auto linear = [&](const char* transform, std::vector<float> scales, Ints sizes = {}) {
    return values_of(resize(x, scales, sizes)
                         .attr("mode", "linear")
                         .attr("coordinate_transformation_mode", transform)
                         .run1());
  };
  // half_pixel x = (o + .5)/2 − .5, clamped at both edges.
  EXPECT_THAT(linear("half_pixel", {2.0f}), ElementsAre(1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4));
  EXPECT_THAT(linear("asymmetric", {2.0f}), ElementsAre(1, 1.5, 2, 2.5, 3, 3.5, 4, 4));
  EXPECT_THAT(linear("align_corners", {}, {7}), ElementsAre(1, 1.5, 2, 2.5, 3, 3.5, 4));
  // pytorch_half_pixel maps a single output to 0; half_pixel to the middle.
  EXPECT_THAT(linear("pytorch_half_pixel", {}, {1}), ElementsAre(1));
  EXPECT_THAT(linear("half_pixel", {}, {1}), ElementsAre(2.5));
  // Downsampling by scale 0.6 with align_corners divides by the fractional 4·0.6 − 1 = 1.4,
  // as ONNX's reference does: x = 3/1.4 at o = 1.
  std::vector<double> down = linear("align_corners", {0.6f});
  ASSERT_EQ(down.size(), 2u);
  EXPECT_DOUBLE_EQ(down[0], 1);
  EXPECT_NEAR(down[1], 1 + 3 / (4 * static_cast<double>(0.6f) - 1), 1e-6);

  // 2-D: ONNX's upsample example, 2x2 by 2 with half_pixel.
  Tensor square =
      resize(f32({1, 1, 2, 2}, {1, 2, 3, 4}), {1, 1, 2, 2}).attr("mode", "linear").run1();
  EXPECT_EQ(square.dims(), (Ints{1, 1, 4, 4}));
  EXPECT_THAT(values_of(square), ElementsAreArray({1., 1.25, 1.75, 2., 1.5, 1.75, 2.25, 2.5, 2.5,
                                                   2.75, 3.25, 3.5, 3., 3.25, 3.75, 4.}));
}

// Keys's cubic kernel at distance d.
double keys(double d, double a) {
  d = std::abs(d);
  if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0;
}

// Cubic resize of a 1-D signal with half_pixel coordinates, written from the spec: the four
// neighbours of x, weights by distance, edge-clamped or (exclude_outside) dropped and
// renormalised.
std::vector<double> naive_cubic(const std::vector<double>& in, int64_t out, double scale, double a,
                                bool exclude_outside) {
  const int64_t n = static_cast<int64_t>(in.size());
  std::vector<double> result;
  for (int64_t o = 0; o < out; ++o) {
    const double x = (static_cast<double>(o) + 0.5) / scale - 0.5;
    const int64_t base = static_cast<int64_t>(std::floor(x));
    double sum = 0, total = 0;
    for (int64_t i = base - 1; i <= base + 2; ++i) {
      double w = keys(x - static_cast<double>(i), a);
      if (exclude_outside && (i < 0 || i >= n)) w = 0;
      total += w;
      sum += w * in[std::clamp<int64_t>(i, 0, n - 1)];
    }
    result.push_back(exclude_outside ? sum / total : sum);
  }
  return result;
}

TEST(RuntimeShape, ResizeCubicMatchesTheSpec) {
  const std::vector<double> signal = {1, 4, 2, 8, 5, 7};
  const Tensor x = f64({6}, signal);
  for (const auto& [scale, a, exclude] : std::vector<std::tuple<float, float, int>>{
           {2.0f, -0.75f, 0}, {0.5f, -0.5f, 1}, {1.7f, -0.5f, 1}, {0.8f, -0.75f, 0}}) {
    Tensor y = resize(x, {scale})
                   .attr("mode", "cubic")
                   .attr("cubic_coeff_a", a)
                   .attr("exclude_outside", exclude)
                   .run1();
    ASSERT_EQ(y.dtype(), DType::kFloat64);
    const int64_t out = static_cast<int64_t>(std::floor(6 * static_cast<double>(scale)));
    EXPECT_THAT(values_of(y),
                Pointwise(DoubleNear(1e-12), naive_cubic(signal, out, scale, a, exclude != 0)))
        << "scale " << scale;
  }
}

TEST(RuntimeShape, ResizeTfCropAndResizeExtrapolates) {
  // roi [0.125, 1.25] of 5 points, 4 outputs: x = o·1.125·4/3 + 0.5 = 0.5, 2, 3.5, 5.
  Tensor y = resize(f32({5}, {1, 2, 3, 4, 5}), {}, {4}, {0.125f, 1.25f})
                 .attr("mode", "linear")
                 .attr("coordinate_transformation_mode", "tf_crop_and_resize")
                 .attr("extrapolation_value", 10.0f)
                 .run1();
  EXPECT_THAT(values_of(y), ElementsAre(1.5, 3, 4.5, 10));
  // Any axis outside gives the extrapolation value: 2-D, rows in range, the last column out.
  Tensor two_d = resize(ramp({2, 3}), {}, {2, 2}, {0, 0, 1, 1.5f})
                     .attr("mode", "nearest")
                     .attr("coordinate_transformation_mode", "tf_crop_and_resize")
                     .attr("extrapolation_value", -1.0f)
                     .run1();
  EXPECT_THAT(values_of(two_d), ElementsAre(0, -1, 3, -1));
}

TEST(RuntimeShape, ResizeResultsDoNotDependOnThreads) {
  const Tensor x = random_f32({2, 3, 17, 23}, 9);
  auto run = [&](const char* mode, int threads) {
    return resize(x, {1, 1, 1.9f, 0.7f}).attr("mode", mode).threads(threads).run1();
  };
  for (const char* mode : {"nearest", "linear", "cubic"}) EXPECT_EQ(run(mode, 1), run(mode, 2));
}

TEST(RuntimeShape, ResizeRejectsUnknownTransforms) {
  auto result = resize(f32({2}, {1, 2}), {2.0f})
                    .attr("coordinate_transformation_mode", "half_pixel_symmetric")
                    .run();
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().message(),
            "node 'n' (Resize): coordinate_transformation_mode 'half_pixel_symmetric' is not "
            "supported");
}

TEST(RuntimeShape, CopiesDoNotDependOnThreads) {
  const Tensor x = random_f32({40, 50, 30}, 11);
  auto both = [](NodeRun run) {
    NodeRun second = run;
    return std::make_pair(run.threads(1).run1(), second.threads(2).run1());
  };
  auto [slice1, slice2] = both(NodeRun("Slice")
                                   .input(x)
                                   .constant(i64({2}, {39, 1}))
                                   .constant(i64({2}, {0, 49}))
                                   .constant(i64({2}, {0, 2}))
                                   .constant(i64({2}, {-2, 3})));
  EXPECT_EQ(slice1, slice2);
  auto [transpose1, transpose2] = both(NodeRun("Transpose").input(x).attr("perm", Ints{2, 0, 1}));
  EXPECT_EQ(transpose1, transpose2);
  EXPECT_EQ(values_of(transpose2), naive_transpose(x, {2, 0, 1}));
  auto [gather1, gather2] =
      both(NodeRun("Gather").input(x).input(i64({3}, {5, -1, 0})).attr("axis", 1));
  EXPECT_EQ(gather1, gather2);
  auto [pad1, pad2] =
      both(NodeRun("Pad").input(x).constant(i64({6}, {1, 2, 3, 1, 0, 2})).attr("mode", "reflect"));
  EXPECT_EQ(pad1, pad2);
}

}  // namespace
}  // namespace autopar
