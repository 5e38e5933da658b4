// Graph construction, lookup and the small edits passes need (folding, dead-code removal).
#include "autopar/ir/graph.h"

#include <algorithm>

#include <fmt/format.h>

namespace autopar {

bool Shape::is_static() const {
  if (!known) return false;
  return std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d >= 0; });
}

bool Shape::operator==(const Shape& other) const {
  if (known != other.known || dims != other.dims) return false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (symbol(i) != other.symbol(i)) return false;
  }
  return true;
}

const char* value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::kInput:
      return "input";
    case ValueKind::kParameter:
      return "param";
    case ValueKind::kConstant:
      return "const";
    case ValueKind::kIntermediate:
      return "value";
  }
  return "?";
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "fwd";
    case Phase::kBackward:
      return "bwd";
    case Phase::kOptimizer:
      return "opt";
  }
  return "?";
}

const Attribute* Node::attr(std::string_view attr_name) const {
  auto it = attrs.find(std::string(attr_name));
  return it == attrs.end() ? nullptr : &it->second;
}

int64_t Node::attr_int(std::string_view attr_name, int64_t fallback) const {
  const Attribute* a = attr(attr_name);
  return a && a->kind() == Attribute::Kind::kInt ? a->i() : fallback;
}

float Node::attr_float(std::string_view attr_name, float fallback) const {
  const Attribute* a = attr(attr_name);
  if (a && a->kind() == Attribute::Kind::kFloat) return a->f();
  if (a && a->kind() == Attribute::Kind::kInt) return static_cast<float>(a->i());
  return fallback;
}

std::string Node::attr_string(std::string_view attr_name, std::string fallback) const {
  const Attribute* a = attr(attr_name);
  return a && a->kind() == Attribute::Kind::kString ? a->s() : fallback;
}

std::vector<int64_t> Node::attr_ints(std::string_view attr_name,
                                     std::vector<int64_t> fallback) const {
  const Attribute* a = attr(attr_name);
  return a && a->kind() == Attribute::Kind::kInts ? a->ints() : fallback;
}

int64_t Graph::opset(std::string_view domain) const {
  std::string key(domain == "ai.onnx" ? "" : domain);
  auto it = opsets.find(key);
  return it == opsets.end() ? 0 : it->second;
}

void Graph::reserve(int32_t nodes, int32_t values) {
  nodes_.reserve(static_cast<size_t>(std::max(nodes, 0)));
  values_.reserve(static_cast<size_t>(std::max(values, 0)));
  node_by_name_.reserve(static_cast<size_t>(std::max(nodes, 0)));
  value_by_name_.reserve(static_cast<size_t>(std::max(values, 0)));
}

ValueId Graph::add_value(Value value) {
  ValueId id = num_values();
  value.producer = kNoId;
  value.consumers.clear();
  [[maybe_unused]] const bool added = value_by_name_.try_emplace(value.name, id).second;
  assert(added && "value names are unique");
  values_.push_back(std::move(value));
  return id;
}

NodeId Graph::add_node(Node node) {
  NodeId id = num_nodes();
  for (ValueId in : node.inputs) {
    if (in == kNoId) continue;
    assert(in >= 0 && in < num_values());
    values_[in].consumers.push_back(id);
  }
  for (ValueId out : node.outputs) {
    if (out == kNoId) continue;
    assert(out >= 0 && out < num_values());
    assert(values_[out].producer == kNoId && "a value has one producer");
    values_[out].producer = id;
    values_[out].kind = ValueKind::kIntermediate;
  }
  if (!node.name.empty()) node_by_name_.emplace(node.name, id);
  nodes_.push_back(std::move(node));
  return id;
}

void Graph::rename_value(ValueId id, std::string new_name) {
  assert(!value_by_name_.count(new_name) && "value names are unique");
  value_by_name_.erase(values_[id].name);
  value_by_name_.emplace(new_name, id);
  values_[id].name = std::move(new_name);
}

bool Graph::is_output(ValueId id) const {
  return std::find(outputs_.begin(), outputs_.end(), id) != outputs_.end();
}

std::optional<ValueId> Graph::find_value(std::string_view value_name) const {
  auto it = value_by_name_.find(std::string(value_name));
  if (it == value_by_name_.end()) return std::nullopt;
  return it->second;
}

std::optional<NodeId> Graph::find_node(std::string_view node_name) const {
  auto it = node_by_name_.find(std::string(node_name));
  if (it == node_by_name_.end()) return std::nullopt;
  return it->second;
}

