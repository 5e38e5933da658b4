// The ai.autopar communication ops: Send, Recv and the collectives the lowering inserts.
//
// Collectives are SPMD: every member of `group` (device ids in ring order) runs the same
// node. Shapes are per device; FLOPs are the arithmetic one device performs.
#include <algorithm>
#include <cstdlib>
#include <set>

#include "families.h"

namespace autopar {
namespace {

// The group is either explicit device ids (`group`) or mesh axes resolved on each device at
// run time (`axes` with `group_size`, the product of their sizes): role graphs shared by many
// devices name axes, since the members depend on the device.
Status read_group_size(const InferenceContext& ctx, int64_t& size) {
  if (has_attr(ctx, "group")) {
    std::vector<int64_t> group;
    RETURN_IF_ERROR(read_ints(ctx, "group", group));
    if (group.empty()) return ctx.fail("group is empty");
    std::set<int64_t> seen;
    for (int64_t device : group) {
      if (device < 0)
        return ctx.fail("group [{}] has negative device {}", fmt::join(group, ","), device);
      if (!seen.insert(device).second) {
        return ctx.fail("group [{}] lists device {} twice", fmt::join(group, ","), device);
      }
    }
    size = static_cast<int64_t>(group.size());
    return Status::ok();
  }
  if (!has_attr(ctx, "axes")) return ctx.fail("needs attribute 'group' or 'axes'");
  const Attribute* axes = ctx.node().attr("axes");
  if (axes->kind() != Attribute::Kind::kStrings || axes->strings().empty())
    return ctx.fail("attribute 'axes' must be a non-empty list of mesh axis names");
  RETURN_IF_ERROR(require_int(ctx, "group_size", size));
  if (size < 1) return ctx.fail("group_size {} is not positive", size);
  return Status::ok();
}

Status read_reduction(const InferenceContext& ctx) {
  std::string op = "sum";
  RETURN_IF_ERROR(read_string(ctx, "op", op));
  if (op != "sum" && op != "max" && op != "min") {
    return ctx.fail("reduction '{}' is not sum, max or min", op);
  }
  return Status::ok();
}

// The peer is a device id (`peer`) or, in role graphs, the device that differs from this one
// only in the coordinate of mesh axis `peer_axis` (`peer_coord`).
Status read_peer(const InferenceContext& ctx) {
  int64_t peer = 0, tag = 0;
  RETURN_IF_ERROR(require_int(ctx, "tag", tag));
  if (has_attr(ctx, "peer_axis")) {
    std::string axis;
    RETURN_IF_ERROR(read_string(ctx, "peer_axis", axis));
    RETURN_IF_ERROR(require_int(ctx, "peer_coord", peer));
    if (axis.empty()) return ctx.fail("peer_axis is empty");
    if (peer < 0) return ctx.fail("peer_coord {} is negative", peer);
    return Status::ok();
  }
  RETURN_IF_ERROR(require_int(ctx, "peer", peer));
  if (peer < 0) return ctx.fail("peer {} is negative", peer);
  return Status::ok();
}

Status infer_send(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 0, 0));
  return read_peer(ctx);
}

Status infer_recv(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 0, 0, 1, 1));
  RETURN_IF_ERROR(read_peer(ctx));
  int64_t code = 0;
  RETURN_IF_ERROR(require_int(ctx, "dtype", code));
  std::optional<DType> dtype;
  if (code > 0 && code <= INT32_MAX) dtype = dtype_from_onnx(static_cast<int32_t>(code));
  if (!dtype || dtype_size(*dtype) == 0) {
    return ctx.fail("attribute 'dtype' = {} is not a supported ONNX data type", code);
  }
  if (!has_attr(ctx, "shape")) return ctx.fail("required attribute 'shape' is missing");
  std::vector<int64_t> shape;
  RETURN_IF_ERROR(read_ints(ctx, "shape", shape));
  return set_output_checked(ctx, 0, *dtype, std::move(shape));
}

