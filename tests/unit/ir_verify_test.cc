// verify(): each invariant it guards, on a graph broken in exactly that way.
#include <gtest/gtest.h>

#include "autopar/ir/text.h"
#include "autopar/ir/verify.h"
#include "testing/testing.h"

namespace autopar {
namespace {

TEST(IrVerify, AcceptsBuilderGraph) {
  Status s = verify(testing::tiny_linear_graph());
  EXPECT_TRUE(s.is_ok()) << s.message();
}

TEST(IrVerify, RejectsUnsupportedOp) {
  auto g = parse(
      "graph g opset(ai.onnx=17) {\n input %x: f32[2]\n %y: f32[2] = Foo(%x) @f\n"
      " output %y\n}\n");
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(verify(*g).message(), "node 'f' (Foo): unsupported op type");
  EXPECT_TRUE(verify(*g, {.require_static_shapes = true, .require_registered_ops = false}).is_ok());
}

TEST(IrVerify, RejectsDynamicShape) {
  auto g = parse("graph g opset(ai.onnx=17) {\n input %x: f32[?,2]\n output %x\n}\n");
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(verify(*g).message(), "value 'x' has no static shape");
}

TEST(IrVerify, RejectsStaleUseList) {
  Graph g = testing::tiny_linear_graph();
  g.mutable_node(1).inputs[1] = *g.find_value("x");  // edit without rebuild_uses()
  EXPECT_EQ(verify(g).message(), "value 'x': use list is stale");
  g.rebuild_uses();
  EXPECT_TRUE(verify(g).is_ok());
}

TEST(IrVerify, RejectsUseBeforeDefinition) {
  Graph g = testing::tiny_linear_graph();
  g.mutable_node(0).inputs[0] = *g.find_value("fc/Add");
  g.rebuild_uses();
  EXPECT_EQ(verify(g).message(), "node 'fc/MatMul': input 'fc/Add' is used before it is produced");
}

TEST(IrGraph, RemovesDeadNodesAndRenumbers) {
  Graph g = testing::tiny_linear_graph();
  g.set_outputs({*g.find_value("fc/MatMul")});
  g.remove_dead_nodes();
  EXPECT_EQ(g.num_nodes(), 1);
  EXPECT_EQ(g.num_values(), 3);  // x, weight, matmul
  EXPECT_TRUE(verify(g).is_ok());
  EXPECT_FALSE(g.find_value("fc/bias"));
}

TEST(IrGraph, CountsParameters) {
  Graph g = testing::tiny_linear_graph();
  EXPECT_EQ(g.parameters().size(), 2u);
  EXPECT_EQ(g.num_parameter_elements(), 15);
}

}  // namespace
}  // namespace autopar
