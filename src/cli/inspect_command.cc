// `autopar inspect MODEL`: op histogram, parameters, FLOPs, bytes, layers, unsupported ops.
#include <nlohmann/json.hpp>

#include "autopar/ir/model_summary.h"
#include "autopar/ir/text.h"
#include "autopar/ir/verify.h"
#include "autopar/onnx/opset_convert.h"
#include "commands.h"

namespace autopar::cli {
namespace {

struct InspectFlags {
  std::string model;
  DimFlags dims;
  bool json = false;
  bool print_graph = false;
  bool strict = false;
};

std::string type_text(const Value& v) {
  if (v.dtype == DType::kUndefined || !v.shape.known) return "unknown type";
  std::vector<std::string> dims;
  for (size_t i = 0; i < v.shape.dims.size(); ++i) {
    std::string_view symbol = v.shape.symbol(i);
    dims.push_back(symbol.empty() ? std::to_string(v.shape.dims[i])
                                  : fmt::format("{}={}", symbol, v.shape.dims[i]));
  }
  return fmt::format("{}[{}]", dtype_name(v.dtype), fmt::join(dims, ","));
}

nlohmann::json values_json(const Graph& graph, const std::vector<ValueId>& ids) {
  nlohmann::json out = nlohmann::json::array();
  for (ValueId id : ids) {
    const Value& v = graph.value(id);
    out.push_back({{"name", v.name}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape.dims}});
  }
  return out;
}

nlohmann::json summary_json(const std::string& model, const Graph& graph, const ModelSummary& s,
                            const LoadedModel& loaded) {
  nlohmann::json kinds = nlohmann::json::array();
  for (const LayerKind& kind : s.layers.kinds) {
    kinds.push_back({{"layers", kind.layers}, {"nodes", kind.nodes}, {"params", kind.params}});
  }
  nlohmann::json opsets = nlohmann::json::object();
  for (const auto& [domain, version] : graph.opsets)
    opsets[domain.empty() ? "ai.onnx" : domain] = version;
  return {
      {"model", model},
      {"graph", graph.name},
      {"opsets", opsets},
      {"params", s.params},
      {"param_bytes", s.param_bytes},
      {"constant_bytes", s.constant_bytes},
      {"input_bytes", s.input_bytes},
      {"activation_bytes", s.activation_bytes},
      {"nodes", s.nodes},
      {"ops", s.ops},
      {"flops_forward", s.flops_forward},
      {"nodes_without_flops", s.nodes_without_flops},
      {"unsupported_ops", s.unsupported_ops},
      {"shape_only", s.shape_only},
      {"layers",
       {{"count", s.layers.count}, {"source", loaded.import.layer_source}, {"kinds", kinds}}},
      {"inputs", values_json(graph, graph.inputs())},
      {"outputs", values_json(graph, graph.outputs())},
      {"folded_nodes", loaded.import.folded_nodes},
      {"unknown_shape_values", loaded.import.unknown_shape_values},
      {"fused",
       {{"layer_norms", loaded.import.fusion.layer_norms},
        {"gelus", loaded.import.fusion.gelus},
        {"tanh_gelus", loaded.import.fusion.tanh_gelus},
        {"rms_norms", loaded.import.fusion.rms_norms},
        {"rotary_embeddings", loaded.import.fusion.rotaries},
        {"swiglus", loaded.import.fusion.swiglus},
        {"raised_opset_from", loaded.import.fusion.raised_from
                                  ? nlohmann::json(loaded.import.fusion.raised_from)
                                  : nlohmann::json(nullptr)}}},
      {"constant_weights_as_parameters", loaded.import.constant_weights},
      {"untied_parameters", loaded.import.untied_parameters},
      {"upgraded_from_opset", loaded.import.upgraded_from_opset
                                  ? nlohmann::json(loaded.import.upgraded_from_opset)
                                  : nlohmann::json(nullptr)},
      {"opset_conversion", loaded.import.converted_from_opset
                               ? nlohmann::json{{"from", loaded.import.converted_from_opset},
                                                {"to", kOpsetConvertedTo},
                                                {"rewritten_nodes", loaded.import.converted_nodes}}
                               : nlohmann::json(nullptr)},
  };
}

void print_summary(const std::string& model, const Graph& graph, const ModelSummary& s,
                   const LoadedModel& loaded) {
  fmt::print("model        {} (graph '{}', {})\n", model, graph.name, loaded.origin);
  for (ValueId id : graph.inputs())
    fmt::print("input        {}: {}\n", graph.value(id).name, type_text(graph.value(id)));
  for (ValueId id : graph.outputs())
    fmt::print("output       {}: {}\n", graph.value(id).name, type_text(graph.value(id)));
  if (loaded.import.upgraded_from_opset) {
    fmt::print("opset        {} upgraded to 13 by ONNX's version converter\n",
               loaded.import.upgraded_from_opset);
  }
  if (loaded.import.converted_from_opset) {
    fmt::print("opset        {} read as {} ({} node{} rewritten)\n",
               loaded.import.converted_from_opset, kOpsetConvertedTo, loaded.import.converted_nodes,
               loaded.import.converted_nodes == 1 ? "" : "s");
  }
  if (const FusionReport& f = loaded.import.fusion; f.fused() > 0) {
    std::vector<std::string> parts;
    if (f.layer_norms)
      parts.push_back(fmt::format("{} LayerNorm{}", f.layer_norms, f.layer_norms == 1 ? "" : "s"));
    if (f.gelus) parts.push_back(fmt::format("{} GELU{} (erf)", f.gelus, f.gelus == 1 ? "" : "s"));
    if (f.tanh_gelus) {
      parts.push_back(fmt::format("{} GELU{} (tanh)", f.tanh_gelus, f.tanh_gelus == 1 ? "" : "s"));
    }
    auto count = [&](int n, const char* what) {
      if (n) parts.push_back(fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"));
    };
    count(f.rms_norms, "RMSNorm");
    count(f.rotaries, "rotary embedding");
    count(f.swiglus, "SwiGLU");
    fmt::print("fused        {} written out{}\n", fmt::join(parts, ", "),
               f.raised_from ? fmt::format(" (opset {} raised to 17)", f.raised_from) : "");
  }
  fmt::print(
      "params       {} trainable ({}{}{})\n", with_commas(s.params), human_bytes(s.param_bytes),
      s.shape_only ? ", shape-only" : "",
      loaded.import.constant_weights
          ? fmt::format(", {} Constant-node weight{} among them", loaded.import.constant_weights,
                        loaded.import.constant_weights == 1 ? "" : "s")
          : "");
  if (loaded.import.untied_parameters) {
    fmt::print("             {} written as Identity of an equal parameter, trained as their own\n",
               loaded.import.untied_parameters);
  }
  fmt::print("constants    {}\n", human_bytes(s.constant_bytes));
  fmt::print("nodes        {}{}\n", with_commas(s.nodes),
             loaded.import.folded_nodes
                 ? fmt::format(" ({} shape nodes folded on import)", loaded.import.folded_nodes)
                 : "");
  fmt::print(
      "flops        {} forward{}\n", human_flops(s.flops_forward),
      s.nodes_without_flops ? fmt::format(" ({} nodes not counted)", s.nodes_without_flops) : "");
  fmt::print("activations  {} produced by the forward pass\n", human_bytes(s.activation_bytes));
  if (s.layers.count == 0) {
    fmt::print("layers       none found\n");
  } else {
    fmt::print("layers       {} ({}, {} kind{})\n", s.layers.count,
               loaded.import.layer_source.empty() ? "builder" : loaded.import.layer_source,
               s.layers.kinds.size(), s.layers.kinds.size() == 1 ? "" : "s");
    for (const LayerKind& kind : s.layers.kinds) {
      fmt::print("             {} × {} nodes, {} params: layers {}\n", kind.layers.size(),
                 kind.nodes, with_commas(kind.params), fmt::join(kind.layers, ","));
    }
  }
  fmt::print("ops         ");
  for (const auto& [op, count] : s.ops) fmt::print(" {} {}", op, count);
  fmt::print("\n");
  fmt::print("unsupported  {}\n", s.unsupported_ops.empty()
                                      ? "none"
                                      : fmt::format("{}", fmt::join(s.unsupported_ops, ", ")));
  if (loaded.import.unknown_shape_values) {
    fmt::print("             {} values after unsupported ops have no static shape\n",
               loaded.import.unknown_shape_values);
  }
}

Status run_inspect(const InspectFlags& flags) {
  ASSIGN_OR_RETURN(LoadedModel loaded, load_model(flags.model, flags.dims));
  if (flags.strict) {
    // What planning demands: every op known and every shape static.
    RETURN_IF_ERROR(verify(loaded.graph).with_context(flags.model));
  }
  const ModelSummary summary = summarize(loaded.graph);
  if (flags.print_graph) {
    fmt::print("{}", print(loaded.graph));
    return Status::ok();
  }
  if (flags.json) {
    emit_json(summary_json(flags.model, loaded.graph, summary, loaded));
  } else {
    print_summary(flags.model, loaded.graph, summary, loaded);
  }
  return Status::ok();
}

}  // namespace

void add_inspect_command(CLI::App& app, Command& command) {
  auto flags = std::make_shared<InspectFlags>();
  CLI::App* inspect = app.add_subcommand("inspect",
                                         "summarise a model: ops, parameters, FLOPs, "
                                         "bytes, layers, unsupported ops");
  inspect->footer(
      "Examples:\n"
      "  autopar inspect model.onnx\n"
      "  autopar inspect gpt2-small --json\n");
  inspect->add_option("model", flags->model, "ONNX file, or a zoo name (autopar zoo --list)")
      ->required();
  flags->dims.add_to(*inspect, 1);
  inspect->add_flag("--json", flags->json, "print one JSON object");
  inspect->add_flag("--print-graph", flags->print_graph, "print the imported graph in text form");
  inspect->add_flag("--strict", flags->strict,
                    "fail, as planning does, when an op is unsupported or a shape is not static");
  inspect->callback([flags, &command] { command = [flags] { return run_inspect(*flags); }; });
}

}  // namespace autopar::cli
