// The CUDA backend's program: what the host lowering (lower.cc, C++20) hands the device side
// (the .cu files, C++17). Plain data with no project headers, so nvcc never sees fmt or the IR.
//
// A program is a list of launches over two memory regions: the arena (activations, planned
// from the graph's liveness, one allocation per program) and the persistent region (graph
// inputs, initializers, constants, the optimizer state: fed and read by the host). Every
// tensor is a Ref: a region and a byte offset. Views (Reshape, Flatten, Squeeze, Unsqueeze)
// are the Ref of what they view; they launch nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace autopar::cuda {

// Element types as the device stores them (half types as their 16 bits).
enum class Dt : uint8_t { kF32, kF16, kBF16, kF64, kI64, kI32, kI8, kU8, kBool };
inline int64_t dt_size(Dt dt) {
  switch (dt) {
    case Dt::kF64:
    case Dt::kI64:
      return 8;
    case Dt::kF32:
    case Dt::kI32:
      return 4;
    case Dt::kF16:
    case Dt::kBF16:
      return 2;
    default:
      return 1;
  }
}
inline bool dt_is_float(Dt dt) {
  return dt == Dt::kF32 || dt == Dt::kF16 || dt == Dt::kBF16 || dt == Dt::kF64;
}

enum class Region : uint8_t { kArena = 0, kPersistent = 1 };

struct Ref {
  Region region = Region::kArena;
  int64_t offset = 0;  // bytes from the region's start (256-byte aligned for arena values)
  Dt dt = Dt::kF32;
};

inline constexpr int kMaxRank = 8;

// An iteration space: a flat index i over dims (row-major, last dim fastest).
struct Space {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t count() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= dims[d];
    return n;
  }
};

// Where an operand's element lives for each point of a Space: element offset
// base + sum_d index_d * strides[d] from its Ref (strides in elements; 0 broadcasts).
struct Access {
  Ref ref;
  int64_t base = 0;
  int64_t strides[kMaxRank] = {};
};

// ---- kMap: elementwise programs ------------------------------------------------------------
// For every point of `space`, runs `code` on registers and stores the results. Registers are
// float when every operand is f32/f16/bf16 (`wide` false), else double (`wide` true: int64,
// bool, f64 or a Cast between kinds; int64 values stay exact below 2^53). Loads convert from
// the operand's Dt to the register type; stores convert back (float to half types: round to
// nearest even; float to integers: truncation toward zero, as C++ does; to bool: != 0).
enum class MapOp : uint8_t {
  kLoad,   // r[dst] = inputs[a] at this point
  kConst,  // r[dst] = imm
  kStore,  // outputs[a] at this point = r[b]
  // Unary: r[dst] = f(r[a]).
  kNeg,
  kAbs,
  kSign,
  kSqrt,
  kReciprocal,
  kExp,
  kLog,
  kErf,
  kTanh,
  kSigmoid,
  kRelu,
  kFloor,
  kCeil,
  kSoftplus,
  kSoftsign,
  kNot,
  kLeakyRelu,    // x >= 0 ? x : imm * x
  kElu,          // x >= 0 ? x : imm * (exp(x) - 1)
  kSelu,         // imm2 * (x > 0 ? x : imm * (exp(x) - 1)) (imm alpha, imm2 gamma)
  kHardSigmoid,  // max(0, min(1, imm * x + imm2))
  kHardSwish,    // x * max(0, min(1, x / 6 + 1/2))
  kGelu,         // 0.5 x (1 + erf(x / sqrt 2))
  kGeluTanh,     // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kRoundHalf,    // rounds r[a] to the half type imm (0 f16, 1 bf16) and back: a Cast f32->half->f32
  // Binary: r[dst] = f(r[a], r[b]).
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMax,
  kMin,
  kPRelu,
  kEqual,
  kLess,
  kGreater,
  kLessOrEqual,
  kGreaterOrEqual,
  kAnd,
  kOr,
  kIntDiv,        // kIntDiv: C++ integer division (int64 Div)
  kGeluGrad,      // dy = r[a], x = r[b]: dy * (Phi(x) + x phi(x))
  kGeluTanhGrad,  // the tanh form's derivative times dy
  // Ternary: r[dst] = r[a] != 0 ? r[b] : r[c].
  kWhere,
};
struct MapInstr {
  MapOp op;
  uint8_t dst = 0, a = 0, b = 0, c = 0;
  double imm = 0, imm2 = 0;
};
inline constexpr int kMaxMapRegisters = 32;
// What one kMap launch may hold; the lowering splits larger fused runs.
inline constexpr int kMaxMapInputs = 8;
inline constexpr int kMaxMapOutputs = 3;
inline constexpr int kMaxMapCode = 32;
struct MapParams {
  bool wide = false;
  std::vector<MapInstr> code;
};

