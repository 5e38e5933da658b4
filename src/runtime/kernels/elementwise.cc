// Elementwise kernels: broadcast arithmetic, comparisons and logic, unary math and
// activations, Clip, Where, variadic Max/Min/Sum/Mean, Identity, Cast and Dropout.
#include <array>
#include <cmath>
#include <concepts>
#include <limits>
#include <type_traits>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "activation.h"
#include "autopar/parallel/layout.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/plan_runner.h"
#include "for_lanes.h"
#include "kernel_util.h"

namespace autopar::runtime {
namespace {

// ---- dtypes ---------------------------------------------------------------------------

// Storage of the 16-bit floats and of bool, as distinct types so that Cast can tell them
// from the integers of the same size.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
struct Bool {
  uint8_t byte;
};

// Calls f(T{}) for the arithmetic dtypes: f32, f64 and the eight integer types.
template <typename F>
Status dispatch_arithmetic(const KernelContext& ctx, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kInt8:
      return f(int8_t{});
    case DType::kInt16:
      return f(int16_t{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kUInt8:
      return f(uint8_t{});
    case DType::kUInt16:
      return f(uint16_t{});
    case DType::kUInt32:
      return f(uint32_t{});
    case DType::kUInt64:
      return f(uint64_t{});
    default:
      return ctx.fail("dtype {} is not supported by the CPU kernel", dtype_name(dtype));
  }
}

// The arithmetic dtypes and bool (read as its byte), for comparisons.
template <typename F>
Status dispatch_comparable(const KernelContext& ctx, DType dtype, F&& f) {
  if (dtype == DType::kBool) return f(uint8_t{});
  return dispatch_arithmetic(ctx, dtype, std::forward<F>(f));
}

// Every dtype Cast converts between.
template <typename F>
Status dispatch_castable(const KernelContext& ctx, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat16:
      return f(Float16{});
    case DType::kBFloat16:
      return f(BFloat16{});
    case DType::kBool:
      return f(Bool{});
    default:
      return dispatch_arithmetic(ctx, dtype, std::forward<F>(f));
  }
}

// ---- integer semantics ----------------------------------------------------------------

// Integer arithmetic wraps, as in numpy: it is done in an unsigned type at least as wide as
// unsigned int, where overflow is defined, and converted back (modular since C++20).
template <typename T>
using Wide = decltype(0u + std::make_unsigned_t<T>());

template <typename T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
  } else {
    return a + b;
  }
}

template <typename T>
T subtract(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
  } else {
    return a - b;
  }
}

template <typename T>
T multiply(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
  } else {
    return a * b;
  }
}

template <typename T>
T negate(T a) {
  return subtract(T(0), a);
}

// Integer division truncates toward zero; x / 0 is defined as 0 and INT_MIN / -1 wraps to
// INT_MIN, where C++ would trap.
template <typename T>
T divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return T(0);
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return negate(a);
    }
  }
  return a / b;
}

// NaN wins, as in numpy's maximum and minimum.
template <typename T>
T max_of(T a, T b) {
  return a != a || a > b ? a : b;
}
template <typename T>
T min_of(T a, T b) {
  return a != a || a < b ? a : b;
}

