// autopar._autopar: the command line as a function, for the autopar Python package. The
// package turns keyword arguments into flags and the --json answer into dicts.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cli/cli.h"

namespace py = pybind11;

PYBIND11_MODULE(_autopar, m) {
  m.doc() = "autopar's command line, called in process";
  m.def(
      "call",
      [](const std::vector<std::string>& args) {
        std::string json;
        autopar::cli::CliOutcome outcome;
        {
          // Searches and plans run on autopar's own threads; Python's may go on meanwhile.
          py::gil_scoped_release release;
          outcome = autopar::cli::run_cli_json(args, json);
        }
        return py::make_tuple(outcome.exit_code, outcome.error, json);
      },
      py::arg("args"),
      "Runs `autopar ARGS...` with --json answers captured: (exit code, error line, JSON text).");
}
