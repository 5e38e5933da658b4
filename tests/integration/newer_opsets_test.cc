// Models written at ai.onnx opsets 18 and 21, as torch 2.x's exporters write them (Reduce*
// axes as inputs, Split's num_outputs, Cast's saturate, ONNX's own Gelu), import as opset 17,
// compute what the same model written at opset 17 computes, and plan and verify. Models at
// opsets 9 to 12 (paddle2onnx writes 11) are upgraded to 13, which training needs.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "autopar/onnx/onnx_import.h"
#include "autopar/runtime/executor.h"
#include "testing/onnx_proto.h"
#include "testing/run_node.h"
#include "testing/testing.h"

namespace autopar {
namespace {

using testing::attr_float;
using testing::attr_int;
using testing::attr_ints;
using testing::attr_string;

// One block: a LayerNorm written out, a projection, GELU, a gated split, a second
// projection, a Cast and a max over the sequence. Opset 17 writes the Reduce axes as
// attributes and GELU with Erf; from 18 the axes are inputs (an initializer and a Constant
// node) and Split takes num_outputs; 19 adds Cast's saturate; 21 writes ONNX's Gelu.
testing::OnnxProto block_at(int64_t opset) {
  constexpr int64_t kSeq = 8, kHidden = 16;
  testing::OnnxProto m(opset);
  m.input("x", onnx::TensorProto::FLOAT, {"batch", kSeq, kHidden});
  auto reduce = [&](const std::string& op, const std::string& name, const std::string& in,
                    std::vector<int64_t> axes, int64_t keepdims) {
    if (opset < 18) {
      return m.node(op, name, {in}, {attr_ints("axes", axes), attr_int("keepdims", keepdims)});
    }
    const std::string axes_name = name + ".axes";
    if (op == "ReduceMax") {  // an initializer, as onnxscript writes them
      m.initializer(testing::int64_tensor(axes_name, {static_cast<int64_t>(axes.size())}, axes));
      return m.node(op, name, {in, axes_name}, {attr_int("keepdims", keepdims)});
    }
    return m.node(op, name, {in, m.constant_ints(axes_name, axes)},
                  {attr_int("keepdims", keepdims)});
  };
  // LayerNorm as torch writes it at opsets below 17.
  const std::string mean = reduce("ReduceMean", "ln/mean", "x", {-1}, 1);
  const std::string centred = m.node("Sub", "ln/sub", {"x", mean});
  const std::string square = m.node("Pow", "ln/pow", {centred, m.constant_float("ln/two", 2.0f)});
  const std::string var = reduce("ReduceMean", "ln/var", square, {-1}, 1);
  const std::string std_dev = m.node(
      "Sqrt", "ln/sqrt", {m.node("Add", "ln/add_eps", {var, m.constant_float("ln/eps", 1e-5f)})});
  m.weight("ln.weight", {kHidden}, 11);
  m.weight("ln.bias", {kHidden}, 12);
  const std::string ln = m.node(
      "Add", "ln/shift",
      {m.node("Mul", "ln/scale", {m.node("Div", "ln/div", {centred, std_dev}), "ln.weight"}),
       "ln.bias"});
  m.weight("fc1.weight", {kHidden, 2 * kHidden}, 13);
  m.weight("fc1.bias", {2 * kHidden}, 14);
  const std::string h =
      m.node("Add", "fc1/add", {m.node("MatMul", "fc1/matmul", {ln, "fc1.weight"}), "fc1.bias"});
  std::string act;
  if (opset >= 20) {
    act = m.node("Gelu", "gelu", {h});
  } else {  // ½·h·(1 + erf(h/√2))
    const std::string e = m.node(
        "Erf", "gelu/erf", {m.node("Div", "gelu/div", {h, m.constant_float("gelu/sqrt2", M_SQRT2)})});
    act = m.node("Mul", "gelu/half",
                 {m.node("Mul", "gelu/mul",
                         {h, m.node("Add", "gelu/add", {e, m.constant_float("gelu/one", 1.0f)})}),
                  m.constant_float("gelu/half_value", 0.5f)});
  }
  std::vector<onnx::AttributeProto> split_attrs = {attr_int("axis", -1)};
  if (opset >= 18) split_attrs.push_back(attr_int("num_outputs", 2));
  m.node("Split", "gate/split", {act}, split_attrs, {"gate", "up"});
  const std::string gated = m.node("Mul", "gate/mul", {"gate", "up"});
  m.weight("fc2.weight", {kHidden, kHidden}, 15);
  const std::string y = m.node("MatMul", "fc2/matmul", {gated, "fc2.weight"});
  std::vector<onnx::AttributeProto> cast_attrs = {attr_int("to", onnx::TensorProto::FLOAT)};
  if (opset >= 19) cast_attrs.push_back(attr_int("saturate", 1));
  m.node("Cast", "cast", {y}, cast_attrs, {"y"});
  reduce("ReduceMax", "pool", "y", {1}, 0);
  m.model().mutable_graph()->mutable_node()->rbegin()->set_output(0, "pooled");
  m.output("y", onnx::TensorProto::FLOAT, {"batch", kSeq, kHidden});
  m.output("pooled", onnx::TensorProto::FLOAT, {"batch", kHidden});
  return m;
}

std::vector<std::vector<double>> run_model(const onnx::ModelProto& model, const Tensor& x,
                                           ImportReport* report) {
  ImportOptions options;
  options.batch = x.dims()[0];
  auto graph = import_onnx(model, options, "model.onnx", "", report);
  EXPECT_TRUE(graph.is_ok()) << graph.status().message();
  if (!graph.is_ok()) return {};
  const ValueId input = *graph->find_value("x");
  auto executor = runtime::Executor::create(std::move(*graph));
  EXPECT_TRUE(executor.is_ok()) << executor.status().message();
  if (!executor.is_ok()) return {};
  auto outputs = executor->run({{input, std::make_shared<Tensor>(x)}});
  EXPECT_TRUE(outputs.is_ok()) << outputs.status().message();
  if (!outputs.is_ok()) return {};
  std::vector<std::vector<double>> values;
  for (const TensorPtr& t : *outputs) values.push_back(testing::values_of(*t));
  return values;
}

TEST(NewerOpsets, Opsets18And21ComputeWhatOpset17Computes) {
  const Tensor x = testing::random_f32({3, 8, 16}, 5);
  ImportReport report17;
  const auto expected = run_model(block_at(17).model(), x, &report17);
  ASSERT_EQ(expected.size(), 2u);
  EXPECT_EQ(report17.converted_from_opset, 0);
  // Rewritten at 18: two ReduceMeans and a ReduceMax (axes), the Split (num_outputs); at 21
  // also the Gelu (to ai.autopar.training's). Cast's saturate is dropped at its default
  // without counting.
  for (const auto& [opset, rewritten] : {std::pair{18, 4}, std::pair{21, 5}}) {
    ImportReport report;
    const auto actual = run_model(block_at(opset).model(), x, &report);
    ASSERT_EQ(actual.size(), 2u) << opset;
    EXPECT_EQ(report.converted_from_opset, opset);
    EXPECT_EQ(report.converted_nodes, rewritten) << opset;
    for (size_t o = 0; o < 2; ++o) {
      ASSERT_EQ(actual[o].size(), expected[o].size());
      for (size_t i = 0; i < actual[o].size(); ++i) {
        // Opset 18 is the same ops; 21's fused Gelu rounds differently from Erf·Mul·Add.
        ASSERT_NEAR(actual[o][i], expected[o][i], opset == 18 ? 0.0 : 1e-5)
            << "opset " << opset << " output " << o << " element " << i;
      }
    }
  }
}

TEST(NewerOpsets, InspectSaysWhatWasConverted) {
  const std::string dir = testing::temp_dir("newer_opsets_inspect");
  block_at(21).write(dir + "/m21.onnx");
  auto r = testing::run_autopar({"inspect", dir + "/m21.onnx", "--batch", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["opset_conversion"],
            (nlohmann::json{{"from", 21}, {"to", 17}, {"rewritten_nodes", 5}}));
  EXPECT_EQ(json["opsets"]["ai.onnx"], 17);
  EXPECT_EQ(json["params"], 16 + 16 + 16 * 32 + 32 + 16 * 16);
  EXPECT_EQ(json["fused"]["layer_norms"], 1);
  EXPECT_EQ(json["fused"]["gelus"], 0);  // ONNX's Gelu, converted, not fused
  auto written = testing::run_autopar(
      {"inspect", dir + "/m21.onnx", "--batch", "2", "--json", "--no-fusion"});
  ASSERT_EQ(written.exit_code, 0) << written.err;
  EXPECT_EQ(nlohmann::json::parse(written.out)["fused"]["layer_norms"], 0);
  auto text = testing::run_autopar({"inspect", dir + "/m21.onnx", "--batch", "2"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("opset        21 read as 17 (5 nodes rewritten)\n"), std::string::npos)
      << text.out;
}

TEST(NewerOpsets, ModelsAtOpsets18And21PlanAndVerify) {
  const std::string dir = testing::temp_dir("newer_opsets_plan");
  std::ofstream(dir + "/s.yaml") << "mesh: {dp: 2, tp: 2}\ntensor: megatron\n";
  for (int64_t opset : {18, 21}) {
    const std::string model = fmt::format("{}/m{}.onnx", dir, opset);
    block_at(opset).write(model);
    const std::string plan = fmt::format("{}/plan{}", dir, opset);
    std::filesystem::remove_all(plan);
    auto t = testing::run_autopar(
        {"transform", model, "--batch", "4", "--scheme", dir + "/s.yaml", "-o", plan});
    ASSERT_EQ(t.exit_code, 0) << opset << t.err;
    auto v = testing::run_autopar({"verify", plan, "--json"});
    ASSERT_EQ(v.exit_code, 0) << opset << v.out << v.err;
    const auto json = nlohmann::json::parse(v.out);
    EXPECT_TRUE(json["ok"].get<bool>()) << opset << v.out;
    EXPECT_LT(json["worst_relative_error"].get<double>(), 1e-9) << opset << v.out;
  }
  // A plan made with --no-fusion records it, and verify reads the model as the plan did.
  const std::string plan = dir + "/plan-written";
  std::filesystem::remove_all(plan);
  auto t = testing::run_autopar({"transform", dir + "/m21.onnx", "--batch", "4", "--scheme",
                                 dir + "/s.yaml", "-o", plan, "--no-fusion"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  std::ifstream in(plan + "/manifest.yaml");
  const std::string manifest((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  EXPECT_NE(manifest.find("  no_fusion: true\n"), std::string::npos) << manifest;
  auto v = testing::run_autopar({"verify", plan, "--json"});
  ASSERT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_TRUE(nlohmann::json::parse(v.out)["ok"].get<bool>()) << v.out;
}

// An opset-11 classifier (Split with a split attribute, Unsqueeze with axes, Gemm): the
// commands read it at opset 13, so it trains and plans.
TEST(OlderOpsets, Opset11IsUpgradedTo13AndTrains) {
  const std::string dir = testing::temp_dir("older_opsets");
  testing::OnnxProto m(11);
  m.input("x", onnx::TensorProto::FLOAT, {"batch", 8});
  m.weight("fc1.weight", {16, 8}, 1);
  m.weight("fc1.bias", {16}, 2);
  m.node("Gemm", "fc1", {"x", "fc1.weight", "fc1.bias"}, {attr_int("transB", 1)}, {"h"});
  m.node("Split", "split", {"h"}, {attr_int("axis", 1), attr_ints("split", {8, 8})},
         {"a", "b"});
  m.node("Mul", "gate", {"a", "b"}, {}, {"g"});
  m.weight("fc2.weight", {4, 8}, 3);
  m.weight("fc2.bias", {4}, 4);
  m.node("Gemm", "fc2", {"g", "fc2.weight", "fc2.bias"}, {attr_int("transB", 1)}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, {"batch", 4});
  const std::string model = dir + "/m11.onnx";
  m.write(model);
  auto inspect = testing::run_autopar({"inspect", model, "--batch", "4", "--json"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const auto json = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(json["upgraded_from_opset"], 11);
  EXPECT_EQ(json["opsets"]["ai.onnx"], 13);
  auto train = testing::run_autopar(
      {"train-graph", model, "--batch", "4", "-o", dir + "/train.onnx"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  std::ofstream(dir + "/s.yaml") << "mesh: {dp: 2, tp: 2}\ntensor: megatron\n";
  auto t = testing::run_autopar(
      {"transform", model, "--batch", "4", "--scheme", dir + "/s.yaml", "-o", dir + "/plan"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  auto v = testing::run_autopar({"verify", dir + "/plan", "--json"});
  ASSERT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_TRUE(nlohmann::json::parse(v.out)["ok"].get<bool>()) << v.out;
}

}  // namespace
}  // namespace autopar
