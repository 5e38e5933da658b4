// The ONNX checker, applied so that shape-only models pass.
#include "autopar/onnx/onnx_check.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <unordered_set>

#include <onnx/checker.h>

namespace autopar {

bool is_shape_only_initializer(const onnx::TensorProto& t, std::string_view model_dir) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    for (const auto& entry : t.external_data()) {
      if (entry.key() != "location") continue;
      std::filesystem::path path = std::filesystem::path(model_dir) / entry.value();
      std::error_code ec;
      return model_dir.empty() || !std::filesystem::exists(path, ec);
    }
    return true;
  }
  bool has_data = t.has_raw_data() || t.float_data_size() || t.int32_data_size() ||
                  t.int64_data_size() || t.double_data_size() || t.uint64_data_size() ||
                  t.string_data_size();
  // An empty tensor (a zero dim) needs no data; the product of the dims may not fit an int64.
  const bool empty =
      std::any_of(t.dims().begin(), t.dims().end(), [](int64_t d) { return d == 0; });
  return !has_data && !empty;
}

void detach_initializers_without_inline_data(onnx::ModelProto& model) {
  onnx::GraphProto* g = model.mutable_graph();
  std::unordered_set<std::string> inputs;
  for (const auto& in : g->input()) inputs.insert(in.name());
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (onnx::TensorProto& t : *g->mutable_initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL && !is_shape_only_initializer(t, "")) {
      kept.Add(std::move(t));
      continue;
    }
    if (!inputs.insert(t.name()).second) continue;
    onnx::ValueInfoProto* in = g->add_input();
    in->set_name(t.name());
    auto* type = in->mutable_type()->mutable_tensor_type();
    type->set_elem_type(t.data_type());
    auto* shape = type->mutable_shape();
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
  }
  g->mutable_initializer()->Swap(&kept);
}

Status check_onnx_model(const onnx::ModelProto& model, std::string_view source) {
  onnx::ModelProto copy = model;
  detach_initializers_without_inline_data(copy);
  try {
    onnx::checker::check_model(copy);
  } catch (const std::exception& e) {
    std::string message = e.what();
    message = message.substr(0, message.find('\n'));
    return error("{}: ONNX checker: {}", source, message);
  }
  return Status::ok();
}

}  // namespace autopar
