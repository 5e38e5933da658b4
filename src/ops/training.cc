// Fused training ops (ai.autopar.training), as fused kernels run them: an optimizer's update of
// one parameter and its slots in one pass over memory, LayerNorm's gradient, GELU, RMSNorm,
// rotary embeddings and SwiGLU, instead of a dozen elementwise and reduction nodes each
// reading and writing whole tensors.
#include <algorithm>
#include <cmath>

#include "families.h"

namespace autopar {
namespace {

// Adam(X, G, M, V, rate, epsilon, coefficients) -> X', M', V' with coefficients
// [β1, 1 − β1, β2, 1 − β2, keep]:
//   M' = β1·M + (1 − β1)·G,  V' = β2·V + (1 − β2)·G·G,
//   X' = keep·X − rate·M' / (√V' + epsilon)
// where rate and epsilon carry the bias corrections (rate = lr·√c2 / c1, epsilon = ε·√c2) and
// keep is AdamW's decoupled decay (1 − lr·λ; 1 for Adam).
Status infer_adam(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 7, 7, 3, 3));
  const DType dtype = ctx.input_dtype(0);
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64)
    return ctx.fail("{} must be float32 or float64", input_text(ctx, 0));
  for (size_t i = 1; i < 7; ++i) {
    if (ctx.input_dtype(i) != dtype)
      return ctx.fail("{} must have the parameter's type {}", input_text(ctx, i),
                      dtype_name(dtype));
  }
  for (size_t i = 1; i < 4; ++i) {
    if (ctx.input_dims(i) != ctx.input_dims(0))
      return ctx.fail("{} must have the parameter's shape {}", input_text(ctx, i),
                      dims_text(dtype, ctx.input_dims(0)));
  }
  for (size_t i = 4; i < 6; ++i) {
    if (ctx.input(i).shape.num_elements() != 1)
      return ctx.fail("{} must be a scalar", input_text(ctx, i));
  }
  if (ctx.input_dims(6) != std::vector<int64_t>{5})
    return ctx.fail("{} must hold the 5 coefficients [β1, 1 − β1, β2, 1 − β2, keep]",
                    input_text(ctx, 6));
  for (size_t i = 0; i < 3; ++i)
    RETURN_IF_ERROR(set_output_checked(ctx, i, dtype, ctx.input_dims(0)));
  return Status::ok();
}

double adam_flops(const Graph& g, const Node& n) { return 12.0 * input_elements(g, n, 0); }

// Loops over the parameter's dims; X, G, M, V and the outputs index them alike, the scalars
// and coefficients are read whole.
std::optional<IterationSpace> adam_space(const Graph& g, const Node& n) {
  if (n.input(0) == kNoId) return std::nullopt;
  const std::vector<int64_t>& dims = g.value(n.inputs[0]).shape.dims;
  IterationSpace space;
  std::vector<int> map;
  for (size_t d = 0; d < dims.size(); ++d) {
    space.loops.push_back({fmt::format("d{}", d), dims[d], LoopKind::kParallel, true});
    map.push_back(static_cast<int>(d));
  }
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] == kNoId) {
      space.inputs.emplace_back();
    } else if (i < 4) {
      space.inputs.push_back(map);
    } else {
      space.inputs.emplace_back(static_cast<size_t>(g.value(n.inputs[i]).shape.rank()), -1);
    }
  }
  for (ValueId o : n.outputs) space.outputs.push_back(o == kNoId ? std::vector<int>{} : map);
  return space;
}

