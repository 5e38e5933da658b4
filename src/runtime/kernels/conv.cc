// Convolution and pooling kernels: Conv (im2col + GEMM), ConvTranspose (GEMM + col2im),
// MaxPool (and its gradient, MaxPoolGrad), AveragePool and GlobalAveragePool.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "activation.h"
#include "conv_simd.h"
#include "kernel_util.h"

namespace autopar::runtime {
namespace {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix<T>>;
template <typename T>
using ConstStridedMap = Eigen::Map<const RowMajorMatrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using StridedMap = Eigen::Map<RowMajorMatrix<T>, 0, Eigen::OuterStride<>>;

// Work items are (image, group, panel); panels depend on the shape only, so each output
// element is computed by the same Eigen call whatever the thread count.
constexpr int64_t kPanelMultiplyAdds = int64_t{1} << 20;
// Largest im2col / col2im buffer a panel holds, in elements.
constexpr int64_t kColumnBufferElements = int64_t{1} << 19;
// With this many (image, group) items there is parallelism enough without splitting them.
constexpr int64_t kEnoughItems = 16;
constexpr int64_t kMinPanelColumns = 64;

// The geometry of a window sliding over the spatial dims: the input position of kernel
// offset k at output position o is o·stride − pad_begin + k·dilation.
struct Window {
  std::vector<int64_t> input, output, kernel, strides, dilations, pads_begin, pads_end;

  size_t rank() const { return input.size(); }
  int64_t effective_kernel(size_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }
};

std::vector<int64_t> spatial_of(const std::vector<int64_t>& dims) {
  return {dims.begin() + 2, dims.end()};
}

// Strides, dilations and pads of Conv and the pools. auto_pad SAME puts the odd pad at the
// end (SAME_UPPER) or the beginning (SAME_LOWER) of the total that keeps ceil(in / stride)
// outputs.
Window read_window(const Node& node, const std::vector<int64_t>& x_dims,
                   const std::vector<int64_t>& y_dims, std::vector<int64_t> kernel) {
  Window w;
  w.input = spatial_of(x_dims);
  w.output = spatial_of(y_dims);
  const size_t rank = w.input.size();
  w.kernel = std::move(kernel);
  w.strides = node.attr_ints("strides", std::vector<int64_t>(rank, 1));
  w.dilations = node.attr_ints("dilations", std::vector<int64_t>(rank, 1));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads(2 * rank, 0);
  if (auto_pad == "NOTSET") pads = node.attr_ints("pads", pads);
  w.pads_begin.assign(pads.begin(), pads.begin() + rank);
  w.pads_end.assign(pads.begin() + rank, pads.end());
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < rank; ++i) {
      const int64_t total = std::max<int64_t>(
          0, (w.output[i] - 1) * w.strides[i] + w.effective_kernel(i) - w.input[i]);
      w.pads_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pads_end[i] = total - w.pads_begin[i];
    }
  }
  assert(w.kernel.size() == rank && w.strides.size() == rank && w.dilations.size() == rank);
  return w;
}

// The kernel offsets k in [0, kernel) whose position start + k·dilation lies in [low, high),
// where start = o·stride − pad_begin is the window's first position.
struct KernelRange {
  int64_t begin, end;
};
KernelRange kernel_range(int64_t start, int64_t kernel, int64_t dilation, int64_t low,
                         int64_t high) {
  auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  const int64_t begin = std::clamp<int64_t>(ceil_div(low - start, dilation), 0, kernel);
  const int64_t end = std::clamp<int64_t>(ceil_div(high - start, dilation), 0, kernel);
  return {begin, std::max(begin, end)};
}

// The output positions o in [0, outputs) whose input position o·stride + offset lies in
// [0, extent).
KernelRange output_range(int64_t offset, int64_t stride, int64_t extent, int64_t outputs) {
  return kernel_range(offset, outputs, stride, 0, extent);
}

// Row-major coordinates of flat index `flat` in `dims`.
void unravel(int64_t flat, const std::vector<int64_t>& dims, std::vector<int64_t>& coords) {
  coords.resize(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    coords[d] = dims[d] == 0 ? 0 : flat % dims[d];
    flat = dims[d] == 0 ? 0 : flat / dims[d];
  }
}

// Advances row-major coordinates over the dims before the last; false after the last line.
bool next_line(const std::vector<int64_t>& dims, std::vector<int64_t>& coords) {
  for (size_t d = dims.size() - 1; d-- > 0;) {
    if (++coords[d] < dims[d]) return true;
    coords[d] = 0;
  }
  return false;
}

// For every kernel offset: the input-position shift per spatial dim (k·dilation − pad).
std::vector<std::vector<int64_t>> kernel_shifts(const Window& w) {
  const int64_t count = element_count(w.kernel);
  std::vector<std::vector<int64_t>> shifts(static_cast<size_t>(count));
  std::vector<int64_t> k;
  for (int64_t i = 0; i < count; ++i) {
    unravel(i, w.kernel, k);
    shifts[i].resize(w.rank());
    for (size_t d = 0; d < w.rank(); ++d) shifts[i][d] = k[d] * w.dilations[d] - w.pads_begin[d];
  }
  return shifts;
}

