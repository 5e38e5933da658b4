// Float32 convolution kernels (and the activations fused into them) in AVX-512, chosen at run time
// on CPUs that have it: a matrix product for pointwise convolutions and im2col columns, and a
// depthwise convolution over two spatial dims. Each output element is its sum over the reduction in
// an order that depends on the shape alone (in order, one fused multiply-add per term; a single
// column in 16 lanes of partial sums), then the bias: the result does not depend on the thread
// count.
#pragma once

#include <cstdint>

namespace autopar::runtime {

// Whether this CPU and OS run AVX-512F (and the kernels below may be called). False when the
// environment sets AUTOPAR_CPU_KERNELS=generic, which keeps the portable kernels.
bool cpu_has_avx512();

struct Activation;

// The activation (activation.h) over data[0, n), with the bits of its scalar formulas.
void activation_avx512(const Activation& a, float* data, int64_t n);

// out[j] = in[2·j] for j < n (the columns of a stride-2 convolution).
void even_elements_avx512(const float* in, int64_t n, float* out);

// y[m·ldy + j] = act(Σ_k w[m·ldw + k]·x[k·ldx + j] (+ bias[m])) for m < rows, j < cols; act
// (may be null) as activation_avx512 applies it.
void gemm_avx512(const float* w, int64_t ldw, int64_t rows, int64_t depth, const float* x,
                 int64_t ldx, int64_t cols, const float* bias, const Activation* act, float* y,
                 int64_t ldy);

// One channel of a depthwise convolution over two spatial dims, output rows [row_begin,
// row_end): out[oy·ow + ox] = Σ_{ky,kx} taps[ky·kw + kx]·in[oy·sy − py + ky·dy, ox·sx − px +
// kx·dx] (+ *bias), then act (may be null), terms in (ky, kx) order, outside the input read as
// zero; horizontal strides 1 and 2, kernels up to 16 wide.
struct DepthwiseShape {
  int64_t ih, iw, oh, ow, kh, kw, sy, sx, py, px, dy, dx;
};
bool depthwise_avx512_supports(const DepthwiseShape& s);
void depthwise_avx512(const DepthwiseShape& s, const float* in, const float* taps,
                      const float* bias, const Activation* act, int64_t row_begin, int64_t row_end,
                      float* out);

}  // namespace autopar::runtime
