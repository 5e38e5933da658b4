// The event-driven simulation of one step of a plan.
#include "autopar/cost/simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "autopar/cost/communication.h"
#include "autopar/cost/compute.h"
#include "autopar/cost/memory.h"

namespace autopar {
namespace {

int64_t representative(const Plan& plan, int32_t role) {
  for (size_t d = 0; d < plan.device_role.size(); ++d) {
    if (plan.device_role[d] == role) return static_cast<int64_t>(d);
  }
  return 0;
}

}  // namespace

bool is_ring_attention(const Node& n) {
  return n.domain == kAutoparDomain &&
         (n.op_type == "RingAttention" || n.op_type == "RingAttentionGrad");
}

bool is_communication(const Node& n) {
  return n.domain == kAutoparDomain && n.op_type != "Recv" && n.op_type != "Shard" &&
         !is_ring_attention(n);
}

namespace {

double ring_attention_seconds(const HardwareProfile& profile, const Graph& g, const Node& node,
                              const std::vector<int64_t>& group) {
  const double compute = node_cost(profile, g, node).seconds;
  const size_t n = group.size();
  if (n < 2) return compute;
  const bool backward = node.op_type == "RingAttentionGrad";
  const size_t k = backward ? 2 : 1;
  auto bytes_of = [&](size_t i) {
    return i < node.inputs.size() && node.inputs[i] != kNoId
               ? static_cast<double>(g.value(node.inputs[i]).num_bytes())
               : 0.0;
  };
  const double block = bytes_of(k) + bytes_of(k + 1);  // one key/value block
  // The ring moves in lock step: its slowest hop sets each step.
  double hop = 0;
  for (size_t i = 0; i < n; ++i) {
    hop = std::max(hop, collective_cost(profile, Collective::kPointToPoint, block,
                                        {group[i], group[(i + 1) % n]})
                            .seconds);
  }
  const double part = compute / static_cast<double>(n);
  // The backward's steps carry the block and its gradients (as many bytes again).
  const double step = backward ? 2 * hop : hop;
  return static_cast<double>(n - 1) * std::max(part, step) + part + (backward ? hop : 0.0);
}

}  // namespace

double device_node_seconds(const HardwareProfile& profile, const DeviceMesh& mesh, const Graph& g,
                           const Node& node, int64_t device) {
  if (node.domain != kAutoparDomain) return node_cost(profile, g, node).seconds;
  auto bytes_of = [&](ValueId v) {
    return v == kNoId ? 0.0 : static_cast<double>(g.value(v).num_bytes());
  };
  std::vector<int64_t> group;
  if (const Attribute* axes = node.attr("axes")) {
    group = mesh.group(device, axes->strings());
  } else {
    group = node.attr_ints("group");
  }
  const std::string& op = node.op_type;
  if (is_ring_attention(node)) return ring_attention_seconds(profile, g, node, group);
  if (op == "Recv" || op == "Shard") return 0.0;
  if (op == "Send") {
    std::vector<int64_t> coords = mesh.coords(device);
    const int64_t axis = mesh.axis_index(node.attr_string("peer_axis", "pp"));
    if (axis >= 0) coords[axis] = node.attr_int("peer_coord", 0);
    const int64_t peer = axis >= 0 ? mesh.device(coords) : node.attr_int("peer", 0);
    return collective_cost(profile, Collective::kPointToPoint, bytes_of(node.inputs[0]),
                           {device, peer})
        .seconds;
  }
  if (op == "HaloExchange") {
    // Rows from each neighbour: the halo's share of the block, point to point.
    const Value& x = g.value(node.inputs[0]);
    const int64_t axis = node.attr_int("axis", 0);
    const double rows = static_cast<double>(x.shape.dims.at(axis));
    const double halo = static_cast<double>(std::max<int64_t>(node.attr_int("before", 0), 0) +
                                            std::max<int64_t>(node.attr_int("after", 0), 0));
    if (halo == 0 || group.size() < 2) return 0.0;
    return collective_cost(profile, Collective::kPointToPoint,
                           bytes_of(node.inputs[0]) * halo / rows, {group[0], group[1]})
        .seconds;
  }
  Collective c = Collective::kAllReduce;
  double bytes = bytes_of(node.inputs[0]);
  if (op == "AllGather") {
    c = Collective::kAllGather;
    bytes = bytes_of(node.outputs[0]);
  } else if (op == "ReduceScatter") {
    c = Collective::kReduceScatter;
  } else if (op == "AllToAll") {
    c = Collective::kAllToAll;
  } else if (op == "Broadcast") {
    c = Collective::kAllGather;
  }
  if (group.size() < 2) return 0.0;
  return collective_cost(profile, c, bytes, group).seconds + profile.device.collective_overhead_s;
}

NodeSeconds profile_costs(const Plan& plan, const HardwareProfile& profile) {
  const DeviceMesh mesh = plan.scheme.mesh;
  // Fused kernels per role, within each program (the runtime runs each on an executor).
  auto fused = std::make_shared<std::map<int32_t, std::vector<double>>>();
  for (const Role& role : plan.roles) {
    std::vector<NodeId> starts;
    for (const Program& p : role.programs) starts.push_back(p.begin);
    (*fused)[role.id] =
        fused_node_seconds(profile, role.graph, starts, &fusions_of(plan.scheme, profile),
                           memory_format_of(plan.scheme, profile));
  }
  return [mesh, fused, &profile](const Role& role, NodeId n, int64_t device) -> double {
    const std::vector<double>& kernels = fused->at(role.id);
    if (!kernels.empty() && kernels[n] >= 0) return kernels[n];
    return device_node_seconds(profile, mesh, role.graph, role.graph.node(n), device);
  };
}

StreamModel stream_model(const HardwareProfile& profile) {
  StreamModel streams;
  streams.program_overhead_s = profile.device.program_overhead_s;
  streams.overlap_communication = profile.device.overlap_communication;
  streams.overlap_slowdown =
      profile.device.overlap_communication ? profile.device.overlap_slowdown : 0.0;
  return streams;
}

StatusOr<Simulation> simulate(const Plan& plan, const HardwareProfile& profile,
                              bool record_events) {
  StreamModel streams = stream_model(profile);
  // A training step as its framework runs it (an inference plan has no loss).
  const MemoryPolicy policy = memory_policy_of(plan.scheme, &profile);
  const bool training = !plan.loss.empty();
  streams.weights_cast_once = training && holds_weight_copies(policy);
  streams.accumulates_in_gemm = training && accumulates_in_gemm(policy);
  streams.regathers_parameters = training && regathers_parameters(policy, plan.scheme);
  ASSIGN_OR_RETURN(Simulation simulation,
                   simulate(plan, profile_costs(plan, profile), record_events, streams));
  if (paradigms_add_terms()) {
    simulation.paradigm_seconds = paradigm_terms(plan.scheme, profile, plan_memory(plan)).step_s;
    simulation.step_seconds += simulation.paradigm_seconds;
  }
  return simulation;
}

namespace {

// The roles' schedules run against each other: per role a compute stream and a communication
// stream per communicator, messages queued per (sender, receiver, tag).
class Simulator {
 public:
  using Channel = std::tuple<int64_t, int64_t, int64_t>;  // (from, to, tag)

