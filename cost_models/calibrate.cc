// CPU calibration: time single-node graphs and the inproc collectives, fit the curves and α/β.
#include "autopar/cost/calibrate.h"

#include <Eigen/Dense>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include "autopar/cost/compute.h"
#include "autopar/ir/builder.h"
#include "autopar/ops/op_def.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/executor.h"

namespace autopar {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A graph of one op over fresh inputs, and the median seconds of a run on one thread.
struct Bench {
  Graph graph;
  NodeId node = 0;
};

StatusOr<double> time_graph(const Graph& g, int repeats) {
  runtime::ExecutorOptions options;
  options.num_threads = 1;
  options.fuse_elementwise = false;
  ASSIGN_OR_RETURN(runtime::Executor ex, runtime::Executor::create(g, options));
  std::vector<TensorPtr> inputs;
  for (ValueId in : g.inputs()) {
    Tensor t(g.value(in).dtype, g.value(in).shape.dims);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, 0.5 + 1e-3 * (i % 97));
    inputs.push_back(std::make_shared<const Tensor>(std::move(t)));
  }
  RETURN_IF_ERROR(ex.run_inputs(inputs).status());  // warm-up
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(ex.run_inputs(inputs).status());
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(times);
}

Bench one_op(const std::string& op, const std::vector<std::vector<int64_t>>& inputs,
             Attributes attrs = {}) {
  GraphBuilder b("bench");
  std::vector<ValueId> ins;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(b.input(fmt::format("x{}", i), DType::kFloat32, inputs[i]));
  const ValueId y = b.op1(op, ins, std::move(attrs));
  b.output(y);
  Bench bench{b.finish(), 0};
  return bench;
}

struct Sample {
  double work = 0;     // FLOPs or bytes
  double seconds = 0;  // measured, launch overhead included
};

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

double best_rate(const std::vector<Sample>& samples, double overhead) {
  double best = 0;
  for (const Sample& s : samples)
    best = std::max(best, s.work / std::max(s.seconds - overhead, 0.05 * s.seconds));
  return best;
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

// Point-to-point seconds of one message of `bytes` between two threads (half a round trip),
// the echoing thread alive for every repeat.
double ping_seconds(double bytes, int repeats) {
  auto world = runtime::create_inproc_world(2);
  const auto n = static_cast<int64_t>(std::max(1.0, bytes / 4));
  const int rounds = repeats * 4 + 2;
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
  return median(times);
}

// Seconds of one collective over two threads (each thread runs every repeat; the collectives
// themselves keep them in step).
double collective_seconds(Collective c, double bytes, int repeats) {
  auto world = runtime::create_inproc_world(2);
  const auto n = static_cast<int64_t>(std::max(2.0, bytes / 4)) / 2 * 2;
  const int rounds = repeats * 2 + 1;
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
  return median(worst);
}

}  // namespace

