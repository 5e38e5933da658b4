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
    // Program of each node; stashed values: produced by a forward program, read by another.
    std::vector<int> program_at(g.num_nodes(), -1);
    for (size_t p = 0; p < role.programs.size(); ++p) {
      for (int32_t n = role.programs[p].begin; n < role.programs[p].end; ++n)
        program_at[n] = static_cast<int>(p);
    }
    std::vector<double> stash(role.programs.size(), 0.0), transient(role.programs.size(), 0.0);
    for (size_t p = 0; p < role.programs.size(); ++p) {
      const Program& prog = role.programs[p];
      // Liveness inside the program: a value lives from its producer to its last reader here.
      double live = 0, peak = 0;
      std::vector<std::vector<ValueId>> dies(prog.end - prog.begin);
      for (int32_t n = prog.begin; n < prog.end; ++n) {
        for (ValueId out : g.node(n).outputs) {
          if (out == kNoId) continue;
          const Value& v = g.value(out);
          bool escapes = g.is_output(out) || state_outputs.count(v.name);
          int32_t last = n;
          for (NodeId c : v.consumers) {
            if (program_at[c] != static_cast<int>(p))
              escapes = true;
            else
              last = std::max(last, c);
          }
          if (escapes) {
            if (prog.kind == ProgramKind::kForward && !state_outputs.count(v.name) &&
                !g.is_output(out))
              stash[p] += value_bytes(v);
            continue;
          }
          dies[last - prog.begin].push_back(out);
        }
      }
      for (int32_t n = prog.begin; n < prog.end; ++n) {
        for (ValueId out : g.node(n).outputs) {
          // New state (parameters, optimizer slots, accumulators) is written in place of the
          // old: it takes no memory of its own.
          if (out != kNoId && !state_outputs.count(g.value(out).name))
            live += value_bytes(g.value(out));
        }
        peak = std::max(peak, live);
        for (ValueId d : dies[n - prog.begin]) {
          if (!state_outputs.count(g.value(d).name)) live -= value_bytes(g.value(d));
        }
      }
      transient[p] = peak;
    }
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

}  // namespace autopar