// Walks the output positions [first, last) of one window geometry line by line (runs along
// the last spatial dim). For each run and kernel shift it reports the input offset of the
// run's outer dims (or -1 when they fall outside the input) and the valid span of the run.
struct LineSpan {
  int64_t column;       // column of the run's first output position, relative to `first`
  int64_t length;       // outputs in the run
  int64_t input_base;   // input offset of the outer coordinates, -1 when outside
  int64_t valid_begin;  // outputs [valid_begin, valid_end) of the run read inside the input
  int64_t valid_end;
  int64_t input_start;  // input offset (last dim) of the run's first output position
};

// `input_strides` are the input's and `coords` a scratch vector, both the caller's: this runs
// once per kernel offset and channel, too often to allocate.
template <typename Visit>
void for_each_line(const Window& w, const std::vector<int64_t>& shift, int64_t first, int64_t last,
                   const std::vector<int64_t>& input_strides, std::vector<int64_t>& coords,
                   const Visit& visit) {
  const size_t rank = w.rank();
  unravel(first, w.output, coords);
  const int64_t out_last = w.output[rank - 1];
  const int64_t stride_last = w.strides[rank - 1];
  const KernelRange valid = output_range(shift[rank - 1], stride_last, w.input[rank - 1], out_last);
  int64_t position = first;
  while (position < last) {
    const int64_t run_begin = coords[rank - 1];
    const int64_t length = std::min(out_last - run_begin, last - position);
    int64_t base = 0;
    for (size_t d = 0; d + 1 < rank && base >= 0; ++d) {
      const int64_t in = coords[d] * w.strides[d] + shift[d];
      base = in >= 0 && in < w.input[d] ? base + in * input_strides[d] : -1;
    }
    const int64_t valid_begin = std::clamp(valid.begin - run_begin, int64_t{0}, length);
    const int64_t valid_end = std::clamp(valid.end - run_begin, valid_begin, length);
    visit(LineSpan{position - first, length, base, valid_begin, valid_end,
                   run_begin * stride_last + shift[rank - 1]});
    position += length;
    coords[rank - 1] = 0;
    if (!next_line(w.output, coords)) break;
  }
}

// out[j] = in[j·stride] for j < n (stride 2 of float32 by the AVX-512 gather where it runs).
template <typename T>
void strided_copy(const T* in, int64_t stride, int64_t n, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 2 && cpu_has_avx512()) return even_elements_avx512(in, n, out);
  }
  for (int64_t j = 0; j < n; ++j) out[j] = in[j * stride];
}

// col[(c·K + k), p − first] = image[c, position of output p under kernel offset k], zero in
// the padding, for output positions [first, last).
template <typename T>
void im2col(const T* image, int64_t channels, const Window& w,
            const std::vector<std::vector<int64_t>>& shifts, int64_t first, int64_t last, T* col) {
  const int64_t width = last - first;
  const int64_t input_size = element_count(w.input);
  const int64_t stride = w.strides.back();
  const int64_t kernel_count = static_cast<int64_t>(shifts.size());
  const std::vector<int64_t> input_strides = strides_of(w.input);
  std::vector<int64_t> coords;
  for (int64_t c = 0; c < channels; ++c) {
    const T* plane = image + c * input_size;
    for (int64_t k = 0; k < kernel_count; ++k) {
      T* row = col + (c * kernel_count + k) * width;
      for_each_line(w, shifts[k], first, last, input_strides, coords, [&](const LineSpan& line) {
        T* out = row + line.column;
        if (line.input_base < 0) {
          std::fill(out, out + line.length, T(0));
          return;
        }
        std::fill(out, out + line.valid_begin, T(0));
        std::fill(out + line.valid_end, out + line.length, T(0));
        const int64_t valid = line.valid_end - line.valid_begin;
        if (valid <= 0) return;
        const T* in = plane + line.input_base + line.input_start + line.valid_begin * stride;
        out += line.valid_begin;
        if (stride == 1) {
          std::copy(in, in + valid, out);
        } else {
          strided_copy(in, stride, valid, out);
        }
      });
    }
  }
}

