// autopar estimate: the JSON keys the search and users read, agreement with simulate on the
// same scheme, and infeasible schemes with their reason.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace autopar {
namespace {

TEST(EstimateCli, JsonKeysAndAgreementWithSimulate) {
  const std::string dir = testing::temp_dir("estimate_cli");
  std::ofstream(dir + "/s.yaml") << "mesh: {pp: 2, dp: 2, tp: 2}\nbatch: {global: 16, micro: 2}\n";
  const std::string profile = testing::source_path("tests/data/hw/fixture.yaml");
  auto e = testing::run_autopar(
      {"estimate", "gpt-tiny", "--scheme", dir + "/s.yaml", "--hw", profile, "--json"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto json = nlohmann::json::parse(e.out);
  for (const char* key : {"step_time_s", "peak_memory_bytes", "memory_bytes_per_device", "feasible",
                          "mfu", "breakdown"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  for (const char* key : {"compute_s", "exposed_comm_s", "bubble_s", "optimizer_s", "paradigm_s"}) {
    EXPECT_TRUE(json["breakdown"].contains(key)) << key;
  }
  EXPECT_EQ(json["memory_bytes_per_device"].size(), 2u);  // one per pipeline rank
  EXPECT_TRUE(json["feasible"].get<bool>());
  EXPECT_EQ(json["devices"].get<int>(), 8);
  EXPECT_GT(json["breakdown"]["bubble_s"].get<double>(), 0.0);  // two pipeline stages
  // The built-in paradigms have no terms of their own (Paradigm::estimate).
  EXPECT_EQ(json["breakdown"]["paradigm_s"].get<double>(), 0.0);

  ASSERT_EQ(testing::run_autopar(
                {"transform", "gpt-tiny", "--scheme", dir + "/s.yaml", "-o", dir + "/plan"})
                .exit_code,
            0);
  auto s = testing::run_autopar({"simulate", dir + "/plan", "--hw", profile, "--json"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const double simulated = nlohmann::json::parse(s.out)["step_time_s"].get<double>();
  EXPECT_NEAR(json["step_time_s"].get<double>() / simulated, 1.0, 0.05);

  auto text =
      testing::run_autopar({"estimate", "gpt-tiny", "--scheme", dir + "/s.yaml", "--hw", profile});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("step "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("peak memory"), std::string::npos) << text.out;
}

// MFU is the model's FLOPs over the device's dense bf16 peak whatever the plan computes in:
// an fp32 and a bf16 scheme compare by it (312 TFLOP/s per A100).
TEST(EstimateCli, MfuIsAgainstTheDenseBf16PeakInEveryPrecision) {
  const std::string dir = testing::temp_dir("estimate_mfu");
  for (const char* precision : {"fp32", "bf16"}) {
    std::ofstream(dir + "/" + precision + ".yaml")
        << "mesh: {dp: 2, tp: 4}\nbatch: {global: 16}\nprecision: " << precision << "\n";
    auto e =
        testing::run_autopar({"estimate", "gpt-tiny", "--scheme", dir + "/" + precision + ".yaml",
                              "--hw", "dgx-a100-80g", "--json"});
    ASSERT_EQ(e.exit_code, 0) << e.err;
    const auto json = nlohmann::json::parse(e.out);
    const double flops = json["model_flops"].get<double>();
    const double step = json["step_time_s"].get<double>();
    EXPECT_NEAR(json["mfu"].get<double>(), flops / (312e12 * 8 * step), 1e-12) << precision;
  }
}

// The attention kernel follows the profile (dgx-a100-80g: unfused, dgx-h100: flash) unless the
// scheme names one. gpt2-small (12 layers, 12 heads, 1024 positions, head dim 64), 8 sequences
// per device in bf16: FlashAttention holds no softmax output (b·h·s² per layer) but its output
// and log-sum-exp (b·h·s·d and b·h·s) for its backward, 2 bytes each, so the peak falls by
// exactly 12 · 2 · b·h·s·(s − d − 1) bytes, and the step is faster.
TEST(EstimateCli, FlashAttentionHoldsNoScoresAndFollowsTheProfile) {
  const std::string dir = testing::temp_dir("estimate_flash");
  const std::string base = "mesh: {dp: 8}\nbatch: {global: 64, micro: 8}\nprecision: bf16\n";
  std::ofstream(dir + "/default.yaml") << base;
  std::ofstream(dir + "/flash.yaml") << base << "kernels: {attention: flash}\n";
  std::ofstream(dir + "/unfused.yaml") << base << "kernels: {attention: unfused}\n";
  auto estimate = [&](const char* hw, const char* scheme) {
    auto e = testing::run_autopar(
        {"estimate", "gpt2-small", "--scheme", dir + "/" + scheme + ".yaml", "--hw", hw, "--json"});
    EXPECT_EQ(e.exit_code, 0) << e.err;
    const auto json = nlohmann::json::parse(e.out);
    return std::pair{json["peak_memory_bytes"].get<double>(), json["step_time_s"].get<double>()};
  };
  const auto a100 = estimate("dgx-a100-80g", "default");
  const auto a100_flash = estimate("dgx-a100-80g", "flash");
  EXPECT_EQ(estimate("dgx-a100-80g", "unfused"), a100);
  const double b = 8, h = 12, s = 1024, d = 64;
  EXPECT_EQ(a100.first - a100_flash.first, 12 * 2 * b * h * s * (s - d - 1));
  EXPECT_LT(a100_flash.second, a100.second);
  const auto h100 = estimate("dgx-h100", "default");
  EXPECT_EQ(estimate("dgx-h100", "flash"), h100);
  EXPECT_EQ(h100.first, a100_flash.first);
  EXPECT_EQ(estimate("dgx-h100", "unfused").first, a100.first);
}

TEST(EstimateCli, OverCapacityIsInfeasible) {
  const std::string dir = testing::temp_dir("estimate_cli_infeasible");
  // gpt2-small with Adam on one device of a profile with 3 GB free: 124M parameters need 2 GB of
  // state alone, and a batch of 64 sequences of 1024 tokens much more.
  std::ofstream(dir + "/s.yaml") << "mesh: {dp: 1}\nbatch: {global: 64, micro: 64}\n";
  std::ifstream in(testing::source_path("tests/data/hw/fixture.yaml"));
  std::string profile((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = profile.find("memory_bytes: 80e9");
  ASSERT_NE(at, std::string::npos);
  profile.replace(at, 18, "memory_bytes: 5e9");
  std::ofstream(dir + "/small.yaml") << profile;
  auto e = testing::run_autopar({"estimate", "gpt2-small", "--scheme", dir + "/s.yaml", "--hw",
                                 dir + "/small.yaml", "--json"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto json = nlohmann::json::parse(e.out);
  EXPECT_FALSE(json["feasible"].get<bool>());
  EXPECT_NE(json["reason"].get<std::string>().find("pipeline rank 0 needs"), std::string::npos)
      << json["reason"];
  EXPECT_GT(json["peak_memory_bytes"].get<double>(), 5e9);
}

}  // namespace
}  // namespace autopar
