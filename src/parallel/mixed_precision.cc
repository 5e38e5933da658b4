// Mixed precision: the forward (and so the backward) computes in bf16 or fp16 while the
// parameters stay fp32 master weights; BatchNormalization runs in fp32 on fp32 statistics. Each
// parameter and float input is cast down where the model reads it, constants are stored in the low
// type, and float outputs are cast back up, so the loss, the gradients that reach the parameters
// (through the casts' gradients) and the optimizer are fp32.
#include <map>
#include <set>

#include "autopar/ir/graph_copy.h"
#include "autopar/ir/precision.h"
#include "autopar/ir/shape_inference.h"
#include "autopar/parallel/lowering.h"

namespace autopar {

StatusOr<Graph> to_mixed_precision(const Graph& model, DType low) {
  Graph narrow = model;
  change_float_type(narrow, DType::kFloat32, low);
  // Normalisations keep their statistics in fp32, as mixed-precision training does.
  for (NodeId id = 0; id < narrow.num_nodes(); ++id) {
    Node& n = narrow.mutable_node(id);
    if (n.attr("stash_type")) n.attrs["stash_type"] = int64_t{dtype_to_onnx(DType::kFloat32)};
  }
  Graph g;
  g.name = model.name;
  g.opsets = model.opsets;
  std::map<ValueId, ValueId> vmap;  // narrow graph value → new value

  // The first forward consumer's layer, so pipeline staging puts a cast with its reader.
  auto reader_layer = [&](ValueId v) {
    for (NodeId c : model.value(v).consumers) {
      if (model.node(c).layer >= 0) return model.node(c).layer;
    }
    return int32_t{-1};
  };
  auto cast = [&](ValueId from, const std::string& name, DType to, int32_t layer) {
    Value v;
    v.name = g.unique_value_name(name);
    v.dtype = to;
    v.shape = g.value(from).shape;
    const ValueId out = g.add_value(std::move(v));
    Node n;
    n.name = g.unique_node_name(name + "/Cast");
    n.op_type = "Cast";
    n.attrs["to"] = int64_t{dtype_to_onnx(to)};
    n.inputs = {from};
    n.outputs = {out};
    n.layer = layer;
    g.add_node(std::move(n));
    return out;
  };
  // BatchNormalization runs in fp32, as mixed-precision training keeps it: its scale, bias
  // and running statistics stay fp32 state, its input is cast up and its output down.
  auto is_batch_norm = [](const Node& n) {
    return n.op_type == "BatchNormalization" && n.domain.empty();
  };
  std::map<ValueId, bool> batch_norm_state;
  for (const Node& n : model.nodes()) {
    if (!is_batch_norm(n)) continue;
    for (size_t i = 1; i < n.inputs.size(); ++i) batch_norm_state[n.inputs[i]] = true;
  }
  // Float inputs, parameters and BatchNorm state stay fp32 (`wide`); the rest of the
  // initializers are stored in the low type.
  std::map<ValueId, ValueId> wide;  // model value → its fp32 value in g
  for (ValueId v = 0; v < model.num_values(); ++v) {
    const Value& original = model.value(v);
    if (original.kind == ValueKind::kIntermediate) continue;
    const bool keep = original.dtype == DType::kFloat32 &&
                      (original.kind == ValueKind::kInput ||
                       original.kind == ValueKind::kParameter || batch_norm_state.count(v));
    if (keep) {
      wide[v] = g.add_value(detached(original));
    } else {
      vmap[v] = g.add_value(detached(narrow.value(v)));
    }
  }
  for (ValueId in : model.inputs()) g.add_input(*g.find_value(model.value(in).name));
  // A wide value is cast down where it is first read in the low type.
  auto low_of = [&](ValueId v) -> ValueId {
    auto it = vmap.find(v);
    if (it != vmap.end()) return it->second;
    return vmap[v] = cast(wide.at(v), fmt::format("{}.{}", model.value(v).name, dtype_name(low)),
                          low, reader_layer(v));
  };
  for (NodeId id = 0; id < narrow.num_nodes(); ++id) {
    Node n = narrow.node(id);
    if (is_batch_norm(n)) {
      // x cast up, the statistics and affine parameters fp32, y cast down.
      const ValueId x =
          cast(low_of(n.inputs[0]), fmt::format("{}/x.fp32", n.name), DType::kFloat32, n.layer);
      n.inputs[0] = x;
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        if (n.inputs[i] != kNoId)
          n.inputs[i] = wide.count(n.inputs[i]) ? wide.at(n.inputs[i]) : low_of(n.inputs[i]);
      }
      for (ValueId& out : n.outputs) {
        if (out == kNoId) continue;
        Value y = detached(narrow.value(out));
        y.name = g.unique_value_name(y.name + ".fp32");
        y.dtype = DType::kFloat32;
        out = g.add_value(std::move(y));
      }
      const std::vector<ValueId> outs = n.outputs;
      const ValueId original_y = narrow.node(id).outputs[0];
      g.add_node(std::move(n));
      vmap[original_y] = cast(outs[0], narrow.value(original_y).name, low, narrow.node(id).layer);
      continue;
    }
    for (ValueId& in : n.inputs) {
      if (in != kNoId) in = low_of(in);
    }
    for (ValueId& out : n.outputs) {
      if (out == kNoId) continue;
      const ValueId created = g.add_value(detached(narrow.value(out)));
      vmap[out] = created;
      out = created;
    }
    g.add_node(std::move(n));
  }
  // Float outputs come back to fp32 under their own names.
  std::vector<ValueId> outputs;
  for (ValueId o : model.outputs()) {
    ValueId x = vmap.at(o);
    if (model.value(o).dtype == DType::kFloat32) {
      const std::string name = model.value(o).name;
      g.rename_value(x, g.unique_value_name(fmt::format("{}.{}", name, dtype_name(low))));
      x = cast(x, name, DType::kFloat32,
               model.value(o).producer != kNoId ? model.node(model.value(o).producer).layer : -1);
    }
    outputs.push_back(x);
  }
  g.set_outputs(std::move(outputs));
  RETURN_IF_ERROR(infer_shapes(g));
  return g;
}

