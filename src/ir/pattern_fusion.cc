#include "autopar/ir/pattern_fusion.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "autopar/ir/graph_copy.h"

namespace autopar {
namespace {

constexpr int64_t kLayerNormOpset = 17;
constexpr int64_t kLowestRaisedOpset = 13;

// One fused chain: the nodes it replaces and the node standing for them, written with the
// source graph's value ids. The fused node takes the place of the chain's last node, after
// which all its inputs exist.
struct Match {
  std::vector<NodeId> covered;
  NodeId last = kNoId;
  Node fused;
  // Outputs the fused node adds beyond the chain's (Attention's log-sum-exp), appended after
  // fused.outputs as new values.
  std::vector<Value> added_outputs;
  // Nodes written before the fused node, each with one new output value; the fused node reads
  // prelude output i as value id prelude_value(i).
  std::vector<std::pair<Node, Value>> prelude;
};

// The id a fused node's input holds for the output of prelude node i (ids of the source graph
// are never negative).
constexpr ValueId prelude_value(size_t i) { return -2 - static_cast<ValueId>(i); }

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g) {}

  // The ai.onnx node producing `v` with op `op`, or null.
  const Node* producer(ValueId v, std::string_view op) const {
    if (v == kNoId || g_.value(v).producer == kNoId) return nullptr;
    const Node& n = g_.node(g_.value(v).producer);
    return n.op_type == op && n.domain.empty() && n.outputs.size() == 1 ? &n : nullptr;
  }

  // The one reader of `v` if it is an ai.onnx `op` with one output and `v` is no graph output.
  const Node* sole(ValueId v, std::string_view op) const {
    if (v == kNoId || g_.is_output(v)) return nullptr;
    const std::vector<NodeId>& c = g_.value(v).consumers;
    if (c.size() != 1) return nullptr;
    const Node& n = g_.node(c[0]);
    return n.op_type == op && n.domain.empty() && n.outputs.size() == 1 ? &n : nullptr;
  }

  // Whether `v` is a constant scalar within `tolerance` (relative) of `value`; the default
  // admits constants stored in bfloat16 (8 significant bits).
  bool scalar(ValueId v, double value, double tolerance = 1e-2) const {
    if (v == kNoId) return false;
    const Value& c = g_.value(v);
    if (!c.data || c.data->num_elements() != 1 || c.kind == ValueKind::kParameter) return false;
    return std::fabs(c.data->float_at(0) - value) <= tolerance * std::fabs(value);
  }

  std::optional<double> scalar_value(ValueId v) const {
    if (v == kNoId) return std::nullopt;
    const Value& c = g_.value(v);
    if (!c.data || c.data->num_elements() != 1 || c.kind == ValueKind::kParameter)
      return std::nullopt;
    return c.data->float_at(0);
  }

  // The other operand of binary `n` when one is `v`.
  static ValueId other(const Node& n, ValueId v) {
    if (n.inputs.size() != 2) return kNoId;
    if (n.inputs[0] == v) return n.inputs[1];
    if (n.inputs[1] == v) return n.inputs[0];
    return kNoId;
  }

  // The operand of binary `n` that is not a constant near `value`, when the other is.
  ValueId times_constant(const Node& n, double value) const {
    if (n.inputs.size() != 2) return kNoId;
    if (scalar(n.inputs[1], value)) return n.inputs[0];
    if (scalar(n.inputs[0], value)) return n.inputs[1];
    return kNoId;
  }

  NodeId id_of(const Node* n) const { return g_.value(n->outputs[0]).producer; }

  const Graph& graph() const { return g_; }

 private:
  const Graph& g_;
};

// x³ of `x`, as Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x); appends the nodes to
// `covered`.
bool is_cube(const Matcher& m, ValueId cube, ValueId x, std::vector<NodeId>& covered) {
  if (const Node* pow = m.producer(cube, "Pow")) {
    if (pow->inputs.size() == 2 && pow->inputs[0] == x && m.scalar(pow->inputs[1], 3.0, 1e-6)) {
      covered.push_back(m.id_of(pow));
      return true;
    }
    return false;
  }
  const Node* outer = m.producer(cube, "Mul");
  if (!outer) return false;
  const ValueId square = Matcher::other(*outer, x);
  const Node* inner = m.producer(square, "Mul");
  if (!inner || inner->inputs[0] != x || inner->inputs[1] != x || !m.sole(square, "Mul"))
    return false;
  covered.push_back(m.id_of(inner));
  covered.push_back(m.id_of(outer));
  return true;
}

// The end of a GELU: from a = 1 + erf(·) or 1 + tanh(·), the output ½·x·a written as
// (x·a)·½, (x·½)·a or x·(½·a). Returns the output and appends the nodes.
ValueId gelu_output(const Matcher& m, ValueId x, ValueId a, std::vector<NodeId>& covered) {
  const Node* m1 = m.sole(a, "Mul");
  if (!m1) return kNoId;
  const ValueId o = Matcher::other(*m1, a);
  if (o == x) {  // (x·a)·½
    const Node* m2 = m.sole(m1->outputs[0], "Mul");
    if (!m2 || m.times_constant(*m2, 0.5) != m1->outputs[0]) return kNoId;
    covered.push_back(m.id_of(m1));
    covered.push_back(m.id_of(m2));
    return m2->outputs[0];
  }
  if (const Node* half = m.producer(o, "Mul"); half && m.times_constant(*half, 0.5) == x) {
    if (m.sole(o, "Mul") != m1) return kNoId;  // (x·½)·a
    covered.push_back(m.id_of(half));
    covered.push_back(m.id_of(m1));
    return m1->outputs[0];
  }
  if (m.scalar(o, 0.5)) {  // x·(½·a)
    const Node* m2 = m.sole(m1->outputs[0], "Mul");
    if (!m2 || Matcher::other(*m2, m1->outputs[0]) != x) return kNoId;
    covered.push_back(m.id_of(m1));
    covered.push_back(m.id_of(m2));
    return m2->outputs[0];
  }
  return kNoId;
}

