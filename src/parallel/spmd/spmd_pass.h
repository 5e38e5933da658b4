// The SPMD pass, by responsibility: the lowering itself and the values it holds (spmd.cc),
// what a strategy costs (pricing.cc), the strategy each node takes (choice.cc), tensor auto's
// plan of a layer (layer_plan.cc), gradient accumulation and ZeRO's shards (gradients.cc);
// op families' partitioning knowledge sits in handlers (convolution_handler.cc,
// attention_handler.cc, cross_entropy_handler.cc).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "autopar/parallel/op_strategy.h"
#include "autopar/parallel/reshard.h"
#include "autopar/parallel/spmd.h"
#include "convolution_handler.h"
#include "strategy_pricing.h"

namespace autopar::spmd_detail {

constexpr double kInfinite = 1e300;
// The interned ids of the axes the pass treats specially.
inline const uint8_t kTpAxis = find_axis("tp");
inline const uint8_t kDpAxis = find_axis("dp");

// `layout` with its partial sums resolved: the layout a value read as a partial sum is held in.
Layout without_partial_sums(Layout layout);
// Data movement (and negation) that commutes with a sum.
bool is_linear_op(const Node& node);
// A strategy with the partial-sum axes `partial` added to its input `input` and its one output;
// false when an axis is already split there.
bool pass_partial(OpStrategy& s, size_t input, const std::vector<std::string>& partial);
// Add, Sub or Sum: a sum (or difference) of partial sums over the same axes is a partial sum.
bool is_sum_op(const Node& node);
// A strategy of a sum with the partial-sum axes `partial` added to every input and its one
// output; false when an axis is already split there.
bool sum_partial(OpStrategy& s, size_t inputs, const std::vector<std::string>& partial);
// Glob match: '*' stands for any run of characters.
bool glob_match(std::string_view pattern, std::string_view text);

// What the pass knows of the source graph's state before it lowers a node, from the training
// graph's maps (SpmdInput): never from names.
struct StateMaps {
  explicit StateMaps(const SpmdInput& input);
  std::vector<bool> is_state;                     // parameters, optimizer slots, statistics
  std::unordered_map<ValueId, ValueId> state_of;  // a new state value → its state
  std::map<ValueId, ValueId> gradient_of;         // parameter → its gradient
  std::map<ValueId, ValueId> parameter_of;        // gradient → its parameter
  std::map<ValueId, ValueId> slot_param;          // optimizer slot → its parameter
  std::map<ValueId, int32_t> slot_index;          // a slot's place among its parameter's slots
  std::set<ValueId> statistics;                   // running statistics
};

class Spmd {
 public:
  Spmd(const SpmdInput& input, const DeviceMesh& mesh, const SpmdPolicy& policy);

  StatusOr<SpmdResult> run();

 private:
  class LayerPlanner;
  // A strategy the node's own set does not hold: derived (a partial sum kept), or over rows.
  struct Candidate {
    OpStrategy strategy;
    std::optional<RowWindow> window;
    bool ring = false;  // attention as ring attention over the context axis
  };

  bool has_axis(std::string_view axis) const {
    for (const std::string& a : policy_.axes) {
      if (a == axis) return true;
    }
    return false;
  }

  // ZeRO (gradients.cc): the dim of the shard shape to split over dp, or -1; `base` with it.
  int64_t zero_dim(const std::vector<int64_t>& shape, const Layout& base) const;
  Layout with_zero(const std::vector<int64_t>& shape, const Layout& base) const;
  // An optimizer slot lives like its parameter's compute layout, a dp shard of it under ZeRO.
  Layout slot_storage(ValueId v) const;

