// Row kernels of the CUDA backend (softmax, layer norm and its gradient, batch norm, softmax
// cross-entropy), the elementwise training kernels (Adam, dropout), and the launch-error helpers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "launch.h"

namespace autopar::cuda {

std::string cuda_error(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return "";
  return std::string(what) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
         ")";
}

std::string check_launch(const char* kernel) { return cuda_error(cudaGetLastError(), kernel); }

// The device's multiprocessor count, cached per device: every enqueue sizes its grid by it.
int sm_count() {
  static std::atomic<int> cached[64];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) {
    cudaGetLastError();  // not a launch's failure: keep it from check_launch
    return 132;
  }
  int count = cached[device].load(std::memory_order_relaxed);
  if (count > 0) return count;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      count <= 0) {
    cudaGetLastError();
    count = 132;
  }
  cached[device].store(count, std::memory_order_relaxed);
  return count;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over `work` items of `per_block` each: enough to fill the device,
// never more than the work needs.
unsigned grid_for(int64_t work, int64_t per_block, int64_t blocks_per_sm) {
  const int64_t blocks = std::min(ceil_div(std::max<int64_t>(work, 1), per_block),
                                  int64_t{sm_count()} * blocks_per_sm);
  return static_cast<unsigned>(std::max<int64_t>(blocks, 1));
}

// ---- values ----------------------------------------------------------------------------------

// Arithmetic type for a storage type: float for f32 and the half types, double for f64.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename A, typename T>
__device__ __forceinline__ A to_acc(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<A>(__half2float(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return static_cast<A>(__bfloat162float(v));
  } else {
    return static_cast<A>(v);
  }
}

template <typename T, typename A>
__device__ __forceinline__ T from_acc(A v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// An element of a tensor whose dtype is only known at run time (parameters: scale, bias,
// statistics, class weights); the switch is uniform across the warp.
template <typename A>
__device__ __forceinline__ A load_any(const void* p, uint8_t dt, int64_t i) {
  switch (static_cast<Dt>(dt)) {
    case Dt::kF32:
      return static_cast<A>(static_cast<const float*>(p)[i]);
    case Dt::kF16:
      return static_cast<A>(__half2float(static_cast<const __half*>(p)[i]));
    case Dt::kBF16:
      return static_cast<A>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case Dt::kF64:
      return static_cast<A>(static_cast<const double*>(p)[i]);
    case Dt::kI64:
      return static_cast<A>(static_cast<const long long*>(p)[i]);
    case Dt::kI32:
      return static_cast<A>(static_cast<const int*>(p)[i]);
    case Dt::kI8:
      return static_cast<A>(static_cast<const signed char*>(p)[i]);
    case Dt::kU8:
      return static_cast<A>(static_cast<const unsigned char*>(p)[i]);
    default:
      return static_cast<const unsigned char*>(p)[i] != 0 ? A(1) : A(0);
  }
}

// Float dtypes only (the outputs written through it are statistics and losses).
template <typename A>
__device__ __forceinline__ void store_any(void* p, uint8_t dt, int64_t i, A v) {
  switch (static_cast<Dt>(dt)) {
    case Dt::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v));
      break;
    case Dt::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
      break;
    case Dt::kF64:
      static_cast<double*>(p)[i] = static_cast<double>(v);
      break;
    default:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
  }
}

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return ::exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return ::log(x); }
__device__ __forceinline__ float sqrt_of(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_of(double x) { return ::sqrt(x); }
// Separate roundings, as the CPU kernels (built without FMA contraction) compute.
__device__ __forceinline__ float mul_rn(float x, float y) { return __fmul_rn(x, y); }
__device__ __forceinline__ double mul_rn(double x, double y) { return __dmul_rn(x, y); }
__device__ __forceinline__ float add_rn(float x, float y) { return __fadd_rn(x, y); }
__device__ __forceinline__ double add_rn(double x, double y) { return __dadd_rn(x, y); }
__device__ __forceinline__ float sub_rn(float x, float y) { return __fsub_rn(x, y); }
__device__ __forceinline__ double sub_rn(double x, double y) { return __dsub_rn(x, y); }

template <typename A>
__device__ __forceinline__ A infinity() {
  return static_cast<A>(__longlong_as_double(0x7ff0000000000000ll));
}

// NaN wins, so a row holding NaN normalises to NaN as on the CPU.
template <typename A>
__device__ __forceinline__ A max_nan(A a, A b) {
  return a != a || a > b ? a : b;
}

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

template <typename A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

// Sum over the block, returned to every thread. `shared` holds 33 values.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with shared
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A r = lane < warps ? shared[lane] : A(0);
    r = warp_sum(r);
    if (lane == 0) shared[32] = r;
  }
  __syncthreads();
  return shared[32];
}

// Online softmax statistics: the running max m and the sum s of exp(x - m) over what was seen.
// -inf elements add nothing (a row of only -inf ends with s = 0 and normalises to NaN, as the
// CPU's exp(-inf - -inf)); NaN and +inf poison s as they do the CPU's sum.
template <typename A>
struct MaxSum {
  A m, s;
  __device__ __forceinline__ void take(A x) {
    if (x > m) {
      s = s * exp_of(m - x) + exp_of(x - x);
      m = x;
    } else if (x != -infinity<A>()) {
      s += exp_of(x - m);
    }
  }
  __device__ __forceinline__ void merge(A m2, A s2) {
    const A top = max_nan(m, m2);
    const A a = s == A(0) ? A(0) : s * exp_of(m - top);
    const A b = s2 == A(0) ? A(0) : s2 * exp_of(m2 - top);
    m = top;
    s = a + b;
  }
};

template <typename A>
__device__ __forceinline__ MaxSum<A> warp_max_sum(MaxSum<A> v) {
#pragma unroll
  for (int k = 16; k > 0; k >>= 1) {
    const A m2 = __shfl_xor_sync(0xffffffffu, v.m, k);
    const A s2 = __shfl_xor_sync(0xffffffffu, v.s, k);
    v.merge(m2, s2);
  }
  return v;
}

