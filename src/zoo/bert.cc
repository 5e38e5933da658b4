// The bert family: HF BertModel (post-LayerNorm encoder with pooler), optionally with a
// sequence-classification head.
#include "families.h"

namespace autopar::zoo {
namespace {

constexpr float kEpsilon = 1e-12f;

// BertSelfAttention + BertSelfOutput: separate q, k, v projections, no mask (every input
// token is real), output dense, residual, LayerNorm.
ValueId attention(ZooBuilder& zb, ValueId x, const BertConfig& c, ParamInit init) {
  const int64_t h = c.hidden;
  ZooBuilder::Module m(zb, "attention");
  ValueId y;
  {
    ZooBuilder::Module self(zb, "self");
    ValueId q = linear(zb, "query", x, h, h, init);
    ValueId k = linear(zb, "key", x, h, h, init);
    ValueId v = linear(zb, "value", x, h, h, init);
    y = attention_heads(zb, q, k, v, h, c.heads, ScoreScale::kDivSqrt, kNoId, c.dropout);
  }
  ZooBuilder::Module out(zb, "output");
  y = linear(zb, "dense", y, h, h, init);
  {
    ZooBuilder::Module drop(zb, "dropout");
    y = zb.dropout(y, c.dropout);
  }
  y = zb.op1("Add", {y, x});
  return layer_norm(zb, "LayerNorm", y, h, kEpsilon);
}

ValueId feed_forward(ZooBuilder& zb, ValueId x, const BertConfig& c, ParamInit init) {
  const int64_t h = c.hidden;
  ValueId y;
  {
    // HF's intermediate_act_fn is a function, not a module: GELU nodes sit in the
    // intermediate scope.
    ZooBuilder::Module m(zb, "intermediate");
    y = linear(zb, "dense", x, h, 4 * h, init);
    y = gelu(zb, y);
  }
  ZooBuilder::Module m(zb, "output");
  y = linear(zb, "dense", y, 4 * h, h, init);
  {
    ZooBuilder::Module drop(zb, "dropout");
    y = zb.dropout(y, c.dropout);
  }
  y = zb.op1("Add", {y, x});
  return layer_norm(zb, "LayerNorm", y, h, kEpsilon);
}

}  // namespace

__int128 bert_parameter_count(const BertConfig& c) {
  const __int128 h = c.hidden;
  __int128 total = (static_cast<__int128>(c.vocab) + c.max_positions + 2) * h + 2 * h;
  total += c.layers * (12 * h * h + 13 * h);
  total += h * h + h;  // pooler
  if (c.classes > 0) total += h * c.classes + c.classes;
  return total;
}

Graph build_bert(const BertConfig& c, const BuildSettings& settings) {
  ZooBuilder zb("bert", settings);
  const int64_t h = c.hidden;
  const ParamInit init = ParamInit::normal(0.02f);

  ValueId ids = zb.batched_input("input_ids", DType::kInt64, {c.seq});
  ValueId token_types = zb.batched_input("token_type_ids", DType::kInt64, {c.seq});

  ValueId x;
  {
    ZooBuilder::Module m(zb, "embeddings");
    ValueId word = zb.param("word_embeddings.weight", {c.vocab, h}, init);
    ValueId position = zb.param("position_embeddings.weight", {c.max_positions, h}, init);
    ValueId token_type = zb.param("token_type_embeddings.weight", {2, h}, init);
    std::vector<int64_t> positions(c.seq);
    for (int64_t i = 0; i < c.seq; ++i) positions[i] = i;
    ValueId position_ids = zb.shared_ints("position_ids", positions);
    {
      ZooBuilder::Module w(zb, "word_embeddings");
      x = zb.op1("Gather", {word, ids}, {{"axis", 0}});
    }
    {
      ZooBuilder::Module t(zb, "token_type_embeddings");
      ValueId y = zb.op1("Gather", {token_type, token_types}, {{"axis", 0}});
      x = zb.op1("Add", {x, y});
    }
    {
      ZooBuilder::Module p(zb, "position_embeddings");
      ValueId y = zb.op1("Gather", {position, position_ids}, {{"axis", 0}});
      x = zb.op1("Add", {x, y});
    }
    x = layer_norm(zb, "LayerNorm", x, h, kEpsilon);
    ZooBuilder::Module drop(zb, "dropout");
    x = zb.dropout(x, c.dropout);
  }

  {
    ZooBuilder::Module encoder(zb, "encoder");
    for (int64_t i = 0; i < c.layers; ++i) {
      zb.set_layer(static_cast<int32_t>(i));
      ZooBuilder::Module m(zb, "layer." + std::to_string(i));
      x = attention(zb, x, c, init);
      x = feed_forward(zb, x, c, init);
    }
    zb.set_layer(-1);
  }

  ValueId pooled;
  {
    ZooBuilder::Module m(zb, "pooler");
    // hidden_states[:, 0] exports as Gather with a scalar index on the sequence axis.
    ValueId first = zb.op1("Gather", {x, zb.shared_tensor("first_token", Tensor::scalar_int64(0))},
                           {{"axis", 1}});
    pooled = linear_gemm(zb, "dense", first, h, h, init);
    pooled = zb.op1("Tanh", {pooled});
  }

  if (c.classes > 0) {
    ValueId logits = linear_gemm(zb, "classifier", pooled, h, c.classes, init);
    zb.batched_output(logits, "logits");
  } else {
    zb.batched_output(x, "last_hidden_state");
    zb.batched_output(pooled, "pooler_output");
  }
  return zb.finish();
}

}  // namespace autopar::zoo
