// Data-movement ops that compute no arithmetic: Flatten, Reshape, Transpose, Concat, Split,
// Slice, Gather, Unsqueeze, Squeeze, Expand, Shape, Tile, Pad, Resize and Constant.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "families.h"

namespace autopar {
namespace {

Status infer_flatten(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  const auto& x = ctx.input_dims(0);
  int64_t rank = ctx.input_rank(0);
  int64_t axis = 1;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  // axis ranges over [-rank, rank]: it may equal rank (everything goes into the outer dim).
  if (axis < -rank || axis > rank) {
    return ctx.fail("axis {} is out of range [-{}, {}] for {}", axis, rank, rank,
                    input_text(ctx, 0));
  }
  if (axis < 0) axis += rank;
  auto outer = checked_element_count(std::span(x).first(static_cast<size_t>(axis)));
  auto inner = checked_element_count(std::span(x).subspan(static_cast<size_t>(axis)));
  if (!outer || !inner) return ctx.fail("{} is too large to flatten", input_text(ctx, 0));
  return set_output_checked(ctx, 0, ctx.input_dtype(0), {*outer, *inner});
}

Status infer_reshape(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  std::optional<std::vector<int64_t>> shape;
  RETURN_IF_ERROR(read_const_ints(ctx, 1, "shape", shape));
  int64_t allowzero = 0;
  RETURN_IF_ERROR(read_int(ctx, "allowzero", allowzero));
  const auto& x = ctx.input_dims(0);
  std::vector<int64_t> out = *shape;
  int64_t inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t& d = out[i];
    if (d == 0 && allowzero == 0) {
      // 0 copies the input's dim at the same index.
      if (i >= x.size()) {
        return ctx.fail("shape [{}] copies dim {} (0) but {} has rank {}", fmt::join(*shape, ","),
                        i, input_text(ctx, 0), x.size());
      }
      d = x[i];
    } else if (d == -1) {
      if (inferred >= 0) {
        return ctx.fail("shape [{}] has more than one -1", fmt::join(*shape, ","));
      }
      inferred = static_cast<int64_t>(i);
      continue;
    } else if (d < 0) {
      return ctx.fail("shape [{}] has invalid dim {}", fmt::join(*shape, ","), d);
    }
    auto next = checked_product(known, d);
    if (!next) return ctx.fail("shape [{}] has more than 2^56 elements", fmt::join(*shape, ","));
    known = *next;
  }
  if (allowzero != 0 && inferred >= 0 &&
      std::find(shape->begin(), shape->end(), 0) != shape->end()) {
    return ctx.fail("shape [{}] has both 0 and -1 with allowzero=1", fmt::join(*shape, ","));
  }
  int64_t elements = ctx.input(0).shape.num_elements();
  if (inferred >= 0) {
    if (known == 0 || elements % known != 0) {
      return ctx.fail("cannot reshape {} to [{}]: {} elements do not divide by {}",
                      input_text(ctx, 0), fmt::join(*shape, ","), elements, known);
    }
    out[inferred] = elements / known;
  } else if (known != elements) {
    return ctx.fail("cannot reshape {} ({} elements) to [{}] ({} elements)", input_text(ctx, 0),
                    elements, fmt::join(*shape, ","), known);
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

Status infer_transpose(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  const auto& x = ctx.input_dims(0);
  int64_t rank = ctx.input_rank(0);
  std::vector<int64_t> perm(x.size());
  for (int64_t i = 0; i < rank; ++i) perm[i] = rank - 1 - i;  // default: reverse the dims
  RETURN_IF_ERROR(read_ints(ctx, "perm", perm));
  std::vector<bool> used(x.size(), false);
  if (static_cast<int64_t>(perm.size()) != rank) {
    return ctx.fail("perm [{}] is not a permutation of {} dims", fmt::join(perm, ","), rank);
  }
  std::vector<int64_t> out;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || used[p]) {
      return ctx.fail("perm [{}] is not a permutation of {} dims", fmt::join(perm, ","), rank);
    }
    used[p] = true;
    out.push_back(x[p]);
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

Status infer_concat(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, std::numeric_limits<size_t>::max(), 1, 1));
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.fail("required input {} is missing", i);
  }
  int64_t axis = 0;
  RETURN_IF_ERROR(require_int(ctx, "axis", axis));
  int64_t rank = ctx.input_rank(0);
  if (rank == 0) return ctx.fail("cannot concatenate scalar {}", input_text(ctx, 0));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", rank, axis));
  std::vector<int64_t> out = ctx.input_dims(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const auto& dims = ctx.input_dims(i);
    bool matches = ctx.input_dtype(i) == ctx.input_dtype(0) && ctx.input_rank(i) == rank;
    for (int64_t d = 0; d < rank && matches; ++d) matches = d == axis || dims[d] == out[d];
    if (!matches) {
      return ctx.fail("{} does not match {} outside axis {}", input_text(ctx, i),
                      input_text(ctx, 0), axis);
    }
    out[axis] += dims[axis];  // each is at most 2^56, so a few million inputs cannot overflow
    if (out[axis] > kMaxElements) return ctx.fail("concatenated axis exceeds 2^56");
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// Split sizes are an attribute before opset 13 and an optional constant input from 13;
// without them the axis splits equally over the outputs.
Status infer_split(InferenceContext& ctx) {
  bool split_input = ctx.opset() >= 13;
  RETURN_IF_ERROR(check_arity(ctx, 1, split_input ? 2 : 1, 1, std::numeric_limits<size_t>::max()));
  int64_t axis = 0;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  int64_t rank = ctx.input_rank(0);
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", rank, axis));
  int64_t dim = ctx.input_dims(0)[axis];
  auto outputs = static_cast<int64_t>(ctx.num_outputs());
  std::optional<std::vector<int64_t>> split;
  if (split_input) {
    RETURN_IF_ERROR(read_const_ints(ctx, 1, "split", split));
    if (split && split->empty()) split.reset();  // an empty tensor marks an omitted input
  } else if (has_attr(ctx, "split")) {
    split.emplace();
    RETURN_IF_ERROR(read_ints(ctx, "split", *split));
  }
  if (!split) {
    if (dim % outputs != 0) {
      return ctx.fail("dim {} of size {} does not split equally into {} outputs", axis, dim,
                      outputs);
    }
    split = std::vector<int64_t>(static_cast<size_t>(outputs), dim / outputs);
  }
  if (static_cast<int64_t>(split->size()) != outputs) {
    return ctx.fail("split [{}] has {} sizes for {} outputs", fmt::join(*split, ","), split->size(),
                    outputs);
  }
  int64_t total = 0;
  for (int64_t s : *split) {
    if (s < 0 || s > kMaxElements) return ctx.fail("split size {} is invalid", s);
    total += s;
    if (total > kMaxElements) return ctx.fail("split [{}] sums above 2^56", fmt::join(*split, ","));
  }
  if (total != dim) {
    return ctx.fail("split [{}] sums to {}, but dim {} of {} is {}", fmt::join(*split, ","), total,
                    axis, input_text(ctx, 0), dim);
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    std::vector<int64_t> out = ctx.input_dims(0);
    out[axis] = (*split)[i];
    RETURN_IF_ERROR(set_output_checked(ctx, i, ctx.input_dtype(0), std::move(out)));
  }
  return Status::ok();
}

// Number of elements Python's range(start, end, step) yields over a dim, after ONNX's
// clamping; steps of either sign.
int64_t slice_extent(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (dim == 0) return 0;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return start < end ? (end - start - 1) / step + 1 : 0;
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  // -step overflows for INT64_MIN; any step below -dim takes one element anyway.
  int64_t stride = step < -dim ? dim + 1 : -step;
  return start > end ? (start - end - 1) / stride + 1 : 0;
}

// Slice reads starts/ends/axes attributes before opset 10 and constant inputs (with steps)
// from 10.
Status infer_slice(InferenceContext& ctx) {
  bool from_inputs = ctx.opset() >= 10;
  RETURN_IF_ERROR(check_arity(ctx, from_inputs ? 3 : 1, from_inputs ? 5 : 1, 1, 1));
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (from_inputs) {
    RETURN_IF_ERROR(read_const_ints(ctx, 1, "starts", starts));
    RETURN_IF_ERROR(read_const_ints(ctx, 2, "ends", ends));
    RETURN_IF_ERROR(read_const_ints(ctx, 3, "axes", axes));
    RETURN_IF_ERROR(read_const_ints(ctx, 4, "steps", steps));
  } else {
    if (!has_attr(ctx, "starts") || !has_attr(ctx, "ends")) {
      return ctx.fail("attributes 'starts' and 'ends' are required before opset 10");
    }
    starts.emplace();
    ends.emplace();
    RETURN_IF_ERROR(read_ints(ctx, "starts", *starts));
    RETURN_IF_ERROR(read_ints(ctx, "ends", *ends));
    if (has_attr(ctx, "axes")) {
      axes.emplace();
      RETURN_IF_ERROR(read_ints(ctx, "axes", *axes));
    }
  }
  size_t count = starts->size();
  if (ends->size() != count) {
    return ctx.fail("starts has {} values but ends has {}", count, ends->size());
  }
  if (!axes) {
    axes.emplace(count);
    for (size_t i = 0; i < count; ++i) (*axes)[i] = static_cast<int64_t>(i);
  }
  if (!steps) steps = std::vector<int64_t>(count, 1);
  if (axes->size() != count || steps->size() != count) {
    return ctx.fail("starts, ends, axes and steps have {}, {}, {} and {} values", count,
                    ends->size(), axes->size(), steps->size());
  }
  RETURN_IF_ERROR(normalize_axes(ctx, "axes", ctx.input_rank(0), *axes));
  std::vector<int64_t> out = ctx.input_dims(0);
  for (size_t i = 0; i < count; ++i) {
    int64_t step = (*steps)[i];
    if (step == 0) return ctx.fail("step for axis {} is 0", (*axes)[i]);
    int64_t& dim = out[(*axes)[i]];
    dim = slice_extent(dim, (*starts)[i], (*ends)[i], step);
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

Status infer_gather(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  int64_t axis = 0;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  const auto& data = ctx.input_dims(0);
  int64_t rank = ctx.input_rank(0);
  if (rank == 0) return ctx.fail("cannot gather from scalar {}", input_text(ctx, 0));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", rank, axis));
  DType index_type = ctx.input_dtype(1);
  if (index_type != DType::kInt32 && index_type != DType::kInt64) {
    return ctx.fail("indices {} must be i32 or i64", input_text(ctx, 1));
  }
  // Constant indices (embeddings' position ids, class-token picks) are checked here, where a
  // bad one can still be reported against the model.
  if (const Tensor* indices = ctx.input_data(1)) {
    int64_t dim = data[axis];
    for (int64_t k = 0; k < indices->num_elements(); ++k) {
      int64_t index = indices->int_at(k);
      if (index < -dim || index >= dim) {
        return ctx.fail("index {} is out of range for dim {} of size {}", index, axis, dim);
      }
    }
  }
  std::vector<int64_t> out(data.begin(), data.begin() + axis);
  const auto& indices = ctx.input_dims(1);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

Status read_reduction(const InferenceContext& ctx) {
  std::string reduction = "none";
  RETURN_IF_ERROR(read_string(ctx, "reduction", reduction));
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" &&
      reduction != "min") {
    return ctx.fail("reduction '{}' is not none, add, mul, max or min", reduction);
  }
  return Status::ok();
}

Status check_index_type(const InferenceContext& ctx, size_t i) {
  if (ctx.input_dtype(i) != DType::kInt32 && ctx.input_dtype(i) != DType::kInt64) {
    return ctx.fail("indices {} must be i32 or i64", input_text(ctx, i));
  }
  return Status::ok();
}

// ScatterElements: updates[i..] goes to data[..indices[i..] on axis..]; output has data's shape.
Status infer_scatter_elements(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 3, 3, 1, 1));
  RETURN_IF_ERROR(read_reduction(ctx));
  RETURN_IF_ERROR(check_index_type(ctx, 1));
  const int64_t rank = ctx.input_rank(0);
  int64_t axis = 0;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  if (rank == 0) return ctx.fail("cannot scatter into scalar {}", input_text(ctx, 0));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", rank, axis));
  if (ctx.input_dims(1) != ctx.input_dims(2)) {
    return ctx.fail("indices {} and updates {} differ in shape", input_text(ctx, 1),
                    input_text(ctx, 2));
  }
  if (ctx.input_rank(1) != rank) {
    return ctx.fail("indices {} must have the rank of data {}", input_text(ctx, 1),
                    input_text(ctx, 0));
  }
  if (ctx.input_dtype(2) != ctx.input_dtype(0)) {
    return ctx.fail("updates {} must have the type of data", input_text(ctx, 2));
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(0));
}

// ScatterND: indices [..., k] address data's first k dims; updates are indices.shape[:-1]
// followed by data.shape[k:].
Status infer_scatter_nd(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 3, 3, 1, 1));
  RETURN_IF_ERROR(read_reduction(ctx));
  RETURN_IF_ERROR(check_index_type(ctx, 1));
  const auto& data = ctx.input_dims(0);
  const auto& indices = ctx.input_dims(1);
  if (indices.empty()) return ctx.fail("indices {} must have rank 1 or more", input_text(ctx, 1));
  const int64_t k = indices.back();
  if (k < 1 || k > static_cast<int64_t>(data.size())) {
    return ctx.fail("indices {} address {} dims of data {}", input_text(ctx, 1), k,
                    input_text(ctx, 0));
  }
  std::vector<int64_t> expected(indices.begin(), indices.end() - 1);
  expected.insert(expected.end(), data.begin() + k, data.end());
  if (ctx.input_dims(2) != expected) {
    return ctx.fail("updates {} must be {}", input_text(ctx, 2),
                    dims_text(ctx.input_dtype(0), expected));
  }
  if (ctx.input_dtype(2) != ctx.input_dtype(0)) {
    return ctx.fail("updates {} must have the type of data", input_text(ctx, 2));
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), data);
}