  // Pricing (pricing.cc), in seconds on the policy's profile.
  // Whether `v` is a parameter, or a parameter moved without arithmetic (transposed, reshaped,
  // cast): a weight, whatever the graph did to lay it out for its reader.
  bool is_weight(ValueId v) const;
  // Whether backward value `v` (a gradient) in `want` is laid out as the forward activation it
  // is the gradient of was held: one input of its producer's forward node, alike in shape.
  bool mirrors_forward(ValueId v, const Layout& want) const;
  // Whether `consumer` is an update node another of whose operands is already in `want`.
  bool aligned_update(ValueId v, const Layout& want, const Node& consumer) const;
  bool is_free(ValueId v) const {
    return (maps_.is_state[v] && !layout_[v] && !maps_.slot_param.count(v)) ||
           deferred_cast_.count(v);
  }
  // A parameter read as a partial sum (a Gemm's C, a convolution's bias under a split
  // reduction) is held as it would be read otherwise and shared out by one member, a local
  // step.
  bool allowed_free(const Layout& want, const Node& consumer) const;
  double input_cost(ValueId v, const Layout& want, const Node& consumer) const;
  // What a parameter not placed yet (or its deferred cast) costs read in `want`.
  double free_cost(ValueId v, const Layout& want, const Node& consumer) const;
  // What bringing `v` from `from` into `want` costs `consumer`.
  double reshard_cost(ValueId v, const Layout& from, const Layout& want,
                      const Node& consumer) const;
  // `cost` with one reshard step's part of reshard_cost added (kInfinite: a step the policy
  // forbids).
  double step_cost(const ReshardStep& step, ValueId v, const Layout& from, const Layout& want,
                   const Node& consumer, bool constant, double cost) const;
  double strategy_cost(NodeId id, const OpStrategy& s) const;
  // An update's part in bringing the new state it computes into the state's storage layout;
  // a backward node's part in reducing a parameter's gradient it leaves a partial sum over an
  // axis other than dp.
  double storage_cost(const Node& node, const OpStrategy& s) const;
  // Whether `v` is a parameter's gradient, or becomes one through a Cast or a sum of
  // contributions.
  bool becomes_gradient(ValueId v) const;
  // A split over an axis that only constants carry into a node (position ids sliced) makes an
  // activation split that the node's readers gather back unless they split alike: priced,
  // as an activation's slice is, as that gather.
  double constant_split_cost(const Node& node, const OpStrategy& s) const;

  // The lowering (spmd.cc).
  // The dst value holding `v` in layout `want`, emitting what it takes.
  StatusOr<ValueId> local_as(ValueId v, const Layout& want, const Node& consumer);
  // Makes state `v` a graph input with the storage layout its compute layout `compute` implies.
  void place_state(ValueId v, const Layout& compute);
  StatusOr<ValueId> materialise_constant(ValueId v);
  // Emits `node` under `strategy` (on a window of rows when given), its inputs resharded.
  // `set` is the node's strategy set, when looked up.
  Status emit(const Node& node, const OpStrategy& strategy, const RowWindow* window,
              const StrategySet* set = nullptr, bool ring = false);
  // Writes on the producer of `out` (a Dropout's shard) which part of the whole its input
  // `layout` holds.
  void mark_shard_positions(ValueId out, const Layout& layout);
  // The graph's inputs, in the layouts the policy gives them.
  Status place_inputs();
  // New state values in their storage layouts, and the loss or outputs replicated.
  Status place_outputs();

  // The strategy choice (choice.cc).
  Status lower_node(NodeId id);
  // One strategy lower_node weighs: the op's own (shared, not copied) or a derived one.
  struct Choice {
    const OpStrategy* strategy;
    const RowWindow* window;
    int own;  // its index among the op's own strategies, or -1
  };
  // A scheme's `tensor:` override naming the node keeps only the choices with its output layout.
  Status apply_override(const Node& node, std::vector<Choice>& candidates);
  // What the tp recipe and context parallelism leave a node to choose from.
  struct Recipe {
    bool weighted = false;         // Megatron-SP's, a projection: tp splits a weight, if anything
    int64_t sequence_dim = -1;     // Megatron-SP's, a forward norm: its output split here over tp
    bool from_parameters = false;  // Megatron's: tp splits only what split inputs bring
    bool context = false;          // a Gather under ring attention (context_forbids)
  };
  Recipe recipe_of(const Node& node) const;
  bool recipe_admits(const Recipe& recipe, const Node& node, const OpStrategy& s,
                     const IterationSpace* space) const;
  // Attention under context parallelism (attention_handler.cc): Attention or AttentionGrad as
  // ring attention over the context axis, or on heads split over it (all-to-all).
  bool context_attention(const Node& node) const {
    return !policy_.context_axis.empty() && node.domain == kTrainingDomain &&
           (node.op_type == "Attention" || node.op_type == "AttentionGrad");
  }
  Status lower_context_attention(NodeId id, const StrategySet& own,
                                 const std::vector<std::string>& axes);
  // Vocabulary-parallel cross-entropy (cross_entropy_handler.cc), as Megatron-LM runs it: a
  // SoftmaxCrossEntropyLoss, or the Softmax of its scores its gradient takes, whose class dim
  // arrives split over tp runs on the class shards (the rows' max, their sum of exponentials and
  // the label's score all-reduced over tp) rather than gather the logits. Whether it did.
  StatusOr<bool> lower_vocab_parallel(NodeId id, const StrategySet& own);
  // A strategy that splits over the context axis what it must not: a Gather's table rows
  // (masked by contiguous ranges, where a ring's chunk pairs are not).
  bool context_forbids(const Node& node, const OpStrategy& s, const IterationSpace* space) const;
  // A tied parameter's gradient summed from contributions on several pipeline ranks:
  // accumulated per rank (accumulate_per_stage). Whether it was.
  StatusOr<bool> lower_tied_gradient_sum(NodeId id);
  // The strategies lower_node weighs beyond the op's own: partial sums kept through linear
  // ops and sums, and windows over sp.
  std::vector<Candidate> derived_candidates(const Node& node, const std::vector<OpStrategy>& bases,
                                            const std::vector<std::string>& axes,
                                            const std::vector<std::string>& without_sp) const;
  // The node's own strategies over `axes` (strategy_axes): from the shared per-graph slots
  // when the graph has an id, else by signature.
  std::shared_ptr<const StrategySet> own_set(NodeId id, const Node& node,
                                             const std::vector<std::string>& axes);
  // The mesh axes a node's strategies may split, and the same without sp.
  void strategy_axes(const Node& node, std::vector<std::string>& axes,
                     std::vector<std::string>& without_sp) const;
  int32_t layer_of(NodeId id) const {
    return policy_.layer_of.empty() ? src_.node(id).layer : policy_.layer_of[id];
  }
  // A Cast of a parameter not placed yet: lowered with its first reader (deferred_cast_).
  bool defers(const Node& node) const {
    return node.op_type == "Cast" && node.domain.empty() && node.inputs.size() == 1 &&
           src_.value(node.inputs[0]).kind == ValueKind::kParameter && is_free(node.inputs[0]);
  }

