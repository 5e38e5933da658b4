// Collapsing repeated layers by position: layers of one kind have the same node sequence, so
// the i-th node of a dropped layer corresponds to the i-th node of the kept representative.
#include "autopar/ir/collapse_layers.h"

#include <map>

#include "autopar/ir/graph_copy.h"
#include "autopar/ir/layers.h"

namespace autopar {

CollapsedGraph collapse_repeated_layers(const Graph& g) {
  CollapsedGraph out;
  const LayerStructure structure = layer_structure(g);
  int32_t layers = 0;
  for (const Node& n : g.nodes()) layers = std::max(layers, n.layer + 1);
  std::vector<int32_t> kind(layers, -1);
  for (size_t k = 0; k < structure.kinds.size(); ++k) {
    for (int32_t l : structure.kinds[k].layers) kind[l] = static_cast<int32_t>(k);
  }
  // Which layers stay, and which kept layer stands for each.
  std::vector<int32_t> stands_for(layers);
  std::vector<bool> kept(layers, true);
  for (int32_t a = 0; a < layers;) {
    int32_t b = a;
    while (b + 1 < layers && kind[b + 1] == kind[a] && kind[a] >= 0) ++b;
    for (int32_t l = a; l <= b; ++l) stands_for[l] = l;
    if (b - a + 1 >= 5) {
      for (int32_t l = a + 2; l < b - 1; ++l) {
        kept[l] = false;
        stands_for[l] = a + 1;
      }
    }
    a = b + 1;
  }
  std::vector<int32_t> renumber(layers, -1);
  for (int32_t l = 0; l < layers; ++l) {
    if (kept[l]) {
      renumber[l] = static_cast<int32_t>(out.original.size());
      out.original.push_back(l);
    }
  }
  out.layer_of.resize(layers);
  for (int32_t l = 0; l < layers; ++l) out.layer_of[l] = renumber[stands_for[l]];
  if (static_cast<int32_t>(out.original.size()) == layers) {
    out.graph = g;
    return out;
  }

  // Nodes of each layer in graph order: a dropped node's value maps to the value at the same
  // position of its representative.
  std::vector<std::vector<NodeId>> members(layers);
  std::vector<int32_t> position(g.num_nodes(), -1);
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const int32_t l = g.node(n).layer;
    if (l < 0) continue;
    position[n] = static_cast<int32_t>(members[l].size());
    members[l].push_back(n);
  }
  auto representative = [&](ValueId v) -> ValueId {
    const NodeId p = g.value(v).producer;
    if (p == kNoId) return v;
    const int32_t l = g.node(p).layer;
    if (l < 0 || kept[l]) return v;
    const Node& producer = g.node(p);
    const Node& twin = g.node(members[stands_for[l]][position[p]]);
    for (size_t o = 0; o < producer.outputs.size(); ++o) {
      if (producer.outputs[o] == v) return twin.outputs[o];
    }
    return v;
  };

  GraphCopy copy(g, out.graph);
  for (ValueId in : g.inputs()) out.graph.add_input(copy.value(in));
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.layer >= 0 && !kept[node.layer]) continue;
    Node rewired = node;
    for (ValueId& in : rewired.inputs) {
      if (in != kNoId) in = representative(in);
    }
    const NodeId id = copy.node(rewired);
    if (node.layer >= 0) out.graph.mutable_node(id).layer = renumber[node.layer];
  }
  std::vector<ValueId> outputs;
  for (ValueId o : g.outputs()) outputs.push_back(copy.value(representative(o)));
  out.graph.set_outputs(std::move(outputs));
  return out;
}

}  // namespace autopar
