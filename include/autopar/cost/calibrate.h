// Calibration: microbenchmarks through autopar's own runtime fit a hardware profile of this
// machine. On the CPU a device is one core (each benchmark runs on one thread) and the
// communication tier is the inproc communicator between threads; on CUDA a device is GPU 0,
// timed through the CUDA backend, and the interconnect is the base profile's.
#pragma once

#include <functional>
#include <string_view>

#include <string>
#include <vector>

#include "autopar/cost/hardware_profile.h"
#include "autopar/support/status.h"

namespace autopar {

struct CalibrationOptions {
  // Fewer and smaller sizes; on the CPU also a tenth of `seconds` (tests). CUDA keeps
  // `seconds`: building and loading each benchmark costs more than replaying it.
  bool quick = false;
  int repeats = 5;        // runs per size at least; the median counts
  double seconds = 0.02;  // each benchmark repeats until it has run this long
  // Sweeps over every benchmark; each counts at its median over them (the first sweep of a
  // drifting machine can be a burst of speed or of load).
  int sweeps = 5;
  // Compute benchmarks run while every other core runs a copy of them, as every device of a
  // plan works at once; false times one core on an idle machine.
  bool loaded = true;
  // Told the sweep (from 1) and the stage each time a stage starts (autopar calibrate shows it
  // on a terminal); optional.
  std::function<void(int sweep, int sweeps, std::string_view stage)> progress;
};

struct Calibration {
  HardwareProfile profile;
  // One line per measured class: the fitted numbers and the error on held-out sizes.
  std::vector<std::string> report;
  double worst_held_out_error = 0;  // relative, over every class
};

StatusOr<Calibration> calibrate_cpu(const CalibrationOptions& options);

// GPU 0 measured through the CUDA backend (each benchmark replayed as a captured CUDA graph)
// on top of `base`, the GPU's datasheet profile: it keeps the base's interconnect, memory size,
// bf16/fp16 peaks and views, and replaces the launch and program overheads, the memory
// bandwidth, every efficiency curve and the fp32 peak with measurements. `loaded` does not
// apply (one GPU is timed alone).
StatusOr<Calibration> calibrate_cuda(const CalibrationOptions& options,
                                     const HardwareProfile& base);

// A profile as the YAML parse_hardware_profile reads, `header` as its leading comments.
std::string profile_yaml(const HardwareProfile& profile, const std::string& header);

}  // namespace autopar