// Float to integer: truncation toward zero, saturating at the type's range, NaN → 0 (what
// Tensor::set_from_double does, so folded and executed casts agree).
template <std::integral D, std::floating_point V>
D saturating_cast(V value) {
  const double v = static_cast<double>(value);
  if (!(v == v)) return D(0);
  if (v <= static_cast<double>(std::numeric_limits<D>::lowest())) {
    return std::numeric_limits<D>::lowest();
  }
  if (v >= static_cast<double>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
  return static_cast<D>(v);
}

// Integer powers by squaring (wrapping); a negative exponent truncates 1 / base^-e to zero
// unless |base| = 1.
template <std::integral T, std::integral E>
T integer_power(T base, E exponent) {
  if constexpr (std::is_signed_v<E>) {
    if (exponent < 0) {
      if (base == 1) return T(1);
      if constexpr (std::is_signed_v<T>) {
        if (base == -1) return exponent % 2 == 0 ? T(1) : T(-1);
      }
      return T(0);
    }
  }
  T result = 1;
  while (exponent != 0) {
    if (exponent & 1) result = multiply(result, base);
    base = multiply(base, base);
    exponent /= 2;
  }
  return result;
}

template <typename B, typename E>
B power(B base, E exponent) {
  if constexpr (std::is_floating_point_v<B>) {
    return std::pow(base, static_cast<B>(exponent));
  } else if constexpr (std::is_floating_point_v<E>) {
    return saturating_cast<B>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  } else {
    return integer_power(base, exponent);
  }
}

// ---- loops ----------------------------------------------------------------------------

// The output's dims with each operand's strides (0 where it broadcasts), size-1 dims dropped
// and neighbours merged where every operand walks them contiguously or not at all. Same-shape
// operands become one contiguous run; a scalar operand becomes a stride-0 run.
template <size_t N>
struct BroadcastLoop {
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, N> strides;
};

template <size_t N>
BroadcastLoop<N> broadcast_loop(const std::vector<int64_t>& out_dims,
                                const std::array<const Tensor*, N>& operands) {
  std::array<std::vector<int64_t>, N> full;
  for (size_t k = 0; k < N; ++k) full[k] = broadcast_strides(operands[k]->dims(), out_dims);
  BroadcastLoop<N> loop;
  for (size_t d = 0; d < out_dims.size(); ++d) {
    if (out_dims[d] == 1) continue;
    bool merge = !loop.dims.empty();
    for (size_t k = 0; k < N && merge; ++k) {
      merge = loop.strides[k].back() == full[k][d] * out_dims[d];
    }
    if (merge) {
      loop.dims.back() *= out_dims[d];
      for (size_t k = 0; k < N; ++k) loop.strides[k].back() = full[k][d];
    } else {
      loop.dims.push_back(out_dims[d]);
      for (size_t k = 0; k < N; ++k) loop.strides[k].push_back(full[k][d]);
    }
  }
  return loop;
}

// Calls run(out_index, count, offsets, inner_strides) for each stretch of the output range
// [begin, end) along the innermost dim, with every operand's element offset at its start.
template <size_t N, typename Run>
void for_each_run(const BroadcastLoop<N>& loop, int64_t begin, int64_t end, const Run& run) {
  std::array<int64_t, N> offsets{}, inner{};
  const size_t rank = loop.dims.size();
  if (rank == 0) {
    run(begin, end - begin, offsets, inner);
    return;
  }
  std::vector<int64_t> index(rank);
  int64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    index[d] = rest % loop.dims[d];
    rest /= loop.dims[d];
    for (size_t k = 0; k < N; ++k) offsets[k] += index[d] * loop.strides[k][d];
  }
  for (size_t k = 0; k < N; ++k) inner[k] = loop.strides[k][rank - 1];
  for (int64_t at = begin; at < end;) {
    const int64_t count = std::min(loop.dims[rank - 1] - index[rank - 1], end - at);
    run(at, count, offsets, inner);
    at += count;
    index[rank - 1] += count;
    for (size_t k = 0; k < N; ++k) offsets[k] += count * inner[k];
    for (size_t d = rank - 1; d > 0 && index[d] == loop.dims[d]; --d) {
      index[d] = 0;
      ++index[d - 1];
      for (size_t k = 0; k < N; ++k) {
        offsets[k] += loop.strides[k][d - 1] - loop.dims[d] * loop.strides[k][d];
      }
    }
  }
}

// Splits the output into chunks of about `work_per_chunk` / `work_per_element` elements;
// every element is computed once, by one chunk, so results do not depend on the threads.
template <size_t N, typename Run>
void parallel_runs(const BroadcastLoop<N>& loop, int64_t count, int64_t work_per_element,
                   const Run& run) {
  parallel_for(count, grain_for(work_per_element),
               [&](int64_t begin, int64_t end) { for_each_run(loop, begin, end, run); });
}

// out[i] = op(a[i·sa], b[i·sb]): contiguous loops for the stride patterns broadcasting
// produces (both operands contiguous, either one a repeated scalar), strided otherwise.
template <typename A, typename B, typename O, typename Op>
void binary_run(const A* a, int64_t sa, const B* b, int64_t sb, O* out, int64_t n, const Op& op) {
  if (sa == 1 && sb == 1) {
    for_lanes(n, [&](int64_t i) { out[i] = op(a[i], b[i]); });
  } else if (sa == 0 && sb == 1) {
    const A scalar = *a;
    for_lanes(n, [&](int64_t i) { out[i] = op(scalar, b[i]); });
  } else if (sa == 1 && sb == 0) {
    const B scalar = *b;
    for_lanes(n, [&](int64_t i) { out[i] = op(a[i], scalar); });
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i * sa], b[i * sb]);
  }
}

