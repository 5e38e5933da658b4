// autopar validate SUITE [--json] [--max-mape P] [--max-error P]: estimates each published
// training run of a suite (configs/validation/) and prints the predicted step time against the
// one the publication implies, with the error of each, the MAPE and the maximum. With bounds,
// exit 1 when they are exceeded or a run is predicted not to fit (it ran; --max-infeasible
// tolerates a number of them while the model is being brought to the published runs).
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "autopar/autodiff/autodiff.h"
#include "autopar/cost/estimate.h"
#include "autopar/cost/validation.h"
#include "autopar/zoo/zoo.h"
#include "autotune.h"
#include "commands.h"
#include "plan_command.h"

namespace autopar::cli {
namespace {

struct ValidateFlags {
  std::string suite;
  bool json = false;
  std::optional<double> max_mape;   // percent
  std::optional<double> max_error;  // percent
  std::optional<int64_t> max_infeasible;
};

struct Outcome {
  const ValidationRun* run = nullptr;
  int64_t parameters = 0;
  double published_s = 0;
  Estimate estimate;
  double error = 0;  // (predicted − published) / published
  std::optional<double> memory_error;
};

const char* figure_name(PublishedFigure::Kind kind) {
  switch (kind) {
    case PublishedFigure::Kind::kIterationSeconds:
      return "iteration_s";
    case PublishedFigure::Kind::kTflopsPerGpu:
      return "tflops_per_gpu";
    case PublishedFigure::Kind::kMfu:
      return "mfu";
    case PublishedFigure::Kind::kTokensPerSecond:
      return "tokens_per_s";
    case PublishedFigure::Kind::kSamplesPerSecond:
      return "samples_per_s";
  }
  return "?";
}

StatusOr<Outcome> validate_run(const ValidationRun& run) {
  Outcome out;
  out.run = &run;
  const Scheme& scheme = run.scheme;
  ASSIGN_OR_RETURN(out.parameters, zoo_parameter_count(run.zoo, run.model));
  ASSIGN_OR_RETURN(out.published_s, published_step_seconds(run, out.parameters));

  auto profile = read_hardware_profile(run.hw, std::string(AUTOPAR_CONFIG_DIR) + "/hw");
  if (!profile.is_ok()) {
    // The reader names the flag it serves on the command line; here the field is hw.
    std::string_view message = profile.status().message();
    if (message.substr(0, 5) == "--hw ") message.remove_prefix(5);
    return error("{}: {}: hw: {}", run.file, run.name, message);
  }
  profile->nodes = run.nodes;
  const int64_t devices = scheme.mesh.num_devices();
  if (profile->num_devices() < devices) {
    return error("{}: {}: nodes: {} nodes of {} devices hold {}, the scheme needs {}", run.file,
                 run.name, run.nodes, profile->devices_per_node, profile->num_devices(), devices);
  }

  const ValidationRun* r = &run;
  auto model_at = [r](int64_t batch) -> StatusOr<Graph> {
    ZooOptions options = r->model;
    options.batch = batch;
    options.with_weights = false;
    return build_zoo_model(r->zoo, options);
  };
  const std::string where = fmt::format("{}: {}: scheme", run.file, run.name);
  auto model = model_at(scheme.dp() * scheme.micro_batch);
  if (!model.is_ok())
    return error("{}: {}: model: {}", run.file, run.name, model.status().message());
  RETURN_IF_ERROR(validate_scheme(scheme, *model, where));
  LoweringOptions options;
  options.loss.kind = default_loss(*model);
  options.optimizer.kind = OptimizerKind::kAdam;
  Estimator estimator(model_at, options, *profile);
  auto estimated = estimator.estimate(scheme);
  if (!estimated.is_ok()) return error("{}: {}", where, estimated.status().message());
  out.estimate = std::move(estimated).value();
  out.error = (out.estimate.step_time_s - out.published_s) / out.published_s;
  if (run.published.memory_gib) {
    const double published = *run.published.memory_gib * 1073741824.0;
    out.memory_error = (out.estimate.peak_memory_bytes - published) / published;
  }
  return out;
}

Status run_validate(const ValidateFlags& f, int* exit_code) {
  ASSIGN_OR_RETURN(std::vector<ValidationRun> runs, read_validation_suite(f.suite));
  std::vector<Outcome> outcomes;
  for (const ValidationRun& run : runs) {
    ASSIGN_OR_RETURN(Outcome o, validate_run(run));
    outcomes.push_back(std::move(o));
  }
  double sum = 0, max_abs = 0;
  const Outcome* worst = nullptr;
  std::vector<std::string> infeasible;
  for (const Outcome& o : outcomes) {
    sum += std::abs(o.error);
    if (!worst || std::abs(o.error) > max_abs) {
      max_abs = std::abs(o.error);
      worst = &o;
    }
    if (!o.estimate.feasible) infeasible.push_back(o.run->name);
  }
  const double mape = sum / static_cast<double>(outcomes.size());
  std::vector<std::string> failures;
  const bool judged = f.max_mape || f.max_error || f.max_infeasible;
  if (judged) {
    if (f.max_mape && mape * 100 > *f.max_mape)
      failures.push_back(fmt::format("MAPE {:.1f}% above --max-mape {}%", mape * 100, *f.max_mape));
    if (f.max_error && max_abs * 100 > *f.max_error)
      failures.push_back(fmt::format("{}'s error {:+.1f}% beyond --max-error {}%", worst->run->name,
                                     worst->error * 100, *f.max_error));
    if (static_cast<int64_t>(infeasible.size()) > f.max_infeasible.value_or(0))
      failures.push_back(
          fmt::format("{} runs predicted not to fit, though they ran{}: {}", infeasible.size(),
                      f.max_infeasible ? fmt::format(" (--max-infeasible {})", *f.max_infeasible)
                                       : std::string(),
                      fmt::join(infeasible, ", ")));
  }
  if (!failures.empty()) *exit_code = 1;

  if (f.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const Outcome& o : outcomes) {
      const ValidationRun& r = *o.run;
      nlohmann::json published = {{"figure", figure_name(r.published.kind)},
                                  {"value", r.published.value}};
      if (r.published.flops) published["flops"] = flops_formula_name(*r.published.flops);
      if (r.published.memory_gib) published["memory_gib"] = *r.published.memory_gib;
      nlohmann::json item = {{"name", r.name},
                             {"file", r.file},
                             {"publication", r.publication},
                             {"source", r.source},
                             {"hw", r.hw},
                             {"devices", r.scheme.mesh.num_devices()},
                             {"parameters", o.parameters},
                             {"published", published},
                             {"published_step_s", o.published_s},
                             {"predicted_step_s", o.estimate.step_time_s},
                             {"error", o.error},
                             {"feasible", o.estimate.feasible},
                             {"peak_memory_bytes", o.estimate.peak_memory_bytes},
                             {"mfu", o.estimate.mfu}};
      if (!r.assumed.empty()) item["assumed"] = r.assumed;
      if (!o.estimate.feasible) item["reason"] = o.estimate.reason;
      if (o.memory_error) item["memory_error"] = *o.memory_error;
      list.push_back(std::move(item));
    }
    nlohmann::json out = {{"runs", list},
                          {"mape", mape},
                          {"max_error", worst->error},
                          {"max_error_run", worst->run->name},
                          {"infeasible", infeasible},
                          {"passed", failures.empty()}};
    if (!failures.empty()) out["failures"] = failures;
    emit_json(out);
    return Status::ok();
  }
  size_t width = 3;
  for (const Outcome& o : outcomes) width = std::max(width, o.run->name.size());
  fmt::print("{:<{}} {:>13} {:>8} {:>11} {:>11} {:>8} {:>6} {:>11}\n", "run", width, "hw",
             "devices", "published", "predicted", "error", "MFU", "memory");
  for (const Outcome& o : outcomes) {
    const ValidationRun& r = *o.run;
    std::string memory = human_bytes(o.estimate.peak_memory_bytes);
    if (o.memory_error) memory += fmt::format(" ({:+.1f}%)", *o.memory_error * 100);
    if (!o.estimate.feasible) memory += " does not fit";
    fmt::print("{:<{}} {:>13} {:>8} {:>11} {:>11} {:>+7.1f}% {:>5.1f}% {:>11}\n", r.name, width,
               r.hw, r.scheme.mesh.num_devices(), seconds_text(o.published_s),
               seconds_text(o.estimate.step_time_s), o.error * 100, o.estimate.mfu * 100, memory);
  }
  fmt::print("{} runs from {}: MAPE {:.1f}%, max {:+.1f}% ({})", outcomes.size(), f.suite,
             mape * 100, worst->error * 100, worst->run->name);
  if (!infeasible.empty()) fmt::print("; predicted not to fit: {}", fmt::join(infeasible, ", "));
  fmt::print("\n");
  for (const std::string& failure : failures) fmt::print("FAILED: {}\n", failure);
  return Status::ok();
}

}  // namespace

void add_validate_command(CLI::App& app, Command& command, int* exit_code) {
  auto flags = std::make_shared<ValidateFlags>();
  CLI::App* c = app.add_subcommand(
      "validate",
      "estimate published training runs and compare with their published step times (exit 1 "
      "beyond --max-mape/--max-error or when a run is predicted not to fit)");
  c->add_option("suite", flags->suite, "a suite file or a directory of them (configs/validation)")
      ->required();
  c->add_flag("--json", flags->json, "print one JSON object");
  c->add_option("--max-mape", flags->max_mape,
                "fail when the mean absolute step-time error exceeds this many percent")
      ->check(CLI::PositiveNumber);
  c->add_option("--max-error", flags->max_error,
                "fail when any run's step-time error exceeds this many percent")
      ->check(CLI::PositiveNumber);
  c->add_option("--max-infeasible", flags->max_infeasible,
                "with a bound, runs that may be predicted not to fit (default 0: every run ran)")
      ->check(CLI::NonNegativeNumber);
  c->callback([flags, &command, exit_code] {
    command = [flags, exit_code] { return run_validate(*flags, exit_code); };
  });
}

}  // namespace autopar::cli
