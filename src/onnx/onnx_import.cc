// ONNX → IR: check, bind symbolic dims, infer, build, fold, classify initializers, find layers.
#include "autopar/onnx/onnx_import.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>
#include <nlohmann/json.hpp>

#include "autopar/ir/layers.h"
#include "autopar/ir/shape_inference.h"
#include "autopar/ir/verify.h"
#include "autopar/onnx/autopar_domain.h"
#include "autopar/onnx/onnx_check.h"
#include "autopar/onnx/onnx_tensor.h"
#include "autopar/onnx/opset_convert.h"
#include "autopar/ops/op_def.h"
#include "autopar/runtime/constant_folding.h"

namespace autopar {
namespace {

constexpr int64_t kMinOpset = 9;
constexpr int64_t kMaxOpset = 17;
// Older models are upgraded to this opset with ONNX's version converter.
constexpr int64_t kUpgradeOpset = 13;
// Protobuf cannot hold more; bigger models keep their weights as external data.
constexpr int64_t kMaxProtoBytes = (int64_t{1} << 31) - 1;

bool is_batch_name(std::string_view name) {
  return name == "batch" || name == "batch_size" || name == "N";
}

// Every initializer and tensor attribute of the top-level graph is well-formed. Runs before
// any ONNX routine other than the checker reads the model: they trust tensor sizes.
Status check_tensors(const onnx::GraphProto& g, std::string_view model_dir,
                     std::string_view source) {
  for (const auto& t : g.initializer()) {
    RETURN_IF_ERROR(load_tensor(t, model_dir, fmt::format("{}: initializer '{}'", source, t.name()),
                                DataMode::kCheck)
                        .status());
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& node = g.node(i);
    for (const auto& a : node.attribute()) {
      if (a.type() != onnx::AttributeProto::TENSOR) continue;
      const std::string what = fmt::format(
          "{}: node '{}' ({}): attribute '{}'", source,
          node.name().empty() ? fmt::format("#{}", i) : node.name(), node.op_type(), a.name());
      RETURN_IF_ERROR(load_tensor(a.t(), model_dir, what, DataMode::kCheck).status());
    }
  }
  return Status::ok();
}

// ---- types and dims --------------------------------------------------------------

struct DimBinder {
  const ImportOptions& options;
  std::set<std::string> seen_names;  // every dim_param of inputs, outputs and value_info

  // Binds one dim in place; returns the symbol it was bound from ("" when none).
  std::string bind(onnx::TensorShapeProto_Dimension& dim, bool leading_input_dim) {
    if (dim.has_dim_value()) return "";
    const std::string name = dim.has_dim_param() ? dim.dim_param() : "";
    if (!name.empty()) {
      if (auto it = options.dims.find(name); it != options.dims.end()) {
        dim.set_dim_value(it->second);
        return name;
      }
    }
    if (options.batch && (is_batch_name(name) || leading_input_dim)) {
      dim.set_dim_value(*options.batch);
      return name.empty() ? "batch" : name;
    }
    return "";
  }
};

void collect_dim_names(const onnx::ValueInfoProto& info, std::set<std::string>& names) {
  if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) return;
  for (const auto& dim : info.type().tensor_type().shape().dim()) {
    if (dim.has_dim_param() && !dim.dim_param().empty()) names.insert(dim.dim_param());
  }
}

// Binds the dims of one graph input or output; records the symbols of bound dims.
std::vector<std::string> bind_value_info(onnx::ValueInfoProto& info, DimBinder& binder,
                                         bool is_input) {
  std::vector<std::string> symbols;
  if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) return symbols;
  auto* shape = info.mutable_type()->mutable_tensor_type()->mutable_shape();
  bool any = false;
  for (int d = 0; d < shape->dim_size(); ++d) {
    symbols.push_back(binder.bind(*shape->mutable_dim(d), is_input && d == 0));
    any = any || !symbols.back().empty();
  }
  if (!any) symbols.clear();
  return symbols;
}

// Dtype and shape from a ValueInfoProto; an unknown dim is kUnknownDim, an unknown rank
// gives Shape::unknown().
std::pair<DType, Shape> type_of(const onnx::ValueInfoProto& info) {
  if (!info.type().has_tensor_type()) return {DType::kUndefined, Shape::unknown()};
  const auto& tensor = info.type().tensor_type();
  DType dtype = dtype_from_onnx(tensor.elem_type()).value_or(DType::kUndefined);
  if (!tensor.has_shape()) return {dtype, Shape::unknown()};
  std::vector<int64_t> dims;
  for (const auto& dim : tensor.shape().dim()) {
    dims.push_back(dim.has_dim_value() && dim.dim_value() >= 0 ? dim.dim_value() : kUnknownDim);
  }
  return {dtype, Shape(std::move(dims))};
}

// ---- attributes ------------------------------------------------------------------

