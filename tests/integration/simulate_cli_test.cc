// autopar simulate on a plan and the fixture profile: the JSON keys, a trace, and the errors;
// calibrate and profile on this machine.
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "autopar/cost/hardware_profile.h"
#include "testing/testing.h"

namespace autopar {
namespace {

TEST(SimulateCli, JsonAndTrace) {
  const std::string dir = testing::temp_dir("simulate_cli");
  std::ofstream(dir + "/s.yaml") << "mesh: {pp: 2, dp: 2}\nbatch: {global: 8, micro: 1}\n";
  auto t =
      testing::run_autopar({"transform", "mlp", "--scheme", dir + "/s.yaml", "-o", dir + "/plan"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::string profile = testing::source_path("tests/data/hw/fixture.yaml");
  auto s = testing::run_autopar(
      {"simulate", dir + "/plan", "--hw", profile, "--json", "--trace", dir + "/trace.json"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const auto json = nlohmann::json::parse(s.out);
  EXPECT_GT(json["step_time_s"].get<double>(), 0.0);
  EXPECT_GE(json["bubble_s"].get<double>(), 0.0);
  EXPECT_EQ(json["devices"].get<int>(), 4);
  EXPECT_EQ(json["roles"].size(), 2u);
  EXPECT_GT(json["mfu"].get<double>(), 0.0);
  EXPECT_LT(json["mfu"].get<double>(), 1.0);
  // The second stage first waits for the first one's forward: that is waiting for a stage,
  // not exposed communication (its activations' transfer is, and it is far shorter).
  const auto& last = json["roles"][1];
  EXPECT_GT(last["pipeline_wait_s"].get<double>(), 0.0);
  EXPECT_LT(last["exposed_communication_s"].get<double>(), last["pipeline_wait_s"].get<double>());
  std::ifstream in(dir + "/trace.json");
  std::stringstream trace;
  trace << in.rdbuf();
  const auto events = nlohmann::json::parse(trace.str());
  EXPECT_GT(events["traceEvents"].size(), 10u);

  auto missing = testing::run_autopar({"simulate", dir + "/plan", "--hw", "nowhere"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--hw nowhere: no such file"), std::string::npos) << missing.err;
  auto small = testing::run_autopar({"simulate", dir + "/plan", "--hw", profile, "--nodes", "0"});
  EXPECT_EQ(small.exit_code, 0) << small.err;  // 0: as many nodes as the plan needs
}

// calibrate --quick writes a profile of this machine that reads back and prices a plan.
TEST(CalibrateCli, WritesAProfileThatSimulates) {
  const std::string dir = testing::temp_dir("calibrate_cli");
  auto c = testing::run_autopar({"calibrate", "--quick", "-o", dir + "/cpu-local.yaml"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("gemm: peak"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("inproc: alpha"), std::string::npos) << c.out;
  std::ifstream in(dir + "/cpu-local.yaml");
  std::stringstream text;
  text << in.rdbuf();
  auto profile = parse_hardware_profile(text.str(), "cpu-local.yaml");
  ASSERT_TRUE(profile.is_ok()) << profile.status().message();
  EXPECT_EQ(profile->name, "cpu-local");
  EXPECT_GT(profile->device.peak("fp32"), 1e8);
  EXPECT_EQ(profile->tiers.size(), 1u);
  std::ofstream(dir + "/s.yaml") << "mesh: {dp: 2}\nbatch: {global: 4}\n";
  ASSERT_EQ(
      testing::run_autopar({"transform", "mlp", "--scheme", dir + "/s.yaml", "-o", dir + "/plan"})
          .exit_code,
      0);
  auto s =
      testing::run_autopar({"simulate", dir + "/plan", "--hw", dir + "/cpu-local.yaml", "--json"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_GT(nlohmann::json::parse(s.out)["step_time_s"].get<double>(), 0.0);
  auto bad = testing::run_autopar({"calibrate", "--backend", "gpu", "-o", dir + "/x.yaml"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "autopar: error: --backend gpu: expected cpu or cuda\n");
}

// profile runs a dp-2 plan on this machine against a quick calibration of it: the predicted and
// measured step, and their split by class, are there and are positive, finite seconds (how
// close they are depends on the machine, so it is not asserted).
TEST(ProfileCli, PredictedAndMeasuredOnACalibratedProfile) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "a dp-2 plan needs two cores";
  const std::string dir = testing::temp_dir("profile_cli");
  auto c = testing::run_autopar({"calibrate", "--quick", "-o", dir + "/cpu-local.yaml"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  std::ofstream(dir + "/s.yaml") << "mesh: {dp: 2}\nbatch: {global: 8}\n";
  auto t =
      testing::run_autopar({"transform", "mlp", "--scheme", dir + "/s.yaml", "-o", dir + "/plan"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  auto p = testing::run_autopar(
      {"profile", dir + "/plan", "--hw", dir + "/cpu-local.yaml", "--steps", "3", "--json"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto json = nlohmann::json::parse(p.out);
  auto seconds = [](const nlohmann::json& value) {
    const double s = value.get<double>();
    return std::isfinite(s) ? s : -1.0;
  };
  EXPECT_GT(seconds(json["predicted_step_s"]), 0.0);
  EXPECT_GT(seconds(json["measured_step_s"]), 0.0);
  EXPECT_EQ(json["devices"].get<int>(), 2);
  EXPECT_EQ(json["measured_steps_s"].size(), 3u);
  for (const char* op_class :
       {"gemm", "conv", "elementwise", "norm", "attention", "communication"}) {
    ASSERT_TRUE(json["by_class"].contains(op_class)) << op_class;
    EXPECT_GE(seconds(json["by_class"][op_class]["predicted_s"]), 0.0) << op_class;
    EXPECT_GE(seconds(json["by_class"][op_class]["measured_s"]), 0.0) << op_class;
  }
  // An MLP's step multiplies matrices, updates parameters and sums gradients over dp.
  for (const char* op_class : {"gemm", "elementwise", "communication"}) {
    EXPECT_GT(json["by_class"][op_class]["predicted_s"].get<double>(), 0.0) << op_class;
    EXPECT_GT(json["by_class"][op_class]["measured_s"].get<double>(), 0.0) << op_class;
  }
  auto text = testing::run_autopar(
      {"profile", dir + "/plan", "--hw", dir + "/cpu-local.yaml", "--steps", "2", "--top", "3"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("step: predicted"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("slowest nodes"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace autopar
