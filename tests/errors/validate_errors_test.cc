// autopar validate's user errors: one line naming the suite file, run and field, exit 2.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "testing/testing.h"

namespace autopar {
namespace {

class ValidateErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void expect_error(const std::string& suite_text, const std::string& line) {
    std::filesystem::create_directories(dir_ + "/suite");
    std::ofstream(dir_ + "/suite/runs.yaml") << suite_text;
    const testing::CommandResult r = testing::run_autopar({"validate", "suite"}, dir_);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, line + "\n");
  }

  std::string dir_;
};

constexpr const char* kRun =
    "publication: p\n"
    "runs:\n"
    "  - name: r\n"
    "    source: Table 1\n"
    "    model: {zoo: gpt-tiny}\n";

TEST_F(ValidateErrors, NoSuchSuite) {
  const testing::CommandResult r = testing::run_autopar({"validate", "absent"}, dir_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "autopar: error: absent: no such suite file or directory\n");
}

TEST_F(ValidateErrors, EmptyDirectory) {
  std::filesystem::create_directories(dir_ + "/suite");
  const testing::CommandResult r = testing::run_autopar({"validate", "suite"}, dir_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "autopar: error: suite: no .yaml suite files in the directory\n");
}

TEST_F(ValidateErrors, UnknownProfile) {
  expect_error(std::string(kRun) +
                   "    hw: nowhere\n    nodes: 1\n"
                   "    scheme: {mesh: {dp: 2}, batch: {global: 8}}\n"
                   "    published: {iteration_s: 1}\n",
               "autopar: error: suite/runs.yaml: r: hw: nowhere: no such file or profile "
               "(profiles: dgx-a100-80g, dgx-h100, hgx-h200)");
}

TEST_F(ValidateErrors, TooFewNodes) {
  expect_error(std::string(kRun) +
                   "    hw: dgx-a100-80g\n    nodes: 1\n"
                   "    scheme: {mesh: {dp: 16}, batch: {global: 16}}\n"
                   "    published: {iteration_s: 1}\n",
               "autopar: error: suite/runs.yaml: r: nodes: 1 nodes of 8 devices hold 8, the "
               "scheme needs 16");
}

TEST_F(ValidateErrors, MoreStagesThanLayers) {
  expect_error(std::string(kRun) +
                   "    hw: dgx-a100-80g\n    nodes: 1\n"
                   "    scheme: {mesh: {pp: 8}, batch: {global: 8, micro: 1}}\n"
                   "    published: {iteration_s: 1}\n",
               "autopar: error: suite/runs.yaml: r: scheme: mesh.pp: 8 stages for a model of 4 "
               "layers");
}

TEST_F(ValidateErrors, MalformedYaml) {
  expect_error("publication: [\n",
               "autopar: error: suite/runs.yaml: line 2: end of sequence flow not found");
}

TEST_F(ValidateErrors, DropoutIsNotAProbability) {
  expect_error(
      "publication: p\n"
      "runs:\n"
      "  - name: r\n"
      "    source: Table 1\n"
      "    model: {zoo: gpt-tiny, dropout: 1.2}\n"
      "    hw: dgx-a100-80g\n    nodes: 1\n"
      "    scheme: {mesh: {dp: 2}, batch: {global: 8}}\n"
      "    published: {iteration_s: 1}\n",
      "autopar: error: suite/runs.yaml: runs[0] (r).model.dropout: expected a probability in [0, "
      "1)");
}

TEST_F(ValidateErrors, DuplicateRunNames) {
  std::filesystem::create_directories(dir_ + "/suite");
  const std::string run = std::string(kRun) +
                          "    hw: dgx-a100-80g\n    nodes: 1\n"
                          "    scheme: {mesh: {dp: 2}, batch: {global: 8}}\n"
                          "    published: {iteration_s: 1}\n";
  std::ofstream(dir_ + "/suite/a.yaml") << run;
  std::ofstream(dir_ + "/suite/b.yaml") << run;
  const testing::CommandResult r = testing::run_autopar({"validate", "suite"}, dir_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "autopar: error: suite/b.yaml: run 'r' is named in suite/a.yaml already\n");
}

}  // namespace
}  // namespace autopar
