// Timing a plan's roles on one GPU, program by program, with communication stubbed.
#include "autopar/runtime/cuda_plan.h"

#include <algorithm>

#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/plan_runner.h"

namespace autopar::runtime {
namespace {

// Inputs a program can run on: floats uniform in [-0.1, 0.1) (small, so long chains stay
// finite), integers 0 (a valid id, label and index everywhere), booleans false. A plan's
// programs read hundreds of millions of such elements: a xorshift generator keeps making them
// a matter of seconds.
Tensor stand_in(const Value& v, uint64_t& state) {
  Tensor t(v.dtype, v.shape.dims);
  if (!is_floating(v.dtype)) return t;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<double>(state >> 11) * 0x1.0p-53 * 0.2 - 0.1;
  };
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
      options.stub_communication = true;
      auto created = CudaExecutor::create(pg.graph, options);
      if (!created.is_ok())
        return error("role {} program {}: {}", role.id, prog.name(), created.status().message());
      std::unique_ptr<CudaExecutor> ex = std::move(created).value();
      uint64_t state = 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(role.id) * 1000003u + p);
      std::vector<Feed> feeds;
      for (ValueId in : pg.graph.inputs())
        feeds.emplace_back(in, std::make_shared<const Tensor>(stand_in(pg.graph.value(in), state)));
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
