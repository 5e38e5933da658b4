// Calibration: on the CPU, time ops and the inproc collectives on the runtime and fit the curves
// and α/β; on CUDA, time ops replayed as CUDA graphs on GPU 0 and fit the curves and overheads.
#include "autopar/cost/calibrate.h"

#include <Eigen/Dense>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <thread>
#include <tuple>

#include "autopar/autodiff/autodiff.h"
#include "autopar/cost/communication.h"
#include "autopar/cost/compute.h"
#include "autopar/cost/simulator.h"
#include "autopar/ir/builder.h"
#include "autopar/ops/op_def.h"
#include "autopar/parallel/kernel_choice.h"
#include "autopar/parallel/lowering.h"
#include "autopar/parallel/memory_policy.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/plan_runner.h"

namespace autopar {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The fast end of repeated timings: their 10th percentile. What slows a repeat on a shared
// host (another tenant on the core, an interrupt, a page fault) only ever adds time, so the
// fast end is the machine's own speed, stable where the median follows the neighbours; `run`
// reports a plan's steps the same way (p10_step_s), which is what a prediction is held to.
double fast_end(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 10];
}

// Bytes of the core's private (level 2) cache, from sysfs; 1 MiB when it does not say.
double private_cache_bytes() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index2/size");
  double kib = 0;
  if (in >> kib && kib > 0) return kib * 1024;
  return 1 << 20;
}

// Every benchmark's seconds over the sweeps so far, by its place in the sequence. Calibration
// runs its whole sequence of benchmarks several times, and each benchmark counts at the median
// of its sweeps: a machine whose speed drifts over seconds (a shared host, frequency scaling)
// is measured at its typical speed rather than at whatever one moment gave one benchmark.
class Sweeps {
 public:
  double record(double seconds) {
    if (next_ == times_.size()) times_.emplace_back();
    std::vector<double>& t = times_[next_++];
    t.push_back(seconds);
    return median(t);
  }
  void restart() {
    next_ = 0;
    ++sweep_;
  }
  int sweep() const { return sweep_; }  // the one under way, from 1

 private:
  std::vector<std::vector<double>> times_;
  size_t next_ = 0;
  int sweep_ = 0;
};

// Tells `options.progress`, if any, that a stage of the sweep under way starts.
void report_stage(const CalibrationOptions& options, const Sweeps& sweeps, std::string_view name) {
  if (options.progress) options.progress(sweeps.sweep(), std::max(options.sweeps, 1), name);
}

std::vector<TensorPtr> bench_inputs(const Graph& g) {
  std::vector<TensorPtr> inputs;
  for (ValueId in : g.inputs()) {
    Tensor t(g.value(in).dtype, g.value(in).shape.dims);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, 0.5 + 1e-3 * (i % 97));
    inputs.push_back(std::make_shared<const Tensor>(std::move(t)));
  }
  return inputs;
}

// Runs `g` on `threads` threads of their own, over and over, until destroyed: every other
// device of this machine at work while one is timed. A plan keeps every core busy, and cores
// that share a physical core, a cache or the memory bus run slower together than alone (two
// vCPUs here run a GEMM-bound step about 5% slower together than one alone).
class Load {
 public:
  Load(const Graph& g, int threads, bool fuse) {
    for (int k = 0; k < threads; ++k) {
      threads_.emplace_back([this, &g, fuse] {
        runtime::ExecutorOptions options;
        options.num_threads = 1;
        options.fuse_elementwise = fuse;
        auto ex = runtime::Executor::create(g, options);
        if (!ex.is_ok()) return;
        const std::vector<TensorPtr> inputs = bench_inputs(g);
        while (!stop_.load(std::memory_order_relaxed))
          if (!ex->run_inputs(inputs).is_ok()) return;
      });
    }
  }
  ~Load() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Seconds of a run of `g` on one thread, unfused unless `fuse` (the fast end of enough repeats
// to run for `seconds`, at least `repeats`), after a warm-up run; `load` other threads run
// copies of `g` meanwhile.
StatusOr<double> time_graph(const Graph& g, int repeats, double seconds, int load,
                            bool fuse = false) {
  runtime::ExecutorOptions options;
  options.num_threads = 1;
  options.fuse_elementwise = fuse;
  ASSIGN_OR_RETURN(runtime::Executor ex, runtime::Executor::create(g, options));
  const std::vector<TensorPtr> inputs = bench_inputs(g);
  const Load others(g, load, fuse);
  auto run = [&]() -> StatusOr<double> {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(ex.run_inputs(inputs).status());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  ASSIGN_OR_RETURN(double warm_up, run());
  repeats = static_cast<int>(
      std::clamp(seconds / std::max(warm_up, 1e-7), static_cast<double>(repeats), 10000.0));
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    ASSIGN_OR_RETURN(double t, run());
    times.push_back(t);
  }
  return fast_end(times);
}

// One op to time: its float inputs' dims and its attributes; a ReduceSum takes its axes as a
// constant input (opset 13 on).
struct Bench {
  std::string op;
  std::vector<std::vector<int64_t>> inputs;
  Attributes attrs;
  std::vector<int64_t> axes_input;
};

Bench one_op(const std::string& op, const std::vector<std::vector<int64_t>>& inputs,
             Attributes attrs = {}) {
  return {op, inputs, std::move(attrs), {}};
}

Bench reduce_sum(const std::vector<int64_t>& dims, const std::vector<int64_t>& axes) {
  return {"ReduceSum", {dims}, {}, axes};
}

// `copies` independent nodes of the op, each over inputs of its own in `dtype`; `node` is the
// first.
Graph bench_graph(const Bench& bench, int copies, NodeId& node, DType dtype = DType::kFloat32) {
  GraphBuilder b("bench");
  const ValueId axes = bench.axes_input.empty() ? kNoId : b.constant_ints("axes", bench.axes_input);
  node = kNoId;
  for (int c = 0; c < copies; ++c) {
    std::vector<ValueId> ins;
    for (size_t i = 0; i < bench.inputs.size(); ++i)
      ins.push_back(b.input(fmt::format("x{}_{}", c, i), dtype, bench.inputs[i]));
    if (axes != kNoId) ins.push_back(axes);
    b.output(b.op1(bench.op, ins, bench.attrs));
    if (node == kNoId) node = b.graph().num_nodes() - 1;
  }
  return b.finish();
}

// `count` one-element Adds in a chain: nothing but the executor's work per node.
Graph add_chain(int count, DType dtype = DType::kFloat32) {
  GraphBuilder b("chain");
  const ValueId one = b.input("x0", dtype, {1});
  ValueId y = b.input("x1", dtype, {1});
  for (int i = 0; i < count; ++i) y = b.op1("Add", {y, one});
  b.output(y);
  return b.finish();
}

// A chain of `count` elementwise ops over `elements`, cycling through an optimizer's kinds
// (scale, add, divide, square root), each binary one reading the input `x` again: one fused
// kernel on a runtime that fuses.
Graph elementwise_chain(int count, int64_t elements, DType dtype = DType::kFloat32) {
  GraphBuilder b("elementwise_chain");
  const ValueId x = b.input("x", dtype, {elements});
  ValueId y = b.input("y", dtype, {elements});
  static const char* const kOps[] = {"Mul", "Add", "Div", "Sqrt"};
  for (int i = 0; i < count; ++i) {
    const std::string op = kOps[i % 4];
    y = op == "Sqrt" ? b.op1(op, {y}) : b.op1(op, {y, x});
  }
  b.output(y);
  return b.finish();
}

// Fused Adam updates of `copies` parameters of `elements` each, every one over state of its
// own: as in a training step, each update finds its operands outside the nearest caches.
Graph adam_updates(int64_t elements, int copies) {
  GraphBuilder b("adam");
  const ValueId rate = b.constant_scalar("rate", 1e-3f);
  const ValueId epsilon = b.constant_scalar("epsilon", 1e-8f);
  Tensor c(DType::kFloat32, {5});
  const double coefficients[] = {0.9, 0.1, 0.999, 0.001, 1.0};
  for (int64_t i = 0; i < 5; ++i) c.set_from_double(i, coefficients[i]);
  const ValueId coefficient = b.constant("c", std::move(c));
  for (int k = 0; k < copies; ++k) {
    std::vector<ValueId> ins;
    for (const char* name : {"x", "g", "m", "v"})
      ins.push_back(b.input(fmt::format("{}{}", name, k), DType::kFloat32, {elements}));
    ins.insert(ins.end(), {rate, epsilon, coefficient});
    for (ValueId out : b.op("Adam", ins, {}, 3, kTrainingDomain)) b.output(out);
  }
  return b.finish();
}

// A data-parallel training step over every device of this machine: `layers` linear layers
// (each a weight and a bias, so two gradient all-reduces), run for many steps; its fast-end
// step and its simulation on `p`.
struct PlanStep {
  double measured = 0, simulated = 0;
  size_t programs = 0, collectives = 0;
};

StatusOr<PlanStep> time_plan_step(const HardwareProfile& p, int layers, int repeats, double budget,
                                  Sweeps& sweeps) {
  const int64_t devices = p.devices_per_node;
  GraphBuilder b("overhead");
  ValueId y = b.input("x", DType::kFloat32, {devices, 32});
  for (int l = 0; l < layers; ++l) {
    const ValueId w = b.parameter(fmt::format("w{}", l), {32, 32}, ParamInit::normal(0.1f));
    const ValueId bias = b.parameter(fmt::format("b{}", l), {32}, ParamInit::zeros());
    y = b.op1("Add", {b.op1("MatMul", {y, w}), bias});
  }
  b.output(y, "y");
  const Graph model = b.finish();
  ASSIGN_OR_RETURN(Scheme scheme,
                   parse_scheme(fmt::format("mesh: {{dp: {}}}\nbatch: {{global: {}, micro: 1}}\n",
                                            devices, devices),
                                "calibration"));
  LoweringOptions options;
  options.loss.kind = LossKind::kMse;
  ASSIGN_OR_RETURN(Plan plan, lower(model, scheme, options));
  ASSIGN_OR_RETURN(TrainingGraph training,
                   build_training_graph(model, options.loss, options.optimizer));
  runtime::PlanFeeds feeds;
  for (const Value& v : training.graph.values()) {
    if (v.is_initializer() && v.data) feeds.state[v.name] = v.data;
  }
  std::map<std::string, TensorPtr> batch;
  for (ValueId in : training.graph.inputs()) {
    const Value& v = training.graph.value(in);
    if (v.is_initializer()) continue;
    Tensor t(v.dtype, v.shape.dims);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, 0.01 * (i % 13));
    batch[v.name] = std::make_shared<const Tensor>(std::move(t));
  }
  const int fewest = std::min(std::max(repeats, 50), 2000);
  const int steps = std::clamp(static_cast<int>(budget / 2e-5), fewest, 2000);
  feeds.steps.assign(static_cast<size_t>(steps), {batch});
  ASSIGN_OR_RETURN(runtime::PlanResult result, runtime::run_plan_inproc(plan, feeds));
  std::vector<double> times(result.step_seconds.begin() + 1, result.step_seconds.end());
  PlanStep step;
  step.measured = sweeps.record(fast_end(times));
  ASSIGN_OR_RETURN(Simulation sim, simulate(plan, p));
  step.simulated = sim.step_seconds;
  const Role& role = plan.roles.front();
  step.programs = role.schedule.size();
  for (const Node& n : role.graph.nodes()) {
    if (n.domain == kAutoparDomain && n.op_type != "Send" && n.op_type != "Recv" &&
        n.op_type != "Shard")
      ++step.collectives;
  }
  return step;
}

// What the plan runner adds beyond its nodes, per program (handing programs to the devices'
// threads, stashing values) and per collective (the devices meeting for it): two training
// steps with the same programs and 1 and 6 layers, measured against their simulation without
// either. Sets both in `p`; `report` says how they were found.
Status plan_overheads(HardwareProfile& p, int repeats, double budget, Sweeps& sweeps,
                      std::string& report) {
  ASSIGN_OR_RETURN(PlanStep small, time_plan_step(p, 1, repeats, budget, sweeps));
  ASSIGN_OR_RETURN(PlanStep large, time_plan_step(p, 6, repeats, budget, sweeps));
  const double gap_small = std::max(small.measured - small.simulated, 0.0);
  const double gap_large = std::max(large.measured - large.simulated, 0.0);
  const double per_collective = large.collectives > small.collectives
                                    ? std::max(gap_large - gap_small, 0.0) /
                                          static_cast<double>(large.collectives - small.collectives)
                                    : 0.0;
  const double per_program =
      std::max(gap_small - per_collective * static_cast<double>(small.collectives), 0.0) /
      static_cast<double>(std::max<size_t>(small.programs, 1));
  p.device.program_overhead_s += per_program;
  p.device.collective_overhead_s = per_collective;
  report = fmt::format(
      "plan runner: {:.2f} µs per program and {:.2f} µs per collective beyond the nodes' own "
      "(training steps of {} programs with {} and {} collectives: {:.1f} and {:.1f} µs measured, "
      "{:.1f} and {:.1f} µs simulated without them)",
      p.device.program_overhead_s * 1e6, per_collective * 1e6, small.programs, small.collectives,
      large.collectives, small.measured * 1e6, large.measured * 1e6, small.simulated * 1e6,
      large.simulated * 1e6);
  return Status::ok();
}

struct Sample {
  double work = 0;     // FLOPs or bytes
  double seconds = 0;  // measured per node, launch overhead included
};

// One sample standing for the forms a class takes in training graphs at one size (a
// convolution's forward, data and weight gradients; softmaxes, layer norms and reductions):
// the geometric means of their work and of their rates net of `overhead`, so the class curve
// is the geometric mean of the forms' efficiencies.
Sample combined(const std::vector<Sample>& forms, double overhead) {
  double log_work = 0, log_rate = 0;
  for (const Sample& s : forms) {
    log_work += std::log(s.work);
    log_rate += std::log(s.work / std::max(s.seconds - overhead, 0.05 * s.seconds));
  }
  const double n = static_cast<double>(forms.size());
  const double work = std::exp(log_work / n);
  return {work, work / std::exp(log_rate / n) + overhead};
}

// Efficiency points from samples: rate over the best rate, after the launch overhead.
std::vector<std::pair<double, double>> curve_points(std::vector<Sample> samples, double peak,
                                                    double overhead) {
  std::sort(samples.begin(), samples.end(),
            [](const Sample& a, const Sample& b) { return a.work < b.work; });
  std::vector<std::pair<double, double>> points;
  for (const Sample& s : samples) {
    const double busy = std::max(s.seconds - overhead, 0.05 * s.seconds);
    const double eff = std::clamp(s.work / busy / peak, 1e-4, 1.0);
    if (points.empty() || s.work > points.back().first) points.emplace_back(s.work, eff);
  }
  return points;
}

// The best rate net of the overhead, over the samples the overhead is at most half of (their
// rate does not hinge on it), or over all when none is.
double best_rate(const std::vector<Sample>& samples, double overhead) {
  double best = 0, best_long = 0;
  for (const Sample& s : samples) {
    const double rate = s.work / std::max(s.seconds - overhead, 0.05 * s.seconds);
    best = std::max(best, rate);
    if (s.seconds >= 2 * overhead) best_long = std::max(best_long, rate);
  }
  return best_long > 0 ? best_long : best;
}

// Relative error of predicted against measured seconds over held-out samples.
double held_out_error(const std::vector<Sample>& held, const EfficiencyCurve& curve, double peak,
                      double overhead) {
  double worst = 0;
  for (const Sample& s : held) {
    const double predicted = s.work / (peak * curve.at(s.work)) + overhead;
    worst = std::max(worst, std::fabs(predicted - s.seconds) / s.seconds);
  }
  return worst;
}

double total_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024.0;
    in.ignore(256, '\n');
  }
  return 8e9;
}

