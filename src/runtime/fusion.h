// Elementwise fusion: runs of consecutive elementwise nodes over one shape execute tile by
// tile, so their intermediate values never reach memory (an optimizer's dozen passes over
// every parameter become one).
#pragma once

#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/runtime/kernel.h"
#include "autopar/support/status.h"
#include "kernels/activation.h"

namespace autopar::runtime {

struct FusedGroup {
  enum class Code : uint8_t { kAdd, kSub, kMul, kDiv, kNeg, kSqrt, kReciprocal, kExp, kErf, kTanh };
  struct Operand {
    // kPeriodic: a tensor broadcast along leading dims (a bias row), read with period `period`.
    enum class Kind : uint8_t { kTensor, kScalar, kInternal, kPeriodic };
    Kind kind = Kind::kTensor;
    ValueId value = kNoId;
    int internal = -1;   // index into `internals` for kInternal
    int64_t period = 0;  // kPeriodic
  };
  struct Op {
    Code code;
    Operand a, b;  // b unused by unary ops
    int out;       // index into `internals`
  };
  NodeId first = kNoId, last = kNoId;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  std::vector<Op> ops;
  std::vector<ValueId> internals;  // the values the group computes
  std::vector<bool> escapes;       // per internal: read after the group (materialised)
};

// A convolution and the activation node that alone reads its output: the convolution applies
// the activation as it writes (kernels/activation.h), and the activation's node does not run.
struct FusedActivation {
  NodeId conv = kNoId, activation = kNoId;
  Activation kind;
};
std::vector<FusedActivation> find_fused_activations(const Graph& graph);

// Groups of at least two consecutive fusible nodes (Add, Sub, Mul, Div, Neg, Sqrt, Reciprocal,
// Exp, Erf, Tanh on f32/f64) whose operands have the group's shape, one element, or the
// shape of its trailing dims (broadcast along the leading ones).
// A group never spans `cut_before` (a node that must start a kernel of its own).
// With `half_types`, runs of bf16 and fp16 values are found too (the CUDA backend fuses them;
// this executor runs only f32 and f64 groups).
std::vector<FusedGroup> find_fused_groups(const Graph& graph,
                                          const std::vector<NodeId>& cut_before = {},
                                          bool half_types = false);

// Runs a group: inputs from `slots`, escaping values allocated and stored into `slots`.
// Results are bit-identical to running the nodes one by one.
void run_fused_group(const FusedGroup& group, std::vector<TensorPtr>& slots);

}  // namespace autopar::runtime
