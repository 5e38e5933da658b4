// The memory model of a plan, per role (devices of a role hold the same amounts): the state
// it keeps between steps (parameters, gradient accumulators, optimizer state, by their shard
// shapes) and the activations alive at the worst point of its schedule: the values its
// forward programs stash for their backward, times the microbatches in flight, plus the
// transient peak of the program running then.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autopar/parallel/lowering.h"
#include "autopar/parallel/plan.h"

namespace autopar {

struct RoleMemory {
  double parameter_bytes = 0;
  double gradient_bytes = 0;    // accumulators kept across microbatches
  double optimizer_bytes = 0;   // optimizer slots and other state (BatchNorm statistics)
  double stash_bytes = 0;       // per microbatch: forward values the backward reads
  int64_t in_flight = 0;        // most microbatches stashed at once under the schedule
  double transient_bytes = 0;   // the largest program's own peak, beyond its stash
  double activation_bytes = 0;  // peak of stash · in flight + transient over the schedule
  double paradigm_bytes = 0;    // the paradigms' own terms in an estimate (Paradigm::estimate)
  double total_bytes() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + activation_bytes + paradigm_bytes;
  }
};

// Per role, in role order.
std::vector<RoleMemory> plan_memory(const Plan& plan);

// The paradigms' own terms (Paradigm::estimate) summed, for a scheme whose pipeline ranks hold
// `ranks` (rank_bytes: one per rank).
EstimateTerms paradigm_terms(const Scheme& scheme, const HardwareProfile& profile,
                             const std::vector<RoleMemory>& ranks);
// Whether any paradigm has terms of its own.
bool paradigms_add_terms();

// Liveness, as both the plan's memory (per program) and the estimate (per layer and phase)
// count it: each group's peak of live bytes when its nodes run in node order. A node's
// outputs live from it to their last reader, or past the group's end where a reader is in
// another group or `escapes(v)` (a graph output, new state); values `in_place(v)` (new state,
// written over the old) take no memory. `group[n]` < 0: the node is in none.
std::vector<double> group_peak_bytes(const Graph& g, const std::vector<int32_t>& group,
                                     int32_t groups, const std::function<bool(ValueId)>& escapes,
                                     const std::function<bool(ValueId)>& in_place);

}  // namespace autopar
