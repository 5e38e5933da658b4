// OpStrategy: one way to run one node on the mesh, derived from its parallel semantics.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autopar/parallel/reshard.h"

#include "autopar/ir/graph.h"
#include "autopar/ops/parallel_semantics.h"
#include "autopar/parallel/device_mesh.h"
#include "autopar/parallel/layout.h"
#include "autopar/support/status.h"

namespace autopar {

// Mesh axis → the loop of the node's iteration space it splits.
using LoopAssignment = std::vector<std::pair<std::string, int>>;

struct OpStrategy {
  LoopAssignment assignment;
  std::vector<Layout> inputs;   // what each input must be (replicated rank-0 for omitted ones)
  std::vector<Layout> outputs;  // what each output is: split where its loops are, partial over
                                // the axes that split a reduction loop

  // "dp:b0 tp:n | [dp, _, _] [_, tp] -> [dp, _, tp]"; "replicated | ..." with no assignment.
  std::string to_string(const IterationSpace& space) const;
  bool operator==(const OpStrategy&) const = default;
};

// The strategy splitting the assigned loops. Errors: an axis the mesh lacks, a loop that is not
// splittable, an axis used twice, an operand dim the axes do not divide, a split reduction
// whose partial results do not sum (max).
StatusOr<OpStrategy> derive_strategy(const Graph& graph, const Node& node,
                                     const IterationSpace& space, const LoopAssignment& assignment,
                                     const DeviceMesh& mesh);

// Every valid strategy assigning each of `axes` to one splittable loop or to none (replicated
// over it), in a deterministic order: replicated first.
std::vector<OpStrategy> enumerate_strategies(const Graph& graph, const Node& node,
                                             const DeviceMesh& mesh,
                                             const std::vector<std::string>& axes);

// A node's strategies with what choosing among them needs: each input's distinct layouts
// (many strategies ask for the same one, so what it costs to bring an input into a layout is
// worked out once per layout), and each strategy's degree (the devices its work divides over).
struct StrategySet {
  std::vector<OpStrategy> strategies;
  std::vector<std::vector<Layout>> input_layouts;  // per input: its distinct layouts
  std::vector<std::vector<int>> input_choice;      // per strategy, per input: into input_layouts
  std::vector<int64_t> degree;                     // per strategy
  std::optional<IterationSpace> space;             // the node's (iteration_space)
};

// enumerate_strategies by the node's signature: its op, opset, attributes, operand types and
// shapes (and the data of small constant operands: reduction axes, target shapes), and the
// axes with their sizes. The nodes of repeated layers, and one model lowered under many
// schemes, ask for the same strategies again and again. Safe to share between threads.
class StrategyCache {
 public:
  std::shared_ptr<const StrategySet> get(const Graph& graph, const Node& node,
                                         const DeviceMesh& mesh,
                                         const std::vector<std::string>& axes);
  size_t size() const;

  // Per node of one graph on one mesh (by a key naming both, see SpmdInput::graph_id): the
  // node's strategy set, looked up by signature once however many lowerings of the graph ask.
  // Slots are filled by whichever lowering asks first; the sets live as long as the cache.
  class NodeSets {
   public:
    explicit NodeSets(size_t nodes) : slots_(new std::atomic<const StrategySet*>[nodes]) {
      for (size_t i = 0; i < nodes; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
    }
    const StrategySet* get(size_t node) const {
      return slots_[node].load(std::memory_order_acquire);
    }
    void set(size_t node, const StrategySet* set) {
      slots_[node].store(set, std::memory_order_release);
    }

   private:
    std::unique_ptr<std::atomic<const StrategySet*>[]> slots_;
  };
  NodeSets& node_sets(const std::string& key, size_t nodes);

  // Plans of whole layers by the SPMD pass under tensor auto (per node of the layer: its
  // strategy, or none where the layer is chosen node by node), by a key naming each node's
  // strategy set, how the layer's nodes connect and the layouts its inputs arrive in. Repeated
  // layers, and the lowerings of one model under schemes that differ only beyond the forward
  // (ZeRO stage, microbatch count), plan a layer once.
  struct PlannedStrategy {
    int own = -1;  // its index among the node's own strategies; -1: one derived from them
    OpStrategy strategy;
  };
  using LayerPlan = std::vector<std::optional<PlannedStrategy>>;
  std::shared_ptr<const LayerPlan> layer_plan(const std::string& key) const;
  // Keeps `plan` under `key` unless one is there already; returns the kept one.
  std::shared_ptr<const LayerPlan> add_layer_plan(const std::string& key, LayerPlan plan);

  // reshard_steps(from, to, shape, mesh), planned once per (from, to, shape, mesh axes): the
  // lowerings of one model under many schemes plan the same reshards. The reference stays
  // valid for the cache's lifetime.
  const StatusOr<std::vector<ReshardStep>>& reshard(const Layout& from, const Layout& to,
                                                    const std::vector<int64_t>& shape,
                                                    const DeviceMesh& mesh);

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const StrategySet>> strategies_;
  std::unordered_map<std::string, std::shared_ptr<const LayerPlan>> layer_plans_;
  std::unordered_map<std::string, std::unique_ptr<NodeSets>> node_sets_;
  // By the two layouts' codes, the shape and the mesh's axis ids and sizes.
  std::unordered_map<std::string, std::unique_ptr<const StatusOr<std::vector<ReshardStep>>>>
      reshards_;
};

}  // namespace autopar
