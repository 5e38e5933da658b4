// The analytic estimate: layer costs from the SPMD graph, closed forms for the rest.
#include "autopar/cost/estimate.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <set>
#include <string_view>
#include <unordered_map>

#include "autopar/cost/communication.h"
#include "autopar/cost/compute.h"
#include "autopar/cost/memory.h"
#include "autopar/cost/simulator.h"
#include "autopar/ir/collapse_layers.h"
#include "autopar/ir/pattern_fusion.h"
#include "autopar/ops/op_def.h"

namespace autopar {
namespace {

bool is_comm(const Node& n) { return is_communication(n); }

double shard_bytes(const StateSpec& s, const DeviceMesh& mesh) {
  double elements = 1;
  for (int64_t d : s.layout.shard_shape(s.shape, mesh)) elements *= static_cast<double>(d);
  return elements * static_cast<double>(dtype_size(s.dtype));
}

double bytes_of(const Value& v) { return static_cast<double>(v.num_bytes()); }

}  // namespace

double pipeline_message_seconds(const HardwareProfile& profile, const DeviceMesh& mesh,
                                double bytes, int64_t from, int64_t to) {
  if (bytes <= 0 || from == to) return 0.0;
  // The device of pipeline rank r: every other coordinate 0.
  auto device_of = [&](int64_t rank) {
    std::vector<int64_t> coords(mesh.axes().size(), 0);
    const int64_t axis = mesh.axis_index("pp");
    if (axis >= 0) coords[axis] = rank % std::max<int64_t>(mesh.size("pp"), 1);
    return mesh.device(coords);
  };
  return collective_cost(profile, Collective::kPointToPoint, bytes,
                         {device_of(from), device_of(to)})
      .seconds;
}

const std::vector<std::pair<int32_t, int32_t>>& LayerCosts::balanced(int64_t stages) const {
  std::lock_guard<std::mutex> lock(balanced_->mutex);
  auto& cache = balanced_->ranges;
  auto it = cache.find(stages);
  if (it == cache.end()) {
    const auto layers = static_cast<int32_t>(this->layers.size());
    it =
        cache
            .emplace(stages, stages == 1 ? std::vector<std::pair<int32_t, int32_t>>{{0, layers - 1}}
                                         : balance_stages(stage_costs, stages))
            .first;
  }
  return it->second;
}

std::vector<double> compute_seconds_of(const SpmdLowering& lowered, const HardwareProfile& profile,
                                       const std::set<Fusion>& fusions,
                                       MemoryFormat memory_format) {
  const Graph& g = lowered.spmd.graph;
  // Where the runtime fuses elementwise runs, as the simulator prices them (a plan's programs
  // begin where the phase does).
  std::vector<NodeId> phase_starts;
  for (NodeId n = 1; n < g.num_nodes(); ++n) {
    if (g.node(n).phase != g.node(n - 1).phase) phase_starts.push_back(n);
  }
  std::vector<double> seconds =
      fused_node_seconds(profile, g, phase_starts, &fusions, memory_format);
  seconds.resize(static_cast<size_t>(g.num_nodes()), -1.0);
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    if (seconds[n] < 0 && g.node(n).domain != kAutoparDomain)
      seconds[n] = node_cost(profile, g, g.node(n)).seconds;
  }
  return seconds;
}

namespace {

// Layer costs of one lowering, built in steps over its SPMD graph (see layer_costs_of).
class LayerCostBuilder {
 public:
  LayerCostBuilder(const SpmdLowering& lowered, const Graph& model, const Scheme& scheme,
                   const HardwareProfile& profile, const std::vector<double>* compute,
                   double model_flops)
      : lowered_(lowered),
        g_(lowered.spmd.graph),
        mesh_(scheme.mesh),
        profile_(profile),
        // The lowering cached for the scheme's structure may be another memory policy's: the
        // re-gather is decided here as lower() decides it.
        regather_(backward_regathers(lowered.policy.spmd, scheme, &profile)),
        recast_loss_(runs_fused_cross_entropy(scheme, &profile)),
        num_layers_(std::max(lowered.layers, 1)),
        nodes_(lowered.spmd.graph.num_nodes()),
        specs_(lowered.spmd.state),
        num_specs_(static_cast<int32_t>(lowered.spmd.state.size())),
        compute_(compute) {
    costs_.layers.assign(num_layers_, {});
    costs_.training = lowered.training;
    costs_.accumulates = lowered.microbatches > 1;
    costs_.stage_costs = layer_forward_costs(model, lowered.layers);
    if (costs_.stage_costs.empty()) costs_.stage_costs = {1.0};
    costs_.model_flops = model_flops;
    if (!compute_) {
      own_compute_ = compute_seconds_of(lowered, profile, fusions_of(scheme, profile),
                                        memory_format_of(scheme, profile));
      compute_ = &own_compute_;
    }
  }

  LayerCosts build() {
    index_state();
    place_nodes();
    state_bytes();
    seconds();
    values();
    if (lowered_.training) recompute();
    peaks();
    return std::move(costs_);
  }

 private:
  static constexpr int32_t kUnplaced = INT_MAX;

  const StateSpec* state_of(ValueId v) const {
    return spec_of_[v] >= 0 ? &specs_[spec_of_[v]] : nullptr;
  }
  // A parameter's copy for the forward: its Cast to the compute dtype, or the whole weight a
  // ZeRO-3 all-gather makes of its shards (of the parameter or of its cast). Frameworks hold
  // the first once with their state and gather the second again for the backward; neither is
  // kept per microbatch.
  bool is_parameter_copy(const Node& node) const {
    if (node.inputs.empty() || node.inputs[0] == kNoId) return false;
    const bool gather = node.domain == kAutoparDomain && node.op_type == "AllGather";
    if (node.op_type != "Cast" && !gather) return false;
    const ValueId in = node.inputs[0];
    if (const StateSpec* s = state_of(in)) return s->is_parameter;
    const NodeId producer = g_.value(in).producer;
    return gather && producer != kNoId && g_.node(producer).op_type == "Cast" &&
           is_parameter_copy(g_.node(producer));
  }
  // A Cast of a parameter (or of its ZeRO-3 shard) to the compute dtype.
  bool is_parameter_cast(const Node& node) const {
    return node.op_type == "Cast" && node.domain.empty() && is_parameter_copy(node);
  }
  double node_seconds(NodeId n) const {
    if ((*compute_)[n] >= 0) return (*compute_)[n];
    return device_node_seconds(profile_, mesh_, g_, g_.node(n), 0);
  }
  void index_state();
  void place_nodes();
  void state_bytes();
  void seconds();
  void values();
  void recompute();
  void peaks();