// The same columns as im2col, filled one output position at a time: for each position and
// channel, a kernel row (the offsets along the kernel's last dim) reads one stretch of the
// input. Kernels longer than the output's runs (a weight gradient's kernel spans the whole
// image and its output is the filter's few taps) then cost a copy per kernel row instead of a
// walk over the output per kernel offset.
template <typename T>
void im2col_by_position(const T* image, int64_t channels, const Window& w, int64_t first,
                        int64_t last, T* col) {
  const size_t rank = w.rank();
  const int64_t width = last - first;
  const int64_t input_size = element_count(w.input);
  const int64_t kernel_count = element_count(w.kernel);
  const int64_t kernel_last = w.kernel[rank - 1];
  const int64_t dilation_last = w.dilations[rank - 1];
  const std::vector<int64_t> input_strides = strides_of(w.input);
  std::vector<int64_t> position, tap;
  for (int64_t p = first; p < last; ++p) {
    unravel(p, w.output, position);
    T* column = col + (p - first);
    const int64_t start = position[rank - 1] * w.strides[rank - 1] - w.pads_begin[rank - 1];
    const KernelRange valid = kernel_range(start, kernel_last, dilation_last, 0, w.input[rank - 1]);
    for (int64_t row = 0; row < kernel_count; row += kernel_last) {
      unravel(row, w.kernel, tap);
      int64_t base = 0;
      for (size_t d = 0; d + 1 < rank && base >= 0; ++d) {
        const int64_t in = position[d] * w.strides[d] - w.pads_begin[d] + tap[d] * w.dilations[d];
        base = in >= 0 && in < w.input[d] ? base + in * input_strides[d] : -1;
      }
      for (int64_t c = 0; c < channels; ++c) {
        T* out = column + (c * kernel_count + row) * width;
        if (base < 0) {
          for (int64_t k = 0; k < kernel_last; ++k) out[k * width] = T(0);
          continue;
        }
        const int64_t offset = c * input_size + base + start;
        for (int64_t k = 0; k < valid.begin; ++k) out[k * width] = T(0);
        for (int64_t k = valid.begin; k < valid.end; ++k)
          out[k * width] = image[offset + k * dilation_last];
        for (int64_t k = valid.end; k < kernel_last; ++k) out[k * width] = T(0);
      }
    }
  }
}

// target[j] += weight·source[j]. Fixed blocks of 8 let -O2's cheap vectoriser take the loop.
template <typename T>
void add_scaled(T* __restrict target, const T* __restrict source, T weight, int64_t n) {
  constexpr int64_t kLanes = 8;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) target[j + k] += weight * source[j + k];
  }
  for (; j < n; ++j) target[j] += weight * source[j];
}

// conv_single_channel over two spatial dims, row by row: for each output row, each kernel tap
// adds its weight times one run of an input row (contiguous under stride 1) over the outputs
// whose input lies inside that row, found once per kernel column.
template <typename T>
void single_channel_2d(const T* plane, const T* weights, int64_t outputs, const Window& w,
                       int64_t first, int64_t count, T* out, int64_t out_stride) {
  const int64_t ih = w.input[0], iw = w.input[1], ow = w.output[1];
  const int64_t kh = w.kernel[0], kw = w.kernel[1];
  const int64_t sy = w.strides[0], sx = w.strides[1];
  const int64_t dy = w.dilations[0], dx = w.dilations[1];
  const int64_t py = w.pads_begin[0], px = w.pads_begin[1];
  // Kernel column kx reads input column ox·sx + shift: the outputs [begin, end) read inside.
  std::vector<int64_t> begin(static_cast<size_t>(kw)), end(static_cast<size_t>(kw));
  for (int64_t kx = 0; kx < kw; ++kx) {
    const int64_t shift = kx * dx - px;
    const int64_t e = iw - 1 - shift < 0 ? 0 : std::min(ow, (iw - 1 - shift) / sx + 1);
    begin[kx] = std::min(e, shift >= 0 ? int64_t{0} : (-shift + sx - 1) / sx);
    end[kx] = e;
  }
  const int64_t last = first + count;
  for (int64_t oy = first / ow; oy * ow < last; ++oy) {
    const int64_t row_first = std::max(first, oy * ow) - oy * ow;
    const int64_t row_last = std::min(last, (oy + 1) * ow) - oy * ow;
    for (int64_t m = 0; m < outputs; ++m) {
      T* target = out + m * out_stride + oy * ow - first;
      const T* taps = weights + m * kh * kw;
      for (int64_t ky = 0; ky < kh; ++ky) {
        const int64_t iy = oy * sy - py + ky * dy;
        if (iy < 0 || iy >= ih) continue;
        const T* row = plane + iy * iw;
        for (int64_t kx = 0; kx < kw; ++kx) {
          const int64_t b = std::max(begin[kx], row_first), e = std::min(end[kx], row_last);
          if (b >= e) continue;
          const T weight = taps[ky * kw + kx];
          const T* in = row + b * sx + kx * dx - px;
          if (sx == 1) {
            add_scaled(target + b, in, weight, e - b);
          } else {
            for (int64_t j = 0; j < e - b; ++j) target[b + j] += weight * in[j * sx];
          }
        }
      }
    }
  }
}

// out[m, p] += Σ_k weights[m, k]·plane[position of output first + p under kernel offset k] for
// `outputs` rows m (row stride `out_stride`) and `count` output positions.
template <typename T>
void conv_single_channel(const T* plane, const T* weights, int64_t outputs, const Window& w,
                         const std::vector<std::vector<int64_t>>& shifts, int64_t first,
                         int64_t count, T* out, int64_t out_stride) {
  if (w.rank() == 2) {
    single_channel_2d(plane, weights, outputs, w, first, count, out, out_stride);
    return;
  }
  const int64_t stride = w.strides.back();
  const int64_t kernel_count = static_cast<int64_t>(shifts.size());
  const std::vector<int64_t> input_strides = strides_of(w.input);
  std::vector<int64_t> coords;
  for (int64_t m = 0; m < outputs; ++m) {
    T* row = out + m * out_stride;
    for (int64_t k = 0; k < kernel_count; ++k) {
      const T weight = weights[m * kernel_count + k];
      for_each_line(
          w, shifts[k], first, first + count, input_strides, coords, [&](const LineSpan& line) {
            const int64_t valid = line.valid_end - line.valid_begin;
            if (line.input_base < 0 || valid <= 0) return;
            T* target = row + line.column + line.valid_begin;
            const T* in = plane + line.input_base + line.input_start + line.valid_begin * stride;
            if (stride == 1) {
              add_scaled(target, in, weight, valid);
            } else {
              for (int64_t j = 0; j < valid; ++j) target[j] += weight * in[j * stride];
            }
          });
    }
  }
}

