// The convolution family under a spatial split (sp): Conv and ConvTranspose computed on a
// device's block of rows plus a halo of its neighbours' rows, the partitioning knowledge of
// window ops kept with them rather than in the SPMD pass.
#pragma once

#include <cstdint>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/parallel/device_mesh.h"
#include "autopar/parallel/op_strategy.h"

namespace autopar {

// A block of output rows computed from the device's input rows and a halo.
struct RowWindow {
  int64_t before = 0, after = 0;  // halo rows (negative: own rows dropped)
  Attributes attrs;               // the node's attributes on its block
};

struct WindowedStrategy {
  OpStrategy strategy;
  RowWindow window;
};

// The strategies of window op `node` that split its first spatial dim over the mesh axis
// "sp", each derived from one of `bases` (its strategies over the other axes). Three forms
// occur in training graphs: the forward convolution (input and output rows split), the weight
// gradient (input rows and kernel taps split, a partial sum over sp) and the input gradient (a
// transposed convolution, input and output rows split). Empty for any other node, or where
// the rows do not divide.
std::vector<WindowedStrategy> windowed_strategies(const Graph& graph, const Node& node,
                                                  const DeviceMesh& mesh,
                                                  const std::vector<OpStrategy>& bases);

}  // namespace autopar