  Simulator(const Plan& plan, const NodeSeconds& costs, bool record_events,
            const StreamModel& streams)
      : plan_(plan),
        costs_(costs),
        record_events_(record_events),
        streams_(streams),
        roles_(plan.roles.size()),
        next_(roles_, 0),
        compute_free_(roles_, 0.0),
        comm_free_(roles_),
        stream_(roles_),
        comm_busy_(roles_),
        kept_(roles_),
        weight_cast_(roles_),
        accumulation_(roles_),
        behind_reduction_(roles_),
        parameter_gather_(roles_) {
    sim_.roles.assign(roles_, {});
    for (size_t r = 0; r < roles_; ++r) {
      const Graph& g = plan.roles[r].graph;
      behind_reduction_[r] = reduction_accumulation(g);
      // Streams: a collective's by its mesh axes (or its group), transfers on their own, an
      // accumulation on its reduction's.
      stream_[r].assign(static_cast<size_t>(g.num_nodes()), std::string());
      for (NodeId n = 0; n < g.num_nodes(); ++n) {
        const Node& node = g.node(n);
        if (behind_reduction_[r][n]) {
          for (ValueId in : node.inputs) {
            if (in == kNoId || g.value(in).producer == kNoId) continue;
            const std::string& from = stream_[r][g.value(in).producer];
            if (!from.empty()) stream_[r][n] = from;
          }
          continue;
        }
        if (!is_communication(node)) continue;
        if (node.op_type == "Send") {
          stream_[r][n] = "p2p";
        } else if (const Attribute* axes = node.attr("axes");
                   axes && axes->kind() == Attribute::Kind::kStrings) {
          stream_[r][n] = fmt::format("{}", fmt::join(axes->strings(), ","));
        } else {
          stream_[r][n] = fmt::format("group {}", fmt::join(node.attr_ints("group"), ","));
        }
      }
    }
    if (streams.accumulates_in_gemm) {
      for (size_t r = 0; r < roles_; ++r) accumulation_[r] = gemm_accumulation(plan.roles[r].graph);
    }
    if (!streams.weights_cast_once && !streams.regathers_parameters) return;
    std::set<std::string> parameters;
    for (const StateSpec& s : plan.state) {
      if (s.is_parameter) parameters.insert(s.name);
    }
    for (size_t r = 0; r < roles_; ++r) {
      const Graph& g = plan.roles[r].graph;
      std::vector<bool> cast(static_cast<size_t>(g.num_nodes()), false);
      auto is_parameter = [&](ValueId v) {
        return v != kNoId && g.value(v).kind == ValueKind::kInput &&
               parameters.count(g.value(v).name) > 0;
      };
      for (NodeId n = 0; n < g.num_nodes(); ++n) {
        const Node& node = g.node(n);
        cast[n] = node.domain.empty() && node.op_type == "Cast" && is_parameter(node.input(0));
      }
      if (streams.weights_cast_once) weight_cast_[r] = cast;
      if (!streams.regathers_parameters) continue;
      parameter_gather_[r].assign(static_cast<size_t>(g.num_nodes()), false);
      for (NodeId n = 0; n < g.num_nodes(); ++n) {
        const Node& node = g.node(n);
        const ValueId in = node.input(0);
        if (node.domain != kAutoparDomain || node.op_type != "AllGather" ||
            node.phase != Phase::kForward || in == kNoId)
          continue;
        const NodeId producer = g.value(in).producer;
        parameter_gather_[r][n] = is_parameter(in) || (producer != kNoId && cast[producer]);
      }
    }
  }

