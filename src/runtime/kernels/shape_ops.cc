// Data-movement kernels (Flatten, Reshape, Transpose, Concat, Split, Slice, Gather, Unsqueeze,
// Squeeze, Expand, Shape, Tile, Pad, Constant, ConstantOfShape, ScatterElements, ScatterND)
// and Resize.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <span>
#include <string>

#include "kernel_util.h"

namespace autopar::runtime {
namespace {

// Copies smaller than this run on one thread.
constexpr int64_t kChunkBytes = int64_t{1} << 16;

// The output's static dims with the input's bytes: Flatten, Reshape, Squeeze, Unsqueeze.
Status copy_with_output_dims(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, Tensor(x.dtype(), ctx.output_dims(0), x.bytes()));
  return Status::ok();
}

// ---- strided copies --------------------------------------------------------------------

// A source seen over the output's dims: out[i…] = source[offset + Σ i_d·strides[d]], with
// strides in elements (0 on broadcast dims, negative for reversed slices).
struct StridedView {
  std::vector<int64_t> dims, strides;
  int64_t offset = 0;
};

// Drops dims of size 1 and merges neighbours that walk the source contiguously, so the inner
// loop runs as long as possible.
StridedView simplify(const StridedView& view) {
  StridedView out;
  out.offset = view.offset;
  for (size_t d = 0; d < view.dims.size(); ++d) {
    if (view.dims[d] == 1) continue;
    if (!out.dims.empty() && out.strides.back() == view.strides[d] * view.dims[d]) {
      out.dims.back() *= view.dims[d];
      out.strides.back() = view.strides[d];
    } else {
      out.dims.push_back(view.dims[d]);
      out.strides.push_back(view.strides[d]);
    }
  }
  if (out.dims.empty()) {
    out.dims.push_back(1);
    out.strides.push_back(1);
  }
  return out;
}

// Source offsets of consecutive lines (all dims but the last) of a view.
class LineWalker {
 public:
  LineWalker(const StridedView& view, int64_t first_line)
      : view_(view), coords_(view.dims.size() - 1, 0), offset_(view.offset) {
    int64_t rest = first_line;
    for (size_t d = coords_.size(); d-- > 0;) {
      coords_[d] = rest % view.dims[d];
      rest /= view.dims[d];
      offset_ += coords_[d] * view.strides[d];
    }
  }
  int64_t offset() const { return offset_; }
  void next() {
    for (size_t d = coords_.size(); d-- > 0;) {
      offset_ += view_.strides[d];
      if (++coords_[d] < view_.dims[d]) return;
      offset_ -= view_.strides[d] * view_.dims[d];
      coords_[d] = 0;
    }
  }

 private:
  const StridedView& view_;
  std::vector<int64_t> coords_;
  int64_t offset_;
};

template <typename T>
void copy_strided(const T* source, const StridedView& view, T* out) {
  if (element_count(view.dims) == 0) return;
  const StridedView v = simplify(view);
  const int64_t inner = v.dims.back(), inner_stride = v.strides.back();
  const int64_t lines = element_count(v.dims) / inner;
  parallel_for(lines, grain_for(inner * static_cast<int64_t>(sizeof(T)), kChunkBytes),
               [&](int64_t begin, int64_t end) {
                 LineWalker walker(v, begin);
                 for (int64_t line = begin; line < end; ++line, walker.next()) {
                   T* target = out + line * inner;
                   const T* from = source + walker.offset();
                   if (inner_stride == 1) {
                     std::copy(from, from + inner, target);
                   } else if (inner_stride == 0) {
                     std::fill(target, target + inner, *from);
                   } else {
                     for (int64_t j = 0; j < inner; ++j) target[j] = from[j * inner_stride];
                   }
                 }
               });
}

// Fills output 0 from input 0 seen through `view`, for any dtype.
Status run_strided_copy(KernelContext& ctx, const StridedView& view) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0);
  return dispatch_by_size(ctx, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    copy_strided(data_of<T>(x), view, mutable_data_of<T>(y));
    return Status::ok();
  });
}

// ---- Transpose ------------------------------------------------------------------------