// Output columns per panel: bounded by the column buffer, and by the work per Eigen call
// when there are too few (image, group) items to keep the threads busy.
int64_t panel_width(int64_t positions, int64_t rows, int64_t multiply_adds_per_column,
                    int64_t items) {
  int64_t width = std::max<int64_t>(1, kColumnBufferElements / std::max<int64_t>(rows, 1));
  if (items < kEnoughItems) {
    width = std::min(width,
                     std::max(kMinPanelColumns,
                              kPanelMultiplyAdds / std::max<int64_t>(multiply_adds_per_column, 1)));
  }
  return std::clamp<int64_t>(width, 1, std::max<int64_t>(positions, 1));
}

template <typename T>
void add_bias(T* y, const T* bias, int64_t channels, int64_t positions, int64_t stride) {
  for (int64_t m = 0; m < channels; ++m) {
    T* row = y + m * stride;
    for (int64_t p = 0; p < positions; ++p) row[p] += bias[m];
  }
}

template <typename T>
Status run_conv(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& weight = ctx.input(1);
  Tensor& y = ctx.allocate_output(0);
  if (y.num_elements() == 0) return Status::ok();
  const Window w = read_window(ctx.node(), x.dims(), y.dims(), spatial_of(weight.dims()));
  const int64_t group = ctx.node().attr_int("group", 1);
  const int64_t batch = x.dims()[0], channels = x.dims()[1], out_channels = y.dims()[1];
  const int64_t group_channels = channels / group, group_out_channels = out_channels / group;
  const int64_t kernel_size = element_count(w.kernel);
  const int64_t rows = group_channels * kernel_size;  // the GEMM's reduction length
  const int64_t input_size = element_count(w.input), positions = element_count(w.output);
  const T* x_data = data_of<T>(x);
  const T* w_data = data_of<T>(weight);
  const T* bias = ctx.has_input(2) ? data_of<T>(ctx.input(2)) : nullptr;
  T* y_data = mutable_data_of<T>(y);
  const Activation* activation = ctx.activation();

  // A 1×1 kernel with unit strides and no padding reads the image itself as its columns.
  bool pointwise = kernel_size == 1;
  for (size_t d = 0; d < w.rank(); ++d) {
    pointwise = pointwise && w.strides[d] == 1 && w.pads_begin[d] == 0 && w.pads_end[d] == 0;
  }
  // One input channel per group (depthwise): each output row is a sum of shifted input rows,
  // one per kernel tap, with no im2col copy and no GEMM too small to pay for itself.
  const bool single_channel = group_channels == 1 && !pointwise;
  const bool direct = pointwise || single_channel;
  // float32 on AVX-512: the products and the 2-D depthwise convolution write each output
  // once, bias and activation included (conv_simd.h).
  const bool simd = std::is_same_v<T, float> && cpu_has_avx512();
  DepthwiseShape depthwise{};
  bool simd_depthwise = false;
  if (simd && single_channel && w.rank() == 2) {
    depthwise = {w.input[0],      w.input[1],      w.output[0],    w.output[1],
                 w.kernel[0],     w.kernel[1],     w.strides[0],   w.strides[1],
                 w.pads_begin[0], w.pads_begin[1], w.dilations[0], w.dilations[1]};
    simd_depthwise = depthwise_avx512_supports(depthwise);
  }
  // The product (pointwise or of im2col's columns) on AVX-512.
  const bool simd_product = simd && !single_channel && rows > 0;
  const auto shifts = kernel_shifts(w);
  const int64_t items = batch * group;
  int64_t width = panel_width(positions, direct ? 1 : rows, group_out_channels * rows, items);
  // The 2-D depthwise kernel writes whole output rows.
  if (simd_depthwise)
    width = std::min(positions, (width + w.output[1] - 1) / w.output[1] * w.output[1]);
  const int64_t panels = (positions + width - 1) / width;
  // Columns by output position when kernel rows are longer than the output's runs.
  const bool by_position = w.kernel.back() > std::min(w.output.back(), width);

  parallel_for(
      items * panels, grain_for(group_out_channels * rows * width, kPanelMultiplyAdds),
      [&](int64_t begin, int64_t end) {
        std::unique_ptr<T[]> col(direct ? nullptr : new T[rows * width]);
        for (int64_t item = begin; item < end; ++item) {
          const int64_t image_group = item / panels;
          const int64_t n = image_group / group, g = image_group % group;
          const int64_t first = (item % panels) * width;
          const int64_t count = std::min(width, positions - first);
          const T* image = x_data + (n * channels + g * group_channels) * input_size;
          T* out = y_data + (n * out_channels + g * group_out_channels) * positions + first;
          const T* w_group = w_data + g * group_out_channels * rows;
          const T* b_group = bias ? bias + g * group_out_channels : nullptr;
          if (!direct && rows > 0) {
            if (by_position)
              im2col_by_position(image, group_channels, w, first, first + count, col.get());
            else
              im2col(image, group_channels, w, shifts, first, first + count, col.get());
          }
          if constexpr (std::is_same_v<T, float>) {
            if (simd_depthwise) {
              for (int64_t m = 0; m < group_out_channels; ++m) {
                depthwise_avx512(depthwise, image, w_group + m * kernel_size,
                                 b_group ? b_group + m : nullptr, activation, first / w.output[1],
                                 (first + count) / w.output[1], out - first + m * positions);
              }
              continue;
            }
            if (simd_product) {
              gemm_avx512(w_group, rows, group_out_channels, rows,
                          pointwise ? image + first : col.get(), pointwise ? input_size : count,
                          count, b_group, activation, out, positions);
              continue;
            }
          }
          // The output starts zero-filled; every path accumulates into it.
          StridedMap<T> y_block(out, group_out_channels, count, Eigen::OuterStride<>(positions));
          ConstMatrixMap<T> w_matrix(w_group, group_out_channels, rows);
          if (pointwise) {
            ConstStridedMap<T> columns(image + first, group_channels, count,
                                       Eigen::OuterStride<>(input_size));
            y_block.noalias() += w_matrix * columns;
          } else if (single_channel) {
            conv_single_channel(image, w_group, group_out_channels, w, shifts, first, count, out,
                                positions);
          } else if (rows > 0) {
            y_block.noalias() += w_matrix * ConstMatrixMap<T>(col.get(), rows, count);
          }
          if (b_group) add_bias(out, b_group, group_out_channels, count, positions);
          if (activation) {
            for (int64_t m = 0; m < group_out_channels; ++m)
              apply_activation(*activation, out + m * positions, count);
          }
        }
      });
  return Status::ok();
}

