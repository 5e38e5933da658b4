// autopar calibrate --backend cpu [--comm inproc] -o PROFILE [--quick]: fits a hardware
// profile of this machine from microbenchmarks run through the runtime.
// autopar calibrate --backend cuda -o PROFILE [--quick] [--hw BASE]: the same for GPU 0 through
// the CUDA backend, on top of BASE (a datasheet profile of the GPU and its interconnect).
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "autopar/cost/calibrate.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/support/files.h"
#include "commands.h"

namespace autopar::cli {
namespace {

struct CalibrateFlags {
  std::string backend = "cpu";
  std::string comm = "inproc";
  std::string hw;  // cuda: the base profile (default hgx-h200)
  std::string out;
  bool quick = false;
  int sweeps = 0;  // 0: five on the CPU, one with --quick or on CUDA
};

std::string today() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  return date;
}

Status write_profile(const CalibrateFlags& f, const Calibration& cal, std::string header) {
  for (const std::string& line : cal.report) header += "#   " + line + "\n";
  // A killed calibration leaves the old profile.
  const Status written = write_file_atomic(f.out, profile_yaml(cal.profile, header));
  if (!written.is_ok()) return error("-o {}", written.message());
  for (const std::string& line : cal.report) fmt::print("{}\n", line);
  fmt::print("{}: profile {} written (worst held-out error {:.1f}%)\n", f.out, cal.profile.name,
             cal.worst_held_out_error * 100);
  return Status::ok();
}

// The progress line, once the sweeps are done.
void clear_progress(const CalibrationOptions& options) {
  if (options.progress) fmt::print(stderr, "\r{}\r", std::string(72, ' '));
}

Status run_calibrate_cuda(const CalibrateFlags& f, const CalibrationOptions& options) {
  const std::string base_name = f.hw.empty() ? "hgx-h200" : f.hw;
  ASSIGN_OR_RETURN(HardwareProfile base,
                   read_hardware_profile(base_name, std::string(AUTOPAR_CONFIG_DIR) + "/hw"));
  if (const std::string why = runtime::cuda_unavailable_reason(); !why.empty())
    return error("--backend cuda: {}", why);
  auto calibrated = calibrate_cuda(options, base);
  clear_progress(options);
  ASSIGN_OR_RETURN(Calibration cal, std::move(calibrated));
  const std::string header = fmt::format(
      "# Measured by `autopar calibrate --backend cuda` on {} ({}, median of {} sweep{}) on\n"
      "# {}, each benchmark replayed as a CUDA graph (its median replay counts).\n"
      "# Kept from {}, {}:\n"
      "# the topology, memory_bytes, reserved_bytes, free_views and the datasheet's bf16, fp16\n"
      "# and tf32 peak_flops, their sources named there. peak_flops fp32 is measured, not the\n"
      "# datasheet's: the fp32 GEMM's rate at 4096³ over the gemm curve's efficiency at its\n"
      "# FLOPs, so that fp32 GEMMs are predicted by the same curve as bf16 ones. Fit (held-out\n"
      "# sizes):\n",
      today(), f.quick ? "quick" : "full", options.sweeps, options.sweeps == 1 ? "" : "s",
      runtime::cuda_device_description(), base.name, base.source);
  return write_profile(f, cal, header);
}

Status run_calibrate(const CalibrateFlags& f) {
  if (f.backend != "cpu" && f.backend != "cuda")
    return error("--backend {}: expected cpu or cuda", f.backend);
  if (!f.hw.empty() && f.backend != "cuda")
    return error(
        "--hw {}: a base profile applies to --backend cuda only (the CPU calibration "
        "measures every number)",
        f.hw);
  if (f.comm != "inproc")
    return error("--comm {}: calibration measures the inproc communicator (threads)", f.comm);
  CalibrationOptions options;
  options.quick = f.quick;
  if (f.sweeps < 0) return error("--sweeps {}: must be at least 1", f.sweeps);
  // A GPU's replays are steady where a shared host's cores drift: one sweep unless asked.
  options.sweeps = f.sweeps > 0 ? f.sweeps : f.quick || f.backend == "cuda" ? 1 : 5;
  // Sweeps take minutes: a terminal sees which is under way.
  const bool tty = isatty(STDERR_FILENO) != 0;
  if (tty) {
    options.progress = [](int sweep, int sweeps, std::string_view stage) {
      fmt::print(stderr, "\rcalibrating: sweep {}/{}, {}{}", sweep, sweeps, stage,
                 std::string(20, ' '));
      std::fflush(stderr);
    };
  }
  if (f.backend == "cuda") return run_calibrate_cuda(f, options);
  auto calibrated = calibrate_cpu(options);
  clear_progress(options);
  ASSIGN_OR_RETURN(Calibration cal, std::move(calibrated));
  const std::string header = fmt::format(
      "# Measured by `autopar calibrate --backend cpu` on {} ({}, median of {} sweeps): one\n"
      "# device per core, the inproc communicator between them. Fit (held-out sizes):\n",
      today(), f.quick ? "quick" : "full", options.sweeps);
  return write_profile(f, cal, header);
}

}  // namespace

void add_calibrate_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<CalibrateFlags>();
  CLI::App* c =
      app.add_subcommand("calibrate", "measure this machine and write its hardware profile");
  c->add_option("--backend", flags->backend,
                "cpu (the default: one device per core) or cuda (GPU 0 through the CUDA backend)");
  c->add_option("--comm", flags->comm, "inproc (the default)");
  c->add_option("--hw", flags->hw,
                "cuda: the profile the measurements replace numbers of, its interconnect and "
                "memory kept (default hgx-h200): a YAML file or a name in configs/hw/");
  c->add_option("-o,--output", flags->out, "profile YAML to write")->required();
  c->add_flag("--quick", flags->quick, "fewer, smaller sizes (seconds instead of a minute)");
  c->add_option("--sweeps", flags->sweeps,
                "sweeps over every benchmark, each counted at its median over them (default 5, "
                "1 with --quick or --backend cuda)");
  c->callback([flags, &command] { command = [flags] { return run_calibrate(*flags); }; });
}

}  // namespace autopar::cli
