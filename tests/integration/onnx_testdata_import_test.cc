// Models exported by PyTorch (libonnx-testdata's pytorch-converted and pytorch-operator sets,
// opset 6, upgraded on import) import with static shapes and summarise.
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "autopar/ir/model_summary.h"
#include "autopar/ir/verify.h"
#include "autopar/onnx/onnx_import.h"
#include "testing/testing.h"

namespace autopar {
namespace {

std::vector<std::string> model_paths(const std::string& set) {
  std::vector<std::string> paths;
  const std::filesystem::path dir = std::filesystem::path(AUTOPAR_ONNX_TESTDATA) / set;
  if (!std::filesystem::exists(dir)) return paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (std::filesystem::exists(entry.path() / "model.onnx")) {
      paths.push_back((entry.path() / "model.onnx").string());
    }
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

struct SetTotals {
  int models = 0;
  int imported = 0;
  int64_t params = 0;
  int64_t nodes = 0;
  double flops = 0;
  std::set<std::string> unsupported;
};

SetTotals import_all(const std::string& set) {
  SetTotals totals;
  for (const std::string& path : model_paths(set)) {
    ++totals.models;
    auto graph = read_onnx_file(path);
    EXPECT_TRUE(graph.is_ok()) << graph.status().message();
    if (!graph.is_ok()) continue;
    ++totals.imported;
    const ModelSummary s = summarize(*graph);
    totals.unsupported.insert(s.unsupported_ops.begin(), s.unsupported_ops.end());
    VerifyOptions options;
    options.require_registered_ops = s.unsupported_ops.empty();
    Status valid = verify(*graph, options);
    EXPECT_TRUE(valid.is_ok()) << path << ": " << valid.message();
    totals.params += s.params;
    totals.nodes += s.nodes;
    totals.flops += s.flops_forward;
  }
  return totals;
}

TEST(OnnxTestdata, PytorchConvertedModelsAllImport) {
  if (model_paths("pytorch-converted").empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  const SetTotals t = import_all("pytorch-converted");
  EXPECT_EQ(t.models, 82);
  EXPECT_EQ(t.imported, 82);
  EXPECT_TRUE(t.unsupported.empty());
  EXPECT_EQ(t.params, 3092);
  EXPECT_EQ(t.nodes, 98);
  EXPECT_DOUBLE_EQ(t.flops, 9677506);
}

TEST(OnnxTestdata, PytorchOperatorModelsAllImport) {
  if (model_paths("pytorch-operator").empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  const SetTotals t = import_all("pytorch-operator");
  EXPECT_EQ(t.models, 35);
  EXPECT_EQ(t.imported, 35);
  EXPECT_EQ(t.unsupported, (std::set<std::string>{"InstanceNormalization"}));
  EXPECT_EQ(t.params, 1977);
  EXPECT_EQ(t.nodes, 49);
  EXPECT_DOUBLE_EQ(t.flops, 136611095);
}

}  // namespace
}  // namespace autopar
