// autopar profile PLAN --hw PROFILE [--steps N] [--top N] [--json]: a plan run on this
// machine's runtime, its measured step and node times next to what the simulator predicts.
// With --backend cuda, each role's programs run on one GPU (communication stubbed), their
// compute next to the model's, per role and per op class.
#include <algorithm>
#include <cmath>
#include <thread>

#include <nlohmann/json.hpp>

#include "autopar/cost/compute.h"
#include "autopar/cost/simulator.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/cuda_plan.h"
#include "commands.h"
#include "plan_command.h"

namespace autopar::cli {
namespace {

struct ProfileFlags {
  std::string plan;
  std::string hw;
  std::string backend = "cpu";
  int steps = 10;
  uint64_t seed = 0;
  int top = 0;
  bool json = false;
};

// The classes a step's time is split into: the compute model's op classes and communication.
const std::vector<std::string>& class_names() {
  static const std::vector<std::string> names = {"gemm", "conv",      "elementwise",
                                                 "norm", "attention", "communication"};
  return names;
}

std::string class_of(const Graph& g, const Node& n) {
  const std::optional<OpClass> c = op_class_of(g, n);
  return c ? op_class_name(*c) : "communication";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

double relative(double predicted, double measured) {
  return measured > 0 ? (predicted - measured) / measured : 0.0;
}

struct Times {
  double predicted = 0, measured = 0;  // seconds per step of the average device
};

struct OpTimes : Times {
  std::string op_class;
  double nodes = 0;  // run per step by the average device
};

// Predicted against measured: the step, and its nodes' seconds by class and by op type. The
// measured steps follow a warm-up step (first-touch allocations, cold caches), which is left
// out of every figure but `warm_up`.
struct Profile {
  double predicted_step = 0;
  std::vector<double> steps;  // measured
  double warm_up = 0;
  std::map<std::string, Times> by_class;
  std::map<std::string, OpTimes> by_op;
  // Predicted: the simulated timeline's idle time less the communication it overlaps with
  // computation; measured: the runner's and executor's work between nodes.
  Times outside_nodes;
  // Per device, seconds per step: its communication nodes (waits for its peers included) and
  // its time outside nodes.
  std::vector<double> device_communication, device_outside;
};

// The simulated step, with every node's predicted seconds gathered per role by class and op.
StatusOr<Profile> predict(const Plan& plan, const NodeSeconds& model_costs,
                          const StreamModel& streams) {
  Profile p;
  std::vector<std::map<std::string, double>> by_class(plan.roles.size());
  std::vector<std::map<std::string, double>> by_op(plan.roles.size());
  const NodeSeconds costs = [&](const Role& role, NodeId n, int64_t device) {
    const Node& node = role.graph.node(n);
    const double seconds = model_costs(role, n, device);
    by_class[role.id][class_of(role.graph, node)] += seconds;
    by_op[role.id][node.op_type] += seconds;
    return seconds;
  };
  ASSIGN_OR_RETURN(Simulation sim, simulate(plan, costs, false, streams));
  p.predicted_step = sim.step_seconds;
  for (const std::string& name : class_names()) p.by_class[name] = {};
  const int64_t devices = static_cast<int64_t>(plan.device_role.size());
  const double per_device = 1.0 / static_cast<double>(devices);
  double in_nodes = 0;
  for (int64_t d = 0; d < devices; ++d) {
    const Role& role = plan.role_of(d);
    for (const auto& [name, seconds] : by_class[role.id]) {
      p.by_class[name].predicted += seconds * per_device;
      in_nodes += seconds * per_device;
    }
    for (const auto& [op, seconds] : by_op[role.id]) p.by_op[op].predicted += seconds * per_device;
    for (const ScheduleStep& step : role.schedule) {
      const Program& prog = role.programs[role.program_of(step)];
      for (NodeId n = prog.begin; n < prog.end; ++n) {
        OpTimes& op = p.by_op[role.graph.node(n).op_type];
        op.op_class = class_of(role.graph, role.graph.node(n));
        op.nodes += per_device;
      }
    }
  }
  p.outside_nodes.predicted = sim.step_seconds - in_nodes;
  return p;
}

// The measured side of `p` from a profiled run.
void attribute(const Plan& plan, const runtime::PlanResult& result, Profile& p) {
  p.warm_up = result.step_seconds.front();
  p.steps.assign(result.step_seconds.begin() + 1, result.step_seconds.end());
  const int64_t devices = static_cast<int64_t>(plan.device_role.size());
  const double per_device = 1.0 / static_cast<double>(devices);
  const double per_step = 1.0 / static_cast<double>(p.steps.size());
  p.device_communication.assign(devices, 0.0);
  p.device_outside.assign(devices, 0.0);
  for (int64_t d = 0; d < devices; ++d) {
    const Role& role = plan.role_of(d);
    std::vector<std::string> classes;
    for (const Node& node : role.graph.nodes()) classes.push_back(class_of(role.graph, node));
    for (size_t s = 1; s < result.node_seconds[d].size(); ++s) {
      const std::vector<double>& nodes = result.node_seconds[d][s];
      double in_nodes = 0;
      for (size_t n = 0; n < nodes.size(); ++n) {
        const double seconds = nodes[n] * per_step;
        p.by_class[classes[n]].measured += seconds * per_device;
        p.by_op[role.graph.node(static_cast<NodeId>(n)).op_type].measured += seconds * per_device;
        if (classes[n] == "communication") p.device_communication[d] += seconds;
        in_nodes += nodes[n];
      }
      const double outside = (result.device_step_seconds[d][s] - in_nodes) * per_step;
      p.device_outside[d] += outside;
      p.outside_nodes.measured += outside * per_device;
    }
  }
}

nlohmann::json profile_json(const ProfileFlags& f, const HardwareProfile& hw, const Plan& plan,
                            const Profile& p) {
  auto times = [](const Times& t) {
    return nlohmann::json{{"predicted_s", t.predicted}, {"measured_s", t.measured}};
  };
  nlohmann::json by_class = nlohmann::json::object();
  for (const auto& [name, t] : p.by_class) by_class[name] = times(t);
  nlohmann::json by_op = nlohmann::json::object();
  for (const auto& [op, t] : p.by_op) {
    by_op[op] = times(t);
    by_op[op]["class"] = t.op_class;
    by_op[op]["nodes"] = t.nodes;
  }
  nlohmann::json by_device = nlohmann::json::array();
  for (size_t d = 0; d < p.device_communication.size(); ++d) {
    by_device.push_back({{"device", d},
                         {"communication_s", p.device_communication[d]},
                         {"outside_nodes_s", p.device_outside[d]}});
  }
  double mean = 0;
  for (double s : p.steps) mean += s / static_cast<double>(p.steps.size());
  const double measured = median(p.steps);
  return {{"plan", f.plan},
          {"profile", hw.name},
          {"devices", plan.device_role.size()},
          {"steps", p.steps.size()},
          {"predicted_step_s", p.predicted_step},
          {"measured_step_s", measured},
          {"measured_step_mean_s", mean},
          {"measured_steps_s", p.steps},
          {"warmup_step_s", p.warm_up},
          {"relative_error", relative(p.predicted_step, measured)},
          {"by_class", by_class},
          {"outside_nodes", times(p.outside_nodes)},
          {"by_op", by_op},
          {"by_device", by_device}};
}

std::string shapes(const Graph& g, const std::vector<ValueId>& values) {
  std::vector<std::string> parts;
  for (ValueId v : values) {
    if (v != kNoId) parts.push_back(fmt::format("[{}]", fmt::join(g.value(v).shape.dims, ",")));
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

// The first role's `top` slowest nodes: operands, predicted and measured seconds per step, and
// the measurement on each of the role's first four devices (their waits at collectives differ).
void print_slowest_nodes(const Plan& plan, const runtime::PlanResult& result,
                         const NodeSeconds& model_costs, int top) {
  const Role& role = plan.roles.front();
  std::vector<int64_t> devices;
  for (size_t d = 0; d < plan.device_role.size() && devices.size() < 4; ++d) {
    if (plan.device_role[d] == role.id) devices.push_back(static_cast<int64_t>(d));
  }
  const size_t nodes = static_cast<size_t>(role.graph.num_nodes());
  std::vector<double> runs(nodes, 0.0), mean(nodes, 0.0);
  for (const ScheduleStep& step : role.schedule) {
    const Program& prog = role.programs[role.program_of(step)];
    for (NodeId n = prog.begin; n < prog.end; ++n) runs[n] += 1;
  }
  std::vector<std::vector<double>> on_device(devices.size(), std::vector<double>(nodes, 0.0));
  for (size_t k = 0; k < devices.size(); ++k) {
    const auto& steps = result.node_seconds[devices[k]];
    const double per_step = 1.0 / static_cast<double>(steps.size() - 1);
    for (size_t s = 1; s < steps.size(); ++s) {
      for (size_t n = 0; n < nodes; ++n) {
        on_device[k][n] += steps[s][n] * per_step;
        mean[n] += steps[s][n] * per_step / static_cast<double>(devices.size());
      }
    }
  }
  std::vector<NodeId> order(nodes);
  for (size_t n = 0; n < nodes; ++n) order[n] = static_cast<NodeId>(n);
  std::stable_sort(order.begin(), order.end(),
                   [&](NodeId a, NodeId b) { return mean[a] > mean[b]; });
  std::vector<std::string> columns;
  for (int64_t d : devices) columns.push_back(fmt::format("{:>9}", fmt::format("dev {}", d)));
  fmt::print("{:<18} {:<13} {:>12} {:>12} {}  {}\n", "slowest nodes", "class", "predicted µs",
             "measured µs", fmt::join(columns, " "), "operands -> results");
  for (size_t i = 0; i < order.size() && i < static_cast<size_t>(top); ++i) {
    const NodeId n = order[i];
    const Node& node = role.graph.node(n);
    std::vector<std::string> measured;
    for (const auto& seconds : on_device)
      measured.push_back(fmt::format("{:>9.1f}", seconds[n] * 1e6));
    fmt::print("{:<18} {:<13} {:>12.1f} {:>12.1f} {}  {} -> {}  {}\n", node.op_type,
               class_of(role.graph, node), model_costs(role, n, devices.front()) * runs[n] * 1e6,
               mean[n] * 1e6, fmt::join(measured, " "), shapes(role.graph, node.inputs),
               shapes(role.graph, node.outputs), node.name);
  }
}

void print_profile(const ProfileFlags& f, const HardwareProfile& hw, const Plan& plan,
                   const Profile& p) {
  const double measured = median(p.steps);
  double mean = 0;
  for (double s : p.steps) mean += s / static_cast<double>(p.steps.size());
  fmt::print("{} on {} ({} devices), {} steps after a warm-up step\n", f.plan, hw.name,
             plan.device_role.size(), p.steps.size());
  fmt::print("step: predicted {:.3f} ms, measured {:.3f} ms (median; mean {:.3f} ms), {:+.1f}%\n",
             p.predicted_step * 1e3, measured * 1e3, mean * 1e3,
             100 * relative(p.predicted_step, measured));
  fmt::print("{:<15} {:>14} {:>13} {:>8}\n", "per device", "predicted ms", "measured ms", "error");
  for (const std::string& name : class_names()) {
    const Times& t = p.by_class.at(name);
    if (t.predicted == 0 && t.measured == 0) continue;
    fmt::print("{:<15} {:>14.3f} {:>13.3f} {:>+7.1f}%\n", name, t.predicted * 1e3, t.measured * 1e3,
               100 * relative(t.predicted, t.measured));
  }
  fmt::print("{:<15} {:>14.3f} {:>13.3f}\n", "outside nodes", p.outside_nodes.predicted * 1e3,
             p.outside_nodes.measured * 1e3);
  std::vector<std::pair<std::string, OpTimes>> ops(p.by_op.begin(), p.by_op.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return a.second.measured > b.second.measured;
  });
  fmt::print("{:<24} {:<13} {:>6} {:>14} {:>13}\n", "slowest ops", "class", "nodes", "predicted ms",
             "measured ms");
  for (size_t i = 0; i < ops.size() && i < 10; ++i) {
    const OpTimes& t = ops[i].second;
    fmt::print("{:<24} {:<13} {:>6.0f} {:>14.3f} {:>13.3f}\n", ops[i].first, t.op_class, t.nodes,
               t.predicted * 1e3, t.measured * 1e3);
  }
}

// ---- --backend cuda: each role on one GPU, communication stubbed ----------------------------

struct CudaRoleProfile {
  int32_t role = 0;
  double predicted_compute = 0, measured_compute = 0;
  // The model's seconds of the role's communication nodes, which the GPU run stubs.
  double predicted_communication = 0;
  // The stubs' own launches (zero fills), inside measured_compute.
  double measured_stubs = 0;
  std::map<std::string, Times> classes;  // the compute model's op classes
  // The GPU's launches per step, scaled as the classes are: per kind, and the slowest ones.
  struct Kind {
    double launches = 0, seconds = 0;
  };
  std::map<std::string, Kind> kinds;
  struct Slow {
    std::string kind, node, op_type;
    int32_t nodes = 1;
    int64_t bytes = 0;
    double seconds = 0;  // per step: one run's, times the program's runs per step
  };
  std::vector<Slow> slowest;
};

constexpr size_t kSlowestLaunches = 25;

// Per role, a step of its schedule: the model's compute (every node but communication, and the
// per-program overhead the simulator charges on the compute stream) against the GPU's (its
// programs' median replays); its communication apart, from the model alone. Per class, the
// GPU's seconds are the eager launch-by-launch node times scaled so that each program's sum is
// its median replay: launched one at a time, every kernel carries a gap that the kernels of a
// replayed graph do not.
std::vector<CudaRoleProfile> compare_cuda(const Plan& plan, const NodeSeconds& model_costs,
                                          const StreamModel& streams,
                                          const std::vector<runtime::CudaRoleTiming>& timings) {
  std::vector<CudaRoleProfile> roles;
  for (const runtime::CudaRoleTiming& timing : timings) {
    const Role& role = plan.roles.at(static_cast<size_t>(timing.role));
    int64_t device = 0;
    for (size_t d = 0; d < plan.device_role.size(); ++d) {
      if (plan.device_role[d] == role.id) {
        device = static_cast<int64_t>(d);
        break;
      }
    }
    CudaRoleProfile r;
    r.role = role.id;
    r.measured_compute = timing.step_s;
    for (const std::string& name : class_names()) {
      if (name != "communication") r.classes[name] = {};
    }
    for (const ScheduleStep& step : role.schedule) {
      const int p = role.program_of(step);
      if (p < 0) continue;
      const Program& prog = role.programs[static_cast<size_t>(p)];
      r.predicted_compute += streams.program_overhead_s;
      for (NodeId n = prog.begin; n < prog.end; ++n) {
        const double seconds = model_costs(role, n, device);
        const std::optional<OpClass> op_class = op_class_of(role.graph, role.graph.node(n));
        if (!op_class) {
          r.predicted_communication += seconds;
          continue;
        }
        r.predicted_compute += seconds;
        r.classes[op_class_name(*op_class)].predicted += seconds;
      }
    }
    for (size_t p = 0; p < timing.programs.size() && p < role.programs.size(); ++p) {
      const runtime::CudaProgramTiming& t = timing.programs[p];
      const Program& prog = role.programs[p];
      const NodeId end = std::min<NodeId>(prog.end, static_cast<NodeId>(t.node_seconds.size()));
      double launched = 0;
      for (NodeId n = prog.begin; n < end; ++n) launched += t.node_seconds[n];
      if (launched <= 0) continue;
      const double scale = t.median_s / launched * t.runs_per_step;
      for (NodeId n = prog.begin; n < end; ++n) {
        const double seconds = t.node_seconds[n] * scale;
        const std::optional<OpClass> op_class = op_class_of(role.graph, role.graph.node(n));
        if (op_class)
          r.classes[op_class_name(*op_class)].measured += seconds;
        else
          r.measured_stubs += seconds;
      }
      for (const runtime::CudaLaunchTiming& l : t.launches) {
        CudaRoleProfile::Kind& k = r.kinds[l.kind];
        k.launches += t.runs_per_step;
        k.seconds += l.seconds * scale;
        const std::string op_type = l.node_id >= 0 && l.node_id < role.graph.num_nodes()
                                        ? role.graph.node(l.node_id).op_type
                                        : "";
        r.slowest.push_back({l.kind, l.node, op_type, l.nodes, l.bytes, l.seconds * scale});
      }
    }
    std::stable_sort(r.slowest.begin(), r.slowest.end(),
                     [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    if (r.slowest.size() > kSlowestLaunches) r.slowest.resize(kSlowestLaunches);
    roles.push_back(std::move(r));
  }
  return roles;
}

double worst_role_error(const std::vector<CudaRoleProfile>& roles) {
  double worst = 0;
  for (const CudaRoleProfile& r : roles)
    worst = std::max(worst, std::fabs(relative(r.predicted_compute, r.measured_compute)));
  return worst;
}

nlohmann::json cuda_profile_json(const ProfileFlags& f, const HardwareProfile& hw, const Plan& plan,
                                 const std::vector<CudaRoleProfile>& roles) {
  nlohmann::json json_roles = nlohmann::json::array();
  for (const CudaRoleProfile& r : roles) {
    nlohmann::json classes = nlohmann::json::object();
    for (const auto& [name, t] : r.classes)
      classes[name] = {{"predicted_s", t.predicted}, {"measured_s", t.measured}};
    nlohmann::json kinds = nlohmann::json::object();
    for (const auto& [name, k] : r.kinds)
      kinds[name] = {{"launches", k.launches}, {"measured_s", k.seconds}};
    nlohmann::json slowest = nlohmann::json::array();
    for (const CudaRoleProfile::Slow& l : r.slowest) {
      nlohmann::json launch = {{"kind", l.kind},
                               {"node", l.node},
                               {"op_type", l.op_type},
                               {"nodes", l.nodes},
                               {"measured_s", l.seconds}};
      if (l.bytes > 0) {
        launch["bytes"] = l.bytes;
        launch["bytes_per_s"] = l.seconds > 0 ? static_cast<double>(l.bytes) / l.seconds : 0.0;
      }
      slowest.push_back(std::move(launch));
    }
    json_roles.push_back({{"role", r.role},
                          {"predicted_compute_s", r.predicted_compute},
                          {"measured_compute_s", r.measured_compute},
                          {"error", relative(r.predicted_compute, r.measured_compute)},
                          {"predicted_communication_s", r.predicted_communication},
                          {"measured_stubbed_communication_s", r.measured_stubs},
                          {"classes", classes},
                          {"launch_kinds", kinds},
                          {"slowest_launches", slowest}});
  }
  return {{"plan", f.plan},
          {"profile", hw.name},
          {"backend", "cuda"},
          {"device", runtime::cuda_device_description()},
          {"devices", plan.device_role.size()},
          {"replays", f.steps},
          {"communication", "stubbed"},
          {"roles", json_roles},
          {"worst_role_error", worst_role_error(roles)}};
}

void print_cuda_profile(const ProfileFlags& f, const HardwareProfile& hw, const Plan& plan,
                        const std::vector<CudaRoleProfile>& roles) {
  fmt::print(
      "{} on {} ({} devices, {} role{}): each role's programs on {}, communication stubbed, {} "
      "replays per program\n",
      f.plan, hw.name, plan.device_role.size(), roles.size(), roles.size() == 1 ? "" : "s",
      runtime::cuda_device_description(), f.steps);
  fmt::print("{:<6} {:<15} {:>14} {:>13} {:>8}\n", "role", "per step", "predicted ms",
             "measured ms", "error");
  for (const CudaRoleProfile& r : roles) {
    fmt::print("{:<6} {:<15} {:>14.3f} {:>13.3f} {:>+7.1f}%\n", r.role, "compute",
               r.predicted_compute * 1e3, r.measured_compute * 1e3,
               100 * relative(r.predicted_compute, r.measured_compute));
    for (const auto& [name, t] : r.classes) {
      if (t.predicted == 0 && t.measured == 0) continue;
      fmt::print("{:<6} {:<15} {:>14.3f} {:>13.3f} {:>+7.1f}%\n", "", "  " + name,
                 t.predicted * 1e3, t.measured * 1e3, 100 * relative(t.predicted, t.measured));
    }
    if (r.measured_stubs > 0)
      fmt::print("{:<6} {:<15} {:>14} {:>13.3f}\n", "", "  stubs", "", r.measured_stubs * 1e3);
    if (r.predicted_communication > 0)
      fmt::print("{:<6} {:<15} {:>14.3f} {:>13}\n", "", "communication",
                 r.predicted_communication * 1e3, "stubbed");
    fmt::print("{:<6} {:<16} {:<24} {:<14} {:>6} {:>11} {:>8}\n", "", "slowest launches", "node",
               "op", "nodes", "measured ms", "GB/s");
    for (size_t i = 0; i < r.slowest.size() && i < 10; ++i) {
      const CudaRoleProfile::Slow& l = r.slowest[i];
      const std::string rate =
          l.bytes > 0 && l.seconds > 0 ? fmt::format("{:.0f}", l.bytes / l.seconds / 1e9) : "";
      fmt::print("{:<6} {:<16} {:<24} {:<14} {:>6} {:>11.3f} {:>8}\n", "", l.kind,
                 l.node.substr(0, 24), l.op_type.substr(0, 14), l.nodes, l.seconds * 1e3, rate);
    }
  }
  fmt::print("worst role error {:.1f}% (compute; communication is the model's alone)\n",
             100 * worst_role_error(roles));
}

Status run_profile_cuda(const ProfileFlags& f) {
  if (f.top > 0)
    return error("--top {}: lists nodes of the CPU run; --backend cuda compares roles and classes",
                 f.top);
  ASSIGN_OR_RETURN(BuiltPlan built, load_plan(f.plan, false));
  ASSIGN_OR_RETURN(HardwareProfile hw,
                   read_hardware_profile(f.hw, std::string(AUTOPAR_CONFIG_DIR) + "/hw"));
  if (const std::string why = runtime::cuda_unavailable_reason(); !why.empty())
    return error("--backend cuda: {}", why);
  const Plan& plan = built.plan;
  const int64_t devices = static_cast<int64_t>(plan.device_role.size());
  hw.nodes = (devices + hw.devices_per_node - 1) / hw.devices_per_node;
  const NodeSeconds model_costs = profile_costs(plan, hw);
  ASSIGN_OR_RETURN(std::vector<runtime::CudaRoleTiming> timings,
                   runtime::time_plan_roles_cuda(plan, f.steps, /*node_seconds=*/true));
  const std::vector<CudaRoleProfile> roles =
      compare_cuda(plan, model_costs, stream_model(hw), timings);
  if (f.json) {
    emit_json(cuda_profile_json(f, hw, plan, roles));
    return Status::ok();
  }
  print_cuda_profile(f, hw, plan, roles);
  return Status::ok();
}

Status run_profile(const ProfileFlags& f) {
  if (f.steps < 1) return error("--steps {}: must be at least 1", f.steps);
  if (f.top < 0) return error("--top {}: must be 0 or more", f.top);
  if (f.backend != "cpu" && f.backend != "cuda")
    return error("--backend {}: expected cpu or cuda", f.backend);
  if (f.backend == "cuda") return run_profile_cuda(f);
  ASSIGN_OR_RETURN(BuiltPlan built, load_plan(f.plan, true));
  ASSIGN_OR_RETURN(HardwareProfile hw,
                   read_hardware_profile(f.hw, std::string(AUTOPAR_CONFIG_DIR) + "/hw"));
  const Plan& plan = built.plan;
  // Every device is a thread with a core of its own, as calibrated CPU profiles assume.
  const int64_t devices = static_cast<int64_t>(plan.device_role.size());
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (devices > cores) {
    return error(
        "{}: the plan has {} devices but this machine has {} cores (profile runs each device on "
        "a core of its own)",
        f.plan, devices, cores);
  }
  hw.nodes = (devices + hw.devices_per_node - 1) / hw.devices_per_node;
  const NodeSeconds model_costs = profile_costs(plan, hw);
  ASSIGN_OR_RETURN(Profile p, predict(plan, model_costs, stream_model(hw)));
  ASSIGN_OR_RETURN(runtime::PlanFeeds feeds, plan_feeds(built, f.steps + 1, f.seed));
  runtime::PlanRunOptions options;
  options.profile = true;
  ASSIGN_OR_RETURN(runtime::PlanResult result, runtime::run_plan_inproc(plan, feeds, options));
  attribute(plan, result, p);
  if (f.json) {
    emit_json(profile_json(f, hw, plan, p));
    return Status::ok();
  }
  print_profile(f, hw, plan, p);
  if (f.top > 0) print_slowest_nodes(plan, result, model_costs, f.top);
  std::vector<double> steps_ms;
  for (double s : p.steps) steps_ms.push_back(s * 1e3);
  fmt::print("measured steps (ms): {:.3f} (warm-up), {:.3f}\n", p.warm_up * 1e3,
             fmt::join(steps_ms, ", "));
  return Status::ok();
}

}  // namespace

void add_profile_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<ProfileFlags>();
  CLI::App* p = app.add_subcommand(
      "profile", "run a plan on this machine and compare its measured times with the simulation");
  p->add_option("plan", flags->plan, "plan directory")->required();
  p->add_option("--hw", flags->hw,
                "hardware profile of this machine (autopar calibrate -o FILE): a YAML file or a "
                "name in configs/hw/")
      ->required();
  p->add_option("--backend", flags->backend,
                "cpu (the default: the plan on this machine's cores) or cuda (each role's "
                "programs on GPU 0, communication stubbed)");
  p->add_option("--steps", flags->steps,
                "steps measured after one warm-up step (default 10; cuda: replays of each "
                "program); the median counts");
  p->add_option("--seed", flags->seed, "seed of the synthetic data (default 0)");
  p->add_option("--top", flags->top, "also list the N slowest nodes of the first role");
  p->add_flag("--json", flags->json, "print one JSON object");
  p->callback([flags, &command] { command = [flags] { return run_profile(*flags); }; });
}

}  // namespace autopar::cli
