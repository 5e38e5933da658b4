// kMap (an interpreter of fused elementwise programs) and kReduce for the CUDA backend.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "launch.h"

namespace autopar::cuda {
namespace {

// ---- element conversion ------------------------------------------------------------------

// bool storage: one byte, read as 0/1 and written as != 0.
struct BoolByte {
  uint8_t v;
};

template <typename R, typename S>
__device__ __forceinline__ R from_storage(S s) {
  if constexpr (std::is_same_v<S, __half>) {
    return static_cast<R>(__half2float(s));
  } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return static_cast<R>(__bfloat162float(s));
  } else if constexpr (std::is_same_v<S, BoolByte>) {
    return s.v != 0 ? R(1) : R(0);
  } else {
    return static_cast<R>(s);
  }
}

// Float to integer truncates toward zero, saturating with NaN to 0 (what cvt.rzi does); narrower
// integers then wrap, so integer values convert modulo 2^bits as C++ integer casts do.
template <typename R>
__device__ __forceinline__ long long truncate_to_i64(R v) {
  if constexpr (std::is_same_v<R, float>) {
    return __float2ll_rz(v);
  } else {
    return __double2ll_rz(v);
  }
}

template <typename S, typename R>
__device__ __forceinline__ S to_storage(R v) {
  if constexpr (std::is_same_v<S, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<S, BoolByte>) {
    return BoolByte{static_cast<uint8_t>(v != R(0) ? 1 : 0)};
  } else if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
    return static_cast<S>(v);
  } else {
    return static_cast<S>(static_cast<unsigned long long>(truncate_to_i64(v)));
  }
}

// Calls f(S{}) with the storage type of dt; the switch is uniform across a warp.
template <typename F>
__device__ __forceinline__ void with_storage(uint8_t dt, F&& f) {
  switch (static_cast<Dt>(dt)) {
    case Dt::kF32:
      f(float{});
      break;
    case Dt::kF16:
      f(__half{});
      break;
    case Dt::kBF16:
      f(__nv_bfloat16{});
      break;
    case Dt::kF64:
      f(double{});
      break;
    case Dt::kI64:
      f(static_cast<long long>(0));
      break;
    case Dt::kI32:
      f(int{});
      break;
    case Dt::kI8:
      f(static_cast<signed char>(0));
      break;
    case Dt::kU8:
      f(static_cast<unsigned char>(0));
      break;
    default:
      f(BoolByte{});
      break;
  }
}

template <typename R>
__device__ __forceinline__ R load_any(const void* p, uint8_t dt, int64_t i) {
  R out = R(0);
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    out = from_storage<R>(static_cast<const S*>(p)[i]);
  });
  return out;
}

template <typename R>
__device__ __forceinline__ void store_any(void* p, uint8_t dt, int64_t i, R v) {
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    static_cast<S*>(p)[i] = to_storage<S>(v);
  });
}

// Element bits moved by size (1, 2, 4 or 8 bytes) and converted apart from the memory access,
// so the kernels carry four load and store paths instead of one per dtype.
template <typename F>
__device__ __forceinline__ void with_size(uint8_t dt, F&& f) {
  switch (static_cast<Dt>(dt)) {
    case Dt::kF64:
    case Dt::kI64:
      f(uint64_t{});
      break;
    case Dt::kF32:
    case Dt::kI32:
      f(uint32_t{});
      break;
    case Dt::kF16:
    case Dt::kBF16:
      f(uint16_t{});
      break;
    default:
      f(uint8_t{});
      break;
  }
}

// Calls f(std::integral_constant<int, dt>) so conversions are chosen once per instruction, not
// per element.
template <typename F>
__device__ __forceinline__ void with_dt(uint8_t dt, F&& f) {
  switch (static_cast<Dt>(dt)) {
    case Dt::kF32:
      f(std::integral_constant<int, static_cast<int>(Dt::kF32)>{});
      break;
    case Dt::kF16:
      f(std::integral_constant<int, static_cast<int>(Dt::kF16)>{});
      break;
    case Dt::kBF16:
      f(std::integral_constant<int, static_cast<int>(Dt::kBF16)>{});
      break;
    case Dt::kF64:
      f(std::integral_constant<int, static_cast<int>(Dt::kF64)>{});
      break;
    case Dt::kI64:
      f(std::integral_constant<int, static_cast<int>(Dt::kI64)>{});
      break;
    case Dt::kI32:
      f(std::integral_constant<int, static_cast<int>(Dt::kI32)>{});
      break;
    case Dt::kI8:
      f(std::integral_constant<int, static_cast<int>(Dt::kI8)>{});
      break;
    case Dt::kU8:
      f(std::integral_constant<int, static_cast<int>(Dt::kU8)>{});
      break;
    default:
      f(std::integral_constant<int, static_cast<int>(Dt::kBool)>{});
      break;
  }
}

template <typename R, int DT>
__device__ __forceinline__ R from_bits(uint64_t bits) {
  constexpr Dt dt = static_cast<Dt>(DT);
  if constexpr (dt == Dt::kF32) {
    return static_cast<R>(__uint_as_float(static_cast<uint32_t>(bits)));
  } else if constexpr (dt == Dt::kF16) {
    return static_cast<R>(__half2float(__ushort_as_half(static_cast<unsigned short>(bits))));
  } else if constexpr (dt == Dt::kBF16) {
    return static_cast<R>(
        __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits))));
  } else if constexpr (dt == Dt::kF64) {
    return static_cast<R>(__longlong_as_double(static_cast<long long>(bits)));
  } else if constexpr (dt == Dt::kI64) {
    return static_cast<R>(static_cast<long long>(bits));
  } else if constexpr (dt == Dt::kI32) {
    return static_cast<R>(static_cast<int32_t>(static_cast<uint32_t>(bits)));
  } else if constexpr (dt == Dt::kI8) {
    return static_cast<R>(static_cast<int8_t>(static_cast<uint8_t>(bits)));
  } else if constexpr (dt == Dt::kU8) {
    return static_cast<R>(static_cast<uint8_t>(bits));
  } else {
    return static_cast<uint8_t>(bits) != 0 ? R(1) : R(0);
  }
}

template <typename R, int DT>
__device__ __forceinline__ uint64_t to_bits(R v) {
  constexpr Dt dt = static_cast<Dt>(DT);
  if constexpr (dt == Dt::kF32) {
    return __float_as_uint(static_cast<float>(v));
  } else if constexpr (dt == Dt::kF16) {
    return __half_as_ushort(__float2half_rn(static_cast<float>(v)));
  } else if constexpr (dt == Dt::kBF16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)));
  } else if constexpr (dt == Dt::kF64) {
    return static_cast<uint64_t>(__double_as_longlong(static_cast<double>(v)));
  } else if constexpr (dt == Dt::kBool) {
    return v != R(0) ? 1 : 0;
  } else {
    return static_cast<uint64_t>(truncate_to_i64(v));  // stored by size: narrower types wrap
  }
}

// ---- math in the register type -------------------------------------------------------------

template <typename R>
struct Math;
template <>
struct Math<float> {
  static __device__ __forceinline__ float sqrt(float x) { return sqrtf(x); }
  static __device__ __forceinline__ float exp(float x) { return expf(x); }
  static __device__ __forceinline__ float expm1(float x) { return expm1f(x); }
  static __device__ __forceinline__ float log(float x) { return logf(x); }
  static __device__ __forceinline__ float log1p(float x) { return log1pf(x); }
  static __device__ __forceinline__ float erf(float x) { return erff(x); }
  static __device__ __forceinline__ float tanh(float x) { return tanhf(x); }
  static __device__ __forceinline__ float floor(float x) { return floorf(x); }
  static __device__ __forceinline__ float ceil(float x) { return ceilf(x); }
  static __device__ __forceinline__ float abs(float x) { return fabsf(x); }
  static __device__ __forceinline__ float pow(float x, float y) { return powf(x, y); }
  // Separate roundings as the CPU (built without FMA contraction) does.
  static __device__ __forceinline__ float mul(float x, float y) { return __fmul_rn(x, y); }
  static __device__ __forceinline__ float add(float x, float y) { return __fadd_rn(x, y); }
};
template <>
struct Math<double> {
  static __device__ __forceinline__ double sqrt(double x) { return ::sqrt(x); }
  static __device__ __forceinline__ double exp(double x) { return ::exp(x); }
  static __device__ __forceinline__ double expm1(double x) { return ::expm1(x); }
  static __device__ __forceinline__ double log(double x) { return ::log(x); }
  static __device__ __forceinline__ double log1p(double x) { return ::log1p(x); }
  static __device__ __forceinline__ double erf(double x) { return ::erf(x); }
  static __device__ __forceinline__ double tanh(double x) { return ::tanh(x); }
  static __device__ __forceinline__ double floor(double x) { return ::floor(x); }
  static __device__ __forceinline__ double ceil(double x) { return ::ceil(x); }
  static __device__ __forceinline__ double abs(double x) { return ::fabs(x); }
  static __device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }
  static __device__ __forceinline__ double mul(double x, double y) { return __dmul_rn(x, y); }
  static __device__ __forceinline__ double add(double x, double y) { return __dadd_rn(x, y); }
};

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

