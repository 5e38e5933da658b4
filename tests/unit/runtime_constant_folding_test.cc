// Constant folding: each shape-arithmetic op evaluates, through its shape rule and kernel, as
// ONNX defines it.
#include <gtest/gtest.h>

#include "autopar/runtime/constant_folding.h"

namespace autopar {
namespace {

// One node over constant inputs; fold() returns the folded output or the error.
class FoldCase {
 public:
  explicit FoldCase(std::string op, int64_t opset = 17) : op_(std::move(op)) {
    graph_.opsets = {{"", opset}};
  }

  FoldCase& ints(std::vector<int64_t> dims, std::vector<int64_t> values) {
    return constant(Tensor::from_int64(std::move(dims), values));
  }
  FoldCase& floats(std::vector<int64_t> dims, std::vector<float> values) {
    return constant(Tensor::from_float(std::move(dims), values));
  }
  FoldCase& constant(Tensor t) {
    Value v;
    v.name = fmt::format("c{}", inputs_.size());
    v.dtype = t.dtype();
    v.shape = Shape(t.dims());
    v.kind = ValueKind::kConstant;
    v.data = std::make_shared<const Tensor>(std::move(t));
    inputs_.push_back(graph_.add_value(std::move(v)));
    return *this;
  }
  // A graph input: only its shape is known.
  FoldCase& input(std::vector<int64_t> dims) {
    Value v;
    v.name = fmt::format("x{}", inputs_.size());
    v.dtype = DType::kFloat32;
    v.shape = Shape(std::move(dims));
    v.kind = ValueKind::kInput;
    inputs_.push_back(graph_.add_value(std::move(v)));
    return *this;
  }
  FoldCase& attr(const std::string& name, Attribute a) {
    attrs_[name] = std::move(a);
    return *this;
  }

  // Folds; `folded` false when the node was left alone.
  StatusOr<std::optional<Tensor>> fold() {
    Value out;
    out.name = "y";
    const ValueId y = graph_.add_value(std::move(out));
    Node node;
    node.name = "n";
    node.op_type = op_;
    node.inputs = inputs_;
    node.outputs = {y};
    node.attrs = attrs_;
    graph_.add_node(std::move(node));
    graph_.add_output(y);
    bool folded = false;
    RETURN_IF_ERROR(fold_node(graph_, 0, folded));
    if (!folded) return std::optional<Tensor>();
    return std::optional<Tensor>(*graph_.value(y).data);
  }
  std::vector<int64_t> fold_ints() {
    auto t = fold();
    EXPECT_TRUE(t.is_ok()) << t.status().message();
    if (!t.is_ok() || !*t) return {-999};
    return (*t)->to_int64_vector();
  }
  std::vector<int64_t> fold_dims() {
    auto t = fold();
    if (!t.is_ok() || !*t) return {-999};
    return (*t)->dims();
  }
  std::string fold_error() {
    auto t = fold();
    return t.is_ok() ? "" : t.status().message();
  }

