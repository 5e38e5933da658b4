// A plan's roles timed on one GPU: each role's programs run for real on the CUDA backend with
// their communication stubbed (received and gathered data from recorded shapes), so a plan for
// many devices is profiled on one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autopar/parallel/plan.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/program_runner.h"
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

// Every group a communication op of the plan names, as each device that runs it resolves it,
// once each, in a fixed order (role by role, node by node, device by device): the groups NCCL
// splits up front.
StatusOr<std::vector<std::vector<int64_t>>> plan_comm_groups(const Plan& plan);

// What the programs of one device share on the CUDA backend: its GPU, how its communication
// runs, and over NCCL the process's communicators.
struct CudaDeviceContext;
// The CUDA side of a device of `plan` whose communicator is `comm`: with `nccl` (one process
// per GPU, under mpirun) an NCCL world bootstrapped over `comm` with every group of the plan
// split up front, and the GPU of the process's local rank; without, communication through the
// host and GPU rank % device count. Called by every device of the plan.
StatusOr<std::shared_ptr<CudaDeviceContext>> open_cuda_device(const Plan& plan, Communicator& comm,
                                                              bool nccl);
// A program of that device on the CUDA backend.
StatusOr<std::unique_ptr<ProgramRunner>> cuda_program_runner(
    const Graph& program, const std::shared_ptr<CudaDeviceContext>& device);

// `replays` timed replays of every program of every role (after one eager run); with
// `node_seconds`, each program is also run once launch by launch.
StatusOr<std::vector<CudaRoleTiming>> time_plan_roles_cuda(const Plan& plan, int replays,
                                                           bool node_seconds);

}  // namespace autopar::runtime