Status infer_constant_of_shape(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  std::optional<std::vector<int64_t>> shape;
  RETURN_IF_ERROR(read_const_ints(ctx, 0, "shape", shape));
  DType dtype = DType::kFloat32;
  if (const Attribute* value = ctx.node().attr("value")) {
    if (value->kind() != Attribute::Kind::kTensor || !value->tensor() ||
        value->tensor()->num_elements() != 1) {
      return ctx.fail("attribute 'value' must be a one-element tensor");
    }
    dtype = value->tensor()->dtype();
  }
  return set_output_checked(ctx, 0, dtype, *shape);
}

// Size: the element count as an i64 scalar.
Status infer_size(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  return set_output_checked(ctx, 0, DType::kInt64, {});
}

// Range(start, limit, delta): max(ceil((limit − start)/delta), 0) elements.
Status infer_range(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 3, 3, 1, 1));
  const Tensor* values[3];
  for (size_t i = 0; i < 3; ++i) {
    values[i] = ctx.input_data(i);
    if (!values[i] || values[i]->num_elements() != 1) {
      return ctx.fail("{} must be a constant scalar", input_text(ctx, i));
    }
    if (ctx.input_dtype(i) != ctx.input_dtype(0)) return ctx.fail("inputs must share one type");
  }
  const double start = values[0]->float_at(0), limit = values[1]->float_at(0),
               delta = values[2]->float_at(0);
  if (delta == 0) return ctx.fail("delta is zero");
  const double count = std::max(0.0, std::ceil((limit - start) / delta));
  if (!(count <= static_cast<double>(kMaxElements)))
    return ctx.fail("range of {} elements is too large", count);
  return set_output_checked(ctx, 0, ctx.input_dtype(0), {static_cast<int64_t>(count)});
}