// Python's floor division, which ONNX's formulas for derived pads use.
int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// ConvTranspose's geometry, seen from the input: input position i and kernel offset k write
// output position i·stride − pad_begin + k·dilation. Pads come from the attribute, or, under
// auto_pad SAME, from the output shape (ONNX's total_padding, odd pad at the end for
// SAME_UPPER and at the beginning otherwise). An explicit output_shape with auto_pad NOTSET
// keeps the given pads and cuts or extends the output at the end.
Window read_transpose_window(const Node& node, const std::vector<int64_t>& x_dims,
                             const std::vector<int64_t>& y_dims, std::vector<int64_t> kernel) {
  Window w;
  w.input = spatial_of(x_dims);
  w.output = spatial_of(y_dims);
  const size_t rank = w.input.size();
  w.kernel = std::move(kernel);
  w.strides = node.attr_ints("strides", std::vector<int64_t>(rank, 1));
  w.dilations = node.attr_ints("dilations", std::vector<int64_t>(rank, 1));
  const std::vector<int64_t> output_padding =
      node.attr_ints("output_padding", std::vector<int64_t>(rank, 0));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads(2 * rank, 0);
  if (auto_pad == "NOTSET") pads = node.attr_ints("pads", pads);
  w.pads_begin.assign(pads.begin(), pads.begin() + rank);
  w.pads_end.assign(pads.begin() + rank, pads.end());
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < rank; ++i) {
      const int64_t total =
          w.strides[i] * (w.input[i] - 1) + output_padding[i] + w.effective_kernel(i) - w.output[i];
      const int64_t half = floor_div(total, 2);
      w.pads_begin[i] = auto_pad == "SAME_UPPER" ? half : total - half;
      w.pads_end[i] = total - w.pads_begin[i];
    }
  }
  return w;
}

// out[m, position of input i under kernel offset k] += col[(m·K + k), i] for every column of
// one image, dropping positions outside the output.
template <typename T>
void col2im(const T* col, int64_t channels, const Window& w,
            const std::vector<std::vector<int64_t>>& shifts, T* out) {
  const int64_t input_size = element_count(w.input), output_size = element_count(w.output);
  const int64_t kernel_count = static_cast<int64_t>(shifts.size());
  const size_t rank = w.rank();
  const std::vector<int64_t> output_strides = strides_of(w.output);
  const int64_t stride = w.strides.back();
  std::vector<int64_t> coords;
  for (int64_t m = 0; m < channels; ++m) {
    T* plane = out + m * output_size;
    for (int64_t k = 0; k < kernel_count; ++k) {
      const T* row = col + (m * kernel_count + k) * input_size;
      const std::vector<int64_t>& shift = shifts[k];
      coords.assign(rank, 0);
      const int64_t in_last = w.input[rank - 1];
      const KernelRange valid = output_range(shift[rank - 1], stride, w.output[rank - 1], in_last);
      for (int64_t line = 0; line < input_size; line += in_last) {
        int64_t base = 0;
        for (size_t d = 0; d + 1 < rank && base >= 0; ++d) {
          const int64_t o = coords[d] * w.strides[d] + shift[d];
          base = o >= 0 && o < w.output[d] ? base + o * output_strides[d] : -1;
        }
        if (base >= 0 && valid.begin < valid.end) {
          T* target = plane + base + valid.begin * stride + shift[rank - 1];
          const T* source = row + line + valid.begin;
          for (int64_t i = 0; i < valid.end - valid.begin; ++i) target[i * stride] += source[i];
        }
        if (!next_line(w.input, coords)) break;
      }
    }
  }
}

