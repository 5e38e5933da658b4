// autopar regress's user errors: one line naming the suite or baseline file and the field,
// exit 2, before any search runs.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "testing/testing.h"

namespace autopar {
namespace {

// A case every test starts from: paths relative to the repository root.
std::string suite_case(const std::string& name, const std::string& model = "gpt-tiny") {
  return "  - {name: " + name + ", model: " + model +
         ", hw: tests/data/hw/fixture.yaml, nodes: 1, space: configs/spaces/default.yaml, "
         "batch: 16}\n";
}

// A baseline entry for `name` with plausible numbers.
std::string baseline_entry(const std::string& name) {
  return "\"" + name +
         "\": {\"step_time_s\": 0.01, \"search_time_s\": 0.1, \"scheme\": \"mesh: {dp: 8}\\n\", "
         "\"candidates_evaluated\": 10}";
}

class RegressErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes the suite (and the baseline, unless empty), runs regress and expects `line`.
  void expect_error(const std::string& suite_text, const std::string& baseline_text,
                    const std::string& line) {
    std::ofstream(dir_ + "/suite.yaml") << suite_text;
    if (!baseline_text.empty()) std::ofstream(dir_ + "/baseline.json") << baseline_text;
    const testing::CommandResult r =
        testing::run_autopar({"regress", "suite.yaml", "--baseline", "baseline.json"}, dir_);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, line + "\n");
    EXPECT_EQ(r.out, "");
  }

  std::string dir_;
};

TEST_F(RegressErrors, UnknownSearchTimeRule) {
  const testing::CommandResult r = testing::run_autopar(
      {"regress", "suite.yaml", "--baseline", "baseline.json", "--search-time", "never"}, dir_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "autopar: error: --search-time: never not in {check,report}\n");
}

TEST_F(RegressErrors, FieldNotAnInteger) {
  expect_error(
      "cases:\n  - {name: a, model: gpt-tiny, hw: dgx-h100, nodes: two, "
      "space: configs/spaces/default.yaml, batch: 16}\n",
      "{" + baseline_entry("a") + "}",
      "autopar: error: suite.yaml: cases[0].nodes: expected an integer");
}

TEST_F(RegressErrors, MissingField) {
  expect_error(
      "cases:\n  - {name: a, model: gpt-tiny, hw: dgx-h100, nodes: 1, "
      "space: configs/spaces/default.yaml}\n",
      "{" + baseline_entry("a") + "}", "autopar: error: suite.yaml: cases[0].batch: missing");
}

TEST_F(RegressErrors, UnknownField) {
  expect_error("cases:\n" + suite_case("a") + "  - {name: b, modle: mlp}\n",
               "{" + baseline_entry("a") + "}",
               "autopar: error: suite.yaml: cases[1].modle: unknown field (known: name, model, "
               "hw, nodes, space, batch, seq)");
}

TEST_F(RegressErrors, DuplicateName) {
  expect_error("cases:\n" + suite_case("a") + suite_case("a", "mlp"),
               "{" + baseline_entry("a") + "}",
               "autopar: error: suite.yaml: cases[1].name: 'a' is also the name of cases[0]");
}

TEST_F(RegressErrors, UnknownModel) {
  expect_error("cases:\n" + suite_case("a") + suite_case("b", "gpt5"),
               "{" + baseline_entry("a") + ", " + baseline_entry("b") + "}",
               "autopar: error: suite.yaml: cases[1].model: 'gpt5' is not a zoo model (autopar "
               "zoo lists them)");
}

TEST_F(RegressErrors, UnknownProfile) {
  expect_error(
      "cases:\n  - {name: a, model: gpt-tiny, hw: dgx-z900, nodes: 1, "
      "space: configs/spaces/default.yaml, batch: 16}\n",
      "{" + baseline_entry("a") + "}",
      "autopar: error: suite.yaml: cases[0].hw: 'dgx-z900' is not a profile (profiles: "
      "dgx-a100-80g, dgx-h100, hgx-h200) nor a .yaml file");
}

TEST_F(RegressErrors, MissingSpace) {
  expect_error(
      "cases:\n  - {name: a, model: gpt-tiny, hw: dgx-h100, nodes: 1, "
      "space: configs/spaces/nowhere.yaml, batch: 16}\n",
      "{" + baseline_entry("a") + "}",
      "autopar: error: suite.yaml: cases[0].space: " +
          testing::source_path("configs/spaces/nowhere.yaml") + ": no such file");
}

TEST_F(RegressErrors, MissingBaseline) {
  expect_error("cases:\n" + suite_case("a"), "",
               "autopar: error: baseline.json: no such file (run with --update to write it)");
}

TEST_F(RegressErrors, CaseMissingFromBaseline) {
  expect_error("cases:\n" + suite_case("a") + suite_case("b", "mlp"),
               "{" + baseline_entry("a") + "}",
               "autopar: error: baseline.json: b: missing: the suite's cases[1] has no baseline "
               "(run with --update to record it)");
}

TEST_F(RegressErrors, BaselineEntryWithoutStepTime) {
  expect_error("cases:\n" + suite_case("a"),
               "{\"a\": {\"search_time_s\": 0.1, \"scheme\": \"\", \"candidates_evaluated\": 1}}",
               "autopar: error: baseline.json: a.step_time_s: missing");
}

}  // namespace
}  // namespace autopar