// ---- kReduce: out[o] = reduce over r of in[o, r] ------------------------------------------
// `space` is the kept space (rank >= 0) and `reduced` the reduced one; the input's element is
// in.base + sum kept_index_d * in.strides[d] + sum reduced_index_d * reduced_strides[d]; the
// output is dense over `space` (out.strides as for any Access). Accumulates in float (f32/half)
// or double (f64); sum over an empty space is 0, max over it -inf.
enum class ReduceOp : uint8_t { kSum, kMean, kMax, kMin, kSumSquare };
struct ReduceParams {
  ReduceOp op = ReduceOp::kSum;
  Space reduced;
  int64_t reduced_strides[kMaxRank] = {};
};

// ---- row kernels: a tensor seen as [outer, n, inner], rows along n with stride inner ----------
// kSoftmax: out = softmax (or log-softmax) along n. inputs {x}, outputs {y}.
struct SoftmaxParams {
  int64_t outer = 0, n = 0, inner = 1;
  bool log = false;
};
// kLayerNorm: rows of `cols` contiguous elements (inner = 1). inputs {x, scale, bias?}
// (scale and bias: `cols` elements, or fewer read cyclically c % count), outputs
// {y, mean?, inv_std?} (mean and inv_std: one float per row, stash dtype f32). Statistics in
// float; y = (x - mean) * inv_std * scale + bias, inv_std = 1 / sqrt(var + epsilon).
// kLayerNormGrad (ai.autopar.training): inputs {dy, x, scale}, outputs {dx, x_hat}, the CPU
// kernel's formula (src/runtime/kernels/training.cc).
struct LayerNormParams {
  int64_t rows = 0, cols = 0;
  int64_t scale_count = 0, bias_count = 0;  // 0 bias_count: no bias
  double epsilon = 1e-5;
};
// kBatchNorm: x [n, c, spatial...] as [n, c, inner]. inputs {x, scale, bias, mean, var},
// outputs {y, running_mean?, running_var?, batch_mean?, batch_var?} (training: the batch's mean
// and biased variance over n and inner, running = momentum * running + (1 - momentum) * batch,
// as the CPU kernel, src/runtime/kernels/normalization.cc; inference: the given statistics).
struct BatchNormParams {
  int64_t n = 0, c = 0, inner = 0;
  double epsilon = 1e-5, momentum = 0.9;
  bool training = false;
};
// kSoftmaxCrossEntropy: scores [n, classes, inner], labels int64 [n, inner]. inputs
// {scores, labels, weights?}, outputs {loss, log_prob?}; loss is a scalar (reduction mean or
// sum) or [n, inner] (none), as the CPU kernel (src/runtime/kernels/loss.cc). An out-of-range
// label is reported through the program's error flag.
struct CrossEntropyParams {
  int64_t n = 0, classes = 0, inner = 1;
  int reduction = 0;  // 0 mean, 1 sum, 2 none
  bool has_ignore = false;
  int64_t ignore_index = 0;
};
// kAdam (ai.autopar.training): inputs {x, g, m, v, rate[1], epsilon[1], c[5]}, outputs
// {x', m', v'}, `count` elements each, the CPU kernel's arithmetic (training.cc).
struct AdamParams {
  int64_t count = 0;
};

