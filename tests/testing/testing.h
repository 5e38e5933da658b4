// Shared test helpers: small graphs and file paths.
#pragma once

#include <string>
#include <vector>

#include "autopar/ir/graph.h"

namespace autopar::testing {

// x[batch=2,4] · w[4,3] + b[3] → relu, with seeded data.
Graph tiny_linear_graph();

// x[4, 8] → MatMul w0 → Relu (layer 0) → MatMul w1 → Relu (layer 1) → y; parameters with
// seeded data when `with_data`.
Graph two_layer_mlp(bool with_data);

// Absolute path of a file under the source tree.
std::string source_path(const std::string& relative);

// A fresh, empty directory for one test: <tmp>/autopar_tests/<name>.<pid>, removed when the
// process exits unless AUTOPAR_KEEP_TEST_DIRS is set (to look at what a failing test wrote).
std::string temp_dir(const std::string& name);

// What one run of the autopar binary printed and returned.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
// Runs build/autopar with `args` in `working_dir` (default: a temp dir of its own).
CommandResult run_autopar(const std::vector<std::string>& args,
                          const std::string& working_dir = "");

}  // namespace autopar::testing