Match gelu_match(const Matcher& m, const Node& anchor, ValueId x, ValueId y,
                 std::vector<NodeId> covered, bool tanh_form) {
  Match match;
  match.covered = std::move(covered);
  match.last = *std::max_element(match.covered.begin(), match.covered.end());
  match.fused.name = m.graph().node(match.last).name + "/Gelu";
  match.fused.op_type = "Gelu";
  match.fused.domain = std::string(kTrainingDomain);
  match.fused.inputs = {x};
  match.fused.outputs = {y};
  if (tanh_form) match.fused.attrs["approximate"] = std::string("tanh");
  match.fused.layer = anchor.layer;
  match.fused.phase = anchor.phase;
  return match;
}

// Same dtype and dims (a graph input's dims carry symbols its descendants do not).
bool same_type(const Graph& g, ValueId a, ValueId b) {
  const Value& va = g.value(a);
  const Value& vb = g.value(b);
  return va.shape.known && vb.shape.known && va.shape.dims == vb.shape.dims &&
         va.dtype == vb.dtype && is_floating(va.dtype);
}

// ½·x·(1 + erf(x/√2)), x/√2 written as Div(x, √2) or Mul(x, 1/√2).
std::optional<Match> match_erf_gelu(const Matcher& m, const Node& erf) {
  if (erf.inputs.size() != 1 || erf.outputs.size() != 1) return std::nullopt;
  std::vector<NodeId> covered;
  const ValueId s = erf.inputs[0];
  ValueId x = kNoId;
  if (const Node* div = m.producer(s, "Div")) {
    if (div->inputs.size() == 2 && m.scalar(div->inputs[1], M_SQRT2)) x = div->inputs[0];
    if (x != kNoId) covered.push_back(m.id_of(div));
  } else if (const Node* mul = m.producer(s, "Mul")) {
    x = m.times_constant(*mul, M_SQRT1_2);
    if (x != kNoId) covered.push_back(m.id_of(mul));
  }
  if (x == kNoId || !m.sole(s, "Erf")) return std::nullopt;
  covered.push_back(m.id_of(&erf));
  const Node* add = m.sole(erf.outputs[0], "Add");
  if (!add || m.times_constant(*add, 1.0) != erf.outputs[0]) return std::nullopt;
  covered.push_back(m.id_of(add));
  const ValueId y = gelu_output(m, x, add->outputs[0], covered);
  if (y == kNoId || !same_type(m.graph(), x, y)) return std::nullopt;
  return gelu_match(m, erf, x, y, std::move(covered), false);
}

// ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
std::optional<Match> match_tanh_gelu(const Matcher& m, const Node& tanh) {
  if (tanh.inputs.size() != 1 || tanh.outputs.size() != 1) return std::nullopt;
  const Node* scale = m.producer(tanh.inputs[0], "Mul");
  if (!scale || !m.sole(tanh.inputs[0], "Tanh")) return std::nullopt;
  const ValueId inner = m.times_constant(*scale, std::sqrt(2.0 / M_PI));
  const Node* sum = m.producer(inner, "Add");
  if (!sum || sum->inputs.size() != 2 || !m.sole(inner, "Mul")) return std::nullopt;
  for (int first = 0; first < 2; ++first) {
    const ValueId x = sum->inputs[first];
    const ValueId term = sum->inputs[1 - first];
    const Node* cubic = m.producer(term, "Mul");
    if (!cubic || !m.sole(term, "Add")) continue;
    std::vector<NodeId> covered;
    const ValueId cube = m.times_constant(*cubic, 0.044715);
    if (cube == kNoId || !m.sole(cube, "Mul") || !is_cube(m, cube, x, covered)) continue;
    covered.insert(covered.end(), {m.id_of(cubic), m.id_of(sum), m.id_of(scale), m.id_of(&tanh)});
    const Node* add = m.sole(tanh.outputs[0], "Add");
    if (!add || m.times_constant(*add, 1.0) != tanh.outputs[0]) return std::nullopt;
    covered.push_back(m.id_of(add));
    const ValueId y = gelu_output(m, x, add->outputs[0], covered);
    if (y == kNoId || !same_type(m.graph(), x, y)) return std::nullopt;
    return gelu_match(m, tanh, x, y, std::move(covered), true);
  }
  return std::nullopt;
}

// The trailing dims a ReduceMean averages over (keepdims 1), as the first of them; nullopt
// when its axes are not the trailing ones.
std::optional<int64_t> trailing_mean_axis(const Graph& g, const Node& mean) {
  if (mean.attr_int("keepdims", 1) != 1 || mean.inputs.size() != 1) return std::nullopt;
  const int64_t rank = g.value(mean.inputs[0]).shape.rank();
  std::vector<int64_t> axes = mean.attr_ints("axes");
  if (axes.empty() || rank == 0) return std::nullopt;
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] != rank - static_cast<int64_t>(axes.size() - i)) return std::nullopt;
  }
  return axes.front();
}

// A value of exactly the normalised dims (LayerNormalization's Scale and B): a weight, or
// one read through Identity (PyTorch's exporter writes equal initializers once and the
// others as Identity of it).
bool is_affine_weight(const Graph& g, ValueId v, const std::vector<int64_t>& dims, DType dtype) {
  if (v == kNoId || !g.value(v).shape.known) return false;
  return g.value(v).shape.dims == dims && g.value(v).dtype == dtype;
}

