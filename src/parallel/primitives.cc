// duplicate, split, augment, assign.
#include "autopar/parallel/primitives.h"

#include <algorithm>
#include <map>

#include "autopar/autodiff/emitter.h"
#include "autopar/ir/shape_inference.h"

namespace autopar {
namespace {

// The product of the sizes of the mesh axes a strategy assigns to reduction loops.
int64_t reduction_degree(const IterationSpace& space, const OpStrategy& s, const DeviceMesh& mesh) {
  int64_t degree = 1;
  for (const auto& [axis, loop] : s.assignment) {
    if (space.loops[loop].kind == LoopKind::kReduction) degree *= mesh.size(axis);
  }
  return degree;
}

// The mesh axes a strategy assigns to loop `loop`, in assignment order.
std::vector<std::string> axes_of_loop(const OpStrategy& s, int loop) {
  std::vector<std::string> axes;
  for (const auto& [axis, l] : s.assignment) {
    if (l == loop) axes.push_back(axis);
  }
  return axes;
}

// Gather over a split gathered dim: each device holds entries [offset, offset + rows) of it.
// Indices outside the range read entry 0 and are zeroed, so the devices' outputs sum to the
// gather of the whole table. Negative indices count from the end, as Gather's do.
StatusOr<std::vector<ValueId>> masked_gather(Graph& dst, const Graph& src, const Node& node,
                                             const std::vector<ValueId>& inputs,
                                             const std::vector<std::string>& axes,
                                             const DeviceMesh& mesh) {
  const Value& table = src.value(node.inputs[0]);
  const int64_t rank = table.shape.rank();
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  const int64_t extent = table.shape.dims[axis];
  int64_t parts = 1;
  for (const std::string& a : axes) parts *= mesh.size(a);
  const int64_t rows = extent / parts;
  Emitter e(dst, node.name + "/mask", node.phase, node.layer);
  std::vector<int64_t> row_ids(extent);
  for (int64_t i = 0; i < extent; ++i) row_ids[i] = i;
  ValueId ids = e.constant(Tensor::from_int64({extent}, row_ids));
  // Shard of the entry ids over the same axes, major axis first: the device's range.
  for (const std::string& a : axes) {
    ReshardStep step{ReshardStep::Kind::kSlice, a, 0, -1};
    ASSIGN_OR_RETURN(ids, augment(dst, ids, step, mesh, node.phase, node.layer));
  }
  const ValueId offset =
      e.op("Gather", {ids, e.constant(Tensor::scalar_int64(0))}, {{"axis", int64_t{0}}});
  ValueId indices = inputs[1];
  if (dst.value(indices).dtype != DType::kInt64)
    indices = e.op("Cast", {indices}, {{"to", int64_t{7}}});
  const ValueId zero = e.scalar(0, DType::kInt64);
  const ValueId negative = e.op("Cast", {e.op("Less", {indices, zero})}, {{"to", int64_t{7}}});
  indices = e.op(
      "Add",
      {indices, e.op("Mul", {negative, e.scalar(static_cast<double>(extent), DType::kInt64)})});
  const ValueId shifted = e.op("Sub", {indices, offset});
  const ValueId below = e.op("Less", {shifted, zero});
  const ValueId inside =
      e.op("Less", {shifted, e.scalar(static_cast<double>(rows), DType::kInt64)});
  const ValueId mask_i = e.op("Sub", {e.op("Cast", {inside}, {{"to", int64_t{7}}}),
                                      e.op("Cast", {below}, {{"to", int64_t{7}}})});
  const ValueId clamped = e.op("Mul", {shifted, mask_i});
  const Value& out = src.value(node.outputs[0]);
  ValueId mask_f = e.op("Cast", {mask_i}, {{"to", int64_t{dtype_to_onnx(out.dtype)}}});
  // The output is table[:axis] + indices + table[axis+1:]: the mask broadcasts over the rest.
  const int64_t index_rank = dst.value(mask_f).shape.rank();
  std::vector<int64_t> around;
  for (int64_t d = 0; d < axis; ++d) around.push_back(d);
  for (int64_t d = axis + index_rank; d < index_rank + rank - 1; ++d) around.push_back(d);
  if (!around.empty()) mask_f = e.op("Unsqueeze", {mask_f, e.ints(around)});
  ASSIGN_OR_RETURN(std::vector<ValueId> gathered,
                   duplicate(dst, src, node, {inputs[0], clamped}, ""));
  const ValueId masked = e.op("Mul", {gathered[0], mask_f});
  RETURN_IF_ERROR(e.status());
  return std::vector<ValueId>{masked};
}

const char* step_op(ReshardStep::Kind kind) {
  switch (kind) {
    case ReshardStep::Kind::kAllReduce:
      return "AllReduce";
    case ReshardStep::Kind::kReduceScatter:
      return "ReduceScatter";
    case ReshardStep::Kind::kAllGather:
      return "AllGather";
    case ReshardStep::Kind::kAllToAll:
      return "AllToAll";
    case ReshardStep::Kind::kSlice:
      return "Shard";
    case ReshardStep::Kind::kShare:
      break;  // a Mul by the member's entry of a one-hot vector (augment)
  }
  return "";
}

}  // namespace

StatusOr<std::vector<ValueId>> duplicate(Graph& dst, const Graph& src, const Node& node,
                                         const std::vector<ValueId>& inputs,
                                         std::string_view suffix,
                                         const std::vector<std::vector<int64_t>>* shapes) {
  Node copy;
  copy.name = dst.unique_node_name(node.name + std::string(suffix));
  copy.op_type = node.op_type;
  copy.domain = node.domain;
  copy.attrs = node.attrs;
  copy.phase = node.phase;
  copy.layer = node.layer;
  copy.source = node.source;
  copy.inputs = inputs;
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const ValueId o = node.outputs[i];
    if (o == kNoId) {
      copy.outputs.push_back(kNoId);
      continue;
    }
    Value v;
    v.name = dst.unique_value_name(src.value(o).name + std::string(suffix));
    v.dtype = src.value(o).dtype;
    v.shape = shapes ? Shape(shapes->at(i)) : Shape::unknown();
    copy.outputs.push_back(dst.add_value(std::move(v)));
  }
  std::vector<ValueId> outputs = copy.outputs;
  const NodeId id = dst.add_node(std::move(copy));
  if (!shapes) RETURN_IF_ERROR(infer_node(dst, id));
  return outputs;
}

