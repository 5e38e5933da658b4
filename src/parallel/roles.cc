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

struct Placement {
  ProgramKind kind = ProgramKind::kForward;
  int32_t vstage = 0;
};

// A value cut between ranks: produced on `from`, first read on `to` by program `reader`.
struct Cut {
  ValueId value;
  int64_t from;
  int64_t to;
  int32_t sender;  // program index on `from` that sends
  int32_t reader;  // program index on `to` that receives
  int64_t tag;
};

bool is_comm(const Node& n) { return n.domain == kAutoparDomain; }

}  // namespace

bool kept_by_selective_recompute(const Graph& g, const Node& node,
                                 const std::function<bool(ValueId)>& is_state) {
  if (is_comm(node)) return true;
  static const char* const kKept[] = {"Gemm", "Conv", "ConvTranspose", "LayerNormalization",
                                      "BatchNormalization"};
  for (const char* op : kKept) {
    if (node.op_type == op) return true;
  }
  if (node.op_type == "MatMul") {
    for (ValueId in : node.inputs) {
      ValueId x = in;
      while (x != kNoId && g.value(x).producer != kNoId && is_comm(g.node(g.value(x).producer)))
        x = g.node(g.value(x).producer).inputs[0];
      if (x != kNoId && is_state(x)) return true;
    }
  }
  return false;
}