template <typename T>
Status run_conv_transpose(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& weight = ctx.input(1);
  Tensor& y = ctx.allocate_output(0);
  if (y.num_elements() == 0) return Status::ok();
  const Window w = read_transpose_window(ctx.node(), x.dims(), y.dims(), spatial_of(weight.dims()));
  const int64_t group = ctx.node().attr_int("group", 1);
  const int64_t batch = x.dims()[0], channels = x.dims()[1], out_channels = y.dims()[1];
  const int64_t group_channels = channels / group, group_out_channels = out_channels / group;
  const int64_t kernel_size = element_count(w.kernel);
  const int64_t input_size = element_count(w.input), output_size = element_count(w.output);
  const T* x_data = data_of<T>(x);
  const T* w_data = data_of<T>(weight);
  const T* bias = ctx.has_input(2) ? data_of<T>(ctx.input(2)) : nullptr;
  T* y_data = mutable_data_of<T>(y);
  const auto shifts = kernel_shifts(w);

  // Panels of output channels: each writes its own output planes, and its col rows
  // (m·K + k) are a contiguous block of W_g's transpose.
  const int64_t items = batch * group;
  const int64_t per_channel = kernel_size * std::max<int64_t>(input_size, 1);
  int64_t panel_channels =
      std::max<int64_t>(1, kColumnBufferElements / std::max<int64_t>(per_channel, 1));
  if (items < kEnoughItems) {
    panel_channels =
        std::min(panel_channels,
                 std::max<int64_t>(
                     1, kPanelMultiplyAdds / std::max<int64_t>(per_channel * group_channels, 1)));
  }
  panel_channels = std::min(panel_channels, std::max<int64_t>(group_out_channels, 1));
  const int64_t panels = (group_out_channels + panel_channels - 1) / panel_channels;

  parallel_for(
      items * panels, grain_for(panel_channels * per_channel * group_channels, kPanelMultiplyAdds),
      [&](int64_t begin, int64_t end) {
        std::unique_ptr<T[]> col(new T[panel_channels * kernel_size * input_size]);
        for (int64_t item = begin; item < end; ++item) {
          const int64_t image_group = item / panels;
          const int64_t n = image_group / group, g = image_group % group;
          const int64_t m_first = (item % panels) * panel_channels;
          const int64_t m_count = std::min(panel_channels, group_out_channels - m_first);
          T* out = y_data + (n * out_channels + g * group_out_channels + m_first) * output_size;
          if (group_channels > 0 && input_size > 0) {
            // W_g is [C/group, M/group·K]; the panel's rows of W_gᵀ are a block of its columns.
            ConstMatrixMap<T> w_group(
                w_data + g * group_channels * group_out_channels * kernel_size, group_channels,
                group_out_channels * kernel_size);
            ConstMatrixMap<T> image(x_data + (n * channels + g * group_channels) * input_size,
                                    group_channels, input_size);
            Eigen::Map<RowMajorMatrix<T>> columns(col.get(), m_count * kernel_size, input_size);
            columns.noalias() =
                w_group.middleCols(m_first * kernel_size, m_count * kernel_size).transpose() *
                image;
            col2im(col.get(), m_count, w, shifts, out);
          }
          if (bias) {
            add_bias(out, bias + g * group_out_channels + m_first, m_count, output_size,
                     output_size);
          }
        }
      });
  return Status::ok();
}

// ---- pooling --------------------------------------------------------------------------

// Per spatial dim and output position: the kernel offsets inside the input, and (for
// count_include_pad) how many lie inside the padded input.
struct PoolTaps {
  std::vector<std::vector<KernelRange>> valid;  // [dim][output position]
  std::vector<std::vector<int64_t>> padded_count;
};

PoolTaps pool_taps(const Window& w) {
  PoolTaps taps;
  taps.valid.resize(w.rank());
  taps.padded_count.resize(w.rank());
  for (size_t d = 0; d < w.rank(); ++d) {
    for (int64_t o = 0; o < w.output[d]; ++o) {
      const int64_t start = o * w.strides[d] - w.pads_begin[d];
      taps.valid[d].push_back(kernel_range(start, w.kernel[d], w.dilations[d], 0, w.input[d]));
      const KernelRange padded = kernel_range(start, w.kernel[d], w.dilations[d], -w.pads_begin[d],
                                              w.input[d] + w.pads_end[d]);
      taps.padded_count[d].push_back(padded.end - padded.begin);
    }
  }
  return taps;
}