StatusOr<std::optional<Attribute>> convert_attribute(const onnx::AttributeProto& a,
                                                     std::string_view model_dir,
                                                     std::string_view what) {
  using A = onnx::AttributeProto;
  switch (a.type()) {
    case A::INT:
      return std::optional<Attribute>(Attribute(static_cast<int64_t>(a.i())));
    case A::FLOAT:
      return std::optional<Attribute>(Attribute(a.f()));
    case A::STRING:
      return std::optional<Attribute>(Attribute(a.s()));
    case A::INTS:
      return std::optional<Attribute>(
          Attribute(std::vector<int64_t>(a.ints().begin(), a.ints().end())));
    case A::FLOATS:
      return std::optional<Attribute>(
          Attribute(std::vector<float>(a.floats().begin(), a.floats().end())));
    case A::STRINGS:
      return std::optional<Attribute>(
          Attribute(std::vector<std::string>(a.strings().begin(), a.strings().end())));
    case A::TENSOR: {
      ASSIGN_OR_RETURN(TensorPtr t, load_tensor(a.t(), model_dir, what));
      if (!t) return error("{}: holds no data", what);
      return std::optional<Attribute>(Attribute(std::move(t)));
    }
    default:
      // Subgraphs, sparse tensors and type protos: only ops autopar does not support carry
      // them, and those are reported by op type.
      return std::optional<Attribute>();
  }
}

// ---- metadata --------------------------------------------------------------------

struct Metadata {
  std::optional<std::unordered_set<std::string>> constants;
  std::optional<nlohmann::json> nodes;
  std::map<std::string, int64_t> built_dims;  // a training step's symbolic dims as built
};

StatusOr<Metadata> read_metadata(const onnx::ModelProto& model, std::string_view source) {
  Metadata meta;
  for (const auto& entry : model.metadata_props()) {
    if (entry.key() == kMetadataTraining) {
      const nlohmann::json json =
          nlohmann::json::parse(entry.value(), nullptr, /*allow_exceptions=*/false);
      const auto dims = json.is_object() ? json.find("dims") : json.end();
      if (dims == json.end()) continue;
      if (!dims->is_object()) {
        return error("{}: metadata '{}': \"dims\" is not a JSON object", source, entry.key());
      }
      for (const auto& [name, size] : dims->items()) {
        if (!size.is_number_integer() || size.get<int64_t>() <= 0) {
          return error("{}: metadata '{}': dim '{}' is not a positive integer", source, entry.key(),
                       name);
        }
        meta.built_dims[name] = size.get<int64_t>();
      }
      continue;
    }
    if (entry.key() != kMetadataConstants && entry.key() != kMetadataNodes) continue;
    nlohmann::json json = nlohmann::json::parse(entry.value(), nullptr, /*allow_exceptions=*/false);
    if (entry.key() == kMetadataConstants) {
      if (!json.is_array())
        return error("{}: metadata '{}' is not a JSON list", source, entry.key());
      meta.constants.emplace();
      for (const auto& name : json) {
        if (name.is_string()) meta.constants->insert(name.get<std::string>());
      }
    } else {
      if (!json.is_object()) {
        return error("{}: metadata '{}' is not a JSON object", source, entry.key());
      }
      meta.nodes = std::move(json);
    }
  }
  return meta;
}

// Floating initializers feeding some node at an input that is not configuration are
// trainable; scalars never are (exporters turn literals such as 0.5 or sqrt(d) into them).
void classify_initializers(Graph& graph, const Metadata& meta) {
  const OpRegistry& registry = op_registry();
  for (ValueId id = 0; id < graph.num_values(); ++id) {
    Value& v = graph.mutable_value(id);
    if (!v.is_initializer()) continue;
    bool trainable = false;
    if (meta.constants) {
      trainable = is_floating(v.dtype) && !meta.constants->count(v.name);
    } else if (is_floating(v.dtype) && v.shape.num_elements() > 1) {
      for (NodeId consumer : v.consumers) {
        const Node& node = graph.node(consumer);
        const OpDef* def = registry.find(node.domain, node.op_type);
        for (size_t i = 0; i < node.inputs.size(); ++i) {
          if (node.inputs[i] != id) continue;
          trainable = trainable || !def || !def->is_config_input(static_cast<int>(i));
        }
      }
    }
    v.kind = trainable ? ValueKind::kParameter : ValueKind::kConstant;
  }
}