// LayerNormalizationGrad(dY, X, Scale) -> dX, X̂ over the dims from `axis` on, with
// x̂ = (x − μ)·r, r = 1/√(σ² + epsilon): dX = r·(g − mean(g) − x̂·mean(g·x̂)), g = dY·Scale.
// X̂ serves the scale's gradient (Σ dY·x̂ over the rows).
Status infer_layer_norm_grad(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 3, 3, 2, 2));
  const DType dtype = ctx.input_dtype(1);
  if (!is_floating(dtype)) return ctx.fail("{} must be floating", input_text(ctx, 1));
  if (ctx.input_dims(0) != ctx.input_dims(1) || ctx.input_dtype(0) != dtype)
    return ctx.fail("{} must have the type and shape of {}", input_text(ctx, 0),
                    input_text(ctx, 1));
  int64_t axis = -1;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", ctx.input_rank(1), axis));
  const std::vector<int64_t>& x = ctx.input_dims(1);
  const std::vector<int64_t> normalized(x.begin() + axis, x.end());
  const std::vector<int64_t>& scale = ctx.input_dims(2);
  if (ctx.input_dtype(2) != dtype || scale.size() > normalized.size() ||
      !std::equal(scale.begin(), scale.end(),
                  normalized.end() - static_cast<std::ptrdiff_t>(scale.size())))
    return ctx.fail("{} must be {} over the normalised dims", input_text(ctx, 2),
                    dims_text(dtype, normalized));
  RETURN_IF_ERROR(set_output_checked(ctx, 0, dtype, x));
  return set_output_checked(ctx, 1, dtype, x);
}

double layer_norm_grad_flops(const Graph& g, const Node& n) {
  return 12.0 * input_elements(g, n, 1);
}

// The rows are parallel loops; the normalised dims are read whole.
std::optional<IterationSpace> layer_norm_grad_space(const Graph& g, const Node& n) {
  return space_normalized_from_axis(g, n, 1);
}

// RMSNormalization(X, Scale) -> Y over the dims from `axis` on: y = x·r·scale with
// r = 1/√(mean(x²) + epsilon) (ONNX's RMSNormalization, opset 23). RMSNormalizationGrad(dY,
// X, Scale) -> dX, X̂ with x̂ = x·r and g = dY·scale: dX = r·(g − x̂·mean(g·x̂)); X̂ serves
// the scale's gradient (Σ dY·x̂ over the rows).
Status check_rms_scale(InferenceContext& ctx, size_t x_input, size_t scale_input) {
  const DType dtype = ctx.input_dtype(x_input);
  if (!is_floating(dtype)) return ctx.fail("{} must be floating", input_text(ctx, x_input));
  int64_t axis = -1;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", ctx.input_rank(x_input), axis));
  float epsilon = 1e-5f;
  RETURN_IF_ERROR(read_float(ctx, "epsilon", epsilon));
  if (!(epsilon >= 0.0f)) return ctx.fail("epsilon {} must not be negative", epsilon);
  const std::vector<int64_t>& x = ctx.input_dims(x_input);
  const std::vector<int64_t> normalized(x.begin() + axis, x.end());
  const std::vector<int64_t>& scale = ctx.input_dims(scale_input);
  if (ctx.input_dtype(scale_input) != dtype || scale.size() > normalized.size() ||
      !std::equal(scale.begin(), scale.end(),
                  normalized.end() - static_cast<std::ptrdiff_t>(scale.size())))
    return ctx.fail("{} must be {} over the normalised dims", input_text(ctx, scale_input),
                    dims_text(dtype, normalized));
  return Status::ok();
}

Status infer_rms_norm(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  RETURN_IF_ERROR(check_rms_scale(ctx, 0, 1));
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

Status infer_rms_norm_grad(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 3, 3, 2, 2));
  RETURN_IF_ERROR(check_rms_scale(ctx, 1, 2));
  if (ctx.input_dims(0) != ctx.input_dims(1) || ctx.input_dtype(0) != ctx.input_dtype(1))
    return ctx.fail("{} must have the type and shape of {}", input_text(ctx, 0),
                    input_text(ctx, 1));
  RETURN_IF_ERROR(set_output_checked(ctx, 0, ctx.input_dtype(1), ctx.input_dims(1)));
  return set_output_checked(ctx, 1, ctx.input_dtype(1), ctx.input_dims(1));
}

double rms_norm_flops(const Graph& g, const Node& n) { return 4.0 * input_elements(g, n, 0); }
double rms_norm_grad_flops(const Graph& g, const Node& n) { return 8.0 * input_elements(g, n, 1); }

