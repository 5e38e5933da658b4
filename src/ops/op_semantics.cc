// Parallel semantics shared by op families: broadcast loops and whole axes.
#include "families.h"

namespace autopar {
namespace {

std::string loop_name(size_t i) {
  static constexpr const char* kNames[] = {"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"};
  return i < std::size(kNames) ? kNames[i] : fmt::format("d{}", i);
}

// A right-aligned map of `dims` onto loops over `out`: size-1 dims broadcast against a larger
// output dim index no loop.
std::vector<int> aligned(const std::vector<int64_t>& dims, const std::vector<int64_t>& out) {
  std::vector<int> map(dims.size(), -1);
  const size_t shift = out.size() - dims.size();
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == out[d + shift]) map[d] = static_cast<int>(d + shift);
  }
  return map;
}

}  // namespace

std::optional<IterationSpace> broadcast_space(const Graph& g, const Node& n) {
  if (n.outputs.empty() || n.output(0) == kNoId) return std::nullopt;
  const std::vector<int64_t>& out = g.value(n.outputs[0]).shape.dims;
  IterationSpace space;
  for (size_t d = 0; d < out.size(); ++d)
    space.loops.push_back({loop_name(d), out[d], LoopKind::kParallel, true});
  for (ValueId in : n.inputs) {
    if (in == kNoId) {
      space.inputs.emplace_back();
      continue;
    }
    const std::vector<int64_t>& dims = g.value(in).shape.dims;
    if (dims.size() > out.size()) return std::nullopt;
    space.inputs.push_back(aligned(dims, out));
  }
  for (ValueId o : n.outputs) {
    space.outputs.push_back(o == kNoId ? std::vector<int>{} : aligned(g.value(o).shape.dims, out));
  }
  return space;
}

std::optional<IterationSpace> space_normalized_from_axis(const Graph& g, const Node& n,
                                                         size_t input) {
  if (n.input(input) == kNoId) return std::nullopt;
  const int64_t rank = g.value(n.inputs[input]).shape.rank();
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  std::vector<int64_t> whole;
  for (int64_t d = axis; d < rank; ++d) whole.push_back(d);
  return space_with_whole_axes(g, n, whole);
}

bool is_zero_fill(const Graph& g, ValueId v) {
  if (v == kNoId || g.value(v).producer == kNoId) return false;
  const Node& p = g.node(g.value(v).producer);
  if (p.op_type != "ConstantOfShape" || !p.domain.empty()) return false;
  const Attribute* value = p.attr("value");
  if (!value) return true;  // ONNX's default: a float32 zero
  if (value->kind() != Attribute::Kind::kTensor || !value->tensor() ||
      value->tensor()->num_elements() != 1)
    return false;
  return value->tensor()->float_at(0) == 0.0;
}

IterationSpace space_with_whole_axes(const Graph& g, const Node& n,
                                     const std::vector<int64_t>& axes) {
  IterationSpace space = *broadcast_space(g, n);
  for (int64_t axis : axes) space.loops.at(axis).splittable = false;
  return space;
}

}  // namespace autopar
