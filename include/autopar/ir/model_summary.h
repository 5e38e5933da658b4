// ModelSummary: what `autopar inspect` reports about a graph.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/ir/layers.h"

namespace autopar {

struct ModelSummary {
  int64_t nodes = 0;
  std::map<std::string, int64_t> ops;        // op type ("domain::Op" outside ai.onnx) → count
  std::vector<std::string> unsupported_ops;  // op types without an OpDef, sorted
  int64_t params = 0;                        // trainable parameter elements
  int64_t param_bytes = 0;
  int64_t constant_bytes = 0;       // non-trainable initializers
  int64_t input_bytes = 0;          // graph inputs at the bound dims
  int64_t activation_bytes = 0;     // every value forward nodes produce
  double flops_forward = 0;         // over forward nodes with an OpDef and static shapes
  int64_t nodes_without_flops = 0;  // nodes whose count is unknown (unsupported, unknown shape)
  bool shape_only = false;          // some initializer has no data
  LayerStructure layers;
};

ModelSummary summarize(const Graph& graph);

// "Add", or "ai.autopar::AllReduce" outside the default domain.
std::string qualified_op_type(const Node& node);

}  // namespace autopar