std::optional<IterationSpace> rms_norm_space(const Graph& g, const Node& n) {
  return space_normalized_from_axis(g, n, 0);
}
std::optional<IterationSpace> rms_norm_grad_space(const Graph& g, const Node& n) {
  return space_normalized_from_axis(g, n, 1);
}

// RotaryEmbedding(X, Cos, Sin) -> Y, rotary position embeddings in the rotate-half form:
// y = x·cos + rotate_half(x)·sin with rotate_half(x) = concat(−x[..., d/2:], x[..., :d/2]),
// X [..., seq, d] and the tables [seq, d]. With inverse = 1 it rotates back,
// y = x·cos − rotate_half(x·sin): the transpose of the forward map, so its own gradient.
Status infer_rotary(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 3, 3, 1, 1));
  const DType dtype = ctx.input_dtype(0);
  if (!is_floating(dtype)) return ctx.fail("{} must be floating", input_text(ctx, 0));
  const std::vector<int64_t>& x = ctx.input_dims(0);
  if (x.size() < 2 || x.back() % 2 != 0)
    return ctx.fail("{} must have rank 2 or more and an even last dim", input_text(ctx, 0));
  const std::vector<int64_t> table(x.end() - 2, x.end());
  for (size_t i = 1; i < 3; ++i) {
    if (ctx.input_dims(i) != table || ctx.input_dtype(i) != dtype)
      return ctx.fail("{} must be {} (the last two dims of {})", input_text(ctx, i),
                      dims_text(dtype, table), input_text(ctx, 0));
  }
  const int64_t inverse = ctx.node().attr_int("inverse", 0);
  if (inverse != 0 && inverse != 1) return ctx.fail("inverse {} is neither 0 nor 1", inverse);
  return set_output_checked(ctx, 0, dtype, x);
}

double rotary_flops(const Graph& g, const Node& n) { return 3.0 * output_elements(g, n); }

// Every dim of X is a parallel loop but the rotated one, which stays whole; the tables follow
// the sequence loop (a device reads the rows of its positions).
std::optional<IterationSpace> rotary_space(const Graph& g, const Node& n) {
  if (n.input(0) == kNoId || g.value(n.inputs[0]).shape.rank() < 2) return std::nullopt;
  return space_with_whole_axes(g, n, {g.value(n.inputs[0]).shape.rank() - 1});
}

// SwiGLU(Gate, Up) -> Y = silu(gate)·up with silu(g) = g·σ(g); SwiGLUGrad(dY, Gate, Up) ->
// dGate = dY·up·σ(g)·(1 + g·(1 − σ(g))), dUp = dY·silu(g).
Status infer_swiglu(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  if (!is_floating(ctx.input_dtype(0))) return ctx.fail("{} must be floating", input_text(ctx, 0));
  if (ctx.input_dims(1) != ctx.input_dims(0) || ctx.input_dtype(1) != ctx.input_dtype(0))
    return ctx.fail("{} must have the type and shape of {}", input_text(ctx, 1),
                    input_text(ctx, 0));
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

Status infer_swiglu_grad(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 3, 3, 2, 2));
  if (!is_floating(ctx.input_dtype(1))) return ctx.fail("{} must be floating", input_text(ctx, 1));
  for (size_t i : {size_t{0}, size_t{2}}) {
    if (ctx.input_dims(i) != ctx.input_dims(1) || ctx.input_dtype(i) != ctx.input_dtype(1))
      return ctx.fail("{} must have the type and shape of {}", input_text(ctx, i),
                      input_text(ctx, 1));
  }
  RETURN_IF_ERROR(set_output_checked(ctx, 0, ctx.input_dtype(1), ctx.input_dims(1)));
  return set_output_checked(ctx, 1, ctx.input_dtype(1), ctx.input_dims(1));
}

double swiglu_flops(const Graph& g, const Node& n) { return 5.0 * output_elements(g, n); }
double swiglu_grad_flops(const Graph& g, const Node& n) { return 9.0 * input_elements(g, n, 1); }

