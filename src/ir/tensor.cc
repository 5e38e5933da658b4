// Tensor construction, element access and 16-bit float conversions.
#include "autopar/ir/tensor.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace autopar {

int64_t element_count(std::span<const int64_t> dims) {
  // Saturates instead of overflowing: a user's absurd shape must not wrap to a small count.
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    if (__builtin_mul_overflow(count, d, &count)) return std::numeric_limits<int64_t>::max();
  }
  return count;
}

std::optional<std::vector<int64_t>> broadcast_shapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

Tensor float_converted(const Tensor& t, DType to) {
  Tensor out(to, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) out.set_from_double(i, t.float_at(i));
  return out;
}

Tensor::Tensor(DType dtype, std::vector<int64_t> dims)
    : dtype_(dtype),
      dims_(std::move(dims)),
      bytes_(static_cast<size_t>(element_count(dims_) * dtype_size(dtype)), 0) {}

Tensor::Tensor(DType dtype, std::vector<int64_t> dims, std::vector<uint8_t> bytes)
    : dtype_(dtype), dims_(std::move(dims)), bytes_(std::move(bytes)) {
  assert(static_cast<int64_t>(bytes_.size()) == element_count(dims_) * dtype_size(dtype_));
}

Tensor Tensor::from_int64(std::vector<int64_t> dims, std::span<const int64_t> values) {
  Tensor t(DType::kInt64, std::move(dims));
  assert(static_cast<int64_t>(values.size()) == t.num_elements());
  if (!values.empty()) std::memcpy(t.bytes_.data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

Tensor Tensor::from_float(std::vector<int64_t> dims, std::span<const float> values) {
  Tensor t(DType::kFloat32, std::move(dims));
  assert(static_cast<int64_t>(values.size()) == t.num_elements());
  if (!values.empty()) std::memcpy(t.bytes_.data(), values.data(), values.size() * sizeof(float));
  return t;
}

namespace {
template <typename T>
T load(const std::vector<uint8_t>& bytes, int64_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}
}  // namespace

int64_t Tensor::int_at(int64_t i) const {
  assert(i >= 0 && i < num_elements());
  switch (dtype_) {
    case DType::kInt8:
      return load<int8_t>(bytes_, i);
    case DType::kInt16:
      return load<int16_t>(bytes_, i);
    case DType::kInt32:
      return load<int32_t>(bytes_, i);
    case DType::kInt64:
      return load<int64_t>(bytes_, i);
    case DType::kUInt8:
      return load<uint8_t>(bytes_, i);
    case DType::kUInt16:
      return load<uint16_t>(bytes_, i);
    case DType::kUInt32:
      return load<uint32_t>(bytes_, i);
    case DType::kUInt64:
      return static_cast<int64_t>(load<uint64_t>(bytes_, i));
    case DType::kBool:
      return load<uint8_t>(bytes_, i) != 0;
    default: {
      double v = float_at(i);
      if (!(v > -9.2e18 && v < 9.2e18)) return 0;
      return static_cast<int64_t>(v);
    }
  }
}

double Tensor::float_at(int64_t i) const {
  assert(i >= 0 && i < num_elements());
  switch (dtype_) {
    case DType::kFloat32:
      return load<float>(bytes_, i);
    case DType::kFloat64:
      return load<double>(bytes_, i);
    case DType::kFloat16:
      return half_to_float(load<uint16_t>(bytes_, i));
    case DType::kBFloat16:
      return bfloat16_to_float(load<uint16_t>(bytes_, i));
    case DType::kString:
    case DType::kUndefined:
      return 0.0;
    default:
      return static_cast<double>(int_at(i));
  }
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> out(static_cast<size_t>(num_elements()));
  for (int64_t i = 0; i < num_elements(); ++i) out[i] = int_at(i);
  return out;
}

namespace {
template <typename T>
void store(std::vector<uint8_t>& bytes, int64_t i, T v) {
  std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
}

// Float to integer without undefined behaviour: NaN gives 0, out-of-range saturates.
template <typename T>
T saturate(double v) {
  if (!(v == v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}
}  // namespace

void Tensor::set_from_double(int64_t i, double v) {
  assert(i >= 0 && i < num_elements());
  switch (dtype_) {
    case DType::kFloat32:
      return store<float>(bytes_, i, static_cast<float>(v));
    case DType::kFloat64:
      return store<double>(bytes_, i, v);
    case DType::kFloat16:
      return store<uint16_t>(bytes_, i, float_to_half(static_cast<float>(v)));
    case DType::kBFloat16:
      return store<uint16_t>(bytes_, i, float_to_bfloat16(static_cast<float>(v)));
    case DType::kInt8:
      return store<int8_t>(bytes_, i, saturate<int8_t>(v));
    case DType::kInt16:
      return store<int16_t>(bytes_, i, saturate<int16_t>(v));
    case DType::kInt32:
      return store<int32_t>(bytes_, i, saturate<int32_t>(v));
    case DType::kInt64:
      return store<int64_t>(bytes_, i, saturate<int64_t>(v));
    case DType::kUInt8:
      return store<uint8_t>(bytes_, i, saturate<uint8_t>(v));
    case DType::kUInt16:
      return store<uint16_t>(bytes_, i, saturate<uint16_t>(v));
    case DType::kUInt32:
      return store<uint32_t>(bytes_, i, saturate<uint32_t>(v));
    case DType::kUInt64:
      return store<uint64_t>(bytes_, i, saturate<uint64_t>(v));
    case DType::kBool:
      return store<uint8_t>(bytes_, i, v != 0.0 ? 1 : 0);
    case DType::kString:
    case DType::kUndefined:
      assert(false && "no element storage for this dtype");
  }
}

void Tensor::set_from_int(int64_t i, int64_t v) {
  assert(i >= 0 && i < num_elements());
  switch (dtype_) {
    case DType::kInt8:
      return store<int8_t>(bytes_, i, static_cast<int8_t>(v));
    case DType::kInt16:
      return store<int16_t>(bytes_, i, static_cast<int16_t>(v));
    case DType::kInt32:
      return store<int32_t>(bytes_, i, static_cast<int32_t>(v));
    case DType::kInt64:
      return store<int64_t>(bytes_, i, v);
    case DType::kUInt8:
      return store<uint8_t>(bytes_, i, static_cast<uint8_t>(v));
    case DType::kUInt16:
      return store<uint16_t>(bytes_, i, static_cast<uint16_t>(v));
    case DType::kUInt32:
      return store<uint32_t>(bytes_, i, static_cast<uint32_t>(v));
    case DType::kUInt64:
      return store<uint64_t>(bytes_, i, static_cast<uint64_t>(v));
    case DType::kBool:
      return store<uint8_t>(bytes_, i, v != 0 ? 1 : 0);
    default:
      return set_from_double(i, static_cast<double>(v));
  }
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | static_cast<uint32_t>(127 - 15 - shift + 1) << 23 | mantissa << 13;
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_half(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (abs < 0x38800000u) {  // subnormal or zero in half precision
    float magnitude = std::bit_cast<float>(abs);
    uint32_t value = static_cast<uint32_t>(magnitude * 16777216.0f + 0.5f);  // 2^24
    return static_cast<uint16_t>(sign | value);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float bfloat16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_bfloat16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace autopar