// Calls visit(input offset within the plane) for every window tap of output position
// `coords` that lies inside the input, in row-major kernel order.
template <typename Visit>
void for_each_tap(const Window& w, const PoolTaps& taps, const std::vector<int64_t>& coords,
                  const std::vector<int64_t>& input_strides, std::vector<int64_t>& k,
                  const Visit& visit) {
  const size_t rank = w.rank();
  for (size_t d = 0; d < rank; ++d) {
    const KernelRange& r = taps.valid[d][coords[d]];
    if (r.begin >= r.end) return;
    k[d] = r.begin;
  }
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d) {
      offset +=
          (coords[d] * w.strides[d] - w.pads_begin[d] + k[d] * w.dilations[d]) * input_strides[d];
    }
    visit(offset);
    size_t d = rank;
    while (d-- > 0) {
      if (++k[d] < taps.valid[d][coords[d]].end) break;
      k[d] = taps.valid[d][coords[d]].begin;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

// Runs pool_plane(plane index, input plane, output offset) over all N·C planes.
template <typename PoolPlane>
void for_each_plane(int64_t planes, int64_t work_per_plane, const PoolPlane& pool_plane) {
  parallel_for(planes, grain_for(work_per_plane), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) pool_plane(plane);
  });
}

// Flat index of input position `offset` (row-major within the plane) in the whole input, in
// row-major (storage_order 0) or column-major spatial order (storage_order 1).
int64_t max_index(int64_t plane, int64_t offset, const Window& w, bool column_major) {
  const int64_t plane_size = element_count(w.input);
  if (!column_major) return plane * plane_size + offset;
  int64_t index = 0, scale = 1;
  std::vector<int64_t> coords;
  unravel(offset, w.input, coords);
  for (size_t d = 0; d < w.rank(); ++d) {
    index += coords[d] * scale;
    scale *= w.input[d];
  }
  return plane * plane_size + index;
}

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// The maximum of the window at output position `coords` of a plane and its offset there, taps
// in row-major kernel order: the first of equal maxima; NaN never wins against a number; a
// window without any input tap gives −inf (the lowest value for integers) and offset −1.
template <typename T>
std::pair<T, int64_t> window_maximum(const T* in, const Window& w, const PoolTaps& taps,
                                     const std::vector<int64_t>& coords,
                                     const std::vector<int64_t>& input_strides,
                                     std::vector<int64_t>& k) {
  T best = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                : std::numeric_limits<T>::lowest();
  int64_t best_offset = -1;
  for_each_tap(w, taps, coords, input_strides, k, [&](int64_t offset) {
    const T v = in[offset];
    if (best_offset < 0 || v > best || (is_nan(best) && !is_nan(v))) {
      best = v;
      best_offset = offset;
    }
  });
  return {best, best_offset};
}

template <typename T>
Status run_max_pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0);
  const Window w =
      read_window(ctx.node(), x.dims(), y.dims(), ctx.node().attr_ints("kernel_shape"));
  const bool column_major = ctx.node().attr_int("storage_order", 0) != 0;
  int64_t* indices = nullptr;
  if (ctx.num_outputs() > 1 && ctx.has_output(1)) {
    indices = mutable_data_of<int64_t>(ctx.allocate_output(1));
  }
  const PoolTaps taps = pool_taps(w);
  const std::vector<int64_t> input_strides = strides_of(w.input);
  const int64_t input_size = element_count(w.input), output_size = element_count(w.output);
  const T* x_data = data_of<T>(x);
  T* y_data = mutable_data_of<T>(y);
  for_each_plane(
      x.dims()[0] * x.dims()[1], output_size * element_count(w.kernel), [&](int64_t plane) {
        const T* in = x_data + plane * input_size;
        std::vector<int64_t> coords(w.rank(), 0), k(w.rank(), 0);
        for (int64_t p = 0; p < output_size; ++p) {
          unravel(p, w.output, coords);
          const auto [best, best_offset] = window_maximum(in, w, taps, coords, input_strides, k);
          y_data[plane * output_size + p] = best;
          if (indices) {
            indices[plane * output_size + p] =
                best_offset < 0 ? -1 : max_index(plane, best_offset, w, column_major);
          }
        }
      });
  return Status::ok();
}

// MaxPoolGrad(dY, X) -> dX: each window's maximum found as run_max_pool finds it
// (window_maximum), and the window's gradient added there, windows in order (as a scatter-add of
// MaxPool's indices).
template <typename T>
Status run_max_pool_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  Tensor& dx = ctx.allocate_output(0);
  const Window w =
      read_window(ctx.node(), x.dims(), dy.dims(), ctx.node().attr_ints("kernel_shape"));
  const PoolTaps taps = pool_taps(w);
  const std::vector<int64_t> input_strides = strides_of(w.input);
  const int64_t input_size = element_count(w.input), output_size = element_count(w.output);
  const T* x_data = data_of<T>(x);
  const T* dy_data = data_of<T>(dy);
  T* dx_data = mutable_data_of<T>(dx);
  for_each_plane(
      x.dims()[0] * x.dims()[1], output_size * element_count(w.kernel), [&](int64_t plane) {
        const T* in = x_data + plane * input_size;
        T* grad = dx_data + plane * input_size;
        std::fill(grad, grad + input_size, T(0));
        std::vector<int64_t> coords(w.rank(), 0), k(w.rank(), 0);
        for (int64_t p = 0; p < output_size; ++p) {
          unravel(p, w.output, coords);
          const int64_t best_offset = window_maximum(in, w, taps, coords, input_strides, k).second;
          if (best_offset >= 0) grad[best_offset] += dy_data[plane * output_size + p];
        }
      });
  return Status::ok();
}