  const SpmdLowering& lowered_;
  const Graph& g_;
  const DeviceMesh& mesh_;
  const HardwareProfile& profile_;
  const bool regather_, recast_loss_;
  const int32_t num_layers_;
  const int32_t nodes_;
  const std::vector<StateSpec>& specs_;
  const int32_t num_specs_;
  const std::vector<double>* compute_;
  std::vector<double> own_compute_;
  LayerCosts costs_;
  std::unordered_map<std::string_view, int32_t> spec_named_;
  std::vector<int32_t> spec_of_;  // state inputs: their spec
  std::vector<int32_t> written_;  // new state: its spec
  std::vector<bool> is_output_;
  std::vector<int32_t> layer_;              // per node
  std::vector<int32_t> state_layer_;        // per spec: its home layer
  std::vector<std::set<int32_t>> readers_;  // per spec: the layers that read it
  std::vector<ValueId> work_;               // what the backward reads of the forward
};

void LayerCostBuilder::index_state() {
  // State by index: the graph input holding each, and the value each update writes.
  std::unordered_map<std::string_view, int32_t> spec_writing;
  for (int32_t i = 0; i < num_specs_; ++i) {
    spec_named_.emplace(specs_[i].name, i);
    if (!specs_[i].output.empty()) spec_writing.emplace(specs_[i].output, i);
  }
  spec_of_.assign(static_cast<size_t>(g_.num_values()), -1);
  written_.assign(static_cast<size_t>(g_.num_values()), -1);
  // (State comes in as graph inputs and leaves as graph outputs.)
  for (ValueId v : g_.inputs()) {
    if (auto it = spec_named_.find(g_.value(v).name); it != spec_named_.end())
      spec_of_[v] = it->second;
  }
  for (ValueId v = 0; v < g_.num_values(); ++v) {
    if (auto it = spec_writing.find(g_.value(v).name); it != spec_writing.end())
      written_[v] = it->second;
  }
  is_output_.assign(static_cast<size_t>(g_.num_values()), false);
  for (ValueId o : g_.outputs()) is_output_[o] = true;
}

void LayerCostBuilder::place_nodes() {
  // The layer of every node: the forward and backward take their source node's (as
  // build_roles places them); state goes with its first non-update reader, an update with the
  // state it writes.
  layer_ = place_by_origin(lowered_.spmd, lowered_.source_layer, num_layers_ - 1);
  state_layer_.assign(static_cast<size_t>(num_specs_), kUnplaced);
  for (NodeId n = 0; n < nodes_; ++n) {
    const Node& node = g_.node(n);
    if (node.phase == Phase::kOptimizer) continue;
    for (ValueId in : node.inputs) {
      if (in == kNoId || !state_of(in)) continue;
      state_layer_[spec_of_[in]] = std::min(state_layer_[spec_of_[in]], layer_[n]);
    }
  }
  // An update runs where build_roles runs it (updates_by_place), counted on the first of those
  // layers: with the state it writes; state only updates read (optimizer slots, a shared step
  // count) goes with the first update that reads it.
  std::vector<NodeId> writer(static_cast<size_t>(num_specs_), kNoId);
  for (ValueId v = 0; v < g_.num_values(); ++v) {
    const NodeId p = g_.value(v).producer;
    if (written_[v] >= 0 && p != kNoId && g_.node(p).phase == Phase::kOptimizer)
      writer[written_[v]] = p;
  }
  const std::vector<std::vector<bool>> runs = updates_by_place(
      g_, layer_, num_layers_, [&](NodeId n) { return g_.node(n).phase == Phase::kOptimizer; },
      [&](ValueId v) { return spec_of_[v] >= 0 ? writer[spec_of_[v]] : kNoId; });
  for (NodeId n = 0; n < nodes_; ++n) {
    if (g_.node(n).phase != Phase::kOptimizer) continue;
    layer_[n] = 0;
    for (int32_t l = 0; l < num_layers_; ++l) {
      if (!runs[l][n]) continue;
      layer_[n] = l;
      break;
    }
  }
  for (NodeId n = 0; n < nodes_; ++n) {
    const Node& node = g_.node(n);
    if (node.phase != Phase::kOptimizer) continue;
    for (ValueId in : node.inputs) {
      if (in != kNoId && state_of(in) && state_layer_[spec_of_[in]] == kUnplaced)
        state_layer_[spec_of_[in]] = layer_[n];
    }
  }
}

void LayerCostBuilder::state_bytes() {
  // State bytes per layer; state read in several layers is also held where the others run.
  // An update runs on every rank holding state it writes (build_roles duplicates it): the
  // layers of an update are those of the parameters and gradients it reaches.
  // (A parameter cast to the compute type once and read in several layers, as a tied
  // embedding under mixed precision is, is read where its cast is: a pipeline rank that reads
  // the cast casts its own copy of the parameter.)
  readers_.assign(static_cast<size_t>(num_specs_), {});
  for (NodeId n = 0; n < nodes_; ++n) {
    if (g_.node(n).phase == Phase::kOptimizer) continue;
    for (ValueId in : g_.node(n).inputs) {
      if (in == kNoId) continue;
      if (state_of(in)) {
        readers_[spec_of_[in]].insert(layer_[n]);
        continue;
      }
      const NodeId p = g_.value(in).producer;
      if (p == kNoId) continue;
      const Node& cast = g_.node(p);
      if (cast.op_type == "Cast" && cast.domain.empty() && cast.inputs.size() == 1 &&
          cast.inputs[0] != kNoId && state_of(cast.inputs[0]))
        readers_[spec_of_[cast.inputs[0]]].insert(layer_[n]);
    }
  }
  std::vector<std::set<int32_t>> update_layers(nodes_);
  for (NodeId n = 0; n < nodes_; ++n) {
    const Node& node = g_.node(n);
    if (node.phase != Phase::kOptimizer) continue;
    for (ValueId in : node.inputs) {
      if (in == kNoId) continue;
      if (state_of(in)) {
        const std::set<int32_t>& at = readers_[spec_of_[in]];
        update_layers[n].insert(at.begin(), at.end());
      } else if (const NodeId p = g_.value(in).producer; p != kNoId) {
        if (g_.node(p).phase == Phase::kOptimizer)
          update_layers[n].insert(update_layers[p].begin(), update_layers[p].end());
        else
          update_layers[n].insert(layer_[p]);
      }
    }
  }
  // And backwards: what computes a new value of held state runs where the state is held.
  for (NodeId n = nodes_ - 1; n >= 0; --n) {
    if (g_.node(n).phase != Phase::kOptimizer) continue;
    for (ValueId out : g_.node(n).outputs) {
      if (out == kNoId) continue;
      if (written_[out] >= 0) {
        const std::set<int32_t>& at = readers_[written_[out]];
        update_layers[n].insert(at.begin(), at.end());
      }
      for (NodeId r : g_.value(out).consumers) {
        if (g_.node(r).phase == Phase::kOptimizer)
          update_layers[n].insert(update_layers[r].begin(), update_layers[r].end());
      }
    }
  }
  for (NodeId n = 0; n < nodes_; ++n) {
    if (g_.node(n).phase != Phase::kOptimizer) continue;
    for (ValueId in : g_.node(n).inputs) {
      if (in != kNoId && state_of(in))
        readers_[spec_of_[in]].insert(update_layers[n].begin(), update_layers[n].end());
    }
  }
  for (int32_t i = 0; i < num_specs_; ++i) {
    const StateSpec& s = specs_[i];
    const int32_t home = state_layer_[i] == kUnplaced ? 0 : state_layer_[i];
    LayerCost& c = costs_.layers[home];
    const double bytes = shard_bytes(s, mesh_);
    SharedState shared;
    shared.bytes = bytes;
    if (s.is_parameter) {
      c.parameter_bytes += bytes;
      shared.elements = bytes / static_cast<double>(dtype_size(s.dtype));
      c.parameter_elements += shared.elements;
    } else if (s.init == StateSpec::Init::kZeros) {
      c.gradient_bytes += bytes;
      shared.kind = SharedState::Kind::kGradient;
    } else {
      c.optimizer_bytes += bytes;
      shared.kind = SharedState::Kind::kOptimizer;
    }
    std::set<int32_t> at = readers_[i];
    // A tied parameter's gradient accumulates on every rank that reads the parameter: each
    // accumulates its own contribution, and the update adds them.
    if (shared.kind == SharedState::Kind::kGradient && !s.gradient_of.empty() &&
        s.gradient_part.empty()) {
      auto parameter = spec_named_.find(s.gradient_of);
      if (lowered_.spmd.gradients_per_rank.count(s.gradient_of) && parameter != spec_named_.end())
        at.insert(readers_[parameter->second].begin(), readers_[parameter->second].end());
    }
    if (at.size() > 1) {
      shared.layers.push_back(home);
      for (int32_t l : at) {
        if (l != home) shared.layers.push_back(l);
      }
      costs_.shared.push_back(std::move(shared));
    }
  }
}

void LayerCostBuilder::seconds() {
  // Seconds per layer, stream and phase.
  const std::vector<bool> accumulation = gemm_accumulation(g_);
  const std::vector<bool> behind_reduction = reduction_accumulation(g_);
  for (NodeId n = 0; n < nodes_; ++n) {
    const Node& node = g_.node(n);
    LayerCost& c = costs_.layers[layer_[n]];
    const double seconds = node_seconds(n);
    const bool comm = is_comm(node);
    switch (node.phase) {
      case Phase::kForward: {
        const bool gather = comm && is_parameter_copy(node);
        (gather ? c.forward_gather : comm ? c.forward_comm : c.forward_compute) += seconds;
        if (gather) {
          for (NodeId r : g_.value(node.output(0)).consumers) {
            if (g_.node(r).phase == Phase::kBackward) {
              c.forward_gather_read_back += seconds;
              break;
            }
          }
        }
        if (is_parameter_cast(node)) c.parameter_cast_compute += seconds;
        break;
      }
      case Phase::kBackward: {
        if (behind_reduction[n]) {  // on the reduction's stream, behind it
          c.gradient_comm += seconds;
          break;
        }
        if (!comm) {
          c.backward_compute += seconds;
          if (accumulation[n]) c.gemm_accumulation_compute += seconds;
          break;
        }
        // A reduction no forward or backward node reads overlaps the rest of the backward.
        bool waited = false;
        for (ValueId out : node.outputs) {
          if (out == kNoId) continue;
          for (NodeId r : g_.value(out).consumers)
            waited |= g_.node(r).phase != Phase::kOptimizer && !behind_reduction[r];
        }
        (waited ? c.backward_comm : c.gradient_comm) += seconds;
        break;
      }
      case Phase::kOptimizer:
        (comm ? c.update_comm : c.update_compute) += seconds;
        break;
    }
  }
}

void LayerCostBuilder::values() {
  // Values: stashes, cuts between layers, and each layer's own peak per phase.
  std::vector<double> forward_cut(num_layers_, 0.0), backward_cut(num_layers_, 0.0);
  for (ValueId v = 0; v < g_.num_values(); ++v) {
    const Value& value = g_.value(v);
    if (value.producer == kNoId) continue;
    const Node& producer = g_.node(value.producer);
    const int32_t from = layer_[value.producer];
    const double bytes = bytes_of(value);
    int32_t last_forward = from, first_backward = INT_MAX;
    bool read_by_backward = false, read_by_update = false;
    for (NodeId r : value.consumers) {
      const Node& reader = g_.node(r);
      if (reader.phase == Phase::kForward) last_forward = std::max(last_forward, layer_[r]);
      if (reader.phase == Phase::kBackward) {
        read_by_backward = true;
        first_backward = std::min(first_backward, layer_[r]);
      }
      if (reader.phase == Phase::kOptimizer) read_by_update = true;
    }
    LayerCost& c = costs_.layers[from];
    if (producer.phase == Phase::kForward) {
      // A parameter's cast read by a later layer is cast again on the rank that reads it (the
      // lowering's SPMD pass does), never sent along the pipeline.
      if (!is_parameter_copy(producer)) {
        for (int32_t l = from; l < last_forward; ++l) forward_cut[l] += bytes;
      }
      if (read_by_backward && written_[v] < 0) work_.push_back(v);
    } else if (producer.phase == Phase::kBackward) {
      // A gradient flows towards layer 0: a cut before layer l carries what layers ≥ l
      // produce and layers < l read.
      for (int32_t l = std::min(first_backward, from); l < from; ++l) backward_cut[l] += bytes;
      if ((read_by_update || is_output_[v]) && written_[v] < 0) c.backward_out_bytes += bytes;
    }
  }
  for (int32_t l = 0; l < num_layers_; ++l) {
    costs_.layers[l].cut_forward_bytes = forward_cut[l];
    costs_.layers[l].cut_backward_bytes = backward_cut[l];
  }
}

void LayerCostBuilder::recompute() {
  // Recompute: the forward nodes the backward's reads reach back through, up to the outputs
  // of the nodes the policy keeps.
  for (const Recompute policy :
       {Recompute::kNone, Recompute::kSelective, Recompute::kNonParametric, Recompute::kFull}) {
    const std::vector<bool> rerun = partially_recomputed(
        policy, regather_, recast_loss_, g_, [&](ValueId x) { return state_of(x) != nullptr; });
    auto partial = [&](int32_t layer) -> LayerCost::Partial& {
      return costs_.layers[layer].partial(policy);
    };
    std::vector<ValueId> roots = work_;
    const std::vector<ValueId> whole = whole_layer_roots(policy, rerun, g_);
    roots.insert(roots.end(), whole.begin(), whole.end());
    std::vector<bool> kept(g_.num_values(), false);
    const std::vector<bool> recomputed = recompute_closure(g_, roots, [&](ValueId v) {
      const NodeId p = g_.value(v).producer;
      if (g_.node(p).phase != Phase::kForward) return false;
      if (rerun[p]) return true;
      kept[v] = written_[v] < 0;
      return false;
    });
    for (NodeId n = 0; n < nodes_; ++n) {
      if (!recomputed[n]) continue;
      const double seconds = node_seconds(n);
      (is_comm(g_.node(n)) ? partial(layer_[n]).comm : partial(layer_[n]).compute) += seconds;
      if (is_parameter_cast(g_.node(n))) partial(layer_[n]).parameter_cast_compute += seconds;
      if (is_comm(g_.node(n)) && is_parameter_copy(g_.node(n)))
        partial(layer_[n]).parameter_gather_comm += seconds;
    }
    // The first layer whose backward needs a re-run node. Re-runs chain along the residual
    // stream (the sum of one layer is re-run for the next layer's norm, and so on), but a rank
    // re-runs only what its own layers' backwards read: past a pipeline cut the next rank
    // receives the sum instead.
    constexpr int32_t kNoReader = std::numeric_limits<int32_t>::max();
    std::vector<int32_t> needed_by(static_cast<size_t>(nodes_), kNoReader);
    for (NodeId n = nodes_; n-- > 0;) {
      if (!recomputed[n]) continue;
      for (ValueId out : g_.node(n).outputs) {
        if (out == kNoId) continue;
        for (NodeId r : g_.value(out).consumers) {
          if (g_.node(r).phase == Phase::kBackward)
            needed_by[n] = std::min(needed_by[n], layer_[r]);
          if (recomputed[r]) needed_by[n] = std::min(needed_by[n], needed_by[r]);
        }
      }
    }
    // The output of a kept op is stashed in place of its recompute: by its own layer where its
    // backward (or what it re-runs) reads it, else, where only later layers' read it, as the
    // residual stream is.
    for (ValueId v = 0; v < g_.num_values(); ++v) {
      if (!kept[v]) continue;
      const NodeId p = g_.value(v).producer;
      int32_t reader = kNoReader;
      for (NodeId r : g_.value(v).consumers) {
        if (g_.node(r).phase == Phase::kBackward) reader = std::min(reader, layer_[r]);
        if (recomputed[r]) reader = std::min(reader, needed_by[r]);
      }
      LayerCost::Partial& c = partial(layer_[p]);
      const bool later = reader != kNoReader && reader > layer_[p];
      (later ? c.stash_later_bytes : c.stash_bytes) += bytes_of(g_.value(v));
      if (is_parameter_copy(g_.node(p)))
        (later ? c.parameter_copy_later_bytes : c.parameter_copy_bytes) += bytes_of(g_.value(v));
    }
  }
}

void LayerCostBuilder::peaks() {
  // Each layer's own peak per phase (group_peak_bytes, as the plan's memory counts a
  // program's): values produced and last read within the layer and phase.
  std::vector<int32_t> group(static_cast<size_t>(nodes_), -1);
  for (NodeId n = 0; n < nodes_; ++n) {
    const Phase phase = g_.node(n).phase;
    if (phase == Phase::kForward) group[n] = layer_[n];
    if (phase == Phase::kBackward) group[n] = num_layers_ + layer_[n];
  }
  const std::vector<double> peak = group_peak_bytes(
      g_, group, 2 * num_layers_, [&](ValueId v) { return is_output_[v] || written_[v] >= 0; },
      [&](ValueId v) { return written_[v] >= 0; });
  for (int32_t l = 0; l < num_layers_; ++l) {
    costs_.layers[l].forward_peak_bytes = peak[l];
    costs_.layers[l].backward_peak_bytes = peak[num_layers_ + l];
  }
}

}  // namespace