// out[b][c][r] = source[offset of b + r·cols + c]: a batch of row-major [rows, cols] matrices
// transposed in square tiles, so both sides are read and written a cache line at a time.
template <typename T>
void transpose_tiles(const T* source, const StridedView& batch, int64_t rows, int64_t cols,
                     T* out) {
  constexpr int64_t kTile = 32;
  const int64_t matrices = element_count(batch.dims);
  const int64_t row_tiles = (cols + kTile - 1) / kTile;  // tiles over the output's rows
  parallel_for(matrices * row_tiles,
               grain_for(kTile * rows * static_cast<int64_t>(sizeof(T)), kChunkBytes),
               [&](int64_t begin, int64_t end) {
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t matrix = item / row_tiles;
                   LineWalker walker(batch, matrix);
                   const T* from = source + walker.offset();
                   T* to = out + matrix * rows * cols;
                   const int64_t c0 = (item % row_tiles) * kTile;
                   const int64_t c1 = std::min(cols, c0 + kTile);
                   for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
                     const int64_t r1 = std::min(rows, r0 + kTile);
                     for (int64_t c = c0; c < c1; ++c) {
                       for (int64_t r = r0; r < r1; ++r) to[c * rows + r] = from[r * cols + c];
                     }
                   }
                 }
               });
}

Status run_transpose(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) perm[d] = rank - 1 - d;
  perm = ctx.node().attr_ints("perm", perm);
  const std::vector<int64_t> in_strides = strides_of(x.dims());
  StridedView view;
  for (int64_t d = 0; d < rank; ++d) {
    view.dims.push_back(x.dims()[perm[d]]);
    view.strides.push_back(in_strides[perm[d]]);
  }
  if (element_count(view.dims) == 0) {
    ctx.allocate_output(0);
    return Status::ok();
  }
  const StridedView v = simplify(view);
  const size_t r = v.dims.size();
  // An output [.., cols, rows] that reads contiguous [rows, cols] blocks is a batch of matrix
  // transposes: 2-D Transpose, perm [.., n−1, n−2], and whatever merges into them.
  if (r >= 2 && v.strides[r - 2] == 1 && v.strides[r - 1] == v.dims[r - 2]) {
    StridedView batch;
    batch.offset = 0;
    batch.dims.assign(v.dims.begin(), v.dims.end() - 2);
    batch.strides.assign(v.strides.begin(), v.strides.end() - 2);
    batch.dims.push_back(1);  // LineWalker walks all dims but the last
    batch.strides.push_back(0);
    Tensor& y = ctx.allocate_output(0);
    const int64_t cols = v.dims[r - 2], rows = v.dims[r - 1];
    return dispatch_by_size(ctx, x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      transpose_tiles(data_of<T>(x), batch, rows, cols, mutable_data_of<T>(y));
      return Status::ok();
    });
  }
  return run_strided_copy(ctx, view);
}

// ---- Concat and Split -------------------------------------------------------------------

// Bytes per outer index (everything from `axis` on) and the number of outer indices.
struct AxisBlocks {
  int64_t outer = 1, block_bytes = 0;
};
AxisBlocks blocks_of(const std::vector<int64_t>& dims, int64_t axis, DType dtype) {
  AxisBlocks b;
  for (int64_t d = 0; d < axis; ++d) b.outer *= dims[d];
  b.block_bytes = dtype_size(dtype);
  for (size_t d = static_cast<size_t>(axis); d < dims.size(); ++d) b.block_bytes *= dims[d];
  return b;
}

Status run_concat(KernelContext& ctx) {
  Tensor& y = ctx.allocate_output(0);
  const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), y.rank());
  const AxisBlocks out = blocks_of(y.dims(), axis, y.dtype());
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    starts.push_back(start);
    start += blocks_of(ctx.input(i).dims(), axis, y.dtype()).block_bytes;
  }
  uint8_t* target = y.mutable_bytes().data();
  parallel_for(out.outer, grain_for(out.block_bytes, kChunkBytes), [&](int64_t begin, int64_t end) {
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& x = ctx.input(i);
      const int64_t bytes = blocks_of(x.dims(), axis, x.dtype()).block_bytes;
      if (bytes == 0) continue;
      for (int64_t o = begin; o < end; ++o) {
        std::memcpy(target + o * out.block_bytes + starts[i], x.bytes().data() + o * bytes, bytes);
      }
    }
  });
  return Status::ok();
}

