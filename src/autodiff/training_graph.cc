// The training step: forward, loss, backward and optimizer update in one graph.

#include "autopar/autodiff/autodiff.h"
#include "autopar/autodiff/emitter.h"
#include "autopar/ir/pattern_fusion.h"
#include "autopar/ir/shape_inference.h"
#include "autopar/ops/op_def.h"

namespace autopar {
namespace {

// Gradient rules emit opset-17 forms (ScatterElements with a reduction, ReduceSum's axes
// input); forward nodes of opsets 13 to 16 mean the same at 17.
constexpr int64_t kTrainingOpset = 17;
constexpr int64_t kMinTrainingOpset = 13;

// BatchNormalization in training mode: batch statistics, with the running statistics as
// extra outputs that become state updates. ONNX's running variance averages the batch's
// population variance; `unbiased` averages the sample variance (n/(n − 1) times it, n the
// elements per channel) as PyTorch's BatchNorm does: from the biased update u = m·r + (1 − m)·σ²,
// r' = m·r + (u − m·r)·n/(n − 1).
Status batch_norm_to_training(Graph& g, bool unbiased,
                              std::vector<std::pair<std::string, std::string>>& updates) {
  const NodeId model_nodes = g.num_nodes();
  for (NodeId id = 0; id < model_nodes; ++id) {
    if (g.node(id).op_type != "BatchNormalization" || !g.node(id).domain.empty()) continue;
    Node& node = g.mutable_node(id);
    node.attrs["training_mode"] = int64_t{1};
    node.outputs.resize(3, kNoId);
    for (size_t i = 1; i < 3; ++i) {
      const ValueId stat = node.inputs.at(i + 2);
      if (g.node(id).outputs[i] != kNoId) continue;
      Value v;
      v.name = g.unique_value_name(g.value(stat).name + ".updated");
      v.shape = Shape::unknown();
      const ValueId out = g.add_value(std::move(v));
      g.mutable_node(id).outputs[i] = out;
    }
    g.rebuild_uses();
    RETURN_IF_ERROR(infer_node(g, id));
    for (size_t i = 1; i < 3; ++i) {
      const ValueId stat = g.node(id).inputs.at(i + 2);
      ValueId out = g.node(id).outputs[i];
      if (i == 2 && unbiased) {
        const Node& bn = g.node(id);
        const Value& x = g.value(bn.inputs[0]);
        const int64_t channels = x.shape.rank() >= 2 ? x.shape.dims[1] : 0;
        const int64_t n = channels > 0 ? x.shape.num_elements() / channels : 0;
        if (n < 2) {
          return error(
              "node '{}' (BatchNormalization): the unbiased running variance needs "
              "more than one value per channel (it has {})",
              bn.name, n);
        }
        const DType dtype = g.value(stat).dtype;
        const double momentum = bn.attr_float("momentum", 0.9f);
        const std::string name = g.value(out).name;
        g.rename_value(out, g.unique_value_name(name + ".biased"));
        Emitter e(g, bn.name + "/unbiased_var", Phase::kForward, bn.layer);
        const ValueId kept = e.op("Mul", {stat, e.scalar(momentum, dtype)});
        const ValueId added = e.op("Sub", {out, kept});
        const ValueId scaled = e.op(
            "Mul", {added, e.scalar(static_cast<double>(n) / static_cast<double>(n - 1), dtype)});
        out = e.op("Add", {kept, scaled});
        RETURN_IF_ERROR(e.status());
        g.rename_value(out, name);
      }
      updates.emplace_back(g.value(stat).name, g.value(out).name);
    }
  }
  return Status::ok();
}

// The symbolic names of the first `count` dims of `output`: the output's own, or else the
// batch symbol of an input whose leading dim has the output's leading size. Labels take
// them, so a training graph's labels are as symbolic as its inputs.
std::vector<std::string> leading_symbols(const Graph& g, ValueId output, size_t count) {
  const Shape& shape = g.value(output).shape;
  std::vector<std::string> symbols(count);
  bool any = false;
  for (size_t d = 0; d < count && d < shape.symbols.size(); ++d) {
    symbols[d] = shape.symbols[d];
    any = any || !symbols[d].empty();
  }
  if (!any && count > 0 && shape.rank() > 0) {
    for (ValueId in : g.inputs()) {
      const Shape& s = g.value(in).shape;
      if (s.rank() > 0 && !s.symbol(0).empty() && s.dims[0] == shape.dims[0]) {
        symbols[0] = std::string(s.symbol(0));
        any = true;
        break;
      }
    }
  }
  if (!any) symbols.clear();
  return symbols;
}

struct LossResult {
  ValueId loss = kNoId;
  ValueId labels = kNoId;
};

StatusOr<LossResult> add_loss(Graph& g, const LossSpec& spec) {
  ValueId output = g.outputs().empty() ? kNoId : g.outputs()[0];
  if (!spec.output.empty()) {
    auto found = g.find_value(spec.output);
    if (!found || !g.is_output(*found))
      return error("--output {}: the model has no such output", spec.output);
    output = *found;
  }
  if (output == kNoId) return error("the model has no output to train");
  const Value& out = g.value(output);
  if (!is_floating(out.dtype)) {
    return error("output '{}' is {}: a loss needs a floating output", out.name,
                 dtype_name(out.dtype));
  }
  Emitter emit(g, "loss", Phase::kForward, -1);
  LossResult result;
  Value labels;
  labels.kind = ValueKind::kInput;
  if (spec.kind == LossKind::kCrossEntropy) {
    if (out.shape.rank() < 2 || out.shape.dims.back() < 2) {
      return error(
          "cross_entropy: output '{}' {}[{}] has no class axis (its last dim must count "
          "at least 2 classes); use --loss mse",
          out.name, dtype_name(out.dtype), fmt::join(out.shape.dims, ","));
    }
    // Class scores: the logits, or a Softmax's input (its log is then taken safely inside the
    // loss).
    ValueId scores = output;
    if (out.producer != kNoId) {
      const Node& producer = g.node(out.producer);
      const int64_t axis = producer.attr_int("axis", -1);
      if (producer.op_type == "Softmax" && producer.domain.empty() &&
          (axis == -1 || axis == out.shape.rank() - 1)) {
        scores = producer.inputs[0];
      }
    }
    std::vector<int64_t> label_dims(out.shape.dims.begin(), out.shape.dims.end() - 1);
    const int64_t classes = out.shape.dims.back();
    labels.name = g.unique_value_name("labels");
    labels.dtype = DType::kInt64;
    labels.shape = Shape(label_dims);
    labels.shape.symbols = leading_symbols(g, output, label_dims.size());
    result.labels = g.add_value(std::move(labels));
    // Rows as -1: the labels keep the output's symbolic batch, so the loss must not pin it.
    const bool flat = label_dims.size() == 1;
    const ValueId flat_scores =
        flat && g.value(scores).shape.rank() == 2 ? scores : emit.reshape(scores, {-1, classes});
    const ValueId flat_labels = flat ? result.labels : emit.reshape(result.labels, {-1});
    result.loss =
        emit.op("SoftmaxCrossEntropyLoss", {flat_scores, flat_labels}, {{"reduction", "mean"}});
  } else {
    labels.name = g.unique_value_name("targets");
    labels.dtype = out.dtype;
    labels.shape = out.shape;
    labels.shape.symbols = leading_symbols(g, output, out.shape.dims.size());
    result.labels = g.add_value(std::move(labels));
    const ValueId diff = emit.op("Sub", {output, result.labels});
    result.loss = emit.op("ReduceMean", {emit.op("Mul", {diff, diff})}, {{"keepdims", int64_t{0}}});
  }
  RETURN_IF_ERROR(emit.status());
  g.add_input(result.labels);
  return result;
}

// Zero-filled state shaped like `like` (shape-only when the parameter is).
ValueId add_state(Graph& g, const Value& like, const std::string& name) {
  Value v;
  v.name = g.unique_value_name(name);
  v.dtype = like.dtype;
  v.shape = Shape(like.shape.dims);
  v.kind = ValueKind::kConstant;
  if (like.data) v.data = std::make_shared<const Tensor>(like.dtype, like.shape.dims);
  return g.add_value(std::move(v));
}

int32_t layer_of_parameter(const Graph& g, ValueId param) {
  for (NodeId consumer : g.value(param).consumers) {
    if (g.node(consumer).phase == Phase::kForward) return g.node(consumer).layer;
  }
  return -1;
}

}  // namespace

StatusOr<LossKind> parse_loss(std::string_view name) {
  if (name == "cross_entropy") return LossKind::kCrossEntropy;
  if (name == "mse") return LossKind::kMse;
  return error("--loss {}: expected cross_entropy or mse", name);
}

StatusOr<OptimizerKind> parse_optimizer(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  return error("--optimizer {}: expected sgd, adam or adamw", name);
}

const char* loss_name(LossKind kind) {
  return kind == LossKind::kCrossEntropy ? "cross_entropy" : "mse";
}

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdamW:
      return "adamw";
  }
  return "?";
}