// GatherElements: output[i..] = data[..indices[i..] on axis..]; indices keep data's rank.
Status infer_gather_elements(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  RETURN_IF_ERROR(check_index_type(ctx, 1));
  const int64_t rank = ctx.input_rank(0);
  int64_t axis = 0;
  RETURN_IF_ERROR(read_int(ctx, "axis", axis));
  if (rank == 0) return ctx.fail("cannot gather from scalar {}", input_text(ctx, 0));
  RETURN_IF_ERROR(normalize_axis(ctx, "axis", rank, axis));
  if (ctx.input_rank(1) != rank) {
    return ctx.fail("indices {} must have the rank of data {}", input_text(ctx, 1),
                    input_text(ctx, 0));
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), ctx.input_dims(1));
}

// GatherND: indices [..., k] address data's dims after batch_dims.
Status infer_gather_nd(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  RETURN_IF_ERROR(check_index_type(ctx, 1));
  const auto& data = ctx.input_dims(0);
  const auto& indices = ctx.input_dims(1);
  int64_t batch_dims = 0;
  RETURN_IF_ERROR(read_int(ctx, "batch_dims", batch_dims));
  if (indices.empty()) return ctx.fail("indices {} must have rank 1 or more", input_text(ctx, 1));
  const int64_t k = indices.back();
  if (batch_dims < 0 || batch_dims >= static_cast<int64_t>(indices.size()) ||
      batch_dims + k > static_cast<int64_t>(data.size()) || k < 1) {
    return ctx.fail("indices {} with batch_dims {} do not address data {}", input_text(ctx, 1),
                    batch_dims, input_text(ctx, 0));
  }
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (data[d] != indices[d]) return ctx.fail("batch dim {} differs between data and indices", d);
  }
  std::vector<int64_t> out(indices.begin(), indices.end() - 1);
  out.insert(out.end(), data.begin() + batch_dims + k, data.end());
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