// The split sizes are the outputs' dims along the axis, which the shape rule took from the
// attribute (before opset 13), the input (from 13) or an equal division.
Status run_split(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), x.rank());
  const AxisBlocks in = blocks_of(x.dims(), axis, x.dtype());
  int64_t start = 0;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    const int64_t bytes = blocks_of(ctx.output_dims(i), axis, x.dtype()).block_bytes;
    if (ctx.has_output(i) && bytes > 0) {
      uint8_t* target = ctx.allocate_output(i).mutable_bytes().data();
      const uint8_t* source = x.bytes().data() + start;
      parallel_for(in.outer, grain_for(bytes, kChunkBytes), [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          std::memcpy(target + o * bytes, source + o * in.block_bytes, bytes);
        }
      });
    } else if (ctx.has_output(i)) {
      ctx.allocate_output(i);
    }
    start += bytes;
  }
  return Status::ok();
}

// ---- Slice ------------------------------------------------------------------------------

// Integer values of optional input i, or nullopt.
std::optional<std::vector<int64_t>> input_ints(const KernelContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return std::nullopt;
  return ctx.input(i).to_int64_vector();
}

// Starts, ends, axes and steps come from attributes before opset 10 and from inputs after.
// Each start is clamped like Python's slice: into [0, dim] for positive steps and into
// [0, dim − 1] for negative ones; the output dims already count the elements.
Status run_slice(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  std::vector<int64_t> starts;
  std::optional<std::vector<int64_t>> axes, steps;
  if (ctx.opset() >= 10) {
    starts = ctx.input(1).to_int64_vector();
    axes = input_ints(ctx, 3);
    steps = input_ints(ctx, 4);
  } else {
    starts = ctx.node().attr_ints("starts");
    if (ctx.node().attr("axes")) axes = ctx.node().attr_ints("axes");
  }
  const std::vector<int64_t> in_strides = strides_of(x.dims());
  StridedView view;
  view.dims = ctx.output_dims(0);
  view.strides = in_strides;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalize_axis(axes ? (*axes)[i] : static_cast<int64_t>(i), rank);
    const int64_t step = steps ? (*steps)[i] : 1;
    const int64_t dim = x.dims()[axis];
    int64_t start = starts[i];
    if (start < 0) start += dim;
    start = step > 0 ? std::clamp<int64_t>(start, 0, dim)
                     : std::clamp<int64_t>(start, 0, std::max<int64_t>(dim - 1, 0));
    view.offset += start * in_strides[axis];
    view.strides[axis] = step * in_strides[axis];
  }
  return run_strided_copy(ctx, view);
}

// ---- Gather -----------------------------------------------------------------------------

Status run_gather(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), data.rank());
  const int64_t dim = data.dims()[axis];
  std::vector<int64_t> rows = indices.to_int64_vector();
  for (int64_t& row : rows) {
    if (row < -dim || row >= dim) {
      return ctx.fail("index {} is out of range for axis {} of size {}", row, axis, dim);
    }
    if (row < 0) row += dim;
  }
  Tensor& y = ctx.allocate_output(0);
  const AxisBlocks in = blocks_of(data.dims(), axis, data.dtype());
  const int64_t slice_bytes = dim == 0 ? 0 : in.block_bytes / dim;
  const int64_t count = static_cast<int64_t>(rows.size());
  if (slice_bytes == 0 || count == 0) return Status::ok();
  const uint8_t* source = data.bytes().data();
  uint8_t* target = y.mutable_bytes().data();
  parallel_for(in.outer * count, grain_for(slice_bytes, kChunkBytes),
               [&](int64_t begin, int64_t end) {
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t o = item / count, j = item % count;
                   std::memcpy(target + item * slice_bytes,
                               source + o * in.block_bytes + rows[j] * slice_bytes, slice_bytes);
                 }
               });
  return Status::ok();
}

// ---- Expand, Tile, Shape ------------------------------------------------------------------

Status run_expand(KernelContext& ctx) {
  StridedView view;
  view.dims = ctx.output_dims(0);
  view.strides = broadcast_strides(ctx.input(0).dims(), view.dims);
  return run_strided_copy(ctx, view);
}

// Each output dim r·d is read as [r, d] with stride 0 over the repeats.
Status run_tile(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t> in_strides = strides_of(x.dims());
  StridedView view;
  for (int64_t d = 0; d < x.rank(); ++d) {
    const int64_t dim = x.dims()[d];
    view.dims.push_back(dim == 0 ? 0 : ctx.output_dims(0)[d] / dim);
    view.strides.push_back(0);
    view.dims.push_back(dim);
    view.strides.push_back(in_strides[d]);
  }
  return run_strided_copy(ctx, view);
}