template <typename R>
__device__ __forceinline__ R infinity() {
  return static_cast<R>(__longlong_as_double(0x7ff0000000000000ll));
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// NaN wins, as numpy's maximum and minimum (and the CPU kernels).
template <typename R>
__device__ __forceinline__ R max_nan(R a, R b) {
  return a != a || a > b ? a : b;
}
template <typename R>
__device__ __forceinline__ R min_nan(R a, R b) {
  return a != a || a < b ? a : b;
}
// x clamped to [0, 1]; NaN stays NaN.
template <typename R>
__device__ __forceinline__ R unit_clamp(R x) {
  return x < R(0) ? R(0) : (x > R(1) ? R(1) : x);
}

template <typename R>
__device__ __forceinline__ R sigmoid(R x) {
  // exp of a non-positive argument only, so neither branch overflows.
  if (x >= R(0)) return R(1) / (R(1) + Math<R>::exp(-x));
  const R e = Math<R>::exp(x);
  return e / (R(1) + e);
}

// C++ int64 division: truncation, x / 0 = 0 and INT64_MIN / -1 wrapping, as the CPU's divide.
template <typename R>
__device__ __forceinline__ R int_div(R x, R y) {
  const long long a = truncate_to_i64(x), b = truncate_to_i64(y);
  if (b == 0) return R(0);
  if (b == -1)
    return static_cast<R>(static_cast<long long>(0ull - static_cast<unsigned long long>(a)));
  return static_cast<R>(a / b);
}

template <typename R>
__device__ __forceinline__ R gelu_grad(R dy, R x) {
  using M = Math<R>;
  const R cdf = R(0.5) * (R(1) + M::erf(x * R(kInvSqrt2)));
  const R pdf = R(kInvSqrt2Pi) * M::exp(M::mul(R(-0.5) * x, x));
  return dy * M::add(cdf, M::mul(x, pdf));
}

// d/dx of 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3):
// 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <typename R>
__device__ __forceinline__ R gelu_tanh_grad(R dy, R x) {
  using M = Math<R>;
  const R x2 = x * x;
  const R t = M::tanh(R(kSqrt2OverPi) * (x + R(kGeluCubic) * x2 * x));
  const R du = R(kSqrt2OverPi) * (R(1) + R(3 * kGeluCubic) * x2);
  return dy * (R(0.5) * (R(1) + t) + R(0.5) * x * (R(1) - t * t) * du);
}

template <typename R>
__device__ __forceinline__ R round_half(R x, R which) {
  const float f = static_cast<float>(x);
  if (which == R(0)) return static_cast<R>(__half2float(__float2half_rn(f)));
  return static_cast<R>(__bfloat162float(__float2bfloat16_rn(f)));
}

// Every unary and binary op's arithmetic (y: the second operand; imm, imm2: the instruction's
// immediates). The interpreter and the typed kernels both call it, so the two round alike.
template <MapOp Op, typename R>
__device__ __forceinline__ R apply_op(R x, R y, R imm, R imm2) {
  using M = Math<R>;
  if constexpr (Op == MapOp::kNeg) {
    return -x;
  } else if constexpr (Op == MapOp::kAbs) {
    return M::abs(x);
  } else if constexpr (Op == MapOp::kSign) {
    if (x != x) return x;
    return static_cast<R>(static_cast<int>(R(0) < x) - static_cast<int>(x < R(0)));
  } else if constexpr (Op == MapOp::kSqrt) {
    return M::sqrt(x);
  } else if constexpr (Op == MapOp::kReciprocal) {
    return R(1) / x;
  } else if constexpr (Op == MapOp::kExp) {
    return M::exp(x);
  } else if constexpr (Op == MapOp::kLog) {
    return M::log(x);
  } else if constexpr (Op == MapOp::kErf) {
    return M::erf(x);
  } else if constexpr (Op == MapOp::kTanh) {
    return M::tanh(x);
  } else if constexpr (Op == MapOp::kSigmoid) {
    return sigmoid(x);
  } else if constexpr (Op == MapOp::kRelu) {
    return x < R(0) ? R(0) : x;
  } else if constexpr (Op == MapOp::kFloor) {
    return M::floor(x);
  } else if constexpr (Op == MapOp::kCeil) {
    return M::ceil(x);
  } else if constexpr (Op == MapOp::kSoftplus) {
    // log(1 + e^x) without overflow: x + log1p(e^-x) for positive x.
    return x > R(0) ? x + M::log1p(M::exp(-x)) : M::log1p(M::exp(x));
  } else if constexpr (Op == MapOp::kSoftsign) {
    return x / (R(1) + M::abs(x));
  } else if constexpr (Op == MapOp::kNot) {
    return x == R(0) ? R(1) : R(0);
  } else if constexpr (Op == MapOp::kLeakyRelu) {
    return x < R(0) ? imm * x : x;
  } else if constexpr (Op == MapOp::kElu) {
    return x < R(0) ? imm * M::expm1(x) : x;
  } else if constexpr (Op == MapOp::kSelu) {
    return imm2 * (x > R(0) ? x : imm * M::expm1(x));
  } else if constexpr (Op == MapOp::kHardSigmoid) {
    return unit_clamp(M::add(M::mul(imm, x), imm2));
  } else if constexpr (Op == MapOp::kHardSwish) {
    return x * unit_clamp(M::add(M::mul(x, R(1) / R(6)), R(0.5)));
  } else if constexpr (Op == MapOp::kGelu) {
    return R(0.5) * x * (R(1) + M::erf(x * R(kInvSqrt2)));
  } else if constexpr (Op == MapOp::kGeluTanh) {
    return R(0.5) * x * (R(1) + M::tanh(R(kSqrt2OverPi) * (x + R(kGeluCubic) * x * x * x)));
  } else if constexpr (Op == MapOp::kRoundHalf) {
    return round_half(x, imm);
  } else if constexpr (Op == MapOp::kAdd) {
    return x + y;
  } else if constexpr (Op == MapOp::kSub) {
    return x - y;
  } else if constexpr (Op == MapOp::kMul) {
    return x * y;
  } else if constexpr (Op == MapOp::kDiv) {
    return x / y;
  } else if constexpr (Op == MapOp::kPow) {
    return M::pow(x, y);
  } else if constexpr (Op == MapOp::kMax) {
    return max_nan(x, y);
  } else if constexpr (Op == MapOp::kMin) {
    return min_nan(x, y);
  } else if constexpr (Op == MapOp::kPRelu) {
    return x < R(0) ? x * y : x;
  } else if constexpr (Op == MapOp::kEqual) {
    return x == y ? R(1) : R(0);
  } else if constexpr (Op == MapOp::kLess) {
    return x < y ? R(1) : R(0);
  } else if constexpr (Op == MapOp::kGreater) {
    return x > y ? R(1) : R(0);
  } else if constexpr (Op == MapOp::kLessOrEqual) {
    return x <= y ? R(1) : R(0);
  } else if constexpr (Op == MapOp::kGreaterOrEqual) {
    return x >= y ? R(1) : R(0);
  } else if constexpr (Op == MapOp::kAnd) {
    return x != R(0) && y != R(0) ? R(1) : R(0);
  } else if constexpr (Op == MapOp::kOr) {
    return x != R(0) || y != R(0) ? R(1) : R(0);
  } else if constexpr (Op == MapOp::kIntDiv) {
    return int_div(x, y);
  } else if constexpr (Op == MapOp::kGeluGrad) {
    return gelu_grad(x, y);  // dy, x
  } else {
    static_assert(Op == MapOp::kGeluTanhGrad, "apply_op: not a unary or binary op");
    return gelu_tanh_grad(x, y);
  }
}

template <MapOp Op>
using OpTag = std::integral_constant<MapOp, Op>;

// ---- kMap ------------------------------------------------------------------------------------

// Elements per thread per pass: each decoded instruction is applied to this many elements, and
// their loads are in flight together.
constexpr int kUnroll = 4;
constexpr int kMapBlock = 128;
constexpr int kMapSharedLimit = 48 * 1024;  // no opt-in attribute needed (callable in capture)

struct alignas(8) MapInstrDev {  // one 8-byte constant load per instruction
  uint8_t op, dst, a, b, c, pad[3];
};

// kDense: every operand walks i (stride 1) or stays put (stride 0). kRows: two merged dims
// (a bias add, a broadcast row or column, a transpose) with i < 2^31, split once per element.
// kIndex32 / kIndex64: any rank, split per operand access.
enum IndexMode : int { kDense = 0, kRows = 1, kIndex32 = 2, kIndex64 = 3 };

template <typename R>
struct MapArgs {
  int64_t count;
  int32_t rank;  // of the merged space
  int32_t n_code;
  int64_t dims[kMaxRank];
  uint32_t magic[kMaxRank];  // kIndex32: i / dims[d] = (umulhi(i, magic) + i) >> shift
  uint32_t shift[kMaxRank];
  const void* in[kMaxMapInputs];
  void* out[kMaxMapOutputs];
  int64_t in_base[kMaxMapInputs];
  int64_t out_base[kMaxMapOutputs];
  int64_t in_strides[kMaxMapInputs][kMaxRank];
  int64_t out_strides[kMaxMapOutputs][kMaxRank];
  uint8_t in_dt[kMaxMapInputs];
  uint8_t out_dt[kMaxMapOutputs];
  MapInstrDev code[kMaxMapCode];
  R imm[kMaxMapCode];
  R imm2[kMaxMapCode];
};
static_assert(sizeof(MapArgs<double>) <= 4096, "kMap kernel parameters exceed 4 KB");

// Division by an invariant 32-bit divisor via a multiply (valid for numerators below 2^31).
void magic_for(uint32_t divisor, uint32_t* magic, uint32_t* shift) {
  uint32_t s = 0;
  while (s < 32 && (uint64_t{1} << s) < divisor) ++s;
  const uint64_t m = ((uint64_t{1} << 32) * ((uint64_t{1} << s) - divisor)) / divisor + 1;
  *magic = static_cast<uint32_t>(m);
  *shift = s;
}

// Where element i of this thread's pass is: i itself, and for kRows its (row, column).
struct Point {
  int64_t i;
  uint32_t row, col;
};

template <int Mode, typename Args>
__device__ __forceinline__ Point point_of(const Args& a, int64_t i) {
  Point p{i, 0, 0};
  if constexpr (Mode == kRows) {
    const uint32_t u = static_cast<uint32_t>(i);
    p.row = (__umulhi(u, a.magic[1]) + u) >> a.shift[1];
    p.col = u - p.row * static_cast<uint32_t>(a.dims[1]);
  }
  return p;
}

template <int Mode, typename Args>
__device__ __forceinline__ int64_t offset_of(const Args& a, const int64_t* strides, int64_t base,
                                             const Point& pt) {
  const int64_t i = pt.i;
  if constexpr (Mode == kDense) {
    return base + i * strides[0];
  } else if constexpr (Mode == kRows) {
    return base + static_cast<int64_t>(pt.row) * strides[0] +
           static_cast<int64_t>(pt.col) * strides[1];
  } else if constexpr (Mode == kIndex32) {
    uint32_t rest = static_cast<uint32_t>(i);
    int64_t off = base;
    for (int d = a.rank - 1; d > 0; --d) {
      const uint32_t q = (__umulhi(rest, a.magic[d]) + rest) >> a.shift[d];
      off += static_cast<int64_t>(rest - q * static_cast<uint32_t>(a.dims[d])) * strides[d];
      rest = q;
    }
    return off + static_cast<int64_t>(rest) * strides[0];
  } else {
    int64_t rest = i, off = base;
    for (int d = a.rank - 1; d > 0; --d) {
      const int64_t q = rest / a.dims[d];
      off += (rest - q * a.dims[d]) * strides[d];
      rest = q;
    }
    return off + rest * strides[0];
  }
}

// The register file lives in shared memory, one column per thread: reg(p, e) is
// my[(p * kUnroll + e) * kMapBlock]. Registers indexed at run time would otherwise spill to
// local memory; the host packs the program's registers so the file stays small.
template <typename R>
struct RegFile {
  R* my;
  int valid;  // elements 0..valid-1 of this pass exist
  __device__ __forceinline__ R& at(int p, int e) const { return my[(p * kUnroll + e) * kMapBlock]; }
  template <typename F>
  __device__ __forceinline__ void unary(const MapInstrDev& ins, F f) const {
#pragma unroll
    for (int e = 0; e < kUnroll; ++e) {
      if (e < valid) at(ins.dst, e) = f(at(ins.a, e));
    }
  }
  template <typename F>
  __device__ __forceinline__ void binary(const MapInstrDev& ins, F f) const {
#pragma unroll
    for (int e = 0; e < kUnroll; ++e) {
      if (e < valid) at(ins.dst, e) = f(at(ins.a, e), at(ins.b, e));
    }
  }
};

template <typename R, int Mode>
__global__ void __launch_bounds__(kMapBlock) map_kernel(const __grid_constant__ MapArgs<R> a) {
  extern __shared__ __align__(16) unsigned char map_shared[];
  RegFile<R> rf{reinterpret_cast<R*>(map_shared) + threadIdx.x, 0};
  const int64_t span = int64_t{kUnroll} * kMapBlock;
  for (int64_t first = int64_t{blockIdx.x} * span; first < a.count;
       first += int64_t{gridDim.x} * span) {
    const int64_t i0 = first + threadIdx.x;
    const int64_t left = a.count - i0;
    rf.valid = left <= 0 ? 0 : static_cast<int>(min64(kUnroll, (left + kMapBlock - 1) / kMapBlock));
    Point pts[kUnroll];
#pragma unroll
    for (int e = 0; e < kUnroll; ++e) pts[e] = point_of<Mode>(a, i0 + e * kMapBlock);
    for (int pc = 0; pc < a.n_code; ++pc) {
      const MapInstrDev ins = a.code[pc];
      // The op's immediates are read only by the ops that use them (the rest are dead loads).
      auto run = [&](auto tag) {
        constexpr MapOp kOp = decltype(tag)::value;
        const R imm = a.imm[pc], imm2 = a.imm2[pc];
        if constexpr (kOp >= MapOp::kAdd) {
          rf.binary(ins, [imm, imm2](R x, R y) { return apply_op<kOp>(x, y, imm, imm2); });
        } else {
          rf.unary(ins, [imm, imm2](R x) { return apply_op<kOp>(x, R(0), imm, imm2); });
        }
      };
      switch (static_cast<MapOp>(ins.op)) {
        case MapOp::kLoad: {
          const uint8_t dt = a.in_dt[ins.a];
          const int64_t* strides = a.in_strides[ins.a];
          const int64_t base = a.in_base[ins.a];
          int64_t off[kUnroll];
#pragma unroll
          for (int e = 0; e < kUnroll; ++e) off[e] = offset_of<Mode>(a, strides, base, pts[e]);
          uint64_t bits[kUnroll] = {};
          with_size(dt, [&](auto tag) {
            using U = decltype(tag);
            const U* src = static_cast<const U*>(a.in[ins.a]);
#pragma unroll
            for (int e = 0; e < kUnroll; ++e) {
              if (e < rf.valid) bits[e] = src[off[e]];
            }
          });
          with_dt(dt, [&](auto tag) {
            constexpr int kDt = decltype(tag)::value;
#pragma unroll
            for (int e = 0; e < kUnroll; ++e) {
              if (e < rf.valid) rf.at(ins.dst, e) = from_bits<R, kDt>(bits[e]);
            }
          });
          break;
        }
        case MapOp::kConst: {
          const R v = a.imm[pc];
#pragma unroll
          for (int e = 0; e < kUnroll; ++e) {
            if (e < rf.valid) rf.at(ins.dst, e) = v;
          }
          break;
        }
        case MapOp::kStore: {
          const uint8_t dt = a.out_dt[ins.a];
          const int64_t* strides = a.out_strides[ins.a];
          const int64_t base = a.out_base[ins.a];
          int64_t off[kUnroll];
          uint64_t bits[kUnroll] = {};
#pragma unroll
          for (int e = 0; e < kUnroll; ++e) off[e] = offset_of<Mode>(a, strides, base, pts[e]);
          with_dt(dt, [&](auto tag) {
            constexpr int kDt = decltype(tag)::value;
#pragma unroll
            for (int e = 0; e < kUnroll; ++e) {
              if (e < rf.valid) bits[e] = to_bits<R, kDt>(rf.at(ins.b, e));
            }
          });
          with_size(dt, [&](auto tag) {
            using U = decltype(tag);
            U* dst = static_cast<U*>(a.out[ins.a]);
#pragma unroll
            for (int e = 0; e < kUnroll; ++e) {
              if (e < rf.valid) dst[off[e]] = static_cast<U>(bits[e]);
            }
          });
          break;
        }
        case MapOp::kNeg:
          run(OpTag<MapOp::kNeg>{});
          break;
        case MapOp::kAbs:
          run(OpTag<MapOp::kAbs>{});
          break;
        case MapOp::kSign:
          run(OpTag<MapOp::kSign>{});
          break;
        case MapOp::kSqrt:
          run(OpTag<MapOp::kSqrt>{});
          break;
        case MapOp::kReciprocal:
          run(OpTag<MapOp::kReciprocal>{});
          break;
        case MapOp::kExp:
          run(OpTag<MapOp::kExp>{});
          break;
        case MapOp::kLog:
          run(OpTag<MapOp::kLog>{});
          break;
        case MapOp::kErf:
          run(OpTag<MapOp::kErf>{});
          break;
        case MapOp::kTanh:
          run(OpTag<MapOp::kTanh>{});
          break;
        case MapOp::kSigmoid:
          run(OpTag<MapOp::kSigmoid>{});
          break;
        case MapOp::kRelu:
          run(OpTag<MapOp::kRelu>{});
          break;
        case MapOp::kFloor:
          run(OpTag<MapOp::kFloor>{});
          break;
        case MapOp::kCeil:
          run(OpTag<MapOp::kCeil>{});
          break;
        case MapOp::kSoftplus:
          run(OpTag<MapOp::kSoftplus>{});
          break;
        case MapOp::kSoftsign:
          run(OpTag<MapOp::kSoftsign>{});
          break;
        case MapOp::kNot:
          run(OpTag<MapOp::kNot>{});
          break;
        case MapOp::kLeakyRelu:
          run(OpTag<MapOp::kLeakyRelu>{});
          break;
        case MapOp::kElu:
          run(OpTag<MapOp::kElu>{});
          break;
        case MapOp::kSelu:
          run(OpTag<MapOp::kSelu>{});
          break;
        case MapOp::kHardSigmoid:
          run(OpTag<MapOp::kHardSigmoid>{});
          break;
        case MapOp::kHardSwish:
          run(OpTag<MapOp::kHardSwish>{});
          break;
        case MapOp::kGelu:
          run(OpTag<MapOp::kGelu>{});
          break;
        case MapOp::kGeluTanh:
          run(OpTag<MapOp::kGeluTanh>{});
          break;
        case MapOp::kRoundHalf:
          run(OpTag<MapOp::kRoundHalf>{});
          break;
        case MapOp::kAdd:
          run(OpTag<MapOp::kAdd>{});
          break;
        case MapOp::kSub:
          run(OpTag<MapOp::kSub>{});
          break;
        case MapOp::kMul:
          run(OpTag<MapOp::kMul>{});
          break;
        case MapOp::kDiv:
          run(OpTag<MapOp::kDiv>{});
          break;
        case MapOp::kPow:
          run(OpTag<MapOp::kPow>{});
          break;
        case MapOp::kMax:
          run(OpTag<MapOp::kMax>{});
          break;
        case MapOp::kMin:
          run(OpTag<MapOp::kMin>{});
          break;
        case MapOp::kPRelu:
          run(OpTag<MapOp::kPRelu>{});
          break;
        case MapOp::kEqual:
          run(OpTag<MapOp::kEqual>{});
          break;
        case MapOp::kLess:
          run(OpTag<MapOp::kLess>{});
          break;
        case MapOp::kGreater:
          run(OpTag<MapOp::kGreater>{});
          break;
        case MapOp::kLessOrEqual:
          run(OpTag<MapOp::kLessOrEqual>{});
          break;
        case MapOp::kGreaterOrEqual:
          run(OpTag<MapOp::kGreaterOrEqual>{});
          break;
        case MapOp::kAnd:
          run(OpTag<MapOp::kAnd>{});
          break;
        case MapOp::kOr:
          run(OpTag<MapOp::kOr>{});
          break;
        case MapOp::kIntDiv:
          run(OpTag<MapOp::kIntDiv>{});
          break;
        case MapOp::kGeluGrad:
          run(OpTag<MapOp::kGeluGrad>{});
          break;
        case MapOp::kGeluTanhGrad:
          run(OpTag<MapOp::kGeluTanhGrad>{});
          break;
        case MapOp::kWhere:
#pragma unroll
          for (int e = 0; e < kUnroll; ++e) {
            if (e < rf.valid) {
              rf.at(ins.dst, e) = rf.at(ins.a, e) != R(0) ? rf.at(ins.b, e) : rf.at(ins.c, e);
            }
          }
          break;
      }
    }
  }
}

bool reads_a(MapOp op) { return op >= MapOp::kNeg; }
bool writes_dst(MapOp op) { return op != MapOp::kStore; }

// The program's registers renamed onto as few as possible (a value's slot is free after its
// last read), so the shared-memory register file stays small. "" or why the code is invalid.
std::string pack_registers(const std::vector<MapInstr>& code, int n_in, int n_out,
                           std::vector<MapInstrDev>& packed, int* slots) {
  const int n = static_cast<int>(code.size());
  auto reads = [&](int i, int reg) {
    const MapInstr& ins = code[i];
    const MapOp op = ins.op;
    if (op == MapOp::kStore) return ins.b == reg;
    if (!reads_a(op)) return false;
    if (ins.a == reg) return true;
    if (op >= MapOp::kAdd && ins.b == reg) return true;
    return op == MapOp::kWhere && ins.c == reg;
  };
  // Whether the value of `reg` live after instruction i is read again.
  auto read_later = [&](int i, int reg) {
    for (int j = i + 1; j < n; ++j) {
      if (reads(j, reg)) return true;
      if (writes_dst(code[j].op) && code[j].dst == reg) return false;
    }
    return false;
  };
  int slot_of[kMaxMapRegisters];
  bool busy[kMaxMapRegisters] = {};
  std::fill(slot_of, slot_of + kMaxMapRegisters, -1);
  int used = 0;
  packed.assign(n, MapInstrDev{});
  for (int i = 0; i < n; ++i) {
    const MapInstr& ins = code[i];
    if (static_cast<int>(ins.op) > static_cast<int>(MapOp::kWhere)) {
      return "instruction " + std::to_string(i) + " has an unknown op " +
             std::to_string(static_cast<int>(ins.op));
    }
    const MapOp op = ins.op;
    MapInstrDev& out = packed[i];
    out.op = static_cast<uint8_t>(op);
    if (op == MapOp::kLoad && ins.a >= n_in) {
      return "instruction " + std::to_string(i) + " loads input " + std::to_string(ins.a) + " of " +
             std::to_string(n_in);
    }
    if (op == MapOp::kStore && ins.a >= n_out) {
      return "instruction " + std::to_string(i) + " stores output " + std::to_string(ins.a) +
             " of " + std::to_string(n_out);
    }
    uint8_t operands[3] = {};
    int n_operands = 0;
    if (op == MapOp::kStore) {
      operands[n_operands++] = ins.b;
    } else if (reads_a(op)) {
      operands[n_operands++] = ins.a;
      if (op >= MapOp::kAdd) operands[n_operands++] = ins.b;
      if (op == MapOp::kWhere) operands[n_operands++] = ins.c;
    }
    int mapped[3] = {};
    for (int k = 0; k < n_operands; ++k) {
      const int reg = operands[k];
      if (reg >= kMaxMapRegisters || slot_of[reg] < 0) {
        return "instruction " + std::to_string(i) + " reads register " + std::to_string(reg) +
               " before it is written";
      }
      mapped[k] = slot_of[reg];
    }
    if (op == MapOp::kLoad || op == MapOp::kStore) out.a = ins.a;
    if (op == MapOp::kStore) {
      out.b = static_cast<uint8_t>(mapped[0]);
    } else if (reads_a(op)) {
      out.a = static_cast<uint8_t>(mapped[0]);
      if (n_operands > 1) out.b = static_cast<uint8_t>(mapped[1]);
      if (n_operands > 2) out.c = static_cast<uint8_t>(mapped[2]);
    }
    // Operands read for the last time free their slots; the result may take one of them, as
    // the kernel reads every operand of an element before writing its result.
    for (int k = 0; k < n_operands; ++k) {
      const int reg = operands[k];
      const bool overwritten = writes_dst(op) && ins.dst == reg;
      if (slot_of[reg] >= 0 && (overwritten || !read_later(i, reg))) {
        busy[slot_of[reg]] = false;
        slot_of[reg] = -1;
      }
    }
    if (writes_dst(op)) {
      const int reg = ins.dst;
      if (reg >= kMaxMapRegisters) {
        return "instruction " + std::to_string(i) + " writes register " + std::to_string(reg) +
               " of " + std::to_string(kMaxMapRegisters);
      }
      if (slot_of[reg] >= 0) busy[slot_of[reg]] = false;  // the old value is dead
      int slot = 0;
      while (busy[slot]) ++slot;
      busy[slot] = true;
      slot_of[reg] = slot;
      used = std::max(used, slot + 1);
      out.dst = static_cast<uint8_t>(slot);
      if (!read_later(i, reg)) {  // never read: the slot is free again once written
        busy[slot] = false;
        slot_of[reg] = -1;
      }
    }
  }
  *slots = std::max(used, 1);
  return "";
}

// Drops size-1 dims and merges neighbours that every operand walks contiguously (or not at all),
// so same-shape operands become one dense run and a bias add becomes two dims.
void merge_dims(int rank, const int64_t* dims, int n_ops, int64_t (*strides)[kMaxRank],
                int* out_rank, int64_t* out_dims) {
  int r = 0;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1) continue;
    bool merge = r > 0;
    for (int k = 0; k < n_ops && merge; ++k) merge = strides[k][r - 1] == strides[k][d] * dims[d];
    if (merge) {
      out_dims[r - 1] *= dims[d];
      for (int k = 0; k < n_ops; ++k) strides[k][r - 1] = strides[k][d];
    } else {
      out_dims[r] = dims[d];
      for (int k = 0; k < n_ops; ++k) strides[k][r] = strides[k][d];
      ++r;
    }
  }
  for (int k = 0; k < n_ops; ++k) {
    for (int d = r; d < kMaxRank; ++d) strides[k][d] = 0;
  }
  for (int d = r; d < kMaxRank; ++d) out_dims[d] = 1;
  *out_rank = r;
}

