// autopar regress end to end on a tiny suite: --update writes the baseline, a rerun passes, a
// baseline faster than the search can find fails the case by name, a slower one is reported as
// an improvement.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace autopar {
namespace {

class RegressCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    // Small enough that each search takes milliseconds, far below the search-time floor.
    std::ofstream(dir_ + "/space.yaml") << "mesh: {tp: [1, 2], pp: [1, 2], dp: auto}\n"
                                           "batch: {micro: [2]}\n"
                                           "precision: [bf16]\n";
    // The profile's path is relative to the repository root, the space's absolute.
    std::ofstream(dir_ + "/suite.yaml")
        << "cases:\n"
        << "  - {name: gpt-tiny-8, model: gpt-tiny, hw: tests/data/hw/fixture.yaml, nodes: 1, "
        << "space: " << dir_ << "/space.yaml, batch: 16}\n"
        << "  - {name: mlp-8, model: mlp, hw: tests/data/hw/fixture.yaml, nodes: 1, "
        << "space: " << dir_ << "/space.yaml, batch: 16}\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  testing::CommandResult regress(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"regress", "suite.yaml", "--baseline", "baseline.json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_autopar(args, dir_);
  }

  nlohmann::json read_baseline() {
    std::ifstream in(dir_ + "/baseline.json");
    return nlohmann::json::parse(in);
  }

  void write_baseline(const nlohmann::json& baseline) {
    std::ofstream(dir_ + "/baseline.json") << baseline.dump(2);
  }

  std::string dir_;
};

TEST_F(RegressCli, UpdateThenPassThenRegress) {
  const testing::CommandResult update = regress({"--update"});
  ASSERT_EQ(update.exit_code, 0) << update.err;
  EXPECT_NE(update.out.find("baseline written to baseline.json: 2 cases"), std::string::npos)
      << update.out;
  const nlohmann::json baseline = read_baseline();
  ASSERT_EQ(baseline.size(), 2u);
  for (const char* name : {"gpt-tiny-8", "mlp-8"}) {
    ASSERT_TRUE(baseline.contains(name)) << baseline.dump(2);
    const nlohmann::json& entry = baseline[name];
    EXPECT_GT(entry["step_time_s"].get<double>(), 0);
    EXPECT_GE(entry["search_time_s"].get<double>(), 0);
    EXPECT_NE(entry["scheme"].get<std::string>().find("mesh:"), std::string::npos);
    EXPECT_GT(entry["candidates_evaluated"].get<int64_t>(), 0);
  }

  const testing::CommandResult rerun = regress();
  ASSERT_EQ(rerun.exit_code, 0) << rerun.out << rerun.err;
  EXPECT_NE(rerun.out.find("2 cases in"), std::string::npos) << rerun.out;
  EXPECT_NE(rerun.out.find("no regression"), std::string::npos) << rerun.out;

  // The baseline claims gpt-tiny-8 runs 5% faster than the search now finds.
  nlohmann::json faster = baseline;
  faster["gpt-tiny-8"]["step_time_s"] = baseline["gpt-tiny-8"]["step_time_s"].get<double>() / 1.05;
  write_baseline(faster);
  const testing::CommandResult regressed = regress();
  EXPECT_EQ(regressed.exit_code, 1) << regressed.out << regressed.err;
  EXPECT_EQ(regressed.err, "");
  EXPECT_NE(regressed.out.find("gpt-tiny-8: regressed: best step"), std::string::npos)
      << regressed.out;
  EXPECT_NE(regressed.out.find("+5.00%"), std::string::npos) << regressed.out;
  EXPECT_NE(regressed.out.find("1 of 2 cases regressed (gpt-tiny-8)"), std::string::npos)
      << regressed.out;
  EXPECT_EQ(regressed.out.find("mlp-8: regressed"), std::string::npos) << regressed.out;

  const testing::CommandResult json = regress({"--json"});
  EXPECT_EQ(json.exit_code, 1) << json.err;
  const nlohmann::json report = nlohmann::json::parse(json.out);
  EXPECT_FALSE(report["passed"].get<bool>());
  EXPECT_EQ(report["regressed"], nlohmann::json::array({"gpt-tiny-8"}));
  ASSERT_EQ(report["cases"].size(), 2u);
  EXPECT_EQ(report["cases"][0]["verdict"], "REGRESSED");
  EXPECT_NEAR(report["cases"][0]["step_change"].get<double>(), 0.05, 1e-9);
  EXPECT_EQ(report["cases"][1]["verdict"], "pass");
}

TEST_F(RegressCli, SlowerBaselineIsAnImprovement) {
  ASSERT_EQ(regress({"--update"}).exit_code, 0);
  nlohmann::json slower = read_baseline();
  slower["mlp-8"]["step_time_s"] = slower["mlp-8"]["step_time_s"].get<double>() * 1.05;
  write_baseline(slower);
  const testing::CommandResult r = regress();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("improved"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mlp-8: best step"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace autopar
