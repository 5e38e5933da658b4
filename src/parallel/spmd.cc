// The SPMD pass: strategies by greedy cost over the graph in order, reshards as collectives.
#include "autopar/parallel/spmd.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "autopar/autodiff/emitter.h"
#include "autopar/ops/op_def.h"
#include "autopar/parallel/op_strategy.h"
#include "autopar/parallel/primitives.h"
#include "autopar/parallel/reshard.h"
#include "strategy_pricing.h"

namespace autopar {
namespace {

constexpr double kInfinite = 1e300;
// The interned ids of the axes the pass treats specially.
const uint8_t kTpAxis = find_axis("tp");
const uint8_t kDpAxis = find_axis("dp");

// `layout` with its partial sums resolved: the layout a value read as a partial sum is held
// in.
Layout without_partial_sums(Layout layout) {
  for (const std::string& axis : layout.partial_axes()) layout = layout.without(axis);
  return layout;
}

// Data movement (and negation) that commutes with a sum.
const char* const kLinearOps[] = {"Reshape",   "Transpose", "Identity", "Squeeze",
                                  "Unsqueeze", "Flatten",   "Neg"};

bool is_linear_op(const Node& node) {
  return node.domain.empty() && std::any_of(std::begin(kLinearOps), std::end(kLinearOps),
                                            [&](const char* op) { return node.op_type == op; });
}

// A strategy with the partial-sum axes `partial` added to its input `input` and its one
// output; false when an axis is already split there.
bool pass_partial(OpStrategy& s, size_t input, const std::vector<std::string>& partial) {
  if (s.inputs.size() <= input || s.outputs.size() != 1) return false;
  for (const std::string& a : partial) {
    if (s.inputs[input].uses(a) || s.outputs[0].uses(a)) continue;
    s.inputs[input] = s.inputs[input].with_partial(a);
    s.outputs[0] = s.outputs[0].with_partial(a);
  }
  return true;
}

// Add, Sub or Sum: a sum (or difference) of partial sums over the same axes is a partial sum.
bool is_sum_op(const Node& node) {
  return node.domain.empty() &&
         (node.op_type == "Add" || node.op_type == "Sub" || node.op_type == "Sum") &&
         node.inputs.size() >= 2 && node.outputs.size() == 1;
}

// A strategy of a sum with the partial-sum axes `partial` added to every input and its one
// output; false when an axis is already split there.
bool sum_partial(OpStrategy& s, size_t inputs, const std::vector<std::string>& partial) {
  if (s.inputs.size() != inputs || s.outputs.size() != 1) return false;
  for (const std::string& a : partial) {
    if (s.outputs[0].uses(a)) return false;
    for (const Layout& in : s.inputs) {
      if (in.uses(a)) return false;
    }
  }
  for (const std::string& a : partial) {
    for (Layout& in : s.inputs) in = in.with_partial(a);
    s.outputs[0] = s.outputs[0].with_partial(a);
  }
  return true;
}

// Glob match: '*' stands for any run of characters.
bool glob_match(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern[0] == '*') {
    for (size_t i = 0; i <= text.size(); ++i) {
      if (glob_match(pattern.substr(1), text.substr(i))) return true;
    }
    return false;
  }
  return !text.empty() && pattern[0] == text[0] && glob_match(pattern.substr(1), text.substr(1));
}

class Spmd {
 public:
  Spmd(const SpmdInput& input, const DeviceMesh& mesh, const SpmdPolicy& policy)
      : in_(input),
        src_(*input.graph),
        mesh_(mesh),
        policy_(policy),
        strategies_(policy.strategies ? policy.strategies : std::make_shared<StrategyCache>()),
        profile_(policy.profile ? policy.profile : neutral_profile()),
        pricing_(*profile_, mesh, *input.graph) {
    const int32_t n = src_.num_values();
    // Lowered graphs come out about 1.5 times the size of their source.
    result_.graph.reserve(2 * src_.num_nodes(), 2 * n);
    local_.assign(n, kNoId);
    if (input.graph_id != 0) {
      // Each node's axes follow from its phase, the policy's axes and whether ZeRO shards the
      // update: those, the graph and the mesh name the slots.
      std::string key =
          fmt::format("{}|{}|zero {}|", input.graph_id, mesh.to_string(), policy.zero > 0 ? 1 : 0);
      for (const std::string& a : policy.axes) key += a + ",";
      node_sets_ = &strategies_->node_sets(key, static_cast<size_t>(src_.num_nodes()));
    }
    layout_.assign(n, std::nullopt);
    state_.assign(n, false);
    for (const auto& [s, next] : in_.updates) {
      state_[s] = true;
      state_of_.emplace(next, s);
    }
    for (ValueId p : src_.parameters()) state_[p] = true;
    for (const auto& [p, g] : in_.gradients) {
      if (g == kNoId) continue;
      gradient_of_.emplace(p, g);
      parameter_of_.emplace(g, p);
    }
    statistics_.insert(in_.statistics.begin(), in_.statistics.end());
    std::map<ValueId, int32_t> slots_of;
    for (const auto& [s, p] : in_.slots) {
      slot_param_[s] = p;
      slot_index_[s] = slots_of[p]++;
    }
  }

  StatusOr<SpmdResult> run();

 private:
  bool has_axis(std::string_view axis) const {
    for (const std::string& a : policy_.axes) {
      if (a == axis) return true;
    }
    return false;
  }
  // The dim of the shard shape to split over dp for ZeRO, or -1.
  int64_t zero_dim(const std::vector<int64_t>& shape, const Layout& base) const {
    if (!has_axis("dp") || base.uses("dp")) return -1;
    const int64_t dp = mesh_.size("dp");
    const std::vector<int64_t> local = base.shard_shape(shape, mesh_);
    for (size_t d = 0; d < local.size(); ++d) {
      if (local[d] >= dp && local[d] % dp == 0) return static_cast<int64_t>(d);
    }
    return -1;
  }
  Layout with_zero(const std::vector<int64_t>& shape, const Layout& base) const {
    const int64_t d = zero_dim(shape, base);
    return d < 0 ? base : base.with_split(d, "dp");
  }

  // Whether `v` is a parameter, or a parameter moved without arithmetic (transposed, reshaped,
  // cast): a weight, whatever the graph did to lay it out for its reader.
  bool is_weight(ValueId v) const {
    static const char* const kMoves[] = {"Transpose", "Reshape", "Cast",
                                         "Identity",  "Squeeze", "Unsqueeze"};
    for (int depth = 0; depth < 8 && v != kNoId; ++depth) {
      const Value& value = src_.value(v);
      if (value.kind == ValueKind::kParameter) return true;
      if (value.producer == kNoId) return false;
      const Node& p = src_.node(value.producer);
      if (!p.domain.empty() || p.inputs.empty() ||
          std::none_of(std::begin(kMoves), std::end(kMoves),
                       [&](const char* op) { return p.op_type == op; }))
        return false;
      v = p.inputs[0];
    }
    return false;
  }
  // Whether `consumer` is an update node another of whose operands is already in `want`.
  bool aligned_update(ValueId v, const Layout& want, const Node& consumer) const {
    if (consumer.phase != Phase::kOptimizer) return false;
    for (ValueId other : consumer.inputs) {
      if (other != kNoId && other != v && layout_[other] && *layout_[other] == want) return true;
    }
    return false;
  }
  bool is_free(ValueId v) const {
    return (state_[v] && !layout_[v] && !slot_param_.count(v)) || deferred_cast_.count(v);
  }
  // A parameter read as a partial sum (a Gemm's C, a convolution's bias under a split
  // reduction) is held as it would be read otherwise and shared out by one member, a local
  // step.
  bool allowed_free(ValueId v, const Layout& want, const Node& consumer) const {
    const Layout held = without_partial_sums(want);
    if (!held.splits_only_over("tp")) return false;
    (void)v;
    return !held.uses("tp") || policy_.parameter_split(src_, consumer, "tp");
  }