// The launch's space after merge_dims, with every operand's strides: inputs, then outputs.
struct Merged {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxMapInputs + kMaxMapOutputs][kMaxRank] = {};
};

Merged merge_launch(const Launch& l) {
  Merged m;
  const int n_in = static_cast<int>(l.in.size()), n_out = static_cast<int>(l.out.size());
  for (int k = 0; k < n_in; ++k) {
    std::copy(l.in[k].strides, l.in[k].strides + kMaxRank, m.strides[k]);
  }
  for (int k = 0; k < n_out; ++k) {
    std::copy(l.out[k].strides, l.out[k].strides + kMaxRank, m.strides[n_in + k]);
  }
  merge_dims(l.space.rank, l.space.dims, n_in + n_out, m.strides, &m.rank, m.dims);
  return m;
}

template <typename R>
std::string launch_map(const Resolved& res, Context& ctx, const std::vector<MapInstrDev>& packed,
                       int slots, const Merged& m) {
  const Launch& l = *res.launch;
  MapArgs<R> a{};
  const int n_in = static_cast<int>(l.in.size()), n_out = static_cast<int>(l.out.size());
  a.count = l.space.count();
  const int rank = m.rank;
  std::copy(m.dims, m.dims + kMaxRank, a.dims);
  a.rank = rank;
  bool dense = rank <= 1;
  for (int k = 0; k < n_in + n_out && dense; ++k) {
    dense = m.strides[k][0] == 0 || m.strides[k][0] == 1;
  }
  for (int k = 0; k < n_in; ++k) {
    a.in[k] = res.in[k];
    a.in_base[k] = l.in[k].base;
    a.in_dt[k] = static_cast<uint8_t>(l.in[k].ref.dt);
    std::copy(m.strides[k], m.strides[k] + kMaxRank, a.in_strides[k]);
  }
  for (int k = 0; k < n_out; ++k) {
    a.out[k] = res.out[k];
    a.out_base[k] = l.out[k].base;
    a.out_dt[k] = static_cast<uint8_t>(l.out[k].ref.dt);
    std::copy(m.strides[n_in + k], m.strides[n_in + k] + kMaxRank, a.out_strides[k]);
  }
  a.n_code = static_cast<int32_t>(packed.size());
  for (size_t i = 0; i < packed.size(); ++i) {
    a.code[i] = packed[i];
    a.imm[i] = static_cast<R>(l.map.code[i].imm);
    a.imm2[i] = static_cast<R>(l.map.code[i].imm2);
  }
  const bool index32 = a.count <= int64_t{INT32_MAX};
  if (!dense && index32) {
    for (int d = 0; d < rank; ++d)
      magic_for(static_cast<uint32_t>(a.dims[d]), &a.magic[d], &a.shift[d]);
  }
  const size_t shared = static_cast<size_t>(slots) * kUnroll * kMapBlock * sizeof(R);
  if (shared > static_cast<size_t>(kMapSharedLimit)) {
    return "map: " + std::to_string(slots) + " live registers need " + std::to_string(shared) +
           " bytes of shared memory, over " + std::to_string(kMapSharedLimit);
  }
  const int64_t span = int64_t{kUnroll} * kMapBlock;
  const int64_t blocks =
      std::min<int64_t>((a.count + span - 1) / span, int64_t{sm_count()} * (2048 / kMapBlock));
  const dim3 grid(static_cast<unsigned>(blocks)), block(kMapBlock);
  if (dense) {
    map_kernel<R, kDense><<<grid, block, shared, ctx.stream>>>(a);
  } else if (index32 && rank == 2) {
    map_kernel<R, kRows><<<grid, block, shared, ctx.stream>>>(a);
  } else if (index32) {
    map_kernel<R, kIndex32><<<grid, block, shared, ctx.stream>>>(a);
  } else {
    map_kernel<R, kIndex64><<<grid, block, shared, ctx.stream>>>(a);
  }
  return check_launch(dense ? "map_kernel (dense)" : "map_kernel (strided)");
}

