// GraphBuilder: builds graphs in code (the zoo, tests), inferring each node's output
// types with the registry's shape rules as it goes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/ir/graph.h"

namespace autopar {

// How a parameter's data is generated. Data is a pure function of (seed, parameter name),
// so a model's weights do not depend on the order its parameters are built in.
struct ParamInit {
  enum class Kind : uint8_t { kNormal, kUniform, kZeros, kOnes };
  Kind kind = Kind::kNormal;
  float scale = 0.02f;  // standard deviation (normal) or half-width (uniform)

  static ParamInit normal(float stddev) { return {Kind::kNormal, stddev}; }
  static ParamInit uniform(float bound) { return {Kind::kUniform, bound}; }
  static ParamInit zeros() { return {Kind::kZeros, 0.0f}; }
  static ParamInit ones() { return {Kind::kOnes, 0.0f}; }
};

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string graph_name = "main", int64_t opset = 17);

  // Parameters get data when true; otherwise the graph is shape-only.
  void set_with_data(bool with_data) { with_data_ = with_data; }
  bool with_data() const { return with_data_; }
  void set_seed(uint64_t seed) { seed_ = seed; }

  // Node names are "<scope>/<op_type>" made unique; values are named after their node.
  void push_scope(std::string_view scope);
  void pop_scope();
  // Layer id given to every node added from now on (-1: none).
  void set_layer(int32_t layer) { layer_ = layer; }

  // A graph input. `symbols` names symbolic dims ("batch"), "" for static ones.
  ValueId input(std::string_view name, DType dtype, std::vector<int64_t> dims,
                std::vector<std::string> symbols = {});
  ValueId parameter(std::string_view name, std::vector<int64_t> dims, ParamInit init,
                    DType dtype = DType::kFloat32);
  ValueId constant(std::string_view name, Tensor data);
  // A constant of this type and shape without data: a large table in a shape-only model.
  ValueId constant_without_data(std::string_view name, DType dtype, std::vector<int64_t> dims);
  ValueId constant_ints(std::string_view name, const std::vector<int64_t>& values);
  ValueId constant_scalar(std::string_view name, float value, DType dtype = DType::kFloat32);

  // Adds a node and infers its outputs; returns the output ids. A shape-rule failure is a
  // programming error here (asserts): callers validate user options before building.
  std::vector<ValueId> op(std::string_view op_type, std::vector<ValueId> inputs,
                          Attributes attrs = {}, int num_outputs = 1, std::string_view domain = "");
  ValueId op1(std::string_view op_type, std::vector<ValueId> inputs, Attributes attrs = {}) {
    return op(op_type, std::move(inputs), std::move(attrs), 1)[0];
  }

  // Marks a graph output; `symbols` names symbolic dims of the output's shape.
  void output(ValueId id, std::string_view name = "", std::vector<std::string> symbols = {});

  const Graph& graph() const { return graph_; }
  Graph& mutable_graph() { return graph_; }
  Graph finish() { return std::move(graph_); }

 private:
  std::string scoped(std::string_view name) const;

  Graph graph_;
  std::vector<std::string> scopes_;
  int32_t layer_ = -1;
  bool with_data_ = true;
  uint64_t seed_ = 0;
};

}  // namespace autopar
