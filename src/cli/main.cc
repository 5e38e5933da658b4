// The autopar command line: a thin shell over the library.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const autopar::cli::CliOutcome outcome = autopar::cli::run_cli(args);
  if (!outcome.error.empty()) fmt::print(stderr, "{}\n", outcome.error);
  return outcome.exit_code;
}