// ---- kMap: typed fast paths ------------------------------------------------------------------

// Most launches are a copy, a cast or one op over dense operands. A kernel typed on the storage
// types and the op runs them at memory speed, where the interpreter is bound by decoding and by
// its shared-memory registers. It converts with the interpreter's from_bits and to_bits and
// computes with its apply_op in float, so results are the interpreter's bit for bit.
constexpr int kFastBlock = 256;
constexpr int kFastUnroll = 2;  // 16-byte vectors in flight per operand and thread

// How an operand is read: element i, element 0 for every i (a broadcast), or an immediate.
enum FastSource : uint8_t { kFastDense = 0, kFastOne = 1, kFastImm = 2 };

struct FastArgs {
  const void* in[2];  // the op's operands (the second for binary ops only)
  void* out;
  int64_t count;
  uint8_t source[2];
  float konst[2];  // kFastImm operands
  float imm, imm2;
  float which;  // round: a kRoundHalf to f16 (0) or bf16 before the store
  bool round;
  bool vec;  // every dense operand and the output 16-byte aligned
};

template <Dt D>
constexpr int kDt = static_cast<int>(D);

// A dtype's element bits.
template <int DT>
using BitsOf = std::conditional_t<
    DT == kDt<Dt::kF64> || DT == kDt<Dt::kI64>, uint64_t,
    std::conditional_t<
        DT == kDt<Dt::kF32> || DT == kDt<Dt::kI32>, uint32_t,
        std::conditional_t<DT == kDt<Dt::kF16> || DT == kDt<Dt::kBF16>, uint16_t, uint8_t>>>;

