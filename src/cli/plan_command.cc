// autopar transform, run PLAN and verify: a scheme lowered into a plan directory, and the plan
// run (threads or MPI ranks) and checked against one device.
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "autopar/cost/memory.h"
#include "autopar/ir/precision.h"
#include "autopar/ir/text.h"
#include "autopar/parallel/lowering.h"
#include "autopar/parallel/verify.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/cuda_plan.h"
#include "autopar/runtime/plan_runner.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"
#include "commands.h"
#include "plan_command.h"

namespace autopar::cli {
namespace {

StatusOr<std::string> sha256_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("{}: cannot read", path);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    EVP_DigestUpdate(ctx, buffer.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest, &length);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

bool is_zoo(const std::string& model) {
  std::error_code ec;
  return !std::filesystem::exists(model, ec);
}

// The model with weights at `batch` samples (dims as recorded).
// The model at `batch` samples (dims as recorded): with weights to run, shape-only (zoo
// models) to lower.
StatusOr<Graph> load_at(const std::string& model, std::optional<int64_t> batch,
                        const std::vector<std::pair<std::string, int64_t>>& dims, bool weights,
                        const PlanSource& source) {
  DimFlags flags;
  flags.batch = batch;
  flags.no_fusion = source.no_fusion;
  flags.keep_constants = source.keep_constants;
  for (const auto& [name, n] : dims) flags.dims.push_back(fmt::format("{}={}", name, n));
  if (weights) return load_trainable_model(model, flags);
  ASSIGN_OR_RETURN(LoadedModel loaded, load_model(model, flags));
  return std::move(loaded.graph);
}

int64_t batch_of(const Graph& g) {
  for (ValueId in : g.inputs()) {
    if (g.value(in).shape.rank() > 0) return g.value(in).shape.dims[0];
  }
  return 1;
}

}  // namespace

StatusOr<PlanSource> plan_source(const std::string& model, const std::string& loss,
                                 const std::string& optimizer, const DimFlags& dims) {
  if (dims.seq && !is_zoo(model)) return seq_on_file(model);
  PlanSource given;
  given.loss = loss;
  given.optimizer = optimizer;
  if (dims.batch && dims.given()) given.dims.emplace_back("batch", *dims.batch);
  if (dims.seq) given.dims.emplace_back(std::string(kZooSeqDim), *dims.seq);
  given.no_fusion = dims.no_fusion;
  given.keep_constants = dims.keep_constants;
  for (const std::string& text : dims.dims) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos) return error("--dim {}: expected NAME=N", text);
    try {
      given.dims.emplace_back(text.substr(0, eq), std::stoll(text.substr(eq + 1)));
    } catch (const std::exception&) {
      return error("--dim {}: {} is not a number", text, text.substr(eq + 1));
    }
  }
  return given;
}

StatusOr<Graph> load_model_at(const std::string& model, int64_t batch,
                              const std::vector<std::pair<std::string, int64_t>>& dims,
                              const PlanSource& source) {
  return load_at(model, batch, dims, false, source);
}

StatusOr<HardwareProfile> cluster_profile(const std::string& hw, int64_t nodes, int64_t devices,
                                          std::string_view what) {
  ASSIGN_OR_RETURN(HardwareProfile profile,
                   read_hardware_profile(hw, std::string(AUTOPAR_CONFIG_DIR) + "/hw"));
  profile.nodes =
      nodes > 0 ? nodes : (devices + profile.devices_per_node - 1) / profile.devices_per_node;
  if (profile.num_devices() < devices) {
    return error("--nodes {}: {} nodes of {} devices hold {}, the {} needs {}", profile.nodes,
                 profile.nodes, profile.devices_per_node, profile.num_devices(), what, devices);
  }
  // Nodes the mesh would leave idle: the answer would be for a smaller cluster than asked.
  const int64_t used = (devices + profile.devices_per_node - 1) / profile.devices_per_node;
  if (used < profile.nodes) {
    return error(
        "--nodes {}: the {}'s {} devices fill {} node{} of {} devices; a {} for {} nodes "
        "has {} devices in its mesh",
        profile.nodes, what, devices, used, used == 1 ? "" : "s", profile.devices_per_node, what,
        profile.nodes, profile.num_devices());
  }
  return profile;
}

