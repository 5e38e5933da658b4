// ONNX's own test cases (libonnx-testdata: node, pytorch-converted, pytorch-operator) run on
// the CPU executor: one GoogleTest case per directory whose ops all have an OpDef and a
// kernel, compared with the expected outputs at ONNX's backend tolerance (rtol 1e-3,
// atol 1e-7). Cases listed in excluded.txt must still fail; one that passes must leave the list.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "autopar/onnx/onnx_bind.h"
#include "autopar/onnx/onnx_import.h"
#include "autopar/onnx/onnx_tensor.h"
#include "autopar/ops/op_def.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/kernel.h"
#include "testing/testing.h"

namespace autopar {
namespace {

namespace fs = std::filesystem;

constexpr double kRelativeTolerance = 1e-3;
constexpr double kAbsoluteTolerance = 1e-7;
constexpr int kMinimumPassingCases = 300;

struct Case {
  std::string set;   // node, pytorch-converted, pytorch-operator
  std::string name;  // test_relu
  fs::path dir;
  std::string excluded_reason;  // empty unless listed in excluded.txt
};

std::map<std::string, std::string> read_excluded() {
  std::map<std::string, std::string> excluded;
  std::ifstream in(testing::source_path("tests/conformance/excluded.txt"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    excluded[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
  }
  return excluded;
}

// Every op of the model has an OpDef and a kernel.
bool runnable(const fs::path& model_path) {
  auto model = read_model_proto(model_path.string());
  if (!model.is_ok()) return false;
  for (const auto& node : model->graph().node()) {
    const std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    if (!op_registry().find(domain, node.op_type())) return false;
    if (!runtime::kernel_registry().find(domain, node.op_type())) return false;
  }
  return model->graph().node_size() > 0;
}

std::vector<Case> discover() {
  std::vector<Case> cases;
  const std::map<std::string, std::string> excluded = read_excluded();
  for (const char* set : {"node", "pytorch-converted", "pytorch-operator"}) {
    const fs::path root = fs::path(AUTOPAR_ONNX_TESTDATA) / set;
    if (!fs::exists(root)) continue;
    std::vector<fs::path> dirs;
    for (const auto& entry : fs::directory_iterator(root)) dirs.push_back(entry.path());
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      if (!runnable(dir / "model.onnx")) continue;
      Case c{set, dir.filename().string(), dir, ""};
      if (auto it = excluded.find(c.name); it != excluded.end()) {
        c.excluded_reason = it->second.empty() ? "listed" : it->second;
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<fs::path> numbered_files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> files;
  for (int i = 0;; ++i) {
    fs::path path = dir / fmt::format("{}_{}.pb", prefix, i);
    if (!fs::exists(path)) break;
    files.push_back(path);
  }
  return files;
}

// Compares at ONNX's tolerance; an empty string when equal.
std::string compare(const Tensor& expected, const Tensor& actual, const std::string& what) {
  if (expected.dtype() != actual.dtype() || expected.dims() != actual.dims()) {
    return fmt::format("{}: expected {}[{}], got {}[{}]", what, dtype_name(expected.dtype()),
                       fmt::join(expected.dims(), ","), dtype_name(actual.dtype()),
                       fmt::join(actual.dims(), ","));
  }
  int64_t mismatches = 0;
  std::string first;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    bool equal;
    if (is_floating(expected.dtype())) {
      const double e = expected.float_at(i), a = actual.float_at(i);
      equal = (std::isnan(e) && std::isnan(a)) || e == a ||
              std::fabs(a - e) <= kAbsoluteTolerance + kRelativeTolerance * std::fabs(e);
      if (!equal && first.empty()) first = fmt::format("element {}: expected {}, got {}", i, e, a);
    } else {
      equal = expected.int_at(i) == actual.int_at(i);
      if (!equal && first.empty()) {
        first =
            fmt::format("element {}: expected {}, got {}", i, expected.int_at(i), actual.int_at(i));
      }
    }
    mismatches += equal ? 0 : 1;
  }
  if (mismatches == 0) return "";
  return fmt::format("{}: {} of {} elements differ; {}", what, mismatches, expected.num_elements(),
                     first);
}

// Runs every test_data_set of a case; the first failure as text, or "" when all pass.
std::string run_case(const Case& c) {
  auto model = read_model_proto((c.dir / "model.onnx").string());
  if (!model.is_ok()) return model.status().message();
  std::vector<fs::path> sets;
  for (const auto& entry : fs::directory_iterator(c.dir)) {
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(entry.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return "no test_data_set";
  for (const fs::path& set : sets) {
    std::vector<Tensor> inputs;
    for (const fs::path& file : numbered_files(set, "input")) {
      auto t = read_tensor_file(file.string());
      if (!t.is_ok()) return t.status().message();
      inputs.push_back(std::move(t).value());
    }
    auto bound = import_for_inputs(*model, std::move(inputs), (c.dir / "model.onnx").string(),
                                   c.dir.string());
    if (!bound.is_ok()) return bound.status().message();
    runtime::ExecutorOptions options;
    options.num_threads = 2;
    auto executor = runtime::Executor::create(bound->graph, options);
    if (!executor.is_ok()) return executor.status().message();
    std::vector<runtime::Feed> feeds(bound->feeds.begin(), bound->feeds.end());
    auto outputs = executor->run(feeds);
    if (!outputs.is_ok()) return outputs.status().message();
    const std::vector<fs::path> expected_files = numbered_files(set, "output");
    if (expected_files.size() != outputs->size()) {
      return fmt::format("{} outputs expected, {} produced", expected_files.size(),
                         outputs->size());
    }
    for (size_t i = 0; i < expected_files.size(); ++i) {
      auto expected = read_tensor_file(expected_files[i].string());
      if (!expected.is_ok()) return expected.status().message();
      std::string diff = compare(*expected, *(*outputs)[i],
                                 fmt::format("{} output {}", set.filename().string(), i));
      if (!diff.empty()) return diff;
    }
  }
  return "";
}

class ConformanceCase : public ::testing::Test {
 public:
  explicit ConformanceCase(Case c) : case_(std::move(c)) {}
  void TestBody() override {
    const std::string failure = run_case(case_);
    if (case_.excluded_reason.empty()) {
      EXPECT_EQ(failure, "") << case_.dir;
    } else {
      EXPECT_NE(failure, "") << case_.name
                             << " passes now: remove it from tests/conformance/excluded.txt";
    }
  }

 private:
  Case case_;
};

std::string suite_name(const std::string& set) {
  if (set == "node") return "OnnxNode";
  if (set == "pytorch-converted") return "PytorchConverted";
  return "PytorchOperator";
}

}  // namespace
}  // namespace autopar

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::vector<autopar::Case> cases = autopar::discover();
  int expected_to_pass = 0;
  for (const autopar::Case& c : cases) {
    expected_to_pass += c.excluded_reason.empty() ? 1 : 0;
    ::testing::RegisterTest(autopar::suite_name(c.set).c_str(), c.name.c_str(), nullptr, nullptr,
                            __FILE__, __LINE__,
                            [c]() -> ::testing::Test* { return new autopar::ConformanceCase(c); });
  }
  ::testing::RegisterTest("Conformance", "AtLeastThreeHundredCasesRun", nullptr, nullptr, __FILE__,
                          __LINE__, [expected_to_pass]() -> ::testing::Test* {
                            struct Count : ::testing::Test {
                              explicit Count(int n) : n_(n) {}
                              void TestBody() override {
                                EXPECT_GE(n_, autopar::kMinimumPassingCases);
                              }
                              int n_;
                            };
                            return new Count(expected_to_pass);
                          });
  return RUN_ALL_TESTS();
}