// Whether input `i` of `node` reads a weight: a convolution's or a matrix product's weight or
// bias, a normalisation's scale or bias, a PRelu slope, an embedding table, or the bias added
// to a convolution's or a matrix product's output.
bool reads_as_weight(const Graph& graph, const Node& node, size_t i) {
  if (!node.domain.empty()) return false;
  const std::string& op = node.op_type;
  if (op == "Conv" || op == "ConvTranspose" || op == "Gemm") return i >= 1 || op == "Gemm";
  if (op == "MatMul") return true;
  if (op == "BatchNormalization" || op == "LayerNormalization" || op == "InstanceNormalization")
    return i == 1 || i == 2;
  if (op == "PRelu") return i == 1;
  if (op == "Gather") return i == 0 && node.inputs.size() == 2;
  if (op == "Add" && node.inputs.size() == 2) {
    const ValueId other = node.inputs[1 - i];
    if (other == kNoId || graph.value(other).producer == kNoId) return false;
    const Node& producer = graph.node(graph.value(other).producer);
    return producer.domain.empty() &&
           (producer.op_type == "Conv" || producer.op_type == "MatMul" ||
            producer.op_type == "Gemm" || producer.op_type == "ConvTranspose");
  }
  return false;
}

// Floating Constant-node outputs read as weights become parameters, as initializers do
// (paddle2onnx and some TensorFlow converters store every weight as a Constant node).
// Returns how many.
int constant_weights_to_parameters(Graph& graph, const std::set<std::string>& constant_outputs) {
  int converted = 0;
  for (const std::string& name : constant_outputs) {
    const auto id = graph.find_value(name);
    if (!id) continue;
    Value& v = graph.mutable_value(*id);
    if (v.kind != ValueKind::kConstant || !v.data || !is_floating(v.dtype) ||
        v.shape.num_elements() <= 1 || graph.is_output(*id))
      continue;
    bool weight = !v.consumers.empty();
    for (NodeId consumer : v.consumers) {
      const Node& node = graph.node(consumer);
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.inputs[i] == *id) weight = weight && reads_as_weight(graph, node, i);
      }
    }
    if (!weight) continue;
    v.kind = ValueKind::kParameter;
    ++converted;
  }
  return converted;
}

// PyTorch's exporter writes initializers with equal values once and the others as Identity
// of it (a fresh model's LayerNorm scales, its zero biases): each Identity output becomes a
// parameter of its own again, as the model had it, so training does not tie them. (Weights
// a model shares are one initializer read twice, with no Identity.) Returns how many.
int untie_deduplicated_parameters(Graph& graph) {
  int untied = 0;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    if (node.op_type != "Identity" || !node.domain.empty() || node.inputs.size() != 1 ||
        node.outputs.size() != 1 || node.outputs[0] == kNoId)
      continue;
    const Value& source = graph.value(node.inputs[0]);
    if (source.kind != ValueKind::kParameter || !source.data) continue;
    const ValueId out = node.outputs[0];
    graph.make_constant(out, *source.data);
    graph.mutable_value(out).kind = ValueKind::kParameter;
    ++untied;
  }
  if (untied > 0) graph.remove_dead_nodes();
  return untied;
}

Status apply_node_metadata(Graph& graph, const nlohmann::json& nodes, std::string_view source) {
  for (NodeId id = 0; id < graph.num_nodes(); ++id) graph.mutable_node(id).layer = -1;
  for (const auto& [name, info] : nodes.items()) {
    auto id = graph.find_node(name);
    if (!id) continue;  // folded away
    Node& node = graph.mutable_node(*id);
    if (!info.is_object())
      return error("{}: metadata for node '{}' is not an object", source, name);
    if (auto layer = info.find("layer"); layer != info.end() && layer->is_number_integer()) {
      node.layer = layer->get<int32_t>();
    }
    if (auto phase = info.find("phase"); phase != info.end() && phase->is_string()) {
      const std::string p = phase->get<std::string>();
      if (p == phase_name(Phase::kForward)) {
        node.phase = Phase::kForward;
      } else if (p == phase_name(Phase::kBackward)) {
        node.phase = Phase::kBackward;
      } else if (p == phase_name(Phase::kOptimizer)) {
        node.phase = Phase::kOptimizer;
      } else {
        return error("{}: metadata for node '{}' has unknown phase '{}'", source, name, p);
      }
    }
    if (auto attributes = info.find("attributes"); attributes != info.end()) {
      if (!attributes->is_object())
        return error("{}: metadata for node '{}': attributes is not an object", source, name);
      for (const auto& [key, value] : attributes->items()) {
        if (!is_shard_position_attribute(key) || !value.is_string())
          return error("{}: metadata for node '{}': attribute '{}' is not one autopar writes",
                       source, name, key);
        node.attrs[key] = value.get<std::string>();
      }
    }
  }
  return Status::ok();
}

// ---- building --------------------------------------------------------------------