// Attention(Q, K, V) -> Y, LSE as FlashAttention computes it: softmax(scale·Q·Kᵀ (+ the causal
// mask))·V row by row, never holding the scores; LSE, each row's log-sum-exp, is what the
// backward needs to recompute them. AttentionGrad(dY, Q, K, V, Y, LSE) -> dQ, dK, dV.
Status check_attention_operands(InferenceContext& ctx, size_t q_input) {
  const DType dtype = ctx.input_dtype(q_input);
  if (!is_floating(dtype)) return ctx.fail("{} must be floating", input_text(ctx, q_input));
  for (size_t i = q_input; i < q_input + 3; ++i) {
    if (ctx.input_rank(i) != 4)
      return ctx.fail("{} must be [batch, heads, seq, head dim]", input_text(ctx, i));
    if (ctx.input_dtype(i) != dtype)
      return ctx.fail("{} must have the type of {}", input_text(ctx, i), input_text(ctx, q_input));
  }
  const std::vector<int64_t>& q = ctx.input_dims(q_input);
  const std::vector<int64_t>& k = ctx.input_dims(q_input + 1);
  const std::vector<int64_t>& v = ctx.input_dims(q_input + 2);
  if (k[0] != q[0] || v[0] != q[0] || v[1] != k[1] || v[2] != k[2] || k[3] != q[3])
    return ctx.fail("{} and {} do not fit queries {}", input_text(ctx, q_input + 1),
                    input_text(ctx, q_input + 2), input_text(ctx, q_input));
  if (k[1] < 1 || q[1] % k[1] != 0)
    return ctx.fail("{} query heads are no multiple of {} key/value heads", q[1], k[1]);
  int64_t causal = 0;
  RETURN_IF_ERROR(read_int(ctx, "causal", causal));
  if (causal != 0 && causal != 1) return ctx.fail("causal {} is neither 0 nor 1", causal);
  if (causal && q[2] != k[2])
    return ctx.fail("causal attention needs as many keys ({}) as queries ({})", k[2], q[2]);
  float scale = 1.0f;
  RETURN_IF_ERROR(read_float(ctx, "scale", scale));
  if (!(scale > 0.0f) || !std::isfinite(scale)) return ctx.fail("scale {} is not positive", scale);
  return Status::ok();
}

}  // namespace

Status infer_attention(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 3, 3, 1, 2));
  RETURN_IF_ERROR(check_attention_operands(ctx, 0));
  const std::vector<int64_t>& q = ctx.input_dims(0);
  const std::vector<int64_t>& v = ctx.input_dims(2);
  RETURN_IF_ERROR(set_output_checked(ctx, 0, ctx.input_dtype(0), {q[0], q[1], q[2], v[3]}));
  return set_output_checked(ctx, 1, ctx.input_dtype(0), {q[0], q[1], q[2]});
}

Status infer_attention_grad(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 6, 6, 3, 3));
  RETURN_IF_ERROR(check_attention_operands(ctx, 1));
  const std::vector<int64_t>& q = ctx.input_dims(1);
  const std::vector<int64_t>& v = ctx.input_dims(3);
  const std::vector<int64_t> y = {q[0], q[1], q[2], v[3]};
  for (size_t i : {size_t{0}, size_t{4}}) {
    if (ctx.input_dims(i) != y || ctx.input_dtype(i) != ctx.input_dtype(1))
      return ctx.fail("{} must be {}", input_text(ctx, i), dims_text(ctx.input_dtype(1), y));
  }
  const std::vector<int64_t> lse = {q[0], q[1], q[2]};
  if (ctx.input_dims(5) != lse || ctx.input_dtype(5) != ctx.input_dtype(1))
    return ctx.fail("{} must be {}", input_text(ctx, 5), dims_text(ctx.input_dtype(1), lse));
  for (size_t i = 0; i < 3; ++i)
    RETURN_IF_ERROR(set_output_checked(ctx, i, ctx.input_dtype(1), ctx.input_dims(1 + i)));
  return Status::ok();
}

