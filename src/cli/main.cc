// The autopar command line: a thin shell over the library.
#include <cstdio>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"autopar: automatic planner and compiler for parallel training"};
  app.set_version_flag("--version", "autopar 0.1.0");
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "autopar: error: {}\n", e.what());
    return 2;
  }
  if (argc == 1) fmt::print("{}", app.help());
  return 0;
}
