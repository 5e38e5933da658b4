// Calibration: microbenchmarks through autopar's own runtime fit a hardware profile of this
// machine. A device is one core (each benchmark runs on one thread); the communication tier
// is the inproc communicator between threads.
#pragma once

#include <string>
#include <vector>

#include "autopar/cost/hardware_profile.h"
#include "autopar/support/status.h"

namespace autopar {

struct CalibrationOptions {
  bool quick = false;     // fewer and smaller sizes, a tenth of `seconds` (tests)
  int repeats = 5;        // runs per size at least; the median counts
  double seconds = 0.02;  // each benchmark repeats until it has run this long
  // Sweeps over every benchmark; each counts at its median over them (the first sweep of a
  // drifting machine can be a burst of speed or of load).
  int sweeps = 5;
  // Compute benchmarks run while every other core runs a copy of them, as every device of a
  // plan works at once; false times one core on an idle machine.
  bool loaded = true;
};

struct Calibration {
  HardwareProfile profile;
  // One line per measured class: the fitted numbers and the error on held-out sizes.
  std::vector<std::string> report;
  double worst_held_out_error = 0;  // relative, over every class
};

StatusOr<Calibration> calibrate_cpu(const CalibrationOptions& options);

// A profile as the YAML parse_hardware_profile reads, `header` as its leading comments.
std::string profile_yaml(const HardwareProfile& profile, const std::string& header);

}  // namespace autopar