Status run_shape(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  int64_t start = 0, end = rank;
  if (ctx.opset() >= 15) {
    start = ctx.node().attr_int("start", 0);
    end = ctx.node().attr_int("end", rank);
  }
  if (start < 0) start = std::max<int64_t>(start + rank, 0);
  if (end < 0) end = std::max<int64_t>(end + rank, 0);
  start = std::min(start, rank);
  end = std::max(std::min(end, rank), start);
  const std::vector<int64_t> dims(x.dims().begin() + start, x.dims().begin() + end);
  ctx.set_output(0, Tensor::vector_int64(dims));
  return Status::ok();
}

// ---- Pad --------------------------------------------------------------------------------

// For one dim: the source index of every output index, −1 where the constant goes.
// Negative pads crop. reflect mirrors without repeating the edge (numpy's reflect), edge
// repeats it, wrap continues periodically.
std::vector<int64_t> pad_sources(int64_t dim, int64_t begin, int64_t out, const std::string& mode) {
  std::vector<int64_t> sources(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    int64_t j = i - begin;
    if (j < 0 || j >= dim) {
      if (mode == "constant") {
        j = -1;
      } else if (mode == "edge") {
        j = std::clamp<int64_t>(j, 0, dim - 1);
      } else if (mode == "wrap") {
        j = ((j % dim) + dim) % dim;
      } else if (dim == 1) {
        j = 0;
      } else {
        const int64_t period = 2 * (dim - 1);
        j = ((j % period) + period) % period;
        if (j >= dim) j = period - j;
      }
    }
    sources[i] = j;
  }
  return sources;
}

template <typename T>
void pad_copy(const Tensor& x, const std::vector<std::vector<int64_t>>& sources, T value,
              Tensor& y) {
  const int64_t rank = x.rank();
  const std::vector<int64_t> in_strides = strides_of(x.dims());
  const std::vector<int64_t>& out_dims = y.dims();
  const int64_t inner = out_dims.back();
  const int64_t lines = y.num_elements() / inner;
  const std::vector<int64_t>& inner_sources = sources.back();
  const T* in = data_of<T>(x);
  T* out = mutable_data_of<T>(y);
  parallel_for(lines, grain_for(inner * static_cast<int64_t>(sizeof(T)), kChunkBytes),
               [&](int64_t begin, int64_t end) {
                 std::vector<int64_t> coords(static_cast<size_t>(rank), 0);
                 for (int64_t line = begin; line < end; ++line) {
                   int64_t rest = line, offset = 0;
                   bool constant = false;
                   for (int64_t d = rank - 2; d >= 0; --d) {
                     const int64_t source = sources[d][rest % out_dims[d]];
                     rest /= out_dims[d];
                     constant = constant || source < 0;
                     offset += source * in_strides[d];
                   }
                   T* target = out + line * inner;
                   if (constant) {
                     std::fill(target, target + inner, value);
                     continue;
                   }
                   for (int64_t j = 0; j < inner; ++j) {
                     const int64_t source = inner_sources[j];
                     target[j] = source < 0 ? value : in[offset + source];
                   }
                 }
               });
}

// Pads and the constant are attributes before opset 11 (`pads`, float `value`) and inputs
// from 11 (pads, an optional scalar constant_value of the data's type, and axes).
Status run_pad(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const std::string mode = ctx.node().attr_string("mode", "constant");
  std::vector<int64_t> pads;
  Tensor value(x.dtype(), {});
  if (ctx.opset() >= 11) {
    pads = ctx.input(1).to_int64_vector();
    if (ctx.has_input(2) && ctx.input(2).num_elements() > 0) value = ctx.input(2);
  } else {
    pads = ctx.node().attr_ints("pads");
    value.set_from_double(0, ctx.node().attr_float("value", 0.0f));
  }
  std::vector<int64_t> axes(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) axes[d] = d;
  if (auto given = read_axes(ctx, 3, rank)) axes = *given;
  std::vector<int64_t> begins(static_cast<size_t>(rank), 0);
  for (size_t i = 0; i < axes.size(); ++i) begins[axes[i]] = pads[i];
  Tensor& y = ctx.allocate_output(0);
  if (y.num_elements() == 0) return Status::ok();
  std::vector<std::vector<int64_t>> sources;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t dim = x.dims()[d], out = y.dims()[d];
    if (dim == 0 && out > 0 && mode != "constant") {
      return ctx.fail("cannot pad dim {} of size 0 in mode {}", d, mode);
    }
    sources.push_back(pad_sources(dim, begins[d], out, mode));
  }
  if (rank == 0) {
    y = x;
    return Status::ok();
  }
  return dispatch_by_size(ctx, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    pad_copy(x, sources, data_of<T>(value)[0], y);
    return Status::ok();
  });
}