// Elements per vector: 16 bytes of the wider of the two types (a cast moves 8 of the other).
template <int InDt, int OutDt>
constexpr int kFastWidth = 16 / std::max(sizeof(BitsOf<InDt>), sizeof(BitsOf<OutDt>));

// N elements as one 8- or 16-byte access.
template <typename E, int N>
union Pack {
  using Raw = std::conditional_t<sizeof(E) * N == 16, uint4, uint2>;
  Raw raw;
  E e[N];
};

// Op: one of apply_op's; kLoad, a copy or cast between the float types; kStore, a copy of a wide
// dtype's element bits (the interpreter's result wherever its double registers hold the value
// exactly: all but int64 beyond 2^53 and bool bytes other than 0 and 1).
template <int InDt, int OutDt, MapOp Op>
__global__ void __launch_bounds__(kFastBlock) map_fast(const __grid_constant__ FastArgs a) {
  using In = BitsOf<InDt>;
  using Out = BitsOf<OutDt>;
  using V = std::conditional_t<Op == MapOp::kStore, In, float>;
  using InPack = Pack<In, kFastWidth<InDt, OutDt>>;
  using OutPack = Pack<Out, kFastWidth<InDt, OutDt>>;
  constexpr int kN = kFastWidth<InDt, OutDt>;
  constexpr int kArity = Op >= MapOp::kAdd ? 2 : 1;
  auto value = [](In bits) -> V {
    if constexpr (Op == MapOp::kStore) {
      return bits;
    } else {
      return from_bits<float, InDt>(bits);
    }
  };
  auto result = [&a](V x, V y) -> Out {
    if constexpr (Op == MapOp::kStore) {
      return x;
    } else {
      float r = x;
      if constexpr (Op != MapOp::kLoad) r = apply_op<Op>(x, y, a.imm, a.imm2);
      if (a.round) r = round_half(r, a.which);
      return static_cast<Out>(to_bits<float, OutDt>(r));
    }
  };
  V fixed[kArity];
#pragma unroll
  for (int k = 0; k < kArity; ++k) {
    fixed[k] = a.source[k] == kFastOne ? value(static_cast<const In*>(a.in[k])[0])
                                       : static_cast<V>(a.konst[k]);
  }
  auto operand = [&](int k, In bits) { return a.source[k] == kFastDense ? value(bits) : fixed[k]; };
  const int64_t threads = int64_t{gridDim.x} * kFastBlock;
  const int64_t first = int64_t{blockIdx.x} * kFastBlock + threadIdx.x;
  const int64_t vectors = a.vec ? a.count / kN : 0;
  for (int64_t v0 = first; v0 < vectors; v0 += kFastUnroll * threads) {
    InPack x[kFastUnroll][kArity] = {};
#pragma unroll
    for (int u = 0; u < kFastUnroll; ++u) {
      const int64_t v = v0 + u * threads;
#pragma unroll
      for (int k = 0; k < kArity; ++k) {
        if (v < vectors && a.source[k] == kFastDense) {
          x[u][k].raw = static_cast<const typename InPack::Raw*>(a.in[k])[v];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kFastUnroll; ++u) {
      const int64_t v = v0 + u * threads;
      if (v < vectors) {
        OutPack y;
#pragma unroll
        for (int e = 0; e < kN; ++e) {
          y.e[e] = result(operand(0, x[u][0].e[e]), operand(kArity - 1, x[u][kArity - 1].e[e]));
        }
        static_cast<typename OutPack::Raw*>(a.out)[v] = y.raw;
      }
    }
  }
  const In* in0 = static_cast<const In*>(a.in[0]);
  const In* in1 = static_cast<const In*>(a.in[kArity - 1]);
  for (int64_t i = vectors * kN + first; i < a.count; i += threads) {
    const V x = operand(0, a.source[0] == kFastDense ? in0[i] : In{});
    const V y = operand(kArity - 1, a.source[kArity - 1] == kFastDense ? in1[i] : In{});
    static_cast<Out*>(a.out)[i] = result(x, y);
  }
}

// One resident wave of blocks, as index.cu's blocks_for: the occupancy query runs once per
// kernel, on the first (eager) run, before any capture.
template <int InDt, int OutDt, MapOp Op>
std::string run_fast(const FastArgs& a, Context& ctx) {
  static std::atomic<int> resident{0};
  int per_sm = resident.load(std::memory_order_relaxed);
  if (per_sm <= 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, map_fast<InDt, OutDt, Op>,
                                                      kFastBlock, 0) != cudaSuccess ||
        per_sm <= 0) {
      cudaGetLastError();  // not this launch's failure: keep it from check_launch
      per_sm = 2048 / kFastBlock;
    }
    resident.store(per_sm, std::memory_order_relaxed);
  }
  const int64_t per_block =
      int64_t{kFastBlock} * (a.vec ? kFastUnroll * kFastWidth<InDt, OutDt> : 1);
  const int64_t blocks =
      std::min((a.count + per_block - 1) / per_block, int64_t{sm_count()} * per_sm);
  map_fast<InDt, OutDt, Op><<<static_cast<unsigned>(blocks), kFastBlock, 0, ctx.stream>>>(a);
  return check_launch("map_fast");
}

