// `autopar run MODEL`: runs a model on the CPU executor (inference on input files).
#include <filesystem>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "autopar/ir/pattern_fusion.h"
#include "autopar/onnx/onnx_bind.h"
#include "autopar/onnx/onnx_tensor.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/trainer.h"
#include "commands.h"
#include "plan_command.h"

namespace autopar::cli {
namespace {

struct RunFlags {
  std::string model;
  std::string inputs;
  std::string outputs;
  int threads = 0;
  bool json = false;
  bool train = false;
  int steps = 50;
  int batches = 4;
  int repeat = 1;         // inference: runs, of which the first is the cold one
  bool op_times = false;  // inference: time per op type of the last run
  uint64_t seed = 0;
  std::string comm = "inproc";
  std::string backend = "cpu";
  CLI::Option* steps_option = nullptr;
  DimFlags dims;
  TrainingFlags training;
};

StatusOr<std::vector<Tensor>> read_inputs(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return error("--inputs {}: not a directory", dir);
  std::vector<Tensor> inputs;
  for (int i = 0;; ++i) {
    const std::string path = fmt::format("{}/input_{}.pb", dir, i);
    if (!std::filesystem::exists(path, ec)) break;
    ASSIGN_OR_RETURN(Tensor t, read_tensor_file(path));
    inputs.push_back(std::move(t));
  }
  if (inputs.empty()) return error("--inputs {}: holds no input_0.pb", dir);
  return inputs;
}

Status run_inference(const RunFlags& flags) {
  if (flags.inputs.empty())
    return error("--inputs DIR is required to run {} (or pass --train)", flags.model);
  if (flags.threads < 0) return error("--threads {}: must be 0 (all cores) or more", flags.threads);
  if (flags.dims.given()) {
    return error(
        "--batch/--dim: with --inputs the dims come from the input files (they bind dims for "
        "--train)");
  }
  std::string model_dir;
  ASSIGN_OR_RETURN(onnx::ModelProto model, load_model_proto(flags.model, model_dir));
  ASSIGN_OR_RETURN(std::vector<Tensor> inputs, read_inputs(flags.inputs));
  ImportOptions import_options;  // --no-fusion, --keep-constants
  import_options.fuse_patterns = !flags.dims.no_fusion;
  import_options.constant_weights_trainable = !flags.dims.keep_constants;
  ASSIGN_OR_RETURN(BoundModel bound, import_for_inputs(model, std::move(inputs), flags.model,
                                                       model_dir, nullptr, import_options));
  // Inference: a BatchNormalization after a convolution becomes part of its weights (value
  // ids are renumbered, so the feeds are found again by name).
  std::vector<std::string> fed;
  for (const auto& feed : bound.feeds) fed.push_back(bound.graph.value(feed.first).name);
  if (fold_inference_batch_norms(bound.graph) > 0) {
    for (size_t i = 0; i < fed.size(); ++i) bound.feeds[i].first = *bound.graph.find_value(fed[i]);
  }
  std::vector<runtime::Feed> feeds(bound.feeds.begin(), bound.feeds.end());
  runtime::RunStats stats;
  std::vector<TensorPtr> outputs;
  std::optional<runtime::Executor> executor;
  std::unique_ptr<runtime::CudaExecutor> cuda;
  std::vector<double> run_seconds;  // each run's
  if (flags.backend == "cuda") {
    ASSIGN_OR_RETURN(cuda, runtime::CudaExecutor::create(bound.graph));
    RETURN_IF_ERROR(cuda->feed(feeds));
    for (int i = 0; i < flags.repeat; ++i) {
      ASSIGN_OR_RETURN(stats.seconds, cuda->step());
      run_seconds.push_back(stats.seconds);
    }
    ASSIGN_OR_RETURN(outputs, cuda->outputs());
    stats.peak_activation_bytes = runtime::summarize(cuda->lowering()).arena_bytes;
  } else {
    runtime::ExecutorOptions options;
    options.num_threads = flags.threads;
    options.profile = flags.op_times;
    ASSIGN_OR_RETURN(executor, runtime::Executor::create(std::move(bound.graph), options));
    // The model and its inputs are in memory already; what the run adds is its activations.
    const double need = static_cast<double>(executor->planned_peak_bytes());
    const double available = available_memory_bytes();
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    if (available > 0 && need > available) {
      return error(
          "{}: running it on these inputs needs about {:.1f} GiB of activations and this "
          "machine has {:.1f} GiB available",
          flags.model, need / kGiB, available / kGiB);
    }
    for (int i = 0; i < flags.repeat; ++i) {
      ASSIGN_OR_RETURN(outputs, executor->run(feeds, &stats));
      run_seconds.push_back(stats.seconds);
    }
  }
  // The steady state: the median and 10th percentile of the runs after the first.
  const StepTimes times = warm_step_times(run_seconds, stats.seconds);
  // --op-times: the last run's seconds per op type (a fused run's shared among its nodes),
  // most first.
  std::vector<std::pair<double, std::string>> op_seconds;
  if (flags.op_times && executor) {
    const Graph& g = executor->graph();
    // Convolutions by kind: their kernels differ (a GEMM, a per-channel stencil, im2col).
    auto kind = [&g](const Node& node) {
      if (node.op_type != "Conv" || node.inputs.size() < 2) return node.op_type;
      const Shape& w = g.value(node.inputs[1]).shape;
      bool pointwise = w.rank() > 2;
      for (size_t d = 2; d < w.dims.size(); ++d) pointwise = pointwise && w.dims[d] == 1;
      if (pointwise) return std::string("Conv 1x1");
      return w.rank() > 1 && w.dims[1] == 1 && node.attr_int("group", 1) > 1
                 ? std::string("Conv depthwise")
                 : node.op_type;
    };
    std::map<std::string, double> by_op;
    for (size_t n = 0; n < stats.node_seconds.size(); ++n)
      by_op[kind(g.node(static_cast<NodeId>(n)))] += stats.node_seconds[n];
    for (const auto& [op, seconds] : by_op) op_seconds.emplace_back(seconds, op);
    std::sort(op_seconds.rbegin(), op_seconds.rend());
  }
  const Graph& g = cuda ? cuda->graph() : executor->graph();
  const int threads = cuda ? 0 : executor->num_threads();
  if (!flags.outputs.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(flags.outputs, ec);
    if (ec) return error("--outputs {}: cannot create: {}", flags.outputs, ec.message());
    for (size_t i = 0; i < outputs.size(); ++i) {
      RETURN_IF_ERROR(write_tensor_file(fmt::format("{}/output_{}.pb", flags.outputs, i),
                                        *outputs[i], g.value(g.outputs()[i]).name));
    }
  }
  nlohmann::json json_outputs = nlohmann::json::array();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = *outputs[i];
    double sum = 0;
    for (int64_t k = 0; k < t.num_elements(); ++k) sum += t.float_at(k);
    const double mean = t.num_elements() ? sum / static_cast<double>(t.num_elements()) : 0.0;
    json_outputs.push_back({{"name", g.value(g.outputs()[i]).name},
                            {"dtype", dtype_name(t.dtype())},
                            {"shape", t.dims()},
                            {"mean", mean}});
  }
  if (flags.json) {
    nlohmann::json out = {
        {"outputs", json_outputs},    {"seconds", run_seconds.front()},
        {"runs", run_seconds.size()}, {"median_s", times.median},
        {"p10_s", times.p10},         {"backend", flags.backend},
        {"threads", threads},         {"peak_activation_bytes", stats.peak_activation_bytes}};
    for (const auto& [seconds, op] : op_seconds) out["op_seconds"][op] = seconds;
    emit_json(out);
    return Status::ok();
  }
  for (const auto& o : json_outputs) {
    fmt::print("output {}: {}[{}] mean {:.6g}\n", o["name"].get<std::string>(),
               o["dtype"].get<std::string>(),
               fmt::join(o["shape"].get<std::vector<int64_t>>(), ","), o["mean"].get<double>());
  }
  double total = 0;
  for (const auto& entry : op_seconds) total += entry.first;
  for (const auto& [seconds, op] : op_seconds)
    fmt::print("{:<24} {:>10.3f} ms {:>6.1f}%\n", op, seconds * 1e3, 100 * seconds / total);
  const std::string device =
      cuda ? runtime::cuda_device_description() : fmt::format("{} threads", threads);
  if (run_seconds.size() > 1) {
    fmt::print(
        "ran {} nodes {} times on {}: first {:.3f} ms, then median {:.3f} ms, 10th "
        "percentile {:.3f} ms; peak activations {}\n",
        g.num_nodes(), run_seconds.size(), device, run_seconds.front() * 1e3, times.median * 1e3,
        times.p10 * 1e3, human_bytes(static_cast<double>(stats.peak_activation_bytes)));
  } else {
    fmt::print("ran {} nodes in {:.3f} ms on {}; peak activations {}\n", g.num_nodes(),
               stats.seconds * 1e3, device,
               human_bytes(static_cast<double>(stats.peak_activation_bytes)));
  }
  return Status::ok();
}

Status run_training(RunFlags& flags) {
  if (flags.threads < 0) return error("--threads {}: must be 0 (all cores) or more", flags.threads);
  if (flags.batches < 1) return error("--batches {}: must be at least 1", flags.batches);
  RETURN_IF_ERROR(check_training_memory(flags.model, flags.training.loss, flags.training.optimizer,
                                        flags.dims));
  ASSIGN_OR_RETURN(Graph model, load_trainable_model(flags.model, flags.dims));
  RETURN_IF_ERROR(check_trainable_opset(model, flags.model, false));
  ASSIGN_OR_RETURN(LossSpec loss, flags.training.loss_spec(model));
  ASSIGN_OR_RETURN(OptimizerSpec optimizer, flags.training.optimizer_spec());
  runtime::SyntheticTrainingOptions options;
  options.steps = flags.steps;
  options.batches = flags.batches;
  options.seed = flags.seed;
  options.num_threads = flags.threads;
  options.cuda = flags.backend == "cuda";
  ASSIGN_OR_RETURN(runtime::TrainingRun run,
                   runtime::train_synthetic(model, loss, optimizer, options));
  // The first step is the warm-up (CUDA: run eagerly while libraries choose their algorithms,
  // then captured).
  const StepTimes times = warm_step_times(run.step_seconds, 0.0);
  const double median = times.median, p10 = times.p10;
  if (flags.json) {
    nlohmann::json out = {
        {"losses", run.losses},
        {"steps", run.losses.size()},
        {"loss", loss_name(loss.kind)},
        {"optimizer", optimizer_name(optimizer.kind)},
        {"lr", optimizer.learning_rate()},
        {"seconds", run.seconds},
        {"seconds_per_step", run.seconds / static_cast<double>(run.losses.size())},
        {"median_step_s", median},
        {"p10_step_s", p10},
        {"backend", flags.backend},
        {"peak_activation_bytes", run.peak_activation_bytes},
        {"training_nodes", run.training_nodes}};
    if (options.cuda) out["device"] = runtime::cuda_device_description();
    emit_json(out);
    return Status::ok();
  }
  fmt::print("training {} with {} and {} (lr {}), {} synthetic batches from a random teacher\n",
             flags.model, loss_name(loss.kind), optimizer_name(optimizer.kind),
             optimizer.learning_rate(), flags.batches);
  for (size_t s = 0; s < run.losses.size(); ++s)
    fmt::print("step {:>4}  loss {:.6f}\n", s + 1, run.losses[s]);
  fmt::print(
      "{} steps in {:.3f} s on {} (median step {:.3f} ms, 10th percentile {:.3f} ms, {} nodes); "
      "peak activations {}\n",
      run.losses.size(), run.seconds, options.cuda ? runtime::cuda_device_description() : "the CPU",
      median * 1e3, p10 * 1e3, run.training_nodes,
      human_bytes(static_cast<double>(run.peak_activation_bytes)));
  return Status::ok();
}

}  // namespace

