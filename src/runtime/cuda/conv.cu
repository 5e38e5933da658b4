// kConv on cuDNN's convolution API: Conv as forward, ConvTranspose as backward data.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "launch.h"

namespace autopar::cuda {
namespace {

std::string dims_text(const int* dims, int count) {
  std::string text = "[";
  for (int i = 0; i < count; ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

std::string conv_shape(const ConvParams& p) {
  std::string text = "n=" + std::to_string(p.n) + ", c=" + std::to_string(p.c) +
                     ", k=" + std::to_string(p.k) + ", group=" + std::to_string(p.group) + ", in=";
  for (int d = 0; d < p.spatial && d < 3; ++d) text += (d ? "x" : "") + std::to_string(p.in[d]);
  text += ", kernel=";
  for (int d = 0; d < p.spatial && d < 3; ++d) {
    text += (d ? "x" : "") + std::to_string(p.kernel[d]);
  }
  return text;
}

const char* conv_prefix(const ConvParams& p) {
  return p.filter_grad ? "conv filter gradient: " : p.transpose ? "conv transpose: " : "conv: ";
}

std::string dnn_error(cudnnStatus_t status, const char* what, const ConvParams& p) {
  if (status == CUDNN_STATUS_SUCCESS) return "";
  std::string message = std::string(conv_prefix(p)) + what + ": " + cudnnGetErrorString(status);
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  if (detail[0] != '\0') message += std::string(" (") + detail + ")";
  return message + " [" + conv_shape(p) + "]";
}

bool dnn_type(Dt dt, cudnnDataType_t* type) {
  switch (dt) {
    case Dt::kF32:
      *type = CUDNN_DATA_FLOAT;
      return true;
    case Dt::kF16:
      *type = CUDNN_DATA_HALF;
      return true;
    case Dt::kBF16:
      *type = CUDNN_DATA_BFLOAT16;
      return true;
    case Dt::kF64:
      *type = CUDNN_DATA_DOUBLE;
      return true;
    default:
      return false;
  }
}

struct ConvState {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;  // the launch's input and output
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t forward_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t backward_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnConvolutionBwdFilterAlgo_t filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  bool double_scale = false;
  ~ConvState() {
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
  }
};

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// cuDNN wants 4 or 5 dims: a 1-D convolution runs as a 2-D one of height 1.
std::string make_tensor(cudnnTensorDescriptor_t* desc, cudnnDataType_t type, int64_t n, int64_t c,
                        const int64_t* spatial, int count, const ConvParams& p, const char* which) {
  int dims[5], strides[5];
  int nd = 0;
  dims[nd++] = static_cast<int>(n);
  dims[nd++] = static_cast<int>(c);
  if (count == 1) dims[nd++] = 1;
  for (int d = 0; d < count; ++d) dims[nd++] = static_cast<int>(spatial[d]);
  int64_t stride = 1;
  for (int d = nd - 1; d >= 0; --d) {
    if (stride > INT_MAX) {
      return std::string(conv_prefix(p)) + which +
             " has more elements than cuDNN's int strides hold [" + conv_shape(p) + "]";
    }
    strides[d] = static_cast<int>(stride);
    stride *= dims[d];
  }
  std::string what = std::string("cudnnCreateTensorDescriptor ") + which;
  std::string e = dnn_error(cudnnCreateTensorDescriptor(desc), what.c_str(), p);
  if (!e.empty()) return e;
  what = std::string("cudnnSetTensorNdDescriptor ") + which + " " + dims_text(dims, nd);
  return dnn_error(cudnnSetTensorNdDescriptor(*desc, type, nd, dims, strides), what.c_str(), p);
}

// The descriptors, their consistency with the program's output shape, and the fastest
// algorithm (by cuDNN's own timing of each) whose workspace fits.
std::string plan(const Resolved& r, Context& ctx, ConvState* s) {
  const Launch& launch = *r.launch;
  const ConvParams& p = launch.conv;
  const char* prefix = conv_prefix(p);
  const Dt dt = launch.in[0].ref.dt;
  if (launch.in[1].ref.dt != dt || launch.out[0].ref.dt != dt) {
    return std::string(prefix) + "x, w and y must share a dtype";
  }
  cudnnDataType_t type;
  if (!dnn_type(dt, &type)) return std::string(prefix) + "no cuDNN convolution for this dtype";
  s->double_scale = dt == Dt::kF64;
  const int sp = p.spatial;
  bool ok = fits_int(p.n) && fits_int(p.c) && fits_int(p.k) && p.group >= 1 && fits_int(p.group);
  for (int d = 0; d < sp; ++d) {
    ok = ok && fits_int(p.in[d]) && fits_int(p.out[d]) && fits_int(p.kernel[d]) &&
         p.stride[d] >= 1 && fits_int(p.stride[d]) && p.dilation[d] >= 1 &&
         fits_int(p.dilation[d]) && fits_int(p.pad[d]);
  }
  if (!ok) return std::string(prefix) + "sizes out of range [" + conv_shape(p) + "]";
  if (p.c % p.group != 0 || p.k % p.group != 0) {
    return std::string(prefix) + "channels not divisible by the group count [" + conv_shape(p) +
           "]";
  }

  // Transposed: the forward convolution it is the backward data of maps y (k channels) to x
  // (c channels) with w [c, k / group, kernel...] as its [K, C / group, kernel...] filter.
  // Filter gradient: x and y are the forward convolution's input and output gradient, w its
  // weight gradient.
  std::string e = make_tensor(&s->x, type, p.n, p.c, p.in, sp, p, "x");
  if (e.empty()) e = make_tensor(&s->y, type, p.n, p.k, p.out, sp, p, "y");
  if (!e.empty()) return e;

  int filter[5];
  int nd = 0;
  filter[nd++] = static_cast<int>(p.transpose ? p.c : p.k);
  filter[nd++] = static_cast<int>(p.transpose ? p.k / p.group : p.c / p.group);
  if (sp == 1) filter[nd++] = 1;
  for (int d = 0; d < sp; ++d) filter[nd++] = static_cast<int>(p.kernel[d]);
  e = dnn_error(cudnnCreateFilterDescriptor(&s->w), "cudnnCreateFilterDescriptor", p);
  if (e.empty()) {
    const std::string what = "cudnnSetFilterNdDescriptor " + dims_text(filter, nd);
    e = dnn_error(cudnnSetFilterNdDescriptor(s->w, type, CUDNN_TENSOR_NCHW, nd, filter),
                  what.c_str(), p);
  }
  if (!e.empty()) return e;

  int pad[3], stride[3], dilation[3];
  int ns = 0;
  if (sp == 1) {
    pad[ns] = 0;
    stride[ns] = 1;
    dilation[ns] = 1;
    ++ns;
  }
  for (int d = 0; d < sp; ++d, ++ns) {
    pad[ns] = static_cast<int>(p.pad[d]);
    stride[ns] = static_cast<int>(p.stride[d]);
    dilation[ns] = static_cast<int>(p.dilation[d]);
  }
  e = dnn_error(cudnnCreateConvolutionDescriptor(&s->conv), "cudnnCreateConvolutionDescriptor", p);
  if (e.empty()) {
    e = dnn_error(
        cudnnSetConvolutionNdDescriptor(s->conv, ns, pad, stride, dilation, CUDNN_CROSS_CORRELATION,
                                        s->double_scale ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
        "cudnnSetConvolutionNdDescriptor", p);
  }
  if (e.empty()) {
    e = dnn_error(cudnnSetConvolutionGroupCount(s->conv, static_cast<int>(p.group)),
                  "cudnnSetConvolutionGroupCount", p);
  }
  // cuDNN's default math lets f32 run as TF32 on tensor cores; FMA keeps f32 to f32 rounding,
  // which agreement with the CPU executor needs (PyTorch's default, torch.backends.cudnn.
  // allow_tf32, would take TF32, and the hardware profiles price fp32 convolutions so through
  // tf32_conv). Half types want the tensor cores.
  const cudnnMathType_t math = dt == Dt::kF16 || dt == Dt::kBF16 ? CUDNN_TENSOR_OP_MATH
                               : dt == Dt::kF32                  ? CUDNN_FMA_MATH
                                                                 : CUDNN_DEFAULT_MATH;
  if (e.empty()) {
    e = dnn_error(cudnnSetConvolutionMathType(s->conv, math), "cudnnSetConvolutionMathType", p);
  }
  if (!e.empty()) return e;

  // The shape cuDNN derives must be the program's, or the kernels read past the buffers.
  int derived[5] = {};
  e = dnn_error(
      cudnnGetConvolutionNdForwardOutputDim(s->conv, p.transpose ? s->y : s->x, s->w, nd, derived),
      "cudnnGetConvolutionNdForwardOutputDim", p);
  if (!e.empty()) return e;
  int expected[5];
  int ne = 0;
  expected[ne++] = static_cast<int>(p.n);
  expected[ne++] = static_cast<int>(p.transpose ? p.c : p.k);
  if (sp == 1) expected[ne++] = 1;
  for (int d = 0; d < sp; ++d) {
    expected[ne++] = static_cast<int>(p.transpose ? p.in[d] : p.out[d]);
  }
  for (int d = 0; d < nd; ++d) {
    if (derived[d] != expected[d]) {
      return std::string(prefix) + "cuDNN derives " + (p.transpose ? "the input " : "the output ") +
             dims_text(derived, nd) + ", the program says " + dims_text(expected, nd) + " [" +
             conv_shape(p) + "]";
    }
  }

  // f32 results on tensor cores would be TF32 whatever the descriptor asked.
  auto acceptable = [&](cudnnStatus_t status, size_t memory, cudnnMathType_t algo_math) {
    if (status != CUDNN_STATUS_SUCCESS || memory > ctx.workspace_bytes) return false;
    return dt != Dt::kF32 || (algo_math != CUDNN_TENSOR_OP_MATH &&
                              algo_math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
  };
  cudnnHandle_t handle = static_cast<cudnnHandle_t>(ctx.cudnn);
  int max_count = 0, returned = 0;
  cudnnMathType_t chosen_math = math;
  bool found = false;
  // The fastest of cuDNN's timed algorithms (its results come fastest first) that fits.
  auto first_fit = [&](const auto& perf, auto* algo) {
    for (int i = 0; i < returned; ++i) {
      if (acceptable(perf[i].status, perf[i].memory, perf[i].mathType)) {
        *algo = perf[i].algo;
        chosen_math = perf[i].mathType;
        return true;
      }
    }
    return false;
  };
  if (p.filter_grad) {
    e = dnn_error(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count),
                  "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", p);
    if (!e.empty()) return e;
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(
        static_cast<size_t>(max_count > 0 ? max_count : 1));
    // x and dy are the launch's inputs, dw its output.
    e = dnn_error(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                      handle, s->x, r.in[0], s->y, r.in[1], s->conv, s->w, r.out[0],
                      static_cast<int>(perf.size()), &returned, perf.data(), ctx.workspace,
                      ctx.workspace_bytes),
                  "cudnnFindConvolutionBackwardFilterAlgorithmEx", p);
    if (!e.empty()) return e;
    found = first_fit(perf, &s->filter_algo);
  } else if (!p.transpose) {
    e = dnn_error(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count),
                  "cudnnGetConvolutionForwardAlgorithmMaxCount", p);
    if (!e.empty()) return e;
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(
        static_cast<size_t>(max_count > 0 ? max_count : 1));
    e = dnn_error(
        cudnnFindConvolutionForwardAlgorithmEx(handle, s->x, r.in[0], s->w, r.in[1], s->conv, s->y,
                                               r.out[0], static_cast<int>(perf.size()), &returned,
                                               perf.data(), ctx.workspace, ctx.workspace_bytes),
        "cudnnFindConvolutionForwardAlgorithmEx", p);
    if (!e.empty()) return e;
    found = first_fit(perf, &s->forward_algo);
  } else {
    e = dnn_error(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count),
                  "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", p);
    if (!e.empty()) return e;
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(
        static_cast<size_t>(max_count > 0 ? max_count : 1));
    // dy is the launch's input x, dx its output y.
    e = dnn_error(cudnnFindConvolutionBackwardDataAlgorithmEx(
                      handle, s->w, r.in[1], s->x, r.in[0], s->conv, s->y, r.out[0],
                      static_cast<int>(perf.size()), &returned, perf.data(), ctx.workspace,
                      ctx.workspace_bytes),
                  "cudnnFindConvolutionBackwardDataAlgorithmEx", p);
    if (!e.empty()) return e;
    found = first_fit(perf, &s->backward_algo);
  }
  if (!found) {
    return std::string(prefix) + "no cuDNN algorithm fits the " +
           std::to_string(ctx.workspace_bytes >> 20) + " MiB workspace [" + conv_shape(p) + "]";
  }
  // The algorithm was timed under its own math type; run it under that one.
  if (chosen_math != math && dt != Dt::kF32) {
    e = dnn_error(cudnnSetConvolutionMathType(s->conv, chosen_math), "cudnnSetConvolutionMathType",
                  p);
  }
  return e;
}

}  // namespace

std::string enqueue_conv(const Resolved& r, Context& ctx) {
  const Launch& launch = *r.launch;
  const ConvParams& p = launch.conv;
  const char* prefix = conv_prefix(p);
  if (launch.in.size() < 2 || launch.out.empty()) {
    return std::string(prefix) + (p.filter_grad ? "needs inputs {x, dy} and output {dw}"
                                                : "needs inputs {x, w} and output {y}");
  }
  if (p.spatial < 1 || p.spatial > 3) {
    return std::string(prefix) + std::to_string(p.spatial) + " spatial dims (1 to 3 supported)";
  }
  int64_t out_elements = p.n * p.k, in_elements = p.n * p.c;
  for (int d = 0; d < p.spatial; ++d) {
    out_elements *= p.out[d];
    in_elements *= p.in[d];
  }
  if (p.filter_grad) {
    // dw = 0 where no position is summed over; the plan needs every element of it written.
    int64_t dw_elements = p.k * (p.group > 0 ? p.c / p.group : 0);
    for (int d = 0; d < p.spatial; ++d) dw_elements *= p.kernel[d];
    if (dw_elements == 0) return "";
    if (out_elements == 0 || in_elements == 0) {
      return cuda_error(
          cudaMemsetAsync(r.out[0], 0,
                          static_cast<size_t>(dw_elements * dt_size(launch.out[0].ref.dt)),
                          ctx.stream),
          "conv filter gradient: cudaMemsetAsync");
    }
  }
  if (out_elements == 0) return "";
  if (in_elements == 0) {
    return std::string(prefix) + "empty input into a non-empty output [" + conv_shape(p) + "]";
  }

  auto found = ctx.state.find(ctx.launch_index);
  if (found == ctx.state.end()) {
    if (ctx.capturing) {
      return std::string(prefix) + "no cuDNN plan (the program must run before capture)";
    }
    auto state = std::make_shared<ConvState>();
    const std::string e = plan(r, ctx, state.get());
    if (!e.empty()) return e;
    found = ctx.state.emplace(ctx.launch_index, std::move(state)).first;
  }
  const ConvState& s = *static_cast<const ConvState*>(found->second.get());

  const float alpha_f = 1, beta_f = 0;
  const double alpha_d = 1, beta_d = 0;
  const void* alpha = s.double_scale ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = s.double_scale ? static_cast<const void*>(&beta_d) : &beta_f;
  cudnnHandle_t handle = static_cast<cudnnHandle_t>(ctx.cudnn);
  if (p.filter_grad) {
    return dnn_error(cudnnConvolutionBackwardFilter(handle, alpha, s.x, r.in[0], s.y, r.in[1],
                                                    s.conv, s.filter_algo, ctx.workspace,
                                                    ctx.workspace_bytes, beta, s.w, r.out[0]),
                     "cudnnConvolutionBackwardFilter", p);
  }
  if (!p.transpose) {
    return dnn_error(
        cudnnConvolutionForward(handle, alpha, s.x, r.in[0], s.w, r.in[1], s.conv, s.forward_algo,
                                ctx.workspace, ctx.workspace_bytes, beta, s.y, r.out[0]),
        "cudnnConvolutionForward", p);
  }
  return dnn_error(cudnnConvolutionBackwardData(handle, alpha, s.w, r.in[1], s.x, r.in[0], s.conv,
                                                s.backward_algo, ctx.workspace, ctx.workspace_bytes,
                                                beta, s.y, r.out[0]),
                   "cudnnConvolutionBackwardData", p);
}

}  // namespace autopar::cuda
