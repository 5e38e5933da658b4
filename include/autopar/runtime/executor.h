// Executor: interprets one graph on the CPU, freeing each buffer after its last use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/runtime/kernel.h"
#include "autopar/support/status.h"

namespace autopar::runtime {

struct ExecutorOptions {
  // Threads for the kernels' parallel loops; 0 = every core. Results are deterministic for a
  // given count.
  int num_threads = 0;
  // Measure each node's time into RunStats::node_seconds.
  bool profile = false;
  // The device's communicator, for graphs with ai.autopar ops (not owned).
  Communicator* communicator = nullptr;
  // Run consecutive elementwise nodes over one shape tile by tile, and apply an activation
  // (Relu, LeakyRelu, Clip, HardSigmoid, HardSwish) inside the convolution whose output only
  // it reads (bit-identical results either way).
  bool fuse_elementwise = true;
};

struct RunStats {
  // Most bytes held at once by values that are neither initializers nor graph inputs.
  int64_t peak_activation_bytes = 0;
  int64_t initializer_bytes = 0;
  double seconds = 0;
  std::vector<double> node_seconds;  // per node, when profiling
};

// One value fed to a run: a graph input, or an initializer to override (a training step
// feeds back updated parameters).
using Feed = std::pair<ValueId, std::shared_ptr<const Tensor>>;

struct FusedGroup;
struct FusedActivation;

// A run of nodes [first, last] the executor computes as one elementwise kernel, tile by tile
// (fuse_elementwise): `ops` operations over `elements` each, reading and writing only
// `external_bytes` (its inputs from outside, and the values read after it).
struct FusedRun {
  NodeId first = kNoId, last = kNoId;
  int ops = 0;
  int64_t elements = 0;
  double external_bytes = 0;
};
// The runs the executor fuses in `graph`; none spans a node of `cut_before` (where a program
// of a plan begins, each program running on an executor of its own). With `half_types`, the
// runs of bf16 and fp16 nodes the CUDA backend fuses as well.
std::vector<FusedRun> fused_runs(const Graph& graph, const std::vector<NodeId>& cut_before = {},
                                 bool half_types = false);

class Executor {
 public:
  // Checks the graph (static shapes, an OpDef and a kernel per node) and plans buffer
  // lifetimes. The graph is copied in.
  static StatusOr<Executor> create(Graph graph, const ExecutorOptions& options = {});

  // Runs the graph. Every graph input must be fed; initializers without data must be fed.
  // Returns the graph outputs in order. A feed whose dtype or shape differs from the
  // graph's is an error naming it. `random_stream` numbers the run's draws of random ops
  // (KernelContext::random_stream).
  StatusOr<std::vector<TensorPtr>> run(const std::vector<Feed>& feeds, RunStats* stats = nullptr,
                                       uint64_t random_stream = 0) const;
  // The same with graph inputs given in order.
  StatusOr<std::vector<TensorPtr>> run_inputs(const std::vector<TensorPtr>& inputs,
                                              RunStats* stats = nullptr,
                                              uint64_t random_stream = 0) const;

  const Graph& graph() const { return *graph_; }
  int num_threads() const { return num_threads_; }
  // What a run's RunStats::peak_activation_bytes will be, from the static shapes and the
  // buffer lifetimes planned, before anything is allocated.
  int64_t planned_peak_bytes() const;

 private:
  Executor() = default;
  // Where node `id` stores its output i: its own value, or for a convolution with a fused
  // activation, the activation's output.
  ValueId stored_output(NodeId id, size_t i) const;

  std::shared_ptr<const Graph> graph_;
  std::vector<const Kernel*> kernels_;         // per node
  std::vector<std::vector<ValueId>> release_;  // per node: values dead after it runs
  std::shared_ptr<const std::vector<FusedGroup>> groups_;
  std::vector<int> group_starting_at_;  // per node: the fused group it starts, or -1
  // Convolutions that apply the activation reading their output as they write it: per node,
  // the index of its FusedActivation, or -1; the activation's own node is then skipped.
  std::shared_ptr<const std::vector<FusedActivation>> activations_;
  std::vector<int> activation_at_;
  std::vector<bool> absorbed_;  // per node: computed by the convolution before it
  // Nodes over float16/bfloat16 values run their float32 kernel on widened copies (the
  // results rounded back): low-precision storage with float32 arithmetic, per op.
  std::vector<bool> widened_;
  std::shared_ptr<const Graph> wide_graph_;  // the graph with half types as float32
  int num_threads_ = 1;
  bool profile_ = false;
  Communicator* communicator_ = nullptr;
};

// Checks a fed tensor against a value's static type: "input 'x': expected f32[2,4], got
// f32[3,4]".
Status check_feed(const Value& value, const Tensor& tensor);

}  // namespace autopar::runtime
