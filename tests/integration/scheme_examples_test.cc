// Every example scheme in configs/schemes/ transforms gpt-tiny and llama-tiny into plans that
// verify against one device; a bf16 plan trains like its fp32 twin.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace autopar {
namespace {

// Transforms `model` under every example scheme and verifies each plan; returns how many.
int lower_and_verify_examples(const std::string& model) {
  const std::filesystem::path dir = testing::source_path("configs/schemes");
  const std::string work =
      testing::temp_dir("scheme_examples_" + std::filesystem::path(model).stem().string());
  int verified = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string plan = work + "/" + entry.path().stem().string();
    auto t =
        testing::run_autopar({"transform", model, "--scheme", entry.path().string(), "-o", plan});
    EXPECT_EQ(t.exit_code, 0) << entry.path() << ": " << t.err;
    if (t.exit_code != 0) continue;
    auto v = testing::run_autopar({"verify", plan, "--json"});
    EXPECT_EQ(v.exit_code, 0) << entry.path() << ": " << v.out << v.err;
    if (v.exit_code != 0) continue;
    const auto json = nlohmann::json::parse(v.out);
    EXPECT_TRUE(json["ok"].get<bool>()) << entry.path() << v.out;
    verified += json["ok"].get<bool>() ? 1 : 0;
  }
  return verified;
}

TEST(SchemeExamples, LowerAndVerifyOnGptTiny) {
  EXPECT_EQ(lower_and_verify_examples("gpt-tiny"), 12);
}

// gpt-tiny with dropout 0.1 (after the embeddings, on the attention probabilities, on the
// attention and MLP outputs): each device draws its shard's part of the single device's masks,
// by the elements' places in the whole tensors, so every plan still verifies exactly — over
// data and tensor parallelism, sequence shards, ring attention's chunk pairs, microbatches,
// pipelines and the recomputed Dropouts of the recompute policies.
TEST(SchemeExamples, LowerAndVerifyOnGptTinyWithDropout) {
  const std::string model = testing::temp_dir("scheme_examples_dropout") + "/gpt-dropout.onnx";
  auto z =
      testing::run_autopar({"zoo", "gpt-tiny", "--dropout", "0.1", "--with-weights", "-o", model});
  ASSERT_EQ(z.exit_code, 0) << z.err;
  EXPECT_EQ(lower_and_verify_examples(model), 12);
}

// llama-tiny (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, untied head) under
// the same schemes: tensor (Megatron's recipe and Megatron-SP), pipeline (1F1B, interleaved),
// data with ZeRO, attribute, context (ring and all-to-all), FlashAttention, recomputation and
// bf16.
TEST(SchemeExamples, LowerAndVerifyOnLlamaTiny) {
  EXPECT_EQ(lower_and_verify_examples("llama-tiny"), 12);
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

// The same for context parallelism on llama-tiny: ring attention (its blocks widened to fp32
// by every member alike, as other half-type ops are) and all-to-all over heads run in bf16 and
// track their fp32 twins.
TEST(SchemeExamples, Bf16ContextParallelPlansTrackTheirFp32Twins) {
  const std::string work = testing::temp_dir("bf16_context");
  for (const char* context : {"ring", "all-to-all"}) {
    std::vector<double> first_loss;
    for (const char* precision : {"fp32", "bf16"}) {
      const std::string name = std::string(context) + "_" + precision;
      const std::string scheme = work + "/" + name + ".yaml";
      std::ofstream(scheme) << "mesh: {dp: 2, cp: 2}\ncontext: " << context
                            << "\nbatch: {global: 4, micro: 1}\nprecision: " << precision << "\n";
      auto t = testing::run_autopar(
          {"transform", "llama-tiny", "--scheme", scheme, "-o", work + "/" + name});
      ASSERT_EQ(t.exit_code, 0) << t.err;
      auto r = testing::run_autopar({"run", work + "/" + name, "--steps", "1", "--json"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      first_loss.push_back(nlohmann::json::parse(r.out)["losses"][0].get<double>());
    }
    EXPECT_NEAR(first_loss[1], first_loss[0], 2e-2 * first_loss[0]) << context;
    EXPECT_NE(first_loss[1], first_loss[0]) << context;
  }
}

}  // namespace
}  // namespace autopar
