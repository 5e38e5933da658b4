// Options and number formatting the subcommands share.
#include <charconv>
#include <cmath>

#include <filesystem>

#include "autopar/onnx/onnx_export.h"
#include "autopar/zoo/zoo.h"
#include "commands.h"

namespace autopar::cli {
namespace {

// A zoo name with no file of that name beside it: the built-in model. A folder of that name
// (a plan made from the model, say) is no model file and leaves the name to the zoo.
bool names_zoo_model(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::exists(model, ec) && !std::filesystem::is_directory(model, ec)) return false;
  return std::any_of(zoo_entries().begin(), zoo_entries().end(),
                     [&](const ZooEntry& entry) { return entry.name == model; });
}

// A zoo model's options at the bound dims: --batch (or `default_batch`) and "seq" (--seq), the
// only dims a zoo model has.
StatusOr<ZooOptions> zoo_options(const ImportOptions& options, int64_t default_batch) {
  ZooOptions zoo;
  zoo.batch = options.batch.value_or(default_batch);
  for (const auto& [name, n] : options.dims) {
    if (name != kZooSeqDim)
      return error("--dim {}={}: zoo models have only the batch and seq dims (use --batch, --seq)",
                   name, n);
    zoo.seq = n;
  }
  return zoo;
}

}  // namespace

Status seq_on_file(const std::string& model) {
  return error("--seq: {} is an ONNX file; bind its sequence dim with --dim NAME=N", model);
}

void DimFlags::add_to(CLI::App& command, std::optional<int64_t> default_batch) {
  batch = default_batch;
  batch_option_ = command.add_option(
      "--batch", batch,
      "size bound to the model's batch dim (named batch, batch_size or N, or the "
      "leading dim of each input)" +
          (default_batch ? fmt::format("; default {}", *default_batch) : ""));
  seq_option_ = command.add_option(
      "--seq", seq,
      "sequence length of a zoo model (gpt, llama, bert; an ONNX file's is bound with --dim)");
  dim_option_ =
      command.add_option("--dim", dims, "NAME=N: size bound to the symbolic dim NAME (repeatable)");
  command.add_flag("--no-fusion", no_fusion,
                   "read an ONNX file's written-out LayerNorms and GELUs as written (by default "
                   "each chain becomes one LayerNormalization or Gelu)");
  command.add_flag("--keep-constants", keep_constants,
                   "keep weights an ONNX file stores as Constant nodes constant (by default they "
                   "are trainable parameters, as initializers are)");
}

bool DimFlags::given() const {
  return (batch_option_ && batch_option_->count() > 0) ||
         (seq_option_ && seq_option_->count() > 0) || (dim_option_ && dim_option_->count() > 0);
}

StatusOr<ImportOptions> DimFlags::import_options() const {
  ImportOptions options;
  options.batch = batch;
  options.batch_is_default = batch && batch_option_ && batch_option_->count() == 0;
  options.fuse_patterns = !no_fusion;
  options.constant_weights_trainable = !keep_constants;
  options.upgrade_below = 13;  // every command may train the model
  for (const std::string& text : dims) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0) return error("--dim {}: expected NAME=N", text);
    const std::string name = text.substr(0, eq);
    const std::string number = text.substr(eq + 1);
    int64_t value = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc() || end != number.data() + number.size() || value <= 0) {
      return error("--dim {}: '{}' is not a positive integer", text, number);
    }
    if (!options.dims.emplace(name, value).second)
      return error("--dim {}: '{}' is bound twice", text, name);
  }
  if (seq) {
    if (*seq <= 0) return error("--seq {}: must be positive", *seq);
    if (!options.dims.emplace(std::string(kZooSeqDim), *seq).second)
      return error("--seq {}: the dim 'seq' is bound twice (by --dim)", *seq);
  }
  return options;
}

Status check_trainable_opset(const Graph& graph, const std::string& model, bool inference) {
  constexpr int64_t kTrainingOpset = 13;
  if (inference || graph.opset() >= kTrainingOpset) return Status::ok();
  return error(
      "{}: training needs ai.onnx opset {} or newer; the model imports {} and ONNX's version "
      "converter could not upgrade it",
      model, kTrainingOpset, graph.opset());
}

