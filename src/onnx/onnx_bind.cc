// Binding a model to concrete inputs before import.
#include "autopar/onnx/onnx_bind.h"

#include <map>
#include <set>
#include <unordered_map>

#include "autopar/onnx/onnx_tensor.h"
#include "autopar/ops/op_def.h"

namespace autopar {
namespace {

std::string dims_text(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

// Names of graph inputs that some node reads as a shape.
std::set<std::string> shape_input_names(const onnx::GraphProto& g) {
  std::set<std::string> names;
  const OpRegistry& registry = op_registry();
  for (const auto& node : g.node()) {
    const std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    const OpDef* def = registry.find(domain, node.op_type());
    if (!def) continue;
    for (int i = 0; i < node.input_size(); ++i) {
      if (def->is_shape_input(i) && !node.input(i).empty()) names.insert(node.input(i));
    }
  }
  return names;
}

}  // namespace

StatusOr<BoundModel> import_for_inputs(const onnx::ModelProto& model, std::vector<Tensor> inputs,
                                       std::string_view source, std::string_view model_dir,
                                       ImportReport* report, const ImportOptions& options) {
  onnx::ModelProto bound = model;
  onnx::GraphProto& g = *bound.mutable_graph();
  std::set<std::string> initializers;
  for (const auto& t : g.initializer()) initializers.insert(t.name());
  std::vector<int> runtime_inputs;  // indices into g.input()
  std::vector<std::string> names;
  for (int i = 0; i < g.input_size(); ++i) {
    if (initializers.count(g.input(i).name())) continue;
    runtime_inputs.push_back(i);
    names.push_back(g.input(i).name());
  }
  if (inputs.size() != runtime_inputs.size()) {
    return error("{}: the model has {} input{} ({}), {} given", source, runtime_inputs.size(),
                 runtime_inputs.size() == 1 ? "" : "s", fmt::join(names, ", "), inputs.size());
  }

  std::map<std::string, std::pair<int64_t, std::string>> symbol_sizes;  // name → (size, input)
  for (size_t k = 0; k < inputs.size(); ++k) {
    onnx::ValueInfoProto& info = *g.mutable_input(runtime_inputs[k]);
    const Tensor& tensor = inputs[k];
    if (!info.type().has_tensor_type()) {
      return error("{}: input '{}' is not a tensor", source, info.name());
    }
    auto* type = info.mutable_type()->mutable_tensor_type();
    ASSIGN_OR_RETURN(
        DType declared,
        supported_dtype(type->elem_type(), fmt::format("{}: input '{}'", source, info.name())));
    if (declared != tensor.dtype()) {
      return error("{}: input '{}': expected {}, got {}", source, info.name(), dtype_name(declared),
                   dtype_name(tensor.dtype()));
    }
    auto* shape = type->mutable_shape();
    if (type->has_shape() && shape->dim_size() != tensor.rank()) {
      return error("{}: input '{}': expected rank {}, got {} {}", source, info.name(),
                   shape->dim_size(), tensor.rank(), dims_text(tensor.dims()));
    }
    if (!type->has_shape()) {
      for (int64_t d = 0; d < tensor.rank(); ++d) shape->add_dim();
    }
    for (int d = 0; d < shape->dim_size(); ++d) {
      auto* dim = shape->mutable_dim(d);
      const int64_t size = tensor.dims()[d];
      if (dim->has_dim_value()) {
        if (dim->dim_value() != size) {
          return error("{}: input '{}' dim {}: expected {}, got {}", source, info.name(), d,
                       dim->dim_value(), size);
        }
        continue;
      }
      if (dim->has_dim_param() && !dim->dim_param().empty()) {
        auto [it, added] =
            symbol_sizes.emplace(dim->dim_param(), std::make_pair(size, info.name()));
        if (!added && it->second.first != size) {
          return error("{}: input '{}' dim {} '{}' is {}, but input '{}' has it {}", source,
                       info.name(), d, dim->dim_param(), size, it->second.second, it->second.first);
        }
      }
      dim->set_dim_value(size);
    }
  }

  // Inputs read as shapes become constants; the rest stay graph inputs.
  const std::set<std::string> shape_inputs = shape_input_names(g);
  std::vector<std::pair<std::string, TensorPtr>> fed;
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  size_t k = 0;
  for (int i = 0; i < g.input_size(); ++i) {
    onnx::ValueInfoProto& info = *g.mutable_input(i);
    if (initializers.count(info.name())) {
      kept.Add(std::move(info));
      continue;
    }
    Tensor& tensor = inputs[k++];
    if (shape_inputs.count(info.name())) {
      *g.add_initializer() = tensor_to_proto(tensor, info.name());
      continue;
    }
    fed.emplace_back(info.name(), std::make_shared<const Tensor>(std::move(tensor)));
    kept.Add(std::move(info));
  }
  g.mutable_input()->Swap(&kept);
  // Outputs' symbolic dims are computed by inference now that the inputs are concrete.
  for (auto& info : *g.mutable_output()) {
    if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) continue;
    for (auto& dim : *info.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (dim.has_dim_param()) dim.clear_dim_param();
    }
  }

  BoundModel result;
  ASSIGN_OR_RETURN(result.graph, import_onnx(bound, options, source, model_dir, report));
  for (auto& [name, tensor] : fed) {
    auto id = result.graph.find_value(name);
    assert(id && "graph inputs survive import");
    result.feeds.emplace_back(*id, std::move(tensor));
  }
  return result;
}

}  // namespace autopar
