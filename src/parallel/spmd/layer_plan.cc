// Tensor auto's plan of one layer's forward: a dynamic program over its nodes' strategies.
#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>

#include "spmd_pass.h"

namespace autopar::spmd_detail {

// Tensor auto plans each layer's forward as a whole. A pass in node order keeps, for every
// value the layer computes, the cheapest few layouts to have it in (each cost relative to
// its cheapest, so what the inputs before the layer cost cancels); a pass back from the
// layer's last node then chooses each node's strategy with what its chosen readers need.
// Costs are the greedy pass's (reshards as arithmetic, the node's share of its FLOPs), and
// the plan is kept only when, priced as one path, it beats choosing node by node. A layer's
// plan depends on its nodes and on the layouts its inputs arrive in, never on the layers
// after it: repeated layers are planned alike, in a model whose repeats are collapsed and in
// the whole model.
class Spmd::LayerPlanner {
 public:
  LayerPlanner(Spmd& spmd, NodeId first, NodeId end)
      : s_(spmd),
        first_(first),
        end_(end),
        count_(static_cast<size_t>(end - first)),
        training_(!spmd.in_.gradients.empty()),
        work_(training_ ? 3.0 : 1.0),
        cands_(count_),
        owns_(count_),
        degrees_(count_),
        totals_(count_) {}

  // `plan` gets a strategy per node, or none.
  void plan(StrategyCache::LayerPlan& plan);

 private:
  static constexpr size_t kOptions = 4;
  struct Option {
    Layout layout;
    double cost;
  };

  // The partial-sum axes `v` may arrive with.
  std::vector<std::vector<std::string>> partials(ValueId v) const;
  // Training: the backward splits as the forward does and moves each activation back the way
  // it came, and a parameter left whole over tp has its gradient all-reduced over tp.
  double moved_twice(ValueId v) const;
  // A parameter whole over tp read by a strategy that splits its work over tp: its gradient
  // is a partial sum over tp, all-reduced.
  double gradient_sum(const OpStrategy& st, const Node& node) const;
  // What a value from before the layer costs in `want`.
  double external(ValueId v, const Layout& want, const Node& consumer) const;
  // What `v` costs in `want`: from before the layer, or from the cheapest of its options.
  double in_cost(ValueId v, const Layout& want, const Node& consumer) const;
  // The node's candidates: its own strategies (in the shared set) and those derived from them
  // (kept in `derived_`), each with its index among the own ones (-1: derived) and the devices
  // its work divides over; an override keeps those whose output it names.
  std::vector<const OpStrategy*> candidates(NodeId id, const Node& node);
  // The node's candidates priced (totals_) and the options its outputs get (table_).
  void price(NodeId id);
  // The layer's stream and the layouts it is handed on in.
  std::map<ValueId, Layout> stream() const;
  // Back from the layer's end: each node's strategy given what its chosen readers need.
  std::vector<int> choose(const std::map<ValueId, Layout>& keep) const;
  // The plan (`chosen`) or node-by-node choice (greedy) priced alike, as one path.
  double path_cost(const std::vector<int>& chosen, bool greedy) const;

  Spmd& s_;
  const NodeId first_, end_;
  const size_t count_;
  const bool training_;
  const double work_;
  std::unordered_map<ValueId, std::vector<Option>> table_;
  std::set<ValueId> free_;  // casts of parameters not placed yet: lowered with their reader
  std::vector<std::vector<const OpStrategy*>> cands_;
  std::vector<std::vector<int>> owns_;
  std::vector<std::vector<double>> degrees_;
  std::deque<OpStrategy> derived_;
  std::vector<std::vector<double>> totals_;
};

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
      raw(static_cast<bool>(maps_.is_state[v]));
      raw(maps_.slot_param.count(v) > 0);
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
  LayerPlanner(*this, first, end).plan(plan);
  std::shared_ptr<const StrategyCache::LayerPlan> kept =
      key.empty() ? std::make_shared<const StrategyCache::LayerPlan>(std::move(plan))
                  : strategies_->add_layer_plan(key, std::move(plan));
  for (size_t k = 0; k < kept->size(); ++k)
    planned_[first + static_cast<NodeId>(k)] = (*kept)[k] ? &*(*kept)[k] : nullptr;
  plans_.push_back(std::move(kept));
}

std::vector<std::vector<std::string>> Spmd::LayerPlanner::partials(ValueId v) const {
  std::vector<std::vector<std::string>> out;
  if (v == kNoId) return out;
  auto add = [&](const Layout& l) {
    if (!l.is_partial()) return;
    std::vector<std::string> p = l.partial_axes();
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
  };
  if (auto it = table_.find(v); it != table_.end()) {
    for (const Option& o : it->second) add(o.layout);
  } else if (s_.layout_[v]) {
    add(*s_.layout_[v]);
  }
  return out;
}

double Spmd::LayerPlanner::moved_twice(ValueId v) const {
  const Value& value = s_.src_.value(v);
  return training_ && value.kind == ValueKind::kIntermediate && is_floating(value.dtype) ? 2.0
                                                                                         : 1.0;
}

