// Parallel semantics: an op's iteration space as data — its loop dims, each parallel or a
// reduction, and which loop indexes each dim of each operand. Strategies, their
// communication and their costs derive from it (DESIGN.md, "Parallel semantics").
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autopar/ir/graph.h"

namespace autopar {

enum class LoopKind : uint8_t {
  kParallel,   // splitting it splits the outputs indexed by it
  kReduction,  // splitting it makes every output a partial sum
};

struct Loop {
  std::string name;  // "b", "m", "n", "k", "c", "h" ... for messages and golden text
  int64_t extent = 1;
  LoopKind kind = LoopKind::kParallel;
  // False where splitting needs more than the declaration says: a normalised axis (Softmax,
  // LayerNorm) or a convolution's sliding window (halo exchange, declared by the op).
  bool splittable = true;
  bool operator==(const Loop&) const = default;
};

// For one node with static shapes: the loops, and for each input and output dim the loop that
// indexes it (-1: no loop, a broadcast dim of size 1 or a dim the op reads whole).
// How partial results over a split reduction loop combine into the output.
enum class Combine : uint8_t { kSum, kMean, kMax };

struct IterationSpace {
  std::vector<Loop> loops;
  Combine combine = Combine::kSum;
  std::vector<std::vector<int>> inputs;   // per input (empty for omitted ones)
  std::vector<std::vector<int>> outputs;  // per output
  // Per input (missing entries: false): added to the result after the reductions rather than
  // multiplied into them (Gemm's C, a convolution's bias). Where a sum reduction is split and
  // the output becomes a partial sum, such an input must arrive as a partial sum over the
  // same axes (one member adds it), or every member would add it.
  std::vector<bool> additive;

  bool is_additive(size_t input) const { return input < additive.size() && additive[input]; }

  int find(std::string_view name) const;
  // "b=2 m=16 n=64 | k=32: [b,m,k] [k,n] -> [b,m,n]" (reduction loops after the bar).
  std::string to_string() const;
};

// The iteration space of one node, or nullopt when the op has no parallel semantics (it
// runs replicated).
using IterationSpaceFn = std::function<std::optional<IterationSpace>(const Graph&, const Node&)>;

// The process-wide registry's declaration for this node's op.
std::optional<IterationSpace> iteration_space(const Graph& graph, const Node& node);

// Whether `v` is zeros made by a ConstantOfShape (what a gradient scatters into): an
// accumulating scatter into it is linear in its updates, so split or partial updates give
// partial sums. Strategy signatures record it, as iteration spaces read it.
bool is_zero_fill(const Graph& graph, ValueId v);

}  // namespace autopar
