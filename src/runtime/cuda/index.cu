// CUDA index and window kernels: Gather, GatherElements/ND, ScatterElements/ND, pools, Resize.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "launch.h"

namespace autopar::cuda {
namespace {

constexpr int kThreads = 256;

// ---- launch geometry ---------------------------------------------------------------------

// Grid-stride kernels need one resident wave of blocks, as many as the kernel's registers let
// each SM hold; more only adds a ragged tail. The occupancy query runs once per kernel (the
// first, eager run, before any capture).
template <auto kKernel>
unsigned blocks_for(int64_t total) {
  static std::atomic<int> resident{0};
  int per_sm = resident.load(std::memory_order_relaxed);
  if (per_sm <= 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kThreads, 0) !=
            cudaSuccess ||
        per_sm <= 0) {
      cudaGetLastError();  // not this launch's failure: keep it from check_launch
      per_sm = 2048 / kThreads;
    }
    resident.store(per_sm, std::memory_order_relaxed);
  }
  const int64_t needed = (total + kThreads - 1) / kThreads;
  const int64_t wave = static_cast<int64_t>(sm_count()) * per_sm;
  return static_cast<unsigned>(needed < wave ? needed : wave);
}

template <auto kKernel, typename... Args>
void launch(int64_t total, cudaStream_t stream, Args... args) {
  kKernel<<<blocks_for<kKernel>(total), kThreads, 0, stream>>>(args...);
}

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// A thread of a grid-stride loop with one small load per element keeps one load in flight,
// far too few bytes to cover memory latency. This walk runs `load` on kUnroll elements (each
// still coalesced across the warp) before `finish` on any of them, so their loads overlap.
constexpr int kUnroll = 4;
template <typename V, typename Load, typename Finish>
__device__ __forceinline__ void unrolled_walk(int64_t total, const Load& load,
                                              const Finish& finish) {
  const int64_t stride = grid_stride();
  for (int64_t base = first_index(); base < total; base += kUnroll * stride) {
    V values[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * stride < total) values[u] = load(base + u * stride);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * stride < total) finish(base + u * stride, values[u]);
    }
  }
}

// A 64-bit division is a long instruction sequence that would bound these memory-bound
// kernels; below 2^31 a multiply-high and a shift (Granlund and Montgomery, as PyTorch's
// IntDivider) give the same quotient. Kernels take kNarrow when every numerator is below 2^31.
struct Divider {
  int64_t d = 1;
  uint32_t magic = 0, shift = 0;
};

Divider make_divider(int64_t d) {
  Divider v;
  v.d = d;
  if (d >= 1 && d < (int64_t{1} << 31)) {
    uint32_t s = 0;
    while ((uint64_t{1} << s) < static_cast<uint64_t>(d)) ++s;
    v.shift = s;
    v.magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
  }
  return v;
}

bool narrow(int64_t count) { return count < (int64_t{1} << 31); }

template <bool kNarrow>
__device__ __forceinline__ int64_t divide(int64_t n, const Divider& v) {
  if constexpr (kNarrow) {
    const uint32_t m = static_cast<uint32_t>(n);
    return static_cast<int64_t>((__umulhi(m, v.magic) + m) >> v.shift);
  } else {
    return n / v.d;
  }
}

// ---- bad indices ---------------------------------------------------------------------------

// The first bad index of a run wins; the plain read first keeps a launch full of bad indices
// from queueing every thread on one atomic.
__device__ __forceinline__ void report_index(DataError* error, int launch, int64_t value) {
  if (error == nullptr) return;
  if (*reinterpret_cast<volatile int*>(&error->code) != 0) return;
  if (atomicCAS(&error->code, 0, 1) == 0) {
    error->value = static_cast<long long>(value);
    error->launch = launch;
  }
}

// Wraps a negative index into [0, extent); false (reported) when it stays outside.
__device__ __forceinline__ bool wrap_index(int64_t raw, int64_t extent, int64_t& at,
                                           DataError* error, int launch) {
  at = raw < 0 ? raw + extent : raw;
  if (at >= 0 && at < extent) return true;
  report_index(error, launch, raw);
  return false;
}

// ---- element types ---------------------------------------------------------------------------

// Byte moves go in the widest power-of-two unit (16 bytes down to 1) that divides the moved
// run and every pointer's address.
int unit_bytes(int64_t run_bytes, std::initializer_list<const void*> pointers) {
  for (int unit = 16; unit > 1; unit /= 2) {
    bool fits = run_bytes % unit == 0;
    for (const void* p : pointers) fits = fits && reinterpret_cast<uintptr_t>(p) % unit == 0;
    if (fits) return unit;
  }
  return 1;
}

template <typename F>
std::string with_unit(int unit, F&& f) {
  switch (unit) {
    case 16:
      return f(uint4{});
    case 8:
      return f(uint2{});
    case 4:
      return f(uint32_t{});
    case 2:
      return f(uint16_t{});
    default:
      return f(uint8_t{});
  }
}

template <typename F>
std::string with_index(Dt dt, const char* kernel, F&& f) {
  if (dt == Dt::kI64) return f(int64_t{});
  if (dt == Dt::kI32) return f(int32_t{});
  return std::string(kernel) + ": indices must be int64 or int32";
}

