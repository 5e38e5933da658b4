// The op registry: lookup, the process-wide instance and default byte counts.
#include <algorithm>
#include <cassert>

#include "autopar/ops/op_def.h"

namespace autopar {

bool OpDef::is_config_input(int index) const {
  return std::find(config_inputs.begin(), config_inputs.end(), index) != config_inputs.end();
}

bool OpDef::is_shape_input(int index) const {
  return std::find(shape_inputs.begin(), shape_inputs.end(), index) != shape_inputs.end();
}

void OpRegistry::add(OpDef def) {
  auto key = std::make_pair(def.domain, def.op_type);
  assert(!defs_.count(key) && "an op type is registered once");
  auto [it, added] = defs_.emplace(key, std::move(def));
  index_.emplace(std::move(key), &it->second);
}

const OpDef* OpRegistry::find(std::string_view domain, std::string_view op_type) const {
  const std::string_view d = domain == "ai.onnx" ? std::string_view() : domain;
  auto it = index_.find(std::make_pair(d, op_type));
  return it == index_.end() ? nullptr : it->second;
}

OpDef* OpRegistry::find_mutable(std::string_view domain, std::string_view op_type) {
  const std::string_view d = domain == "ai.onnx" ? std::string_view() : domain;
  auto it = index_.find(std::make_pair(d, op_type));
  return it == index_.end() ? nullptr : it->second;
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> out;
  for (const auto& [key, def] : defs_) out.push_back(&def);
  return out;
}

const OpRegistry& op_registry() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_all_ops(r);
    register_all_gradients(r);
    return r;
  }();
  return registry;
}

double default_bytes(const Graph& graph, const Node& node) {
  double total = 0;
  for (ValueId in : node.inputs) {
    if (in != kNoId) total += static_cast<double>(graph.value(in).num_bytes());
  }
  for (ValueId out : node.outputs) {
    if (out != kNoId) total += static_cast<double>(graph.value(out).num_bytes());
  }
  return total;
}

double node_flops(const Graph& graph, const Node& node) {
  const OpDef* def = op_registry().find(node.domain, node.op_type);
  return def && def->flops ? def->flops(graph, node) : 0.0;
}

double node_bytes(const Graph& graph, const Node& node) {
  const OpDef* def = op_registry().find(node.domain, node.op_type);
  if (def && def->bytes) return def->bytes(graph, node);
  return default_bytes(graph, node);
}

}  // namespace autopar
