// Time to build zoo models: shape-only giants must take milliseconds, not minutes.
#include <benchmark/benchmark.h>

#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

void BM_BuildShapeOnly(benchmark::State& state, const char* name) {
  ZooOptions options;
  options.with_weights = false;
  int64_t nodes = 0;
  for (auto _ : state) {
    auto graph = build_zoo_model(name, options);
    if (!graph.is_ok()) {
      state.SkipWithError(graph.status().message().c_str());
      return;
    }
    nodes = graph->num_nodes();
    benchmark::DoNotOptimize(nodes);
  }
  state.counters["nodes"] = static_cast<double>(nodes);
}

BENCHMARK_CAPTURE(BM_BuildShapeOnly, gpt3_175b, "gpt3-175b")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BuildShapeOnly, gpt2_small, "gpt2-small")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BuildShapeOnly, resnet152, "resnet152")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace autopar
