// Golden text: what `autopar inspect` prints and the text form of imported exporter-style
// models. AUTOPAR_UPDATE_GOLDEN=1 rewrites the files under tests/golden/data/.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "autopar/ir/text.h"
#include "autopar/onnx/onnx_import.h"
#include "autopar/parallel/lowering.h"
#include "autopar/zoo/zoo.h"
#include "testing/onnx_proto.h"
#include "testing/testing.h"

namespace autopar {
namespace {

void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = testing::source_path("tests/golden/data/" + name);
  if (std::getenv("AUTOPAR_UPDATE_GOLDEN")) {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing golden file " << path << " (run with AUTOPAR_UPDATE_GOLDEN=1)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "golden " << name;
}

TEST(Golden, InspectGptTiny) {
  const testing::CommandResult r = testing::run_autopar({"inspect", "gpt-tiny", "--batch", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_golden("inspect_gpt_tiny.txt", r.out);
}

TEST(Golden, InspectResnet50Json) {
  const testing::CommandResult r =
      testing::run_autopar({"inspect", "resnet50", "--batch", "32", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_golden("inspect_resnet50.json", r.out);
}

TEST(Golden, ImportedTorchStyleCnn) {
  ImportOptions options;
  options.batch = 2;
  auto graph = import_onnx(testing::torch_style_cnn().model(), options, "cnn.onnx");
  ASSERT_TRUE(graph.is_ok()) << graph.status().message();
  expect_golden("torch_style_cnn.txt", print(*graph));
}

// A plan's manifest and every role graph's text, for a small model and scheme.
std::string plan_text(const std::string& scheme_yaml, int64_t micro_global) {
  auto scheme = parse_scheme(scheme_yaml, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  ZooOptions zoo;
  zoo.batch = micro_global;
  auto model = build_zoo_model("mlp", zoo);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  LoweringOptions options;
  options.optimizer.kind = OptimizerKind::kSgd;
  auto plan = lower(*model, *scheme, options);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  if (!plan.is_ok()) return "";
  plan->source.model = "mlp";
  plan->source.loss = "cross_entropy";
  plan->source.optimizer = "sgd";
  std::string text = manifest_yaml(*plan);
  for (const Role& role : plan->roles) text += "\n" + print(role.graph);
  return text;
}

TEST(Golden, PlanDataAndTensorParallel) {
  expect_golden("plan_mlp_dp2_tp2.txt",
                plan_text("mesh: {dp: 2, tp: 2}\nbatch: {global: 4, micro: 2}\n", 4));
}

// An override makes fc.1 column-parallel too: its output stays split, fc.2 becomes the row.
TEST(Golden, PlanWithAnOverride) {
  expect_golden("plan_mlp_tp2_override.txt",
                plan_text("mesh: {tp: 2}\nbatch: {global: 2}\ntensor:\n  default: megatron\n"
                          "  \"fc.1/MatMul\": \"[_, tp]\"\n",
                          2));
}

TEST(Golden, PlanPipelineWithRecomputation) {
  expect_golden("plan_mlp_pp2_gpipe_recompute.txt",
                plan_text("mesh: {pp: 2}\nbatch: {global: 2, micro: 1}\n"
                          "pipeline: {schedule: gpipe}\nrecompute: full\n",
                          1));
}

}  // namespace
}  // namespace autopar