  double input_cost(ValueId v, const Layout& want, const Node& consumer) const;
  // What a parameter not placed yet (or its deferred cast) costs read in `want`.
  double free_cost(ValueId v, const Layout& want, const Node& consumer) const;
  // What bringing `v` from `from` into `want` costs `consumer` (seconds).
  double reshard_cost(ValueId v, const Layout& from, const Layout& want,
                      const Node& consumer) const;
  double strategy_cost(NodeId id, const OpStrategy& s) const;
  // An update's part in bringing the new state it computes into the state's storage layout.
  double storage_cost(const Node& node, const OpStrategy& s) const;
  // The dst value holding `v` in layout `want`, emitting what it takes.
  StatusOr<ValueId> local_as(ValueId v, const Layout& want, const Node& consumer);
  // Makes state `v` a graph input with its storage layout `storage`.
  void place_state(ValueId v, const Layout& compute);
  // An optimizer slot lives like its parameter's compute layout, a dp shard of it under ZeRO.
  Layout slot_storage(ValueId v) const {
    const Value& value = src_.value(v);
    auto it = compute_layout_.find(slot_param_.at(v));
    const Layout base =
        it != compute_layout_.end() ? it->second : Layout::replicated(value.shape.rank());
    return policy_.zero >= 1 ? with_zero(value.shape.dims, base) : base;
  }
  StatusOr<ValueId> materialise_constant(ValueId v);
  struct Window {
    int64_t before = 0, after = 0;  // halo rows (negative: own rows dropped)
    Attributes attrs;               // the node's attributes on its block
  };
  struct Candidate {
    OpStrategy strategy;
    std::optional<Window> window;
  };
  std::vector<Candidate> windowed(const Node& node, const std::vector<OpStrategy>& bases) const;
  Status lower_node(NodeId id);
  // Emits `node` under `strategy` (on a window of rows when given), its inputs resharded.
  // `set` is the node's strategy set, when looked up.
  Status emit(const Node& node, const OpStrategy& strategy, const Window* window,
              const StrategySet* set = nullptr);
  // The node's own strategies over `axes` (strategy_axes): from the shared per-graph slots
  // when the graph has an id, else by signature.
  std::shared_ptr<const StrategySet> own_set(NodeId id, const Node& node,
                                             const std::vector<std::string>& axes) {
    if (!node_sets_) return strategies_->get(src_, node, mesh_, axes);
    const StrategySet* set = node_sets_->get(static_cast<size_t>(id));
    if (!set) {
      // Held by the cache for its lifetime: the slot keeps the raw pointer.
      std::shared_ptr<const StrategySet> made = strategies_->get(src_, node, mesh_, axes);
      node_sets_->set(static_cast<size_t>(id), made.get());
      return made;
    }
    return std::shared_ptr<const StrategySet>(std::shared_ptr<const StrategySet>(), set);
  }
  StrategyCache::NodeSets* node_sets_ = nullptr;
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
  // The forward nodes [first, end) of one layer, by dynamic programming over their
  // strategies (planned_).
  void plan_segment(NodeId first, NodeId end);
  // The dynamic program itself: `plan` gets a strategy per node, or none.
  void plan_layer(NodeId first, NodeId end, StrategyCache::LayerPlan& plan);
  // Under tensor auto: per forward node, the strategy its layer's dynamic program chose, and
  // the node's strategy set as the plan looked it up.
  std::vector<const StrategyCache::PlannedStrategy*> planned_;
  std::vector<std::shared_ptr<const StrategyCache::LayerPlan>> plans_;  // what planned_ points into
  std::vector<std::shared_ptr<const StrategySet>> sets_;
  // The key of the layer [first, end) for StrategyCache::layer_plan.
  std::string layer_key(NodeId first, NodeId end);
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
      const Layout& from, const Layout& to, const std::vector<int64_t>& shape) const {
    // FNV-1a over the layouts' few bytes and the dims.
    uint64_t h = 14695981039346656037ULL;
    auto mix = [&h](uint64_t x) { h = (h ^ x) * 1099511628211ULL; };
    for (char c : from.code()) mix(static_cast<uint8_t>(c));
    mix(0x100);
    for (char c : to.code()) mix(static_cast<uint8_t>(c));
    mix(0x101);
    for (int64_t d : shape) mix(static_cast<uint64_t>(d));
    std::vector<PlannedReshard>& bucket = reshard_cache_[h];
    for (const PlannedReshard& p : bucket) {
      if (p.from == from && p.to == to && (p.shape == &shape || *p.shape == shape)) return *p.steps;
    }
    bucket.push_back({from, to, &shape, &strategies_->reshard(from, to, shape, mesh_)});
    return *bucket.back().steps;
  }
  // The reshard already emitted for a value into a layout.
  std::optional<ValueId> resharded(ValueId v, const Layout& want) const {
    auto it = resharded_.find(v);
    if (it == resharded_.end()) return std::nullopt;
    for (const auto& [layout, x] : it->second) {
      if (layout == want) return x;
    }
    return std::nullopt;
  }
  mutable std::unordered_map<uint64_t, std::vector<PlannedReshard>> reshard_cache_;
  const SpmdInput& in_;
  const Graph& src_;
  const DeviceMesh& mesh_;
  const SpmdPolicy& policy_;
  std::shared_ptr<StrategyCache> strategies_;
  std::shared_ptr<const HardwareProfile> profile_;
  StrategyPricing pricing_;
  SpmdResult result_;
  std::vector<ValueId> local_;
  std::vector<std::optional<Layout>> layout_;
  std::vector<bool> state_;
  std::map<ValueId, ValueId> slot_param_;
  std::map<ValueId, int32_t> slot_index_;          // a slot's place among its parameter's slots
  std::set<ValueId> statistics_;                   // running statistics (in_.statistics)
  std::unordered_map<ValueId, ValueId> state_of_;  // a new state value → its state
  std::map<ValueId, ValueId> gradient_of_;
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
  NodeId current_ = kNoId;                    // the node being lowered
  std::set<ValueId> accumulated_;             // gradients already in their update layout
  std::map<ValueId, ValueId> parameter_of_;   // gradient → its parameter
  std::map<ValueId, Layout> compute_layout_;  // parameters: the layout their consumers read
  std::unordered_map<ValueId, std::vector<std::pair<Layout, ValueId>>> resharded_;
  std::vector<bool> override_used_ = std::vector<bool>(policy_.overrides.size(), false);
};

double Spmd::input_cost(ValueId v, const Layout& want, const Node& consumer) const {
  if (v == kNoId) return 0.0;
  if (is_free(v)) return free_cost(v, want, consumer);
  const Value& value = src_.value(v);
  std::optional<Layout> unplaced;  // a value not placed yet: replicated, or a slot's storage
  if (!layout_[v])
    unplaced = slot_param_.count(v) ? slot_storage(v) : Layout::replicated(value.shape.rank());
  const Layout& from = layout_[v] ? *layout_[v] : *unplaced;
  if (from == want) return 0.0;
  if (resharded(v, want)) return 0.0;
  return reshard_cost(v, from, want, consumer);
}

double Spmd::free_cost(ValueId v, const Layout& want, const Node& consumer) const {
  if (!allowed_free(v, want, consumer)) return kInfinite;
  // A parameter held whole where it could be split costs every device its memory and its
  // share of the update: count the bytes it keeps beyond its shard like bytes moved.
  const Value& value = src_.value(v);
  const int64_t tp = has_axis("tp") ? mesh_.size("tp") : 1;
  const double kept =
      static_cast<double>(value.num_bytes()) *
      (1.0 / static_cast<double>(want.split_degree(mesh_)) - 1.0 / static_cast<double>(tp));
  return pricing_.moved(kept, kTpAxis);
}