// The ops with typed kernels: those from float to float (comparisons, logic and integer division
// make bool or integer values; a lone kRoundHalf is a cast).
constexpr bool fast_op(MapOp op) {
  return (op >= MapOp::kNeg && op <= MapOp::kGeluTanh && op != MapOp::kNot) ||
         (op >= MapOp::kAdd && op <= MapOp::kPRelu) || op == MapOp::kGeluGrad ||
         op == MapOp::kGeluTanhGrad;
}

template <int DT, int Op = static_cast<int>(MapOp::kNeg)>
std::string run_fast_op(MapOp op, const FastArgs& a, Context& ctx) {
  constexpr MapOp kOp = static_cast<MapOp>(Op);
  if constexpr (fast_op(kOp)) {
    if (op == kOp) return run_fast<DT, DT, kOp>(a, ctx);
  }
  if constexpr (kOp < MapOp::kGeluTanhGrad) {
    return run_fast_op<DT, Op + 1>(op, a, ctx);
  } else {
    return "map: no typed kernel for op " + std::to_string(static_cast<int>(op));
  }
}

template <typename F>
std::string with_float_dt(Dt dt, F&& f) {
  switch (dt) {
    case Dt::kF16:
      return f(std::integral_constant<int, kDt<Dt::kF16>>{});
    case Dt::kBF16:
      return f(std::integral_constant<int, kDt<Dt::kBF16>>{});
    default:
      return f(std::integral_constant<int, kDt<Dt::kF32>>{});
  }
}

// The dtypes of programs whose registers are float (`wide` false).
bool float_registers(Dt dt) { return dt == Dt::kF32 || dt == Dt::kF16 || dt == Dt::kBF16; }

struct FastPlan {
  MapOp op = MapOp::kLoad;  // as map_fast's Op
  Dt in = Dt::kF32, out = Dt::kF32;
};

// Whether a typed kernel runs the launch: one output, dense over the merged space; code of
// loads and immediates, at most one fast_op, at most one kRoundHalf, then the store; every
// operand dense (stride 1) or broadcast (stride 0). The values must be what the kernel computes
// in: float operands of one type (or a cast between float types), or, for a copy, one wide dtype
// both sides. Fills `a` with the operands' pointers (offset by their bases).
bool match_fast(const Resolved& r, const Merged& m, FastPlan* plan, FastArgs* a) {
  const Launch& l = *r.launch;
  const std::vector<MapInstr>& code = l.map.code;
  const int n_in = static_cast<int>(l.in.size());
  if (l.out.size() != 1 || m.rank > 1 || (m.rank == 1 && m.strides[n_in][0] != 1)) return false;
  struct Src {
    int source = -1;  // FastSource, -1: not a loaded value
    int input = 0;
    double imm = 0;
  };
  Src reg[kMaxMapRegisters];
  size_t pc = 0;
  for (; pc < code.size() && (code[pc].op == MapOp::kLoad || code[pc].op == MapOp::kConst); ++pc) {
    const MapInstr& ins = code[pc];
    if (ins.op == MapOp::kConst) {
      reg[ins.dst] = {kFastImm, 0, ins.imm};
      continue;
    }
    const int64_t stride = m.rank == 1 ? m.strides[ins.a][0] : 0;
    if (stride != 0 && stride != 1) return false;
    reg[ins.dst] = {stride == 0 ? kFastOne : kFastDense, ins.a, 0};
  }
  MapOp op = MapOp::kLoad;
  Src operand[2];
  int value = -1;  // the register the result is in
  if (pc < code.size() && fast_op(code[pc].op)) {
    const MapInstr& ins = code[pc++];
    op = ins.op;
    operand[0] = reg[ins.a];
    operand[1] = op >= MapOp::kAdd ? reg[ins.b] : operand[0];
    value = ins.dst;
    a->imm = static_cast<float>(ins.imm);
    a->imm2 = static_cast<float>(ins.imm2);
  }
  const bool round = pc < code.size() && code[pc].op == MapOp::kRoundHalf;
  const MapInstr& store = code.back();
  if (pc + (round ? 2 : 1) != code.size() || store.op != MapOp::kStore || store.a != 0) {
    return false;
  }
  if (value < 0) {  // a copy or cast: the value stored is a loaded one
    value = round ? code[pc].a : store.b;
    operand[0] = operand[1] = reg[value];
  }
  if (round) {
    if (code[pc].a != value) return false;
    value = code[pc].dst;
    a->round = true;
    a->which = static_cast<float>(code[pc].imm);
  }
  if (store.b != value || operand[0].source < 0 || operand[1].source < 0) return false;

  const Dt out_dt = l.out[0].ref.dt;
  Dt in_dt = out_dt;
  bool loads = false;
  for (const Src& s : operand) {
    if (s.source == kFastImm) continue;
    const Dt dt = l.in[s.input].ref.dt;
    if (loads && dt != in_dt) return false;
    in_dt = dt;
    loads = true;
  }
  if (!l.map.wide && float_registers(in_dt) && float_registers(out_dt) &&
      (op == MapOp::kLoad || in_dt == out_dt)) {
    *plan = {op, in_dt, out_dt};
  } else if (l.map.wide && op == MapOp::kLoad && !round && loads && in_dt == out_dt &&
             !float_registers(in_dt)) {
    *plan = {MapOp::kStore, in_dt, out_dt};
  } else {
    return false;
  }

  auto at = [](const void* base, const Access& access) {
    return static_cast<const char*>(base) + access.base * dt_size(access.ref.dt);
  };
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  a->count = l.space.count();
  a->out = const_cast<char*>(at(r.out[0], l.out[0]));
  a->vec = aligned(a->out);
  for (int k = 0; k < 2; ++k) {
    a->source[k] = static_cast<uint8_t>(operand[k].source);
    if (operand[k].source == kFastImm) {
      a->konst[k] = static_cast<float>(operand[k].imm);
    } else {
      a->in[k] = at(r.in[operand[k].input], l.in[operand[k].input]);
      if (operand[k].source == kFastDense) a->vec = a->vec && aligned(a->in[k]);
    }
  }
  return true;
}

std::string launch_fast(const FastPlan& p, const FastArgs& a, Context& ctx) {
  if (p.op == MapOp::kStore) {
    switch (dt_size(p.in)) {
      case 8:
        return run_fast<kDt<Dt::kI64>, kDt<Dt::kI64>, MapOp::kStore>(a, ctx);
      case 4:
        return run_fast<kDt<Dt::kI32>, kDt<Dt::kI32>, MapOp::kStore>(a, ctx);
      default:
        return run_fast<kDt<Dt::kU8>, kDt<Dt::kU8>, MapOp::kStore>(a, ctx);
    }
  }
  return with_float_dt(p.in, [&](auto in) {
    constexpr int kIn = decltype(in)::value;
    if (p.op != MapOp::kLoad) return run_fast_op<kIn>(p.op, a, ctx);
    return with_float_dt(
        p.out, [&](auto out) { return run_fast<kIn, decltype(out)::value, MapOp::kLoad>(a, ctx); });
  });
}

