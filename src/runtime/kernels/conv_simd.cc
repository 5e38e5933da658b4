// AVX-512 convolution kernels (see conv_simd.h). Every function that uses the instructions
// carries the target attribute, so the file builds for any x86-64 and runs them only where
// cpu_has_avx512() says so.
#include "conv_simd.h"

#include "activation.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AUTOPAR_X86_SIMD 1
#include <immintrin.h>
#endif

namespace autopar::runtime {

#if AUTOPAR_X86_SIMD

#define AUTOPAR_AVX512 __attribute__((target("avx512f,fma")))

bool cpu_has_avx512() {
  static const bool has = [] {
    const char* choice = std::getenv("AUTOPAR_CPU_KERNELS");
    if (choice && std::strcmp(choice, "generic") == 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

namespace {

constexpr int kLanes = 16;
// Rows of w per block of the matrix product: 12 rows × 2 vectors of columns are 24 of the 32
// vector registers, leaving room for the two column vectors and the broadcast weight.
constexpr int kGemmRows = 12;

// The lanes t of a 16-lane load at column `start` with 0 <= start + t < limit.
inline __mmask16 range_mask(int64_t start, int64_t limit) {
  const int64_t lo = std::min<int64_t>(std::max<int64_t>(-start, 0), kLanes);
  const int64_t hi = std::min<int64_t>(std::max<int64_t>(limit - start, 0), kLanes);
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// The lanes below n (none for n <= 0).
inline __mmask16 first_lanes(int64_t n) {
  if (n <= 0) return 0;
  return static_cast<__mmask16>(n >= kLanes ? 0xffff : (1u << n) - 1);
}

// The activations with the formulas of activation.h, operation for operation: products and
// sums through the rounding intrinsics, which are never contracted into a fused multiply-add,
// and max(c, x) / min(c, x) as std::max(x, c) / std::min(x, c) (x kept when it is NaN). The
// masked forms with every lane set name their pass-through operand, unlike the plain ones.
constexpr __mmask16 kAll = 0xffff;
constexpr int kRound = _MM_FROUND_CUR_DIRECTION;
AUTOPAR_AVX512 inline __m512 mul(__m512 a, __m512 b) {
  return _mm512_mask_mul_round_ps(a, kAll, a, b, kRound);
}
AUTOPAR_AVX512 inline __m512 add(__m512 a, __m512 b) {
  return _mm512_mask_add_round_ps(a, kAll, a, b, kRound);
}
AUTOPAR_AVX512 inline __m512 max(__m512 a, __m512 b) { return _mm512_mask_max_ps(a, kAll, a, b); }
AUTOPAR_AVX512 inline __m512 min(__m512 a, __m512 b) { return _mm512_mask_min_ps(a, kAll, a, b); }

AUTOPAR_AVX512 inline __m512 activated(const Activation& a, __m512 x) {
  const __m512 alpha = _mm512_set1_ps(static_cast<float>(a.alpha));
  const __m512 beta = _mm512_set1_ps(static_cast<float>(a.beta));
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  switch (a.kind) {
    case Activation::Kind::kRelu:
      return max(zero, x);
    case Activation::Kind::kLeakyRelu:
      return _mm512_mask_mul_round_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), alpha, x, kRound);
    case Activation::Kind::kClip:
      return min(beta, max(alpha, x));
    case Activation::Kind::kHardSigmoid:
      return min(one, max(zero, add(mul(alpha, x), beta)));
    case Activation::Kind::kHardSwish: {
      const __m512 sixth = _mm512_set1_ps(1.0f / 6.0f), half = _mm512_set1_ps(0.5f);
      return mul(x, min(one, max(zero, add(mul(x, sixth), half))));
    }
  }
  return x;
}

AUTOPAR_AVX512 void activate(const Activation& a, float* data, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 mask = first_lanes(n - i);
    _mm512_mask_storeu_ps(data + i, mask, activated(a, _mm512_maskz_loadu_ps(mask, data + i)));
  }
}

// What every kernel does to its sums before storing them: the bias added, then the activation.
AUTOPAR_AVX512 inline __m512 finished(__m512 sum, const float* bias, const Activation* act) {
  if (bias) sum = _mm512_add_ps(sum, _mm512_set1_ps(*bias));
  return act ? activated(*act, sum) : sum;
}

// y[i, 0:cols) for MR rows, cols <= 16·NV.
template <int MR, int NV>
AUTOPAR_AVX512 void gemm_block(const float* w, int64_t ldw, int64_t depth, const float* x,
                               int64_t ldx, int64_t cols, const float* bias, const Activation* act,
                               float* y, int64_t ldy) {
  __mmask16 mask[NV];
#pragma GCC unroll 2
  for (int v = 0; v < NV; ++v) mask[v] = first_lanes(cols - v * kLanes);
  __m512 acc[MR][NV];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < depth; ++k) {
    const float* row = x + k * ldx;
    __m512 b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) b[v] = _mm512_maskz_loadu_ps(mask[v], row + v * kLanes);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(w[i * ldw + k]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(a, b[v], acc[i][v]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      _mm512_mask_storeu_ps(y + i * ldy + v * kLanes, mask[v],
                            finished(acc[i][v], bias ? bias + i : nullptr, act));
    }
  }
}

using GemmBlock = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                           const float*, const Activation*, float*, int64_t);

template <size_t... I>
constexpr std::array<std::array<GemmBlock, 2>, sizeof...(I)> gemm_blocks(
    std::index_sequence<I...>) {
  return {{{&gemm_block<I + 1, 1>, &gemm_block<I + 1, 2>}...}};
}
constexpr auto kGemmBlocks = gemm_blocks(std::make_index_sequence<kGemmRows>());

// The widest kernel the depthwise kernel takes: its per-column masks live in arrays.
constexpr int64_t kMaxDepthwiseWidth = 16;

// Output rows [oy, oy + R) of one depthwise channel under horizontal stride S, for a kernel
// KW wide (0: s.kw, read at run time).
template <int R, int S, int KW>
AUTOPAR_AVX512 void depthwise_rows(const DepthwiseShape& s, const float* in, const float* taps,
                                   const float* bias, const Activation* act, int64_t oy,
                                   float* out) {
  const int64_t kw = KW > 0 ? KW : s.kw;
  // Under stride 2 the even lanes of two consecutive loads are the 16 inputs of one vector.
  const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  int64_t starts[kMaxDepthwiseWidth];
  __mmask16 low[kMaxDepthwiseWidth], high[kMaxDepthwiseWidth];
  for (int64_t ox = 0; ox < s.ow; ox += kLanes) {
    // Per kernel column: the input column of lane 0, and the lanes inside the row (the others
    // are masked: neither read nor faulted on).
    for (int64_t kx = 0; kx < kw; ++kx) {
      starts[kx] = ox * S + kx * s.dx - s.px;
      low[kx] = range_mask(starts[kx], s.iw);
      high[kx] = S == 2 ? range_mask(starts[kx] + kLanes, s.iw) : 0;
    }
    __m512 acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t ky = 0; ky < s.kh; ++ky) {
      const float* tap = taps + ky * kw;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int64_t iy = (oy + r) * s.sy + ky * s.dy - s.py;
        if (iy < 0 || iy >= s.ih) continue;
        const float* row = in + iy * s.iw;
#pragma GCC unroll 8
        for (int64_t kx = 0; kx < kw; ++kx) {
          __m512 v = _mm512_maskz_loadu_ps(low[kx], row + starts[kx]);
          if constexpr (S == 2) {
            v = _mm512_permutex2var_ps(v, evens,
                                       _mm512_maskz_loadu_ps(high[kx], row + starts[kx] + kLanes));
          }
          acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(tap[kx]), v, acc[r]);
        }
      }
    }
    const __mmask16 store = first_lanes(s.ow - ox);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(out + (oy + r) * s.ow + ox, store, finished(acc[r], bias, act));
    }
  }
}