// ---- indexing ----------------------------------------------------------------------------
// kGather: data [outer, axis_dim, inner], indices (int64 or int32, `index_count` of them,
// negative ones wrap), out [outer, index_count, inner]. Out-of-range: the error flag.
struct GatherParams {
  int64_t outer = 0, axis_dim = 0, inner = 1, index_count = 0;
};
// kGatherElements / kScatterElements: data, indices and updates of rank `rank`, axis `axis`;
// GatherElements: out[i] = data[i with i[axis] = indices[i]]; ScatterElements: out = data,
// then out[i with i[axis] = indices[i]] (reduction 0 none, 1 add) = updates[i], over the
// indices' dims. Out-of-range: the error flag.
struct ElementsParams {
  int rank = 0;
  int axis = 0;
  int64_t data_dims[kMaxRank] = {};
  int64_t index_dims[kMaxRank] = {};
  int reduction = 0;
};
// kGatherND / kScatterND (batch_dims 0): indices [..., k] into data's first k dims, slices of
// `slice` elements. ScatterND: out = data, then each indexed slice = (or += for reduction 1)
// updates' slice.
struct NdParams {
  int k = 0;
  int64_t data_dims[kMaxRank] = {};
  int64_t index_count = 0;  // index tuples
  int64_t slice = 1;
  int reduction = 0;
};
// kPool: x [n, c, spatial...] (1 to 3 spatial dims). MaxPool (outputs {y, indices?}: int64
// flat indices into x's [n, c, spatial] as ONNX's default storage_order 0) or AveragePool
// (count_include_pad as ONNX says). Pads: begin then end per spatial dim.
struct PoolParams {
  bool max = true;
  bool grad = false;  // MaxPoolGrad: in dY, X; out dX (x's dims are `in`, dY's `out`)
  bool count_include_pad = false;
  int spatial = 2;
  int64_t n = 0, c = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t pad_begin[3] = {}, pad_end[3] = {};
};
// kResize: x [n, c, in...] to [n, c, out...] over `spatial` dims, nearest (floor of the
// asymmetric/half_pixel source coordinate as the CPU kernel) or linear; see
// src/runtime/kernels/shape_ops.cc run_resize for the exact coordinate rules.
struct ResizeParams {
  int spatial = 2;
  int64_t outer = 0;  // n * c
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  double scale[3] = {1, 1, 1};
  int mode = 0;          // 0 nearest, 1 linear
  int coordinate = 0;    // 0 half_pixel, 1 asymmetric, 2 align_corners, 3 pytorch_half_pixel
  int nearest_mode = 0;  // 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil
};
// kDropout (training, 0 < ratio < 1), in = {x, table, stream}: element i of x (of `dims`,
// row-major) is element e(i) = sum_d table[start_d + index_d(i)] of the whole tensor (start_d:
// the dims before d summed; the lowering writes each dim's whole-tensor offsets, so a plan's
// shard draws what one device draws for the element), keep = uniform_at(key, e(i)) >= ratio
// with key = draw_key(seed, stream[0]) (the CPU's hash and key, src/runtime/kernels/
// elementwise.cc; the stream is written by the host before each run), y = keep ? x / (1 -
// ratio) : 0; mask (bool) = keep.
struct DropoutParams {
  int64_t count = 0;
  double ratio = 0;
  uint64_t seed = 0;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
};

// ---- libraries ---------------------------------------------------------------------------
// kMatMul: for b < batch: C_b = alpha * op(A_b) op(B_b) + beta * C_b, all row-major, op(X) = X
// or its transpose. op(A) is m x k, op(B) k x n, C m x n. A_b starts at a.base + b * stride_a
// elements (stride 0: one matrix for every b), likewise B and C; lda/ldb/ldc are the row
// strides of A, B and C as stored. Inputs {A, B} (C is outputs[0], read when beta != 0).
// Accumulates in f32 (cuBLASLt CUBLAS_COMPUTE_32F; no TF32 for f32, as PyTorch's default).
struct MatMulParams {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1, beta = 0;
};
// kConv: NCHW (1-3 spatial dims; 1 is run as 2 with height 1), symmetric pads (the lowering
// pads asymmetric ones with a copy first), no bias (added by a kMap). Forward: inputs {x, w},
// w [k, c / group, kernel...], outputs {y}. transpose: ConvTranspose, inputs {x, w},
// w [c, k / group, kernel...], run as cuDNN's backward data; y [n, k, out...].
// filter_grad: cuDNN's backward filter, in = {x [n, c, in...], dy [n, k, out...]}, out =
// {dw [k, c / group, kernel...]}, stride, dilation and pads those of the forward convolution
// whose weight gradient it is.
struct ConvParams {
  bool transpose = false;
  bool filter_grad = false;
  int spatial = 2;
  int64_t n = 0, c = 0, k = 0, group = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pad[3] = {};
};