// out = op(a, b) with numpy broadcasting onto out's dims. `a` may be `out` itself.
template <typename A, typename B, typename O, typename Op>
void binary(const Tensor& a, const Tensor& b, Tensor& out, const Op& op,
            int64_t work_per_element = 1) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const BroadcastLoop<2> loop = broadcast_loop<2>(out.dims(), {&a, &b});
  const A* pa = data_of<A>(a);
  const B* pb = data_of<B>(b);
  O* po = mutable_data_of<O>(out);
  parallel_runs(loop, n, work_per_element,
                [&](int64_t at, int64_t count, const auto& offsets, const auto& inner) {
                  binary_run(pa + offsets[0], inner[0], pb + offsets[1], inner[1], po + at, count,
                             op);
                });
}

template <typename T>
void broadcast_copy(const Tensor& in, Tensor& out) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const BroadcastLoop<1> loop = broadcast_loop<1>(out.dims(), {&in});
  const T* source = data_of<T>(in);
  T* target = mutable_data_of<T>(out);
  parallel_runs(loop, n, 1, [&](int64_t at, int64_t count, const auto& offsets, const auto& inner) {
    const T* from = source + offsets[0];
    if (inner[0] == 0) {
      std::fill(target + at, target + at + count, *from);
    } else {
      std::copy(from, from + count, target + at);
    }
  });
}

template <typename T, typename O, typename Op>
void unary(const Tensor& x, Tensor& y, const Op& op, int64_t work_per_element = 1) {
  const T* in = data_of<T>(x);
  O* out = mutable_data_of<O>(y);
  parallel_for(x.num_elements(), grain_for(work_per_element), [&](int64_t begin, int64_t end) {
    for_lanes(end - begin, [&](int64_t i) { out[begin + i] = op(in[begin + i]); });
  });
}

// ---- binary ops -----------------------------------------------------------------------

// Add Sub Mul Div and PRelu: one dtype in and out.
template <typename Op>
Kernel arithmetic_kernel(Op op) {
  return [op](KernelContext& ctx) -> Status {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    Tensor& y = ctx.allocate_output(0);
    return dispatch_arithmetic(ctx, a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      binary<T, T, T>(a, b, y, [&op](T u, T v) { return op(u, v); });
      return Status::ok();
    });
  };
}

// Pow's exponent may have any arithmetic dtype; the result has the base's.
Status pow_kernel(KernelContext& ctx) {
  const Tensor& base = ctx.input(0);
  const Tensor& exponent = ctx.input(1);
  Tensor& y = ctx.allocate_output(0);
  return dispatch_numeric(ctx, base.dtype(), [&](auto base_tag) {
    using B = decltype(base_tag);
    return dispatch_arithmetic(ctx, exponent.dtype(), [&](auto exponent_tag) {
      using E = decltype(exponent_tag);
      binary<B, E, B>(
          base, exponent, y, [](B u, E v) { return power(u, v); }, 8);
      return Status::ok();
    });
  });
}

template <typename Test>
Kernel comparison_kernel(Test test) {
  return [test](KernelContext& ctx) -> Status {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    Tensor& y = ctx.allocate_output(0);
    return dispatch_comparable(ctx, a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      binary<T, T, uint8_t>(a, b, y, [&test](T u, T v) -> uint8_t { return test(u, v) ? 1 : 0; });
      return Status::ok();
    });
  };
}

template <typename Logic>
Kernel logic_kernel(Logic logic) {
  return [logic](KernelContext& ctx) -> Status {
    binary<uint8_t, uint8_t, uint8_t>(
        ctx.input(0), ctx.input(1), ctx.allocate_output(0),
        [&logic](uint8_t u, uint8_t v) -> uint8_t { return logic(u != 0, v != 0) ? 1 : 0; });
    return Status::ok();
  };
}

