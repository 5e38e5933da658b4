// The resnet family: torchvision ResNet (BasicBlock / Bottleneck v1.5) and the CIFAR-style
// resnet-tiny, exported in eval form (BatchNormalization with running statistics).
#include <cmath>

#include <fmt/format.h>

#include "families.h"

namespace autopar::zoo {
namespace {

constexpr int64_t kBottleneckExpansion = 4;

int64_t expansion(const ResNetConfig& c) { return c.bottleneck ? kBottleneckExpansion : 1; }

int64_t stem_width(const ResNetConfig& c) { return c.small_stem ? c.widths[0] : 64; }

int64_t stem_kernel(const ResNetConfig& c) { return c.small_stem ? 3 : 7; }

// Geometry of one residual block; the closed form and the builder share this walk of the
// architecture.
struct BlockShape {
  int64_t in, planes, stride;
  bool downsample;
};

std::vector<BlockShape> block_shapes(const ResNetConfig& c) {
  std::vector<BlockShape> out;
  int64_t in = stem_width(c);
  for (size_t stage = 0; stage < c.blocks.size(); ++stage) {
    const int64_t planes = c.widths[stage];
    for (int64_t j = 0; j < c.blocks[stage]; ++j) {
      const int64_t stride = (stage > 0 && j == 0) ? 2 : 1;
      const bool downsample = stride != 1 || in != planes * expansion(c);
      out.push_back({in, planes, stride, downsample});
      in = planes * expansion(c);
    }
  }
  return out;
}

__int128 conv_bn(int64_t in, int64_t out, int64_t k) {
  return static_cast<__int128>(in) * out * k * k + 2 * out;
}

ValueId conv(ZooBuilder& zb, std::string_view module, ValueId x, int64_t in, int64_t out,
             int64_t kernel, int64_t stride) {
  ZooBuilder::Module m(zb, module);
  // torchvision: kaiming_normal_(mode="fan_out", nonlinearity="relu").
  const float stddev = std::sqrt(2.0f / static_cast<float>(out * kernel * kernel));
  ValueId w = zb.param("weight", {out, in, kernel, kernel}, ParamInit::normal(stddev));
  const int64_t pad = kernel / 2;
  return zb.op1("Conv", {x, w},
                {{"dilations", std::vector<int64_t>{1, 1}},
                 {"group", 1},
                 {"kernel_shape", std::vector<int64_t>{kernel, kernel}},
                 {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                 {"strides", std::vector<int64_t>{stride, stride}}});
}

ValueId batch_norm(ZooBuilder& zb, std::string_view module, ValueId x, int64_t channels) {
  ZooBuilder::Module m(zb, module);
  ValueId scale = zb.param("weight", {channels}, ParamInit::ones());
  ValueId bias = zb.param("bias", {channels}, ParamInit::zeros());
  // Running statistics are buffers, not trainable: constants at their initial values.
  ValueId mean = zb.constant("running_mean", Tensor(DType::kFloat32, {channels}));
  Tensor ones(DType::kFloat32, {channels});
  for (float& v : ones.mutable_data<float>()) v = 1.0f;
  ValueId var = zb.constant("running_var", std::move(ones));
  // PyTorch exports momentum as 1 - its own momentum (0.1).
  return zb.op1("BatchNormalization", {x, scale, bias, mean, var},
                {{"epsilon", 1e-5f}, {"momentum", 0.9f}});
}

ValueId relu(ZooBuilder& zb, ValueId x) {
  ZooBuilder::Module m(zb, "relu");
  return zb.op1("Relu", {x});
}

ValueId residual_block(ZooBuilder& zb, ValueId x, const ResNetConfig& c, const BlockShape& b) {
  ValueId y;
  int64_t out;
  if (c.bottleneck) {
    const int64_t width = b.planes * c.width_factor;
    out = b.planes * kBottleneckExpansion;
    y = relu(zb, batch_norm(zb, "bn1", conv(zb, "conv1", x, b.in, width, 1, 1), width));
    // v1.5: the stride sits on the 3x3 conv.
    y = relu(zb, batch_norm(zb, "bn2", conv(zb, "conv2", y, width, width, 3, b.stride), width));
    y = batch_norm(zb, "bn3", conv(zb, "conv3", y, width, out, 1, 1), out);
  } else {
    out = b.planes;
    y = relu(zb, batch_norm(zb, "bn1", conv(zb, "conv1", x, b.in, out, 3, b.stride), out));
    y = batch_norm(zb, "bn2", conv(zb, "conv2", y, out, out, 3, 1), out);
  }
  ValueId identity = x;
  if (b.downsample) {
    identity = conv(zb, "downsample.0", x, b.in, out, 1, b.stride);
    identity = batch_norm(zb, "downsample.1", identity, out);
  }
  y = zb.op1("Add", {y, identity});
  return relu(zb, y);
}

}  // namespace

__int128 resnet_parameter_count(const ResNetConfig& c) {
  __int128 total = conv_bn(3, stem_width(c), stem_kernel(c));
  for (const BlockShape& b : block_shapes(c)) {
    if (c.bottleneck) {
      const int64_t width = b.planes * c.width_factor;
      const int64_t out = b.planes * kBottleneckExpansion;
      total += conv_bn(b.in, width, 1) + conv_bn(width, width, 3) + conv_bn(width, out, 1);
      if (b.downsample) total += conv_bn(b.in, out, 1);
    } else {
      total += conv_bn(b.in, b.planes, 3) + conv_bn(b.planes, b.planes, 3);
      if (b.downsample) total += conv_bn(b.in, b.planes, 1);
    }
  }
  const int64_t features = c.widths.back() * expansion(c);
  total += static_cast<__int128>(features) * c.classes + c.classes;
  return total;
}

Graph build_resnet(const ResNetConfig& c, const BuildSettings& settings) {
  ZooBuilder zb("resnet", settings);
  ValueId x = zb.batched_input("pixel_values", DType::kFloat32, {3, c.image, c.image});

  const int64_t stem = stem_width(c);
  x = conv(zb, "conv1", x, 3, stem, stem_kernel(c), c.small_stem ? 1 : 2);
  x = relu(zb, batch_norm(zb, "bn1", x, stem));
  if (!c.small_stem) {
    ZooBuilder::Module m(zb, "maxpool");
    x = zb.op1("MaxPool", {x},
               {{"ceil_mode", 0},
                {"dilations", std::vector<int64_t>{1, 1}},
                {"kernel_shape", std::vector<int64_t>{3, 3}},
                {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                {"strides", std::vector<int64_t>{2, 2}}});
  }

  // One layer id per residual block, numbered across stages.
  std::vector<BlockShape> shapes = block_shapes(c);
  size_t next = 0;
  for (size_t stage = 0; stage < c.blocks.size(); ++stage) {
    for (int64_t j = 0; j < c.blocks[stage]; ++j, ++next) {
      zb.set_layer(static_cast<int32_t>(next));
      ZooBuilder::Module block(zb, fmt::format("layer{}.{}", stage + 1, j));
      x = residual_block(zb, x, c, shapes[next]);
    }
  }
  zb.set_layer(-1);

  {
    ZooBuilder::Module m(zb, "avgpool");
    x = zb.op1("GlobalAveragePool", {x});
  }
  x = zb.op1("Flatten", {x}, {{"axis", 1}});
  const int64_t features = c.widths.back() * expansion(c);
  const float bound = 1.0f / std::sqrt(static_cast<float>(features));
  ValueId logits = linear_gemm(zb, "fc", x, features, c.classes, ParamInit::uniform(bound));
  zb.batched_output(logits, "logits");
  return zb.finish();
}

}  // namespace autopar::zoo
