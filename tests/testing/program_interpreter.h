// A host interpreter of the CUDA backend's device programs, for tests without a GPU: it runs a
// lowered program's launches in double precision over byte copies of its two regions, so what
// the lowering composes (strides, GEMM parameters, the order of launches, the arena's reuse)
// is checked against the CPU executor. It runs every kind of launch the lowering makes: kMap
// (every opcode), kReduce, kSoftmax, kLayerNorm(Grad), kBatchNorm, kCrossEntropy, kAdam,
// kDropout, kGather, kGatherElements, kScatterElements, kGatherND, kScatterND, kResize,
// kMatMul, kConv (forward, transposed, filter gradient), kPool (max, average, MaxPoolGrad) and
// kCopyBytes; kComm and kHost launches go to callbacks (the device kernels and the cuDNN and
// cuBLASLt calls themselves are checked on a GPU, label cuda).
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
  // Reads graph value `value` (dtype and dims from the caller's `like`); one the lowering gave
  // no storage reads as NaN (integers: the lowest int32), so that it compares unequal to what
  // was expected.
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
  std::string batch_norm(const cuda::Launch& l);
  std::string elements(const cuda::Launch& l, bool scatter);
  std::string gather_nd(const cuda::Launch& l);
  std::string resize(const cuda::Launch& l);
  std::string conv(const cuda::Launch& l);
  std::string pool(const cuda::Launch& l);

  const runtime::CudaLowering& lowering_;
  mutable std::vector<uint8_t> arena_, persistent_;
};

}  // namespace autopar::testing