Status not_kernel(KernelContext& ctx) {
  unary<uint8_t, uint8_t>(ctx.input(0), ctx.allocate_output(0),
                          [](uint8_t v) -> uint8_t { return v == 0 ? 1 : 0; });
  return Status::ok();
}

// ---- unary ops ------------------------------------------------------------------------

// Float-only math; `make_op(ctx)` reads the node's attributes and returns the per-element
// function, generic over float and double.
template <typename MakeOp>
Kernel float_unary_kernel(MakeOp make_op, int64_t work_per_element = 8) {
  return [make_op, work_per_element](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.allocate_output(0);
    const auto op = make_op(ctx);
    return dispatch_float(ctx, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      unary<T, T>(
          x, y, [&op](T v) { return static_cast<T>(op(v)); }, work_per_element);
      return Status::ok();
    });
  };
}

template <typename MakeOp>
Kernel arithmetic_unary_kernel(MakeOp make_op) {
  return [make_op](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.allocate_output(0);
    const auto op = make_op(ctx);
    return dispatch_arithmetic(ctx, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      unary<T, T>(x, y, [&op](T v) { return static_cast<T>(op(v)); });
      return Status::ok();
    });
  };
}

// A unary op without attributes.
template <typename Op>
auto plain(Op op) {
  return [op](const KernelContext&) { return op; };
}

// Transcendental ops through Eigen's array functions, which evaluate several lanes per
// instruction (exp, log, tanh, erf, logistic), chunked over threads like every other loop.
template <typename ArrayOp>
Kernel array_unary_kernel(ArrayOp array_op) {
  return [array_op](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.allocate_output(0);
    return dispatch_float(ctx, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
      const T* in = data_of<T>(x);
      T* out = mutable_data_of<T>(y);
      const int64_t n = x.num_elements();
      parallel_for((n + kElementwiseTile - 1) / kElementwiseTile, 1,
                   [&](int64_t first_tile, int64_t end_tile) {
                     for (int64_t tile = first_tile; tile < end_tile; ++tile) {
                       const int64_t begin = tile * kElementwiseTile;
                       const int64_t count = std::min(kElementwiseTile, n - begin);
                       Eigen::Map<Array>(out + begin, count) =
                           array_op(Eigen::Map<const Array>(in + begin, count));
                     }
                   });
      return Status::ok();
    });
  };
}