// Point-to-point seconds of one message of `bytes` between two threads (half a round trip,
// the fast end of `rounds` after two to warm up), the echoing thread alive for every round.
double ping_seconds(double bytes, int rounds) {
  auto world = runtime::create_inproc_world(2);
  const auto n = static_cast<int64_t>(std::max(1.0, bytes / 4));
  rounds += 2;
  std::thread echo([&] {
    for (int r = 0; r < rounds; ++r) {
      auto t = world[1]->recv(0, r);
      if (!t.is_ok() || !world[1]->send(0, r, *t).is_ok()) return;
    }
  });
  Tensor message(DType::kFloat32, {n});
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    (void)world[0]->send(1, r, message);
    (void)world[0]->recv(1, r);
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r >= 2) times.push_back(t / 2);  // the first rounds warm up
  }
  echo.join();
  return fast_end(times);
}

// Seconds of one collective over two threads (each thread runs every round, the first to warm
// up; the collectives themselves keep them in step): the fast end of the rounds' slower thread.
double collective_seconds(Collective c, double bytes, int rounds) {
  auto world = runtime::create_inproc_world(2);
  const auto n = static_cast<int64_t>(std::max(2.0, bytes / 4)) / 2 * 2;
  rounds += 1;
  std::vector<double> times[2];
  auto body = [&](int rank) {
    Tensor x(DType::kFloat32, {n});
    for (int r = 0; r < rounds; ++r) {
      const auto start = std::chrono::steady_clock::now();
      switch (c) {
        case Collective::kAllReduce:
          (void)world[rank]->all_reduce(x, {0, 1}, runtime::ReduceOp::kSum);
          break;
        case Collective::kAllGather:
          (void)world[rank]->all_gather(x, {0, 1}, 0);
          break;
        case Collective::kReduceScatter:
          (void)world[rank]->reduce_scatter(x, {0, 1}, 0, runtime::ReduceOp::kSum);
          break;
        case Collective::kAllToAll:
          (void)world[rank]->all_to_all(x, {0, 1}, 0, 0);
          break;
        case Collective::kPointToPoint:
          break;
      }
      if (r > 0)
        times[rank].push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  };
  std::thread other(body, 1);
  body(0);
  other.join();
  std::vector<double> worst;
  for (size_t i = 0; i < times[0].size() && i < times[1].size(); ++i)
    worst.push_back(std::max(times[0][i], times[1][i]));
  return fast_end(worst);
}

// A collective (or point-to-point message) timed on two threads; `bytes` is what the
// communication model is given for it (an all-gather's result, the other collectives' input).
struct CommSample {
  Collective collective;
  double bytes = 0;
  double seconds = 0;
};

// Seconds of `sample` under the model of two devices on one tier: α per message step and
// bytes over β divided by the collective's efficiency (ring factors for n = 2).
struct CommModelRow {
  double alpha_steps = 0;  // multiplies α
  double byte_share = 0;   // multiplies bytes / (β · efficiency)
};
CommModelRow comm_model_row(Collective c) {
  switch (c) {
    case Collective::kPointToPoint:
      return {1.0, 1.0};
    case Collective::kAllReduce:
      return {2.0, 1.0};  // 2(n−1) steps, 2(n−1)/n of the bytes
    default:
      return {1.0, 0.5};  // n−1 steps, (n−1)/n of the bytes
  }
}

// Rounds enough to run for `seconds`, at least `repeats`, from a probe of three.
CommSample measure_comm(Collective c, double bytes, int repeats, double seconds) {
  auto time = [&](int rounds) {
    return c == Collective::kPointToPoint ? ping_seconds(bytes, rounds)
                                          : collective_seconds(c, bytes, rounds);
  };
  const double probe = time(3);
  const int rounds = static_cast<int>(
      std::clamp(seconds / std::max(probe, 1e-7), static_cast<double>(repeats), 2000.0));
  // The all-gather's result is twice its input; the model is given the result.
  return CommSample{c, c == Collective::kAllGather ? 2 * bytes : bytes, time(rounds)};
}

// One sweep over every benchmark; each time recorded in `sweeps` counts at its median so far.
class CpuSweep {
 public:
  CpuSweep(const CalibrationOptions& options, Sweeps& sweeps)
      : options_(options),
        sweeps_(sweeps),
        repeats_(std::max(options.repeats, 1)),
        budget_(options.quick ? 0.1 * options.seconds : options.seconds) {
    p_.name = "cpu-local";
    p_.device.name = "cpu-core";
    p_.devices_per_node = std::max<int64_t>(1, std::thread::hardware_concurrency());
    // Every device busy while one is timed, as in a plan (the inproc benchmarks below keep two
    // threads at work).
    load_ = options.loaded ? static_cast<int>(p_.devices_per_node) - 1 : 0;
  }

  StatusOr<Calibration> run() {
    stage("launch overhead");
    RETURN_IF_ERROR(launch());
    stage("GEMM");
    ASSIGN_OR_RETURN(const double gemm_error, gemm());
    stage("attention and convolution");
    RETURN_IF_ERROR(attention_and_conv());
    stage("memory-bound ops");
    ASSIGN_OR_RETURN(const double elementwise_error, memory_bound());
    stage("fused runs");
    ASSIGN_OR_RETURN(const double fused_worst, fused());
    p_.device.memory_bytes = total_memory_bytes() / static_cast<double>(p_.devices_per_node);
    p_.device.reserved_bytes = std::min(64e6, 0.05 * p_.device.memory_bytes);
    stage("communication");
    ASSIGN_OR_RETURN(const double comm_error, inproc_tier());
    {
      stage("plan overheads");
      std::string report;
      RETURN_IF_ERROR(plan_overheads(p_, repeats_, budget_, sweeps_, report));
      cal_.report.push_back(std::move(report));
    }
    cal_.worst_held_out_error = std::max({gemm_error, elementwise_error, fused_worst, comm_error});
    return std::move(cal_);
  }

 private:
  // Launch overhead and the per-run intercept.
  Status launch();
  StatusOr<Sample> measure(const Bench& b, bool flops);
  StatusOr<Sample> measure_forms(const std::vector<Bench>& forms, bool flops);
  // Each returns its held-out error.
  StatusOr<double> gemm();
  Status attention_and_conv();
  StatusOr<double> memory_bound();
  StatusOr<double> fused();
  StatusOr<double> inproc_tier();

  void stage(std::string_view name) const { report_stage(options_, sweeps_, name); }

  const CalibrationOptions& options_;
  Sweeps& sweeps_;
  Calibration cal_;
  HardwareProfile& p_ = cal_.profile;
  const int repeats_;
  const double budget_;
  int load_ = 0;
  double per_run_ = 0;   // seconds per graph run beyond its nodes
  double overhead_ = 0;  // seconds per node beyond its work
  double peak_ = 0;      // FLOP/s
  const double cold_bytes_ = 4 * private_cache_bytes();
};

Status CpuSweep::launch() {
  // Launch overhead: chains of one-element adds, t(K) = per run + K · per node, fitted by
  // least squares on relative error. The per-node slope is what each node of a plan costs
  // beyond its work (dispatch, its output's allocation, freeing its dead inputs).
  const std::vector<int> chain =
      options_.quick ? std::vector<int>{1, 16, 64} : std::vector<int>{1, 8, 32, 128, 256};
  Eigen::MatrixXd chain_rows(static_cast<Eigen::Index>(chain.size()), 2);
  Eigen::VectorXd chain_ones(static_cast<Eigen::Index>(chain.size()));
  for (size_t i = 0; i < chain.size(); ++i) {
    ASSIGN_OR_RETURN(double t, time_graph(add_chain(chain[i]), repeats_, budget_, load_));
    t = sweeps_.record(t);
    const auto row = static_cast<Eigen::Index>(i);
    chain_rows(row, 0) = 1.0 / t;
    chain_rows(row, 1) = chain[i] / t;
    chain_ones(row) = 1.0;
  }
  const Eigen::VectorXd per_run_node = chain_rows.colPivHouseholderQr().solve(chain_ones);
  per_run_ = std::max(per_run_node(0), 0.0);
  p_.device.launch_overhead_s = std::max(per_run_node(1), 1e-8);
  // Every program a plan runs pays the per-run intercept; the CPU runtime runs collectives in
  // line on the device's thread, so communication does not overlap its compute.
  p_.device.program_overhead_s = per_run_;
  p_.device.overlap_communication = false;
  overhead_ = p_.device.launch_overhead_s;
  return Status::ok();
}

// Seconds per node of an op, its launch overhead included. The graph timed holds copies of
// the op over inputs of their own spanning four times the private cache, so each node reads
// data last touched a run ago, as the nodes of a training step read parameters, optimizer
// state and stashed activations (rerunning one node would find its inputs in the core's
// cache); the run's own overhead is shared out over the copies.
StatusOr<Sample> CpuSweep::measure(const Bench& b, bool flops) {
  double input_bytes = 0;
  for (const std::vector<int64_t>& dims : b.inputs)
    input_bytes += 4.0 * static_cast<double>(element_count(dims));
  const int copies = static_cast<int>(std::clamp(std::ceil(cold_bytes_ / input_bytes), 1.0, 256.0));
  NodeId node = kNoId;
  const Graph g = bench_graph(b, copies, node);
  ASSIGN_OR_RETURN(double t, time_graph(g, repeats_, budget_, load_));
  t = sweeps_.record(t);
  const Node& n = g.node(node);
  return Sample{flops ? node_flops(g, n) : node_bytes(g, n), std::max(t - per_run_, 0.0) / copies};
}

StatusOr<Sample> CpuSweep::measure_forms(const std::vector<Bench>& forms, bool flops) {
  std::vector<Sample> samples;
  for (const Bench& b : forms) {
    ASSIGN_OR_RETURN(Sample s, measure(b, flops));
    samples.push_back(s);
  }
  return combined(samples, overhead_);
}

StatusOr<double> CpuSweep::gemm() {
  // GEMM: square sizes, with held-out sizes between them.
  std::vector<int64_t> fit = {8, 16, 32, 64, 128, 256, 384};
  std::vector<int64_t> held = {24, 96, 192};
  if (options_.quick) {
    fit = {8, 32, 128};
    held = {64};
  }
  std::vector<Sample> gemm, gemm_held;
  for (int64_t n : fit) {
    ASSIGN_OR_RETURN(Sample s, measure(one_op("MatMul", {{n, n}, {n, n}}), true));
    gemm.push_back(s);
  }
  for (int64_t n : held) {
    ASSIGN_OR_RETURN(Sample s, measure(one_op("MatMul", {{n, n}, {n, n}}), true));
    gemm_held.push_back(s);
  }
  peak_ = best_rate(gemm, overhead_);
  p_.device.peak_flops["fp32"] = peak_;
  ASSIGN_OR_RETURN(p_.device.efficiency[OpClass::kGemm],
                   EfficiencyCurve::create(curve_points(gemm, peak_, overhead_)));
  const double gemm_error =
      held_out_error(gemm_held, p_.device.efficiency[OpClass::kGemm], peak_, overhead_);
  cal_.report.push_back(
      fmt::format("gemm: peak {:.2f} GFLOP/s on one core, {} sizes fitted, held-out error {:.1f}%",
                  peak_ * 1e-9, gemm.size(), gemm_error * 100));
  return gemm_error;
}

Status CpuSweep::attention_and_conv() {
  // Attention (batched products of activations: scores and their weighted sum) and
  // convolutions (forward, data gradient, weight gradient over 3×3 filters) share the peak,
  // with their own curves.
  std::vector<Sample> attention, conv;
  for (int64_t n :
       options_.quick ? std::vector<int64_t>{16, 64} : std::vector<int64_t>{16, 32, 64, 128}) {
    ASSIGN_OR_RETURN(Sample s, measure_forms({one_op("MatMul", {{4, n, 32}, {4, 32, n}}),
                                              one_op("MatMul", {{4, n, n}, {4, n, 32}})},
                                             true));
    attention.push_back(s);
  }
  const Attributes same = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  for (int64_t c :
       options_.quick ? std::vector<int64_t>{4, 16} : std::vector<int64_t>{4, 8, 16, 32}) {
    const int64_t batch = 2, side = 16;
    ASSIGN_OR_RETURN(
        Sample s,
        measure_forms({one_op("Conv", {{batch, c, side, side}, {c, c, 3, 3}}, same),
                       one_op("ConvTranspose", {{batch, c, side, side}, {c, c, 3, 3}}, same),
                       one_op("Conv", {{c, batch, side, side}, {c, batch, side, side}}, same)},
                      true));
    conv.push_back(s);
  }
  ASSIGN_OR_RETURN(p_.device.efficiency[OpClass::kAttention],
                   EfficiencyCurve::create(curve_points(attention, peak_, overhead_)));
  ASSIGN_OR_RETURN(p_.device.efficiency[OpClass::kConv],
                   EfficiencyCurve::create(curve_points(conv, peak_, overhead_)));
  return Status::ok();
}

StatusOr<double> CpuSweep::memory_bound() {
  // Memory-bound classes, by bytes. The bandwidth is the adds' best rate; the elementwise
  // curve is over its forms in training graphs: adds, products with a broadcast row (bias,
  // scale), divisions and square roots (optimizers, normalisations decomposed), transposes.
  // Normalisations and reductions: softmaxes, layer norms, row sums and per-channel means
  // (batch-norm statistics).
  auto elementwise_forms = [](int64_t n) {
    const int64_t rows = std::max<int64_t>(n / 64, 1);
    return std::vector<Bench>{
        one_op("Add", {{n}, {n}}), one_op("Mul", {{rows, 64}, {64}}), one_op("Div", {{n}, {n}}),
        one_op("Sqrt", {{n}}),
        one_op("Transpose", {{rows, 64}}, {{"perm", std::vector<int64_t>{1, 0}}})};
  };
  std::vector<Sample> add, elementwise, elementwise_held, norm;
  for (int64_t n : options_.quick ? std::vector<int64_t>{1 << 10, 1 << 16}
                                  : std::vector<int64_t>{1 << 8, 1 << 12, 1 << 16, 1 << 20}) {
    ASSIGN_OR_RETURN(Sample s, measure(one_op("Add", {{n}, {n}}), false));
    add.push_back(s);
  }
  const double bandwidth = best_rate(add, overhead_);
  p_.device.memory_bandwidth = bandwidth;
  for (int64_t n : options_.quick ? std::vector<int64_t>{1 << 10, 1 << 16}
                                  : std::vector<int64_t>{1 << 8, 1 << 12, 1 << 16, 1 << 20}) {
    ASSIGN_OR_RETURN(Sample s, measure_forms(elementwise_forms(n), false));
    elementwise.push_back(s);
  }
  for (int64_t n :
       options_.quick ? std::vector<int64_t>{1 << 13} : std::vector<int64_t>{1 << 10, 1 << 18}) {
    ASSIGN_OR_RETURN(Sample s, measure_forms(elementwise_forms(n), false));
    elementwise_held.push_back(s);
  }
  ASSIGN_OR_RETURN(p_.device.efficiency[OpClass::kElementwise],
                   EfficiencyCurve::create(curve_points(elementwise, bandwidth, overhead_)));
  for (int64_t rows :
       options_.quick ? std::vector<int64_t>{4, 256} : std::vector<int64_t>{4, 64, 1024}) {
    const int64_t width = 256;
    ASSIGN_OR_RETURN(Sample s,
                     measure_forms({one_op("Softmax", {{rows, width}}, {{"axis", int64_t{-1}}}),
                                    one_op("LayerNormalization", {{rows, width}, {width}, {width}},
                                           {{"axis", int64_t{-1}}}),
                                    reduce_sum({rows, width}, {-1}),
                                    one_op("ReduceMean", {{rows, 16, 4, 4}},
                                           {{"axes", std::vector<int64_t>{0, 2, 3}}})},
                                   false));
    norm.push_back(s);
  }
  ASSIGN_OR_RETURN(p_.device.efficiency[OpClass::kNorm],
                   EfficiencyCurve::create(curve_points(norm, bandwidth, overhead_)));
  const double elementwise_error = held_out_error(
      elementwise_held, p_.device.efficiency[OpClass::kElementwise], bandwidth, overhead_);
  cal_.report.push_back(fmt::format(
      "elementwise: {:.2f} GB/s on one core, {} sizes fitted, held-out error {:.1f}%; launch "
      "overhead {:.2f} µs per node, {:.2f} µs per graph run",
      bandwidth * 1e-9, elementwise.size(), elementwise_error * 100,
      p_.device.launch_overhead_s * 1e6, per_run_ * 1e6));
  return elementwise_error;
}

StatusOr<double> CpuSweep::fused() {
  double fused_worst = 0;
  // Fused elementwise kernels (the runtime runs a run of elementwise nodes tile by tile):
  // seconds per element and operation, the slope between a short and a long chain over data
  // that stays in cache, so neither the launch nor memory traffic enters it.
  {
    const int64_t elements = options_.quick ? 4096 : 8192;
    const std::vector<int> lengths = {8, 64};
    const int held_length = 24;
    std::vector<double> fused_t;
    for (int k : {lengths[0], lengths[1], held_length}) {
      ASSIGN_OR_RETURN(double t,
                       time_graph(elementwise_chain(k, elements), repeats_, budget_, load_, true));
      fused_t.push_back(sweeps_.record(t));
    }
    p_.device.fused_op_element_s =
        std::max((fused_t[1] - fused_t[0]) /
                     (static_cast<double>(lengths[1] - lengths[0]) * static_cast<double>(elements)),
                 1e-12);
    // Held out: the middle chain under the model the simulator prices fused runs with.
    double predicted = per_run_;
    for (double s : fused_node_seconds(p_, elementwise_chain(held_length, elements)))
      predicted += std::max(s, 0.0);
    const double fused_error = std::fabs(predicted - fused_t[2]) / fused_t[2];
    cal_.report.push_back(
        fmt::format("fused elementwise: {:.3f} ns per element and op, held-out error {:.1f}%",
                    p_.device.fused_op_element_s * 1e9, fused_error * 100));
    fused_worst = fused_error;
  }
  // The fused optimizer update: seconds per parameter element, the slope between two sizes
  // of a step's worth of updates; held out at a size between them.
  {
    const int copies = 16;
    const std::vector<int64_t> sizes = {4096, 32768, 16384};
    std::vector<double> adam_t;
    for (int64_t n : sizes) {
      ASSIGN_OR_RETURN(double t,
                       time_graph(adam_updates(n, copies), repeats_, budget_, load_, true));
      adam_t.push_back(sweeps_.record(t));
    }
    p_.device.optimizer_element_s = std::max(
        (adam_t[1] - adam_t[0]) / static_cast<double>((sizes[1] - sizes[0]) * copies), 1e-12);
    double predicted = per_run_;
    for (double s : fused_node_seconds(p_, adam_updates(sizes[2], copies)))
      predicted += std::max(s, 0.0);
    const double adam_error = std::fabs(predicted - adam_t[2]) / adam_t[2];
    cal_.report.push_back(
        fmt::format("fused optimizer: {:.3f} ns per parameter element, held-out error {:.1f}%",
                    p_.device.optimizer_element_s * 1e9, adam_error * 100));
    fused_worst = std::max(fused_worst, adam_error);
  }
  return fused_worst;
}

StatusOr<double> CpuSweep::inproc_tier() {
  // The inproc tier: α, β and each collective's efficiency together, by least squares on
  // relative error over point-to-point messages and two-device collectives of many sizes,
  // each under the communication model's own formula (so α is what the model charges a
  // message step, small collectives included).
  const std::vector<double> sizes = options_.quick
                                        ? std::vector<double>{8, 1e4, 1e6}
                                        : std::vector<double>{8, 1e3, 1e4, 1e5, 1e6, 4e6};
  const std::vector<Collective> collectives = {Collective::kPointToPoint, Collective::kAllReduce,
                                               Collective::kAllGather, Collective::kReduceScatter,
                                               Collective::kAllToAll};
  std::vector<CommSample> comm;
  for (Collective c : collectives) {
    for (double bytes : sizes) {
      CommSample s = measure_comm(c, bytes, repeats_, budget_);
      s.seconds = sweeps_.record(s.seconds);
      comm.push_back(s);
    }
  }
  // Unknowns: α, 1/β, then 1/(β · efficiency) of each collective.
  const auto unknowns = static_cast<Eigen::Index>(1 + collectives.size());
  Eigen::MatrixXd rows = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(comm.size()), unknowns);
  Eigen::VectorXd ones = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(comm.size()));
  for (size_t i = 0; i < comm.size(); ++i) {
    const CommModelRow m = comm_model_row(comm[i].collective);
    const auto column = static_cast<Eigen::Index>(
        1 + (std::find(collectives.begin(), collectives.end(), comm[i].collective) -
             collectives.begin()));
    rows(static_cast<Eigen::Index>(i), 0) = m.alpha_steps / comm[i].seconds;
    rows(static_cast<Eigen::Index>(i), column) = m.byte_share * comm[i].bytes / comm[i].seconds;
  }
  const Eigen::VectorXd solved = rows.colPivHouseholderQr().solve(ones);
  Tier tier;
  tier.name = "inproc";
  tier.devices_per_group = p_.devices_per_node;
  tier.alpha_s = std::max(solved(0), 1e-7);
  tier.bandwidth = solved(1) > 0 ? 1.0 / solved(1) : 1e10;
  for (size_t k = 0; k < collectives.size(); ++k) {
    const double per_byte = solved(static_cast<Eigen::Index>(1 + k));
    tier.efficiency[collectives[k]] =
        per_byte > 0 ? std::clamp(1.0 / (per_byte * tier.bandwidth), 1e-3, 1.0) : 1.0;
  }
  auto model_seconds = [&](const CommSample& s) {
    const CommModelRow m = comm_model_row(s.collective);
    return m.alpha_steps * tier.alpha_s +
           m.byte_share * s.bytes / (tier.bandwidth * tier.efficiency.at(s.collective));
  };
  double comm_error = 0;
  for (Collective c : {Collective::kPointToPoint, Collective::kAllReduce}) {
    CommSample s = measure_comm(c, options_.quick ? 3e5 : 2e6, repeats_, budget_);
    s.seconds = sweeps_.record(s.seconds);
    comm_error = std::max(comm_error, std::fabs(model_seconds(s) - s.seconds) / s.seconds);
  }
  p_.tiers = {tier};
  cal_.report.push_back(fmt::format(
      "inproc: alpha {:.2f} µs, beta {:.2f} GB/s, all-reduce at {:.0f}% of beta, {} messages and "
      "collectives fitted, held-out error {:.1f}%",
      tier.alpha_s * 1e6, tier.bandwidth * 1e-9, tier.efficiency[Collective::kAllReduce] * 100,
      comm.size(), comm_error * 100));
  return comm_error;
}

