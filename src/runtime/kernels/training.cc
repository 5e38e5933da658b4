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
// Rows of `cols` elements from the node's axis on (LayerNormalizationGrad, RMSNormalization and its
// gradient).
int64_t normalized_cols(const KernelContext& ctx, const Tensor& x) {
  const int64_t rank = static_cast<int64_t>(x.dims().size());
  int64_t axis = ctx.node().attr_int("axis", -1);
  if (axis < 0) axis += rank;
  int64_t cols = 1;
  for (int64_t d = axis; d < rank; ++d) cols *= x.dims()[d];
  return cols;
}

Status layer_norm_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& scale = ctx.input(2);
  Tensor& dx = ctx.allocate_output(0);
  Tensor& x_hat = ctx.allocate_output(1);
  const int64_t cols = normalized_cols(ctx, x);
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

// 1/√(mean(x²) + ε) of one row, accumulated in double.
template <typename T>
double inverse_rms(const T* row, int64_t cols, double epsilon) {
  double squares = 0;
  for (int64_t c = 0; c < cols; ++c) squares += static_cast<double>(row[c]) * row[c];
  return 1.0 / std::sqrt(squares / static_cast<double>(cols) + epsilon);
}

Status rms_norm_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  Tensor& y = ctx.allocate_output(0);
  const int64_t cols = normalized_cols(ctx, x);
  const int64_t rows = cols > 0 ? x.num_elements() / cols : 0;
  const int64_t scale_n = scale.num_elements();
  const double epsilon = ctx.node().attr_float("epsilon", 1e-5f);
  return dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = data_of<T>(x);
    const T* s = data_of<T>(scale);
    T* out = mutable_data_of<T>(y);
    parallel_for(rows, grain_for(cols * 4), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = in + r * cols;
        const double inv = inverse_rms(xr, cols, epsilon);
        for (int64_t c = 0; c < cols; ++c)
          out[r * cols + c] = static_cast<T>(static_cast<double>(xr[c]) * inv * s[c % scale_n]);
      }
    });
    return Status::ok();
  });
}

Status rms_norm_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& scale = ctx.input(2);
  Tensor& dx = ctx.allocate_output(0);
  Tensor& x_hat = ctx.allocate_output(1);
  const int64_t cols = normalized_cols(ctx, x);
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
    parallel_for(rows, grain_for(cols * 8), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x_in + r * cols;
        const T* gr = g_in + r * cols;
        const double inv = inverse_rms(xr, cols, epsilon);
        double mean_gx = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double xh = static_cast<double>(xr[c]) * inv;
          xh_out[r * cols + c] = static_cast<T>(xh);
          mean_gx += static_cast<double>(gr[c]) * s[c % scale_n] * xh;
        }
        mean_gx /= static_cast<double>(cols);
        for (int64_t c = 0; c < cols; ++c) {
          const double xh = static_cast<double>(xr[c]) * inv;
          const double g = static_cast<double>(gr[c]) * s[c % scale_n];
          dx_out[r * cols + c] = static_cast<T>(inv * (g - xh * mean_gx));
        }
      }
    });
    return Status::ok();
  });
}

// y = x·cos + rotate_half(x)·sin; inverse: y = x·cos − rotate_half(x·sin). Per row of d
// elements: y[i] = x[i]·c[i] − x[i + h]·s[i], y[i + h] = x[i + h]·c[i + h] + x[i]·s[i + h]
// (h = d/2); the inverse flips the signs of the sine terms and reads sin at the source.
Status rotary_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& cos = ctx.input(1);
  const Tensor& sin = ctx.input(2);
  Tensor& y = ctx.allocate_output(0);
  const bool inverse = ctx.node().attr_int("inverse", 0) != 0;
  const int64_t d = x.dims().back();
  const int64_t half = d / 2;
  const int64_t table = cos.num_elements();  // seq·d
  const int64_t rows = d > 0 ? x.num_elements() / d : 0;
  return dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = data_of<T>(x);
    const T* c = data_of<T>(cos);
    const T* s = data_of<T>(sin);
    T* out = mutable_data_of<T>(y);
    parallel_for(rows, grain_for(d * 3), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = in + r * d;
        const int64_t t = (r * d) % table;  // the row's position in the tables
        T* yr = out + r * d;
        for (int64_t i = 0; i < half; ++i) {
          const T lo = xr[i], hi = xr[i + half];
          if (!inverse) {
            yr[i] = lo * c[t + i] - hi * s[t + i];
            yr[i + half] = hi * c[t + i + half] + lo * s[t + i + half];
          } else {
            yr[i] = lo * c[t + i] + hi * s[t + i + half];
            yr[i + half] = hi * c[t + i + half] - lo * s[t + i];
          }
        }
      }
    });
    return Status::ok();
  });
}

template <typename T>
T sigmoid(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

Status swiglu_kernel(KernelContext& ctx) {
  const Tensor& gate = ctx.input(0);
  const Tensor& up = ctx.input(1);
  Tensor& y = ctx.allocate_output(0);
  return dispatch_float(ctx, gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = data_of<T>(gate);
    const T* u = data_of<T>(up);
    T* out = mutable_data_of<T>(y);
    parallel_for(gate.num_elements(), grain_for(8), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = g[i] * sigmoid(g[i]) * u[i];
    });
    return Status::ok();
  });
}

Status swiglu_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& gate = ctx.input(1);
  const Tensor& up = ctx.input(2);
  Tensor& d_gate = ctx.allocate_output(0);
  Tensor& d_up = ctx.allocate_output(1);
  return dispatch_float(ctx, gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* go = data_of<T>(dy);
    const T* g = data_of<T>(gate);
    const T* u = data_of<T>(up);
    T* dg = mutable_data_of<T>(d_gate);
    T* du = mutable_data_of<T>(d_up);
    parallel_for(gate.num_elements(), grain_for(12), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T sg = sigmoid(g[i]);
        dg[i] = go[i] * u[i] * sg * (T(1) + g[i] * (T(1) - sg));
        du[i] = go[i] * g[i] * sg;
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
  registry.add(std::string(kTrainingDomain), "RMSNormalization", rms_norm_kernel);
  registry.add(std::string(kTrainingDomain), "RMSNormalizationGrad", rms_norm_grad_kernel);
  registry.add(std::string(kTrainingDomain), "RotaryEmbedding", rotary_kernel);
  registry.add(std::string(kTrainingDomain), "SwiGLU", swiglu_kernel);
  registry.add(std::string(kTrainingDomain), "SwiGLUGrad", swiglu_grad_kernel);
  registry.add(std::string(kTrainingDomain), "Gelu", gelu_kernel);
  registry.add(std::string(kTrainingDomain), "GeluGrad", gelu_grad_kernel);
}

}  // namespace autopar::runtime
