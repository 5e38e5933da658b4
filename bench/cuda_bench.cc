// The CUDA backend's ceilings on this machine's GPU: bf16 and fp32 GEMMs through cuBLASLt at
// square sizes and at gpt2-small's own shapes, and device memory bandwidth through the
// elementwise kernels. Each benchmark times replays of a captured one-node program by device
// events (manual time); without a GPU each reports why and skips.
#include <random>

#include <benchmark/benchmark.h>

#include "autopar/ir/builder.h"
#include "autopar/runtime/cuda_executor.h"

namespace autopar {
namespace {

std::shared_ptr<const Tensor> random_input(const Value& v, uint64_t seed) {
  Tensor t(v.dtype, v.shape.dims);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, uniform(rng));
  return std::make_shared<const Tensor>(std::move(t));
}

// Replays `g` once per iteration and reports `work` per second as `counter`.
void time_program(benchmark::State& state, const Graph& g, double work, const char* counter) {
  if (const std::string why = runtime::cuda_unavailable_reason(); !why.empty()) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  auto created = runtime::CudaExecutor::create(g);
  if (!created.is_ok()) {
    state.SkipWithError(created.status().message().c_str());
    return;
  }
  auto& ex = **created;
  std::vector<runtime::Feed> feeds;
  for (ValueId in : g.inputs()) feeds.emplace_back(in, random_input(g.value(in), in + 1));
  if (Status s = ex.feed(feeds); !s.is_ok()) {
    state.SkipWithError(s.message().c_str());
    return;
  }
  if (auto warm = ex.replay(3); !warm.is_ok()) {
    state.SkipWithError(warm.status().message().c_str());
    return;
  }
  for (auto _ : state) {
    auto seconds = ex.replay(1);
    if (!seconds.is_ok()) {
      state.SkipWithError(seconds.status().message().c_str());
      return;
    }
    state.SetIterationTime(seconds->front());
  }
  state.counters[counter] = benchmark::Counter(work, benchmark::Counter::kIsIterationInvariantRate);
}

Graph matmul(DType dtype, int64_t m, int64_t k, int64_t n) {
  GraphBuilder b("gemm");
  const ValueId x = b.input("a", dtype, {m, k});
  const ValueId w = b.input("b", dtype, {k, n});
  b.output(b.op1("MatMul", {x, w}));
  return b.finish();
}

void BM_GemmBf16(benchmark::State& state) {
  const int64_t n = state.range(0);
  time_program(state, matmul(DType::kBFloat16, n, n, n), 2.0 * n * n * n, "FLOP/s");
}
BENCHMARK(BM_GemmBf16)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_GemmFp32(benchmark::State& state) {
  const int64_t n = state.range(0);
  time_program(state, matmul(DType::kFloat32, n, n, n), 2.0 * n * n * n, "FLOP/s");
}
BENCHMARK(BM_GemmFp32)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond);

// gpt2-small's GEMMs at batch 4 × 1024 tokens: QKV, attention output, MLP up and down, and
// the tied vocabulary projection.
void BM_GemmGpt2Small(benchmark::State& state) {
  static const int64_t kShapes[][3] = {{4096, 768, 2304},
                                       {4096, 768, 768},
                                       {4096, 768, 3072},
                                       {4096, 3072, 768},
                                       {4096, 768, 50257}};
  const auto& s = kShapes[state.range(1)];
  const DType dtype = state.range(0) ? DType::kBFloat16 : DType::kFloat32;
  time_program(state, matmul(dtype, s[0], s[1], s[2]), 2.0 * s[0] * s[1] * s[2], "FLOP/s");
}
BENCHMARK(BM_GemmGpt2Small)
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4}})
    ->ArgNames({"bf16", "shape"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Device memory bandwidth: y = a + b over 2^28 floats (3 GiB moved per run).
void BM_AddBandwidth(benchmark::State& state) {
  const int64_t n = int64_t{1} << state.range(0);
  GraphBuilder b("add");
  const ValueId x = b.input("a", DType::kFloat32, {n});
  const ValueId y = b.input("b", DType::kFloat32, {n});
  b.output(b.op1("Add", {x, y}));
  time_program(state, b.finish(), 12.0 * static_cast<double>(n), "bytes/s");
}
BENCHMARK(BM_AddBandwidth)->Arg(24)->Arg(28)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The same in bf16 (2^28 elements, 1.5 GiB moved per run): a one-op program's typed path.
void BM_AddBf16(benchmark::State& state) {
  const int64_t n = int64_t{1} << 28;
  GraphBuilder b("add_bf16");
  const ValueId x = b.input("a", DType::kBFloat16, {n});
  const ValueId y = b.input("b", DType::kBFloat16, {n});
  b.output(b.op1("Add", {x, y}));
  time_program(state, b.finish(), 6.0 * static_cast<double>(n), "bytes/s");
}
BENCHMARK(BM_AddBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Fused runs the interpreter executes, in bf16 at a transformer's sizes (bytes: what the
// run reads once and writes once): a residual (a + b) * c over dense operands, and a bias
// add followed by GELU over [8192, 3072] (the bias a broadcast row).
void BM_FusedResidualBf16(benchmark::State& state) {
  const int64_t n = int64_t{1} << 27;
  GraphBuilder b("residual_bf16");
  const ValueId x = b.input("a", DType::kBFloat16, {n});
  const ValueId y = b.input("b", DType::kBFloat16, {n});
  const ValueId z = b.input("c", DType::kBFloat16, {n});
  b.output(b.op1("Mul", {b.op1("Add", {x, y}), z}));
  time_program(state, b.finish(), 8.0 * static_cast<double>(n), "bytes/s");
}
BENCHMARK(BM_FusedResidualBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_FusedBiasGeluBf16(benchmark::State& state) {
  const int64_t rows = 8192, cols = 3072;
  GraphBuilder b("bias_gelu_bf16");
  const ValueId x = b.input("x", DType::kBFloat16, {rows, cols});
  const ValueId bias = b.input("bias", DType::kBFloat16, {cols});
  b.output(b.op("Gelu", {b.op1("Add", {x, bias})}, {}, 1, kTrainingDomain)[0]);
  time_program(state, b.finish(), 4.0 * static_cast<double>(rows * cols), "bytes/s");
}
BENCHMARK(BM_FusedBiasGeluBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Attention's head split: [8, 512, 12, 64] to [8, 12, 512, 64] in bf16.
void BM_TransposeHeadsBf16(benchmark::State& state) {
  GraphBuilder b("heads_bf16");
  const ValueId x = b.input("x", DType::kBFloat16, {8, 512, 12, 64});
  b.output(b.op1("Transpose", {x}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  time_program(state, b.finish(), 4.0 * 8 * 512 * 12 * 64, "bytes/s");
}
BENCHMARK(BM_TransposeHeadsBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);

// A copy (a transpose of a [n, 1] tensor is a plain read and write).
void BM_CopyBandwidth(benchmark::State& state) {
  const int64_t n = int64_t{1} << state.range(0);
  GraphBuilder b("copy");
  const ValueId x = b.input("a", DType::kFloat32, {n, 1});
  b.output(b.op1("Transpose", {x}, {{"perm", std::vector<int64_t>{1, 0}}}));
  time_program(state, b.finish(), 8.0 * static_cast<double>(n), "bytes/s");
}
BENCHMARK(BM_CopyBandwidth)->Arg(28)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace autopar
