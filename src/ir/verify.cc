// verify(graph): structural invariants of the IR.
#include "autopar/ir/verify.h"

#include <unordered_set>

#include "autopar/ops/op_def.h"

namespace autopar {

Status verify(const Graph& graph, const VerifyOptions& options) {
  const int32_t num_values = graph.num_values();
  std::unordered_set<std::string> names;
  for (ValueId id = 0; id < num_values; ++id) {
    const Value& v = graph.value(id);
    if (v.name.empty()) return error("value #{} has no name", id);
    if (!names.insert(v.name).second) return error("value name '{}' is used twice", v.name);
    if (options.require_types && v.dtype == DType::kUndefined) {
      return error("value '{}' has no dtype", v.name);
    }
    if (options.require_static_shapes && !v.shape.is_static()) {
      return error("value '{}' has no static shape", v.name);
    }
    if (!v.shape.symbols.empty() && v.shape.symbols.size() != v.shape.dims.size()) {
      return error("value '{}' has {} dim symbols for rank {}", v.name, v.shape.symbols.size(),
                   v.shape.rank());
    }
    if (v.data) {
      if (v.data->dtype() != v.dtype || v.data->dims() != v.shape.dims) {
        return error("value '{}': data does not match its type", v.name);
      }
    }
    if (v.kind == ValueKind::kIntermediate && v.producer == kNoId) {
      return error("value '{}' has no producer", v.name);
    }
    if (v.kind != ValueKind::kIntermediate && v.producer != kNoId) {
      return error("{} '{}' has a producer", value_kind_name(v.kind), v.name);
    }
  }

  std::vector<int> produced_by(num_values, kNoId);
  std::vector<int> use_count(num_values, 0);
  std::vector<bool> available(num_values, false);
  for (ValueId id = 0; id < num_values; ++id) {
    available[id] = graph.value(id).kind != ValueKind::kIntermediate;
  }
  for (ValueId in : graph.inputs()) {
    if (in < 0 || in >= num_values) return error("graph input id {} is out of range", in);
    if (graph.value(in).kind != ValueKind::kInput) {
      return error("graph input '{}' is a {}", graph.value(in).name,
                   value_kind_name(graph.value(in).kind));
    }
  }
  for (NodeId nid = 0; nid < graph.num_nodes(); ++nid) {
    const Node& n = graph.node(nid);
    if (options.require_registered_ops && !op_registry().find(n.domain, n.op_type)) {
      return error("node '{}' ({}): unsupported op type", n.name, n.op_type);
    }
    for (ValueId in : n.inputs) {
      if (in == kNoId) continue;
      if (in < 0 || in >= num_values)
        return error("node '{}': input id {} out of range", n.name, in);
      if (!available[in]) {
        return error("node '{}': input '{}' is used before it is produced", n.name,
                     graph.value(in).name);
      }
      ++use_count[in];
    }
    for (ValueId out : n.outputs) {
      if (out == kNoId) continue;
      if (out < 0 || out >= num_values) {
        return error("node '{}': output id {} out of range", n.name, out);
      }
      if (produced_by[out] != kNoId) {
        return error("value '{}' is produced twice", graph.value(out).name);
      }
      if (graph.value(out).producer != nid) {
        return error("value '{}': producer link is stale", graph.value(out).name);
      }
      produced_by[out] = nid;
      available[out] = true;
    }
  }
  for (ValueId id = 0; id < num_values; ++id) {
    if (static_cast<int>(graph.value(id).consumers.size()) != use_count[id]) {
      return error("value '{}': use list is stale", graph.value(id).name);
    }
  }
  for (ValueId out : graph.outputs()) {
    if (out < 0 || out >= num_values) return error("graph output id {} is out of range", out);
    if (!available[out]) return error("graph output '{}' is never produced", graph.value(out).name);
  }
  return Status::ok();
}

}  // namespace autopar