namespace {

// Per (batch, query head): query rows × the keys they meet, and the head dims.
struct AttentionWork {
  double pairs = 0;  // unmasked (query, key) pairs over every batch row and head
  double d = 0, dv = 0;
};

AttentionWork attention_work(const Graph& g, const Node& n, size_t q_input) {
  AttentionWork w;
  const std::vector<int64_t>& q = input_dims_of(g, n, q_input);
  const std::vector<int64_t>& v = input_dims_of(g, n, q_input + 2);
  if (q.size() != 4 || v.size() != 4) return w;
  const double keys = static_cast<double>(v[2]) *
                      static_cast<double>(std::max<int64_t>(n.attr_int("group_size", 1), 1));
  double pairs =
      static_cast<double>(q[0]) * static_cast<double>(q[1]) * static_cast<double>(q[2]) * keys;
  if (n.attr_int("causal", 0)) pairs *= (keys + 1.0) / (2.0 * keys);
  w.pairs = pairs;
  w.d = static_cast<double>(q[3]);
  w.dv = static_cast<double>(v[3]);
  return w;
}

}  // namespace

// Forward: the scores (2·d per pair), the weighted sum (2·dv) and the softmax's scaling,
// exponential and sum (3).
double attention_flops(const Graph& g, const Node& n) {
  const AttentionWork w = attention_work(g, n, 0);
  return w.pairs * (2.0 * w.d + 2.0 * w.dv + 3.0);
}

// Backward: the scores again (2·d), dV (2·dv), dP (2·dv), dQ and dK (2·d each), and the
// probabilities' exponential and product with dP − D (4).
double attention_grad_flops(const Graph& g, const Node& n) {
  const AttentionWork w = attention_work(g, n, 1);
  return w.pairs * (6.0 * w.d + 4.0 * w.dv + 4.0);
}

namespace {

// Loops b, h and q index the queries (K and V follow h by key/value head groups), k the keys;
// the head dims are read whole. Forward: the keys are a softmax's row, never split. Backward:
// q is a sum for dK and dV and k one for dQ, so either splits (a partial sum of the rest).
std::optional<IterationSpace> attention_space(const Graph& g, const Node& n, bool backward) {
  const size_t q_input = backward ? 1 : 0;
  const std::vector<int64_t>& q = input_dims_of(g, n, q_input);
  const std::vector<int64_t>& k = input_dims_of(g, n, q_input + 1);
  if (q.size() != 4 || k.size() != 4) return std::nullopt;
  IterationSpace space;
  const LoopKind rows = backward ? LoopKind::kReduction : LoopKind::kParallel;
  space.loops = {{"b", q[0], LoopKind::kParallel, true},
                 {"h", q[1], LoopKind::kParallel, true},
                 {"q", q[2], rows, true},
                 {"k", k[2], LoopKind::kReduction, backward}};
  const std::vector<int> queries = {0, 1, 2, -1}, keys = {0, 1, 3, -1}, lse = {0, 1, 2};
  if (backward) {
    space.inputs = {queries, queries, keys, keys, queries, lse};
    space.outputs = {queries, keys, keys};
  } else {
    space.inputs = {queries, keys, keys};
    space.outputs = {queries, lse};
  }
  return space;
}

}  // namespace

