// Recomputation: the backward program recomputes forward values instead of keeping them
// from the forward program. `full` keeps each layer's input and re-runs the rest of the layer
// (Megatron-LM's, one layer per checkpoint); `selective` is Megatron-LM's too: it recomputes
// the attention core (the scores, their scaling, mask, softmax and dropout, and the product
// with V) and keeps the rest; `nonparametric` keeps only the outputs of parameterised ops
// (projections, convolutions, normalisations) and of communication, and recomputes the
// attention core and the elementwise ops between them. partially_recomputed says which nodes
// each re-runs, for the lowering (build_roles) and the estimate alike.
#include <algorithm>

#include "autopar/cost/compute.h"
#include "paradigms.h"

namespace autopar {
namespace {

const std::initializer_list<std::pair<const char*, Recompute>> kRecompute = {
    {"none", Recompute::kNone},
    {"selective", Recompute::kSelective},
    {"nonparametric", Recompute::kNonParametric},
    {"full", Recompute::kFull}};

}  // namespace

const char* recompute_name(Recompute r) { return name_of(r, kRecompute); }

namespace {

bool is_comm(const Node& n) { return n.domain == kAutoparDomain; }

// Whether nonparametric recompute keeps `node`'s output: parameterised ops, norms, collectives.
bool kept_by_nonparametric(const Graph& g, const Node& node,
                           const std::function<bool(ValueId)>& is_state) {
  if (is_comm(node)) return true;
  static const char* const kKept[] = {"Gemm",
                                      "Conv",
                                      "ConvTranspose",
                                      "LayerNormalization",
                                      "BatchNormalization",
                                      "RMSNormalization"};
  for (const char* op : kKept) {
    if (node.op_type == op) return true;
  }
  if (node.op_type == "MatMul") {
    for (ValueId in : node.inputs) {
      ValueId x = in;
      while (x != kNoId && g.value(x).producer != kNoId && is_comm(g.node(g.value(x).producer)))
        x = g.node(g.value(x).producer).inputs[0];
      if (x != kNoId && is_state(x)) return true;
    }
  }
  return false;
}

// The attention cores: walking forward nodes in order, a product of two activations that no
// core reaches is a scores product and starts one; a core reaching such a product ends there
// (the product with V). The nodes between are those a start reaches and an end is reached from.
std::vector<bool> attention_cores(const Graph& g) {
  const auto n = static_cast<size_t>(g.num_nodes());
  auto product = [&](const Node& node) {
    return node.phase == Phase::kForward && node.domain.empty() && node.op_type == "MatMul" &&
           op_class_of(g, node) == OpClass::kAttention;
  };
  std::vector<bool> from_start(n, false), end(n, false), core(n, false);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    if (node.phase != Phase::kForward) continue;
    bool reached = false;
    for (ValueId in : node.inputs) {
      if (in == kNoId || g.value(in).producer == kNoId) continue;
      reached = reached || from_start[g.value(in).producer];
    }
    if (product(node)) {
      end[id] = reached;
      from_start[id] = !reached;  // an end stops the walk; a start begins one
    } else {
      from_start[id] = reached;
    }
  }
  // Backward from the ends, through the nodes a start reaches.
  std::vector<bool> to_end = end;
  for (NodeId id = g.num_nodes() - 1; id >= 0; --id) {
    if (!to_end[id]) continue;
    core[id] = true;
    for (ValueId in : g.node(id).inputs) {
      if (in == kNoId || g.value(in).producer == kNoId) continue;
      const NodeId p = g.value(in).producer;
      if (from_start[p]) to_end[p] = true;
    }
  }
  return core;
}

// Marks the forward Casts that widen a cross-entropy loss's input, and the views between them
// and the loss.
void mark_loss_widening(const Graph& g, std::vector<bool>& re) {
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& loss = g.node(id);
    if (loss.phase != Phase::kForward || !loss.domain.empty() ||
        loss.op_type != "SoftmaxCrossEntropyLoss" || loss.input(0) == kNoId)
      continue;
    std::vector<NodeId> chain;
    NodeId p = g.value(loss.input(0)).producer;
    while (p != kNoId && is_view(g, g.node(p)) && g.node(p).input(0) != kNoId) {
      chain.push_back(p);
      p = g.value(g.node(p).input(0)).producer;
    }
    if (p == kNoId || g.node(p).op_type != "Cast" || !g.node(p).domain.empty() ||
        g.node(p).input(0) == kNoId)
      continue;
    const DType from = g.value(g.node(p).input(0)).dtype;
    const DType to = g.value(g.node(p).outputs[0]).dtype;
    if (!is_floating(from) || dtype_size(to) <= dtype_size(from)) continue;
    re[p] = true;
    for (NodeId v : chain) re[v] = true;
  }
}

