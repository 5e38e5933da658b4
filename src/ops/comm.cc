// The ai.autopar communication ops: Send, Recv and the collectives the lowering inserts.
//
// Collectives are SPMD: every member of `group` (device ids in ring order) runs the same
// node. Shapes are per device; FLOPs are the arithmetic one device performs.
#include <algorithm>
#include <set>

#include "families.h"

namespace autopar {
namespace {

Status read_group(const InferenceContext& ctx, std::vector<int64_t>& group) {
  if (!has_attr(ctx, "group")) return ctx.fail("required attribute 'group' is missing");
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

Status read_peer(const InferenceContext& ctx) {
  int64_t peer = 0, tag = 0;
  RETURN_IF_ERROR(require_int(ctx, "peer", peer));
  RETURN_IF_ERROR(require_int(ctx, "tag", tag));
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
  std::vector<int64_t> group;
  RETURN_IF_ERROR(read_group(ctx, group));
  RETURN_IF_ERROR(read_reduction(ctx));
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

Status infer_broadcast(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  std::vector<int64_t> group;
  RETURN_IF_ERROR(read_group(ctx, group));
  int64_t root = 0;
  RETURN_IF_ERROR(require_int(ctx, "root", root));
  if (std::find(group.begin(), group.end(), root) == group.end()) {
    return ctx.fail("root {} is not in group [{}]", root, fmt::join(group, ","));
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

// AllGather multiplies dim `axis` by the group size, ReduceScatter divides it.
Status infer_resized_axis(InferenceContext& ctx, bool gather) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  std::vector<int64_t> group;
  RETURN_IF_ERROR(read_group(ctx, group));
  if (!gather) RETURN_IF_ERROR(read_reduction(ctx));
  int64_t axis = 0;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", ctx.input_rank(0), axis));
  auto n = static_cast<int64_t>(group.size());
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
  std::vector<int64_t> group;
  RETURN_IF_ERROR(read_group(ctx, group));
  int64_t split_axis = 0, concat_axis = 0;
  RETURN_IF_ERROR(read_int(ctx, "split_axis", split_axis));
  RETURN_IF_ERROR(read_int(ctx, "concat_axis", concat_axis));
  int64_t rank = ctx.input_rank(0);
  RETURN_IF_ERROR(normalize_axis(ctx, "split_axis", rank, split_axis));
  RETURN_IF_ERROR(normalize_axis(ctx, "concat_axis", rank, concat_axis));
  auto n = static_cast<int64_t>(group.size());
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
  if (group.empty()) return 0.0;
  double size = static_cast<double>(group.size());
  return (size - 1.0) / size * input_elements(g, n, 0);
}

OpDef comm_op(const char* op, ShapeFn infer, CountFn flops = zero_flops,
              std::string flops_doc = "0 (moves data only)") {
  return in_domain(std::string(kAutoparDomain),
                   make_op(op, std::move(infer), std::move(flops), std::move(flops_doc)));
}

Status infer_all_gather(InferenceContext& ctx) { return infer_resized_axis(ctx, true); }
Status infer_reduce_scatter(InferenceContext& ctx) { return infer_resized_axis(ctx, false); }

}  // namespace

void register_comm_ops(OpRegistry& registry) {
  registry.add(comm_op("Send", infer_send));
  registry.add(comm_op("Recv", infer_recv));
  registry.add(comm_op("AllGather", infer_all_gather));
  registry.add(comm_op("AllToAll", infer_all_to_all));
  registry.add(comm_op("Broadcast", infer_broadcast));
  registry.add(comm_op("AllReduce", infer_all_reduce, ring_reduction_flops,
                       "(n−1)/n·E per device: a ring all-reduce of E elements over n devices "
                       "performs (n−1)·E reductions in all"));
  registry.add(comm_op("ReduceScatter", infer_reduce_scatter, ring_reduction_flops,
                       "(n−1)/n·E per device for E input elements over n devices, as a ring "
                       "reduce-scatter"));
}

}  // namespace autopar