namespace {

// An ai.autopar.training op with its parallel semantics; `gradient`: whether a rule will be
// attached (register_all_gradients), else it carries none.
void add_training_op(OpRegistry& registry, OpDef def, IterationSpaceFn space, bool gradient) {
  def = with_semantics(std::move(def), std::move(space));
  if (!gradient) def.gradient_kind = GradientKind::kNone;
  registry.add(in_domain(std::string(kTrainingDomain), std::move(def)));
}

// Gelu(X) = X·Φ(X) = ½·X·(1 + erf(X/√2)); GeluGrad(dY, X) = dY·(Φ(X) + X·φ(X)). With
// approximate = "tanh" Φ is ½·(1 + tanh(√(2/π)·(X + 0.044715·X³))), as ONNX's Gelu (20).
Status check_approximate(InferenceContext& ctx) {
  const std::string form = ctx.node().attr_string("approximate", "none");
  if (form != "none" && form != "tanh")
    return ctx.fail("approximate '{}' is neither 'none' nor 'tanh'", form);
  return Status::ok();
}

Status infer_gelu(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  RETURN_IF_ERROR(check_approximate(ctx));
  if (!is_floating(ctx.input_dtype(0))) return ctx.fail("{} must be floating", input_text(ctx, 0));
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

Status infer_gelu_grad(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  RETURN_IF_ERROR(check_approximate(ctx));
  if (!is_floating(ctx.input_dtype(1))) return ctx.fail("{} must be floating", input_text(ctx, 1));
  if (ctx.input_dims(0) != ctx.input_dims(1) || ctx.input_dtype(0) != ctx.input_dtype(1))
    return ctx.fail("{} must have the type and shape of {}", input_text(ctx, 0),
                    input_text(ctx, 1));
  return set_output_checked(ctx, 0, ctx.input_dtype(1), ctx.input_dims(1));
}

double gelu_flops(const Graph& g, const Node& n) { return 8.0 * output_elements(g, n); }
double gelu_grad_flops(const Graph& g, const Node& n) { return 14.0 * output_elements(g, n); }

}  // namespace

void register_training_ops(OpRegistry& registry) {
  add_training_op(registry,
                  make_op("Adam", infer_adam, adam_flops,
                          "12 per parameter element (two moment updates, a square root, a "
                          "division and the step)"),
                  adam_space, false);
  add_training_op(registry,
                  make_op("LayerNormalizationGrad", infer_layer_norm_grad, layer_norm_grad_flops,
                          "12 per element (the statistics, two row means and the input gradient)"),
                  layer_norm_grad_space, false);
  // RMSNormalization's, RotaryEmbedding's and SwiGLU's gradient rules build their Grad ops
  // (RotaryEmbedding its inverse).
  add_training_op(registry,
                  make_op("RMSNormalization", infer_rms_norm, rms_norm_flops,
                          "4 per element (the square, the row mean, the scaling and the weight)"),
                  rms_norm_space, true);
  add_training_op(registry,
                  make_op("RMSNormalizationGrad", infer_rms_norm_grad, rms_norm_grad_flops,
                          "8 per element (the statistics, a row mean and the input gradient)"),
                  rms_norm_grad_space, false);
  add_training_op(registry,
                  make_op("RotaryEmbedding", infer_rotary, rotary_flops,
                          "3 per element (two products and a sum)"),
                  rotary_space, true);
  add_training_op(registry,
                  make_op("SwiGLU", infer_swiglu, swiglu_flops,
                          "5 per element (the sigmoid counts 1, the exponential 1)"),
                  broadcast_space, true);
  add_training_op(registry,
                  make_op("SwiGLUGrad", infer_swiglu_grad, swiglu_grad_flops,
                          "9 per element (the sigmoid and both gradients)"),
                  broadcast_space, false);
  // Attention's gradient rule builds an AttentionGrad.
  add_training_op(
      registry,
      make_op("Attention", infer_attention, attention_flops,
              "per unmasked (query, key) pair: 2·d for the score, 2·dv for the "
              "weighted sum, 3 for the softmax"),
      [](const Graph& g, const Node& n) { return attention_space(g, n, false); }, true);
  add_training_op(
      registry,
      make_op("AttentionGrad", infer_attention_grad, attention_grad_flops,
              "per unmasked (query, key) pair: 6·d + 4·dv (the scores again, dV, "
              "dP, dQ, dK) and 4 for the probabilities"),
      [](const Graph& g, const Node& n) { return attention_space(g, n, true); }, false);
  // Gelu's gradient rule builds a GeluGrad.
  add_training_op(
      registry,
      make_op("Gelu", infer_gelu, gelu_flops, "8 per element (the error function counts 1)"),
      broadcast_space, true);
  add_training_op(registry,
                  make_op("GeluGrad", infer_gelu_grad, gelu_grad_flops,
                          "14 per element (the error function and the exponential count 1 each)"),
                  broadcast_space, false);
}

}  // namespace autopar