double scatter_flops(const Graph& g, const Node& n) {
  return n.attr_string("reduction", "none") == "none" ? 0.0 : input_elements(g, n, 2);
}

// Axes of Squeeze and Unsqueeze: an attribute before opset 13, a constant input from 13.
Status read_squeeze_axes(const InferenceContext& ctx, std::optional<std::vector<int64_t>>& axes) {
  if (ctx.opset() >= 13) return read_const_ints(ctx, 1, "axes", axes);
  axes.reset();
  if (!has_attr(ctx, "axes")) return Status::ok();
  axes.emplace();
  return read_ints(ctx, "axes", *axes);
}

Status infer_unsqueeze(InferenceContext& ctx) {
  bool axes_input = ctx.opset() >= 13;
  RETURN_IF_ERROR(check_arity(ctx, axes_input ? 2 : 1, axes_input ? 2 : 1, 1, 1));
  std::optional<std::vector<int64_t>> axes;
  RETURN_IF_ERROR(read_squeeze_axes(ctx, axes));
  if (!axes) return ctx.fail("required attribute 'axes' is missing");
  const auto& x = ctx.input_dims(0);
  // Axes index the output, whose rank grows by one per axis.
  int64_t rank = ctx.input_rank(0) + static_cast<int64_t>(axes->size());
  RETURN_IF_ERROR(normalize_axes(ctx, "axes", rank, *axes));
  std::vector<int64_t> out;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(axes->begin(), axes->end(), d) != axes->end()) {
      out.push_back(1);
    } else {
      out.push_back(x[next++]);
    }
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

Status infer_squeeze(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, ctx.opset() >= 13 ? 2 : 1, 1, 1));
  std::optional<std::vector<int64_t>> axes;
  RETURN_IF_ERROR(read_squeeze_axes(ctx, axes));
  const auto& x = ctx.input_dims(0);
  int64_t rank = ctx.input_rank(0);
  std::vector<bool> drop(x.size(), false);
  if (!axes || axes->empty()) {
    for (size_t d = 0; d < x.size(); ++d) drop[d] = x[d] == 1;
  } else {
    RETURN_IF_ERROR(normalize_axes(ctx, "axes", rank, *axes));
    for (int64_t axis : *axes) {
      if (x[axis] != 1) {
        return ctx.fail("cannot squeeze dim {} of size {} of {}", axis, x[axis],
                        input_text(ctx, 0));
      }
      drop[axis] = true;
    }
  }
  std::vector<int64_t> out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!drop[d]) out.push_back(x[d]);
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

Status infer_expand(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  std::optional<std::vector<int64_t>> shape;
  RETURN_IF_ERROR(read_const_ints(ctx, 1, "shape", shape));
  for (int64_t d : *shape) {
    if (d < 0) return ctx.fail("shape [{}] has negative dim {}", fmt::join(*shape, ","), d);
  }
  auto out = broadcast_shapes(ctx.input_dims(0), *shape);
  if (!out) {
    return ctx.fail("{} does not broadcast with shape [{}]", input_text(ctx, 0),
                    fmt::join(*shape, ","));
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(*out));
}

// Opset 15 added start / end, clamped like Python slice bounds.
Status infer_shape(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 1, 1, 1, 1));
  int64_t rank = ctx.input_rank(0);
  int64_t start = 0, end = rank;
  if (ctx.opset() >= 15) {
    RETURN_IF_ERROR(read_int(ctx, "start", start));
    RETURN_IF_ERROR(read_int(ctx, "end", end));
  }
  if (start < 0) start = std::max<int64_t>(start + rank, 0);
  if (end < 0) end = std::max<int64_t>(end + rank, 0);
  start = std::min(start, rank);
  end = std::min(end, rank);
  return set_output_checked(ctx, 0, DType::kInt64, {std::max<int64_t>(end - start, 0)});
}

