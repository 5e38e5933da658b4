// Gradient rules of data-movement ops: reshapes, Transpose, Concat, Split, Gather, Expand,
// Tile, Slice, Pad, Resize and the scatters and gathers.
#include <algorithm>

#include "rules.h"

namespace autopar {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

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

ValueId zeros_of(GradientBuilder& b, const std::vector<int64_t>& dims, DType dtype) {
  Tensor zero(dtype, {1});
  return b.op("ConstantOfShape", {b.ints(dims)},
              {{"value", Attribute(std::make_shared<const Tensor>(std::move(zero)))}});
}

// 0, 1, ..., n − 1 as i64 in `dims`: pushed through a data-movement op, it tells which input
// element each output element came from.
ValueId element_indices(GradientBuilder& b, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  const ValueId flat =
      b.op("Range", {b.constant(Tensor::scalar_int64(0)), b.constant(Tensor::scalar_int64(n)),
                     b.constant(Tensor::scalar_int64(1))});
  return b.reshape(flat, dims);
}

// Scatter-adds GO into zeros of X's shape at the flat input indices `map` (GO's shape).
ValueId scatter_back(GradientBuilder& b, ValueId map, ValueId go, ValueId x) {
  const int64_t n = b.value(x).shape.num_elements();
  const int64_t m = b.value(go).shape.num_elements();
  const ValueId scattered = b.op(
      "ScatterElements", {zeros_of(b, {n}, b.dtype(x)), b.reshape(map, {m}), b.reshape(go, {m})},
      {{"axis", int64_t{0}}, {"reduction", "add"}});
  return b.reshape(scattered, b.dims(x));
}

std::vector<int64_t> const_ints(const GradientBuilder& b, size_t input) {
  if (!b.has_input(input)) return {};
  const Tensor* data = b.data(b.I(input));
  return data ? data->to_int64_vector() : std::vector<int64_t>{};
}

// Slice with unit steps is undone by a zero Pad; other steps scatter through the index map.
Status slice_rule(GradientBuilder& b) {
  const ValueId x = b.I(0);
  const std::vector<int64_t>& dims = b.dims(x);
  const int64_t rank = static_cast<int64_t>(dims.size());
  const std::vector<int64_t> starts = const_ints(b, 1), ends = const_ints(b, 2);
  std::vector<int64_t> axes = const_ints(b, 3), steps = const_ints(b, 4);
  if (axes.empty()) axes = iota(static_cast<int64_t>(starts.size()));
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> begin(rank, 0), end(rank, 0);
  bool unit = true;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
    const int64_t extent = dims[axis];
    unit = unit && steps[i] == 1;
    int64_t first = starts[i] < 0 ? starts[i] + extent : starts[i];
    first = std::clamp<int64_t>(first, 0, extent);
    begin[axis] = first;
    end[axis] = extent - first - b.dims(b.O(0))[axis];
  }
  return maybe_grad(b, 0, [&] {
    if (!unit)
      return scatter_back(
          b, b.op("Slice", {element_indices(b, dims), b.I(1), b.I(2), b.I(3), b.I(4)}), b.GO(0), x);
    std::vector<int64_t> pads = begin;
    pads.insert(pads.end(), end.begin(), end.end());
    return b.op("Pad", {b.GO(0), b.ints(pads)});
  });
}

// Constant-mode Pad is undone by a Slice (and a Pad where pads were negative, cropping);
// reflect and edge scatter through the index map.
Status pad_rule(GradientBuilder& b) {
  const ValueId x = b.I(0);
  const std::vector<int64_t>& dims = b.dims(x);
  const size_t rank = dims.size();
  const std::vector<int64_t> pads = b.opset() >= 11 ? const_ints(b, 1) : b.node().attr_ints("pads");
  const std::string mode = b.node().attr_string("mode", "constant");
  return maybe_grad(b, 0, [&] {
    if (mode != "constant") {
      Attributes attrs = {{"mode", mode}};
      return scatter_back(b, b.op("Pad", {element_indices(b, dims), b.ints(pads)}, attrs), b.GO(0),
                          x);
    }
    const std::vector<int64_t>& out = b.dims(b.GO(0));
    std::vector<int64_t> starts(rank), ends(rank), regrow(2 * rank, 0);
    bool crop = false;
    for (size_t d = 0; d < rank; ++d) {
      starts[d] = std::max<int64_t>(pads[d], 0);
      ends[d] = out[d] - std::max<int64_t>(pads[d + rank], 0);
      regrow[d] = std::max<int64_t>(-pads[d], 0);
      regrow[d + rank] = std::max<int64_t>(-pads[d + rank], 0);
      crop = crop || pads[d] < 0 || pads[d + rank] < 0;
    }
    const ValueId kept = b.op("Slice", {b.GO(0), b.ints(starts), b.ints(ends)});
    return crop ? b.op("Pad", {kept, b.ints(regrow)}) : kept;
  });
}