// The block's combined statistics, returned to every thread. `shared` holds 2 x 33 values.
template <typename A>
__device__ __forceinline__ MaxSum<A> block_max_sum(MaxSum<A> v, A* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max_sum(v);
  __syncthreads();
  if (lane == 0) {
    shared[warp] = v.m;
    shared[33 + warp] = v.s;
  }
  __syncthreads();
  if (warp == 0) {
    MaxSum<A> r{-infinity<A>(), A(0)};
    if (lane < warps) r = MaxSum<A>{shared[lane], shared[33 + lane]};
    r = warp_max_sum(r);
    if (lane == 0) {
      shared[32] = r.m;
      shared[65] = r.s;
    }
  }
  __syncthreads();
  return MaxSum<A>{shared[32], shared[65]};
}

// f(c, value) for c = first, first + step, ... below end, reading x[c * stride]: kBatch loads are
// issued before their values are used, so a thread keeps several in flight.
constexpr int kBatch = 8;
template <typename A, typename T, typename F>
__device__ __forceinline__ void for_each_strided(const T* x, int64_t stride, int64_t first,
                                                 int64_t end, int64_t step, F&& f) {
  int64_t c = first;
  for (; c + (kBatch - 1) * step < end; c += kBatch * step) {
    T v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) v[k] = x[(c + k * step) * stride];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) f(c + k * step, to_acc<A>(v[k]));
  }
  for (; c < end; c += step) f(c, to_acc<A>(x[c * stride]));
}

// Values per lane for a row of n <= 1024 elements held by one warp, from a few sizes (768
// columns, GPT-2's width, take exactly 24).
int lanes_per_row(int64_t n) {
  for (int v : {1, 2, 4, 8, 12, 16, 24}) {
    if (32 * v >= n) return v;
  }
  return 32;
}

// Instantiates Launcher<V> for the sizes lanes_per_row picks.
template <template <int> class Launcher, typename... Args>
std::string with_vpt(int vpt, Args&&... args) {
  switch (vpt) {
    case 1:
      return Launcher<1>::run(args...);
    case 2:
      return Launcher<2>::run(args...);
    case 4:
      return Launcher<4>::run(args...);
    case 8:
      return Launcher<8>::run(args...);
    case 12:
      return Launcher<12>::run(args...);
    case 16:
      return Launcher<16>::run(args...);
    case 24:
      return Launcher<24>::run(args...);
    default:
      return Launcher<32>::run(args...);
  }
}

// ---- softmax -----------------------------------------------------------------------------------

struct SoftmaxArgs {
  const void* x;
  void* y;
  int64_t outer, n, inner;
  bool log;
};

constexpr int kWarpRowsBlock = 128;  // warp-per-row kernels: 4 rows per block

// Rows of up to 1024 held in registers by one warp: max, sum of exp, write. Lane l holds packs
// l, l + 32, ... of VEC elements (VEC > 1 when rows are whole, aligned packs: wider loads).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <typename T, int VPT, int VEC>
__global__ void __launch_bounds__(kWarpRowsBlock) softmax_warp(const SoftmaxArgs a) {
  using A = Acc<T>;
  using P = Pack<T, VEC>;
  constexpr int kPacks = VPT / VEC;
  const int lane = threadIdx.x % 32;
  const int64_t warps = kWarpRowsBlock / 32;
  for (int64_t row = int64_t{blockIdx.x} * warps + threadIdx.x / 32; row < a.outer;
       row += int64_t{gridDim.x} * warps) {
    const P* x = reinterpret_cast<const P*>(static_cast<const T*>(a.x) + row * a.n);
    P* y = reinterpret_cast<P*>(static_cast<T*>(a.y) + row * a.n);
    A v[VPT];
    A m = -infinity<A>();
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64_t pack = lane + 32 * k;
      if (pack * VEC < a.n) {
        const P p = x[pack];
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[k * VEC + j] = to_acc<A>(p.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[k * VEC + j] = -infinity<A>();
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) m = max_nan(m, v[k * VEC + j]);
    }
    m = warp_max(m);
    // v becomes x - max for LogSoftmax, exp(x - max) for Softmax.
    A s = 0;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if ((lane + 32 * k) * VEC < a.n) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          A& e = v[k * VEC + j];
          if (a.log) {
            e -= m;
            s += exp_of(e);
          } else {
            e = exp_of(e - m);
            s += e;
          }
        }
      }
    }
    s = warp_sum(s);
    const A log_s = a.log ? log_of(s) : A(0);
    const A inv_s = A(1) / s;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64_t pack = lane + 32 * k;
      if (pack * VEC < a.n) {
        P p;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const A e = v[k * VEC + j];
          p.v[j] = from_acc<T>(a.log ? e - log_s : e * inv_s);
        }
        y[pack] = p;
      }
    }
  }
}

// Elements per load for rows of n: 16 bytes (8 for the half types), when every row is a whole
// number of aligned packs.
template <typename T>
constexpr int kWideVec = sizeof(T) >= 4 ? 16 / static_cast<int>(sizeof(T)) : 4;

template <typename T>
struct SoftmaxWarp {
  template <int VPT>
  struct L {
    static std::string run(const SoftmaxArgs& a, Context& ctx) {
      constexpr int kVec = kWideVec<T>;
      const unsigned grid = grid_for(a.outer, kWarpRowsBlock / 32, 16);
      const uintptr_t align = sizeof(T) * kVec;
      const bool wide = a.n % kVec == 0 && reinterpret_cast<uintptr_t>(a.x) % align == 0 &&
                        reinterpret_cast<uintptr_t>(a.y) % align == 0;
      if constexpr (VPT % kVec == 0) {
        if (wide) {
          softmax_warp<T, VPT, kVec><<<grid, kWarpRowsBlock, 0, ctx.stream>>>(a);
          return check_launch("softmax_warp (wide)");
        }
      }
      softmax_warp<T, VPT, 1><<<grid, kWarpRowsBlock, 0, ctx.stream>>>(a);
      return check_launch("softmax_warp");
    }
  };
};