 private:
  std::string op_;
  Graph graph_;
  std::vector<ValueId> inputs_;
  Attributes attrs_;
};

TEST(ConstantFolding, ShapeWithStartAndEnd) {
  EXPECT_EQ(FoldCase("Shape").input({2, 3, 4}).fold_ints(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(FoldCase("Shape").input({2, 3, 4}).attr("start", 1).fold_ints(),
            (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(FoldCase("Shape").input({2, 3, 4}).attr("end", -1).fold_ints(),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(FoldCase("Size").input({2, 3, 4}).fold_ints(), (std::vector<int64_t>{24}));
}

TEST(ConstantFolding, GatherUnsqueezeConcat) {
  EXPECT_EQ(FoldCase("Gather").ints({3}, {5, 6, 7}).ints({}, {-1}).fold_ints(),
            (std::vector<int64_t>{7}));
  EXPECT_EQ(
      FoldCase("Gather").ints({2, 2}, {1, 2, 3, 4}).ints({1}, {1}).attr("axis", 1).fold_ints(),
      (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(FoldCase("Gather").ints({3}, {5, 6, 7}).ints({}, {3}).fold_error(),
            "node 'n' (Gather): index 3 is out of range for dim 0 of size 3");
  EXPECT_EQ(FoldCase("Unsqueeze").ints({}, {7}).ints({1}, {0}).fold_dims(),
            (std::vector<int64_t>{1}));
  EXPECT_EQ(FoldCase("Unsqueeze", 11)
                .ints({2}, {7, 8})
                .attr("axes", std::vector<int64_t>{-1})
                .fold_dims(),
            (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(FoldCase("Squeeze").ints({1, 2}, {7, 8}).fold_dims(), (std::vector<int64_t>{2}));
  EXPECT_EQ(FoldCase("Concat").ints({1}, {2}).ints({2}, {16, -1}).attr("axis", 0).fold_ints(),
            (std::vector<int64_t>{2, 16, -1}));
  EXPECT_EQ(FoldCase("Concat")
                .ints({2, 1}, {1, 2})
                .ints({2, 2}, {3, 4, 5, 6})
                .attr("axis", 1)
                .fold_ints(),
            (std::vector<int64_t>{1, 3, 4, 2, 5, 6}));
}

TEST(ConstantFolding, SliceReshapeTransposeExpand) {
  EXPECT_EQ(
      FoldCase("Slice").ints({4}, {1, 2, 3, 4}).ints({1}, {-1}).ints({1}, {INT64_MAX}).fold_ints(),
      (std::vector<int64_t>{4}));
  EXPECT_EQ(FoldCase("Slice")
                .ints({5}, {0, 1, 2, 3, 4})
                .ints({1}, {-1})
                .ints({1}, {INT64_MIN})
                .ints({1}, {0})
                .ints({1}, {-2})
                .fold_ints(),
            (std::vector<int64_t>{4, 2, 0}));
  EXPECT_EQ(FoldCase("Slice", 9)
                .ints({4}, {1, 2, 3, 4})
                .attr("starts", std::vector<int64_t>{1})
                .attr("ends", std::vector<int64_t>{3})
                .fold_ints(),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(FoldCase("Reshape").ints({2, 3}, {1, 2, 3, 4, 5, 6}).ints({2}, {0, -1}).fold_dims(),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(FoldCase("Reshape").ints({2, 3}, {1, 2, 3, 4, 5, 6}).ints({2}, {4, -1}).fold_error(),
            "node 'n' (Reshape): cannot reshape input 'c0' i64[2,3] to [4,-1]: 6 elements do not "
            "divide by 4");
  EXPECT_EQ(FoldCase("Transpose").ints({2, 3}, {1, 2, 3, 4, 5, 6}).fold_ints(),
            (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(FoldCase("Expand").ints({2, 1}, {1, 2}).ints({2}, {2, 3}).fold_ints(),
            (std::vector<int64_t>{1, 1, 1, 2, 2, 2}));
}

TEST(ConstantFolding, ArithmeticAndGeneration) {
  EXPECT_EQ(FoldCase("Div").ints({2}, {7, -7}).ints({}, {2}).fold_ints(),
            (std::vector<int64_t>{3, -3}));
  EXPECT_EQ(FoldCase("Mul").ints({2}, {3, 4}).ints({1}, {5}).fold_ints(),
            (std::vector<int64_t>{15, 20}));
  EXPECT_EQ(FoldCase("Equal").ints({3}, {1, 2, 3}).ints({}, {2}).fold_ints(),
            (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(FoldCase("Where")
                .constant([] {
                  Tensor t(DType::kBool, {2});
                  t.set_from_int(0, 1);
                  return t;
                }())
                .ints({2}, {1, 2})
                .ints({2}, {8, 9})
                .fold_ints(),
            (std::vector<int64_t>{1, 9}));
  EXPECT_EQ(FoldCase("Range").ints({}, {0}).ints({}, {5}).ints({}, {2}).fold_ints(),
            (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(FoldCase("ConstantOfShape").ints({2}, {2, 2}).fold_dims(),
            (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(FoldCase("Cast").floats({2}, {2.9f, -1.5f}).attr("to", 7).fold_ints(),
            (std::vector<int64_t>{2, -1}));
  auto sqrt = FoldCase("Sqrt").floats({}, {16.0f}).fold();
  ASSERT_TRUE(sqrt.is_ok() && *sqrt);
  EXPECT_EQ((*sqrt)->float_at(0), 4.0);
}

// Half-type constants (a model exported in fp16 or bf16 scales its attention by constants of
// its own type) fold as the executor runs them: widened to float32, rounded back to the type.
TEST(ConstantFolding, HalfTypeArithmetic) {
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    auto half = [t](std::vector<int64_t> dims, std::vector<double> values) {
      Tensor x(t, std::move(dims));
      for (size_t i = 0; i < values.size(); ++i)
        x.set_from_double(static_cast<int64_t>(i), values[i]);
      return x;
    };
    auto mul =
        FoldCase("Mul").constant(half({2}, {3.0, -0.5})).constant(half({}, {1.0 / 3})).fold();
    ASSERT_TRUE(mul.is_ok()) << mul.status().message();
    ASSERT_TRUE(mul->has_value());
    EXPECT_EQ((*mul)->dtype(), t);
    // 1/3 rounded to the type first, the product rounded again: exactly what the type holds.
    const double third = half({}, {1.0 / 3}).float_at(0);
    EXPECT_EQ((*mul)->float_at(0), half({}, {3.0 * third}).float_at(0));
    EXPECT_EQ((*mul)->float_at(1), half({}, {-0.5 * third}).float_at(0));
    auto root = FoldCase("Sqrt").constant(half({}, {64.0})).fold();
    ASSERT_TRUE(root.is_ok()) << root.status().message();
    EXPECT_EQ((*root)->dtype(), t);
    EXPECT_EQ((*root)->float_at(0), 8.0);
  }
}

TEST(ConstantFolding, LeavesRuntimeValuesAlone) {
  // A graph input's data is not known: only Shape may read it.
  auto t = FoldCase("Relu").input({2}).fold();
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE(*t);
  // Relu has no fold rule at all.
  auto r = FoldCase("Relu").floats({1}, {1.0f}).fold();
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(*r);
}

}  // namespace
}  // namespace autopar