// Resize is linear in X and separable: along each resized axis it multiplies by a matrix
// A [out, in], obtained by resizing the identity along that axis. dX applies Aᵀ per axis.
Status resize_rule(GradientBuilder& b) {
  const ValueId x = b.I(0);
  const std::vector<int64_t>& in = b.dims(x);
  const std::vector<int64_t>& out = b.dims(b.O(0));
  const int64_t rank = static_cast<int64_t>(in.size());
  const Tensor* scales = b.num_inputs() > 2 && b.has_input(2) ? b.data(b.I(2)) : nullptr;
  if (scales && scales->num_elements() == 0) scales = nullptr;
  const Tensor* roi = b.num_inputs() > 1 && b.has_input(1) ? b.data(b.I(1)) : nullptr;
  if (roi && roi->num_elements() == 0) roi = nullptr;
  return maybe_grad(b, 0, [&] {
    ValueId grad = b.GO(0);
    const DType t = b.dtype(x);
    for (int64_t axis = 0; axis < rank; ++axis) {
      if (in[axis] == out[axis] && (!scales || scales->float_at(axis) == 1.0) && !roi) continue;
      // The identity [in, in] resized along its last axis is Aᵀ [in, out].
      const ValueId ids = b.op(
          "Range", {b.constant(Tensor::scalar_int64(0)), b.constant(Tensor::scalar_int64(in[axis])),
                    b.constant(Tensor::scalar_int64(1))});
      const ValueId identity =
          b.op("Cast", {b.op("Equal", {b.op("Unsqueeze", {ids, b.ints({1})}), ids})},
               {{"to", int64_t{dtype_to_onnx(t)}}});
      std::vector<ValueId> inputs = {identity};
      if (roi) {
        Tensor axis_roi(roi->dtype(), {4});
        axis_roi.set_from_double(0, 0.0);
        axis_roi.set_from_double(1, roi->float_at(axis));
        axis_roi.set_from_double(2, 1.0);
        axis_roi.set_from_double(3, roi->float_at(axis + rank));
        inputs.push_back(b.constant(std::move(axis_roi)));
      } else {
        inputs.push_back(kNoId);
      }
      if (scales) {
        Tensor axis_scales(scales->dtype(), {2});
        axis_scales.set_from_double(0, 1.0);
        axis_scales.set_from_double(1, scales->float_at(axis));
        inputs.push_back(b.constant(std::move(axis_scales)));
      } else {
        inputs.push_back(kNoId);
        inputs.push_back(b.ints({in[axis], out[axis]}));
      }
      Attributes attrs = b.node().attrs;
      attrs["extrapolation_value"] = 0.0f;
      const ValueId a_transposed = b.op("Resize", inputs, attrs);
      // Move `axis` last, multiply by A = (Aᵀ)ᵀ, move it back.
      std::vector<int64_t> perm;
      for (int64_t d = 0; d < rank; ++d) {
        if (d != axis) perm.push_back(d);
      }
      perm.push_back(axis);
      std::vector<int64_t> inverse(rank);
      for (int64_t d = 0; d < rank; ++d) inverse[perm[d]] = d;
      const ValueId moved = b.transpose(grad, perm);
      grad = b.transpose(b.op("MatMul", {moved, b.transpose(a_transposed, {1, 0})}), inverse);
    }
    return grad;
  });
}

Status gather_elements_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] {
    const ValueId data = b.I(0);
    return b.op("ScatterElements", {zeros_of(b, b.dims(data), b.dtype(data)), b.I(1), b.GO(0)},
                {{"axis", b.node().attr_int("axis", 0)}, {"reduction", "add"}});
  });
}

Status gather_nd_rule(GradientBuilder& b) {
  if (b.node().attr_int("batch_dims", 0) != 0)
    return b.fail("batch_dims other than 0 are not differentiated");
  return maybe_grad(b, 0, [&] {
    const ValueId data = b.I(0);
    return b.op("ScatterND", {zeros_of(b, b.dims(data), b.dtype(data)), b.I(1), b.GO(0)},
                {{"reduction", "add"}});
  });
}

// Scatter with no reduction overwrites: the data keeps GO where nothing was written, and the
// updates read GO where they went. With add both pass it on.
Status scatter_rule(GradientBuilder& b) {
  const bool elements = b.node().op_type == "ScatterElements";
  const std::string reduction = b.node().attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add") {
    return b.fail("reduction '{}' is not differentiated (none and add are)", reduction);
  }
  Attributes axis;
  if (elements) axis["axis"] = b.node().attr_int("axis", 0);
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    if (reduction == "add") return b.GO(0);
    const ValueId updates = b.I(2);
    return b.op(b.node().op_type, {b.GO(0), b.I(1), zeros_of(b, b.dims(updates), b.dtype(updates))},
                axis);
  }));
  return maybe_grad(b, 2, [&] {
    return b.op(elements ? "GatherElements" : "GatherND", {b.GO(0), b.I(1)}, axis);
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
  add_gradient(registry, "Slice", slice_rule);
  add_gradient(registry, "Pad", pad_rule);
  add_gradient(registry, "Resize", resize_rule);
  add_gradient(registry, "GatherElements", gather_elements_rule);
  add_gradient(registry, "GatherND", gather_nd_rule);
  add_gradient(registry, "ScatterElements", scatter_rule);
  add_gradient(registry, "ScatterND", scatter_rule);
  add_no_gradient(registry, {"Shape", "Size", "Constant", "ConstantOfShape", "Range"});
}

}  // namespace autopar