StatusOr<BuiltPlan> resolve_model(const std::string& model, Scheme scheme, const PlanSource& given,
                                  const std::string& scheme_source, bool weights) {
  BuiltPlan built;
  // The global batch: the scheme's, else the model's (at --batch when given).
  std::optional<int64_t> user_batch;
  std::vector<std::pair<std::string, int64_t>> dims;
  for (const auto& [name, n] : given.dims) {
    if (name == "batch")
      user_batch = n;
    else
      dims.emplace_back(name, n);
  }
  if (scheme.global_batch == 0) {
    if (user_batch) {
      scheme.global_batch = *user_batch;
    } else {
      ASSIGN_OR_RETURN(Graph probe,
                       load_at(model, is_zoo(model) ? std::optional<int64_t>(4) : std::nullopt,
                               dims, false, given));
      scheme.global_batch = batch_of(probe);
    }
  }
  const int64_t dp = scheme.dp();
  if (scheme.global_batch % dp != 0) {
    return error("{}: batch.global: {} samples do not split over dp = {}", scheme_source,
                 scheme.global_batch, dp);
  }
  if (scheme.micro_batch == 0) scheme.micro_batch = scheme.global_batch / dp;
  if ((scheme.global_batch / dp) % scheme.micro_batch != 0) {
    return error("{}: batch.micro: {} does not divide the {} samples per data-parallel replica",
                 scheme_source, scheme.micro_batch, scheme.global_batch / dp);
  }
  const int64_t micro_global = dp * scheme.micro_batch;
  ASSIGN_OR_RETURN(built.model, load_at(model, micro_global, dims, weights, given));
  if (batch_of(built.model) != micro_global) {
    return error(
        "{}: the model's batch dim is fixed at {}, a microbatch over dp is {} samples; give the "
        "model a symbolic batch dim",
        model, batch_of(built.model), micro_global);
  }
  RETURN_IF_ERROR(validate_scheme(scheme, built.model, scheme_source));

  built.source = given;
  built.source.model = model;
  built.source.dims = dims;
  if (!is_zoo(model)) {
    ASSIGN_OR_RETURN(built.source.sha256, sha256_of(model));
  }
  built.options.inference = given.loss == "none";
  RETURN_IF_ERROR(check_trainable_opset(built.model, model, built.options.inference));
  if (!built.options.inference) {
    if (given.loss.empty()) {
      built.options.loss.kind = default_loss(built.model);
    } else {
      ASSIGN_OR_RETURN(built.options.loss.kind, parse_loss(given.loss));
    }
    ASSIGN_OR_RETURN(built.options.optimizer.kind,
                     parse_optimizer(given.optimizer.empty() ? "adam" : given.optimizer));
    built.source.loss = loss_name(built.options.loss.kind);
    built.source.optimizer = optimizer_name(built.options.optimizer.kind);
  } else {
    built.source.loss = "none";
    built.source.optimizer = "none";
  }
  if (!given.hw.empty()) {
    if (given.nodes < 1) return error("--nodes {}: must be at least 1", given.nodes);
    ASSIGN_OR_RETURN(HardwareProfile profile,
                     cluster_profile(given.hw, given.nodes, scheme.mesh.num_devices(), "scheme"));
    built.options.profile = std::make_shared<const HardwareProfile>(std::move(profile));
  }
  built.plan.scheme = scheme;
  return built;
}

StatusOr<BuiltPlan> build_plan(const std::string& model, Scheme scheme, const PlanSource& given,
                               const std::string& scheme_source, bool weights,
                               const LowerHooks& hooks) {
  ASSIGN_OR_RETURN(BuiltPlan built,
                   resolve_model(model, std::move(scheme), given, scheme_source, weights));
  LoweringOptions options = built.options;
  options.after_pass = hooks.after_pass;
  options.verify_passes = hooks.verify_passes;
  auto plan = lower(built.model, built.plan.scheme, options);
  if (!plan.is_ok()) return error("{}: {}", scheme_source, plan.status().message());
  built.plan = std::move(plan).value();
  built.plan.source = built.source;
  return built;
}

