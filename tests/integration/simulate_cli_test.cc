// autopar simulate on a plan and the fixture profile: the JSON keys, a trace, and the errors.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace autopar
