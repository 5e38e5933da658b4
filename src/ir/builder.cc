// GraphBuilder: code-built graphs with inferred types and seeded parameter data.
#include "autopar/ir/builder.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "autopar/ir/shape_inference.h"

namespace autopar {
namespace {

// FNV-1a, so a parameter's random stream depends on its name, not on build order.
uint64_t hash_name(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

Tensor make_data(std::string_view name, const std::vector<int64_t>& dims, ParamInit init,
                 DType dtype, uint64_t seed) {
  assert(dtype == DType::kFloat32 && "generated parameters are float32");
  Tensor t(DType::kFloat32, dims);
  std::span<float> out = t.mutable_data<float>();
  switch (init.kind) {
    case ParamInit::Kind::kZeros:
      break;
    case ParamInit::Kind::kOnes:
      std::fill(out.begin(), out.end(), 1.0f);
      break;
    case ParamInit::Kind::kNormal: {
      std::mt19937_64 rng(seed ^ hash_name(name));
      std::normal_distribution<float> dist(0.0f, init.scale);
      for (float& x : out) x = dist(rng);
      break;
    }
    case ParamInit::Kind::kUniform: {
      std::mt19937_64 rng(seed ^ hash_name(name));
      std::uniform_real_distribution<float> dist(-init.scale, init.scale);
      for (float& x : out) x = dist(rng);
      break;
    }
  }
  return t;
}

}  // namespace

GraphBuilder::GraphBuilder(std::string graph_name, int64_t opset) {
  graph_.name = std::move(graph_name);
  graph_.opsets = {{"", opset}};
}

void GraphBuilder::push_scope(std::string_view scope) { scopes_.emplace_back(scope); }

void GraphBuilder::pop_scope() {
  assert(!scopes_.empty());
  scopes_.pop_back();
}

std::string GraphBuilder::scoped(std::string_view name) const {
  std::string out;
  for (const std::string& s : scopes_) {
    out += s;
    out += '/';
  }
  out += name;
  return out;
}

ValueId GraphBuilder::input(std::string_view name, DType dtype, std::vector<int64_t> dims,
                            std::vector<std::string> symbols) {
  Value v;
  v.name = std::string(name);
  v.dtype = dtype;
  v.shape = Shape(std::move(dims));
  if (!symbols.empty()) {
    assert(symbols.size() == v.shape.dims.size());
    v.shape.symbols = std::move(symbols);
  }
  v.kind = ValueKind::kInput;
  ValueId id = graph_.add_value(std::move(v));
  graph_.add_input(id);
  return id;
}

ValueId GraphBuilder::parameter(std::string_view name, std::vector<int64_t> dims, ParamInit init,
                                DType dtype) {
  Value v;
  v.name = scoped(name);
  v.dtype = dtype;
  v.kind = ValueKind::kParameter;
  if (with_data_)
    v.data = std::make_shared<const Tensor>(make_data(v.name, dims, init, dtype, seed_));
  v.shape = Shape(std::move(dims));
  return graph_.add_value(std::move(v));
}

ValueId GraphBuilder::constant(std::string_view name, Tensor data) {
  Value v;
  v.name = graph_.unique_value_name(scoped(name));
  v.dtype = data.dtype();
  v.shape = Shape(data.dims());
  v.kind = ValueKind::kConstant;
  v.data = std::make_shared<const Tensor>(std::move(data));
  return graph_.add_value(std::move(v));
}

ValueId GraphBuilder::constant_without_data(std::string_view name, DType dtype,
                                            std::vector<int64_t> dims) {
  Value v;
  v.name = graph_.unique_value_name(scoped(name));
  v.dtype = dtype;
  v.shape = Shape(std::move(dims));
  v.kind = ValueKind::kConstant;
  return graph_.add_value(std::move(v));
}

ValueId GraphBuilder::constant_ints(std::string_view name, const std::vector<int64_t>& values) {
  return constant(name, Tensor::vector_int64(values));
}

ValueId GraphBuilder::constant_scalar(std::string_view name, float value, DType dtype) {
  assert(dtype == DType::kFloat32 && "scalar constants are float32");
  return constant(name, Tensor::from_float({}, std::span(&value, 1)));
}

std::vector<ValueId> GraphBuilder::op(std::string_view op_type, std::vector<ValueId> inputs,
                                      Attributes attrs, int num_outputs, std::string_view domain) {
  Node n;
  n.name = graph_.unique_node_name(scoped(op_type));
  n.op_type = std::string(op_type);
  n.domain = std::string(domain);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.layer = layer_;
  if (!n.domain.empty() && !graph_.opsets.count(n.domain)) graph_.opsets[n.domain] = 1;
  for (int i = 0; i < num_outputs; ++i) {
    Value v;
    v.name = graph_.unique_value_name(num_outputs == 1 ? n.name : fmt::format("{}:{}", n.name, i));
    v.shape = Shape::unknown();
    n.outputs.push_back(graph_.add_value(std::move(v)));
  }
  std::vector<ValueId> outputs = n.outputs;
  NodeId id = graph_.add_node(std::move(n));
  Status status = infer_node(graph_, id);
  if (!status.is_ok()) {
    fmt::print(stderr, "GraphBuilder: {}\n", status.message());
    assert(false && "GraphBuilder::op: shape rule failed");
  }
  return outputs;
}

void GraphBuilder::output(ValueId id, std::string_view name, std::vector<std::string> symbols) {
  if (!name.empty() && name != graph_.value(id).name) {
    graph_.rename_value(id, std::string(name));
  }
  Value& v = graph_.mutable_value(id);
  if (!symbols.empty()) {
    assert(symbols.size() == v.shape.dims.size());
    v.shape.symbols = std::move(symbols);
  }
  graph_.add_output(id);
}

}  // namespace autopar
