// The gpt family: GPT-2 / Megatron-style decoder with a tied output embedding.
#include "families.h"

namespace autopar::zoo {

__int128 gpt_parameter_count(const GptConfig& c) {
  const __int128 h = c.hidden;
  return c.layers * (12 * h * h + 13 * h) + (static_cast<__int128>(c.vocab) + c.seq) * h + 2 * h;
}

Graph build_gpt(const GptConfig& c, const BuildSettings& settings) {
  ZooBuilder zb("gpt", settings);
  const int64_t h = c.hidden;
  const int64_t s = c.seq;
  const ParamInit init = ParamInit::normal(0.02f);

  ValueId ids = zb.batched_input("input_ids", DType::kInt64, {s});
  ValueId wte = zb.param("wte.weight", {c.vocab, h}, init);
  ValueId wpe = zb.param("wpe.weight", {s, h}, init);

  std::vector<int64_t> positions(s);
  for (int64_t i = 0; i < s; ++i) positions[i] = i;
  ValueId position_ids = zb.shared_ints("position_ids", positions);

  ValueId mask = causal_mask(zb, s);

  ValueId x;
  {
    ZooBuilder::Module m(zb, "wte");
    x = zb.op1("Gather", {wte, ids}, {{"axis", 0}});
  }
  {
    ZooBuilder::Module m(zb, "wpe");
    ValueId pos = zb.op1("Gather", {wpe, position_ids}, {{"axis", 0}});
    x = zb.op1("Add", {x, pos});
  }
  {
    ZooBuilder::Module m(zb, "drop");
    x = zb.dropout(x, c.dropout);
  }

  const PreLnBlock block{
      .names = {"ln_1", "attn", "c_attn", "c_proj", "ln_2", "mlp", "c_fc", "c_proj"},
      .hidden = h,
      .heads = c.heads,
      .epsilon = 1e-5f,
      .scale = ScoreScale::kDivSqrt,
      .mask = mask,
      .init_stddev = 0.02f,
      .dropout = c.dropout,
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    zb.set_layer(static_cast<int32_t>(i));
    ZooBuilder::Module m(zb, "h." + std::to_string(i));
    x = pre_ln_block(zb, x, block);
  }
  zb.set_layer(-1);

  x = layer_norm(zb, "ln_f", x, h, 1e-5f);
  ValueId logits;
  {
    // The LM head reuses wte (tied weights), as GPT2LMHeadModel does.
    ZooBuilder::Module m(zb, "lm_head");
    ValueId wte_t = zb.op1("Transpose", {wte}, {{"perm", std::vector<int64_t>{1, 0}}});
    logits = zb.op1("MatMul", {x, wte_t});
  }
  zb.batched_output(logits, "logits");
  return zb.finish();
}

}  // namespace autopar::zoo
