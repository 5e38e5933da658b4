// Constant folding: the shape arithmetic that exporters emit (Shape → Gather → Unsqueeze →
// Concat → Reshape and friends) runs at import through the ops' own shape rules and CPU
// kernels, so every value gets a static shape and folding means what running means.
#pragma once

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

// Largest output a fold may produce; bigger results stay computed at run time.
inline constexpr int64_t kMaxFoldElements = int64_t{1} << 22;

// Whether fold_node() folds this op type at all: shape arithmetic, not model compute.
bool is_foldable_op(const Node& node);

// Folds one node when every input it reads is a constant with data (Shape and Size need only
// a static input shape; parameters are never folded): its outputs become constants and the
// node is left without outputs for remove_dead_nodes(). `folded` says whether it happened. A
// node whose constant inputs its shape rule or kernel rejects (an index out of range, a
// reshape that does not fit) is an error naming it.
Status fold_node(Graph& graph, NodeId node, bool& folded);

// fold_node() over every node in order, then remove_dead_nodes(). Returns how many folded.
StatusOr<int> fold_constants(Graph& graph);

}  // namespace autopar
