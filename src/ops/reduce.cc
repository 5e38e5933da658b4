// Reductions over axes: ReduceMean, ReduceSum, ReduceMax.
#include <algorithm>

#include "families.h"

namespace autopar {
namespace {

// The axes to reduce, or empty with `identity` set when the op is a no-op.
struct ReduceAxes {
  std::vector<int64_t> axes;
  bool identity = false;
};

// Axes come from the attribute or (ReduceSum from opset 13, the others from 18) a constant
// input; both forms are accepted at any opset, since converters mix them. No axes reduce
// everything unless noop_with_empty_axes is set.
Status read_reduce_axes(const InferenceContext& ctx, ReduceAxes& out) {
  std::optional<std::vector<int64_t>> axes;
  RETURN_IF_ERROR(read_const_ints(ctx, 1, "axes", axes));
  if (axes && has_attr(ctx, "axes")) {
    return ctx.fail("axes are given both as an attribute and as an input");
  }
  if (!axes && has_attr(ctx, "axes")) {
    axes.emplace();
    RETURN_IF_ERROR(read_ints(ctx, "axes", *axes));
  }
  int64_t noop = 0;
  RETURN_IF_ERROR(read_int(ctx, "noop_with_empty_axes", noop));
  int64_t rank = ctx.input_rank(0);
  if (!axes || axes->empty()) {
    out.identity = noop != 0;
    out.axes.clear();
    if (!out.identity) {
      for (int64_t d = 0; d < rank; ++d) out.axes.push_back(d);
    }
    return Status::ok();
  }
  out.axes = *axes;
  return normalize_axes(ctx, "axes", rank, out.axes);
}

Status infer_reduce(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 2, 1, 1));
  int64_t keepdims = 1;
  RETURN_IF_ERROR(read_int(ctx, "keepdims", keepdims));
  ReduceAxes reduce;
  RETURN_IF_ERROR(read_reduce_axes(ctx, reduce));
  const auto& x = ctx.input_dims(0);
  std::vector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
    bool reduced = std::find(reduce.axes.begin(), reduce.axes.end(), d) != reduce.axes.end();
    if (!reduced) {
      out.push_back(x[d]);
    } else if (keepdims != 0) {
      out.push_back(1);
    }
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// A reduction combines every input element once (an add or a compare); ReduceMean also
// divides each output element by the count. A no-op reduction is a copy.
double reduce_flops(const Graph& g, const Node& n) {
  ValueId in = n.input(0), out = n.output(0);
  if (in == kNoId || out == kNoId) return 0.0;
  bool noop_axes = n.attr_int("noop_with_empty_axes", 0) != 0;
  if (noop_axes) {
    ValueId axes = n.input(1);
    bool empty_input = axes == kNoId || g.value(axes).shape.num_elements() == 0;
    if (empty_input && n.attr_ints("axes").empty()) return 0.0;
  }
  double flops = input_elements(g, n, 0);
  if (n.op_type == "ReduceMean") flops += output_elements(g, n, 0);
  return flops;
}

// Loops over the input's dims; the reduced ones are reduction loops. Without keepdims the
// reduced dims leave the output.
std::optional<IterationSpace> reduce_space(const Graph& g, const Node& n) {
  const std::vector<int64_t>& x = g.value(n.inputs[0]).shape.dims;
  const int64_t rank = static_cast<int64_t>(x.size());
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (axes.empty() && n.input(1) != kNoId) {
    const TensorPtr& data = g.value(n.inputs[1]).data;
    if (!data) return std::nullopt;
    axes = data->to_int64_vector();
  }
  if (axes.empty()) {
    if (n.attr_int("noop_with_empty_axes", 0) != 0) return broadcast_space(g, n);
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes) reduced[a < 0 ? a + rank : a] = true;
  const bool keep = n.attr_int("keepdims", 1) != 0;
  IterationSpace space;
  space.combine = n.op_type == "ReduceMax"    ? Combine::kMax
                  : n.op_type == "ReduceMean" ? Combine::kMean
                                              : Combine::kSum;
  std::vector<int> in_map, out_map;
  for (int64_t d = 0; d < rank; ++d) {
    space.loops.push_back({fmt::format("d{}", d), x[d],
                           reduced[d] ? LoopKind::kReduction : LoopKind::kParallel, true});
    in_map.push_back(static_cast<int>(d));
    if (!reduced[d]) {
      out_map.push_back(static_cast<int>(d));
    } else if (keep) {
      out_map.push_back(-1);
    }
  }
  space.inputs = {in_map};
  if (n.inputs.size() > 1)
    space.inputs.emplace_back(n.input(1) == kNoId ? std::vector<int>{} : std::vector<int>{-1});
  space.outputs = {out_map};
  return space;
}

}  // namespace

void register_reduce_ops(OpRegistry& registry) {
  registry.add(with_semantics(
      with_shape_inputs(make_op("ReduceMean", infer_reduce, reduce_flops,
                                "1 add per input element + 1 divide per output element", {1}),
                        {1}),
      reduce_space));
  registry.add(with_semantics(
      with_shape_inputs(
          make_op("ReduceSum", infer_reduce, reduce_flops, "1 add per input element", {1}), {1}),
      reduce_space));
  registry.add(with_semantics(with_shape_inputs(make_op("ReduceMax", infer_reduce, reduce_flops,
                                                        "1 compare per input element", {1}),
                                                {1}),
                              reduce_space));
}

}  // namespace autopar
