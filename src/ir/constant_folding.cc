// Constant folding of shape arithmetic: a small evaluator over constant tensors.
#include "autopar/ir/constant_folding.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <unordered_map>

namespace autopar {
namespace {

struct FoldContext {
  const Graph& graph;
  const Node& node;

  int64_t opset() const { return graph.opset(node.domain); }
  bool has(size_t i) const { return node.input(i) != kNoId; }
  const Tensor& in(size_t i) const { return *graph.value(node.inputs[i]).data; }
  const Value& value(size_t i) const { return graph.value(node.inputs[i]); }

  template <typename... Args>
  Status fail(fmt::format_string<Args...> format, Args&&... args) const {
    return Status::error(fmt::format("node '{}' ({}): {}", node.name, node.op_type,
                                     fmt::format(format, std::forward<Args>(args)...)));
  }
};

using Outputs = std::vector<Tensor>;
using FoldFn = std::function<StatusOr<Outputs>(const FoldContext&)>;

std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  return strides;
}

// Linear index into a tensor of `dims` broadcast to `out_dims`, for output multi-index `index`.
int64_t broadcast_offset(const std::vector<int64_t>& dims, const std::vector<int64_t>& out_dims,
                         const std::vector<int64_t>& index) {
  const size_t shift = out_dims.size() - dims.size();
  int64_t offset = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    offset = offset * dims[d] + (dims[d] == 1 ? 0 : index[d + shift]);
  }
  return offset;
}

// Advances a row-major multi-index; false after the last element.
bool next_index(std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    if (++index[d] < dims[d]) return true;
    index[d] = 0;
  }
  return false;
}

Status check_size(const FoldContext& c, const std::vector<int64_t>& dims) {
  int64_t n = element_count(dims);
  if (n < 0) return c.fail("negative dim in a folded result");
  if (n > kMaxFoldElements) return c.fail("folded result of {} elements is too large", n);
  return Status::ok();
}

std::optional<std::vector<int64_t>> ints_of(const FoldContext& c, size_t i) {
  if (!c.has(i)) return std::nullopt;
  return c.in(i).to_int64_vector();
}

// Axes from the attribute (older opsets) or input `input_index` (newer ones).
std::optional<std::vector<int64_t>> axes_of(const FoldContext& c, size_t input_index) {
  if (const Attribute* a = c.node.attr("axes"); a && a->kind() == Attribute::Kind::kInts) {
    return a->ints();
  }
  return ints_of(c, input_index);
}

Status normalize(const FoldContext& c, int64_t rank, int64_t& axis) {
  if (axis < -rank || axis >= rank)
    return c.fail("axis {} is out of range for rank {}", axis, rank);
  if (axis < 0) axis += rank;
  return Status::ok();
}

// ---- elementwise ----------------------------------------------------------------

using Binary = std::function<double(double, double)>;
using BinaryInt = std::function<int64_t(int64_t, int64_t)>;

StatusOr<Tensor> broadcast_apply(
    const FoldContext& c, std::vector<const Tensor*> inputs, DType out_dtype,
    const std::function<void(Tensor&, int64_t, const std::vector<int64_t>&)>& element) {
  std::vector<int64_t> out_dims = inputs[0]->dims();
  for (size_t i = 1; i < inputs.size(); ++i) {
    auto joined = broadcast_shapes(out_dims, inputs[i]->dims());
    if (!joined) return c.fail("inputs do not broadcast");
    out_dims = *joined;
  }
  RETURN_IF_ERROR(check_size(c, out_dims));
  Tensor out(out_dtype, out_dims);
  if (out.num_elements() == 0) return out;
  std::vector<int64_t> index(out_dims.size(), 0);
  std::vector<int64_t> offsets(inputs.size());
  int64_t linear = 0;
  do {
    for (size_t i = 0; i < inputs.size(); ++i) {
      offsets[i] = broadcast_offset(inputs[i]->dims(), out_dims, index);
    }
    element(out, linear++, offsets);
  } while (next_index(index, out_dims));
  return out;
}

FoldFn binary(Binary on_floats, BinaryInt on_ints) {
  return [=](const FoldContext& c) -> StatusOr<Outputs> {
    const Tensor& a = c.in(0);
    const Tensor& b = c.in(1);
    if (a.dtype() != b.dtype()) return c.fail("inputs have different dtypes");
    const bool floating = is_floating(a.dtype());
    ASSIGN_OR_RETURN(
        Tensor out,
        broadcast_apply(c, {&a, &b}, a.dtype(),
                        [&](Tensor& o, int64_t i, const std::vector<int64_t>& at) {
                          if (floating) {
                            o.set_from_double(i, on_floats(a.float_at(at[0]), b.float_at(at[1])));
                          } else {
                            o.set_from_int(i, on_ints(a.int_at(at[0]), b.int_at(at[1])));
                          }
                        }));
    return Outputs{std::move(out)};
  };
}

