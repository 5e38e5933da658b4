// Normalisation kernels: Softmax, LogSoftmax, LayerNormalization and BatchNormalization.
#include <cmath>
#include <type_traits>

#include <Eigen/Core>

#include "kernel_util.h"

namespace autopar::runtime {
namespace {

int64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t d = begin; d < end; ++d) p *= dims[d];
  return p;
}

// NaN wins, so a row holding NaN normalises to NaN.
template <typename T>
T max_of(T a, T b) {
  return a != a || a > b ? a : b;
}

// ---- Softmax, LogSoftmax -------------------------------------------------------------

// The input as [outer, length, inner], normalised along `length`. Before opset 13 the input
// is coerced to 2-D at `axis` (length = every dim from axis on, inner = 1); from 13 only
// dims[axis] is normalised.
struct SoftmaxShape {
  int64_t outer = 1, length = 1, inner = 1;
};

SoftmaxShape softmax_shape(const KernelContext& ctx, const std::vector<int64_t>& dims) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const bool coerced = ctx.opset() < 13;
  const int64_t axis = normalize_axis(ctx.node().attr_int("axis", coerced ? 1 : -1), rank);
  SoftmaxShape shape;
  shape.outer = product(dims, 0, static_cast<size_t>(axis));
  if (coerced) {
    shape.length = product(dims, static_cast<size_t>(axis), dims.size());
  } else {
    shape.length = dims[axis];
    shape.inner = product(dims, static_cast<size_t>(axis) + 1, dims.size());
  }
  return shape;
}

// Softmax: y = exp(x - max) / Σ exp(x - max). LogSoftmax: y = (x - max) - log Σ exp(x - max).
// Both subtract the row's max so exp never overflows; the sum is pairwise.
template <typename T>
void softmax_rows(const T* x, T* y, const SoftmaxShape& shape, bool log) {
  const int64_t n = shape.length;
  parallel_for(shape.outer, grain_for(4 * n), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* in = x + row * n;
      T* out = y + row * n;
      T max = in[0];
      for (int64_t i = 1; i < n; ++i) max = max_of(max, in[i]);
      using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
      Eigen::Map<Array>(out, n) = (Eigen::Map<const Array>(in, n) - max).exp();
      const T sum = pairwise_sum<T>(n, [out](int64_t i) { return out[i]; });
      if (log) {
        const T log_sum = std::log(sum);
        for (int64_t i = 0; i < n; ++i) out[i] = (in[i] - max) - log_sum;
      } else {
        for (int64_t i = 0; i < n; ++i) out[i] /= sum;
      }
    }
  });
}

// The normalised axis is not the innermost: each (outer, tile of inner lanes) item works on
// `length` rows of contiguous lanes, so every step is a contiguous loop over lanes.
template <typename T>
void softmax_lanes(const T* x, T* y, const SoftmaxShape& shape, bool log) {
  constexpr int64_t kTile = 256;
  const int64_t n = shape.length, inner = shape.inner;
  const int64_t tiles = (inner + kTile - 1) / kTile;
  parallel_for(shape.outer * tiles, grain_for(4 * n * std::min(inner, kTile)),
               [&](int64_t begin, int64_t end) {
                 std::vector<T> max(kTile), sum(kTile);
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t outer = item / tiles, first_lane = (item % tiles) * kTile;
                   const int64_t width = std::min(kTile, inner - first_lane);
                   const T* in = x + outer * n * inner + first_lane;
                   T* out = y + outer * n * inner + first_lane;
                   std::copy(in, in + width, max.begin());
                   for (int64_t r = 1; r < n; ++r) {
                     for (int64_t j = 0; j < width; ++j) max[j] = max_of(max[j], in[r * inner + j]);
                   }
                   for (int64_t r = 0; r < n; ++r) {
                     for (int64_t j = 0; j < width; ++j)
                       out[r * inner + j] = std::exp(in[r * inner + j] - max[j]);
                   }
                   pairwise_sum_rows<T>(
                       n, width, [&](int64_t r) { return out + r * inner; }, sum.data());
                   for (int64_t j = 0; j < width; ++j) {
                     if (log) sum[j] = std::log(sum[j]);
                   }
                   for (int64_t r = 0; r < n; ++r) {
                     for (int64_t j = 0; j < width; ++j) {
                       T& v = out[r * inner + j];
                       v = log ? (in[r * inner + j] - max[j]) - sum[j] : v / sum[j];
                     }
                   }
                 }
               });
}

Kernel softmax_kernel(bool log) {
  return [log](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.allocate_output(0);
    const SoftmaxShape shape = softmax_shape(ctx, x.dims());
    return dispatch_float(ctx, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (shape.length == 0 || y.num_elements() == 0) return Status::ok();
      if (shape.inner == 1) {
        softmax_rows(data_of<T>(x), mutable_data_of<T>(y), shape, log);
      } else {
        softmax_lanes(data_of<T>(x), mutable_data_of<T>(y), shape, log);
      }
      return Status::ok();
    });
  };
}

