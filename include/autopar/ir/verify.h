// verify(graph): the IR's structural invariants, checked before and after every pass.
#pragma once

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

struct VerifyOptions {
  bool require_static_shapes = true;
  // Every value has a dtype. Off only for imported graphs with values after unsupported ops.
  bool require_types = true;
  bool require_registered_ops = true;
};

// Checks ids, single producers, topological order, use lists, unique names, dtypes,
// initializer data sizes, static shapes and known op types. Returns the first violation.
Status verify(const Graph& graph, const VerifyOptions& options = {});

}  // namespace autopar
