// The command line as a library call: what `autopar ARGS...` does, for main() and for the
// Python module (which captures --json answers instead of printing them).
#pragma once

#include <string>
#include <vector>

namespace autopar::cli {

struct CliOutcome {
  int exit_code = 0;  // 0 ok, 1 a check failed (verify, regress, validate), 2 a user error,
                      // 3 an internal error
  std::string error;  // the one line a failed command prints ("autopar: error: ..."), if any
};

// Parses `args` (without the program name) and runs the command; help and version go to
// stdout as they do from the shell, errors are returned, not printed.
CliOutcome run_cli(const std::vector<std::string>& args);

// run_cli with the command's --json answer captured into `json` (on this thread) instead of
// printed.
CliOutcome run_cli_json(const std::vector<std::string>& args, std::string& json);

}  // namespace autopar::cli
