// The graph text form: golden output, exact round trips and parse errors.
#include <gtest/gtest.h>

#include "autopar/ir/text.h"
#include "autopar/ir/verify.h"
#include "testing/testing.h"

namespace autopar {
namespace {

TEST(IrText, PrintsBuilderGraph) {
  Graph g = testing::tiny_linear_graph();
  EXPECT_EQ(print(g),
            "graph tiny opset(ai.onnx=17) {\n"
            "  input %x: f32[batch=2,4]\n"
            "  param %fc/weight: f32[4,3] = [0.14774027, -0.477395, 0.0051768753, "
            "-0.14920889, 0.32376564, -0.110317655, 0.18263002, 0.49398082, 0.045239784, "
            "0.3374372, 0.32830727, 0.13847803]\n"
            "  param %fc/bias: f32[3] = [0, 0, 0]\n"
            "  %fc/MatMul: f32[2,3] = MatMul(%x, %fc/weight) @fc/MatMul\n"
            "  %fc/Add: f32[2,3] = Add(%fc/MatMul, %fc/bias) @fc/Add\n"
            "  %y: f32[batch=2,3] = Relu(%fc/Add) @Relu\n"
            "  output %y\n"
            "}\n");
}

TEST(IrText, RoundTripsExactly) {
  Graph g = testing::tiny_linear_graph();
  std::string text = print(g);
  auto parsed = parse(text);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(print(*parsed), text);
  EXPECT_TRUE(verify(*parsed).is_ok());
}

TEST(IrText, RoundTripsAttributesDomainsAndPhases) {
  const std::string text =
      "graph \"odd name\" opset(ai.onnx=13, ai.autopar=1) {\n"
      "  input %a: f32[4,2]\n"
      "  input %b: i64[*]\n"
      "  const %\"shape:0\": i64[2] = [0, -1]\n"
      "  const %h: f16[2] = [0.5, -2]\n"
      "  const %d: f64[1] = [0.1]\n"
      "  %r: f32[4,2] = ai.autopar::AllReduce(%a) {group=[0, 1], op=\"sum\"} @ar layer=3 "
      "phase=bwd\n"
      "  %s: f32[?,2], _ = Foo(%r, _, %\"shape:0\") {alpha=1.0, axes=ints[], beta=1e-05, "
      "names=[\"x\", \"y\\\"z\"], scales=[0.5, 2.0], t=tensor(i64[2] = [3, 4])} @foo "
      "phase=opt\n"
      "  Send(%s) {peer=1, tag=7} @send\n"
      "  output %s, %r\n"
      "}\n";
  auto parsed = parse(text);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(print(*parsed), text);
  const Graph& g = *parsed;
  ASSERT_EQ(g.num_nodes(), 3);
  EXPECT_EQ(g.node(0).domain, "ai.autopar");
  EXPECT_EQ(g.node(0).layer, 3);
  EXPECT_EQ(g.node(0).phase, Phase::kBackward);
  EXPECT_EQ(g.node(1).attrs.at("beta").kind(), Attribute::Kind::kFloat);
  EXPECT_EQ(g.node(1).attrs.at("axes").kind(), Attribute::Kind::kInts);
  EXPECT_EQ(g.node(1).inputs[1], kNoId);
  EXPECT_EQ(g.node(1).outputs[1], kNoId);
  EXPECT_FALSE(g.value(*g.find_value("b")).shape.known);
  EXPECT_EQ(g.opset(), 13);
  EXPECT_EQ(g.opset("ai.autopar"), 1);
}

TEST(IrText, ReportsUndefinedValueWithPosition) {
  auto parsed = parse("graph g opset(ai.onnx=17) {\n  %y: f32[2] = Relu(%nope)\n}\n", "g.txt");
  ASSERT_FALSE(parsed.is_ok());
  EXPECT_EQ(parsed.status().message(), "g.txt:2:22: value 'nope' is not defined");
}

TEST(IrText, ReportsWrongDataCount) {
  auto parsed = parse("graph g opset(ai.onnx=17) {\n  const %c: i64[3] = [1, 2]\n}\n");
  ASSERT_FALSE(parsed.is_ok());
  EXPECT_EQ(parsed.status().message(), "<text>:2:28: 2 data elements for a tensor of 3");
}

TEST(IrText, ReportsUnknownDtype) {
  auto parsed = parse("graph g opset(ai.onnx=17) {\n  input %x: q7[2]\n}\n");
  ASSERT_FALSE(parsed.is_ok());
  EXPECT_EQ(parsed.status().message(), "<text>:2:13: unknown dtype 'q7'");
}

}  // namespace
}  // namespace autopar
