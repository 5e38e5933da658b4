// Changing a graph's floating type (f32 → f64 for gradient checks and reference runs).
#pragma once

#include "autopar/ir/graph.h"

namespace autopar {

// Every value, initializer's data, Cast target, LayerNormalization stash_type, and tensor
// attribute (ConstantOfShape's value, Constant's value) of type `from` becomes `to`,
// converting the data.
void change_float_type(Graph& graph, DType from, DType to);

}  // namespace autopar