Status infer_tile(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 2, 2, 1, 1));
  std::optional<std::vector<int64_t>> repeats;
  RETURN_IF_ERROR(read_const_ints(ctx, 1, "repeats", repeats));
  const auto& x = ctx.input_dims(0);
  if (repeats->size() != x.size()) {
    return ctx.fail("repeats [{}] has {} values for {}", fmt::join(*repeats, ","), repeats->size(),
                    input_text(ctx, 0));
  }
  std::vector<int64_t> out;
  for (size_t d = 0; d < x.size(); ++d) {
    auto tiled = checked_product(x[d], (*repeats)[d]);
    if (!tiled) {
      return ctx.fail("repeat {} of dim {} is negative or overflows", (*repeats)[d], d);
    }
    out.push_back(*tiled);
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// Pads are an attribute before opset 11 and a constant input from 11 (with an optional
// constant value and, from opset 18, axes). Negative pads crop.
Status infer_pad(InferenceContext& ctx) {
  bool pads_input = ctx.opset() >= 11;
  RETURN_IF_ERROR(check_arity(ctx, pads_input ? 2 : 1, pads_input ? 4 : 1, 1, 1));
  std::string mode = "constant";
  RETURN_IF_ERROR(read_string(ctx, "mode", mode));
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    return ctx.fail("mode '{}' is not constant, reflect, edge or wrap", mode);
  }
  std::optional<std::vector<int64_t>> pads, axes;
  if (pads_input) {
    RETURN_IF_ERROR(read_const_ints(ctx, 1, "pads", pads));
    RETURN_IF_ERROR(read_const_ints(ctx, 3, "axes", axes));
    if (ctx.has_input(2) && ctx.input(2).shape.num_elements() != 1) {
      return ctx.fail("constant_value {} must be a scalar", input_text(ctx, 2));
    }
  } else {
    if (!has_attr(ctx, "pads")) return ctx.fail("required attribute 'pads' is missing");
    pads.emplace();
    RETURN_IF_ERROR(read_ints(ctx, "pads", *pads));
    float value = 0;
    RETURN_IF_ERROR(read_float(ctx, "value", value));
  }
  int64_t rank = ctx.input_rank(0);
  if (!axes) {
    axes.emplace(static_cast<size_t>(rank));
    for (int64_t d = 0; d < rank; ++d) (*axes)[d] = d;
  }
  RETURN_IF_ERROR(normalize_axes(ctx, "axes", rank, *axes));
  size_t count = axes->size();
  if (pads->size() != 2 * count) {
    return ctx.fail("pads [{}] has {} values, expected {} for {}", fmt::join(*pads, ","),
                    pads->size(), 2 * count, input_text(ctx, 0));
  }
  std::vector<int64_t> out = ctx.input_dims(0);
  for (size_t i = 0; i < count; ++i) {
    int64_t begin = (*pads)[i], end = (*pads)[i + count];
    if (begin < -kMaxElements || begin > kMaxElements || end < -kMaxElements ||
        end > kMaxElements) {
      return ctx.fail("pad {} or {} exceeds 2^56", begin, end);
    }
    int64_t& dim = out[(*axes)[i]];
    dim += begin + end;
    if (dim < 0) {
      return ctx.fail("pads [{}] crop dim {} of {} below zero", fmt::join(*pads, ","), (*axes)[i],
                      input_text(ctx, 0));
    }
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// Resize (opset 10: X, scales; from 11: X, roi, scales, sizes). Exactly one of scales and
// sizes gives the output; an empty tensor stands for an omitted input.
Status infer_resize(InferenceContext& ctx) {
  bool has_roi = ctx.opset() >= 11;
  RETURN_IF_ERROR(check_arity(ctx, 1, has_roi ? 4 : 2, 1, 1));
  std::string mode = "nearest";
  RETURN_IF_ERROR(read_string(ctx, "mode", mode));
  if (mode != "nearest" && mode != "linear" && mode != "cubic") {
    return ctx.fail("mode '{}' is not nearest, linear or cubic", mode);
  }
  size_t scales_index = has_roi ? 2 : 1, sizes_index = 3;
  bool with_scales = has_nonempty_input(ctx, scales_index);
  bool with_sizes = has_roi && has_nonempty_input(ctx, sizes_index);
  if (with_scales == with_sizes) return ctx.fail("exactly one of scales and sizes must be given");
  const auto& x = ctx.input_dims(0);
  std::vector<int64_t> out;
  if (with_sizes) {
    std::optional<std::vector<int64_t>> sizes;
    RETURN_IF_ERROR(read_const_ints(ctx, sizes_index, "sizes", sizes));
    if (sizes->size() != x.size()) {
      return ctx.fail("sizes [{}] has {} values for {}", fmt::join(*sizes, ","), sizes->size(),
                      input_text(ctx, 0));
    }
    out = *sizes;
  } else {
    std::optional<std::vector<double>> scales;
    RETURN_IF_ERROR(read_const_floats(ctx, scales_index, "scales", scales));
    if (scales->size() != x.size()) {
      return ctx.fail("scales [{}] has {} values for {}", fmt::join(*scales, ","), scales->size(),
                      input_text(ctx, 0));
    }
    for (size_t d = 0; d < x.size(); ++d) {
      double scaled = std::floor(static_cast<double>(x[d]) * (*scales)[d]);
      if (!((*scales)[d] > 0) || !(scaled <= static_cast<double>(kMaxElements))) {
        return ctx.fail("scale {} for dim {} is not positive or overflows", (*scales)[d], d);
      }
      out.push_back(static_cast<int64_t>(scaled));
    }
  }
  return set_output_checked(ctx, 0, ctx.input_dtype(0), std::move(out));
}

// Nearest copies; linear and cubic take one multiply-add per interpolation tap (2^k and 4^k
// taps for k resized axes); computing the weights is not counted.
double resize_flops(const Graph& g, const Node& n) {
  std::string mode = n.attr_string("mode", "nearest");
  if (mode == "nearest") return 0.0;
  const auto& x = input_dims_of(g, n, 0);
  const auto& y = output_dims_of(g, n, 0);
  if (x.size() != y.size()) return 0.0;
  double taps = 1;
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] != y[d]) taps *= mode == "linear" ? 2.0 : 4.0;
  }
  return taps == 1 ? 0.0 : 2.0 * taps * output_elements(g, n);
}