StatusOr<Calibration> calibrate_sweep(const CalibrationOptions& options, Sweeps& sweeps) {
  return CpuSweep(options, sweeps).run();
}

// ---- CUDA: GPU 0 through the CUDA backend -------------------------------------------------

// The L2 cache of an H100 or H200. A memory-bound benchmark moves several times this per replay
// where its size allows: replays of a smaller graph would find their operands in L2, where a
// training step's kernels, reading what was written many kernels before, mostly do not.
constexpr double kGpuL2Bytes = 50e6;

// At most this many copies of a benchmark per graph. Matrix products are compute-bound, so a
// few copies only share out the replay's own overhead; each convolution copy is also an
// algorithm search by cuDNN when the graph first runs.
constexpr int kMemoryCopies = 512;
constexpr int kMatMulCopies = 16;
constexpr int kConvCopies = 4;

// Random operands, made fast: magnitudes 0.5 to 2 with random signs (positive for a square
// root's input), never zero (zeros are multiplied and moved faster than data whose bits toggle)
// nor near it (divisions stay finite). One block of a prime number of values per dtype repeats
// through every tensor, out of step with the benchmarks' power-of-two dims so no two rows of an
// operand are alike; drawing every element would take seconds per gigabyte.
class RandomOperands {
 public:
  TensorPtr make(DType dtype, const std::vector<int64_t>& dims, bool positive) {
    const std::vector<uint8_t>& block = this->block(dtype, positive).bytes();
    Tensor t(dtype, dims);
    std::vector<uint8_t>& out = t.mutable_bytes();
    for (size_t at = 0; at < out.size(); at += block.size())
      std::memcpy(out.data() + at, block.data(), std::min(block.size(), out.size() - at));
    return std::make_shared<const Tensor>(std::move(t));
  }