template <int S, int KW>
AUTOPAR_AVX512 void depthwise_stride(const DepthwiseShape& s, const float* in, const float* taps,
                                     const float* bias, const Activation* act, int64_t row_begin,
                                     int64_t row_end, float* out) {
  // Four rows at a time: four independent chains of multiply-adds.
  int64_t oy = row_begin;
  for (; oy + 4 <= row_end; oy += 4) depthwise_rows<4, S, KW>(s, in, taps, bias, act, oy, out);
  switch (row_end - oy) {
    case 3:
      depthwise_rows<3, S, KW>(s, in, taps, bias, act, oy, out);
      break;
    case 2:
      depthwise_rows<2, S, KW>(s, in, taps, bias, act, oy, out);
      break;
    case 1:
      depthwise_rows<1, S, KW>(s, in, taps, bias, act, oy, out);
      break;
    default:
      break;
  }
}

// Stride 1: `padded` holds input rows with their padding, `width` = ow + (kw − 1)·dx columns
// each, so output (oy, ox) of the block reads padded[(oy·width + ox) + ky·dy·width + kx·dx]:
// one fixed offset per tap over the flattened block. V vectors of 16 consecutive flattened
// outputs (the columns past ow among them are computed and dropped) at `at`.
template <int V>
AUTOPAR_AVX512 void depthwise_flat(const DepthwiseShape& s, const float* padded, int64_t width,
                                   const float* taps, const float* bias, const Activation* act,
                                   int64_t at, float* flat) {
  __m512 acc[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t ky = 0; ky < s.kh; ++ky) {
    const float* row = padded + at + ky * s.dy * width;
    for (int64_t kx = 0; kx < s.kw; ++kx) {
      const __m512 weight = _mm512_set1_ps(taps[ky * s.kw + kx]);
      const float* from = row + kx * s.dx;
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        acc[v] = _mm512_fmadd_ps(weight, _mm512_loadu_ps(from + v * kLanes), acc[v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    _mm512_storeu_ps(flat + at + v * kLanes, finished(acc[v], bias, act));
  }
}

void depthwise_unit_stride(const DepthwiseShape& s, const float* in, const float* taps,
                           const float* bias, const Activation* act, int64_t row_begin,
                           int64_t row_end, float* out) {
  const int64_t width = s.ow + (s.kw - 1) * s.dx;
  const int64_t rows = row_end - row_begin;
  const int64_t padded_rows = rows + (s.kh - 1) * s.dy;
  // Flattened outputs, in whole vectors of four; both buffers have room for the last.
  const int64_t outputs = (rows - 1) * width + s.ow;
  const int64_t blocks = (outputs + 4 * kLanes - 1) / (4 * kLanes);
  const int64_t flat_size = blocks * 4 * kLanes;
  thread_local std::vector<float> padded, flat;
  padded.assign(static_cast<size_t>(std::max(padded_rows * width, flat_size) +
                                    (s.kh - 1) * s.dy * width + (s.kw - 1) * s.dx),
                0.0f);
  flat.resize(static_cast<size_t>(flat_size));
  const int64_t copy_begin = std::min(std::max<int64_t>(s.px, 0), width);
  const int64_t copy_end = std::max(copy_begin, std::min(width, s.px + s.iw));
  for (int64_t r = 0; r < padded_rows; ++r) {
    const int64_t iy = row_begin * s.sy + r - s.py;
    if (iy < 0 || iy >= s.ih || copy_end <= copy_begin) continue;
    std::memcpy(padded.data() + r * width + copy_begin, in + iy * s.iw + copy_begin - s.px,
                static_cast<size_t>(copy_end - copy_begin) * sizeof(float));
  }
  for (int64_t b = 0; b < blocks; ++b)
    depthwise_flat<4>(s, padded.data(), width, taps, bias, act, b * 4 * kLanes, flat.data());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out + (row_begin + r) * s.ow, flat.data() + r * width,
                static_cast<size_t>(s.ow) * sizeof(float));
  }
}

template <int S>
void depthwise_width(const DepthwiseShape& s, const float* in, const float* taps, const float* bias,
                     const Activation* act, int64_t row_begin, int64_t row_end, float* out) {
  switch (s.kw) {
    case 3:
      return depthwise_stride<S, 3>(s, in, taps, bias, act, row_begin, row_end, out);
    case 5:
      return depthwise_stride<S, 5>(s, in, taps, bias, act, row_begin, row_end, out);
    default:
      return depthwise_stride<S, 0>(s, in, taps, bias, act, row_begin, row_end, out);
  }
}

// Σ of the 16 lanes, pairwise: lane i + lane i + 8, then + 4, + 2, + 1.
AUTOPAR_AVX512 inline float lane_sum(__m512 v) {
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, v);
  for (int half = kLanes / 2; half > 0; half /= 2) {
    for (int i = 0; i < half; ++i) lanes[i] += lanes[i + half];
  }
  return lanes[0];
}