// ---- LayerNormalization --------------------------------------------------------------

// Scale or bias broadcast onto the normalised dims, flattened to `length` values.
template <typename T>
std::vector<T> expand_onto(const Tensor& t, const std::vector<int64_t>& normalized) {
  const std::vector<int64_t> strides = broadcast_strides(t.dims(), normalized);
  const int64_t length = product(normalized, 0, normalized.size());
  std::vector<T> out(static_cast<size_t>(length));
  const T* data = data_of<T>(t);
  for (int64_t flat = 0; flat < length; ++flat) {
    int64_t rest = flat, offset = 0;
    for (size_t d = normalized.size(); d-- > 0;) {
      offset += (rest % normalized[d]) * strides[d];
      rest /= normalized[d];
    }
    out[flat] = data[offset];
  }
  return out;
}

// ONNX's function body: the statistics in the stash type U (at least T's precision), the
// normalised value cast back to T, then scale and bias applied in T.
template <typename T, typename U, typename S = U>
void layer_norm(KernelContext& ctx, int64_t axis) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t>& dims = x.dims();
  const std::vector<int64_t> normalized(dims.begin() + axis, dims.end());
  const int64_t rows = product(dims, 0, static_cast<size_t>(axis));
  const int64_t length = product(normalized, 0, normalized.size());
  const std::vector<T> scale = expand_onto<T>(ctx.input(1), normalized);
  const std::vector<T> bias =
      ctx.has_input(2) ? expand_onto<T>(ctx.input(2), normalized) : std::vector<T>(length, T(0));
  const U epsilon = static_cast<U>(ctx.node().attr_float("epsilon", 1e-5f));
  T* y = mutable_data_of<T>(ctx.allocate_output(0));
  S* mean_out = ctx.num_outputs() > 1 && ctx.has_output(1)
                    ? mutable_data_of<S>(ctx.allocate_output(1))
                    : nullptr;
  S* inv_std_out = ctx.num_outputs() > 2 && ctx.has_output(2)
                       ? mutable_data_of<S>(ctx.allocate_output(2))
                       : nullptr;
  const T* data = data_of<T>(x);
  parallel_for(rows, grain_for(6 * length), [&](int64_t begin, int64_t end) {
    std::vector<U> stashed;
    for (int64_t row = begin; row < end; ++row) {
      const T* in = data + row * length;
      const U* values;
      if constexpr (std::is_same_v<T, U>) {
        values = in;
      } else {
        stashed.assign(in, in + length);
        values = stashed.data();
      }
      const U mean = pairwise_sum<U>(length, [values](int64_t i) { return values[i]; }) /
                     static_cast<U>(length);
      const U variance = pairwise_sum<U>(length,
                                         [values, mean](int64_t i) {
                                           const U d = values[i] - mean;
                                           return d * d;
                                         }) /
                         static_cast<U>(length);
      const U inv_std = U(1) / std::sqrt(variance + epsilon);
      T* out = y + row * length;
      for (int64_t i = 0; i < length; ++i) {
        out[i] = static_cast<T>((values[i] - mean) * inv_std) * scale[i] + bias[i];
      }
      if (mean_out) mean_out[row] = static_cast<S>(mean);
      if (inv_std_out) inv_std_out[row] = static_cast<S>(inv_std);
    }
  });
}

Status layer_norm_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t axis = normalize_axis(ctx.node().attr_int("axis", -1), x.rank());
  const int64_t stash = ctx.node().attr_int("stash_type", 1);
  // The stash type is a floor, not a ceiling: float64 inputs keep float64 statistics, as
  // ONNX Runtime's and PyTorch's kernels compute them (exporters write the default stash
  // type, float32, whatever the model's precision).
  const DType stash_dtype = stash == 11 ? DType::kFloat64 : DType::kFloat32;
  if (stash != 1 && stash != 11) {
    return ctx.fail("stash_type {} is not supported by the CPU kernel (f32 or f64)", stash);
  }
  if (x.dtype() == DType::kFloat64 && stash_dtype == DType::kFloat32) {
    layer_norm<double, double, float>(ctx, axis);  // float64 statistics, stored as declared
    return Status::ok();
  }
  return dispatch_float(ctx, x.dtype(), [&](auto x_tag) {
    return dispatch_float(ctx, stash_dtype, [&](auto stash_tag) {
      layer_norm<decltype(x_tag), decltype(stash_tag)>(ctx, axis);
      return Status::ok();
    });
  });
}

// ---- BatchNormalization --------------------------------------------------------------