double Spmd::reshard_cost(ValueId v, const Layout& from, const Layout& want,
                          const Node& consumer) const {
  if (from == want) return 0.0;
  const Value& value = src_.value(v);
  // Strategies ask for the same reshards again and again: plan each (from, to, shape) once.
  const auto& steps = planned_reshard(from, want, value.shape.dims);
  if (!steps.is_ok()) return kInfinite;
  // (A fill, ConstantOfShape's zeros, slices as freely as a constant: each device can fill its
  // own block.)
  const bool constant = (value.kind == ValueKind::kConstant && !state_[v]) || is_zero_fill(src_, v);
  const double bytes =
      static_cast<double>(value.num_bytes()) / static_cast<double>(from.split_degree(mesh_));
  double cost = 0.0;
  for (const ReshardStep& step : steps.value()) {
    const uint8_t axis = step.axis_id;
    const bool over_tp = axis == kTpAxis, over_dp = axis == kDpAxis;
    // (The update slices whole values onto its state's shards: that is no activation.)
    const bool update_slice =
        step.kind == ReshardStep::Kind::kSlice && consumer.phase == Phase::kOptimizer;
    if (over_tp && !constant && !update_slice &&
        policy_.tp_activations != SpmdPolicy::TpActivations::kAny && !is_weight(v)) {
      // Megatron-SP enters a sequence-parallel region only by reduce-scattering a row
      // projection's sum onto the sequence ([batch, seq, hidden]) or the image rows; slicing a
      // whole activation there would let the matmuls run sequence-split instead of on their
      // parameter shards.
      const bool onto_sequence =
          step.kind == ReshardStep::Kind::kReduceScatter && step.dim == attribute_dim(value);
      if (step.kind != ReshardStep::Kind::kAllGather &&
          step.kind != ReshardStep::Kind::kAllReduce &&
          (policy_.tp_activations == SpmdPolicy::TpActivations::kFromParameters ||
           !onto_sequence)) {
        return kInfinite;
      }
    }
    const auto n = static_cast<double>(mesh_.size_of(axis));
    switch (step.kind) {
      case ReshardStep::Kind::kAllReduce:
        cost += pricing_.collective(Collective::kAllReduce, bytes, axis);
        break;
      case ReshardStep::Kind::kAllGather:
        cost += pricing_.collective(Collective::kAllGather, bytes * n, axis);
        break;
      // A reduce-scatter leaves a split the consumers after this one usually gather again:
      // count that gather too, or it always undercuts the all-reduce it stands for.
      // (Megatron-SP scatters the row projection's sum onto the sequence by design: the norms
      // and the residual between the projections run on shards, so it pays the real cost.)
      // So does ZeRO's sharded update reading accumulated gradients: it runs on the shards.
      case ReshardStep::Kind::kReduceScatter:
        cost += pricing_.collective(Collective::kReduceScatter, bytes, axis);
        if (!((over_tp && policy_.tp_activations == SpmdPolicy::TpActivations::kReduceScatter) ||
              (over_dp && policy_.zero >= 1 && consumer.phase == Phase::kOptimizer))) {
          // What is gathered is what the consumer makes of its shard, in the consumer's type
          // (a cast to fp32 doubles a bf16 gradient).
          double gathered = bytes;
          if (consumer.outputs.size() == 1 && consumer.outputs[0] != kNoId) {
            const Value& made = src_.value(consumer.outputs[0]);
            if (made.shape == value.shape)
              gathered = static_cast<double>(made.num_bytes()) /
                         static_cast<double>(from.split_degree(mesh_));
          }
          cost += pricing_.collective(Collective::kAllGather, gathered, axis);
        }
        break;
      case ReshardStep::Kind::kAllToAll:
        cost += pricing_.collective(Collective::kAllToAll, bytes, axis);
        break;
      // Slicing is free for constants, and in the update where another operand already has
      // the split (state in its storage layout: the update runs where its state lives); for
      // activations it stands for the gather that a later consumer will need to undo it.
      case ReshardStep::Kind::kSlice:
        if (!constant && !aligned_update(v, want, consumer))
          cost += pricing_.collective(Collective::kAllGather, bytes, axis);
        break;
      // A local product with the member's entry of a one-hot vector.
      case ReshardStep::Kind::kShare:
        cost += pricing_.local(bytes);
        break;
    }
  }
  return cost;
}

double Spmd::strategy_cost(NodeId id, const OpStrategy& s) const {
  const Node& node = src_.node(id);
  double cost = 0.0;
  for (size_t i = 0; i < s.inputs.size() && i < node.inputs.size(); ++i) {
    cost += input_cost(node.inputs[i], s.inputs[i], node);
    if (cost >= kInfinite) return kInfinite;
  }
  int64_t degree = 1;
  for (const auto& [axis, loop] : s.assignment) degree *= mesh_.size(axis);
  return cost + pricing_.compute(id, static_cast<double>(degree)) + storage_cost(node, s);
}

double Spmd::storage_cost(const Node& node, const OpStrategy& s) const {
  if (node.phase != Phase::kOptimizer) return 0.0;
  double cost = 0.0;
  for (size_t j = 0; j < s.outputs.size() && j < node.outputs.size(); ++j) {
    auto it = state_of_.find(node.outputs[j]);
    if (it == state_of_.end() || !layout_[it->second]) continue;
    cost += reshard_cost(node.outputs[j], s.outputs[j], *layout_[it->second], node);
    if (cost >= kInfinite) return kInfinite;
  }
  return cost;
}

void Spmd::place_state(ValueId v, const Layout& compute) {
  const Value& value = src_.value(v);
  Layout storage = compute;
  if (value.kind == ValueKind::kParameter) {
    compute_layout_[v] = compute;
    if (policy_.zero >= 3) storage = with_zero(value.shape.dims, compute);
  }
  if (slot_param_.count(v)) storage = slot_storage(v);
  Value in;
  in.name = value.name;
  in.dtype = value.dtype;
  in.shape = Shape(storage.shard_shape(value.shape.dims, mesh_));
  in.kind = ValueKind::kInput;
  const ValueId id = result_.graph.add_value(std::move(in));
  result_.graph.add_input(id);
  local_[v] = id;
  layout_[v] = storage;
  StateSpec spec;
  spec.name = value.name;
  spec.dtype = value.dtype;
  spec.shape = value.shape.dims;
  spec.layout = storage;
  spec.is_parameter = value.kind == ValueKind::kParameter;
  spec.is_statistic = statistics_.count(v) > 0;
  if (auto slot = slot_param_.find(v); slot != slot_param_.end()) {
    spec.slot_of = src_.value(slot->second).name;
    spec.slot_index = slot_index_.at(v);
  }
  result_.state.push_back(std::move(spec));
}

StatusOr<ValueId> Spmd::materialise_constant(ValueId v) {
  const Value& value = src_.value(v);
  Value c;
  c.name = value.name;
  c.dtype = value.dtype;
  c.shape = value.shape;
  c.kind = ValueKind::kConstant;
  c.data = value.data;
  if (!c.data && !in_.shapes_only) return error("constant '{}' has no data", value.name);
  local_[v] = result_.graph.add_value(std::move(c));
  layout_[v] = Layout::replicated(value.shape.rank());
  return local_[v];
}

StatusOr<ValueId> Spmd::local_as(ValueId v, const Layout& want, const Node& consumer) {
  const Value& value = src_.value(v);
  const int32_t rank =
      policy_.stage_of.empty() || current_ == kNoId ? 0 : policy_.stage_of[current_];
  // A parameter's cast read on another pipeline rank than the one it was cast for (a tied
  // embedding's head on the last stage): that rank holds the parameter too and casts it again,
  // rather than receiving the cast weight every microbatch.
  if (auto placed = policy_.stage_of.empty() ? parameter_cast_.end() : parameter_cast_.find(v);
      placed != parameter_cast_.end() && placed->second.rank != rank) {
    ValueId& copy = cast_on_rank_.try_emplace({v, rank}, kNoId).first->second;
    const Layout stored = *layout_[v];
    if (copy == kNoId) {
      const Node& cast = src_.node(placed->second.node);
      ASSIGN_OR_RETURN(ValueId param, local_as(cast.inputs[0], stored, cast));
      OpStrategy s;
      s.inputs = {stored};
      s.outputs = {stored};
      ASSIGN_OR_RETURN(std::vector<ValueId> outs,
                       split(result_.graph, src_, cast, {param}, s, mesh_));
      copy = outs[0];
    }
    if (stored == want) return copy;
    return augment_reshard(result_.graph, copy, stored, want, value.shape.dims, mesh_,
                           consumer.phase, consumer.layer);
  }
  if (auto deferred = deferred_cast_.find(v); deferred != deferred_cast_.end()) {
    const Node& cast = src_.node(deferred->second);
    if (!policy_.stage_of.empty()) parameter_cast_[v] = {deferred->second, rank};
    deferred_cast_.erase(deferred);
    const Layout at = without_partial_sums(want);
    // The parameter takes the reader's layout as its compute layout, and is cast where it is
    // stored: a ZeRO-3 shard is gathered in the low type, half the bytes, as DeepSpeed
    // gathers its bf16 parameters.
    const ValueId p = cast.inputs[0];
    if (local_[p] == kNoId && state_[p]) place_state(p, at);
    const Layout stored = layout_[p] ? *layout_[p] : at;
    ASSIGN_OR_RETURN(ValueId param, local_as(p, stored, cast));
    OpStrategy s;
    s.inputs = {stored};
    s.outputs = {stored};
    ASSIGN_OR_RETURN(std::vector<ValueId> outs,
                     split(result_.graph, src_, cast, {param}, s, mesh_));
    local_[v] = outs[0];
    layout_[v] = stored;
  }
  if (local_[v] == kNoId) {
    if (state_[v]) {
      place_state(v, slot_param_.count(v) ? Layout::replicated(value.shape.rank())
                                          : without_partial_sums(want));
    } else if (value.is_initializer()) {
      RETURN_IF_ERROR(materialise_constant(v).status());
    } else {
      return error("value '{}' is read before it is computed", value.name);
    }
  }
  if (*layout_[v] == want) return local_[v];
  if (std::optional<ValueId> x = resharded(v, want)) return *x;
  // The steps as planned when the strategy was priced.
  const StatusOr<std::vector<ReshardStep>>& steps =
      planned_reshard(*layout_[v], want, value.shape.dims);
  StatusOr<ValueId> x = steps.is_ok() ? augment_steps(result_.graph, local_[v], steps.value(),
                                                      mesh_, consumer.phase, consumer.layer)
                                      : StatusOr<ValueId>(steps.status());
  if (!x.is_ok()) {
    return error("node '{}' ({}): input '{}' from {} to {}: {}", consumer.name, consumer.op_type,
                 value.name, layout_[v]->to_string(), want.to_string(), x.status().message());
  }
  resharded_[v].emplace_back(want, x.value());
  return x.value();
}

