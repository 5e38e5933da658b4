// Lowering speed and memory: a scheme for 1024 devices over gpt3-175b (shape-only) must lower
// in seconds and well under 4 GiB; peak resident memory is reported as a counter.
#include <sys/resource.h>

#include <benchmark/benchmark.h>

#include "autopar/parallel/lowering.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

double peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

void BM_Lower(benchmark::State& state, const char* model, const char* scheme_yaml) {
  auto scheme = parse_scheme(scheme_yaml, "scheme");
  if (!scheme.is_ok()) {
    state.SkipWithError(scheme.status().message().c_str());
    return;
  }
  ZooOptions options;
  options.with_weights = false;
  options.batch = scheme->dp() * scheme->micro_batch;
  auto graph = build_zoo_model(model, options);
  if (!graph.is_ok()) {
    state.SkipWithError(graph.status().message().c_str());
    return;
  }
  int64_t nodes = 0, roles = 0;
  for (auto _ : state) {
    auto plan = lower(*graph, *scheme, LoweringOptions{});
    if (!plan.is_ok()) {
      state.SkipWithError(plan.status().message().c_str());
      return;
    }
    nodes = 0;
    for (const Role& r : plan->roles) nodes += r.graph.num_nodes();
    roles = static_cast<int64_t>(plan->roles.size());
    benchmark::DoNotOptimize(nodes);
  }
  state.counters["role_nodes"] = static_cast<double>(nodes);
  state.counters["roles"] = static_cast<double>(roles);
  state.counters["peak_rss_GiB"] = peak_resident_bytes() / (1024.0 * 1024.0 * 1024.0);
}

BENCHMARK_CAPTURE(BM_Lower, gpt3_175b_pp8_dp16_tp8, "gpt3-175b",
                  "mesh: {pp: 8, dp: 16, tp: 8}\nbatch: {global: 1536, micro: 1}\n")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Lower, gpt2_small_pp2_dp4_tp4_zero1, "gpt2-small",
                  "mesh: {pp: 2, dp: 4, tp: 4}\nbatch: {global: 64, micro: 2}\nzero: 1\n")
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace autopar
