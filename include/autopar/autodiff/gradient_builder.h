// GradientBuilder: the small DSL gradient rules are written in.
#pragma once

#include <vector>

#include "autopar/autodiff/emitter.h"
#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

// What a gradient rule sees of one forward node: its inputs and outputs, the gradients of its
// outputs (GO), which inputs need a gradient, and the Emitter's functions for backward nodes
// (phase bwd, the forward node's layer, types inferred as they are added). A rule calls
// set_grad(i, g) for each input i that needs one; an output nothing downstream depends on has
// GO(i) == kNoId.
class GradientBuilder : public Emitter {
 public:
  GradientBuilder(Graph& graph, NodeId forward, std::vector<ValueId> output_grads,
                  std::vector<bool> needs_input_grad, bool fused = false);
  // Whether the rule may emit fused training ops (ai.autopar.training).
  bool fused() const { return fused_; }

  const Node& node() const { return node_; }
  int64_t opset() const { return graph().opset(node_.domain); }
  size_t num_inputs() const { return node_.inputs.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_input(size_t i) const { return node_.input(i) != kNoId; }
  ValueId I(size_t i) const { return node_.inputs.at(i); }
  ValueId O(size_t i) const { return node_.outputs.at(i); }
  ValueId GO(size_t i) const { return i < output_grads_.size() ? output_grads_[i] : kNoId; }
  bool has_output_grad(size_t i) const { return GO(i) != kNoId; }
  bool needs_grad(size_t i) const { return i < needs_.size() && needs_[i]; }

  // References into the graph's values die when a node is emitted; dims are copies.
  const Value& value(ValueId id) const { return graph().value(id); }
  std::vector<int64_t> dims(ValueId id) const { return graph().value(id).shape.dims; }
  int64_t rank(ValueId id) const { return graph().value(id).shape.rank(); }
  DType dtype(ValueId id) const { return graph().value(id).dtype; }
  // Constant data of a value (an initializer or folded constant), or null.
  const Tensor* data(ValueId id) const { return graph().value(id).data.get(); }

  // Sets the gradient of input i; its type must be the input's.
  Status set_grad(size_t i, ValueId grad);
  const std::vector<ValueId>& input_grads() const { return input_grads_; }

  // "node 'name' (Op): gradient: <message>".
  template <typename... Args>
  Status fail(fmt::format_string<Args...> format, Args&&... args) const {
    return Status::error(fmt::format("node '{}' ({}): gradient: {}", node_.name, node_.op_type,
                                     fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  Node node_;  // a copy: emitting nodes may move the graph's node storage
  std::vector<ValueId> output_grads_;
  std::vector<bool> needs_;
  std::vector<ValueId> input_grads_;
  bool fused_ = false;
};

}  // namespace autopar
