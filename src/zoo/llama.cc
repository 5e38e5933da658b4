// The llama family: Llama-style decoders as Hugging Face's LlamaForCausalLM exports them to
// ONNX. RMSNorm is Pow/ReduceMean/Add/Sqrt/Div/Mul, rotary position embeddings the
// rotate-half form over cos/sin tables, the MLP SwiGLU (SiLU as x·Sigmoid(x)), and grouped-
// query attention repeats each key/value head over its group of query heads
// (Unsqueeze/Expand/Reshape, as repeat_kv does). Projections have no bias; the output
// embedding is untied.
#include <cmath>
#include <vector>

#include "families.h"

namespace autopar::zoo {
namespace {

ValueId rms_norm(ZooBuilder& zb, std::string_view module, ValueId x, int64_t hidden,
                 float epsilon) {
  ZooBuilder::Module m(zb, module);
  ValueId weight = zb.param("weight", {hidden}, ParamInit::ones());
  ValueId variance = zb.op1("Pow", {x, zb.shared_scalar("rms_two", 2.0f)});
  variance = zb.op1("ReduceMean", {variance},
                    {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}});
  ValueId root =
      zb.op1("Sqrt", {zb.op1("Add", {variance, zb.shared_scalar("rms_epsilon", epsilon)})});
  // torch.rsqrt exports as 1 / Sqrt.
  ValueId inverse = zb.op1("Div", {zb.shared_scalar("rms_one", 1.0f), root});
  ValueId y = zb.op1("Mul", {x, inverse});
  return zb.op1("Mul", {weight, y});
}

// A Linear layer without bias on [batch, seq, in]: MatMul by a weight of [in, out].
ValueId projection(ZooBuilder& zb, std::string_view module, ValueId x, int64_t in, int64_t out,
                   ParamInit init) {
  ZooBuilder::Module m(zb, module);
  ValueId weight = zb.param("weight", {in, out}, init);
  return zb.op1("MatMul", {x, weight});
}

// [batch, heads, seq, head_dim] with rotary embeddings: x·cos + rotate_half(x)·sin, where
// rotate_half(x) = concat(-x[..., d/2:], x[..., :d/2]).
ValueId rotary(ZooBuilder& zb, ValueId x, ValueId cos, ValueId sin, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  ValueId axes = zb.shared_ints("rope_axes", {-1});
  ValueId x1 = zb.op1("Slice", {x, zb.shared_ints("rope_lo_start", {0}),
                                zb.shared_ints("rope_lo_end", {half}), axes});
  ValueId x2 = zb.op1("Slice", {x, zb.shared_ints("rope_hi_start", {half}),
                                zb.shared_ints("rope_hi_end", {head_dim}), axes});
  ValueId rotated = zb.op1("Concat", {zb.op1("Neg", {x2}), x1}, {{"axis", int64_t{-1}}});
  return zb.op1("Add", {zb.op1("Mul", {x, cos}), zb.op1("Mul", {rotated, sin})});
}

// The cos (or sin) table [seq, head_dim] of rotary embeddings with base `theta`, as
// LlamaRotaryEmbedding computes it: frequencies theta^(-2i/d) for i < d/2, repeated twice.
Tensor rotary_table(int64_t seq, int64_t head_dim, double theta, bool sine) {
  Tensor table(DType::kFloat32, {seq, head_dim});
  std::span<float> t = table.mutable_data<float>();
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // inv_freq is computed in fp32 as PyTorch does.
    const float inv_freq = static_cast<float>(
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim)));
    for (int64_t p = 0; p < seq; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      t[p * head_dim + i] = t[p * head_dim + i + half] = sine ? std::sin(angle) : std::cos(angle);
    }
  }
  return table;
}

struct LayerContext {
  const LlamaConfig& config;
  ValueId mask;
  ValueId cos;
  ValueId sin;
  ParamInit init;
};