StatusOr<std::vector<ValueId>> split(Graph& dst, const Graph& src, const Node& node,
                                     const std::vector<ValueId>& inputs, const OpStrategy& strategy,
                                     const DeviceMesh& mesh, const SplitHints& hints) {
  std::vector<ValueId> ins = inputs;
  std::optional<IterationSpace> own_space;
  if (!hints.space) own_space = iteration_space(src, node);
  const std::optional<IterationSpace>& space = hints.space ? *hints.space : own_space;
  for (size_t i = 0; i < ins.size() && i < strategy.inputs.size(); ++i) {
    if (ins[i] == kNoId) continue;
    const std::vector<int64_t> expected =
        strategy.inputs[i].shard_shape(src.value(node.inputs[i]).shape.dims, mesh);
    if (dst.value(ins[i]).shape.dims != expected) {
      return error("node '{}' ({}): input {} '{}' is [{}] per device, layout {} expects [{}]",
                   node.name, node.op_type, i, dst.value(ins[i]).name,
                   fmt::join(dst.value(ins[i]).shape.dims, ","), strategy.inputs[i].to_string(),
                   fmt::join(expected, ","));
    }
  }
  std::vector<ValueId> outs;
  bool done = false;
  if (space && (node.op_type == "Reshape" || node.op_type == "Expand") && node.domain.empty() &&
      !strategy.outputs.empty()) {
    // The target shape becomes the device's shard shape, written out in full.
    const std::vector<int64_t> local =
        strategy.outputs[0].shard_shape(src.value(node.outputs[0]).shape.dims, mesh);
    Emitter e(dst, node.name, node.phase, node.layer);
    ins[1] = e.ints(local);
  }
  if (space && node.op_type == "Gather" && node.domain.empty()) {
    const int v = space->find("v");
    std::vector<std::string> axes = v >= 0 ? axes_of_loop(strategy, v) : std::vector<std::string>{};
    if (!axes.empty()) {
      ASSIGN_OR_RETURN(outs, masked_gather(dst, src, node, ins, axes, mesh));
      done = true;
    }
  }
  if (!done && hints.shapes_only) {
    // Costed only: the outputs are what the layouts say a device holds.
    std::vector<std::vector<int64_t>> shapes;
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const std::vector<int64_t> whole =
          node.outputs[i] == kNoId ? std::vector<int64_t>{} : src.value(node.outputs[i]).shape.dims;
      shapes.push_back(i < strategy.outputs.size() && node.outputs[i] != kNoId
                           ? strategy.outputs[i].shard_shape(whole, mesh)
                           : whole);
    }
    ASSIGN_OR_RETURN(outs, duplicate(dst, src, node, ins, "", &shapes));
    done = true;
  }
  if (!done) {
    ASSIGN_OR_RETURN(outs, duplicate(dst, src, node, ins, ""));
  }
  for (size_t i = 0; i < outs.size() && i < strategy.outputs.size(); ++i) {
    if (outs[i] == kNoId) continue;
    const std::vector<int64_t> expected =
        strategy.outputs[i].shard_shape(src.value(node.outputs[i]).shape.dims, mesh);
    if (dst.value(outs[i]).shape.dims != expected) {
      return error("node '{}' ({}): output {} is [{}] per device, layout {} expects [{}]",
                   node.name, node.op_type, i, fmt::join(dst.value(outs[i]).shape.dims, ","),
                   strategy.outputs[i].to_string(), fmt::join(expected, ","));
    }
  }
  if (space && space->combine == Combine::kMean) {
    const int64_t degree = reduction_degree(*space, strategy, mesh);
    if (degree > 1) {
      // The mean of equal shards is the sum of the shards' means over their count.
      Emitter e(dst, node.name + "/shard_mean", node.phase, node.layer);
      for (size_t i = 0; i < outs.size(); ++i) {
        if (outs[i] == kNoId || !strategy.outputs[i].is_partial()) continue;
        outs[i] =
            e.op("Mul",
                 {outs[i], e.scalar(1.0 / static_cast<double>(degree), dst.value(outs[i]).dtype)});
      }
      RETURN_IF_ERROR(e.status());
    }
  }
  return outs;
}