// Long rows, one block each: online max and sum in one read, then the write.
template <typename T>
__global__ void __launch_bounds__(512) softmax_block(const SoftmaxArgs a) {
  using A = Acc<T>;
  __shared__ A shared[66];
  const T* x_all = static_cast<const T*>(a.x);
  T* y_all = static_cast<T*>(a.y);
  for (int64_t row = blockIdx.x; row < a.outer; row += gridDim.x) {
    const T* x = x_all + row * a.n;
    T* y = y_all + row * a.n;
    MaxSum<A> st{-infinity<A>(), A(0)};
    for_each_strided<A>(x, 1, threadIdx.x, a.n, blockDim.x, [&](int64_t, A v) { st.take(v); });
    st = block_max_sum(st, shared);
    const A log_s = log_of(st.s), inv_s = A(1) / st.s;
    for_each_strided<A>(x, 1, threadIdx.x, a.n, blockDim.x, [&](int64_t c, A v) {
      const A d = v - st.m;
      y[c] = from_acc<T>(a.log ? d - log_s : exp_of(d) * inv_s);
    });
  }
}

// The normalised axis is not innermost: a thread per (outer, inner) lane walks the axis, so
// neighbouring threads read neighbouring elements.
template <typename T>
__global__ void __launch_bounds__(256) softmax_strided(const SoftmaxArgs a) {
  using A = Acc<T>;
  const T* x_all = static_cast<const T*>(a.x);
  T* y_all = static_cast<T*>(a.y);
  const int64_t lanes = a.outer * a.inner;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < lanes;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = idx / a.inner, j = idx - o * a.inner;
    const T* x = x_all + o * a.n * a.inner + j;
    T* y = y_all + o * a.n * a.inner + j;
    A m = -infinity<A>();
    for (int64_t r = 0; r < a.n; ++r) m = max_nan(m, to_acc<A>(x[r * a.inner]));
    A s = 0;
    for (int64_t r = 0; r < a.n; ++r) s += exp_of(to_acc<A>(x[r * a.inner]) - m);
    const A log_s = log_of(s), inv_s = A(1) / s;
    for (int64_t r = 0; r < a.n; ++r) {
      const A d = to_acc<A>(x[r * a.inner]) - m;
      y[r * a.inner] = from_acc<T>(a.log ? d - log_s : exp_of(d) * inv_s);
    }
  }
}

// ---- layer norm ----------------------------------------------------------------------------

// Scale and bias have the data's dtype (ONNX's T) and are read cyclically (c % count) when
// shorter than a row.
struct LayerNormArgs {
  const void* x;
  const void* scale;
  const void* bias;  // null: no bias
  void* y;
  float* mean;                                  // may be null
  float* inv_std;                               // may be null
  int64_t rows, cols, scale_count, bias_count;  // cols < 2^31 (the host checks)
  float epsilon;
};

__device__ __forceinline__ int64_t cyclic(int64_t c, int64_t count, int64_t cols) {
  return count == cols
             ? c
             : static_cast<int64_t>(static_cast<uint32_t>(c) % static_cast<uint32_t>(count));
}

template <typename T, typename A>
__device__ __forceinline__ T layer_norm_value(const LayerNormArgs& a, int64_t c, A v, A mean,
                                              A inv) {
  const A normalized = (v - mean) * inv;
  const A s = to_acc<A>(static_cast<const T*>(a.scale)[cyclic(c, a.scale_count, a.cols)]);
  A out = mul_rn(normalized, s);
  if (a.bias) {
    out = add_rn(out, to_acc<A>(static_cast<const T*>(a.bias)[cyclic(c, a.bias_count, a.cols)]));
  }
  return from_acc<T>(out);
}

template <typename T, int VPT>
__global__ void __launch_bounds__(kWarpRowsBlock) layer_norm_warp(const LayerNormArgs a) {
  using A = Acc<T>;
  const int lane = threadIdx.x % 32;
  const int64_t warps = kWarpRowsBlock / 32;
  for (int64_t row = int64_t{blockIdx.x} * warps + threadIdx.x / 32; row < a.rows;
       row += int64_t{gridDim.x} * warps) {
    const T* x = static_cast<const T*>(a.x) + row * a.cols;
    T* y = static_cast<T*>(a.y) + row * a.cols;
    A v[VPT];
    A sum = 0;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t c = lane + 32 * k;
      v[k] = c < a.cols ? to_acc<A>(x[c]) : A(0);
      sum += v[k];
    }
    const A mean = warp_sum(sum) / static_cast<A>(a.cols);
    A squares = 0;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      if (lane + 32 * k < a.cols) {
        const A d = v[k] - mean;
        squares += d * d;
      }
    }
    const A variance = warp_sum(squares) / static_cast<A>(a.cols);
    const A inv = A(1) / sqrt_of(variance + static_cast<A>(a.epsilon));
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t c = lane + 32 * k;
      if (c < a.cols) y[c] = layer_norm_value<T>(a, c, v[k], mean, inv);
    }
    if (lane == 0) {
      if (a.mean) a.mean[row] = static_cast<float>(mean);
      if (a.inv_std) a.inv_std[row] = static_cast<float>(inv);
    }
  }
}

template <typename T>
struct LayerNormWarp {
  template <int VPT>
  struct L {
    static std::string run(const LayerNormArgs& a, Context& ctx) {
      layer_norm_warp<T, VPT>
          <<<grid_for(a.rows, kWarpRowsBlock / 32, 16), kWarpRowsBlock, 0, ctx.stream>>>(a);
      return check_launch("layer_norm_warp");
    }
  };
};

// Rows longer than 1024: one block each, two statistics passes and the write.
template <typename T>
__global__ void __launch_bounds__(512) layer_norm_block(const LayerNormArgs a) {
  using A = Acc<T>;
  __shared__ A shared[33];
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.x) + row * a.cols;
    T* y = static_cast<T*>(a.y) + row * a.cols;
    A sum = 0;
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) sum += to_acc<A>(x[c]);
    const A mean = block_sum(sum, shared) / static_cast<A>(a.cols);
    A squares = 0;
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
      const A d = to_acc<A>(x[c]) - mean;
      squares += d * d;
    }
    const A variance = block_sum(squares, shared) / static_cast<A>(a.cols);
    const A inv = A(1) / sqrt_of(variance + static_cast<A>(a.epsilon));
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
      y[c] = layer_norm_value<T>(a, c, to_acc<A>(x[c]), mean, inv);
    }
    if (threadIdx.x == 0) {
      if (a.mean) a.mean[row] = static_cast<float>(mean);
      if (a.inv_std) a.inv_std[row] = static_cast<float>(inv);
    }
  }
}