// ---- kReduce ---------------------------------------------------------------------------------

// What the reduction accumulates: sum (and mean), sum of squares, max, min.
enum ReduceKind : int { kRedSum = 0, kRedSquare = 1, kRedMax = 2, kRedMin = 3 };

template <int Kind, typename A>
struct RedOp {
  static __device__ __forceinline__ A identity() {
    if constexpr (Kind == kRedMax)
      return -infinity<A>();
    else if constexpr (Kind == kRedMin)
      return infinity<A>();
    else
      return A(0);
  }
  static __device__ __forceinline__ A take(A acc, A x) {
    if constexpr (Kind == kRedSum)
      return acc + x;
    else if constexpr (Kind == kRedSquare)
      return acc + x * x;
    else if constexpr (Kind == kRedMax)
      return max_nan(acc, x);
    else
      return min_nan(acc, x);
  }
  static __device__ __forceinline__ A combine(A x, A y) {
    if constexpr (Kind == kRedSum || Kind == kRedSquare)
      return x + y;
    else if constexpr (Kind == kRedMax)
      return max_nan(x, y);
    else
      return min_nan(x, y);
  }
};

// A reading of the input: a storage type, or Generic for the integer dtypes (converted by a
// run-time switch, accumulated in double).
struct Generic {};
template <typename S>
using AccOf =
    std::conditional_t<std::is_same_v<S, double> || std::is_same_v<S, Generic>, double, float>;

struct ReduceArgs {
  const void* in;
  void* out;
  void* partial;  // AccOf slots, [K][splits], when splits > 1
  int64_t in_base, out_base;
  int64_t K, N;
  int32_t kr;                                        // merged kept rank
  int32_t rr;                                        // merged reduced rank
  int64_t kd[kMaxRank], ks[kMaxRank], os[kMaxRank];  // kept dims, input and output strides
  int64_t rd[kMaxRank], rs[kMaxRank];                // reduced dims and input strides
  int64_t r_inner, r_inner_stride, r_outer;          // reduced = r_outer x r_inner (innermost)
  int64_t splits, slice;                             // the reduced flat range cut in `splits`
  int32_t tx;                                        // reduce_cols: outputs per block
  uint8_t in_dt, out_dt;
  bool mean;
};

template <typename S, typename A>
__device__ __forceinline__ A load_red(const ReduceArgs& a, int64_t off) {
  if constexpr (std::is_same_v<S, Generic>) {
    return load_any<A>(a.in, a.in_dt, off);
  } else {
    return from_storage<A>(static_cast<const S*>(a.in)[off]);
  }
}

__device__ __forceinline__ void kept_offsets(const ReduceArgs& a, int64_t o, int64_t* in_off,
                                             int64_t* out_off) {
  int64_t i = a.in_base, p = a.out_base, rest = o;
  for (int d = a.kr - 1; d >= 0; --d) {
    const int64_t q = rest / a.kd[d];
    const int64_t idx = rest - q * a.kd[d];
    i += idx * a.ks[d];
    p += idx * a.os[d];
    rest = q;
  }
  *in_off = i;
  *out_off = p;
}

// Offset of the reduced dims above the innermost one at flat index ro.
__device__ __forceinline__ int64_t reduced_outer_offset(const ReduceArgs& a, int64_t ro) {
  int64_t off = 0;
  for (int d = a.rr - 2; d >= 0; --d) {
    const int64_t q = ro / a.rd[d];
    off += (ro - q * a.rd[d]) * a.rs[d];
    ro = q;
  }
  return off;
}

template <typename A>
__device__ __forceinline__ void store_result(const ReduceArgs& a, int64_t out_off, A v) {
  if (a.mean) v = v / static_cast<A>(a.N);  // 0 / 0 is NaN for an empty mean
  store_any<A>(a.out, a.out_dt, out_off, v);
}

template <int Kind, typename A>
__device__ __forceinline__ A warp_combine(A v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1)
    v = RedOp<Kind, A>::combine(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

// Rows: the reduced innermost dim is contiguous. `tpo` threads per output (a warp, or the whole
// block for few long rows); with splits, each (output, slice) is one row of partial results.
template <int Kind, typename S>
__global__ void __launch_bounds__(512) reduce_rows(const __grid_constant__ ReduceArgs a, int tpo) {
  using A = AccOf<S>;
  using Op = RedOp<Kind, A>;
  __shared__ A warp_values[32];
  const int lane = threadIdx.x % tpo;
  const int groups = blockDim.x / tpo;
  const int64_t items = a.K * a.splits;
  for (int64_t first = int64_t{blockIdx.x} * groups; first < items;
       first += int64_t{gridDim.x} * groups) {
    const int64_t item = first + threadIdx.x / tpo;
    A acc = Op::identity();
    int64_t out_off = 0;
    if (item < items) {
      const int64_t o = item / a.splits, s = item - o * a.splits;
      int64_t in_off = 0;
      kept_offsets(a, o, &in_off, &out_off);
      const int64_t lo = s * a.slice, hi = min64(a.r_inner, lo + a.slice);
      for (int64_t ro = 0; ro < a.r_outer; ++ro) {
        const int64_t row = in_off + reduced_outer_offset(a, ro);
#pragma unroll 4
        for (int64_t ri = lo + lane; ri < hi; ri += tpo)
          acc = Op::take(acc, load_red<S, A>(a, row + ri));
      }
    }
    acc = warp_combine<Kind>(acc);
    if (tpo > 32) {  // uniform: the whole block works on one item
      if (threadIdx.x % 32 == 0) warp_values[threadIdx.x / 32] = acc;
      __syncthreads();
      if (threadIdx.x < 32) {
        acc = threadIdx.x < blockDim.x / 32 ? warp_values[threadIdx.x] : Op::identity();
        acc = warp_combine<Kind>(acc);
      }
      __syncthreads();
    }
    if (lane == 0 && item < items) {
      if (a.splits > 1) {
        static_cast<A*>(a.partial)[item] = acc;
      } else {
        store_result(a, out_off, acc);
      }
    }
  }
}

// Columns: `tx` neighbouring outputs per block, each reduced by blockDim / tx threads that split
// its reduced range (a slice of it, with splits) and combine through shared memory.
template <int Kind, typename S>
__global__ void __launch_bounds__(256) reduce_cols(const __grid_constant__ ReduceArgs a) {
  using A = AccOf<S>;
  using Op = RedOp<Kind, A>;
  __shared__ A values[256];
  const int tx_count = a.tx;
  const int ty_count = blockDim.x / tx_count;
  const int tx = threadIdx.x % tx_count, ty = threadIdx.x / tx_count;
  const int64_t tiles = (a.K + tx_count - 1) / tx_count;
  const int64_t items = tiles * a.splits;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t tile = item / a.splits, s = item - tile * a.splits;
    const int64_t o = tile * tx_count + tx;
    A acc = Op::identity();
    int64_t out_off = 0;
    if (o < a.K) {
      int64_t in_off = 0;
      kept_offsets(a, o, &in_off, &out_off);
      const int64_t lo = s * a.slice, hi = min64(a.N, lo + a.slice);
      const int64_t per = (hi - lo + ty_count - 1) / ty_count;
      const int64_t j0 = min64(hi, lo + ty * per), j1 = min64(hi, j0 + per);
      if (a.r_outer == 1) {
        const int64_t step = a.r_inner_stride;
#pragma unroll 4
        for (int64_t j = j0; j < j1; ++j) acc = Op::take(acc, load_red<S, A>(a, in_off + j * step));
      } else if (j0 < j1) {
        int64_t ro = j0 / a.r_inner, ri = j0 - ro * a.r_inner;
        int64_t row = in_off + reduced_outer_offset(a, ro);
        for (int64_t j = j0; j < j1; ++j) {
          acc = Op::take(acc, load_red<S, A>(a, row + ri * a.r_inner_stride));
          if (++ri == a.r_inner && j + 1 < j1) {
            ri = 0;
            row = in_off + reduced_outer_offset(a, ++ro);
          }
        }
      }
    }
    values[threadIdx.x] = acc;
    __syncthreads();
    for (int half = ty_count / 2; half > 0; half /= 2) {
      if (ty < half) {
        values[threadIdx.x] =
            Op::combine(values[threadIdx.x], values[threadIdx.x + half * tx_count]);
      }
      __syncthreads();
    }
    if (ty == 0 && o < a.K) {
      if (a.splits > 1) {
        static_cast<A*>(a.partial)[o * a.splits + s] = values[tx];
      } else {
        store_result(a, out_off, values[tx]);
      }
    }
    __syncthreads();
  }
}

