// autopar autotune's user errors: one line naming the flag, file or space field, exit 2.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "testing/testing.h"

namespace autopar {
namespace {

class AutotuneErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::copy_file(testing::source_path("tests/data/hw/fixture.yaml"),
                               dir_ + "/hw.yaml");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void expect_error(const std::string& model, const std::string& space,
                    const std::vector<std::string>& extra, const std::string& line) {
    std::ofstream(dir_ + "/space.yaml") << space;
    std::vector<std::string> args = {"autotune",   model,     "--hw", "hw.yaml", "--space",
                                     "space.yaml", "--batch", "16",   "-o",      "plan"};
    args.insert(args.end(), extra.begin(), extra.end());
    const testing::CommandResult r = testing::run_autopar(args, dir_);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, line + "\n");
  }

  std::string dir_;
};

TEST_F(AutotuneErrors, UnknownSpaceField) {
  expect_error("gpt-tiny", "meshes: {tp: [1]}\n", {},
               "autopar: error: space.yaml: meshes: unknown field (known: mesh, constraints, "
               "batch, context, tensor, zero, pipeline, recompute, precision)");
}

TEST_F(AutotuneErrors, NoMeshMakesTheDevices) {
  expect_error(
      "gpt-tiny", "mesh: {tp: [3], pp: [1], dp: auto}\n", {},
      "autopar: error: space.yaml: mesh: no tp × pp × dp × sp × cp the space allows makes 8 "
      "devices (1 of 1 tried: 1 put tp · sp over a node's 8 devices "
      "(constraints.tp_within_node))");
}

TEST_F(AutotuneErrors, NoMicroBatchDivides) {
  expect_error("gpt-tiny", "mesh: {tp: [1], pp: [1]}\nbatch: {micro: [3]}\n", {},
               "autopar: error: space.yaml: batch.micro: no microbatch size the space allows "
               "divides the samples per data-parallel replica of the global batch 16 (1 meshes)");
}

TEST_F(AutotuneErrors, ExportOfAModelThatIsNotATransformer) {
  expect_error("mlp", "mesh: {tp: [1], pp: [1]}\n", {"--export", "megatron", "--simulate-top", "0"},
               "autopar: error: --export megatron: mlp is not a transformer (no attention in its "
               "repeated layers)");
}

// A space with nothing the target runs as planned: tp with pipeline stages, for DeepSpeed.
TEST_F(AutotuneErrors, ExportOfASpaceTheTargetCannotRun) {
  expect_error("gpt-tiny", "mesh: {tp: [2], pp: [2], dp: auto}\nbatch: {micro: [1]}\n",
               {"--export", "deepspeed", "--simulate-top", "0"},
               "autopar: error: space.yaml: every scheme of the space was left out (1 "
               "configuration) (among the schemes deepspeed runs as planned; --export-any "
               "searches them all)");
}

TEST_F(AutotuneErrors, ExportAnyWithoutATarget) {
  expect_error("gpt-tiny", "mesh: {tp: [1], pp: [1]}\n", {"--export-any"},
               "autopar: error: --export-any: only with --export");
}

TEST_F(AutotuneErrors, UnknownExportTarget) {
  expect_error("gpt-tiny", "mesh: {tp: [1], pp: [1]}\n", {"--export", "jax"},
               "autopar: error: --export jax: expected megatron, deepspeed or torchtitan");
}

TEST_F(AutotuneErrors, MeasuringMoreDevicesThanCores) {
  expect_error("gpt-tiny", "mesh: {tp: [1], pp: [1]}\n", {"--measure-top", "1"},
               "autopar: error: --measure-top: the plans need 8 devices and this machine runs at "
               "most " +
                   std::to_string(std::max(1u, std::thread::hardware_concurrency())) +
                   " (one per core); measure with a calibrated cpu-local profile and --nodes 1");
}

// A plan to measure that needs more memory than this machine has is refused before its weights
// are made: gpt3-175b on one device of a profile with 10 PB of device memory.
TEST_F(AutotuneErrors, MeasuringAPlanTooLargeForThisMachine) {
  std::ifstream in(dir_ + "/hw.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string profile = text.str();
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"devices_per_node: 8", "devices_per_node: 1"},
        {"devices_per_group: 8", "devices_per_group: 1"},
        {"memory_bytes: 80e9", "memory_bytes: 1e16"}}) {
    const size_t at = profile.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    profile.replace(at, from.size(), to);
  }
  std::ofstream(dir_ + "/hw.yaml") << profile;
  std::ofstream(dir_ + "/space.yaml") << "mesh: {tp: [1], pp: [1]}\nrecompute: [none]\n";
  const testing::CommandResult r = testing::run_autopar(
      {"autotune", "gpt3-175b", "--hw", "hw.yaml", "--space", "space.yaml", "--batch", "1",
       "--measure-top", "1", "--simulate-top", "0", "-o", "plan"},
      dir_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(std::regex_match(
      r.err, std::regex("autopar: error: --measure-top: measuring the plan needs about "
                        "[0-9]+\\.[0-9] GiB \\(1 device in this process: state and activations "
                        "[0-9]+\\.[0-9] GiB; the model's weights 650\\.5 GiB\\) and this "
                        "machine has [0-9]+\\.[0-9] GiB available\n")))
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/plan"));
}

TEST_F(AutotuneErrors, MissingSpaceFile) {
  const testing::CommandResult r = testing::run_autopar(
      {"autotune", "gpt-tiny", "--hw", "hw.yaml", "--space", "none.yaml"}, dir_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "autopar: error: none.yaml: cannot read the search space\n");
}

TEST_F(AutotuneErrors, NegativeThreads) {
  expect_error("gpt-tiny", "mesh: {dp: auto}\n", {"--threads", "-1"},
               "autopar: error: --threads -1: must be 1 or more (0: every core)");
}

}  // namespace
}  // namespace autopar
