// The runtime's commands end to end: inference on tensor files, the training step as ONNX,
// and training on the synthetic teacher task.
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "autopar/ir/pattern_fusion.h"
#include "autopar/onnx/onnx_check.h"
#include "autopar/onnx/onnx_import.h"
#include "autopar/onnx/onnx_tensor.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/trainer.h"
#include "testing/testing.h"

namespace autopar {
namespace {

using testing::run_autopar;

std::vector<double> losses_of(const testing::CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto json = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_TRUE(json.is_object()) << r.out;
  if (!json.is_object() || !json.contains("losses")) return {};
  return json["losses"].get<std::vector<double>>();
}

// A plan folder named after its zoo model, beside which the commands run: the model's name
// still names the zoo model (the folder is no model file).
TEST(RuntimeCli, APlanFolderNamedAfterItsZooModel) {
  const std::string dir = testing::temp_dir("plan_named_mlp");
  const std::string scheme = dir + "/scheme.yaml";
  { std::ofstream(scheme) << "mesh: {pp: 2, dp: 2}\nbatch: {global: 8, micro: 2}\n"; }
  auto t = run_autopar({"transform", "mlp", "--scheme", "scheme.yaml", "--batch", "8", "-o", "mlp"},
                       dir);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  auto v = run_autopar({"verify", "mlp", "--json"}, dir);
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find("\"ok\": true"), std::string::npos) << v.out;
  std::filesystem::remove_all(dir);
}

TEST(RuntimeCli, MlpLossHalvesIn50Steps) {
  const std::vector<double> losses =
      losses_of(run_autopar({"run", "mlp", "--train", "--steps", "50", "--json"}));
  ASSERT_EQ(losses.size(), 50u);
  EXPECT_LT(losses.back(), 0.5 * losses.front());
}

TEST(RuntimeCli, GptTinyLossFalls) {
  const std::vector<double> losses = losses_of(
      run_autopar({"run", "gpt-tiny", "--train", "--steps", "50", "--json", "--threads", "2"}));
  ASSERT_EQ(losses.size(), 50u);
  // Cross-entropy over 256 tokens starts near ln 256 ≈ 5.55.
  EXPECT_NEAR(losses.front(), 5.55, 0.1);
  EXPECT_LT(losses.back(), 0.6 * losses.front());
}

TEST(RuntimeCli, TrainingIsDeterministic) {
  const auto first = losses_of(
      run_autopar({"run", "resnet-tiny", "--train", "--steps", "3", "--json", "--threads", "2"}));
  const auto second = losses_of(
      run_autopar({"run", "resnet-tiny", "--train", "--steps", "3", "--json", "--threads", "2"}));
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first, second);
}

