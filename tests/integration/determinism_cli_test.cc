// The same answer at any thread count, as a user sees it: autotune and regress with
// --threads 1 and --threads 2 print the same JSON but for wall-clock times, and write
// byte-identical plan directories (a plan's files carry no time).
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace autopar {
namespace {

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `json` without the wall-clock fields named in `times`, at any depth.
nlohmann::json without(nlohmann::json json, const std::vector<std::string>& times) {
  if (json.is_object()) {
    for (const std::string& key : times) json.erase(key);
    for (auto& [key, value] : json.items()) value = without(value, times);
  } else if (json.is_array()) {
    for (auto& value : json) value = without(value, times);
  }
  return json;
}

TEST(Determinism, AutotuneGivesTheSameAnswerAndPlanAtAnyThreadCount) {
  const std::string dir = testing::temp_dir("determinism_autotune");
  std::ofstream(dir + "/space.yaml") << "mesh: {tp: [1, 2], pp: auto, dp: auto}\n"
                                        "batch: {micro: [1, 2]}\nzero: [0, 1]\n";
  const std::string profile = testing::source_path("tests/data/hw/fixture.yaml");
  std::vector<nlohmann::json> out;
  for (const char* threads : {"1", "2"}) {
    auto r =
        testing::run_autopar({"autotune", "gpt-tiny", "--hw", profile, "--space",
                              dir + "/space.yaml", "--batch", "16", "-o", dir + "/plan" + threads,
                              "--top", "3", "--simulate-top", "2", "--json", "--threads", threads});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // (The plan directory differs by name only.)
    out.push_back(without(nlohmann::json::parse(r.out), {"search_time_s", "plan"}));
  }
  EXPECT_EQ(out[0].dump(), out[1].dump());
  EXPECT_EQ(out[0]["top"].size(), 3u);
  for (const char* file :
       {"manifest.yaml", "role_0.onnx", "README.md", "scheme.yaml", "trace.json"}) {
    const std::string one = contents(dir + "/plan1/" + file);
    EXPECT_FALSE(one.empty()) << file;
    EXPECT_EQ(one, contents(dir + "/plan2/" + file)) << file;
  }
  // The report says how long the search took; everything else in it is the same.
  const std::regex took(" in [0-9.]+ m?s");
  EXPECT_EQ(std::regex_replace(contents(dir + "/plan1/report.md"), took, ""),
            std::regex_replace(contents(dir + "/plan2/report.md"), took, ""));
}

TEST(Determinism, RegressGivesTheSameAnswerAtAnyThreadCount) {
  const std::string dir = testing::temp_dir("determinism_regress");
  std::ofstream(dir + "/space.yaml") << "mesh: {tp: [1, 2], pp: auto, dp: auto}\n"
                                        "batch: {micro: [1, 2]}\nzero: [0, 1]\n";
  std::ofstream(dir + "/suite.yaml") << "cases:\n  - {name: tiny, model: gpt-tiny, hw: "
                                     << testing::source_path("tests/data/hw/fixture.yaml")
                                     << ", nodes: 1, space: " << dir << "/space.yaml, batch: 16}\n";
  auto recorded = testing::run_autopar(
      {"regress", dir + "/suite.yaml", "--baseline", dir + "/base.json", "--update"});
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  std::vector<nlohmann::json> out;
  for (const char* threads : {"1", "2"}) {
    auto r = testing::run_autopar({"regress", dir + "/suite.yaml", "--baseline", dir + "/base.json",
                                   "--json", "--search-time", "report", "--threads", threads});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    out.push_back(without(nlohmann::json::parse(r.out), {"seconds", "search_time_s"}));
  }
  EXPECT_EQ(out[0].dump(), out[1].dump());
  EXPECT_EQ(out[0]["cases"][0]["candidates_evaluated"].get<int>(), 22);
}

}  // namespace
}  // namespace autopar
