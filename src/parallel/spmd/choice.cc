// The strategy each node takes: the cheapest of its own strategies and those derived from
// them (partial sums kept, windows over rows), or its layer's plan under tensor auto, or what
// an override names.
#include <cmath>
#include <limits>
#include <set>

#include "spmd_pass.h"

namespace autopar::spmd_detail {

void Spmd::strategy_axes(const Node& node, std::vector<std::string>& axes,
                         std::vector<std::string>& without_sp) const {
  for (const std::string& a : policy_.axes) {
    // Without ZeRO every data-parallel replica runs the whole update.
    if (a == "dp" && node.phase == Phase::kOptimizer && policy_.zero == 0) continue;
    axes.push_back(a);
    if (a != "sp") without_sp.push_back(a);
  }
}

StatusOr<bool> Spmd::lower_tied_gradient_sum(NodeId id) {
  const Node& node = src_.node(id);
  // A parameter's gradient summed from contributions in different layers (a tied embedding).
  if (!(policy_.microbatches > 1 && node.domain.empty() &&
        (node.op_type == "Add" || node.op_type == "Sum") && node.outputs.size() == 1 &&
        node.inputs.size() >= 2 && maps_.parameter_of.count(node.outputs[0])))
    return false;
  std::set<int32_t> layers, ranks;
  bool placed = true, same_layout = true;
  for (ValueId in : node.inputs) {
    if (in == kNoId || !layout_[in] || src_.value(in).producer == kNoId) {
      placed = false;
      break;
    }
    const NodeId producer = src_.value(in).producer;
    layers.insert(policy_.layer_of.empty() ? src_.node(producer).layer
                                           : policy_.layer_of[producer]);
    if (!policy_.stage_of.empty()) ranks.insert(policy_.stage_of[producer]);
    same_layout = same_layout && *layout_[in] == *layout_[node.inputs[0]];
  }
  // Contributions on several ranks accumulate per rank; so do contributions in different
  // layouts (a tied head's vocabulary-split gradient and the embedding's whole one), which
  // then meet once per step rather than be resharded every microbatch.
  if (placed && layers.size() > 1) {
    result_.gradients_per_rank.insert(src_.value(maps_.parameter_of.at(node.outputs[0])).name);
    if (ranks.size() > 1 || !same_layout) {
      RETURN_IF_ERROR(accumulate_per_stage(id));
      return true;
    }
  }
  return false;
}

std::vector<Spmd::Candidate> Spmd::derived_candidates(
    const Node& node, const std::vector<OpStrategy>& bases, const std::vector<std::string>& axes,
    const std::vector<std::string>& without_sp) const {
  std::vector<Candidate> derived;
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
    if (maps_.parameter_of.count(v)) return true;
    const std::vector<NodeId>& readers = src_.value(v).consumers;
    if (readers.size() != 1) return false;
    const Node& sum = src_.node(readers[0]);
    return sum.domain.empty() && (sum.op_type == "Sum" || sum.op_type == "Add") &&
           sum.outputs.size() == 1 && maps_.parameter_of.count(sum.outputs[0]) > 0;
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
    std::vector<WindowedStrategy> extra = windowed_strategies(
        src_, node, mesh_, strategies_->get(src_, node, mesh_, without_sp)->strategies);
    for (WindowedStrategy& c : extra)
      derived.push_back({std::move(c.strategy), std::move(c.window)});
  }
  return derived;
}

Status Spmd::apply_override(const Node& node, std::vector<Choice>& candidates) {
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
  return Status::ok();
}

Spmd::Recipe Spmd::recipe_of(const Node& node) const {
  Recipe r;
  // Megatron-SP's recipe: the forward's norms run on sequence shards over tp, and the
  // projections (and their gradients' products with the weights) on their parameter shards,
  // gathering the sequence first, never sequence-split on a whole parameter.
  const bool sp = policy_.tp_activations == SpmdPolicy::TpActivations::kReduceScatter &&
                  node.phase != Phase::kOptimizer;
  if (sp && node.domain.empty() &&
      (node.op_type == "MatMul" || node.op_type == "Gemm" || node.op_type == "Conv" ||
       node.op_type == "ConvTranspose")) {
    for (ValueId in : node.inputs) r.weighted = r.weighted || (in != kNoId && is_weight(in));
  }
  const bool norm = (node.domain.empty() && node.op_type == "LayerNormalization") ||
                    (node.domain == kTrainingDomain && node.op_type == "RMSNormalization");
  if (sp && node.phase == Phase::kForward && norm && !node.outputs.empty() &&
      node.outputs[0] != kNoId)
    r.sequence_dim = attribute_dim(src_.value(node.outputs[0]));
  // Megatron's recipe splits activations over tp only where a split parameter (or a split
  // input) puts them: an op whose inputs are whole over tp keeps its outputs whole, even where
  // the split is free for the op itself (an Expand of a norm's statistics, a broadcast).
  r.from_parameters = policy_.tp_activations == SpmdPolicy::TpActivations::kFromParameters &&
                      node.phase != Phase::kOptimizer;
  r.context = policy_.ring_attention && node.op_type == "Gather";
  return r;
}

