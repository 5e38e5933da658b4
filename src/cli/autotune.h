// What autotune and regress share: a model, a cluster and a space made ready to search, and
// the text forms of candidates.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "autopar/search/engine.h"
#include "commands.h"
#include "export.h"
#include "plan_command.h"

namespace autopar::cli {

struct Tuning {
  std::string model;
  PlanSource source;  // loss, optimizer and dims as given
  HardwareProfile profile;
  SearchSpace space;
  SearchProblem problem;
  LoweringOptions options;
  ModelAt model_at;  // the model shape-only at a batch
  std::unique_ptr<Estimator> estimator;
  std::optional<TransformerShape> transformer;  // the model's, when it is one
};

// Reads the profile (at `nodes`, default 1) and the space, loads the model shape-only and
// resolves the global batch: the space's batch.global, else --batch, else 8 per device.
StatusOr<Tuning> prepare_tuning(const std::string& model, const std::string& hw, int64_t nodes,
                                const std::string& space_path, const PlanSource& given,
                                std::optional<int64_t> batch);

// Builds the scheme's plan shape-only and simulates one step on the tuning's profile.
StatusOr<double> simulate_scheme(const Tuning& tuning, const Scheme& scheme);

// "pp 2 × dp 4 × tp 8" ("cp 8 ring", "cp 4 a2a": context parallelism's form), "1f1b",
// "interleaved ×2".
std::string mesh_text(const Scheme& scheme);
std::string pipeline_text(const Scheme& scheme);
// Seconds as "812 ms" or "12.4 s".
std::string seconds_text(double seconds);

void add_autotune_command(CLI::App& app, Command& command);
void add_regress_command(CLI::App& app, Command& command, int* exit_code);
void add_validate_command(CLI::App& app, Command& command, int* exit_code);

}  // namespace autopar::cli