namespace {

// The number in a one-line file (a cgroup's limit or usage), or nullopt where the file is
// absent or says "max".
std::optional<double> file_number(const char* path) {
  std::ifstream in(path);
  double value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

}  // namespace

double available_memory_bytes() {
  double available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") available = kib * 1024.0;
  }
  if (available <= 0) return 0;
  const std::pair<const char*, const char*> cgroups[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
       "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& [limit_file, usage_file] : cgroups) {
    const std::optional<double> limit = file_number(limit_file);
    const std::optional<double> usage = file_number(usage_file);
    if (limit && usage && *limit > *usage) available = std::min(available, *limit - *usage);
  }
  return available;
}

Status check_run_memory(const BuiltPlan& shapes, int64_t devices, const std::string& where,
                        const std::string& what) {
  const double available = available_memory_bytes();
  if (available <= 0) return Status::ok();
  const std::vector<RoleMemory> roles = plan_memory(shapes.plan);
  std::vector<double> per_device;
  for (int32_t role : shapes.plan.device_role) per_device.push_back(roles.at(role).total_bytes());
  std::sort(per_device.rbegin(), per_device.rend());
  const auto here = std::min<size_t>(per_device.size(), devices > 0 ? devices : per_device.size());
  double need = 0;
  for (size_t d = 0; d < here; ++d) need += per_device[d];
  double weights = 0;
  for (ValueId p : shapes.model.parameters())
    weights += static_cast<double>(shapes.model.value(p).num_bytes());
  need += weights;
  if (need <= available) return Status::ok();
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return error(
      "{}: {} needs about {:.1f} GiB ({} device{} in this process: state and "
      "activations {:.1f} GiB; the model's weights {:.1f} GiB) and this machine has {:.1f} GiB "
      "available",
      where, what, need / kGiB, here, here == 1 ? "" : "s", (need - weights) / kGiB, weights / kGiB,
      available / kGiB);
}

Status check_training_memory(const std::string& model, const std::string& loss,
                             const std::string& optimizer, const DimFlags& dims) {
  ASSIGN_OR_RETURN(PlanSource given, plan_source(model, loss, optimizer, dims));
  // What one device holds for it, as a plan of one device would: where the model cannot be
  // planned, the training run says why itself.
  auto shapes = build_plan(model, Scheme{}, given, model, false);
  if (!shapes.is_ok()) return Status::ok();
  return check_run_memory(*shapes, 1, model, "training on one device");
}

StatusOr<BuiltPlan> load_plan(const std::string& dir, bool weights, int64_t devices_here) {
  ASSIGN_OR_RETURN(PlanManifest manifest, read_plan_manifest(dir));
  if (!manifest.source.sha256.empty()) {
    auto sha = sha256_of(manifest.source.model);
    if (!sha.is_ok())
      return error("{}/manifest.yaml: source.model: {}", dir, sha.status().message());
    if (sha.value() != manifest.source.sha256) {
      return error(
          "{}/manifest.yaml: source.model: {} has changed since the plan was made "
          "(sha256 {}, recorded {})",
          dir, manifest.source.model, sha.value(), manifest.source.sha256);
    }
  }
  if (weights) {
    // The plan shape-only first: what running it needs, checked before the weights exist.
    ASSIGN_OR_RETURN(BuiltPlan shapes, build_plan(manifest.source.model, manifest.scheme,
                                                  manifest.source, dir + "/manifest.yaml", false));
    RETURN_IF_ERROR(check_run_memory(shapes, devices_here, dir, "running the plan"));
  }
  ASSIGN_OR_RETURN(BuiltPlan built, build_plan(manifest.source.model, manifest.scheme,
                                               manifest.source, dir + "/manifest.yaml", weights));
  RETURN_IF_ERROR(check_plan_files(built.plan, dir));
  return built;
}

StatusOr<runtime::PlanFeeds> plan_feeds(const BuiltPlan& built, int steps, uint64_t seed) {
  return synthetic_plan_feeds(built.model, built.plan, built.options, steps, seed);
}