// Window ops (Conv, ConvTranspose) over a spatial dim split by sp: each device computes its
// block of output rows from its input rows plus a halo of its neighbours' rows. Three forms
// occur in training graphs: the forward convolution (input and output rows split), the
// weight gradient (input rows and kernel taps split, a partial sum over sp) and the input
// gradient (a transposed convolution, input and output rows split).
std::vector<Spmd::Candidate> Spmd::windowed(const Node& node,
                                            const std::vector<OpStrategy>& bases) const {
  std::vector<Candidate> out;
  const bool conv = node.op_type == "Conv", transpose = node.op_type == "ConvTranspose";
  if (!has_axis("sp") || !node.domain.empty() || (!conv && !transpose)) return out;
  if (node.attr_string("auto_pad", "NOTSET") != "NOTSET" || node.attr("output_shape")) return out;
  const Value& x = src_.value(node.inputs[0]);
  const Value& w = src_.value(node.inputs[1]);
  const Value& y = src_.value(node.outputs[0]);
  const int64_t spatial = x.shape.rank() - 2;
  if (spatial < 1) return out;
  const int64_t n = mesh_.size("sp");
  const std::vector<int64_t> strides = node.attr_ints("strides", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> dilations =
      node.attr_ints("dilations", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  const int64_t s = strides[0], d = dilations[0], p0 = pads[0];
  const int64_t h_in = x.shape.dims[2], h_out = y.shape.dims[2], k = w.shape.dims[2];
  if (h_in % n != 0 || h_out % n != 0) return out;
  const int64_t rows_in = h_in / n, rows_out = h_out / n;
  std::optional<IterationSpace> space = iteration_space(src_, node);
  const int loop = space ? space->find("o0") : -1;
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  auto add = [&](Window window, bool split_kernel) {
    if (std::abs(window.before) > rows_in || std::abs(window.after) > rows_in) return;
    for (const OpStrategy& base : bases) {
      Candidate c{base, window};
      c.strategy.assignment.emplace_back("sp", loop);
      c.strategy.inputs[0] = base.inputs[0].with_split(2, "sp");
      if (split_kernel) {
        c.strategy.inputs[1] = base.inputs[1].with_split(2, "sp");
        c.strategy.outputs[0] = base.outputs[0].with_partial("sp");
      } else {
        c.strategy.outputs[0] = base.outputs[0].with_split(2, "sp");
      }
      if (!c.strategy.inputs[0].validate(x.shape.dims, mesh_).is_ok() ||
          !c.strategy.inputs[1].validate(w.shape.dims, mesh_).is_ok() ||
          !c.strategy.outputs[0].validate(y.shape.dims, mesh_).is_ok()) {
        continue;
      }
      out.push_back(std::move(c));
    }
  };
  std::vector<int64_t> local_pads = pads;
  local_pads[0] = 0;
  local_pads[spatial] = 0;
  if (conv && rows_out * s == rows_in) {
    Window forward;
    forward.before = p0;
    forward.after = (k - 1) * d - p0 - s + 1;
    forward.attrs = node.attrs;
    forward.attrs["pads"] = local_pads;
    add(forward, false);
  }
  if (conv && k % n == 0 && rows_in == (k / n) * d) {
    // The weight gradient: the kernel's taps are the forward's output rows.
    Window weight;
    weight.before = p0;
    weight.after = (h_out - 1) * s - p0 - d + 1;
    weight.attrs = node.attrs;
    weight.attrs["pads"] = local_pads;
    std::vector<int64_t> kernel = node.attr_ints("kernel_shape", {});
    if (!kernel.empty()) {
      kernel[0] = k / n;
      weight.attrs["kernel_shape"] = kernel;
    }
    add(weight, true);
  }
  if (transpose && rows_out == rows_in * s) {
    Window input;
    input.before = floor_div((k - 1) * d - p0, s);
    input.after = floor_div(rows_out - 1 + p0, s) - (rows_in - 1);
    const int64_t halo_rows = input.before + rows_in + input.after;
    const int64_t begin = p0 + input.before * s;
    const int64_t end = (halo_rows - 1) * s + (k - 1) * d + 1 - begin - rows_out;
    if (end >= 0) {
      std::vector<int64_t> transposed_pads = pads;
      transposed_pads[0] = begin;
      transposed_pads[spatial] = end;
      input.attrs = node.attrs;
      input.attrs["pads"] = transposed_pads;
      std::vector<int64_t> output_padding = node.attr_ints("output_padding", {});
      if (!output_padding.empty()) {
        output_padding[0] = 0;
        input.attrs["output_padding"] = output_padding;
      }
      add(input, false);
    }
  }
  return out;
}

void Spmd::strategy_axes(const Node& node, std::vector<std::string>& axes,
                         std::vector<std::string>& without_sp) const {
  for (const std::string& a : policy_.axes) {
    // Without ZeRO every data-parallel replica runs the whole update.
    if (a == "dp" && node.phase == Phase::kOptimizer && policy_.zero == 0) continue;
    axes.push_back(a);
    if (a != "sp") without_sp.push_back(a);
  }
}

// What a layer's plan depends on (StrategyCache::layer_plan): its nodes' strategy sets, how
// they connect, and the layouts (and reshards already made) of what it reads from before it.
std::string Spmd::layer_key(NodeId first, NodeId end) {
  std::string key;
  auto raw = [&key](auto x) { key.append(reinterpret_cast<const char*>(&x), sizeof(x)); };
  auto layout = [&](const Layout& l) {
    raw(static_cast<uint32_t>(l.code().size()));
    key += l.code();
  };
  // Plans are priced on the lowering's profile.
  raw(profile_.get());
  key += profile_->name;
  raw(in_.gradients.empty());
  raw(end - first);
  for (NodeId id = first; id < end; ++id) {
    const Node& node = src_.node(id);
    if (defers(node)) {
      key += 'd';
      continue;
    }
    std::vector<std::string> axes, without_sp;
    strategy_axes(node, axes, without_sp);
    sets_[id] = own_set(id, node, axes);
    raw(sets_[id].get());
    raw(node.inputs.size());
    for (ValueId v : node.inputs) {
      if (v == kNoId) {
        key += 'n';
        continue;
      }
      const Value& value = src_.value(v);
      if (value.producer >= first && value.producer < end) {
        const Node& p = src_.node(value.producer);
        key += 'p';
        raw(value.producer - first);
        raw(static_cast<int32_t>(std::find(p.outputs.begin(), p.outputs.end(), v) -
                                 p.outputs.begin()));
        continue;
      }
      if (is_free(v)) {
        key += 'f';
        continue;
      }
      key += 'x';
      raw(value.kind);
      raw(static_cast<bool>(state_[v]));
      raw(slot_param_.count(v) > 0);
      if (layout_[v]) {
        layout(*layout_[v]);
      } else {
        key += '?';
      }
      auto moved = resharded_.find(v);
      raw(moved == resharded_.end() ? size_t{0} : moved->second.size());
      if (moved != resharded_.end()) {
        for (const auto& [l, x] : moved->second) layout(l);
      }
    }
  }
  return key;
}

void Spmd::plan_segment(NodeId first, NodeId end) {
  // Overrides name nodes: a layer with one is planned for itself.
  std::string key;
  if (policy_.overrides.empty()) {
    key = layer_key(first, end);
    if (auto known = strategies_->layer_plan(key)) {
      for (size_t k = 0; k < known->size(); ++k)
        planned_[first + static_cast<NodeId>(k)] = (*known)[k] ? &*(*known)[k] : nullptr;
      plans_.push_back(std::move(known));
      return;
    }
  }
  StrategyCache::LayerPlan plan(static_cast<size_t>(end - first));
  plan_layer(first, end, plan);
  std::shared_ptr<const StrategyCache::LayerPlan> kept =
      key.empty() ? std::make_shared<const StrategyCache::LayerPlan>(std::move(plan))
                  : strategies_->add_layer_plan(key, std::move(plan));
  for (size_t k = 0; k < kept->size(); ++k)
    planned_[first + static_cast<NodeId>(k)] = (*kept)[k] ? &*(*kept)[k] : nullptr;
  plans_.push_back(std::move(kept));
}

// Tensor auto plans each layer's forward as a whole. A pass in node order keeps, for every
// value the layer computes, the cheapest few layouts to have it in (each cost relative to
// its cheapest, so what the inputs before the layer cost cancels); a pass back from the
// layer's last node then chooses each node's strategy with what its chosen readers need.
// Costs are the greedy pass's (reshards as arithmetic, the node's share of its FLOPs), and
// the plan is kept only when, priced as one path, it beats choosing node by node. A layer's
// plan depends on its nodes and on the layouts its inputs arrive in, never on the layers
// after it: repeated layers are planned alike, in a model whose repeats are collapsed and in
// the whole model.
void Spmd::plan_layer(NodeId first, NodeId end, StrategyCache::LayerPlan& plan) {
  constexpr size_t kOptions = 4;
  struct Option {
    Layout layout;
    double cost;
  };
  const auto count = static_cast<size_t>(end - first);
  std::unordered_map<ValueId, std::vector<Option>> table;
  std::set<ValueId> free;  // casts of parameters not placed yet: lowered with their reader
  // Per node, its candidates: its own strategies (in the shared set) and those derived from
  // them (kept in `derived`), each with its index among the own ones (-1: derived) and the
  // devices its work divides over.
  std::vector<std::vector<const OpStrategy*>> cands(count);
  std::vector<std::vector<int>> owns(count);
  std::vector<std::vector<double>> degrees(count);
  std::deque<OpStrategy> derived;
  std::vector<std::vector<double>> totals(count);
  // The partial-sum axes `v` may arrive with.
  auto partials = [&](ValueId v) {
    std::vector<std::vector<std::string>> out;
    if (v == kNoId) return out;
    auto add = [&](const Layout& l) {
      if (!l.is_partial()) return;
      std::vector<std::string> p = l.partial_axes();
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
    };
    if (auto it = table.find(v); it != table.end()) {
      for (const Option& o : it->second) add(o.layout);
    } else if (layout_[v]) {
      add(*layout_[v]);
    }
    return out;
  };
  // Training: the backward splits as the forward does and moves each activation back the way
  // it came, and a parameter left whole over tp has its gradient all-reduced over tp.
  const bool training = !in_.gradients.empty();
  const double work = training ? 3.0 : 1.0;
  auto moved_twice = [&](ValueId v) {
    const Value& value = src_.value(v);
    return training && value.kind == ValueKind::kIntermediate && is_floating(value.dtype) ? 2.0
                                                                                          : 1.0;
  };
  // A parameter whole over tp read by a strategy that splits its work over tp: its gradient
  // is a partial sum over tp, all-reduced.
  auto gradient_sum = [&](const OpStrategy& st, const Node& node) {
    if (!training || !has_axis("tp")) return 0.0;
    bool splits = false;
    for (const auto& [axis, loop] : st.assignment) splits = splits || axis == "tp";
    if (!splits) return 0.0;
    double cost = 0.0;
    for (size_t i = 0; i < st.inputs.size() && i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v == kNoId || !(free.count(v) || is_free(v)) || st.inputs[i].uses("tp")) continue;
      const double bytes = static_cast<double>(src_.value(v).num_bytes()) /
                           static_cast<double>(st.inputs[i].split_degree(mesh_));
      cost += pricing_.collective(Collective::kAllReduce, bytes, kTpAxis);
    }
    return cost;
  };
  auto external = [&](ValueId v, const Layout& want, const Node& consumer) {
    if (free.count(v) || is_free(v)) return free_cost(v, want, consumer);
    const double cost = input_cost(v, want, consumer);
    return cost < kInfinite ? cost * moved_twice(v) : cost;
  };
  auto in_cost = [&](ValueId v, const Layout& want, const Node& consumer) {
    if (v == kNoId) return 0.0;
    auto it = table.find(v);
    if (it == table.end()) return external(v, want, consumer);
    double best = kInfinite;
    for (const Option& o : it->second) {
      const double move = reshard_cost(v, o.layout, want, consumer);
      if (move < kInfinite) best = std::min(best, o.cost + move * moved_twice(v));
    }
    return best;
  };

  for (NodeId id = first; id < end; ++id) {
    const Node& node = src_.node(id);
    const size_t k = static_cast<size_t>(id - first);
    if (defers(node)) {
      free.insert(node.outputs[0]);
      continue;
    }
    if (!sets_[id]) {
      std::vector<std::string> axes, without_sp;
      strategy_axes(node, axes, without_sp);
      sets_[id] = own_set(id, node, axes);
    }
    const StrategySet& set = *sets_[id];
    std::vector<const OpStrategy*> cs;
    std::vector<int>& own = owns[k];
    std::vector<double>& deg = degrees[k];
    const size_t bases = set.strategies.size();
    for (size_t b = 0; b < bases; ++b) {
      cs.push_back(&set.strategies[b]);
      own.push_back(static_cast<int>(b));
      deg.push_back(static_cast<double>(set.degree[b]));
    }
    auto add_derived = [&](OpStrategy st, size_t base) {
      derived.push_back(std::move(st));
      cs.push_back(&derived.back());
      own.push_back(-1);
      deg.push_back(deg[base]);
    };
    // What lower_node derives: partial sums kept through linear ops and through sums.
    if (is_linear_op(node) && !node.inputs.empty()) {
      for (const std::vector<std::string>& p : partials(node.inputs[0])) {
        for (size_t b = 0; b < bases; ++b) {
          OpStrategy st = *cs[b];
          if (pass_partial(st, 0, p)) add_derived(std::move(st), b);
        }
      }
    }
    if (is_sum_op(node)) {
      for (const std::vector<std::string>& p : partials(node.inputs[0])) {
        bool all = true;
        for (ValueId in : node.inputs) {
          const auto ps = partials(in);
          all = all && std::find(ps.begin(), ps.end(), p) != ps.end();
        }
        if (!all) continue;
        for (size_t b = 0; b < bases; ++b) {
          OpStrategy st = *cs[b];
          if (sum_partial(st, node.inputs.size(), p)) add_derived(std::move(st), b);
        }
      }
    }
    for (const OpOverride& o : policy_.overrides) {
      if (!glob_match(o.pattern, node.name)) continue;
      auto want = Layout::parse(o.strategy);
      std::vector<const OpStrategy*> kept;
      std::vector<int> kept_own;
      std::vector<double> kept_deg;
      for (size_t c = 0; c < cs.size(); ++c) {
        if (want.is_ok() && !cs[c]->outputs.empty() && cs[c]->outputs[0] == *want) {
          kept.push_back(cs[c]);
          kept_own.push_back(own[c]);
          kept_deg.push_back(deg[c]);
        }
      }
      cs = std::move(kept);
      own = std::move(kept_own);
      deg = std::move(kept_deg);
      break;
    }
    std::vector<double>& total = totals[k];
    total.assign(cs.size(), kInfinite);
    // Per input, the cost of each layout asked for (strategies share a few).
    std::vector<std::vector<std::pair<const Layout*, double>>> asked(node.inputs.size());
    double lowest = kInfinite;
    for (size_t c = 0; c < cs.size(); ++c) {
      const OpStrategy& st = *cs[c];
      double t =
          work * pricing_.compute(first + static_cast<NodeId>(k), deg[c]) + gradient_sum(st, node);
      for (size_t i = 0; i < st.inputs.size() && i < node.inputs.size() && t < kInfinite; ++i) {
        const Layout& want = st.inputs[i];
        double cost = -1;
        for (const auto& [l, x] : asked[i]) {
          if (*l == want) {
            cost = x;
            break;
          }
        }
        if (cost < 0) {
          cost = in_cost(node.inputs[i], want, node);
          asked[i].emplace_back(&want, cost);
        }
        t += cost;
      }
      total[c] = std::min(t, kInfinite);
      lowest = std::min(lowest, total[c]);
    }
    if (lowest >= kInfinite) {
      cs.clear();
      continue;
    }
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      const ValueId o = node.outputs[j];
      if (o == kNoId) continue;
      std::vector<Option> options;
      for (size_t c = 0; c < cs.size(); ++c) {
        if (total[c] >= kInfinite || j >= cs[c]->outputs.size()) continue;
        const Layout& l = cs[c]->outputs[j];
        auto same = std::find_if(options.begin(), options.end(),
                                 [&](const Option& x) { return x.layout == l; });
        if (same == options.end()) {
          options.push_back({l, total[c] - lowest});
        } else {
          same->cost = std::min(same->cost, total[c] - lowest);
        }
      }
      std::stable_sort(options.begin(), options.end(),
                       [](const Option& a, const Option& b) { return a.cost < b.cost; });
      if (options.size() > kOptions) options.resize(kOptions);
      table[o] = std::move(options);
    }
    cands[k] = std::move(cs);
  }

  // The layer's stream: a value computed before the layer that it reads, and one it computes
  // that the layers after it read, alike in type and shape (the residual stream). The plan
  // hands the stream on in the layout it came in, so that the layer after plans alike: the
  // estimate costs one of a run of repeated layers for all of them.
  std::map<ValueId, Layout> keep;
  {
    std::vector<ValueId> arriving;
    for (NodeId id = first; id < end; ++id) {
      for (ValueId v : src_.node(id).inputs) {
        if (v == kNoId || !layout_[v]) continue;
        const Value& value = src_.value(v);
        if (value.kind != ValueKind::kIntermediate || !is_floating(value.dtype) ||
            value.producer == kNoId || value.producer >= first ||
            src_.node(value.producer).phase != Phase::kForward)
          continue;
        if (std::find(arriving.begin(), arriving.end(), v) == arriving.end()) arriving.push_back(v);
      }
    }
    for (NodeId id = first; id < end; ++id) {
      for (ValueId o : src_.node(id).outputs) {
        if (o == kNoId) continue;
        const Value& out = src_.value(o);
        const bool leaves = std::any_of(out.consumers.begin(), out.consumers.end(), [&](NodeId d) {
          return d >= end && src_.node(d).phase == Phase::kForward;
        });
        if (!leaves) continue;
        for (ValueId v : arriving) {
          const Value& in = src_.value(v);
          if (in.dtype == out.dtype && in.shape == out.shape) {
            keep.emplace(o, *layout_[v]);
            break;
          }
        }
      }
    }
  }

  // Back from the layer's end: each node's strategy given what its chosen readers need.
  std::vector<int> chosen(count, -1);
  for (NodeId id = end - 1; id >= first; --id) {
    const size_t k = static_cast<size_t>(id - first);
    if (cands[k].empty()) continue;
    const Node& node = src_.node(id);
    double best = kInfinite;
    for (size_t c = 0; c < cands[k].size(); ++c) {
      double score = totals[k][c];
      if (score >= kInfinite) continue;
      bool kept = true;
      for (size_t j = 0; j < node.outputs.size() && j < cands[k][c]->outputs.size(); ++j) {
        auto it = keep.find(node.outputs[j]);
        kept = kept && (it == keep.end() || it->second == cands[k][c]->outputs[j]);
      }
      if (!kept) continue;
      for (size_t j = 0; j < node.outputs.size() && j < cands[k][c]->outputs.size(); ++j) {
        const ValueId o = node.outputs[j];
        if (o == kNoId) continue;
        std::vector<const Layout*> paid;
        for (NodeId d : src_.value(o).consumers) {
          if (d < first || d >= end || chosen[d - first] < 0) continue;
          const Node& reader = src_.node(d);
          const OpStrategy& rs = *cands[d - first][chosen[d - first]];
          for (size_t i = 0; i < reader.inputs.size() && i < rs.inputs.size(); ++i) {
            if (reader.inputs[i] != o) continue;
            const Layout& want = rs.inputs[i];
            if (std::any_of(paid.begin(), paid.end(), [&](const Layout* l) { return *l == want; }))
              continue;
            paid.push_back(&want);
            const double move = reshard_cost(o, cands[k][c]->outputs[j], want, reader);
            score += move < kInfinite ? move * moved_twice(o) : kInfinite;
          }
        }
      }
      if (score < best) {
        best = score;
        chosen[k] = static_cast<int>(c);
      }
    }
  }

  // The plan and node-by-node choice priced alike, as one path through the layer.
  auto path_cost = [&](bool greedy) {
    std::unordered_map<ValueId, Layout> at;
    std::vector<std::pair<ValueId, Layout>> moved;
    auto cost_in = [&](ValueId v, const Layout& want, const Node& consumer) {
      if (v == kNoId) return 0.0;
      auto it = at.find(v);
      if (it == at.end()) return external(v, want, consumer);
      if (it->second == want) return 0.0;
      for (const auto& [mv, ml] : moved) {
        if (mv == v && ml == want) return 0.0;
      }
      const double move = reshard_cost(v, it->second, want, consumer);
      return move < kInfinite ? move * moved_twice(v) : kInfinite;
    };
    double sum = 0.0;
    for (NodeId id = first; id < end; ++id) {
      const size_t k = static_cast<size_t>(id - first);
      if (cands[k].empty()) continue;
      const Node& node = src_.node(id);
      auto price = [&](size_t c) {
        const OpStrategy& st = *cands[k][c];
        double t = work * pricing_.compute(id, degrees[k][c]) + gradient_sum(st, node);
        for (size_t i = 0; i < st.inputs.size() && i < node.inputs.size() && t < kInfinite; ++i)
          t += cost_in(node.inputs[i], st.inputs[i], node);
        return std::min(t, kInfinite);
      };
      int pick = chosen[k];
      double cost = kInfinite;
      if (greedy) {
        pick = -1;
        for (size_t c = 0; c < cands[k].size(); ++c) {
          const double t = price(c);
          if (t < cost) {
            cost = t;
            pick = static_cast<int>(c);
          }
        }
      } else if (pick >= 0) {
        cost = price(static_cast<size_t>(pick));
      }
      if (pick < 0 || cost >= kInfinite) return kInfinite;
      const OpStrategy& st = *cands[k][pick];
      for (size_t i = 0; i < st.inputs.size() && i < node.inputs.size(); ++i) {
        const ValueId v = node.inputs[i];
        if (v != kNoId && at.count(v) && !(at.at(v) == st.inputs[i]))
          moved.emplace_back(v, st.inputs[i]);
      }
      sum += cost;
      for (size_t j = 0; j < node.outputs.size() && j < st.outputs.size(); ++j) {
        if (node.outputs[j] != kNoId) at.insert_or_assign(node.outputs[j], st.outputs[j]);
      }
    }
    return sum;
  };
  // A plan that leaves a mesh axis idle in the whole layer repeats that axis's work on every
  // device of it: the user asked for the axis, so the layer is chosen node by node instead.
  for (const std::string& axis : policy_.axes) {
    bool used = false;
    for (size_t k = 0; k < count && !used; ++k) {
      if (chosen[k] < 0) continue;
      for (const auto& [a, loop] : cands[k][chosen[k]]->assignment) used = used || a == axis;
    }
    if (!used) return;
  }
  const double planned = path_cost(false);
  if (planned >= kInfinite || !(planned < path_cost(true) * (1.0 - 1e-9))) return;
  for (size_t k = 0; k < count; ++k) {
    if (chosen[k] >= 0) plan[k] = {owns[k][chosen[k]], *cands[k][chosen[k]]};
  }
}

