// Exporters write some ops out as chains of primitive ops: PyTorch below opset 17 writes
// nn.LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add, and every
// exporter writes GELU as Erf or Tanh arithmetic. These passes fold such chains back into
// the one op autopar plans best (Megatron's recipe keys on LayerNormalization; a fused op is
// priced as one kernel), as ONNX Runtime's graph optimizers do. A chain is fused only when
// its intermediate values are read by nothing else.
#pragma once

#include <cstdint>

#include "autopar/ir/graph.h"

namespace autopar {

struct FusionReport {
  int layer_norms = 0;       // chains fused into ai.onnx LayerNormalization
  int gelus = 0;             // into ai.autopar.training Gelu, approximate "none"
  int tanh_gelus = 0;        // into ai.autopar.training Gelu, approximate "tanh"
  int64_t raised_from = 0;   // the ai.onnx opset raised to 17 for LayerNormalization (0: none)
  int fused() const { return layer_norms + gelus + tanh_gelus; }
};

// Fuses written-out LayerNorms and GELUs. LayerNormalization needs opset 17: a graph at
// opsets 13 to 16 is raised to 17 when it has one to fuse (the ops it can hold kept their
// semantics from 13 to 17; a BatchNormalization with training outputs keeps the graph at
// its opset and its LayerNorms written out). Returns the graph unchanged when nothing
// matched.
Graph fuse_exported_patterns(const Graph& graph, FusionReport* report = nullptr);

// GELU alone: ½·x·(1 + erf(x/√2)) and ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) in the orders
// PyTorch and Hugging Face write them.
Graph fuse_gelus(const Graph& graph, FusionReport* report = nullptr);

}  // namespace autopar
