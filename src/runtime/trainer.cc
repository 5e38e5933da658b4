// Synthetic training: teacher labels, the step loop, state fed back between steps.
#include "autopar/runtime/trainer.h"

#include <chrono>
#include <cmath>
#include <random>

#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/executor.h"

namespace autopar::runtime {
namespace {

uint64_t name_seed(const std::string& name, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// The range of ids an integer input indexes: the gathered dim of the table it feeds.
int64_t id_range(const Graph& g, ValueId input) {
  for (NodeId consumer : g.value(input).consumers) {
    const Node& node = g.node(consumer);
    if (node.op_type == "Gather" && node.input(1) == input) {
      const auto& dims = g.value(node.inputs[0]).shape.dims;
      int64_t axis = node.attr_int("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(dims.size());
      return dims[axis];
    }
  }
  return 2;
}

Graph teacher_of(const Graph& model, uint64_t seed) {
  Graph teacher = model;
  for (ValueId id : teacher.parameters()) {
    Value& v = teacher.mutable_value(id);
    if (!v.data || !is_floating(v.dtype)) continue;
    const Tensor& own = *v.data;
    double mean = 0, square = 0;
    for (int64_t i = 0; i < own.num_elements(); ++i) {
      mean += own.float_at(i);
      square += own.float_at(i) * own.float_at(i);
    }
    const double n = std::max<double>(1.0, static_cast<double>(own.num_elements()));
    const double stddev = std::sqrt(std::max(0.0, square / n - (mean / n) * (mean / n)));
    std::mt19937_64 rng(name_seed(v.name, seed));
    std::normal_distribution<double> normal(mean / n, stddev > 0 ? stddev : 0.02);
    Tensor redrawn(v.dtype, own.dims());
    for (int64_t i = 0; i < redrawn.num_elements(); ++i) redrawn.set_from_double(i, normal(rng));
    v.data = std::make_shared<const Tensor>(std::move(redrawn));
  }
  return teacher;
}

// Labels from the teacher's output: argmax over the last dim, or the output itself.
Tensor labels_from(const Tensor& output, LossKind loss) {
  if (loss == LossKind::kMse) return output;
  const int64_t classes = output.dims().back();
  std::vector<int64_t> dims(output.dims().begin(), output.dims().end() - 1);
  Tensor labels(DType::kInt64, dims);
  for (int64_t row = 0; row < labels.num_elements(); ++row) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (output.float_at(row * classes + c) > output.float_at(row * classes + best)) best = c;
    }
    labels.set_from_int(row, best);
  }
  return labels;
}

}  // namespace

std::vector<TensorPtr> synthetic_inputs(const Graph& graph, uint64_t seed) {
  std::vector<TensorPtr> inputs;
  for (ValueId id : graph.inputs()) {
    const Value& v = graph.value(id);
    std::mt19937_64 rng(name_seed(v.name, seed));
    Tensor t(v.dtype, v.shape.dims);
    if (is_floating(v.dtype)) {
      std::normal_distribution<double> normal(0.0, 1.0);
      for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, normal(rng));
    } else {
      std::uniform_int_distribution<int64_t> uniform(0, id_range(graph, id) - 1);
      for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_int(i, uniform(rng));
    }
    inputs.push_back(std::make_shared<const Tensor>(std::move(t)));
  }
  return inputs;
}

StatusOr<TrainingRun> train_synthetic(const Graph& model, const LossSpec& loss,
                                      const OptimizerSpec& optimizer,
                                      const SyntheticTrainingOptions& options) {
  if (options.steps < 1) return error("--steps {}: must be at least 1", options.steps);
  for (ValueId id : model.parameters()) {
    if (!model.value(id).data) {
      return error(
          "parameter '{}' has no data: training needs a model with weights (autopar zoo "
          "--with-weights)",
          model.value(id).name);
    }
  }
  ASSIGN_OR_RETURN(TrainingGraph training, build_training_graph(model, loss, optimizer));
  ExecutorOptions executor_options;
  executor_options.num_threads = options.num_threads;
  ASSIGN_OR_RETURN(Executor teacher,
                   Executor::create(teacher_of(model, options.seed + 1), executor_options));

  // The fixed batches: inputs and teacher labels.
  const Graph& g = training.graph;
  std::vector<std::vector<Feed>> batches;
  const ValueId loss_output =
      loss.output.empty() ? model.outputs()[0] : *model.find_value(loss.output);
  size_t loss_index = 0;
  for (size_t i = 0; i < model.outputs().size(); ++i) {
    if (model.outputs()[i] == loss_output) loss_index = i;
  }
  for (int b = 0; b < options.batches; ++b) {
    std::vector<TensorPtr> inputs =
        synthetic_inputs(model, options.seed * 7919 + static_cast<uint64_t>(b));
    ASSIGN_OR_RETURN(std::vector<TensorPtr> outputs, teacher.run_inputs(inputs));
    std::vector<Feed> feeds;
    for (size_t i = 0; i < inputs.size(); ++i) {
      feeds.emplace_back(*g.find_value(model.value(model.inputs()[i]).name), inputs[i]);
    }
    feeds.emplace_back(training.labels, std::make_shared<const Tensor>(
                                            labels_from(*outputs[loss_index], loss.kind)));
    batches.push_back(std::move(feeds));
  }

  TrainingRun run;
  run.training_nodes = g.num_nodes();
  if (options.cuda) {
    CudaOptions cuda_options;
    cuda_options.updates = training.updates;
    ASSIGN_OR_RETURN(std::unique_ptr<CudaExecutor> step, CudaExecutor::create(g, cuda_options));
    run.peak_activation_bytes = summarize(step->lowering()).arena_bytes;
    const auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < options.steps; ++s) {
      RETURN_IF_ERROR(step->feed(batches[static_cast<size_t>(s) % batches.size()]));
      ASSIGN_OR_RETURN(double seconds, step->step());
      ASSIGN_OR_RETURN(Tensor loss_value, step->read(g.outputs()[0]));
      const double value = loss_value.float_at(0);
      if (!std::isfinite(value))
        return error("step {}: the loss is {} (lower --lr?)", s + 1, value);
      run.losses.push_back(value);
      run.step_seconds.push_back(seconds);
    }
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return run;
  }
  ASSIGN_OR_RETURN(Executor step, Executor::create(g, executor_options));
  std::vector<TensorPtr> state;
  for (const auto& [value, next] : training.updates) state.push_back(g.value(value).data);
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < options.steps; ++s) {
    std::vector<Feed> feeds = batches[static_cast<size_t>(s) % batches.size()];
    for (size_t k = 0; k < training.updates.size(); ++k)
      feeds.emplace_back(training.updates[k].first, state[k]);
    RunStats stats;
    const auto step_start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(std::vector<TensorPtr> outputs,
                     step.run(feeds, &stats, static_cast<uint64_t>(s)));
    run.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    const double value = outputs[0]->float_at(0);
    if (!std::isfinite(value)) {
      return error("step {}: the loss is {} (lower --lr?)", s + 1, value);
    }
    run.losses.push_back(value);
    run.peak_activation_bytes = std::max(run.peak_activation_bytes, stats.peak_activation_bytes);
    for (size_t k = 0; k < training.updates.size(); ++k) state[k] = outputs[k + 1];
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace autopar::runtime