double OptimizerSpec::learning_rate() const {
  return lr.value_or(kind == OptimizerKind::kSgd ? 0.01 : 0.001);
}

double OptimizerSpec::decay() const {
  return weight_decay.value_or(kind == OptimizerKind::kAdamW ? 0.01 : 0.0);
}

Status OptimizerSpec::validate() const {
  const double rate = learning_rate();
  if (!(rate > 0 && std::isfinite(rate)))
    return error("--lr {}: must be positive and finite", rate);
  if (!(decay() >= 0 && std::isfinite(decay()))) {
    return error("--weight-decay {}: must be zero or positive and finite", decay());
  }
  if (kind == OptimizerKind::kSgd) {
    if (!(momentum >= 0 && momentum < 1))
      return error("--momentum {}: must be in [0, 1)", momentum);
    return Status::ok();
  }
  if (!(beta1 >= 0 && beta1 < 1)) return error("--beta1 {}: must be in [0, 1)", beta1);
  if (!(beta2 >= 0 && beta2 < 1)) return error("--beta2 {}: must be in [0, 1)", beta2);
  if (!(epsilon > 0 && std::isfinite(epsilon))) {
    return error("--epsilon {}: must be positive and finite", epsilon);
  }
  return Status::ok();
}

LossKind default_loss(const Graph& model) {
  if (model.outputs().empty()) return LossKind::kMse;
  const Value& out = model.value(model.outputs()[0]);
  return out.shape.rank() >= 2 && out.shape.dims.back() >= 2 ? LossKind::kCrossEntropy
                                                             : LossKind::kMse;
}

