// TensorProto ↔ Tensor: typed fields, raw data, external data; tensor files.
#include "autopar/onnx/onnx_tensor.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autopar/support/files.h"

namespace autopar {
namespace {

constexpr int64_t kMaxInitializerElements = int64_t{1} << 40;
// Tensor files above this are not test data.
constexpr int64_t kMaxTensorFileBytes = (int64_t{1} << 31) - 1;

std::string onnx_type_name(int32_t code) {
  if (onnx::TensorProto_DataType_IsValid(code)) {
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(code));
  }
  return fmt::format("#{}", code);
}

}  // namespace

StatusOr<DType> supported_dtype(int32_t code, std::string_view what) {
  auto dtype = dtype_from_onnx(code);
  if (!dtype || *dtype == DType::kUndefined || *dtype == DType::kString) {
    return error("{}: element type {} is not supported", what, onnx_type_name(code));
  }
  return *dtype;
}

// ---- tensor data ---------------------------------------------------------------

namespace {

// Reads `length` bytes at `offset` of an external data file; nullopt when the file is absent
// (or, when only checking, after the checks).
StatusOr<std::optional<std::vector<uint8_t>>> read_external(const onnx::TensorProto& t,
                                                            std::string_view model_dir,
                                                            int64_t expected_bytes,
                                                            std::string_view what, DataMode mode) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& entry : t.external_data()) {
    try {
      if (entry.key() == "location") location = entry.value();
      if (entry.key() == "offset") offset = std::stoll(entry.value());
      if (entry.key() == "length") length = std::stoll(entry.value());
    } catch (const std::exception&) {
      return error("{}: external data '{}' is not a number: '{}'", what, entry.key(),
                   entry.value());
    }
  }
  if (location.empty()) return error("{}: external data has no location", what);
  const std::filesystem::path relative(location);
  if (relative.is_absolute() || location.find("..") != std::string::npos) {
    return error(
        "{}: external data location '{}' must be a relative path inside the model's "
        "folder",
        what, location);
  }
  if (model_dir.empty()) return std::optional<std::vector<uint8_t>>();
  const std::filesystem::path path = std::filesystem::path(model_dir) / relative;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::optional<std::vector<uint8_t>>();
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (length < 0) length = expected_bytes;
  if (offset < 0 || length != expected_bytes || offset > file_size || file_size - offset < length) {
    return error(
        "{}: external data {} bytes at offset {} of '{}' ({} bytes) do not hold the {} "
        "bytes it needs",
        what, length, offset, location, file_size, expected_bytes);
  }
  if (mode == DataMode::kCheck) return std::optional<std::vector<uint8_t>>();
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes(static_cast<size_t>(length));
  in.seekg(offset);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), length)) {
    return error("{}: cannot read external data '{}'", what, location);
  }
  return std::optional<std::vector<uint8_t>>(std::move(bytes));
}

// The typed field an ONNX tensor of `dtype` keeps its values in, and how many it holds.
std::pair<const char*, int64_t> typed_field(const onnx::TensorProto& t, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return {"float_data", t.float_data_size()};
    case DType::kFloat64:
      return {"double_data", t.double_data_size()};
    case DType::kInt64:
      return {"int64_data", t.int64_data_size()};
    case DType::kUInt32:
    case DType::kUInt64:
      return {"uint64_data", t.uint64_data_size()};
    default:  // int8/16/32, uint8/16, bool, and float16/bfloat16 as bit patterns
      return {"int32_data", t.int32_data_size()};
  }
}

}  // namespace

StatusOr<TensorPtr> load_tensor(const onnx::TensorProto& t, std::string_view model_dir,
                                std::string_view what, DataMode mode) {
  ASSIGN_OR_RETURN(DType dtype, supported_dtype(t.data_type(), what));
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  for (int64_t d : dims) {
    if (d < 0) return error("{}: negative dim {}", what, d);
  }
  const int64_t count = element_count(dims);
  if (count > kMaxInitializerElements) {
    return error("{}: {} elements is more than any model holds", what, count);
  }
  const int64_t bytes = count * dtype_size(dtype);
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    ASSIGN_OR_RETURN(auto external, read_external(t, model_dir, bytes, what, mode));
    if (!external) return TensorPtr();
    return std::make_shared<const Tensor>(dtype, dims, std::move(*external));
  }
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != bytes) {
      return error("{}: raw_data holds {} bytes, {}[{}] needs {}", what, t.raw_data().size(),
                   dtype_name(dtype), fmt::join(dims, ","), bytes);
    }
    if (mode == DataMode::kCheck) return TensorPtr();
    std::vector<uint8_t> data(t.raw_data().begin(), t.raw_data().end());
    return std::make_shared<const Tensor>(dtype, dims, std::move(data));
  }
  const bool has_typed = t.float_data_size() || t.int32_data_size() || t.int64_data_size() ||
                         t.double_data_size() || t.uint64_data_size();
  if (!has_typed) {
    if (count == 0 && mode == DataMode::kRead) return std::make_shared<const Tensor>(dtype, dims);
    return TensorPtr();
  }
  const auto [field, size] = typed_field(t, dtype);
  if (size != count) {
    return error("{}: {} holds {} values, its shape needs {}", what, field, size, count);
  }
  if (mode == DataMode::kCheck) return TensorPtr();
  auto out = std::make_shared<Tensor>(dtype, dims);
  for (int64_t i = 0; i < count; ++i) {
    const int k = static_cast<int>(i);
    switch (dtype) {
      case DType::kFloat32:
        out->set_from_double(i, t.float_data(k));
        break;
      case DType::kFloat64:
        out->set_from_double(i, t.double_data(k));
        break;
      case DType::kInt64:
        out->set_from_int(i, t.int64_data(k));
        break;
      case DType::kUInt32:
      case DType::kUInt64:
        out->set_from_int(i, static_cast<int64_t>(t.uint64_data(k)));
        break;
      case DType::kFloat16:
      case DType::kBFloat16: {
        const auto bits = static_cast<uint16_t>(t.int32_data(k));
        std::memcpy(out->mutable_bytes().data() + i * 2, &bits, 2);
        break;
      }
      default:
        out->set_from_int(i, t.int32_data(k));
        break;
    }
  }
  return TensorPtr(std::move(out));
}

onnx::TensorProto tensor_to_proto(const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(dtype_to_onnx(tensor.dtype()));
  for (int64_t d : tensor.dims()) proto.add_dims(d);
  proto.set_raw_data(tensor.bytes().data(), tensor.bytes().size());
  return proto;
}

StatusOr<Tensor> read_tensor_file(const std::string& path, std::string* name) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return error("{}: no such file", path);
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (size > kMaxTensorFileBytes)
    return error("{}: {} bytes is too large for a tensor file", path, size);
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  onnx::TensorProto proto;
  if (!proto.ParseFromString(buffer.str())) {
    return error("{}: not an ONNX TensorProto (the protobuf does not parse)", path);
  }
  ASSIGN_OR_RETURN(TensorPtr tensor, load_tensor(proto, "", path));
  if (!tensor) return error("{}: the tensor holds no data", path);
  if (name) *name = proto.name();
  return *tensor;
}

Status write_tensor_file(const std::string& path, const Tensor& tensor, const std::string& name) {
  std::string bytes;
  if (!tensor_to_proto(tensor, name).SerializeToString(&bytes))
    return error("{}: cannot write: the tensor does not serialize (over 2 GiB?)", path);
  return write_file_atomic(path, bytes);
}

}  // namespace autopar
