// Fused projections (GPT-2's c_attn, ViT's qkv): one MatMul (+ bias), or one Gemm on the
// flattened tokens followed by a Reshape back to [batch, sequence, features] (Hugging Face's
// Conv1D, exported as addmm), whose output is Split into equal parts becomes one projection
// per part, on parameters that are slices of the fused ones (by output features). Each part then splits over tp on its own, so attention shards by heads the
// way Megatron-LM shards its interleaved QKV weight, and the update (elementwise per
// parameter) is unchanged.
#include <map>
#include <set>

#include "autopar/ir/graph_copy.h"
#include "autopar/ir/shape_inference.h"
#include "autopar/parallel/lowering.h"
#include "autopar/runtime/communicator.h"

namespace autopar {
namespace {

struct Fused {
  NodeId matmul = kNoId;   // the MatMul or Gemm
  NodeId add = kNoId;      // kNoId without a bias, or when the Gemm adds it
  NodeId reshape = kNoId;  // the Reshape after a Gemm, or kNoId
  ValueId x = kNoId, weight = kNoId, bias = kNoId;
  int64_t weight_dim = 1;  // the weight's output-feature dim (0 for a Gemm with transB)
  int64_t parts = 0;
};

// A Gemm that is x·W (+ C): alpha and beta 1, x not transposed, C (if any) of [features].
bool is_plain_gemm(const Graph& g, const Node& n, int64_t features) {
  if (n.op_type != "Gemm" || !n.domain.empty() || n.attr_float("alpha", 1.0f) != 1.0f ||
      n.attr_float("beta", 1.0f) != 1.0f || n.attr_int("transA", 0) != 0)
    return false;
  if (n.input(2) == kNoId) return true;
  const Value& c = g.value(n.inputs[2]);
  return c.kind == ValueKind::kParameter && c.shape.dims == std::vector<int64_t>{features};
}

bool sole_use(const Graph& g, ValueId v, NodeId by) {
  return g.value(v).consumers.size() == 1 && g.value(v).consumers[0] == by && !g.is_output(v);
}

// The Split node's fused projection, if it has one the rewrite applies to.
std::optional<Fused> match(const Graph& g, const Node& split) {
  if (split.op_type != "Split" || !split.domain.empty() || split.outputs.size() < 2)
    return std::nullopt;
  const ValueId in = split.inputs[0];
  const Value& v = g.value(in);
  const int64_t rank = v.shape.rank();
  int64_t axis = split.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (rank < 2 || axis != rank - 1 || v.producer == kNoId) return std::nullopt;
  const auto parts = static_cast<int64_t>(split.outputs.size());
  const int64_t total = v.shape.dims[axis];
  if (total % parts != 0) return std::nullopt;
  if (split.input(1) != kNoId) {
    const Value& sizes = g.value(split.inputs[1]);
    if (!sizes.data) return std::nullopt;
    for (int64_t i = 0; i < sizes.data->num_elements(); ++i) {
      if (sizes.data->int_at(i) != total / parts) return std::nullopt;
    }
  }
  Fused f;
  f.parts = parts;
  NodeId producer = v.producer;
  if (!sole_use(g, in, g.find_node(split.name).value())) return std::nullopt;
  const Node* p = &g.node(producer);
  if (p->op_type == "Reshape" && p->domain.empty()) {
    // Reshape([tokens, features] → [..., features]) after a Gemm.
    const ValueId flat = p->inputs[0];
    const Value& fv = g.value(flat);
    if (fv.producer == kNoId || fv.shape.rank() != 2 || fv.shape.dims[1] != total ||
        !sole_use(g, flat, producer))
      return std::nullopt;
    const Node& gemm = g.node(fv.producer);
    if (!is_plain_gemm(g, gemm, total)) return std::nullopt;
    f.reshape = producer;
    producer = fv.producer;
    p = &gemm;
  }
  if (p->op_type == "Gemm") {
    if (!is_plain_gemm(g, *p, total)) return std::nullopt;
    f.weight_dim = p->attr_int("transB", 0) != 0 ? 0 : 1;
    const Value& w = g.value(p->inputs[1]);
    if (w.kind != ValueKind::kParameter || w.shape.rank() != 2 ||
        w.shape.dims[f.weight_dim] != total || !sole_use(g, p->inputs[1], producer))
      return std::nullopt;
    if (p->input(2) != kNoId) {
      if (!sole_use(g, p->inputs[2], producer)) return std::nullopt;
      f.bias = p->inputs[2];
    }
    f.matmul = producer;
    f.x = p->inputs[0];
    f.weight = p->inputs[1];
    return f;
  }
  if (p->op_type == "Add" && p->domain.empty()) {
    f.add = producer;
    for (int k = 0; k < 2; ++k) {
      const ValueId b = p->inputs[k], m = p->inputs[1 - k];
      const Value& bv = g.value(b);
      if (bv.kind != ValueKind::kParameter || bv.shape.dims != std::vector<int64_t>{total})
        continue;
      if (g.value(m).producer == kNoId || !sole_use(g, b, producer) || !sole_use(g, m, producer))
        continue;
      f.bias = b;
      producer = g.value(m).producer;
      break;
    }
    if (f.bias == kNoId) return std::nullopt;
    p = &g.node(producer);
  }
  if (p->op_type != "MatMul" || !p->domain.empty()) return std::nullopt;
  const Value& w = g.value(p->inputs[1]);
  if (w.kind != ValueKind::kParameter || w.shape.rank() != 2 || w.shape.dims[1] != total ||
      !sole_use(g, p->inputs[1], producer)) {
    return std::nullopt;
  }
  f.matmul = producer;
  f.x = p->inputs[0];
  f.weight = p->inputs[1];
  return f;
}

// Slice `part` of `parts` of a parameter along `dim`.
Value slice_of(const Value& whole, int64_t dim, int64_t part, int64_t parts, std::string name) {
  Value v = detached(whole);
  v.name = std::move(name);
  v.shape = Shape(whole.shape.dims);
  v.shape.dims[dim] /= parts;
  if (whole.data) {
    v.data = std::make_shared<const Tensor>(runtime::split_tensor(*whole.data, dim, parts)[part]);
  }
  return v;
}

}  // namespace

StatusOr<Graph> split_fused_projections(const Graph& model, std::vector<ParameterPart>& parts) {
  std::map<NodeId, Fused> at_split;
  std::set<NodeId> skipped;
  for (NodeId n = 0; n < model.num_nodes(); ++n) {
    if (auto f = match(model, model.node(n))) {
      at_split[n] = *f;
      skipped.insert(f->matmul);
      if (f->add != kNoId) skipped.insert(f->add);
      if (f->reshape != kNoId) skipped.insert(f->reshape);
    }
  }
  if (at_split.empty()) return model;
  Graph g;
  GraphCopy copy(model, g);
  auto get = [&](ValueId v) { return copy.value(v); };
  for (ValueId in : model.inputs()) g.add_input(get(in));
  // Initializers keep their order, but for the fused parameters, which are replaced.
  std::set<ValueId> replaced;
  for (const auto& [n, f] : at_split) {
    replaced.insert(f.weight);
    if (f.bias != kNoId) replaced.insert(f.bias);
  }
  for (ValueId v = 0; v < model.num_values(); ++v) {
    if (model.value(v).is_initializer() && !replaced.count(v)) get(v);
  }
  for (NodeId n = 0; n < model.num_nodes(); ++n) {
    if (skipped.count(n)) continue;
    const Node& node = model.node(n);
    auto fused = at_split.find(n);
    if (fused == at_split.end()) {
      copy.node(node);
      continue;
    }
    const Fused& f = fused->second;
    const Node& mm = model.node(f.matmul);
    const Value& w = model.value(f.weight);
    const int64_t width = w.shape.dims[f.weight_dim] / f.parts;
    for (int64_t i = 0; i < f.parts; ++i) {
      const std::string suffix = fmt::format(".part{}", i);
      const ValueId wi = g.add_value(slice_of(w, f.weight_dim, i, f.parts, w.name + suffix));
      parts.push_back({w.name + suffix, w.name, f.weight_dim, i * width, width});
      const ValueId out = get(node.outputs[i]);
      ValueId bi = kNoId;
      if (f.bias != kNoId) {
        const Value& b = model.value(f.bias);
        bi = g.add_value(slice_of(b, 0, i, f.parts, b.name + suffix));
        parts.push_back({b.name + suffix, b.name, 0, i * width, width});
      }
      // A value of the projection's output with its feature dim cut to the part's width.
      auto part_value = [&](ValueId whole) {
        Value y = detached(model.value(whole));
        y.name = y.name + suffix;
        y.shape.dims.back() = width;
        return g.add_value(std::move(y));
      };
      Node m;
      m.name = mm.name + suffix;
      m.op_type = mm.op_type;
      m.attrs = mm.attrs;
      m.phase = mm.phase;
      m.layer = mm.layer;
      m.inputs = {get(f.x), wi};
      if (mm.op_type == "Gemm" && bi != kNoId) m.inputs.push_back(bi);
      const bool last_is_product = f.add == kNoId && f.reshape == kNoId;
      m.outputs = {last_is_product ? out : part_value(mm.outputs[0])};
      const ValueId product = m.outputs[0];
      g.add_node(std::move(m));
      if (f.reshape != kNoId) {
        const Node& reshape = model.node(f.reshape);
        Value shape;
        shape.name = g.unique_value_name(reshape.name + suffix + "/shape");
        shape.dtype = DType::kInt64;
        shape.kind = ValueKind::kConstant;
        shape.shape = Shape({g.value(out).shape.rank()});
        shape.data = std::make_shared<const Tensor>(Tensor::vector_int64(g.value(out).shape.dims));
        Node r;
        r.name = reshape.name + suffix;
        r.op_type = "Reshape";
        r.phase = reshape.phase;
        r.layer = reshape.layer;
        r.inputs = {product, g.add_value(std::move(shape))};
        r.outputs = {out};
        g.add_node(std::move(r));
        continue;
      }
      if (f.add == kNoId) continue;
      const Node& add = model.node(f.add);
      Node a;
      a.name = add.name + suffix;
      a.op_type = "Add";
      a.phase = add.phase;
      a.layer = add.layer;
      a.inputs = {product, bi};
      a.outputs = {out};
      g.add_node(std::move(a));
    }
  }
  copy.outputs();
  RETURN_IF_ERROR(infer_shapes(g));
  return g;
}

}  // namespace autopar
