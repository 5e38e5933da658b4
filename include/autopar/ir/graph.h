// Graph, Node and Value: autopar's SSA-style IR of one ONNX graph.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "autopar/ir/attribute.h"
#include "autopar/ir/dtype.h"
#include "autopar/ir/tensor.h"

namespace autopar {

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr int32_t kNoId = -1;
inline constexpr int64_t kUnknownDim = -1;

// A static shape. A dim may carry the name of the symbolic ONNX dim it was bound from
// ("batch"), so that export can write it back as a dim_param. During import a dim may be
// kUnknownDim and the rank may be unknown; verify() demands static shapes.
struct Shape {
  std::vector<int64_t> dims;
  std::vector<std::string> symbols;  // empty, or one entry per dim ("" = static)
  bool known = true;                 // false: rank unknown

  Shape() = default;
  Shape(std::vector<int64_t> d) : dims(std::move(d)) {}  // NOLINT: implicit by design
  Shape(std::initializer_list<int64_t> d) : dims(d) {}
  static Shape unknown() {
    Shape s;
    s.known = false;
    return s;
  }

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool is_static() const;
  int64_t num_elements() const { return element_count(dims); }
  std::string_view symbol(size_t i) const {
    return i < symbols.size() ? std::string_view(symbols[i]) : std::string_view();
  }
  bool operator==(const Shape& other) const;
};

enum class ValueKind : uint8_t {
  kInput,         // graph input fed at run time (data, labels)
  kParameter,     // trainable initializer
  kConstant,      // non-trainable initializer (BatchNorm statistics, shapes, masks)
  kIntermediate,  // produced by a node
};

const char* value_kind_name(ValueKind kind);

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  ValueKind kind = ValueKind::kIntermediate;
  NodeId producer = kNoId;
  std::vector<NodeId> consumers;  // one entry per use; maintained by Graph
  TensorPtr data;                 // initializer data; null for shape-only models

  bool is_initializer() const {
    return kind == ValueKind::kParameter || kind == ValueKind::kConstant;
  }
  int64_t num_bytes() const { return shape.num_elements() * dtype_size(dtype); }
};

// Phase and layer are what pipeline staging and the training-graph passes key on.
enum class Phase : uint8_t { kForward, kBackward, kOptimizer };
const char* phase_name(Phase phase);

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;            // "" is ai.onnx
  std::vector<ValueId> inputs;   // kNoId marks an omitted optional input
  std::vector<ValueId> outputs;  // kNoId marks an omitted optional output
  Attributes attrs;
  Phase phase = Phase::kForward;
  int32_t layer = -1;  // repeated block index, -1 outside any block
  // The source op this node carries out, as the id of a node of the lowering's prepared graph:
  // a forward op (itself), the op whose gradient it computes, or the op a precision cast feeds
  // or reads; -1 for none (communication, optimizer updates, sums of gradient contributions).
  // Copies of a node keep it, so a plan's kernels can be grouped as a framework runs them.
  int32_t source = -1;

  const Attribute* attr(std::string_view attr_name) const;
  int64_t attr_int(std::string_view attr_name, int64_t fallback) const;
  float attr_float(std::string_view attr_name, float fallback) const;
  std::string attr_string(std::string_view attr_name, std::string fallback) const;
  std::vector<int64_t> attr_ints(std::string_view attr_name,
                                 std::vector<int64_t> fallback = {}) const;
  ValueId input(size_t i) const { return i < inputs.size() ? inputs[i] : kNoId; }
  ValueId output(size_t i) const { return i < outputs.size() ? outputs[i] : kNoId; }
};

inline constexpr std::string_view kAutoparDomain = "ai.autopar";
// Fused training ops (an optimizer's update): computation, unlike ai.autopar's communication.
inline constexpr std::string_view kTrainingDomain = "ai.autopar.training";

class Graph {
 public:
  std::string name = "main";
  // Opset per domain ("" is ai.onnx).
  std::map<std::string, int64_t> opsets = {{"", 17}};

  int64_t opset(std::string_view domain = "") const;

  // Adds a value; its name must be unique.
  ValueId add_value(Value value);
  // Adds a node after all existing ones; its inputs must exist and its outputs must be
  // values without a producer. Sets producers and consumers.
  NodeId add_node(Node node);

  // Room for this many nodes and values without reallocating (a pass that knows its output's
  // size roughly).
  void reserve(int32_t nodes, int32_t values);
  void add_input(ValueId id) { inputs_.push_back(id); }
  void add_output(ValueId id) { outputs_.push_back(id); }
  void set_outputs(std::vector<ValueId> ids) { outputs_ = std::move(ids); }

  const Value& value(ValueId id) const {
    assert(id >= 0 && id < num_values());
    return values_[id];
  }
  Value& mutable_value(ValueId id) {
    assert(id >= 0 && id < num_values());
    return values_[id];
  }
  const Node& node(NodeId id) const {
    assert(id >= 0 && id < num_nodes());
    return nodes_[id];
  }
  Node& mutable_node(NodeId id) {
    assert(id >= 0 && id < num_nodes());
    return nodes_[id];
  }

  int32_t num_values() const { return static_cast<int32_t>(values_.size()); }
  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  bool is_output(ValueId id) const;

  // Renames a value; the new name must be free.
  void rename_value(ValueId id, std::string new_name);

  std::optional<ValueId> find_value(std::string_view value_name) const;
  std::optional<NodeId> find_node(std::string_view node_name) const;
  // A name not used by any value yet: base, or base_1, base_2, ...
  std::string unique_value_name(std::string_view base) const;
  std::string unique_node_name(std::string_view base) const;

  // Turns an intermediate value into a constant with data (constant folding); its producer
  // stays until remove_dead_nodes().
  void make_constant(ValueId id, Tensor data);
  // Rewires every use of `from` (node inputs and graph outputs) to `to`.
  void replace_uses(ValueId from, ValueId to);
  // Removes nodes none of whose outputs reach a graph output, then unused initializers and
  // intermediate values; renumbers ids. Graph inputs always stay.
  void remove_dead_nodes();
  // Recomputes producers and consumers from the nodes (after editing node inputs directly).
  void rebuild_uses();

  // Parameters, in value order.
  std::vector<ValueId> parameters() const;
  int64_t num_parameter_elements() const;

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::unordered_map<std::string, ValueId> value_by_name_;
  std::unordered_map<std::string, NodeId> node_by_name_;
};

}  // namespace autopar
