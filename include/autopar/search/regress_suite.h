// The plan-quality suite `autopar regress` runs (configs/regress/suite.yaml) and the baseline
// it compares with (bench/baselines/plan_quality.json): both checked down to each field, every
// error one line naming the file and the field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/support/status.h"

namespace autopar {

// One case of a suite: a zoo model searched over a space on a profile's cluster.
struct SuiteCase {
  std::string name;
  std::string model;  // a zoo name
  std::string hw;     // as written: a profile name or a YAML file
  std::string space;  // as written
  int64_t nodes = 1;
  int64_t batch = 0;
  int64_t seq = 0;         // the zoo model's sequence length (0: its preset's)
  std::string hw_path;     // resolved
  std::string space_path;  // resolved
};

// Where a suite's names point: profile names are files of `config_dir`/hw; relative paths
// are relative to the repository root, the parent of `config_dir` (a suite then means the
// same cases whatever directory autopar runs in).
StatusOr<std::vector<SuiteCase>> parse_regress_suite(std::string_view yaml, std::string_view source,
                                                     const std::string& config_dir);
StatusOr<std::vector<SuiteCase>> read_regress_suite(const std::string& path,
                                                    const std::string& config_dir);

// One case's numbers: a baseline entry or a fresh measurement.
struct Recorded {
  double step_time_s = 0;
  double search_time_s = 0;
  std::string scheme;  // the best scheme's YAML
  int64_t candidates_evaluated = 0;
};

// The baseline's entries by case name (a JSON object), each checked down to its fields.
StatusOr<std::map<std::string, Recorded>> parse_regress_baseline(std::string_view json,
                                                                 std::string_view source);
StatusOr<std::map<std::string, Recorded>> read_regress_baseline(const std::string& path);

}  // namespace autopar
