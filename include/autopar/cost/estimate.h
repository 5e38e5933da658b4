// The analytic estimate: a scheme's step time and per-device memory without building its
// plan. The SPMD graph of the scheme's data, tensor and sequence parallelism is costed once
// per layer (the simulator's node costs, summed per layer and phase); pipeline stages,
// schedules, microbatch counts and recomputation are then closed forms over those layer
// costs, so a candidate that shares an SPMD configuration with an earlier one costs
// microseconds. The estimate is kept within a few percent of the simulator by tests.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "autopar/cost/hardware_profile.h"
#include "autopar/cost/memory.h"
#include "autopar/parallel/lowering.h"
#include "autopar/support/status.h"

namespace autopar {

// One layer on one device for one microbatch. Seconds are per stream: the compute stream, and
// the communication streams for the collectives the compute waits on ("blocking": tensor and
// sequence-parallel activations, gathers the backward makes itself), runs ahead of (the
// forward's ZeRO-3 gathers of weights) or does not wait on ("gradient": reductions whose
// results only the update reads, and the accumulation behind them).
struct LayerCost {
  double forward_compute = 0, forward_comm = 0;
  // The forward's gathers of parameters (ZeRO 3's, of a parameter's shards or of their cast):
  // on the communication stream from the program's start, ahead of the compute that reads them
  // (forward_comm holds the rest, which the compute waits for).
  double forward_gather = 0;
  // The part of forward_gather whose gathered weights the backward reads.
  double forward_gather_read_back = 0;
  double backward_compute = 0, backward_comm = 0, gradient_comm = 0;
  double update_compute = 0, update_comm = 0;
  // The part of forward_compute that casts parameters to the compute dtype: a framework
  // holding half-precision weights casts them once per step.
  double parameter_cast_compute = 0;
  // The part of backward_compute that accumulates weight gradients behind their GEMMs
  // (gemm_accumulation): a GEMM accumulating into the fp32 main gradient does it itself.
  double gemm_accumulation_compute = 0;

  double parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;
  double parameter_elements = 0;  // the parameters' elements this device holds (its shards)
  // What the backward re-runs and keeps under each recompute policy (partially_recomputed:
  // none re-runs only sequence parallelism's gathers, selective and nonparametric more, full
  // all but the layer's output): the forward work re-run (compute, the part of it casting
  // parameters, and collectives), and the forward values the layer keeps for one microbatch
  // (outputs of kept ops): those its own backward reads and those only a later layer's backward
  // reads (the residual stream), with the parameters cast to the compute dtype among each (a
  // framework holding half-precision weights keeps those once, with its state).
  struct Partial {
    double compute = 0, parameter_cast_compute = 0, comm = 0;
    double parameter_gather_comm = 0;  // the part of comm gathering parameters again
    double stash_bytes = 0, stash_later_bytes = 0;
    double parameter_copy_bytes = 0, parameter_copy_later_bytes = 0;
  };
  Partial none, selective, nonparametric, full;
  const Partial& partial(Recompute recompute) const {
    switch (recompute) {
      case Recompute::kSelective:
        return selective;
      case Recompute::kNonParametric:
        return nonparametric;
      case Recompute::kFull:
        return full;
      case Recompute::kNone:
        break;
    }
    return none;
  }
  Partial& partial(Recompute recompute) {
    return const_cast<Partial&>(std::as_const(*this).partial(recompute));
  }
  double forward_peak_bytes = 0;   // the layer's own forward values alive at once
  double backward_peak_bytes = 0;  // the same in its backward
  double backward_out_bytes = 0;   // backward values the update reads (gradients)
  // (New state is written in place of the old and takes no memory of its own.)
  // Values crossing from this layer (and earlier) to later ones: the message a pipeline cut
  // after this layer sends per microbatch, forward and backward.
  double cut_forward_bytes = 0, cut_backward_bytes = 0;
};

// Every layer of one SPMD configuration: the mesh, batch, tensor strategy, ZeRO and precision
// of a scheme (not its stages, schedule, chunks, microbatch count beyond one, recompute).
// State read in several layers (a tied embedding, the optimizer's step count): every pipeline
// rank that runs one of those layers holds it.
struct SharedState {
  std::vector<int32_t> layers;  // sorted; the first one's LayerCost counts it already
  double bytes = 0;
  double elements = 0;  // of a parameter
  enum class Kind : uint8_t { kParameter, kGradient, kOptimizer } kind = Kind::kParameter;
};

struct LayerCosts {
  std::vector<LayerCost> layers;  // layer ids; pre- and post-layer nodes join the ends
  std::vector<SharedState> shared;
  std::vector<double> stage_costs;  // what balanced stages weigh per layer
  double model_flops = 0;           // forward FLOPs of one microbatch over dp (the model's)
  bool training = true;
  bool accumulates = false;  // several microbatches: gradients are reduced by the update

  // Balanced layer ranges for `stages` virtual stages (computed once per count).
  const std::vector<std::pair<int32_t, int32_t>>& balanced(int64_t stages) const;