LayerCosts layer_costs_of(const SpmdLowering& lowered, const Graph& model, const Scheme& scheme,
                          const HardwareProfile& profile, const std::vector<double>* compute,
                          std::optional<double> model_flops) {
  return LayerCostBuilder(lowered, model, scheme, profile, compute,
                          model_flops ? *model_flops : model_forward_flops(model))
      .build();
}

// Constants above this many elements are data no lowering decision reads.
constexpr int64_t kLargeConstantElements = 4096;
constexpr int64_t kLargestPositions = int64_t{1} << 22;

struct Estimator::Model {
  CollapsedGraph collapsed;
  int64_t batch = 0;                // the samples the model is bound at (dp' · micro)
  std::vector<double> stage_costs;  // of the whole model, per layer
  double model_flops = 0;           // of the whole model at `batch`
};

struct Estimator::Structure {
  std::shared_ptr<const Model> model;
  SpmdLowering lowered;
  // compute_seconds_of(lowered), worked out when first costed (the meshes of a structure share
  // it).
  mutable std::once_flag compute_once;
  mutable std::vector<double> compute;
};

std::string spmd_structure_key(const Scheme& scheme) {
  std::string key;
  for (const MeshAxis& a : scheme.mesh.axes()) {
    if (a.name == "pp") continue;
    key += a.name == "dp" ? fmt::format("dp{}|", a.size > 1 ? ">1" : "1")
                          : fmt::format("{}{}|", a.name, a.size);
  }
  key += fmt::format("micro {}|acc {}|{}|zero {}|{}", scheme.micro_batch,
                     scheme.microbatches() > 1 ? 1 : 0,
                     scheme.tp() > 1 ? tensor_strategy_name(scheme.tensor) : "-",
                     scheme.dp() > 1 ? scheme.zero : 0, precision_name(scheme.precision));
  if (scheme.cp() > 1) key += fmt::format("|context {}", context_form_name(scheme.context));
  if (scheme.attention)
    key += fmt::format("|attention {}", attention_kernel_name(*scheme.attention));
  if (scheme.fusions) {
    key += "|fusions";
    for (Fusion f : *scheme.fusions) key += fmt::format(" {}", fusion_name(f));
  }
  if (scheme.memory_format)
    key += fmt::format("|memory_format {}", memory_format_name(*scheme.memory_format));
  for (const OpOverride& o : scheme.overrides) key += fmt::format("|{}={}", o.pattern, o.strategy);
  for (const auto& [field, value] : scheme.extensions) key += fmt::format("|{}: {}", field, value);
  return key;
}

