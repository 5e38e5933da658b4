// The analytic estimate's speed on gpt3-175b over 1024 devices (128 dgx-a100-80g nodes): the
// layer costs of one SPMD configuration (lowered once, shared by every candidate with that
// mesh, batch, tensor strategy, ZeRO stage and precision), and the closed forms a search
// evaluates per candidate, reported as candidates per second on one thread.
#include <benchmark/benchmark.h>

#include <memory>

#include "autopar/cost/estimate.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

constexpr const char* kScheme =
    "mesh: {pp: 8, dp: 16, tp: 8}\nbatch: {global: 1536, micro: 1}\nprecision: bf16\n";

StatusOr<std::unique_ptr<Estimator>> gpt3_estimator() {
  ASSIGN_OR_RETURN(HardwareProfile profile,
                   read_hardware_profile("dgx-a100-80g", AUTOPAR_CONFIG_DIR "/hw"));
  profile.nodes = 128;
  ModelAt model_at = [](int64_t batch) -> StatusOr<Graph> {
    ZooOptions options;
    options.with_weights = false;
    options.batch = batch;
    return build_zoo_model("gpt3-175b", options);
  };
  LoweringOptions options;
  options.loss.kind = LossKind::kCrossEntropy;
  return std::make_unique<Estimator>(model_at, options, profile);
}

void BM_LayerCosts(benchmark::State& state) {
  auto scheme = parse_scheme(kScheme, "scheme");
  for (auto _ : state) {
    auto estimator = gpt3_estimator();
    auto costs = (*estimator)->layer_costs(*scheme);
    if (!costs.is_ok()) {
      state.SkipWithError(costs.status().message().c_str());
      return;
    }
    benchmark::DoNotOptimize(*costs);
  }
}
BENCHMARK(BM_LayerCosts)->Unit(benchmark::kSecond)->Iterations(1);

void BM_Candidates(benchmark::State& state) {
  auto estimator = gpt3_estimator();
  auto base = parse_scheme(kScheme, "scheme");
  auto costs = (*estimator)->layer_costs(*base);
  if (!costs.is_ok()) {
    state.SkipWithError(costs.status().message().c_str());
    return;
  }
  // Candidates sharing the configuration: schedules, chunks, recompute and microbatch counts.
  std::vector<Scheme> candidates;
  for (const int64_t global : {768, 1536, 3072}) {
    for (const Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      for (const auto& [schedule, chunks] :
           std::vector<std::pair<PipelineSchedule, int64_t>>{
               {PipelineSchedule::kGpipe, 1},
               {PipelineSchedule::kOneForwardOneBackward, 1},
               {PipelineSchedule::kInterleaved, 2},
               {PipelineSchedule::kInterleaved, 4}}) {
        Scheme s = *base;
        s.global_batch = global;
        s.recompute = recompute;
        s.schedule = schedule;
        s.chunks = chunks;
        candidates.push_back(s);
      }
    }
  }
  size_t i = 0;
  double best = 1e300;
  for (auto _ : state) {
    auto e = (*estimator)->combine(**costs, candidates[i++ % candidates.size()]);
    best = std::min(best, e->step_time_s);
    benchmark::DoNotOptimize(best);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["best_step_s"] = best;
}
BENCHMARK(BM_Candidates);

}  // namespace
}  // namespace autopar
