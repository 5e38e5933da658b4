// A host interpreter of the CUDA backend's device programs, for tests without a GPU: it runs a
// lowered program's launches in double precision over byte copies of its two regions, so what
// the lowering composes (strides, GEMM parameters, the order of launches, the arena's reuse)
// is checked against the CPU executor. It runs kMap (the common opcodes), kReduce, kSoftmax,
// kLayerNorm(Grad), kCrossEntropy, kAdam, kDropout, kGather, kScatterND, kMatMul and kCopyBytes;
// kComm and kHost launches go to callbacks; any other kind is an error that names it (the device
// kernels themselves are checked on a GPU, label cuda).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autopar/ir/tensor.h"
#include "runtime/cuda/lowering.h"

namespace autopar::testing {

class ProgramInterpreter {
 public:
  explicit ProgramInterpreter(const runtime::CudaLowering& lowering);

  // Writes a tensor into the storage of graph value `value` (an input or initializer).
  void write(ValueId value, const Tensor& t);
  // Reads graph value `value` (dtype and dims from the caller's `like`).
  Tensor read(ValueId value, DType dtype, const std::vector<int64_t>& dims) const;

  // Launch `index` alone; "" or what could not be run.
  std::string step(size_t index);
  // Every launch; "" or the first failure, prefixed with its launch.
  std::string run();

  // kComm and kHost launches: called with the launch; they read and write through element()
  // and set_element().
  std::function<std::string(const cuda::Launch&)> on_comm, on_host;

  // Element `i` (in elements from the ref) of a ref's storage, as double / written from one.
  double element(const cuda::Ref& ref, int64_t i) const;
  void set_element(const cuda::Ref& ref, int64_t i, double v);

 private:
  std::string map(const cuda::Launch& l);
  std::string reduce(const cuda::Launch& l);
  std::string softmax(const cuda::Launch& l);
  std::string matmul(const cuda::Launch& l);
  std::string layer_norm(const cuda::Launch& l);
  std::string layer_norm_grad(const cuda::Launch& l);
  std::string cross_entropy(const cuda::Launch& l);
  std::string gather(const cuda::Launch& l);
  std::string adam(const cuda::Launch& l);
  std::string dropout(const cuda::Launch& l);
  std::string scatter_nd(const cuda::Launch& l);

  const runtime::CudaLowering& lowering_;
  mutable std::vector<uint8_t> arena_, persistent_;
};

}  // namespace autopar::testing
