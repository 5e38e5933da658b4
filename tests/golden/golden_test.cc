// Golden text: what `autopar inspect` prints and the text form of imported exporter-style
// models. AUTOPAR_UPDATE_GOLDEN=1 rewrites the files under tests/golden/data/.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "autopar/ir/text.h"
#include "autopar/onnx/onnx_import.h"
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

}  // namespace
}  // namespace autopar
