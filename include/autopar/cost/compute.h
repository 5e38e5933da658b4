// The compute model: each node is a roofline, max(FLOPs / (peak · efficiency), bytes /
// (bandwidth · efficiency)), plus the device's kernel launch overhead. Efficiencies come from
// the profile's curve for the node's op class at the node's work.
#pragma once

#include <array>
#include <optional>
#include <set>

#include "autopar/cost/hardware_profile.h"
#include "autopar/ir/graph.h"
#include "autopar/parallel/scheme.h"

namespace autopar {

// The class whose efficiency curve prices the node: MatMul/Gemm (attention when both operands
// are batched, rank 3 or more, and neither is a weight), Conv/ConvTranspose, normalisations and
// reductions, elementwise and data movement. Communication ops have no compute class (they
// are priced by the communication model).
std::optional<OpClass> op_class_of(const Graph& graph, const Node& node);

// The profile's peak key for arithmetic in `dtype`: fp32, bf16, fp16 (fp64 for f64).
const char* peak_key(DType dtype);
// The peak key of a scheme's arithmetic: bf16 or fp16 under mixed precision, else fp32.
const char* peak_key(Precision precision);

struct NodeCost {
  double seconds = 0;
  bool memory_bound = false;
};

// A node's work as the compute model prices it: its class, FLOPs and bytes, the peak of its
// arithmetic type and what its alignment keeps of it.
struct NodeWork {
  std::optional<OpClass> op_class;  // none: a communication op
  double flops = 0;
  double bytes = 0;
  double peak = 0;     // FLOP/s of the node's arithmetic type
  double aligned = 1;  // gemm_unaligned_efficiency for an unaligned half-precision GEMM
  bool view = false;   // priced 0 where the device has free views
  // A bf16 or fp16 GEMM's (m, n, k), batch dims folded into m, read on the device's GEMM shape
  // table where it has one; zeros for other nodes.
  std::array<double, 3> gemm_shape{};
  // A fused attention kernel (Attention, RingAttention; their gradients backward): read on the
  // device's FlashAttention curves where it has them.
  enum class Flash : uint8_t { kNo, kForward, kBackward } flash = Flash::kNo;
  // The curve the node's work is read on: its FlashAttention curve, else its class's.
  const EfficiencyCurve& curve(const DeviceSpec& device) const;
  // One device's part when the work divides evenly over `degree` devices: the roofline at the
  // part's FLOPs and bytes (the curves read at the part's work; a GEMM's shape table at m over
  // `degree`), plus one launch.
  NodeCost cost(const DeviceSpec& device, double degree = 1) const;
};
NodeWork node_work(const HardwareProfile& profile, const Graph& graph, const Node& node);

// One node on one device of the profile (0 for communication ops and nodes without work).
NodeCost node_cost(const HardwareProfile& profile, const Graph& graph, const Node& node);

// A model's forward FLOPs, the numerator of MFU: every node's, attention counted as its fused
// form does (under a causal mask only the visible half of the scores and of their weighted
// sum), so no plan can exceed 100% by skipping what the mask hides.
double model_forward_flops(const Graph& model);
// A node a framework runs as a view, without a kernel (priced 0 where device.free_views).
bool is_view(const Graph& graph, const Node& node);
// Per node: whether it is part of a weight gradient's accumulation behind its GEMM, the work a
// GEMM accumulating into the fp32 main gradient does itself (accumulates_in_gemm): the
// backward's Cast of a rank-2 MatMul or Gemm result to a wider type, a Mul of that by a
// constant, and an Add of either into a graph input (the accumulator), each read only by the
// next of them, by the update or by a collective.
std::vector<bool> gemm_accumulation(const Graph& graph);
// Per node: whether it is part of a reduced gradient's accumulation over microbatches (ZeRO 2
// and 3 reduce-scatter each microbatch's gradient onto the rank's shard and add it into an
// accumulator): the backward's Mul of a collective's result by a constant, and an Add of it (or
// of the collective's result) into a graph input, each read only by the next of them, by the
// update or by nothing. Frameworks run these behind the reduction on its own stream (PyTorch
// FSDP's post-backward hook, DeepSpeed's reduction stream), so the backward does not wait.
std::vector<bool> reduction_accumulation(const Graph& graph);

// Where the profile's runtime fuses elementwise runs (device.fused_op_element_s > 0): per node
// of `graph`, its share of the fused kernel its run makes (spread evenly over the run, as the
// runtime's profiling attributes it), and −1 at nodes outside runs (priced by node_cost). A kernel
// reads and writes only what crosses its boundary, and spends `fused_op_element_s` per element and
// operation, plus one launch. No run spans a node of `cut_before` (a program's first node).
// A fused training op (ai.autopar.training) is such a kernel of its own, its FLOPs its element
// operations (Adam at the profile's optimizer_element_s per parameter element when it has
// one). Where instead the profile's stack runs op kernels (kernels.fusions: op_kernels), what
// framework_kernel_seconds gives. Empty when the profile does neither.
// `fusions`, when given, stands for the profile's (a scheme's kernels.fusions), and
// `memory_format` for its memory format: where the device's convolutions run on NHWC operands
// (device.nhwc_convolutions) and the activations are NCHW, each convolution on tensor cores
// costs, beyond its own kernel, a transpose of each operand in and of its result out (one
// kernel each, reading and writing the tensor at the elementwise curve).
std::vector<double> fused_node_seconds(const HardwareProfile& profile, const Graph& graph,
                                       const std::vector<NodeId>& cut_before = {},
                                       const std::set<Fusion>* fusions = nullptr,
                                       std::optional<MemoryFormat> memory_format = std::nullopt);

// Where the profile's stack runs op kernels (`kernels: {fusions: [op_kernels]}`): per node, its
// share of the one kernel that the nodes carrying out its source op (Node::source) in its
// direction make within a program of `cut_before`; −1 at nodes priced alone (by node_cost). The
// kernel reads and writes once what crosses its boundary, a wide copy made by a Cast inside it
// at its narrow size, at the memory curve of norms when it reduces and of elementwise kernels
// otherwise, plus one launch; an op that waits on a collective of its own partial results (a
// synchronised BatchNorm) reads its inputs twice and launches twice, as SyncBatchNorm's two
// kernels do. Where the op is a GEMM or a convolution, its gradients' transposes are free (the
// library reads the layout it gets) and its other nodes are priced alone. Empty when the profile
// runs no op kernels.
std::vector<double> framework_kernel_seconds(const HardwareProfile& profile, const Graph& graph,
                                             const std::vector<NodeId>& cut_before,
                                             const std::set<Fusion>& fusions);

}  // namespace autopar
