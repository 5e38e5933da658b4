// Cases the CUDA backend's tests share, on the GPU (label cuda) and on the host interpreter of
// device programs (label unit): a tiny zoo model's SGD training step with its feeds, the
// Llama fused-op cases, and every program of every device of a plan lowered for one mode of
// communication.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autopar/autodiff/autodiff.h"
#include "autopar/parallel/plan.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/executor.h"
#include "runtime/cuda/lowering.h"
#include "testing/run_node.h"

namespace autopar::testing {

// A tensor of `dtype` with values uniform in [lo, hi) from `seed` (rounded to the dtype).
Tensor random_tensor(DType dtype, std::vector<int64_t> dims, uint64_t seed, double lo = -1,
                     double hi = 1);

// One SGD step of zoo model `name` at batch 4 (fused training ops or not), and its feeds: the
// model's synthetic inputs (seed 3) and labels i % 3. SGD: after one step the update is the
// gradient itself, so round-off in a gradient that is zero stays round-off (Adam's first step
// would scale it to the learning rate).
struct TrainingStep {
  TrainingGraph training;
  std::vector<runtime::Feed> feeds;
};
// `precision` bf16 or fp16: the model in mixed precision first (to_mixed_precision: fp32
// parameters cast down where read, the forward in the half type, the loss back in fp32).
TrainingStep tiny_training_step(const std::string& name, bool fused,
                                DType precision = DType::kFloat32);

// Llama's fused training ops in `dtype`: RMS norm and its gradient (a scale over part of the
// normalised dims), rotary embeddings both ways, SwiGLU and its gradient, attention with four
// query heads over two key/value heads, causal and not, forward and backward. `launches`: the
// lowering's launches by kind, as summarize() counts them.
struct OpCase {
  std::string what;
  NodeRun node;
  std::string launches;
};
std::vector<OpCase> llama_op_cases(DType dtype);
// Convolutions (cuDNN's forward, backward data as ConvTranspose, backward filter as autodiff's
// weight-gradient Conv; grouped, depthwise, 1-D and 3-D, asymmetric pads), pooling (max with
// indices, dilated, ceil mode, 1-D, its gradient; average with and without the pads counted)
// and BatchNormalization (inference in every type; training, opset 15 and opset 9's five
// outputs, in f32 and f64) in `dtype`.
std::vector<OpCase> conv_op_cases(DType dtype);
// GatherElements and ScatterElements (along the last and the first axis, with and without
// add), GatherND (slices and whole elements, negative indices) and ScatterND in `dtype`.
std::vector<OpCase> indexing_op_cases(DType dtype);
// Resize, f32: nearest and linear under each coordinate mode the CUDA backend runs, up and
// down, and a 1-D nearest with ceil rounding.
std::vector<OpCase> resize_op_cases();

// `range`-bounded int64 indices uniform from `seed`.
Tensor index_tensor(std::vector<int64_t> dims, int64_t range, uint64_t seed);

// Every program of every device of `plan` lowered with `communication` on an inproc
// communicator of the plan's mesh; `visit` gets each device, program, its graph and lowering.
// An error names the device and program whose lowering failed.
Status lower_every_program(
    const Plan& plan, runtime::CudaCommunication communication,
    const std::function<void(int64_t device, const Program& program, const Graph& graph,
                             const runtime::CudaLowering& lowering)>& visit);

}  // namespace autopar::testing