FoldFn compare(std::function<bool(double, double)> test) {
  return [=](const FoldContext& c) -> StatusOr<Outputs> {
    const Tensor& a = c.in(0);
    const Tensor& b = c.in(1);
    ASSIGN_OR_RETURN(
        Tensor out, broadcast_apply(c, {&a, &b}, DType::kBool,
                                    [&](Tensor& o, int64_t i, const std::vector<int64_t>& at) {
                                      o.set_from_int(i, test(a.float_at(at[0]), b.float_at(at[1])));
                                    }));
    return Outputs{std::move(out)};
  };
}

FoldFn unary(std::function<double(double)> fn) {
  return [=](const FoldContext& c) -> StatusOr<Outputs> {
    const Tensor& a = c.in(0);
    Tensor out(a.dtype(), a.dims());
    for (int64_t i = 0; i < a.num_elements(); ++i) {
      if (is_floating(a.dtype())) {
        out.set_from_double(i, fn(a.float_at(i)));
      } else {
        out.set_from_double(i, fn(static_cast<double>(a.int_at(i))));
      }
    }
    return Outputs{std::move(out)};
  };
}

int64_t int_div(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (a == INT64_MIN && b == -1) return INT64_MIN;
  return a / b;
}

// Integer arithmetic wraps on overflow, as the runtime's kernels (and numpy) do.
int64_t wrap_add(int64_t a, int64_t b) {
  int64_t r;
  __builtin_add_overflow(a, b, &r);
  return r;
}
int64_t wrap_sub(int64_t a, int64_t b) {
  int64_t r;
  __builtin_sub_overflow(a, b, &r);
  return r;
}
int64_t wrap_mul(int64_t a, int64_t b) {
  int64_t r;
  __builtin_mul_overflow(a, b, &r);
  return r;
}

StatusOr<Outputs> fold_where(const FoldContext& c) {
  const Tensor& cond = c.in(0);
  const Tensor& x = c.in(1);
  const Tensor& y = c.in(2);
  if (x.dtype() != y.dtype()) return c.fail("X and Y have different dtypes");
  ASSIGN_OR_RETURN(Tensor out,
                   broadcast_apply(c, {&cond, &x, &y}, x.dtype(),
                                   [&](Tensor& o, int64_t i, const std::vector<int64_t>& at) {
                                     const Tensor& pick = cond.int_at(at[0]) ? x : y;
                                     const int64_t j = cond.int_at(at[0]) ? at[1] : at[2];
                                     if (is_floating(o.dtype())) {
                                       o.set_from_double(i, pick.float_at(j));
                                     } else {
                                       o.set_from_int(i, pick.int_at(j));
                                     }
                                   }));
  return Outputs{std::move(out)};
}

StatusOr<Outputs> fold_min_max(const FoldContext& c, bool take_max) {
  if (c.node.inputs.empty()) return c.fail("needs at least 1 input");
  Tensor acc = c.in(0);
  for (size_t k = 1; k < c.node.inputs.size(); ++k) {
    const Tensor& b = c.in(k);
    if (b.dtype() != acc.dtype()) return c.fail("inputs have different dtypes");
    ASSIGN_OR_RETURN(
        acc, broadcast_apply(c, {&acc, &b}, acc.dtype(),
                             [&](Tensor& o, int64_t i, const std::vector<int64_t>& at) {
                               if (is_floating(o.dtype())) {
                                 double u = acc.float_at(at[0]), v = b.float_at(at[1]);
                                 o.set_from_double(i, take_max ? std::max(u, v) : std::min(u, v));
                               } else {
                                 int64_t u = acc.int_at(at[0]), v = b.int_at(at[1]);
                                 o.set_from_int(i, take_max ? std::max(u, v) : std::min(u, v));
                               }
                             }));
  }
  return Outputs{std::move(acc)};
}

// Copies element `from` of `src` into element `to` of `dst` (same dtype).
void copy_element(const Tensor& src, int64_t from, Tensor& dst, int64_t to) {
  const int64_t size = dtype_size(src.dtype());
  std::memcpy(dst.mutable_bytes().data() + to * size, src.bytes().data() + from * size, size);
}

