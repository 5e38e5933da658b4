// Attribute comparison and kind names.
#include "autopar/ir/attribute.h"

namespace autopar {

bool Attribute::operator==(const Attribute& other) const {
  if (kind() != other.kind()) return false;
  if (kind() == Kind::kTensor) {
    const TensorPtr& a = tensor();
    const TensorPtr& b = other.tensor();
    if (!a || !b) return a == b;
    return *a == *b;
  }
  return value_ == other.value_;
}

const char* attribute_kind_name(Attribute::Kind kind) {
  switch (kind) {
    case Attribute::Kind::kInt:
      return "int";
    case Attribute::Kind::kFloat:
      return "float";
    case Attribute::Kind::kString:
      return "string";
    case Attribute::Kind::kInts:
      return "ints";
    case Attribute::Kind::kFloats:
      return "floats";
    case Attribute::Kind::kStrings:
      return "strings";
    case Attribute::Kind::kTensor:
      return "tensor";
  }
  return "?";
}

}  // namespace autopar
