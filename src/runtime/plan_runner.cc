// Running a plan: programs extracted from the role graphs, one executor per program and device.
#include "autopar/runtime/plan_runner.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "autopar/ir/graph_copy.h"
#include "autopar/ir/shape_inference.h"
#include "autopar/runtime/cuda_plan.h"
#include "autopar/runtime/executor.h"

namespace autopar::runtime {
namespace {

// Per dim: the offset and length of a device's block.
std::vector<std::pair<int64_t, int64_t>> block_of(const std::vector<int64_t>& shape,
                                                  const Layout& layout, const DeviceMesh& mesh,
                                                  const std::vector<int64_t>& coords) {
  std::vector<std::pair<int64_t, int64_t>> block;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t parts = 1, index = 0;
    for (const std::string& a : layout.dim_axes(static_cast<int64_t>(d))) {
      const int64_t size = mesh.size(a);
      index = index * size + coords[mesh.axis_index(a)];
      parts *= size;
    }
    const int64_t length = shape[d] / parts;
    block.emplace_back(index * length, length);
  }
  return block;
}

// Copies a block between a whole tensor and a shard; `to_whole` picks the direction.
void copy_block(Tensor& whole, Tensor& shard, const std::vector<std::pair<int64_t, int64_t>>& block,
                bool to_whole) {
  const std::vector<int64_t>& dims = whole.dims();
  const int64_t rank = static_cast<int64_t>(dims.size());
  const size_t elem = dtype_size(whole.dtype());
  uint8_t* w = whole.mutable_bytes().data();
  uint8_t* s = shard.mutable_bytes().data();
  if (rank == 0) {
    if (to_whole)
      std::memcpy(w, s, elem);
    else
      std::memcpy(s, w, elem);
    return;
  }
  std::vector<int64_t> stride(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * dims[d + 1];
  const int64_t row = block[rank - 1].second;
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < rank; ++d) rows *= block[d].second;
  std::vector<int64_t> idx(rank, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = block[rank - 1].first;
    for (int64_t d = 0; d + 1 < rank; ++d) offset += (block[d].first + idx[d]) * stride[d];
    uint8_t* wp = w + offset * elem;
    uint8_t* sp = s + r * row * elem;
    if (to_whole)
      std::memcpy(wp, sp, row * elem);
    else
      std::memcpy(sp, wp, row * elem);
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++idx[d] < block[d].second) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

StatusOr<ProgramGraph> extract_program(const Graph& rg, const Program& prog) {
  ProgramGraph pg;
  Graph& g = pg.graph;
  g.name = fmt::format("{}.{}", rg.name, prog.name());
  g.opsets = rg.opsets;
  std::map<ValueId, ValueId> vmap;
  auto inside = [&](NodeId n) { return n >= prog.begin && n < prog.end; };
  auto get = [&](ValueId x) -> ValueId {
    auto it = vmap.find(x);
    if (it != vmap.end()) return it->second;
    const Value& v = rg.value(x);
    Value copy = detached(v);
    if (v.is_initializer() && v.data) return vmap[x] = g.add_value(std::move(copy));
    copy.kind = ValueKind::kInput;
    copy.data = nullptr;
    const ValueId id = g.add_value(std::move(copy));
    g.add_input(id);
    pg.inputs.push_back(v.name);
    return vmap[x] = id;
  };
  for (NodeId n = prog.begin; n < prog.end; ++n) {
    Node node = rg.node(n);
    for (ValueId& in : node.inputs) {
      if (in != kNoId) in = get(in);
    }
    for (ValueId& out : node.outputs) {
      if (out == kNoId) continue;
      Value v;
      v.name = rg.value(out).name;
      v.dtype = rg.value(out).dtype;
      v.shape = rg.value(out).shape;
      const ValueId id = g.add_value(std::move(v));
      vmap[out] = id;
      out = id;
    }
    g.add_node(std::move(node));
  }
  for (NodeId n = prog.begin; n < prog.end; ++n) {
    for (ValueId out : rg.node(n).outputs) {
      if (out == kNoId) continue;
      bool escapes = rg.is_output(out);
      for (NodeId c : rg.value(out).consumers) escapes |= !inside(c);
      if (escapes) {
        g.add_output(vmap.at(out));
        pg.outputs.push_back(rg.value(out).name);
      }
    }
  }
  return pg;
}

namespace {

struct DeviceOutcome {
  std::vector<double> losses;
  double seconds = 0;                // the steps alone, without building executors and shards
  std::vector<double> step_seconds;  // per step
  std::vector<std::vector<double>> node_seconds;  // per step and role-graph node, profiling
  std::map<std::string, TensorPtr> state;         // local shards at the end
  std::vector<std::vector<std::vector<TensorPtr>>> outputs;  // [step][micro][output]
};

// A program on the CPU runtime.
class CpuProgramRunner : public ProgramRunner {
 public:
  explicit CpuProgramRunner(Executor executor) : executor_(std::move(executor)) {}
  StatusOr<std::vector<TensorPtr>> run(const std::vector<TensorPtr>& inputs, RunStats* stats,
                                       uint64_t stream) override {
    return executor_.run_inputs(inputs, stats, stream);
  }

 private:
  Executor executor_;
};

class DeviceRun {
 public:
  // `across_processes`: the devices are MPI ranks (over NCCL on the CUDA backend).
  DeviceRun(const Plan& plan, const PlanFeeds& feeds, Communicator& comm,
            const PlanRunOptions& options, bool across_processes)
      : plan_(plan),
        feeds_(feeds),
        comm_(comm),
        options_(options),
        across_processes_(across_processes) {}

  StatusOr<DeviceOutcome> run();

 private:
  StatusOr<std::unique_ptr<ProgramRunner>> runner(const Graph& program);

  const Plan& plan_;
  const PlanFeeds& feeds_;
  Communicator& comm_;
  const PlanRunOptions& options_;
  bool across_processes_;
  std::shared_ptr<CudaDeviceContext> cuda_;
};

StatusOr<std::unique_ptr<ProgramRunner>> DeviceRun::runner(const Graph& program) {
  if (options_.make_program) return options_.make_program(program, comm_);
  if (options_.backend == PlanBackend::kCuda) {
    if (!cuda_) {
      ASSIGN_OR_RETURN(cuda_, open_cuda_device(plan_, comm_, across_processes_));
    }
    return cuda_program_runner(program, cuda_);
  }
  ExecutorOptions eo;
  eo.num_threads = options_.threads_per_device;
  eo.communicator = &comm_;
  eo.profile = options_.profile;
  ASSIGN_OR_RETURN(Executor ex, Executor::create(program, eo));
  return std::unique_ptr<ProgramRunner>(new CpuProgramRunner(std::move(ex)));
}

StatusOr<DeviceOutcome> DeviceRun::run() {
  const int64_t device = comm_.rank();
  const Role& role = plan_.role_of(device);
  const DeviceMesh& mesh = plan_.scheme.mesh;
  const std::vector<int64_t> coords = mesh.coords(device);
  const std::string_view zigzag = zigzag_axis(plan_.scheme);
  std::map<std::string, const StateSpec*> state_by_output;
  for (const StateSpec& s : plan_.state) {
    if (!s.output.empty()) state_by_output[s.output] = &s;
  }
  std::map<std::string, const DataSpec*> data_by_name;
  for (const DataSpec& d : plan_.data) data_by_name[d.name] = &d;

  std::vector<ProgramGraph> programs;
  std::vector<std::unique_ptr<ProgramRunner>> executors;
  for (const Program& p : role.programs) {
    ASSIGN_OR_RETURN(ProgramGraph pg, extract_program(role.graph, p));
    auto ex = runner(pg.graph);
    if (!ex.is_ok())
      return error("role {} program {}: {}", role.id, p.name(), ex.status().message());
    executors.push_back(std::move(ex).value());
    programs.push_back(std::move(pg));
  }

  // Names resolved once: every state has a slot, and so has every value a program computes for
  // later ones (per microbatch); each program's inputs and outputs point at them.
  std::map<std::string, int> state_slot, stash_slot;
  for (const StateSpec& s : plan_.state)
    state_slot.emplace(s.name, static_cast<int>(state_slot.size()));
  for (const ProgramGraph& pg : programs) {
    for (const std::string& name : pg.outputs)
      stash_slot.emplace(name, static_cast<int>(stash_slot.size()));
  }
  struct Input {
    enum class Source : uint8_t { kData, kState, kStash, kNowhere } source;
    int slot = -1;
    const DataSpec* data = nullptr;
  };
  struct Output {
    int stash = -1;
    int state = -1;   // the state it updates
    int output = -1;  // its index among the plan's outputs
    bool loss = false;
  };
  std::vector<std::vector<Input>> program_inputs(programs.size());
  std::vector<std::vector<Output>> program_outputs(programs.size());
  for (size_t k = 0; k < programs.size(); ++k) {
    for (const std::string& name : programs[k].inputs) {
      if (auto d = data_by_name.find(name); d != data_by_name.end()) {
        program_inputs[k].push_back({Input::Source::kData, -1, d->second});
      } else if (auto st = state_slot.find(name); st != state_slot.end()) {
        program_inputs[k].push_back({Input::Source::kState, st->second});
      } else if (auto sh = stash_slot.find(name); sh != stash_slot.end()) {
        program_inputs[k].push_back({Input::Source::kStash, sh->second});
      } else {
        program_inputs[k].push_back({Input::Source::kNowhere});
      }
    }
    for (const std::string& name : programs[k].outputs) {
      Output o;
      o.stash = stash_slot.at(name);
      if (auto st = state_by_output.find(name); st != state_by_output.end())
        o.state = state_slot.at(st->second->name);
      const auto plan_output = std::find(plan_.outputs.begin(), plan_.outputs.end(), name);
      if (plan_output != plan_.outputs.end())
        o.output = static_cast<int>(plan_output - plan_.outputs.begin());
      o.loss = name == plan_.loss;
      program_outputs[k].push_back(o);
    }
  }

  // This device's state: every state a program of its role reads.
  std::vector<TensorPtr> state(state_slot.size());
  std::set<std::string> read;
  for (const ProgramGraph& pg : programs) read.insert(pg.inputs.begin(), pg.inputs.end());
  for (const StateSpec& s : plan_.state) {
    if (!read.count(s.name)) continue;
    if (s.init == StateSpec::Init::kZeros) continue;
    auto it = feeds_.state.find(s.name);
    if (it == feeds_.state.end()) return error("no initial value for state '{}'", s.name);
    state[state_slot.at(s.name)] =
        std::make_shared<const Tensor>(shard_of(*it->second, s.layout, mesh, coords, zigzag));
  }

  DeviceOutcome outcome;
  const int32_t m = static_cast<int32_t>(plan_.microbatches);
  const auto steps_start = std::chrono::steady_clock::now();
  std::vector<TensorPtr> stash(stash_slot.size() * m);  // [value][microbatch]
  for (size_t step = 0; step < feeds_.steps.size(); ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    if (options_.profile) outcome.node_seconds.emplace_back(role.graph.num_nodes(), 0.0);
    for (const StateSpec& s : plan_.state) {
      if (s.init != StateSpec::Init::kZeros || !read.count(s.name)) continue;
      state[state_slot.at(s.name)] =
          std::make_shared<const Tensor>(Tensor(s.dtype, s.layout.shard_shape(s.shape, mesh)));
    }
    std::fill(stash.begin(), stash.end(), nullptr);
    std::vector<double> losses(m, 0.0);
    std::vector<bool> has_loss(m, false);
    std::vector<std::vector<TensorPtr>> outputs(m);
    for (const ScheduleStep& s : role.schedule) {
      const int k = role.program_of(s);
      if (k < 0) return error("role {}: no program for step {}", role.id, s.to_string());
      const ProgramGraph& pg = programs[k];
      const int32_t micro =
          s.kind == ProgramKind::kUpdate || s.kind == ProgramKind::kExchange ? m - 1 : s.micro;
      std::vector<TensorPtr> inputs;
      inputs.reserve(pg.inputs.size());
      for (size_t i = 0; i < pg.inputs.size(); ++i) {
        const Input& in = program_inputs[k][i];
        TensorPtr value;
        if (in.source == Input::Source::kData) {
          const auto& batch = feeds_.steps[step].at(micro);
          auto it = batch.find(pg.inputs[i]);
          if (it == batch.end()) return error("no data for input '{}'", pg.inputs[i]);
          value = std::make_shared<const Tensor>(
              shard_of(*it->second, in.data->layout, mesh, coords, zigzag));
        } else if (in.source == Input::Source::kState) {
          value = state[in.slot];
        } else if (in.source == Input::Source::kStash) {
          value = stash[in.slot * m + micro];
        }
        if (!value) {
          return error("device {} at {}: '{}' was not computed by an earlier program", device,
                       s.to_string(), pg.inputs[i]);
        }
        inputs.push_back(std::move(value));
      }
      RunStats stats;
      // Draws are numbered by step and microbatch, as the reference plan numbers them.
      const uint64_t stream =
          static_cast<uint64_t>(step) * static_cast<uint64_t>(m) + static_cast<uint64_t>(micro);
      auto result = executors[k]->run(inputs, options_.profile ? &stats : nullptr, stream);
      if (!result.is_ok()) {
        return error("device {} at {}: {}", device, s.to_string(), result.status().message());
      }
      // Program node i is role-graph node begin + i (extract copies them in order).
      for (size_t i = 0; i < stats.node_seconds.size(); ++i)
        outcome.node_seconds.back()[role.programs[k].begin + i] += stats.node_seconds[i];
      for (size_t i = 0; i < pg.outputs.size(); ++i) {
        const Output& out = program_outputs[k][i];
        const TensorPtr& t = result.value()[i];
        stash[out.stash * m + s.micro] = t;
        if (out.state >= 0) state[out.state] = t;
        if (out.loss) {
          losses[s.micro] = t->float_at(0);
          has_loss[s.micro] = true;
        }
        if (out.output >= 0) {
          outputs[s.micro].resize(plan_.outputs.size());
          outputs[s.micro][out.output] = t;
        }
      }
    }
    if (!plan_.loss.empty() && has_loss[0]) {
      double sum = 0.0;
      for (double l : losses) sum += l;
      outcome.losses.push_back(sum / static_cast<double>(m));
    }
    if (!plan_.outputs.empty()) outcome.outputs.push_back(outputs);
    outcome.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
  }
  outcome.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - steps_start).count();
  for (const StateSpec& s : plan_.state) {
    const TensorPtr& value = state[state_slot.at(s.name)];
    if (s.init == StateSpec::Init::kModel && value) outcome.state[s.name] = value;
  }
  return outcome;
}

// Whole state and outputs from every device's outcome.
PlanResult assemble(const Plan& plan, const std::vector<DeviceOutcome>& outcomes) {
  PlanResult result;
  const DeviceMesh& mesh = plan.scheme.mesh;
  for (const DeviceOutcome& o : outcomes) {
    if (!o.losses.empty()) {
      result.losses = o.losses;
      break;
    }
  }
  for (const StateSpec& s : plan.state) {
    if (s.init != StateSpec::Init::kModel) continue;
    Tensor whole(s.dtype, s.shape);
    bool any = false;
    for (size_t d = 0; d < outcomes.size(); ++d) {
      auto it = outcomes[d].state.find(s.name);
      if (it == outcomes[d].state.end()) continue;
      place_shard(whole, *it->second, s.layout, mesh, mesh.coords(static_cast<int64_t>(d)),
                  zigzag_axis(plan.scheme));
      any = true;
    }
    if (any) result.state.emplace(s.name, std::move(whole));
  }
  for (const DeviceOutcome& o : outcomes) {
    bool complete = !o.outputs.empty();
    for (const auto& step : o.outputs) {
      for (const auto& micro : step) complete &= micro.size() == plan.outputs.size();
    }
    if (!complete) continue;
    for (const auto& step : o.outputs) {
      std::vector<std::vector<Tensor>> s;
      for (const auto& micro : step) {
        std::vector<Tensor> outs;
        for (const TensorPtr& t : micro) outs.push_back(*t);
        s.push_back(std::move(outs));
      }
      result.outputs.push_back(std::move(s));
    }
    break;
  }
  return result;
}

constexpr int64_t kGatherTag = int64_t{1} << 40;

}  // namespace

namespace {

// The dim split over `axis` reordered, within each block of the axes before it, so that the
// chunk pairs of a zigzag split lie contiguously (`to_pairs`), or back; -1 when no dim is.
int64_t zigzag_dim(const Layout& layout, std::string_view axis) {
  return axis.empty() ? -1 : layout.dim_of(axis);
}

Tensor reorder_zigzag(const Tensor& x, const Layout& layout, const DeviceMesh& mesh,
                      std::string_view axis, bool to_pairs) {
  const int64_t dim = zigzag_dim(layout, axis);
  if (dim < 0) return x;
  int64_t outer = 1;
  for (const std::string& a : layout.dim_axes(dim)) {
    if (a == axis) break;
    outer *= mesh.size(a);
  }
  const int64_t n = mesh.size(axis);
  std::vector<Tensor> blocks = split_tensor(x, dim, outer);
  for (Tensor& block : blocks) block = reorder_chunk_pairs(block, dim, n, to_pairs);
  return concat_tensors(blocks, dim);
}

}  // namespace

Tensor shard_of(const Tensor& whole, const Layout& layout, const DeviceMesh& mesh,
                const std::vector<int64_t>& coords, std::string_view zigzag_axis) {
  if (layout.rank() == 0 || layout.is_replicated()) return whole;
  const auto block = block_of(whole.dims(), layout, mesh, coords);
  std::vector<int64_t> dims;
  for (const auto& [offset, length] : block) dims.push_back(length);
  Tensor shard(whole.dtype(), dims);
  Tensor source = reorder_zigzag(whole, layout, mesh, zigzag_axis, true);
  copy_block(source, shard, block, false);
  return shard;
}

void place_shard(Tensor& whole, const Tensor& shard, const Layout& layout, const DeviceMesh& mesh,
                 const std::vector<int64_t>& coords, std::string_view zigzag_axis) {
  const auto block = block_of(whole.dims(), layout, mesh, coords);
  Tensor source = shard;
  if (zigzag_dim(layout, zigzag_axis) < 0) {
    copy_block(whole, source, block, true);
    return;
  }
  Tensor paired = reorder_zigzag(whole, layout, mesh, zigzag_axis, true);
  copy_block(paired, source, block, true);
  whole = reorder_zigzag(paired, layout, mesh, zigzag_axis, false);
}

StatusOr<PlanResult> run_plan_inproc(const Plan& plan, const PlanFeeds& feeds,
                                     const PlanRunOptions& options) {
  const int64_t n = plan.scheme.mesh.num_devices();
  auto world = create_inproc_world(n, options.timeout);
  std::vector<StatusOr<DeviceOutcome>> outcomes(n, error("not run"));
  std::vector<std::thread> threads;
  for (int64_t d = 0; d < n; ++d) {
    world[d]->set_mesh(plan.scheme.mesh);
    threads.emplace_back([&, d] {
      DeviceRun run(plan, feeds, *world[d], options, false);
      outcomes[d] = run.run();
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<DeviceOutcome> done;
  for (int64_t d = 0; d < n; ++d) {
    if (!outcomes[d].is_ok()) return outcomes[d].status();
    done.push_back(std::move(outcomes[d]).value());
  }
  PlanResult result = assemble(plan, done);
  result.step_seconds.assign(feeds.steps.size(), 0.0);
  for (const DeviceOutcome& o : done) {
    result.seconds = std::max(result.seconds, o.seconds);
    for (size_t s = 0; s < o.step_seconds.size(); ++s)
      result.step_seconds[s] = std::max(result.step_seconds[s], o.step_seconds[s]);
    result.device_step_seconds.push_back(o.step_seconds);
    result.node_seconds.push_back(o.node_seconds);
  }
  return result;
}

StatusOr<PlanResult> run_plan_device(const Plan& plan, const PlanFeeds& feeds, Communicator& comm,
                                     const PlanRunOptions& options) {
  const int64_t n = plan.scheme.mesh.num_devices();
  if (comm.size() != n) {
    return error("the plan has {} devices but {} {} started (mpirun -np {})", n, comm.size(),
                 comm.size() == 1 ? "rank was" : "ranks were", n);
  }
  comm.set_mesh(plan.scheme.mesh);

  DeviceRun run(plan, feeds, comm, options, true);
  ASSIGN_OR_RETURN(DeviceOutcome mine, run.run());
  // Rank 0 gathers every device's state shards and outputs.
  std::vector<DeviceOutcome> all(n);
  int64_t tag = kGatherTag;
  for (const StateSpec& s : plan.state) {
    if (s.init != StateSpec::Init::kModel) continue;
    ++tag;
    for (int64_t d = 1; d < n; ++d) {
      if (comm.rank() == d) {
        auto it = mine.state.find(s.name);
        const bool has = it != mine.state.end();
        RETURN_IF_ERROR(comm.send(0, tag, Tensor::scalar_int64(has ? 1 : 0)));
        if (has) RETURN_IF_ERROR(comm.send(0, tag, *it->second));
      } else if (comm.rank() == 0) {
        ASSIGN_OR_RETURN(Tensor has, comm.recv(d, tag));
        if (has.int_at(0)) {
          ASSIGN_OR_RETURN(Tensor t, comm.recv(d, tag));
          all[d].state[s.name] = std::make_shared<const Tensor>(std::move(t));
        }
      }
    }
  }
  // The loss and the model outputs live on the last pipeline rank: its first device sends them
  // to rank 0.
  ++tag;
  int64_t loss_device = 0;
  for (int64_t d = 0; d < n; ++d) {
    if (plan.device_role[d] == plan.device_role.back()) {
      loss_device = d;
      break;
    }
  }
  if (!plan.loss.empty() && loss_device != 0) {
    if (comm.rank() == loss_device) {
      Tensor losses(DType::kFloat64, {static_cast<int64_t>(mine.losses.size())});
      for (size_t i = 0; i < mine.losses.size(); ++i)
        losses.set_from_double(static_cast<int64_t>(i), mine.losses[i]);
      RETURN_IF_ERROR(comm.send(0, tag, losses));
    } else if (comm.rank() == 0) {
      ASSIGN_OR_RETURN(Tensor losses, comm.recv(loss_device, tag));
      for (int64_t i = 0; i < losses.num_elements(); ++i)
        all[loss_device].losses.push_back(losses.float_at(i));
    }
  }
  // Inference outputs too: every step and microbatch, each output, in order.
  if (!plan.outputs.empty() && loss_device != 0) {
    ++tag;
    if (comm.rank() == loss_device) {
      for (const auto& step : mine.outputs) {
        for (const auto& micro : step) {
          for (const TensorPtr& t : micro) RETURN_IF_ERROR(comm.send(0, tag, *t));
        }
      }
    } else if (comm.rank() == 0) {
      auto& outputs = all[loss_device].outputs;
      outputs.assign(feeds.steps.size(), {});
      for (size_t s = 0; s < feeds.steps.size(); ++s) {
        outputs[s].resize(feeds.steps[s].size());
        for (auto& micro : outputs[s]) {
          for (size_t o = 0; o < plan.outputs.size(); ++o) {
            ASSIGN_OR_RETURN(Tensor t, comm.recv(loss_device, tag));
            micro.push_back(std::make_shared<const Tensor>(std::move(t)));
          }
        }
      }
    }
  }
  const double seconds = mine.seconds;
  if (comm.rank() != 0) {
    PlanResult own;
    own.losses = mine.losses;
    own.seconds = seconds;
    own.step_seconds = mine.step_seconds;
    return own;
  }
  std::vector<double> step_seconds = mine.step_seconds;
  std::vector<std::vector<double>> node_seconds = mine.node_seconds;
  all[0] = std::move(mine);
  PlanResult result = assemble(plan, all);
  result.seconds = seconds;
  result.step_seconds = step_seconds;
  result.device_step_seconds = {step_seconds};
  result.node_seconds = {std::move(node_seconds)};
  return result;
}

}  // namespace autopar::runtime
