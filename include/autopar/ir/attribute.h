// Attribute: one named node attribute, as in ONNX (no subgraphs).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "autopar/ir/tensor.h"

namespace autopar {

class Attribute {
 public:
  enum class Kind : uint8_t { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor };

  Attribute() : value_(int64_t{0}) {}
  Attribute(int64_t v) : value_(v) {}                              // NOLINT
  Attribute(int v) : value_(int64_t{v}) {}                         // NOLINT
  Attribute(float v) : value_(v) {}                                // NOLINT
  Attribute(double v) : value_(static_cast<float>(v)) {}           // NOLINT
  Attribute(std::string v) : value_(std::move(v)) {}               // NOLINT
  Attribute(const char* v) : value_(std::string(v)) {}             // NOLINT
  Attribute(std::vector<int64_t> v) : value_(std::move(v)) {}      // NOLINT
  Attribute(std::vector<float> v) : value_(std::move(v)) {}        // NOLINT
  Attribute(std::vector<std::string> v) : value_(std::move(v)) {}  // NOLINT
  Attribute(TensorPtr v) : value_(std::move(v)) {}                 // NOLINT

  Kind kind() const { return static_cast<Kind>(value_.index()); }
  int64_t i() const { return std::get<int64_t>(value_); }
  float f() const { return std::get<float>(value_); }
  const std::string& s() const { return std::get<std::string>(value_); }
  const std::vector<int64_t>& ints() const { return std::get<std::vector<int64_t>>(value_); }
  const std::vector<float>& floats() const { return std::get<std::vector<float>>(value_); }
  const std::vector<std::string>& strings() const {
    return std::get<std::vector<std::string>>(value_);
  }
  const TensorPtr& tensor() const { return std::get<TensorPtr>(value_); }

  bool operator==(const Attribute& other) const;

 private:
  std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
               std::vector<std::string>, TensorPtr>
      value_;
};

const char* attribute_kind_name(Attribute::Kind kind);

// Sorted by name, so printing and comparison are deterministic.
using Attributes = std::map<std::string, Attribute>;

}  // namespace autopar
