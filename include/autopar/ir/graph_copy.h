// GraphCopy: rebuilding a graph node by node, for rewrites that replace some nodes and copy
// the rest. A source value is copied into the destination the first time it is needed,
// keeping its name, type, kind and data.
#pragma once

#include <map>

#include "autopar/ir/graph.h"

namespace autopar {

// A value's name, type, kind and data, without its place in a graph.
Value detached(const Value& value);

class GraphCopy {
 public:
  // `dst` takes the source's name and opsets.
  GraphCopy(const Graph& src, Graph& dst);

  // The destination value standing for source value `v` (copied on first use).
  ValueId value(ValueId v);
  // Source value `v` is `to` in the destination (a rewrite computed it differently).
  void map(ValueId v, ValueId to) { map_[v] = to; }
  bool mapped(ValueId v) const { return map_.count(v) > 0; }
  // A copy of `node` reading and writing the destination's values.
  NodeId node(const Node& node);
  // The source's graph inputs, in order, then every initializer (so they keep their order).
  void inputs_and_initializers();
  // The source's outputs, mapped.
  void outputs();

 private:
  const Graph& src_;
  Graph& dst_;
  std::map<ValueId, ValueId> map_;
};

}  // namespace autopar