Status infer_constant(InferenceContext& ctx) {
  RETURN_IF_ERROR(check_arity(ctx, 0, 0, 1, 1));
  const auto& attrs = ctx.node().attrs;
  if (attrs.size() != 1) {
    return ctx.fail("expects exactly one value attribute, got {}", attrs.size());
  }
  const std::string& name = attrs.begin()->first;
  const Attribute& a = attrs.begin()->second;
  using Kind = Attribute::Kind;
  auto expect = [&](Kind kind) -> Status {
    if (a.kind() == kind) return Status::ok();
    return ctx.fail("attribute '{}' must be {}, got {}", name, attribute_kind_name(kind),
                    attribute_kind_name(a.kind()));
  };
  if (name == "value") {
    RETURN_IF_ERROR(expect(Kind::kTensor));
    if (!a.tensor()) return ctx.fail("attribute 'value' holds no tensor");
    return set_output_checked(ctx, 0, a.tensor()->dtype(), a.tensor()->dims());
  }
  if (name == "value_float") {
    RETURN_IF_ERROR(expect(Kind::kFloat));
    return set_output_checked(ctx, 0, DType::kFloat32, {});
  }
  if (name == "value_floats") {
    RETURN_IF_ERROR(expect(Kind::kFloats));
    return set_output_checked(ctx, 0, DType::kFloat32, {static_cast<int64_t>(a.floats().size())});
  }
  if (name == "value_int") {
    RETURN_IF_ERROR(expect(Kind::kInt));
    return set_output_checked(ctx, 0, DType::kInt64, {});
  }
  if (name == "value_ints") {
    RETURN_IF_ERROR(expect(Kind::kInts));
    return set_output_checked(ctx, 0, DType::kInt64, {static_cast<int64_t>(a.ints().size())});
  }
  if (name == "value_string") {
    RETURN_IF_ERROR(expect(Kind::kString));
    return set_output_checked(ctx, 0, DType::kString, {});
  }
  if (name == "value_strings") {
    RETURN_IF_ERROR(expect(Kind::kStrings));
    return set_output_checked(ctx, 0, DType::kString, {static_cast<int64_t>(a.strings().size())});
  }
  return ctx.fail("attribute '{}' is not a supported Constant value", name);
}

// Transpose: loops over the input's dims; the output reads them permuted.
std::optional<IterationSpace> transpose_space(const Graph& g, const Node& n) {
  const std::vector<int64_t>& x = g.value(n.inputs[0]).shape.dims;
  const int64_t rank = static_cast<int64_t>(x.size());
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  IterationSpace space;
  std::vector<int> in_map, out_map;
  for (int64_t d = 0; d < rank; ++d) {
    space.loops.push_back({fmt::format("d{}", d), x[d], LoopKind::kParallel, true});
    in_map.push_back(static_cast<int>(d));
    out_map.push_back(static_cast<int>(perm[d]));
  }
  space.inputs = {in_map};
  space.outputs = {out_map};
  return space;
}

// Reshape, Flatten, Squeeze, Unsqueeze: the dims split into groups of equal products; within a
// group the major input dim and the major output dim share a loop (splitting the flat range
// into contiguous pieces splits both), the others are read whole. Size-1 dims index nothing.
std::optional<IterationSpace> reshape_space(const Graph& g, const Node& n) {
  const std::vector<int64_t>& in = g.value(n.inputs[0]).shape.dims;
  const std::vector<int64_t>& out = g.value(n.outputs[0]).shape.dims;
  IterationSpace space;
  std::vector<int> in_map(in.size(), -1), out_map(out.size(), -1);
  size_t i = 0, o = 0;
  while (i < in.size() || o < out.size()) {
    while (i < in.size() && in[i] == 1) ++i;
    while (o < out.size() && out[o] == 1) ++o;
    if (i >= in.size() || o >= out.size()) break;
    const size_t group_in = i, group_out = o;
    int64_t p_in = in[i++], p_out = out[o++];
    while (p_in != p_out) {
      if (p_in < p_out) {
        if (i >= in.size()) return std::nullopt;
        p_in *= in[i++];
      } else {
        if (o >= out.size()) return std::nullopt;
        p_out *= out[o++];
      }
    }
    const int loop = static_cast<int>(space.loops.size());
    space.loops.push_back({fmt::format("g{}", loop), in[group_in], LoopKind::kParallel, true});
    in_map[group_in] = loop;
    out_map[group_out] = loop;
  }
  space.inputs = {in_map};
  for (size_t k = 1; k < n.inputs.size(); ++k)
    space.inputs.emplace_back(n.input(k) == kNoId ? 0 : 1, -1);
  space.outputs = {out_map};
  return space;
}

// Gather(data, indices, axis): the output is data[:axis] + indices + data[axis+1:]. The
// gathered dim is a reduction loop: split (a vocabulary over tp), each shard gathers the
// indices in its range, zero elsewhere, and the shards' outputs sum to the result.
std::optional<IterationSpace> gather_space(const Graph& g, const Node& n) {
  const std::vector<int64_t>& data = g.value(n.inputs[0]).shape.dims;
  const std::vector<int64_t>& indices = g.value(n.inputs[1]).shape.dims;
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(data.size());
  IterationSpace space;
  std::vector<int> data_map(data.size()), index_map, out_map;
  for (int64_t d = 0; d < axis; ++d) {
    data_map[d] = static_cast<int>(space.loops.size());
    out_map.push_back(data_map[d]);
    space.loops.push_back({fmt::format("d{}", d), data[d], LoopKind::kParallel, true});
  }
  for (size_t d = 0; d < indices.size(); ++d) {
    index_map.push_back(static_cast<int>(space.loops.size()));
    out_map.push_back(index_map.back());
    space.loops.push_back({fmt::format("i{}", d), indices[d], LoopKind::kParallel, true});
  }
  for (size_t d = axis + 1; d < data.size(); ++d) {
    data_map[d] = static_cast<int>(space.loops.size());
    out_map.push_back(data_map[d]);
    space.loops.push_back({fmt::format("d{}", d), data[d], LoopKind::kParallel, true});
  }
  data_map[axis] = static_cast<int>(space.loops.size());
  space.loops.push_back({"v", data[axis], LoopKind::kReduction, true});
  space.inputs = {data_map, index_map};
  space.outputs = {out_map};
  return space;
}

