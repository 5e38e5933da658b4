// OpDef: everything the planner knows about one op type, and the registry that holds them.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/ops/parallel_semantics.h"
#include "autopar/support/status.h"

namespace autopar {

// What a shape rule sees of one node: its inputs' types and constant data, its attributes,
// and where it writes the outputs' types.
class InferenceContext {
 public:
  InferenceContext(const Graph& graph, const Node& node) : graph_(graph), node_(node) {
    outputs_.resize(node.outputs.size());
  }

  const Node& node() const { return node_; }
  const Graph& graph() const { return graph_; }
  int64_t opset() const { return graph_.opset(node_.domain); }

  size_t num_inputs() const { return node_.inputs.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_input(size_t i) const { return node_.input(i) != kNoId; }
  bool has_output(size_t i) const { return node_.output(i) != kNoId; }
  const Value& input(size_t i) const { return graph_.value(node_.inputs.at(i)); }
  DType input_dtype(size_t i) const { return input(i).dtype; }
  const std::vector<int64_t>& input_dims(size_t i) const { return input(i).shape.dims; }
  int64_t input_rank(size_t i) const { return input(i).shape.rank(); }
  // Constant data of input i (an initializer or folded value), or null.
  const Tensor* input_data(size_t i) const {
    return has_input(i) && input(i).data ? input(i).data.get() : nullptr;
  }

  void set_output(size_t i, DType dtype, std::vector<int64_t> dims) {
    outputs_.at(i) = {dtype, Shape(std::move(dims))};
  }
  const std::vector<std::pair<DType, Shape>>& outputs() const { return outputs_; }

  // "node 'name' (OpType): message", the form every shape-rule error takes.
  template <typename... Args>
  Status fail(fmt::format_string<Args...> format, Args&&... args) const {
    return Status::error(fmt::format("node '{}' ({}): {}", node_.name, node_.op_type,
                                     fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  const Graph& graph_;
  const Node& node_;
  std::vector<std::pair<DType, Shape>> outputs_;
};

class GradientBuilder;  // include/autopar/autodiff/gradient_builder.h

// Output dtypes and static shapes from input types, attributes and constant inputs.
using ShapeFn = std::function<Status(InferenceContext&)>;
// Operation count of one run of the node (a multiply-add counts 2); shapes are static.
using CountFn = std::function<double(const Graph&, const Node&)>;
// Emits the nodes computing the gradients of a node's inputs from its outputs' gradients.
using GradientFn = std::function<Status(GradientBuilder&)>;

// How gradients pass through an op.
enum class GradientKind : uint8_t {
  kUndeclared,  // no rule yet: differentiating through it is an error naming the op
  kRule,        // `gradient` builds them
  kNone,        // outputs carry no gradient (Shape, comparisons, integer results)
};

struct OpDef {
  std::string op_type;
  std::string domain;  // "" is ai.onnx
  ShapeFn infer;
  CountFn flops;
  // Bytes read and written by one run; when unset, the sum of input and output sizes.
  CountFn bytes;
  // Inputs that configure the op (shapes, axes, indices, running statistics, bounds):
  // never differentiated, so an initializer used only there is not a parameter.
  std::vector<int> config_inputs;
  // Inputs whose values the shape rule reads (a Reshape's shape, Slice's starts, axes): they
  // must be constants for shapes to be static.
  std::vector<int> shape_inputs;
  // Loop dims and operand maps (DESIGN.md, "Parallel semantics"); unset: runs replicated.
  IterationSpaceFn iteration_space;
  GradientKind gradient_kind = GradientKind::kUndeclared;
  GradientFn gradient;
  // The FLOP formula in words, shown by documentation and `autopar inspect --ops`.
  std::string flops_doc;

  bool is_config_input(int index) const;
  bool is_shape_input(int index) const;
};

class OpRegistry {
 public:
  // The index points into the definitions: a registry moves, never copies.
  OpRegistry() = default;
  OpRegistry(const OpRegistry&) = delete;
  OpRegistry& operator=(const OpRegistry&) = delete;
  OpRegistry(OpRegistry&&) = default;
  OpRegistry& operator=(OpRegistry&&) = default;

  // Registering the same (domain, op_type) twice is a programming error.
  void add(OpDef def);
  const OpDef* find(std::string_view domain, std::string_view op_type) const;
  OpDef* find_mutable(std::string_view domain, std::string_view op_type);
  std::vector<const OpDef*> all() const;
  size_t size() const { return defs_.size(); }

 private:
  // Ordered by (domain, op type) for all(); found through an index looked up by views
  // without building strings.
  struct KeyHash {
    using is_transparent = void;
    template <typename K>
    size_t operator()(const K& k) const {
      const size_t d = std::hash<std::string_view>()(std::string_view(k.first));
      return d * 31 + std::hash<std::string_view>()(std::string_view(k.second));
    }
  };
  struct KeyEqual {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return std::string_view(a.first) == std::string_view(b.first) &&
             std::string_view(a.second) == std::string_view(b.second);
    }
  };
  std::map<std::pair<std::string, std::string>, OpDef> defs_;
  std::unordered_map<std::pair<std::string, std::string>, OpDef*, KeyHash, KeyEqual> index_;
};

// Fills a registry with every supported op; the one explicit list lives in
// src/ops/register_all_ops.cc.
void register_all_ops(OpRegistry& registry);

// Attaches every gradient rule to the registry's OpDefs; the one explicit list lives in
// src/autodiff/register_all_gradients.cc.
void register_all_gradients(OpRegistry& registry);

// The process-wide registry, filled by register_all_ops() and register_all_gradients() on
// first use.
const OpRegistry& op_registry();

// Default bytes: every input and output read or written once.
double default_bytes(const Graph& graph, const Node& node);
double node_flops(const Graph& graph, const Node& node);
double node_bytes(const Graph& graph, const Node& node);

}  // namespace autopar