StatusOr<TrainingGraph> build_training_graph(const Graph& model, const LossSpec& loss_spec,
                                             const OptimizerSpec& opt,
                                             const TrainingOptions& options) {
  RETURN_IF_ERROR(opt.validate());
  const int64_t opset = model.opset();
  if (opset < kMinTrainingOpset) {
    return error("training needs ai.onnx opset {} or newer (the model imports {})",
                 kMinTrainingOpset, opset);
  }
  Graph g = options.fused
                ? fuse_training_patterns(model, nullptr, {.attention = options.fuse_attention})
                : model;
  g.opsets[""] = std::max(opset, kTrainingOpset);
  for (NodeId id = 0; id < g.num_nodes(); ++id) g.mutable_node(id).phase = Phase::kForward;

  std::vector<std::pair<std::string, std::string>> updates;  // state name → updated value name
  RETURN_IF_ERROR(batch_norm_to_training(g, options.unbiased_running_var, updates));
  std::vector<std::string> statistic_names;  // BatchNorm's running statistics
  for (const auto& [state, next] : updates) statistic_names.push_back(state);
  ASSIGN_OR_RETURN(LossResult loss, add_loss(g, loss_spec));

  std::vector<ValueId> params;
  for (ValueId id : g.parameters()) {
    if (is_floating(g.value(id).dtype)) params.push_back(id);
  }
  std::vector<std::pair<NodeId, NodeId>> forward_ids;
  ASSIGN_OR_RETURN(std::vector<ValueId> grads,
                   add_gradients(g, loss.loss, params, options.fused, &forward_ids));
  std::vector<std::pair<std::string, std::string>> forward_of;
  for (const auto& [b, f] : forward_ids) forward_of.emplace_back(g.node(b).name, g.node(f).name);

  // The optimizer: one step counter shared by every parameter (Adam's bias correction).
  Emitter emit(g, "optimizer", Phase::kOptimizer, -1);
  const bool adam = opt.kind != OptimizerKind::kSgd;
  ValueId step_next = kNoId, adam_rate = kNoId, adam_epsilon = kNoId;
  std::vector<std::pair<std::string, std::string>> gradient_names;
  std::vector<std::pair<std::string, std::string>> slot_names;  // slot, its parameter
  const DType dtype = params.empty() ? DType::kFloat32 : g.value(params[0]).dtype;
  if (adam) {
    Value step;
    step.name = g.unique_value_name("optimizer.step");
    step.dtype = dtype;
    step.shape = Shape(std::vector<int64_t>{});
    step.kind = ValueKind::kConstant;
    step.data = std::make_shared<const Tensor>(dtype, std::vector<int64_t>{});
    const ValueId step_id = g.add_value(std::move(step));
    step_next = emit.op("Add", {step_id, emit.scalar(1.0, dtype)});
    const auto one_minus_pow = [&](double beta) {
      return emit.op(
          "Sub", {emit.scalar(1.0, dtype), emit.op("Pow", {emit.scalar(beta, dtype), step_next})});
    };
    // m̂/(√v̂ + ε) with m̂ = m/c1, v̂ = v/c2 is (√c2/c1)·m/(√v + ε√c2): the bias corrections
    // fold into two scalars shared by every parameter, saving two passes over each.
    const ValueId root_c2 = emit.op("Sqrt", {one_minus_pow(opt.beta2)});
    adam_rate = emit.op("Div", {emit.op("Mul", {emit.scalar(opt.learning_rate(), dtype), root_c2}),
                                one_minus_pow(opt.beta1)});
    adam_epsilon = emit.op("Mul", {emit.scalar(opt.epsilon, dtype), root_c2});
    updates.emplace_back(g.value(step_id).name, g.value(step_next).name);
  }
  const double lr = opt.learning_rate();
  const double decay = opt.decay();
  for (size_t k = 0; k < params.size(); ++k) {
    const ValueId p = params[k];
    ValueId grad = grads[k];
    if (grad == kNoId) continue;  // the loss does not depend on it
    const Value pv = g.value(p);
    const DType t = pv.dtype;
    gradient_names.emplace_back(pv.name, g.value(grad).name);
    emit.set_layer(layer_of_parameter(g, p));
    emit.set_prefix("optimizer/" + pv.name);
    auto scaled = [&](double s, ValueId x) { return emit.op("Mul", {emit.scalar(s, t), x}); };
    if (decay > 0 && opt.kind != OptimizerKind::kAdamW)
      grad = emit.op("Add", {grad, scaled(decay, p)});
    ValueId p_next;
    if (!adam) {
      ValueId step = grad;
      if (opt.momentum > 0) {
        const ValueId velocity = add_state(g, pv, pv.name + ".momentum");
        slot_names.emplace_back(g.value(velocity).name, pv.name);
        step = emit.op("Add", {scaled(opt.momentum, velocity), grad});
        updates.emplace_back(g.value(velocity).name, g.value(step).name);
      }
      p_next = emit.op("Sub", {p, scaled(lr, step)});
    } else if (options.fused && t == dtype && (t == DType::kFloat32 || t == DType::kFloat64)) {
      // One fused node per parameter: the moments and the step in one pass over memory.
      const ValueId m = add_state(g, pv, pv.name + ".adam_m");
      const ValueId v = add_state(g, pv, pv.name + ".adam_v");
      slot_names.emplace_back(g.value(m).name, pv.name);
      slot_names.emplace_back(g.value(v).name, pv.name);
      Tensor coefficients(t, {5});
      const double keep = opt.kind == OptimizerKind::kAdamW && decay > 0 ? 1 - lr * decay : 1.0;
      const double values[] = {opt.beta1, 1 - opt.beta1, opt.beta2, 1 - opt.beta2, keep};
      for (int64_t i = 0; i < 5; ++i) coefficients.set_from_double(i, values[i]);
      const std::vector<ValueId> next =
          emit.op_n("Adam", {p, grad, m, v, adam_rate, adam_epsilon, emit.constant(coefficients)},
                    {}, 3, kTrainingDomain);
      p_next = next[0];
      updates.emplace_back(g.value(m).name, g.value(next[1]).name);
      updates.emplace_back(g.value(v).name, g.value(next[2]).name);
    } else {
      const ValueId m = add_state(g, pv, pv.name + ".adam_m");
      const ValueId v = add_state(g, pv, pv.name + ".adam_v");
      slot_names.emplace_back(g.value(m).name, pv.name);
      slot_names.emplace_back(g.value(v).name, pv.name);
      const ValueId m_next = emit.op("Add", {scaled(opt.beta1, m), scaled(1 - opt.beta1, grad)});
      const ValueId v_next = emit.op(
          "Add", {scaled(opt.beta2, v), scaled(1 - opt.beta2, emit.op("Mul", {grad, grad}))});
      const ValueId direction =
          emit.op("Div", {m_next, emit.op("Add", {emit.op("Sqrt", {v_next}), adam_epsilon})});
      // AdamW decays the weights themselves: p·(1 − lr·λ).
      const ValueId kept =
          opt.kind == OptimizerKind::kAdamW && decay > 0 ? scaled(1 - lr * decay, p) : p;
      p_next = emit.op("Sub", {kept, emit.op("Mul", {adam_rate, direction})});
      updates.emplace_back(g.value(m).name, g.value(m_next).name);
      updates.emplace_back(g.value(v).name, g.value(v_next).name);
    }
    updates.emplace_back(pv.name, g.value(p_next).name);
  }
  RETURN_IF_ERROR(emit.status());

  // Outputs: the loss, then every state's next value, named "<state>.updated".
  std::vector<ValueId> outputs = {loss.loss};
  for (auto& [state, next] : updates) {
    const ValueId id = *g.find_value(next);
    const std::string wanted = state + ".updated";
    if (next != wanted && !g.find_value(wanted)) {
      g.rename_value(id, wanted);
      next = wanted;
    }
    outputs.push_back(id);
  }
  g.rename_value(loss.loss, g.unique_value_name("loss"));
  g.set_outputs(outputs);
  const std::string loss_name_kept = g.value(loss.loss).name;
  const std::string labels_name = g.value(loss.labels).name;
  g.remove_dead_nodes();

  TrainingGraph result;
  result.loss = *g.find_value(loss_name_kept);
  result.labels = *g.find_value(labels_name);
  for (const auto& [state, next] : updates) {
    result.updates.emplace_back(*g.find_value(state), *g.find_value(next));
  }
  for (const std::string& statistic : statistic_names) {
    if (auto id = g.find_value(statistic)) result.statistics.push_back(*id);
  }
  for (const auto& [slot, param] : slot_names) {
    auto slot_id = g.find_value(slot);
    if (slot_id) result.slots.emplace_back(*slot_id, *g.find_value(param));
  }
  for (const auto& [param, grad] : gradient_names) {
    auto grad_id = g.find_value(grad);
    if (grad_id) result.gradients.emplace_back(*g.find_value(param), *grad_id);
  }
  result.forward_of = std::move(forward_of);
  result.graph = std::move(g);
  return result;
}

}  // namespace autopar