// SSA wiring of the top-level graph: every name used is defined once, before its use. ONNX's
// checker lets some violations through that its own IR conversion then crashes on.
Status check_wiring(const onnx::GraphProto& g, std::string_view source) {
  std::unordered_set<std::string> defined;
  for (const auto& info : g.input()) defined.insert(info.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& node = g.node(i);
    const std::string name = node.name().empty() ? fmt::format("#{}", i) : node.name();
    for (const std::string& in : node.input()) {
      if (!in.empty() && !defined.count(in)) {
        return error("{}: node '{}' ({}): input '{}' is not defined before the node", source, name,
                     node.op_type(), in);
      }
    }
    for (const std::string& out : node.output()) {
      if (!out.empty() && !defined.insert(out).second) {
        return error("{}: node '{}' ({}): output '{}' is already defined", source, name,
                     node.op_type(), out);
      }
    }
  }
  for (const auto& info : g.output()) {
    if (!defined.count(info.name())) {
      return error("{}: output '{}' is not produced by the graph", source, info.name());
    }
  }
  return Status::ok();
}

// Window attributes are positive (the ONNX spec's rule for every op that has them). ONNX's
// own shape inference divides by strides and dilations unchecked, so a zero there must be
// refused before it runs (an integer division by zero ends the process). Subgraphs included.
Status check_window_attributes(const onnx::GraphProto& g, std::string_view source) {
  static const std::set<std::string> kPositive = {"strides", "dilations", "kernel_shape", "group"};
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& node = g.node(i);
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (kPositive.count(a.name())) {
        std::vector<int64_t> values(a.ints().begin(), a.ints().end());
        if (a.type() == onnx::AttributeProto::INT) values.push_back(a.i());
        for (int64_t v : values) {
          if (v >= 1) continue;
          const std::string name = node.name().empty() ? fmt::format("#{}", i) : node.name();
          return error("{}: node '{}' ({}): attribute {}: {} is not positive", source, name,
                       node.op_type(), a.name(), v);
        }
      }
      if (a.has_g()) RETURN_IF_ERROR(check_window_attributes(a.g(), source));
      for (const auto& sub : a.graphs()) RETURN_IF_ERROR(check_window_attributes(sub, source));
    }
  }
  return Status::ok();
}

int64_t default_opset(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") return opset.version();
  }
  return 0;
}

// Before opset 7 a PRelu slope of shape [C] was per channel (dim 1); from 7 it broadcasts
// numpy-style, so it must become [C, 1, ..., 1]. The version converter leaves it as it is.
void fix_channel_slopes(onnx::ModelProto& upgraded, const onnx::ModelProto& typed) {
  std::unordered_map<std::string, int> rank;
  for (const auto* infos : {&typed.graph().input(), &typed.graph().value_info()}) {
    for (const auto& info : *infos) {
      if (info.type().has_tensor_type() && info.type().tensor_type().has_shape()) {
        rank[info.name()] = info.type().tensor_type().shape().dim_size();
      }
    }
  }
  onnx::GraphProto& g = *upgraded.mutable_graph();
  for (const auto& node : g.node()) {
    if (node.op_type() != "PRelu" || node.input_size() != 2) continue;
    auto x_rank = rank.find(node.input(0));
    if (x_rank == rank.end() || x_rank->second < 3) continue;
    for (auto& t : *g.mutable_initializer()) {
      if (t.name() != node.input(1) || t.dims_size() != 1 || t.dims(0) == 1) continue;
      for (int d = 2; d < x_rank->second; ++d) t.add_dims(1);
    }
  }
}

// The model at opset 13 by ONNX's version converter; the converter's message on failure.
StatusOr<onnx::ModelProto> convert_to_13(const onnx::ModelProto& model, int64_t version) {
  try {
    // The converter's adapters need the shapes of the values they rewrite.
    onnx::ModelProto typed = model;
    try {
      onnx::shape_inference::InferShapes(typed);
    } catch (const std::exception&) {
      typed = model;
    }
    onnx::ModelProto upgraded =
        onnx::version_conversion::ConvertVersion(typed, static_cast<int>(kUpgradeOpset));
    if (version < 7) fix_channel_slopes(upgraded, typed);
    if (default_opset(upgraded) == kUpgradeOpset) return upgraded;
  } catch (const std::exception& e) {
    std::string message = e.what();
    return error("{}", message.substr(0, message.find('\n')));
  }
  return error("the converter left it at another opset");
}

// Opsets 9 to 17 import as they are, but those below `upgrade_below` are upgraded to 13
// where ONNX's version converter can (and kept where it cannot: training then refuses them,
// naming the opset). Older models are upgraded by the converter or refused.
StatusOr<onnx::ModelProto> upgrade_opset(const onnx::ModelProto& model, std::string_view source,
                                         int64_t upgrade_below) {
  const int64_t version = default_opset(model);
  if (version == 0) return error("{}: the model imports no ai.onnx opset", source);
  if (version > kMaxOpset) {
    return error("{}: ai.onnx opset {} is newer than the newest supported ({})", source, version,
                 kMaxOpset);
  }
  if (version >= kMinOpset) {
    if (version < std::min(upgrade_below, kUpgradeOpset)) {
      if (auto upgraded = convert_to_13(model, version); upgraded.is_ok()) return upgraded;
    }
    return model;
  }
  auto upgraded = convert_to_13(model, version);
  if (!upgraded.is_ok()) {
    return error("{}: ai.onnx opset {} cannot be upgraded to {}: {}", source, version,
                 kUpgradeOpset, upgraded.status().message());
  }
  return upgraded;
}