// ---- shape ops -------------------------------------------------------------------

StatusOr<Outputs> fold_shape(const FoldContext& c) {
  const std::vector<int64_t>& dims = c.value(0).shape.dims;
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t start = c.node.attr_int("start", 0);
  int64_t end = c.node.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  std::vector<int64_t> slice;
  for (int64_t i = start; i < end; ++i) slice.push_back(dims[i]);
  return Outputs{Tensor::vector_int64(slice)};
}

StatusOr<Outputs> fold_size(const FoldContext& c) {
  return Outputs{Tensor::scalar_int64(c.value(0).shape.num_elements())};
}

StatusOr<Outputs> fold_constant(const FoldContext& c) {
  for (const auto& [name, a] : c.node.attrs) {
    if (name == "value" && a.kind() == Attribute::Kind::kTensor && a.tensor()) {
      return Outputs{*a.tensor()};
    }
    if (name == "value_float" && a.kind() == Attribute::Kind::kFloat) {
      const float v = a.f();
      return Outputs{Tensor::from_float({}, std::span(&v, 1))};
    }
    if (name == "value_floats" && a.kind() == Attribute::Kind::kFloats) {
      return Outputs{Tensor::from_float({static_cast<int64_t>(a.floats().size())}, a.floats())};
    }
    if (name == "value_int" && a.kind() == Attribute::Kind::kInt) {
      return Outputs{Tensor::scalar_int64(a.i())};
    }
    if (name == "value_ints" && a.kind() == Attribute::Kind::kInts) {
      return Outputs{Tensor::vector_int64(a.ints())};
    }
  }
  return c.fail("has no numeric value attribute");
}

StatusOr<Outputs> fold_constant_of_shape(const FoldContext& c) {
  std::vector<int64_t> dims = c.in(0).to_int64_vector();
  RETURN_IF_ERROR(check_size(c, dims));
  const Attribute* value = c.node.attr("value");
  if (!value || value->kind() != Attribute::Kind::kTensor || !value->tensor()) {
    return Outputs{Tensor(DType::kFloat32, dims)};
  }
  const Tensor& fill = *value->tensor();
  if (fill.num_elements() != 1) return c.fail("attribute 'value' must hold one element");
  Tensor out(fill.dtype(), dims);
  for (int64_t i = 0; i < out.num_elements(); ++i) copy_element(fill, 0, out, i);
  return Outputs{std::move(out)};
}

StatusOr<Outputs> fold_range(const FoldContext& c) {
  const Tensor& start = c.in(0);
  if (start.num_elements() != 1 || c.in(1).num_elements() != 1 || c.in(2).num_elements() != 1) {
    return c.fail("start, limit and delta must be scalars");
  }
  const double s = start.float_at(0), limit = c.in(1).float_at(0), delta = c.in(2).float_at(0);
  if (delta == 0) return c.fail("delta is zero");
  const double count = std::max(0.0, std::ceil((limit - s) / delta));
  if (!(count <= static_cast<double>(kMaxFoldElements))) {
    return c.fail("range of {} elements is too large", count);
  }
  Tensor out(start.dtype(), {static_cast<int64_t>(count)});
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    if (is_floating(start.dtype())) {
      out.set_from_double(i, s + static_cast<double>(i) * delta);
    } else {
      out.set_from_int(i, start.int_at(0) + i * c.in(2).int_at(0));
    }
  }
  return Outputs{std::move(out)};
}

StatusOr<Outputs> fold_cast(const FoldContext& c) {
  const int64_t to = c.node.attr_int("to", 0);
  auto dtype = dtype_from_onnx(static_cast<int32_t>(to));
  if (!dtype || *dtype == DType::kString || *dtype == DType::kUndefined) {
    return c.fail("cannot fold a cast to ONNX type {}", to);
  }
  const Tensor& a = c.in(0);
  Tensor out(*dtype, a.dims());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    if (is_floating(a.dtype())) {
      out.set_from_double(i, a.float_at(i));
    } else {
      out.set_from_int(i, a.int_at(i));
    }
  }
  return Outputs{std::move(out)};
}