// ---- layer norm gradient ---------------------------------------------------------------------

struct LayerNormGradArgs {
  const void* dy;
  const void* x;
  const void* scale;  // the data's dtype
  void* dx;
  void* x_hat;
  int64_t rows, cols, scale_count;
  float epsilon;
};

template <typename T, typename A>
__device__ __forceinline__ A scaled_grad(const LayerNormGradArgs& a, const T* dy, int64_t c) {
  return to_acc<A>(dy[c]) *
         to_acc<A>(static_cast<const T*>(a.scale)[cyclic(c, a.scale_count, a.cols)]);
}

// x_hat = (x - mean) inv_std, g = dy scale, dx = inv_std (g - mean(g) - x_hat mean(g x_hat)).
// x_hat stays in registers; g is formed twice from dy, whose second read hits the cache.
template <typename T, int VPT>
__global__ void __launch_bounds__(kWarpRowsBlock) layer_norm_grad_warp(const LayerNormGradArgs a) {
  using A = Acc<T>;
  const int lane = threadIdx.x % 32;
  const int64_t warps = kWarpRowsBlock / 32;
  for (int64_t row = int64_t{blockIdx.x} * warps + threadIdx.x / 32; row < a.rows;
       row += int64_t{gridDim.x} * warps) {
    const T* x = static_cast<const T*>(a.x) + row * a.cols;
    const T* dy = static_cast<const T*>(a.dy) + row * a.cols;
    T* dx = static_cast<T*>(a.dx) + row * a.cols;
    T* xh_out = static_cast<T*>(a.x_hat) + row * a.cols;
    A v[VPT];
    A sum = 0;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t c = lane + 32 * k;
      v[k] = c < a.cols ? to_acc<A>(x[c]) : A(0);
      sum += v[k];
    }
    const A mean = warp_sum(sum) / static_cast<A>(a.cols);
    A squares = 0;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      if (lane + 32 * k < a.cols) {
        v[k] -= mean;
        squares += v[k] * v[k];
      }
    }
    const A inv =
        A(1) / sqrt_of(warp_sum(squares) / static_cast<A>(a.cols) + static_cast<A>(a.epsilon));
    A sum_g = 0, sum_gx = 0;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t c = lane + 32 * k;
      if (c < a.cols) {
        v[k] *= inv;  // now x_hat
        const A g = scaled_grad<T, A>(a, dy, c);
        sum_g += g;
        sum_gx += g * v[k];
      }
    }
    const A mean_g = warp_sum(sum_g) / static_cast<A>(a.cols);
    const A mean_gx = warp_sum(sum_gx) / static_cast<A>(a.cols);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t c = lane + 32 * k;
      if (c < a.cols) {
        xh_out[c] = from_acc<T>(v[k]);
        dx[c] = from_acc<T>(inv * (scaled_grad<T, A>(a, dy, c) - mean_g - v[k] * mean_gx));
      }
    }
  }
}

template <typename T>
struct LayerNormGradWarp {
  template <int VPT>
  struct L {
    static std::string run(const LayerNormGradArgs& a, Context& ctx) {
      layer_norm_grad_warp<T, VPT>
          <<<grid_for(a.rows, kWarpRowsBlock / 32, 16), kWarpRowsBlock, 0, ctx.stream>>>(a);
      return check_launch("layer_norm_grad_warp");
    }
  };
};

template <typename T>
__global__ void __launch_bounds__(512) layer_norm_grad_block(const LayerNormGradArgs a) {
  using A = Acc<T>;
  __shared__ A shared[33];
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.x) + row * a.cols;
    const T* dy = static_cast<const T*>(a.dy) + row * a.cols;
    T* dx = static_cast<T*>(a.dx) + row * a.cols;
    T* xh_out = static_cast<T*>(a.x_hat) + row * a.cols;
    auto g_at = [&](int64_t c) { return scaled_grad<T, A>(a, dy, c); };
    A sum = 0;
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) sum += to_acc<A>(x[c]);
    const A mean = block_sum(sum, shared) / static_cast<A>(a.cols);
    A squares = 0;
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
      const A d = to_acc<A>(x[c]) - mean;
      squares += d * d;
    }
    const A inv = A(1) / sqrt_of(block_sum(squares, shared) / static_cast<A>(a.cols) +
                                 static_cast<A>(a.epsilon));
    A sum_g = 0, sum_gx = 0;
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
      const A g = g_at(c);
      sum_g += g;
      sum_gx += g * ((to_acc<A>(x[c]) - mean) * inv);
    }
    const A mean_g = block_sum(sum_g, shared) / static_cast<A>(a.cols);
    const A mean_gx = block_sum(sum_gx, shared) / static_cast<A>(a.cols);
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
      const A xh = (to_acc<A>(x[c]) - mean) * inv;
      xh_out[c] = from_acc<T>(xh);
      dx[c] = from_acc<T>(inv * (g_at(c) - mean_g - xh * mean_gx));
    }
  }
}

// ---- batch norm --------------------------------------------------------------------------------

struct BatchNormArgs {
  const void* x;
  const void* scale;
  const void* bias;
  const void* mean;
  const void* var;
  void* y;
  void* stats_out[4];   // running mean, running var, batch mean, batch var (each may be null)
  uint8_t param_dt[4];  // scale, bias, mean, var
  uint8_t stats_dt[4];
  int64_t n, c, inner;
  double epsilon, momentum;
};

// y = x a + b with a = scale / sqrt(var + eps) and b = bias - mean a folded in double and
// rounded to the storage's arithmetic type, as the CPU kernel.
template <typename A>
__device__ __forceinline__ void folded(const BatchNormArgs& a, int64_t ch, double mean, double var,
                                       A* fa, A* fb) {
  const double scale = load_any<double>(a.scale, a.param_dt[0], ch);
  const double bias = load_any<double>(a.bias, a.param_dt[1], ch);
  const double f = scale / ::sqrt(var + a.epsilon);
  *fa = static_cast<A>(f);
  *fb = static_cast<A>(bias - mean * f);
}

