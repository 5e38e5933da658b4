// Fused training ops: Adam over a parameter and its two moments in one pass, and LayerNorm's
// gradient row by row.
#include <cmath>

#include "kernel_util.h"

namespace autopar::runtime {
namespace {

// The same arithmetic, in the same order, as the elementwise nodes it replaces, so a fused
// step is bit-identical to the unfused one.
Status adam_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& x_next = ctx.allocate_output(0);
  Tensor& m_next = ctx.allocate_output(1);
  Tensor& v_next = ctx.allocate_output(2);
  return dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = data_of<T>(x);
    const T* g = data_of<T>(ctx.input(1));
    const T* m = data_of<T>(ctx.input(2));
    const T* v = data_of<T>(ctx.input(3));
    const T rate = data_of<T>(ctx.input(4))[0];
    const T epsilon = data_of<T>(ctx.input(5))[0];
    const T* c = data_of<T>(ctx.input(6));
    const T beta1 = c[0], rest1 = c[1], beta2 = c[2], rest2 = c[3], keep = c[4];
    T* po = mutable_data_of<T>(x_next);
    T* mo = mutable_data_of<T>(m_next);
    T* vo = mutable_data_of<T>(v_next);
    parallel_for(x.num_elements(), grain_for(16), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T mi = beta1 * m[i] + rest1 * g[i];
        const T vi = beta2 * v[i] + rest2 * (g[i] * g[i]);
        mo[i] = mi;
        vo[i] = vi;
        po[i] = keep * p[i] - rate * (mi / (std::sqrt(vi) + epsilon));
      }
    });
    return Status::ok();
  });
}

// Per row of the normalised dims: the statistics in double, as the standard ops' reductions
// would give them to rounding.
Status layer_norm_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& scale = ctx.input(2);
  Tensor& dx = ctx.allocate_output(0);
  Tensor& x_hat = ctx.allocate_output(1);
  const int64_t rank = static_cast<int64_t>(x.dims().size());
  int64_t axis = ctx.node().attr_int("axis", -1);
  if (axis < 0) axis += rank;
  int64_t cols = 1;
  for (int64_t d = axis; d < rank; ++d) cols *= x.dims()[d];
  const int64_t rows = cols > 0 ? x.num_elements() / cols : 0;
  const int64_t scale_n = scale.num_elements();
  const double epsilon = ctx.node().attr_float("epsilon", 1e-5f);
  return dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g_in = data_of<T>(dy);
    const T* x_in = data_of<T>(x);
    const T* s = data_of<T>(scale);
    T* dx_out = mutable_data_of<T>(dx);
    T* xh_out = mutable_data_of<T>(x_hat);
    parallel_for(rows, grain_for(cols * 12), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x_in + r * cols;
        const T* gr = g_in + r * cols;
        double mean = 0;
        for (int64_t c = 0; c < cols; ++c) mean += xr[c];
        mean /= static_cast<double>(cols);
        double variance = 0;
        for (int64_t c = 0; c < cols; ++c) variance += (xr[c] - mean) * (xr[c] - mean);
        variance /= static_cast<double>(cols);
        const double inv_std = 1.0 / std::sqrt(variance + epsilon);
        double mean_g = 0, mean_gx = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double xh = (xr[c] - mean) * inv_std;
          const double g = static_cast<double>(gr[c]) * s[c % scale_n];
          xh_out[r * cols + c] = static_cast<T>(xh);
          mean_g += g;
          mean_gx += g * xh;
        }
        mean_g /= static_cast<double>(cols);
        mean_gx /= static_cast<double>(cols);
        for (int64_t c = 0; c < cols; ++c) {
          const double xh = (xr[c] - mean) * inv_std;
          const double g = static_cast<double>(gr[c]) * s[c % scale_n];
          dx_out[r * cols + c] = static_cast<T>(inv_std * (g - mean_g - xh * mean_gx));
        }
      }
    });
    return Status::ok();
  });
}

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

bool gelu_tanh_form(const KernelContext& ctx) {
  return ctx.node().attr_string("approximate", "none") == "tanh";
}

// ½·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³).
template <typename T>
T gelu_tanh(T v) {
  const T u = T(kSqrt2OverPi) * (v + T(kGeluCubic) * v * v * v);
  return T(0.5) * v * (T(1) + std::tanh(u));
}

// d/dx: ½·(1 + t) + ½·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²), t = tanh(u).
template <typename T>
T gelu_tanh_derivative(T v) {
  const T t = std::tanh(T(kSqrt2OverPi) * (v + T(kGeluCubic) * v * v * v));
  return T(0.5) * (T(1) + t) +
         T(0.5) * v * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * v * v);
}

Status gelu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0);
  const bool tanh_form = gelu_tanh_form(ctx);
  return dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = data_of<T>(x);
    T* out = mutable_data_of<T>(y);
    parallel_for(x.num_elements(), grain_for(16), [&](int64_t begin, int64_t end) {
      if (tanh_form) {
        for (int64_t i = begin; i < end; ++i) out[i] = gelu_tanh(in[i]);
        return;
      }
      for (int64_t i = begin; i < end; ++i) {
        const T v = in[i];
        out[i] = T(0.5) * v * (T(1) + std::erf(v * T(kInvSqrt2)));
      }
    });
    return Status::ok();
  });
}

Status gelu_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  Tensor& dx = ctx.allocate_output(0);
  const bool tanh_form = gelu_tanh_form(ctx);
  return dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = data_of<T>(dy);
    const T* in = data_of<T>(x);
    T* out = mutable_data_of<T>(dx);
    parallel_for(x.num_elements(), grain_for(24), [&](int64_t begin, int64_t end) {
      if (tanh_form) {
        for (int64_t i = begin; i < end; ++i) out[i] = g[i] * gelu_tanh_derivative(in[i]);
        return;
      }
      for (int64_t i = begin; i < end; ++i) {
        const T v = in[i];
        const T cdf = T(0.5) * (T(1) + std::erf(v * T(kInvSqrt2)));
        const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v);
        out[i] = g[i] * (cdf + v * pdf);
      }
    });
    return Status::ok();
  });
}

}  // namespace

void register_training_kernels(KernelRegistry& registry) {
  registry.add(std::string(kTrainingDomain), "Adam", adam_kernel);
  registry.add(std::string(kTrainingDomain), "LayerNormalizationGrad", layer_norm_grad_kernel);
  registry.add(std::string(kTrainingDomain), "Gelu", gelu_kernel);
  registry.add(std::string(kTrainingDomain), "GeluGrad", gelu_grad_kernel);
}

}  // namespace autopar::runtime