// Element types a scatter can add into.
template <typename F>
std::string with_addable(Dt dt, const char* kernel, F&& f) {
  if (dt == Dt::kI64) return f(static_cast<long long>(0));
  if (dt == Dt::kI32) return f(int{});
  if (!dt_is_float(dt))
    return std::string(kernel) + ": reduction add needs f32, f16, bf16, f64, i64 or i32";
  return with_float_type(dt, kernel, f);
}

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(double* p, double v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename A>
__device__ __forceinline__ A quiet_nan() {
  if constexpr (std::is_same_v<A, double>) {
    return __longlong_as_double(0x7ff8000000000000LL);
  } else {
    return __int_as_float(0x7fc00000);
  }
}
template <typename A>
__device__ __forceinline__ A negative_infinity() {
  if constexpr (std::is_same_v<A, double>) {
    return -__longlong_as_double(0x7ff0000000000000LL);
  } else {
    return -__int_as_float(0x7f800000);
  }
}

// The value is unused, so these compile to fire-and-forget reductions (RED), native for every
// type here on sm_90.
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int* p, int v) { atomicAdd(p, v); }
// Two's complement: an unsigned add is the signed add.
__device__ __forceinline__ void atomic_add(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// An update and where it goes (-1: nowhere, its index was out of range).
template <typename E>
struct Placed {
  int64_t offset;
  E value;
};

// Reduction 0 moves bytes (any dtype, unique indices: no atomics); 1 adds atomically, so
// duplicate indices all count.
template <bool kAdd, typename E>
__device__ __forceinline__ void scatter_one(E* target, E value) {
  if constexpr (kAdd) {
    atomic_add(target, value);
  } else {
    *target = value;
  }
}

std::string missing(const char* kernel) {
  return std::string(kernel) + ": a tensor it needs has no device pointer";
}

// out = data before a scatter; a memcpy node under graph capture.
std::string copy_data(const Resolved& r, Context& ctx, int64_t bytes, const char* kernel) {
  if (bytes == 0 || r.out[0] == r.in[0]) return "";
  return cuda_error(cudaMemcpyAsync(r.out[0], r.in[0], static_cast<size_t>(bytes),
                                    cudaMemcpyDeviceToDevice, ctx.stream),
                    kernel);
}

// ---- Gather --------------------------------------------------------------------------------

// out [outer, count, inner] in units of U; consecutive threads walk a row's inner units, so
// an embedding lookup reads and writes whole rows coalesced.
template <typename U, typename Idx, bool kNarrow>
__global__ void gather_kernel(const U* __restrict__ data, const Idx* __restrict__ indices,
                              U* __restrict__ out, int64_t total, Divider inner, Divider count,
                              int64_t axis_dim, DataError* error, int launch) {
  unrolled_walk<U>(
      total,
      [&](int64_t i) {
        const int64_t row = divide<kNarrow>(i, inner);
        const int64_t c = i - row * inner.d;
        const int64_t o = divide<kNarrow>(row, count);
        const int64_t j = row - o * count.d;
        int64_t at;
        if (!wrap_index(static_cast<int64_t>(indices[j]), axis_dim, at, error, launch)) {
          return U{};
        }
        return data[(o * axis_dim + at) * inner.d + c];
      },
      [&](int64_t i, const U& v) { out[i] = v; });
}

// ---- GatherElements / ScatterElements ------------------------------------------------------

// The indices' dims with the data's strides, adjacent dims merged where the data is laid out
// as one run and dims of one index dropped, so the kernels divide as little as possible.
struct ElementsGeometry {
  int rank = 0;
  int axis = 0;
  int64_t axis_dim = 0;
  Divider dims[kMaxRank];
  int64_t strides[kMaxRank] = {};
};

// Data offset of index element i whose axis coordinate has become `at`.
template <bool kNarrow>
__device__ __forceinline__ int64_t elements_offset(int64_t i, int64_t at,
                                                   const ElementsGeometry& g) {
  int64_t rest = i, offset = 0;
  // Unrolled with a rank test so the geometry is indexed by constants and stays in parameter
  // space rather than a local copy.
#pragma unroll
  for (int d = kMaxRank - 1; d >= 1; --d) {
    if (d < g.rank) {
      const int64_t q = divide<kNarrow>(rest, g.dims[d]);
      offset += (d == g.axis ? at : rest - q * g.dims[d].d) * g.strides[d];
      rest = q;
    }
  }
  return offset + (g.axis == 0 ? at : rest) * g.strides[0];
}

template <typename E, typename Idx, bool kNarrow>
__global__ void gather_elements_kernel(const E* __restrict__ data, const Idx* __restrict__ indices,
                                       E* __restrict__ out, int64_t total, ElementsGeometry g,
                                       DataError* error, int launch) {
  unrolled_walk<E>(
      total,
      [&](int64_t i) {
        int64_t at;
        if (!wrap_index(static_cast<int64_t>(indices[i]), g.axis_dim, at, error, launch)) {
          return E{};
        }
        return data[elements_offset<kNarrow>(i, at, g)];
      },
      [&](int64_t i, const E& v) { out[i] = v; });
}

template <typename E, typename Idx, bool kNarrow, bool kAdd>
__global__ void scatter_elements_kernel(const E* __restrict__ updates,
                                        const Idx* __restrict__ indices, E* __restrict__ out,
                                        int64_t total, ElementsGeometry g, DataError* error,
                                        int launch) {
  unrolled_walk<Placed<E>>(
      total,
      [&](int64_t i) {
        int64_t at;
        if (!wrap_index(static_cast<int64_t>(indices[i]), g.axis_dim, at, error, launch)) {
          return Placed<E>{-1, E{}};
        }
        return Placed<E>{elements_offset<kNarrow>(i, at, g), updates[i]};
      },
      [&](int64_t, const Placed<E>& p) {
        if (p.offset >= 0) scatter_one<kAdd>(out + p.offset, p.value);
      });
}

// ---- GatherND / ScatterND ------------------------------------------------------------------

// Index tuples of k entries into the data's first k dims; strides in the kernel's units.
struct NdGeometry {
  int k = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  Divider slice;  // units per slice
};

// Unit offset of tuple t's slice, or -1 (reported) when one of its entries is out of range.
template <typename Idx>
__device__ __forceinline__ int64_t tuple_offset(const Idx* __restrict__ indices, int64_t t,
                                                const NdGeometry& g, DataError* error, int launch) {
  const Idx* tuple = indices + t * g.k;
  int64_t offset = 0;
#pragma unroll
  for (int j = 0; j < kMaxRank; ++j) {
    if (j < g.k) {
      int64_t at;
      if (!wrap_index(static_cast<int64_t>(tuple[j]), g.dims[j], at, error, launch)) return -1;
      offset += at * g.strides[j];
    }
  }
  return offset;
}

template <typename U, typename Idx, bool kNarrow>
__global__ void gather_nd_kernel(const U* __restrict__ data, const Idx* __restrict__ indices,
                                 U* __restrict__ out, int64_t total, NdGeometry g, DataError* error,
                                 int launch) {
  unrolled_walk<U>(
      total,
      [&](int64_t i) {
        const int64_t t = divide<kNarrow>(i, g.slice);
        const int64_t offset = tuple_offset(indices, t, g, error, launch);
        return offset < 0 ? U{} : data[offset + (i - t * g.slice.d)];
      },
      [&](int64_t i, const U& v) { out[i] = v; });
}

template <typename E, typename Idx, bool kNarrow, bool kAdd>
__global__ void scatter_nd_kernel(const E* __restrict__ updates, const Idx* __restrict__ indices,
                                  E* __restrict__ out, int64_t total, NdGeometry g,
                                  DataError* error, int launch) {
  unrolled_walk<Placed<E>>(
      total,
      [&](int64_t i) {
        const int64_t t = divide<kNarrow>(i, g.slice);
        const int64_t offset = tuple_offset(indices, t, g, error, launch);
        if (offset < 0) return Placed<E>{-1, E{}};
        return Placed<E>{offset + (i - t * g.slice.d), updates[i]};
      },
      [&](int64_t, const Placed<E>& p) {
        if (p.offset >= 0) scatter_one<kAdd>(out + p.offset, p.value);
      });
}

// ---- MaxPool / AveragePool -----------------------------------------------------------------

// These kernels are bound by instruction issue, not memory, and a 64-bit product takes three
// instructions: narrow launches (every flat index and offset below 2^31) do their coordinate
// arithmetic in 32 bits.
template <bool kNarrow>
using Index = std::conditional_t<kNarrow, int32_t, int64_t>;

// Three spatial dims, fewer padded in front with dims of one (one position, one tap), which
// keeps row-major order and flat offsets unchanged.
struct PoolGeometry {
  Divider out[3];
  int64_t in[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1};
  int64_t dilation[3] = {1, 1, 1}, pad_begin[3] = {}, pad_end[3] = {};
  int64_t plane = 1;  // input elements per (n, c)
  bool count_include_pad = false;
};

template <typename I>
__device__ __forceinline__ I ceil_div(I a, I b) {
  if (b == 1) return a;
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// The kernel offsets k in [0, kernel) whose position start + k * dilation lies in [low, high),
// as the CPU kernel's kernel_range.
template <typename I>
struct Range {
  I begin, end;
};
template <typename I>
__device__ __forceinline__ Range<I> kernel_range(I start, I kernel, I dilation, I low, I high) {
  const I begin = min(max(ceil_div(low - start, dilation), I{0}), kernel);
  const I end = min(max(ceil_div(high - start, dilation), I{0}), kernel);
  return {begin, max(begin, end)};
}

template <typename T, bool kNarrow, bool kMax>
__global__ void pool_kernel(const T* __restrict__ x, T* __restrict__ y,
                            int64_t* __restrict__ indices, int64_t total, PoolGeometry g) {
  using A = Acc<T>;
  using I = Index<kNarrow>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    I rest = static_cast<I>(i), start[3];
    Range<I> valid[3];
    I count = 1;
#pragma unroll
    for (int d = 2; d >= 0; --d) {
      const I q = static_cast<I>(divide<kNarrow>(rest, g.out[d]));
      const I o = rest - q * static_cast<I>(g.out[d].d);
      rest = q;
      const I kernel = static_cast<I>(g.kernel[d]), dilation = static_cast<I>(g.dilation[d]);
      start[d] = o * static_cast<I>(g.stride[d]) - static_cast<I>(g.pad_begin[d]);
      valid[d] = kernel_range<I>(start[d], kernel, dilation, 0, static_cast<I>(g.in[d]));
      if constexpr (!kMax) {
        if (g.count_include_pad) {
          const Range<I> padded =
              kernel_range<I>(start[d], kernel, dilation, static_cast<I>(-g.pad_begin[d]),
                              static_cast<I>(g.in[d] + g.pad_end[d]));
          count *= padded.end - padded.begin;
        } else {
          count *= valid[d].end - valid[d].begin;
        }
      }
    }
    const I plane = rest * static_cast<I>(g.plane);
    const T* in = x + plane;
    // Taps in row-major kernel order, as the CPU kernel visits them: MaxPool ties keep the
    // first. NaN never wins against a number; a window without taps gives -inf and index -1.
    A best = negative_infinity<A>(), sum = 0;
    I best_offset = -1;
    for (I k0 = valid[0].begin; k0 < valid[0].end; ++k0) {
      const I row0 =
          (start[0] + k0 * static_cast<I>(g.dilation[0])) * static_cast<I>(g.in[1]) + start[1];
      for (I k1 = valid[1].begin; k1 < valid[1].end; ++k1) {
        const I row1 =
            (row0 + k1 * static_cast<I>(g.dilation[1])) * static_cast<I>(g.in[2]) + start[2];
        for (I k2 = valid[2].begin; k2 < valid[2].end; ++k2) {
          const I offset = row1 + k2 * static_cast<I>(g.dilation[2]);
          const A v = to_acc(in[offset]);
          if constexpr (kMax) {
            if (best_offset < 0 || v > best || (isnan(best) && !isnan(v))) {
              best = v;
              best_offset = offset;
            }
          } else {
            sum += v;
          }
        }
      }
    }
    if constexpr (kMax) {
      store(y + i, best);
      if (indices != nullptr) {
        indices[i] = best_offset < 0 ? -1 : static_cast<int64_t>(plane) + best_offset;
      }
    } else {
      store(y + i, count > 0 ? sum / static_cast<A>(count) : quiet_nan<A>());
    }
  }
}

// MaxPoolGrad: one thread per input element gathers the gradient of every window whose
// maximum it is, found by the same scan as pool_kernel's, windows in row-major output order
// (the order the CPU kernel adds them in): deterministic, no atomics.
template <typename T>
__device__ __forceinline__ int64_t window_maximum(const T* in, const int64_t (&o)[3],
                                                  const PoolGeometry& g) {
  int64_t start[3];
  Range<int64_t> valid[3];
#pragma unroll
  for (int d = 0; d < 3; ++d) {
    start[d] = o[d] * g.stride[d] - g.pad_begin[d];
    valid[d] = kernel_range<int64_t>(start[d], g.kernel[d], g.dilation[d], 0, g.in[d]);
  }
  Acc<T> best = negative_infinity<Acc<T>>();
  int64_t best_offset = -1;
  for (int64_t k0 = valid[0].begin; k0 < valid[0].end; ++k0) {
    const int64_t row0 = (start[0] + k0 * g.dilation[0]) * g.in[1] + start[1];
    for (int64_t k1 = valid[1].begin; k1 < valid[1].end; ++k1) {
      const int64_t row1 = (row0 + k1 * g.dilation[1]) * g.in[2] + start[2];
      for (int64_t k2 = valid[2].begin; k2 < valid[2].end; ++k2) {
        const int64_t offset = row1 + k2 * g.dilation[2];
        const Acc<T> v = to_acc(in[offset]);
        if (best_offset < 0 || v > best || (isnan(best) && !isnan(v))) {
          best = v;
          best_offset = offset;
        }
      }
    }
  }
  return best_offset;
}

template <typename T>
__global__ void max_pool_grad_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                     T* __restrict__ dx, int64_t total, PoolGeometry g) {
  int64_t outputs = 1;
#pragma unroll
  for (int d = 0; d < 3; ++d) outputs *= g.out[d].d;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t plane = i / g.plane, offset = i - plane * g.plane;
    int64_t at[3], rest = offset;
#pragma unroll
    for (int d = 2; d >= 0; --d) {
      at[d] = rest % g.in[d];
      rest /= g.in[d];
    }
    const T* in = x + plane * g.plane;
    const T* grad = dy + plane * outputs;
    Acc<T> sum = 0;
    // Windows holding this element, in increasing output order: kernel taps from the last.
    int64_t o[3];
    for (int64_t k0 = g.kernel[0] - 1; k0 >= 0; --k0) {
      const int64_t p0 = at[0] + g.pad_begin[0] - k0 * g.dilation[0];
      if (p0 < 0 || p0 % g.stride[0] != 0 || (o[0] = p0 / g.stride[0]) >= g.out[0].d) continue;
      for (int64_t k1 = g.kernel[1] - 1; k1 >= 0; --k1) {
        const int64_t p1 = at[1] + g.pad_begin[1] - k1 * g.dilation[1];
        if (p1 < 0 || p1 % g.stride[1] != 0 || (o[1] = p1 / g.stride[1]) >= g.out[1].d) continue;
        for (int64_t k2 = g.kernel[2] - 1; k2 >= 0; --k2) {
          const int64_t p2 = at[2] + g.pad_begin[2] - k2 * g.dilation[2];
          if (p2 < 0 || p2 % g.stride[2] != 0 || (o[2] = p2 / g.stride[2]) >= g.out[2].d) continue;
          if (window_maximum(in, o, g) == offset)
            sum += to_acc(grad[(o[0] * g.out[1].d + o[1]) * g.out[2].d + o[2]]);
        }
      }
    }
    store(dx + i, sum);
  }
}

