// Role graphs: the SPMD graph cut into pipeline ranks and programs, with Send/Recv on the
// cuts, duplicated update nodes where several ranks hold a piece of state, and recomputed
// forward nodes in the backward programs.
#include <algorithm>
#include <map>
#include <set>

#include "autopar/ir/graph_copy.h"
#include "autopar/parallel/lowering.h"
#include "autopar/parallel/primitives.h"

namespace autopar {
namespace {

// A value cut between ranks: produced on `from`, first read on `to` by program `reader`.
struct Cut {
  ValueId value;
  int64_t from;
  int64_t to;
  int32_t sender;  // program index on `from` that sends
  int32_t reader;  // program index on `to` that receives
  int64_t tag;
};

class RoleBuilder {
 public:
  RoleBuilder(const SpmdResult& spmd, const std::vector<int32_t>& source_stage,
              const LoweringPolicy& policy, bool training);

  StatusOr<std::vector<Role>> build() const;

 private:
  // One rank's graph as it is built: the role and the rank's value for each SPMD value.
  struct Rank {
    int64_t r;
    Role role;
    std::map<ValueId, ValueId> vmap;
  };

  int64_t rank_of(int32_t vs) const { return static_cast<int64_t>(vs) % p_; }
  int32_t chunk_of(int32_t vs) const { return static_cast<int32_t>(vs / p_); }
  // Program order on a rank: F0 .. F(v-1), B(v-1) .. B0, X, U.
  int32_t program_index(ProgramKind kind, int32_t chunk) const;
  ProgramKind kind_of(NodeId n) const {
    const Phase phase = g_.node(n).phase;
    return phase == Phase::kForward    ? ProgramKind::kForward
           : phase == Phase::kBackward ? ProgramKind::kBackward
                                       : ProgramKind::kUpdate;
  }
  const StateSpec* state_input(ValueId id) const;
  // Update nodes per rank: what computes the new values of the state the rank holds.
  void place_updates();
  // Where a node runs: (rank, program index) pairs.
  std::vector<std::pair<int64_t, int32_t>> runs_on(NodeId n) const;
  // Cuts: a value produced by a forward or backward program and read on another rank.
  void find_cuts();
  // Whether the backward program recomputes forward node `f` instead of reading its output.
  bool recomputable(NodeId f) const;

  StatusOr<Role> build_role(int64_t r) const;
  Status build_program(Rank& rank, int32_t prog) const;
  // The forward nodes of the program's chunk that its backward nodes `nodes` re-run: what they
  // read, and under full recompute every re-runnable node of their layers (Megatron-LM's and
  // PyTorch's checkpointing re-run a layer's whole forward, whether its backward reads a value
  // or not).
  std::vector<bool> recompute(const Rank& rank, const Program& program,
                              const std::vector<NodeId>& nodes) const;
  // Copies into the rank's graph the re-run nodes (`copy`) that backward node `n` reads, and
  // those they read, that are not copied yet: each re-run just before the first backward node
  // that needs it (under full recompute, with the rest of its layer), so a layer's recomputed
  // values live through that layer's backward only. `recomputed` takes their outputs by the
  // values they stand for; `layers` the layers re-run whole so far.
  Status recompute_for(Rank& rank, NodeId n, const std::vector<bool>& copy,
                       std::map<ValueId, ValueId>& recomputed, std::set<int32_t>& layers) const;
  // Copies re-run nodes `roots` and the re-run nodes they read, each after those it reads.
  Status copy_recomputed(Rank& rank, std::vector<NodeId> roots, const std::vector<bool>& copy,
                         std::map<ValueId, ValueId>& recomputed) const;
  StatusOr<ValueId> get(Rank& rank, ValueId x) const;
  // A node's inputs in the rank's graph: recomputed copies first, then the values themselves.
  StatusOr<std::vector<ValueId>> inputs_of(Rank& rank, const Node& node,
                                           const std::map<ValueId, ValueId>& recomputed) const;
  void emit_sends(Rank& rank, ValueId out, int32_t program) const;