Estimator::Estimator(ModelAt model_at, LoweringOptions options, HardwareProfile profile)
    : model_at_(std::move(model_at)), options_(std::move(options)) {
  options_.profile = std::make_shared<const HardwareProfile>(std::move(profile));
  // Every structure lowers the same model: its nodes' strategies are worked out once.
  if (!options_.strategies) options_.strategies = std::make_shared<StrategyCache>();
  options_.shapes_only = true;
}

void Estimator::release_structure(const Scheme& scheme) {
  std::shared_future<StatusOr<std::shared_ptr<const Structure>>> released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = structures_.find(spmd_structure_key(scheme));
    if (it == structures_.end()) return;
    released = std::move(it->second);
    structures_.erase(it);
  }
  // The lowering is freed here, outside the lock, unless a caller still holds it.
}

size_t Estimator::configurations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_.size();
}

namespace {

// Computes cache[key] once: the first caller computes, concurrent callers wait for it.
template <typename T, typename Compute>
T once(std::mutex& mutex, std::map<std::string, std::shared_future<T>>& cache,
       const std::string& key, Compute compute) {
  std::promise<T> promise;
  std::shared_future<T> future;
  bool mine = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) {
      future = it->second;
    } else {
      future = promise.get_future().share();
      cache.emplace(key, future);
      mine = true;
    }
  }
  if (mine) promise.set_value(compute());
  return future.get();
}

}  // namespace

