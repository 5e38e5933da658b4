// The command line: subcommands registered, parsed and run, errors as one line.
#include "cli.h"

#include <cstdio>
#include <exception>
#include <utility>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "autotune.h"
#include "commands.h"
#include "plan_command.h"

namespace autopar::cli {
namespace {

thread_local std::string* json_capture = nullptr;

}  // namespace

void emit_json(const nlohmann::json& j) {
  if (json_capture != nullptr) {
    *json_capture += j.dump(2);
    *json_capture += "\n";
    return;
  }
  fmt::print("{}\n", j.dump(2));
}

CliOutcome run_cli(const std::vector<std::string>& args) {
  CLI::App app{"autopar: automatic planner and compiler for parallel training"};
  app.set_version_flag("--version", "autopar 0.1.0");
  app.require_subcommand(0, 1);
  Command command;
  int exit_code = 0;
  add_zoo_command(app, command);
  add_inspect_command(app, command);
  add_run_command(app, command);
  add_train_graph_command(app, command);
  add_transform_command(app, command);
  add_verify_command(app, command, &exit_code);
  add_estimate_command(app, command);
  add_simulate_command(app, command);
  add_profile_command(app, command);
  add_calibrate_command(app, command);
  add_autotune_command(app, command);
  add_regress_command(app, command, &exit_code);
  add_validate_command(app, command, &exit_code);
  std::vector<const char*> argv = {"autopar"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp& e) {
    return {app.exit(e), ""};
  } catch (const CLI::CallForAllHelp& e) {
    return {app.exit(e), ""};
  } catch (const CLI::CallForVersion& e) {
    return {app.exit(e), ""};
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    return {2, fmt::format("autopar: error: {}", message.substr(0, message.find('\n')))};
  }
  if (!command) {
    fmt::print("{}", app.help());
    return {0, ""};
  }
  try {
    Status status = command();
    if (!status.is_ok()) return {2, fmt::format("autopar: error: {}", status.message())};
  } catch (const std::bad_alloc&) {
    return {2, "autopar: error: out of memory"};
  } catch (const std::exception& e) {
    // A library below (protobuf, ONNX) threw where autopar expected a Status: still one line.
    return {3, fmt::format("autopar: internal error: {}", e.what())};
  }
  std::fflush(stdout);
  return {exit_code, ""};
}

CliOutcome run_cli_json(const std::vector<std::string>& args, std::string& json) {
  // The capture this call opens, closed however the call ends.
  struct Capture {
    std::string* outer;
    explicit Capture(std::string& json) : outer(std::exchange(json_capture, &json)) {}
    ~Capture() { json_capture = outer; }
  } capture(json);
  return run_cli(args);
}

}  // namespace autopar::cli
