// Gradient rules of convolution and pooling, all as standard ops: the input gradient of a
// convolution is a transposed convolution and vice versa; weight gradients are convolutions
// of the input with the output gradient (batch and channel axes exchanged, strides and
// dilations swapped); pooling gradients scatter or spread the output gradient back.
#include <algorithm>

#include "rules.h"

namespace autopar {
namespace {

// The window of a convolution or pool with its effective pads (auto_pad resolved).
struct Window {
  std::vector<int64_t> kernel, strides, dilations, begin, end;
  int64_t group = 1;

  size_t spatial() const { return kernel.size(); }
  int64_t extent(size_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }
  std::vector<int64_t> pads() const {
    std::vector<int64_t> p = begin;
    p.insert(p.end(), end.begin(), end.end());
    return p;
  }
};

// Conv and pools: pads from the attributes, or SAME/VALID resolved against the input extent
// `in` and output extent `out` of each spatial dim.
Window sliding_window(const GradientBuilder& b, std::vector<int64_t> kernel,
                      const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  const Node& n = b.node();
  const size_t spatial = kernel.size();
  Window w;
  w.kernel = std::move(kernel);
  w.strides = n.attr_ints("strides", std::vector<int64_t>(spatial, 1));
  w.dilations = n.attr_ints("dilations", std::vector<int64_t>(spatial, 1));
  w.group = n.attr_int("group", 1);
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  w.begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(spatial));
  w.end.assign(pads.begin() + static_cast<int64_t>(spatial), pads.end());
  for (size_t i = 0; i < spatial; ++i) {
    if (auto_pad == "VALID") {
      w.begin[i] = w.end[i] = 0;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (out[i] - 1) * w.strides[i] + w.extent(i) - in[i]);
      const int64_t small = total / 2;
      w.begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.end[i] = total - w.begin[i];
    }
  }
  return w;
}

// Dims after N and C; empty for a value whose shape an earlier failure left unknown (the
// builder reports that failure).
std::vector<int64_t> spatial_dims(const std::vector<int64_t>& dims) {
  if (dims.size() < 2) return {};
  return std::vector<int64_t>(dims.begin() + 2, dims.end());
}

std::vector<int64_t> iota_from(int64_t first, int64_t count) {
  std::vector<int64_t> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = first + i;
  return v;
}

// [N, G·A, S...] → [A, G·N, S...]: channel blocks of each group become the batch.
ValueId channels_to_batch(GradientBuilder& b, ValueId x, int64_t group) {
  const std::vector<int64_t>& d = b.dims(x);
  const int64_t n = d[0], per_group = d[1] / group;
  std::vector<int64_t> split = {n, group, per_group};
  std::vector<int64_t> merged = {per_group, group * n};
  std::vector<int64_t> perm = {2, 1, 0};
  for (size_t i = 2; i < d.size(); ++i) {
    split.push_back(d[i]);
    merged.push_back(d[i]);
    perm.push_back(static_cast<int64_t>(i + 1));
  }
  return b.reshape(b.transpose(b.reshape(x, split), perm), merged);
}

// [N, G·A, S...] → [G·A, N, S...]: the weight operand of a weight-gradient convolution.
ValueId channels_to_out(GradientBuilder& b, ValueId x) {
  const int64_t rank = b.rank(x);
  std::vector<int64_t> perm = {1, 0};
  for (int64_t i = 2; i < rank; ++i) perm.push_back(i);
  return b.transpose(x, perm);
}

// Keeps the first `kernel` positions of each spatial dim of a [A, B, K'...] result and swaps
// its first two axes: the weight gradient.
ValueId crop_and_swap(GradientBuilder& b, ValueId x, const std::vector<int64_t>& kernel) {
  const std::vector<int64_t>& d = b.dims(x);
  ValueId cropped = x;
  if (!std::equal(kernel.begin(), kernel.end(), d.begin() + 2)) {
    std::vector<int64_t> starts(kernel.size(), 0);
    cropped =
        b.op("Slice", {x, b.ints(starts), b.ints(kernel), b.ints(iota_from(2, kernel.size()))});
  }
  return channels_to_out(b, cropped);
}