// ---- Resize --------------------------------------------------------------------------------

// Spatial dims padded in front to three as the pools'; dims before `first` are those pads.
struct ResizeGeometry {
  Divider out[3];
  int64_t in[3] = {1, 1, 1};
  double scale[3] = {1, 1, 1}, resized[3] = {1, 1, 1};
  int first = 0;
  int64_t plane = 1;  // input elements per (n, c)
  int coordinate = 0, nearest = 0;
};

// Up to two input positions along one axis (index and weight), zero weights dropped.
template <typename W, typename I>
struct AxisTaps {
  I index[2];
  W weight[2];
  int count;
};

// The CPU kernel's axis_taps for one output coordinate, in double so the same neighbours and
// rounding choices come out.
template <typename W, typename I>
__device__ __forceinline__ AxisTaps<W, I> axis_taps(I o, int d, const ResizeGeometry& g,
                                                    bool linear) {
  AxisTaps<W, I> taps;
  const I in = static_cast<I>(g.in[d]);
  const double xo = static_cast<double>(o), scale = g.scale[d], resized = g.resized[d];
  double x;
  switch (g.coordinate) {
    case 0:
      x = (xo + 0.5) / scale - 0.5;
      break;
    case 1:
      x = xo / scale;
      break;
    case 2:
      x = resized == 1 ? 0.0 : xo * static_cast<double>(in - 1) / (resized - 1);
      break;
    default:
      x = resized > 1 ? (xo + 0.5) / scale - 0.5 : 0.0;
      break;
  }
  // The left neighbour lies strictly below x unless x is integral; then it is x - 1 and x
  // itself is the right neighbour at ratio 1.
  const double floor_x = floor(x);
  const bool integral = floor_x == x;
  const double ratio = integral ? 1.0 : x - floor_x;
  // Bounded before the conversion (a far-off x is not an integer of I); every neighbour past
  // [-1, in] clamps to the same edge anyway.
  const I left =
      static_cast<I>(fmin(fmax(floor_x, -1.0), static_cast<double>(in))) - (integral ? 1 : 0);
  auto clamp = [in](I v) { return min(max(v, I{0}), in - 1); };
  if (!linear) {
    bool right = true;
    if (!integral) {
      switch (g.nearest) {
        case 0:
          right = ratio > 0.5;
          break;
        case 1:
          right = ratio >= 0.5;
          break;
        case 2:
          right = false;
          break;
        default:
          right = true;
          break;
      }
    }
    taps.index[0] = clamp(right ? left + 1 : left);
    taps.weight[0] = W(1);
    taps.count = 1;
    return taps;
  }
  // Constant subscripts only, so the taps stay in registers.
  const bool has_left = 1 - ratio != 0, has_right = ratio != 0;
  taps.index[0] = clamp(has_left ? left : left + 1);
  taps.weight[0] = static_cast<W>(has_left ? 1 - ratio : ratio);
  taps.index[1] = clamp(left + 1);
  taps.weight[1] = static_cast<W>(ratio);
  taps.count = has_left && has_right ? 2 : 1;
  return taps;
}

