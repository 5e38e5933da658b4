// autopar autotune [MODEL] --hw PROFILE [--nodes N] [--space S] [-o PLAN] [--top K] [--json]:
// the best scheme of a space for a model on a cluster, next to the baselines, materialised as a
// plan directory with its trace and a report.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include <tbb/global_control.h>

#include "autopar/cost/simulator.h"
#include "autopar/ops/op_def.h"
#include "autopar/support/files.h"
#include "autotune.h"
#include "export.h"
#include "report_html.h"

namespace autopar::cli {

StatusOr<Tuning> prepare_tuning(const std::string& model, const std::string& hw, int64_t nodes,
                                const std::string& space_path, const PlanSource& given,
                                std::optional<int64_t> batch) {
  Tuning t;
  t.model = model;
  t.source = given;
  ASSIGN_OR_RETURN(t.profile, read_hardware_profile(hw, std::string(AUTOPAR_CONFIG_DIR) + "/hw"));
  if (nodes < 1) return error("--nodes {}: must be at least 1", nodes);
  t.profile.nodes = nodes;
  // The plan is lowered with its strategies priced on this profile, as the search priced them.
  t.source.hw = hw;
  t.source.nodes = nodes;
  ASSIGN_OR_RETURN(t.space, read_search_space(space_path));

  std::vector<std::pair<std::string, int64_t>> dims;
  for (const auto& [name, n] : given.dims) {
    if (name != "batch") dims.emplace_back(name, n);
  }
  t.source.dims = dims;
  ASSIGN_OR_RETURN(Graph probe, load_model_at(model, 1, dims, given));
  t.problem.devices = t.profile.num_devices();
  t.problem.devices_per_node = t.profile.devices_per_node;
  t.problem.global_batch = t.space.global_batch ? *t.space.global_batch
                           : batch              ? *batch
                                                : 8 * t.problem.devices;
  for (const Node& n : probe.nodes()) t.problem.layers = std::max(t.problem.layers, n.layer + 1);
  if (auto shape = transformer_shape(probe); shape.is_ok()) t.transformer = *shape;
  t.problem.transformer = t.transformer.has_value();
  t.problem.parameters = static_cast<double>(probe.num_parameter_elements());

  t.options.inference = given.loss == "none";
  RETURN_IF_ERROR(check_trainable_opset(probe, model, t.options.inference));
  if (!t.options.inference) {
    if (given.loss.empty()) {
      t.options.loss.kind = default_loss(probe);
    } else {
      ASSIGN_OR_RETURN(t.options.loss.kind, parse_loss(given.loss));
    }
    ASSIGN_OR_RETURN(t.options.optimizer.kind,
                     parse_optimizer(given.optimizer.empty() ? "adam" : given.optimizer));
    // Adam and AdamW keep two fp32 moments per parameter; SGD one momentum buffer (none
    // without momentum).
    t.problem.optimizer_bytes = t.options.optimizer.kind != OptimizerKind::kSgd ? 8
                                : t.options.optimizer.momentum != 0             ? 4
                                                                                : 0;
    t.source.loss = loss_name(t.options.loss.kind);
    t.source.optimizer = optimizer_name(t.options.optimizer.kind);
  } else {
    t.source.loss = "none";
    t.source.optimizer = "none";
    t.problem.optimizer_bytes = 0;
    t.problem.training = false;
  }
  const PlanSource source = t.source;
  t.model_at = [model, dims, source](int64_t b) { return load_model_at(model, b, dims, source); };
  t.estimator = std::make_unique<Estimator>(t.model_at, t.options, t.profile);
  return t;
}

StatusOr<double> simulate_scheme(const Tuning& tuning, const Scheme& scheme) {
  ASSIGN_OR_RETURN(BuiltPlan built,
                   build_plan(tuning.model, scheme, tuning.source, "scheme", false));
  ASSIGN_OR_RETURN(Simulation sim, simulate(built.plan, tuning.profile));
  return sim.step_seconds;
}

std::string mesh_text(const Scheme& scheme) {
  const DeviceMesh& mesh = scheme.mesh;
  std::vector<std::string> parts;
  for (const MeshAxis& a : mesh.axes()) {
    if (a.size > 1 || mesh.axes().size() == 1)
      parts.push_back(fmt::format("{} {}", a.name, a.size));
    if (a.name == "cp" && a.size > 1)
      parts.back() += scheme.context == ContextForm::kRing ? " ring" : " a2a";
  }
  return fmt::format("{}", fmt::join(parts, " × "));
}

std::string pipeline_text(const Scheme& s) {
  if (s.pp() == 1) return "-";
  if (s.schedule == PipelineSchedule::kInterleaved) return fmt::format("interleaved ×{}", s.chunks);
  return schedule_name(s.schedule);
}

std::string seconds_text(double seconds) {
  if (seconds < 1e-3) return fmt::format("{:.1f} µs", seconds * 1e6);
  if (seconds < 1) return fmt::format("{:.1f} ms", seconds * 1e3);
  return fmt::format("{:.2f} s", seconds);
}

namespace {

struct AutotuneFlags {
  std::string model = "gpt2-small";
  std::string hw = "dgx-a100-80g";
  int64_t nodes = 1;
  std::string space = std::string(AUTOPAR_CONFIG_DIR) + "/spaces/default.yaml";
  std::string out = "plan";
  int top = 5;
  int simulate_top = 3;
  int measure_top = 0;
  bool exhaustive = false;
  bool json = false;
  std::string export_to;
  bool export_any = false;  // --export-any: the whole space, obstacles listed as notes
  std::string loss;
  std::string optimizer = "adam";
  DimFlags dims;
  int threads = 0;  // 0: every core
};

// One row's numbers.
struct Row {
  double step = 0, samples = 0, tflops = 0, mfu = 0, memory = 0;
};

Row row_of(const Candidate& c) {
  Row r;
  r.step = c.step_s();
  r.samples = static_cast<double>(c.scheme.global_batch) / r.step;
  const double devices = static_cast<double>(c.scheme.mesh.num_devices());
  r.tflops = c.estimate.model_flops / (r.step * devices) / 1e12;
  r.mfu = c.estimate.mfu * c.estimate.step_time_s / r.step;  // at the (simulated) step
  r.memory = c.estimate.peak_memory_bytes;
  return r;
}

nlohmann::json candidate_json(const Candidate& c, const Tuning& t) {
  const Row r = row_of(c);
  nlohmann::json j = {{"scheme", c.scheme.to_yaml()},
                      {"mesh", mesh_text(c.scheme)},
                      {"pipeline", pipeline_text(c.scheme)},
                      {"micro_batch", c.scheme.micro_batch},
                      {"zero", c.scheme.zero},
                      {"recompute", recompute_name(c.scheme.recompute)},
                      {"precision", precision_name(c.scheme.precision)},
                      {"tensor", tensor_strategy_name(c.scheme.tensor)},
                      {"step_time_s", r.step},
                      {"estimated_step_time_s", c.estimate.step_time_s},
                      {"samples_per_s", r.samples},
                      {"tflops_per_device", r.tflops},
                      {"mfu", r.mfu},
                      {"peak_memory_bytes", r.memory}};
  if (c.simulated_s) j["simulated_step_time_s"] = *c.simulated_s;
  j["ranked_by"] = c.simulated_s ? "simulation" : "estimate";
  return j;
}

std::string table(const std::vector<Candidate>& top, const Tuning& t,
                  const std::vector<std::optional<double>>& measured) {
  std::string out = fmt::format(
      "{:>3}  {:<22} {:<15} {:<11} {:>5} {:>4} {:<9} {:<5} {:>10} {:<3} {:>10} {:>9} {:>6} "
      "{:>10}{}\n",
      "#", "mesh", "pipeline", "tensor", "micro", "zero", "recompute", "prec", "step", "by",
      "samples/s", "TFLOP/s/d", "MFU", "memory", measured.empty() ? "" : "   measured");
  for (size_t i = 0; i < top.size(); ++i) {
    const Candidate& c = top[i];
    const Row r = row_of(c);
    // The simulated rank first; the rest follow by their estimates (see the legend).
    if (i > 0 && !c.simulated_s && top[i - 1].simulated_s && measured.empty())
      out += "     -- estimated only: not simulated, ranked after the simulated --\n";
    out += fmt::format(
        "{:>3}  {:<22} {:<15} {:<11} {:>5} {:>4} {:<9} {:<5} {:>10} {:<3} {:>10.1f} {:>9.1f} "
        "{:>5.1f}% {:>10}",
        i + 1, mesh_text(c.scheme), pipeline_text(c.scheme),
        c.scheme.tp() > 1 ? tensor_strategy_name(c.scheme.tensor) : "-", c.scheme.micro_batch,
        c.scheme.zero, recompute_name(c.scheme.recompute), precision_name(c.scheme.precision),
        seconds_text(r.step), c.simulated_s ? "sim" : "est", r.samples, r.tflops, r.mfu * 100,
        human_bytes(r.memory));
    if (!measured.empty())
      out += measured[i] ? fmt::format(" {:>10}", seconds_text(*measured[i])) : "          -";
    out += "\n";
  }
  out +=
      "by: sim = simulated step of the built plan, est = analytic estimate; MFU against the "
      "device's dense bf16 peak\n";
  return out;
}

std::string baselines_text(const SearchResult& result, const Tuning& t) {
  std::string out;
  const double best = result.top.front().step_s();
  for (const Baseline& b : result.baselines) {
    if (!b.candidate) {
      out += fmt::format("  {:<14} {}\n", b.name, b.note);
      continue;
    }
    const Row r = row_of(*b.candidate);
    // (A search --export restricts can end slower than a baseline it could not run.)
    const std::string versus = r.step >= best
                                   ? fmt::format("best is {:.2f}× faster", r.step / best)
                                   : fmt::format("best is {:.2f}× slower", best / r.step);
    out += fmt::format("  {:<14} step {:>10} ({}), MFU {:>5.1f}%, memory {:>10}, {}: {}\n", b.name,
                       seconds_text(r.step), b.candidate->simulated_s ? "sim" : "est", r.mfu * 100,
                       human_bytes(r.memory), versus, b.note);
  }
  return out;
}

// Builds the plan with weights and runs a few steps on this machine: the mean step.
StatusOr<double> measure(const Tuning& t, const Scheme& scheme) {
  // Shape-only first: a plan too large for this machine is refused before its weights exist.
  ASSIGN_OR_RETURN(BuiltPlan shapes, build_plan(t.model, scheme, t.source, "scheme", false));
  RETURN_IF_ERROR(check_run_memory(shapes, 0, "--measure-top", "measuring the plan"));
  ASSIGN_OR_RETURN(BuiltPlan built, build_plan(t.model, scheme, t.source, "scheme", true));
  constexpr int kSteps = 4;
  ASSIGN_OR_RETURN(runtime::PlanFeeds feeds, plan_feeds(built, kSteps, 1));
  ASSIGN_OR_RETURN(runtime::PlanResult run, runtime::run_plan_inproc(built.plan, feeds));
  return run.seconds / kSteps;
}

Status run_autotune(const AutotuneFlags& f) {
  if (f.threads < 0) return error("--threads {}: must be 1 or more (0: every core)", f.threads);
  // The search gives the same answer at any thread count; this bounds the threads it uses.
  std::optional<tbb::global_control> threads;
  if (f.threads > 0)
    threads.emplace(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(f.threads));
  ASSIGN_OR_RETURN(PlanSource given, plan_source(f.model, f.loss, f.optimizer, f.dims));
  if (f.top < 1) return error("--top {}: must be at least 1", f.top);
  if (f.simulate_top < 0) return error("--simulate-top {}: must be at least 0", f.simulate_top);
  if (f.measure_top < 0) return error("--measure-top {}: must be at least 0", f.measure_top);
  std::optional<ExportTarget> target;
  if (!f.export_to.empty()) {
    ASSIGN_OR_RETURN(target, parse_export_target(f.export_to));
  } else if (f.export_any) {
    return error("--export-any: only with --export");
  }
  ASSIGN_OR_RETURN(Tuning t, prepare_tuning(f.model, f.hw, f.nodes, f.space, given,
                                            f.dims.given() ? f.dims.batch : std::nullopt));
  if (f.measure_top > 0) {
    const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
    if (t.problem.devices > cores) {
      return error(
          "--measure-top: the plans need {} devices and this machine runs at most {} (one per "
          "core); measure with a calibrated cpu-local profile and --nodes 1",
          t.problem.devices, cores);
    }
  }

  const bool tty = isatty(STDERR_FILENO) != 0 && !f.json;
  SearchOptions options;
  options.top = std::max(f.top, f.measure_top);
  options.simulate_top = f.simulate_top;
  options.exhaustive = f.exhaustive;
  options.simulate = [&t](const Scheme& s) { return simulate_scheme(t, s); };
  if (target && !f.export_any) {
    // --export: only the schemes the target runs as planned.
    if (!t.transformer && *target != ExportTarget::kDeepSpeed)
      return error("--export {}: {} is not a transformer (no attention in its repeated layers)",
                   f.export_to, f.model);
    options.admissible = [target, shape = t.transformer](const Scheme& s) {
      return !export_obstacle(*target, s, shape).has_value();
    };
  }
  if (tty) {
    options.progress = [](double fraction) {
      const int width = 30;
      const int filled = static_cast<int>(fraction * width);
      fmt::print(stderr, "\rsearching [{}{}] {:3.0f}%", std::string(filled, '#'),
                 std::string(width - filled, ' '), fraction * 100);
      std::fflush(stderr);
    };
  }
  auto searched = search(t.space, t.problem, *t.estimator, options);
  if (!searched.is_ok() && options.admissible) {
    return error("{} (among the schemes {} runs as planned; --export-any searches them all)",
                 searched.status().message(), f.export_to);
  }
  ASSIGN_OR_RETURN(SearchResult result, std::move(searched));
  if (tty) fmt::print(stderr, "\r{}\r", std::string(50, ' '));

  // --measure-top: measured on this machine, re-ranked by the measurement.
  std::vector<std::optional<double>> measured;
  if (f.measure_top > 0) {
    const size_t k = std::min(result.top.size(), static_cast<size_t>(f.measure_top));
    std::vector<std::pair<double, size_t>> order;
    measured.assign(result.top.size(), std::nullopt);
    for (size_t i = 0; i < k; ++i) {
      ASSIGN_OR_RETURN(double seconds, measure(t, result.top[i].scheme));
      measured[i] = seconds;
      order.emplace_back(seconds, i);
    }
    std::stable_sort(order.begin(), order.end());
    std::vector<Candidate> ranked;
    std::vector<std::optional<double>> ranked_measured;
    for (const auto& [s, i] : order) {
      ranked.push_back(result.top[i]);
      ranked_measured.push_back(measured[i]);
    }
    for (size_t i = k; i < result.top.size(); ++i) {
      ranked.push_back(result.top[i]);
      ranked_measured.push_back(std::nullopt);
    }
    result.top = std::move(ranked);
    measured = std::move(ranked_measured);
  }
  if (result.top.size() > static_cast<size_t>(f.top)) {
    result.top.resize(f.top);
    if (!measured.empty()) measured.resize(f.top);
  }

  // The best as a plan directory, with its trace and report.
  const Candidate& best = result.top.front();
  ASSIGN_OR_RETURN(BuiltPlan built, build_plan(t.model, best.scheme, t.source, "autotune", false));
  RETURN_IF_ERROR(write_plan(built.plan, f.out));
  ASSIGN_OR_RETURN(Simulation sim, simulate(built.plan, t.profile, true));
  if (Status s = write_file_atomic(f.out + "/trace.json", chrome_trace(built.plan, sim));
      !s.is_ok())
    return error("-o {}", s.message());
  const std::string header =
      fmt::format("{} on {} × {} ({} devices), global batch {}, space {}", f.model, t.profile.nodes,
                  t.profile.name, t.problem.devices, t.problem.global_batch, f.space);
  const std::string summary = fmt::format(
      "{} meshes ({} pruned by memory), {} configurations ({} more pruned by memory), {} "
      "candidates evaluated ({} fit) in {:.2f} s",
      result.meshes, result.meshes_pruned, result.configurations, result.configurations_pruned,
      result.candidates_evaluated, result.feasible, result.search_time_s);
  std::optional<Exported> exported;
  if (target) {
    bool fused_attention = false, vocab_parallel_loss = false;
    for (const Role& role : built.plan.roles) {
      for (const Node& n : role.graph.nodes()) {
        fused_attention =
            fused_attention || n.op_type == "Attention" || n.op_type == "RingAttention";
        vocab_parallel_loss = vocab_parallel_loss ||
                              (n.op_type == "AllReduce" && n.attr_string("op", "sum") == "max");
      }
    }
    ExportSource source{
        f.model,         &built.model,    t.options.optimizer, t.profile.devices_per_node,
        t.profile.nodes, fused_attention, vocab_parallel_loss};
    ASSIGN_OR_RETURN(exported, export_scheme(*target, best.scheme, source));
    const std::string file = exported->file == "deepspeed.json" ? exported->text
                             : exported->file == "megatron.sh" ? "#!/bin/sh\n" + exported->printed()
                                                               : exported->printed();
    if (Status s = write_file_atomic(f.out + "/" + exported->file, file); !s.is_ok())
      return error("-o {}", s.message());
  }
  std::string report = fmt::format(
      "# autotune: {}\n\n{}\n\n```\n{}```\n\nBaselines:\n\n```\n{}```\n\n"
      "The best scheme (scheme.yaml):\n\n```yaml\n{}```\n",
      header, summary, table(result.top, t, measured), baselines_text(result, t),
      best.scheme.to_yaml());
  if (exported) {
    report += fmt::format("\nFor {} ({}):\n\n```\n{}```\n", f.export_to, exported->file,
                          exported->printed());
  }
  const std::string page = report_html({header, summary, &result, &best, &sim, &t.profile});
  for (const auto& [name, text] : {std::pair<const char*, std::string>{"report.md", report},
                                   {"report.html", page},
                                   {"scheme.yaml", best.scheme.to_yaml()}}) {
    if (Status s = write_file_atomic(f.out + "/" + name, text); !s.is_ok())
      return error("-o {}", s.message());
  }

  if (f.json) {
    nlohmann::json top = nlohmann::json::array();
    for (size_t i = 0; i < result.top.size(); ++i) {
      nlohmann::json c = candidate_json(result.top[i], t);
      if (i < measured.size() && measured[i]) c["measured_step_time_s"] = *measured[i];
      top.push_back(std::move(c));
    }
    nlohmann::json baselines = nlohmann::json::array();
    for (const Baseline& b : result.baselines) {
      nlohmann::json j = {{"name", b.name}, {"note", b.note}};
      if (b.candidate) {
        j.update(candidate_json(*b.candidate, t));
        j["speedup"] = b.candidate->step_s() / best.step_s();
      }
      baselines.push_back(std::move(j));
    }
    nlohmann::json out = {{"best", candidate_json(best, t)},
                          {"top", top},
                          {"baselines", baselines},
                          {"candidates_evaluated", result.candidates_evaluated},
                          {"feasible", result.feasible},
                          {"configurations", result.configurations},
                          {"meshes", result.meshes},
                          {"meshes_pruned", result.meshes_pruned},
                          {"search_time_s", result.search_time_s},
                          {"devices", t.problem.devices},
                          {"global_batch", t.problem.global_batch},
                          {"profile", t.profile.name},
                          {"plan", f.out}};
    if (exported) {
      out["export"] = {{"target", f.export_to},
                       {"file", f.out + "/" + exported->file},
                       {"text", exported->text},
                       {"notes", exported->notes}};
    }
    emit_json(out);
    return Status::ok();
  }
  fmt::print(
      "{}\n{}\n\n{}\nbaselines:\n{}\nbest plan written to {}/ (trace.json, report.md, "
      "report.html)\n",
      header, summary, table(result.top, t, measured), baselines_text(result, t), f.out);
  if (exported) {
    fmt::print("\n{} launch configuration ({}/{}):\n{}", f.export_to, f.out, exported->file,
               exported->printed());
  }
  return Status::ok();
}

}  // namespace

void add_autotune_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<AutotuneFlags>();
  CLI::App* c = app.add_subcommand(
      "autotune", "search a space of parallel schemes for the fastest plan on a cluster");
  c->footer(
      "Examples:\n"
      "  autopar autotune                                  gpt2-small on one DGX A100 (the "
      "defaults)\n"
      "  autopar autotune model.onnx --hw dgx-h100 --nodes 8 --dim seq=2048\n"
      "  autopar autotune gpt3-13b --hw dgx-h100 --nodes 8 --export megatron\n"
      "  autopar autotune llama3-8b --seq 131072 --hw dgx-h100 --nodes 4 \\\n"
      "      --space configs/spaces/long-context.yaml\n");
  c->add_option("model", flags->model, "ONNX file, or a zoo name (default gpt2-small)");
  c->add_option("--hw", flags->hw,
                "hardware profile: a YAML file or a name in configs/hw/ "
                "(default dgx-a100-80g)");
  c->add_option("--nodes", flags->nodes, "nodes of the profile (default 1)");
  c->add_option("--space", flags->space, "search space YAML (default configs/spaces/default.yaml)");
  c->add_option("-o,--output", flags->out, "plan directory for the best scheme (default plan)");
  c->add_option("--top", flags->top, "candidates to show (default 5)");
  c->add_option("--simulate-top", flags->simulate_top,
                "best candidates re-scored by simulating their plans (default 3)");
  c->add_option("--measure-top", flags->measure_top,
                "run the best K on this machine and re-rank them by the measurement");
  c->add_flag("--exhaustive", flags->exhaustive,
              "every pipeline stage partition, not the dynamic program's (small spaces)");
  c->add_option("--export", flags->export_to,
                "megatron, deepspeed or torchtitan: search only the schemes the framework runs "
                "as planned and write the best as its launch configuration into the plan "
                "directory (megatron.sh, deepspeed.json, torchtitan.toml)");
  c->add_flag("--export-any", flags->export_any,
              "with --export: search the whole space; what the framework cannot run is listed "
              "as notes");
  c->add_option("--loss", flags->loss, "cross_entropy, mse or none (inference only)");
  c->add_option("--optimizer", flags->optimizer, "sgd, adam or adamw (default adam)");
  flags->dims.add_to(*c);
  c->add_option("--threads", flags->threads,
                "threads the search runs on (default 0: every core); the results are the same "
                "at any count");
  c->add_flag("--json", flags->json, "print one JSON object");
  c->callback([flags, &command] { command = [flags] { return run_autotune(*flags); }; });
}

}  // namespace autopar::cli