Attributes window_attrs(const Window& w, const std::vector<int64_t>& strides,
                        const std::vector<int64_t>& dilations, std::vector<int64_t> pads,
                        int64_t group) {
  return {{"kernel_shape", w.kernel},
          {"strides", strides},
          {"dilations", dilations},
          {"pads", std::move(pads)},
          {"group", group}};
}

ValueId bias_grad(GradientBuilder& b, ValueId go) {
  std::vector<int64_t> axes = {0};
  for (int64_t i = 2; i < b.rank(go); ++i) axes.push_back(i);
  return b.op("ReduceSum", {go, b.ints(axes)}, {{"keepdims", int64_t{0}}});
}

Status conv_rule(GradientBuilder& b) {
  const ValueId x = b.I(0), weight = b.I(1), go = b.GO(0);
  const std::vector<int64_t> in = spatial_dims(b.dims(x));
  const std::vector<int64_t> out = spatial_dims(b.dims(b.O(0)));
  const Window w = sliding_window(b, spatial_dims(b.dims(weight)), in, out);
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    // The transposed convolution's natural extent falls short of the input by the rows the
    // forward stride never reached; output_padding restores them.
    std::vector<int64_t> output_padding;
    for (size_t i = 0; i < w.spatial(); ++i) {
      output_padding.push_back(in[i] -
                               ((out[i] - 1) * w.strides[i] + w.extent(i) - w.begin[i] - w.end[i]));
    }
    Attributes attrs = window_attrs(w, w.strides, w.dilations, w.pads(), w.group);
    attrs["output_padding"] = output_padding;
    return b.op("ConvTranspose", {go, weight}, std::move(attrs));
  }));
  RETURN_IF_ERROR(maybe_grad(b, 1, [&] {
    // dW[m, c, k] = Σ_n,o GO[n, m, o]·X[n, c, o·s + k·d − p]: a convolution of X (channels as
    // batch) by GO (batch as input channels) with stride d and dilation s.
    Window swapped = w;
    swapped.kernel = out;
    const ValueId grad = b.op("Conv", {channels_to_batch(b, x, w.group), channels_to_out(b, go)},
                              window_attrs(swapped, w.dilations, w.strides, w.pads(), w.group));
    return crop_and_swap(b, grad, w.kernel);
  }));
  if (b.num_inputs() > 2 && b.has_input(2))
    return maybe_grad(b, 2, [&] { return bias_grad(b, go); });
  return Status::ok();
}

Status conv_transpose_rule(GradientBuilder& b) {
  const ValueId x = b.I(0), weight = b.I(1), go = b.GO(0);
  const Node& n = b.node();
  const std::vector<int64_t> in = spatial_dims(b.dims(x));
  const std::vector<int64_t> out = spatial_dims(b.dims(b.O(0)));
  const std::vector<int64_t> kernel = spatial_dims(b.dims(weight));
  const size_t spatial = kernel.size();
  Window w;
  w.kernel = kernel;
  w.strides = n.attr_ints("strides", std::vector<int64_t>(spatial, 1));
  w.dilations = n.attr_ints("dilations", std::vector<int64_t>(spatial, 1));
  w.group = n.attr_int("group", 1);
  const std::vector<int64_t> output_padding =
      n.attr_ints("output_padding", std::vector<int64_t>(spatial, 0));
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  const std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  for (size_t i = 0; i < spatial; ++i) {
    // The natural extent is s·(in − 1) + output_padding + extent. SAME splits the difference
    // to the output extent (floor halves, as ONNX defines it); otherwise the begin pads stand
    // and the end is cut or extended to the output extent (output_shape).
    const int64_t natural = w.strides[i] * (in[i] - 1) + output_padding[i] + w.extent(i);
    const int64_t total = natural - out[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      w.begin.push_back(auto_pad == "SAME_UPPER" ? half : total - half);
    } else {
      w.begin.push_back(auto_pad == "VALID" ? 0 : pads[i]);
    }
    w.end.push_back(total - w.begin.back());
  }
  // Output positions outside the natural extent (negative pads) were never written: their
  // gradient reaches nothing, so GO is cut there before the convolutions below.
  ValueId go_used = go;
  std::vector<int64_t> kept_begin(b.rank(go), 0), kept_end = b.dims(go);
  bool cut = false;
  for (size_t i = 0; i < spatial; ++i) {
    if (w.begin[i] < 0) {
      kept_begin[i + 2] = -w.begin[i];
      w.begin[i] = 0;
      cut = true;
    }
    if (w.end[i] < 0) {
      kept_end[i + 2] += w.end[i];
      w.end[i] = 0;
      cut = true;
    }
  }
  if (cut) go_used = b.op("Slice", {go, b.ints(kept_begin), b.ints(kept_end)});
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    const ValueId grad =
        b.op("Conv", {go_used, weight}, window_attrs(w, w.strides, w.dilations, w.pads(), w.group));
    if (spatial_dims(b.dims(grad)) == in) return grad;
    std::vector<int64_t> zeros(spatial, 0);
    return b.op("Slice", {grad, b.ints(zeros), b.ints(in), b.ints(iota_from(2, spatial))});
  }));
  RETURN_IF_ERROR(maybe_grad(b, 1, [&] {
    // dW[c, m, k] = Σ_n,i X[n, c, i]·GO[n, m, i·s + k·d − p]: GO with channels as batch,
    // convolved by X with batch as input channels, stride d and dilation s.
    Window swapped = w;
    swapped.kernel = in;
    const ValueId grad =
        b.op("Conv", {channels_to_batch(b, go_used, w.group), channels_to_out(b, x)},
             window_attrs(swapped, w.dilations, w.strides, w.pads(), w.group));
    return crop_and_swap(b, grad, kernel);
  }));
  if (b.num_inputs() > 2 && b.has_input(2))
    return maybe_grad(b, 2, [&] { return bias_grad(b, go); });
  return Status::ok();
}

