// Layer detection: finds the repeated blocks of an imported graph and numbers them.
#pragma once

#include <string>
#include <vector>

#include "autopar/ir/graph.h"

namespace autopar {

enum class LayerSource : uint8_t { kNone, kNames, kStructure };
const char* layer_source_name(LayerSource source);

// Assigns Node::layer to every node of a repeated block and -1 elsewhere.
//  - names: the outermost node-name scope with an index (`/h.3/attn/MatMul`,
//    `/encoder/layer.3/...`, `/layer2/layer2.1/conv1/Conv`) that at least two blocks share;
//    blocks are numbered in order of first appearance;
//  - structure: otherwise the longest run of one op-type sequence repeated back to back
//    (k ≥ 2 copies of a period of at least two nodes), found from the gaps between
//    successive nodes of one op type.
LayerSource assign_layers(Graph& graph);

// One group of layers with the same structure (op sequence and parameter shapes).
struct LayerKind {
  std::vector<int32_t> layers;  // layer ids, ascending
  int64_t nodes = 0;            // nodes per layer
  int64_t params = 0;           // trainable parameter elements per layer
};

struct LayerStructure {
  int32_t count = 0;  // number of distinct layer ids
  std::vector<LayerKind> kinds;
};

// Groups the graph's layers (Node::layer ≥ 0) by structure. A parameter belongs to the
// lowest layer that uses it.
LayerStructure layer_structure(const Graph& graph);

}  // namespace autopar