// ---- Constant and ConstantOfShape -------------------------------------------------------

Status run_constant(KernelContext& ctx) {
  const auto& [name, a] = *ctx.node().attrs.begin();
  if (name == "value") {
    ctx.set_output(0, *a.tensor());
  } else if (name == "value_float") {
    const float v = a.f();
    ctx.set_output(0, Tensor::from_float({}, std::span(&v, 1)));
  } else if (name == "value_floats") {
    ctx.set_output(0, Tensor::from_float({static_cast<int64_t>(a.floats().size())}, a.floats()));
  } else if (name == "value_int") {
    ctx.set_output(0, Tensor::scalar_int64(a.i()));
  } else if (name == "value_ints") {
    ctx.set_output(0, Tensor::vector_int64(a.ints()));
  } else {
    return ctx.fail("attribute '{}' holds strings, which the CPU runtime does not support", name);
  }
  return Status::ok();
}

// The one-element `value` (f32 zero by default) repeated over the shape.
Status run_constant_of_shape(KernelContext& ctx) {
  Tensor& y = ctx.allocate_output(0);
  const Attribute* value = ctx.node().attr("value");
  if (!value || y.num_elements() == 0) return Status::ok();
  const std::vector<uint8_t>& element = value->tensor()->bytes();
  const size_t size = element.size();
  std::vector<uint8_t>& bytes = y.mutable_bytes();
  if (std::all_of(element.begin(), element.end(), [](uint8_t b) { return b == 0; })) {
    return Status::ok();
  }
  for (size_t at = 0; at < bytes.size(); at += size) {
    std::memcpy(bytes.data() + at, element.data(), size);
  }
  return Status::ok();
}

// ---- ScatterElements and ScatterND -------------------------------------------------------

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Reduction reduction_of(const Node& node) {
  const std::string r = node.attr_string("reduction", "none");
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  return Reduction::kNone;
}

template <typename T>
void combine(T& target, T update, Reduction reduction) {
  switch (reduction) {
    case Reduction::kNone:
      target = update;
      break;
    case Reduction::kAdd:
      target = static_cast<T>(target + update);
      break;
    case Reduction::kMul:
      target = static_cast<T>(target * update);
      break;
    case Reduction::kMax:
      target = std::max(target, update);
      break;
    case Reduction::kMin:
      target = std::min(target, update);
      break;
  }
}

// Updates apply in the order of the indices, so repeated indices give the last update
// (reduction none) or reduce in that order: deterministic, and a single thread.
template <typename T>
Status scatter_elements(KernelContext& ctx, Reduction reduction) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& updates = ctx.input(2);
  const int64_t rank = data.rank();
  const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), rank);
  Tensor y = data;
  T* out = mutable_data_of<T>(y);
  const T* values = data_of<T>(updates);
  const std::vector<int64_t> strides = strides_of(data.dims());
  const std::vector<int64_t>& index_dims = indices.dims();
  const int64_t dim = data.dims()[axis];
  std::vector<int64_t> coords(static_cast<size_t>(rank), 0);
  for (int64_t e = 0; e < indices.num_elements(); ++e) {
    int64_t index = indices.int_at(e);
    if (index < -dim || index >= dim) {
      return ctx.fail("index {} is out of range for axis {} of size {}", index, axis, dim);
    }
    if (index < 0) index += dim;
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d) offset += (d == axis ? index : coords[d]) * strides[d];
    combine(out[offset], values[e], reduction);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++coords[d] < index_dims[d]) break;
      coords[d] = 0;
    }
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

