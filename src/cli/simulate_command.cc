// autopar simulate PLAN --hw PROFILE [--nodes N] [--trace FILE] [--json]: the event-driven
// simulation of one training step of a plan on a hardware profile.
#include <fstream>

#include <nlohmann/json.hpp>

#include "autopar/cost/compute.h"
#include "autopar/cost/simulator.h"
#include "autopar/ops/op_def.h"
#include "autopar/support/files.h"
#include "commands.h"
#include "plan_command.h"

namespace autopar::cli {
namespace {

struct SimulateFlags {
  std::string plan;
  std::string hw;
  int64_t nodes = 0;
  std::string trace;
  bool json = false;
};

Status run_simulate(const SimulateFlags& f) {
  ASSIGN_OR_RETURN(BuiltPlan built, load_plan(f.plan, false));
  const int64_t devices = static_cast<int64_t>(built.plan.device_role.size());
  ASSIGN_OR_RETURN(HardwareProfile profile, cluster_profile(f.hw, f.nodes, devices, "plan"));
  ASSIGN_OR_RETURN(Simulation sim, simulate(built.plan, profile, !f.trace.empty()));
  if (!f.trace.empty()) {
    const Status written = write_file_atomic(f.trace, chrome_trace(built.plan, sim));
    if (!written.is_ok()) return error("--trace {}", written.message());
  }
  // Model FLOPs: the forward of every microbatch and, training, a backward of twice that (the
  // standard count, whatever a plan recomputes), over the devices' dense bf16 peak.
  const double forward = model_forward_flops(built.model);
  const double passes = built.plan.loss.empty() ? 1.0 : 3.0;
  const double model_flops = passes * forward * static_cast<double>(built.plan.microbatches);
  const double peak = profile.device.mfu_peak() * static_cast<double>(devices);
  const double mfu = sim.step_seconds > 0 ? model_flops / (peak * sim.step_seconds) : 0.0;
  double exposed = 0;
  for (const RoleTimeline& t : sim.roles) exposed = std::max(exposed, t.exposed_comm);
  if (f.json) {
    nlohmann::json roles = nlohmann::json::array();
    for (size_t r = 0; r < sim.roles.size(); ++r) {
      const RoleTimeline& t = sim.roles[r];
      roles.push_back({{"role", r},
                       {"compute_busy_s", t.compute_busy},
                       {"communication_busy_s", t.comm_busy},
                       {"exposed_communication_s", t.exposed_comm},
                       {"pipeline_wait_s", t.pipeline_wait},
                       {"finish_s", t.finish}});
    }
    nlohmann::json out = {{"step_time_s", sim.step_seconds},
                          {"bubble_s", sim.bubble_seconds},
                          {"exposed_communication_s", exposed},
                          {"mfu", mfu},
                          {"devices", devices},
                          {"profile", profile.name},
                          {"roles", roles}};
    emit_json(out);
    return Status::ok();
  }
  fmt::print(
      "{} on {} ({} devices): step {:.3f} ms, MFU {:.1f}% (of the dense bf16 peak), bubble {:.3f} "
      "ms\n",
      f.plan, profile.name, devices, sim.step_seconds * 1e3, mfu * 100, sim.bubble_seconds * 1e3);
  // exposed: waiting on communication; stages: waiting for another pipeline stage's output.
  fmt::print("{:>5} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "role", "compute ms", "comm ms",
             "exposed ms", "stages ms", "finish ms");
  for (size_t r = 0; r < sim.roles.size(); ++r) {
    const RoleTimeline& t = sim.roles[r];
    fmt::print("{:>5} {:>12.3f} {:>12.3f} {:>12.3f} {:>12.3f} {:>12.3f}\n", r, t.compute_busy * 1e3,
               t.comm_busy * 1e3, t.exposed_comm * 1e3, t.pipeline_wait * 1e3, t.finish * 1e3);
  }
  return Status::ok();
}

}  // namespace

void add_simulate_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* s =
      app.add_subcommand("simulate", "simulate one training step of a plan on a hardware profile");
  s->add_option("plan", flags->plan, "plan directory")->required();
  s->add_option("--hw", flags->hw, "hardware profile: a YAML file or a name in configs/hw/")
      ->required();
  s->add_option("--nodes", flags->nodes,
                "nodes of the profile (default: as many as the plan needs)");
  s->add_option("--trace", flags->trace, "write a Chrome/Perfetto trace (traceEvents) here");
  s->add_flag("--json", flags->json, "print one JSON object");
  s->callback([flags, &command] { command = [flags] { return run_simulate(*flags); }; });
}

}  // namespace autopar::cli
