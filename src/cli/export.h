// A scheme in the terms of the frameworks that run it: Megatron-LM's pretrain_gpt.py
// arguments (core_v0.19.0), a DeepSpeed configuration (v0.19.5) and a torchtitan job
// configuration (v0.2.2). Every flag and key written is one the release's own parser or
// schema accepts (tests/data/export/ lists them, with where they were read).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/graph.h"
#include "autopar/parallel/scheme.h"
#include "autopar/support/status.h"

namespace autopar::cli {

enum class ExportTarget { kMegatron, kDeepSpeed, kTorchtitan };

// "megatron", "deepspeed" or "torchtitan"; an error naming --export otherwise.
StatusOr<ExportTarget> parse_export_target(const std::string& name);
const char* export_target_name(ExportTarget target);

// A transformer's architecture as read from its graph (zoo models and PyTorch exports alike).
struct TransformerShape {
  int32_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // grouped-query attention when fewer than heads
  int64_t ffn = 0;
  int64_t sequence = 0;
  int64_t vocab = 0;
  int64_t max_positions = 0;  // a learned position table's rows; else the sequence
  bool rms_norm = false;      // no LayerNormalization in the layers
  bool gated = false;         // SwiGLU: two projections to the FFN width from one input
  bool rope = false;          // no learned position table
  bool tied = true;           // the output layer reads the token embedding
  bool bias = true;           // the projections add biases
};

// Errors when the model has no attention in its repeated layers.
StatusOr<TransformerShape> transformer_shape(const Graph& g);

// What a scheme needs that `target` cannot run (empty: it runs as planned). `shape` is the
// model's when it is a transformer.
std::optional<std::string> export_obstacle(ExportTarget target, const Scheme& scheme,
                                           const std::optional<TransformerShape>& shape);

// What the export is of: the model (its name as given), its graph, the optimizer it trains
// with, the cluster (devices per node, nodes) and the attention the plan runs.
struct ExportSource {
  std::string model;
  const Graph* graph = nullptr;
  OptimizerSpec optimizer;
  int64_t devices_per_node = 8;
  int64_t nodes = 1;
  // Whether the plan runs attention as one fused kernel (its graphs hold Attention ops: the
  // scheme or the profile chose FlashAttention and the model's attention has its form).
  bool fused_attention = false;
  // Whether the plan runs the cross-entropy on vocabulary shards over tp (its graphs all-reduce
  // each row's maximum: vocab_parallel_cross_entropy, torchtitan's loss parallelism).
  bool vocab_parallel_loss = false;
};

// A launch configuration: the file's name and text (a shell command, JSON or TOML) and what
// the target runs otherwise than planned, or what the user supplies.
struct Exported {
  std::string file;  // megatron.sh, deepspeed.json, torchtitan.toml
  std::string text;
  std::vector<std::string> notes;
  // The notes as comments, then the text.
  std::string printed() const;
};

// The scheme as the target's launch configuration. A scheme with an obstacle is still
// exported, the obstacle its first note ("NOT AS PLANNED: ...").
StatusOr<Exported> export_scheme(ExportTarget target, const Scheme& scheme,
                                 const ExportSource& source);

}  // namespace autopar::cli
