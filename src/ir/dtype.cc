// Element type tables: sizes, names and ONNX codes.
#include "autopar/ir/dtype.h"

#include <array>

namespace autopar {
namespace {

struct DTypeInfo {
  DType dtype;
  int64_t size;
  std::string_view name;
  int32_t onnx_code;
};

// onnx::TensorProto_DataType: FLOAT=1 UINT8=2 INT8=3 UINT16=4 INT16=5 INT32=6 INT64=7
// STRING=8 BOOL=9 FLOAT16=10 DOUBLE=11 UINT32=12 UINT64=13 BFLOAT16=16.
constexpr std::array<DTypeInfo, 15> kInfos = {{
    {DType::kUndefined, 0, "undef", 0},
    {DType::kFloat32, 4, "f32", 1},
    {DType::kFloat16, 2, "f16", 10},
    {DType::kBFloat16, 2, "bf16", 16},
    {DType::kFloat64, 8, "f64", 11},
    {DType::kInt8, 1, "i8", 3},
    {DType::kInt16, 2, "i16", 5},
    {DType::kInt32, 4, "i32", 6},
    {DType::kInt64, 8, "i64", 7},
    {DType::kUInt8, 1, "u8", 2},
    {DType::kUInt16, 2, "u16", 4},
    {DType::kUInt32, 4, "u32", 12},
    {DType::kUInt64, 8, "u64", 13},
    {DType::kBool, 1, "bool", 9},
    {DType::kString, 0, "str", 8},
}};

const DTypeInfo& info(DType dtype) { return kInfos[static_cast<size_t>(dtype)]; }

}  // namespace

int64_t dtype_size(DType dtype) { return info(dtype).size; }

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16 ||
         dtype == DType::kFloat64;
}

bool is_half(DType dtype) { return dtype == DType::kFloat16 || dtype == DType::kBFloat16; }

bool is_integer(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kInfos) {
    if (entry.name == name && entry.dtype != DType::kUndefined) return entry.dtype;
  }
  return std::nullopt;
}

int32_t dtype_to_onnx(DType dtype) { return info(dtype).onnx_code; }

std::optional<DType> dtype_from_onnx(int32_t onnx_code) {
  for (const auto& entry : kInfos) {
    if (entry.onnx_code == onnx_code && entry.dtype != DType::kUndefined) return entry.dtype;
  }
  return std::nullopt;
}

}  // namespace autopar
