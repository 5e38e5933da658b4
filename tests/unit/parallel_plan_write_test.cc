// write_plan replaces a plan as a whole: a write that fails part-way (faults injected before a
// file is written or takes its name) leaves the earlier plan, or no plan, never a manifest
// beside another plan's role files.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "autopar/ir/builder.h"
#include "autopar/parallel/lowering.h"
#include "testing/testing.h"

namespace autopar {
namespace {

namespace fs = std::filesystem;

Plan plan_of(const std::string& yaml) {
  auto scheme = parse_scheme(yaml, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  LoweringOptions options;
  options.loss.kind = LossKind::kMse;
  options.optimizer.kind = OptimizerKind::kSgd;
  auto plan = lower(testing::two_layer_mlp(true), *scheme, options);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  return std::move(plan).value();
}

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The names in `dir`, sorted.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class PlanWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("autopar_plan_write_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

Status fail_on(const std::string& file, const std::string& at) {
  return file == at ? error("{}: injected failure", file) : Status::ok();
}

TEST_F(PlanWrite, AFailedWriteLeavesTheEarlierPlan) {
  const Plan two = plan_of("mesh: {pp: 2}\nbatch: {global: 4, micro: 2}\n");
  const Plan one = plan_of("mesh: {dp: 2}\nbatch: {global: 4}\n");
  ASSERT_TRUE(write_plan(two, dir_.string()).is_ok());
  const std::string manifest = contents(dir_ / "manifest.yaml");
  const std::string role1 = contents(dir_ / "role_1.onnx");
  // Writing the other plan fails at its README, before any file takes its name.
  PlanWriteOptions options;
  options.before_write = [](const std::string& file) { return fail_on(file, "README.md"); };
  EXPECT_FALSE(write_plan(one, dir_.string(), options).is_ok());
  EXPECT_EQ(files_in(dir_),
            (std::vector<std::string>{"README.md", "manifest.yaml", "role_0.onnx", "role_1.onnx"}));
  EXPECT_EQ(contents(dir_ / "manifest.yaml"), manifest);
  EXPECT_EQ(contents(dir_ / "role_1.onnx"), role1);
  auto read = read_plan_manifest(dir_.string());
  ASSERT_TRUE(read.is_ok()) << read.status().message();
  EXPECT_EQ(read->roles, 2);
}

TEST_F(PlanWrite, AWriteStoppedWhileRenamingLeavesNoPlan) {
  const Plan two = plan_of("mesh: {pp: 2}\nbatch: {global: 4, micro: 2}\n");
  const Plan one = plan_of("mesh: {dp: 2}\nbatch: {global: 4}\n");
  ASSERT_TRUE(write_plan(two, dir_.string()).is_ok());
  // Stopped after the role file and the README took their names, before the manifest did:
  // the directory holds no manifest, so run, verify and simulate find no plan there.
  PlanWriteOptions options;
  options.before_rename = [](const std::string& file) { return fail_on(file, "manifest.yaml"); };
  EXPECT_FALSE(write_plan(one, dir_.string(), options).is_ok());
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"README.md", "role_0.onnx"}));
  auto read = read_plan_manifest(dir_.string());
  ASSERT_FALSE(read.is_ok());
  EXPECT_NE(read.status().message().find("no plan here"), std::string::npos);
  // Written again in full, the plan is whole, and nothing of the earlier one is left.
  ASSERT_TRUE(write_plan(one, dir_.string()).is_ok());
  EXPECT_EQ(files_in(dir_),
            (std::vector<std::string>{"README.md", "manifest.yaml", "role_0.onnx"}));
  auto whole = read_plan_manifest(dir_.string());
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  EXPECT_EQ(whole->roles, 1);
}

}  // namespace
}  // namespace autopar