// Inference: the given statistics; each thread refolds only when its channel changes.
template <typename T>
__global__ void __launch_bounds__(256) batch_norm_apply(const BatchNormArgs a) {
  using A = Acc<T>;
  const int64_t total = a.n * a.c * a.inner;
  int64_t last = -1;
  A fa = 0, fb = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ch = (i / a.inner) % a.c;
    if (ch != last) {
      folded(a, ch, load_any<double>(a.mean, a.param_dt[2], ch),
             load_any<double>(a.var, a.param_dt[3], ch), &fa, &fb);
      last = ch;
    }
    const A v = to_acc<A>(static_cast<const T*>(a.x)[i]);
    static_cast<T*>(a.y)[i] = from_acc<T>(add_rn(mul_rn(v, fa), fb));
  }
}

// Training: one block per channel computes the batch mean and biased variance over n and the
// spatial dims (two passes), writes y and the statistics outputs.
template <typename T>
__global__ void __launch_bounds__(512) batch_norm_train(const BatchNormArgs a) {
  using A = Acc<T>;
  __shared__ A shared[33];
  const int64_t count = a.n * a.inner;
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  for (int64_t ch = blockIdx.x; ch < a.c; ch += gridDim.x) {
    auto at = [&](int64_t j) {
      const int64_t b = j / a.inner;
      return (b * a.c + ch) * a.inner + (j - b * a.inner);
    };
    A sum = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) sum += to_acc<A>(x[at(j)]);
    const A mean = block_sum(sum, shared) / static_cast<A>(count);
    A squares = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const A d = to_acc<A>(x[at(j)]) - mean;
      squares += d * d;
    }
    const A var = block_sum(squares, shared) / static_cast<A>(count);
    A fa, fb;
    folded(a, ch, static_cast<double>(mean), static_cast<double>(var), &fa, &fb);
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t i = at(j);
      y[i] = from_acc<T>(add_rn(mul_rn(to_acc<A>(x[i]), fa), fb));
    }
    if (threadIdx.x == 0) {
      const double m = a.momentum;
      if (a.stats_out[0]) {
        const double running = load_any<double>(a.mean, a.param_dt[2], ch);
        store_any<double>(a.stats_out[0], a.stats_dt[0], ch,
                          running * m + static_cast<double>(mean) * (1 - m));
      }
      if (a.stats_out[1]) {
        const double running = load_any<double>(a.var, a.param_dt[3], ch);
        store_any<double>(a.stats_out[1], a.stats_dt[1], ch,
                          running * m + static_cast<double>(var) * (1 - m));
      }
      if (a.stats_out[2]) store_any<double>(a.stats_out[2], a.stats_dt[2], ch, mean);
      if (a.stats_out[3]) store_any<double>(a.stats_out[3], a.stats_dt[3], ch, var);
    }
  }
}

// ---- softmax cross-entropy -------------------------------------------------------------------

constexpr int kCeBlock = 256;
constexpr int kCeMaxBlocks = 1024;

// Per-block (loss, weight) sums when the context has no workspace for them.
__device__ double ce_fallback_partial[2 * kCeMaxBlocks];

struct CrossEntropyArgs {
  const void* scores;
  const void* labels;
  const void* weights;  // may be null
  void* loss;
  void* log_prob;   // may be null
  double* partial;  // null: ce_fallback_partial
  DataError* error;
  int64_t n, classes, inner, rows;
  int64_t ignore_index;
  int reduction;  // 0 mean, 1 sum, 2 none
  int launch;
  bool has_ignore;
  uint8_t label_dt, weight_dt, loss_dt;
};

// Rows (one per (n, inner) pair) go to groups of TPR threads (a warp, or the whole block for
// long rows) in a fixed order; each block sums its rows' losses and weights in row order into
// its partial slot, so the result does not depend on scheduling.
template <typename T, int TPR>
__global__ void __launch_bounds__(kCeBlock) cross_entropy_rows(const CrossEntropyArgs a) {
  using A = Acc<T>;
  constexpr int kGroups = kCeBlock / TPR;
  __shared__ A shared[66];
  __shared__ double group_loss[kGroups], group_weight[kGroups];
  const int lane = threadIdx.x % TPR, group = threadIdx.x / TPR;
  const T* scores = static_cast<const T*>(a.scores);
  double loss_sum = 0, weight_sum = 0;
  for (int64_t first = int64_t{blockIdx.x} * kGroups; first < a.rows;
       first += int64_t{gridDim.x} * kGroups) {
    const int64_t row = first + group;
    const bool active = row < a.rows;
    const int64_t b = active ? row / a.inner : 0, d = active ? row - b * a.inner : 0;
    const T* s = scores + b * a.classes * a.inner + d;
    MaxSum<A> st{-infinity<A>(), A(0)};
    if (active)
      for_each_strided<A>(s, a.inner, lane, a.classes, TPR, [&](int64_t, A v) { st.take(v); });
    if constexpr (TPR == 32) {
      st = warp_max_sum(st);
    } else {
      st = block_max_sum(st, shared);
    }
    if (!active) continue;  // uniform for TPR == kCeBlock; a whole warp otherwise
    const double log_sum = ::log(static_cast<double>(st.s)) + static_cast<double>(st.m);
    if (a.log_prob) {
      T* lp = static_cast<T*>(a.log_prob) + b * a.classes * a.inner + d;
      const A shift = static_cast<A>(log_sum);
      for_each_strided<A>(s, a.inner, lane, a.classes, TPR,
                          [&](int64_t c, A v) { lp[c * a.inner] = from_acc<T>(v - shift); });
    }
    if (lane == 0) {
      const int64_t label = a.label_dt == static_cast<uint8_t>(Dt::kI32)
                                ? static_cast<const int*>(a.labels)[row]
                                : static_cast<const long long*>(a.labels)[row];
      double loss = 0, weight = 0;
      if (a.has_ignore && label == a.ignore_index) {
        // ignored: no loss, no weight
      } else if (label < 0 || label >= a.classes) {
        if (a.error && atomicCAS(&a.error->code, 0, 2) == 0) {
          a.error->value = label;
          a.error->launch = a.launch;
        }
      } else {
        weight = a.weights ? load_any<double>(a.weights, a.weight_dt, label) : 1.0;
        loss = -(static_cast<double>(to_acc<A>(s[label * a.inner])) - log_sum) * weight;
      }
      if (a.reduction == 2) store_any<double>(a.loss, a.loss_dt, row, loss);
      loss_sum += loss;
      weight_sum += weight;
    }
  }
  if (a.reduction == 2) return;
  if (lane == 0) {
    group_loss[group] = loss_sum;
    group_weight[group] = weight_sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0, total_weight = 0;
    for (int k = 0; k < kGroups; ++k) {
      total += group_loss[k];
      total_weight += group_weight[k];
    }
    double* partial = a.partial ? a.partial : ce_fallback_partial;
    partial[2 * blockIdx.x] = total;
    partial[2 * blockIdx.x + 1] = total_weight;
  }
}