// (x − μ)/√(σ² + ε)·γ + β, μ and σ² ReduceMeans over trailing dims, as PyTorch writes
// nn.LayerNorm below opset 17 (β optional).
std::optional<Match> match_layer_norm(const Matcher& m, const Node& mean) {
  const Graph& g = m.graph();
  const auto axis = trailing_mean_axis(g, mean);
  if (!axis || mean.outputs.size() != 1) return std::nullopt;
  const ValueId x = mean.inputs[0];
  const Node* sub = m.sole(mean.outputs[0], "Sub");
  if (!sub || sub->inputs[0] != x || sub->inputs[1] != mean.outputs[0]) return std::nullopt;
  const ValueId d = sub->outputs[0];
  if (g.is_output(d) || g.value(d).consumers.size() != 2) return std::nullopt;
  const Node* pow = nullptr;
  const Node* div = nullptr;
  for (NodeId c : g.value(d).consumers) {
    const Node& n = g.node(c);
    if (n.op_type == "Pow" && n.domain.empty() && n.inputs.size() == 2 && n.inputs[0] == d &&
        m.scalar(n.inputs[1], 2.0, 1e-6))
      pow = &n;
    if (n.op_type == "Div" && n.domain.empty() && n.inputs.size() == 2 && n.inputs[0] == d)
      div = &n;
  }
  if (!pow || !div) return std::nullopt;
  const Node* var = m.sole(pow->outputs[0], "ReduceMean");
  if (!var || trailing_mean_axis(g, *var) != axis) return std::nullopt;
  const Node* add_eps = m.sole(var->outputs[0], "Add");
  if (!add_eps) return std::nullopt;
  const auto epsilon = m.scalar_value(Matcher::other(*add_eps, var->outputs[0]));
  if (!epsilon || *epsilon < 0) return std::nullopt;
  const Node* sqrt = m.sole(add_eps->outputs[0], "Sqrt");
  if (!sqrt || m.sole(sqrt->outputs[0], "Div") != div || div->inputs[1] != sqrt->outputs[0])
    return std::nullopt;
  const Value& xv = g.value(x);
  if (!is_floating(xv.dtype) || !xv.shape.is_static()) return std::nullopt;
  const std::vector<int64_t> normalised(xv.shape.dims.begin() + *axis, xv.shape.dims.end());
  const Node* scale = m.sole(div->outputs[0], "Mul");
  if (!scale) return std::nullopt;
  const ValueId gamma = Matcher::other(*scale, div->outputs[0]);
  if (!is_affine_weight(g, gamma, normalised, xv.dtype)) return std::nullopt;
  Match match;
  match.covered = {m.id_of(&mean),   m.id_of(sub),  m.id_of(pow), m.id_of(var),
                   m.id_of(add_eps), m.id_of(sqrt), m.id_of(div), m.id_of(scale)};
  ValueId y = scale->outputs[0];
  ValueId beta = kNoId;
  if (const Node* shift = m.sole(y, "Add")) {
    const ValueId b = Matcher::other(*shift, y);
    if (is_affine_weight(g, b, normalised, xv.dtype)) {
      beta = b;
      match.covered.push_back(m.id_of(shift));
      y = shift->outputs[0];
    }
  }
  if (!same_type(g, x, y)) return std::nullopt;
  match.last = *std::max_element(match.covered.begin(), match.covered.end());
  const std::string& base = mean.name;
  const size_t slash = base.rfind('/');
  match.fused.name = slash == std::string::npos ? base + "/LayerNormalization"
                                                : base.substr(0, slash + 1) + "LayerNormalization";
  match.fused.op_type = "LayerNormalization";
  match.fused.inputs = {x, gamma};
  if (beta != kNoId) match.fused.inputs.push_back(beta);
  match.fused.outputs = {y};
  match.fused.attrs["axis"] = *axis;
  match.fused.attrs["epsilon"] = static_cast<float>(*epsilon);
  match.fused.layer = mean.layer;
  match.fused.phase = mean.phase;
  return match;
}

// x·r·γ with r = 1/√(mean(x²) + ε) over trailing dims, as Hugging Face's LlamaRMSNorm exports:
// Pow(x, 2), ReduceMean, Add ε, Sqrt, then 1/· (Div(1, ·) or Reciprocal) times x, or x
// divided by it, and the weight's Mul.
std::optional<Match> match_rms_norm(const Matcher& m, const Node& pow) {
  const Graph& g = m.graph();
  if (pow.inputs.size() != 2 || !m.scalar(pow.inputs[1], 2.0, 1e-6)) return std::nullopt;
  const ValueId x = pow.inputs[0];
  const Node* mean = m.sole(pow.outputs[0], "ReduceMean");
  if (!mean) return std::nullopt;
  const auto axis = trailing_mean_axis(g, *mean);
  if (!axis) return std::nullopt;
  const Node* add_eps = m.sole(mean->outputs[0], "Add");
  if (!add_eps) return std::nullopt;
  const auto epsilon = m.scalar_value(Matcher::other(*add_eps, mean->outputs[0]));
  if (!epsilon || *epsilon < 0) return std::nullopt;
  const Node* sqrt = m.sole(add_eps->outputs[0], "Sqrt");
  if (!sqrt) return std::nullopt;
  Match match;
  match.covered = {m.id_of(&pow), m.id_of(mean), m.id_of(add_eps), m.id_of(sqrt)};
  const ValueId root = sqrt->outputs[0];
  ValueId normed = kNoId;
  if (const Node* div = m.sole(root, "Div"); div && div->inputs[1] == root) {
    if (div->inputs[0] == x) {  // x / √·
      normed = div->outputs[0];
      match.covered.push_back(m.id_of(div));
    } else if (m.scalar(div->inputs[0], 1.0, 1e-6)) {  // x · (1 / √·)
      const Node* mul = m.sole(div->outputs[0], "Mul");
      if (!mul || Matcher::other(*mul, div->outputs[0]) != x) return std::nullopt;
      normed = mul->outputs[0];
      match.covered.push_back(m.id_of(div));
      match.covered.push_back(m.id_of(mul));
    }
  } else if (const Node* reciprocal = m.sole(root, "Reciprocal")) {
    const Node* mul = m.sole(reciprocal->outputs[0], "Mul");
    if (!mul || Matcher::other(*mul, reciprocal->outputs[0]) != x) return std::nullopt;
    normed = mul->outputs[0];
    match.covered.push_back(m.id_of(reciprocal));
    match.covered.push_back(m.id_of(mul));
  }
  if (normed == kNoId) return std::nullopt;
  const Value& xv = g.value(x);
  if (!is_floating(xv.dtype) || !xv.shape.is_static()) return std::nullopt;
  const std::vector<int64_t> normalised(xv.shape.dims.begin() + *axis, xv.shape.dims.end());
  const Node* scale = m.sole(normed, "Mul");
  if (!scale) return std::nullopt;
  const ValueId gamma = Matcher::other(*scale, normed);
  if (!is_affine_weight(g, gamma, normalised, xv.dtype)) return std::nullopt;
  match.covered.push_back(m.id_of(scale));
  const ValueId y = scale->outputs[0];
  if (!same_type(g, x, y)) return std::nullopt;
  match.last = *std::max_element(match.covered.begin(), match.covered.end());
  const size_t slash = mean->name.rfind('/');
  match.fused.name = slash == std::string::npos
                         ? mean->name + "/RMSNormalization"
                         : mean->name.substr(0, slash + 1) + "RMSNormalization";
  match.fused.op_type = "RMSNormalization";
  match.fused.domain = std::string(kTrainingDomain);
  match.fused.inputs = {x, gamma};
  match.fused.outputs = {y};
  match.fused.attrs["axis"] = *axis;
  match.fused.attrs["epsilon"] = static_cast<float>(*epsilon);
  match.fused.layer = mean->layer;
  match.fused.phase = mean->phase;
  return match;
}