 private:
  struct Balanced {
    std::mutex mutex;
    std::map<int64_t, std::vector<std::pair<int32_t, int32_t>>> ranges;
  };
  std::shared_ptr<Balanced> balanced_ = std::make_shared<Balanced>();
};

struct EstimateBreakdown {
  double compute_s = 0;       // busiest rank's compute in forward and backward
  double exposed_comm_s = 0;  // communication the compute waited on
  double bubble_s = 0;        // pipeline fill and drain
  double optimizer_s = 0;     // the update, with the reductions it waits on
  double paradigm_s = 0;      // the paradigms' own terms (Paradigm::estimate)
};

// One pipeline rank's programs: one microbatch's forward and backward (with the communication
// they wait on), and the update (with the reductions it waits on).
struct RankTime {
  double forward_s = 0, backward_s = 0, update_s = 0;
};

struct Estimate {
  double step_time_s = 0;
  std::vector<RankTime> ranks;
  // Per pipeline rank (every device of a rank holds the same): the plan's bytes, without the
  // framework reserve.
  std::vector<RoleMemory> memory;
  std::vector<double> memory_bytes_per_device;  // per rank, with the reserve
  double peak_memory_bytes = 0;                 // max over ranks, with the reserve
  bool feasible = true;
  std::string reason;      // why not, when infeasible
  double model_flops = 0;  // per step: 3 × forward FLOPs × microbatches
  double mfu = 0;
  EstimateBreakdown breakdown;
};

// The model bound at `batch` samples (one microbatch over every data-parallel replica).
using ModelAt = std::function<StatusOr<Graph>(int64_t batch)>;

// What the search asks of a cost model: a scheme's per-layer costs (once per SPMD
// configuration) and the closed forms that price a whole scheme from them. The Estimator is
// the analytic one; tests give the search others.
class CostModel {
 public:
  virtual ~CostModel() = default;
  // The hardware the schemes are priced on (its cluster bounds the meshes).
  virtual const HardwareProfile& profile() const = 0;
  // Thread-safe; called from several threads at once.
  virtual StatusOr<const LayerCosts*> layer_costs(const Scheme& scheme) = 0;
  virtual StatusOr<Estimate> combine(const LayerCosts& costs, const Scheme& scheme) const = 0;
  // The search is done with every mesh of the scheme's structure: what only they need may go.
  virtual void release_structure(const Scheme& scheme) { (void)scheme; }
};

class Estimator : public CostModel {
 public:
  Estimator(ModelAt model_at, LoweringOptions options, HardwareProfile profile);

  // The scheme's global and micro batch must be resolved (non-zero). Errors are the scheme's
  // (one line naming the field).
  StatusOr<Estimate> estimate(const Scheme& scheme);

  // The layer costs of the scheme's SPMD configuration, computed on first use. Thread-safe;
  // configurations are computed concurrently when asked for from several threads.
  StatusOr<const LayerCosts*> layer_costs(const Scheme& scheme) override;
  // The closed forms over layer costs (what a search calls per candidate). Errors: stage
  // ranges that do not fit the layers.
  StatusOr<Estimate> combine(const LayerCosts& costs, const Scheme& scheme) const override;

  // Drops the SPMD lowering of the scheme's structure; the layer costs computed from it stay.
  // A search calls it once it has priced every mesh of a structure, so that lowerings do not
  // pile up (a later mesh of the structure lowers it again).
  void release_structure(const Scheme& scheme) override;

  // The hardware the estimate prices, and the lowerings price their strategies on.
  const HardwareProfile& profile() const override { return *options_.profile; }
  // SPMD lowerings done (one per structure: the scheme's tp, sp, micro batch, tensor strategy,
  // ZeRO stage, precision, and whether dp > 1 and microbatches accumulate).
  size_t structures() const { return lowerings_.load(); }
  // Layer costs computed (one per structure and mesh).
  size_t configurations() const;

 private:
  // The model at one batch with its repeated layers collapsed, and what the whole model
  // weighs per layer; one SPMD lowering of it.
  struct Model;
  struct Structure;
  // The model at `batch`, its large constants without data (the causal mask computed where
  // attention is fused).
  StatusOr<std::shared_ptr<const Model>> model(int64_t batch, bool fused_attention);
  StatusOr<std::shared_ptr<const Structure>> structure(const Scheme& scheme);

  ModelAt model_at_;
  LoweringOptions options_;
  mutable std::mutex mutex_;
  std::atomic<size_t> lowerings_{0};
  std::map<std::string, std::shared_future<StatusOr<std::shared_ptr<const Model>>>> models_;
  std::map<std::string, std::shared_future<StatusOr<std::shared_ptr<const PreparedGraph>>>>
      prepared_;
  std::map<std::string, std::shared_future<StatusOr<std::shared_ptr<const Structure>>>> structures_;
  std::map<std::string, std::shared_future<StatusOr<std::shared_ptr<const LayerCosts>>>> cache_;
};

// What sending `bytes` from pipeline rank `from` to rank `to` of `mesh` takes (point to point,
// between the ranks' first devices).
double pipeline_message_seconds(const HardwareProfile& profile, const DeviceMesh& mesh,
                                double bytes, int64_t from, int64_t to);

// The key of a scheme's SPMD structure (what its SPMD lowering depends on) and of its layer
// costs (the structure on one mesh).
std::string spmd_structure_key(const Scheme& scheme);

// Layer costs from a lowered SPMD graph on `profile` (device 0 of the mesh stands for all).
// `compute`, when given, is compute_seconds_of(lowered, profile): what the lowering's compute
// takes is the same on every mesh it is costed on. `model_flops`, when given, is
// model_forward_flops(model), which a caller costing many lowerings of one model has.
LayerCosts layer_costs_of(const SpmdLowering& lowered, const Graph& model, const Scheme& scheme,
                          const HardwareProfile& profile,
                          const std::vector<double>* compute = nullptr,
                          std::optional<double> model_flops = std::nullopt);
// Per node of the lowered graph: its seconds on `profile` where they do not depend on the mesh
// (its arithmetic, or its share of a fused run), -1 for communication.
// The fusions and the memory format are the scheme's or the profile's (fusions_of,
// memory_format_of).
std::vector<double> compute_seconds_of(const SpmdLowering& lowered, const HardwareProfile& profile,
                                       const std::set<Fusion>& fusions, MemoryFormat memory_format);

}  // namespace autopar
