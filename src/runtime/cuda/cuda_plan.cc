// A plan on the CUDA backend: its programs run by the plan runner (communication through the
// host or over NCCL), and its roles timed on one GPU with their communication stubbed.
#include "autopar/runtime/cuda_plan.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/plan_runner.h"
#include "device.h"

namespace autopar::runtime {

struct CudaDeviceContext {
  CudaOptions options;  // device, communication, communicator, NCCL
};

namespace {

// The GPU of this process among the node's: the local rank Open MPI (or another launcher that
// sets it) gives, else the global rank, modulo the GPUs present.
int local_device(int64_t rank) {
  int64_t local = rank;
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      local = std::strtoll(value, nullptr, 10);
      break;
    }
  }
  const int count = cuda::device_count();
  return count > 0 ? static_cast<int>(local % count) : 0;
}

// A tag no op of a plan uses: the NCCL id travels on it.
constexpr int64_t kNcclIdTag = (int64_t{1} << 40) + 7;

StatusOr<std::shared_ptr<cuda::NcclComms>> bootstrap_nccl(const Plan& plan, Communicator& comm,
                                                          int device) {
  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> groups, plan_comm_groups(plan));
  std::string id;
  if (comm.rank() == 0) {
    ASSIGN_OR_RETURN(id, cuda_nccl_id());
    Tensor bytes(DType::kUInt8, {static_cast<int64_t>(id.size())});
    std::copy(id.begin(), id.end(), bytes.mutable_bytes().begin());
    for (int64_t r = 1; r < comm.size(); ++r) RETURN_IF_ERROR(comm.send(r, kNcclIdTag, bytes));
  } else {
    ASSIGN_OR_RETURN(Tensor bytes, comm.recv(0, kNcclIdTag));
    id.assign(bytes.bytes().begin(), bytes.bytes().end());
  }
  return open_cuda_nccl(device, static_cast<int>(comm.rank()), static_cast<int>(comm.size()), id,
                        groups);
}

// A program on the CUDA backend: the inputs written to the device, one run (captured after
// the first where nothing goes through the host), the outputs read back.
class CudaProgramRunner : public ProgramRunner {
 public:
  explicit CudaProgramRunner(std::unique_ptr<CudaExecutor> executor)
      : executor_(std::move(executor)) {}

  StatusOr<std::vector<TensorPtr>> run(const std::vector<TensorPtr>& inputs, RunStats*,
                                       uint64_t stream) override {
    RETURN_IF_ERROR(executor_->set_random_stream(stream));
    const std::vector<ValueId>& ids = executor_->graph().inputs();
    if (ids.size() != inputs.size())
      return error("{} inputs for a program of {}", inputs.size(), ids.size());
    std::vector<Feed> feeds;
    feeds.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) feeds.emplace_back(ids[i], inputs[i]);
    return executor_->run(feeds);
  }

 private:
  std::unique_ptr<CudaExecutor> executor_;
};

}  // namespace

StatusOr<std::vector<std::vector<int64_t>>> plan_comm_groups(const Plan& plan) {
  std::vector<std::vector<int64_t>> groups;
  std::set<std::vector<int64_t>> seen;
  const DeviceMesh& mesh = plan.scheme.mesh;
  const int64_t devices = mesh.num_devices();
  for (const Role& role : plan.roles) {
    for (const Node& node : role.graph.nodes()) {
      if (node.domain != kAutoparDomain || node.op_type == "Send" || node.op_type == "Recv")
        continue;
      for (int64_t d = 0; d < devices; ++d) {
        if (plan.role_of(d).id != role.id) continue;
        auto group = node_group(node, mesh, d, devices);
        if (!group.is_ok())
          return error("role {} node '{}' ({}): {}", role.id, node.name, node.op_type,
                       group.status().message());
        if (seen.insert(*group).second) groups.push_back(std::move(group).value());
      }
    }
  }
  return groups;
}

StatusOr<std::shared_ptr<CudaDeviceContext>> open_cuda_device(const Plan& plan, Communicator& comm,
                                                              bool nccl) {
  if (const std::string why = cuda::device_unavailable_reason(); !why.empty())
    return error("--backend cuda: {}", why);
  auto context = std::make_shared<CudaDeviceContext>();
  CudaOptions& o = context->options;
  o.communicator = &comm;
  if (nccl) {
    o.device = local_device(comm.rank());
    o.communication = CudaCommunication::kNccl;
    ASSIGN_OR_RETURN(o.nccl, bootstrap_nccl(plan, comm, o.device));
  } else {
    o.device = static_cast<int>(comm.rank() % std::max(1, cuda::device_count()));
    o.communication = CudaCommunication::kHost;
  }
  return context;
}

StatusOr<std::unique_ptr<ProgramRunner>> cuda_program_runner(
    const Graph& program, const std::shared_ptr<CudaDeviceContext>& device) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaExecutor> executor,
                   CudaExecutor::create(program, device->options));
  return std::unique_ptr<ProgramRunner>(new CudaProgramRunner(std::move(executor)));
}

