// Plans on the command line: building one from a model and a scheme, loading one back from
// its directory, and the synthetic data it is run and verified on.
#pragma once

#include <functional>
#include <string>
#include <string_view>

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
// The profile `hw` (a YAML file or a name in configs/hw/) on `nodes` nodes (0: as many as
// `devices` need); one error line when they hold fewer than the `what` (scheme, plan) needs.
StatusOr<HardwareProfile> cluster_profile(const std::string& hw, int64_t nodes, int64_t devices,
                                          std::string_view what);

// What transform watches of the lowering (--dump-after, --verify-passes).
struct LowerHooks {
  std::function<void(std::string_view pass, const Graph& graph)> after_pass;
  bool verify_passes = false;
};
StatusOr<BuiltPlan> build_plan(const std::string& model, Scheme scheme, const PlanSource& given,
                               const std::string& scheme_source, bool weights,
                               const LowerHooks& hooks = {});
// The scheme with its batch resolved (in `plan.scheme`), the model at one microbatch over dp
// and the lowering options: everything build_plan does before lowering.
StatusOr<BuiltPlan> resolve_model(const std::string& model, Scheme scheme, const PlanSource& given,
                                  const std::string& scheme_source, bool weights);
// --loss, --optimizer, --batch, --seq and --dim as the source of a plan of `model` (--seq
// binds a zoo model's sequence only).
StatusOr<PlanSource> plan_source(const std::string& model, const std::string& loss,
                                 const std::string& optimizer, const DimFlags& dims);
// The model shape-only at `batch` samples, other dims as given, read with the source's
// import flags (--no-fusion, --keep-constants).
StatusOr<Graph> load_model_at(const std::string& model, int64_t batch,
                              const std::vector<std::pair<std::string, int64_t>>& dims,
                              const PlanSource& source);
// Rebuilds the plan a directory records and checks its role files are that plan (with the
// model's weights to run it, shape-only to cost it). With weights, a run of `devices_here` of
// its devices in this process (0: all of them, as threads) that needs more memory than the
// machine has is refused first, in one line, before the weights are made.
StatusOr<BuiltPlan> load_plan(const std::string& dir, bool weights, int64_t devices_here = 0);
// What the machine can give a process now, or 0 where unknown: MemAvailable of /proc/meminfo,
// and no more than the process's cgroup (a container's memory limit, v2 or v1) has left.
double available_memory_bytes();
// A run of `shapes.plan` (built shape-only) with `devices` of its devices in this process (0:
// all) needs about their state and activations (the plan's memory model) and the model's
// weights once: refused in one line, "<where>: <what> needs about ...", before any of it is
// allocated, where that is more than the machine (or its container) has available.
Status check_run_memory(const BuiltPlan& shapes, int64_t devices, const std::string& where,
                        const std::string& what);
// A one-device training run of `model` (run MODEL --train) that needs more memory than the
// machine has is refused in one line, before the weights are made.
Status check_training_memory(const std::string& model, const std::string& loss,
                             const std::string& optimizer, const DimFlags& dims);
// Initial state from the model and `steps` steps of synthetic microbatches.
StatusOr<runtime::PlanFeeds> plan_feeds(const BuiltPlan& built, int steps, uint64_t seed);

// The median and the 10th percentile of per-step seconds, the first step a warm-up left out
// when there are others: the 10th percentile is the machine's own speed where neighbours on a
// shared host only add time (what calibration measures and predictions are held to).
// `fallback` for both when there are no steps.
struct StepTimes {
  double median = 0, p10 = 0;
};
StepTimes warm_step_times(const std::vector<double>& step_seconds, double fallback);

Status run_plan_directory(const std::string& dir, const std::string& comm, int steps, bool json,
                          uint64_t seed, runtime::PlanBackend backend = runtime::PlanBackend::kCpu);
// A plan's roles timed on the one GPU of this machine, communication stubbed.
Status run_plan_directory_cuda(const std::string& dir, int steps, bool json);
void add_transform_command(CLI::App& app, Command& command);
void add_verify_command(CLI::App& app, Command& command, int* exit_code);
void add_simulate_command(CLI::App& app, Command& command);
void add_estimate_command(CLI::App& app, Command& command);

}  // namespace autopar::cli
