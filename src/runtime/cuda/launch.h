// What the kernel families of the CUDA backend share: a launch with its pointers resolved,
// the device context (stream, handles, workspace, error flag), and one enqueue function per
// family. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "program.h"

namespace autopar::cuda {

// Written by kernels that meet bad data (an index out of range); read after a run.
struct DataError {
  int code;         // 0 none, 1 index out of range, 2 label out of range
  long long value;  // the offending index
  int launch;       // the launch's position in the program
};

struct NcclComms {
  void* world = nullptr;  // ncclComm_t; its rank is the global rank
  int rank = -1, size = 0, ordinal = 0;
  std::map<std::vector<int>, void*> groups;  // ncclComm_t of each group, split from the world
  NcclComms() = default;
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;
  ~NcclComms();
};

struct Context {
  cudaStream_t stream = nullptr;
  void* cublaslt = nullptr;         // cublasLtHandle_t
  void* cudnn = nullptr;            // cudnnHandle_t
  std::shared_ptr<NcclComms> nccl;  // null without Device::use_nccl
  void* workspace = nullptr;        // for cuBLASLt and cuDNN, allocated before capture
  size_t workspace_bytes = 0;
  DataError* error = nullptr;  // device memory
  int launch_index = 0;        // the launch being enqueued (kernels write it into DataError)
  // Per-launch state kept between runs (a cuBLASLt algorithm, cuDNN descriptors), keyed by
  // the launch's index; made on the first run, before capture, and reused after.
  std::map<int, std::shared_ptr<void>> state;
  // True while the stream is being captured: nothing may synchronise or allocate.
  bool capturing = false;
};

// The launch's tensors as device pointers (region base + offset), in the order of
// Launch::in and Launch::out.
struct Resolved {
  const Launch* launch = nullptr;
  const void* in[16] = {};
  void* out[8] = {};
};

// One function per family; each returns "" or one line naming what failed (the CUDA or
// library error). They enqueue on ctx.stream and never synchronise.
std::string enqueue_map(const Resolved& r, Context& ctx);              // kMap
std::string enqueue_reduce(const Resolved& r, Context& ctx);           // kReduce
std::string enqueue_softmax(const Resolved& r, Context& ctx);          // kSoftmax
std::string enqueue_layer_norm(const Resolved& r, Context& ctx);       // kLayerNorm
std::string enqueue_layer_norm_grad(const Resolved& r, Context& ctx);  // kLayerNormGrad
std::string enqueue_batch_norm(const Resolved& r, Context& ctx);       // kBatchNorm
std::string enqueue_cross_entropy(const Resolved& r, Context& ctx);    // kCrossEntropy
std::string enqueue_adam(const Resolved& r, Context& ctx);             // kAdam
std::string enqueue_gather(const Resolved& r, Context& ctx);           // kGather
std::string enqueue_elements(const Resolved& r, Context& ctx);  // kGatherElements, kScatterElements
std::string enqueue_nd(const Resolved& r, Context& ctx);        // kGatherND, kScatterND
std::string enqueue_pool(const Resolved& r, Context& ctx);      // kPool
std::string enqueue_resize(const Resolved& r, Context& ctx);    // kResize
std::string enqueue_dropout(const Resolved& r, Context& ctx);   // kDropout
std::string enqueue_matmul(const Resolved& r, Context& ctx);    // kMatMul (cuBLASLt)
std::string enqueue_conv(const Resolved& r, Context& ctx);      // kConv (cuDNN)
std::string enqueue_comm(const Resolved& r, Context& ctx);      // kComm (NCCL)

// Calls f(T{}) with the storage type of a float dtype (float, __half, __nv_bfloat16, double);
// for any other dtype, the error "what: dtype must be f32, f16, bf16 or f64".
template <typename F>
std::string with_float_type(Dt dt, const char* what, F&& f) {
  switch (dt) {
    case Dt::kF32:
      return f(float{});
    case Dt::kF16:
      return f(__half{});
    case Dt::kBF16:
      return f(__nv_bfloat16{});
    case Dt::kF64:
      return f(double{});
    default:
      return std::string(what) + ": dtype must be f32, f16, bf16 or f64";
  }
}

// "" or "what: cudaErrorName (message)".
std::string cuda_error(cudaError_t status, const char* what);
// The last launch error after a kernel launch, as cuda_error.
std::string check_launch(const char* kernel);
// The current device's multiprocessor count (cached), for sizing grids.
int sm_count();

}  // namespace autopar::cuda