  // Tensor auto (layer_plan.cc): the forward nodes [first, end) of one layer, by dynamic
  // programming over their strategies (planned_).
  void plan_segment(NodeId first, NodeId end);
  // The key of the layer [first, end) for StrategyCache::layer_plan.
  std::string layer_key(NodeId first, NodeId end);

  // Gradients (gradients.cc).
  Status accumulate_gradients();
  // `part` names one of several accumulators of the parameter (empty: its only one).
  Status accumulate(ValueId parameter, ValueId gradient, const std::string& part = "");
  Status accumulate_per_stage(NodeId sum);

  // Planned reshards by (from, to, shape), bucketed by their hash so a lookup copies nothing:
  // the steps stay in the shared cache, the shape in the source graph.
  struct PlannedReshard {
    Layout from, to;
    const std::vector<int64_t>* shape = nullptr;
    const StatusOr<std::vector<ReshardStep>>* steps = nullptr;
  };
  const StatusOr<std::vector<ReshardStep>>& planned_reshard(
      const Layout& from, const Layout& to, const std::vector<int64_t>& shape) const;
  // The reshard already emitted for a value into a layout.
  std::optional<ValueId> resharded(ValueId v, const Layout& want) const {
    auto it = resharded_.find(v);
    if (it == resharded_.end()) return std::nullopt;
    for (const auto& [layout, x] : it->second) {
      if (layout == want) return x;
    }
    return std::nullopt;
  }

  const SpmdInput& in_;
  const Graph& src_;
  const DeviceMesh& mesh_;
  const SpmdPolicy& policy_;
  const StateMaps maps_;
  std::shared_ptr<StrategyCache> strategies_;
  std::shared_ptr<const HardwareProfile> profile_;
  StrategyPricing pricing_;
  SpmdResult result_;

  // Per source value: the dst value holding it and its layout (unset: not placed yet), and the
  // reshards of it already emitted.
  std::vector<ValueId> local_;
  std::vector<std::optional<Layout>> layout_;
  std::unordered_map<ValueId, std::vector<std::pair<Layout, ValueId>>> resharded_;
  std::map<ValueId, Layout> compute_layout_;  // parameters: the layout their consumers read
  std::set<ValueId> accumulated_;             // gradients already in their update layout
  NodeId current_ = kNoId;                    // the node being lowered

  // Casts of a parameter not yet placed (mixed precision): they take the layout their first
  // reader wants, and the parameter with them. Cast output → the Cast node.
  std::map<ValueId, NodeId> deferred_cast_;
  // Parameter casts once placed: the Cast node and the pipeline rank it was cast for; and the
  // casts made again for readers on other ranks, by (cast output, rank).
  struct PlacedCast {
    NodeId node = kNoId;
    int32_t rank = 0;
  };
  std::map<ValueId, PlacedCast> parameter_cast_;
  std::map<std::pair<ValueId, int32_t>, ValueId> cast_on_rank_;

  // Caches: the node's strategy sets shared per graph, the reshards planned.
  StrategyCache::NodeSets* node_sets_ = nullptr;
  mutable std::unordered_map<uint64_t, std::vector<PlannedReshard>> reshard_cache_;
  // Under tensor auto: per forward node, the strategy its layer's dynamic program chose, and
  // the node's strategy set as the plan looked it up.
  std::vector<const StrategyCache::PlannedStrategy*> planned_;
  std::vector<std::shared_ptr<const StrategyCache::LayerPlan>> plans_;  // what planned_ points into
  std::vector<std::shared_ptr<const StrategySet>> sets_;
  std::vector<bool> override_used_ = std::vector<bool>(policy_.overrides.size(), false);
};

}  // namespace autopar::spmd_detail