Status check_dim_options(const onnx::GraphProto& g, const ImportOptions& options,
                         std::string_view source) {
  std::set<std::string> names;
  for (const auto& info : g.input()) collect_dim_names(info, names);
  for (const auto& info : g.output()) collect_dim_names(info, names);
  for (const auto& [name, value] : options.dims) {
    if (value <= 0) return error("--dim {}={}: a dim must be positive", name, value);
    if (!names.count(name)) {
      return error("--dim {}: {} has no symbolic dim named '{}'{}", name, source, name,
                   names.empty() ? std::string(" (it has none)")
                                 : fmt::format(" (it has: {})", fmt::join(names, ", ")));
    }
  }
  if (options.batch && *options.batch <= 0) {
    return error("--batch {}: the batch must be positive", *options.batch);
  }
  return Status::ok();
}

// Every graph input dim must now be bound.
Status check_inputs_bound(const onnx::GraphProto& g, const std::set<std::string>& initializers,
                          std::string_view source) {
  for (const auto& info : g.input()) {
    if (initializers.count(info.name())) continue;
    if (!info.type().has_tensor_type()) {
      return error(
          "{}: input '{}' is not a tensor (sequence, map and optional inputs are not "
          "supported)",
          source, info.name());
    }
    const auto& tensor = info.type().tensor_type();
    if (!tensor.has_shape()) return error("{}: input '{}' has no shape", source, info.name());
    for (int d = 0; d < tensor.shape().dim_size(); ++d) {
      const auto& dim = tensor.shape().dim(d);
      if (dim.has_dim_value()) {
        if (dim.dim_value() < 0) {
          return error("{}: input '{}' dim {} is negative ({})", source, info.name(), d,
                       dim.dim_value());
        }
        continue;
      }
      if (dim.has_dim_param() && !dim.dim_param().empty()) {
        const std::string& name = dim.dim_param();
        return error("{}: input '{}' dim {} '{}' is unbound: pass {}", source, info.name(), d, name,
                     is_batch_name(name) ? "--batch N" : fmt::format("--dim {}=N", name));
      }
      return error("{}: input '{}' dim {} has no size: pass {}", source, info.name(), d,
                   d == 0 ? "--batch N" : "a model with a static or named dim");
    }
  }
  return Status::ok();
}

struct Builder {
  const onnx::GraphProto& g;
  std::string_view source;
  std::string_view model_dir;
  Graph graph;

  Status add_inputs_and_initializers(
      const std::set<std::string>& initializer_names,
      const std::unordered_map<std::string, std::vector<std::string>>& symbols) {
    for (const auto& info : g.input()) {
      if (initializer_names.count(info.name())) continue;
      if (graph.find_value(info.name())) {
        return error("{}: input '{}' is declared twice", source, info.name());
      }
      auto [dtype, shape] = type_of(info);
      ASSIGN_OR_RETURN(dtype, supported_dtype(info.type().tensor_type().elem_type(),
                                              fmt::format("{}: input '{}'", source, info.name())));
      if (auto it = symbols.find(info.name()); it != symbols.end()) shape.symbols = it->second;
      Value v;
      v.name = info.name();
      v.dtype = dtype;
      v.shape = std::move(shape);
      v.kind = ValueKind::kInput;
      graph.add_input(graph.add_value(std::move(v)));
    }
    for (const auto& t : g.initializer()) {
      const std::string what = fmt::format("{}: initializer '{}'", source, t.name());
      if (t.name().empty()) return error("{}: an initializer has no name", source);
      if (graph.find_value(t.name())) {
        return error("{}: initializer '{}' is declared twice", source, t.name());
      }
      ASSIGN_OR_RETURN(DType dtype, supported_dtype(t.data_type(), what));
      ASSIGN_OR_RETURN(TensorPtr data, load_tensor(t, model_dir, what));
      Value v;
      v.name = t.name();
      v.dtype = dtype;
      v.shape = Shape(std::vector<int64_t>(t.dims().begin(), t.dims().end()));
      v.kind = ValueKind::kConstant;
      v.data = std::move(data);
      graph.add_value(std::move(v));
    }
    return Status::ok();
  }