template <typename T>
Status scatter_nd(KernelContext& ctx, Reduction reduction) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& updates = ctx.input(2);
  const int64_t k = indices.dims().back();
  const std::vector<int64_t> strides = strides_of(data.dims());
  int64_t slice = 1;
  for (int64_t d = k; d < data.rank(); ++d) slice *= data.dims()[d];
  const int64_t tuples = k == 0 ? 0 : indices.num_elements() / k;
  Tensor y = data;
  T* out = mutable_data_of<T>(y);
  const T* values = data_of<T>(updates);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t index = indices.int_at(t * k + j);
      const int64_t dim = data.dims()[j];
      if (index < -dim || index >= dim) {
        return ctx.fail(
            "index {} (entry {} of index tuple {}) is out of range for dim {} of size {}", index, j,
            t, j, dim);
      }
      if (index < 0) index += dim;
      offset += index * strides[j];
    }
    for (int64_t e = 0; e < slice; ++e) combine(out[offset + e], values[t * slice + e], reduction);
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

// Plain scatters move any dtype; reductions need arithmetic. scatter(T{}, reduction) runs one.
template <typename Scatter>
Status dispatch_scatter(KernelContext& ctx, const Scatter& scatter) {
  const Reduction reduction = reduction_of(ctx.node());
  const DType dtype = ctx.input(0).dtype();
  if (reduction == Reduction::kNone) {
    return dispatch_by_size(ctx, dtype, [&](auto zero) { return scatter(zero, reduction); });
  }
  return dispatch_numeric(ctx, dtype, [&](auto zero) { return scatter(zero, reduction); });
}

// ---- Resize -----------------------------------------------------------------------------

// One input position contributing to an output coordinate along one axis.
struct Tap {
  int64_t offset;  // index · the axis's input stride
  double weight;
};

// Per output coordinate along one axis: its taps, or that it lies outside the region of
// interest (tf_crop_and_resize), where the output is the extrapolation value.
struct AxisTaps {
  std::vector<int64_t> first;  // taps of coordinate o are [first[o], first[o + 1])
  std::vector<Tap> taps;
  std::vector<bool> outside;
};

struct ResizeMode {
  std::string mode, transform, nearest;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  int64_t opset = 17;
};

// Keys's cubic convolution weights of the four taps floor(x) − 1 … floor(x) + 2 at distance
// `ratio` past floor(x).
std::array<double, 4> cubic_weights(double ratio, double a) {
  auto near = [a](double t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };       // |t| ≤ 1
  auto far = [a](double t) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; };  // 1 < |t| < 2
  return {far(ratio + 1), near(ratio), near(1 - ratio), far(2 - ratio)};
}

// The taps of one axis, following ONNX's reference: map the output coordinate to x in the
// input, take the neighbours around it (nearest: one of the two, linear: two, cubic: four),
// clamp them to the edge, or with exclude_outside drop those outside and renormalise.
// `resized` is the output length the transform divides by: the size when sizes are given,
// scale·input when scales are (fractional, as the reference keeps it).
Status axis_taps(const KernelContext& ctx, const ResizeMode& m, int64_t in, int64_t out,
                 double scale, double resized, double roi_start, double roi_end, int64_t stride,
                 AxisTaps& axis) {
  axis.first.assign(1, 0);
  for (int64_t o = 0; o < out; ++o) {
    const double xo = static_cast<double>(o);
    double x = 0;
    bool outside = false;
    if (m.transform == "half_pixel") {
      x = (xo + 0.5) / scale - 0.5;
    } else if (m.transform == "pytorch_half_pixel") {
      x = resized > 1 ? (xo + 0.5) / scale - 0.5 : 0.0;
    } else if (m.transform == "align_corners") {
      x = resized == 1 ? 0.0 : xo * static_cast<double>(in - 1) / (resized - 1);
    } else if (m.transform == "asymmetric") {
      x = xo / scale;
    } else if (m.transform == "tf_half_pixel_for_nn") {
      x = (xo + 0.5) / scale;
    } else if (m.transform == "tf_crop_and_resize") {
      const double span = (roi_end - roi_start) * static_cast<double>(in - 1);
      x = resized == 1 ? span / 2 : xo * span / (resized - 1);
      x += roi_start * static_cast<double>(in - 1);
      outside = x < 0 || x > static_cast<double>(in - 1);
    } else {
      return ctx.fail("coordinate_transformation_mode '{}' is not supported", m.transform);
    }
    axis.outside.push_back(outside);
    if (outside) {
      axis.first.push_back(static_cast<int64_t>(axis.taps.size()));
      continue;
    }
    // The left neighbour, strictly below x unless x is integral, when it is x − 1 and x
    // itself is the right neighbour at ratio 1.
    const double floor_x = std::floor(x);
    const bool integral = floor_x == x;
    const int64_t left = static_cast<int64_t>(floor_x) - (integral ? 1 : 0);
    const double ratio = integral ? 1.0 : x - floor_x;
    std::vector<std::pair<int64_t, double>> taps;
    if (m.mode == "nearest") {
      bool right = true;
      if (m.opset < 11) {
        right = integral || scale < 1;  // Resize-10: floor when upsampling, ceil when not
      } else if (!integral) {
        if (m.nearest == "round_prefer_floor") right = ratio > 0.5;
        if (m.nearest == "round_prefer_ceil") right = ratio >= 0.5;
        if (m.nearest == "floor") right = false;
        if (m.nearest == "ceil") right = true;
      }
      taps.emplace_back(right ? left + 1 : left, 1.0);
    } else if (m.mode == "linear") {
      taps = {{left, 1 - ratio}, {left + 1, ratio}};
    } else {
      const std::array<double, 4> w = cubic_weights(ratio, m.cubic_a);
      for (int i = 0; i < 4; ++i) taps.emplace_back(left - 1 + i, w[i]);
    }
    if (m.exclude_outside) {
      double total = 0;
      for (auto& [index, weight] : taps) {
        if (index < 0 || index >= in) weight = 0;
        total += weight;
      }
      for (auto& tap : taps) tap.second /= total;
    }
    for (const auto& [index, weight] : taps) {
      // A zero weight adds nothing; nearest and integral positions keep one tap.
      if (weight == 0) continue;
      axis.taps.push_back({std::clamp<int64_t>(index, 0, in - 1) * stride, weight});
    }
    axis.first.push_back(static_cast<int64_t>(axis.taps.size()));
  }
  return Status::ok();
}

