// BatchNormalization in training mode, written as the reductions it is: the batch statistics
// are means over N and the spatial dims, so when data or attribute parallelism splits those
// dims the means become partial sums and the SPMD pass reduces them: synchronised BatchNorm
// without a special case. The backward, built from the BatchNormalization node's own rule,
// reads the same inputs and output gradient and is left as it is.
#include <map>

#include "autopar/autodiff/emitter.h"
#include "autopar/ir/graph_copy.h"
#include "autopar/parallel/lowering.h"

namespace autopar {
namespace {

bool is_training_batch_norm(const Node& n) {
  return n.op_type == "BatchNormalization" && n.domain.empty() &&
         n.attr_int("training_mode", 0) != 0;
}

}  // namespace

StatusOr<Graph> batch_norm_statistics_as_reductions(const Graph& training) {
  bool any = false;
  for (const Node& n : training.nodes()) any = any || is_training_batch_norm(n);
  if (!any) return training;
  Graph g;
  GraphCopy copy(training, g);
  copy.inputs_and_initializers();
  auto get = [&](ValueId v) { return copy.value(v); };
  for (const Node& node : training.nodes()) {
    if (!is_training_batch_norm(node)) {
      copy.node(node);
      continue;
    }
    const Value& x = training.value(node.inputs[0]);
    const int64_t rank = x.shape.rank();
    const int64_t channels = x.shape.dims.at(1);
    const double epsilon = node.attr_float("epsilon", 1e-5f);
    const double momentum = node.attr_float("momentum", 0.9f);
    Emitter e(g, node.name, node.phase, node.layer);
    const NodeId first = g.num_nodes();
    std::vector<int64_t> axes = {0}, per_channel(rank, 1);
    for (int64_t d = 2; d < rank; ++d) axes.push_back(d);
    per_channel[1] = channels;
    const ValueId xi = get(node.inputs[0]);
    // ReduceMean takes its axes as an attribute up to opset 17, as an input from 18.
    const bool axes_input = g.opset() >= 18;
    auto reduce_mean = [&](ValueId v) {
      if (axes_input) return e.op("ReduceMean", {v, e.ints(axes)}, {{"keepdims", int64_t{1}}});
      return e.op("ReduceMean", {v}, {{"axes", axes}, {"keepdims", int64_t{1}}});
    };
    const ValueId mean = reduce_mean(xi);
    const ValueId centered = e.op("Sub", {xi, mean});
    const ValueId variance = reduce_mean(e.op("Mul", {centered, centered}));
    const ValueId stddev = e.op("Sqrt", {e.op("Add", {variance, e.scalar(epsilon, x.dtype)})});
    const ValueId normed = e.op("Div", {centered, stddev});
    const ValueId scale = e.reshape(get(node.inputs[1]), per_channel);
    const ValueId bias = e.reshape(get(node.inputs[2]), per_channel);
    const ValueId y = e.op("Add", {e.op("Mul", {normed, scale}), bias});
    std::vector<ValueId> results = {y};
    // Running statistics: running · momentum + batch · (1 − momentum), population variance.
    for (int k = 0; k < 2; ++k) {
      if (node.output(k + 1) == kNoId) {
        results.push_back(kNoId);
        continue;
      }
      const ValueId batch = e.reshape(k == 0 ? mean : variance, {channels});
      const ValueId running = get(node.inputs[3 + k]);
      results.push_back(e.op("Add", {e.op("Mul", {running, e.scalar(momentum, x.dtype)}),
                                     e.op("Mul", {batch, e.scalar(1.0 - momentum, x.dtype)})}));
    }
    RETURN_IF_ERROR(e.status());
    // The nodes written out carry the BatchNormalization's source op: one op, one kernel.
    for (NodeId id = first; id < g.num_nodes(); ++id) g.mutable_node(id).source = node.source;
    for (size_t k = 0; k < results.size() && k < node.outputs.size(); ++k) {
      if (node.outputs[k] == kNoId || results[k] == kNoId) continue;
      g.rename_value(results[k], training.value(node.outputs[k]).name);
      copy.map(node.outputs[k], results[k]);
    }
  }
  copy.outputs();
  return g;
}

}  // namespace autopar