// Sums in double; count_include_pad divides by the taps inside the padded input (a ceil_mode
// window that overhangs the end pads does not count the overhang), otherwise by the taps
// inside the input.
template <typename T>
Status run_average_pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0);
  const Window w =
      read_window(ctx.node(), x.dims(), y.dims(), ctx.node().attr_ints("kernel_shape"));
  const bool count_include_pad = ctx.node().attr_int("count_include_pad", 0) != 0;
  const PoolTaps taps = pool_taps(w);
  const std::vector<int64_t> input_strides = strides_of(w.input);
  const int64_t input_size = element_count(w.input), output_size = element_count(w.output);
  const T* x_data = data_of<T>(x);
  T* y_data = mutable_data_of<T>(y);
  for_each_plane(
      x.dims()[0] * x.dims()[1], output_size * element_count(w.kernel), [&](int64_t plane) {
        const T* in = x_data + plane * input_size;
        std::vector<int64_t> coords(w.rank(), 0), k(w.rank(), 0);
        for (int64_t p = 0; p < output_size; ++p) {
          unravel(p, w.output, coords);
          double sum = 0;
          int64_t count = 1;
          for (size_t d = 0; d < w.rank(); ++d) {
            const KernelRange& r = taps.valid[d][coords[d]];
            count *= count_include_pad ? taps.padded_count[d][coords[d]] : r.end - r.begin;
          }
          for_each_tap(w, taps, coords, input_strides, k,
                       [&](int64_t offset) { sum += static_cast<double>(in[offset]); });
          y_data[plane * output_size + p] = count > 0
                                                ? static_cast<T>(sum / static_cast<double>(count))
                                                : std::numeric_limits<T>::quiet_NaN();
        }
      });
  return Status::ok();
}

template <typename T>
Status run_global_average_pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0);
  const int64_t planes = x.dims()[0] * x.dims()[1];
  const int64_t plane_size = element_count(spatial_of(x.dims()));
  const T* x_data = data_of<T>(x);
  T* y_data = mutable_data_of<T>(y);
  for_each_plane(planes, plane_size, [&](int64_t plane) {
    const T* in = x_data + plane * plane_size;
    // Eight interleaved accumulators per block, blocks combined pairwise (kernel_util.h).
    const double sum =
        pairwise_sum<double>(plane_size, [in](int64_t i) { return static_cast<double>(in[i]); });
    y_data[plane] = plane_size > 0 ? static_cast<T>(sum / static_cast<double>(plane_size))
                                   : std::numeric_limits<T>::quiet_NaN();
  });
  return Status::ok();
}

}  // namespace

void register_conv_kernels(KernelRegistry& registry) {
  registry.add("", "Conv", [](KernelContext& ctx) {
    return dispatch_float(ctx, ctx.input(0).dtype(),
                          [&](auto zero) { return run_conv<decltype(zero)>(ctx); });
  });
  registry.add("", "ConvTranspose", [](KernelContext& ctx) {
    return dispatch_float(ctx, ctx.input(0).dtype(),
                          [&](auto zero) { return run_conv_transpose<decltype(zero)>(ctx); });
  });
  // ONNX's MaxPool also takes 8-bit integers (quantized models).
  registry.add("", "MaxPool", [](KernelContext& ctx) -> Status {
    switch (ctx.input(0).dtype()) {
      case DType::kInt8:
        return run_max_pool<int8_t>(ctx);
      case DType::kUInt8:
        return run_max_pool<uint8_t>(ctx);
      default:
        return dispatch_float(ctx, ctx.input(0).dtype(),
                              [&](auto zero) { return run_max_pool<decltype(zero)>(ctx); });
    }
  });
  registry.add(std::string(kTrainingDomain), "MaxPoolGrad", [](KernelContext& ctx) {
    return dispatch_float(ctx, ctx.input(1).dtype(),
                          [&](auto zero) { return run_max_pool_grad<decltype(zero)>(ctx); });
  });
  registry.add("", "AveragePool", [](KernelContext& ctx) {
    return dispatch_float(ctx, ctx.input(0).dtype(),
                          [&](auto zero) { return run_average_pool<decltype(zero)>(ctx); });
  });
  registry.add("", "GlobalAveragePool", [](KernelContext& ctx) {
    return dispatch_float(ctx, ctx.input(0).dtype(),
                          [&](auto zero) { return run_global_average_pool<decltype(zero)>(ctx); });
  });
}

}  // namespace autopar::runtime