// The constant int64 vector input `i` of `n`, or nullopt.
std::optional<std::vector<int64_t>> const_ints(const Graph& g, const Node& n, size_t i) {
  if (n.input(i) == kNoId || !g.value(n.inputs[i]).data) return std::nullopt;
  return g.value(n.inputs[i]).data->to_int64_vector();
}

// A Slice of the last axis of `x` from `begin` to its end (or to `end` when it is not the
// end) with step 1; returns its input.
ValueId last_axis_slice(const Matcher& m, const Node* slice, int64_t begin, int64_t end) {
  const Graph& g = m.graph();
  if (!slice || slice->inputs.size() < 4 || slice->inputs.size() > 5) return kNoId;
  const ValueId x = slice->inputs[0];
  const int64_t rank = g.value(x).shape.rank();
  const int64_t d = rank > 0 ? g.value(x).shape.dims.back() : 0;
  const auto starts = const_ints(g, *slice, 1);
  const auto ends = const_ints(g, *slice, 2);
  const auto axes = const_ints(g, *slice, 3);
  if (!starts || !ends || !axes || starts->size() != 1 || ends->size() != 1 || axes->size() != 1)
    return kNoId;
  if (slice->inputs.size() == 5) {
    const auto steps = const_ints(g, *slice, 4);
    if (!steps || *steps != std::vector<int64_t>{1}) return kNoId;
  }
  if ((*axes)[0] != -1 && (*axes)[0] != rank - 1) return kNoId;
  const int64_t to = (*ends)[0] >= d ? d : (*ends)[0];
  return (*starts)[0] == begin && to == end ? x : kNoId;
}

// x·cos + rotate_half(x)·sin, rotate_half(x) = Concat(Neg(x[..., d/2:]), x[..., :d/2]) on the
// last axis, with constant tables of x's last two dims: Hugging Face's apply_rotary_pos_emb.
std::optional<Match> match_rotary(const Matcher& m, const Node& concat) {
  const Graph& g = m.graph();
  if (concat.inputs.size() != 2 || concat.outputs.size() != 1) return std::nullopt;
  const Node* neg = m.producer(concat.inputs[0], "Neg");
  const Node* lo = m.producer(concat.inputs[1], "Slice");
  if (!neg || !lo || m.sole(concat.inputs[0], "Concat") != &concat ||
      m.sole(concat.inputs[1], "Concat") != &concat)
    return std::nullopt;
  const Node* hi = m.producer(neg->inputs[0], "Slice");
  if (!hi || !m.sole(neg->inputs[0], "Neg")) return std::nullopt;
  const ValueId x = lo->inputs.empty() ? kNoId : lo->inputs[0];
  if (x == kNoId || !g.value(x).shape.is_static() || g.value(x).shape.rank() < 2)
    return std::nullopt;
  const std::vector<int64_t>& dims = g.value(x).shape.dims;
  const int64_t d = dims.back();
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t axis = concat.attr_int("axis", 0);
  if (d % 2 != 0 || (axis != -1 && axis != rank - 1)) return std::nullopt;
  if (last_axis_slice(m, lo, 0, d / 2) != x || last_axis_slice(m, hi, d / 2, d) != x)
    return std::nullopt;
  const Node* mul_sin = m.sole(concat.outputs[0], "Mul");
  if (!mul_sin) return std::nullopt;
  const ValueId sin = Matcher::other(*mul_sin, concat.outputs[0]);
  const Node* add = m.sole(mul_sin->outputs[0], "Add");
  if (!add) return std::nullopt;
  const Node* mul_cos = m.producer(Matcher::other(*add, mul_sin->outputs[0]), "Mul");
  if (!mul_cos || m.sole(mul_cos->outputs[0], "Add") != add) return std::nullopt;
  const ValueId cos = Matcher::other(*mul_cos, x);
  const std::vector<int64_t> table(dims.end() - 2, dims.end());
  for (ValueId t : {sin, cos}) {
    if (t == kNoId || g.value(t).kind != ValueKind::kConstant || g.value(t).shape.dims != table ||
        g.value(t).dtype != g.value(x).dtype)
      return std::nullopt;
  }
  if (!same_type(g, x, add->outputs[0])) return std::nullopt;
  Match match;
  match.covered = {m.id_of(lo),      m.id_of(hi),      m.id_of(neg), m.id_of(&concat),
                   m.id_of(mul_sin), m.id_of(mul_cos), m.id_of(add)};
  match.last = *std::max_element(match.covered.begin(), match.covered.end());
  match.fused.name = add->name + "/RotaryEmbedding";
  match.fused.op_type = "RotaryEmbedding";
  match.fused.domain = std::string(kTrainingDomain);
  match.fused.inputs = {x, cos, sin};
  match.fused.outputs = {add->outputs[0]};
  match.fused.layer = concat.layer;
  match.fused.phase = concat.phase;
  return match;
}

// silu(gate)·up with silu(g) = g·σ(g): Sigmoid, Mul by the gate, Mul by the up projection of
// the same type and shape (LlamaMLP's act_fn(gate_proj(x)) * up_proj(x)).
std::optional<Match> match_swiglu(const Matcher& m, const Node& sigmoid) {
  const Graph& g = m.graph();
  if (sigmoid.inputs.size() != 1 || sigmoid.outputs.size() != 1) return std::nullopt;
  const ValueId gate = sigmoid.inputs[0];
  const Node* silu = m.sole(sigmoid.outputs[0], "Mul");
  if (!silu || Matcher::other(*silu, sigmoid.outputs[0]) != gate) return std::nullopt;
  const Node* product = m.sole(silu->outputs[0], "Mul");
  if (!product) return std::nullopt;
  const ValueId up = Matcher::other(*product, silu->outputs[0]);
  if (up == kNoId || up == gate || !same_type(g, gate, up) ||
      !same_type(g, gate, product->outputs[0]))
    return std::nullopt;
  Match match;
  match.covered = {m.id_of(&sigmoid), m.id_of(silu), m.id_of(product)};
  match.last = *std::max_element(match.covered.begin(), match.covered.end());
  match.fused.name = product->name + "/SwiGLU";
  match.fused.op_type = "SwiGLU";
  match.fused.domain = std::string(kTrainingDomain);
  match.fused.inputs = {gate, up};
  match.fused.outputs = {product->outputs[0]};
  match.fused.layer = sigmoid.layer;
  match.fused.phase = sigmoid.phase;
  return match;
}

