// Tensor: a dense constant (initializer data, attribute values, folded shapes).
#pragma once

#include <cassert>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "autopar/ir/dtype.h"

namespace autopar {

// Product of dims; -1 when a dim is unknown (negative), INT64_MAX when the product overflows.
int64_t element_count(std::span<const int64_t> dims);

// Numpy multidirectional broadcast of two shapes; nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcast_shapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b);

// Row-major, little-endian, densely packed; strings are not supported as data.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> dims);  // zero-filled
  Tensor(DType dtype, std::vector<int64_t> dims, std::vector<uint8_t> bytes);

  static Tensor from_int64(std::vector<int64_t> dims, std::span<const int64_t> values);
  static Tensor from_float(std::vector<int64_t> dims, std::span<const float> values);
  static Tensor scalar_int64(int64_t value) { return from_int64({}, std::span(&value, 1)); }
  static Tensor vector_int64(const std::vector<int64_t>& values) {
    return from_int64({static_cast<int64_t>(values.size())}, values);
  }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t num_elements() const { return element_count(dims_); }
  int64_t num_bytes() const { return static_cast<int64_t>(bytes_.size()); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t>& mutable_bytes() { return bytes_; }

  template <typename T>
  std::span<const T> data() const {
    assert(sizeof(T) == static_cast<size_t>(dtype_size(dtype_)));
    return {reinterpret_cast<const T*>(bytes_.data()), bytes_.size() / sizeof(T)};
  }
  template <typename T>
  std::span<T> mutable_data() {
    assert(sizeof(T) == static_cast<size_t>(dtype_size(dtype_)));
    return {reinterpret_cast<T*>(bytes_.data()), bytes_.size() / sizeof(T)};
  }

  // Element i converted to int64 / double, for any integer, bool or floating dtype.
  int64_t int_at(int64_t i) const;
  double float_at(int64_t i) const;
  std::vector<int64_t> to_int64_vector() const;
  // Stores v into element i, converted to the tensor's dtype (rounded for 16-bit floats,
  // truncated toward zero for integers, != 0 for bool).
  void set_from_double(int64_t i, double v);
  void set_from_int(int64_t i, int64_t v);

  bool operator==(const Tensor& other) const {
    return dtype_ == other.dtype_ && dims_ == other.dims_ && bytes_ == other.bytes_;
  }

 private:
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> dims_;
  std::vector<uint8_t> bytes_;
};

using TensorPtr = std::shared_ptr<const Tensor>;

// `t` (a float tensor) in float type `to`, element by element (round to nearest even when
// narrowing).
Tensor float_converted(const Tensor& t, DType to);

// float16 / bfloat16 conversions used by constant folding and data generation.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace autopar
