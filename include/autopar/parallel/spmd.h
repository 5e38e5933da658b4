// The SPMD pass: one program for every device of a pipeline stage, over the stage's mesh axes
// (dp, tp, sp). Each node gets the OpStrategy that is cheapest given the layouts its inputs
// already have (communication to reshard them plus its share of the arithmetic); reshards
// become collectives; gradients are accumulated over microbatches; optimizer state takes the
// ZeRO layouts. The result has per-device shapes; layouts never involve the pp axis.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autopar/cost/hardware_profile.h"
#include "autopar/ir/graph.h"
#include "autopar/parallel/device_mesh.h"
#include "autopar/parallel/layout.h"
#include "autopar/parallel/op_strategy.h"
#include "autopar/parallel/plan.h"
#include "autopar/parallel/scheme.h"
#include "autopar/support/status.h"

namespace autopar {

// What the paradigms decide for the SPMD pass (src/parallel/paradigms/).
struct SpmdPolicy {
  std::vector<std::string> axes;  // mesh axes the pass may split over, of size > 1
  // The layout of a graph input (data, labels) given its shape.
  std::function<Layout(const Value&)> input_layout;
  // Whether a parameter may be split over `axis` when its first consumer is `node`.
  std::function<bool(const Graph&, const Node&, std::string_view axis)> parameter_split;
  // ZeRO: the dim of a state tensor's shard shape to split over dp (-1: keep it whole), for
  // optimizer state (stage ≥ 1), accumulated gradients (≥ 2) and parameters (3).
  int zero = 0;
  int64_t microbatches = 1;
  // How activations may come to be split over tp. Megatron: only where a split parameter
  // puts them (no reduce-scatter, slice or all-to-all onto tp). Megatron-SP: also by
  // reduce-scattering a row projection's partial sum (onto the sequence, where the norms
  // then run on shards). Auto: any way that is cheapest.
  enum class TpActivations : uint8_t { kFromParameters, kReduceScatter, kAny };
  TpActivations tp_activations = TpActivations::kAny;
  // Per-op overrides (scheme `tensor: {pattern: layout}`): nodes whose name matches the glob
  // take the strategy giving their first output that layout.
  std::vector<OpOverride> overrides;
  // Strategies shared with other lowerings (of the same model under other schemes); each
  // lowering keeps its own when unset.
  std::shared_ptr<StrategyCache> strategies;
  // Per node of the graph being lowered: its pipeline rank (empty: one rank). A parameter's
  // gradient contributions from several ranks accumulate where they are computed.
  std::vector<int32_t> stage_of;
  // Per node of the graph being lowered: the layer it goes with (nodes outside layers take a
  // neighbour's). Empty: the nodes' own layers.
  std::vector<int32_t> layer_of;
  // Context parallelism: the mesh axis splitting the sequence through attention (empty: none),
  // and whether attention runs as ring attention over it (the axis's splits then hold chunk
  // pairs, zigzag) or on heads exchanged all-to-all.
  std::string context_axis;
  bool ring_attention = false;
  // The hardware the strategies are priced on (compute and communication in seconds, by the
  // cost model); null: neutral_profile().
  std::shared_ptr<const HardwareProfile> profile;
};

// The gradient pairs of the graph being lowered, and the state it updates.
struct SpmdInput {
  const Graph* graph = nullptr;
  std::vector<std::pair<ValueId, ValueId>> gradients;  // parameter, gradient
  std::vector<std::pair<ValueId, ValueId>> updates;    // state, new value
  std::vector<std::pair<ValueId, ValueId>> slots;      // optimizer slot, its parameter
  std::vector<ValueId> statistics;                     // BatchNorm's running statistics
  ValueId loss = kNoId;
  // Per node of the training graph: the forward node it is the backward of (kNoId: none), as
  // PreparedGraph::forward_of; null for a forward graph.
  const std::vector<NodeId>* forward_of = nullptr;
  // The result is costed, never run: a constant without data is lowered by its shape.
  bool shapes_only = false;
  // A number naming the graph for as long as it lives, unique in the process (0: none): the
  // lowerings of one graph share its nodes' strategy sets by it (StrategyCache::node_sets).
  uint64_t graph_id = 0;
};

struct SpmdResult {
  Graph graph;                 // per-device shapes
  std::vector<NodeId> origin;  // per node: the source node it was emitted for (-1: none)
  std::vector<StateSpec> state;
  std::vector<DataSpec> data;
  std::string loss;                  // value holding the (replicated) loss
  std::vector<std::string> outputs;  // replicated model outputs (inference)
  // Parameters read in several layers whose gradient contributions share a layout: on a
  // pipeline whose ranks split those layers, each rank accumulates its own contribution.
  std::set<std::string> gradients_per_rank;
};

// The attribute dim of a value, the one attribute parallelism and Megatron-SP split: the
// sequence of token ids [batch, seq] and of activations [batch, seq, hidden], the rows of
// images [N, C, H, W]; -1 for anything else (a float [batch, features] has none).
int64_t attribute_dim(const Value& value);

StatusOr<SpmdResult> lower_spmd(const SpmdInput& input, const DeviceMesh& mesh,
                                const SpmdPolicy& policy);

}  // namespace autopar
