// The SPMD pass: every node of the source graph lowered, in order, under the strategy the
// choice gives it (choice.cc), its inputs brought into the layouts it reads by the reshards
// the planner finds (augment), its state placed where its layout keeps it.
#include "spmd_pass.h"

#include <algorithm>

#include "autopar/parallel/primitives.h"

namespace autopar {
namespace spmd_detail {

Layout without_partial_sums(Layout layout) {
  for (const std::string& axis : layout.partial_axes()) layout = layout.without(axis);
  return layout;
}

constexpr const char* kLinearOps[] = {"Reshape",   "Transpose", "Identity", "Squeeze",
                                      "Unsqueeze", "Flatten",   "Neg"};

bool is_linear_op(const Node& node) {
  return node.domain.empty() && std::any_of(std::begin(kLinearOps), std::end(kLinearOps),
                                            [&](const char* op) { return node.op_type == op; });
}

bool pass_partial(OpStrategy& s, size_t input, const std::vector<std::string>& partial) {
  if (s.inputs.size() <= input || s.outputs.size() != 1) return false;
  for (const std::string& a : partial) {
    if (s.inputs[input].uses(a) || s.outputs[0].uses(a)) continue;
    s.inputs[input] = s.inputs[input].with_partial(a);
    s.outputs[0] = s.outputs[0].with_partial(a);
  }
  return true;
}

bool is_sum_op(const Node& node) {
  return node.domain.empty() &&
         (node.op_type == "Add" || node.op_type == "Sub" || node.op_type == "Sum") &&
         node.inputs.size() >= 2 && node.outputs.size() == 1;
}

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

StateMaps::StateMaps(const SpmdInput& input) {
  const Graph& g = *input.graph;
  is_state.assign(static_cast<size_t>(g.num_values()), false);
  for (const auto& [s, next] : input.updates) {
    is_state[s] = true;
    state_of.emplace(next, s);
  }
  for (ValueId p : g.parameters()) is_state[p] = true;
  for (const auto& [p, gradient] : input.gradients) {
    if (gradient == kNoId) continue;
    gradient_of.emplace(p, gradient);
    parameter_of.emplace(gradient, p);
  }
  statistics.insert(input.statistics.begin(), input.statistics.end());
  std::map<ValueId, int32_t> slots_of;
  for (const auto& [s, p] : input.slots) {
    slot_param[s] = p;
    slot_index[s] = slots_of[p]++;
  }
}

Spmd::Spmd(const SpmdInput& input, const DeviceMesh& mesh, const SpmdPolicy& policy)
    : in_(input),
      src_(*input.graph),
      mesh_(mesh),
      policy_(policy),
      maps_(input),
      strategies_(policy.strategies ? policy.strategies : std::make_shared<StrategyCache>()),
      profile_(policy.profile ? policy.profile : neutral_profile()),
      pricing_(*profile_, mesh, *input.graph) {
  const int32_t n = src_.num_values();
  // Lowered graphs come out about 1.5 times the size of their source.
  result_.graph.reserve(2 * src_.num_nodes(), 2 * n);
  local_.assign(n, kNoId);
  layout_.assign(n, std::nullopt);
  if (input.graph_id != 0) {
    // Each node's axes follow from its phase, the policy's axes and whether ZeRO shards the
    // update: those, the graph and the mesh name the slots.
    std::string key =
        fmt::format("{}|{}|zero {}|paired {}|", input.graph_id, mesh.to_string(),
                    policy.zero > 0 ? 1 : 0, policy.ring_attention ? policy.context_axis : "");
    for (const std::string& a : policy.axes) key += a + ",";
    node_sets_ = &strategies_->node_sets(key, static_cast<size_t>(src_.num_nodes()));
  }
}

std::shared_ptr<const StrategySet> Spmd::own_set(NodeId id, const Node& node,
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

const StatusOr<std::vector<ReshardStep>>& Spmd::planned_reshard(
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

void Spmd::place_state(ValueId v, const Layout& compute) {
  const Value& value = src_.value(v);
  Layout storage = compute;
  if (value.kind == ValueKind::kParameter) {
    compute_layout_[v] = compute;
    if (policy_.zero >= 3) storage = with_zero(value.shape.dims, compute);
  }
  if (maps_.slot_param.count(v)) storage = slot_storage(v);
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
  spec.is_statistic = maps_.statistics.count(v) > 0;
  if (auto slot = maps_.slot_param.find(v); slot != maps_.slot_param.end()) {
    spec.slot_of = src_.value(slot->second).name;
    spec.slot_index = maps_.slot_index.at(v);
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
    if (local_[p] == kNoId && maps_.is_state[p]) place_state(p, at);
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
    if (maps_.is_state[v]) {
      place_state(v, maps_.slot_param.count(v) ? Layout::replicated(value.shape.rank())
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

// A Dropout draws its mask by the element's place in the whole tensor; a shard's node says
// which part it holds (its input's layout; the paired axis under ring attention), so that every
// device drops what the single-device graph drops.
void Spmd::mark_shard_positions(ValueId out, const Layout& layout) {
  Graph& dst = result_.graph;
  bool split = false;
  std::string zigzag;
  for (int64_t d = 0; d < layout.rank(); ++d) {
    for (const std::string& axis : layout.dim_axes(d)) {
      split = true;
      if (mesh_.is_paired(find_axis(axis))) zigzag = axis;
    }
  }
  if (!split) return;
  Node& shard = dst.mutable_node(dst.value(out).producer);
  shard.attrs["layout"] = layout.to_string();
  if (!zigzag.empty()) shard.attrs["zigzag_axis"] = zigzag;
}

Status Spmd::emit(const Node& node, const OpStrategy& strategy, const RowWindow* window,
                  const StrategySet* set, bool ring) {
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
  } else if (ring) {
    outs =
        split_ring(result_.graph, src_, node, inputs, strategy, mesh_, policy_.context_axis, true);
  } else {
    outs = split(result_.graph, src_, node, inputs, strategy, mesh_,
                 {.space = set ? &set->space : nullptr, .shapes_only = in_.shapes_only});
  }
  if (!outs.is_ok()) return outs.status();
  if (node.op_type == "Dropout" && node.domain.empty() && !outs.value().empty())
    mark_shard_positions(outs.value()[0], strategy.inputs.at(0));
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i] == kNoId) continue;
    local_[node.outputs[i]] = outs.value()[i];
    layout_[node.outputs[i]] = strategy.outputs.at(i);
  }
  for (ValueId out : node.outputs) {
    auto gradient = maps_.parameter_of.find(out);
    if (out != kNoId && gradient != maps_.parameter_of.end())
      RETURN_IF_ERROR(accumulate(gradient->second, out));
  }
  return Status::ok();
}

Status Spmd::place_inputs() {
  Graph& dst = result_.graph;
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
  return Status::ok();
}

StatusOr<SpmdResult> Spmd::run() {
  Graph& dst = result_.graph;
  dst.name = src_.name;
  dst.opsets = src_.opsets;
  dst.opsets[std::string(kAutoparDomain)] = 1;
  RETURN_IF_ERROR(place_inputs());
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
  RETURN_IF_ERROR(place_outputs());
  for (size_t k = 0; k < policy_.overrides.size(); ++k) {
    if (!override_used_[k])
      return error("tensor.{}: the pattern matches no node", policy_.overrides[k].pattern);
  }
  return std::move(result_);
}

Status Spmd::place_outputs() {
  Graph& dst = result_.graph;
  // `v` in `layout` as a graph output, emitted as its producer's phase and layer read it
  // (`phase` where it has none); the output's dst value.
  auto output = [&](ValueId v, const Layout& layout, Phase phase) -> StatusOr<ValueId> {
    const NodeId producer_id = src_.value(v).producer;
    const Node* producer = producer_id != kNoId ? &src_.node(producer_id) : nullptr;
    Node where;
    where.name = src_.value(v).name;
    where.phase = producer ? producer->phase : phase;
    where.layer = producer ? producer->layer : -1;
    ASSIGN_OR_RETURN(ValueId x, local_as(v, layout, where));
    result_.origin.resize(dst.num_nodes(), producer_id);
    dst.add_output(x);
    return x;
  };
  // New state values in their storage layouts.
  for (const auto& [s, next] : in_.updates) {
    if (local_[s] == kNoId) place_state(s, Layout::replicated(src_.value(s).shape.rank()));
    ASSIGN_OR_RETURN(ValueId x, output(next, *layout_[s], Phase::kOptimizer));
    for (StateSpec& spec : result_.state) {
      if (spec.name == src_.value(s).name) spec.output = dst.value(x).name;
    }
  }
  // Parameters never read (no consumer) still need a place to live.
  for (ValueId p : src_.parameters()) {
    if (local_[p] == kNoId) place_state(p, Layout::replicated(src_.value(p).shape.rank()));
  }
  auto replicated_output = [&](ValueId v) -> StatusOr<std::string> {
    ASSIGN_OR_RETURN(ValueId x,
                     output(v, Layout::replicated(src_.value(v).shape.rank()), Phase::kForward));
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
  return Status::ok();
}

}  // namespace spmd_detail

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
  spmd_detail::Spmd spmd(input, mesh, policy);
  return spmd.run();
}

}  // namespace autopar