double Spmd::LayerPlanner::gradient_sum(const OpStrategy& st, const Node& node) const {
  if (!training_ || !s_.has_axis("tp")) return 0.0;
  bool splits = false;
  for (const auto& [axis, loop] : st.assignment) splits = splits || axis == "tp";
  if (!splits) return 0.0;
  double cost = 0.0;
  for (size_t i = 0; i < st.inputs.size() && i < node.inputs.size(); ++i) {
    const ValueId v = node.inputs[i];
    if (v == kNoId || !(free_.count(v) || s_.is_free(v)) || st.inputs[i].uses("tp")) continue;
    const double bytes = static_cast<double>(s_.src_.value(v).num_bytes()) /
                         static_cast<double>(st.inputs[i].split_degree(s_.mesh_));
    cost += s_.pricing_.collective(Collective::kAllReduce, bytes, kTpAxis);
  }
  return cost;
}

double Spmd::LayerPlanner::external(ValueId v, const Layout& want, const Node& consumer) const {
  if (free_.count(v) || s_.is_free(v)) return s_.free_cost(v, want, consumer);
  const double cost = s_.input_cost(v, want, consumer);
  return cost < kInfinite ? cost * moved_twice(v) : cost;
}

double Spmd::LayerPlanner::in_cost(ValueId v, const Layout& want, const Node& consumer) const {
  if (v == kNoId) return 0.0;
  auto it = table_.find(v);
  if (it == table_.end()) return external(v, want, consumer);
  double best = kInfinite;
  for (const Option& o : it->second) {
    const double move = s_.reshard_cost(v, o.layout, want, consumer);
    if (move < kInfinite) best = std::min(best, o.cost + move * moved_twice(v));
  }
  return best;
}