 private:
  const Tensor& block(DType dtype, bool positive) {
    auto [it, fresh] = blocks_.try_emplace({dtype, positive});
    if (fresh) {
      constexpr int64_t kValues = 1000003;
      Tensor t(dtype, {kValues});
      std::uniform_real_distribution<double> magnitude(0.5, 2.0);
      for (int64_t i = 0; i < kValues; ++i) {
        const double v = magnitude(rng_);
        t.set_from_double(i, positive || (rng_() & 1) ? v : -v);
      }
      it->second = std::move(t);
    }
    return it->second;
  }

  std::mt19937_64 rng_{0x5eed};
  std::map<std::pair<DType, bool>, Tensor> blocks_;
};

// Seconds of one replay of `g` on GPU 0 as a captured CUDA graph: the median of enough replays
// to run for `seconds`, at least `repeats`, after the eager first run (where cuBLASLt and cuDNN
// choose their algorithms) and three replays that size the count. Every node is a kernel of its
// own, as the profile prices nodes: a benchmark's copies are consecutive elementwise nodes of
// one shape, which the runtime would otherwise fuse into one kernel.
StatusOr<double> time_cuda_graph(const Graph& g, int repeats, double seconds,
                                 RandomOperands& operands, bool fuse = false) {
  runtime::CudaOptions options;
  options.fuse_elementwise = fuse;
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::CudaExecutor> ex,
                   runtime::CudaExecutor::create(g, options));
  {
    // Copies of an input share one host tensor; each has device memory of its own.
    std::map<std::tuple<DType, std::vector<int64_t>, bool>, TensorPtr> made;
    std::vector<runtime::Feed> feeds;
    for (ValueId in : g.inputs()) {
      const Value& v = g.value(in);
      if (v.is_initializer()) continue;
      bool positive = false;
      for (NodeId c : v.consumers) positive = positive || g.node(c).op_type == "Sqrt";
      TensorPtr& t = made[{v.dtype, v.shape.dims, positive}];
      if (!t) t = operands.make(v.dtype, v.shape.dims, positive);
      feeds.emplace_back(in, t);
    }
    RETURN_IF_ERROR(ex->feed(feeds));
  }
  ASSIGN_OR_RETURN(double eager, ex->step());
  (void)eager;
  ASSIGN_OR_RETURN(std::vector<double> probe, ex->replay(3));
  const int times = static_cast<int>(std::clamp(std::ceil(seconds / std::max(median(probe), 1e-7)),
                                                static_cast<double>(repeats), 10000.0));
  ASSIGN_OR_RETURN(std::vector<double> replays, ex->replay(times));
  return median(replays);
}

