// The pointwise activations a convolution can apply to its output as it writes it (Relu,
// LeakyRelu, Clip, HardSigmoid, HardSwish): one formula per activation, shared by the
// activation's own kernel and by the convolution that absorbs it, so both give the same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "autopar/ir/graph.h"
#include "conv_simd.h"
#include "for_lanes.h"

namespace autopar::runtime {

struct Activation {
  enum class Kind : uint8_t { kRelu, kLeakyRelu, kClip, kHardSigmoid, kHardSwish };
  Kind kind = Kind::kRelu;
  // LeakyRelu: alpha. Clip: [alpha, beta] as bounds. HardSigmoid: alpha·x + beta.
  double alpha = 0, beta = 0;
};

// std::max(a, b) is (a < b) ? b : a and std::min(a, b) is (b < a) ? b : a: both return a NaN
// `a`, so the forms below keep NaN, and they vectorise (as max and min instructions).

// x clamped to [0, 1]; NaN stays NaN.
template <typename T>
T unit_clamp(T x) {
  return std::min(std::max(x, T(0)), T(1));
}

template <typename T>
T relu(T x) {
  return std::max(x, T(0));  // NaN kept, as numpy's maximum does
}

template <typename T>
T leaky_relu(T x, T alpha) {
  return x < 0 ? alpha * x : x;
}

// min(max(x, lo), hi): lo > hi gives hi everywhere, as ONNX specifies.
template <typename T>
T clip(T x, T lo, T hi) {
  return std::min(std::max(x, lo), hi);
}

template <typename T>
T hard_sigmoid(T x, T alpha, T beta) {
  return unit_clamp(alpha * x + beta);
}

template <typename T>
T hard_swish(T x) {
  return x * unit_clamp(x * (T(1) / T(6)) + T(0.5));
}

// Applies `a` in place to data[0, n). The parameters are converted to T first, as the
// activations' kernels convert them.
template <typename T>
void apply_activation(const Activation& a, T* data, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_has_avx512()) return activation_avx512(a, data, n);
  }
  const T alpha = static_cast<T>(a.alpha), beta = static_cast<T>(a.beta);
  switch (a.kind) {
    case Activation::Kind::kRelu:
      for_lanes(n, [&](int64_t i) { data[i] = relu(data[i]); });
      return;
    case Activation::Kind::kLeakyRelu:
      for_lanes(n, [&](int64_t i) { data[i] = leaky_relu(data[i], alpha); });
      return;
    case Activation::Kind::kClip:
      for_lanes(n, [&](int64_t i) { data[i] = clip(data[i], alpha, beta); });
      return;
    case Activation::Kind::kHardSigmoid:
      for_lanes(n, [&](int64_t i) { data[i] = hard_sigmoid(data[i], alpha, beta); });
      return;
    case Activation::Kind::kHardSwish:
      for_lanes(n, [&](int64_t i) { data[i] = hard_swish(data[i]); });
      return;
  }
}

// The activation `node` applies to its first input, when it is one of the kinds above over
// float32 or float64 whose parameters are known before the run (Clip's bounds are attributes
// or initializers); nullopt otherwise.
std::optional<Activation> activation_of(const Graph& graph, const Node& node);

}  // namespace autopar::runtime