// The blocks' partial sums in a fixed tree, then mean (over the weights) or sum.
__global__ void __launch_bounds__(kCeBlock)
    cross_entropy_total(const CrossEntropyArgs a, int blocks) {
  __shared__ double loss[kCeBlock], weight[kCeBlock];
  const double* partial = a.partial ? a.partial : ce_fallback_partial;
  double l = 0, w = 0;
  for (int k = threadIdx.x; k < blocks; k += kCeBlock) {
    l += partial[2 * k];
    w += partial[2 * k + 1];
  }
  loss[threadIdx.x] = l;
  weight[threadIdx.x] = w;
  __syncthreads();
  for (int half = kCeBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      loss[threadIdx.x] += loss[threadIdx.x + half];
      weight[threadIdx.x] += weight[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double total = loss[0], total_weight = weight[0];
    const double out = a.reduction == 1 ? total : (total_weight > 0 ? total / total_weight : 0.0);
    store_any<double>(a.loss, a.loss_dt, 0, out);
  }
}

// ---- Adam and dropout --------------------------------------------------------------------------

struct AdamArgs {
  const void* x;
  const void* g;
  const void* m;
  const void* v;
  const void* rate;
  const void* epsilon;
  const void* c;  // beta1, 1 - beta1, beta2, 1 - beta2, the decay factor kept
  void* x_out;
  void* m_out;
  void* v_out;
  int64_t count;
};

// The CPU kernel's arithmetic in its order, without contraction: fused and unfused steps agree.
template <typename T>
__global__ void __launch_bounds__(256) adam_kernel(const AdamArgs a) {
  using A = Acc<T>;
  const T* c = static_cast<const T*>(a.c);
  const A rate = to_acc<A>(static_cast<const T*>(a.rate)[0]);
  const A epsilon = to_acc<A>(static_cast<const T*>(a.epsilon)[0]);
  const A beta1 = to_acc<A>(c[0]), rest1 = to_acc<A>(c[1]), beta2 = to_acc<A>(c[2]),
          rest2 = to_acc<A>(c[3]), keep = to_acc<A>(c[4]);
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < a.count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const A p = to_acc<A>(static_cast<const T*>(a.x)[i]);
    const A g = to_acc<A>(static_cast<const T*>(a.g)[i]);
    const A m = to_acc<A>(static_cast<const T*>(a.m)[i]);
    const A v = to_acc<A>(static_cast<const T*>(a.v)[i]);
    const A mi = add_rn(mul_rn(beta1, m), mul_rn(rest1, g));
    const A vi = add_rn(mul_rn(beta2, v), mul_rn(rest2, mul_rn(g, g)));
    const A step = mul_rn(rate, mi / add_rn(sqrt_of(vi), epsilon));
    static_cast<T*>(a.m_out)[i] = from_acc<T>(mi);
    static_cast<T*>(a.v_out)[i] = from_acc<T>(vi);
    static_cast<T*>(a.x_out)[i] = from_acc<T>(sub_rn(mul_rn(keep, p), step));
  }
}

struct DropoutArgs {
  const void* x;
  void* y;
  uint8_t* mask;  // may be null
  int64_t count;
  double ratio;
  uint64_t seed;
  const int64_t* table;   // per dim, each position's offset in the whole tensor
  const int64_t* stream;  // the run's stream (one element)
  int rank;
  int64_t dims[kMaxRank];
};

// The CPU's draw_key (kernel.h): the seed, with a plan's run stream mixed in.
__device__ __forceinline__ uint64_t draw_key(uint64_t seed, uint64_t stream) {
  if (stream == 0) return seed;
  uint64_t z = stream * 0xd1b54a32d192ed03ull;
  z ^= z >> 29;
  return seed ^ (z * 0x9e3779b97f4a7c15ull);
}

// The CPU's uniform_at (kernel_util.h): splitmix64 of (seed, index), the same draw for an
// element wherever it is computed.
__device__ __forceinline__ double uniform_at(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

template <typename T>
__global__ void __launch_bounds__(256) dropout_kernel(const DropoutArgs a) {
  using A = Acc<T>;
  const A scale = static_cast<A>(1.0 / (1.0 - a.ratio));
  const uint64_t key = draw_key(a.seed, static_cast<uint64_t>(*a.stream));
  int64_t table_size = 0;
  for (int d = 0; d < a.rank; ++d) table_size += a.dims[d];
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < a.count;
       i += int64_t{gridDim.x} * blockDim.x) {
    // The whole tensor's flat index of element i.
    int64_t e = 0, rest = i, start = table_size;
    for (int d = a.rank - 1; d >= 0; --d) {
      start -= a.dims[d];
      e += a.table[start + rest % a.dims[d]];
      rest /= a.dims[d];
    }
    const bool keep = uniform_at(key, static_cast<uint64_t>(e)) >= a.ratio;
    const A v = to_acc<A>(static_cast<const T*>(a.x)[i]);
    static_cast<T*>(a.y)[i] = from_acc<T>(keep ? mul_rn(v, scale) : A(0));
    if (a.mask) a.mask[i] = keep ? 1 : 0;
  }
}

bool present(const Resolved& r, size_t k) {
  return k < r.launch->out.size() && r.out[k] != nullptr;
}

}  // namespace

