// Element types of tensors, with their ONNX codes, sizes and text names.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace autopar {

enum class DType : uint8_t {
  kUndefined,
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kBool,
  kString,
};

// Bytes per element; 0 for kUndefined and kString.
int64_t dtype_size(DType dtype);
bool is_floating(DType dtype);
// float16 or bfloat16: the types the CPU runtime computes in float32 and rounds back to.
bool is_half(DType dtype);
bool is_integer(DType dtype);

// Short text name used by the graph text form: f32, f16, bf16, f64, i8 ... bool, str.
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);

// onnx::TensorProto_DataType codes.
int32_t dtype_to_onnx(DType dtype);
std::optional<DType> dtype_from_onnx(int32_t onnx_code);

}  // namespace autopar