template <typename T>
T sigmoid(T x) {
  // exp of a non-positive argument only, so neither branch overflows.
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

void register_unary(KernelRegistry& registry) {
  registry.add("", "Sqrt", float_unary_kernel(plain([](auto x) { return std::sqrt(x); })));
  registry.add("", "Floor", float_unary_kernel(plain([](auto x) { return std::floor(x); })));
  registry.add("", "Ceil", float_unary_kernel(plain([](auto x) { return std::ceil(x); })));
  registry.add("", "Reciprocal",
               float_unary_kernel(plain([](auto x) { return decltype(x)(1) / x; }), 1));
  registry.add("", "Exp", array_unary_kernel([](const auto& x) { return x.exp(); }));
  registry.add("", "Log", array_unary_kernel([](const auto& x) { return x.log(); }));
  registry.add("", "Erf", array_unary_kernel([](const auto& x) { return x.erf(); }));
  registry.add("", "Tanh", array_unary_kernel([](const auto& x) { return x.tanh(); }));
  registry.add("", "Sigmoid", float_unary_kernel(plain([](auto x) { return sigmoid(x); })));
  // log(1 + e^x) without overflow: x + log1p(e^-x) for positive x.
  registry.add("", "Softplus", float_unary_kernel(plain([](auto x) {
                 return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
               })));
  registry.add("", "Softsign",
               float_unary_kernel(plain([](auto x) { return x / (1 + std::abs(x)); }), 1));
  registry.add("", "HardSwish", float_unary_kernel(plain([](auto x) { return hard_swish(x); }), 1));
  registry.add("", "LeakyRelu",
               float_unary_kernel(
                   [](const KernelContext& ctx) {
                     const float alpha = ctx.node().attr_float("alpha", 0.01f);
                     return
                         [alpha](auto x) { return leaky_relu(x, static_cast<decltype(x)>(alpha)); };
                   },
                   1));
  registry.add("", "HardSigmoid",
               float_unary_kernel(
                   [](const KernelContext& ctx) {
                     const float alpha = ctx.node().attr_float("alpha", 0.2f);
                     const float beta = ctx.node().attr_float("beta", 0.5f);
                     return [alpha, beta](auto x) {
                       using T = decltype(x);
                       return hard_sigmoid(x, T(alpha), T(beta));
                     };
                   },
                   1));
  registry.add("", "Elu", float_unary_kernel([](const KernelContext& ctx) {
                 const float alpha = ctx.node().attr_float("alpha", 1.0f);
                 return [alpha](auto x) {
                   using T = decltype(x);
                   return x < 0 ? T(alpha) * std::expm1(x) : x;
                 };
               }));
  registry.add("", "Selu", float_unary_kernel([](const KernelContext& ctx) {
                 const float alpha = ctx.node().attr_float("alpha", 1.67326319217681884765625f);
                 const float gamma = ctx.node().attr_float("gamma", 1.05070102214813232421875f);
                 return [alpha, gamma](auto x) {
                   using T = decltype(x);
                   return T(gamma) * (x > 0 ? x : T(alpha) * std::expm1(x));
                 };
               }));

  registry.add("", "Neg", arithmetic_unary_kernel(plain([](auto x) { return negate(x); })));
  registry.add("", "Abs", arithmetic_unary_kernel(plain([](auto x) {
                 if constexpr (std::is_unsigned_v<decltype(x)>) {
                   return x;
                 } else if constexpr (std::is_integral_v<decltype(x)>) {
                   return x < 0 ? negate(x) : x;
                 } else {
                   return std::abs(x);
                 }
               })));
  // -1, 0 or 1; NaN stays NaN.
  registry.add("", "Sign", arithmetic_unary_kernel(plain([](auto x) {
                 using T = decltype(x);
                 if (x != x) return x;
                 return static_cast<T>(static_cast<int>(T(0) < x) - static_cast<int>(x < T(0)));
               })));
  // max(x, 0) with NaN kept, as numpy's maximum does.
  registry.add("", "Relu", arithmetic_unary_kernel(plain([](auto x) { return relu(x); })));
}

// ---- Clip -----------------------------------------------------------------------------

// Bounds are attributes before opset 11 and optional scalar inputs from 11; a missing bound
// is the type's extreme. y = min(max(x, lo), hi), so lo > hi gives hi everywhere, as ONNX
// specifies.
Status clip_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0);
  return dispatch_arithmetic(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    auto bound = [&](size_t input, const char* attr, T& out) {
      if (ctx.opset() < 11) {
        if (const Attribute* a = ctx.node().attr(attr)) {
          const double v =
              a->kind() == Attribute::Kind::kInt ? static_cast<double>(a->i()) : a->f();
          if constexpr (std::is_integral_v<T>) {
            out = saturating_cast<T>(v);
          } else {
            out = static_cast<T>(v);
          }
        }
      } else if (ctx.has_input(input)) {
        out = data_of<T>(ctx.input(input))[0];
      }
    };
    bound(1, "min", lo);
    bound(2, "max", hi);
    unary<T, T>(x, y, [lo, hi](T v) { return clip(v, lo, hi); });
    return Status::ok();
  });
}

// ---- Where, variadic ops, Identity ----------------------------------------------------

template <typename T>
void where(const Tensor& condition, const Tensor& x, const Tensor& y, Tensor& out) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const BroadcastLoop<3> loop = broadcast_loop<3>(out.dims(), {&condition, &x, &y});
  const uint8_t* pc = data_of<uint8_t>(condition);
  const T* px = data_of<T>(x);
  const T* py = data_of<T>(y);
  T* po = mutable_data_of<T>(out);
  parallel_runs(loop, n, 1, [&](int64_t at, int64_t count, const auto& offsets, const auto& inner) {
    const uint8_t* c = pc + offsets[0];
    const T* a = px + offsets[1];
    const T* b = py + offsets[2];
    T* o = po + at;
    // T holds the elements' bits, so the choice is a mask: no branch for a predictor to miss
    // (a mask such as ReLU's gradient is random to it). A scalar side is read once.
    const auto pick = [](uint8_t condition, T when_true, T when_false) {
      const T mask = static_cast<T>(T(0) - static_cast<T>(condition != 0));
      return static_cast<T>((when_true & mask) | (when_false & static_cast<T>(~mask)));
    };
    if (inner[0] == 1 && inner[1] == 1 && inner[2] == 1) {
      for_lanes(count, [&](int64_t i) { o[i] = pick(c[i], a[i], b[i]); });
    } else if (inner[0] == 1 && inner[1] == 1 && inner[2] == 0) {
      const T scalar = *b;
      for_lanes(count, [&](int64_t i) { o[i] = pick(c[i], a[i], scalar); });
    } else if (inner[0] == 1 && inner[1] == 0 && inner[2] == 1) {
      const T scalar = *a;
      for_lanes(count, [&](int64_t i) { o[i] = pick(c[i], scalar, b[i]); });
    } else {
      for (int64_t i = 0; i < count; ++i) {
        o[i] = c[i * inner[0]] != 0 ? a[i * inner[1]] : b[i * inner[2]];
      }
    }
  });
}

