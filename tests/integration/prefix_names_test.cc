// Values, parameters and nodes whose names are prefixes of one another (`p2o.Add.15`,
// `p2o.Add.159`, as paddle2onnx numbers them), through every rewrite of the lowering (data,
// tensor, sequence and pipeline parallelism, ZeRO, recomputation, mixed precision): each plan
// reads the value the model reads, so each verifies against one device.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/onnx_proto.h"
#include "testing/testing.h"

namespace autopar {
namespace {

using testing::attr_int;
using testing::attr_ints;

// Two residual convolution blocks and a classifier, every name a prefix of another: values
// p2o.Add.1 ... p2o.Add.159000, weights w.1 ... w.159000, nodes n.1 ... n.215, and the
// blocks' nodes named so that layers are found (block.0, block.1). With `constant_weights`
// the weights are Constant nodes' outputs, as paddle2onnx writes them.
testing::OnnxProto prefix_named_model(bool constant_weights = false) {
  testing::OnnxProto m(17, "prefixes");
  m.input("x", onnx::TensorProto::FLOAT, {"batch", 4, 8, 8});
  // The weight `name`: an initializer, or a Constant node of the same values.
  struct Weights {
    testing::OnnxProto& m;
    bool constant;
    void operator()(const std::string& name, std::vector<int64_t> dims, uint64_t seed) {
      if (!constant) {
        m.weight(name, dims, seed);
        return;
      }
      int64_t count = 1;
      for (int64_t d : dims) count *= d;
      std::vector<float> values(static_cast<size_t>(count));
      for (size_t i = 0; i < values.size(); ++i) {
        values[i] = 0.25f * static_cast<float>(static_cast<int64_t>((i * 7 + seed * 13) % 17) - 8) /
                    8.0f;
      }
      m.node("Constant", name + ".const", {},
             {testing::attr_tensor("value", testing::float_tensor("", dims, values))}, {name});
    }
  } weight{m, constant_weights};
  const auto pads = attr_ints("pads", {1, 1, 1, 1});
  weight("w.1", {8, 4, 3, 3}, 1);
  weight("w.15", {8}, 2);
  m.node("Conv", "n.1", {"x", "w.1", "w.15"}, {pads}, {"p2o.Add.1"});
  m.node("Relu", "n.15", {"p2o.Add.1"}, {}, {"p2o.Add.15"});
  const std::string names[2][4] = {{"w.159", "w.1590", "p2o.Add.159", "p2o.Add.1590"},
                                   {"w.15900", "w.159000", "p2o.Add.15900", "p2o.Add.159000"}};
  std::string x = "p2o.Add.15";
  for (int b = 0; b < 2; ++b) {
    const std::string block = "block." + std::to_string(b);
    weight(names[b][0], {8, 8, 3, 3}, 3 + 2 * b);
    weight(names[b][1], {8}, 4 + 2 * b);
    m.node("Conv", block + "/n.159", {x, names[b][0], names[b][1]}, {pads}, {names[b][2]});
    const std::string relu = m.node("Relu", block + "/n.1590", {names[b][2]},
                                    {}, {names[b][2] + ".1"});
    m.node("Add", block + "/n.15900", {relu, x}, {}, {names[b][3]});
    x = names[b][3];
  }
  m.node("GlobalAveragePool", "n.2", {x}, {}, {"x.1"});
  m.node("Flatten", "n.21", {"x.1"}, {attr_int("axis", 1)}, {"x.15"});
  weight("fc.1", {10, 8}, 9);
  weight("fc.15", {10}, 10);
  m.node("Gemm", "n.215", {"x.15", "fc.1", "fc.15"}, {attr_int("transB", 1)}, {"x.159"});
  m.output("x.159", onnx::TensorProto::FLOAT, {"batch", 10});
  return m;
}

TEST(PrefixNames, EveryRewriteOfTheLoweringKeepsTheValuesApart) {
  const std::string dir = testing::temp_dir("prefix_names");
  const std::string model = dir + "/model.onnx";
  prefix_named_model().write(model);
  const std::vector<std::pair<std::string, std::string>> schemes = {
      {"dp2", "mesh: {dp: 2}\n"},
      {"tp2-megatron", "mesh: {tp: 2}\ntensor: megatron\n"},
      {"tp2-auto", "mesh: {tp: 2}\ntensor: auto\n"},
      {"dp2-tp2-zero3", "mesh: {dp: 2, tp: 2}\ntensor: megatron\nzero: 3\n"},
      {"sp2", "mesh: {sp: 2}\n"},
      {"pp2-recompute",
       "mesh: {pp: 2}\nbatch: {global: 4, micro: 1}\npipeline: {schedule: 1f1b, stages: auto}\n"
       "recompute: full\n"},
      {"dp2-zero1-selective", "mesh: {dp: 2}\nzero: 1\nrecompute: selective\n"},
  };
  for (const char* precision : {"fp32", "bf16"}) {
    for (const auto& [name, text] : schemes) {
      const std::string label = std::string(precision) + " " + name;
      const std::string scheme = dir + "/" + name + "-" + precision + ".yaml";
      std::ofstream(scheme) << text << "precision: " << precision << "\n";
      const std::string plan = dir + "/plan-" + name + "-" + precision;
      std::filesystem::remove_all(plan);
      auto t = testing::run_autopar(
          {"transform", model, "--batch", "4", "--scheme", scheme, "-o", plan});
      ASSERT_EQ(t.exit_code, 0) << label << ": " << t.err;
      auto v = testing::run_autopar({"verify", plan, "--json"});
      ASSERT_EQ(v.exit_code, 0) << label << ": " << v.out << v.err;
      const auto json = nlohmann::json::parse(v.out);
      EXPECT_TRUE(json["ok"].get<bool>()) << label << ": " << v.out;
    }
  }
}

// Inference plans (no loss) under bf16 of the model with its weights as Constant nodes, as
// the paddle2onnx recogniser was planned.
TEST(PrefixNames, InferencePlansOfConstantWeightsUnderBf16) {
  const std::string dir = testing::temp_dir("prefix_names_constants");
  const std::string model = dir + "/model.onnx";
  prefix_named_model(/*constant_weights=*/true).write(model);
  // The eight Constant-node weights are trainable parameters, as initializers would be.
  constexpr int64_t kParams = 8 * 4 * 9 + 8 + 2 * (8 * 8 * 9 + 8) + 10 * 8 + 10;
  auto inspect = testing::run_autopar({"inspect", model, "--batch", "4", "--json"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_EQ(nlohmann::json::parse(inspect.out)["constant_weights_as_parameters"], 8);
  EXPECT_EQ(nlohmann::json::parse(inspect.out)["params"], kParams);
  auto kept = testing::run_autopar({"inspect", model, "--batch", "4", "--json", "--keep-constants"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_EQ(nlohmann::json::parse(kept.out)["constant_weights_as_parameters"], 0);
  EXPECT_EQ(nlohmann::json::parse(kept.out)["params"], 0);
  auto text_form = testing::run_autopar({"inspect", model, "--batch", "4"});
  EXPECT_NE(text_form.out.find("params       1,554 trainable (6.07 KiB, 8 Constant-node weights "
                               "among them)"),
            std::string::npos)
      << text_form.out;
  for (const char* text : {"mesh: {dp: 2, tp: 2}\ntensor: megatron\nprecision: bf16\n",
                           "mesh: {tp: 2}\ntensor: auto\nprecision: bf16\n",
                           "mesh: {sp: 2}\nprecision: bf16\n"}) {
    const std::string scheme = dir + "/infer.yaml";
    std::ofstream(scheme) << text;
    const std::string plan = dir + "/plan-infer";
    std::filesystem::remove_all(plan);
    auto t = testing::run_autopar(
        {"transform", model, "--batch", "4", "--loss", "none", "--scheme", scheme, "-o", plan});
    ASSERT_EQ(t.exit_code, 0) << text << t.err;
    auto v = testing::run_autopar({"verify", plan, "--json"});
    ASSERT_EQ(v.exit_code, 0) << text << v.out << v.err;
    EXPECT_TRUE(nlohmann::json::parse(v.out)["ok"].get<bool>()) << text << v.out;
  }
}

}  // namespace
}  // namespace autopar