ValueId self_attention(ZooBuilder& zb, ValueId x, const LayerContext& ctx) {
  const LlamaConfig& c = ctx.config;
  const int64_t h = c.hidden;
  const int64_t head_dim = h / c.heads;
  const int64_t kv = c.kv_heads * head_dim;
  const int64_t group = c.heads / c.kv_heads;
  ZooBuilder::Module m(zb, "self_attn");
  ValueId q = projection(zb, "q_proj", x, h, h, ctx.init);
  ValueId k = projection(zb, "k_proj", x, h, kv, ctx.init);
  ValueId v = projection(zb, "v_proj", x, h, kv, ctx.init);
  const std::vector<int64_t> to_heads = {0, 2, 1, 3};
  q = zb.op1("Reshape", {q, zb.shared_ints("attn_q_heads_shape", {0, 0, c.heads, head_dim})});
  k = zb.op1("Reshape", {k, zb.shared_ints("attn_kv_heads_shape", {0, 0, c.kv_heads, head_dim})});
  v = zb.op1("Reshape", {v, zb.shared_ints("attn_kv_heads_shape", {0, 0, c.kv_heads, head_dim})});
  q = zb.op1("Transpose", {q}, {{"perm", to_heads}});
  k = zb.op1("Transpose", {k}, {{"perm", to_heads}});
  v = zb.op1("Transpose", {v}, {{"perm", to_heads}});
  q = rotary(zb, q, ctx.cos, ctx.sin, head_dim);
  k = rotary(zb, k, ctx.cos, ctx.sin, head_dim);
  if (group > 1) {
    // repeat_kv: [b, kv, s, d] -> [b, kv, 1, s, d] -> [b, kv, group, s, d] -> [b, heads, s, d].
    ValueId expand = zb.shared_ints("attn_repeat_kv", {1, 1, group, 1, 1});
    ValueId merged = zb.shared_ints("attn_repeat_kv_shape", {0, c.heads, c.seq, head_dim});
    ValueId axis = zb.shared_ints("attn_repeat_kv_axis", {2});
    k = zb.op1("Reshape", {zb.op1("Expand", {zb.op1("Unsqueeze", {k, axis}), expand}), merged});
    v = zb.op1("Reshape", {zb.op1("Expand", {zb.op1("Unsqueeze", {v, axis}), expand}), merged});
  }
  k = zb.op1("Transpose", {k}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});
  ValueId scores = zb.op1("MatMul", {q, k});
  scores = zb.op1("Div", {scores, zb.shared_scalar("attn_sqrt_head_dim",
                                                   std::sqrt(static_cast<float>(head_dim)))});
  scores = zb.op1("Add", {scores, ctx.mask});
  ValueId probs = zb.op1("Softmax", {scores}, {{"axis", int64_t{-1}}});
  ValueId context = zb.op1("MatMul", {probs, v});
  context = zb.op1("Transpose", {context}, {{"perm", to_heads}});
  context = zb.op1("Reshape", {context, zb.shared_ints("attn_merge_heads_shape", {0, 0, h})});
  return projection(zb, "o_proj", context, h, h, ctx.init);
}

ValueId swiglu_mlp(ZooBuilder& zb, ValueId x, const LayerContext& ctx) {
  const LlamaConfig& c = ctx.config;
  ZooBuilder::Module m(zb, "mlp");
  ValueId gate = projection(zb, "gate_proj", x, c.hidden, c.ffn, ctx.init);
  ValueId up = projection(zb, "up_proj", x, c.hidden, c.ffn, ctx.init);
  ValueId activated;
  {
    ZooBuilder::Module act(zb, "act_fn");
    activated = zb.op1("Mul", {gate, zb.op1("Sigmoid", {gate})});
  }
  return projection(zb, "down_proj", zb.op1("Mul", {activated, up}), c.ffn, c.hidden, ctx.init);
}

}  // namespace

__int128 llama_parameter_count(const LlamaConfig& c) {
  const __int128 h = c.hidden;
  const __int128 kv = static_cast<__int128>(c.kv_heads) * (c.hidden / c.heads);
  const __int128 layer = 2 * h * h + 2 * h * kv + 3 * h * c.ffn + 2 * h;
  return c.layers * layer + 2 * static_cast<__int128>(c.vocab) * h + h;
}

Graph build_llama(const LlamaConfig& c, const BuildSettings& settings) {
  ZooBuilder zb("llama", settings);
  const int64_t h = c.hidden;
  const ParamInit init = ParamInit::normal(0.02f);

  ValueId ids = zb.batched_input("input_ids", DType::kInt64, {c.seq});
  const int64_t head_dim = h / c.heads;
  auto table = [&](bool sine) {
    return zb.shared_table(sine ? "rope_sin" : "rope_cos", DType::kFloat32, {c.seq, head_dim},
                           [&] { return rotary_table(c.seq, head_dim, c.rope_theta, sine); });
  };
  const LayerContext ctx{.config = c,
                         .mask = computed_causal_mask(zb, c.seq),
                         .cos = table(false),
                         .sin = table(true),
                         .init = init};

  ValueId x;
  {
    ZooBuilder::Module model(zb, "model");
    {
      ZooBuilder::Module m(zb, "embed_tokens");
      ValueId table = zb.param("weight", {c.vocab, h}, init);
      x = zb.op1("Gather", {table, ids}, {{"axis", int64_t{0}}});
    }
    for (int64_t i = 0; i < c.layers; ++i) {
      zb.set_layer(static_cast<int32_t>(i));
      ZooBuilder::Module layer(zb, "layers." + std::to_string(i));
      ValueId y = rms_norm(zb, "input_layernorm", x, h, c.epsilon);
      x = zb.op1("Add", {x, self_attention(zb, y, ctx)});
      y = rms_norm(zb, "post_attention_layernorm", x, h, c.epsilon);
      x = zb.op1("Add", {x, swiglu_mlp(zb, y, ctx)});
    }
    zb.set_layer(-1);
    x = rms_norm(zb, "norm", x, h, c.epsilon);
  }
  ValueId logits = projection(zb, "lm_head", x, h, c.vocab, init);
  zb.batched_output(logits, "logits");
  return zb.finish();
}

}  // namespace autopar::zoo