// A key or value tensor [b, hk, s, d] as attention reads it: itself, or its key/value heads
// repeated onto the query heads (repeat_kv: Unsqueeze at 2, Expand by the group, Reshape to
// [b, h, s, d]), the repeat folded into Attention's grouped-query reading. Appends the nodes.
ValueId kv_heads_of(const Matcher& m, ValueId x, std::vector<NodeId>& covered) {
  const Graph& g = m.graph();
  const Node* reshape = m.producer(x, "Reshape");
  if (!reshape || g.value(x).consumers.size() != 1) return x;
  const Node* expand = m.producer(reshape->inputs[0], "Expand");
  if (!expand || !m.sole(expand->outputs[0], "Reshape")) return x;
  const Node* unsqueeze = m.producer(expand->inputs[0], "Unsqueeze");
  if (!unsqueeze || !m.sole(unsqueeze->outputs[0], "Expand")) return x;
  const ValueId kv = unsqueeze->inputs[0];
  const std::vector<int64_t>& from = g.value(kv).shape.dims;
  const std::vector<int64_t>& to = g.value(x).shape.dims;
  const std::vector<int64_t>& mid = g.value(expand->outputs[0]).shape.dims;
  if (from.size() != 4 || to.size() != 4 || mid.size() != 5) return x;
  // [b, hk, s, d] -> [b, hk, 1, s, d] -> [b, hk, g, s, d] -> [b, hk·g, s, d].
  if (mid[0] != from[0] || mid[1] != from[1] || mid[3] != from[2] || mid[4] != from[3] ||
      to[0] != from[0] || to[1] != from[1] * mid[2] || to[2] != from[2] || to[3] != from[3])
    return x;
  covered.push_back(m.id_of(unsqueeze));
  covered.push_back(m.id_of(expand));
  covered.push_back(m.id_of(reshape));
  return kv;
}

// Masked scores at most this: exp of such a score underflows to zero against any visible one,
// in every float type (−10⁴ held in bfloat16 is −9984).
constexpr double kMaskedScore = -1e3;

// Whether constant `mask` ([s, s], or with leading 1s) is the causal mask: zero on and below
// the diagonal, at most kMaskedScore above it.
bool constant_causal_mask(const Graph& g, ValueId mask, int64_t s) {
  const Value& v = g.value(mask);
  if (v.kind != ValueKind::kConstant || !v.data || v.shape.num_elements() != s * s) return false;
  const std::vector<int64_t>& dims = v.shape.dims;
  if (dims.size() < 2 || dims[dims.size() - 1] != s || dims[dims.size() - 2] != s) return false;
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = 0; j < s; ++j) {
      const double x = v.data->float_at(i * s + j);
      if (j <= i ? x != 0.0 : !(x <= kMaskedScore)) return false;
    }
  }
  return true;
}

// Whether constant boolean `condition` ([s, s], or with leading 1s) marks the causal mask's
// masked entries (those above the diagonal; `above` false: the visible ones, on and below it).
bool constant_causal_condition(const Graph& g, ValueId condition, int64_t s, bool above) {
  const Value& v = g.value(condition);
  if (v.kind != ValueKind::kConstant || v.dtype != DType::kBool || !v.data ||
      v.shape.num_elements() != s * s)
    return false;
  const std::vector<int64_t>& dims = v.shape.dims;
  if (dims.size() < 2 || dims[dims.size() - 1] != s || dims[dims.size() - 2] != s) return false;
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = 0; j < s; ++j) {
      if ((v.data->int_at(i * s + j) != 0) != (above ? j > i : j <= i)) return false;
    }
  }
  return true;
}

// Whether constant `v` holds 0, 1, …, n − 1 with `dims`.
bool positions(const Graph& g, ValueId v, const std::vector<int64_t>& dims) {
  const Value& c = g.value(v);
  if (c.kind != ValueKind::kConstant || !c.data || c.shape.dims != dims) return false;
  for (int64_t i = 0; i < c.shape.num_elements(); ++i) {
    if (c.data->float_at(i) != static_cast<double>(i)) return false;
  }
  return true;
}

// The causal mask as long-sequence exports compute it from positions: Mul(Cast(Greater(
// columns [1, s], rows [s, 1])), c ≤ kMaskedScore) (PyTorch's arange comparison, so a mask of 128K
// positions is not a 64 GiB constant).
bool computed_causal_mask(const Matcher& m, ValueId mask, int64_t s) {
  const Node* mul = m.producer(mask, "Mul");
  if (!mul || mul->inputs.size() != 2) return false;
  const Node* cast = m.producer(mul->inputs[0], "Cast");
  const std::optional<double> fill = m.scalar_value(mul->inputs[1]);
  if (!cast || !fill || !(*fill <= kMaskedScore)) return false;
  const Node* greater = m.producer(cast->inputs[0], "Greater");
  return greater && positions(m.graph(), greater->inputs[0], {1, s}) &&
         positions(m.graph(), greater->inputs[1], {s, 1});
}