  Status add_nodes() {
    for (int i = 0; i < g.node_size(); ++i) {
      const onnx::NodeProto& proto = g.node(i);
      Node node;
      node.op_type = proto.op_type();
      node.domain = proto.domain() == "ai.onnx" ? "" : proto.domain();
      std::string name =
          proto.name().empty() ? fmt::format("{}_{}", proto.op_type(), i) : proto.name();
      node.name = graph.find_node(name) ? graph.unique_node_name(name) : name;
      const std::string where = fmt::format("{}: node '{}' ({})", source, node.name, node.op_type);
      for (const std::string& in : proto.input()) {
        if (in.empty()) {
          node.inputs.push_back(kNoId);
          continue;
        }
        auto id = graph.find_value(in);
        if (!id) return error("{}: input '{}' is not defined before the node", where, in);
        node.inputs.push_back(*id);
      }
      for (const std::string& out : proto.output()) {
        if (out.empty()) {
          node.outputs.push_back(kNoId);
          continue;
        }
        if (graph.find_value(out)) return error("{}: output '{}' is already defined", where, out);
        Value v;
        v.name = out;
        v.shape = Shape::unknown();
        node.outputs.push_back(graph.add_value(std::move(v)));
      }
      for (const auto& a : proto.attribute()) {
        ASSIGN_OR_RETURN(
            auto attr,
            convert_attribute(a, model_dir, fmt::format("{}: attribute '{}'", where, a.name())));
        if (attr) node.attrs[a.name()] = std::move(*attr);
      }
      graph.add_node(std::move(node));
    }
    return Status::ok();
  }

  Status add_outputs(const std::unordered_map<std::string, std::vector<std::string>>& symbols) {
    for (const auto& info : g.output()) {
      auto id = graph.find_value(info.name());
      if (!id) return error("{}: output '{}' is not produced by the graph", source, info.name());
      if (auto it = symbols.find(info.name()); it != symbols.end()) {
        Value& v = graph.mutable_value(*id);
        // The symbols are re-attached after inference, which replaces the shape.
        if (v.shape.known && v.shape.rank() == static_cast<int64_t>(it->second.size())) {
          v.shape.symbols = it->second;
        }
      }
      graph.add_output(*id);
    }
    return Status::ok();
  }
};

void set_onnx_type(onnx::ValueInfoProto& info, const Value& v) {
  info.set_name(v.name);
  auto* tensor = info.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(dtype_to_onnx(v.dtype));
  auto* shape = tensor->mutable_shape();
  for (int64_t d : v.shape.dims) shape->add_dim()->set_dim_value(d);
}

// Output types of one node without an OpDef, from its ONNX schema's inference run on a model
// holding just that node: its inputs typed as autopar resolved them, constants with their
// data. Outputs it cannot type stay unknown.
Status infer_with_onnx(Graph& graph, NodeId id, const onnx::ModelProto& model,
                       const onnx::NodeProto& proto, std::string_view source) {
  const Node& node = graph.node(id);
  onnx::ModelProto single;
  single.set_ir_version(model.ir_version());
  *single.mutable_opset_import() = model.opset_import();
  onnx::GraphProto& g = *single.mutable_graph();
  g.set_name("node");
  *g.add_node() = proto;
  for (ValueId in : node.inputs) {
    if (in == kNoId) continue;
    const Value& v = graph.value(in);
    if (v.kind == ValueKind::kConstant && v.data) {
      onnx::TensorProto& t = *g.add_initializer();
      t.set_name(v.name);
      t.set_data_type(dtype_to_onnx(v.dtype));
      for (int64_t d : v.shape.dims) t.add_dims(d);
      t.set_raw_data(v.data->bytes().data(), v.data->bytes().size());
    } else {
      set_onnx_type(*g.add_input(), v);
    }
  }
  for (ValueId out : node.outputs) {
    if (out != kNoId) g.add_output()->set_name(graph.value(out).name);
  }
  try {
    onnx::shape_inference::InferShapes(single, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(false, 0, true));
  } catch (const std::exception&) {
    return Status::ok();  // no types; the outputs stay unknown
  }
  for (const auto& info : single.graph().output()) {
    auto out = graph.find_value(info.name());
    if (!out) continue;
    const auto value_case = info.type().value_case();
    if (value_case != onnx::TypeProto::kTensorType &&
        value_case != onnx::TypeProto::VALUE_NOT_SET) {
      return error(
          "{}: node '{}' ({}): output '{}' is not a tensor (autopar plans tensor graphs "
          "only)",
          source, node.name, node.op_type, info.name());
    }
    auto [dtype, shape] = type_of(info);
    Value& v = graph.mutable_value(*out);
    v.dtype = dtype;
    v.shape = std::move(shape);
  }
  return Status::ok();
}

