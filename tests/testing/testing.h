// Shared test helpers: small graphs and file paths.
#pragma once

#include <string>

#include "autopar/ir/graph.h"

namespace autopar::testing {

// x[batch=2,4] · w[4,3] + b[3] → relu, with seeded data.
Graph tiny_linear_graph();

// Absolute path of a file under the source tree.
std::string source_path(const std::string& relative);

}  // namespace autopar::testing