StatusOr<Calibration> calibrate_cpu(const CalibrationOptions& options) {
  Calibration cal;
  HardwareProfile& p = cal.profile;
  const int repeats = std::max(options.repeats, 1);
  p.name = "cpu-local";
  p.device.name = "cpu-core";
  p.devices_per_node = std::max<int64_t>(1, std::thread::hardware_concurrency());

  // Launch overhead: a one-element add is nothing but the per-node cost.
  {
    Bench b = one_op("Add", {{1}, {1}});
    ASSIGN_OR_RETURN(p.device.launch_overhead_s, time_graph(b.graph, repeats * 4));
  }
  const double overhead = p.device.launch_overhead_s;
  auto measure = [&](const Bench& b, bool flops) -> StatusOr<Sample> {
    const Node& n = b.graph.node(b.node);
    ASSIGN_OR_RETURN(double t, time_graph(b.graph, repeats));
    return Sample{flops ? node_flops(b.graph, n) : node_bytes(b.graph, n), t};
  };
  // GEMM: square sizes, with held-out sizes between them.
  std::vector<int64_t> fit = {8, 16, 32, 64, 128, 256, 384};
  std::vector<int64_t> held = {24, 96, 192};
  if (options.quick) {
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
  const double peak = best_rate(gemm, overhead);
  p.device.peak_flops["fp32"] = peak;
  ASSIGN_OR_RETURN(p.device.efficiency[OpClass::kGemm],
                   EfficiencyCurve::create(curve_points(gemm, peak, overhead)));
  const double gemm_error =
      held_out_error(gemm_held, p.device.efficiency[OpClass::kGemm], peak, overhead);
  cal.report.push_back(
      fmt::format("gemm: peak {:.2f} GFLOP/s on one core, {} sizes fitted, held-out error {:.1f}%",
                  peak * 1e-9, gemm.size(), gemm_error * 100));
  // Attention-like batched matmuls and convolutions share the peak, with their own curves.
  std::vector<Sample> attention, conv;
  for (int64_t n :
       options.quick ? std::vector<int64_t>{16, 64} : std::vector<int64_t>{16, 32, 64, 128}) {
    ASSIGN_OR_RETURN(Sample s, measure(one_op("MatMul", {{4, n, 32}, {4, 32, n}}), true));
    attention.push_back(s);
  }
  for (int64_t c :
       options.quick ? std::vector<int64_t>{4, 16} : std::vector<int64_t>{4, 8, 16, 32}) {
    ASSIGN_OR_RETURN(Sample s, measure(one_op("Conv", {{1, c, 16, 16}, {c, c, 3, 3}},
                                              {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
                                       true));
    conv.push_back(s);
  }
  ASSIGN_OR_RETURN(p.device.efficiency[OpClass::kAttention],
                   EfficiencyCurve::create(curve_points(attention, peak, overhead)));
  ASSIGN_OR_RETURN(p.device.efficiency[OpClass::kConv],
                   EfficiencyCurve::create(curve_points(conv, peak, overhead)));
  // Memory-bound classes: elementwise adds and softmaxes, by bytes.
  std::vector<Sample> add, add_held, norm;
  for (int64_t n : options.quick ? std::vector<int64_t>{1 << 10, 1 << 16}
                                 : std::vector<int64_t>{1 << 8, 1 << 12, 1 << 16, 1 << 20}) {
    ASSIGN_OR_RETURN(Sample s, measure(one_op("Add", {{n}, {n}}), false));
    add.push_back(s);
  }
  for (int64_t n :
       options.quick ? std::vector<int64_t>{1 << 13} : std::vector<int64_t>{1 << 10, 1 << 18}) {
    ASSIGN_OR_RETURN(Sample s, measure(one_op("Add", {{n}, {n}}), false));
    add_held.push_back(s);
  }
  const double bandwidth = best_rate(add, overhead);
  p.device.memory_bandwidth = bandwidth;
  ASSIGN_OR_RETURN(p.device.efficiency[OpClass::kElementwise],
                   EfficiencyCurve::create(curve_points(add, bandwidth, overhead)));
  for (int64_t rows :
       options.quick ? std::vector<int64_t>{4, 256} : std::vector<int64_t>{4, 64, 1024}) {
    ASSIGN_OR_RETURN(Sample s,
                     measure(one_op("Softmax", {{rows, 256}}, {{"axis", int64_t{-1}}}), false));
    norm.push_back(s);
  }
  ASSIGN_OR_RETURN(p.device.efficiency[OpClass::kNorm],
                   EfficiencyCurve::create(curve_points(norm, bandwidth, overhead)));
  const double add_error =
      held_out_error(add_held, p.device.efficiency[OpClass::kElementwise], bandwidth, overhead);
  cal.report.push_back(fmt::format(
      "elementwise: {:.2f} GB/s on one core, {} sizes fitted, held-out error {:.1f}%; launch "
      "overhead {:.2f} µs",
      bandwidth * 1e-9, add.size(), add_error * 100, overhead * 1e6));
  p.device.memory_bytes = total_memory_bytes() / static_cast<double>(p.devices_per_node);
  p.device.reserved_bytes = std::min(64e6, 0.05 * p.device.memory_bytes);

  // The inproc tier: α and β by least squares on point-to-point times t = α + S/β.
  std::vector<double> sizes = options.quick ? std::vector<double>{1e3, 1e5, 1e6}
                                            : std::vector<double>{1e3, 1e4, 1e5, 1e6, 4e6};
  Eigen::MatrixXd a(static_cast<Eigen::Index>(sizes.size()), 2);
  Eigen::VectorXd t(static_cast<Eigen::Index>(sizes.size()));
  for (size_t i = 0; i < sizes.size(); ++i) {
    a(static_cast<Eigen::Index>(i), 0) = 1.0;
    a(static_cast<Eigen::Index>(i), 1) = sizes[i];
    t(static_cast<Eigen::Index>(i)) = ping_seconds(sizes[i], repeats);
  }
  const Eigen::VectorXd fit_ab = a.colPivHouseholderQr().solve(t);
  Tier tier;
  tier.name = "inproc";
  tier.devices_per_group = p.devices_per_node;
  tier.alpha_s = std::max(fit_ab(0), 1e-7);
  tier.bandwidth = fit_ab(1) > 0 ? 1.0 / fit_ab(1) : 1e10;
  const double held_size = options.quick ? 3e5 : 2e6;
  const double measured_p2p = ping_seconds(held_size, repeats);
  const double predicted_p2p = tier.alpha_s + held_size / tier.bandwidth;
  const double p2p_error = std::fabs(predicted_p2p - measured_p2p) / measured_p2p;
  tier.efficiency[Collective::kPointToPoint] = 1.0;
  // Collectives of two devices: bus bandwidth (n−1)/n · S / t, or 2(n−1)/n · S / t for an
  // all-reduce, as a fraction of β.
  const double bytes = options.quick ? 1e6 : 4e6;
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll}) {
    const double seconds = collective_seconds(c, bytes, repeats);
    const double factor = c == Collective::kAllReduce ? 1.0 : 0.5;
    const double busy = std::max(seconds - tier.alpha_s, 0.05 * seconds);
    tier.efficiency[c] = std::clamp(factor * bytes / busy / tier.bandwidth, 1e-3, 1.0);
  }
  p.tiers = {tier};
  cal.report.push_back(
      fmt::format("inproc: alpha {:.2f} µs, beta {:.2f} GB/s, held-out point-to-point error "
                  "{:.1f}%; all-reduce "
                  "at {:.0f}% of beta",
                  tier.alpha_s * 1e6, tier.bandwidth * 1e-9, p2p_error * 100,
                  tier.efficiency[Collective::kAllReduce] * 100));
  cal.worst_held_out_error = std::max({gemm_error, add_error, p2p_error});
  return cal;
}

std::string profile_yaml(const HardwareProfile& p, const std::string& header) {
  auto points = [](const EfficiencyCurve& c) {
    std::vector<std::string> parts;
    for (const auto& [work, eff] : c.points())
      parts.push_back(fmt::format("[{:.6g}, {:.4f}]", work, eff));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  };
  std::string y = header;
  y += fmt::format("name: {}\ndevice:\n  name: {}\n  peak_flops: {{", p.name, p.device.name);
  bool first = true;
  for (const auto& [dtype, flops] : p.device.peak_flops) {
    y += fmt::format("{}{}: {:.6g}", first ? "" : ", ", dtype, flops);
    first = false;
  }
  y += "}\n";
  y += fmt::format("  memory_bytes: {:.6g}\n  memory_bandwidth: {:.6g}\n", p.device.memory_bytes,
                   p.device.memory_bandwidth);
  y += fmt::format("  launch_overhead_s: {:.6g}\n  reserved_bytes: {:.6g}\n  efficiency:\n",
                   p.device.launch_overhead_s, p.device.reserved_bytes);
  for (const auto& [op_class, curve] : p.device.efficiency)
    y += fmt::format("    {}: {}\n", op_class_name(op_class), points(curve));
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