// Concat and Split: loops over the larger side's dims with the axis read whole.
std::optional<IterationSpace> axis_whole_space(const Graph& g, const Node& n) {
  const bool concat = n.op_type == "Concat";
  const ValueId whole = concat ? n.outputs[0] : n.inputs[0];
  const int64_t rank = g.value(whole).shape.rank();
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  const std::vector<int64_t>& dims = g.value(whole).shape.dims;
  IterationSpace space;
  std::vector<int> map;
  for (int64_t d = 0; d < rank; ++d) {
    space.loops.push_back({fmt::format("d{}", d), dims[d], LoopKind::kParallel, d != axis});
    map.push_back(d == axis ? -1 : static_cast<int>(d));
  }
  if (concat) {
    for (size_t k = 0; k < n.inputs.size(); ++k) space.inputs.push_back(map);
    space.outputs = {map};
  } else {
    space.inputs = {map};
    for (size_t k = 1; k < n.inputs.size(); ++k)
      space.inputs.emplace_back(n.input(k) == kNoId ? 0 : 1, -1);
    for (size_t k = 0; k < n.outputs.size(); ++k) space.outputs.push_back(map);
  }
  return space;
}

// Expand: a loop per output dim; the input's dims that are not broadcast follow their output
// dim, the broadcast ones (and the target shape) are read whole. split() writes the target
// shape of a device's block, as it does a Reshape's.
std::optional<IterationSpace> expand_space(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2 || n.inputs[0] == kNoId || n.outputs.size() != 1 ||
      n.outputs[0] == kNoId)
    return std::nullopt;
  const std::vector<int64_t>& x = g.value(n.inputs[0]).shape.dims;
  const std::vector<int64_t>& y = g.value(n.outputs[0]).shape.dims;
  if (y.size() < x.size()) return std::nullopt;
  const size_t lead = y.size() - x.size();
  IterationSpace space;
  std::vector<int> in_map, out_map;
  for (size_t d = 0; d < y.size(); ++d) {
    space.loops.push_back({fmt::format("d{}", d), y[d], LoopKind::kParallel, true});
    out_map.push_back(static_cast<int>(d));
    if (d >= lead) in_map.push_back(x[d - lead] == y[d] ? static_cast<int>(d) : -1);
  }
  space.inputs = {in_map,
                  std::vector<int>(static_cast<size_t>(g.value(n.inputs[1]).shape.rank()), -1)};
  space.outputs = {out_map};
  return space;
}

// Slice: every dim it does not slice is a loop the output shares with its data input (a
// device slices its block); the sliced dims stay whole. Starts, ends, axes and steps are read
// whole. Axes that are not constants leave the node unsplittable.
// A Slice's or Pad's space: every dim parallel, those it cuts or pads (`changed`, or whose size
// changes) read whole; its index inputs read whole.
IterationSpace window_space(const Graph& g, const Node& n, const std::vector<int64_t>& x,
                            const std::vector<int64_t>& y, const std::vector<bool>& changed) {
  IterationSpace space;
  std::vector<int> map;
  for (size_t d = 0; d < x.size(); ++d) {
    const bool whole = changed[d] || x[d] != y[d];
    space.loops.push_back({fmt::format("d{}", d), x[d], LoopKind::kParallel, !whole});
    map.push_back(whole ? -1 : static_cast<int>(d));
  }
  space.inputs = {map};
  for (size_t k = 1; k < n.inputs.size(); ++k)
    space.inputs.emplace_back(n.input(k) == kNoId ? 0 : g.value(n.inputs[k]).shape.rank(), -1);
  space.outputs = {map};
  return space;
}

std::optional<IterationSpace> slice_space(const Graph& g, const Node& n) {
  if (n.inputs.empty() || n.inputs[0] == kNoId || n.outputs.size() != 1 || n.outputs[0] == kNoId)
    return std::nullopt;
  const std::vector<int64_t>& x = g.value(n.inputs[0]).shape.dims;
  const std::vector<int64_t>& y = g.value(n.outputs[0]).shape.dims;
  const auto rank = static_cast<int64_t>(x.size());
  if (y.size() != x.size()) return std::nullopt;
  std::vector<int64_t> axes;
  if (g.opset(n.domain) >= 10) {
    if (n.input(3) != kNoId) {
      const TensorPtr& data = g.value(n.inputs[3]).data;
      if (!data) return std::nullopt;
      axes = data->to_int64_vector();
    } else if (n.input(1) != kNoId && g.value(n.inputs[1]).shape.rank() == 1) {
      for (int64_t a = 0; a < g.value(n.inputs[1]).shape.dims[0]; ++a) axes.push_back(a);
    } else {
      return std::nullopt;
    }
  } else {
    axes = n.attr_ints("axes");
    if (axes.empty()) {
      for (size_t a = 0; a < n.attr_ints("starts").size(); ++a)
        axes.push_back(static_cast<int64_t>(a));
    }
  }
  std::vector<bool> sliced(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;
    sliced[a < 0 ? a + rank : a] = true;
  }
  return window_space(g, n, x, y, sliced);
}

// Pad: every dim it leaves unpadded is a loop the output shares with its data input (a device
// pads its block); padded dims stay whole. Pads (and axes) must be constants.
std::optional<IterationSpace> pad_space(const Graph& g, const Node& n) {
  if (n.inputs.empty() || n.inputs[0] == kNoId || n.outputs.size() != 1 || n.outputs[0] == kNoId)
    return std::nullopt;
  const std::vector<int64_t>& x = g.value(n.inputs[0]).shape.dims;
  const std::vector<int64_t>& y = g.value(n.outputs[0]).shape.dims;
  const auto rank = static_cast<int64_t>(x.size());
  if (y.size() != x.size()) return std::nullopt;
  std::vector<int64_t> pads, axes;
  if (g.opset(n.domain) >= 11) {
    if (n.input(1) == kNoId || !g.value(n.inputs[1]).data) return std::nullopt;
    pads = g.value(n.inputs[1]).data->to_int64_vector();
    if (n.input(3) != kNoId) {
      if (!g.value(n.inputs[3]).data) return std::nullopt;
      axes = g.value(n.inputs[3]).data->to_int64_vector();
    }
  } else {
    pads = n.attr_ints("pads");
  }
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size()) return std::nullopt;
  std::vector<bool> padded(static_cast<size_t>(rank), false);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k];
    if (a < -rank || a >= rank) return std::nullopt;
    if (pads[k] != 0 || pads[k + axes.size()] != 0) padded[a < 0 ? a + rank : a] = true;
  }
  return window_space(g, n, x, y, padded);
}