void add_run_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* run = app.add_subcommand(
      "run", "run a model or a plan on the CPU runtime or a GPU (--backend cuda)");
  run->footer(
      "Examples:\n"
      "  autopar run model.onnx --inputs inputs/ --outputs outputs/\n"
      "  autopar run gpt-tiny --train --steps 20 --optimizer adamw --lr 0.001\n"
      "  autopar run plan --steps 5\n");
  run->add_option("model", flags->model,
                  "ONNX file, a zoo name (built with weights), or a plan directory (runs its "
                  "training steps on synthetic data)")
      ->required();
  run->add_option("--comm", flags->comm,
                  "plans: inproc (a thread per device, default) or mpi (mpirun -np N)");
  run->add_option("--inputs", flags->inputs,
                  "folder of input_<i>.pb TensorProto files, in graph-input order; unbound dims "
                  "take their sizes");
  run->add_option("--outputs", flags->outputs, "folder to write output_<i>.pb files to");
  run->add_option("--threads", flags->threads, "threads of the kernels (default 0: every core)");
  run->add_flag("--op-times", flags->op_times,
                "inference on the CPU: the last run's time per op type (--json: op_seconds)");
  run->add_option("--repeat", flags->repeat,
                  "inference: runs of the inputs; the median and 10th percentile are of the "
                  "runs after the first (default 1)");
  run->add_option("--backend", flags->backend,
                  "cpu (default) or cuda (device 0; plans: each role's programs on the one GPU, "
                  "communication stubbed)");
  run->add_flag("--json", flags->json, "print one JSON object");
  run->add_flag("--train", flags->train,
                "train on a synthetic task (labels from a fixed random teacher) and print the "
                "loss per step");
  flags->steps_option =
      run->add_option("--steps", flags->steps, "training steps (default 50; plans: default 1)");
  run->add_option("--batches", flags->batches,
                  "fixed synthetic batches cycled through (default 4)");
  run->add_option("--seed", flags->seed, "seed of the synthetic data and the teacher (default 0)");
  flags->dims.add_to(*run, 4);
  flags->training.add_to(*run);
  run->callback([flags, run, &command] {
    // The flags given of `names` (a flag that does nothing for an input is an error).
    auto given = [run](std::initializer_list<const char*> names) {
      std::vector<std::string> out;
      for (const char* name : names) {
        if (run->get_option(name)->count() > 0) out.emplace_back(name);
      }
      return out;
    };
    const std::vector<std::string> training =
        given({"--loss", "--optimizer", "--lr", "--momentum", "--beta1", "--beta2", "--epsilon",
               "--weight-decay", "--batches"});
    const std::vector<std::string> threads = given({"--threads"});
    const std::vector<std::string> repeat = given({"--repeat", "--op-times"});
    command = [flags, training, threads, repeat]() -> Status {
      if (flags->repeat < 1) return error("--repeat {}: must be at least 1", flags->repeat);
      if (flags->backend != "cpu" && flags->backend != "cuda")
        return error("--backend {}: expected cpu or cuda", flags->backend);
      std::error_code ec;
      if (std::filesystem::exists(flags->model + "/manifest.yaml", ec)) {
        if (flags->dims.given() || !flags->inputs.empty() || !flags->outputs.empty())
          return error(
              "{}: a plan runs as it was made: --batch, --dim, --inputs and --outputs "
              "do not apply",
              flags->model);
        if (!training.empty() || !threads.empty() || !repeat.empty()) {
          std::vector<std::string> ignored = training;
          ignored.insert(ignored.end(), threads.begin(), threads.end());
          ignored.insert(ignored.end(), repeat.begin(), repeat.end());
          return error(
              "{}: a plan trains with the loss and optimizer it was made with, a thread per "
              "device: {} do{} not apply",
              flags->model, fmt::join(ignored, ", "), ignored.size() == 1 ? "es" : "");
        }
        const bool steps = flags->train || flags->steps_option->count() > 0;
        if (flags->backend == "cuda") {
          // One GPU per rank over NCCL under mpirun; else each role timed on one GPU.
          if (flags->comm == "mpi") {
            if (const std::string why = runtime::cuda_unavailable_reason(); !why.empty())
              return error("--backend cuda: {}", why);
            return run_plan_directory(flags->model, flags->comm, steps ? flags->steps : 1,
                                      flags->json, flags->seed, runtime::PlanBackend::kCuda);
          }
          return run_plan_directory_cuda(flags->model, steps ? flags->steps : 20, flags->json);
        }
        return run_plan_directory(flags->model, flags->comm, steps ? flags->steps : 1, flags->json,
                                  flags->seed);
      }
      if (flags->comm != "inproc")
        return error("--comm {}: only plans run on a communicator", flags->comm);
      if (!flags->train && !training.empty())
        return error("{}: only with --train", fmt::join(training, ", "));
      if (flags->train && !repeat.empty())
        return error("{}: inference only (training runs --steps)", fmt::join(repeat, ", "));
      return flags->train ? run_training(*flags) : run_inference(*flags);
    };
  });
}

}  // namespace autopar::cli