int64_t index_bound(const Graph& g, ValueId input) {
  int64_t bound = 0;
  auto narrow = [&bound](int64_t b) {
    if (b > 0) bound = bound == 0 ? b : std::min(bound, b);
  };
  auto dim = [&g](const Node& n, size_t input, int64_t axis) -> int64_t {
    if (input >= n.inputs.size() || n.inputs[input] == kNoId) return 0;
    const std::vector<int64_t>& dims = g.value(n.inputs[input]).shape.dims;
    const int64_t rank = static_cast<int64_t>(dims.size());
    if (axis < 0) axis += rank;
    return axis >= 0 && axis < rank ? dims[static_cast<size_t>(axis)] : 0;
  };
  std::vector<ValueId> pending = {input};
  std::set<ValueId> seen = {input};
  while (!pending.empty()) {
    const ValueId v = pending.back();
    pending.pop_back();
    for (NodeId c : g.value(v).consumers) {
      const Node& n = g.node(c);
      const bool first = !n.inputs.empty() && n.inputs[0] == v;
      const bool second = n.inputs.size() > 1 && n.inputs[1] == v;
      const std::string& op = n.op_type;
      if (first && (op == "Reshape" || op == "Unsqueeze" || op == "Squeeze" || op == "Flatten" ||
                    op == "Cast" || op == "Identity" || op == "Expand")) {
        for (ValueId out : n.outputs) {
          if (out != kNoId && seen.insert(out).second) pending.push_back(out);
        }
      } else if (second && op == "Gather") {
        narrow(dim(n, 0, n.attr_int("axis", 0)));
      } else if (second && (op == "GatherElements" || op == "ScatterElements")) {
        narrow(dim(n, 0, n.attr_int("axis", 0)));
      } else if (second && (op == "ScatterND" || op == "GatherND")) {
        narrow(dim(n, 0, n.attr_int("batch_dims", 0)));
      } else if (second && (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss")) {
        narrow(dim(n, 0, 1));
      }
    }
  }
  return bound;
}

namespace {

// Inputs a program can run on: floats uniform in [-0.1, 0.1) (small, so long chains stay
// finite), integers uniform over the range they index (so an embedding's gradient scatters
// over its rows as real ids do, not all into one), else 0, booleans false. A plan's programs
// read hundreds of millions of such elements: a xorshift generator keeps making them a matter
// of seconds.
Tensor stand_in(const Graph& g, ValueId id, uint64_t& state) {
  const Value& v = g.value(id);
  Tensor t(v.dtype, v.shape.dims);
  auto bits = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  if (v.dtype == DType::kInt64 || v.dtype == DType::kInt32) {
    const int64_t bound = index_bound(g, id);
    if (bound > 1) {
      for (int64_t i = 0; i < t.num_elements(); ++i)
        t.set_from_int(i, static_cast<int64_t>(bits() % static_cast<uint64_t>(bound)));
    }
    return t;
  }
  if (!is_floating(v.dtype)) return t;
  auto next = [&bits] { return static_cast<double>(bits() >> 11) * 0x1.0p-53 * 0.2 - 0.1; };
  if (v.dtype == DType::kFloat32) {
    for (float& x : t.mutable_data<float>()) x = static_cast<float>(next());
  } else {
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, next());
  }
  return t;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

StatusOr<std::vector<CudaRoleTiming>> time_plan_roles_cuda(const Plan& plan, int replays,
                                                           bool node_seconds) {
  if (replays < 1) return error("replays {}: must be at least 1", replays);
  std::vector<CudaRoleTiming> roles;
  for (const Role& role : plan.roles) {
    CudaRoleTiming timing;
    timing.role = role.id;
    std::vector<int> runs(role.programs.size(), 0);
    for (const ScheduleStep& step : role.schedule) {
      const int p = role.program_of(step);
      if (p >= 0) ++runs[static_cast<size_t>(p)];
    }
    for (size_t p = 0; p < role.programs.size(); ++p) {
      const Program& prog = role.programs[p];
      ASSIGN_OR_RETURN(ProgramGraph pg, extract_program(role.graph, prog));
      CudaOptions options;
      options.communication = CudaCommunication::kStub;
      auto created = CudaExecutor::create(pg.graph, options);
      if (!created.is_ok())
        return error("role {} program {}: {}", role.id, prog.name(), created.status().message());
      std::unique_ptr<CudaExecutor> ex = std::move(created).value();
      uint64_t state = 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(role.id) * 1000003u + p);
      std::vector<Feed> feeds;
      for (ValueId in : pg.graph.inputs())
        feeds.emplace_back(in, std::make_shared<const Tensor>(stand_in(pg.graph, in, state)));
      RETURN_IF_ERROR(ex->feed(feeds));
      CudaProgramTiming t;
      t.name = prog.name();
      t.runs_per_step = runs[p];
      auto replayed = ex->replay(replays);
      if (!replayed.is_ok())
        return error("role {} program {}: {}", role.id, prog.name(), replayed.status().message());
      t.median_s = quantile(replayed.value(), 0.5);
      t.p10_s = quantile(replayed.value(), 0.1);
      if (node_seconds) {
        ASSIGN_OR_RETURN(t.launches, ex->profile_launches());
        t.node_seconds.assign(static_cast<size_t>(role.graph.num_nodes()), 0.0);
        for (CudaLaunchTiming& l : t.launches) {
          if (l.node_id < 0) continue;
          l.node_id += prog.begin;
          t.node_seconds[static_cast<size_t>(l.node_id)] += l.seconds;
        }
      }
      timing.step_s += t.median_s * t.runs_per_step;
      timing.p10_step_s += t.p10_s * t.runs_per_step;
      timing.programs.push_back(std::move(t));
    }
    roles.push_back(std::move(timing));
  }
  return roles;
}

}  // namespace autopar::runtime