// softmax(Q·Kᵀ / c (+ causal mask, or the masked scores filled by a Where))·V over [b, h, s, d]
// heads, Kᵀ a Transpose (0, 1, 3, 2) of the keys, keys and values possibly repeated from fewer
// key/value heads: one Attention.
std::optional<Match> match_attention(const Matcher& m, const Node& softmax) {
  const Graph& g = m.graph();
  if (softmax.inputs.size() != 1 || softmax.outputs.size() != 1) return std::nullopt;
  const std::vector<int64_t>& score_dims = g.value(softmax.inputs[0]).shape.dims;
  if (score_dims.size() != 4) return std::nullopt;
  const int64_t axis = softmax.attr_int("axis", -1);
  if (axis != -1 && axis != 3) return std::nullopt;
  Match match;
  std::vector<NodeId>& covered = match.covered;
  covered.push_back(m.id_of(&softmax));
  ValueId scores = softmax.inputs[0];
  // The mask's side of the Add: a constant, or computed (a Mul of a Cast); its contents are
  // checked last, once the rest is attention (a constant mask is read whole).
  ValueId mask = kNoId;
  ValueId where_mask = kNoId;  // the condition of a Where that fills the masked scores
  bool masked_above = false;   // whether its true entries are the masked ones
  if (const Node* add = m.producer(scores, "Add"); add && m.sole(scores, "Softmax")) {
    if (score_dims[3] != score_dims[2] || add->inputs.size() != 2) return std::nullopt;
    auto mask_like = [&](ValueId v) {
      if (v == kNoId) return false;
      if (g.value(v).kind == ValueKind::kConstant) return true;
      const Node* mul = m.producer(v, "Mul");
      return mul && mul->inputs.size() == 2 && m.producer(mul->inputs[0], "Cast");
    };
    const size_t side = mask_like(add->inputs[1]) ? 1 : mask_like(add->inputs[0]) ? 0 : 2;
    if (side == 2) return std::nullopt;
    mask = add->inputs[side];
    covered.push_back(m.id_of(add));
    scores = add->inputs[1 - side];
  } else if (const Node* where = m.producer(scores, "Where");
             where && m.sole(scores, "Softmax") && where->inputs.size() == 3) {
    // PyTorch's masked_fill(mask above the diagonal, fill) is Where(mask, fill, scores);
    // torch.where(mask on and below it, scores, fill) is Where(mask, scores, fill).
    if (score_dims[3] != score_dims[2]) return std::nullopt;
    const std::optional<double> fill_first = m.scalar_value(where->inputs[1]);
    const std::optional<double> fill_last = m.scalar_value(where->inputs[2]);
    if (fill_first && *fill_first <= kMaskedScore) {
      masked_above = true;
      scores = where->inputs[2];
    } else if (fill_last && *fill_last <= kMaskedScore) {
      masked_above = false;
      scores = where->inputs[1];
    } else {
      return std::nullopt;
    }
    where_mask = where->inputs[0];
    covered.push_back(m.id_of(where));
  }
  double scale = 1.0;
  if (const Node* div = m.producer(scores, "Div")) {
    const std::optional<double> c =
        m.scalar_value(div->inputs.size() == 2 ? div->inputs[1] : kNoId);
    if (!c || !(*c > 0) || g.value(scores).consumers.size() != 1) return std::nullopt;
    scale = 1.0 / *c;
    covered.push_back(m.id_of(div));
    scores = div->inputs[0];
  } else if (const Node* mul = m.producer(scores, "Mul")) {
    std::optional<double> c = m.scalar_value(mul->inputs.size() == 2 ? mul->inputs[1] : kNoId);
    ValueId product = mul->inputs.size() == 2 ? mul->inputs[0] : kNoId;
    if (!c && mul->inputs.size() == 2) {
      c = m.scalar_value(mul->inputs[0]);
      product = mul->inputs[1];
    }
    if (!c || !(*c > 0) || g.value(scores).consumers.size() != 1) return std::nullopt;
    scale = *c;
    covered.push_back(m.id_of(mul));
    scores = product;
  }
  const Node* qk = m.producer(scores, "MatMul");
  if (!qk || g.value(scores).consumers.size() != 1) return std::nullopt;
  // Kᵀ [b, h, d, s]: the keys [b, h, s, d] transposed (0, 1, 3, 2), or straight from the heads'
  // reshape [b, s, h, d] by (0, 2, 3, 1) (GPT-2's form), the keys then transposed (0, 2, 1, 3)
  // for Attention by a node of the match's prelude.
  const Node* kt = m.producer(qk->inputs[1], "Transpose");
  if (!kt || g.value(qk->inputs[1]).consumers.size() != 1) return std::nullopt;
  const std::vector<int64_t> perm = kt->attr_ints("perm", {});
  const bool heads_first = perm == std::vector<int64_t>{0, 1, 3, 2};
  if (!heads_first && perm != std::vector<int64_t>{0, 2, 3, 1}) return std::nullopt;
  const Node* pv = m.sole(softmax.outputs[0], "MatMul");
  if (!pv || pv->inputs[0] != softmax.outputs[0]) return std::nullopt;
  covered.push_back(m.id_of(qk));
  covered.push_back(m.id_of(kt));
  covered.push_back(m.id_of(pv));
  const ValueId q = qk->inputs[0];
  ValueId k = kNoId;
  std::vector<int64_t> kd;
  if (heads_first) {
    k = kv_heads_of(m, kt->inputs[0], covered);
    kd = g.value(k).shape.dims;
  } else {
    const Value& keys = g.value(kt->inputs[0]);
    if (keys.shape.rank() != 4) return std::nullopt;
    kd = {keys.shape.dims[0], keys.shape.dims[2], keys.shape.dims[1], keys.shape.dims[3]};
    Node transpose;
    transpose.name = kt->name + "/heads";
    transpose.op_type = "Transpose";
    transpose.inputs = {kt->inputs[0]};
    transpose.outputs = {prelude_value(0)};
    transpose.attrs["perm"] = std::vector<int64_t>{0, 2, 1, 3};
    transpose.layer = kt->layer;
    transpose.phase = kt->phase;
    Value heads;
    heads.name = keys.name + "_heads";
    heads.dtype = keys.dtype;
    heads.shape = Shape(kd);
    match.prelude.emplace_back(std::move(transpose), std::move(heads));
    k = prelude_value(0);
  }
  const ValueId v = kv_heads_of(m, pv->inputs[1], covered);
  auto value_of = [&](ValueId id) -> const Value& {
    return id >= 0 ? g.value(id) : match.prelude[static_cast<size_t>(-2 - id)].second;
  };
  const std::vector<int64_t>& qd = g.value(q).shape.dims;
  const std::vector<int64_t>& vd = g.value(v).shape.dims;
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || kd[1] != vd[1] || kd[1] < 1 ||
      qd[1] % kd[1] != 0 || kd[2] != vd[2] || qd[3] != kd[3] ||
      value_of(k).dtype != g.value(q).dtype || g.value(v).dtype != g.value(q).dtype ||
      !is_floating(g.value(q).dtype) || !g.value(q).shape.known || !value_of(k).shape.known ||
      !g.value(v).shape.known)
    return std::nullopt;
  // (A computed mask is shared by every layer: its nodes stay, dead once all are fused.)
  const bool causal = mask != kNoId || where_mask != kNoId;
  if (mask != kNoId && !computed_causal_mask(m, mask, qd[2]) &&
      !constant_causal_mask(g, mask, qd[2]))
    return std::nullopt;
  if (where_mask != kNoId && !constant_causal_condition(g, where_mask, qd[2], masked_above))
    return std::nullopt;
  match.last = *std::max_element(covered.begin(), covered.end());
  match.fused.name = softmax.name + "/Attention";
  match.fused.op_type = "Attention";
  match.fused.domain = std::string(kTrainingDomain);
  match.fused.inputs = {q, k, v};
  match.fused.outputs = {pv->outputs[0]};
  match.fused.attrs["scale"] = static_cast<float>(scale);
  match.fused.attrs["causal"] = int64_t{causal ? 1 : 0};
  match.fused.layer = softmax.layer;
  match.fused.phase = softmax.phase;
  Value lse;
  lse.name = g.value(pv->outputs[0]).name + "_lse";
  lse.dtype = g.value(q).dtype;
  lse.shape = Shape({qd[0], qd[1], qd[2]});
  match.added_outputs.push_back(std::move(lse));
  return match;
}