// ---- communication (ai.autopar) -----------------------------------------------------------
// kComm: over NCCL, on the communicators the device was given (Device::use_nccl). AllGather /
// ReduceScatter / AllToAll along dim 0 only (the lowering permutes around other axes). group:
// the global ranks, in order. A role profiled alone replaces each communication op with what
// it produces from recorded shapes (a kMap); one run through the host is a kHost launch.
enum class CommOp : uint8_t {
  kSend,
  kRecv,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast
};
struct CommParams {
  CommOp op = CommOp::kAllReduce;
  std::vector<int> group;
  int peer = -1;      // Send/Recv: global rank
  int root = 0;       // Broadcast: index into group
  int reduce = 0;     // 0 sum, 1 max, 2 min, 3 mean (AllReduce / ReduceScatter)
  int64_t count = 0;  // elements of the input
};

enum class Kind : uint8_t {
  kMap,
  kReduce,
  kSoftmax,
  kLayerNorm,
  kLayerNormGrad,
  kBatchNorm,
  kCrossEntropy,
  kAdam,
  kGather,
  kGatherElements,
  kScatterElements,
  kGatherND,
  kScatterND,
  kPool,
  kResize,
  kDropout,
  kMatMul,
  kConv,
  kComm,
  kCopyBytes,  // outputs[0] = inputs[0], `bytes` of them (a state update, a feed in place)
  // The host runs the node (Device::set_host_step): after every earlier launch has finished,
  // it reads `in` and writes `out` (communication through the host's communicator). A program
  // with one runs eagerly only.
  kHost,
};

struct Launch {
  Kind kind = Kind::kMap;
  std::string node;  // the graph node it runs, for errors and profiles ("" if none)
  int32_t node_id = -1;
  int32_t nodes = 1;  // graph nodes it runs (a fused elementwise run: several)
  // kMap: every input and output is an Access over `space`. Other kinds: refs in `in`/`out`
  // (Access strides unused; base only for kMatMul, in elements) and their params below. An
  // absent optional output has ref.offset -1 and resolves to a null pointer.
  Space space;
  std::vector<Access> in, out;
  int64_t bytes = 0;  // kCopyBytes
  MapParams map;
  ReduceParams reduce;
  SoftmaxParams softmax;
  LayerNormParams layer_norm;
  BatchNormParams batch_norm;
  CrossEntropyParams cross_entropy;
  AdamParams adam;
  GatherParams gather;
  ElementsParams elements;
  NdParams nd;
  PoolParams pool;
  ResizeParams resize;
  DropoutParams dropout;
  MatMulParams matmul;
  ConvParams conv;
  CommParams comm;
};

inline const char* kind_name(Kind kind) {
  static const char* const kNames[] = {
      "map",           "reduce",     "softmax", "layer_norm",      "layer_norm_grad",  "batch_norm",
      "cross_entropy", "adam",       "gather",  "gather_elements", "scatter_elements", "gather_nd",
      "scatter_nd",    "pool",       "resize",  "dropout",         "matmul",           "conv",
      "comm",          "copy_bytes", "host"};
  const auto i = static_cast<size_t>(kind);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

// The bytes a launch reads and writes where its form says (0 where it does not): a map reads
// each operand once per distinct element it walks (stride-0 dims repeat a cached element) and
// writes each output; a byte copy reads and writes its bytes.
inline int64_t launch_bytes(const Launch& l) {
  if (l.kind == Kind::kCopyBytes) return 2 * l.bytes;
  if (l.kind != Kind::kMap) return 0;
  int64_t total = 0;
  auto walked = [&](const Access& a) {
    int64_t elements = 1;
    for (int d = 0; d < l.space.rank; ++d) {
      if (a.strides[d] != 0) elements *= l.space.dims[d];
    }
    return elements * dt_size(a.ref.dt);
  };
  for (const Access& a : l.in) total += walked(a);
  for (const Access& a : l.out) total += walked(a);
  return total;
}

// Bytes copied into the persistent region when the program is loaded (initializer data,
// constants).
struct Upload {
  int64_t offset = 0;
  std::vector<uint8_t> bytes;
};

struct Program {
  int64_t arena_bytes = 0;
  int64_t persistent_bytes = 0;
  std::vector<Upload> uploads;
  std::vector<Launch> launches;
};

}  // namespace autopar::cuda
