// Published training runs that judge the cost model (`autopar validate`): each run names a zoo
// model, a hardware profile, the scheme it ran under and one published figure (an iteration
// time, a throughput, TFLOP/s per GPU or MFU), which is turned into the step time it implies
// and compared with the estimate's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/parallel/scheme.h"
#include "autopar/support/status.h"
#include "autopar/zoo/zoo.h"

namespace autopar {

// How a publication counts the FLOPs behind its TFLOP/s or MFU (B sequences of s tokens, l
// layers, hidden h, vocabulary V, N parameters).
enum class FlopsFormula : uint8_t {
  // Narayanan et al. 2021, eq. 3: 96·B·s·l·h²·(1 + s/6h + V/16lh) (full recompute's extra
  // forward included).
  kNarayanan,
  // Korthikanti et al. 2022, model FLOPs (appendix A): 72·B·l·s·h²·(1 + s/6h + V/12hl).
  kKorthikanti,
  // BigScience: 8·N·tokens (forward, backward and the recompute forward; no attention term).
  kBigScience,
};

struct PublishedFigure {
  enum class Kind : uint8_t {
    kIterationSeconds,  // iteration_s
    kTflopsPerGpu,      // tflops_per_gpu (with flops)
    kMfu,               // mfu (with flops and peak_tflops)
    kTokensPerSecond,   // tokens_per_s, over all devices
    kSamplesPerSecond,  // samples_per_s, over all devices
  };
  Kind kind = Kind::kIterationSeconds;
  double value = 0;
  std::optional<FlopsFormula> flops;
  double peak_tflops = 0;
  std::optional<double> memory_gib;  // memory per device, when published
};

struct ValidationRun {
  std::string name;
  std::string file;         // the suite file it came from
  std::string publication;  // the file's publication
  std::string source;       // where in it: table, figure, page
  std::string assumed;      // what the publication does not say and the run takes
  std::string zoo;          // zoo preset or family
  ZooOptions model;         // its shape (unset: the preset's)
  std::string hw;           // hardware profile name or file
  int64_t nodes = 0;
  Scheme scheme;  // global and micro batch resolved
  PublishedFigure published;
};

// One suite file ("publication:", "runs:"); errors are one line naming the file and field.
StatusOr<std::vector<ValidationRun>> parse_validation_file(std::string_view yaml,
                                                           std::string_view source);
// A suite file, or every *.yaml file of a directory (in name order); run names are unique.
StatusOr<std::vector<ValidationRun>> read_validation_suite(const std::string& path);

// The FLOPs of one step of `run` under `formula`; `parameters` is the model's count (used by
// kBigScience). Errors name the model fields a formula needs and the run lacks.
StatusOr<double> published_step_flops(const ValidationRun& run, FlopsFormula formula,
                                      int64_t parameters);
// The step time the run's published figure implies, in seconds.
StatusOr<double> published_step_seconds(const ValidationRun& run, int64_t parameters);

const char* flops_formula_name(FlopsFormula formula);

}  // namespace autopar