StatusOr<std::vector<ValueId>> split_window(Graph& dst, const Graph& src, const Node& node,
                                            const std::vector<ValueId>& inputs,
                                            const OpStrategy& strategy, int64_t before,
                                            int64_t after, const Attributes& attrs,
                                            const DeviceMesh& mesh) {
  std::vector<ValueId> ins = inputs;
  Node halo;
  halo.op_type = "HaloExchange";
  halo.domain = std::string(kAutoparDomain);
  halo.phase = node.phase;
  halo.layer = node.layer;
  halo.attrs["axes"] = Attribute(std::vector<std::string>{"sp"});
  halo.attrs["group_size"] = mesh.size("sp");
  halo.attrs["axis"] = int64_t{2};
  halo.attrs["before"] = before;
  halo.attrs["after"] = after;
  const std::string base = fmt::format("{}/HaloExchange.sp", dst.value(ins[0]).name);
  halo.name = dst.unique_node_name(base);
  Value v;
  v.name = dst.unique_value_name(base);
  v.dtype = dst.value(ins[0]).dtype;
  v.shape = Shape::unknown();
  const ValueId id = dst.add_value(std::move(v));
  halo.inputs = {ins[0]};
  halo.outputs = {id};
  const NodeId halo_node = dst.add_node(std::move(halo));
  RETURN_IF_ERROR(infer_node(dst, halo_node));
  ins[0] = id;
  Node block = node;
  block.attrs = attrs;
  ASSIGN_OR_RETURN(std::vector<ValueId> outs, duplicate(dst, src, block, ins, ""));
  const std::vector<int64_t> expected =
      strategy.outputs[0].shard_shape(src.value(node.outputs[0]).shape.dims, mesh);
  if (dst.value(outs[0]).shape.dims != expected) {
    return error(
        "node '{}' ({}): a block with a halo of {} and {} rows gives [{}], layout {} "
        "expects [{}]",
        node.name, node.op_type, before, after, fmt::join(dst.value(outs[0]).shape.dims, ","),
        strategy.outputs[0].to_string(), fmt::join(expected, ","));
  }
  return outs;
}

StatusOr<std::vector<ValueId>> split_ring(Graph& dst, const Graph& src, const Node& node,
                                          const std::vector<ValueId>& inputs,
                                          const OpStrategy& strategy, const DeviceMesh& mesh,
                                          std::string_view axis, bool zigzag) {
  Node ring = node;
  ring.op_type = node.op_type == "AttentionGrad" ? "RingAttentionGrad" : "RingAttention";
  ring.domain = std::string(kAutoparDomain);
  ring.attrs["axes"] = Attribute(std::vector<std::string>{std::string(axis)});
  ring.attrs["group_size"] = mesh.size(axis);
  ring.attrs["zigzag"] = int64_t{zigzag ? 1 : 0};
  ASSIGN_OR_RETURN(std::vector<ValueId> outs, duplicate(dst, src, ring, inputs, ""));
  for (size_t i = 0; i < outs.size() && i < strategy.outputs.size(); ++i) {
    if (outs[i] == kNoId) continue;
    const std::vector<int64_t> expected =
        strategy.outputs[i].shard_shape(src.value(node.outputs[i]).shape.dims, mesh);
    if (dst.value(outs[i]).shape.dims != expected) {
      return error("node '{}' ({}): ring output {} is [{}] per device, layout {} expects [{}]",
                   node.name, node.op_type, i, fmt::join(dst.value(outs[i]).shape.dims, ","),
                   strategy.outputs[i].to_string(), fmt::join(expected, ","));
    }
  }
  return outs;
}

