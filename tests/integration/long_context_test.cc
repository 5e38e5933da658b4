// Long sequences: Llama 3 8B at 128K tokens on 32 H100s fits no plan without context
// parallelism; the long-context space finds ring-attention plans, exported to Megatron-LM as
// its context parallelism, and the best one's estimate agrees with the simulation of its plan.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace autopar {
namespace {

TEST(LongContext, SearchPicksContextParallelismWhereNothingElseFits) {
  const std::string dir = testing::temp_dir("long_context");
  const std::vector<std::string> common = {"llama3-8b", "--seq",    "131072",  "--nodes", "4",
                                           "--hw",      "dgx-h100", "--batch", "8"};
  std::vector<std::string> without = {"autotune"};
  without.insert(without.end(), common.begin(), common.end());
  without.insert(without.end(), {"--space", testing::source_path("configs/spaces/transformer.yaml"),
                                 "-o", dir + "/none"});
  auto none = testing::run_autopar(without);
  EXPECT_EQ(none.exit_code, 2) << none.out;
  EXPECT_NE(none.err.find("no scheme fits in memory"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("configs/spaces/long-context.yaml"), std::string::npos) << none.err;

  std::vector<std::string> with = {"autotune"};
  with.insert(with.end(), common.begin(), common.end());
  with.insert(with.end(), {"--space", testing::source_path("configs/spaces/long-context.yaml"),
                           "-o", dir + "/plan", "--export", "megatron", "--json"});
  auto r = testing::run_autopar(with);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out);
  for (const auto& candidate : json["top"]) {
    const std::string mesh = candidate["mesh"].get<std::string>();
    EXPECT_NE(mesh.find("cp "), std::string::npos) << mesh;
    EXPECT_LE(candidate["peak_memory_bytes"].get<double>(), 79.65 * (1 << 30)) << mesh;  // H100
  }
  // The plan written runs attention as ring attention (or on heads exchanged all-to-all).
  const std::string best = json["best"]["scheme"].get<std::string>();
  EXPECT_NE(best.find("context: ring"), std::string::npos) << best;
  // Megatron-LM's context parallelism over the same ring ("p2p"), its sequence in the same
  // chunk pairs (the search kept to what Megatron-LM runs: no tensor auto or selective
  // recomputation, so cp 4 with tp 8 rather than the whole space's cp 8 with tp 4).
  const std::string mesh = json["best"]["mesh"].get<std::string>();
  const std::string cp =
      mesh.substr(mesh.find("cp ") + 3, mesh.find(" ring") - mesh.find("cp ") - 3);
  const std::string exported = json["export"]["text"].get<std::string>();
  EXPECT_NE(exported.find("--context-parallel-size " + cp + " --cp-comm-type p2p"),
            std::string::npos)
      << mesh << "\n"
      << exported;
  auto simulated = testing::run_autopar({"simulate", dir + "/plan", "--hw", "dgx-h100", "--json"});
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  const double step = nlohmann::json::parse(simulated.out)["step_time_s"].get<double>();
  EXPECT_NEAR(json["best"]["estimated_step_time_s"].get<double>() / step, 1.0, 0.05);
}

}  // namespace
}  // namespace autopar