  const SpmdResult& spmd_;
  const Graph& g_;
  const LoweringPolicy& policy_;
  const bool training_;
  const int64_t p_, v_;
  const int32_t num_programs_;
  std::vector<int32_t> vstage_;  // forward and backward nodes: their virtual stage
  std::map<std::string, const StateSpec*> state_by_input_;
  // Per node: what the recompute policy re-runs (partially_recomputed).
  std::vector<bool> partial_;
  std::vector<std::vector<bool>> in_update_;  // [rank][node]
  std::vector<Cut> cuts_;
  std::multimap<ValueId, size_t> cuts_of_;  // value → its cuts
};

RoleBuilder::RoleBuilder(const SpmdResult& spmd, const std::vector<int32_t>& source_stage,
                         const LoweringPolicy& policy, bool training)
    : spmd_(spmd),
      g_(spmd.graph),
      policy_(policy),
      training_(training),
      p_(policy.stages),
      v_(policy.chunks),
      num_programs_(static_cast<int32_t>(training ? 2 * policy.chunks + 2 : policy.chunks)),
      vstage_(place_by_origin(spmd, source_stage,
                              static_cast<int32_t>(policy.stages * policy.chunks - 1))),
      in_update_(policy.stages, std::vector<bool>(spmd.graph.num_nodes(), false)) {
  for (const StateSpec& s : spmd.state) state_by_input_[s.name] = &s;
  partial_ = partially_recomputed(policy.recompute, policy.regather, policy.recast_loss, g_,
                                  [&](ValueId v) { return state_input(v) != nullptr; });
  if (training_) place_updates();
  find_cuts();
}

int32_t RoleBuilder::program_index(ProgramKind kind, int32_t chunk) const {
  switch (kind) {
    case ProgramKind::kForward:
      return chunk;
    case ProgramKind::kBackward:
      return static_cast<int32_t>(v_ + (v_ - 1 - chunk));
    case ProgramKind::kExchange:
      return static_cast<int32_t>(2 * v_);
    case ProgramKind::kUpdate:
      return static_cast<int32_t>(2 * v_ + 1);
  }
  return 0;
}

const StateSpec* RoleBuilder::state_input(ValueId id) const {
  auto it = state_by_input_.find(g_.value(id).name);
  return g_.value(id).kind == ValueKind::kInput && it != state_by_input_.end() ? it->second
                                                                               : nullptr;
}

void RoleBuilder::place_updates() {
  std::vector<int32_t> rank(static_cast<size_t>(g_.num_nodes()), -1);
  for (NodeId n = 0; n < g_.num_nodes(); ++n) {
    if (kind_of(n) != ProgramKind::kUpdate) rank[n] = static_cast<int32_t>(rank_of(vstage_[n]));
  }
  in_update_ = updates_by_place(
      g_, rank, static_cast<int32_t>(p_),
      [&](NodeId n) { return kind_of(n) == ProgramKind::kUpdate; },
      [&](ValueId v) {
        const StateSpec* s = state_input(v);
        if (!s || s->output.empty()) return kNoId;
        auto out = g_.find_value(s->output);
        const NodeId producer = out ? g_.value(*out).producer : kNoId;
        return producer != kNoId && kind_of(producer) == ProgramKind::kUpdate ? producer : kNoId;
      });
}

std::vector<std::pair<int64_t, int32_t>> RoleBuilder::runs_on(NodeId n) const {
  std::vector<std::pair<int64_t, int32_t>> at;
  if (kind_of(n) == ProgramKind::kUpdate) {
    for (int64_t r = 0; r < p_; ++r) {
      if (in_update_[r][n]) at.emplace_back(r, program_index(ProgramKind::kUpdate, 0));
    }
  } else {
    at.emplace_back(rank_of(vstage_[n]), program_index(kind_of(n), chunk_of(vstage_[n])));
  }
  return at;
}

void RoleBuilder::find_cuts() {
  std::map<std::pair<ValueId, int64_t>, size_t> cut_index;
  for (NodeId n = 0; n < g_.num_nodes(); ++n) {
    if (kind_of(n) == ProgramKind::kUpdate) continue;
    const int64_t a = rank_of(vstage_[n]);
    const int32_t sender = program_index(kind_of(n), chunk_of(vstage_[n]));
    for (ValueId out : g_.node(n).outputs) {
      if (out == kNoId) continue;
      for (NodeId c : g_.value(out).consumers) {
        for (const auto& [b, reader] : runs_on(c)) {
          if (b == a) continue;
          auto it = cut_index.find({out, b});
          if (it == cut_index.end()) {
            cut_index[{out, b}] = cuts_.size();
            cuts_.push_back({out, a, b, sender, reader, 0});
          } else {
            cuts_[it->second].reader = std::min(cuts_[it->second].reader, reader);
          }
        }
      }
    }
  }
  for (size_t i = 0; i < cuts_.size(); ++i) {
    cuts_[i].tag = static_cast<int64_t>(i) + 1;
    // A value read by an update is sent once, after every microbatch, by the sender's exchange.
    if (cuts_[i].reader == program_index(ProgramKind::kUpdate, 0))
      cuts_[i].sender = program_index(ProgramKind::kExchange, 0);
    cuts_of_.emplace(cuts_[i].value, i);
  }
}

bool RoleBuilder::recomputable(NodeId f) const { return partial_[f]; }

StatusOr<ValueId> RoleBuilder::get(Rank& rank, ValueId x) const {
  auto it = rank.vmap.find(x);
  if (it != rank.vmap.end()) return it->second;
  Graph& rg = rank.role.graph;
  const Value& val = g_.value(x);
  Value copy = detached(val);
  if (val.kind == ValueKind::kInput) {
    const ValueId id = rg.add_value(std::move(copy));
    rg.add_input(id);
    return rank.vmap[x] = id;
  }
  if (val.is_initializer()) return rank.vmap[x] = rg.add_value(std::move(copy));
  return error("role {}: value '{}' is read before any program computes or receives it", rank.r,
               val.name);
}

StatusOr<std::vector<ValueId>> RoleBuilder::inputs_of(
    Rank& rank, const Node& node, const std::map<ValueId, ValueId>& recomputed) const {
  std::vector<ValueId> ins;
  for (ValueId in : node.inputs) {
    if (in == kNoId) {
      ins.push_back(kNoId);
      continue;
    }
    auto it = recomputed.find(in);
    if (it != recomputed.end()) {
      ins.push_back(it->second);
      continue;
    }
    ASSIGN_OR_RETURN(ValueId x, get(rank, in));
    ins.push_back(x);
  }
  return ins;
}

void RoleBuilder::emit_sends(Rank& rank, ValueId out, int32_t program) const {
  const auto [first, end] = cuts_of_.equal_range(out);
  for (auto it = first; it != end; ++it) {
    const Cut& c = cuts_[it->second];
    const Node& producer = g_.node(g_.value(out).producer);
    if (c.from == rank.r && c.sender == program)
      augment_send(rank.role.graph, rank.vmap.at(out), "pp", c.to, c.tag, producer.phase,
                   producer.layer);
  }
}

std::vector<bool> RoleBuilder::recompute(const Rank& rank, const Program& program,
                                         const std::vector<NodeId>& nodes) const {
  const int32_t vs = static_cast<int32_t>(program.chunk * p_ + rank.r);
  auto forward_here = [&](ValueId x) {
    const NodeId pr = g_.value(x).producer;
    return pr != kNoId && kind_of(pr) == ProgramKind::kForward && vstage_[pr] == vs;
  };
  std::vector<ValueId> roots;
  for (NodeId n : nodes) {
    for (ValueId in : g_.node(n).inputs) {
      if (in != kNoId) roots.push_back(in);
    }
  }
  // (Roots of other chunks fall outside the closure: they are not forward_here.)
  const std::vector<ValueId> whole = whole_layer_roots(policy_.recompute, partial_, g_);
  roots.insert(roots.end(), whole.begin(), whole.end());
  return recompute_closure(g_, std::move(roots), [&](ValueId x) {
    if (!forward_here(x) || !recomputable(g_.value(x).producer)) return false;
    // A value received from another rank is kept (it cannot be received twice).
    const auto [first, end] = cuts_of_.equal_range(x);
    for (auto it = first; it != end; ++it) {
      if (cuts_[it->second].to == rank.r) return false;
    }
    return true;
  });
}

Status RoleBuilder::recompute_for(Rank& rank, NodeId n, const std::vector<bool>& copy,
                                  std::map<ValueId, ValueId>& recomputed,
                                  std::set<int32_t>& layers) const {
  const int32_t layer = g_.node(n).layer;
  if (policy_.recompute == Recompute::kFull && layer >= 0 && layers.insert(layer).second) {
    std::vector<NodeId> whole;
    for (NodeId f = g_.num_nodes(); f-- > 0;) {  // the last first: copied in order
      if (copy[f] && g_.node(f).layer == layer) whole.push_back(f);
    }
    RETURN_IF_ERROR(copy_recomputed(rank, whole, copy, recomputed));
  }
  std::vector<NodeId> read;
  for (ValueId in : g_.node(n).inputs) {
    const NodeId p = in == kNoId ? kNoId : g_.value(in).producer;
    if (p != kNoId && copy[p] && !recomputed.count(in)) read.push_back(p);
  }
  return copy_recomputed(rank, read, copy, recomputed);
}

Status RoleBuilder::copy_recomputed(Rank& rank, std::vector<NodeId> roots,
                                    const std::vector<bool>& copy,
                                    std::map<ValueId, ValueId>& recomputed) const {
  auto needed = [&](ValueId in) {
    if (in == kNoId) return kNoId;
    const NodeId p = g_.value(in).producer;
    return p != kNoId && copy[p] && !recomputed.count(in) ? p : kNoId;
  };
  // Depth first over what the roots read, each copy after the copies it reads.
  std::vector<std::pair<NodeId, bool>> stack;
  for (NodeId root : roots) stack.emplace_back(root, false);
  Graph& rg = rank.role.graph;
  while (!stack.empty()) {
    const auto [f, ready] = stack.back();
    stack.pop_back();
    const Node& node = g_.node(f);
    const ValueId first_output = node.outputs.empty() ? kNoId : node.outputs[0];
    if (first_output != kNoId && recomputed.count(first_output)) continue;
    if (!ready) {
      stack.emplace_back(f, true);
      for (ValueId in : node.inputs) {
        if (const NodeId p = needed(in); p != kNoId) stack.emplace_back(p, false);
      }
      continue;
    }
    ASSIGN_OR_RETURN(std::vector<ValueId> ins, inputs_of(rank, node, recomputed));
    ASSIGN_OR_RETURN(std::vector<ValueId> outs, duplicate(rg, g_, node, ins, "/recompute"));
    for (size_t i = 0; i < outs.size(); ++i) {
      if (node.outputs[i] != kNoId) recomputed[node.outputs[i]] = outs[i];
    }
    rg.mutable_node(rg.num_nodes() - 1).phase = Phase::kBackward;
  }
  return Status::ok();
}

Status RoleBuilder::build_program(Rank& rank, int32_t prog) const {
  Graph& rg = rank.role.graph;
  Program program;
  if (prog < v_) {
    program.kind = ProgramKind::kForward;
    program.chunk = prog;
  } else if (prog < 2 * v_) {
    program.kind = ProgramKind::kBackward;
    program.chunk = static_cast<int32_t>(2 * v_ - 1 - prog);
  } else {
    program.kind = prog == 2 * v_ ? ProgramKind::kExchange : ProgramKind::kUpdate;
  }
  program.begin = rg.num_nodes();
  // The exchange sends what other ranks' updates read; a rank without any has none.
  if (program.kind == ProgramKind::kExchange) {
    for (const Cut& c : cuts_) {
      if (c.from != rank.r || c.sender != prog) continue;
      ASSIGN_OR_RETURN(ValueId x, get(rank, c.value));
      augment_send(rg, x, "pp", c.to, c.tag, Phase::kOptimizer, -1);
    }
    program.end = rg.num_nodes();
    if (program.end > program.begin) rank.role.programs.push_back(program);
    return Status::ok();
  }
  std::vector<NodeId> nodes;
  for (NodeId n = 0; n < g_.num_nodes(); ++n) {
    for (const auto& [r, index] : runs_on(n)) {
      if (r == rank.r && index == prog) nodes.push_back(n);
    }
  }
  // Receives first.
  for (const Cut& c : cuts_) {
    if (c.to != rank.r || c.reader != prog) continue;
    const Value& val = g_.value(c.value);
    const Node& producer = g_.node(val.producer);
    ASSIGN_OR_RETURN(ValueId id, augment_recv(rg, val.name, val.dtype, val.shape.dims, "pp", c.from,
                                              c.tag, producer.phase, producer.layer));
    rank.vmap[c.value] = id;
  }
  std::map<ValueId, ValueId> recomputed;
  std::set<int32_t> layers_rerun;
  std::vector<bool> copy;
  if (program.kind == ProgramKind::kBackward) copy = recompute(rank, program, nodes);
  for (NodeId n : nodes) {
    const Node& node = g_.node(n);
    if (!copy.empty()) RETURN_IF_ERROR(recompute_for(rank, n, copy, recomputed, layers_rerun));
    ASSIGN_OR_RETURN(std::vector<ValueId> ins, inputs_of(rank, node, recomputed));
    ASSIGN_OR_RETURN(std::vector<ValueId> outs, duplicate(rg, g_, node, ins, ""));
    for (size_t i = 0; i < outs.size(); ++i) {
      if (node.outputs[i] == kNoId) continue;
      if (rg.value(outs[i]).name != g_.value(node.outputs[i]).name) {
        return error("role {}: value '{}' is computed twice", rank.r,
                     g_.value(node.outputs[i]).name);
      }
      rank.vmap[node.outputs[i]] = outs[i];
      if (program.kind != ProgramKind::kUpdate) emit_sends(rank, node.outputs[i], prog);
    }
  }
  program.end = rg.num_nodes();
  rank.role.programs.push_back(program);
  return Status::ok();
}

StatusOr<Role> RoleBuilder::build_role(int64_t r) const {
  Rank rank{r, {}, {}};
  Role& role = rank.role;
  role.id = static_cast<int32_t>(r);
  role.stage = r;
  role.graph.name = fmt::format("role_{}", r);
  role.graph.opsets = g_.opsets;
  for (int32_t prog = 0; prog < num_programs_; ++prog) RETURN_IF_ERROR(build_program(rank, prog));
  // Outputs: the state this rank writes, the loss and model outputs it computes.
  for (ValueId out : g_.outputs()) {
    auto it = rank.vmap.find(out);
    if (it != rank.vmap.end() && role.graph.value(it->second).producer != kNoId)
      role.graph.add_output(it->second);
  }
  return std::move(role);
}

StatusOr<std::vector<Role>> RoleBuilder::build() const {
  std::vector<Role> roles;
  for (int64_t r = 0; r < p_; ++r) {
    ASSIGN_OR_RETURN(Role role, build_role(r));
    roles.push_back(std::move(role));
  }
  return roles;
}

}  // namespace

std::vector<int32_t> place_by_origin(const SpmdResult& spmd,
                                     const std::vector<int32_t>& source_place, int32_t last) {
  const Graph& g = spmd.graph;
  std::vector<int32_t> place(static_cast<size_t>(g.num_nodes()), -1);
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Phase phase = g.node(n).phase;
    if (phase == Phase::kOptimizer) continue;
    const NodeId origin = spmd.origin[n];
    int32_t s = origin >= 0 ? source_place[origin] : -1;
    if (s < 0) s = phase == Phase::kForward ? last : 0;
    place[n] = std::clamp(s, 0, last);
  }
  return place;
}