std::string bench_text(const Bench& b, DType dtype) {
  std::vector<std::string> shapes;
  for (const std::vector<int64_t>& dims : b.inputs)
    shapes.push_back(fmt::format("[{}]", fmt::join(dims, ",")));
  return fmt::format("{} {} {}", b.op, dtype_name(dtype), fmt::join(shapes, " "));
}

// Elementwise forms over `n` elements as they come in training graphs: adds, products with a
// broadcast row (bias, scale) of a hidden size, divisions and square roots (optimizers,
// decomposed normalisations), and the transposes that split heads ([tokens, heads, 64] to
// [heads, tokens, 64]; a swap of the last two dims that GEMMs read is a view in the profile).
std::vector<Bench> gpu_elementwise_forms(int64_t n) {
  const int64_t rows = n / 1024;
  return {one_op("Add", {{n}, {n}}), one_op("Mul", {{rows, 1024}, {1024}}),
          one_op("Div", {{n}, {n}}), one_op("Sqrt", {{n}}),
          one_op("Transpose", {{rows, 16, 64}}, {{"perm", std::vector<int64_t>{1, 0, 2}}})};
}

// Normalisations and reductions over `n` elements as training graphs hold them: softmaxes and
// layer norms over rows of 1024, row sums (a softmax's gradient), column sums (a bias's
// gradient over the tokens), and per-channel means of a batch of 8 images of 16 × 16 (batch
// normalisation's statistics; the channels grow with n).
std::vector<Bench> gpu_norm_forms(int64_t n) {
  const int64_t rows = n / 1024, width = 1024;
  return {one_op("Softmax", {{rows, width}}, {{"axis", int64_t{-1}}}),
          one_op("LayerNormalization", {{rows, width}, {width}, {width}}, {{"axis", int64_t{-1}}}),
          reduce_sum({rows, width}, {-1}), reduce_sum({rows, width}, {0}),
          one_op("ReduceMean", {{8, n / 2048, 16, 16}}, {{"axes", std::vector<int64_t>{0, 2, 3}}})};
}

// One collective of `elements` float32 per rank over GPUs 0..n−1, as a plan's node: AllReduce
// of the input, AllGather along dim 0 (n × the input), ReduceScatter along dim 0 (1/n),
// AllToAll of dim 0.
Graph gpu_collective_graph(Collective c, int64_t n, int64_t elements) {
  GraphBuilder b("collective");
  b.mutable_graph().opsets[std::string(kAutoparDomain)] = 1;
  const ValueId x = b.input("x", DType::kFloat32, {elements});
  std::vector<int64_t> group(static_cast<size_t>(n));
  std::iota(group.begin(), group.end(), 0);
  Attributes attrs = {{"group", group}};
  const char* op = "AllReduce";
  switch (c) {
    case Collective::kAllGather:
      op = "AllGather";
      attrs["axis"] = int64_t{0};
      break;
    case Collective::kReduceScatter:
      op = "ReduceScatter";
      attrs["axis"] = int64_t{0};
      break;
    case Collective::kAllToAll:
      op = "AllToAll";
      attrs["split_axis"] = int64_t{0};
      attrs["concat_axis"] = int64_t{0};
      break;
    default:
      break;
  }
  b.output(b.op(op, {x}, attrs, 1, kAutoparDomain)[0], "y");
  return b.finish();
}

// Seconds of the collective over GPUs 0..n−1: a thread per GPU holding its NCCL rank, each
// replaying the op's captured graph `replays` times; per replay the slowest rank's time, and the
// median of those. The ranks meet in NCCL's init and in every collective, so all of them run.
StatusOr<double> time_gpu_collective(Collective c, int64_t n, int64_t elements, int replays) {
  ASSIGN_OR_RETURN(const std::string id, runtime::cuda_nccl_id());
  const Graph g = gpu_collective_graph(c, n, elements);
  std::vector<int64_t> group(static_cast<size_t>(n));
  std::iota(group.begin(), group.end(), 0);
  auto world = runtime::create_inproc_world(n);
  std::vector<std::vector<double>> times(static_cast<size_t>(n));
  std::vector<Status> outcome(static_cast<size_t>(n), Status::ok());
  auto rank_body = [&](int64_t r) -> Status {
    const int rank = static_cast<int>(r);
    ASSIGN_OR_RETURN(std::shared_ptr<cuda::NcclComms> comms,
                     runtime::open_cuda_nccl(rank, rank, static_cast<int>(n), id, {group}));
    runtime::CudaOptions options;
    options.device = rank;
    options.communication = runtime::CudaCommunication::kNccl;
    options.communicator = world[static_cast<size_t>(r)].get();
    options.nccl = comms;
    ASSIGN_OR_RETURN(std::unique_ptr<runtime::CudaExecutor> ex,
                     runtime::CudaExecutor::create(g, options));
    RETURN_IF_ERROR(ex->feed(
        {{g.inputs()[0], std::make_shared<const Tensor>(Tensor(DType::kFloat32, {elements}))}}));
    ASSIGN_OR_RETURN(double eager, ex->step());
    (void)eager;
    ASSIGN_OR_RETURN(times[static_cast<size_t>(r)], ex->replay(replays));
    return Status::ok();
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] { outcome[static_cast<size_t>(r)] = rank_body(r); });
  for (std::thread& t : threads) t.join();
  for (const Status& s : outcome) RETURN_IF_ERROR(s);
  std::vector<double> slowest(static_cast<size_t>(replays), 0.0);
  for (const auto& rank_times : times)
    for (size_t i = 0; i < rank_times.size() && i < slowest.size(); ++i)
      slowest[i] = std::max(slowest[i], rank_times[i]);
  return median(slowest);
}

// One sweep over every CUDA benchmark; each time recorded in `sweeps` counts at its median so
// far.
class CudaSweep {
 public:
  CudaSweep(const CalibrationOptions& options, const HardwareProfile& base, Sweeps& sweeps,
            RandomOperands& operands)
      : options_(options),
        base_(base),
        sweeps_(sweeps),
        operands_(operands),
        repeats_(std::max(options.repeats, 1)),
        budget_(options.seconds),
        peak_(base.device.peak("bf16")) {
    p_ = base;
    p_.name = base.name + "-calibrated";
  }

  StatusOr<Calibration> run() {
    stage("launch overhead");
    RETURN_IF_ERROR(launch());
    stage("GEMM");
    ASSIGN_OR_RETURN(const double gemm_error, gemm());
    stage("attention");
    ASSIGN_OR_RETURN(const double attention_error, attention());
    stage("convolution");
    ASSIGN_OR_RETURN(const double conv_error, convolution());
    stage("memory-bound ops");
    ASSIGN_OR_RETURN(const double memory_error, memory_bound());
    stage("fused runs");
    ASSIGN_OR_RETURN(const double fused_error, fused());
    stage("optimizer");
    ASSIGN_OR_RETURN(const double adam_error, optimizer());
    stage("GEMMs by shape");
    ASSIGN_OR_RETURN(const double shape_error, gemm_shapes());
    stage("unaligned GEMMs");
    RETURN_IF_ERROR(unaligned_gemm());
    double comm_error = 0;
    if (runtime::cuda_device_count() >= 2) {
      stage("collectives");
      ASSIGN_OR_RETURN(comm_error, collectives());
    } else {
      cal_.report.push_back(
          "collectives: not measured (one GPU); the profile's intra-node tier is the base's");
    }
    if (p_.device.overlap_slowdown > 0) {
      cal_.report.push_back(fmt::format(
          "overlap slowdown: not measured; compute beside a collective loses the base's {:.2f} "
          "of its rate",
          p_.device.overlap_slowdown));
    }
    cal_.worst_held_out_error = std::max({gemm_error, shape_error, attention_error, conv_error,
                                          memory_error, fused_error, adam_error, comm_error});
    return std::move(cal_);
  }

 private:
  using Forms = std::vector<Bench>;
  static constexpr DType kBf16 = DType::kBFloat16;

  Status launch();
  StatusOr<Sample> measure(const Bench& b, DType dtype, bool flops, int max_copies);
  StatusOr<Sample> measure_forms(const std::vector<Bench>& forms, DType dtype, bool flops,
                                 int max_copies);
  StatusOr<std::pair<std::vector<Sample>, double>> fit_class(OpClass op_class,
                                                             const std::vector<Forms>& fit_forms,
                                                             const std::vector<Forms>& held_forms,
                                                             bool flops, int max_copies,
                                                             double rate);
  template <typename Sizes, typename FormsOf>
  static std::vector<Forms> forms_at(const Sizes& sizes, const FormsOf& forms_of) {
    std::vector<Forms> out;
    for (const auto& size : sizes) out.push_back(forms_of(size));
    return out;
  }
  static double tflops(const Sample& s) { return s.work / s.seconds * 1e-12; }
  // Each returns its held-out error (memory_bound: the worse of elementwise and norm).
  StatusOr<double> gemm();
  StatusOr<double> attention();
  StatusOr<double> convolution();
  StatusOr<double> memory_bound();
  StatusOr<double> fused();
  StatusOr<double> optimizer();
  StatusOr<double> gemm_shapes();
  Status unaligned_gemm();
  StatusOr<double> collectives();

  void stage(std::string_view name) const { report_stage(options_, sweeps_, name); }

  const CalibrationOptions& options_;
  const HardwareProfile& base_;
  Sweeps& sweeps_;
  RandomOperands& operands_;
  const int repeats_;
  const double budget_;
  const double peak_;  // the datasheet's bf16 FLOP/s
  Calibration cal_;
  HardwareProfile& p_ = cal_.profile;
  double per_program_ = 0;  // seconds per replayed graph beyond its kernels
  double overhead_ = 0;     // seconds per kernel beyond its work
};

Status CudaSweep::launch() {
  // Launch overhead: chains of one-element adds replayed as one CUDA graph, t(K) = per program
  // + K · per kernel, fitted by least squares on relative error. The per-kernel slope is what
  // each kernel of a program costs beyond its work (the GPU's gap between dependent kernels of
  // a graph and the shortest kernel); the intercept is the graph's own launch and end, paid
  // once per program a plan runs.
  const std::vector<int> chain =
      options_.quick ? std::vector<int>{1, 16, 64} : std::vector<int>{1, 8, 32, 128, 512};
  Eigen::MatrixXd chain_rows(static_cast<Eigen::Index>(chain.size()), 2);
  Eigen::VectorXd chain_ones(static_cast<Eigen::Index>(chain.size()));
  for (size_t i = 0; i < chain.size(); ++i) {
    auto timed = time_cuda_graph(add_chain(chain[i], kBf16), repeats_, budget_, operands_);
    if (!timed.is_ok()) return error("a chain of {} adds: {}", chain[i], timed.status().message());
    const double t = sweeps_.record(timed.value());
    const auto row = static_cast<Eigen::Index>(i);
    chain_rows(row, 0) = 1.0 / t;
    chain_rows(row, 1) = chain[i] / t;
    chain_ones(row) = 1.0;
  }
  const Eigen::VectorXd per_program_kernel = chain_rows.colPivHouseholderQr().solve(chain_ones);
  per_program_ = std::max(per_program_kernel(0), 0.0);
  p_.device.launch_overhead_s = std::max(per_program_kernel(1), 1e-8);
  p_.device.program_overhead_s = per_program_;
  overhead_ = p_.device.launch_overhead_s;
  cal_.report.push_back(fmt::format(
      "launch: {:.2f} µs per kernel of a replayed CUDA graph and {:.2f} µs per program (the "
      "graph's launch), fitted over chains of {} to {} one-element adds",
      overhead_ * 1e6, per_program_ * 1e6, chain.front(), chain.back()));

  return Status::ok();
}