Status Spmd::lower_node(NodeId id) {
  const Node& node = src_.node(id);
  current_ = id;
  if (defers(node)) {
    deferred_cast_.emplace(node.outputs[0], id);
    return Status::ok();
  }
  // A parameter's gradient summed from contributions in different layers (a tied embedding).
  if (policy_.microbatches > 1 && node.domain.empty() &&
      (node.op_type == "Add" || node.op_type == "Sum") && node.outputs.size() == 1 &&
      node.inputs.size() >= 2 && parameter_of_.count(node.outputs[0])) {
    std::set<int32_t> layers, ranks;
    bool same_layout = true;
    for (ValueId in : node.inputs) {
      if (in == kNoId || !layout_[in] || src_.value(in).producer == kNoId) {
        same_layout = false;
        break;
      }
      const NodeId producer = src_.value(in).producer;
      layers.insert(policy_.layer_of.empty() ? src_.node(producer).layer
                                             : policy_.layer_of[producer]);
      if (!policy_.stage_of.empty()) ranks.insert(policy_.stage_of[producer]);
      same_layout = same_layout && *layout_[in] == *layout_[node.inputs[0]];
    }
    if (same_layout && layers.size() > 1) {
      result_.gradients_per_rank.insert(src_.value(parameter_of_.at(node.outputs[0])).name);
      if (ranks.size() > 1) return accumulate_per_stage(id);
    }
  }
  std::vector<std::string> axes, without_sp;
  strategy_axes(node, axes, without_sp);
  const std::shared_ptr<const StrategySet> own =
      !sets_.empty() && sets_[id] ? std::move(sets_[id]) : own_set(id, node, axes);
  const std::vector<OpStrategy>& bases = own->strategies;
  // The layer's plan, where the inputs came as it planned: its strategy is taken without
  // pricing the others (unless a window over sp, which the plan does not weigh, may win).
  if (!planned_.empty() && planned_[id] && planned_[id]->own >= 0 &&
      without_sp.size() == axes.size() && policy_.overrides.empty()) {
    const OpStrategy& planned = bases.at(planned_[id]->own);
    if (strategy_cost(id, planned) < kInfinite) return emit(node, planned, nullptr, own.get());
  }
  std::vector<Candidate> derived;  // strategies beyond the op's own
  // Linear data movement (and negation) commutes with the sum: a partial input may stay
  // partial through it, and the reduction happens where a consumer needs the whole value.
  // Under mixed precision a weight gradient is computed in the low type and cast to fp32:
  // it stays a partial sum through that cast when microbatches accumulate or ZeRO shards the
  // update, so it is reduced as without mixed precision (once per step, or reduce-scattered
  // onto the update's shards), in fp32 as Megatron reduces its main gradients, rather than
  // all-reduced in every microbatch's backward. (With neither, the half-size all-reduce
  // before the cast is cheaper.)
  // (So does each contribution's cast, where several are cast before their sum: a tied
  // embedding's.)
  auto feeds_gradient = [&](ValueId v) {
    if (parameter_of_.count(v)) return true;
    const std::vector<NodeId>& readers = src_.value(v).consumers;
    if (readers.size() != 1) return false;
    const Node& sum = src_.node(readers[0]);
    return sum.domain.empty() && (sum.op_type == "Sum" || sum.op_type == "Add") &&
           sum.outputs.size() == 1 && parameter_of_.count(sum.outputs[0]) > 0;
  };
  const bool gradient_cast = node.op_type == "Cast" && node.outputs.size() == 1 &&
                             (policy_.microbatches > 1 || policy_.zero >= 1) &&
                             feeds_gradient(node.outputs[0]);
  // (So is an accumulating scatter into zeros in its updates: a Gather's gradient.)
  size_t linear_input = 0;
  bool linear_op = gradient_cast || is_linear_op(node);
  if (node.op_type == "ScatterND" && node.inputs.size() == 3 &&
      node.attr_string("reduction", "none") == "add" && is_zero_fill(src_, node.inputs[0])) {
    linear_op = true;
    linear_input = 2;
  }
  const bool linear = linear_op && node.domain.empty() && node.inputs.size() > linear_input &&
                      node.inputs[linear_input] != kNoId && layout_[node.inputs[linear_input]] &&
                      layout_[node.inputs[linear_input]]->is_partial();
  if (linear) {
    const std::vector<std::string> partial = layout_[node.inputs[linear_input]]->partial_axes();
    for (const OpStrategy& base : bases) {
      Candidate c{base, std::nullopt};
      if (pass_partial(c.strategy, linear_input, partial)) derived.push_back(std::move(c));
    }
  }
  // A sum (or difference) of partial sums over the same axes is a partial sum: it is reduced
  // once, where a consumer needs the whole value (the gradient contributions of the
  // projections split from a fused one meet in a Sum before a single all-reduce, as the fused
  // projection's would).
  bool partial_sum = is_sum_op(node);
  for (size_t i = 0; partial_sum && i < node.inputs.size(); ++i) {
    const ValueId in = node.inputs[i];
    partial_sum = in != kNoId && layout_[in] && layout_[in]->is_partial() &&
                  layout_[in]->partial_axes() == layout_[node.inputs[0]]->partial_axes();
  }
  if (partial_sum) {
    const std::vector<std::string> partial = layout_[node.inputs[0]]->partial_axes();
    for (const OpStrategy& base : bases) {
      Candidate c{base, std::nullopt};
      if (sum_partial(c.strategy, node.inputs.size(), partial)) derived.push_back(std::move(c));
    }
  }
  if (without_sp.size() < axes.size()) {
    std::vector<Candidate> extra =
        windowed(node, strategies_->get(src_, node, mesh_, without_sp)->strategies);
    for (Candidate& c : extra) derived.push_back(std::move(c));
  }
  // The choices, in order: the op's own strategies (shared, not copied), then the derived.
  struct Choice {
    const OpStrategy* strategy;
    const Window* window;
    int own;  // its index among the op's own strategies, or -1
  };
  std::vector<Choice> candidates;
  candidates.reserve(bases.size() + derived.size());
  for (size_t k = 0; k < bases.size(); ++k)
    candidates.push_back({&bases[k], nullptr, static_cast<int>(k)});
  for (const Candidate& c : derived)
    candidates.push_back({&c.strategy, c.window ? &*c.window : nullptr, -1});
  for (size_t k = 0; k < policy_.overrides.size(); ++k) {
    const OpOverride& o = policy_.overrides[k];
    if (!glob_match(o.pattern, node.name)) continue;
    override_used_[k] = true;
    auto want = Layout::parse(o.strategy);
    if (!want.is_ok()) {
      return error("tensor.{}: '{}' is not a layout ({})", o.pattern, o.strategy,
                   want.status().message());
    }
    std::vector<Choice> kept;
    std::vector<std::string> offered;
    for (const Choice& c : candidates) {
      if (c.strategy->outputs.empty()) continue;
      if (c.strategy->outputs[0] == *want) {
        kept.push_back(c);
      } else if (offered.size() < 6) {
        offered.push_back(c.strategy->outputs[0].to_string());
      }
    }
    if (kept.empty()) {
      return error("tensor.{}: node '{}' ({}) cannot give its output the layout {} (it can: {})",
                   o.pattern, node.name, node.op_type, want->to_string(), fmt::join(offered, ", "));
    }
    candidates = std::move(kept);
    break;
  }
  // What bringing each input into each of its distinct layouts costs, worked out when a
  // strategy first asks (the op's own strategies share a few layouts per input; a cost can be
  // negative, a whole parameter kept split further than tp splits it, so NaN marks unknown).
  constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::vector<double>> input_costs(own->input_layouts.size());
  for (size_t i = 0; i < input_costs.size(); ++i)
    input_costs[i].assign(own->input_layouts[i].size(), kUnknown);
  auto own_cost = [&](int k) {
    const OpStrategy& s = bases[k];
    double cost = 0.0;
    for (size_t i = 0; i < s.inputs.size() && i < node.inputs.size(); ++i) {
      const int layout = own->input_choice[k][i];
      double& in = input_costs[i][layout];
      if (std::isnan(in)) in = input_cost(node.inputs[i], own->input_layouts[i][layout], node);
      cost += in;
      if (cost >= kInfinite) return kInfinite;
    }
    return cost + pricing_.compute(id, static_cast<double>(own->degree[k])) + storage_cost(node, s);
  };
  const Choice* best = nullptr;
  double best_cost = kInfinite;
  for (const Choice& c : candidates) {
    const double cost = c.own >= 0 ? own_cost(c.own) : strategy_cost(id, *c.strategy);
    if (cost < best_cost) {
      best_cost = cost;
      best = &c;
    }
  }
  // The layer's plan, where the inputs came as it planned (a window over sp, which it does
  // not plan, may still be cheaper).
  if (!planned_.empty() && planned_[id] && best && !best->window) {
    for (const Choice& c : candidates) {
      if (*c.strategy != planned_[id]->strategy) continue;
      const double cost = c.own >= 0 ? own_cost(c.own) : strategy_cost(id, *c.strategy);
      if (cost < kInfinite) best = &c;
      break;
    }
  }
  if (!best) {
    // Every strategy needs a reshard that does not exist (a partial sum into an op that
    // cannot take one is always reducible, so this is a replicated fallback).
    best = &candidates.front();
  }
  return emit(node, *best->strategy, best->window, own.get());
}

