// autopar estimate MODEL --scheme S --hw PROFILE [--nodes N] [--json]: the analytic cost of one
// scheme (step time, memory per device, feasibility, MFU) without building its plan.
#include <chrono>

#include <nlohmann/json.hpp>

#include "autopar/cost/estimate.h"
#include "commands.h"
#include "plan_command.h"

namespace autopar::cli {
namespace {

struct EstimateFlags {
  std::string model;
  std::string scheme;
  std::string hw;
  int64_t nodes = 0;
  std::string loss;
  std::string optimizer;
  DimFlags dims;
  bool json = false;
};

Status run_estimate(const EstimateFlags& f) {
  ASSIGN_OR_RETURN(Scheme scheme, read_scheme_file(f.scheme));
  ASSIGN_OR_RETURN(PlanSource given, plan_source(f.model, f.loss, f.optimizer, f.dims));
  const int64_t devices = scheme.mesh.num_devices();
  ASSIGN_OR_RETURN(HardwareProfile profile, cluster_profile(f.hw, f.nodes, devices, "scheme"));
  ASSIGN_OR_RETURN(BuiltPlan resolved, resolve_model(f.model, scheme, given, f.scheme, false));
  const Scheme& s = resolved.plan.scheme;
  const int64_t resolved_batch = s.dp() * s.micro_batch;
  auto model_at = [&resolved, resolved_batch](int64_t batch) -> StatusOr<Graph> {
    if (batch == resolved_batch) return resolved.model;
    return load_model_at(resolved.source.model, batch, resolved.source.dims, resolved.source);
  };
  const auto start = std::chrono::steady_clock::now();
  Estimator estimator(model_at, resolved.options, profile);
  auto estimated = estimator.estimate(s);
  if (!estimated.is_ok()) return error("{}: {}", f.scheme, estimated.status().message());
  const Estimate& e = *estimated;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double samples =
      e.step_time_s > 0 ? static_cast<double>(s.global_batch) / e.step_time_s : 0;

  if (f.json) {
    nlohmann::json ranks = nlohmann::json::array();
    for (size_t r = 0; r < e.memory.size(); ++r) {
      const RoleMemory& m = e.memory[r];
      ranks.push_back({{"rank", r},
                       {"parameter_bytes", m.parameter_bytes},
                       {"gradient_bytes", m.gradient_bytes},
                       {"optimizer_bytes", m.optimizer_bytes},
                       {"activation_bytes", m.activation_bytes},
                       {"stash_bytes", m.stash_bytes},
                       {"transient_bytes", m.transient_bytes},
                       {"in_flight", m.in_flight},
                       {"paradigm_bytes", m.paradigm_bytes},
                       {"forward_s", e.ranks[r].forward_s},
                       {"backward_s", e.ranks[r].backward_s},
                       {"update_s", e.ranks[r].update_s}});
    }
    nlohmann::json out = {{"step_time_s", e.step_time_s},
                          {"peak_memory_bytes", e.peak_memory_bytes},
                          {"memory_bytes_per_device", e.memory_bytes_per_device},
                          {"feasible", e.feasible},
                          {"mfu", e.mfu},
                          {"samples_per_s", samples},
                          {"model_flops", e.model_flops},
                          {"breakdown",
                           {{"compute_s", e.breakdown.compute_s},
                            {"exposed_comm_s", e.breakdown.exposed_comm_s},
                            {"bubble_s", e.breakdown.bubble_s},
                            {"optimizer_s", e.breakdown.optimizer_s},
                            {"paradigm_s", e.breakdown.paradigm_s}}},
                          {"ranks", ranks},
                          {"devices", devices},
                          {"profile", profile.name},
                          {"scheme", s.to_yaml()},
                          {"estimate_time_s", seconds}};
    if (!e.feasible) out["reason"] = e.reason;
    emit_json(out);
    return Status::ok();
  }
  fmt::print(
      "{} under {} on {} ({} devices): step {:.3f} ms, {:.1f} samples/s, MFU {:.1f}% (of the dense "
      "bf16 peak)\n",
      f.model, f.scheme, profile.name, devices, e.step_time_s * 1e3, samples, e.mfu * 100);
  fmt::print(
      "  compute {:.3f} ms, exposed communication {:.3f} ms, bubble {:.3f} ms, optimizer {:.3f} "
      "ms\n",
      e.breakdown.compute_s * 1e3, e.breakdown.exposed_comm_s * 1e3, e.breakdown.bubble_s * 1e3,
      e.breakdown.optimizer_s * 1e3);
  if (e.breakdown.paradigm_s > 0)
    fmt::print("  paradigms' own terms {:.3f} ms\n", e.breakdown.paradigm_s * 1e3);
  fmt::print("  peak memory {} of {} per device{}\n", human_bytes(e.peak_memory_bytes),
             human_bytes(profile.device.memory_bytes),
             e.feasible ? "" : fmt::format(": infeasible, {}", e.reason));
  fmt::print("{:>6} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12}\n", "rank", "parameters", "gradients",
             "optimizer", "activations", "in flight", "per device");
  for (size_t r = 0; r < e.memory.size(); ++r) {
    const RoleMemory& m = e.memory[r];
    fmt::print("{:>6} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12}\n", r,
               human_bytes(m.parameter_bytes), human_bytes(m.gradient_bytes),
               human_bytes(m.optimizer_bytes), human_bytes(m.activation_bytes), m.in_flight,
               human_bytes(e.memory_bytes_per_device[r]));
  }
  return Status::ok();
}

}  // namespace

void add_estimate_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<EstimateFlags>();
  CLI::App* c = app.add_subcommand(
      "estimate", "predict a scheme's step time and memory per device without building its plan");
  c->footer(
      "Examples:\n"
      "  autopar estimate gpt3-13b --scheme configs/schemes/megatron-3d.yaml --hw dgx-h100\n"
      "  autopar estimate model.onnx --scheme s.yaml --hw dgx-a100-80g --json\n");
  c->add_option("model", flags->model, "ONNX file, or a zoo name")->required();
  c->add_option("--scheme", flags->scheme, "scheme YAML (see configs/schemes/)")->required();
  c->add_option("--hw", flags->hw, "hardware profile: a YAML file or a name in configs/hw/")
      ->required();
  c->add_option("--nodes", flags->nodes,
                "nodes of the profile (default: as many as the scheme needs)");
  c->add_option("--loss", flags->loss, "cross_entropy, mse or none (inference only)");
  c->add_option("--optimizer", flags->optimizer, "sgd, adam or adamw (default adam)");
  flags->dims.add_to(*c);
  c->add_flag("--json", flags->json, "print one JSON object");
  c->callback([flags, &command] { command = [flags] { return run_estimate(*flags); }; });
}

}  // namespace autopar::cli