StatusOr<std::vector<Role>> build_roles(const SpmdResult& spmd,
                                        const std::vector<int32_t>& source_stage,
                                        const LoweringPolicy& policy, bool training) {
  const Graph& g = spmd.graph;
  const int64_t p = policy.stages;
  const int64_t v = policy.chunks;
  const int32_t last = static_cast<int32_t>(p * v - 1);
  auto rank_of = [&](int32_t vs) { return static_cast<int64_t>(vs) % p; };
  auto chunk_of = [&](int32_t vs) { return static_cast<int32_t>(vs / p); };
  // Program order on a rank: F0 .. F(v-1), B(v-1) .. B0, X, U.
  auto program_index = [&](ProgramKind kind, int32_t chunk) -> int32_t {
    switch (kind) {
      case ProgramKind::kForward:
        return chunk;
      case ProgramKind::kBackward:
        return static_cast<int32_t>(v + (v - 1 - chunk));
      case ProgramKind::kExchange:
        return static_cast<int32_t>(2 * v);
      case ProgramKind::kUpdate:
        return static_cast<int32_t>(2 * v + 1);
    }
    return 0;
  };
  const int32_t num_programs = static_cast<int32_t>(training ? 2 * v + 2 : v);

  std::vector<Placement> place(g.num_nodes());
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    const NodeId origin = spmd.origin[n];
    Placement& pl = place[n];
    pl.kind = node.phase == Phase::kForward    ? ProgramKind::kForward
              : node.phase == Phase::kBackward ? ProgramKind::kBackward
                                               : ProgramKind::kUpdate;
    int32_t s = origin >= 0 ? source_stage[origin] : -1;
    if (s < 0) s = pl.kind == ProgramKind::kForward ? last : 0;
    pl.vstage = std::clamp(s, 0, last);
  }

  // State by role-graph names.
  std::map<std::string, const StateSpec*> state_by_input, state_by_output;
  for (const StateSpec& s : spmd.state) {
    state_by_input[s.name] = &s;
    if (!s.output.empty()) state_by_output[s.output] = &s;
  }
  auto state_input = [&](ValueId id) -> const StateSpec* {
    auto it = state_by_input.find(g.value(id).name);
    return g.value(id).kind == ValueKind::kInput && it != state_by_input.end() ? it->second
                                                                               : nullptr;
  };

  // Update nodes per rank: what computes the new values of the state the rank holds.
  std::vector<std::vector<bool>> in_update(p, std::vector<bool>(g.num_nodes(), false));
  if (training) {
    for (int64_t r = 0; r < p; ++r) {
      std::set<std::string> held;
      for (NodeId n = 0; n < g.num_nodes(); ++n) {
        if (place[n].kind == ProgramKind::kUpdate || rank_of(place[n].vstage) != r) continue;
        for (ValueId in : g.node(n).inputs) {
          if (in != kNoId && state_input(in)) held.insert(g.value(in).name);
        }
      }
      bool grown = true;
      while (grown) {
        grown = false;
        std::vector<NodeId> work;
        for (const std::string& name : held) {
          const StateSpec* s = state_by_input[name];
          if (s->output.empty()) continue;
          auto out = g.find_value(s->output);
          if (!out) continue;
          const NodeId producer = g.value(*out).producer;
          if (producer != kNoId && place[producer].kind == ProgramKind::kUpdate &&
              !in_update[r][producer]) {
            work.push_back(producer);
          }
        }
        while (!work.empty()) {
          const NodeId n = work.back();
          work.pop_back();
          if (in_update[r][n]) continue;
          in_update[r][n] = true;
          grown = true;
          for (ValueId in : g.node(n).inputs) {
            if (in == kNoId) continue;
            if (const StateSpec* s = state_input(in)) held.insert(s->name);
            const NodeId producer = g.value(in).producer;
            if (producer != kNoId && place[producer].kind == ProgramKind::kUpdate)
              work.push_back(producer);
          }
        }
      }
    }
  }

  // Where each node runs: (rank, program index).
  auto runs_on = [&](NodeId n) {
    std::vector<std::pair<int64_t, int32_t>> at;
    if (place[n].kind == ProgramKind::kUpdate) {
      for (int64_t r = 0; r < p; ++r) {
        if (in_update[r][n]) at.emplace_back(r, program_index(ProgramKind::kUpdate, 0));
      }
    } else {
      at.emplace_back(rank_of(place[n].vstage),
                      program_index(place[n].kind, chunk_of(place[n].vstage)));
    }
    return at;
  };

  // Cuts: a value produced by a forward or backward program and read on another rank.
  std::vector<Cut> cuts;
  std::map<std::pair<ValueId, int64_t>, size_t> cut_index;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    if (place[n].kind == ProgramKind::kUpdate) continue;
    const int64_t a = rank_of(place[n].vstage);
    const int32_t sender = program_index(place[n].kind, chunk_of(place[n].vstage));
    for (ValueId out : g.node(n).outputs) {
      if (out == kNoId) continue;
      for (NodeId c : g.value(out).consumers) {
        for (const auto& [b, reader] : runs_on(c)) {
          if (b == a) continue;
          auto it = cut_index.find({out, b});
          if (it == cut_index.end()) {
            cut_index[{out, b}] = cuts.size();
            cuts.push_back({out, a, b, sender, reader, 0});
          } else {
            cuts[it->second].reader = std::min(cuts[it->second].reader, reader);
          }
        }
      }
    }
  }
  for (size_t i = 0; i < cuts.size(); ++i) {
    cuts[i].tag = static_cast<int64_t>(i) + 1;
    // A value read by an update is sent once, after every microbatch, by the sender's exchange.
    if (cuts[i].reader == program_index(ProgramKind::kUpdate, 0))
      cuts[i].sender = program_index(ProgramKind::kExchange, 0);
  }

  std::multimap<ValueId, size_t> cuts_of;  // value → its cuts
  for (size_t i = 0; i < cuts.size(); ++i) cuts_of.emplace(cuts[i].value, i);

  // Whether the backward program recomputes forward node `f` instead of reading its output.
  auto recomputable = [&](NodeId f) {
    if (policy.recompute == Recompute::kNone) return false;
    if (policy.recompute == Recompute::kFull) return true;
    return !kept_by_selective_recompute(g, g.node(f),
                                        [&](ValueId v) { return state_input(v) != nullptr; });
  };

  std::vector<Role> roles(p);
  for (int64_t r = 0; r < p; ++r) {
    Role& role = roles[r];
    role.id = static_cast<int32_t>(r);
    role.stage = r;
    Graph& rg = role.graph;
    rg.name = fmt::format("role_{}", r);
    rg.opsets = g.opsets;
    std::map<ValueId, ValueId> vmap;
    auto get = [&](ValueId x) -> StatusOr<ValueId> {
      auto it = vmap.find(x);
      if (it != vmap.end()) return it->second;
      const Value& val = g.value(x);
      Value copy = detached(val);
      if (val.kind == ValueKind::kInput) {
        const ValueId id = rg.add_value(std::move(copy));
        rg.add_input(id);
        return vmap[x] = id;
      }
      if (val.is_initializer()) return vmap[x] = rg.add_value(std::move(copy));
      return error("role {}: value '{}' is read before any program computes or receives it", r,
                   val.name);
    };
    // A node's inputs in the role graph: recomputed copies first, then the values themselves.
    auto inputs_of =
        [&](const Node& node,
            const std::map<ValueId, ValueId>& recomputed) -> StatusOr<std::vector<ValueId>> {
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
        ASSIGN_OR_RETURN(ValueId x, get(in));
        ins.push_back(x);
      }
      return ins;
    };
    auto emit_sends = [&](ValueId out, int32_t program) {
      const auto [first, end] = cuts_of.equal_range(out);
      for (auto it = first; it != end; ++it) {
        const Cut& c = cuts[it->second];
        if (c.from == r && c.sender == program)
          augment_send(rg, vmap.at(out), "pp", c.to, c.tag, g.node(g.value(out).producer).phase,
                       g.node(g.value(out).producer).layer);
      }
    };
    for (int32_t prog = 0; prog < num_programs; ++prog) {
      Program program;
      if (prog < v) {
        program.kind = ProgramKind::kForward;
        program.chunk = prog;
      } else if (prog < 2 * v) {
        program.kind = ProgramKind::kBackward;
        program.chunk = static_cast<int32_t>(2 * v - 1 - prog);
      } else if (prog == 2 * v) {
        program.kind = ProgramKind::kExchange;
      } else {
        program.kind = ProgramKind::kUpdate;
      }
      program.begin = rg.num_nodes();
      std::vector<NodeId> nodes;
      for (NodeId n = 0; n < g.num_nodes(); ++n) {
        for (const auto& [rank, index] : runs_on(n)) {
          if (rank == r && index == prog) nodes.push_back(n);
        }
      }
      // The exchange sends what other ranks' updates read; a rank without any has none.
      if (program.kind == ProgramKind::kExchange) {
        for (const Cut& c : cuts) {
          if (c.from != r || c.sender != prog) continue;
          ASSIGN_OR_RETURN(ValueId x, get(c.value));
          augment_send(rg, x, "pp", c.to, c.tag, Phase::kOptimizer, -1);
        }
        program.end = rg.num_nodes();
        if (program.end > program.begin) role.programs.push_back(program);
        continue;
      }
      // Receives first.
      for (const Cut& c : cuts) {
        if (c.to != r || c.reader != prog) continue;
        const Value& val = g.value(c.value);
        const Node& producer = g.node(val.producer);
        ASSIGN_OR_RETURN(ValueId id, augment_recv(rg, val.name, val.dtype, val.shape.dims, "pp",
                                                  c.from, c.tag, producer.phase, producer.layer));
        vmap[c.value] = id;
      }
      // Recomputation: forward nodes of this chunk whose outputs the backward reads.
      std::map<ValueId, ValueId> recomputed;
      if (program.kind == ProgramKind::kBackward && policy.recompute != Recompute::kNone) {
        const int32_t vs = static_cast<int32_t>(program.chunk * p + r);
        auto forward_here = [&](ValueId x) {
          const NodeId pr = g.value(x).producer;
          return pr != kNoId && place[pr].kind == ProgramKind::kForward && place[pr].vstage == vs;
        };
        std::set<NodeId> copy;
        std::vector<ValueId> work;
        for (NodeId n : nodes) {
          for (ValueId in : g.node(n).inputs) {
            if (in != kNoId && forward_here(in)) work.push_back(in);
          }
        }
        while (!work.empty()) {
          const ValueId x = work.back();
          work.pop_back();
          const NodeId pr = g.value(x).producer;
          if (copy.count(pr) || !recomputable(pr)) continue;
          // A value received from another rank is kept (it cannot be received twice).
          bool received = false;
          const auto [first, end] = cuts_of.equal_range(x);
          for (auto it = first; it != end; ++it) received |= cuts[it->second].to == r;
          if (received) continue;
          copy.insert(pr);
          for (ValueId in : g.node(pr).inputs) {
            if (in != kNoId && forward_here(in)) work.push_back(in);
          }
        }
        for (NodeId f : copy) {
          const Node& node = g.node(f);
          ASSIGN_OR_RETURN(std::vector<ValueId> ins, inputs_of(node, recomputed));
          ASSIGN_OR_RETURN(std::vector<ValueId> outs, duplicate(rg, g, node, ins, "/recompute"));
          for (size_t i = 0; i < outs.size(); ++i) {
            if (node.outputs[i] != kNoId) recomputed[node.outputs[i]] = outs[i];
          }
          rg.mutable_node(rg.num_nodes() - 1).phase = Phase::kBackward;
        }
      }
      for (NodeId n : nodes) {
        const Node& node = g.node(n);
        ASSIGN_OR_RETURN(std::vector<ValueId> ins, inputs_of(node, recomputed));
        ASSIGN_OR_RETURN(std::vector<ValueId> outs, duplicate(rg, g, node, ins, ""));
        for (size_t i = 0; i < outs.size(); ++i) {
          if (node.outputs[i] == kNoId) continue;
          if (rg.value(outs[i]).name != g.value(node.outputs[i]).name) {
            return error("role {}: value '{}' is computed twice", r, g.value(node.outputs[i]).name);
          }
          vmap[node.outputs[i]] = outs[i];
          if (program.kind != ProgramKind::kUpdate) emit_sends(node.outputs[i], prog);
        }
      }
      program.end = rg.num_nodes();
      role.programs.push_back(program);
    }
    // Outputs: the state this rank writes, the loss and model outputs it computes.
    for (ValueId out : g.outputs()) {
      auto it = vmap.find(out);
      if (it != vmap.end() && rg.value(it->second).producer != kNoId) rg.add_output(it->second);
    }
  }
  return roles;
}

}  // namespace autopar