// One column (a pointwise convolution over a single position, as squeeze-and-excitation
// blocks run them): dot products of w's rows with contiguous x, 16 lanes of partial sums each,
// four rows at a time.
AUTOPAR_AVX512 void gemv(const float* w, int64_t ldw, int64_t rows, int64_t depth, const float* x,
                         const float* bias, const Activation* act, float* y, int64_t ldy) {
  constexpr int kRows = 4;
  for (int64_t m = 0; m < rows; m += kRows) {
    const int n = static_cast<int>(std::min<int64_t>(kRows, rows - m));
    __m512 acc[kRows];
#pragma GCC unroll 4
    for (int i = 0; i < kRows; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < depth; k += kLanes) {
      const __mmask16 mask = first_lanes(depth - k);
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + k);
#pragma GCC unroll 4
      for (int i = 0; i < kRows; ++i) {
        if (i < n) {
          acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, w + (m + i) * ldw + k), xv, acc[i]);
        }
      }
    }
    for (int i = 0; i < n; ++i) {
      float sum = lane_sum(acc[i]);
      if (bias) sum += bias[m + i];
      y[(m + i) * ldy] = sum;
      if (act) activate(*act, y + (m + i) * ldy, 1);
    }
  }
}

AUTOPAR_AVX512 void even_elements(const float* in, int64_t n, float* out) {
  const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const int64_t extent = 2 * n - 1;  // in[0, extent) holds every element read
  for (int64_t j = 0; j < n; j += kLanes) {
    const __m512 low = _mm512_maskz_loadu_ps(first_lanes(extent - 2 * j), in + 2 * j);
    const __m512 high =
        _mm512_maskz_loadu_ps(first_lanes(extent - 2 * j - kLanes), in + 2 * j + kLanes);
    _mm512_mask_storeu_ps(out + j, first_lanes(n - j), _mm512_permutex2var_ps(low, evens, high));
  }
}

}  // namespace