Status Spmd::emit(const Node& node, const OpStrategy& strategy, const Window* window,
                  const StrategySet* set) {
  std::vector<ValueId> inputs;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] == kNoId) {
      inputs.push_back(kNoId);
      continue;
    }
    ASSIGN_OR_RETURN(ValueId x, local_as(node.inputs[i], strategy.inputs.at(i), node));
    inputs.push_back(x);
  }
  StatusOr<std::vector<ValueId>> outs = std::vector<ValueId>{};
  if (window) {
    outs = split_window(result_.graph, src_, node, inputs, strategy, window->before, window->after,
                        window->attrs, mesh_);
  } else {
    outs = split(result_.graph, src_, node, inputs, strategy, mesh_,
                 {.space = set ? &set->space : nullptr, .shapes_only = in_.shapes_only});
  }
  if (!outs.is_ok()) return outs.status();
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i] == kNoId) continue;
    local_[node.outputs[i]] = outs.value()[i];
    layout_[node.outputs[i]] = strategy.outputs.at(i);
  }
  for (ValueId out : node.outputs) {
    auto gradient = parameter_of_.find(out);
    if (out != kNoId && gradient != parameter_of_.end())
      RETURN_IF_ERROR(accumulate(gradient->second, out));
  }
  return Status::ok();
}