// Seconds per node of one op, its launch overhead included. The graph timed holds copies of
// the op over inputs of their own, enough to move four L2 caches per replay (at most
// `max_copies`); the replay's own overhead is shared out over them.
StatusOr<Sample> CudaSweep::measure(const Bench& b, DType dtype, bool flops, int max_copies) {
  NodeId node = kNoId;
  Graph g = bench_graph(b, 1, node, dtype);
  const double bytes = node_bytes(g, g.node(node));
  const int copies = static_cast<int>(std::clamp(std::ceil(4 * kGpuL2Bytes / std::max(bytes, 1.0)),
                                                 1.0, static_cast<double>(max_copies)));
  if (copies > 1) g = bench_graph(b, copies, node, dtype);
  auto timed = time_cuda_graph(g, repeats_, budget_, operands_);
  if (!timed.is_ok()) return error("{}: {}", bench_text(b, dtype), timed.status().message());
  const double t = sweeps_.record(timed.value());
  const Node& n = g.node(node);
  return Sample{flops ? node_flops(g, n) : node_bytes(g, n),
                std::max(t - per_program_, 0.0) / copies};
}

StatusOr<Sample> CudaSweep::measure_forms(const std::vector<Bench>& forms, DType dtype, bool flops,
                                          int max_copies) {
  std::vector<Sample> samples;
  for (const Bench& b : forms) {
    ASSIGN_OR_RETURN(Sample s, measure(b, dtype, flops, max_copies));
    samples.push_back(s);
  }
  return combined(samples, overhead_);
}

// One class's curve: its forms measured at the fitted sizes and at the held-out ones, the
// curve fitted as a fraction of `rate`; returns the fitted samples and the held-out error.
StatusOr<std::pair<std::vector<Sample>, double>> CudaSweep::fit_class(
    OpClass op_class, const std::vector<Forms>& fit_forms, const std::vector<Forms>& held_forms,
    bool flops, int max_copies, double rate) {
  std::vector<Sample> fitted, held_samples;
  for (const Forms& forms : fit_forms) {
    ASSIGN_OR_RETURN(Sample s, measure_forms(forms, kBf16, flops, max_copies));
    fitted.push_back(s);
  }
  for (const Forms& forms : held_forms) {
    ASSIGN_OR_RETURN(Sample s, measure_forms(forms, kBf16, flops, max_copies));
    held_samples.push_back(s);
  }
  ASSIGN_OR_RETURN(p_.device.efficiency[op_class],
                   EfficiencyCurve::create(curve_points(fitted, rate, overhead_)));
  const double held_error =
      held_out_error(held_samples, p_.device.efficiency[op_class], rate, overhead_);
  return std::make_pair(std::move(fitted), held_error);
}

StatusOr<double> CudaSweep::gemm() {
  // GEMM: square bf16 products against the datasheet's bf16 peak, held out at sizes between.
  // The curve is flat beyond its ends, which below them prices a kernel's work at the smallest
  // size's efficiency; the smallest products take about as long as their launch, so the sizes
  // start at 64 for the small models and tensor-parallel shards that run them.
  auto square = [](int64_t n) { return one_op("MatMul", {{n, n}, {n, n}}); };
  std::vector<int64_t> fit = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
  std::vector<int64_t> held = {384, 1536, 6144};
  if (options_.quick) {
    fit = {64, 256, 1024, 4096, 8192};
    held = {2048};
  }
  std::vector<Sample> gemm, gemm_held;
  std::map<int64_t, Sample> gemm_at;
  for (int64_t n : fit) {
    ASSIGN_OR_RETURN(Sample s, measure(square(n), kBf16, true, kMatMulCopies));
    gemm.push_back(s);
    gemm_at[n] = s;
  }
  for (int64_t n : held) {
    ASSIGN_OR_RETURN(Sample s, measure(square(n), kBf16, true, kMatMulCopies));
    gemm_held.push_back(s);
  }
  ASSIGN_OR_RETURN(p_.device.efficiency[OpClass::kGemm],
                   EfficiencyCurve::create(curve_points(gemm, peak_, overhead_)));
  const EfficiencyCurve& gemm_curve = p_.device.efficiency[OpClass::kGemm];
  const double gemm_error = held_out_error(gemm_held, gemm_curve, peak_, overhead_);
  cal_.report.push_back(fmt::format(
      "gemm: bf16 4096³ {:.1f} TFLOP/s, 8192³ {:.1f} TFLOP/s (of the datasheet's {:.0f}), {} "
      "sizes fitted ({} to {}), held-out error {:.1f}%",
      tflops(gemm_at.at(4096)), tflops(gemm_at.at(8192)), peak_ * 1e-12, gemm.size(), fit.front(),
      fit.back(), gemm_error * 100));
  // fp32 GEMMs (exact on this runtime: no TF32) priced by the same curve: the fp32 peak is the
  // measured rate at 4096³ over the curve's efficiency at its FLOPs, not the datasheet's.
  {
    ASSIGN_OR_RETURN(Sample s, measure(square(4096), DType::kFloat32, true, kMatMulCopies));
    const double rate = s.work / std::max(s.seconds - overhead_, 0.05 * s.seconds);
    p_.device.peak_flops["fp32"] = rate / gemm_curve.at(s.work);
    cal_.report.push_back(fmt::format(
        "gemm fp32: 4096³ {:.1f} TFLOP/s; peak_flops fp32 set to {:.1f} TFLOP/s so that fp32 "
        "GEMMs are predicted by the bf16 gemm curve (its efficiency at 4096³ is {:.3f})",
        tflops(s), p_.device.peak_flops["fp32"] * 1e-12, gemm_curve.at(s.work)));
  }

  return gemm_error;
}

StatusOr<double> CudaSweep::attention() {
  // Attention: the scores and their weighted sum, batched over batch × heads, head dim 64.
  const int64_t heads = 64, head_dim = 64;
  auto attention_forms = [&](int64_t s) {
    return std::vector<Bench>{one_op("MatMul", {{heads, s, head_dim}, {heads, head_dim, s}}),
                              one_op("MatMul", {{heads, s, s}, {heads, s, head_dim}})};
  };
  const std::vector<int64_t> sequences =
      options_.quick ? std::vector<int64_t>{32, 256, 1024, 4096}
                     : std::vector<int64_t>{32, 64, 128, 256, 512, 1024, 2048, 4096};
  const std::vector<int64_t> sequences_held =
      options_.quick ? std::vector<int64_t>{512} : std::vector<int64_t>{384, 1536};
  ASSIGN_OR_RETURN(
      auto attention_result,
      fit_class(OpClass::kAttention, forms_at(sequences, attention_forms),
                forms_at(sequences_held, attention_forms), true, kMatMulCopies, peak_));
  const auto& [attention, attention_error] = attention_result;
  cal_.report.push_back(fmt::format(
      "attention: bf16 [{}, s, {}] products at s = {} to {}, {:.1f} TFLOP/s at the largest, {} "
      "sizes fitted, held-out error {:.1f}%",
      heads, head_dim, sequences.front(), sequences.back(), tflops(attention.back()),
      attention.size(), attention_error * 100));

  return attention_error;
}

StatusOr<double> CudaSweep::convolution() {
  // Convolutions: 3×3 filters over a batch of 32, 64 to 512 channels at sides 56 to 7, each as
  // its forward, data-gradient (transposed) and weight-gradient form. Their FLOPs grow with
  // channels × side, which ResNet's stages hold constant (64 at 56² to 512 at 7²), so the sizes
  // step it from 448 to 14336 with one stage among them.
  const Attributes same = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  auto conv_forms = [&](int64_t c, int64_t side) {
    const int64_t batch = 32;
    return std::vector<Bench>{
        one_op("Conv", {{batch, c, side, side}, {c, c, 3, 3}}, same),
        one_op("ConvTranspose", {{batch, c, side, side}, {c, c, 3, 3}}, same),
        one_op("Conv", {{c, batch, side, side}, {c, batch, side, side}}, same)};
  };
  using Layer = std::pair<int64_t, int64_t>;  // channels, side
  const std::vector<Layer> conv_fit =
      options_.quick
          ? std::vector<Layer>{{64, 7}, {64, 56}, {512, 28}}
          : std::vector<Layer>{{64, 7}, {128, 7}, {128, 14}, {64, 56}, {256, 28}, {512, 28}};
  const std::vector<Layer> conv_held =
      options_.quick ? std::vector<Layer>{{128, 14}} : std::vector<Layer>{{192, 14}, {384, 28}};
  auto conv_at = [&](const Layer& layer) { return conv_forms(layer.first, layer.second); };
  ASSIGN_OR_RETURN(auto conv_result,
                   fit_class(OpClass::kConv, forms_at(conv_fit, conv_at),
                             forms_at(conv_held, conv_at), true, kConvCopies, peak_));
  const auto& [conv, conv_error] = conv_result;
  cal_.report.push_back(fmt::format(
      "conv: bf16 3×3 forward, transposed and weight-gradient forms, batch 32, {}×{}² to {}×{}², "
      "{:.1f} TFLOP/s at the largest, {} sizes fitted, held-out error {:.1f}%",
      conv_fit.front().first, conv_fit.front().second, conv_fit.back().first,
      conv_fit.back().second, tflops(conv.back()), conv.size(), conv_error * 100));

  return conv_error;
}