// Whether the graph can move to opset 17 for LayerNormalization: opsets 13 to 16 can (the
// ops changed in 14 to 17 only widened their types or added attributes whose defaults keep
// the old meaning), except that BatchNormalization's training outputs changed in 14.
bool can_raise_to_layer_norm_opset(const Graph& g) {
  const int64_t opset = g.opset();
  if (opset >= kLayerNormOpset) return true;
  if (opset < kLowestRaisedOpset) return false;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op_type == "BatchNormalization" && n.domain.empty() && n.outputs.size() > 1 && opset < 14)
      return false;
  }
  return true;
}

Graph apply(const Graph& g, std::vector<Match> matches) {
  if (matches.empty()) return g;
  std::map<NodeId, const Match*> at_last;
  std::set<NodeId> covered;
  for (const Match& match : matches) {
    at_last[match.last] = &match;
    covered.insert(match.covered.begin(), match.covered.end());
  }
  Graph out;
  GraphCopy copy(g, out);
  copy.inputs_and_initializers();
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (auto it = at_last.find(id); it != at_last.end()) {
      std::vector<ValueId> prelude_ids;
      for (auto [node, value] : it->second->prelude) {
        value.name = out.unique_value_name(value.name);
        for (ValueId& v : node.inputs) v = copy.value(v);
        node.outputs = {out.add_value(std::move(value))};
        node.name = out.unique_node_name(node.name);
        prelude_ids.push_back(node.outputs[0]);
        out.add_node(std::move(node));
      }
      Node fused = it->second->fused;
      for (ValueId& v : fused.inputs)
        v = v >= 0 ? copy.value(v) : prelude_ids.at(static_cast<size_t>(-2 - v));
      for (ValueId& v : fused.outputs) v = copy.value(v);
      for (Value added : it->second->added_outputs) {
        added.name = out.unique_value_name(added.name);
        fused.outputs.push_back(out.add_value(std::move(added)));
      }
      out.add_node(std::move(fused));
      continue;
    }
    if (!covered.count(id)) copy.node(g.node(id));
  }
  copy.outputs();
  out.remove_dead_nodes();  // the chains' constants
  return out;
}

// kTraining: the chains ai.autopar.training ops stand for (GELU, RMSNorm, rotary embeddings,
// SwiGLU); kAll: those and LayerNormalization.
enum class Patterns { kTraining, kAll };

Graph fuse(const Graph& g, Patterns patterns, FusionReport* report, bool attention = false) {
  FusionReport counts;
  const Matcher m(g);
  std::vector<Match> matches;
  std::set<NodeId> taken;
  auto take = [&](std::optional<Match> match) {
    if (!match) return false;
    for (NodeId id : match->covered) {
      if (taken.count(id)) return false;
    }
    taken.insert(match->covered.begin(), match->covered.end());
    matches.push_back(std::move(*match));
    return true;
  };
  const bool layer_norms = patterns == Patterns::kAll && can_raise_to_layer_norm_opset(g);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (!n.domain.empty() || n.phase != Phase::kForward) continue;
    if (n.op_type == "Erf") {
      counts.gelus += take(match_erf_gelu(m, n));
    } else if (n.op_type == "Tanh") {
      counts.tanh_gelus += take(match_tanh_gelu(m, n));
    } else if (n.op_type == "Pow") {
      counts.rms_norms += take(match_rms_norm(m, n));
    } else if (n.op_type == "Concat") {
      counts.rotaries += take(match_rotary(m, n));
    } else if (n.op_type == "Sigmoid") {
      counts.swiglus += take(match_swiglu(m, n));
    } else if (n.op_type == "Softmax" && attention) {
      counts.attentions += take(match_attention(m, n));
    } else if (n.op_type == "ReduceMean" && layer_norms) {
      counts.layer_norms += take(match_layer_norm(m, n));
    }
  }
  Graph out = apply(g, std::move(matches));
  if (counts.gelus + counts.tanh_gelus + counts.rms_norms + counts.rotaries + counts.swiglus +
          counts.attentions >
      0)
    out.opsets.try_emplace(std::string(kTrainingDomain), 1);
  if (counts.layer_norms > 0 && out.opset() < kLayerNormOpset) {
    counts.raised_from = out.opset();
    out.opsets[""] = kLayerNormOpset;
  }
  if (report) *report = counts;
  return out;
}

}  // namespace

Graph fuse_exported_patterns(const Graph& graph, FusionReport* report) {
  return fuse(graph, Patterns::kAll, report);
}

Graph fuse_training_patterns(const Graph& graph, FusionReport* report,
                             const TrainingFusions& fusions) {
  return fuse(graph, Patterns::kTraining, report, fusions.attention);
}

namespace {

// The constant data of `id`, when it is an initializer with data of the given dtype.
const Tensor* constant_data(const Graph& g, ValueId id, DType dtype) {
  if (id == kNoId) return nullptr;
  const Value& v = g.value(id);
  return v.is_initializer() && v.data && v.dtype == dtype ? v.data.get() : nullptr;
}

bool output_unused(const Graph& g, const Node& node, size_t i) {
  const ValueId id = node.output(i);
  return id == kNoId || (g.value(id).consumers.empty() && !g.is_output(id));
}

}  // namespace

