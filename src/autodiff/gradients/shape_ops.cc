// Gradient rules of data-movement ops: reshapes, Transpose, Concat, Split, Gather, Expand, Tile.
#include "rules.h"

namespace autopar {
namespace {

// Flatten, Reshape, Squeeze, Unsqueeze: the gradient takes the input's shape back.
Status reshape_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] { return b.reshape(b.GO(0), b.dims(b.I(0))); });
}

Status transpose_rule(GradientBuilder& b) {
  const int64_t rank = b.rank(b.I(0));
  std::vector<int64_t> perm = b.node().attr_ints("perm");
  if (perm.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  std::vector<int64_t> inverse(rank);
  for (int64_t d = 0; d < rank; ++d) inverse[perm[d]] = d;
  return maybe_grad(b, 0, [&] { return b.transpose(b.GO(0), inverse); });
}

// Concat's gradient splits GO back into the inputs' extents along the axis.
Status concat_rule(GradientBuilder& b) {
  const int64_t rank = b.rank(b.I(0));
  int64_t axis = b.node().attr_int("axis", 0);
  if (axis < 0) axis += rank;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < b.num_inputs(); ++i) sizes.push_back(b.dims(b.I(i))[axis]);
  const std::vector<ValueId> parts =
      b.op_n("Split", {b.GO(0), b.ints(sizes)}, {{"axis", axis}}, static_cast<int>(sizes.size()));
  for (size_t i = 0; i < b.num_inputs(); ++i) {
    RETURN_IF_ERROR(maybe_grad(b, i, [&] { return parts[i]; }));
  }
  return Status::ok();
}

// Split's gradient concatenates the outputs' gradients (zeros where an output has none).
Status split_rule(GradientBuilder& b) {
  const int64_t rank = b.rank(b.I(0));
  int64_t axis = b.node().attr_int("axis", 0);
  if (axis < 0) axis += rank;
  return maybe_grad(b, 0, [&] {
    std::vector<ValueId> parts;
    for (size_t i = 0; i < b.num_outputs(); ++i) {
      parts.push_back(b.has_output_grad(i) ? b.GO(i) : b.zeros_like(b.O(i)));
    }
    return parts.size() == 1 ? parts[0] : b.op("Concat", parts, {{"axis", axis}});
  });
}

Status expand_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] { return b.unbroadcast(b.GO(0), b.dims(b.I(0))); });
}

// Tile: GO [r0·d0, r1·d1, ...] viewed as [r0, d0, r1, d1, ...], summed over the r axes.
Status tile_rule(GradientBuilder& b) {
  const std::vector<int64_t>& in = b.dims(b.I(0));
  const std::vector<int64_t>& out = b.dims(b.O(0));
  return maybe_grad(b, 0, [&] {
    std::vector<int64_t> split, repeat_axes;
    for (size_t d = 0; d < in.size(); ++d) {
      split.push_back(in[d] == 0 ? 0 : out[d] / in[d]);
      split.push_back(in[d]);
      repeat_axes.push_back(static_cast<int64_t>(2 * d));
    }
    const ValueId summed = b.op("ReduceSum", {b.reshape(b.GO(0), split), b.ints(repeat_axes)},
                                {{"keepdims", int64_t{0}}});
    return b.reshape(summed, in);
  });
}

// Gather along `axis`: the gradient scatter-adds GO's slices into zeros of data's shape.
// ScatterND addresses leading dims, so the gathered axis is moved to the front and back.
Status gather_rule(GradientBuilder& b) {
  const ValueId data = b.I(0), indices = b.I(1);
  const std::vector<int64_t>& data_dims = b.dims(data);
  const int64_t rank = static_cast<int64_t>(data_dims.size());
  int64_t axis = b.node().attr_int("axis", 0);
  if (axis < 0) axis += rank;
  const int64_t index_rank = b.rank(indices);
  return maybe_grad(b, 0, [&] {
    // Negative indices count from the end.
    const DType index_type = b.dtype(indices);
    Tensor extent(index_type, {});
    extent.set_from_int(0, data_dims[axis]);
    Tensor zero(index_type, {});
    const ValueId zero_id = b.constant(std::move(zero));
    const ValueId wrapped =
        b.op("Where", {b.op("Less", {indices, zero_id}),
                       b.op("Add", {indices, b.constant(std::move(extent))}), indices});
    const ValueId index_nd = b.op("Unsqueeze", {wrapped, b.ints({-1})});
    // GO: data[:axis] + indices + data[axis+1:] → indices + data[:axis] + data[axis+1:].
    std::vector<int64_t> to_front;
    for (int64_t d = 0; d < index_rank; ++d) to_front.push_back(axis + d);
    for (int64_t d = 0; d < axis; ++d) to_front.push_back(d);
    for (int64_t d = axis + index_rank; d < b.rank(b.GO(0)); ++d) to_front.push_back(d);
    const ValueId updates = b.transpose(b.GO(0), to_front);
    // Zeros shaped data[axis] + data[:axis] + data[axis+1:].
    std::vector<int64_t> front_dims = {data_dims[axis]};
    for (int64_t d = 0; d < rank; ++d) {
      if (d != axis) front_dims.push_back(data_dims[d]);
    }
    Tensor zero_value(b.dtype(data), {1});
    const ValueId zeros =
        b.op("ConstantOfShape", {b.ints(front_dims)},
             {{"value", Attribute(std::make_shared<const Tensor>(std::move(zero_value)))}});
    const ValueId scattered = b.op("ScatterND", {zeros, index_nd, updates}, {{"reduction", "add"}});
    // Back: [axis, rest...] → data order.
    std::vector<int64_t> back(rank);
    for (int64_t d = 0, k = 1; d < rank; ++d) back[d] = d == axis ? 0 : k++;
    return b.transpose(scattered, back);
  });
}

}  // namespace

void register_shape_gradients(OpRegistry& registry) {
  for (const char* op : {"Flatten", "Reshape", "Squeeze", "Unsqueeze"})
    add_gradient(registry, op, reshape_rule);
  add_gradient(registry, "Transpose", transpose_rule);
  add_gradient(registry, "Concat", concat_rule);
  add_gradient(registry, "Split", split_rule);
  add_gradient(registry, "Expand", expand_rule);
  add_gradient(registry, "Tile", tile_rule);
  add_gradient(registry, "Gather", gather_rule);
  add_no_gradient(registry, {"Shape", "Constant", "ConstantOfShape"});
}

}  // namespace autopar