namespace {

// inproc (threads; no communicator object needed here) or this process's MPI rank.
StatusOr<std::unique_ptr<runtime::Communicator>> open_communicator(const std::string& comm) {
  if (comm == "mpi") return runtime::create_mpi_communicator();
  if (comm != "inproc") return error("--comm {}: expected inproc or mpi", comm);
  return std::unique_ptr<runtime::Communicator>();
}

// The plan's run: every device as a thread, or this rank's device under MPI (nullopt on
// ranks other than 0, which report nothing).
StatusOr<std::optional<runtime::PlanResult>> run_built(
    const BuiltPlan& built, const runtime::PlanFeeds& feeds, runtime::Communicator* mpi,
    const runtime::PlanRunOptions& options = {}) {
  if (!mpi) {
    ASSIGN_OR_RETURN(runtime::PlanResult result,
                     runtime::run_plan_inproc(built.plan, feeds, options));
    return std::optional<runtime::PlanResult>(std::move(result));
  }
  ASSIGN_OR_RETURN(runtime::PlanResult result,
                   runtime::run_plan_device(built.plan, feeds, *mpi, options));
  if (mpi->rank() != 0) return std::optional<runtime::PlanResult>();
  return std::optional<runtime::PlanResult>(std::move(result));
}

struct TransformFlags {
  std::string model;
  std::string scheme;
  std::string out = "plan";
  std::string loss;
  std::string optimizer = "adam";
  std::string hw;
  int64_t nodes = 1;
  std::string dump_after;
  bool verify_passes = false;
  DimFlags dims;
  bool json = false;
};

Status run_transform(const TransformFlags& f) {
  if (f.json && !f.dump_after.empty()) return error("--dump-after: not with --json");
  if (!f.dump_after.empty()) {
    std::vector<std::string_view> names;
    for (const LoweringPass& p : lowering_passes()) names.push_back(p.name);
    if (std::find(names.begin(), names.end(), f.dump_after) == names.end())
      return error("--dump-after {}: no such pass (the passes: {})", f.dump_after,
                   fmt::join(names, ", "));
  }
  ASSIGN_OR_RETURN(Scheme scheme, read_scheme_file(f.scheme));
  ASSIGN_OR_RETURN(PlanSource given, plan_source(f.model, f.loss, f.optimizer, f.dims));
  if (f.hw.empty() && f.nodes != 1) return error("--nodes {}: needs --hw", f.nodes);
  given.hw = f.hw;
  given.nodes = f.nodes;
  const auto start = std::chrono::steady_clock::now();
  LowerHooks hooks;
  bool dumped = false;
  hooks.verify_passes = f.verify_passes;
  if (!f.dump_after.empty()) {
    hooks.after_pass = [&](std::string_view pass, const Graph& graph) {
      if (pass != f.dump_after) return;
      fmt::print("# after {}\n{}", pass, print(graph));
      dumped = true;
    };
  }
  ASSIGN_OR_RETURN(BuiltPlan built, build_plan(f.model, scheme, given, f.scheme, false, hooks));
  if (!f.dump_after.empty() && !dumped) {
    for (const LoweringPass& p : lowering_passes()) {
      if (p.name == f.dump_after)
        return error("--dump-after {}: the pass does not run under {} (it runs for {})",
                     f.dump_after, f.scheme, p.what);
    }
  }
  RETURN_IF_ERROR(write_plan(built.plan, f.out));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t nodes = 0;
  for (const Role& r : built.plan.roles) nodes += r.graph.num_nodes();
  if (f.json) {
    emit_json({{"plan", f.out},
               {"devices", built.plan.device_role.size()},
               {"roles", built.plan.roles.size()},
               {"nodes", nodes},
               {"microbatches", built.plan.microbatches},
               {"scheme", built.plan.scheme.to_yaml()},
               {"seconds", seconds}});
    return Status::ok();
  }
  fmt::print("{}: {} devices, {} roles ({} nodes), {} microbatches per step, in {:.2f} s\n", f.out,
             built.plan.device_role.size(), built.plan.roles.size(), nodes, built.plan.microbatches,
             seconds);
  return Status::ok();
}

struct VerifyFlags {
  std::string plan;
  std::string comm = "inproc";
  std::string backend = "cpu";
  uint64_t seed = 0;
  double tolerance = 1e-4;
  bool fp32 = false;
  bool json = false;
};

// --backend: the plan's backend, refused early where it cannot run.
StatusOr<runtime::PlanBackend> plan_backend(const std::string& backend) {
  if (backend == "cpu") return runtime::PlanBackend::kCpu;
  if (backend != "cuda") return error("--backend {}: expected cpu or cuda", backend);
  if (const std::string why = runtime::cuda_unavailable_reason(); !why.empty())
    return error("--backend cuda: {}", why);
  return runtime::PlanBackend::kCuda;
}

Status run_verify(const VerifyFlags& f, int* exit_code) {
  runtime::PlanRunOptions options;
  ASSIGN_OR_RETURN(options.backend, plan_backend(f.backend));
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Communicator> mpi, open_communicator(f.comm));
  ASSIGN_OR_RETURN(BuiltPlan built, load_plan(f.plan, true));
  if (!f.fp32) {
    // The same lowering of the model in float64: rounding differences between summation
    // orders stay near 1e-16, so Adam's first step (which normalises every gradient, noise
    // included, to ±lr) cannot turn a gradient that is zero in exact arithmetic into a false
    // mismatch.
    // Low-precision casts are the same in every role and in the reference: the float64
    // instance leaves them out and checks the parallel transformation alone.
    change_float_type(built.model, DType::kFloat32, DType::kFloat64);
    Scheme wide = built.plan.scheme;
    wide.precision = Precision::kFp32;
    auto plan = lower(built.model, wide, built.options);
    if (!plan.is_ok()) return error("{}: float64 lowering: {}", f.plan, plan.status().message());
    PlanSource source = built.plan.source;
    built.plan = std::move(plan).value();
    built.plan.source = source;
  }
  ASSIGN_OR_RETURN(runtime::PlanFeeds feeds, plan_feeds(built, 1, f.seed));
  ASSIGN_OR_RETURN(std::optional<runtime::PlanResult> ran,
                   run_built(built, feeds, mpi.get(), options));
  if (!ran) return Status::ok();  // an MPI rank other than 0: rank 0 reports
  // The reference runs on the CPU whatever the plan's backend: an oracle of its own.
  ASSIGN_OR_RETURN(Plan reference, lower_reference(built.model, built.plan.scheme, built.options));
  ASSIGN_OR_RETURN(runtime::PlanResult expected, runtime::run_plan_inproc(reference, feeds));
  auto compared = compare_plan_step(built.plan, std::move(*ran), reference, expected);
  if (!compared.is_ok()) return error("{}: {}", f.plan, compared.status().message());
  const std::vector<TensorDifference>& diffs = compared->differences;
  const bool ok = compared->within(f.tolerance);
  if (f.json) {
    emit_json({{"ok", ok},
               {"worst_relative_error", compared->worst()},
               {"worst", diffs.empty() ? "" : diffs.front().name},
               {"compared", diffs.size()},
               {"devices", built.plan.device_role.size()},
               {"backend", f.backend},
               {"reference", f.fp32 ? "float32" : "float64"}});
  } else {
    fmt::print(
        "{}: {} devices{} against one ({}), {} tensors compared, worst relative error "
        "{:.3e} ({})\n",
        f.plan, built.plan.device_role.size(),
        options.backend == runtime::PlanBackend::kCuda
            ? fmt::format(" on {}", runtime::cuda_device_description())
            : "",
        f.fp32 ? "float32" : "float64", diffs.size(), compared->worst(),
        diffs.empty() ? "" : diffs.front().name);
    if (!ok) {
      fmt::print("{:<48} {:>12} {:>12}\n", "tensor", "rel. error", "max |ref|");
      for (size_t i = 0; i < diffs.size() && i < 10; ++i) {
        if (diffs[i].relative_error <= f.tolerance) break;
        fmt::print("{:<48} {:>12.3e} {:>12.3e}\n", diffs[i].name, diffs[i].relative_error,
                   diffs[i].scale);
      }
    }
  }
  if (!ok) *exit_code = 1;
  return Status::ok();
}

}  // namespace

