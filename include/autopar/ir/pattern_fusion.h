// Exporters write some ops out as chains of primitive ops: PyTorch below opset 17 writes
// nn.LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add, every
// exporter writes GELU as Erf or Tanh arithmetic, and Llama's RMSNorm, rotary embeddings and
// SwiGLU come out as Pow/ReduceMean/Sqrt/Div/Mul, Slice/Neg/Concat/Mul/Add and Sigmoid/Mul. These
// passes fold such chains back into the one op autopar plans best (Megatron's recipe keys on
// LayerNormalization; a fused op is priced as one kernel), as ONNX Runtime's graph optimizers do. A
// chain is fused only when its intermediate values are read by nothing else.
#pragma once

#include <cstdint>

#include "autopar/ir/graph.h"

namespace autopar {

struct FusionReport {
  int layer_norms = 0;      // chains fused into ai.onnx LayerNormalization
  int gelus = 0;            // into ai.autopar.training Gelu, approximate "none"
  int tanh_gelus = 0;       // into ai.autopar.training Gelu, approximate "tanh"
  int rms_norms = 0;        // into ai.autopar.training RMSNormalization
  int rotaries = 0;         // into ai.autopar.training RotaryEmbedding
  int swiglus = 0;          // into ai.autopar.training SwiGLU
  int attentions = 0;       // into ai.autopar.training Attention (when asked)
  int64_t raised_from = 0;  // the ai.onnx opset raised to 17 for LayerNormalization (0: none)
  int fused() const {
    return layer_norms + gelus + tanh_gelus + rms_norms + rotaries + swiglus + attentions;
  }
};

// Fuses written-out LayerNorms, GELUs, RMSNorms, rotary embeddings and SwiGLUs. LayerNormalization
// needs opset 17: a graph at opsets 13 to 16 is raised to 17 when it has one to fuse (the ops it
// can hold kept their semantics from 13 to 17; a BatchNormalization with training outputs keeps the
// graph at its opset and its LayerNorms written out). Returns the graph unchanged when nothing
// matched.
Graph fuse_exported_patterns(const Graph& graph, FusionReport* report = nullptr);

// The chains ai.autopar.training ops stand for, as the training graph fuses them: GELU
// (½·x·(1 + erf(x/√2)) and ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) in the orders PyTorch and
// Hugging Face write them), RMSNorm, rotary embeddings and SwiGLU.
// With `attention`, also softmax(Q·Kᵀ·scale (+ the causal mask))·V over [b, h, s, d] heads
// (keys and values possibly repeated from fewer key/value heads) into one Attention, as
// FlashAttention runs it: the scores never held, each row's log-sum-exp an added output. The
// mask must be causal: a constant, or computed from positions by Greater, Cast and Mul.
struct TrainingFusions {
  bool attention = false;
};
Graph fuse_training_patterns(const Graph& graph, FusionReport* report = nullptr,
                             const TrainingFusions& fusions = {});

// Every constant causal mask [s, s] (zero on and below the diagonal, at most −10³ above) as the
// computed form long-context exports write, Mul(Cast(Greater(columns [1, s], rows [s, 1])),
// fill), its positions integer constants: what a shape-only model keeps of a mask whose data it
// drops, still recognised as causal by the attention fusion. Returns the graph unchanged when it
// has none.
Graph computed_causal_masks(const Graph& graph);

// For inference: every BatchNormalization in inference mode whose input only a Conv's output
// is, with the statistics, scale, bias and the Conv's weights constants with data, becomes
// part of that Conv (weights scaled per output channel by scale/√(var + ε), the bias
// (b − mean)·scale/√(var + ε) + B, computed in double), as inference runtimes fold it. The
// folded Conv's output keeps the BatchNormalization's output name. Returns how many it folded.
int fold_inference_batch_norms(Graph& graph);

}  // namespace autopar