StatusOr<ValueId> augment(Graph& dst, ValueId x, const ReshardStep& step, const DeviceMesh& mesh,
                          Phase phase, int32_t layer) {
  if (step.kind == ReshardStep::Kind::kShare) {
    // x · one_hot[member]: the axis's first member keeps x, the others hold zeros, so the
    // members' values sum to x once (a bias added by one member of a split reduction).
    const int64_t members = mesh.size(step.axis);
    const DType dtype = dst.value(x).dtype;
    Tensor one_hot(dtype, {members});
    for (int64_t i = 0; i < members; ++i) one_hot.set_from_double(i, i == 0 ? 1.0 : 0.0);
    Emitter e(dst, fmt::format("{}/Share.{}", dst.value(x).name, step.axis), phase, layer);
    const ValueId table = e.constant(std::move(one_hot));
    ASSIGN_OR_RETURN(
        const ValueId mine,
        augment(dst, table, {ReshardStep::Kind::kSlice, step.axis, 0, -1, step.axis_id}, mesh,
                phase, layer));
    // One entry per member, never a chunk pair.
    dst.mutable_node(dst.value(mine).producer).attrs["zigzag"] = int64_t{0};
    const ValueId kept = e.op("Mul", {x, mine});
    RETURN_IF_ERROR(e.status());
    return kept;
  }
  Node n;
  n.op_type = step_op(step.kind);
  n.domain = std::string(kAutoparDomain);
  n.phase = phase;
  n.layer = layer;
  n.attrs["axes"] = Attribute(std::vector<std::string>{step.axis});
  n.attrs["group_size"] = mesh.size(step.axis);
  // Over the mesh's paired axis a split dim holds chunk pairs (ring attention's layout): the
  // steps that split or join one say so.
  const bool splits = step.kind != ReshardStep::Kind::kAllReduce;
  if (splits && mesh.is_paired(find_axis(step.axis))) n.attrs["zigzag"] = int64_t{1};
  switch (step.kind) {
    case ReshardStep::Kind::kAllReduce:
      n.attrs["op"] = std::string("sum");
      break;
    case ReshardStep::Kind::kReduceScatter:
      n.attrs["op"] = std::string("sum");
      n.attrs["axis"] = step.dim;
      break;
    case ReshardStep::Kind::kAllGather:
    case ReshardStep::Kind::kSlice:
      n.attrs["axis"] = step.dim;
      break;
    case ReshardStep::Kind::kShare:
      break;
    case ReshardStep::Kind::kAllToAll:
      n.attrs["split_axis"] = step.to_dim;
      n.attrs["concat_axis"] = step.dim;
      break;
  }
  const std::string base = fmt::format("{}/{}.{}", dst.value(x).name, n.op_type, step.axis);
  n.name = dst.unique_node_name(base);
  Value out;
  out.name = dst.unique_value_name(base);
  out.dtype = dst.value(x).dtype;
  out.shape = Shape::unknown();
  const ValueId id = dst.add_value(std::move(out));
  n.inputs = {x};
  n.outputs = {id};
  const NodeId node = dst.add_node(std::move(n));
  RETURN_IF_ERROR(infer_node(dst, node));
  return id;
}

StatusOr<ValueId> augment_reshard(Graph& dst, ValueId x, const Layout& from, const Layout& to,
                                  const std::vector<int64_t>& global_shape, const DeviceMesh& mesh,
                                  Phase phase, int32_t layer) {
  ASSIGN_OR_RETURN(std::vector<ReshardStep> steps, reshard_steps(from, to, global_shape, mesh));
  return augment_steps(dst, x, steps, mesh, phase, layer);
}

StatusOr<ValueId> augment_steps(Graph& dst, ValueId x, const std::vector<ReshardStep>& steps,
                                const DeviceMesh& mesh, Phase phase, int32_t layer) {
  for (const ReshardStep& step : steps) {
    ASSIGN_OR_RETURN(x, augment(dst, x, step, mesh, phase, layer));
  }
  return x;
}