StatusOr<LoadedModel> load_model(const std::string& model, const DimFlags& dims) {
  ASSIGN_OR_RETURN(ImportOptions options, dims.import_options());
  LoadedModel loaded;
  if (names_zoo_model(model)) {
    ASSIGN_OR_RETURN(ZooOptions zoo, zoo_options(options, 1));
    zoo.with_weights = false;
    ASSIGN_OR_RETURN(loaded.graph, build_zoo_model(model, zoo));
    loaded.origin = "zoo model";
    loaded.import.layer_source = "zoo";
    return loaded;
  }
  if (dims.seq) return seq_on_file(model);
  ASSIGN_OR_RETURN(loaded.graph, read_onnx_file(model, options, &loaded.import));
  loaded.origin = "ONNX file";
  return loaded;
}

StatusOr<onnx::ModelProto> load_model_proto(const std::string& model, std::string& model_dir) {
  if (names_zoo_model(model)) {
    ZooOptions zoo;
    zoo.with_weights = true;
    ASSIGN_OR_RETURN(Graph graph, build_zoo_model(model, zoo));
    model_dir.clear();
    return export_onnx(graph);
  }
  const std::string dir = std::filesystem::path(model).parent_path().string();
  model_dir = dir.empty() ? "." : dir;
  return read_model_proto(model);
}

void TrainingFlags::add_to(CLI::App& command) {
  command.add_option("--loss", loss,
                     "cross_entropy or mse (default: cross_entropy for class scores, else mse)");
  command.add_option("--optimizer", optimizer, "sgd, adam or adamw (default adam)");
  command.add_option("--lr", lr, "learning rate (default 0.01 for sgd, 0.001 for adam and adamw)");
  command.add_option("--momentum", momentum, "sgd momentum (default 0.9)");
  command.add_option("--beta1", beta1, "adam beta1 (default 0.9)");
  command.add_option("--beta2", beta2, "adam beta2 (default 0.999)");
  command.add_option("--epsilon", epsilon, "adam epsilon (default 1e-8)");
  command.add_option("--weight-decay", weight_decay,
                     "L2 for sgd/adam, decoupled for adamw (default 0, adamw 0.01)");
}

StatusOr<LossSpec> TrainingFlags::loss_spec(const Graph& model) const {
  LossSpec spec;
  if (loss.empty()) {
    spec.kind = default_loss(model);
  } else {
    ASSIGN_OR_RETURN(spec.kind, parse_loss(loss));
  }
  return spec;
}

StatusOr<OptimizerSpec> TrainingFlags::optimizer_spec() const {
  OptimizerSpec spec;
  ASSIGN_OR_RETURN(spec.kind, parse_optimizer(optimizer));
  spec.lr = lr;
  if (momentum) spec.momentum = *momentum;
  if (beta1) spec.beta1 = *beta1;
  if (beta2) spec.beta2 = *beta2;
  if (epsilon) spec.epsilon = *epsilon;
  spec.weight_decay = weight_decay;
  RETURN_IF_ERROR(spec.validate());
  return spec;
}

StatusOr<Graph> load_trainable_model(const std::string& model, const DimFlags& dims) {
  ASSIGN_OR_RETURN(ImportOptions options, dims.import_options());
  if (names_zoo_model(model)) {
    ASSIGN_OR_RETURN(ZooOptions zoo, zoo_options(options, 4));
    zoo.with_weights = true;
    return build_zoo_model(model, zoo);
  }
  if (dims.seq) return seq_on_file(model);
  return read_onnx_file(model, options);
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string human_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, kUnits[unit]);
}

std::string human_flops(double flops) {
  static constexpr const char* kUnits[] = {"FLOP",  "KFLOP", "MFLOP", "GFLOP",
                                           "TFLOP", "PFLOP", "EFLOP"};
  int unit = 0;
  while (std::fabs(flops) >= 1000.0 && unit < 6) {
    flops /= 1000.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} FLOP", flops)
                   : fmt::format("{:.2f} {}", flops, kUnits[unit]);
}

}  // namespace autopar::cli