// The partial results of each output combined in a fixed order, one warp per output.
template <int Kind, typename A>
__global__ void __launch_bounds__(256) reduce_final(const __grid_constant__ ReduceArgs a) {
  using Op = RedOp<Kind, A>;
  const int lane = threadIdx.x % 32;
  const A* partial = static_cast<const A*>(a.partial);
  for (int64_t first = int64_t{blockIdx.x} * (blockDim.x / 32); first < a.K;
       first += int64_t{gridDim.x} * (blockDim.x / 32)) {
    const int64_t o = first + threadIdx.x / 32;
    A acc = Op::identity();
    if (o < a.K) {
      for (int64_t s = lane; s < a.splits; s += 32)
        acc = Op::combine(acc, partial[o * a.splits + s]);
    }
    acc = warp_combine<Kind>(acc);
    if (lane == 0 && o < a.K) {
      int64_t in_off = 0, out_off = 0;
      kept_offsets(a, o, &in_off, &out_off);
      store_result(a, out_off, acc);
    }
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <int Kind, typename S>
std::string launch_reduce(ReduceArgs a, Context& ctx) {
  using A = AccOf<S>;
  const int sms = sm_count();
  const int64_t workspace_slots =
      ctx.workspace ? static_cast<int64_t>(ctx.workspace_bytes / sizeof(A)) : 0;
  a.partial = ctx.workspace;
  a.splits = 1;
  a.slice = a.N;
  const bool rows = a.rr >= 1 && a.r_inner_stride == 1 && a.r_inner >= 32;
  if (rows) {
    int tpo = 32;
    if (a.K <= int64_t{2} * sms && a.N >= 4096) tpo = 512;
    a.slice = a.r_inner;
    // Few long rows: slices over more blocks, combined by reduce_final (deterministic).
    if (tpo == 512 && a.r_outer == 1 && a.N >= 65536) {
      const int64_t splits = std::min(ceil_div(a.N, 16384), ceil_div(int64_t{4} * sms, a.K));
      if (splits > 1 && a.K * splits <= workspace_slots) {
        a.splits = splits;
        a.slice = ceil_div(a.N, splits);
      }
    }
    const int block = tpo == 512 ? 512 : 256;
    const int64_t groups = ceil_div(a.K * a.splits, block / tpo);
    const int64_t grid = std::min<int64_t>(groups, int64_t{sms} * (2048 / block) * 4);
    reduce_rows<Kind, S><<<static_cast<unsigned>(grid), block, 0, ctx.stream>>>(a, tpo);
    std::string error = check_launch("reduce_rows");
    if (!error.empty()) return error;
  } else {
    const int64_t target = int64_t{2} * sms;
    int tx = 32;
    while (tx > 1 && tx / 2 >= a.K) tx /= 2;
    // Without room for partial results, narrower tiles spread the outputs over more blocks.
    const int64_t ty = 256 / tx;
    int64_t tiles = ceil_div(a.K, tx);
    if (tiles < target && a.N >= 2048) {
      const int64_t splits = std::min(ceil_div(int64_t{4} * sms, tiles), ceil_div(a.N, ty * 16));
      if (splits > 1 && a.K * splits <= workspace_slots) {
        a.splits = splits;
        a.slice = ceil_div(a.N, splits);
      }
    }
    if (a.splits == 1) {
      while (tx > 8 && ceil_div(a.K, tx) < target && 256 / tx < a.N) tx /= 2;
      tiles = ceil_div(a.K, tx);
    }
    a.tx = tx;
    const int64_t grid = std::min<int64_t>(tiles * a.splits, int64_t{sms} * 8 * 4);
    reduce_cols<Kind, S><<<static_cast<unsigned>(grid), 256, 0, ctx.stream>>>(a);
    std::string error = check_launch("reduce_cols");
    if (!error.empty()) return error;
  }
  if (a.splits > 1) {
    const int64_t grid = std::min<int64_t>(ceil_div(a.K, 8), int64_t{sms} * 8 * 4);
    reduce_final<Kind, A><<<static_cast<unsigned>(grid), 256, 0, ctx.stream>>>(a);
    return check_launch("reduce_final");
  }
  return "";
}

template <typename S>
std::string reduce_with(ReduceOp op, const ReduceArgs& a, Context& ctx) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return launch_reduce<kRedSum, S>(a, ctx);
    case ReduceOp::kSumSquare:
      return launch_reduce<kRedSquare, S>(a, ctx);
    case ReduceOp::kMax:
      return launch_reduce<kRedMax, S>(a, ctx);
    case ReduceOp::kMin:
      return launch_reduce<kRedMin, S>(a, ctx);
  }
  return "reduce: unknown op " + std::to_string(static_cast<int>(op));
}

}  // namespace

std::string enqueue_map(const Resolved& r, Context& ctx) {
  const Launch& l = *r.launch;
  const int n_in = static_cast<int>(l.in.size()), n_out = static_cast<int>(l.out.size());
  if (n_in > kMaxMapInputs || n_out > kMaxMapOutputs ||
      static_cast<int>(l.map.code.size()) > kMaxMapCode) {
    return "map: " + std::to_string(n_in) + " inputs, " + std::to_string(n_out) + " outputs and " +
           std::to_string(l.map.code.size()) + " instructions exceed the limits " +
           std::to_string(kMaxMapInputs) + ", " + std::to_string(kMaxMapOutputs) + " and " +
           std::to_string(kMaxMapCode);
  }
  if (l.space.rank < 0 || l.space.rank > kMaxRank) {
    return "map: rank " + std::to_string(l.space.rank) + " is not in [0, " +
           std::to_string(kMaxRank) + "]";
  }
  for (int k = 0; k < n_in; ++k) {
    if (!r.in[k]) return "map: input " + std::to_string(k) + " has no pointer";
  }
  for (int k = 0; k < n_out; ++k) {
    if (!r.out[k]) return "map: output " + std::to_string(k) + " has no pointer";
  }
  std::vector<MapInstrDev> packed;
  int slots = 1;
  const std::string invalid = pack_registers(l.map.code, n_in, n_out, packed, &slots);
  if (!invalid.empty()) return "map: " + invalid;
  if (l.space.count() <= 0 || packed.empty()) return "";
  const Merged m = merge_launch(l);
  FastPlan plan;
  FastArgs fast{};
  if (match_fast(r, m, &plan, &fast)) return launch_fast(plan, fast, ctx);
  return l.map.wide ? launch_map<double>(r, ctx, packed, slots, m)
                    : launch_map<float>(r, ctx, packed, slots, m);
}

std::string enqueue_reduce(const Resolved& r, Context& ctx) {
  const Launch& l = *r.launch;
  if (l.in.empty() || l.out.empty() || !r.in[0] || !r.out[0])
    return "reduce: needs one input and one output";
  const ReduceParams& p = l.reduce;
  if (l.space.rank < 0 || l.space.rank > kMaxRank || p.reduced.rank < 0 ||
      p.reduced.rank > kMaxRank) {
    return "reduce: rank out of range";
  }
  ReduceArgs a{};
  a.in = r.in[0];
  a.out = r.out[0];
  a.in_base = l.in[0].base;
  a.out_base = l.out[0].base;
  a.in_dt = static_cast<uint8_t>(l.in[0].ref.dt);
  a.out_dt = static_cast<uint8_t>(l.out[0].ref.dt);
  a.mean = p.op == ReduceOp::kMean;
  a.K = l.space.count();
  a.N = p.reduced.count();
  if (a.K <= 0) return "";
  {
    int64_t strides[2][kMaxRank] = {};
    std::copy(l.in[0].strides, l.in[0].strides + kMaxRank, strides[0]);
    std::copy(l.out[0].strides, l.out[0].strides + kMaxRank, strides[1]);
    int rank = 0;
    merge_dims(l.space.rank, l.space.dims, 2, strides, &rank, a.kd);
    a.kr = rank;
    std::copy(strides[0], strides[0] + kMaxRank, a.ks);
    std::copy(strides[1], strides[1] + kMaxRank, a.os);
  }
  {
    int64_t strides[1][kMaxRank] = {};
    std::copy(p.reduced_strides, p.reduced_strides + kMaxRank, strides[0]);
    int rank = 0;
    merge_dims(p.reduced.rank, p.reduced.dims, 1, strides, &rank, a.rd);
    a.rr = rank;
    std::copy(strides[0], strides[0] + kMaxRank, a.rs);
  }
  if (a.N == 0) {
    a.rr = 0;  // an empty space: nothing is read, every output gets the identity
    a.r_inner = 0;
    a.r_outer = 0;
    a.r_inner_stride = 0;
  } else if (a.rr == 0) {
    a.r_inner = 1;
    a.r_outer = 1;
    a.r_inner_stride = 0;
  } else {
    a.r_inner = a.rd[a.rr - 1];
    a.r_inner_stride = a.rs[a.rr - 1];
    a.r_outer = a.N / a.r_inner;
  }
  switch (l.in[0].ref.dt) {
    case Dt::kF32:
      return reduce_with<float>(p.op, a, ctx);
    case Dt::kF16:
      return reduce_with<__half>(p.op, a, ctx);
    case Dt::kBF16:
      return reduce_with<__nv_bfloat16>(p.op, a, ctx);
    case Dt::kF64:
      return reduce_with<double>(p.op, a, ctx);
    default:
      return reduce_with<Generic>(p.op, a, ctx);
  }
}

}  // namespace autopar::cuda