// Training uses the batch's statistics: from opset 14 when training_mode = 1, before it when
// any statistics output is present (the shape rule's reading of opsets 9 to 13).
bool batch_norm_training(const KernelContext& ctx) {
  if (ctx.opset() >= 14) return ctx.node().attr_int("training_mode", 0) != 0;
  for (size_t i = 1; i < ctx.num_outputs(); ++i) {
    if (ctx.has_output(i)) return true;
  }
  return false;
}

std::vector<double> channel_values(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.num_elements()));
  for (int64_t c = 0; c < t.num_elements(); ++c) out[c] = t.float_at(c);
  return out;
}

// Batch mean and biased variance per channel over N and the spatial dims, in T: pairwise
// over the N planes of pairwise sums over each plane.
template <typename T>
void batch_statistics(const T* x, int64_t batch, int64_t channels, int64_t plane,
                      std::vector<double>& mean, std::vector<double>& variance) {
  const int64_t count = batch * plane;
  parallel_for(channels, grain_for(2 * count), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      auto plane_of = [&](int64_t n) { return x + (n * channels + c) * plane; };
      const T sum = pairwise_sum<T>(batch, [&](int64_t n) {
        const T* values = plane_of(n);
        return pairwise_sum<T>(plane, [values](int64_t i) { return values[i]; });
      });
      const T m = sum / static_cast<T>(count);
      const T squares = pairwise_sum<T>(batch, [&](int64_t n) {
        const T* values = plane_of(n);
        return pairwise_sum<T>(plane, [values, m](int64_t i) {
          const T d = values[i] - m;
          return d * d;
        });
      });
      mean[c] = m;
      variance[c] = squares / static_cast<T>(count);
    }
  });
}

template <typename T>
void batch_norm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t>& dims = x.dims();
  const int64_t batch = dims[0], channels = dims[1];
  const int64_t plane = product(dims, 2, dims.size());
  const double epsilon = ctx.node().attr_float("epsilon", 1e-5f);
  const double momentum = ctx.node().attr_float("momentum", 0.9f);
  const std::vector<double> scale = channel_values(ctx.input(1));
  const std::vector<double> bias = channel_values(ctx.input(2));
  const std::vector<double> running_mean = channel_values(ctx.input(3));
  const std::vector<double> running_var = channel_values(ctx.input(4));
  const bool training = batch_norm_training(ctx);
  std::vector<double> mean = running_mean, variance = running_var;
  if (training) batch_statistics(data_of<T>(x), batch, channels, plane, mean, variance);

  // y = (x - mean) / sqrt(var + ε) · scale + bias, folded per channel into y = x·a + b.
  std::vector<T> a(static_cast<size_t>(channels)), b(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const double folded = scale[c] / std::sqrt(variance[c] + epsilon);
    a[c] = static_cast<T>(folded);
    b[c] = static_cast<T>(bias[c] - mean[c] * folded);
  }
  const T* in = data_of<T>(x);
  T* y = mutable_data_of<T>(ctx.allocate_output(0));
  parallel_for(batch * channels, grain_for(2 * plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T ap = a[p % channels], bp = b[p % channels];
      const T* values = in + p * plane;
      T* out = y + p * plane;
      for (int64_t i = 0; i < plane; ++i) out[i] = values[i] * ap + bp;
    }
  });
  if (!training) return;

  // Outputs 1 and 2 are the running statistics after this batch; before opset 14, outputs 3
  // and 4 are the batch's own mean and (biased) variance.
  auto write = [&](size_t output, auto value_of) {
    if (output >= ctx.num_outputs() || !ctx.has_output(output)) return;
    Tensor& t = ctx.allocate_output(output);
    for (int64_t c = 0; c < channels; ++c) t.set_from_double(c, value_of(c));
  };
  write(1, [&](int64_t c) { return running_mean[c] * momentum + mean[c] * (1 - momentum); });
  write(2, [&](int64_t c) { return running_var[c] * momentum + variance[c] * (1 - momentum); });
  write(3, [&](int64_t c) { return mean[c]; });
  write(4, [&](int64_t c) { return variance[c]; });
}

Status batch_norm_kernel(KernelContext& ctx) {
  return dispatch_float(ctx, ctx.input(0).dtype(), [&](auto tag) {
    batch_norm<decltype(tag)>(ctx);
    return Status::ok();
  });
}

}  // namespace

void register_normalization_kernels(KernelRegistry& registry) {
  registry.add("", "Softmax", softmax_kernel(false));
  registry.add("", "LogSoftmax", softmax_kernel(true));
  registry.add("", "LayerNormalization", layer_norm_kernel);
  registry.add("", "BatchNormalization", batch_norm_kernel);
}

}  // namespace autopar::runtime