NodeId augment_send(Graph& dst, ValueId x, std::string_view axis, int64_t coord, int64_t tag,
                    Phase phase, int32_t layer) {
  Node n;
  n.op_type = "Send";
  n.domain = std::string(kAutoparDomain);
  n.name = dst.unique_node_name(fmt::format("{}/Send.{}{}", dst.value(x).name, axis, coord));
  n.phase = phase;
  n.layer = layer;
  n.attrs["peer_axis"] = std::string(axis);
  n.attrs["peer_coord"] = coord;
  n.attrs["tag"] = tag;
  n.inputs = {x};
  return dst.add_node(std::move(n));
}

StatusOr<ValueId> augment_recv(Graph& dst, std::string_view name, DType dtype,
                               const std::vector<int64_t>& shape, std::string_view axis,
                               int64_t coord, int64_t tag, Phase phase, int32_t layer) {
  Node n;
  n.op_type = "Recv";
  n.domain = std::string(kAutoparDomain);
  n.name = dst.unique_node_name(fmt::format("{}/Recv.{}{}", name, axis, coord));
  n.phase = phase;
  n.layer = layer;
  n.attrs["peer_axis"] = std::string(axis);
  n.attrs["peer_coord"] = coord;
  n.attrs["tag"] = tag;
  n.attrs["dtype"] = int64_t{dtype_to_onnx(dtype)};
  n.attrs["shape"] = shape;
  Value out;
  out.name = dst.unique_value_name(name);
  out.dtype = dtype;
  out.shape = Shape::unknown();
  const ValueId id = dst.add_value(std::move(out));
  n.outputs = {id};
  const NodeId node = dst.add_node(std::move(n));
  RETURN_IF_ERROR(infer_node(dst, node));
  return id;
}

std::vector<int32_t> assign(const Graph& g, const std::vector<int32_t>& layer_stage,
                            int32_t num_stages, const std::vector<NodeId>& forward_of) {
  const int32_t last = num_stages - 1;
  std::vector<int32_t> stage(g.num_nodes(), -1);
  if (num_stages == 1) {
    // One stage: every node but the update's is on it.
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      if (g.node(i).phase != Phase::kOptimizer) stage[i] = 0;
    return stage;
  }
  auto layer_of = [&](int32_t layer) -> int32_t {
    if (layer < 0 || layer >= static_cast<int32_t>(layer_stage.size())) return -1;
    return layer_stage[layer];
  };
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.phase == Phase::kOptimizer) continue;
    int32_t s = -1;
    if (n.phase == Phase::kForward) {
      s = layer_of(n.layer);
      if (s < 0) {
        for (ValueId in : n.inputs) {
          if (in == kNoId || g.value(in).producer == kNoId) continue;
          s = std::max(s, stage[g.value(in).producer]);
        }
      }
    } else {
      const NodeId f = i < static_cast<NodeId>(forward_of.size()) ? forward_of[i] : kNoId;
      if (f != kNoId && f < i) s = stage[f];
      if (s < 0) s = layer_of(n.layer);
      if (s < 0) {
        for (ValueId in : n.inputs) {
          if (in == kNoId || g.value(in).producer == kNoId) continue;
          const int32_t p = stage[g.value(in).producer];
          if (p >= 0) s = s < 0 ? p : std::min(s, p);
        }
      }
    }
    stage[i] = s;
  }
  // Nodes that read nothing staged follow their consumers (latest first, so chains resolve).
  for (NodeId i = g.num_nodes() - 1; i >= 0; --i) {
    const Node& n = g.node(i);
    if (n.phase == Phase::kOptimizer || stage[i] >= 0) continue;
    int32_t s = -1;
    for (ValueId o : n.outputs) {
      if (o == kNoId) continue;
      for (NodeId c : g.value(o).consumers) {
        if (stage[c] >= 0) s = s < 0 ? stage[c] : std::min(s, stage[c]);
      }
    }
    stage[i] = s >= 0 ? s : (n.phase == Phase::kForward ? 0 : last);
  }
  // Forward nodes resolved late may feed nodes staged early: a forward node never runs before
  // the stages it reads from.
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.phase != Phase::kForward) continue;
    for (ValueId in : n.inputs) {
      if (in == kNoId || g.value(in).producer == kNoId) continue;
      const NodeId p = g.value(in).producer;
      if (g.node(p).phase == Phase::kForward) stage[i] = std::max(stage[i], stage[p]);
    }
  }
  return stage;
}

}  // namespace autopar