bool Spmd::recipe_admits(const Recipe& r, const Node& node, const OpStrategy& s,
                         const IterationSpace* space) const {
  if (r.sequence_dim >= 0 && (s.outputs.empty() || s.outputs[0].dim_of("tp") != r.sequence_dim))
    return false;
  auto split_over_tp = [&](size_t i) {
    return i < node.inputs.size() && node.inputs[i] != kNoId && s.inputs[i].uses("tp");
  };
  if (r.weighted) {
    bool activation_split = false, weight_split = false;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      if (split_over_tp(i)) (is_weight(node.inputs[i]) ? weight_split : activation_split) = true;
    }
    if (activation_split && !weight_split) return false;
  }
  if (r.context && context_forbids(node, s, space)) return false;
  if (r.from_parameters) {
    bool output_split = false;
    for (const Layout& out : s.outputs) output_split = output_split || out.uses("tp");
    bool input_split = false;
    for (size_t i = 0; i < s.inputs.size(); ++i) input_split = input_split || split_over_tp(i);
    if (output_split && !input_split) return false;
  }
  return true;
}

Status Spmd::lower_node(NodeId id) {
  const Node& node = src_.node(id);
  current_ = id;
  if (defers(node)) {
    deferred_cast_.emplace(node.outputs[0], id);
    return Status::ok();
  }
  ASSIGN_OR_RETURN(const bool tied, lower_tied_gradient_sum(id));
  if (tied) return Status::ok();
  std::vector<std::string> axes, without_sp;
  strategy_axes(node, axes, without_sp);
  const std::shared_ptr<const StrategySet> own =
      !sets_.empty() && sets_[id] ? std::move(sets_[id]) : own_set(id, node, axes);
  const std::vector<OpStrategy>& bases = own->strategies;
  if (context_attention(node)) return lower_context_attention(id, *own, axes);
  ASSIGN_OR_RETURN(const bool vocab_parallel, lower_vocab_parallel(id, *own));
  if (vocab_parallel) return Status::ok();
  // The layer's plan, where the inputs came as it planned: its strategy is taken without
  // pricing the others (unless a window over sp, which the plan does not weigh, may win).
  if (!planned_.empty() && planned_[id] && planned_[id]->own >= 0 &&
      without_sp.size() == axes.size() && policy_.overrides.empty()) {
    const OpStrategy& planned = bases.at(planned_[id]->own);
    if (strategy_cost(id, planned) < kInfinite) return emit(node, planned, nullptr, own.get());
  }
  const std::vector<Candidate> derived = derived_candidates(node, bases, axes, without_sp);
  // The choices, in order: the op's own strategies (shared, not copied), then the derived.
  std::vector<Choice> candidates;
  candidates.reserve(bases.size() + derived.size());
  for (size_t k = 0; k < bases.size(); ++k)
    candidates.push_back({&bases[k], nullptr, static_cast<int>(k)});
  for (const Candidate& c : derived)
    candidates.push_back({&c.strategy, c.window ? &*c.window : nullptr, -1});
  RETURN_IF_ERROR(apply_override(node, candidates));
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
    return cost + pricing_.compute(id, static_cast<double>(own->degree[k])) +
           storage_cost(node, s) + constant_split_cost(node, s);
  };
  auto cost_of = [&](const Choice& c) {
    return c.own >= 0 ? own_cost(c.own) : strategy_cost(id, *c.strategy);
  };
  const Recipe recipe = recipe_of(node);
  const IterationSpace* space = own->space ? &*own->space : nullptr;
  const Choice* best = nullptr;
  double best_cost = kInfinite;
  for (const Choice& c : candidates) {
    if (!recipe_admits(recipe, node, *c.strategy, space)) continue;
    const double cost = cost_of(c);
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
      if (cost_of(c) < kInfinite) best = &c;
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

}  // namespace autopar::spmd_detail