std::string Graph::unique_value_name(std::string_view base) const {
  std::string name(base);
  for (int i = 1; value_by_name_.count(name); ++i) name = fmt::format("{}_{}", base, i);
  return name;
}

std::string Graph::unique_node_name(std::string_view base) const {
  std::string name(base);
  for (int i = 1; node_by_name_.count(name); ++i) name = fmt::format("{}_{}", base, i);
  return name;
}

void Graph::make_constant(ValueId id, Tensor data) {
  Value& v = mutable_value(id);
  v.dtype = data.dtype();
  v.shape = Shape(data.dims());
  v.data = std::make_shared<const Tensor>(std::move(data));
  if (v.producer != kNoId) {
    Node& producer = nodes_[v.producer];
    for (ValueId& out : producer.outputs) {
      if (out == id) out = kNoId;
    }
  }
  v.producer = kNoId;
  v.kind = ValueKind::kConstant;
}

void Graph::replace_uses(ValueId from, ValueId to) {
  for (Node& n : nodes_) {
    for (ValueId& in : n.inputs) {
      if (in == from) in = to;
    }
  }
  for (ValueId& out : outputs_) {
    if (out == from) out = to;
  }
  rebuild_uses();
}

void Graph::rebuild_uses() {
  for (Value& v : values_) {
    v.consumers.clear();
    v.producer = kNoId;
  }
  for (NodeId id = 0; id < num_nodes(); ++id) {
    for (ValueId in : nodes_[id].inputs) {
      if (in != kNoId) values_[in].consumers.push_back(id);
    }
    for (ValueId out : nodes_[id].outputs) {
      if (out != kNoId) values_[out].producer = id;
    }
  }
}

void Graph::remove_dead_nodes() {
  rebuild_uses();
  std::vector<bool> live_value(values_.size(), false);
  std::vector<bool> live_node(nodes_.size(), false);
  for (ValueId out : outputs_) live_value[out] = true;
  for (ValueId in : inputs_) live_value[in] = true;
  // Nodes are in topological order, so one backward sweep finds everything live.
  for (NodeId id = num_nodes() - 1; id >= 0; --id) {
    const Node& n = nodes_[id];
    bool live = false;
    for (ValueId out : n.outputs) live = live || (out != kNoId && live_value[out]);
    // Communication nodes without outputs (Send) are kept: they have effects.
    if (n.domain == kAutoparDomain && n.outputs.empty()) live = true;
    if (!live) continue;
    live_node[id] = true;
    for (ValueId in : n.inputs) {
      if (in != kNoId) live_value[in] = true;
    }
  }
  for (NodeId id = 0; id < num_nodes(); ++id) {
    if (!live_node[id]) continue;
    for (ValueId out : nodes_[id].outputs) {
      if (out != kNoId) live_value[out] = true;  // unused side outputs of live nodes stay
    }
  }

  std::vector<ValueId> new_value_id(values_.size(), kNoId);
  std::vector<Value> values;
  for (ValueId id = 0; id < num_values(); ++id) {
    if (!live_value[id]) continue;
    new_value_id[id] = static_cast<ValueId>(values.size());
    values.push_back(std::move(values_[id]));
  }
  std::vector<Node> nodes;
  for (NodeId id = 0; id < num_nodes(); ++id) {
    if (!live_node[id]) continue;
    Node n = std::move(nodes_[id]);
    for (ValueId& in : n.inputs) in = in == kNoId ? kNoId : new_value_id[in];
    for (ValueId& out : n.outputs) out = out == kNoId ? kNoId : new_value_id[out];
    nodes.push_back(std::move(n));
  }
  for (ValueId& in : inputs_) in = new_value_id[in];
  for (ValueId& out : outputs_) out = new_value_id[out];
  values_ = std::move(values);
  nodes_ = std::move(nodes);
  value_by_name_.clear();
  node_by_name_.clear();
  for (ValueId id = 0; id < num_values(); ++id) value_by_name_.emplace(values_[id].name, id);
  for (NodeId id = 0; id < num_nodes(); ++id) {
    if (!nodes_[id].name.empty()) node_by_name_.emplace(nodes_[id].name, id);
  }
  rebuild_uses();
}

std::vector<ValueId> Graph::parameters() const {
  std::vector<ValueId> ids;
  for (ValueId id = 0; id < num_values(); ++id) {
    if (values_[id].kind == ValueKind::kParameter) ids.push_back(id);
  }
  return ids;
}

int64_t Graph::num_parameter_elements() const {
  int64_t total = 0;
  for (const Value& v : values_) {
    if (v.kind == ValueKind::kParameter) total += v.shape.num_elements();
  }
  return total;
}

}  // namespace autopar
