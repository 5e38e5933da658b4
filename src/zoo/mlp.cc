// The mlp family: a stack of Linear layers with Relu between them.
#include <cmath>

#include "families.h"

namespace autopar::zoo {
namespace {

// Widths of the layer boundaries: inputs, hidden (layers - 1 times), classes.
std::vector<int64_t> widths(const MlpConfig& c) {
  std::vector<int64_t> w(c.layers + 1, c.hidden);
  w.front() = c.inputs;
  w.back() = c.classes;
  return w;
}

}  // namespace

__int128 mlp_parameter_count(const MlpConfig& c) {
  std::vector<int64_t> w = widths(c);
  __int128 total = 0;
  for (int64_t i = 0; i < c.layers; ++i) total += static_cast<__int128>(w[i]) * w[i + 1] + w[i + 1];
  return total;
}

Graph build_mlp(const MlpConfig& c, const BuildSettings& settings) {
  ZooBuilder zb("mlp", settings);
  std::vector<int64_t> w = widths(c);
  ValueId x = zb.batched_input("x", DType::kFloat32, {c.inputs});
  for (int64_t i = 0; i < c.layers; ++i) {
    zb.set_layer(static_cast<int32_t>(i));
    // PyTorch's default Linear init: uniform with bound 1/sqrt(fan_in).
    const float bound = 1.0f / std::sqrt(static_cast<float>(w[i]));
    x = linear(zb, "fc." + std::to_string(i), x, w[i], w[i + 1], ParamInit::uniform(bound));
    if (i + 1 < c.layers) {
      ZooBuilder::Module m(zb, "relu." + std::to_string(i));
      x = zb.op1("Relu", {x});
    }
  }
  zb.set_layer(-1);
  zb.batched_output(x, "logits");
  return zb.finish();
}

}  // namespace autopar::zoo