// Folds and infers every node in order (graph nodes are still one to one with the proto's).
// Nodes without an OpDef get ONNX's types; nodes reading values of unknown shape after them
// are skipped, and those values are counted in `unknown_values`.
StatusOr<int> resolve_shapes(Graph& graph, const onnx::ModelProto& model, std::string_view source,
                             int& unknown_values) {
  const OpRegistry& registry = op_registry();
  std::vector<bool> unknown(graph.num_values(), false);
  int folded_count = 0;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    bool folded = false;
    RETURN_IF_ERROR(fold_node(graph, id, folded).with_context(source));
    if (folded) {
      ++folded_count;
      continue;
    }
    const Node& node = graph.node(id);
    bool reads_unknown = false;
    for (ValueId in : node.inputs) reads_unknown = reads_unknown || (in != kNoId && unknown[in]);
    if (reads_unknown) {
      for (ValueId out : node.outputs) {
        if (out != kNoId) unknown[out] = true;
      }
      continue;
    }
    if (registry.find(node.domain, node.op_type)) {
      RETURN_IF_ERROR(infer_node(graph, id).with_context(source));
      continue;
    }
    RETURN_IF_ERROR(infer_with_onnx(graph, id, model, model.graph().node(id), source));
    for (ValueId out : graph.node(id).outputs) {
      if (out == kNoId) continue;
      const Value& v = graph.value(out);
      if (v.dtype == DType::kUndefined || !v.shape.is_static()) unknown[out] = true;
    }
  }
  unknown_values = static_cast<int>(std::count(unknown.begin(), unknown.end(), true));
  return folded_count;
}

}  // namespace

// A training step's gradients are shaped for the dims it was built at: those are the defaults,
// and other sizes are refused with the command that rebuilds it.
StatusOr<ImportOptions> with_built_dims(const ImportOptions& given, const Metadata& meta,
                                        const onnx::GraphProto& g, std::string_view source) {
  ImportOptions options = given;
  std::set<std::string> symbolic;  // a file bound to its inputs (run --inputs) has none left
  for (const auto& info : g.input()) collect_dim_names(info, symbolic);
  for (const auto& info : g.output()) collect_dim_names(info, symbolic);
  for (const auto& [name, size] : meta.built_dims) {
    if (!symbolic.count(name)) continue;
    std::optional<int64_t> asked;
    std::string flag;
    if (auto it = given.dims.find(name); it != given.dims.end()) {
      asked = it->second;
      flag = fmt::format("--dim {}={}", name, it->second);
    } else if (given.batch && !given.batch_is_default && is_batch_name(name)) {
      asked = given.batch;
      flag = fmt::format("--batch {}", *given.batch);
    }
    if (asked && *asked != size) {
      return error(
          "{}: {}: this training step was built with {} = {} (its gradients are shaped for "
          "it); rebuild it with train-graph {}",
          source, flag, name, size, flag);
    }
    if (!asked) options.dims[name] = size;
  }
  if (!meta.built_dims.empty() && options.batch_is_default) options.batch.reset();
  return options;
}