Status infer_all_reduce(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  int64_t size = 0;
  RETURN_IF_ERROR(read_group_size(ctx, size));
  RETURN_IF_ERROR(read_reduction(ctx));
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

Status infer_broadcast(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  int64_t size = 0;
  RETURN_IF_ERROR(read_group_size(ctx, size));
  int64_t root = 0;
  RETURN_IF_ERROR(require_int(ctx, "root", root));
  std::vector<int64_t> group = ctx.node().attr_ints("group");
  if (!group.empty() && std::find(group.begin(), group.end(), root) == group.end()) {
    return ctx.fail("root {} is not in group [{}]", root, fmt::join(group, ","));
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

// AllGather multiplies dim `axis` by the group size, ReduceScatter divides it.
Status infer_resized_axis(InferenceContext& ctx, bool gather) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  int64_t n = 0;
  RETURN_IF_ERROR(read_group_size(ctx, n));
  if (!gather) RETURN_IF_ERROR(read_reduction(ctx));
  int64_t axis = 0;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", ctx.input_rank(0), axis));
  std::vector<int64_t> out = ctx.input_dims(0);
  if (gather) {
    auto gathered = checked_product(out[axis], n);
    if (!gathered) return ctx.fail("gathered dim {} overflows", axis);
    out[axis] = *gathered;
  } else {
    if (out[axis] % n != 0) {
      return ctx.fail("dim {} of {} ({}) does not divide by group size {}", axis,
                      input_text(ctx, 0), out[axis], n);
    }
    out[axis] /= n;
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

Status infer_all_to_all(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  int64_t n = 0;
  RETURN_IF_ERROR(read_group_size(ctx, n));
  int64_t split_axis = 0, concat_axis = 0;
  RETURN_IF_ERROR(read_int(ctx, "split_axis", split_axis));
  RETURN_IF_ERROR(read_int(ctx, "concat_axis", concat_axis));
  int64_t rank = ctx.input_rank(0);
  RETURN_IF_ERROR(normalize_axis(ctx, "split_axis", rank, split_axis));
  RETURN_IF_ERROR(normalize_axis(ctx, "concat_axis", rank, concat_axis));
  std::vector<int64_t> out = ctx.input_dims(0);
  if (out[split_axis] % n != 0) {
    return ctx.fail("dim {} of {} ({}) does not divide by group size {}", split_axis,
                    input_text(ctx, 0), out[split_axis], n);
  }
  out[split_axis] /= n;
  auto joined = checked_product(out[concat_axis], n);
  if (!joined) return ctx.fail("concatenated dim {} overflows", concat_axis);
  out[concat_axis] = *joined;
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// A ring all-reduce or reduce-scatter of E elements over n devices performs (n−1)·E
// reductions in all, (n−1)/n·E on each device; E is the input's element count.
double ring_reduction_flops(const Graph& g, const Node& n) {
  std::vector<int64_t> group = n.attr_ints("group");
  double size = group.empty() ? static_cast<double>(n.attr_int("group_size", 1))
                              : static_cast<double>(group.size());
  if (size <= 1.0) return 0.0;
  return (size - 1.0) / size * input_elements(g, n, 0);
}

OpDef comm_op(const char* op, ShapeFn infer, CountFn flops = zero_flops,
              std::string flops_doc = "0 (moves data only)") {
  return in_domain(std::string(kAutoparDomain),
                   make_op(op, std::move(infer), std::move(flops), std::move(flops_doc)));
}

Status infer_all_gather(InferenceContext& ctx) { return infer_resized_axis(ctx, true); }
Status infer_reduce_scatter(InferenceContext& ctx) { return infer_resized_axis(ctx, false); }

// Shard: this device's part of a tensor every member holds whole, along `axis` (the local
// slice of a reshard; it communicates nothing).
Status infer_shard(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  int64_t n = 0;
  RETURN_IF_ERROR(read_group_size(ctx, n));
  int64_t axis = 0;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", ctx.input_rank(0), axis));
  std::vector<int64_t> out = ctx.input_dims(0);
  if (out[axis] % n != 0) {
    return ctx.fail("dim {} of {} ({}) does not divide by group size {}", axis, input_text(ctx, 0),
                    out[axis], n);
  }
  out[axis] /= n;
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// HaloExchange: the neighbours' rows around this device's block of a split dim (a window op's
// halo); negative counts drop own rows.
Status infer_halo_exchange(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  int64_t n = 0;
  RETURN_IF_ERROR(read_group_size(ctx, n));
  int64_t axis = 0, before = 0, after = 0;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", ctx.input_rank(0), axis));
  RETURN_IF_ERROR(read_int(ctx, "before", before));
  RETURN_IF_ERROR(read_int(ctx, "after", after));
  std::vector<int64_t> out = ctx.input_dims(0);
  if (std::abs(before) > out[axis] || std::abs(after) > out[axis] ||
      out[axis] + before + after < 1) {
    return ctx.fail("a halo of {} and {} rows around dim {} of {}", before, after, axis,
                    input_text(ctx, 0));
  }
  out[axis] += before + after;
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// RingAttention: Attention over a sequence split along the group (a ring over the mesh axes):
// each member holds its queries, keys and values, passes its key/value block around the ring
// in group_size − 1 point-to-point steps and combines its partial softmax results online.
// With zigzag = 1 a member's rows are chunks r and 2·n − 1 − r of 2·n (the causal work
// balanced); positions decide the causal mask. RingAttentionGrad passes the key/value blocks
// around again, their gradients travelling with them back to their owners.
Status read_ring(InferenceContext& ctx) {
  int64_t n = 0, zigzag = 0;
  RETURN_IF_ERROR(read_group_size(ctx, n));
  RETURN_IF_ERROR(read_int(ctx, "zigzag", zigzag));
  if (zigzag != 0 && zigzag != 1) return ctx.fail("zigzag {} is neither 0 nor 1", zigzag);
  return Status::ok();
}

Status infer_ring_attention(InferenceContext& ctx) {
  RETURN_IF_ERROR(read_ring(ctx));
  return infer_attention(ctx);
}

Status infer_ring_attention_grad(InferenceContext& ctx) {
  RETURN_IF_ERROR(read_ring(ctx));
  return infer_attention_grad(ctx);
}

}  // namespace

void register_comm_ops(OpRegistry& registry) {
  registry.add(comm_op("Send", infer_send));
  registry.add(comm_op("Recv", infer_recv));
  registry.add(comm_op("AllGather", infer_all_gather));
  registry.add(comm_op("AllToAll", infer_all_to_all));
  registry.add(comm_op("Broadcast", infer_broadcast));
  registry.add(comm_op("Shard", infer_shard, zero_flops, "0 (a local slice)"));
  registry.add(comm_op("HaloExchange", infer_halo_exchange));
  registry.add(comm_op("RingAttention", infer_ring_attention, attention_flops,
                       "the attention of this member's queries with every member's keys"));
  registry.add(comm_op("RingAttentionGrad", infer_ring_attention_grad, attention_grad_flops,
                       "AttentionGrad's over every member's keys"));
  registry.add(comm_op("AllReduce", infer_all_reduce, ring_reduction_flops,
                       "(n−1)/n·E per device: a ring all-reduce of E elements over n devices "
                       "performs (n−1)·E reductions in all"));
  registry.add(comm_op("ReduceScatter", infer_reduce_scatter, ring_reduction_flops,
                       "(n−1)/n·E per device for E input elements over n devices, as a ring "
                       "reduce-scatter"));
}

}  // namespace autopar
