// `autopar zoo NAME`: writes a built-in model as ONNX.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "autopar/ir/graph.h"
#include "autopar/onnx/onnx_export.h"
#include "autopar/zoo/zoo.h"
#include "commands.h"

namespace autopar::cli {
namespace {

struct ZooFlags {
  std::string name;
  std::string output;
  bool list = false;
  bool no_weights = false;
  bool with_weights = false;
  bool json = false;
  ZooOptions options;
};

Status list_models(bool json) {
  if (json) {
    nlohmann::json models = nlohmann::json::array();
    for (const ZooEntry& entry : zoo_entries()) {
      auto count = zoo_parameter_count(entry.name, ZooOptions{});
      models.push_back({{"name", entry.name},
                        {"family", entry.family},
                        {"parameters", count ? nlohmann::json(*count) : nlohmann::json()},
                        {"description", entry.description}});
    }
    emit_json({{"models", models}});
    return Status::ok();
  }
  fmt::print("{:<18} {:<7} {:>10}  {}\n", "name", "family", "params", "description");
  for (const ZooEntry& entry : zoo_entries()) {
    auto count = zoo_parameter_count(entry.name, ZooOptions{});
    fmt::print("{:<18} {:<7} {:>10}  {}\n", entry.name, entry.family,
               count ? with_commas(*count) : std::string("?"), entry.description);
  }
  return Status::ok();
}

Status run_zoo(ZooFlags& flags) {
  if (flags.list || flags.name.empty()) return list_models(flags.json);
  if (flags.no_weights && flags.with_weights) {
    return error("--no-weights and --with-weights contradict each other");
  }
  if (flags.no_weights) flags.options.with_weights = false;
  if (flags.with_weights) flags.options.with_weights = true;
  ASSIGN_OR_RETURN(Graph graph, build_zoo_model(flags.name, flags.options));
  const std::string path = flags.output.empty() ? flags.name + ".onnx" : flags.output;
  RETURN_IF_ERROR(write_onnx_file(graph, path));
  bool shape_only = false;
  for (ValueId id : graph.parameters()) shape_only = shape_only || !graph.value(id).data;
  if (flags.json) {
    emit_json({{"file", path},
               {"name", flags.name},
               {"parameters", graph.num_parameter_elements()},
               {"shape_only", shape_only},
               {"nodes", graph.num_nodes()}});
    return Status::ok();
  }
  fmt::print("wrote {}: {} ({} parameters{}, {} nodes)\n", path, flags.name,
             with_commas(graph.num_parameter_elements()), shape_only ? ", shape-only" : "",
             graph.num_nodes());
  return Status::ok();
}

}  // namespace

void add_zoo_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<ZooFlags>();
  CLI::App* zoo = app.add_subcommand("zoo",
                                     "write a built-in model (mlp, gpt, llama, bert, resnet, vit "
                                     "and their presets) as ONNX");
  zoo->footer(
      "Examples:\n"
      "  autopar zoo --list\n"
      "  autopar zoo gpt2-small -o gpt2.onnx\n"
      "  autopar zoo llama --layers 4 --hidden 256 --heads 8 --kv-heads 2 -o llama.onnx\n");
  zoo->add_option("name", flags->name, "preset or family name; without one, lists them");
  zoo->add_option("-o,--output", flags->output, "file to write (default NAME.onnx)");
  zoo->add_flag("--list", flags->list, "list the presets and families");
  zoo->add_flag("--no-weights", flags->no_weights,
                "write shape-only initializers (the default above 1e8 parameters)");
  zoo->add_flag("--with-weights", flags->with_weights, "write seeded random weights");
  zoo->add_option("--seed", flags->options.seed, "seed of the random weights (default 0)");
  zoo->add_option("--layers", flags->options.layers, "transformer layers (or mlp hidden layers)");
  zoo->add_option("--hidden", flags->options.hidden, "hidden size");
  zoo->add_option("--heads", flags->options.heads, "attention heads");
  zoo->add_option("--kv-heads", flags->options.kv_heads,
                  "key/value heads (llama; grouped-query attention)");
  zoo->add_option("--ffn", flags->options.ffn, "SwiGLU intermediate size (llama)");
  zoo->add_option("--seq", flags->options.seq, "sequence length");
  zoo->add_option("--vocab", flags->options.vocab, "vocabulary size");
  zoo->add_option("--image", flags->options.image, "image side in pixels (vit, resnet)");
  zoo->add_option("--patch", flags->options.patch, "patch side in pixels (vit)");
  zoo->add_option("--classes", flags->options.classes, "classifier outputs");
  zoo->add_option("--inputs", flags->options.inputs, "input features (mlp)");
  zoo->add_option("--dropout", flags->options.dropout,
                  "training-mode dropout probability after the embeddings, on the attention "
                  "probabilities and on the attention and MLP outputs (gpt, bert; default 0)");
  zoo->add_flag("--json", flags->json, "print one JSON object");
  zoo->callback([flags, &command] { command = [flags] { return run_zoo(*flags); }; });
}

}  // namespace autopar::cli
