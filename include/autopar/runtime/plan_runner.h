// The plan runner: each device follows its role's schedule, running the role's programs with
// its shards of the state, its slice of each microbatch, and the values its earlier programs
// stashed for later ones (keyed by microbatch).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autopar/ir/tensor.h"
#include "autopar/parallel/plan.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/program_runner.h"
#include "autopar/support/status.h"

namespace autopar::runtime {

// Whole tensors, as one device would hold them.
struct PlanFeeds {
  std::map<std::string, TensorPtr> state;  // initial values of the kModel state, by name
  // Per step, per microbatch: the data inputs by name (dp · micro samples each).
  std::vector<std::vector<std::map<std::string, TensorPtr>>> steps;
};

struct PlanResult {
  std::vector<double> losses;  // per step, the mean over its microbatches (training plans)
  // The model-initialised state after the last step, whole (gathered from the shards).
  std::map<std::string, Tensor> state;
  // Inference plans: per step and microbatch, the model outputs, whole.
  std::vector<std::vector<std::vector<Tensor>>> outputs;
  double seconds = 0;  // the steps alone (the slowest device), without setting up programs
  std::vector<double> step_seconds;  // per step, the slowest device
  // Per device (those this process ran): per step, its seconds.
  std::vector<std::vector<double>> device_step_seconds;
  // When profiling, per device and step: the seconds of each node of its role graph, summed
  // over the step's program runs.
  std::vector<std::vector<std::vector<double>>> node_seconds;
};

// Where a plan's programs run.
enum class PlanBackend : uint8_t {
  kCpu,
  // The CUDA backend. In one process every device is a thread on a GPU (device % GPUs) and
  // communicates through the host; under MPI each rank has its GPU (the local rank's) and the
  // ranks communicate over NCCL.
  kCuda,
};

// A program runner of the caller's for one program of the device whose communicator is given
// (another backend, or an instrumented one in tests). The program graph lives only for the
// call: a runner keeps a copy of what it needs.
using ProgramRunnerFactory = std::function<StatusOr<std::unique_ptr<ProgramRunner>>(
    const Graph& program, Communicator& comm)>;

struct PlanRunOptions {
  PlanBackend backend = PlanBackend::kCpu;
  // Set: every program runs on the runners it makes, whatever `backend` says.
  ProgramRunnerFactory make_program;
  int threads_per_device = 1;
  std::chrono::milliseconds timeout{120000};
  // Time every node (PlanResult::node_seconds).
  bool profile = false;
};

// One program of a role as a graph of its own: what it reads from outside its node range are
// its inputs; what later programs or the step read are its outputs. Node i of the graph is
// role-graph node prog.begin + i.
struct ProgramGraph {
  Graph graph;
  std::vector<std::string> inputs;  // in graph-input order
  std::vector<std::string> outputs;
};
StatusOr<ProgramGraph> extract_program(const Graph& role_graph, const Program& prog);

// Every device as a thread of this process, on the inproc communicator.
StatusOr<PlanResult> run_plan_inproc(const Plan& plan, const PlanFeeds& feeds,
                                     const PlanRunOptions& options = {});

// This process's device (comm.rank()) of a plan whose devices are the ranks of `comm` (MPI).
// Rank 0 receives every device's shards and returns the whole result; other ranks return
// their own losses only.
StatusOr<PlanResult> run_plan_device(const Plan& plan, const PlanFeeds& feeds, Communicator& comm,
                                     const PlanRunOptions& options = {});

// The part of `whole` that device `coords` holds under `layout` (partial axes ignored). A dim
// split over `zigzag_axis` (Scheme::zigzag_axis) is cut, within the block of the axes before
// it, into 2·n chunks of which member r holds r and 2·n − 1 − r.
Tensor shard_of(const Tensor& whole, const Layout& layout, const DeviceMesh& mesh,
                const std::vector<int64_t>& coords, std::string_view zigzag_axis = {});
// Writes `shard` of device `coords` into `whole`.
void place_shard(Tensor& whole, const Tensor& shard, const Layout& layout, const DeviceMesh& mesh,
                 const std::vector<int64_t>& coords, std::string_view zigzag_axis = {});

}  // namespace autopar::runtime