StatusOr<std::shared_ptr<const Estimator::Structure>> Estimator::structure(const Scheme& scheme) {
  using Result = StatusOr<std::shared_ptr<const Structure>>;
  return once(mutex_, structures_, spmd_structure_key(scheme), [&]() -> Result {
    // The SPMD pass does not see the pipeline, and a dp of 2 stands for any dp > 1 (shapes
    // per device are the same; groups come from the real mesh when costed).
    Scheme spmd = scheme;
    std::vector<MeshAxis> axes;
    for (MeshAxis a : scheme.mesh.axes()) {
      if (a.name == "pp") continue;
      if (a.name == "dp") a.size = std::min<int64_t>(a.size, 2);
      axes.push_back(a);
    }
    if (axes.empty()) axes.push_back({"dp", 1});
    ASSIGN_OR_RETURN(spmd.mesh, DeviceMesh::create(axes));
    spmd.devices.reset();
    spmd.stages.clear();
    spmd.chunks = 1;
    spmd.schedule = PipelineSchedule::kOneForwardOneBackward;
    spmd.global_batch = spmd.dp() * spmd.micro_batch * (scheme.microbatches() > 1 ? 2 : 1);
    auto s = std::make_shared<Structure>();
    const int64_t batch = spmd.dp() * spmd.micro_batch;
    // FlashAttention's fusion needs to see the causal mask (context parallelism runs it too).
    ASSIGN_OR_RETURN(s->model, model(batch, runs_flash_attention(scheme, options_.profile.get())));
    // Structures of one batch share the rewritten training graph.
    LoweringOptions options = options_;
    options.prepared = [this, batch](const std::string& key,
                                     const std::function<StatusOr<PreparedGraph>()>& make) {
      using Prepared = StatusOr<std::shared_ptr<const PreparedGraph>>;
      return once(mutex_, prepared_, fmt::format("{}|{}", batch, key), [&]() -> Prepared {
        ASSIGN_OR_RETURN(PreparedGraph graph, make());
        return std::shared_ptr<const PreparedGraph>(
            std::make_shared<const PreparedGraph>(std::move(graph)));
      });
    };
    ASSIGN_OR_RETURN(s->lowered, lower_to_spmd(s->model->collapsed.graph, spmd, options));
    ++lowerings_;
    return std::shared_ptr<const Structure>(std::move(s));
  });
}

StatusOr<std::shared_ptr<const Estimator::Model>> Estimator::model(int64_t batch,
                                                                   bool fused_attention) {
  using Result = StatusOr<std::shared_ptr<const Model>>;
  return once(
      mutex_, models_, fmt::format("{}|{}", batch, fused_attention ? 1 : 0), [&]() -> Result {
        auto m = std::make_shared<Model>();
        m->batch = batch;
        ASSIGN_OR_RETURN(Graph loaded, model_at_(batch));
        // Costs need shapes alone: large constants lose their data, which every prepared graph
        // would otherwise copy and convert to the compute type. Small ones (shapes, axes, fill
        // values) keep theirs: the lowering reads them. Where attention is fused, a constant causal
        // mask becomes the computed one first, so that the fusion still sees it is causal (unfused,
        // the constant stays: computed, its [s, s] values would be held per microbatch).
        Graph model = fused_attention ? computed_causal_masks(loaded) : std::move(loaded);
        for (ValueId v = 0; v < model.num_values(); ++v) {
          Value& value = model.mutable_value(v);
          // (Integer vectors stay: positions a computed causal mask compares, one per token.)
          const bool positions = !is_floating(value.dtype) && value.shape.rank() <= 2 &&
                                 value.data && value.data->num_elements() <= kLargestPositions;
          if (value.kind == ValueKind::kConstant && value.data && !positions &&
              value.data->num_elements() > kLargeConstantElements)
            value.data.reset();
        }
        int32_t layers = 0;
        for (const Node& n : model.nodes()) layers = std::max(layers, n.layer + 1);
        m->stage_costs = layer_forward_costs(model, layers);
        m->model_flops = model_forward_flops(model);
        m->collapsed = collapse_repeated_layers(model);
        return std::shared_ptr<const Model>(std::move(m));
      });
}

