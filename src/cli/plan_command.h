// Plans on the command line: building one from a model and a scheme, loading one back from
// its directory, and the synthetic data it is run and verified on.
#pragma once

#include <string>

#include "autopar/parallel/lowering.h"
#include "autopar/runtime/plan_runner.h"
#include "commands.h"

namespace autopar::cli {

struct BuiltPlan {
  Plan plan;
  Graph model;  // with weights, at one microbatch over dp
  LoweringOptions options;
  PlanSource source;
};

// Resolves the scheme's batch against the model (global = the model's batch when the scheme
// omits it), loads the model at one microbatch over dp (with weights, or shape-only for zoo
// models when only lowering) and lowers it.
StatusOr<BuiltPlan> build_plan(const std::string& model, Scheme scheme, const PlanSource& given,
                               const std::string& scheme_source, bool weights);
// Rebuilds the plan a directory records and checks its role files are that plan (with the
// model's weights to run it, shape-only to cost it).
StatusOr<BuiltPlan> load_plan(const std::string& dir, bool weights);
// Initial state from the model and `steps` steps of synthetic microbatches.
StatusOr<runtime::PlanFeeds> plan_feeds(const BuiltPlan& built, int steps, uint64_t seed);

Status run_plan_directory(const std::string& dir, const std::string& comm, int steps, bool json,
                          uint64_t seed);
void add_transform_command(CLI::App& app, Command& command);
void add_verify_command(CLI::App& app, Command& command, int* exit_code);
void add_simulate_command(CLI::App& app, Command& command);

}  // namespace autopar::cli
