// Memory per role from the role graphs, their programs and their schedules.
#include "autopar/cost/memory.h"

#include <algorithm>
#include <map>
#include <set>

namespace autopar {
namespace {

double shard_bytes(const StateSpec& s, const DeviceMesh& mesh) {
  double elements = 1;
  for (int64_t d : s.layout.shard_shape(s.shape, mesh)) elements *= static_cast<double>(d);
  return elements * static_cast<double>(dtype_size(s.dtype));
}

double value_bytes(const Value& v) { return static_cast<double>(v.num_bytes()); }

}  // namespace

std::vector<RoleMemory> plan_memory(const Plan& plan) {
  std::map<std::string, const StateSpec*> state;
  std::set<std::string> state_outputs;
  for (const StateSpec& s : plan.state) {
    state[s.name] = &s;
    if (!s.output.empty()) state_outputs.insert(s.output);
  }
  std::vector<RoleMemory> result;
  for (const Role& role : plan.roles) {
    RoleMemory m;
    const Graph& g = role.graph;
    for (ValueId in : g.inputs()) {
      auto it = state.find(g.value(in).name);
      if (it == state.end()) continue;
      const StateSpec& s = *it->second;
      const double bytes = shard_bytes(s, plan.scheme.mesh);
      if (s.is_parameter) {
        m.parameter_bytes += bytes;
      } else if (s.init == StateSpec::Init::kZeros) {
        m.gradient_bytes += bytes;
      } else {
        m.optimizer_bytes += bytes;
      }
    }
    // The program of each node.
    std::vector<int32_t> program_at(g.num_nodes(), -1);
    for (size_t p = 0; p < role.programs.size(); ++p) {
      for (int32_t n = role.programs[p].begin; n < role.programs[p].end; ++n)
        program_at[n] = static_cast<int32_t>(p);
    }
    // Stashed values: produced by a forward program and read by another.
    std::vector<double> stash(role.programs.size(), 0.0);
    auto state_output = [&](ValueId v) { return state_outputs.count(g.value(v).name) > 0; };
    for (size_t p = 0; p < role.programs.size(); ++p) {
      const Program& prog = role.programs[p];
      if (prog.kind != ProgramKind::kForward) continue;
      for (int32_t n = prog.begin; n < prog.end; ++n) {
        for (ValueId out : g.node(n).outputs) {
          if (out == kNoId || g.is_output(out) || state_output(out)) continue;
          const std::vector<NodeId>& readers = g.value(out).consumers;
          if (std::any_of(readers.begin(), readers.end(),
                          [&](NodeId c) { return program_at[c] != static_cast<int>(p); }))
            stash[p] += value_bytes(g.value(out));
        }
      }
    }
    const std::vector<double> transient = group_peak_bytes(
        g, program_at, static_cast<int32_t>(role.programs.size()),
        [&](ValueId v) { return g.is_output(v) || state_output(v); }, state_output);
    // Walk the schedule: a forward adds its stash, the matching backward frees it.

    double held = 0, worst = 0;
    int64_t flights = 0;
    std::map<int32_t, int64_t> open;  // chunk → forwards not yet backed
    for (const ScheduleStep& s : role.schedule) {
      const int p = role.program_of(s);
      if (p < 0) continue;
      if (s.kind == ProgramKind::kForward) {
        worst = std::max(worst, held + transient[p]);
        held += stash[p];
        ++open[s.chunk];
      } else {
        worst = std::max(worst, held + transient[p]);
        if (s.kind == ProgramKind::kBackward) {
          for (size_t q = 0; q < role.programs.size(); ++q) {
            if (role.programs[q].kind == ProgramKind::kForward && role.programs[q].chunk == s.chunk)
              held -= stash[q];
          }
          --open[s.chunk];
        }
      }
      int64_t total = 0;
      for (const auto& [chunk, count] : open) total += count;
      flights = std::max(flights, total);
      m.transient_bytes = std::max(m.transient_bytes, transient[p]);
    }
    for (size_t p = 0; p < role.programs.size(); ++p) {
      if (role.programs[p].kind == ProgramKind::kForward) m.stash_bytes += stash[p];
    }
    m.in_flight = flights;
    m.activation_bytes = worst;
    result.push_back(m);
  }
  return result;
}

std::vector<double> group_peak_bytes(const Graph& g, const std::vector<int32_t>& group,
                                     int32_t groups, const std::function<bool(ValueId)>& escapes,
                                     const std::function<bool(ValueId)>& in_place) {
  std::vector<double> live(static_cast<size_t>(groups), 0.0), peak(live);
  std::vector<std::vector<ValueId>> dies(static_cast<size_t>(g.num_nodes()));
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    if (group[n] < 0) continue;
    for (ValueId out : g.node(n).outputs) {
      if (out == kNoId || escapes(out)) continue;
      NodeId last = n;
      bool local = true;
      for (NodeId r : g.value(out).consumers) {
        local = local && group[r] == group[n];
        last = std::max(last, r);
      }
      if (local) dies[last].push_back(out);
    }
  }
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const int32_t k = group[n];
    if (k < 0) continue;
    for (ValueId out : g.node(n).outputs) {
      if (out != kNoId && !in_place(out)) live[k] += value_bytes(g.value(out));
    }
    peak[k] = std::max(peak[k], live[k]);
    for (ValueId d : dies[n]) live[group[g.value(d).producer]] -= value_bytes(g.value(d));
  }
  return peak;
}

EstimateTerms paradigm_terms(const Scheme& scheme, const HardwareProfile& profile,
                             const std::vector<RoleMemory>& ranks) {
  EstimateTerms sum;
  sum.rank_bytes.assign(ranks.size(), 0.0);
  for (const Paradigm& paradigm : paradigms()) {
    if (!paradigm.estimate) continue;
    const EstimateTerms terms = paradigm.estimate(scheme, profile, ranks);
    sum.step_s += terms.step_s;
    for (size_t r = 0; r < terms.rank_bytes.size() && r < ranks.size(); ++r)
      sum.rank_bytes[r] += terms.rank_bytes[r];
  }
  return sum;
}

bool paradigms_add_terms() {
  const std::vector<Paradigm>& all = paradigms();
  return std::any_of(all.begin(), all.end(), [](const Paradigm& p) { return bool(p.estimate); });
}

}  // namespace autopar
