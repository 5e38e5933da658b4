// A plan's roles timed on one GPU: each role's programs run for real on the CUDA backend with
// their communication stubbed (received and gathered data from recorded shapes), so a plan for
// many devices is profiled on one.
#pragma once

#include <string>
#include <vector>

#include "autopar/parallel/plan.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/support/status.h"

namespace autopar::runtime {

struct CudaProgramTiming {
  std::string name;       // "F0", "B0", "U"
  int runs_per_step = 0;  // how often the role's schedule runs it
  double median_s = 0;    // one run, replayed as a CUDA graph
  double p10_s = 0;
  // Per role-graph node: seconds of one run, from an eager run timed launch by launch
  // (empty unless asked for).
  std::vector<double> node_seconds;
  // The same eager run launch by launch; node ids are the role graph's.
  std::vector<CudaLaunchTiming> launches;
};

struct CudaRoleTiming {
  int32_t role = 0;
  std::vector<CudaProgramTiming> programs;
  double step_s = 0;      // sum over the schedule of its programs' median runs
  double p10_step_s = 0;  // the same with their 10th percentiles
};

// The range [0, bound) an integer input indexes in, from what reads it (through views and
// casts): the data dim a Gather, GatherElements, ScatterElements or ScatterND indexes, the
// classes of a loss's labels; 0 where nothing says. Profiles draw their stand-in ids from it.
int64_t index_bound(const Graph& graph, ValueId input);

// `replays` timed replays of every program of every role (after one eager run); with
// `node_seconds`, each program is also run once launch by launch.
StatusOr<std::vector<CudaRoleTiming>> time_plan_roles_cuda(const Plan& plan, int replays,
                                                           bool node_seconds);

}  // namespace autopar::runtime