StepTimes warm_step_times(const std::vector<double>& step_seconds, double fallback) {
  std::vector<double> timed(step_seconds.begin() + (step_seconds.size() > 1), step_seconds.end());
  std::sort(timed.begin(), timed.end());
  if (timed.empty()) return {fallback, fallback};
  return {timed[timed.size() / 2], timed[timed.size() / 10]};
}

Status run_plan_directory(const std::string& dir, const std::string& comm, int steps, bool json,
                          uint64_t seed, runtime::PlanBackend backend) {
  runtime::PlanRunOptions options;
  options.backend = backend;
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Communicator> mpi, open_communicator(comm));
  ASSIGN_OR_RETURN(BuiltPlan built, load_plan(dir, true, comm == "mpi" ? 1 : 0));
  ASSIGN_OR_RETURN(runtime::PlanFeeds feeds, plan_feeds(built, steps, seed));
  ASSIGN_OR_RETURN(std::optional<runtime::PlanResult> ran,
                   run_built(built, feeds, mpi.get(), options));
  if (!ran) return Status::ok();  // an MPI rank other than 0: rank 0 reports
  const runtime::PlanResult& result = *ran;
  // Steps: the slowest device's.
  const StepTimes times = warm_step_times(result.step_seconds, result.seconds);
  const double median = times.median, p10 = times.p10;
  if (json) {
    const bool cuda = backend == runtime::PlanBackend::kCuda;
    nlohmann::json out = {{"devices", built.plan.device_role.size()},
                          {"backend", cuda ? "cuda" : "cpu"},
                          {"communication", cuda ? "nccl" : comm},
                          {"steps", steps},
                          {"losses", result.losses},
                          {"seconds", result.seconds},
                          {"median_step_s", median},
                          {"p10_step_s", p10}};
    if (cuda) out["device"] = runtime::cuda_device_description();
    emit_json(out);
    return Status::ok();
  }
  for (size_t i = 0; i < result.losses.size(); ++i)
    fmt::print("step {:>4}  loss {:.6f}\n", i + 1, result.losses[i]);
  fmt::print(
      "{}: {} steps on {} devices ({}) in {:.3f} s, median step {:.3f} ms, 10th percentile "
      "{:.3f} ms\n",
      dir, steps, built.plan.device_role.size(),
      backend == runtime::PlanBackend::kCuda ? "GPUs, NCCL" : comm, result.seconds, median * 1e3,
      p10 * 1e3);
  return Status::ok();
}