Attributes pool_attrs(const GradientBuilder& b) {
  Attributes attrs;
  for (const char* name :
       {"kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode", "storage_order"}) {
    if (const Attribute* a = b.node().attr(name)) attrs[name] = *a;
  }
  return attrs;
}

// The maximum's flat index (MaxPool's Indices output, recomputed when the forward node did
// not ask for it) receives the output's gradient; overlapping windows add up. Fused, one
// MaxPoolGrad finds each window's maximum again: no flat index over the whole batch, so the
// gradient splits over N and C as the forward does.
Status max_pool_rule(GradientBuilder& b) {
  if (b.node().attr_int("storage_order", 0) != 0)
    return b.fail("storage_order 1 is not differentiated");
  return maybe_grad(b, 0, [&] {
    const ValueId x = b.I(0);
    if (b.fused()) {
      Attributes attrs = pool_attrs(b);
      attrs.erase("storage_order");
      return b.op_n("MaxPoolGrad", {b.GO(0), x}, std::move(attrs), 1, kTrainingDomain)[0];
    }
    ValueId indices = b.num_outputs() > 1 ? b.O(1) : kNoId;
    if (indices == kNoId) indices = b.op_n("MaxPool", {x}, pool_attrs(b), 2)[1];
    const int64_t total = b.value(x).shape.num_elements();
    ValueId flat_go = b.reshape(b.GO(0), {b.value(b.GO(0)).shape.num_elements()});
    ValueId flat_indices = b.reshape(indices, {b.value(indices).shape.num_elements()});
    // A window over padding only has index −1: it takes no gradient.
    const ValueId empty = b.op("Less", {flat_indices, b.constant(Tensor::scalar_int64(0))});
    flat_go = b.op("Where", {empty, b.scalar(0.0, b.dtype(x)), flat_go});
    flat_indices = b.op("Where", {empty, b.constant(Tensor::scalar_int64(0)), flat_indices});
    Tensor zero(b.dtype(x), {1});
    const ValueId zeros =
        b.op("ConstantOfShape", {b.ints({total})},
             {{"value", Attribute(std::make_shared<const Tensor>(std::move(zero)))}});
    const ValueId scattered = b.op("ScatterElements", {zeros, flat_indices, flat_go},
                                   {{"axis", int64_t{0}}, {"reduction", "add"}});
    return b.reshape(scattered, b.dims(x));
  });
}