// Splits flat output index i into its plane's input offset and its three coordinates.
template <bool kNarrow>
__device__ __forceinline__ Index<kNarrow> resize_coords(int64_t i, const ResizeGeometry& g,
                                                        Index<kNarrow> o[3]) {
  using I = Index<kNarrow>;
  I rest = static_cast<I>(i);
#pragma unroll
  for (int d = 2; d >= 0; --d) {
    const I q = static_cast<I>(divide<kNarrow>(rest, g.out[d]));
    o[d] = rest - q * static_cast<I>(g.out[d].d);
    rest = q;
  }
  return rest * static_cast<I>(g.plane);
}

// Nearest copies the chosen element, so it moves bytes of any dtype.
template <typename E, bool kNarrow>
__global__ void resize_nearest_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t total,
                                      ResizeGeometry g) {
  using I = Index<kNarrow>;
  unrolled_walk<E>(
      total,
      [&](int64_t i) {
        I o[3];
        const I plane = resize_coords<kNarrow>(i, g, o);
        I within = 0;
#pragma unroll
        for (int d = 0; d < 3; ++d) {
          const I at = d < g.first ? 0 : axis_taps<float, I>(o[d], d, g, false).index[0];
          within = within * static_cast<I>(g.in[d]) + at;
        }
        return x[plane + within];
      },
      [&](int64_t i, const E& v) { y[i] = v; });
}