void even_elements_avx512(const float* in, int64_t n, float* out) { even_elements(in, n, out); }

void activation_avx512(const Activation& a, float* data, int64_t n) { activate(a, data, n); }

void gemm_avx512(const float* w, int64_t ldw, int64_t rows, int64_t depth, const float* x,
                 int64_t ldx, int64_t cols, const float* bias, const Activation* act, float* y,
                 int64_t ldy) {
  if (cols == 1 && ldx == 1) return gemv(w, ldw, rows, depth, x, bias, act, y, ldy);
  for (int64_t m = 0; m < rows; m += kGemmRows) {
    const int64_t block_rows = std::min<int64_t>(kGemmRows, rows - m);
    for (int64_t j = 0; j < cols; j += 2 * kLanes) {
      const int64_t block_cols = std::min<int64_t>(2 * kLanes, cols - j);
      kGemmBlocks[block_rows - 1][block_cols > kLanes ? 1 : 0](
          w + m * ldw, ldw, depth, x + j, ldx, block_cols, bias ? bias + m : nullptr, act,
          y + m * ldy + j, ldy);
    }
  }
}

bool depthwise_avx512_supports(const DepthwiseShape& s) {
  return (s.sx == 1 || s.sx == 2) && s.kw <= kMaxDepthwiseWidth;
}

void depthwise_avx512(const DepthwiseShape& s, const float* in, const float* taps,
                      const float* bias, const Activation* act, int64_t row_begin, int64_t row_end,
                      float* out) {
  if (row_begin >= row_end) return;
  if (s.sx == 1 && s.sy == 1) {
    depthwise_unit_stride(s, in, taps, bias, act, row_begin, row_end, out);
  } else if (s.sx == 1) {
    depthwise_width<1>(s, in, taps, bias, act, row_begin, row_end, out);
  } else {
    depthwise_width<2>(s, in, taps, bias, act, row_begin, row_end, out);
  }
}

#else  // no x86-64 SIMD: the portable kernels only

bool cpu_has_avx512() { return false; }
void even_elements_avx512(const float*, int64_t, float*) {}
void activation_avx512(const Activation&, float*, int64_t) {}
void gemm_avx512(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                 const float*, const Activation*, float*, int64_t) {}
bool depthwise_avx512_supports(const DepthwiseShape&) { return false; }
void depthwise_avx512(const DepthwiseShape&, const float*, const float*, const float*,
                      const Activation*, int64_t, int64_t, float*) {}

#endif

}  // namespace autopar::runtime