std::vector<const OpStrategy*> Spmd::LayerPlanner::candidates(NodeId id, const Node& node) {
  const size_t k = static_cast<size_t>(id - first_);
  if (!s_.sets_[id]) {
    std::vector<std::string> axes, without_sp;
    s_.strategy_axes(node, axes, without_sp);
    s_.sets_[id] = s_.own_set(id, node, axes);
  }
  const StrategySet& set = *s_.sets_[id];
  std::vector<const OpStrategy*> cs;
  std::vector<int>& own = owns_[k];
  std::vector<double>& deg = degrees_[k];
  const size_t bases = set.strategies.size();
  for (size_t b = 0; b < bases; ++b) {
    cs.push_back(&set.strategies[b]);
    own.push_back(static_cast<int>(b));
    deg.push_back(static_cast<double>(set.degree[b]));
  }
  auto add_derived = [&](OpStrategy st, size_t base) {
    derived_.push_back(std::move(st));
    cs.push_back(&derived_.back());
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
  for (const OpOverride& o : s_.policy_.overrides) {
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
  return cs;
}

void Spmd::LayerPlanner::price(NodeId id) {
  const Node& node = s_.src_.node(id);
  const size_t k = static_cast<size_t>(id - first_);
  const std::vector<const OpStrategy*>& cs = cands_[k];
  const std::vector<double>& deg = degrees_[k];
  std::vector<double>& total = totals_[k];
  total.assign(cs.size(), kInfinite);
  // Per input, the cost of each layout asked for (strategies share a few).
  std::vector<std::vector<std::pair<const Layout*, double>>> asked(node.inputs.size());
  double lowest = kInfinite;
  for (size_t c = 0; c < cs.size(); ++c) {
    const OpStrategy& st = *cs[c];
    double t = work_ * s_.pricing_.compute(first_ + static_cast<NodeId>(k), deg[c]) +
               gradient_sum(st, node) + s_.constant_split_cost(node, st);
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
    cands_[k].clear();
    return;
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
    table_[o] = std::move(options);
  }
}

// The layer's stream: a value computed before the layer that it reads, and one it computes
// that the layers after it read, alike in type and shape (the residual stream). The plan
// hands the stream on in the layout it came in, so that the layer after plans alike: the
// estimate costs one of a run of repeated layers for all of them.
std::map<ValueId, Layout> Spmd::LayerPlanner::stream() const {
  std::map<ValueId, Layout> keep;
  std::vector<ValueId> arriving;
  for (NodeId id = first_; id < end_; ++id) {
    for (ValueId v : s_.src_.node(id).inputs) {
      if (v == kNoId || !s_.layout_[v]) continue;
      const Value& value = s_.src_.value(v);
      if (value.kind != ValueKind::kIntermediate || !is_floating(value.dtype) ||
          value.producer == kNoId || value.producer >= first_ ||
          s_.src_.node(value.producer).phase != Phase::kForward)
        continue;
      if (std::find(arriving.begin(), arriving.end(), v) == arriving.end()) arriving.push_back(v);
    }
  }
  for (NodeId id = first_; id < end_; ++id) {
    for (ValueId o : s_.src_.node(id).outputs) {
      if (o == kNoId) continue;
      const Value& out = s_.src_.value(o);
      const bool leaves = std::any_of(out.consumers.begin(), out.consumers.end(), [&](NodeId d) {
        return d >= end_ && s_.src_.node(d).phase == Phase::kForward;
      });
      if (!leaves) continue;
      for (ValueId v : arriving) {
        const Value& in = s_.src_.value(v);
        if (in.dtype == out.dtype && in.shape == out.shape) {
          keep.emplace(o, *s_.layout_[v]);
          break;
        }
      }
    }
  }
  return keep;
}

std::vector<int> Spmd::LayerPlanner::choose(const std::map<ValueId, Layout>& keep) const {
  std::vector<int> chosen(count_, -1);
  for (NodeId id = end_ - 1; id >= first_; --id) {
    const size_t k = static_cast<size_t>(id - first_);
    if (cands_[k].empty()) continue;
    const Node& node = s_.src_.node(id);
    double best = kInfinite;
    for (size_t c = 0; c < cands_[k].size(); ++c) {
      double score = totals_[k][c];
      if (score >= kInfinite) continue;
      bool kept = true;
      for (size_t j = 0; j < node.outputs.size() && j < cands_[k][c]->outputs.size(); ++j) {
        auto it = keep.find(node.outputs[j]);
        kept = kept && (it == keep.end() || it->second == cands_[k][c]->outputs[j]);
      }
      if (!kept) continue;
      for (size_t j = 0; j < node.outputs.size() && j < cands_[k][c]->outputs.size(); ++j) {
        const ValueId o = node.outputs[j];
        if (o == kNoId) continue;
        std::vector<const Layout*> paid;
        for (NodeId d : s_.src_.value(o).consumers) {
          if (d < first_ || d >= end_ || chosen[d - first_] < 0) continue;
          const Node& reader = s_.src_.node(d);
          const OpStrategy& rs = *cands_[d - first_][chosen[d - first_]];
          for (size_t i = 0; i < reader.inputs.size() && i < rs.inputs.size(); ++i) {
            if (reader.inputs[i] != o) continue;
            const Layout& want = rs.inputs[i];
            if (std::any_of(paid.begin(), paid.end(), [&](const Layout* l) { return *l == want; }))
              continue;
            paid.push_back(&want);
            const double move = s_.reshard_cost(o, cands_[k][c]->outputs[j], want, reader);
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
  return chosen;
}

double Spmd::LayerPlanner::path_cost(const std::vector<int>& chosen, bool greedy) const {
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
    const double move = s_.reshard_cost(v, it->second, want, consumer);
    return move < kInfinite ? move * moved_twice(v) : kInfinite;
  };
  double sum = 0.0;
  for (NodeId id = first_; id < end_; ++id) {
    const size_t k = static_cast<size_t>(id - first_);
    if (cands_[k].empty()) continue;
    const Node& node = s_.src_.node(id);
    auto price = [&](size_t c) {
      const OpStrategy& st = *cands_[k][c];
      double t = work_ * s_.pricing_.compute(id, degrees_[k][c]) + gradient_sum(st, node) +
                 s_.constant_split_cost(node, st);
      for (size_t i = 0; i < st.inputs.size() && i < node.inputs.size() && t < kInfinite; ++i)
        t += cost_in(node.inputs[i], st.inputs[i], node);
      return std::min(t, kInfinite);
    };
    int pick = chosen[k];
    double cost = kInfinite;
    if (greedy) {
      pick = -1;
      for (size_t c = 0; c < cands_[k].size(); ++c) {
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
    const OpStrategy& st = *cands_[k][pick];
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
}

void Spmd::LayerPlanner::plan(StrategyCache::LayerPlan& plan) {
  for (NodeId id = first_; id < end_; ++id) {
    const Node& node = s_.src_.node(id);
    if (s_.defers(node)) {
      free_.insert(node.outputs[0]);
      continue;
    }
    cands_[static_cast<size_t>(id - first_)] = candidates(id, node);
    price(id);
  }
  const std::vector<int> chosen = choose(stream());
  // A plan that leaves a mesh axis idle in the whole layer repeats that axis's work on every
  // device of it: the user asked for the axis, so the layer is chosen node by node instead.
  for (const std::string& axis : s_.policy_.axes) {
    bool used = false;
    for (size_t k = 0; k < count_ && !used; ++k) {
      if (chosen[k] < 0) continue;
      for (const auto& [a, loop] : cands_[k][chosen[k]]->assignment) used = used || a == axis;
    }
    if (!used) return;
  }
  const double planned = path_cost(chosen, false);
  if (planned >= kInfinite || !(planned < path_cost(chosen, true) * (1.0 - 1e-9))) return;
  for (size_t k = 0; k < count_; ++k) {
    if (chosen[k] >= 0) plan[k] = {owns_[k][chosen[k]], *cands_[k][chosen[k]]};
  }
}

}  // namespace autopar::spmd_detail