StatusOr<TrainingGraph> distribute_gradient_casts(TrainingGraph training) {
  const Graph& src = training.graph;
  std::map<NodeId, NodeId> cast_after;  // a contributions' sum → the cast to fp32 after it
  for (const auto& [p, grad] : training.gradients) {
    if (grad == kNoId || src.value(grad).producer == kNoId) continue;
    const NodeId c = src.value(grad).producer;
    const Node& cast = src.node(c);
    if (cast.op_type != "Cast" || !cast.domain.empty() || cast.inputs.size() != 1 ||
        cast.inputs[0] == kNoId)
      continue;
    const Value& summed = src.value(cast.inputs[0]);
    if (summed.producer == kNoId || summed.consumers.size() != 1 || src.is_output(cast.inputs[0]))
      continue;
    const Node& sum = src.node(summed.producer);
    if (!sum.domain.empty() || (sum.op_type != "Sum" && sum.op_type != "Add") ||
        sum.inputs.size() < 2)
      continue;
    // (Where the contributions run, pre- and post-layer nodes alike, only the partition
    // knows: the SPMD pass accumulates them per rank where they land on several.)
    bool distributable = true;
    for (ValueId in : sum.inputs) {
      if (in == kNoId || src.value(in).producer == kNoId || src.value(in).shape != summed.shape) {
        distributable = false;
        break;
      }
    }
    if (distributable) cast_after[summed.producer] = c;
  }
  if (cast_after.empty()) return training;

  Graph g;
  GraphCopy copy(src, g);
  copy.inputs_and_initializers();
  std::set<NodeId> casts;
  for (const auto& [sum, cast] : cast_after) casts.insert(cast);
  for (NodeId id = 0; id < src.num_nodes(); ++id) {
    if (casts.count(id)) continue;
    auto it = cast_after.find(id);
    if (it == cast_after.end()) {
      copy.node(src.node(id));
      continue;
    }
    const Node& sum = src.node(id);
    const Node& cast = src.node(it->second);
    const Value& wide_grad = src.value(cast.outputs[0]);
    Node total = sum;
    total.op_type = "Sum";
    total.inputs.clear();
    for (size_t i = 0; i < sum.inputs.size(); ++i) {
      const ValueId in = sum.inputs[i];
      const Node& producer = src.node(src.value(in).producer);
      Value wide = detached(src.value(in));
      wide.name = g.unique_value_name(
          fmt::format("{}.{}", src.value(in).name, dtype_name(wide_grad.dtype)));
      wide.dtype = wide_grad.dtype;
      const ValueId w = g.add_value(std::move(wide));
      Node each = cast;
      each.name = g.unique_node_name(fmt::format("{}/{}", cast.name, i));
      each.inputs = {copy.value(in)};
      each.outputs = {w};
      each.phase = producer.phase;
      each.layer = producer.layer;
      g.add_node(std::move(each));
      total.inputs.push_back(w);
    }
    total.outputs = {copy.value(cast.outputs[0])};
    g.add_node(std::move(total));
  }
  copy.outputs();
  return with_rewritten_graph(training, std::move(g));
}

}  // namespace autopar
