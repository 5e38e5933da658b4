// OpStrategy: one way to run one node on the mesh, derived from its parallel semantics.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/ops/parallel_semantics.h"
#include "autopar/parallel/device_mesh.h"
#include "autopar/parallel/layout.h"
#include "autopar/support/status.h"

namespace autopar {

// Mesh axis → the loop of the node's iteration space it splits.
using LoopAssignment = std::vector<std::pair<std::string, int>>;

struct OpStrategy {
  LoopAssignment assignment;
  std::vector<Layout> inputs;   // what each input must be (replicated rank-0 for omitted ones)
  std::vector<Layout> outputs;  // what each output is: split where its loops are, partial over
                                // the axes that split a reduction loop

  // "dp:b0 tp:n | [dp, _, _] [_, tp] -> [dp, _, tp]"; "replicated | ..." with no assignment.
  std::string to_string(const IterationSpace& space) const;
  bool operator==(const OpStrategy&) const = default;
};

// The strategy splitting the assigned loops. Errors: an axis the mesh lacks, a loop that is not
// splittable, an axis used twice, an operand dim the axes do not divide, a split reduction
// whose partial results do not sum (max).
StatusOr<OpStrategy> derive_strategy(const Graph& graph, const Node& node,
                                     const IterationSpace& space, const LoopAssignment& assignment,
                                     const DeviceMesh& mesh);

// Every valid strategy assigning each of `axes` to one splittable loop or to none (replicated
// over it), in a deterministic order: replicated first.
std::vector<OpStrategy> enumerate_strategies(const Graph& graph, const Node& node,
                                             const DeviceMesh& mesh,
                                             const std::vector<std::string>& axes);

}  // namespace autopar
