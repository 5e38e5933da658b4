// autopar calibrate --backend cpu [--comm inproc] -o PROFILE [--quick]: fits a hardware
// profile of this machine from microbenchmarks run through the runtime.
#include <chrono>
#include <ctime>
#include <fstream>

#include "autopar/cost/calibrate.h"
#include "commands.h"

namespace autopar::cli {
namespace {

struct CalibrateFlags {
  std::string backend = "cpu";
  std::string comm = "inproc";
  std::string out;
  bool quick = false;
  int sweeps = 0;  // 0: five, or one with --quick
};

Status run_calibrate(const CalibrateFlags& f) {
  if (f.backend != "cpu") return error("--backend {}: only cpu can be calibrated here", f.backend);
  if (f.comm != "inproc")
    return error("--comm {}: calibration measures the inproc communicator (threads)", f.comm);
  CalibrationOptions options;
  options.quick = f.quick;
  if (f.sweeps < 0) return error("--sweeps {}: must be at least 1", f.sweeps);
  options.sweeps = f.sweeps > 0 ? f.sweeps : f.quick ? 1 : 5;
  ASSIGN_OR_RETURN(Calibration cal, calibrate_cpu(options));
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  std::string header = fmt::format(
      "# Measured by `autopar calibrate --backend cpu` on {} ({}, median of {} sweeps): one\n"
      "# device per core, the inproc communicator between them. Fit (held-out sizes):\n",
      date, f.quick ? "quick" : "full", options.sweeps);
  for (const std::string& line : cal.report) header += "#   " + line + "\n";
  std::ofstream out(f.out);
  out << profile_yaml(cal.profile, header);
  if (!out) return error("-o {}: cannot write", f.out);
  for (const std::string& line : cal.report) fmt::print("{}\n", line);
  fmt::print("{}: profile {} written (worst held-out error {:.1f}%)\n", f.out, cal.profile.name,
             cal.worst_held_out_error * 100);
  return Status::ok();
}

}  // namespace

void add_calibrate_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<CalibrateFlags>();
  CLI::App* c =
      app.add_subcommand("calibrate", "measure this machine and write its hardware profile");
  c->add_option("--backend", flags->backend, "cpu (the default)");
  c->add_option("--comm", flags->comm, "inproc (the default)");
  c->add_option("-o,--output", flags->out, "profile YAML to write")->required();
  c->add_flag("--quick", flags->quick, "fewer, smaller sizes (seconds instead of a minute)");
  c->add_option("--sweeps", flags->sweeps,
                "sweeps over every benchmark, each counted at its median over them (default 5, "
                "1 with --quick)");
  c->callback([flags, &command] { command = [flags] { return run_calibrate(*flags); }; });
}

}  // namespace autopar::cli