// Each output spreads GO/divisor over its window: a depthwise transposed convolution with a
// kernel of ones. The divisor per output position is a box count, separable per axis.
Status average_pool_rule(GradientBuilder& b) {
  const ValueId x = b.I(0);
  const std::vector<int64_t>& x_dims = b.dims(x);
  const std::vector<int64_t> in = spatial_dims(x_dims);
  const std::vector<int64_t> out = spatial_dims(b.dims(b.O(0)));
  const Window w = sliding_window(b, b.node().attr_ints("kernel_shape"), in, out);
  const bool include_pad = b.node().attr_int("count_include_pad", 0) != 0;
  const size_t spatial = w.spatial();
  return maybe_grad(b, 0, [&] {
    const DType t = b.dtype(x);
    // Divisor [1, 1, out...]: per axis, the window positions inside the input (or inside the
    // padded input with count_include_pad), multiplied across axes.
    std::vector<int64_t> divisor_dims = {1, 1};
    divisor_dims.insert(divisor_dims.end(), out.begin(), out.end());
    Tensor divisor(t, divisor_dims);
    const int64_t positions = divisor.num_elements();
    for (int64_t p = 0; p < positions; ++p) {
      int64_t rest = p;
      double count = 1;
      for (int64_t i = static_cast<int64_t>(spatial) - 1; i >= 0; --i) {
        const int64_t o = rest % out[i];
        rest /= out[i];
        const int64_t lo_bound = include_pad ? -w.begin[i] : 0;
        const int64_t hi_bound = include_pad ? in[i] + w.end[i] : in[i];
        int64_t inside = 0;
        for (int64_t k = 0; k < w.kernel[i]; ++k) {
          const int64_t at = o * w.strides[i] - w.begin[i] + k * w.dilations[i];
          inside += at >= lo_bound && at < hi_bound ? 1 : 0;
        }
        count *= static_cast<double>(std::max<int64_t>(inside, 1));
      }
      divisor.set_from_double(p, count);
    }
    const ValueId scaled = b.op("Div", {b.GO(0), b.constant(std::move(divisor))});
    const int64_t channels = x_dims[1];
    std::vector<int64_t> weight_dims = {channels, 1};
    weight_dims.insert(weight_dims.end(), w.kernel.begin(), w.kernel.end());
    Tensor one(t, {1});
    one.set_from_double(0, 1.0);
    const ValueId ones =
        b.op("ConstantOfShape", {b.ints(weight_dims)},
             {{"value", Attribute(std::make_shared<const Tensor>(std::move(one)))}});
    // End pads chosen so the transposed convolution lands on the input's extent: windows
    // that ceil_mode let run past the end are cut, rows no window reached come back as
    // output_padding.
    std::vector<int64_t> end(spatial), output_padding(spatial, 0);
    for (size_t i = 0; i < spatial; ++i) {
      end[i] = (out[i] - 1) * w.strides[i] + w.extent(i) - w.begin[i] - in[i];
      if (end[i] < 0) {
        output_padding[i] = -end[i];
        end[i] = 0;
      }
    }
    std::vector<int64_t> pads = w.begin;
    pads.insert(pads.end(), end.begin(), end.end());
    Attributes attrs = window_attrs(w, w.strides, w.dilations, pads, channels);
    attrs["output_padding"] = output_padding;
    return b.op("ConvTranspose", {scaled, ones}, std::move(attrs));
  });
}

Status global_average_pool_rule(GradientBuilder& b) {
  return maybe_grad(b, 0, [&] {
    const ValueId x = b.I(0);
    int64_t count = 1;
    for (int64_t d : spatial_dims(b.dims(x))) count *= d;
    const ValueId scaled = b.op("Div", {b.GO(0), b.scalar(static_cast<double>(count), b.dtype(x))});
    return b.op("Expand", {scaled, b.ints(b.dims(x))});
  });
}

}  // namespace

void register_conv_gradients(OpRegistry& registry) {
  add_gradient(registry, "Conv", conv_rule);
  add_gradient(registry, "ConvTranspose", conv_transpose_rule);
  add_gradient(registry, "MaxPool", max_pool_rule);
  add_gradient(registry, "AveragePool", average_pool_rule);
  add_gradient(registry, "GlobalAveragePool", global_average_pool_rule);
}

}  // namespace autopar
