// Shape inference over a whole graph with the registry's shape rules.
#pragma once

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

// Runs the shape rule of one node and writes its outputs' dtypes and shapes. When an output
// already has a known shape (from ONNX's inference), the two must agree.
Status infer_node(Graph& graph, NodeId node);

// Runs every node in order. Errors name the node; an op without an OpDef is an error.
Status infer_shapes(Graph& graph);

}  // namespace autopar