StatusOr<Outputs> fold_reshape(const FoldContext& c) {
  const Tensor& data = c.in(0);
  std::vector<int64_t> shape = c.in(1).to_int64_vector();
  const bool allow_zero = c.node.attr_int("allowzero", 0) != 0;
  int64_t infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= data.dims().size())
        return c.fail("shape copies dim {} of a rank-{} input", i, data.rank());
      shape[i] = data.dims()[i];
    }
    if (shape[i] == -1) {
      if (infer_at >= 0) return c.fail("shape has more than one -1");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    if (shape[i] < 0) return c.fail("shape has negative dim {}", shape[i]);
    known *= shape[i];
  }
  if (infer_at >= 0) {
    if (known == 0 || data.num_elements() % known) return c.fail("cannot infer the -1 dim");
    shape[infer_at] = data.num_elements() / known;
  }
  if (element_count(shape) != data.num_elements()) {
    return c.fail("cannot reshape {} elements to [{}]", data.num_elements(), fmt::join(shape, ","));
  }
  return Outputs{Tensor(data.dtype(), shape, data.bytes())};
}

StatusOr<Outputs> fold_unsqueeze(const FoldContext& c) {
  const Tensor& data = c.in(0);
  auto axes = axes_of(c, 1);
  if (!axes) return c.fail("has no axes");
  const int64_t rank = data.rank() + static_cast<int64_t>(axes->size());
  std::vector<bool> inserted(rank, false);
  for (int64_t axis : *axes) {
    RETURN_IF_ERROR(normalize(c, rank, axis));
    if (inserted[axis]) return c.fail("axis {} is repeated", axis);
    inserted[axis] = true;
  }
  std::vector<int64_t> dims;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) dims.push_back(inserted[d] ? 1 : data.dims()[next++]);
  return Outputs{Tensor(data.dtype(), dims, data.bytes())};
}

StatusOr<Outputs> fold_squeeze(const FoldContext& c) {
  const Tensor& data = c.in(0);
  auto axes = axes_of(c, 1);
  std::vector<bool> removed(data.rank(), false);
  if (axes) {
    for (int64_t axis : *axes) {
      RETURN_IF_ERROR(normalize(c, data.rank(), axis));
      if (data.dims()[axis] != 1)
        return c.fail("cannot squeeze dim {} of size {}", axis, data.dims()[axis]);
      removed[axis] = true;
    }
  } else {
    for (int64_t d = 0; d < data.rank(); ++d) removed[d] = data.dims()[d] == 1;
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < data.rank(); ++d) {
    if (!removed[d]) dims.push_back(data.dims()[d]);
  }
  return Outputs{Tensor(data.dtype(), dims, data.bytes())};
}

StatusOr<Outputs> fold_concat(const FoldContext& c) {
  if (c.node.inputs.empty()) return c.fail("needs at least 1 input");
  const Tensor& first = c.in(0);
  int64_t axis = c.node.attr_int("axis", 0);
  RETURN_IF_ERROR(normalize(c, std::max<int64_t>(first.rank(), 1), axis));
  std::vector<int64_t> dims = first.dims();
  if (dims.empty()) return c.fail("cannot concatenate scalars");
  dims[axis] = 0;
  for (size_t k = 0; k < c.node.inputs.size(); ++k) {
    const Tensor& t = c.in(k);
    if (t.dtype() != first.dtype() || t.rank() != first.rank()) {
      return c.fail("input {} does not match input 0 in dtype or rank", k);
    }
    for (int64_t d = 0; d < t.rank(); ++d) {
      if (d != axis && t.dims()[d] != first.dims()[d])
        return c.fail("input {} differs in dim {}", k, d);
    }
    dims[axis] += t.dims()[axis];
  }
  RETURN_IF_ERROR(check_size(c, dims));
  // Each input contributes `rows` blocks of dims[axis..] elements, interleaved.
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= dims[d];
  int64_t inner = 1;
  for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
  Tensor out(first.dtype(), dims);
  const int64_t size = dtype_size(first.dtype());
  int64_t offset = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t k = 0; k < c.node.inputs.size(); ++k) {
      const Tensor& t = c.in(k);
      const int64_t block = t.dims()[axis] * inner * size;
      if (block == 0) continue;
      std::memcpy(out.mutable_bytes().data() + offset, t.bytes().data() + r * block, block);
      offset += block;
    }
  }
  return Outputs{std::move(out)};
}