// Whether a forward node's output is read by the forward of another layer, or of the nodes
// outside the layers: a layer's output (the residual stream), which the next one reads.
bool read_by_another_layer(const Graph& g, const Node& node) {
  for (ValueId out : node.outputs) {
    if (out == kNoId) continue;
    for (NodeId r : g.value(out).consumers) {
      const Node& reader = g.node(r);
      if (reader.phase == Phase::kForward && reader.layer != node.layer) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<bool> partially_recomputed(Recompute policy, bool regather, bool recast_loss,
                                       const Graph& g,
                                       const std::function<bool(ValueId)>& is_state) {
  std::vector<bool> re(static_cast<size_t>(g.num_nodes()), false);
  if (policy == Recompute::kSelective) re = attention_cores(g);
  // A model without layers (none detected) is one checkpoint: full re-runs its whole forward.
  const bool layered =
      std::any_of(g.nodes().begin(), g.nodes().end(), [](const Node& n) { return n.layer >= 0; });
  if (recast_loss) mark_loss_widening(g, re);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    if (node.phase != Phase::kForward) continue;
    if (policy == Recompute::kFull &&
        (!layered || (node.layer >= 0 && !read_by_another_layer(g, node))))
      re[id] = true;
    if (policy == Recompute::kNonParametric && !kept_by_nonparametric(g, node, is_state))
      re[id] = true;
    if (regather && policy != Recompute::kFull && is_comm(node) && node.op_type == "AllGather") {
      const Attribute* axes = node.attr("axes");
      if (axes && axes->kind() == Attribute::Kind::kStrings &&
          axes->strings() == std::vector<std::string>{"tp"})
        re[id] = true;
    }
  }
  return re;
}

std::vector<ValueId> whole_layer_roots(Recompute policy, const std::vector<bool>& rerun,
                                       const Graph& g) {
  std::vector<ValueId> roots;
  if (policy != Recompute::kFull) return roots;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    if (!rerun[n] || g.node(n).layer < 0) continue;
    for (ValueId out : g.node(n).outputs) {
      if (out != kNoId) roots.push_back(out);
    }
  }
  return roots;
}

}  // namespace autopar

namespace autopar::paradigm_files {

Status configure_recompute(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  policy.recompute = scheme.recompute;
  return Status::ok();
}

Status parse_recompute(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
  if (const YAML::Node recompute = root["recompute"]) {
    ASSIGN_OR_RETURN(s.recompute, r.choice(recompute, "recompute", kRecompute));
  }
  return Status::ok();
}

// The policies a space lists; an inference search has no backward to recompute for.
StatusOr<Expansion> search_recompute(const YAML::Node& value, const SchemeReader& r) {
  ASSIGN_OR_RETURN(std::vector<Recompute> policies, listed(value, r, "recompute", kRecompute));
  return Expansion([policies](const Scheme& base, const SearchContext& c) {
    return one_per(base, c.training ? policies : std::vector<Recompute>{Recompute::kNone},
                   [](Scheme& s, Recompute p) { s.recompute = p; });
  });
}

}  // namespace autopar::paradigm_files
