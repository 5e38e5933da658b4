// The four graph transformations every paradigm is built from (DESIGN.md, "The four
// transformations"): duplicate, split, augment, assign. Each writes into a destination graph
// whose shapes are per device; node placement (assign) is kept beside the graph.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/parallel/device_mesh.h"
#include "autopar/parallel/layout.h"
#include "autopar/parallel/op_strategy.h"
#include "autopar/parallel/reshard.h"
#include "autopar/support/status.h"

namespace autopar {

// duplicate: a copy of `node` (of `src`) in `dst` reading `inputs` (dst ids, one per input of
// the node, kNoId where omitted). Output names get `suffix` (a recomputed copy, a copy on
// another stage); shapes are inferred in `dst`, or taken from `shapes` (one per output) when
// given. Returns the new outputs.
StatusOr<std::vector<ValueId>> duplicate(Graph& dst, const Graph& src, const Node& node,
                                         const std::vector<ValueId>& inputs,
                                         std::string_view suffix,
                                         const std::vector<std::vector<int64_t>>* shapes = nullptr);

// split: `node` run on its shards under `strategy`: `inputs` (dst ids) already hold the
// strategy's input layouts. Shape inputs are rewritten to the per-device shapes, a gather over
// a split dimension is masked to the device's range, and a mean over a split reduction is
// scaled into a partial sum. Returns the outputs, each in the strategy's output layout; their
// shapes are checked against the layouts.
// Two things a caller may already have: the node's iteration space (`space`, as
// iteration_space gives it), and the knowledge that the graph is costed, never run
// (`shapes_only`: outputs take their layouts' shard shapes without inferring them).
struct SplitHints {
  const std::optional<IterationSpace>* space = nullptr;
  bool shapes_only = false;
};
StatusOr<std::vector<ValueId>> split(Graph& dst, const Graph& src, const Node& node,
                                     const std::vector<ValueId>& inputs, const OpStrategy& strategy,
                                     const DeviceMesh& mesh, const SplitHints& hints = {});

// split of a window op (Conv, ConvTranspose) over dim 2 split by sp: input 0 takes a halo of
// `before` and `after` rows from its neighbours (augment), then the node runs on the block
// with `attrs` (its padding on that dim rewritten for the block).
StatusOr<std::vector<ValueId>> split_window(Graph& dst, const Graph& src, const Node& node,
                                            const std::vector<ValueId>& inputs,
                                            const OpStrategy& strategy, int64_t before,
                                            int64_t after, const Attributes& attrs,
                                            const DeviceMesh& mesh);

// split of Attention or AttentionGrad over the sequence split by mesh axis `axis`: the node as
// its ring form (RingAttention, RingAttentionGrad) whose key/value blocks go around the axis's
// ring; `zigzag`: each member's rows are chunk pairs (r, 2·n − 1 − r).
StatusOr<std::vector<ValueId>> split_ring(Graph& dst, const Graph& src, const Node& node,
                                          const std::vector<ValueId>& inputs,
                                          const OpStrategy& strategy, const DeviceMesh& mesh,
                                          std::string_view axis, bool zigzag);

// augment: one communication node turning `x` (dst id) by one reshard step; the group is named
// by mesh axes so one graph serves every device of a role.
StatusOr<ValueId> augment(Graph& dst, ValueId x, const ReshardStep& step, const DeviceMesh& mesh,
                          Phase phase, int32_t layer);
// augment with reshard steps already planned, one node each.
StatusOr<ValueId> augment_steps(Graph& dst, ValueId x, const std::vector<ReshardStep>& steps,
                                const DeviceMesh& mesh, Phase phase, int32_t layer);
// augment with a whole reshard: the steps from `from` to `to`, one node each.
StatusOr<ValueId> augment_reshard(Graph& dst, ValueId x, const Layout& from, const Layout& to,
                                  const std::vector<int64_t>& global_shape, const DeviceMesh& mesh,
                                  Phase phase, int32_t layer);
// augment across pipeline stages: Send of `x` to the device whose `axis` coordinate is
// `coord`, and the matching Recv producing a value named `name`.
NodeId augment_send(Graph& dst, ValueId x, std::string_view axis, int64_t coord, int64_t tag,
                    Phase phase, int32_t layer);
StatusOr<ValueId> augment_recv(Graph& dst, std::string_view name, DType dtype,
                               const std::vector<int64_t>& shape, std::string_view axis,
                               int64_t coord, int64_t tag, Phase phase, int32_t layer);

// assign: the (virtual) pipeline stage of every node of a training or inference graph.
// `layer_stage` maps layer ids to stages. Forward nodes in a layer take its stage, others the
// latest stage they read from; backward nodes take the stage of the forward node they
// differentiate (`forward_of`, per node: forward_nodes() of the training graph; empty for a
// forward graph), else their layer's, else the earliest stage they read from (a gradient flows
// towards stage 0); nodes that read nothing staged (a transpose of a parameter) take their
// first consumer's stage; optimizer nodes are left at -1 (they run on every stage that holds
// their state).
std::vector<int32_t> assign(const Graph& graph, const std::vector<int32_t>& layer_stage,
                            int32_t num_stages, const std::vector<NodeId>& forward_of = {});

}  // namespace autopar