StatusOr<Outputs> fold_gather(const FoldContext& c) {
  const Tensor& data = c.in(0);
  const Tensor& indices = c.in(1);
  if (data.rank() == 0) return c.fail("data is a scalar");
  int64_t axis = c.node.attr_int("axis", 0);
  RETURN_IF_ERROR(normalize(c, data.rank(), axis));
  std::vector<int64_t> dims(data.dims().begin(), data.dims().begin() + axis);
  dims.insert(dims.end(), indices.dims().begin(), indices.dims().end());
  dims.insert(dims.end(), data.dims().begin() + axis + 1, data.dims().end());
  RETURN_IF_ERROR(check_size(c, dims));
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= data.dims()[d];
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < data.rank(); ++d) inner *= data.dims()[d];
  const int64_t extent = data.dims()[axis];
  Tensor out(data.dtype(), dims);
  int64_t o = 0;
  for (int64_t r = 0; r < outer; ++r) {
    for (int64_t k = 0; k < indices.num_elements(); ++k) {
      int64_t index = indices.int_at(k);
      if (index < -extent || index >= extent) {
        return c.fail("index {} is out of range for a dim of {}", index, extent);
      }
      if (index < 0) index += extent;
      for (int64_t e = 0; e < inner; ++e)
        copy_element(data, (r * extent + index) * inner + e, out, o++);
    }
  }
  return Outputs{std::move(out)};
}

StatusOr<Outputs> fold_slice(const FoldContext& c) {
  const Tensor& data = c.in(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.node.attr_ints("starts");
    ends = c.node.attr_ints("ends");
    axes = c.node.attr_ints("axes");
  } else {
    starts = c.in(1).to_int64_vector();
    ends = c.in(2).to_int64_vector();
    if (c.has(3)) axes = c.in(3).to_int64_vector();
    if (c.has(4)) steps = c.in(4).to_int64_vector();
  }
  if (ends.size() != starts.size()) return c.fail("starts and ends differ in length");
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) {
    return c.fail("starts, axes and steps differ in length");
  }
  const int64_t rank = data.rank();
  std::vector<int64_t> begin(rank, 0), step(rank, 1), dims = data.dims();
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = axes[i];
    RETURN_IF_ERROR(normalize(c, rank, axis));
    const int64_t extent = data.dims()[axis];
    const int64_t s = steps[i];
    if (s == 0) return c.fail("step is zero");
    auto clamp_index = [&](int64_t v) {
      if (v < 0) v = v < -extent ? -1 : v + extent;
      return s > 0 ? std::clamp<int64_t>(v, 0, extent) : std::clamp<int64_t>(v, -1, extent - 1);
    };
    const int64_t b = clamp_index(starts[i]);
    const int64_t e = clamp_index(ends[i]);
    const int64_t count =
        s > 0 ? (e > b ? (e - b + s - 1) / s : 0) : (b > e ? (b - e - s - 1) / -s : 0);
    begin[axis] = b;
    step[axis] = s;
    dims[axis] = count;
  }
  Tensor out(data.dtype(), dims);
  if (out.num_elements() == 0) return Outputs{std::move(out)};
  const std::vector<int64_t> strides = strides_of(data.dims());
  std::vector<int64_t> index(rank, 0);
  int64_t o = 0;
  do {
    int64_t from = 0;
    for (int64_t d = 0; d < rank; ++d) from += (begin[d] + index[d] * step[d]) * strides[d];
    copy_element(data, from, out, o++);
  } while (next_index(index, dims));
  return Outputs{std::move(out)};
}

StatusOr<Outputs> fold_expand(const FoldContext& c) {
  const Tensor& data = c.in(0);
  const std::vector<int64_t> shape = c.in(1).to_int64_vector();
  auto dims = broadcast_shapes(data.dims(), shape);
  if (!dims) return c.fail("shape [{}] does not broadcast with the input", fmt::join(shape, ","));
  RETURN_IF_ERROR(check_size(c, *dims));
  Tensor out(data.dtype(), *dims);
  if (out.num_elements() == 0) return Outputs{std::move(out)};
  std::vector<int64_t> index(dims->size(), 0);
  int64_t o = 0;
  do {
    copy_element(data, broadcast_offset(data.dims(), *dims, index), out, o++);
  } while (next_index(index, *dims));
  return Outputs{std::move(out)};
}