std::string enqueue_softmax(const Resolved& r, Context& ctx) {
  const Launch& l = *r.launch;
  const SoftmaxParams& p = l.softmax;
  if (l.in.empty() || l.out.empty() || !r.in[0] || !r.out[0]) return "softmax: missing x or y";
  if (p.outer <= 0 || p.n <= 0 || p.inner <= 0) return "";
  SoftmaxArgs a{r.in[0], r.out[0], p.outer, p.n, p.inner, p.log};
  return with_float_type(l.in[0].ref.dt, "softmax", [&](auto tag) -> std::string {
    using T = decltype(tag);
    if (p.inner > 1) {
      softmax_strided<T><<<grid_for(p.outer * p.inner, 256, 8), 256, 0, ctx.stream>>>(a);
      return check_launch("softmax_strided");
    }
    if (p.n <= 1024) {
      return with_vpt<SoftmaxWarp<T>::template L>(lanes_per_row(p.n), a, ctx);
    }
    softmax_block<T><<<grid_for(p.outer, 1, 4), 512, 0, ctx.stream>>>(a);
    return check_launch("softmax_block");
  });
}

std::string enqueue_layer_norm(const Resolved& r, Context& ctx) {
  const Launch& l = *r.launch;
  const LayerNormParams& p = l.layer_norm;
  if (l.in.size() < 2 || !r.in[0] || !r.in[1] || l.out.empty() || !r.out[0]) {
    return "layer_norm: missing x, scale or y";
  }
  if (p.rows <= 0 || p.cols <= 0) return "";
  if (p.scale_count <= 0) return "layer_norm: scale has no elements";
  const bool has_bias = p.bias_count > 0 && l.in.size() > 2 && r.in[2];
  LayerNormArgs a{};
  a.x = r.in[0];
  a.scale = r.in[1];
  a.bias = has_bias ? r.in[2] : nullptr;
  a.y = r.out[0];
  a.mean = present(r, 1) ? static_cast<float*>(r.out[1]) : nullptr;
  a.inv_std = present(r, 2) ? static_cast<float*>(r.out[2]) : nullptr;
  a.rows = p.rows;
  a.cols = p.cols;
  a.scale_count = p.scale_count;
  a.bias_count = has_bias ? p.bias_count : 1;
  a.epsilon = static_cast<float>(p.epsilon);
  if (l.in[1].ref.dt != l.in[0].ref.dt || (has_bias && l.in[2].ref.dt != l.in[0].ref.dt)) {
    return "layer_norm: scale and bias must have the data's dtype";
  }
  if (p.cols > int64_t{INT32_MAX}) return "layer_norm: rows longer than 2^31 elements";
  return with_float_type(l.in[0].ref.dt, "layer_norm", [&](auto tag) -> std::string {
    using T = decltype(tag);
    if (p.cols <= 1024)
      return with_vpt<LayerNormWarp<T>::template L>(lanes_per_row(p.cols), a, ctx);
    layer_norm_block<T><<<grid_for(p.rows, 1, 4), 512, 0, ctx.stream>>>(a);
    return check_launch("layer_norm_block");
  });
}

std::string enqueue_layer_norm_grad(const Resolved& r, Context& ctx) {
  const Launch& l = *r.launch;
  const LayerNormParams& p = l.layer_norm;
  if (l.in.size() < 3 || !r.in[0] || !r.in[1] || !r.in[2] || l.out.size() < 2 || !r.out[0] ||
      !r.out[1]) {
    return "layer_norm_grad: needs inputs {dy, x, scale} and outputs {dx, x_hat}";
  }
  if (p.rows <= 0 || p.cols <= 0) return "";
  if (p.scale_count <= 0) return "layer_norm_grad: scale has no elements";
  LayerNormGradArgs a{};
  a.dy = r.in[0];
  a.x = r.in[1];
  a.scale = r.in[2];
  a.dx = r.out[0];
  a.x_hat = r.out[1];
  a.rows = p.rows;
  a.cols = p.cols;
  a.scale_count = p.scale_count;
  a.epsilon = static_cast<float>(p.epsilon);
  if (l.in[2].ref.dt != l.in[1].ref.dt || l.in[0].ref.dt != l.in[1].ref.dt) {
    return "layer_norm_grad: dy and scale must have x's dtype";
  }
  if (p.cols > int64_t{INT32_MAX}) return "layer_norm_grad: rows longer than 2^31 elements";
  return with_float_type(l.in[1].ref.dt, "layer_norm_grad", [&](auto tag) -> std::string {
    using T = decltype(tag);
    if (p.cols <= 1024) {
      return with_vpt<LayerNormGradWarp<T>::template L>(lanes_per_row(p.cols), a, ctx);
    }
    layer_norm_grad_block<T><<<grid_for(p.rows, 1, 4), 512, 0, ctx.stream>>>(a);
    return check_launch("layer_norm_grad_block");
  });
}

std::string enqueue_batch_norm(const Resolved& r, Context& ctx) {
  const Launch& l = *r.launch;
  const BatchNormParams& p = l.batch_norm;
  if (l.in.size() < 5 || l.out.empty() || !r.out[0]) return "batch_norm: needs 5 inputs and y";
  for (int k = 0; k < 5; ++k) {
    if (!r.in[k]) return "batch_norm: input " + std::to_string(k) + " has no pointer";
  }
  if (p.n < 0 || p.c <= 0 || p.inner < 0 || p.n * p.inner == 0) return "";
  BatchNormArgs a{};
  a.x = r.in[0];
  a.scale = r.in[1];
  a.bias = r.in[2];
  a.mean = r.in[3];
  a.var = r.in[4];
  a.y = r.out[0];
  for (int k = 0; k < 4; ++k) {
    a.param_dt[k] = static_cast<uint8_t>(l.in[1 + k].ref.dt);
    if (p.training && present(r, 1 + k)) {
      a.stats_out[k] = r.out[1 + k];
      a.stats_dt[k] = static_cast<uint8_t>(l.out[1 + k].ref.dt);
    }
  }
  a.n = p.n;
  a.c = p.c;
  a.inner = p.inner;
  a.epsilon = p.epsilon;
  a.momentum = p.momentum;
  return with_float_type(l.in[0].ref.dt, "batch_norm", [&](auto tag) -> std::string {
    using T = decltype(tag);
    if (p.training) {
      batch_norm_train<T><<<grid_for(p.c, 1, 4), 512, 0, ctx.stream>>>(a);
      return check_launch("batch_norm_train");
    }
    batch_norm_apply<T><<<grid_for(p.n * p.c * p.inner, 256, 8), 256, 0, ctx.stream>>>(a);
    return check_launch("batch_norm_apply");
  });
}