// Inner axes first, as the reference nests its one-dimensional interpolations.
template <typename T, bool kNarrow>
__global__ void resize_linear_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t total,
                                     ResizeGeometry g) {
  using A = Acc<T>;
  using I = Index<kNarrow>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    I o[3];
    const T* in = x + resize_coords<kNarrow>(i, g, o);
    AxisTaps<A, I> taps[3];
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      if (d < g.first) {
        taps[d].index[0] = 0;
        taps[d].weight[0] = A(1);
        taps[d].count = 1;
      } else {
        taps[d] = axis_taps<A, I>(o[d], d, g, true);
      }
    }
    // Unrolled with count tests so the taps stay in registers.
    A sum = 0;
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      if (a >= taps[0].count) continue;
      const I row0 = taps[0].index[a] * static_cast<I>(g.in[1]);
      A sum1 = 0;
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        if (b >= taps[1].count) continue;
        const I row1 = (row0 + taps[1].index[b]) * static_cast<I>(g.in[2]);
        A sum2 = 0;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          if (c < taps[2].count) sum2 += taps[2].weight[c] * to_acc(in[row1 + taps[2].index[c]]);
        }
        sum1 += taps[1].weight[b] * sum2;
      }
      sum += taps[0].weight[a] * sum1;
    }
    store(y + i, sum);
  }
}

// ---- host side -------------------------------------------------------------------------------

template <typename U, typename Idx>
std::string launch_gather(const Resolved& r, Context& ctx, int64_t inner_units) {
  const GatherParams& p = r.launch->gather;
  const int64_t total = p.outer * p.index_count * inner_units;
  const Divider inner = make_divider(inner_units), count = make_divider(p.index_count);
  const auto* data = static_cast<const U*>(r.in[0]);
  const auto* indices = static_cast<const Idx*>(r.in[1]);
  auto* out = static_cast<U*>(r.out[0]);
  if (narrow(total)) {
    launch<gather_kernel<U, Idx, true>>(total, ctx.stream, data, indices, out, total, inner, count,
                                        p.axis_dim, ctx.error, ctx.launch_index);
  } else {
    launch<gather_kernel<U, Idx, false>>(total, ctx.stream, data, indices, out, total, inner, count,
                                         p.axis_dim, ctx.error, ctx.launch_index);
  }
  return check_launch("gather");
}

// Element type by size for byte moves of single elements.
template <typename F>
std::string with_size(int64_t size, F&& f) {
  switch (size) {
    case 8:
      return f(static_cast<unsigned long long>(0));
    case 4:
      return f(uint32_t{});
    case 2:
      return f(uint16_t{});
    default:
      return f(uint8_t{});
  }
}

// Builds the merged geometry; "" or what is wrong with the params.
std::string elements_geometry(const ElementsParams& p, ElementsGeometry& g, int64_t& count,
                              int64_t& data_count) {
  if (p.rank < 1 || p.rank > kMaxRank) return "rank out of range";
  if (p.axis < 0 || p.axis >= p.rank) return "axis out of range";
  int64_t strides[kMaxRank];
  data_count = 1;
  count = 1;
  for (int d = p.rank - 1; d >= 0; --d) {
    if (p.data_dims[d] < 0 || p.index_dims[d] < 0) return "negative dims";
    if (d != p.axis && p.index_dims[d] > p.data_dims[d]) return "index dims exceed data dims";
    strides[d] = data_count;
    data_count *= p.data_dims[d];
    count *= p.index_dims[d];
  }
  g = ElementsGeometry{};
  g.axis_dim = p.data_dims[p.axis];
  int64_t dims[kMaxRank];
  bool is_axis[kMaxRank];
  int rank = 0;
  for (int d = 0; d < p.rank; ++d) {
    const int64_t dim = p.index_dims[d];
    const bool axis = d == p.axis;
    if (!axis && dim == 1) continue;  // coordinate always 0: no offset
    // Coordinates (c, c') of the previous kept dim and this one are one coordinate
    // c * dim + c' when the previous dim's stride is dim strides of this one.
    if (!axis && rank > 0 && !is_axis[rank - 1] && g.strides[rank - 1] == dim * strides[d]) {
      dims[rank - 1] *= dim;
      g.strides[rank - 1] = strides[d];
      continue;
    }
    dims[rank] = dim;
    is_axis[rank] = axis;
    g.strides[rank] = strides[d];
    if (axis) g.axis = rank;
    ++rank;
  }
  g.rank = rank;
  for (int d = 0; d < rank; ++d) g.dims[d] = make_divider(dims[d]);
  return "";
}

template <typename E, typename Idx, bool kAdd>
std::string launch_scatter_elements(const Resolved& r, Context& ctx, const ElementsGeometry& g,
                                    int64_t total) {
  const auto* updates = static_cast<const E*>(r.in[2]);
  const auto* indices = static_cast<const Idx*>(r.in[1]);
  auto* out = static_cast<E*>(r.out[0]);
  if (narrow(total)) {
    launch<scatter_elements_kernel<E, Idx, true, kAdd>>(total, ctx.stream, updates, indices, out,
                                                        total, g, ctx.error, ctx.launch_index);
  } else {
    launch<scatter_elements_kernel<E, Idx, false, kAdd>>(total, ctx.stream, updates, indices, out,
                                                         total, g, ctx.error, ctx.launch_index);
  }
  return check_launch("scatter_elements");
}

// ---- ScatterND adding into few rows --------------------------------------------------------

// Updates added into a few rows (an embedding of two token types, one row per class) meet on
// the same addresses over and over, and atomics to one address run one at a time. Each block
// here sums a tile of columns over a share of the index tuples per row in shared memory, then
// adds each row's sum once: rows · columns · shares atomics instead of one per update.
constexpr int kFewRows = 32;
constexpr int kFewRowsBlock = 128;

template <typename E>
using SumOf =
    std::conditional_t<std::is_same_v<E, __half> || std::is_same_v<E, __nv_bfloat16>, float, E>;

