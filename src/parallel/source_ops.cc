// Each node's source op (Node::source): which op of the prepared graph it carries out, so that
// the cost model can run a plan's nodes as the kernels a framework runs (one per op and
// direction), whatever passes copied, split or recomputed them.
#include "autopar/parallel/lowering.h"

namespace autopar {
namespace {

bool is_cast(const Node& n) { return n.domain.empty() && n.op_type == "Cast"; }

// The op a forward Cast converts for, or -1. A widening Cast belongs to the one op (not a cast)
// that reads all of its result, forward and backward (the op computes in the wider type); a
// narrowing one to the op whose result only it and that op's backward read (the op writes the
// narrower type).
int32_t op_of_cast(const Graph& g, NodeId c) {
  const Node& cast = g.node(c);
  const ValueId in = cast.input(0), out = cast.output(0);
  if (in == kNoId || out == kNoId || g.is_output(out)) return -1;
  const int64_t from = dtype_size(g.value(in).dtype), to = dtype_size(g.value(out).dtype);
  if (to > from) {
    int32_t feeds = -1;
    for (NodeId r : g.value(out).consumers) {
      const int32_t s = g.node(r).source;
      if (s < 0 || is_cast(g.node(s)) || (feeds >= 0 && s != feeds)) return -1;
      feeds = s;
    }
    return feeds;
  }
  if (to == from || g.value(in).producer == kNoId || g.is_output(in)) return -1;
  const Node& producer = g.node(g.value(in).producer);
  const int32_t reads = producer.source;
  if (reads < 0 || producer.phase != Phase::kForward || is_cast(g.node(reads))) return -1;
  for (NodeId r : g.value(in).consumers) {
    if (r != c && g.node(r).source != reads) return -1;
  }
  return reads;
}

}  // namespace

void tag_source_ops(Graph& g, const std::vector<NodeId>& forward_of) {
  const NodeId n = g.num_nodes();
  for (NodeId id = 0; id < n; ++id) {
    Node& node = g.mutable_node(id);
    const NodeId f = static_cast<size_t>(id) < forward_of.size() ? forward_of[id] : kNoId;
    node.source = f != kNoId ? f : node.phase == Phase::kForward ? id : -1;
  }
  std::vector<int32_t> joins(static_cast<size_t>(n), -1);
  for (NodeId c = 0; c < n; ++c) {
    if (is_cast(g.node(c)) && g.node(c).phase == Phase::kForward) joins[c] = op_of_cast(g, c);
  }
  for (NodeId id = 0; id < n; ++id) {
    Node& node = g.mutable_node(id);
    if (node.source >= 0 && joins[node.source] >= 0) node.source = joins[node.source];
  }
}

}  // namespace autopar