Status run_plan_directory_cuda(const std::string& dir, int steps, bool json) {
  if (steps < 1) return error("--steps {}: must be at least 1", steps);
  ASSIGN_OR_RETURN(BuiltPlan built, load_plan(dir, false));
  ASSIGN_OR_RETURN(std::vector<runtime::CudaRoleTiming> roles,
                   runtime::time_plan_roles_cuda(built.plan, steps, false));
  // The slowest role bounds the step; communication is not in these figures.
  double median = 0, p10 = 0;
  for (const auto& r : roles) {
    median = std::max(median, r.step_s);
    p10 = std::max(p10, r.p10_step_s);
  }
  if (json) {
    nlohmann::json out = {{"backend", "cuda"},
                          {"device", runtime::cuda_device_description()},
                          {"devices", built.plan.device_role.size()},
                          {"replays", steps},
                          {"median_step_s", median},
                          {"p10_step_s", p10},
                          {"communication", "stubbed"}};
    nlohmann::json json_roles = nlohmann::json::array();
    for (const auto& r : roles) {
      nlohmann::json programs = nlohmann::json::array();
      for (const auto& p : r.programs)
        programs.push_back({{"program", p.name},
                            {"runs_per_step", p.runs_per_step},
                            {"median_s", p.median_s},
                            {"p10_s", p.p10_s}});
      json_roles.push_back({{"role", r.role},
                            {"step_s", r.step_s},
                            {"p10_step_s", r.p10_step_s},
                            {"programs", programs}});
    }
    out["roles"] = json_roles;
    emit_json(out);
    return Status::ok();
  }
  fmt::print("{}: {} devices, {} roles on {}, communication stubbed, {} replays per program\n", dir,
             built.plan.device_role.size(), roles.size(), runtime::cuda_device_description(),
             steps);
  fmt::print("{:<6} {:<8} {:>5} {:>12} {:>12}\n", "role", "program", "runs", "median ms", "p10 ms");
  for (const auto& r : roles) {
    for (const auto& p : r.programs)
      fmt::print("{:<6} {:<8} {:>5} {:>12.3f} {:>12.3f}\n", r.role, p.name, p.runs_per_step,
                 p.median_s * 1e3, p.p10_s * 1e3);
    fmt::print("{:<6} {:<8} {:>5} {:>12.3f} {:>12.3f}\n", r.role, "step", "", r.step_s * 1e3,
               r.p10_step_s * 1e3);
  }
  fmt::print("median step {:.3f} ms, 10th percentile {:.3f} ms (the slowest role's compute)\n",
             median * 1e3, p10 * 1e3);
  return Status::ok();
}