// ScatterND: the slice dims its updates carry are parallel loops over the output's trailing
// dims (a device scatters its block of every row). Its update rows are reduction loops, split
// only when the scatter accumulates into zeros (a Gather's gradient: each device scatters its
// rows and the output is a partial sum); into other data, or replacing, they stay whole.
std::optional<IterationSpace> scatter_nd_space(const Graph& g, const Node& n) {
  if (n.inputs.size() != 3 || n.outputs.size() != 1 || n.inputs[0] == kNoId ||
      n.inputs[1] == kNoId || n.inputs[2] == kNoId)
    return std::nullopt;
  // Rows split only where their partial results sum into zeros; the slice dims split always
  // (every device writes its block of each row, in the same order).
  const bool rows_split =
      n.attr_string("reduction", "none") == "add" && is_zero_fill(g, n.inputs[0]);
  const std::vector<int64_t>& data = g.value(n.inputs[0]).shape.dims;
  const std::vector<int64_t>& indices = g.value(n.inputs[1]).shape.dims;
  if (indices.empty()) return std::nullopt;
  const auto rows = static_cast<int>(indices.size()) - 1;
  const int64_t k = indices.back();
  if (k < 1 || k > static_cast<int64_t>(data.size())) return std::nullopt;
  IterationSpace space;
  std::vector<int> index_map, update_map, data_map(data.size(), -1);
  for (int r = 0; r < rows; ++r) {
    space.loops.push_back({fmt::format("r{}", r), indices[r], LoopKind::kReduction, rows_split});
    index_map.push_back(r);
    update_map.push_back(r);
  }
  index_map.push_back(-1);
  for (size_t d = static_cast<size_t>(k); d < data.size(); ++d) {
    const int loop = static_cast<int>(space.loops.size());
    space.loops.push_back({fmt::format("d{}", d), data[d], LoopKind::kParallel, true});
    update_map.push_back(loop);
    data_map[d] = loop;
  }
  space.inputs = {data_map, index_map, update_map};
  space.outputs = {data_map};
  return space;
}

// A data-movement op; its config inputs are shape inputs too unless `shape_inputs` says which.
void add_data_op(OpRegistry& registry, const char* op, ShapeFn infer,
                 std::vector<int> config_inputs = {},
                 std::optional<std::vector<int>> shape_inputs = std::nullopt,
                 IterationSpaceFn space = nullptr) {
  OpDef def = make_op(op, std::move(infer), zero_flops, "0 (moves data only)", config_inputs);
  registry.add(with_semantics(
      with_shape_inputs(std::move(def), shape_inputs.value_or(config_inputs)), std::move(space)));
}

}  // namespace

void register_shape_ops(OpRegistry& registry) {
  add_data_op(registry, "Flatten", infer_flatten, {}, std::nullopt, reshape_space);
  add_data_op(registry, "Reshape", infer_reshape, {1}, std::nullopt, reshape_space);
  add_data_op(registry, "Transpose", infer_transpose, {}, std::nullopt, transpose_space);
  add_data_op(registry, "Concat", infer_concat, {}, std::nullopt, axis_whole_space);
  add_data_op(registry, "Split", infer_split, {1}, std::nullopt, axis_whole_space);
  add_data_op(registry, "Slice", infer_slice, {1, 2, 3, 4}, std::nullopt, slice_space);
  add_data_op(registry, "Gather", infer_gather, {1}, std::vector<int>{}, gather_space);
  add_data_op(registry, "Unsqueeze", infer_unsqueeze, {1}, std::nullopt, reshape_space);
  add_data_op(registry, "Squeeze", infer_squeeze, {1}, std::nullopt, reshape_space);
  add_data_op(registry, "Expand", infer_expand, {1}, std::nullopt, expand_space);
  add_data_op(registry, "Shape", infer_shape);
  add_data_op(registry, "Tile", infer_tile, {1});
  add_data_op(registry, "Pad", infer_pad, {1, 2, 3}, std::vector<int>{1, 3}, pad_space);
  add_data_op(registry, "Constant", infer_constant);
  add_data_op(registry, "ConstantOfShape", infer_constant_of_shape, {0});
  add_data_op(registry, "Range", infer_range, {0, 1, 2});
  add_data_op(registry, "Size", infer_size);
  add_data_op(registry, "GatherElements", infer_gather_elements, {1}, std::vector<int>{});
  add_data_op(registry, "GatherND", infer_gather_nd, {1}, std::vector<int>{});
  registry.add(make_op("ScatterElements", infer_scatter_elements, scatter_flops,
                       "0, or 1 per update element with a reduction", {1}));
  registry.add(with_semantics(make_op("ScatterND", infer_scatter_nd, scatter_flops,
                                      "0, or 1 per update element with a reduction", {1}),
                              scatter_nd_space));
  registry.add(
      with_shape_inputs(make_op("Resize", infer_resize, resize_flops,
                                "nearest 0; linear / cubic 2 per tap per output element (2^k / 4^k "
                                "taps over the k resized axes)",
                                {1, 2, 3}),
                        {2, 3}));
}

}  // namespace autopar
