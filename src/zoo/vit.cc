// The vit family: timm / torchvision Vision Transformer (patch-embedding conv, pre-LayerNorm
// encoder, class-token or mean-pooled head).
#include <cmath>

#include "families.h"

namespace autopar::zoo {
namespace {

constexpr float kEpsilon = 1e-6f;

int64_t num_patches(const VitConfig& c) { return (c.image / c.patch) * (c.image / c.patch); }

bool has_class_token(const VitConfig& c) { return c.pool == VitConfig::Pool::kClassToken; }

}  // namespace

__int128 vit_parameter_count(const VitConfig& c) {
  const __int128 h = c.hidden;
  const int64_t tokens = num_patches(c) + (has_class_token(c) ? 1 : 0);
  __int128 total = h * 3 * c.patch * c.patch + h;  // patch embedding conv
  if (has_class_token(c)) total += h;
  total += tokens * h;  // position embedding
  total += c.layers * (12 * h * h + 13 * h);
  total += 2 * h;                      // final LayerNorm
  total += h * c.classes + c.classes;  // head
  return total;
}

Graph build_vit(const VitConfig& c, const BuildSettings& settings) {
  ZooBuilder zb("vit", settings);
  const int64_t h = c.hidden;
  const int64_t p = c.patch;
  const int64_t tokens = num_patches(c) + (has_class_token(c) ? 1 : 0);
  const ParamInit init = ParamInit::normal(0.02f);

  ValueId x = zb.batched_input("pixel_values", DType::kFloat32, {3, c.image, c.image});
  {
    ZooBuilder::Module m(zb, "patch_embed");
    {
      ZooBuilder::Module proj(zb, "proj");
      // LeCun-normal over the patch's fan-in, as timm initialises the projection.
      const float stddev = 1.0f / std::sqrt(static_cast<float>(3 * p * p));
      ValueId w = zb.param("weight", {h, 3, p, p}, ParamInit::normal(stddev));
      ValueId b = zb.param("bias", {h}, ParamInit::zeros());
      x = zb.op1("Conv", {x, w, b},
                 {{"dilations", std::vector<int64_t>{1, 1}},
                  {"group", 1},
                  {"kernel_shape", std::vector<int64_t>{p, p}},
                  {"pads", std::vector<int64_t>{0, 0, 0, 0}},
                  {"strides", std::vector<int64_t>{p, p}}});
    }
    // flatten(2).transpose(1, 2): [batch, h, g, g] -> [batch, g*g, h].
    x = zb.op1("Reshape", {x, zb.shared_ints("patch_flatten_shape", {0, 0, -1})});
    x = zb.op1("Transpose", {x}, {{"perm", std::vector<int64_t>{0, 2, 1}}});
  }

  if (has_class_token(c)) {
    ValueId cls = zb.param("cls_token", {1, 1, h}, ParamInit::normal(1e-6f));
    ZooBuilder::Module m(zb, "cls_token");
    // cls_token.expand(batch, -1, -1) without the batch in any constant: zeros of the
    // first patch token's shape [batch, 1, h] plus the token broadcast over them. Expand
    // would need a shape computed at run time, which static shape rules cannot see.
    ValueId first = zb.op1(
        "Slice", {x, zb.shared_ints("cls_slice_starts", {0}), zb.shared_ints("cls_slice_ends", {1}),
                  zb.shared_ints("cls_slice_axes", {1})});
    ValueId zeros = zb.op1("Mul", {first, zb.shared_scalar("cls_zero", 0.0f)});
    ValueId cls_batch = zb.op1("Add", {zeros, cls});
    x = zb.op1("Concat", {cls_batch, x}, {{"axis", 1}});
  }
  {
    ValueId pos = zb.param("pos_embed", {1, tokens, h}, init);
    ZooBuilder::Module m(zb, "pos_embed");
    x = zb.op1("Add", {x, pos});
  }

  const PreLnBlock block{
      .names = {"norm1", "attn", "qkv", "proj", "norm2", "mlp", "fc1", "fc2"},
      .hidden = h,
      .heads = c.heads,
      .epsilon = kEpsilon,
      .scale = ScoreScale::kMulInverse,
      .mask = kNoId,
      .init_stddev = 0.02f,
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    zb.set_layer(static_cast<int32_t>(i));
    ZooBuilder::Module m(zb, "blocks." + std::to_string(i));
    x = pre_ln_block(zb, x, block);
  }
  zb.set_layer(-1);

  x = layer_norm(zb, "norm", x, h, kEpsilon);
  {
    ZooBuilder::Module m(zb, "pool");
    if (has_class_token(c)) {
      x = zb.op1("Gather", {x, zb.shared_tensor("class_token_index", Tensor::scalar_int64(0))},
                 {{"axis", 1}});
    } else {
      x = zb.op1("ReduceMean", {x}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", 0}});
    }
  }
  ValueId logits = linear_gemm(zb, "head", x, h, c.classes, init);
  zb.batched_output(logits, "logits");
  return zb.finish();
}

}  // namespace autopar::zoo
