// OpCase: one node in its own graph, for testing an op's shape rule, errors and FLOPs.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "autopar/ir/graph.h"
#include "autopar/ir/shape_inference.h"
#include "autopar/ops/op_def.h"

namespace autopar::ops_test {

// Inputs are named in0, in1, ... and the node is 'n', so messages read
// "node 'n' (Op): ...". Builder-style: OpCase("Add").in({2, 3}).in({3}).infer().
class OpCase {
 public:
  explicit OpCase(std::string op_type, int64_t opset = 17, std::string domain = "")
      : op_type_(std::move(op_type)), domain_(std::move(domain)) {
    graph_.opsets = {{"", opset}};
    if (!domain_.empty()) graph_.opsets[domain_] = 1;
  }

  OpCase& in(DType dtype, std::vector<int64_t> dims) {
    Value v;
    v.name = next_name();
    v.dtype = dtype;
    v.shape = Shape(std::move(dims));
    v.kind = ValueKind::kInput;
    inputs_.push_back(graph_.add_value(std::move(v)));
    return *this;
  }
  OpCase& in(std::vector<int64_t> dims) { return in(DType::kFloat32, std::move(dims)); }
  OpCase& constant(Tensor data) {
    Value v;
    v.name = next_name();
    v.dtype = data.dtype();
    v.shape = Shape(data.dims());
    v.kind = ValueKind::kConstant;
    v.data = std::make_shared<const Tensor>(std::move(data));
    inputs_.push_back(graph_.add_value(std::move(v)));
    return *this;
  }
  // A constant i64 vector input (shapes, axes, pads, repeats).
  OpCase& ints(const std::vector<int64_t>& values) {
    return constant(Tensor::vector_int64(values));
  }
  OpCase& floats(const std::vector<float>& values) {
    return constant(Tensor::from_float({static_cast<int64_t>(values.size())}, values));
  }
  // An omitted optional input.
  OpCase& none() {
    inputs_.push_back(kNoId);
    ++next_input_;
    return *this;
  }
  OpCase& attr(const std::string& name, Attribute value) {
    attrs_[name] = std::move(value);
    return *this;
  }
  OpCase& outputs(int count) {
    num_outputs_ = count;
    return *this;
  }
  // Output i is omitted (an empty name in ONNX).
  OpCase& omit_output(int i) {
    omitted_.push_back(i);
    return *this;
  }

  // Runs the shape rule: the outputs' types as "f32[2,3] bool[2,3]" ("-" for an omitted
  // output), or "error: <message>".
  std::string infer() {
    build();
    Status status = infer_node(graph_, node_);
    if (!status.is_ok()) return "error: " + status.message();
    std::vector<std::string> parts;
    for (ValueId id : graph_.node(node_).outputs) {
      if (id == kNoId) {
        parts.emplace_back("-");
        continue;
      }
      const Value& v = graph_.value(id);
      parts.push_back(fmt::format("{}[{}]", dtype_name(v.dtype), fmt::join(v.shape.dims, ",")));
    }
    return fmt::format("{}", fmt::join(parts, " "));
  }

  // FLOPs of the node after infer().
  double flops() const { return node_flops(graph_, graph_.node(node_)); }
  double bytes() const { return node_bytes(graph_, graph_.node(node_)); }
  const Graph& graph() const { return graph_; }

 private:
  std::string next_name() { return fmt::format("in{}", next_input_++); }

  void build() {
    if (node_ != kNoId) return;
    Node n;
    n.name = "n";
    n.op_type = op_type_;
    n.domain = domain_;
    n.inputs = inputs_;
    n.attrs = attrs_;
    for (int i = 0; i < num_outputs_; ++i) {
      if (std::find(omitted_.begin(), omitted_.end(), i) != omitted_.end()) {
        n.outputs.push_back(kNoId);
        continue;
      }
      Value v;
      v.name = fmt::format("out{}", i);
      v.shape = Shape::unknown();
      n.outputs.push_back(graph_.add_value(std::move(v)));
    }
    node_ = graph_.add_node(std::move(n));
  }

  Graph graph_;
  std::string op_type_;
  std::string domain_;
  std::vector<ValueId> inputs_;
  Attributes attrs_;
  int num_outputs_ = 1;
  std::vector<int> omitted_;
  int next_input_ = 0;
  NodeId node_ = kNoId;
};

}  // namespace autopar::ops_test