void add_transform_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<TransformFlags>();
  CLI::App* t = app.add_subcommand("transform",
                                   "lower a model under a parallel scheme into a plan directory");
  t->footer(
      "Examples:\n"
      "  autopar transform gpt2-small --scheme configs/schemes/megatron-3d.yaml -o plan\n"
      "  autopar transform model.onnx --scheme s.yaml --hw dgx-h100 --nodes 2 --dump-after spmd\n");
  t->add_option("model", flags->model, "ONNX file, or a zoo name")->required();
  t->add_option("--scheme", flags->scheme, "scheme YAML (see configs/schemes/)")->required();
  t->add_option("-o,--output", flags->out, "plan directory to write (default plan)");
  t->add_option("--loss", flags->loss,
                "cross_entropy, mse or none (inference only); default: cross_entropy for class "
                "scores, else mse");
  t->add_option("--optimizer", flags->optimizer, "sgd, adam or adamw (default adam)");
  t->add_option("--hw", flags->hw,
                "hardware profile the strategies are priced on: a YAML file or a name in "
                "configs/hw/ (default: a neutral accelerator)");
  t->add_option("--nodes", flags->nodes, "nodes of that profile (default 1)");
  std::string passes;
  for (const LoweringPass& p : lowering_passes())
    passes += fmt::format("{}{} ({})", passes.empty() ? "" : "; ", p.name, p.what);
  t->add_option("--dump-after", flags->dump_after,
                "print the graph in text form after a pass of the lowering: " + passes);
  t->add_flag("--json", flags->json, "print one JSON object");
  t->add_flag("--verify-passes", flags->verify_passes,
              "check the graph's invariants after every pass of the lowering");
  flags->dims.add_to(*t);
  t->callback([flags, &command] { command = [flags] { return run_transform(*flags); }; });
}

void add_verify_command(CLI::App& app, Command& command, int* exit_code) {
  auto flags = std::make_shared<VerifyFlags>();
  CLI::App* v = app.add_subcommand(
      "verify", "run one step of a plan and of one device on the same data and compare");
  v->footer(
      "Examples:\n"
      "  autopar verify plan\n"
      "  mpirun -np 8 autopar verify plan --comm mpi\n"
      "  autopar verify plan --backend cuda\n"
      "  mpirun -np 8 autopar verify plan --backend cuda --comm mpi\n");
  v->add_option("plan", flags->plan, "plan directory")->required();
  v->add_option("--comm", flags->comm, "inproc (threads, default) or mpi (under mpirun)");
  v->add_option("--backend", flags->backend,
                "cpu (default) or cuda: the plan's programs on GPUs (inproc: every device a "
                "thread on one GPU, communicating through the host; mpi: a GPU per rank, "
                "collectives over NCCL); the reference runs on the CPU");
  v->add_option("--seed", flags->seed, "seed of the synthetic batch (default 0)");
  v->add_option("--tolerance", flags->tolerance, "largest relative error accepted (default 1e-4)");
  v->add_flag("--fp32", flags->fp32,
              "run the plan as stored (float32) instead of its float64 instance");
  v->add_flag("--json", flags->json, "print one JSON object");
  v->callback([flags, &command, exit_code] {
    command = [flags, exit_code] { return run_verify(*flags, exit_code); };
  });
}

}  // namespace autopar::cli