StatusOr<const LayerCosts*> Estimator::layer_costs(const Scheme& scheme) {
  using Result = StatusOr<std::shared_ptr<const LayerCosts>>;
  // A scheme whose memory policy keeps sequence parallelism's gathered inputs stashes and
  // re-runs other values than one that gathers again.
  const bool regather = regathers_sequence_shards(memory_policy_of(scheme, &profile()));
  const std::string key = spmd_structure_key(scheme) + "|" + scheme.mesh.to_string() +
                          (regather ? "" : "|keeps gathered");
  Result result = once(mutex_, cache_, key, [&]() -> Result {
    ASSIGN_OR_RETURN(std::shared_ptr<const Structure> structure_of, structure(scheme));
    const Model* s = structure_of->model.get();
    LayerCosts reduced = layer_costs_of(
        structure_of->lowered, s->collapsed.graph, scheme, profile(),
        [&] {
          std::call_once(structure_of->compute_once, [&] {
            structure_of->compute =
                compute_seconds_of(structure_of->lowered, profile(), fusions_of(scheme, profile()),
                                   memory_format_of(scheme, profile()));
          });
          return &structure_of->compute;
        }(),
        s->model_flops);
    // Every layer of the model takes the costs of the layer that stands for it.
    auto costs = std::make_shared<LayerCosts>();
    costs->training = reduced.training;
    costs->accumulates = reduced.accumulates;
    const double scale =
        static_cast<double>(scheme.dp() * scheme.micro_batch) / static_cast<double>(s->batch);
    costs->model_flops = s->model_flops * scale;
    costs->stage_costs = s->stage_costs;
    const std::vector<int32_t>& layer_of = s->collapsed.layer_of;
    if (layer_of.empty()) {
      costs->layers = reduced.layers;
      if (costs->stage_costs.empty()) costs->stage_costs = {1.0};
    } else {
      for (int32_t r : layer_of) costs->layers.push_back(reduced.layers.at(r));
    }
    for (SharedState shared : reduced.shared) {
      for (int32_t& l : shared.layers) {
        if (l < static_cast<int32_t>(s->collapsed.original.size())) l = s->collapsed.original[l];
      }
      costs->shared.push_back(std::move(shared));
    }
    return std::shared_ptr<const LayerCosts>(std::move(costs));
  });
  if (!result.is_ok()) return result.status();
  return result->get();
}

StatusOr<Estimate> Estimator::estimate(const Scheme& scheme) {
  if (scheme.global_batch <= 0 || scheme.micro_batch <= 0)
    return error("batch: the global and micro batch must be set");
  ASSIGN_OR_RETURN(const LayerCosts* costs, layer_costs(scheme));
  return combine(*costs, scheme);
}

