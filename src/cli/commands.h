// The subcommands of the autopar command line and the options they share.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "autopar/autodiff/autodiff.h"
#include "autopar/onnx/onnx_import.h"
#include "autopar/support/status.h"

namespace autopar::cli {

// What a subcommand runs once its flags are parsed; a failed Status is a user error.
using Command = std::function<Status()>;

// --batch, --seq and --dim NAME=N, shared by every command that reads a model.
struct DimFlags {
  std::optional<int64_t> batch;
  std::optional<int64_t> seq;  // a zoo model's sequence length (recorded as the dim "seq")
  std::vector<std::string> dims;
  bool no_fusion = false;       // --no-fusion: keep written-out LayerNorms and GELUs
  bool keep_constants = false;  // --keep-constants: Constant-node weights stay constant

  void add_to(CLI::App& command, std::optional<int64_t> default_batch = std::nullopt);
  StatusOr<ImportOptions> import_options() const;
  // Whether the user gave --batch, --seq or --dim (not just the default).
  bool given() const;

 private:
  CLI::Option* batch_option_ = nullptr;
  CLI::Option* seq_option_ = nullptr;
  CLI::Option* dim_option_ = nullptr;
};

// --loss, --optimizer and the hyper-parameters, shared by train-graph and run --train.
struct TrainingFlags {
  std::string loss;  // empty: the model's default
  std::string optimizer = "adam";
  std::optional<double> lr;
  std::optional<double> momentum;
  std::optional<double> beta1;
  std::optional<double> beta2;
  std::optional<double> epsilon;
  std::optional<double> weight_decay;

  void add_to(CLI::App& command);
  StatusOr<LossSpec> loss_spec(const Graph& model) const;
  StatusOr<OptimizerSpec> optimizer_spec() const;
};

// Training needs ai.onnx opset 13: a model below it (one ONNX's version converter could not
// upgrade) is refused naming `model`, unless `inference`.
Status check_trainable_opset(const Graph& graph, const std::string& model, bool inference);

// A model to train: an ONNX file imported at --batch/--dim, or a zoo model built with
// weights at --batch.
StatusOr<Graph> load_trainable_model(const std::string& model, const DimFlags& dims);

// A model loaded for a command: an ONNX file, or a zoo model built in memory (shape-only,
// at the --batch size) when no file has that name.
struct LoadedModel {
  Graph graph;
  std::string origin;   // "ONNX file" or "zoo model"
  ImportReport import;  // a zoo model's layer_source is "zoo"
};
StatusOr<LoadedModel> load_model(const std::string& model, const DimFlags& dims);
// The error --seq gives on an ONNX file (whose dims are bound by name with --dim).
Status seq_on_file(const std::string& model);

// The ModelProto of an ONNX file, or of a zoo model built with weights (at batch 1, the
// batch dim symbolic); `model_dir` receives the folder external data is read from.
StatusOr<onnx::ModelProto> load_model_proto(const std::string& model, std::string& model_dir);

void add_zoo_command(CLI::App& app, Command& command);
void add_inspect_command(CLI::App& app, Command& command);
void add_run_command(CLI::App& app, Command& command);
void add_train_graph_command(CLI::App& app, Command& command);
void add_calibrate_command(CLI::App& app, Command& command);
void add_profile_command(CLI::App& app, Command& command);

// Prints a command's --json answer: to stdout, or into the capture a library call
// (call_cli, the Python module) has open on this thread.
void emit_json(const nlohmann::json& j);

// "1,234,567".
std::string with_commas(int64_t n);
// "1.50 GiB", "12.0 KiB", "512 B".
std::string human_bytes(double bytes);
// "2.18 TFLOP", "35.2 MFLOP".
std::string human_flops(double flops);

}  // namespace autopar::cli