// A parameter read on several pipeline ranks (a tied embedding) gets a gradient contribution on
// each, summed by `sum`. With microbatches, each contribution accumulates on the rank that
// computes it and the update adds the accumulators once per step (each rank's exchange sends
// its own), as Megatron keeps a tied embedding's copies on the first and last stage in step:
// no contribution crosses ranks every microbatch.
Status Spmd::accumulate_per_stage(NodeId id) {
  const Node& sum = src_.node(id);
  const ValueId g = sum.outputs[0];
  const ValueId p = parameter_of_.at(g);
  for (size_t i = 0; i < sum.inputs.size(); ++i) {
    const ValueId c = sum.inputs[i];
    RETURN_IF_ERROR(
        accumulate(p, c, fmt::format("rank{}.{}", policy_.stage_of[src_.value(c).producer], i)));
  }
  Graph& dst = result_.graph;
  Emitter e(dst, fmt::format("grad_acc/{}", src_.value(p).name), Phase::kOptimizer, -1);
  ValueId total = local_[sum.inputs[0]];
  for (size_t i = 1; i < sum.inputs.size(); ++i)
    total = e.op("Add", {total, local_[sum.inputs[i]]});
  RETURN_IF_ERROR(e.status());
  result_.origin.resize(dst.num_nodes(), id);
  local_[g] = total;
  layout_[g] = layout_[sum.inputs[0]];
  accumulated_.insert(g);
  return Status::ok();
}

