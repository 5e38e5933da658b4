// Building blocks shared by the zoo families: the module-scoped builder, Linear, LayerNorm,
// GELU, multi-head attention and the pre-LayerNorm transformer block.
#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "families.h"

namespace autopar::zoo {

ZooBuilder::ZooBuilder(std::string graph_name, const BuildSettings& settings)
    : b_(std::move(graph_name), 17), batch_(settings.batch), seed_(settings.seed) {
  b_.set_with_data(settings.with_data);
  b_.set_seed(settings.seed);
}

std::string ZooBuilder::path(char separator) const {
  std::string out;
  for (const std::string& m : modules_) {
    if (!out.empty()) out += separator;
    out += m;
  }
  return out;
}

ValueId ZooBuilder::batched_input(std::string_view name, DType dtype, std::vector<int64_t> dims) {
  std::vector<std::string> symbols(dims.size() + 1);
  symbols[0] = "batch";
  dims.insert(dims.begin(), batch_);
  return b_.input(name, dtype, std::move(dims), std::move(symbols));
}

ValueId ZooBuilder::param(std::string_view name, std::vector<int64_t> dims, ParamInit init) {
  std::string prefix = path('.');
  std::string full = prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
  return b_.parameter(full, std::move(dims), init);
}

ValueId ZooBuilder::constant(std::string_view name, Tensor data) {
  std::string prefix = path('.');
  std::string full = prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
  return b_.constant(full, std::move(data));
}

ValueId ZooBuilder::shared_tensor(const std::string& name, Tensor data) {
  auto it = shared_.find(name);
  if (it != shared_.end()) {
    assert(*b_.graph().value(it->second).data == data && "shared constant redefined");
    return it->second;
  }
  ValueId id = b_.constant(name, std::move(data));
  shared_.emplace(name, id);
  return id;
}

ValueId ZooBuilder::shared_table(const std::string& name, DType dtype, std::vector<int64_t> dims,
                                 const std::function<Tensor()>& make) {
  auto it = shared_.find(name);
  if (it != shared_.end()) return it->second;
  // Tables up to 1 GiB always carry data (plans of shape-only models hold their constants);
  // larger ones (the causal mask of a sequence over 16K) only with weights, which the zoo
  // refuses at such lengths.
  constexpr int64_t kLargestTableBytes = int64_t{1} << 30;
  const bool with_data =
      b_.with_data() || element_count(dims) * dtype_size(dtype) <= kLargestTableBytes;
  ValueId id = with_data ? b_.constant(name, make())
                         : b_.constant_without_data(name, dtype, std::move(dims));
  shared_.emplace(name, id);
  return id;
}

ValueId ZooBuilder::shared_ints(const std::string& name, const std::vector<int64_t>& values) {
  return shared_tensor(name, Tensor::vector_int64(values));
}

ValueId ZooBuilder::shared_scalar(const std::string& name, float value) {
  return shared_tensor(name, Tensor::from_float({}, std::span(&value, 1)));
}

std::vector<ValueId> ZooBuilder::op(std::string_view op_type, std::vector<ValueId> inputs,
                                    Attributes attrs, int num_outputs) {
  // The GraphBuilder's own scope is only set around the node, so that parameter and
  // constant names (dotted) never pick up the node-name form (slashed).
  std::string scope = path('/');
  if (!scope.empty()) b_.push_scope(scope);
  std::vector<ValueId> outputs = b_.op(op_type, std::move(inputs), std::move(attrs), num_outputs);
  if (!scope.empty()) b_.pop_scope();
  return outputs;
}

ValueId ZooBuilder::dropout(ValueId x, double ratio) {
  if (ratio == 0) return x;
  ValueId p = shared_tensor(fmt::format("dropout_ratio_{}", ratio), [&] {
    const float r = static_cast<float>(ratio);
    return Tensor::from_float({}, std::span(&r, 1));
  }());
  ValueId training = shared_tensor("dropout_training_mode", [] {
    Tensor t(DType::kBool, {});
    t.set_from_int(0, 1);
    return t;
  }());
  // Seeds 1, 2, ... in build order, offset by the model's seed.
  const auto seed = static_cast<int64_t>(seed_ * 1'000'003 + static_cast<uint64_t>(++dropouts_));
  return op("Dropout", {x, p, training}, {{"seed", seed}}, 2)[0];
}

void ZooBuilder::batched_output(ValueId id, std::string_view name) {
  std::vector<std::string> symbols(b_.graph().value(id).shape.dims.size());
  symbols[0] = "batch";
  b_.output(id, name, std::move(symbols));
}

ValueId linear(ZooBuilder& zb, std::string_view module, ValueId x, int64_t in, int64_t out,
               ParamInit init) {
  ZooBuilder::Module m(zb, module);
  ValueId weight = zb.param("weight", {in, out}, init);
  ValueId bias = zb.param("bias", {out}, ParamInit::zeros());
  ValueId y = zb.op1("MatMul", {x, weight});
  return zb.op1("Add", {y, bias});
}

ValueId linear_gemm(ZooBuilder& zb, std::string_view module, ValueId x, int64_t in, int64_t out,
                    ParamInit init) {
  ZooBuilder::Module m(zb, module);
  ValueId weight = zb.param("weight", {out, in}, init);
  ValueId bias = zb.param("bias", {out}, ParamInit::zeros());
  return zb.op1("Gemm", {x, weight, bias}, {{"alpha", 1.0f}, {"beta", 1.0f}, {"transB", 1}});
}

ValueId layer_norm(ZooBuilder& zb, std::string_view module, ValueId x, int64_t hidden,
                   float epsilon) {
  ZooBuilder::Module m(zb, module);
  ValueId scale = zb.param("weight", {hidden}, ParamInit::ones());
  ValueId bias = zb.param("bias", {hidden}, ParamInit::zeros());
  return zb.op1("LayerNormalization", {x, scale, bias}, {{"axis", -1}, {"epsilon", epsilon}});
}

ValueId computed_causal_mask(ZooBuilder& zb, int64_t seq) {
  auto positions = [&](const char* name, std::vector<int64_t> dims) {
    return zb.shared_table(name, DType::kInt64, dims, [seq, dims] {
      Tensor t(DType::kInt64, dims);
      for (int64_t i = 0; i < seq; ++i) t.set_from_int(i, i);
      return t;
    });
  };
  const ValueId columns = positions("causal_mask_columns", {1, seq});
  const ValueId rows = positions("causal_mask_rows", {seq, 1});
  const ValueId above = zb.op1("Greater", {columns, rows});
  const ValueId masked = zb.op1("Cast", {above}, {{"to", int64_t{1}}});
  return zb.op1("Mul", {masked, zb.shared_scalar("causal_mask_fill", -1e4f)});
}

ValueId causal_mask(ZooBuilder& zb, int64_t seq) {
  // Longer masks are computed: no [seq, seq] constant of several GiB.
  constexpr int64_t kLongestConstantMask = 16384;
  if (seq > kLongestConstantMask) return computed_causal_mask(zb, seq);
  return zb.shared_table("causal_mask", DType::kFloat32, {seq, seq}, [seq] {
    Tensor data(DType::kFloat32, {seq, seq});
    std::span<float> mask = data.mutable_data<float>();
    for (int64_t i = 0; i < seq; ++i) {
      std::fill(mask.begin() + i * seq + i + 1, mask.begin() + (i + 1) * seq, -1e4f);
    }
    return data;
  });
}

ValueId gelu(ZooBuilder& zb, ValueId x) {
  ValueId y = zb.op1("Div", {x, zb.shared_scalar("gelu_sqrt2", std::sqrt(2.0f))});
  y = zb.op1("Erf", {y});
  y = zb.op1("Add", {y, zb.shared_scalar("gelu_one", 1.0f)});
  y = zb.op1("Mul", {x, y});
  return zb.op1("Mul", {y, zb.shared_scalar("gelu_half", 0.5f)});
}

ValueId attention_heads(ZooBuilder& zb, ValueId q, ValueId k, ValueId v, int64_t hidden,
                        int64_t heads, ScoreScale scale, ValueId mask, double dropout) {
  const int64_t head_dim = hidden / heads;
  // 0 copies batch and sequence, so the shapes hold for any batch.
  ValueId split_shape = zb.shared_ints("attn_split_heads_shape", {0, 0, heads, head_dim});
  ValueId merge_shape = zb.shared_ints("attn_merge_heads_shape", {0, 0, hidden});
  q = zb.op1("Reshape", {q, split_shape});
  k = zb.op1("Reshape", {k, split_shape});
  v = zb.op1("Reshape", {v, split_shape});
  q = zb.op1("Transpose", {q}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  // k goes straight to [batch, heads, head_dim, seq]: the exporter fuses the permute with
  // k.transpose(-1, -2).
  k = zb.op1("Transpose", {k}, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
  v = zb.op1("Transpose", {v}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  ValueId scores = zb.op1("MatMul", {q, k});
  const float root = std::sqrt(static_cast<float>(head_dim));
  if (scale == ScoreScale::kDivSqrt) {
    scores = zb.op1("Div", {scores, zb.shared_scalar("attn_sqrt_head_dim", root)});
  } else {
    scores = zb.op1("Mul", {scores, zb.shared_scalar("attn_scale", 1.0f / root)});
  }
  if (mask != kNoId) scores = zb.op1("Add", {scores, mask});
  ValueId probs = zb.op1("Softmax", {scores}, {{"axis", -1}});
  probs = zb.dropout(probs, dropout);
  ValueId context = zb.op1("MatMul", {probs, v});
  context = zb.op1("Transpose", {context}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  return zb.op1("Reshape", {context, merge_shape});
}

ValueId pre_ln_block(ZooBuilder& zb, ValueId x, const PreLnBlock& block) {
  const PreLnNames& n = block.names;
  const int64_t h = block.hidden;
  const ParamInit init = ParamInit::normal(block.init_stddev);

  ValueId y = layer_norm(zb, n.ln_1, x, h, block.epsilon);
  {
    ZooBuilder::Module attn(zb, n.attn);
    ValueId qkv = linear(zb, n.qkv, y, h, 3 * h, init);
    std::vector<ValueId> parts =
        zb.op("Split", {qkv, zb.shared_ints("qkv_split", {h, h, h})}, {{"axis", 2}}, 3);
    y = attention_heads(zb, parts[0], parts[1], parts[2], h, block.heads, block.scale, block.mask,
                        block.dropout);
    y = linear(zb, n.attn_proj, y, h, h, init);
    y = zb.dropout(y, block.dropout);
  }
  x = zb.op1("Add", {x, y});

  y = layer_norm(zb, n.ln_2, x, h, block.epsilon);
  {
    ZooBuilder::Module mlp(zb, n.mlp);
    y = linear(zb, n.fc_in, y, h, 4 * h, init);
    {
      ZooBuilder::Module act(zb, "act");
      y = gelu(zb, y);
    }
    y = linear(zb, n.fc_out, y, 4 * h, h, init);
    y = zb.dropout(y, block.dropout);
  }
  return zb.op1("Add", {x, y});
}

}  // namespace autopar::zoo