StatusOr<double> CudaSweep::memory_bound() {
  // Memory-bound classes, by bytes read and written. The bandwidth is the best rate of large
  // adds; the elementwise and norm curves are fractions of it.
  std::vector<Sample> add;
  for (int64_t n : options_.quick ? std::vector<int64_t>{int64_t{1} << 26}
                                  : std::vector<int64_t>{int64_t{1} << 25, int64_t{1} << 27,
                                                         int64_t{1} << 28}) {
    ASSIGN_OR_RETURN(Sample s, measure(one_op("Add", {{n}, {n}}), kBf16, false, kMemoryCopies));
    add.push_back(s);
  }
  const double bandwidth = best_rate(add, overhead_);
  p_.device.memory_bandwidth = bandwidth;
  // Elements from 2^14 to 2^27 (an add moves 6 bytes per element: 1e5 to 8e8 bytes), held out
  // at sizes between.
  const std::vector<int64_t> memory_fit =
      options_.quick ? std::vector<int64_t>{int64_t{1} << 14, int64_t{1} << 18, int64_t{1} << 22,
                                            int64_t{1} << 26}
                     : std::vector<int64_t>{int64_t{1} << 14, int64_t{1} << 16, int64_t{1} << 18,
                                            int64_t{1} << 20, int64_t{1} << 22, int64_t{1} << 24,
                                            int64_t{1} << 26, int64_t{1} << 27};
  const std::vector<int64_t> memory_held =
      options_.quick ? std::vector<int64_t>{int64_t{3} << 19}
                     : std::vector<int64_t>{int64_t{3} << 15, int64_t{3} << 21};
  auto elementwise_at = [](int64_t n) { return gpu_elementwise_forms(n); };
  ASSIGN_OR_RETURN(
      auto elementwise_result,
      fit_class(OpClass::kElementwise, forms_at(memory_fit, elementwise_at),
                forms_at(memory_held, elementwise_at), false, kMemoryCopies, bandwidth));
  const auto& [elementwise, elementwise_error] = elementwise_result;
  cal_.report.push_back(fmt::format(
      "elementwise: {:.0f} GB/s (best large bf16 add; the datasheet's {:.0f}), add, broadcast "
      "product, division, square root and head transpose in bf16, {} sizes fitted, held-out "
      "error {:.1f}%",
      bandwidth * 1e-9, base_.device.memory_bandwidth * 1e-9, elementwise.size(),
      elementwise_error * 100));
  auto norm_at = [](int64_t n) { return gpu_norm_forms(n); };
  ASSIGN_OR_RETURN(auto norm_result,
                   fit_class(OpClass::kNorm, forms_at(memory_fit, norm_at),
                             forms_at(memory_held, norm_at), false, kMemoryCopies, bandwidth));
  const auto& [norm, norm_error] = norm_result;
  cal_.report.push_back(fmt::format(
      "norm: softmax, layer norm, row and column sums and per-channel means in bf16, {} sizes "
      "fitted, "
      "held-out error {:.1f}%",
      norm.size(), norm_error * 100));

  return std::max(elementwise_error, norm_error);
}

// Fused elementwise runs (the backend runs consecutive elementwise nodes of one shape as one
// interpreted kernel, bf16 ones too): seconds per element and node, the slope between a
// short and a long bf16 chain over 2^24 elements, where the interpreter, not memory, bounds
// the kernel; held out at a chain between them under the model the simulator prices with.
StatusOr<double> CudaSweep::fused() {
  p_.device.fuses_half_types = true;
  const int64_t elements = int64_t{1} << 24;
  const int lengths[] = {2, 8, 5};
  double t[3];
  for (int i = 0; i < 3; ++i) {
    auto timed = time_cuda_graph(elementwise_chain(lengths[i], elements, kBf16), repeats_, budget_,
                                 operands_, /*fuse=*/true);
    if (!timed.is_ok())
      return error("a fused chain of {} bf16 ops: {}", lengths[i], timed.status().message());
    t[i] = sweeps_.record(timed.value());
  }
  p_.device.fused_op_element_s =
      std::max((t[1] - t[0]) / (static_cast<double>(lengths[1] - lengths[0]) * elements), 1e-15);
  double predicted = p_.device.program_overhead_s;
  for (double s : fused_node_seconds(p_, elementwise_chain(lengths[2], elements, kBf16)))
    predicted += std::max(s, 0.0);
  const double fused_error = std::fabs(predicted - t[2]) / t[2];
  cal_.report.push_back(fmt::format(
      "fused elementwise: {:.2f} ps per element and node (bf16 chains of {} and {} nodes over "
      "2^24 elements), held-out error {:.1f}% (a chain of {})",
      p_.device.fused_op_element_s * 1e12, lengths[0], lengths[1], fused_error * 100, lengths[2]));
  return fused_error;
}

// The fused optimizer update (one kernel per parameter): seconds per parameter element, the
// slope between a step's worth of updates of two sizes; held out at a size between them.
StatusOr<double> CudaSweep::optimizer() {
  const int copies = 16;
  const int64_t sizes[] = {int64_t{1} << 18, int64_t{1} << 21, int64_t{1} << 20};
  double t[3];
  for (int i = 0; i < 3; ++i) {
    auto timed = time_cuda_graph(adam_updates(sizes[i], copies), repeats_, budget_, operands_);
    if (!timed.is_ok()) return error("Adam updates: {}", timed.status().message());
    t[i] = sweeps_.record(timed.value());
  }
  p_.device.optimizer_element_s =
      std::max((t[1] - t[0]) / static_cast<double>((sizes[1] - sizes[0]) * copies), 1e-15);
  double predicted = p_.device.program_overhead_s;
  for (double s : fused_node_seconds(p_, adam_updates(sizes[2], copies)))
    predicted += std::max(s, 0.0);
  const double adam_error = std::fabs(predicted - t[2]) / t[2];
  cal_.report.push_back(fmt::format(
      "fused optimizer: {:.2f} ps per parameter element (Adam over 16 parameters of 2^18 and "
      "2^21 elements), held-out error {:.1f}% (2^20)",
      p_.device.optimizer_element_s * 1e12, adam_error * 100));
  return adam_error;
}

// bf16 GEMMs by shape, the profile's gemm_shapes (which prices half-precision GEMMs in place of
// the gemm curve, so a base profile's table never outlives this calibration): every (m, n, k) of
// a grid from 256 to 4096, each as a fraction of the peak net of the launch overhead. Held out:
// products between and beyond the grid points (a tp-split projection, a skinny one, one of
// 12288 rows), each predicted by the table.
StatusOr<double> CudaSweep::gemm_shapes() {
  const std::vector<int64_t> dims = options_.quick
                                        ? std::vector<int64_t>{256, 1024, 4096}
                                        : std::vector<int64_t>{256, 512, 1024, 2048, 4096};
  using Shape3 = std::array<int64_t, 3>;
  auto product = [](const Shape3& s) { return one_op("MatMul", {{s[0], s[2]}, {s[2], s[1]}}); };
  std::vector<std::array<double, 4>> rows;
  double largest = 0;
  for (int64_t m : dims) {
    for (int64_t n : dims) {
      for (int64_t k : dims) {
        ASSIGN_OR_RETURN(Sample s, measure(product({m, n, k}), kBf16, true, kMatMulCopies));
        const double busy = std::max(s.seconds - overhead_, 0.05 * s.seconds);
        rows.push_back({static_cast<double>(m), static_cast<double>(n), static_cast<double>(k),
                        std::clamp(s.work / busy / peak_, 1e-4, 1.0)});
        largest = tflops(s);
      }
    }
  }
  ASSIGN_OR_RETURN(p_.device.gemm_shapes, GemmShapeTable::create(rows));
  const std::vector<Shape3> held = {{768, 3072, 768}, {6144, 384, 1536}, {12288, 1536, 6144}};
  double worst = 0;
  for (const Shape3& h : held) {
    ASSIGN_OR_RETURN(Sample s, measure(product(h), kBf16, true, kMatMulCopies));
    const double predicted =
        s.work /
            (peak_ * p_.device.gemm_shapes->at(static_cast<double>(h[0]), static_cast<double>(h[1]),
                                               static_cast<double>(h[2]))) +
        overhead_;
    worst = std::max(worst, std::fabs(predicted - s.seconds) / s.seconds);
  }
  cal_.report.push_back(fmt::format(
      "gemm shapes: bf16 m, n, k each {} to {} ({} products), {:.1f} TFLOP/s at {}³, held-out "
      "error {:.1f}% ({} products between and beyond the grid points)",
      dims.front(), dims.back(), rows.size(), largest, dims.back(), worst * 100, held.size()));
  return worst;
}

// GEMMs whose rows are not whole 16-byte units (a vocabulary projection over an odd
// vocabulary): its forward Y = X·Wᵀ and gradients dX = dY·W, dW = dYᵀ·X, timed together
// against what the aligned GEMMs' rates (the shape table's) predict for them.
Status CudaSweep::unaligned_gemm() {
  const int64_t tokens = 8192, hidden = 1024, vocab = 32001;
  GraphBuilder b("unaligned_gemms");
  const ValueId x = b.input("x", kBf16, {tokens, hidden});
  const ValueId w = b.input("w", kBf16, {vocab, hidden});
  const ValueId dy = b.input("dy", kBf16, {tokens, vocab});
  const Attributes swap = {{"perm", std::vector<int64_t>{1, 0}}};
  b.output(b.op1("MatMul", {x, b.op1("Transpose", {w}, swap)}));
  b.output(b.op1("MatMul", {dy, w}));
  b.output(b.op1("MatMul", {b.op1("Transpose", {dy}, swap), x}));
  const Graph g = b.finish();
  auto timed = time_cuda_graph(g, repeats_, budget_, operands_);
  if (!timed.is_ok()) return error("unaligned GEMMs: {}", timed.status().message());
  const double measured =
      std::max(sweeps_.record(timed.value()) - p_.device.program_overhead_s, 1e-9);
  const double flops = 2.0 * tokens * hidden * vocab;
  // (m, n, k) of the forward and of the two gradients.
  const std::array<std::array<double, 3>, 3> shapes = {{{1.0 * tokens, 1.0 * vocab, 1.0 * hidden},
                                                        {1.0 * tokens, 1.0 * hidden, 1.0 * vocab},
                                                        {1.0 * vocab, 1.0 * hidden, 1.0 * tokens}}};
  double aligned = 0;
  for (const auto& [m, n, k] : shapes) {
    const double rate = p_.device.gemm_shapes ? p_.device.gemm_shapes->at(m, n, k)
                                              : p_.device.efficiency[OpClass::kGemm].at(flops);
    aligned += flops / (peak_ * rate) + overhead_;
  }
  p_.device.gemm_unaligned_efficiency = std::clamp(aligned / measured, 0.01, 1.0);
  cal_.report.push_back(fmt::format(
      "unaligned gemm: bf16 vocabulary projection ({} tokens, hidden {}, vocabulary {}) and "
      "its gradients at {:.1f} TFLOP/s, {:.3f} of the aligned curve's rate",
      tokens, hidden, vocab, 3 * flops / measured * 1e-12, p_.device.gemm_unaligned_efficiency));
  return Status::ok();
}

