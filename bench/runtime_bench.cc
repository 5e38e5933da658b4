// CPU runtime speed: GEMM against Eigen's own GEMM on the same shapes and threads, Conv,
// Softmax, LayerNorm, and whole training steps of gpt-tiny and resnet-tiny, in GFLOP/s.
#include <random>

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/builder.h"
#include "autopar/ops/op_def.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

TensorPtr random_tensor(const std::vector<int64_t>& dims, uint64_t seed) {
  Tensor t(DType::kFloat32, dims);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : t.mutable_data<float>()) v = uniform(rng);
  return std::make_shared<const Tensor>(std::move(t));
}

// One node over graph inputs of the given shapes, run repeatedly; reports GFLOP/s.
void run_node(benchmark::State& state, const std::string& op,
              std::vector<std::vector<int64_t>> shapes, Attributes attrs, int threads) {
  GraphBuilder b("bench");
  std::vector<ValueId> inputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    inputs.push_back(b.input(fmt::format("in{}", i), DType::kFloat32, shapes[i]));
  }
  const ValueId y = b.op1(op, inputs, std::move(attrs));
  b.output(y, "y");
  Graph g = b.finish();
  const double flops = node_flops(g, g.node(0));
  runtime::ExecutorOptions options;
  options.num_threads = threads;
  auto executor = runtime::Executor::create(std::move(g), options);
  if (!executor.is_ok()) {
    state.SkipWithError(executor.status().message().c_str());
    return;
  }
  std::vector<TensorPtr> feeds;
  for (size_t i = 0; i < shapes.size(); ++i) feeds.push_back(random_tensor(shapes[i], i + 1));
  for (auto _ : state) {
    auto out = executor->run_inputs(feeds);
    benchmark::DoNotOptimize(out);
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Gemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  run_node(state, "MatMul", {{n, n}, {n, n}}, {}, static_cast<int>(state.range(1)));
}

// Eigen's own single-threaded GEMM on the same shape: the reference for the GEMM path.
void BM_EigenGemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_BatchedMatMul(benchmark::State& state) {
  run_node(state, "MatMul", {{8, 4, 128, 64}, {8, 4, 64, 128}}, {},
           static_cast<int>(state.range(0)));
}

void BM_Conv(benchmark::State& state) {
  run_node(state, "Conv", {{8, 64, 56, 56}, {64, 64, 3, 3}},
           {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}, static_cast<int>(state.range(0)));
}

void BM_Softmax(benchmark::State& state) {
  run_node(state, "Softmax", {{64, 12, 128, 128}}, {{"axis", int64_t{-1}}},
           static_cast<int>(state.range(0)));
}

void BM_LayerNorm(benchmark::State& state) {
  run_node(state, "LayerNormalization", {{64, 128, 768}, {768}, {768}}, {{"axis", int64_t{-1}}},
           static_cast<int>(state.range(0)));
}

// One training step (forward, loss, backward, Adam) of a tiny zoo model; GFLOP/s counts the
// graph's FLOPs, and gemm_share the fraction of node time spent in MatMul, Gemm and Conv.
void BM_TrainingStep(benchmark::State& state, const char* name) {
  ZooOptions zoo;
  zoo.batch = state.range(1);
  zoo.with_weights = true;
  auto model = build_zoo_model(name, zoo);
  auto training = model.is_ok() ? build_training_graph(*model, {default_loss(*model), ""}, {})
                                : StatusOr<TrainingGraph>(model.status());
  if (!training.is_ok()) {
    state.SkipWithError(training.status().message().c_str());
    return;
  }
  const Graph& g = training->graph;
  double flops = 0;
  for (const Node& n : g.nodes()) flops += node_flops(g, n);
  runtime::ExecutorOptions options;
  options.num_threads = static_cast<int>(state.range(0));
  options.profile = true;
  auto executor = runtime::Executor::create(g, options);
  if (!executor.is_ok()) {
    state.SkipWithError(executor.status().message().c_str());
    return;
  }
  std::vector<runtime::Feed> feeds;
  const std::vector<TensorPtr> inputs = runtime::synthetic_inputs(*model, 1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    feeds.emplace_back(*g.find_value(model->value(model->inputs()[i]).name), inputs[i]);
  }
  const Value& labels = g.value(training->labels);
  Tensor label_data(labels.dtype, labels.shape.dims);
  const int64_t classes = model->value(model->outputs()[0]).shape.dims.back();
  std::mt19937_64 rng(2);
  for (int64_t i = 0; i < label_data.num_elements(); ++i) {
    label_data.set_from_int(i, std::uniform_int_distribution<int64_t>(0, classes - 1)(rng));
  }
  feeds.emplace_back(training->labels, std::make_shared<const Tensor>(std::move(label_data)));
  double gemm_seconds = 0, all_seconds = 0;
  std::map<std::string, double> by_op;
  for (auto _ : state) {
    runtime::RunStats stats;
    auto out = executor->run(feeds, &stats);
    benchmark::DoNotOptimize(out);
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const std::string& op = g.node(id).op_type;
      all_seconds += stats.node_seconds[id];
      by_op[op + "/" + phase_name(g.node(id).phase)] += stats.node_seconds[id];
      if (op == "MatMul" || op == "Gemm" || op == "Conv" || op == "ConvTranspose")
        gemm_seconds += stats.node_seconds[id];
    }
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gemm_share"] = all_seconds > 0 ? gemm_seconds / all_seconds : 0.0;
  // AUTOPAR_BENCH_BREAKDOWN=1: the share of node time per op type, largest first.
  if (std::getenv("AUTOPAR_BENCH_BREAKDOWN") && all_seconds > 0) {
    std::vector<std::pair<double, std::string>> shares;
    for (const auto& [op, seconds] : by_op) shares.emplace_back(seconds / all_seconds, op);
    std::sort(shares.rbegin(), shares.rend());
    for (const auto& [share, op] : shares)
      std::fprintf(stderr, "  %-28s %5.1f%%\n", op.c_str(), 100 * share);
  }
}

BENCHMARK(BM_Gemm)->ArgsProduct({{256, 512, 1024}, {1, 2}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenGemm)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BatchedMatMul)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Conv)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Softmax)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LayerNorm)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
// Args: threads, batch.
BENCHMARK_CAPTURE(BM_TrainingStep, gpt_tiny, "gpt-tiny")
    ->ArgsProduct({{1, 2}, {8, 32}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainingStep, resnet_tiny, "resnet-tiny")
    ->ArgsProduct({{1, 2}, {8}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace autopar