std::string enqueue_cross_entropy(const Resolved& r, Context& ctx) {
  const Launch& l = *r.launch;
  const CrossEntropyParams& p = l.cross_entropy;
  if (l.in.size() < 2 || !r.in[0] || !r.in[1] || l.out.empty() || !r.out[0]) {
    return "cross_entropy: needs scores, labels and loss";
  }
  const Dt label_dt = l.in[1].ref.dt;
  if (label_dt != Dt::kI64 && label_dt != Dt::kI32)
    return "cross_entropy: labels are not int64 or int32";
  if (p.reduction < 0 || p.reduction > 2) {
    return "cross_entropy: unknown reduction " + std::to_string(p.reduction);
  }
  CrossEntropyArgs a{};
  a.scores = r.in[0];
  a.labels = r.in[1];
  a.weights = l.in.size() > 2 ? r.in[2] : nullptr;
  a.weight_dt = a.weights ? static_cast<uint8_t>(l.in[2].ref.dt) : 0;
  a.loss = r.out[0];
  a.loss_dt = static_cast<uint8_t>(l.out[0].ref.dt);
  a.log_prob = present(r, 1) ? r.out[1] : nullptr;
  a.error = ctx.error;
  a.launch = ctx.launch_index;
  a.n = p.n;
  a.classes = p.classes;
  a.inner = p.inner;
  a.rows = p.n * p.inner;
  a.reduction = p.reduction;
  a.has_ignore = p.has_ignore;
  a.ignore_index = p.ignore_index;
  a.label_dt = static_cast<uint8_t>(label_dt);
  if (a.n < 0 || a.classes < 0 || a.inner <= 0) return "cross_entropy: bad shape";
  const bool long_rows = a.classes >= 1024;
  const int groups = long_rows ? 1 : kCeBlock / 32;
  const int blocks = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(ceil_div(a.rows, groups), kCeMaxBlocks)));
  if (ctx.workspace && ctx.workspace_bytes >= sizeof(double) * 2 * kCeMaxBlocks) {
    a.partial = static_cast<double*>(ctx.workspace);
  }
  return with_float_type(l.in[0].ref.dt, "cross_entropy", [&](auto tag) -> std::string {
    using T = decltype(tag);
    if (a.rows > 0) {
      if (long_rows) {
        cross_entropy_rows<T, kCeBlock><<<blocks, kCeBlock, 0, ctx.stream>>>(a);
      } else {
        cross_entropy_rows<T, 32><<<blocks, kCeBlock, 0, ctx.stream>>>(a);
      }
      std::string error = check_launch("cross_entropy_rows");
      if (!error.empty()) return error;
    }
    if (a.reduction == 2) return "";
    // No rows: the total kernel still writes the loss (0) from zeroed partial sums.
    cross_entropy_total<<<1, kCeBlock, 0, ctx.stream>>>(a, a.rows > 0 ? blocks : 0);
    return check_launch("cross_entropy_total");
  });
}

std::string enqueue_adam(const Resolved& r, Context& ctx) {
  const Launch& l = *r.launch;
  if (l.in.size() < 7 || l.out.size() < 3) return "adam: needs 7 inputs and 3 outputs";
  for (int k = 0; k < 7; ++k) {
    if (!r.in[k]) return "adam: input " + std::to_string(k) + " has no pointer";
  }
  for (int k = 0; k < 3; ++k) {
    if (!r.out[k]) return "adam: output " + std::to_string(k) + " has no pointer";
  }
  const AdamArgs a{r.in[0], r.in[1],  r.in[2],  r.in[3],  r.in[4],     r.in[5],
                   r.in[6], r.out[0], r.out[1], r.out[2], l.adam.count};
  if (a.count <= 0) return "";
  return with_float_type(l.in[0].ref.dt, "adam", [&](auto tag) -> std::string {
    using T = decltype(tag);
    adam_kernel<T><<<grid_for(a.count, 256, 8), 256, 0, ctx.stream>>>(a);
    return check_launch("adam_kernel");
  });
}

std::string enqueue_dropout(const Resolved& r, Context& ctx) {
  const Launch& l = *r.launch;
  const DropoutParams& p = l.dropout;
  if (l.in.empty() || !r.in[0] || l.out.empty() || !r.out[0]) return "dropout: missing x or y";
  if (!(p.ratio >= 0 && p.ratio < 1))
    return "dropout: ratio " + std::to_string(p.ratio) + " is not in [0, 1)";
  if (l.in.size() < 3 || !r.in[1] || !r.in[2]) return "dropout: missing the offset table or stream";
  if (p.rank < 0 || p.rank > kMaxRank) return "dropout: rank " + std::to_string(p.rank);
  DropoutArgs a{r.in[0],
                r.out[0],
                nullptr,
                p.count,
                p.ratio,
                p.seed,
                static_cast<const int64_t*>(r.in[1]),
                static_cast<const int64_t*>(r.in[2]),
                p.rank,
                {}};
  for (int d = 0; d < p.rank; ++d) {
    if (p.dims[d] <= 0) return "";  // nothing to draw
    a.dims[d] = p.dims[d];
  }
  if (present(r, 1)) {
    const Dt mask_dt = l.out[1].ref.dt;
    if (mask_dt != Dt::kBool && mask_dt != Dt::kU8) return "dropout: the mask is not bool";
    a.mask = static_cast<uint8_t*>(r.out[1]);
  }
  if (a.count <= 0) return "";
  return with_float_type(l.in[0].ref.dt, "dropout", [&](auto tag) -> std::string {
    using T = decltype(tag);
    dropout_kernel<T><<<grid_for(a.count, 256, 8), 256, 0, ctx.stream>>>(a);
    return check_launch("dropout_kernel");
  });
}

}  // namespace autopar::cuda
