// Layer detection from node-name scopes or from the repeated op sequence.
#include "autopar/ir/layers.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

namespace autopar {
namespace {

// `h.3`, `layer.3`, `layer2.1`, `encoder.layer.3`: a word, a dot and an index.
bool is_indexed_scope(std::string_view component) {
  const size_t dot = component.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == component.size()) return false;
  for (size_t i = dot + 1; i < component.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(component[i]))) return false;
  }
  const char before = component[dot - 1];
  return std::isalnum(static_cast<unsigned char>(before)) || before == '_';
}

std::vector<std::string_view> split_path(std::string_view name) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    parts.push_back(name.substr(start, slash == std::string_view::npos ? slash : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return parts;
}

bool assign_from_names(Graph& graph) {
  // depth → block key → layer number (in order of first appearance).
  std::map<size_t, std::unordered_map<std::string, int32_t>> blocks;
  std::vector<std::vector<std::pair<size_t, std::string>>> scopes(graph.num_nodes());
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    const std::vector<std::string_view> parts = split_path(graph.node(id).name);
    // The last component is the node's own name, not a scope.
    for (size_t d = 0; d + 1 < parts.size(); ++d) {
      if (!is_indexed_scope(parts[d])) continue;
      std::string key;
      for (size_t i = 0; i <= d; ++i) {
        if (i) key += '/';
        key += parts[i];
      }
      auto& at_depth = blocks[d];
      at_depth.emplace(key, static_cast<int32_t>(at_depth.size()));
      scopes[id].emplace_back(d, std::move(key));
    }
  }
  for (const auto& [depth, keys] : blocks) {
    if (keys.size() < 2) continue;
    for (NodeId id = 0; id < graph.num_nodes(); ++id) {
      int32_t layer = -1;
      for (const auto& [d, key] : scopes[id]) {
        if (d == depth) layer = keys.at(key);
      }
      graph.mutable_node(id).layer = layer;
    }
    return true;
  }
  return false;
}

// crossing[b]: how many values produced before node b are read at or after it.
std::vector<int64_t> values_crossing(const Graph& graph) {
  const int64_t n = graph.num_nodes();
  std::vector<int64_t> diff(n + 2, 0);
  for (const Value& v : graph.values()) {
    if (v.producer == kNoId || v.consumers.empty()) continue;
    const int64_t last = *std::max_element(v.consumers.begin(), v.consumers.end());
    if (last <= v.producer) continue;
    ++diff[v.producer + 1];
    --diff[last + 1];
  }
  std::vector<int64_t> crossing(n + 1, 0);
  int64_t running = 0;
  for (int64_t b = 0; b <= n; ++b) {
    running += diff[b];
    crossing[b] = running;
  }
  return crossing;
}

bool assign_from_structure(Graph& graph) {
  const int64_t n = graph.num_nodes();
  std::unordered_map<std::string, int32_t> type_ids;
  std::vector<int32_t> sequence(n);
  std::unordered_map<int32_t, int64_t> last_seen;
  std::set<int64_t> periods;
  for (int64_t i = 0; i < n; ++i) {
    const Node& node = graph.node(static_cast<NodeId>(i));
    const std::string type = node.domain + "::" + node.op_type;
    const int32_t id = type_ids.emplace(type, static_cast<int32_t>(type_ids.size())).first->second;
    sequence[i] = id;
    if (auto it = last_seen.find(id); it != last_seen.end() && i - it->second >= 2) {
      periods.insert(i - it->second);
    }
    last_seen[id] = i;
  }
  // The best run: positions [run_start, run_start + run) each equal to the one a period on.
  int64_t best_period = 0, best_copies = 0, run_start = 0, best_run = 0;
  for (int64_t period : periods) {
    int64_t run = 0;
    for (int64_t i = 0; i + period < n; ++i) {
      run = sequence[i] == sequence[i + period] ? run + 1 : 0;
      const int64_t copies = run / period + 1;
      if (copies >= 2 && copies * period > best_copies * best_period) {
        best_period = period;
        best_copies = copies;
        run_start = i - run + 1;
        best_run = run;
      }
    }
    // A run that keeps growing past the best keeps the same copies; extend it to its end.
    if (best_period == period) {
      int64_t i = run_start + best_run;
      while (i + period < n && sequence[i] == sequence[i + period]) ++i, ++best_run;
    }
  }
  if (best_copies < 2 || best_copies * best_period < 4) return false;
  // The copies can start anywhere the run leaves room for; blocks begin where the fewest
  // values cross their boundaries (the residual stream between transformer layers).
  const std::vector<int64_t> crossing = values_crossing(graph);
  const int64_t slack = best_run + best_period - best_copies * best_period;
  int64_t best_start = run_start, best_cost = -1;
  for (int64_t start = run_start; start <= run_start + slack; ++start) {
    int64_t cost = 0;
    for (int64_t k = 0; k <= best_copies; ++k) cost += crossing[start + k * best_period];
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best_start = start;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const bool inside = i >= best_start && i < best_start + best_copies * best_period;
    graph.mutable_node(static_cast<NodeId>(i)).layer =
        inside ? static_cast<int32_t>((i - best_start) / best_period) : -1;
  }
  return true;
}

}  // namespace

const char* layer_source_name(LayerSource source) {
  switch (source) {
    case LayerSource::kNone:
      return "none";
    case LayerSource::kNames:
      return "names";
    case LayerSource::kStructure:
      return "structure";
  }
  return "none";
}

LayerSource assign_layers(Graph& graph) {
  if (assign_from_names(graph)) return LayerSource::kNames;
  if (assign_from_structure(graph)) return LayerSource::kStructure;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) graph.mutable_node(id).layer = -1;
  return LayerSource::kNone;
}

LayerStructure layer_structure(const Graph& graph) {
  std::map<int32_t, std::string> signature;
  std::map<int32_t, int64_t> nodes;
  std::map<int32_t, int64_t> params;
  std::vector<int32_t> owner(graph.num_values(), -1);
  for (const Node& node : graph.nodes()) {
    if (node.layer < 0) continue;
    std::string& sig = signature[node.layer];
    sig += node.domain;
    sig += node.op_type;
    sig += ';';
    ++nodes[node.layer];
    for (ValueId in : node.inputs) {
      if (in == kNoId || graph.value(in).kind != ValueKind::kParameter) continue;
      if (owner[in] < 0 || node.layer < owner[in]) owner[in] = node.layer;
    }
  }
  for (ValueId id = 0; id < graph.num_values(); ++id) {
    if (owner[id] < 0) continue;
    const Value& v = graph.value(id);
    params[owner[id]] += v.shape.num_elements();
    signature[owner[id]] += fmt::format("p[{}];", fmt::join(v.shape.dims, ","));
  }
  LayerStructure out;
  out.count = static_cast<int32_t>(signature.size());
  std::map<std::string, size_t> kind_of;
  for (const auto& [layer, sig] : signature) {
    auto [it, added] = kind_of.emplace(sig, out.kinds.size());
    if (added) out.kinds.push_back({{}, nodes[layer], params[layer]});
    out.kinds[it->second].layers.push_back(layer);
  }
  return out;
}

}  // namespace autopar
