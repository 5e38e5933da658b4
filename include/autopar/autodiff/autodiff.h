// Reverse-mode differentiation of a graph, and the training step built on it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

// Appends to `graph` the backward pass of the scalar `loss` with respect to `wrt`, running the
// gradient rule of every node on a path from one of them to the loss, in reverse order.
// Gradients reaching a value from several consumers are summed. Returns one gradient per
// `wrt` value (kNoId where the loss does not depend on it). A node on such a path whose op
// has no gradient rule is an error naming it.
// `fused`: rules may emit ai.autopar.training ops (LayerNorm's gradient as one node).
// With `forward_of`, each node a gradient rule emits is recorded with the forward node whose
// rule emitted it (backward node, forward node).
StatusOr<std::vector<ValueId>> add_gradients(
    Graph& graph, ValueId loss, const std::vector<ValueId>& wrt, bool fused = false,
    std::vector<std::pair<NodeId, NodeId>>* forward_of = nullptr);

enum class LossKind : uint8_t { kCrossEntropy, kMse };
enum class OptimizerKind : uint8_t { kSgd, kAdam, kAdamW };

StatusOr<LossKind> parse_loss(std::string_view name);
StatusOr<OptimizerKind> parse_optimizer(std::string_view name);
const char* loss_name(LossKind kind);
const char* optimizer_name(OptimizerKind kind);

struct LossSpec {
  LossKind kind = LossKind::kCrossEntropy;
  // The model output the loss reads; empty: the first.
  std::string output;
};

// Hyper-parameters; defaults are PyTorch's (lr 0.01 for SGD, 0.001 for Adam and AdamW).
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdam;
  std::optional<double> lr;
  double momentum = 0.9;  // SGD
  double beta1 = 0.9;     // Adam, AdamW
  double beta2 = 0.999;
  double epsilon = 1e-8;
  std::optional<double>
      weight_decay;  // SGD/Adam: L2 added to the gradient; AdamW: decoupled (default 0.01)

  double learning_rate() const;
  double decay() const;
  // Hyper-parameters that would make the update NaN or diverge ("--lr -1: must be positive").
  Status validate() const;
};

// The default loss for a model: cross-entropy when its output looks like class scores (the
// last dim is the class axis of logits or of a Softmax), else MSE.
LossKind default_loss(const Graph& model);

// One training step as one graph.
struct TrainingGraph {
  Graph graph;
  ValueId loss = kNoId;    // scalar output
  ValueId labels = kNoId;  // graph input: i64 class ids (cross-entropy) or targets (MSE)
  // Each piece of state (a parameter, an optimizer slot, a BatchNorm running statistic) and the
  // graph output that holds its value after the step.
  std::vector<std::pair<ValueId, ValueId>> updates;
  // Each parameter and its gradient (for tests and for the parallel compiler).
  std::vector<std::pair<ValueId, ValueId>> gradients;
  // Each optimizer slot (a momentum, Adam's moments) and the parameter it belongs to.
  std::vector<std::pair<ValueId, ValueId>> slots;
  // State the forward updates: BatchNorm's running statistics.
  std::vector<ValueId> statistics;
  // Each node a gradient rule emitted and the forward node it differentiates, by node name
  // (rewrites of the training graph keep node names; see forward_nodes()).
  std::vector<std::pair<std::string, std::string>> forward_of;
};

// Per node of `training.graph`: the forward node it is the backward of (kNoId for forward,
// loss, optimizer nodes and the sums of gradient contributions).
std::vector<NodeId> forward_nodes(const TrainingGraph& training);

// `training` with its graph replaced by `rewritten`, a rewrite of it that keeps the names of
// the values it refers to (loss, labels, state and their updates, parameters and gradients).
TrainingGraph with_rewritten_graph(const TrainingGraph& training, Graph rewritten);

// Forward, loss, backward and optimizer update as standard ONNX ops in one graph (opset 17).
// Inputs: the model's inputs and the labels; initializers: parameters and optimizer state;
// outputs: the loss, then the updated parameters and state. BatchNormalization switches to
// training mode (batch statistics, running statistics updated). Nodes keep phase fwd, bwd or
// opt and the layer of the forward node they belong to.
// How the training graph is written. By default it is standard ONNX.
struct TrainingOptions {
  // Fused training ops (ai.autopar.training), as fused kernels run them: Adam's and AdamW's
  // update as one node per parameter (bit-identical to the standard ops), LayerNorm's input
  // gradient and normalised input as one node. What the parallel compiler emits in plans.
  bool fused = false;
  // With `fused`: attention as one Attention op (FlashAttention) too.
  bool fuse_attention = false;
  // BatchNorm's running variance as PyTorch keeps it (the unbiased batch variance), not as
  // ONNX defines it (the population variance).
  bool unbiased_running_var = false;
};

StatusOr<TrainingGraph> build_training_graph(const Graph& model, const LossSpec& loss,
                                             const OptimizerSpec& optimizer,
                                             const TrainingOptions& options = {});

}  // namespace autopar