std::vector<std::vector<bool>> updates_by_place(const Graph& g, const std::vector<int32_t>& place,
                                                int32_t places,
                                                const std::function<bool(NodeId)>& is_update,
                                                const std::function<NodeId(ValueId)>& writer_of) {
  std::vector<std::vector<bool>> runs(static_cast<size_t>(places),
                                      std::vector<bool>(static_cast<size_t>(g.num_nodes()), false));
  for (int32_t r = 0; r < places; ++r) {
    std::vector<bool>& here = runs[r];
    std::vector<NodeId> work;
    auto hold = [&](ValueId v) {
      if (const NodeId writer = writer_of(v); writer != kNoId && !here[writer])
        work.push_back(writer);
    };
    for (NodeId n = 0; n < g.num_nodes(); ++n) {
      if (is_update(n) || place[n] != r) continue;
      for (ValueId in : g.node(n).inputs) {
        if (in != kNoId) hold(in);
      }
    }
    while (!work.empty()) {
      const NodeId n = work.back();
      work.pop_back();
      if (here[n]) continue;
      here[n] = true;
      for (ValueId in : g.node(n).inputs) {
        if (in == kNoId) continue;
        hold(in);
        const NodeId producer = g.value(in).producer;
        if (producer != kNoId && is_update(producer) && !here[producer]) work.push_back(producer);
      }
    }
  }
  return runs;
}

std::vector<bool> recompute_closure(const Graph& g, std::vector<ValueId> roots,
                                    const std::function<bool(ValueId)>& recomputes) {
  std::vector<bool> recomputed(static_cast<size_t>(g.num_nodes()), false);
  while (!roots.empty()) {
    const ValueId v = roots.back();
    roots.pop_back();
    const NodeId p = v == kNoId ? kNoId : g.value(v).producer;
    if (p == kNoId || recomputed[p] || !recomputes(v)) continue;
    recomputed[p] = true;
    for (ValueId in : g.node(p).inputs) {
      if (in != kNoId) roots.push_back(in);
    }
  }
  return recomputed;
}

StatusOr<std::vector<Role>> build_roles(const SpmdResult& spmd,
                                        const std::vector<int32_t>& source_stage,
                                        const LoweringPolicy& policy, bool training) {
  return RoleBuilder(spmd, source_stage, policy, training).build();
}

}  // namespace autopar