Status where_kernel(KernelContext& ctx) {
  Tensor& out = ctx.allocate_output(0);
  return dispatch_by_size(ctx, ctx.input(1).dtype(), [&](auto tag) {
    where<decltype(tag)>(ctx.input(0), ctx.input(1), ctx.input(2), out);
    return Status::ok();
  });
}

enum class Variadic { kMax, kMin, kSum, kMean };

// Folds the inputs into the output in input order: out = in0 broadcast, then
// out = op(out, in_k) for each further input.
Kernel variadic_kernel(Variadic kind) {
  return [kind](KernelContext& ctx) -> Status {
    Tensor& out = ctx.allocate_output(0);
    const DType dtype = ctx.input(0).dtype();
    auto fold = [&](auto tag) {
      using T = decltype(tag);
      broadcast_copy<T>(ctx.input(0), out);
      for (size_t k = 1; k < ctx.num_inputs(); ++k) {
        binary<T, T, T>(out, ctx.input(k), out, [kind](T u, T v) {
          switch (kind) {
            case Variadic::kMax:
              return max_of(u, v);
            case Variadic::kMin:
              return min_of(u, v);
            default:
              return add(u, v);
          }
        });
      }
      if (kind == Variadic::kMean) {
        const T count = static_cast<T>(ctx.num_inputs());
        unary<T, T>(out, out, [count](T v) { return v / count; });
      }
      return Status::ok();
    };
    if (kind == Variadic::kMean) return dispatch_float(ctx, dtype, fold);
    return dispatch_arithmetic(ctx, dtype, fold);
  };
}

Status identity_kernel(KernelContext& ctx) {
  ctx.set_output(0, ctx.input(0));
  return Status::ok();
}

// ---- Cast -----------------------------------------------------------------------------

// One element's value: float for the 16-bit floats, 0/1 for bool, itself otherwise.
template <typename S>
auto load(S stored) {
  if constexpr (std::is_same_v<S, Float16>) {
    return half_to_float(stored.bits);
  } else if constexpr (std::is_same_v<S, BFloat16>) {
    return bfloat16_to_float(stored.bits);
  } else if constexpr (std::is_same_v<S, Bool>) {
    return static_cast<uint8_t>(stored.byte != 0);
  } else {
    return stored;
  }
}

// A value converted to D: anything non-zero (NaN included) is true, floats round to the
// 16-bit formats through float, floats truncate (saturating) to integers, and integers
// convert modulo 2^bits to narrower ones.
template <typename D, typename V>
D store(V value) {
  if constexpr (std::is_same_v<D, Bool>) {
    return Bool{static_cast<uint8_t>(value != 0 ? 1 : 0)};
  } else if constexpr (std::is_same_v<D, Float16>) {
    return Float16{float_to_half(static_cast<float>(value))};
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    return BFloat16{float_to_bfloat16(static_cast<float>(value))};
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<V>) {
    return saturating_cast<D>(value);
  } else {
    return static_cast<D>(value);
  }
}

Status cast_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0);
  if (x.dtype() == y.dtype()) {
    y.mutable_bytes() = x.bytes();
    return Status::ok();
  }
  return dispatch_castable(ctx, x.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    return dispatch_castable(ctx, y.dtype(), [&](auto to_tag) {
      using To = decltype(to_tag);
      unary<From, To>(x, y, [](From v) { return store<To>(load(v)); });
      return Status::ok();
    });
  });
}

