// IR → ONNX ModelProto: values, initializers (with data or as absent external data), nodes.
#include "autopar/onnx/onnx_export.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "autopar/onnx/onnx_import.h"
#include "autopar/support/files.h"

namespace autopar {

namespace {

void set_type(onnx::ValueInfoProto& info, const Value& v) {
  info.set_name(v.name);
  auto* tensor_type = info.mutable_type()->mutable_tensor_type();
  tensor_type->set_elem_type(dtype_to_onnx(v.dtype));
  if (!v.shape.known) return;
  auto* shape = tensor_type->mutable_shape();
  for (size_t i = 0; i < v.shape.dims.size(); ++i) {
    auto* dim = shape->add_dim();
    std::string_view symbol = v.shape.symbol(i);
    if (!symbol.empty()) {
      dim->set_dim_param(std::string(symbol));
    } else if (v.shape.dims[i] != kUnknownDim) {
      dim->set_dim_value(v.shape.dims[i]);
    }
  }
}

void fill_tensor(onnx::TensorProto& proto, const std::string& name, DType dtype,
                 const std::vector<int64_t>& dims, const Tensor* data,
                 const ExportOptions& options) {
  proto.set_name(name);
  proto.set_data_type(dtype_to_onnx(dtype));
  for (int64_t d : dims) proto.add_dims(d);
  if (data) {
    proto.set_raw_data(data->bytes().data(), data->bytes().size());
    return;
  }
  proto.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* location = proto.add_external_data();
  location->set_key("location");
  location->set_value(options.missing_data_location);
}

void set_attribute(onnx::AttributeProto& proto, const std::string& name, const Attribute& a,
                   const ExportOptions& options) {
  proto.set_name(name);
  switch (a.kind()) {
    case Attribute::Kind::kInt:
      proto.set_type(onnx::AttributeProto::INT);
      proto.set_i(a.i());
      break;
    case Attribute::Kind::kFloat:
      proto.set_type(onnx::AttributeProto::FLOAT);
      proto.set_f(a.f());
      break;
    case Attribute::Kind::kString:
      proto.set_type(onnx::AttributeProto::STRING);
      proto.set_s(a.s());
      break;
    case Attribute::Kind::kInts:
      proto.set_type(onnx::AttributeProto::INTS);
      for (int64_t v : a.ints()) proto.add_ints(v);
      break;
    case Attribute::Kind::kFloats:
      proto.set_type(onnx::AttributeProto::FLOATS);
      for (float v : a.floats()) proto.add_floats(v);
      break;
    case Attribute::Kind::kStrings:
      proto.set_type(onnx::AttributeProto::STRINGS);
      for (const std::string& v : a.strings()) proto.add_strings(v);
      break;
    case Attribute::Kind::kTensor: {
      proto.set_type(onnx::AttributeProto::TENSOR);
      const Tensor& t = *a.tensor();
      fill_tensor(*proto.mutable_t(), "", t.dtype(), t.dims(), &t, options);
      break;
    }
  }
}

}  // namespace

onnx::ModelProto export_onnx(const Graph& graph, const ExportOptions& options) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("autopar");
  model.set_producer_version("0.1.0");
  for (const auto& [domain, version] : graph.opsets) {
    auto* opset = model.add_opset_import();
    opset->set_domain(domain);
    opset->set_version(version);
  }
  onnx::GraphProto& g = *model.mutable_graph();
  g.set_name(graph.name);
  for (ValueId id : graph.inputs()) set_type(*g.add_input(), graph.value(id));
  for (const std::string& name : options.initializers_as_inputs) {
    auto id = graph.find_value(name);
    if (id && graph.value(*id).is_initializer()) set_type(*g.add_input(), graph.value(*id));
  }
  for (ValueId id : graph.outputs()) set_type(*g.add_output(), graph.value(id));
  for (const Value& v : graph.values()) {
    if (v.is_initializer()) {
      fill_tensor(*g.add_initializer(), v.name, v.dtype, v.shape.dims, v.data.get(), options);
    } else if (options.write_value_info && v.kind == ValueKind::kIntermediate &&
               v.dtype != DType::kUndefined) {
      set_type(*g.add_value_info(), v);
    }
  }
  for (const Node& n : graph.nodes()) {
    onnx::NodeProto& node = *g.add_node();
    node.set_name(n.name);
    node.set_op_type(n.op_type);
    if (!n.domain.empty()) node.set_domain(n.domain);
    for (ValueId in : n.inputs) node.add_input(in == kNoId ? "" : graph.value(in).name);
    for (ValueId out : n.outputs) node.add_output(out == kNoId ? "" : graph.value(out).name);
    for (const auto& [name, attr] : n.attrs) {
      if (n.domain.empty() && is_shard_position_attribute(name)) continue;
      set_attribute(*node.add_attribute(), name, attr, options);
    }
  }
  // ONNX has no place for which initializers are trainable, nor for a node's phase and
  // layer; model metadata carries them so that autopar's own models re-import exactly.
  nlohmann::json constants = nlohmann::json::array();
  for (const Value& v : graph.values()) {
    if (v.kind == ValueKind::kConstant) constants.push_back(v.name);
  }
  nlohmann::json nodes = nlohmann::json::object();
  for (const Node& n : graph.nodes()) {
    nlohmann::json attributes = nlohmann::json::object();
    if (n.domain.empty()) {
      for (const auto& [name, attr] : n.attrs) {
        if (is_shard_position_attribute(name)) attributes[name] = n.attr_string(name, "");
      }
    }
    if (n.name.empty() || (n.layer < 0 && n.phase == Phase::kForward && attributes.empty()))
      continue;
    nlohmann::json info = nlohmann::json::object();
    if (n.layer >= 0) info["layer"] = n.layer;
    if (n.phase != Phase::kForward) info["phase"] = phase_name(n.phase);
    if (!attributes.empty()) info["attributes"] = std::move(attributes);
    nodes[n.name] = std::move(info);
  }
  auto* entry = model.add_metadata_props();
  entry->set_key(std::string(kMetadataConstants));
  entry->set_value(constants.dump());
  entry = model.add_metadata_props();
  entry->set_key(std::string(kMetadataNodes));
  entry->set_value(nodes.dump());
  for (const auto& [key, value] : options.metadata) {
    auto* extra = model.add_metadata_props();
    extra->set_key(key);
    extra->set_value(value);
  }
  return model;
}

Status write_onnx_file(const Graph& graph, const std::string& path, const ExportOptions& options) {
  std::string bytes;
  if (!export_onnx(graph, options).SerializeToString(&bytes))
    return error("{}: cannot write: the model does not serialize (over 2 GiB?)", path);
  return write_file_atomic(path, bytes);
}

}  // namespace autopar