StatusOr<Outputs> fold_transpose(const FoldContext& c) {
  const Tensor& data = c.in(0);
  const int64_t rank = data.rank();
  std::vector<int64_t> perm = c.node.attr_ints("perm");
  if (perm.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  if (static_cast<int64_t>(perm.size()) != rank) return c.fail("perm does not match the rank");
  std::vector<int64_t> dims(rank);
  std::vector<bool> seen(rank, false);
  for (int64_t d = 0; d < rank; ++d) {
    if (perm[d] < 0 || perm[d] >= rank || seen[perm[d]]) return c.fail("perm is not a permutation");
    seen[perm[d]] = true;
    dims[d] = data.dims()[perm[d]];
  }
  Tensor out(data.dtype(), dims);
  if (out.num_elements() == 0) return Outputs{std::move(out)};
  const std::vector<int64_t> strides = strides_of(data.dims());
  std::vector<int64_t> index(rank, 0);
  int64_t o = 0;
  do {
    int64_t from = 0;
    for (int64_t d = 0; d < rank; ++d) from += index[d] * strides[perm[d]];
    copy_element(data, from, out, o++);
  } while (next_index(index, dims));
  return Outputs{std::move(out)};
}

StatusOr<Outputs> fold_identity(const FoldContext& c) { return Outputs{c.in(0)}; }

const std::unordered_map<std::string, FoldFn>& fold_table() {
  static const auto* table = new std::unordered_map<std::string, FoldFn>{
      {"Constant", fold_constant},
      {"Shape", fold_shape},
      {"Size", fold_size},
      {"ConstantOfShape", fold_constant_of_shape},
      {"Range", fold_range},
      {"Cast", fold_cast},
      {"Identity", fold_identity},
      {"Reshape", fold_reshape},
      {"Unsqueeze", fold_unsqueeze},
      {"Squeeze", fold_squeeze},
      {"Concat", fold_concat},
      {"Gather", fold_gather},
      {"Slice", fold_slice},
      {"Expand", fold_expand},
      {"Transpose", fold_transpose},
      {"Where", fold_where},
      {"Max", [](const FoldContext& c) { return fold_min_max(c, true); }},
      {"Min", [](const FoldContext& c) { return fold_min_max(c, false); }},
      {"Add", binary(std::plus<double>(), wrap_add)},
      {"Sub", binary(std::minus<double>(), wrap_sub)},
      {"Mul", binary(std::multiplies<double>(), wrap_mul)},
      {"Div", binary(std::divides<double>(), int_div)},
      {"Equal", compare([](double a, double b) { return a == b; })},
      {"Less", compare([](double a, double b) { return a < b; })},
      {"Greater", compare([](double a, double b) { return a > b; })},
      {"Neg", unary([](double v) { return -v; })},
      {"Abs", unary([](double v) { return std::fabs(v); })},
      {"Sqrt", unary([](double v) { return std::sqrt(v); })},
      {"Reciprocal", unary([](double v) { return 1.0 / v; })},
      {"Floor", unary([](double v) { return std::floor(v); })},
      {"Ceil", unary([](double v) { return std::ceil(v); })},
      {"Not", unary([](double v) { return v == 0.0 ? 1.0 : 0.0; })},
  };
  return *table;
}

// Inputs read only for their shape; every other input must be a constant with data.
bool reads_shape_only(const Node& node) {
  return node.op_type == "Shape" || node.op_type == "Size";
}

}  // namespace

bool is_foldable_op(const Node& node) {
  return node.domain.empty() && fold_table().count(node.op_type) > 0;
}

Status fold_node(Graph& graph, NodeId id, bool& folded) {
  folded = false;
  const Node& node = graph.node(id);
  if (!is_foldable_op(node)) return Status::ok();
  if (node.outputs.empty() || node.output(0) == kNoId) return Status::ok();
  for (ValueId in : node.inputs) {
    if (in == kNoId) continue;
    const Value& v = graph.value(in);
    if (reads_shape_only(node)) {
      if (!v.shape.is_static()) return Status::ok();
    } else if (v.kind != ValueKind::kConstant || !v.data) {
      return Status::ok();
    }
  }
  FoldContext ctx{graph, node};
  ASSIGN_OR_RETURN(Outputs outputs, fold_table().at(node.op_type)(ctx));
  for (const Tensor& t : outputs) {
    if (t.num_elements() > kMaxFoldElements) return Status::ok();
  }
  const std::vector<ValueId> outs = node.outputs;
  for (size_t i = 0; i < outs.size() && i < outputs.size(); ++i) {
    if (outs[i] != kNoId) graph.make_constant(outs[i], std::move(outputs[i]));
  }
  folded = true;
  return Status::ok();
}

StatusOr<int> fold_constants(Graph& graph) {
  int count = 0;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    bool folded = false;
    RETURN_IF_ERROR(fold_node(graph, id, folded));
    count += folded ? 1 : 0;
  }
  graph.remove_dead_nodes();
  return count;
}

}  // namespace autopar
