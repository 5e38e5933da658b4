// Collapsing repeated layers: a model whose runs of identical layers are cut to four (the
// first, a representative of the middle, the one before the last, the last), for costing each
// distinct layer once and reusing it for its repeats.
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

// Runs of at least five consecutive layers of one kind (layer_structure: same ops and
// parameter shapes) keep their first two and last two layers; the one before the last reads
// what the second produced in place of what the dropped ones did. The representative sits
// between repeats on both sides, as the layers it stands for do: the backward reaches it
// through a middle layer, not from the last one (whose gradient can arrive in another layout).
// Layers are renumbered 0.. in order. A graph without such runs comes back unchanged with the
// identity map.
CollapsedGraph collapse_repeated_layers(const Graph& graph);

}  // namespace autopar