StatusOr<Graph> import_onnx(const onnx::ModelProto& given, const ImportOptions& given_options,
                            std::string_view source, std::string_view model_dir,
                            ImportReport* report) {
  register_autopar_onnx_schemas();
  if (!given.has_graph()) return error("{}: not an ONNX model (it has no graph)", source);
  // Opsets 18..21 are read as 17 before the checker, which knows only up to 17.
  OpsetConversion conversion;
  std::optional<onnx::ModelProto> converted;
  const int64_t given_opset = default_opset(given);
  if (given_opset > kMaxOpset && given_opset <= kNewestConvertibleOpset) {
    ASSIGN_OR_RETURN(converted, convert_to_opset17(given, source, &conversion));
  } else if (given_opset > kNewestConvertibleOpset) {
    return error("{}: ai.onnx opset {} is newer than the newest supported ({})", source,
                 given_opset, kNewestConvertibleOpset);
  }
  const onnx::ModelProto& readable = converted ? *converted : given;
  RETURN_IF_ERROR(check_onnx_model(readable, source));
  RETURN_IF_ERROR(check_wiring(readable.graph(), source));
  RETURN_IF_ERROR(check_window_attributes(readable.graph(), source));
  RETURN_IF_ERROR(check_tensors(readable.graph(), model_dir, source));
  ASSIGN_OR_RETURN(const onnx::ModelProto original,
                   upgrade_opset(readable, source, given_options.upgrade_below));
  ASSIGN_OR_RETURN(Metadata meta, read_metadata(original, source));
  ASSIGN_OR_RETURN(const ImportOptions options,
                   with_built_dims(given_options, meta, original.graph(), source));
  RETURN_IF_ERROR(check_dim_options(original.graph(), options, source));

  // Bind symbolic dims on a copy, so ONNX's inference sees concrete sizes.
  onnx::ModelProto model = original;
  onnx::GraphProto& g = *model.mutable_graph();
  std::set<std::string> initializer_names;
  for (const auto& t : g.initializer()) initializer_names.insert(t.name());
  DimBinder binder{options, {}};
  std::unordered_map<std::string, std::vector<std::string>> symbols;
  for (auto& info : *g.mutable_input()) {
    if (initializer_names.count(info.name())) continue;
    auto bound = bind_value_info(info, binder, /*is_input=*/true);
    if (!bound.empty()) symbols[info.name()] = std::move(bound);
  }
  for (auto& info : *g.mutable_output()) {
    auto bound = bind_value_info(info, binder, /*is_input=*/false);
    if (!bound.empty()) symbols[info.name()] = std::move(bound);
  }
  // Intermediate annotations with symbolic dims would contradict the bound sizes.
  g.clear_value_info();
  for (auto& info : *g.mutable_output()) {
    if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) continue;
    for (auto& dim : *info.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (dim.has_dim_param()) dim.clear_dim_param();
    }
  }
  RETURN_IF_ERROR(check_inputs_bound(g, initializer_names, source));

  Builder builder{g, source, model_dir, Graph()};
  builder.graph.name = g.name().empty() ? "main" : g.name();
  builder.graph.opsets.clear();
  for (const auto& opset : model.opset_import()) {
    builder.graph.opsets[opset.domain() == "ai.onnx" ? "" : opset.domain()] = opset.version();
  }
  RETURN_IF_ERROR(builder.add_inputs_and_initializers(initializer_names, symbols));
  RETURN_IF_ERROR(builder.add_nodes());
  RETURN_IF_ERROR(builder.add_outputs(symbols));
  Graph graph = std::move(builder.graph);
  classify_initializers(graph, meta);

  std::set<std::string> constant_outputs;  // of ai.onnx Constant nodes
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    if (node.op_type == "Constant" && node.domain.empty() && node.outputs.size() == 1)
      constant_outputs.insert(graph.value(node.outputs[0]).name);
  }
  int unknown_values = 0;
  ASSIGN_OR_RETURN(int folded, resolve_shapes(graph, model, source, unknown_values));
  graph.remove_dead_nodes();
  const int constant_weights = options.constant_weights_trainable && !meta.constants
                                   ? constant_weights_to_parameters(graph, constant_outputs)
                                   : 0;
  const int untied = meta.constants ? 0 : untie_deduplicated_parameters(graph);
  for (ValueId out : graph.outputs()) {
    auto it = symbols.find(graph.value(out).name);
    Value& v = graph.mutable_value(out);
    if (it != symbols.end() && v.shape.rank() == static_cast<int64_t>(it->second.size())) {
      v.shape.symbols = it->second;
    }
  }

  std::string layer_source = "metadata";
  if (meta.nodes) {
    RETURN_IF_ERROR(apply_node_metadata(graph, *meta.nodes, source));
  } else {
    LayerSource found = assign_layers(graph);
    layer_source = found == LayerSource::kNone ? "" : layer_source_name(found);
  }

  FusionReport fusion;
  if (options.fuse_patterns && !meta.nodes) graph = fuse_exported_patterns(graph, &fusion);

  VerifyOptions verify_options;
  verify_options.require_static_shapes = unknown_values == 0;
  verify_options.require_types = unknown_values == 0;
  verify_options.require_registered_ops = false;
  RETURN_IF_ERROR(verify(graph, verify_options).with_context(source));
  if (report) {
    *report = ImportReport{};
    report->folded_nodes = folded;
    report->layer_source = layer_source;
    report->unknown_shape_values = unknown_values;
    report->converted_from_opset = conversion.from;
    report->converted_nodes = conversion.rewritten_nodes;
    report->fusion = fusion;
    report->constant_weights = constant_weights;
    report->untied_parameters = untied;
    if (default_opset(original) != default_opset(readable))
      report->upgraded_from_opset = default_opset(readable);
  }
  return graph;
}

StatusOr<onnx::ModelProto> read_model_proto(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path fs_path(path);
  if (!std::filesystem::exists(fs_path, ec)) return error("{}: no such file", path);
  if (!std::filesystem::is_regular_file(fs_path, ec)) return error("{}: not a regular file", path);
  const auto size = static_cast<int64_t>(std::filesystem::file_size(fs_path, ec));
  if (ec) return error("{}: cannot read: {}", path, ec.message());
  if (size == 0) return error("{}: empty file, not an ONNX model", path);
  if (size > kMaxProtoBytes) {
    return error("{}: {} bytes is over protobuf's 2 GiB limit; save the weights as external data",
                 path, size);
  }
  std::ifstream in(fs_path, std::ios::binary);
  if (!in) return error("{}: cannot open for reading", path);
  std::string bytes(static_cast<size_t>(size), '\0');
  if (!in.read(bytes.data(), size)) return error("{}: cannot read", path);
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    return error(
        "{}: not an ONNX model (the protobuf does not parse; truncated or another "
        "format?)",
        path);
  }
  return model;
}

StatusOr<Graph> read_onnx_file(const std::string& path, const ImportOptions& options,
                               ImportReport* report) {
  ASSIGN_OR_RETURN(onnx::ModelProto model, read_model_proto(path));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return import_onnx(model, options, path, dir.empty() ? "." : dir, report);
}

}  // namespace autopar