StatusOr<double> CudaSweep::collectives() {
  // The intra-node tier over this machine's GPUs (all of them, up to the tier's group): α and
  // each collective's efficiency by least squares on relative error over NCCL all-reduces,
  // all-gathers, reduce-scatters and all-to-alls of many sizes, each under the communication
  // model's ring formula for n devices. β stays the datasheet's link bandwidth: without a
  // point-to-point message (the runtime sends through the host) it is not told apart from the
  // efficiencies, which absorb what the links achieve.
  if (p_.tiers.empty()) return error("{}: the profile has no tiers to calibrate", base_.name);
  Tier& tier = p_.tiers.front();
  const int64_t n =
      std::min<int64_t>(runtime::cuda_device_count(), std::max<int64_t>(tier.devices_per_group, 2));
  const std::vector<double> sizes = options_.quick ? std::vector<double>{1e5, 1e7, 1e8}
                                                   : std::vector<double>{1e4, 1e5, 1e6, 1e7, 1e8};
  const std::vector<Collective> kinds = {Collective::kAllReduce, Collective::kAllGather,
                                         Collective::kReduceScatter, Collective::kAllToAll};
  const int replays = std::max(repeats_, options_.quick ? 10 : 20);
  const double steps = static_cast<double>(n - 1), share = steps / static_cast<double>(n);
  // The model's bytes: an all-gather's result, the other collectives' input.
  auto model_bytes = [&](Collective c, int64_t elements) {
    return 4.0 * static_cast<double>(elements) * (c == Collective::kAllGather ? n : 1);
  };
  auto row_of = [&](Collective c) {
    return c == Collective::kAllReduce ? std::pair{2 * steps, 2 * share} : std::pair{steps, share};
  };
  struct GpuSample {
    Collective c;
    double bytes, seconds;
  };
  std::vector<GpuSample> samples;
  for (Collective c : kinds) {
    for (double bytes : sizes) {
      const auto elements = static_cast<int64_t>(bytes / 4) / n * n;
      ASSIGN_OR_RETURN(double t, time_gpu_collective(c, n, elements, replays));
      samples.push_back({c, model_bytes(c, elements), sweeps_.record(t)});
    }
  }
  const auto unknowns = static_cast<Eigen::Index>(1 + kinds.size());
  Eigen::MatrixXd rows = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(samples.size()), unknowns);
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(samples.size()));
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto [alpha_steps, byte_share] = row_of(samples[i].c);
    const auto column = static_cast<Eigen::Index>(
        1 + (std::find(kinds.begin(), kinds.end(), samples[i].c) - kinds.begin()));
    rows(static_cast<Eigen::Index>(i), 0) = alpha_steps / samples[i].seconds;
    rows(static_cast<Eigen::Index>(i), column) = byte_share * samples[i].bytes / samples[i].seconds;
  }
  const Eigen::VectorXd solved = rows.colPivHouseholderQr().solve(ones);
  tier.alpha_s = std::max(solved(0), 1e-7);
  for (size_t k = 0; k < kinds.size(); ++k) {
    const double per_byte = solved(static_cast<Eigen::Index>(1 + k));
    tier.efficiency[kinds[k]] =
        per_byte > 0 ? std::clamp(1.0 / (per_byte * tier.bandwidth), 1e-3, 1.0) : 1.0;
  }
  // Held out: an all-reduce and an all-gather between the fitted sizes, against the model.
  double worst = 0;
  std::vector<int64_t> group(static_cast<size_t>(n));
  std::iota(group.begin(), group.end(), 0);
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather}) {
    const auto elements = static_cast<int64_t>((options_.quick ? 3e6 : 3e7) / 4) / n * n;
    ASSIGN_OR_RETURN(double t, time_gpu_collective(c, n, elements, replays));
    t = sweeps_.record(t);
    const double predicted = collective_cost(p_, c, model_bytes(c, elements), group).seconds;
    worst = std::max(worst, std::fabs(predicted - t) / t);
  }
  cal_.report.push_back(fmt::format(
      "collectives over {} GPUs (NCCL): alpha {:.2f} µs, all-reduce at {:.0f}%, all-gather "
      "{:.0f}%, "
      "reduce-scatter {:.0f}%, all-to-all {:.0f}% of {:.0f} GB/s, {} collectives fitted, held-out "
      "error {:.1f}%",
      n, tier.alpha_s * 1e6, tier.efficiency[Collective::kAllReduce] * 100,
      tier.efficiency[Collective::kAllGather] * 100,
      tier.efficiency[Collective::kReduceScatter] * 100,
      tier.efficiency[Collective::kAllToAll] * 100, tier.bandwidth * 1e-9, samples.size(),
      worst * 100));
  return worst;
}

StatusOr<Calibration> calibrate_cuda_sweep(const CalibrationOptions& options,
                                           const HardwareProfile& base, Sweeps& sweeps,
                                           RandomOperands& operands) {
  return CudaSweep(options, base, sweeps, operands).run();
}

}  // namespace

StatusOr<Calibration> calibrate_cpu(const CalibrationOptions& options) {
  Sweeps sweeps;
  Calibration cal;
  for (int k = 0; k < std::max(options.sweeps, 1); ++k) {
    sweeps.restart();
    ASSIGN_OR_RETURN(cal, calibrate_sweep(options, sweeps));
  }
  return cal;
}

StatusOr<Calibration> calibrate_cuda(const CalibrationOptions& options,
                                     const HardwareProfile& base) {
  if (const std::string why = runtime::cuda_unavailable_reason(); !why.empty())
    return error("--backend cuda: {}", why);
  if (!base.device.peak_flops.count("bf16"))
    return error(
        "{}: device.peak_flops: needs bf16 (the GPU's efficiency curves are fractions "
        "of it)",
        base.source.empty() ? base.name : base.source);
  Sweeps sweeps;
  RandomOperands operands;
  Calibration cal;
  for (int k = 0; k < std::max(options.sweeps, 1); ++k) {
    sweeps.restart();
    ASSIGN_OR_RETURN(cal, calibrate_cuda_sweep(options, base, sweeps, operands));
  }
  return cal;
}

std::string profile_yaml(const HardwareProfile& p, const std::string& header) {
  auto points = [](const EfficiencyCurve& c) {
    std::vector<std::string> parts;
    for (const auto& [work, eff] : c.points())
      parts.push_back(fmt::format("[{:.6g}, {:.4g}]", work, eff));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  };
  std::string y = header;
  y += fmt::format("name: {}\n", p.name);
  if (p.memory_policy != MemoryPolicy::kAutopar)
    y += fmt::format("memory_policy: {}\n", memory_policy_name(p.memory_policy));
  if (p.attention != AttentionKernel::kUnfused || !p.fusions.empty() ||
      p.memory_format != MemoryFormat::kNhwc) {
    std::vector<std::string> fusions;
    for (Fusion f : p.fusions) fusions.emplace_back(fusion_name(f));
    y += fmt::format("kernels: {{attention: {}, fusions: [{}]{}}}\n",
                     attention_kernel_name(p.attention), fmt::join(fusions, ", "),
                     p.memory_format != MemoryFormat::kNhwc
                         ? fmt::format(", memory_format: {}", memory_format_name(p.memory_format))
                         : "");
  }
  y += fmt::format("device:\n  name: {}\n  peak_flops: {{", p.device.name);
  bool first = true;
  for (const auto& [dtype, flops] : p.device.peak_flops) {
    y += fmt::format("{}{}: {:.6g}", first ? "" : ", ", dtype, flops);
    first = false;
  }
  y += "}\n";
  y += fmt::format("  memory_bytes: {:.6g}\n  memory_bandwidth: {:.6g}\n", p.device.memory_bytes,
                   p.device.memory_bandwidth);
  y += fmt::format("  launch_overhead_s: {:.6g}\n", p.device.launch_overhead_s);
  if (p.device.program_overhead_s > 0)
    y += fmt::format("  program_overhead_s: {:.6g}\n", p.device.program_overhead_s);
  if (!p.device.overlap_communication) y += "  overlap_communication: false\n";
  if (p.device.overlap_slowdown > 0)
    y += fmt::format("  overlap_slowdown: {:.4g}\n", p.device.overlap_slowdown);
  if (p.device.tf32_matmul) y += "  tf32_matmul: true\n";
  if (p.device.tf32_conv) y += "  tf32_conv: true\n";
  if (p.device.nhwc_convolutions) y += "  nhwc_convolutions: true\n";
  if (p.device.l2_bytes > 0) y += fmt::format("  l2_bytes: {:.0f}\n", p.device.l2_bytes);
  if (p.device.free_views) y += "  free_views: true\n";
  if (p.device.fused_op_element_s > 0)
    y += fmt::format("  fused_op_element_s: {:.6g}\n", p.device.fused_op_element_s);
  if (p.device.fuses_half_types) y += "  fuses_half_types: true\n";
  if (p.device.gemm_unaligned_efficiency < 1)
    y += fmt::format("  gemm_unaligned_efficiency: {:.4g}\n", p.device.gemm_unaligned_efficiency);
  if (p.device.optimizer_element_s > 0)
    y += fmt::format("  optimizer_element_s: {:.6g}\n", p.device.optimizer_element_s);
  if (p.device.collective_overhead_s > 0)
    y += fmt::format("  collective_overhead_s: {:.6g}\n", p.device.collective_overhead_s);
  y += fmt::format("  reserved_bytes: {:.6g}\n  efficiency:\n", p.device.reserved_bytes);
  for (const auto& [op_class, curve] : p.device.efficiency)
    y += fmt::format("    {}: {}\n", op_class_name(op_class), points(curve));
  if (p.device.flash_attention)
    y += fmt::format("    flash_attention: {}\n", points(*p.device.flash_attention));
  if (p.device.flash_attention_backward) {
    y += fmt::format("    flash_attention_backward: {}\n",
                     points(*p.device.flash_attention_backward));
  }
  if (p.device.gemm_shapes) {
    std::vector<std::string> rows;
    for (const auto& [m, n, k, eff] : p.device.gemm_shapes->rows())
      rows.push_back(fmt::format("[{:.0f}, {:.0f}, {:.0f}, {:.4g}]", m, n, k, eff));
    y += fmt::format("    gemm_shapes: [{}]\n", fmt::join(rows, ", "));
  }
  y += fmt::format("topology:\n  devices_per_node: {}\n  tiers:\n", p.devices_per_node);
  for (const Tier& t : p.tiers) {
    y += fmt::format(
        "    - name: {}\n      devices_per_group: {}\n      alpha_s: {:.6g}\n"
        "      bandwidth: {:.6g}\n",
        t.name, t.devices_per_group, t.alpha_s, t.bandwidth);
    if (t.nics_per_node > 0) y += fmt::format("      nics_per_node: {}\n", t.nics_per_node);
    y += "      efficiency: {";
    first = true;
    for (const auto& [c, eff] : t.efficiency) {
      y += fmt::format("{}{}: {:.4f}", first ? "" : ", ", collective_name(c), eff);
      first = false;
    }
    y += "}\n";
  }
  return y;
}

}  // namespace autopar