namespace {

// One virtual stage's sums over its layers, per microbatch.
struct StageCost {
  double forward = 0, backward = 0;  // per microbatch, with blocking communication
  double forward_compute = 0, backward_compute = 0;
  double gradient_tail = 0;  // reductions still running when the backward ends
  double update = 0;
  double send_forward = 0, send_backward = 0;  // to the next stage / from it
  double stash = 0, forward_peak = 0, backward_out = 0, backward_peak = 0;
  double parameters = 0, gradients = 0, optimizer = 0;
  double parameter_copies = 0, parameter_elements = 0;  // stashed copies; elements held
};

// One pipeline rank's sums over its chunks.
struct RankCost {
  double forward = 0, backward = 0, compute = 0, tail = 0, update = 0;
  RoleMemory memory;
  // For a framework's accounting: the stashed parameter copies (per microbatch over the
  // rank's chunks), the parameter elements held, and the programs' peak without the backward's
  // gradient outputs (a framework adds them into its gradient buffers as they come).
  double parameter_copies = 0, parameter_elements = 0, framework_transient = 0;
};

// The layer ranges of the scheme's `stages` virtual stages (balanced by FLOPs where it names
// none), pre- and post-layer nodes joining the first and last.
StatusOr<std::vector<std::pair<int32_t, int32_t>>> stage_ranges(const LayerCosts& costs,
                                                                const Scheme& scheme,
                                                                int64_t stages) {
  const int32_t num_layers = static_cast<int32_t>(costs.layers.size());
  std::vector<std::pair<int32_t, int32_t>> ranges = scheme.stages;
  if (ranges.empty()) {
    if (stages > num_layers)
      return error("mesh.pp: {} pipeline stages but the model has {} layers", stages, num_layers);
    ranges = costs.balanced(stages);
  }
  if (static_cast<int64_t>(ranges.size()) != stages)
    return error("pipeline.stages: {} layer ranges for {} stages", ranges.size(), stages);
  ranges.front().first = 0;
  ranges.back().second = num_layers - 1;
  for (size_t s = 0; s < ranges.size(); ++s) {
    const auto [first, last] = ranges[s];
    if (first > last || first < 0 || last >= num_layers)
      return error("pipeline.stages: stage {} has no layers", s);
  }
  return ranges;
}

// Each virtual stage's sums; the backward's reductions queue on the communication stream.
std::vector<StageCost> stage_costs(const LayerCosts& costs, const Scheme& scheme,
                                   const std::vector<std::pair<int32_t, int32_t>>& ranges,
                                   const HardwareProfile& profile) {
  const auto stages = static_cast<int64_t>(ranges.size());
  const int64_t p = scheme.pp();
  auto p2p = [&](double bytes, int64_t from, int64_t to) {
    return pipeline_message_seconds(profile, scheme.mesh, bytes, from, to);
  };
  std::vector<StageCost> stage(stages);
  // A framework holding half-precision weights casts them once per step, after the update.
  const MemoryPolicy policy = memory_policy_of(scheme, &profile);
  const bool held = costs.training && holds_weight_copies(policy);
  const bool fused_accumulation = costs.training && accumulates_in_gemm(policy);
  const bool regathers = costs.training && regathers_parameters(policy, scheme);
  // The runtime's cost per program run, and whether collectives overlap compute at all.
  const double dispatch = profile.device.program_overhead_s;
  const bool overlap = profile.device.overlap_communication;
  // Compute beside a running collective keeps this much of its rate: `compute` seconds of it
  // from `t`, with the communication stream busy until `busy`, end at the returned time.
  const double beside = overlap ? 1.0 - profile.device.overlap_slowdown : 1.0;
  auto run_beside = [beside](double t, double compute, double busy) {
    const double queued = beside < 1.0 ? std::max(0.0, busy - t) : 0.0;
    return t + (compute <= queued * beside ? compute / beside : compute + queued * (1.0 - beside));
  };
  for (int64_t s = 0; s < stages; ++s) {
    StageCost& st = stage[s];
    const auto [first, last] = ranges[s];
    double t = dispatch, comm_free = 0;
    // The forward: its parameter gathers run back to back from the program's start (in line
    // where collectives do not overlap), each layer's compute waiting for its own and running
    // beside the later ones; its other collectives it waits for.
    double gathered = dispatch, gathers_end = dispatch;
    for (int32_t l = first; l <= last; ++l) gathers_end += costs.layers[l].forward_gather;
    double f = dispatch;
    for (int32_t l = first; l <= last; ++l) {
      const LayerCost& c = costs.layers[l];
      const double casts = held ? c.parameter_cast_compute : 0.0;
      st.forward_compute += c.forward_compute - casts;
      if (overlap) {
        gathered += c.forward_gather;
        f = run_beside(std::max(f, gathered), c.forward_compute - casts, gathers_end);
      } else {
        f += c.forward_gather + c.forward_compute - casts;
      }
      f += c.forward_comm;
      st.parameters += c.parameter_bytes;
      st.parameter_elements += c.parameter_elements;
      st.gradients += c.gradient_bytes;
      st.optimizer += c.optimizer_bytes;
      st.forward_peak = std::max(st.forward_peak, c.forward_peak_bytes);
      st.backward_peak = std::max(st.backward_peak, c.backward_peak_bytes);
      st.backward_out += c.backward_out_bytes;
      st.update += c.update_compute + c.update_comm + casts;
      const LayerCost::Partial& partial = c.partial(scheme.recompute);
      st.stash += partial.stash_bytes + (l < last ? partial.stash_later_bytes : 0.0);
      st.parameter_copies +=
          partial.parameter_copy_bytes + (l < last ? partial.parameter_copy_later_bytes : 0.0);
    }
    st.forward = f;
    // The backward walks the layers in reverse; reductions queue on the communication
    // stream behind each other, and the collectives it waits for run on their own
    // communicators' streams, not behind them. A framework that
    // gathers ZeRO 3's weights again for the backward (those its recompute does not gather
    // anyway) runs those gathers first, back to back from the program's start, as the forward
    // does its own; each layer's backward waits for its weights.
    auto regather = [&](const LayerCost& c) {
      return regathers ? std::max(0.0, c.forward_gather_read_back -
                                           c.partial(scheme.recompute).parameter_gather_comm)
                       : 0.0;
    };
    double regathered = t, regathers_end = t;
    for (int32_t l = first; l <= last; ++l) regathers_end += regather(costs.layers[l]);
    if (overlap && regathers_end > t) comm_free = regathers_end;
    for (int32_t l = last; l >= first; --l) {
      const LayerCost& c = costs.layers[l];
      const LayerCost::Partial& partial = c.partial(scheme.recompute);
      const double recast = held ? partial.parameter_cast_compute : 0.0;
      const double accumulation = fused_accumulation ? c.gemm_accumulation_compute : 0.0;
      const double compute = c.backward_compute - recast - accumulation + partial.compute;
      const double blocking = c.backward_comm + partial.comm;
      st.backward_compute += compute;
      if (overlap) {
        regathered += regather(c);
        t = std::max(t, regathered);
      } else {
        t += regather(c);
      }
      // The layer's compute runs beside the reductions still queued (until comm_free).
      t = run_beside(t, compute, comm_free);
      // A collective the backward waits for runs on its own communicator's stream, not behind
      // the queued reductions.
      t += blocking;
      if (c.gradient_comm > 0) comm_free = std::max(t, comm_free) + c.gradient_comm;
      if (!overlap) t = comm_free = std::max(t, comm_free);  // collectives run in line
    }
    st.backward = t;
    st.gradient_tail = std::max(0.0, comm_free - t);
    const int64_t rank = s % p;
    if (s + 1 < stages) {
      st.send_forward = p2p(costs.layers[last].cut_forward_bytes, rank, (s + 1) % p);
      st.send_backward = p2p(costs.layers[last].cut_backward_bytes, (s + 1) % p, rank);
    }
    if (s > 0) st.stash += costs.layers[ranges[s - 1].second].cut_forward_bytes;  // received
  }

  return stage;
}

// Per rank: its chunks' sums, and the state shared with other ranks held on each.
std::vector<RankCost> rank_costs(const LayerCosts& costs, const std::vector<StageCost>& stage,
                                 const std::vector<std::pair<int32_t, int32_t>>& ranges, int64_t p,
                                 double dispatch) {
  const auto stages = static_cast<int64_t>(stage.size());
  const int32_t num_layers = static_cast<int32_t>(costs.layers.size());
  std::vector<RankCost> rank(p);
  for (int64_t s = 0; s < stages; ++s) {
    RankCost& r = rank[s % p];
    const StageCost& st = stage[s];
    r.forward += st.forward;
    r.backward += st.backward;
    r.compute += st.forward_compute + st.backward_compute;
    r.tail = std::max(r.tail, st.gradient_tail);
    r.update += st.update + (s < p ? dispatch : 0.0);  // one update program per rank
    r.memory.parameter_bytes += st.parameters;
    r.memory.gradient_bytes += st.gradients;
    r.memory.optimizer_bytes += st.optimizer;
    r.memory.stash_bytes += st.stash;
    r.memory.transient_bytes =
        std::max({r.memory.transient_bytes, st.forward_peak, st.backward_out + st.backward_peak});
    r.parameter_copies += st.parameter_copies;
    r.parameter_elements += st.parameter_elements;
    r.framework_transient = std::max({r.framework_transient, st.forward_peak, st.backward_peak});
  }

  // Shared state on the ranks other than its first layer's.
  std::vector<int64_t> rank_of_layer(num_layers, 0);
  for (int64_t s = 0; s < stages; ++s) {
    for (int32_t l = ranges[s].first; l <= ranges[s].second; ++l) rank_of_layer[l] = s % p;
  }
  for (const SharedState& shared : costs.shared) {
    std::vector<bool> held(p, false);
    held[rank_of_layer[shared.layers.front()]] = true;
    for (int32_t l : shared.layers) {
      const int64_t r = rank_of_layer[l];
      if (held[r]) continue;
      held[r] = true;
      RoleMemory& m = rank[r].memory;
      rank[r].parameter_elements += shared.elements;
      (shared.kind == SharedState::Kind::kParameter  ? m.parameter_bytes
       : shared.kind == SharedState::Kind::kGradient ? m.gradient_bytes
                                                     : m.optimizer_bytes) += shared.bytes;
    }
  }

  return rank;
}

// A training rank's memory as the framework of `policy` holds it, from autopar's own: the
// state by the bytes per parameter the framework keeps (Megatron-LM's "18 bytes per parameter"
// with mixed precision and Adam, 6 + 12/d with its distributed optimizer; DeepSpeed's ZeRO
// stages; PyTorch FSDP's sharded fp32 parameters and gradients), the stash without the
// half-precision weight copies where the framework holds those once, and the programs' peaks
// without the backward's gradient outputs, which it adds into its gradient buffers as they
// come. The optimizer's slots are the plan's own (sharded by ZeRO as the frameworks shard them).
void apply_framework(MemoryPolicy policy, const Scheme& scheme, const RankCost& rank,
                     RoleMemory& memory) {
  const std::optional<FrameworkState> state =
      framework_state(policy, scheme, rank.parameter_elements, memory.optimizer_bytes);
  if (!state) return;
  memory.parameter_bytes = state->parameter_bytes;
  memory.gradient_bytes = state->gradient_bytes;
  memory.optimizer_bytes = state->optimizer_bytes;
  if (!state->weight_copies_stashed)
    memory.stash_bytes = std::max(0.0, memory.stash_bytes - rank.parameter_copies);
  memory.transient_bytes = rank.framework_transient;
}

// Each pipeline rank's memory: its state as the scheme's memory policy (or the profile's)
// holds it, and its stash times the microbatches its schedule keeps in flight.
void add_memory(Estimate& e, const LayerCosts& costs, const Scheme& scheme,
                const std::vector<RankCost>& rank, const HardwareProfile& profile) {
  const int64_t p = scheme.pp();
  const int64_t v = scheme.schedule == PipelineSchedule::kInterleaved ? scheme.chunks : 1;
  const int64_t m = scheme.microbatches();
  const MemoryPolicy policy = memory_policy_of(scheme, &profile);
  for (int64_t r = 0; r < p; ++r) {
    RoleMemory memory = rank[r].memory;
    if (costs.training) {
      apply_framework(policy, scheme, rank[r], memory);
      memory.in_flight = in_flight(scheme.schedule, r, p, v, m);
      const double stash = v > 1 ? memory.stash_bytes / static_cast<double>(v) : memory.stash_bytes;
      memory.activation_bytes =
          static_cast<double>(memory.in_flight) * stash + memory.transient_bytes;
    } else {
      memory.activation_bytes = memory.transient_bytes;
    }
    e.memory.push_back(memory);
  }
}

// The terms the paradigms add of their own (Paradigm::estimate).
void add_paradigm_terms(Estimate& e, const Scheme& scheme, const HardwareProfile& profile) {
  if (!paradigms_add_terms()) return;
  const EstimateTerms terms = paradigm_terms(scheme, profile, e.memory);
  e.step_time_s += terms.step_s;
  e.breakdown.paradigm_s = terms.step_s;
  for (size_t r = 0; r < terms.rank_bytes.size() && r < e.memory.size(); ++r)
    e.memory[r].paradigm_bytes += terms.rank_bytes[r];
}

// Each rank's bytes per device with the framework's reserve, the peak, and whether it fits (a
// rank over the device's memory makes the scheme infeasible).
void settle_memory(Estimate& e, const HardwareProfile& profile) {
  const double reserve = profile.device.reserved_bytes;
  for (size_t r = 0; r < e.memory.size(); ++r) {
    const RoleMemory& memory = e.memory[r];
    const double total = memory.total_bytes() + reserve;
    e.memory_bytes_per_device.push_back(total);
    if (total > e.peak_memory_bytes) e.peak_memory_bytes = total;
    if (e.feasible && total > profile.device.memory_bytes) {
      e.feasible = false;
      constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
      e.reason = fmt::format(
          "pipeline rank {} needs {:.2f} GiB of the device's {:.2f} GiB (parameters {:.2f}, "
          "gradients {:.2f}, optimizer {:.2f}, activations {:.2f}, reserved {:.2f}{})",
          r, total / kGiB, profile.device.memory_bytes / kGiB, memory.parameter_bytes / kGiB,
          memory.gradient_bytes / kGiB, memory.optimizer_bytes / kGiB,
          memory.activation_bytes / kGiB, reserve / kGiB,
          memory.paradigm_bytes > 0
              ? fmt::format(", paradigms' own {:.2f}", memory.paradigm_bytes / kGiB)
              : "");
    }
  }
}

}  // namespace