  StatusOr<Simulation> run();

 private:
  // One run of a program: its step, the microbatch whose values it reads, the ready times of
  // the values it computes, and which of them a collective made.
  struct Run {
    size_t r;
    const Role& role;
    const ScheduleStep& step;
    const Program& program;
    int64_t device;
    int32_t micro;
    std::map<ValueId, double> local;
    std::vector<bool> comm_output;
    std::map<ValueId, double> transfer;  // received values: their message's transfer seconds
  };
  // Whether every receive of the program has its message sent already.
  bool ready(const Role& role, const Program& program);
  double ready_at(const Run& run, ValueId v) const;
  void run_node(Run& run, NodeId n);
  void run_program(Run& run);
  // When a compute node of `seconds` starting at `start` on role r ends: at the full rate where
  // the role's communication stream is idle, slowed by overlap_slowdown where it is busy.
  double compute_end(size_t r, double start, double seconds) const;

  const Plan& plan_;
  const NodeSeconds& costs_;
  const bool record_events_;
  const StreamModel& streams_;
  const size_t roles_;
  Simulation sim_;
  std::vector<size_t> next_;
  std::vector<double> compute_free_;
  // Per role and communication stream (one per communicator, as NCCL runs each process group
  // on a stream of its own): when it is free.
  std::vector<std::map<std::string, double>> comm_free_;
  // Per role and node: the communication stream it runs on (collectives, transfers, and the
  // accumulation behind a reduction), empty for the rest.
  std::vector<std::vector<std::string>> stream_;
  // Per role, when any of its communication streams is busy: disjoint intervals, in order.
  std::vector<std::vector<std::pair<double, double>>> comm_busy_;
  // Marks [start, end) busy on role r's communication.
  void busy(size_t r, double start, double end);
  // When role r's communication streams are all free.
  double comm_done(size_t r) const;
  // Ready times of values that cross programs, by (value, microbatch), per role.
  std::vector<std::map<std::pair<ValueId, int32_t>, double>> kept_;
  // Messages sent and not yet received: when each arrives, and its transfer's seconds.
  std::map<Channel, std::deque<std::pair<double, double>>> in_flight_;
  // Per role and node: a cast of a parameter (with StreamModel::weights_cast_once).
  std::vector<std::vector<bool>> weight_cast_;
  // Per role and node: gemm_accumulation (with StreamModel::accumulates_in_gemm).
  std::vector<std::vector<bool>> accumulation_;
  // Per role and node: reduction_accumulation, run behind its reduction on the communication
  // stream.
  std::vector<std::vector<bool>> behind_reduction_;
  // Per role and node: a gather of a parameter's shards or of their cast (with
  // StreamModel::regathers_parameters).
  std::vector<std::vector<bool>> parameter_gather_;
};

bool Simulator::ready(const Role& role, const Program& program) {
  const Graph& g = role.graph;
  std::map<Channel, size_t> needed;
  for (int32_t n = program.begin; n < program.end; ++n) {
    const Node& node = g.node(n);
    if (node.domain == kAutoparDomain && node.op_type == "Recv")
      ++needed[{node.attr_int("peer_coord", 0), role.id, node.attr_int("tag", 0)}];
  }
  for (const auto& [channel, count] : needed) {
    if (in_flight_[channel].size() < count) return false;
  }
  return true;
}

void Simulator::busy(size_t r, double start, double end) {
  if (!(end > start)) return;
  auto& intervals = comm_busy_[r];
  // The first interval ending at or after `start`; merge every one that overlaps.
  auto it =
      std::lower_bound(intervals.begin(), intervals.end(), start,
                       [](const std::pair<double, double>& b, double t) { return b.second < t; });
  auto last = it;
  while (last != intervals.end() && last->first <= end) {
    start = std::min(start, last->first);
    end = std::max(end, last->second);
    ++last;
  }
  it = intervals.erase(it, last);
  intervals.insert(it, {start, end});
}

double Simulator::comm_done(size_t r) const {
  double done = 0;
  for (const auto& [stream, free] : comm_free_[r]) done = std::max(done, free);
  return done;
}

double Simulator::compute_end(size_t r, double start, double seconds) const {
  const double rate = 1.0 - streams_.overlap_slowdown;
  if (rate >= 1.0 || seconds <= 0) return start + seconds;
  const auto& intervals = comm_busy_[r];
  // The first interval still running at `start`.
  auto it =
      std::upper_bound(intervals.begin(), intervals.end(), start,
                       [](double t, const std::pair<double, double>& b) { return t < b.second; });
  double t = start, left = seconds;
  for (; it != intervals.end(); ++it) {
    const auto [from, to] = *it;
    if (from > t) {  // idle until the next collective: full rate
      if (left <= from - t) return t + left;
      left -= from - t;
      t = from;
    }
    const double done = (to - t) * rate;  // beside the collective
    if (left <= done) return t + left / rate;
    left -= done;
    t = to;
  }
  return t + left;
}

double Simulator::ready_at(const Run& run, ValueId v) const {
  if (v == kNoId) return 0.0;
  auto it = run.local.find(v);
  if (it != run.local.end()) return it->second;
  auto k = kept_[run.r].find({v, run.micro});
  if (k != kept_[run.r].end()) return k->second;
  return 0.0;  // graph inputs and initializers: ready from the start
}

void Simulator::run_node(Run& run, NodeId n) {
  const size_t r = run.r;
  const Role& role = run.role;
  const Node& node = role.graph.node(n);
  double inputs_ready = 0;
  bool waited_on_comm = false;
  ValueId last_input = kNoId;
  for (ValueId in : node.inputs) {
    const double t = ready_at(run, in);
    if (t > inputs_ready) {
      inputs_ready = t;
      waited_on_comm = in != kNoId && run.comm_output[in];
      last_input = in;
    }
  }
  double start = 0, end = 0;
  const bool comm =
      is_communication(node) || (streams_.overlap_communication && behind_reduction_[r][n]);
  if (node.domain == kAutoparDomain && node.op_type == "Recv") {
    auto& queue = in_flight_[{node.attr_int("peer_coord", 0), role.id, node.attr_int("tag", 0)}];
    start = end = std::max(inputs_ready, queue.front().first);
    for (ValueId out : node.outputs) {
      if (out != kNoId) run.transfer[out] = queue.front().second;
    }
    queue.pop_front();
  } else if (comm) {
    double& stream_free = comm_free_[r][stream_[r][n]];
    start = std::max(stream_free, inputs_ready);
    if (!streams_.overlap_communication) start = std::max(start, compute_free_[r]);
    end = start + costs_(role, n, run.device);
    stream_free = end;
    busy(r, start, end);
    if (!streams_.overlap_communication) compute_free_[r] = end;
    sim_.roles[r].comm_busy += end - start;
    if (node.op_type == "Send") {
      in_flight_[{role.id, node.attr_int("peer_coord", 0), node.attr_int("tag", 0)}].emplace_back(
          end, end - start);
    }
  } else if ((!weight_cast_[r].empty() && weight_cast_[r][n] &&
              (run.step.micro > 0 || run.step.kind != ProgramKind::kForward)) ||
             (!accumulation_[r].empty() && accumulation_[r][n])) {
    // The step's weight copy, cast already; or the GEMM's own accumulation.
    start = end = std::max(compute_free_[r], inputs_ready);
  } else {
    start = std::max(compute_free_[r], inputs_ready);
    if (waited_on_comm && inputs_ready > compute_free_[r]) {
      // Waiting on a received value is waiting for its transfer, and before that for the
      // stage that sends it.
      const double wait = inputs_ready - compute_free_[r];
      auto received = run.transfer.find(last_input);
      const double transfer = received == run.transfer.end() ? wait : received->second;
      sim_.roles[r].exposed_comm += std::min(wait, transfer);
      sim_.roles[r].pipeline_wait += wait - std::min(wait, transfer);
    }
    end = compute_end(r, start, costs_(role, n, run.device));
    compute_free_[r] = end;
    sim_.roles[r].compute_busy += end - start;
  }
  for (ValueId out : node.outputs) {
    if (out == kNoId) continue;
    run.local[out] = end;
    run.comm_output[out] = comm || node.op_type == "Recv";
  }
  if (record_events_ && end > start) {
    sim_.events.push_back(
        {role.id, comm, fmt::format("{} {}", run.step.to_string(), node.name), start, end});
  }
}

void Simulator::run_program(Run& run) {
  const Graph& g = run.role.graph;
  const Program& prog = run.program;
  // The runtime's dispatch of the program, on the device's compute stream.
  compute_free_[run.r] += streams_.program_overhead_s;
  sim_.roles[run.r].compute_busy += streams_.program_overhead_s;
  // A backward under a framework that gathers ZeRO 3's weights again: each weight its forward
  // gathered, gathered again first, in the order the program reads them.
  if (!parameter_gather_[run.r].empty() && run.step.kind == ProgramKind::kBackward) {
    std::set<ValueId> again;
    for (int32_t n = prog.begin; n < prog.end; ++n) {
      for (ValueId in : g.node(n).inputs) {
        if (in == kNoId || again.count(in)) continue;
        const NodeId producer = g.value(in).producer;
        if (producer == kNoId || (producer >= prog.begin && producer < prog.end) ||
            !parameter_gather_[run.r][producer])
          continue;
        again.insert(in);
        double& stream_free = comm_free_[run.r][stream_[run.r][producer]];
        const double start = stream_free;
        const double end = start + costs_(run.role, producer, run.device);
        stream_free = end;
        busy(run.r, start, end);
        sim_.roles[run.r].comm_busy += end - start;
        run.local[in] = end;
        run.comm_output[in] = true;
        if (record_events_ && end > start) {
          sim_.events.push_back(
              {run.role.id, true,
               fmt::format("{} {} (again)", run.step.to_string(), g.node(producer).name), start,
               end});
        }
      }
    }
  }
  // Collectives whose inputs come from earlier programs go first, in the order their inputs
  // become ready (gradient reductions overlap the backward that produced them).
  std::vector<std::pair<double, NodeId>> early;
  std::vector<bool> done(prog.end - prog.begin, false);
  for (int32_t n = prog.begin; n < prog.end; ++n) {
    const Node& node = g.node(n);
    if (!is_communication(node)) continue;
    bool outside = true;
    double t = 0;
    for (ValueId in : node.inputs) {
      if (in == kNoId) continue;
      const NodeId producer = g.value(in).producer;
      if (producer >= prog.begin && producer < prog.end) outside = false;
      t = std::max(t, ready_at(run, in));
    }
    if (outside) early.emplace_back(t, n);
  }
  std::stable_sort(early.begin(), early.end());
  for (const auto& [t, n] : early) {
    run_node(run, n);
    done[n - prog.begin] = true;
  }
  for (int32_t n = prog.begin; n < prog.end; ++n) {
    if (!done[n - prog.begin]) run_node(run, n);
  }
  // Values later programs read (those this program computed: a weight gathered again stays
  // the forward's for any other program).
  for (const auto& [v, t] : run.local) {
    const NodeId producer = g.value(v).producer;
    if (producer < prog.begin || producer >= prog.end) continue;
    for (NodeId c : g.value(v).consumers) {
      if (c < prog.begin || c >= prog.end) {
        kept_[run.r][{v, run.step.micro}] = t;
        break;
      }
    }
  }
  sim_.roles[run.r].finish = std::max(compute_free_[run.r], comm_done(run.r));
}

StatusOr<Simulation> Simulator::run() {
  const auto last_micro = static_cast<int32_t>(plan_.microbatches - 1);
  size_t remaining = 0;
  for (const Role& role : plan_.roles) remaining += role.schedule.size();
  while (remaining > 0) {
    bool progress = false;
    for (size_t r = 0; r < roles_; ++r) {
      const Role& role = plan_.roles[r];
      const int64_t device = representative(plan_, role.id);
      while (next_[r] < role.schedule.size()) {
        const ScheduleStep& step = role.schedule[next_[r]];
        const int p = role.program_of(step);
        if (p < 0) return error("role {}: no program for step {}", role.id, step.to_string());
        const Program& prog = role.programs[p];
        if (!ready(role, prog)) break;
        const int32_t micro =
            step.kind == ProgramKind::kUpdate || step.kind == ProgramKind::kExchange ? last_micro
                                                                                     : step.micro;
        Run run{r,      role,  step, prog,
                device, micro, {},   std::vector<bool>(role.graph.num_values(), false),
                {}};
        run_program(run);
        ++next_[r];
        --remaining;
        progress = true;
      }
    }
    if (!progress) return error("the simulation cannot advance: the schedules deadlock");
  }
  double busiest = 0;
  for (const RoleTimeline& t : sim_.roles) {
    sim_.step_seconds = std::max(sim_.step_seconds, t.finish);
    busiest = std::max(busiest, t.compute_busy);
  }
  sim_.bubble_seconds = sim_.step_seconds - busiest;
  return std::move(sim_);
}

}  // namespace

StatusOr<Simulation> simulate(const Plan& plan, const NodeSeconds& costs, bool record_events,
                              const StreamModel& streams) {
  return Simulator(plan, costs, record_events, streams).run();
}

std::string chrome_trace(const Plan& plan, const Simulation& sim) {
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  auto add = [&](const std::string& event) {
    out += (first ? "  " : ",\n  ") + event;
    first = false;
  };
  auto quoted = [](const std::string& text) {
    std::string q = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + "\"";
  };
  for (const Role& role : plan.roles) {
    add(fmt::format(
        "{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {}, \"args\": {{\"name\": {}}}}}",
        role.id, quoted(fmt::format("role {} (pipeline rank {})", role.id, role.stage))));
    for (int tid = 0; tid < 2; ++tid) {
      add(
          fmt::format("{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, "
                      "\"args\": {{\"name\": {}}}}}",
                      role.id, tid, quoted(tid == 0 ? "compute" : "communication")));
    }
  }
  for (const SimEvent& e : sim.events) {
    add(fmt::format(
        "{{\"name\": {}, \"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {:.3f}, \"dur\": "
        "{:.3f}}}",
        quoted(e.name), e.role, e.communication ? 1 : 0, e.start * 1e6, (e.end - e.start) * 1e6));
  }
  out += "\n]}\n";
  return out;
}

}  // namespace autopar
