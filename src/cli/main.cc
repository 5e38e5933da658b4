// The autopar command line: a thin shell over the library.
#include <cstdio>
#include <exception>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "autotune.h"
#include "commands.h"
#include "plan_command.h"

int main(int argc, char** argv) {
  CLI::App app{"autopar: automatic planner and compiler for parallel training"};
  app.set_version_flag("--version", "autopar 0.1.0");
  app.require_subcommand(0, 1);
  autopar::cli::Command command;
  autopar::cli::add_zoo_command(app, command);
  autopar::cli::add_inspect_command(app, command);
  autopar::cli::add_run_command(app, command);
  autopar::cli::add_train_graph_command(app, command);
  int exit_code = 0;
  autopar::cli::add_transform_command(app, command);
  autopar::cli::add_verify_command(app, command, &exit_code);
  autopar::cli::add_estimate_command(app, command);
  autopar::cli::add_simulate_command(app, command);
  autopar::cli::add_profile_command(app, command);
  autopar::cli::add_calibrate_command(app, command);
  autopar::cli::add_autotune_command(app, command);
  autopar::cli::add_regress_command(app, command, &exit_code);
  autopar::cli::add_validate_command(app, command, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    message = message.substr(0, message.find('\n'));
    fmt::print(stderr, "autopar: error: {}\n", message);
    return 2;
  }
  if (!command) {
    fmt::print("{}", app.help());
    return 0;
  }
  try {
    autopar::Status status = command();
    if (!status.is_ok()) {
      fmt::print(stderr, "autopar: error: {}\n", status.message());
      return 2;
    }
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "autopar: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    // A library below (protobuf, ONNX) threw where autopar expected a Status: still one line.
    fmt::print(stderr, "autopar: internal error: {}\n", e.what());
    return 3;
  }
  std::fflush(stdout);
  return exit_code;
}
