// Fused projections (GPT-2's c_attn, ViT's qkv): one MatMul (+ bias) whose output is Split
// into equal parts becomes one projection per part, on parameters that are column slices of
// the fused ones. Each part then splits over tp on its own, so attention shards by heads the
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
  NodeId matmul = kNoId;
  NodeId add = kNoId;  // kNoId without a bias
  ValueId x = kNoId, weight = kNoId, bias = kNoId;
  int64_t parts = 0;
};

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

// Column slice `part` of `parts` of a parameter (its last dim).
Value slice_of(const Value& whole, int64_t part, int64_t parts, std::string name) {
  Value v = detached(whole);
  v.name = std::move(name);
  const int64_t last = whole.shape.rank() - 1;
  v.shape = Shape(whole.shape.dims);
  v.shape.dims[last] /= parts;
  if (whole.data) {
    v.data = std::make_shared<const Tensor>(runtime::split_tensor(*whole.data, last, parts)[part]);
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
    for (int64_t i = 0; i < f.parts; ++i) {
      const std::string suffix = fmt::format(".part{}", i);
      const ValueId wi = g.add_value(slice_of(w, i, f.parts, w.name + suffix));
      parts.push_back(
          {w.name + suffix, w.name, 1, i * (w.shape.dims[1] / f.parts), w.shape.dims[1] / f.parts});
      const ValueId out = get(node.outputs[i]);
      Node m;
      m.name = mm.name + suffix;
      m.op_type = "MatMul";
      m.phase = mm.phase;
      m.layer = mm.layer;
      m.inputs = {get(f.x), wi};
      if (f.bias == kNoId) {
        m.outputs = {out};
        g.add_node(std::move(m));
        continue;
      }
      Value y = detached(model.value(mm.outputs[0]));
      y.name = y.name + suffix;
      y.shape = g.value(out).shape;
      m.outputs = {g.add_value(std::move(y))};
      const ValueId product = m.outputs[0];
      g.add_node(std::move(m));
      const Value& b = model.value(f.bias);
      const ValueId bi = g.add_value(slice_of(b, i, f.parts, b.name + suffix));
      parts.push_back(
          {b.name + suffix, b.name, 0, i * (b.shape.dims[0] / f.parts), b.shape.dims[0] / f.parts});
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
