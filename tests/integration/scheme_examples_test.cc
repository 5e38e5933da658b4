// Every example scheme in configs/schemes/ transforms gpt-tiny into a plan that verifies
// against one device; a bf16 plan trains like its fp32 twin.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace autopar {
namespace {

TEST(SchemeExamples, LowerAndVerifyOnGptTiny) {
  const std::filesystem::path dir = testing::source_path("configs/schemes");
  const std::string work = testing::temp_dir("scheme_examples");
  int verified = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string plan = work + "/" + entry.path().stem().string();
    auto t = testing::run_autopar(
        {"transform", "gpt-tiny", "--scheme", entry.path().string(), "-o", plan});
    ASSERT_EQ(t.exit_code, 0) << entry.path() << ": " << t.err;
    auto v = testing::run_autopar({"verify", plan, "--json"});
    ASSERT_EQ(v.exit_code, 0) << entry.path() << ": " << v.out << v.err;
    EXPECT_TRUE(nlohmann::json::parse(v.out)["ok"].get<bool>()) << entry.path() << v.out;
    ++verified;
  }
  EXPECT_EQ(verified, 9);
}

// Mixed precision: bf16 arithmetic, fp32 master weights. The first step's loss matches the
// fp32 plan's to bf16 accuracy and differs from it (the arithmetic is bf16).
TEST(SchemeExamples, Bf16PlanTracksItsFp32Twin) {
  const std::string work = testing::temp_dir("bf16_twin");
  std::vector<double> first_loss;
  for (const char* precision : {"fp32", "bf16"}) {
    const std::string scheme = work + "/" + precision + ".yaml";
    std::ofstream(scheme)
        << "mesh: {pp: 2, dp: 2, tp: 2}\nbatch: {global: 8, micro: 2}\nprecision: " << precision
        << "\n";
    const std::string plan = work + "/" + precision;
    auto t = testing::run_autopar({"transform", "gpt-tiny", "--scheme", scheme, "-o", plan});
    ASSERT_EQ(t.exit_code, 0) << t.err;
    auto r = testing::run_autopar({"run", plan, "--steps", "2", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto json = nlohmann::json::parse(r.out);
    first_loss.push_back(json["losses"][0].get<double>());
    // The median step leaves the warm-up out: one of the steps, below their sum.
    EXPECT_GT(json["median_step_s"].get<double>(), 0.0);
    EXPECT_LT(json["median_step_s"].get<double>(), json["seconds"].get<double>());
    // One step timed: its 10th percentile is that step too.
    EXPECT_EQ(json["p10_step_s"].get<double>(), json["median_step_s"].get<double>());
  }
  EXPECT_NEAR(first_loss[1], first_loss[0], 2e-2 * first_loss[0]);
  EXPECT_NE(first_loss[1], first_loss[0]);
}

}  // namespace
}  // namespace autopar
