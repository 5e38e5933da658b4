// Collapsing repeated layers: a model whose runs of identical layers are cut to three (the
// first, a representative of the middle, the last), for costing each distinct layer once and
// reusing it for its repeats.
#pragma once

#include <cstdint>
#include <vector>

#include "autopar/ir/graph.h"

namespace autopar {

struct CollapsedGraph {
  Graph graph;
  // Per layer of the original: the layer of the collapsed graph that stands for it.
  std::vector<int32_t> layer_of;
  // Per layer of the collapsed graph: the first original layer it stands for.
  std::vector<int32_t> original;
};

// Runs of at least four consecutive layers of one kind (layer_structure: same ops and
// parameter shapes) keep their first two and last layers; the last reads what the second
// produced in place of what the dropped ones did. Layers are renumbered 0.. in order. A graph
// without such runs comes back unchanged with the identity map.
CollapsedGraph collapse_repeated_layers(const Graph& graph);

}  // namespace autopar