TEST(RuntimeCli, TrainGraphWritesACheckedModel) {
  const std::string dir = testing::temp_dir("train_graph");
  const auto r =
      run_autopar({"train-graph", "bert-tiny", "--optimizer", "adamw", "-o", "train.onnx"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto model = read_model_proto(dir + "/train.onnx");
  ASSERT_TRUE(model.is_ok());
  EXPECT_TRUE(check_onnx_model(*model, "train.onnx").is_ok());
  auto graph = read_onnx_file(dir + "/train.onnx", ImportOptions{.batch = 4, .dims = {}});
  ASSERT_TRUE(graph.is_ok()) << graph.status().message();
  EXPECT_EQ(graph->value(graph->outputs()[0]).name, "loss");
  int phases[3] = {0, 0, 0};
  for (const Node& n : graph->nodes()) ++phases[static_cast<int>(n.phase)];
  EXPECT_GT(phases[1], 0);
  EXPECT_GT(phases[2], 0);
  std::filesystem::remove_all(dir);
}

// The labels are as symbolic as the inputs, and the file imports at the sizes its gradients
// were built at without --batch.
TEST(RuntimeCli, TrainGraphKeepsTheLabelsBatchSymbolic) {
  const std::string dir = testing::temp_dir("train_graph_batch");
  const auto r = run_autopar({"train-graph", "gpt-tiny", "--batch", "2", "-o", "train.onnx"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto model = read_model_proto(dir + "/train.onnx");
  ASSERT_TRUE(model.is_ok());
  std::map<std::string, std::string> leading;
  for (const auto& input : model->graph().input()) {
    const auto& shape = input.type().tensor_type().shape();
    if (shape.dim_size() > 0) leading[input.name()] = shape.dim(0).dim_param();
  }
  EXPECT_EQ(leading["input_ids"], "batch");
  EXPECT_EQ(leading["labels"], "batch");
  const auto inspect = run_autopar({"inspect", "train.onnx"}, dir);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("input        input_ids: i64[batch=2,16]\n"), std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find("input        labels: i64[batch=2,16]\n"), std::string::npos)
      << inspect.out;
  EXPECT_EQ(run_autopar({"inspect", "train.onnx", "--batch", "2"}, dir).exit_code, 0);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeCli, RunWritesTheExecutorsOutputs) {
  const std::string dir = testing::temp_dir("run_files");
  ASSERT_EQ(run_autopar({"zoo", "resnet-tiny", "-o", "resnet.onnx"}, dir).exit_code, 0);
  auto graph = read_onnx_file(dir + "/resnet.onnx", ImportOptions{.batch = 3, .dims = {}});
  ASSERT_TRUE(graph.is_ok());
  const std::vector<TensorPtr> inputs = runtime::synthetic_inputs(*graph, 5);
  std::filesystem::create_directory(dir + "/in");
  ASSERT_TRUE(write_tensor_file(dir + "/in/input_0.pb", *inputs[0], "pixel_values").is_ok());
  const auto r = run_autopar(
      {"run", "resnet.onnx", "--inputs", "in", "--outputs", "out", "--threads", "2"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto written = read_tensor_file(dir + "/out/output_0.pb");
  ASSERT_TRUE(written.is_ok()) << written.status().message();
  // run folds each BatchNormalization into the convolution before it: the bits of the
  // executor on the folded graph, and the unfolded graph's values to rounding.
  runtime::ExecutorOptions options;
  options.num_threads = 2;
  Graph folded = *graph;
  EXPECT_EQ(fold_inference_batch_norms(folded), 12);  // every BatchNormalization
  auto executor = runtime::Executor::create(folded, options);
  ASSERT_TRUE(executor.is_ok());
  auto expected = executor->run_inputs(inputs);
  ASSERT_TRUE(expected.is_ok());
  EXPECT_EQ(*written, *(*expected)[0]);
  EXPECT_EQ(written->dims(), (std::vector<int64_t>{3, 10}));
  auto unfolded = runtime::Executor::create(*graph, options)->run_inputs(inputs);
  ASSERT_TRUE(unfolded.is_ok());
  for (int64_t i = 0; i < written->num_elements(); ++i) {
    const double want = (*unfolded)[0]->float_at(i);
    EXPECT_NEAR(written->float_at(i), want, 1e-5 * (1 + std::abs(want))) << i;
  }

  // --repeat: the runs after the first give the steady state; the outputs are the same.
  const auto repeated = run_autopar({"run", "resnet.onnx", "--inputs", "in", "--outputs", "again",
                                     "--threads", "2", "--repeat", "5", "--json"},
                                    dir);
  ASSERT_EQ(repeated.exit_code, 0) << repeated.err;
  const auto json = nlohmann::json::parse(repeated.out);
  EXPECT_EQ(json["runs"].get<int>(), 5);
  EXPECT_GT(json["median_s"].get<double>(), 0.0);
  EXPECT_LE(json["p10_s"].get<double>(), json["median_s"].get<double>());
  auto again = read_tensor_file(dir + "/again/output_0.pb");
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, *written);
  EXPECT_EQ(run_autopar({"run", "resnet.onnx", "--inputs", "in", "--repeat", "0"}, dir).err,
            "autopar: error: --repeat 0: must be at least 1\n");
  // --op-times: the time per op type, convolutions by kind (resnet-tiny has 1x1 projection
  // shortcuts and 3x3 convolutions), every op type of the graph once.
  const auto timed = run_autopar(
      {"run", "resnet.onnx", "--inputs", "in", "--threads", "1", "--op-times", "--json"}, dir);
  ASSERT_EQ(timed.exit_code, 0) << timed.err;
  const auto ops = nlohmann::json::parse(timed.out)["op_seconds"];
  for (const char* op : {"Conv", "Conv 1x1", "Relu", "Add", "Gemm"}) {
    ASSERT_TRUE(ops.contains(op)) << op << " " << ops.dump();
    EXPECT_GE(ops[op].get<double>(), 0.0) << op;
  }
  EXPECT_EQ(run_autopar({"run", "mlp", "--train", "--op-times"}, dir).err,
            "autopar: error: --op-times: inference only (training runs --steps)\n");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace autopar