Graph computed_causal_masks(const Graph& g) {
  std::vector<ValueId> masks;
  for (ValueId v = 0; v < g.num_values(); ++v) {
    const Value& value = g.value(v);
    if (value.kind != ValueKind::kConstant || value.shape.rank() != 2 ||
        !is_floating(value.dtype) || value.consumers.empty() || g.is_output(v))
      continue;
    const int64_t s = value.shape.dims[0];
    if (s > 1 && value.shape.dims[1] == s && constant_causal_mask(g, v, s)) masks.push_back(v);
  }
  if (masks.empty()) return g;
  Graph out;
  GraphCopy copy(g, out);
  copy.inputs_and_initializers();
  for (ValueId mask : masks) {
    const Value& value = g.value(mask);
    const int64_t s = value.shape.dims[0];
    auto constant = [&](const std::string& base, Tensor data) {
      Value c;
      c.name = out.unique_value_name(base);
      c.dtype = data.dtype();
      c.shape = Shape(data.dims());
      c.kind = ValueKind::kConstant;
      c.data = std::make_shared<const Tensor>(std::move(data));
      return out.add_value(std::move(c));
    };
    auto positions = [&](const char* suffix, std::vector<int64_t> dims) {
      Tensor t(DType::kInt64, dims);
      for (int64_t i = 0; i < s; ++i) t.set_from_int(i, i);
      return constant(value.name + suffix, std::move(t));
    };
    auto node = [&](const std::string& op, std::vector<ValueId> inputs, DType dtype,
                    Attributes attrs) {
      Value result;
      result.name = out.unique_value_name(value.name + "/" + op);
      result.dtype = dtype;
      result.shape = Shape({s, s});
      const ValueId id = out.add_value(std::move(result));
      Node n;
      n.name = out.unique_node_name(value.name + "/" + op);
      n.op_type = op;
      n.inputs = std::move(inputs);
      n.outputs = {id};
      n.attrs = std::move(attrs);
      out.add_node(std::move(n));
      return id;
    };
    Tensor fill(value.dtype, {});
    fill.set_from_double(0, value.data->float_at(1));  // the first masked score
    const ValueId above = node(
        "Greater", {positions("_columns", {1, s}), positions("_rows", {s, 1})}, DType::kBool, {});
    const ValueId cast =
        node("Cast", {above}, value.dtype, {{"to", int64_t{dtype_to_onnx(value.dtype)}}});
    copy.map(mask,
             node("Mul", {cast, constant(value.name + "_fill", std::move(fill))}, value.dtype, {}));
  }
  for (const Node& n : g.nodes()) copy.node(n);
  copy.outputs();
  out.remove_dead_nodes();  // the masks' constants
  return out;
}

int fold_inference_batch_norms(Graph& g) {
  std::vector<std::pair<std::string, std::string>> renames;  // conv output → the BN's name
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& bn = g.node(id);
    if (!bn.domain.empty() || bn.op_type != "BatchNormalization" || bn.inputs.size() != 5 ||
        bn.attr_int("training_mode", 0) != 0 || bn.output(0) == kNoId)
      continue;
    bool inference = true;
    for (size_t i = 1; i < bn.outputs.size(); ++i) inference = inference && output_unused(g, bn, i);
    const ValueId x = bn.inputs[0];
    if (!inference || x == kNoId) continue;
    const Value& xv = g.value(x);
    if (xv.producer == kNoId || xv.consumers.size() != 1 || g.is_output(x)) continue;
    const NodeId conv_id = xv.producer;
    const Node& conv = g.node(conv_id);
    if (!conv.domain.empty() || conv.op_type != "Conv" || conv.output(0) != x) continue;
    const DType dtype = xv.dtype;
    if (dtype != DType::kFloat32 && dtype != DType::kFloat64) continue;
    const Tensor* w = constant_data(g, conv.input(1), dtype);
    const Tensor* conv_bias =
        conv.input(2) == kNoId ? nullptr : constant_data(g, conv.input(2), dtype);
    std::array<const Tensor*, 4> stats{};  // scale, B, mean, var
    bool known = w && (conv.input(2) == kNoId || conv_bias);
    for (size_t i = 0; i < 4; ++i) {
      stats[i] = constant_data(g, bn.inputs[i + 1], dtype);
      known = known && stats[i];
    }
    if (!known || w->rank() < 1) continue;
    const int64_t channels = w->dims()[0];
    if (channels <= 0 || w->num_elements() % channels != 0) continue;
    bool per_channel = true;
    for (const Tensor* t : stats) per_channel = per_channel && t->num_elements() == channels;
    if (!per_channel || (conv_bias && conv_bias->num_elements() != channels)) continue;

    const double epsilon = bn.attr_float("epsilon", 1e-5f);
    const int64_t per_output = w->num_elements() / channels;
    Tensor folded_w(dtype, w->dims()), folded_b(dtype, {channels});
    for (int64_t o = 0; o < channels; ++o) {
      const double s = stats[0]->float_at(o) / std::sqrt(stats[3]->float_at(o) + epsilon);
      for (int64_t i = 0; i < per_output; ++i) {
        const int64_t at = o * per_output + i;
        folded_w.set_from_double(at, w->float_at(at) * s);
      }
      const double b = conv_bias ? conv_bias->float_at(o) : 0.0;
      folded_b.set_from_double(o, (b - stats[2]->float_at(o)) * s + stats[1]->float_at(o));
    }
    auto add_constant = [&](const std::string& base, Tensor data) {
      Value v;
      v.name = g.unique_value_name(base);
      v.dtype = dtype;
      v.shape = Shape(data.dims());
      v.kind = ValueKind::kConstant;
      v.data = std::make_shared<const Tensor>(std::move(data));
      return g.add_value(std::move(v));
    };
    const ValueId new_w = add_constant(conv.name + ".folded_weight", std::move(folded_w));
    const ValueId new_b = add_constant(conv.name + ".folded_bias", std::move(folded_b));
    Node& edited = g.mutable_node(conv_id);
    edited.inputs.resize(3, kNoId);
    edited.inputs[1] = new_w;
    edited.inputs[2] = new_b;
    const ValueId y = bn.output(0);
    renames.emplace_back(g.value(x).name, g.value(y).name);
    g.rebuild_uses();
    g.replace_uses(y, x);
  }
  if (renames.empty()) return 0;
  g.remove_dead_nodes();
  for (const auto& [from, to] : renames) g.rename_value(*g.find_value(from), to);
  return static_cast<int>(renames.size());
}

}  // namespace autopar
