// autopar estimate's user errors: one line naming the flag, file or scheme field, exit 2.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "testing/testing.h"

namespace autopar {
namespace {

class EstimateErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::copy_file(testing::source_path("tests/data/hw/fixture.yaml"),
                               dir_ + "/hw.yaml");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The fixture profile with `lines` after its line `after` (by default its attention curve),
  // written as `name`.
  void write_profile(const std::string& name, const std::string& lines,
                     const std::string& after = "    attention: [[1e6, 0.1], [1e12, 0.7]]\n") {
    std::ifstream in(dir_ + "/hw.yaml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_NE(text.find(after), std::string::npos);
    text.insert(text.find(after) + after.size(), lines);
    std::ofstream(dir_ + "/" + name) << text;
  }

  void expect_error(const std::string& scheme_text, const std::vector<std::string>& extra,
                    const std::string& line, const std::string& hw = "hw.yaml") {
    std::ofstream(dir_ + "/s.yaml") << scheme_text;
    std::vector<std::string> args = {"estimate", "gpt-tiny", "--scheme", "s.yaml", "--hw", hw};
    args.insert(args.end(), extra.begin(), extra.end());
    const testing::CommandResult r = testing::run_autopar(args, dir_);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, line + "\n");
  }

  std::string dir_;
};

TEST_F(EstimateErrors, UnknownProfile) {
  expect_error("mesh: {dp: 2}\n", {},
               "autopar: error: --hw nowhere: no such file or profile (profiles: dgx-a100-80g, "
               "dgx-h100, hgx-h200)",
               "nowhere");
}

// A misspelt efficiency curve would otherwise be ignored, its kernels priced on another curve.
TEST_F(EstimateErrors, UnknownEfficiencyCurve) {
  write_profile("typo.yaml", "    flash_atention: [[1e9, 0.3]]\n");
  expect_error("mesh: {dp: 2}\n", {},
               "autopar: error: typo.yaml: device.efficiency.flash_atention: unknown curve (known: "
               "gemm, conv, elementwise, norm, attention, flash_attention, "
               "flash_attention_backward, gemm_shapes)",
               "typo.yaml");
}

// A GEMM shape table with a hole in its grid would read rates from nowhere between its points.
TEST_F(EstimateErrors, GemmShapeTableWithAHole) {
  write_profile("hole.yaml",
                "    gemm_shapes: [[256, 256, 256, 0.01], [256, 4096, 256, 0.1], "
                "[4096, 256, 256, 0.1]]\n");
  expect_error("mesh: {dp: 2}\n", {},
               "autopar: error: hole.yaml: device.efficiency.gemm_shapes: 3 rows for a grid of 2 m "
               "x 2 n x 1 k values (4 points): every combination must appear exactly once",
               "hole.yaml");
}

// Compute beside a collective that would never finish.
TEST_F(EstimateErrors, OverlapSlowdownOfAWholeDevice) {
  write_profile("overlap.yaml", "  overlap_slowdown: 1\n", "  launch_overhead_s: 5e-6\n");
  expect_error("mesh: {dp: 2}\n", {},
               "autopar: error: overlap.yaml: device.overlap_slowdown: 1 must be below 1 (compute "
               "would never finish)",
               "overlap.yaml");
}

// A profile's stack layout that is neither nhwc nor nchw, through the CLI.
TEST_F(EstimateErrors, UnknownMemoryFormatInTheProfile) {
  std::ifstream in(dir_ + "/hw.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(text.find("kernels:"), std::string::npos);
  std::ofstream(dir_ + "/layout.yaml") << text << "kernels: {memory_format: channels_last}\n";
  expect_error("mesh: {dp: 2}\n", {},
               "autopar: error: layout.yaml: kernels.memory_format: 'channels_last' is not one of "
               "nhwc, nchw",
               "layout.yaml");
}

TEST_F(EstimateErrors, TooFewNodes) {
  expect_error("mesh: {dp: 16}\nbatch: {global: 16}\n", {"--nodes", "1"},
               "autopar: error: --nodes 1: 1 nodes of 8 devices hold 8, the scheme needs 16");
}

// A mesh that leaves nodes idle answers for another cluster than the one asked about.
TEST_F(EstimateErrors, TooManyNodes) {
  expect_error("mesh: {dp: 8}\nbatch: {global: 16}\n", {"--nodes", "2"},
               "autopar: error: --nodes 2: the scheme's 8 devices fill 1 node of 8 devices; a "
               "scheme for 2 nodes has 16 devices in its mesh");
}

TEST_F(EstimateErrors, MoreStagesThanLayers) {
  expect_error("mesh: {pp: 8}\nbatch: {global: 8, micro: 1}\n", {},
               "autopar: error: s.yaml: mesh.pp: 8 stages for a model of 4 layers");
}

TEST_F(EstimateErrors, MicroBatchThatDoesNotDivide) {
  expect_error("mesh: {dp: 2}\nbatch: {global: 8, micro: 3}\n", {},
               "autopar: error: s.yaml: batch.micro: 3 does not divide global / dp = 8 / 2 = 4");
}

}  // namespace
}  // namespace autopar
