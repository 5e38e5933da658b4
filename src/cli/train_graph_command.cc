// `autopar train-graph MODEL`: writes the training step (forward, loss, backward, optimizer)
// as an ONNX model.
#include <nlohmann/json.hpp>

#include "autopar/ir/model_summary.h"
#include "autopar/onnx/onnx_check.h"
#include "autopar/onnx/onnx_export.h"
#include "autopar/onnx/onnx_import.h"
#include "commands.h"

namespace autopar::cli {
namespace {

struct TrainGraphFlags {
  std::string model;
  std::string output = "train.onnx";
  DimFlags dims;
  TrainingFlags training;
  std::string bn_running_var = "biased";
};

Status run_train_graph(const TrainGraphFlags& flags) {
  ASSIGN_OR_RETURN(Graph model, load_trainable_model(flags.model, flags.dims));
  RETURN_IF_ERROR(check_trainable_opset(model, flags.model, false));
  ASSIGN_OR_RETURN(LossSpec loss, flags.training.loss_spec(model));
  ASSIGN_OR_RETURN(OptimizerSpec optimizer, flags.training.optimizer_spec());
  TrainingOptions training_options;
  training_options.unbiased_running_var = flags.bn_running_var == "unbiased";
  ASSIGN_OR_RETURN(TrainingGraph training,
                   build_training_graph(model, loss, optimizer, training_options));
  const Graph& g = training.graph;
  ExportOptions options;
  nlohmann::json updates = nlohmann::json::array();
  for (const auto& [state, next] : training.updates) {
    options.initializers_as_inputs.push_back(g.value(state).name);
    updates.push_back({g.value(state).name, g.value(next).name});
  }
  // The symbolic dims stay symbolic in the file; the sizes the gradients were built at are
  // recorded, so the file imports at them by default.
  nlohmann::json dims = nlohmann::json::object();
  for (ValueId in : g.inputs()) {
    const Shape& shape = g.value(in).shape;
    for (size_t d = 0; d < shape.symbols.size() && d < shape.dims.size(); ++d) {
      if (!shape.symbols[d].empty()) dims[shape.symbols[d]] = shape.dims[d];
    }
  }
  options.metadata[std::string(kMetadataTraining)] =
      nlohmann::json{{"loss", g.value(training.loss).name},
                     {"labels", g.value(training.labels).name},
                     {"loss_kind", loss_name(loss.kind)},
                     {"optimizer", optimizer_name(optimizer.kind)},
                     {"lr", optimizer.learning_rate()},
                     {"updates", updates},
                     {"dims", dims}}
          .dump();
  RETURN_IF_ERROR(check_onnx_model(export_onnx(g, options), flags.output));
  RETURN_IF_ERROR(write_onnx_file(g, flags.output, options));
  int64_t counts[3] = {0, 0, 0};
  for (const Node& n : g.nodes()) ++counts[static_cast<int>(n.phase)];
  fmt::print(
      "wrote {}: {} nodes ({} forward, {} backward, {} optimizer), {} parameters, {} state "
      "tensors, loss {}, optimizer {}\n",
      flags.output, g.num_nodes(), counts[0], counts[1], counts[2],
      with_commas(g.num_parameter_elements()), training.updates.size(), loss_name(loss.kind),
      optimizer_name(optimizer.kind));
  return Status::ok();
}

}  // namespace

void add_train_graph_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<TrainGraphFlags>();
  CLI::App* cmd = app.add_subcommand("train-graph",
                                     "write one training step (forward, loss, "
                                     "backward, optimizer) as an ONNX model");
  cmd->add_option("model", flags->model, "ONNX file, or a zoo name")->required();
  cmd->add_option("-o,--output", flags->output, "file to write (default train.onnx)");
  flags->dims.add_to(*cmd, 4);
  flags->training.add_to(*cmd);
  cmd->add_option("--bn-running-var", flags->bn_running_var,
                  "BatchNorm's running variance: biased (ONNX's definition, the default) or "
                  "unbiased (PyTorch's)")
      ->check(CLI::IsMember({"biased", "unbiased"}));
  cmd->callback([flags, &command] { command = [flags] { return run_train_graph(*flags); }; });
}

}  // namespace autopar::cli