StatusOr<Estimate> Estimator::combine(const LayerCosts& costs, const Scheme& scheme) const {
  const int64_t p = scheme.pp();
  const int64_t v = scheme.schedule == PipelineSchedule::kInterleaved ? scheme.chunks : 1;
  const int64_t stages = p * v;
  const int64_t m = scheme.microbatches();
  const DeviceMesh& mesh = scheme.mesh;
  if (m < 1) return error("batch: the scheme has no microbatches");
  if (v > 1 && p > 1 && m % p != 0) {
    return error(
        "pipeline.schedule: interleaved needs the microbatches ({}) to be a multiple of pp ({})", m,
        p);
  }
  ASSIGN_OR_RETURN(const auto ranges, stage_ranges(costs, scheme, stages));
  const std::vector<StageCost> stage = stage_costs(costs, scheme, ranges, profile());
  const std::vector<RankCost> rank =
      rank_costs(costs, stage, ranges, p, profile().device.program_overhead_s);

  // The pipeline (the pipeline paradigm's closed form), then the updates.
  double hops = 0;
  for (int64_t s = 0; s + 1 < stages; ++s) hops += stage[s].send_forward + stage[s].send_backward;
  std::vector<RankSeconds> seconds;
  double busiest = 0;
  for (const RankCost& r : rank) {
    seconds.push_back({r.forward, r.backward});
    busiest = std::max(busiest, r.forward + r.backward);
  }
  const double dm = static_cast<double>(m);
  const double pipeline = pipeline_seconds(scheme.schedule, v, m, costs.training, seconds, hops);
  // Each rank's update starts when its last backward ends (rank 0's last, the others'
  // earlier by the backwards and sends below them) and waits for its gradients' reductions.
  double step = pipeline, finish = pipeline, critical_update = 0;
  for (int64_t r = 0; r < p; ++r) {
    if (r > 0) finish -= rank[r - 1].backward / static_cast<double>(v) + stage[r - 1].send_backward;
    const double update = costs.training ? rank[r].tail + rank[r].update : 0.0;
    if (r == 0 || finish + update > step) {
      step = std::max(step, finish + update);
      critical_update = update;
    }
  }

  Estimate e;
  e.step_time_s = step;
  for (const RankCost& r : rank) {
    e.ranks.push_back({r.forward, r.backward, costs.training ? r.tail + r.update : 0.0});
  }
  e.breakdown.compute_s = 0;
  for (const RankCost& r : rank)
    e.breakdown.compute_s = std::max(e.breakdown.compute_s, dm * r.compute);
  e.breakdown.optimizer_s = critical_update;
  e.breakdown.bubble_s = std::max(0.0, pipeline - dm * busiest);
  e.breakdown.exposed_comm_s =
      std::max(0.0, step - e.breakdown.compute_s - e.breakdown.bubble_s - e.breakdown.optimizer_s);
  add_memory(e, costs, scheme, rank, profile());
  add_paradigm_terms(e, scheme, profile());
  settle_memory(e, profile());
  e.model_flops = (costs.training ? 3.0 : 1.0) * costs.model_flops * dm;
  const double peak = profile().device.mfu_peak() * static_cast<double>(mesh.num_devices());
  e.mfu = e.step_time_s > 0 && peak > 0 ? e.model_flops / (peak * e.step_time_s) : 0.0;
  return e;
}

}  // namespace autopar