// Σ over the taps of axis d of weight · (the interpolation over the later axes): inner axes
// first, as the reference nests its one-dimensional interpolations.
template <typename T>
double interpolate(const T* in, const std::vector<AxisTaps>& axes,
                   const std::vector<int64_t>& coords, size_t d, int64_t base) {
  const AxisTaps& axis = axes[d];
  const int64_t o = coords[d];
  double sum = 0;
  for (int64_t t = axis.first[o]; t < axis.first[o + 1]; ++t) {
    const int64_t at = base + axis.taps[t].offset;
    const double value = d + 1 == axes.size() ? static_cast<double>(in[at])
                                              : interpolate(in, axes, coords, d + 1, at);
    sum += axis.taps[t].weight * value;
  }
  return sum;
}

// Nearest copies the selected element, so it runs on any dtype; extrapolated positions get
// extrapolation_value converted to the dtype.
template <typename T>
void resize_nearest(const Tensor& x, const std::vector<AxisTaps>& axes, const Tensor& fill,
                    Tensor& y) {
  const T* in = data_of<T>(x);
  T* out = mutable_data_of<T>(y);
  const T fill_value = data_of<T>(fill)[0];
  const std::vector<int64_t>& dims = y.dims();
  const size_t rank = dims.size();
  parallel_for(y.num_elements(), grain_for(8), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> coords(rank);
    for (int64_t e = begin; e < end; ++e) {
      int64_t rest = e, offset = 0;
      bool outside = false;
      for (size_t d = rank; d-- > 0;) {
        const int64_t o = rest % dims[d];
        rest /= dims[d];
        outside = outside || axes[d].outside[o];
        if (!outside) offset += axes[d].taps[axes[d].first[o]].offset;
      }
      out[e] = outside ? fill_value : in[offset];
    }
  });
}

template <typename T>
void resize_interpolate(const Tensor& x, const std::vector<AxisTaps>& axes, double fill,
                        Tensor& y) {
  const T* in = data_of<T>(x);
  T* out = mutable_data_of<T>(y);
  const std::vector<int64_t>& dims = y.dims();
  const size_t rank = dims.size();
  parallel_for(y.num_elements(), grain_for(64), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> coords(rank);
    for (int64_t e = begin; e < end; ++e) {
      int64_t rest = e;
      bool outside = false;
      for (size_t d = rank; d-- > 0;) {
        coords[d] = rest % dims[d];
        rest /= dims[d];
        outside = outside || axes[d].outside[coords[d]];
      }
      out[e] = static_cast<T>(outside ? fill : interpolate(in, axes, coords, 0, 0));
    }
  });
}

