// autopar autotune end to end: the JSON a user or CI reads, the plan directory it writes
// (which verifies against one device), the report and trace, and the export to Megatron-LM.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace autopar {
namespace {

TEST(AutotuneCli, BestPlanIsWrittenAndVerifies) {
  const std::string dir = testing::temp_dir("autotune_cli");
  std::ofstream(dir + "/space.yaml")
      << "mesh: {tp: [1, 2], pp: auto, dp: auto}\nbatch: {micro: [1, 2]}\n"
         "pipeline: {schedules: [1f1b, interleaved], chunks: [1, 2]}\nzero: [0, 1]\n";
  const std::string profile = testing::source_path("tests/data/hw/fixture.yaml");
  auto r = testing::run_autopar({"autotune", "gpt-tiny", "--hw", profile, "--space",
                                 dir + "/space.yaml", "--batch", "16", "-o", dir + "/plan", "--top",
                                 "3", "--simulate-top", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out);
  for (const char* key : {"best", "top", "baselines", "candidates_evaluated", "search_time_s"})
    EXPECT_TRUE(json.contains(key)) << key;
  for (const char* key : {"scheme", "step_time_s", "peak_memory_bytes", "mfu"})
    EXPECT_TRUE(json["best"].contains(key)) << key;
  EXPECT_EQ(json["top"].size(), 3u);
  EXPECT_EQ(json["devices"].get<int>(), 8);
  EXPECT_GT(json["candidates_evaluated"].get<int>(), 10);
  // The best two were re-scored by simulating their plans; the best's time is its simulation.
  EXPECT_TRUE(json["best"].contains("simulated_step_time_s"));
  EXPECT_EQ(json["best"]["step_time_s"], json["best"]["simulated_step_time_s"]);
  EXPECT_LE(json["top"][0]["step_time_s"].get<double>(),
            json["top"][1]["step_time_s"].get<double>());
  ASSERT_EQ(json["baselines"].size(), 2u);
  EXPECT_EQ(json["baselines"][0]["name"], "data parallel");
  EXPECT_EQ(json["baselines"][1]["name"], "megatron");
  for (const char* file :
       {"manifest.yaml", "role_0.onnx", "trace.json", "report.md", "scheme.yaml"})
    EXPECT_TRUE(std::filesystem::exists(dir + "/plan/" + file)) << file;
  std::ifstream report(dir + "/plan/report.md");
  std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("Baselines"), std::string::npos);
  EXPECT_NE(text.find("faster"), std::string::npos);

  // The plan autotune chose computes what one device computes.
  auto v = testing::run_autopar({"verify", dir + "/plan"});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
}

TEST(AutotuneCli, ExportsMegatronArguments) {
  const std::string dir = testing::temp_dir("autotune_export");
  std::ofstream(dir + "/space.yaml") << "mesh: {tp: [2], pp: [2], dp: auto}\nbatch: {micro: [1]}\n"
                                        "recompute: [full]\nprecision: [bf16]\n";
  const std::string profile = testing::source_path("tests/data/hw/fixture.yaml");
  auto r = testing::run_autopar({"autotune", "gpt-tiny", "--hw", profile, "--space",
                                 dir + "/space.yaml", "--batch", "16", "-o", dir + "/plan",
                                 "--simulate-top", "0", "--export", "megatron"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* arg : {"--num-layers 4", "--hidden-size 64", "--tensor-model-parallel-size 2",
                          "--pipeline-model-parallel-size 2", "--micro-batch-size 1",
                          "--global-batch-size 16", "--recompute-granularity full", "--bf16"})
    EXPECT_NE(r.out.find(arg), std::string::npos) << arg << "\n" << r.out;

  // DeepSpeed's pipeline engine does not combine with AutoTP: pipeline and data parallelism.
  std::ofstream(dir + "/pipeline.yaml") << "mesh: {tp: [1], pp: [2], dp: auto}\n"
                                           "batch: {micro: [1]}\nrecompute: [full]\n"
                                           "precision: [bf16]\n";
  auto d = testing::run_autopar({"autotune", "gpt-tiny", "--hw", profile, "--space",
                                 dir + "/pipeline.yaml", "--batch", "16", "-o", dir + "/plan2",
                                 "--simulate-top", "0", "--export", "deepspeed", "--json"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const auto json = nlohmann::json::parse(d.out);
  const std::string config = json["export"]["text"].get<std::string>();
  EXPECT_NE(config.find("\"train_micro_batch_size_per_gpu\": 1"), std::string::npos) << config;
  // 16 samples over dp 4, one per microbatch.
  EXPECT_NE(config.find("\"gradient_accumulation_steps\": 4"), std::string::npos) << config;
  EXPECT_NE(config.find("\"activation_checkpoint_interval\": 1"), std::string::npos) << config;
  // The same space with tp 2 holds nothing DeepSpeed runs as planned.
  auto none = testing::run_autopar({"autotune", "gpt-tiny", "--hw", profile, "--space",
                                    dir + "/space.yaml", "--batch", "16", "-o", dir + "/plan3",
                                    "--simulate-top", "0", "--export", "deepspeed"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("among the schemes deepspeed runs as planned"), std::string::npos)
      << none.err;
}

}  // namespace
}  // namespace autopar