// ---- Dropout --------------------------------------------------------------------------

// A uniform number in [0, 1) for element `index`, a pure function of (seed, index): the mask
// is the same whatever the threads, and the same element of a sharded tensor gets the same
// draw wherever its global index is used.
double uniform_at(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

}  // namespace

uint64_t draw_key(uint64_t seed, uint64_t stream) {
  if (stream == 0) return seed;
  uint64_t z = stream * 0xd1b54a32d192ed03ull;
  z ^= z >> 29;
  return seed ^ (z * 0x9e3779b97f4a7c15ull);
}

StatusOr<GlobalPositions> global_positions(const Node& n, const std::vector<int64_t>& dims,
                                           const Communicator* comm) {
  GlobalPositions out;
  out.index.resize(dims.size());
  std::vector<int64_t> whole = dims;
  const std::string text = n.attr_string("layout", "");
  Layout layout = Layout::replicated(static_cast<int64_t>(dims.size()));
  if (!text.empty()) {
    auto parsed = Layout::parse(text);
    if (!parsed.is_ok()) return error("layout: {}", parsed.status().message());
    layout = std::move(parsed).value();
    if (layout.rank() != static_cast<int64_t>(dims.size()))
      return error("layout {} does not have the input's {} dims", text, dims.size());
    if (!comm) return error("layout {} needs the device's place on a mesh", text);
  }
  const std::string zigzag = n.attr_string("zigzag_axis", "");
  for (size_t d = 0; d < dims.size(); ++d) {
    const std::vector<std::string> axes = layout.dim_axes(static_cast<int64_t>(d));
    Tensor positions = Tensor(DType::kInt64, {dims[d]});
    if (axes.empty()) {
      for (int64_t i = 0; i < dims[d]; ++i) positions.set_from_int(i, i);
    } else {
      const DeviceMesh& mesh = comm->mesh();
      int64_t parts = 1;
      for (const std::string& axis : axes) {
        const int64_t a = mesh.axis_index(axis);
        if (a < 0) return error("mesh {} has no axis '{}'", mesh.to_string(), axis);
        parts *= mesh.axes()[a].size;
      }
      whole[d] = dims[d] * parts;
      Tensor iota(DType::kInt64, {whole[d]});
      for (int64_t i = 0; i < whole[d]; ++i) iota.set_from_int(i, i);
      const bool paired = std::find(axes.begin(), axes.end(), zigzag) != axes.end();
      positions = shard_of(iota, Layout::split(1, 0, axes), mesh, mesh.coords(comm->rank()),
                           paired ? std::string_view(zigzag) : std::string_view());
      if (positions.num_elements() != dims[d])
        return error("layout {}: dim {} holds {} of {}, the input has {}", text, d,
                     positions.num_elements(), whole[d], dims[d]);
    }
    out.index[d].resize(dims[d]);
    for (int64_t i = 0; i < dims[d]; ++i) out.index[d][i] = positions.int_at(i);
  }
  out.strides.assign(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) out.strides[d - 1] = out.strides[d] * whole[d];
  return out;
}