// Resize-10: X, scales (asymmetric coordinates). From 11: X, roi, scales, sizes, where an
// empty tensor stands for an omitted input.
Status run_resize(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Node& node = ctx.node();
  ResizeMode m;
  m.opset = ctx.opset();
  m.mode = node.attr_string("mode", "nearest");
  m.transform = m.opset < 11 ? "asymmetric"
                             : node.attr_string("coordinate_transformation_mode", "half_pixel");
  m.nearest = node.attr_string("nearest_mode", "round_prefer_floor");
  m.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  m.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  const double extrapolation = node.attr_float("extrapolation_value", 0.0f);
  if (m.nearest != "round_prefer_floor" && m.nearest != "round_prefer_ceil" &&
      m.nearest != "floor" && m.nearest != "ceil") {
    return ctx.fail("nearest_mode '{}' is not supported", m.nearest);
  }
  auto nonempty = [&](size_t i) { return ctx.has_input(i) && ctx.input(i).num_elements() > 0; };
  const size_t scales_index = m.opset < 11 ? 1 : 2;
  const bool with_sizes = m.opset >= 11 && nonempty(3);
  const int64_t rank = x.rank();
  const std::vector<int64_t>& out_dims = ctx.output_dims(0);
  std::vector<double> roi;
  if (m.opset >= 11 && nonempty(1)) {
    const Tensor& r = ctx.input(1);
    for (int64_t i = 0; i < r.num_elements(); ++i) roi.push_back(r.float_at(i));
  }
  if (m.transform == "tf_crop_and_resize" && roi.size() != static_cast<size_t>(2 * rank)) {
    return ctx.fail("tf_crop_and_resize needs a roi of {} values, got {}", 2 * rank, roi.size());
  }
  const std::vector<int64_t> in_strides = strides_of(x.dims());
  std::vector<AxisTaps> axes(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t in = x.dims()[d], out = out_dims[d];
    const double scale = with_sizes ? static_cast<double>(out) / static_cast<double>(in)
                                    : ctx.input(scales_index).float_at(d);
    const double resized = with_sizes ? static_cast<double>(out) : scale * static_cast<double>(in);
    const double roi_start = roi.empty() ? 0.0 : roi[d];
    const double roi_end = roi.empty() ? 1.0 : roi[d + rank];
    if (in == 0 && out > 0) return ctx.fail("cannot resize dim {} of size 0", d);
    RETURN_IF_ERROR(
        axis_taps(ctx, m, in, out, scale, resized, roi_start, roi_end, in_strides[d], axes[d]));
  }
  Tensor& y = ctx.allocate_output(0);
  if (y.num_elements() == 0) return Status::ok();
  if (m.mode == "nearest") {
    Tensor fill(x.dtype(), {});
    fill.set_from_double(0, extrapolation);
    return dispatch_by_size(ctx, x.dtype(), [&](auto zero) {
      resize_nearest<decltype(zero)>(x, axes, fill, y);
      return Status::ok();
    });
  }
  return dispatch_float(ctx, x.dtype(), [&](auto zero) {
    resize_interpolate<decltype(zero)>(x, axes, extrapolation, y);
    return Status::ok();
  });
}

}  // namespace

void register_shape_kernels(KernelRegistry& registry) {
  registry.add("", "Flatten", copy_with_output_dims);
  registry.add("", "Reshape", copy_with_output_dims);
  registry.add("", "Squeeze", copy_with_output_dims);
  registry.add("", "Unsqueeze", copy_with_output_dims);
  registry.add("", "Transpose", run_transpose);
  registry.add("", "Concat", run_concat);
  registry.add("", "Split", run_split);
  registry.add("", "Slice", run_slice);
  registry.add("", "Gather", run_gather);
  registry.add("", "Expand", run_expand);
  registry.add("", "Tile", run_tile);
  registry.add("", "Shape", run_shape);
  registry.add("", "Pad", run_pad);
  registry.add("", "Constant", run_constant);
  registry.add("", "ConstantOfShape", run_constant_of_shape);
  registry.add("", "ScatterElements", [](KernelContext& ctx) {
    return dispatch_scatter(ctx, [&](auto zero, Reduction reduction) {
      return scatter_elements<decltype(zero)>(ctx, reduction);
    });
  });
  registry.add("", "ScatterND", [](KernelContext& ctx) {
    return dispatch_scatter(ctx, [&](auto zero, Reduction reduction) {
      return scatter_nd<decltype(zero)>(ctx, reduction);
    });
  });
  registry.add("", "Resize", run_resize);
}

}  // namespace autopar::runtime
