// The CUDA backend: a graph lowered to a device program (launches over an arena planned from
// its liveness), run eagerly once and then replayed as a captured CUDA graph.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/runtime/executor.h"
#include "autopar/support/status.h"

namespace autopar::cuda {
struct Program;
struct Launch;
class Device;
struct NcclComms;
}  // namespace autopar::cuda

namespace autopar::runtime {

class Communicator;

// "" when a CUDA device can be used, else one sentence saying why not.
std::string cuda_unavailable_reason();
// One line naming device 0, or the reason there is none.
std::string cuda_device_description();

// The GPUs this process can use (0 where none).
int cuda_device_count();

// NCCL, one rank per GPU. A world's id is made by its rank 0 (cuda_nccl_id) and handed to the
// others (over MPI, or to threads of one process); each rank then joins with
// open_cuda_nccl, which also splits a communicator for each of `groups` (the global ranks of
// each group, the same list in the same order on every rank: the splits are collective over
// the world). The ranks of one world must join concurrently.
StatusOr<std::string> cuda_nccl_id();
StatusOr<std::shared_ptr<cuda::NcclComms>> open_cuda_nccl(
    int device, int rank, int size, const std::string& id,
    const std::vector<std::vector<int64_t>>& groups);

// Whether the CUDA backend lowers (domain, op_type); every op of the zoo's training graphs
// and of plans built from them is covered (tests check the list).
bool cuda_supports(std::string_view domain, std::string_view op_type);
std::vector<std::pair<std::string, std::string>> cuda_supported_ops();

// What a graph's communication ops (ai.autopar) become on the device.
enum class CudaCommunication : uint8_t {
  kNone,  // refused: a graph run alone has none
  // Shapes without communicating: zeros for received and gathered data, an all-reduce keeps
  // its input (a role of a plan profiled alone on one GPU).
  kStub,
  // Run by the host with the CPU runtime's kernels on `communicator`: the inputs copied out,
  // the outputs copied back (every op; the program runs eagerly, without a CUDA graph). The
  // devices of a plan run as threads on one GPU this way.
  kHost,
  // NCCL collectives, one rank per GPU (captured in the CUDA graph); the other ops go through
  // the host as under kHost.
  kNccl,
};

struct CudaOptions {
  int device = 0;
  // Run consecutive elementwise nodes of one shape as one kernel (registers, not memory, hold
  // the values between them).
  bool fuse_elementwise = true;
  // State written back in place after each run: (state value, its next value) pairs, as a
  // training graph's updates; the state stays on the device between runs.
  std::vector<std::pair<ValueId, ValueId>> updates;
  CudaCommunication communication = CudaCommunication::kNone;
  // kHost and kNccl: this device's communicator. Its rank and the plan's mesh (set_mesh)
  // resolve the groups the ops name; kHost runs every op on it, kNccl the sends and receives
  // (the runtime's do not wait for the receiver, NCCL's do), halo exchanges and zigzag chunk
  // pairs.
  Communicator* communicator = nullptr;
  // kNccl: the process's NCCL communicators (open_plan_nccl), on `device`.
  std::shared_ptr<cuda::NcclComms> nccl;

  // Fill the arena with NaN bytes before the first run (tests: every output element written).
  bool poison_arena = false;
};

// What the lowering made of a graph: tested without a GPU.
struct CudaLoweringSummary {
  int64_t launches = 0;
  std::map<std::string, int64_t> launches_by_kind;  // "map", "matmul", ...
  int64_t fused_nodes = 0;                          // nodes run inside a multi-node kMap
  int64_t views = 0;                                // nodes that became aliases
  int64_t arena_bytes = 0;
  int64_t persistent_bytes = 0;
};

// The device program of `graph` (host side only): errors name the node an op or form is not
// lowered for.
struct CudaLowering;
StatusOr<std::shared_ptr<const CudaLowering>> lower_for_cuda(const Graph& graph,
                                                             const CudaOptions& options = {});
CudaLoweringSummary summarize(const CudaLowering& lowering);

// One launch of an eager run timed on its own (a profile).
struct CudaLaunchTiming {
  std::string kind;      // "map", "matmul", ... (CudaLoweringSummary's names)
  std::string node;      // the graph node it runs; a fused run's first node
  int32_t node_id = -1;  // -1 for launches of no node (updates written back)
  int32_t nodes = 1;     // graph nodes it runs (a fused elementwise run: several)
  int64_t bytes = 0;     // bytes read and written, where the launch's form says (map, copies)
  double seconds = 0;
};

class CudaExecutor {
 public:
  // Lowers the graph, opens the device and loads the program (uploads initializers).
  static StatusOr<std::unique_ptr<CudaExecutor>> create(const Graph& graph,
                                                        const CudaOptions& options = {});
  ~CudaExecutor();

  // Writes the feeds (graph inputs, or initializers to override) to the device.
  Status feed(const std::vector<Feed>& feeds);
  // Which draw of the random ops (Dropout) the next runs are (KernelContext::random_stream): a
  // plan's runner numbers its runs by step and microbatch. 0 until set.
  Status set_random_stream(uint64_t stream);
  // Runs once: eagerly the first time (libraries choose their algorithms), then as the
  // captured CUDA graph (eagerly every time when communication goes through the host).
  // Returns the run's seconds (device events).
  StatusOr<double> step();
  // Runs the captured graph `times` times and returns each run's seconds.
  StatusOr<std::vector<double>> replay(int times);
  // Per node: seconds of its launches, run eagerly one launch at a time (a profile).
  StatusOr<std::vector<double>> profile_nodes();
  // Per launch, in program order: what it runs and its seconds, run eagerly as above.
  StatusOr<std::vector<CudaLaunchTiming>> profile_launches();
  // Reads the graph outputs (after step()).
  StatusOr<std::vector<TensorPtr>> outputs();
  // Reads one value that has storage (a graph input, initializer or output).
  StatusOr<Tensor> read(ValueId value);

  // feed + step + outputs.
  StatusOr<std::vector<TensorPtr>> run(const std::vector<Feed>& feeds);

  const Graph& graph() const { return *graph_; }
  const CudaLowering& lowering() const { return *lowering_; }

 private:
  CudaExecutor() = default;
  // Runs a kHost launch's node with the CPU runtime's kernel on communicator_.
  std::string run_on_host(const cuda::Launch& launch);
  std::shared_ptr<const Graph> graph_;
  Communicator* communicator_ = nullptr;
  std::shared_ptr<const CudaLowering> lowering_;
  std::unique_ptr<cuda::Device> device_;
  bool ran_ = false;
};

}  // namespace autopar::runtime
