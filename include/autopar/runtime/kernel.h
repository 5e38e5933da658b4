// Kernel: how the CPU executor runs one op type, and the registry that holds them.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar::runtime {

class Communicator;
struct Activation;

// What a kernel sees of one node run: the node, its input tensors (present or omitted), and
// its outputs' static types from the graph. Kernels allocate outputs with allocate_output().
class KernelContext {
 public:
  KernelContext(const Graph& graph, const Node& node, std::vector<const Tensor*> inputs,
                int num_threads)
      : graph_(graph), node_(node), inputs_(std::move(inputs)), num_threads_(num_threads) {
    outputs_.resize(node.outputs.size());
  }

  const Graph& graph() const { return graph_; }
  const Node& node() const { return node_; }
  int64_t opset() const { return graph_.opset(node_.domain); }
  int num_threads() const { return num_threads_; }
  // The device's communicator for the ai.autopar ops; null when the graph runs alone.
  Communicator* communicator() const { return communicator_; }
  void set_communicator(Communicator* communicator) { communicator_ = communicator; }
  // An activation the kernel applies to output 0 as it writes it, in place of the activation's
  // own node (the executor fuses Conv with Relu, Clip, HardSigmoid, ...); null for none.
  const Activation* activation() const { return activation_; }
  void set_activation(const Activation* activation) { activation_ = activation; }
  // Which draw of the random ops (Dropout) this run is: a plan's runner numbers its runs by
  // step and microbatch, so each microbatch drops its own elements and a recomputation drops
  // the same ones again. 0 for a graph run alone.
  uint64_t random_stream() const { return random_stream_; }
  void set_random_stream(uint64_t stream) { random_stream_ = stream; }

  size_t num_inputs() const { return inputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  const Tensor& input(size_t i) const {
    assert(has_input(i));
    return *inputs_[i];
  }

  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_output(size_t i) const { return node_.output(i) != kNoId; }
  // The graph's static type of output i: what the kernel must produce.
  const Value& output_value(size_t i) const { return graph_.value(node_.outputs.at(i)); }
  const std::vector<int64_t>& output_dims(size_t i) const { return output_value(i).shape.dims; }
  DType output_dtype(size_t i) const { return output_value(i).dtype; }

  // Allocates output i (zero-filled) with its static dtype and dims and returns it.
  Tensor& allocate_output(size_t i) {
    assert(has_output(i));
    outputs_.at(i) = std::make_shared<Tensor>(output_dtype(i), output_dims(i));
    return *outputs_[i];
  }
  // Sets output i to a tensor the kernel built; its dtype and dims must be the static ones.
  void set_output(size_t i, Tensor t) {
    assert(has_output(i) && t.dtype() == output_dtype(i) && t.dims() == output_dims(i));
    outputs_.at(i) = std::make_shared<Tensor>(std::move(t));
  }
  std::vector<std::shared_ptr<Tensor>>& outputs() { return outputs_; }

  // "node 'name' (OpType): message": a run-time error caused by the data (an index out of
  // range, a shape input that does not match).
  template <typename... Args>
  Status fail(fmt::format_string<Args...> format, Args&&... args) const {
    return Status::error(fmt::format("node '{}' ({}): {}", node_.name, node_.op_type,
                                     fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  const Graph& graph_;
  const Node& node_;
  std::vector<const Tensor*> inputs_;
  std::vector<std::shared_ptr<Tensor>> outputs_;
  int num_threads_;
  Communicator* communicator_ = nullptr;
  const Activation* activation_ = nullptr;
  uint64_t random_stream_ = 0;
};

// Runs one node. Shapes are static and already checked by the op's shape rule, so a kernel
// asserts what the rule guarantees and returns a Status only for data-dependent failures or
// a dtype or attribute form it does not implement.
using Kernel = std::function<Status(KernelContext&)>;

class KernelRegistry {
 public:
  // Registering the same (domain, op_type) twice is a programming error.
  void add(std::string_view domain, std::string_view op_type, Kernel kernel);
  const Kernel* find(std::string_view domain, std::string_view op_type) const;
  size_t size() const { return kernels_.size(); }
  std::vector<std::pair<std::string, std::string>> keys() const;

 private:
  std::map<std::pair<std::string, std::string>, Kernel> kernels_;
};

// Runs node `id` of `graph` once on host tensors (`inputs` as KernelContext takes them) through
// its CPU kernel, as the executor runs it: a node over half types (but Cast, which converts
// them, and the ai.autopar communication ops) runs widened to float32 on a graph of its own,
// and its outputs are rounded back to their half types. For constant folding and host-known
// values, where there is no executor. The outputs in the node's order (null where omitted); an
// op without a CPU kernel is an error naming the node.
StatusOr<std::vector<std::shared_ptr<Tensor>>> run_on_host(const Graph& graph, NodeId id,
                                                           std::vector<const Tensor*> inputs);

// Where each element of a shard lies in the whole tensor: per dim, the whole tensor's index of
// each local position, and the whole tensor's row-major strides. A Dropout of a plan carries
// its input's layout (the `layout` attribute the SPMD lowering writes, `zigzag_axis` for ring
// attention's chunk pairs), so that every device draws for an element what the single-device
// graph draws for it; a node without one is whole. `comm` places the device on the mesh (its
// rank and the plan's mesh); an error says what is wrong without naming the node.
struct GlobalPositions {
  std::vector<std::vector<int64_t>> index;  // per dim: whole-tensor index of each position
  std::vector<int64_t> strides;             // the whole tensor's
};
StatusOr<GlobalPositions> global_positions(const Node& node, const std::vector<int64_t>& dims,
                                           const Communicator* comm);
// The key of one run's draws of a random op: the node's seed, and from a plan's second run on
// (`stream`: step and microbatch) the stream mixed in.
uint64_t draw_key(uint64_t seed, uint64_t stream);

// Fills a registry with every CPU kernel; the one explicit list lives in
// src/runtime/kernels/register_all_kernels.cc.
void register_all_kernels(KernelRegistry& registry);

// The process-wide registry, filled on first use.
const KernelRegistry& kernel_registry();

}  // namespace autopar::runtime