// Gradients accumulate over microbatches into state, each microbatch's share scaled by 1/m;
// under ZeRO 2 and 3 the accumulator is a dp shard (a reduce-scatter per microbatch).
Status Spmd::accumulate_gradients() {
  for (const auto& [p, g] : gradient_of_) RETURN_IF_ERROR(accumulate(p, g));
  return Status::ok();
}

// A gradient as the update reads it, emitted right after the node that computes it so its
// reduction overlaps the rest of the backward. With one microbatch the data-parallel sum
// happens here (an all-reduce, or a reduce-scatter onto the update's shards under ZeRO); with
// several, partial sums accumulate and are reduced once, by the update.
Status Spmd::accumulate(ValueId p, ValueId g, const std::string& part) {
  Graph& dst = result_.graph;
  const std::string name =
      part.empty() ? src_.value(p).name : fmt::format("{}.{}", src_.value(p).name, part);
  if (local_[g] == kNoId || accumulated_.count(g)) return Status::ok();
  accumulated_.insert(g);
  {
    const Value& grad = src_.value(g);
    Layout acc = *layout_[g];
    const bool partial_dp = has_axis("dp") && acc.is_partial_over("dp");
    if (policy_.microbatches == 1 && partial_dp) {
      const Layout base = acc.without("dp");
      acc = policy_.zero >= 1 && zero_dim(grad.shape.dims, base) >= 0
                ? with_zero(grad.shape.dims, base)
                : base;
    } else if (policy_.zero >= 2 && has_axis("dp")) {
      const Layout base = acc.without("dp");
      if (zero_dim(grad.shape.dims, base) >= 0) acc = with_zero(grad.shape.dims, base);
    }
    const Node& producer = src_.node(grad.producer);
    ASSIGN_OR_RETURN(ValueId x, local_as(g, acc, producer));
    if (policy_.microbatches > 1) {
      Emitter e(dst, fmt::format("grad_acc/{}", name), Phase::kBackward, producer.layer);
      ValueId scaled =
          e.op("Mul", {x, e.scalar(1.0 / static_cast<double>(policy_.microbatches), grad.dtype)});
      Value in;
      in.name = fmt::format("grad_acc/{}", name);
      in.dtype = grad.dtype;
      in.shape = Shape(acc.shard_shape(grad.shape.dims, mesh_));
      in.kind = ValueKind::kInput;
      const ValueId acc_in = dst.add_value(std::move(in));
      dst.add_input(acc_in);
      x = e.op("Add", {acc_in, scaled});
      RETURN_IF_ERROR(e.status());
      dst.rename_value(x, dst.unique_value_name(fmt::format("grad_acc/{}.next", name)));
      StateSpec spec;
      spec.name = dst.value(acc_in).name;
      spec.output = dst.value(x).name;
      spec.dtype = grad.dtype;
      spec.shape = grad.shape.dims;
      spec.layout = acc;
      spec.init = StateSpec::Init::kZeros;
      spec.gradient_of = src_.value(p).name;
      spec.gradient_part = part;
      result_.state.push_back(std::move(spec));
    }
    result_.origin.resize(dst.num_nodes(), grad.producer);
    local_[g] = x;
    layout_[g] = acc;
    resharded_.erase(g);
  }
  return Status::ok();
}

StatusOr<SpmdResult> Spmd::run() {
  Graph& dst = result_.graph;
  dst.name = src_.name;
  dst.opsets = src_.opsets;
  dst.opsets[std::string(kAutoparDomain)] = 1;
  for (ValueId v : src_.inputs()) {
    const Value& value = src_.value(v);
    Layout layout = policy_.input_layout(value);
    Status valid = layout.validate(value.shape.dims, mesh_);
    if (!valid.is_ok()) return error("input '{}': {}", value.name, valid.message());
    Value in;
    in.name = value.name;
    in.dtype = value.dtype;
    in.shape = Shape(layout.shard_shape(value.shape.dims, mesh_));
    in.kind = ValueKind::kInput;
    local_[v] = dst.add_value(std::move(in));
    dst.add_input(local_[v]);
    layout_[v] = layout;
    result_.data.push_back({value.name, value.dtype, value.shape.dims, layout});
  }
  // Forward and backward, then the accumulation, then the update.
  bool accumulated = false;
  // Tensor auto over tp or sp: each layer's forward is planned as a whole.
  const bool plan = policy_.tp_activations == SpmdPolicy::TpActivations::kAny &&
                    (has_axis("tp") || has_axis("sp"));
  if (plan) {
    planned_.assign(src_.num_nodes(), nullptr);
    sets_.assign(src_.num_nodes(), nullptr);
  }
  NodeId planned_until = 0;
  for (NodeId id = 0; id < src_.num_nodes(); ++id) {
    if (src_.node(id).phase == Phase::kOptimizer && !accumulated) {
      RETURN_IF_ERROR(accumulate_gradients());
      accumulated = true;
    }
    if (plan && id >= planned_until && src_.node(id).phase == Phase::kForward) {
      NodeId end = id + 1;
      while (end < src_.num_nodes() && src_.node(end).phase == Phase::kForward &&
             layer_of(end) == layer_of(id))
        ++end;
      plan_segment(id, end);
      planned_until = end;
    }
    RETURN_IF_ERROR(lower_node(id));
    result_.origin.resize(dst.num_nodes(), id);
  }
  if (!accumulated) RETURN_IF_ERROR(accumulate_gradients());
  // New state values in their storage layouts.
  for (const auto& [s, next] : in_.updates) {
    if (local_[s] == kNoId) place_state(s, Layout::replicated(src_.value(s).shape.rank()));
    const Node* producer =
        src_.value(next).producer != kNoId ? &src_.node(src_.value(next).producer) : nullptr;
    Node where;
    where.name = src_.value(next).name;
    where.phase = producer ? producer->phase : Phase::kOptimizer;
    where.layer = producer ? producer->layer : -1;
    ASSIGN_OR_RETURN(ValueId x, local_as(next, *layout_[s], where));
    result_.origin.resize(dst.num_nodes(), producer ? src_.value(next).producer : -1);
    dst.add_output(x);
    for (StateSpec& spec : result_.state) {
      if (spec.name == src_.value(s).name) spec.output = dst.value(x).name;
    }
  }
  // Parameters never read (no consumer) still need a place to live.
  for (ValueId p : src_.parameters()) {
    if (local_[p] == kNoId) place_state(p, Layout::replicated(src_.value(p).shape.rank()));
  }
  auto replicated_output = [&](ValueId v) -> StatusOr<std::string> {
    const Node* producer =
        src_.value(v).producer != kNoId ? &src_.node(src_.value(v).producer) : nullptr;
    Node where;
    where.name = src_.value(v).name;
    where.phase = producer ? producer->phase : Phase::kForward;
    where.layer = producer ? producer->layer : -1;
    ASSIGN_OR_RETURN(ValueId x, local_as(v, Layout::replicated(src_.value(v).shape.rank()), where));
    result_.origin.resize(dst.num_nodes(), producer ? src_.value(v).producer : -1);
    dst.add_output(x);
    return dst.value(x).name;
  };
  if (in_.loss != kNoId) {
    ASSIGN_OR_RETURN(result_.loss, replicated_output(in_.loss));
  } else {
    for (ValueId v : src_.outputs()) {
      ASSIGN_OR_RETURN(std::string name, replicated_output(v));
      result_.outputs.push_back(std::move(name));
    }
  }
  result_.origin.resize(dst.num_nodes(), -1);
  for (size_t k = 0; k < policy_.overrides.size(); ++k) {
    if (!override_used_[k])
      return error("tensor.{}: the pattern matches no node", policy_.overrides[k].pattern);
  }
  return std::move(result_);
}

}  // namespace

int64_t attribute_dim(const Value& value) {
  switch (value.shape.rank()) {
    case 2:
      return is_floating(value.dtype) ? -1 : 1;
    case 3:
      return 1;
    case 4:
      return 2;
    default:
      return -1;
  }
}

StatusOr<SpmdResult> lower_spmd(const SpmdInput& input, const DeviceMesh& mesh,
                                const SpmdPolicy& policy) {
  Spmd spmd(input, mesh, policy);
  return spmd.run();
}

}  // namespace autopar
