// The search engine: every scheme of a space on a cluster, scored by the analytic estimate,
// the best few re-scored by the simulator on their built plans.
//
// 1. Meshes: every tp × pp × dp × sp the space allows whose product is the cluster's devices
//    (tp · sp within a node when constrained, pp at most the layers, dp dividing the batch);
//    a mesh whose parameter and optimizer state cannot fit even at the space's highest ZeRO
//    stage is pruned before anything is lowered.
// 2. Per mesh, microbatch, tensor strategy, ZeRO stage and precision: the layer costs of its
//    SPMD program (each distinct layer once, Estimator), in parallel with oneTBB.
// 3. Per such configuration: schedules, chunks and recomputation; pipeline stages from a
//    dynamic program over the layer costs (the slowest stage's forward and backward time, or
//    its microbatches' and update's) or balanced forward FLOPs, whichever is faster, or every
//    partition under --exhaustive.
// 4. Results are ordered by predicted step time, then by the scheme's text: deterministic
//    for a given input whatever the thread count. The best few are simulated and rank first,
//    by the simulation.
// 5. Baselines: each family's best (data parallelism; Megatron-LM's recipe), or why none fits.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autopar/cost/estimate.h"
#include "autopar/search/space.h"

namespace autopar {

struct SearchProblem {
  int64_t devices = 0;
  int64_t devices_per_node = 1;
  int64_t global_batch = 0;
  int32_t layers = 0;
  double parameters = 0;       // trainable elements of the model
  double optimizer_bytes = 8;  // optimizer state per parameter (Adam: two fp32 moments)
  bool training = true;        // false: inference (no ZeRO stages or recomputation to vary)
  bool transformer = true;     // attention in its layers (Megatron-LM's recipe applies)
};

struct SearchOptions {
  int top = 5;              // candidates kept in the result
  int simulate_top = 3;     // re-scored by the simulator on their built plans
  bool exhaustive = false;  // every stage partition, not the dynamic program's
  // Called with the fraction of configurations done (from the calling thread's view).
  std::function<void(double)> progress;
  // Builds and simulates a scheme's plan: its simulated step time (for simulate_top and the
  // baselines). Called from several threads at once.
  std::function<StatusOr<double>(const Scheme&)> simulate;
  // Restricts the search to the schemes a target framework runs (autotune --export): false
  // leaves a scheme out. Asked of each configuration (no stages yet), of each scheme priced
  // over one, and of each stage partition tried; even partitions are tried too.
  std::function<bool(const Scheme&)> admissible;
};

struct Candidate {
  Scheme scheme;
  Estimate estimate;
  std::optional<double> simulated_s;  // when re-scored
  double step_s() const { return simulated_s ? *simulated_s : estimate.step_time_s; }
};

struct Baseline {
  std::string name;                    // "data parallel", "megatron"
  std::optional<Candidate> candidate;  // none when nothing of its kind fits
  std::string note;                    // how it was chosen, or why it does not fit
};

// One feasible candidate of a search, for plotting step time against memory.
struct CandidatePoint {
  double step_s = 0;        // estimated
  double memory_bytes = 0;  // the busiest device's, with the reserve
  std::string family;       // paradigm_family of its scheme
};

// The paradigms a scheme combines, by the mesh axes it uses: "dp", "dp·tp", "pp·dp·tp",
// "cp·tp" ("1 device" for none).
std::string paradigm_family(const Scheme& scheme);

struct SearchResult {
  // Best first: the simulated candidates by their simulated step, then the others by their
  // estimate (an estimate-only row is never placed above a simulated one it might beat only
  // because the estimate is optimistic).
  std::vector<Candidate> top;
  std::vector<Baseline> baselines;
  // Every feasible candidate priced (the best stage partition of each scheme), and the best
  // of each paradigm family by its estimate, fastest first.
  std::vector<CandidatePoint> points;
  std::vector<Candidate> family_best;
  int64_t meshes = 0;                 // meshes the space and cluster allow
  int64_t meshes_pruned = 0;          // pruned by memory before lowering
  int64_t configurations = 0;         // layer costs computed
  int64_t configurations_pruned = 0;  // ZeRO stages whose state cannot fit, before lowering
  int64_t candidates_evaluated = 0;
  int64_t feasible = 0;
  double search_time_s = 0;
};

// The meshes a space allows on `problem`'s cluster, pp outermost and tp innermost; an empty
// result is an error naming the constraint that emptied it.
StatusOr<std::vector<DeviceMesh>> enumerate_meshes(const SearchSpace& space,
                                                   const SearchProblem& problem);

StatusOr<SearchResult> search(const SearchSpace& space, const SearchProblem& problem,
                              CostModel& estimator, const SearchOptions& options);

// What else a pipeline stage pays, for partition_stages: sending a microbatch's activations
// over the cut after layer `last` (and receiving their gradients back) as stage `stage`, and
// the memory a device has for it. With `in_flight` per stage (the microbatches it keeps
// stashed at once), a stage that does not fit is not allowed.
struct StageLimits {
  std::function<double(int64_t stage, int32_t last)> cut_seconds;
  std::vector<int64_t> in_flight;  // per stage; empty: memory is not checked
  double capacity = 0;             // bytes per device for the plan
};

// Contiguous layer ranges for `stages` stages that minimise the slowest stage, by dynamic
// programming over the layers: its forward and backward of one microbatch under `recompute`,
// or with `microbatches` > 0, of that many microbatches and its update. With `limits`, a stage
// also pays its cut, stages whose state and stashed activations exceed the capacity are not
// allowed, and of equally slow partitions the one whose cuts cost least wins (empty when no
// partition fits).
std::vector<std::pair<int32_t, int32_t>> partition_stages(const LayerCosts& costs, int64_t stages,
                                                          Recompute recompute,
                                                          int64_t microbatches = 0,
                                                          const StageLimits* limits = nullptr);

}  // namespace autopar