namespace {

// Before opset 12 Dropout is a copy (the ratio attribute only matters to training
// runtimes); from 12 it drops elements with probability `ratio` when training_mode is true
// and scales the kept ones by 1 / (1 - ratio). The mask is bool from opset 10 and the
// data's type before. Element e of the whole tensor is kept when uniform_at(key, e) >= ratio:
// the same mask for any thread count and on any device that holds e.
Status dropout_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0);
  Tensor* mask = ctx.num_outputs() > 1 && ctx.has_output(1) ? &ctx.allocate_output(1) : nullptr;
  double ratio = 0.5;
  bool training = false;
  if (ctx.opset() >= 12) {
    if (ctx.has_input(1)) ratio = ctx.input(1).float_at(0);
    if (ctx.has_input(2)) training = ctx.input(2).int_at(0) != 0;
  }
  if (!training || ratio == 0) {
    y.mutable_bytes() = x.bytes();
    if (mask && mask->dtype() == DType::kBool) {
      std::fill(mask->mutable_bytes().begin(), mask->mutable_bytes().end(), uint8_t{1});
    } else if (mask) {
      for (int64_t i = 0; i < mask->num_elements(); ++i) mask->set_from_int(i, 1);
    }
    return Status::ok();
  }
  if (!(ratio > 0 && ratio < 1)) return ctx.fail("ratio {} is not in [0, 1)", ratio);
  const uint64_t key =
      draw_key(static_cast<uint64_t>(ctx.node().attr_int("seed", 0)), ctx.random_stream());
  auto positions = global_positions(ctx.node(), x.dims(), ctx.communicator());
  if (!positions.is_ok()) return ctx.fail("{}", positions.status().message());
  const GlobalPositions& where = *positions;
  const int64_t rank = x.rank();
  const int64_t columns = rank == 0 ? 1 : x.dims().back();
  const int64_t rows = columns == 0 ? 0 : x.num_elements() / columns;
  // Per dim, each position's contribution to the whole tensor's flat index.
  std::vector<std::vector<int64_t>> offset(rank);
  for (int64_t d = 0; d < rank; ++d) {
    offset[d].resize(where.index[d].size());
    for (size_t i = 0; i < offset[d].size(); ++i)
      offset[d][i] = where.index[d][i] * where.strides[d];
  }
  return dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(1.0 / (1.0 - ratio));
    const T* in = data_of<T>(x);
    T* out = mutable_data_of<T>(y);
    uint8_t* kept = mask ? mutable_data_of<uint8_t>(*mask) : nullptr;
    parallel_for(rows, grain_for(8 * std::max<int64_t>(columns, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r) {
                     // The whole tensor's flat index of the row's first element.
                     int64_t base = 0;
                     int64_t rest = r;
                     for (int64_t d = rank - 2; d >= 0; --d) {
                       const int64_t extent = x.dims()[d];
                       base += offset[d][rest % extent];
                       rest /= extent;
                     }
                     for (int64_t j = 0; j < columns; ++j) {
                       const int64_t i = r * columns + j;
                       const int64_t e = base + (rank == 0 ? 0 : offset[rank - 1][j]);
                       const bool keep = uniform_at(key, static_cast<uint64_t>(e)) >= ratio;
                       out[i] = keep ? in[i] * scale : T(0);
                       if (kept) kept[i] = keep ? 1 : 0;
                     }
                   }
                 });
    return Status::ok();
  });
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& registry) {
  registry.add("", "Add", arithmetic_kernel([](auto a, auto b) { return add(a, b); }));
  registry.add("", "Sub", arithmetic_kernel([](auto a, auto b) { return subtract(a, b); }));
  registry.add("", "Mul", arithmetic_kernel([](auto a, auto b) { return multiply(a, b); }));
  registry.add("", "Div", arithmetic_kernel([](auto a, auto b) { return divide(a, b); }));
  registry.add("", "PRelu", arithmetic_kernel([](auto x, auto slope) {
                 return x < 0 ? multiply(x, slope) : x;
               }));
  registry.add("", "Pow", pow_kernel);
  registry.add("", "Equal", comparison_kernel([](auto a, auto b) { return a == b; }));
  registry.add("", "Less", comparison_kernel([](auto a, auto b) { return a < b; }));
  registry.add("", "Greater", comparison_kernel([](auto a, auto b) { return a > b; }));
  registry.add("", "LessOrEqual", comparison_kernel([](auto a, auto b) { return a <= b; }));
  registry.add("", "GreaterOrEqual", comparison_kernel([](auto a, auto b) { return a >= b; }));
  registry.add("", "And", logic_kernel([](bool a, bool b) { return a && b; }));
  registry.add("", "Or", logic_kernel([](bool a, bool b) { return a || b; }));
  registry.add("", "Not", not_kernel);
  register_unary(registry);
  registry.add("", "Clip", clip_kernel);
  registry.add("", "Where", where_kernel);
  registry.add("", "Max", variadic_kernel(Variadic::kMax));
  registry.add("", "Min", variadic_kernel(Variadic::kMin));
  registry.add("", "Sum", variadic_kernel(Variadic::kSum));
  registry.add("", "Mean", variadic_kernel(Variadic::kMean));
  registry.add("", "Identity", identity_kernel);
  registry.add("", "Cast", cast_kernel);
  registry.add("", "Dropout", dropout_kernel);
}

}  // namespace autopar::runtime
