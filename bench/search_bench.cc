// Search speed: the default space on gpt2-small over one dgx-a100-80g node, gpt3-175b over
// 1024 devices, a 1-trillion-parameter GPT over 3072 devices, and how search time grows with
// layers and devices. Each iteration searches from a fresh estimator (nothing cached) and
// scores candidates analytically (no simulator re-scoring); counters report candidates per
// second and the configurations lowered.
#include <benchmark/benchmark.h>

#include "autopar/search/engine.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

struct Model {
  const char* name;
  ZooOptions options;
};

void BM_Search(benchmark::State& state, Model model, int64_t nodes, int64_t batch,
               const char* profile_name) {
  auto profile = read_hardware_profile(profile_name, AUTOPAR_CONFIG_DIR "/hw");
  auto space = read_search_space(AUTOPAR_CONFIG_DIR "/spaces/default.yaml");
  if (!profile.is_ok() || !space.is_ok()) {
    state.SkipWithError("cannot read the profile or the space");
    return;
  }
  profile->nodes = nodes;
  ModelAt model_at = [model](int64_t b) -> StatusOr<Graph> {
    ZooOptions options = model.options;
    options.with_weights = false;
    options.batch = b;
    return build_zoo_model(model.name, options);
  };
  auto probe = model_at(1);
  if (!probe.is_ok()) {
    state.SkipWithError(probe.status().message().c_str());
    return;
  }
  SearchProblem problem;
  problem.devices = profile->num_devices();
  problem.devices_per_node = profile->devices_per_node;
  problem.global_batch = batch;
  for (const Node& n : probe->nodes()) problem.layers = std::max(problem.layers, n.layer + 1);
  problem.parameters = static_cast<double>(probe->num_parameter_elements());
  LoweringOptions options;
  options.loss.kind = LossKind::kCrossEntropy;
  SearchOptions search_options;
  search_options.simulate_top = 0;
  SearchResult last;
  for (auto _ : state) {
    Estimator estimator(model_at, options, *profile);
    auto result = search(*space, problem, estimator, search_options);
    if (!result.is_ok()) {
      state.SkipWithError(result.status().message().c_str());
      return;
    }
    last = std::move(result).value();
  }
  state.counters["candidates"] = static_cast<double>(last.candidates_evaluated);
  state.counters["candidates_per_s"] =
      static_cast<double>(last.candidates_evaluated) / last.search_time_s;
  state.counters["configurations"] = static_cast<double>(last.configurations);
  state.counters["layers"] = problem.layers;
  state.counters["devices"] = static_cast<double>(problem.devices);
  state.counters["best_step_s"] = last.top.front().step_s();
  state.counters["best_mfu"] = last.top.front().estimate.mfu;
}

ZooOptions gpt(int64_t layers, int64_t hidden, int64_t heads) {
  ZooOptions o;
  o.layers = layers;
  o.hidden = hidden;
  o.heads = heads;
  o.seq = 2048;
  o.vocab = 51200;
  return o;
}

BENCHMARK_CAPTURE(BM_Search, gpt2_small_8_devices, Model{"gpt2-small", {}}, 1, 64,
                  "dgx-a100-80g")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Search, gpt3_175b_1024_devices, Model{"gpt3-175b", {}}, 128, 1536,
                  "dgx-a100-80g")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
// 1T parameters: 128 layers of width 25600 (Narayanan et al. 2021's largest configuration).
BENCHMARK_CAPTURE(BM_Search, gpt_1t_3072_devices, Model{"gpt", gpt(128, 25600, 160)}, 384, 3072,
                  "dgx-a100-80g")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
// Growth with layers (GPT-3 13B's width on 64 devices) and with devices (gpt3-13b).
BENCHMARK_CAPTURE(BM_Search, layers_20, Model{"gpt", gpt(20, 5120, 40)}, 8, 512, "dgx-a100-80g")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Search, layers_40, Model{"gpt", gpt(40, 5120, 40)}, 8, 512, "dgx-a100-80g")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Search, layers_80, Model{"gpt", gpt(80, 5120, 40)}, 8, 512, "dgx-a100-80g")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Search, devices_8, Model{"gpt3-13b", {}}, 1, 512, "dgx-a100-80g")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Search, devices_64, Model{"gpt3-13b", {}}, 8, 512, "dgx-a100-80g")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Search, devices_512, Model{"gpt3-13b", {}}, 64, 512, "dgx-a100-80g")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace
}  // namespace autopar