template <typename S, typename E>
__device__ __forceinline__ S to_sum(E v) {
  if constexpr (std::is_same_v<E, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

template <typename E, typename S>
__device__ __forceinline__ E from_sum(S v) {
  if constexpr (std::is_same_v<E, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

template <typename E, typename Idx>
__global__ void __launch_bounds__(kFewRowsBlock)
    scatter_add_few_rows(const E* __restrict__ updates, const Idx* __restrict__ indices,
                         E* __restrict__ out, int64_t tuples, int64_t rows, int64_t width,
                         int64_t per_share, DataError* error, int launch) {
  using S = SumOf<E>;
  __shared__ S sums[kFewRows][kFewRowsBlock];
  const int64_t c = int64_t{blockIdx.x} * kFewRowsBlock + threadIdx.x;
  const int64_t t0 = int64_t{blockIdx.y} * per_share;
  const int64_t t1 = t0 + per_share < tuples ? t0 + per_share : tuples;
  for (int64_t row = 0; row < rows; ++row) sums[row][threadIdx.x] = S{};
  for (int64_t t = t0; t < t1; ++t) {
    int64_t at;
    // One thread reports a bad index; the others skip the tuple as well.
    if (!wrap_index(static_cast<int64_t>(indices[t]), rows, at, threadIdx.x == 0 ? error : nullptr,
                    launch)) {
      continue;
    }
    if (c < width) sums[at][threadIdx.x] += to_sum<S>(updates[t * width + c]);
  }
  if (c >= width) return;
  for (int64_t row = 0; row < rows; ++row) {
    const S s = sums[row][threadIdx.x];
    if (s != S{}) atomic_add(out + row * width + c, from_sum<E>(s));
  }
}

// Worth it where many tuples meet on few rows: at least 64 tuples per row.
bool few_rows(const NdParams& p) {
  return p.reduction == 1 && p.k == 1 && p.data_dims[0] >= 1 && p.data_dims[0] <= kFewRows &&
         p.index_count >= 64 * p.data_dims[0] && p.slice >= 1;
}

template <typename E, typename Idx>
std::string launch_scatter_add_few_rows(const Resolved& r, Context& ctx, const NdParams& p) {
  const int64_t tiles = (p.slice + kFewRowsBlock - 1) / kFewRowsBlock;
  // About four blocks per multiprocessor in all, each share at least 16 tuples.
  int64_t shares = (int64_t{4} * sm_count() + tiles - 1) / tiles;
  shares = std::max<int64_t>(1, std::min<int64_t>({shares, (p.index_count + 15) / 16, 65535}));
  const int64_t per_share = (p.index_count + shares - 1) / shares;
  shares = (p.index_count + per_share - 1) / per_share;
  if (tiles > INT_MAX) return "scatter_nd: too many columns";
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(shares));
  scatter_add_few_rows<E, Idx><<<grid, kFewRowsBlock, 0, ctx.stream>>>(
      static_cast<const E*>(r.in[2]), static_cast<const Idx*>(r.in[1]), static_cast<E*>(r.out[0]),
      p.index_count, p.data_dims[0], p.slice, per_share, ctx.error, ctx.launch_index);
  return check_launch("scatter_add_few_rows");
}

template <typename E, typename Idx, bool kAdd>
std::string launch_scatter_nd(const Resolved& r, Context& ctx, const NdGeometry& g, int64_t total) {
  const auto* updates = static_cast<const E*>(r.in[2]);
  const auto* indices = static_cast<const Idx*>(r.in[1]);
  auto* out = static_cast<E*>(r.out[0]);
  if (narrow(total)) {
    launch<scatter_nd_kernel<E, Idx, true, kAdd>>(total, ctx.stream, updates, indices, out, total,
                                                  g, ctx.error, ctx.launch_index);
  } else {
    launch<scatter_nd_kernel<E, Idx, false, kAdd>>(total, ctx.stream, updates, indices, out, total,
                                                   g, ctx.error, ctx.launch_index);
  }
  return check_launch("scatter_nd");
}

std::string check_tensors(const Resolved& r, size_t inputs, const char* kernel) {
  if (r.launch == nullptr) return std::string(kernel) + ": no launch";
  if (r.launch->in.size() < inputs || r.launch->out.empty()) {
    return std::string(kernel) + ": expected " + std::to_string(inputs) + " inputs and an output";
  }
  return "";
}

}  // namespace

std::string enqueue_gather(const Resolved& r, Context& ctx) {
  if (std::string why = check_tensors(r, 2, "gather"); !why.empty()) return why;
  const GatherParams& p = r.launch->gather;
  if (p.outer < 0 || p.axis_dim < 0 || p.inner < 0 || p.index_count < 0) {
    return "gather: negative dims";
  }
  const int64_t row_bytes = p.inner * dt_size(r.launch->in[0].ref.dt);
  if (p.outer == 0 || p.index_count == 0 || row_bytes == 0) return "";
  if (r.in[0] == nullptr || r.in[1] == nullptr || r.out[0] == nullptr) return missing("gather");
  const int unit = unit_bytes(row_bytes, {r.in[0], r.out[0]});
  return with_unit(unit, [&](auto u) {
    return with_index(r.launch->in[1].ref.dt, "gather", [&](auto ix) {
      return launch_gather<decltype(u), decltype(ix)>(r, ctx, row_bytes / unit);
    });
  });
}

std::string enqueue_elements(const Resolved& r, Context& ctx) {
  const bool scatter = r.launch != nullptr && r.launch->kind == Kind::kScatterElements;
  const char* kernel = scatter ? "scatter_elements" : "gather_elements";
  if (std::string why = check_tensors(r, scatter ? 3 : 2, kernel); !why.empty()) return why;
  const ElementsParams& p = r.launch->elements;
  ElementsGeometry g;
  int64_t total = 0, data_count = 0;
  if (std::string why = elements_geometry(p, g, total, data_count); !why.empty()) {
    return std::string(kernel) + ": " + why;
  }
  const Dt dt = r.launch->in[0].ref.dt;
  const int64_t size = dt_size(dt);
  if (scatter) {
    if (p.reduction != 0 && p.reduction != 1) {
      return "scatter_elements: only reductions none and add are supported";
    }
    if ((data_count > 0 && (r.in[0] == nullptr || r.out[0] == nullptr)) ||
        (total > 0 && (r.in[1] == nullptr || r.in[2] == nullptr))) {
      return missing(kernel);
    }
    if (std::string why = copy_data(r, ctx, data_count * size, kernel); !why.empty()) return why;
    if (total == 0) return "";
    return with_index(r.launch->in[1].ref.dt, kernel, [&](auto ix) {
      using Idx = decltype(ix);
      if (p.reduction == 1) {
        return with_addable(dt, kernel, [&](auto e) {
          return launch_scatter_elements<decltype(e), Idx, true>(r, ctx, g, total);
        });
      }
      return with_size(size, [&](auto e) {
        return launch_scatter_elements<decltype(e), Idx, false>(r, ctx, g, total);
      });
    });
  }
  if (total == 0) return "";
  if (r.in[0] == nullptr || r.in[1] == nullptr || r.out[0] == nullptr) return missing(kernel);
  return with_index(r.launch->in[1].ref.dt, kernel, [&](auto ix) {
    using Idx = decltype(ix);
    return with_size(size, [&](auto e) {
      using E = decltype(e);
      const auto* data = static_cast<const E*>(r.in[0]);
      const auto* indices = static_cast<const Idx*>(r.in[1]);
      auto* out = static_cast<E*>(r.out[0]);
      if (narrow(total)) {
        launch<gather_elements_kernel<E, Idx, true>>(total, ctx.stream, data, indices, out, total,
                                                     g, ctx.error, ctx.launch_index);
      } else {
        launch<gather_elements_kernel<E, Idx, false>>(total, ctx.stream, data, indices, out, total,
                                                      g, ctx.error, ctx.launch_index);
      }
      return check_launch("gather_elements");
    });
  });
}

std::string enqueue_nd(const Resolved& r, Context& ctx) {
  const bool scatter = r.launch != nullptr && r.launch->kind == Kind::kScatterND;
  const char* kernel = scatter ? "scatter_nd" : "gather_nd";
  if (std::string why = check_tensors(r, scatter ? 3 : 2, kernel); !why.empty()) return why;
  const NdParams& p = r.launch->nd;
  if (p.k < 0 || p.k > kMaxRank) return std::string(kernel) + ": k out of range";
  if (p.index_count < 0 || p.slice < 0) return std::string(kernel) + ": negative dims";
  if (scatter && p.reduction != 0 && p.reduction != 1) {
    return "scatter_nd: only reductions none and add are supported";
  }
  const Dt dt = r.launch->in[0].ref.dt;
  const int64_t size = dt_size(dt);
  // Strides of the first k dims in elements: each is a multiple of the slice.
  int64_t strides[kMaxRank] = {};
  int64_t data_count = p.slice;
  for (int j = p.k - 1; j >= 0; --j) {
    if (p.data_dims[j] < 0) return std::string(kernel) + ": negative dims";
    strides[j] = data_count;
    data_count *= p.data_dims[j];
  }
  const int64_t slice_bytes = p.slice * size;
  NdGeometry g;
  g.k = p.k;
  for (int j = 0; j < p.k; ++j) g.dims[j] = p.data_dims[j];
  if (scatter) {
    if (data_count > 0 && (r.in[0] == nullptr || r.out[0] == nullptr)) return missing(kernel);
    if (std::string why = copy_data(r, ctx, data_count * size, kernel); !why.empty()) return why;
    // No index entries means no tuples, as the CPU kernel counts them.
    if (p.k == 0 || p.index_count == 0 || slice_bytes == 0) return "";
    if (r.in[1] == nullptr || r.in[2] == nullptr) return missing(kernel);
    return with_index(r.launch->in[1].ref.dt, kernel, [&](auto ix) {
      using Idx = decltype(ix);
      if (p.reduction == 1) {
        for (int j = 0; j < p.k; ++j) g.strides[j] = strides[j];
        g.slice = make_divider(p.slice);
        return with_addable(dt, kernel, [&](auto e) {
          if (few_rows(p)) return launch_scatter_add_few_rows<decltype(e), Idx>(r, ctx, p);
          return launch_scatter_nd<decltype(e), Idx, true>(r, ctx, g, p.index_count * p.slice);
        });
      }
      const int unit = unit_bytes(slice_bytes, {r.in[2], r.out[0]});
      const int64_t slice_units = slice_bytes / unit;
      for (int j = 0; j < p.k; ++j) g.strides[j] = strides[j] / p.slice * slice_units;
      g.slice = make_divider(slice_units);
      return with_unit(unit, [&](auto u) {
        return launch_scatter_nd<decltype(u), Idx, false>(r, ctx, g, p.index_count * slice_units);
      });
    });
  }
  if (p.index_count == 0 || slice_bytes == 0) return "";
  if (r.in[0] == nullptr || r.in[1] == nullptr || r.out[0] == nullptr) return missing(kernel);
  const int unit = unit_bytes(slice_bytes, {r.in[0], r.out[0]});
  const int64_t slice_units = slice_bytes / unit;
  for (int j = 0; j < p.k; ++j) g.strides[j] = strides[j] / p.slice * slice_units;
  g.slice = make_divider(slice_units);
  const int64_t total = p.index_count * slice_units;
  return with_unit(unit, [&](auto u) {
    using U = decltype(u);
    return with_index(r.launch->in[1].ref.dt, kernel, [&](auto ix) {
      using Idx = decltype(ix);
      const auto* data = static_cast<const U*>(r.in[0]);
      const auto* indices = static_cast<const Idx*>(r.in[1]);
      auto* out = static_cast<U*>(r.out[0]);
      if (narrow(total)) {
        launch<gather_nd_kernel<U, Idx, true>>(total, ctx.stream, data, indices, out, total, g,
                                               ctx.error, ctx.launch_index);
      } else {
        launch<gather_nd_kernel<U, Idx, false>>(total, ctx.stream, data, indices, out, total, g,
                                                ctx.error, ctx.launch_index);
      }
      return check_launch("gather_nd");
    });
  });
}

std::string enqueue_pool(const Resolved& r, Context& ctx) {
  if (std::string why = check_tensors(r, 1, "pool"); !why.empty()) return why;
  const PoolParams& p = r.launch->pool;
  if (p.spatial < 1 || p.spatial > 3) return "pool: 1 to 3 spatial dims";
  if (p.n < 0 || p.c < 0) return "pool: negative dims";
  PoolGeometry g;
  g.count_include_pad = p.count_include_pad;
  int64_t total = p.n * p.c, volume = 1;
  // 32-bit coordinates need every intermediate of the window arithmetic below 2^31.
  bool small = true;
  for (int s = 0; s < p.spatial; ++s) {
    const int d = 3 - p.spatial + s;
    if (p.in[s] < 0 || p.out[s] < 0 || p.kernel[s] < 1 || p.stride[s] < 1 || p.dilation[s] < 1) {
      return "pool: bad window";
    }
    g.out[d] = make_divider(p.out[s]);
    g.in[d] = p.in[s];
    g.kernel[d] = p.kernel[s];
    g.stride[d] = p.stride[s];
    g.dilation[d] = p.dilation[s];
    g.pad_begin[d] = p.pad_begin[s];
    g.pad_end[d] = p.pad_end[s];
    g.plane *= p.in[s];
    total *= p.out[s];
    volume *= p.kernel[s];
    small = small && p.in[s] + p.out[s] * p.stride[s] + p.kernel[s] * p.dilation[s] +
                             std::abs(p.pad_begin[s]) + std::abs(p.pad_end[s]) <
                         (int64_t{1} << 30);
  }
  if (p.grad) {
    // in: dY, X; out: dX, one thread per element of X.
    if (r.launch->in.size() < 2 || r.in[0] == nullptr || r.in[1] == nullptr || r.out[0] == nullptr)
      return missing("max_pool_grad");
    const int64_t elements = p.n * p.c * g.plane;
    if (elements == 0) return "";
    return with_float_type(r.launch->in[1].ref.dt, "max_pool_grad", [&](auto zero) {
      using T = decltype(zero);
      launch<max_pool_grad_kernel<T>>(elements, ctx.stream, static_cast<const T*>(r.in[0]),
                                      static_cast<const T*>(r.in[1]), static_cast<T*>(r.out[0]),
                                      elements, g);
      return check_launch("max_pool_grad");
    });
  }
  if (total == 0) return "";
  small = small && narrow(total) && volume < (int64_t{1} << 30) &&
          p.n * p.c * g.plane < (int64_t{1} << 30);
  const bool with_indices = p.max && r.launch->out.size() > 1 && r.out[1] != nullptr;
  if (r.in[0] == nullptr || r.out[0] == nullptr) return missing("pool");
  return with_float_type(r.launch->in[0].ref.dt, "pool", [&](auto zero) {
    using T = decltype(zero);
    const auto* x = static_cast<const T*>(r.in[0]);
    auto* y = static_cast<T*>(r.out[0]);
    auto* indices = with_indices ? static_cast<int64_t*>(r.out[1]) : nullptr;
    if (p.max) {
      if (small) {
        launch<pool_kernel<T, true, true>>(total, ctx.stream, x, y, indices, total, g);
      } else {
        launch<pool_kernel<T, false, true>>(total, ctx.stream, x, y, indices, total, g);
      }
      return check_launch("max_pool");
    }
    if (small) {
      launch<pool_kernel<T, true, false>>(total, ctx.stream, x, y, nullptr, total, g);
    } else {
      launch<pool_kernel<T, false, false>>(total, ctx.stream, x, y, nullptr, total, g);
    }
    return check_launch("average_pool");
  });
}

std::string enqueue_resize(const Resolved& r, Context& ctx) {
  if (std::string why = check_tensors(r, 1, "resize"); !why.empty()) return why;
  const ResizeParams& p = r.launch->resize;
  if (p.spatial < 1 || p.spatial > 3) return "resize: 1 to 3 spatial dims";
  if (p.mode != 0 && p.mode != 1) return "resize: mode must be nearest or linear";
  if (p.coordinate < 0 || p.coordinate > 3) return "resize: unknown coordinate transformation";
  if (p.nearest_mode < 0 || p.nearest_mode > 3) return "resize: unknown nearest mode";
  if (p.outer < 0) return "resize: negative dims";
  ResizeGeometry g;
  g.first = 3 - p.spatial;
  g.coordinate = p.coordinate;
  g.nearest = p.nearest_mode;
  int64_t total = p.outer;
  for (int s = 0; s < p.spatial; ++s) {
    const int d = g.first + s;
    if (p.in[s] < 0 || p.out[s] < 0) return "resize: negative dims";
    if (p.in[s] == 0 && p.out[s] > 0) return "resize: cannot resize a dim of size 0";
    g.out[d] = make_divider(p.out[s]);
    g.in[d] = p.in[s];
    g.scale[d] = p.scale[s];
    // The CPU kernel divides by the output length: the size when sizes were given, scale *
    // input when scales were. Params carry only the scale, so a product within rounding of
    // the output size is taken as that size (scales from a float32 never land that close
    // to an integer without being one).
    const double resized = p.scale[s] * static_cast<double>(p.in[s]);
    const double size = static_cast<double>(p.out[s]);
    g.resized[d] = resized != size && fabs(resized - size) <= 4 * 2.220446049250313e-16 * size
                       ? size
                       : resized;
    g.plane *= p.in[s];
    total *= p.out[s];
  }
  if (total == 0) return "";
  if (r.in[0] == nullptr || r.out[0] == nullptr) return missing("resize");
  const bool small = narrow(total) && narrow(p.outer * g.plane);
  const Dt dt = r.launch->in[0].ref.dt;
  if (p.mode == 0) {
    return with_size(dt_size(dt), [&](auto e) {
      using E = decltype(e);
      const auto* x = static_cast<const E*>(r.in[0]);
      auto* y = static_cast<E*>(r.out[0]);
      if (small) {
        launch<resize_nearest_kernel<E, true>>(total, ctx.stream, x, y, total, g);
      } else {
        launch<resize_nearest_kernel<E, false>>(total, ctx.stream, x, y, total, g);
      }
      return check_launch("resize_nearest");
    });
  }
  return with_float_type(dt, "resize", [&](auto zero) {
    using T = decltype(zero);
    const auto* x = static_cast<const T*>(r.in[0]);
    auto* y = static_cast<T*>(r.out[0]);
    if (small) {
      launch<resize_linear_kernel<T, true>>(total, ctx.stream, x, y, total, g);
    } else {
      launch<resize_linear_kernel<T, false>>(total, ctx.stream, x, y, total, g);
    }
    return check_launch("resize_linear");
  });
}

}  // namespace autopar::cuda
