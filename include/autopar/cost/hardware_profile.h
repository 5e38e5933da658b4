// HardwareProfile: one kind of node (its devices and their links) and how nodes connect, read
// from configs/hw/*.yaml. Every number in a shipped profile carries its public source.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autopar/ir/dtype.h"
#include "autopar/parallel/kernel_choice.h"
#include "autopar/parallel/memory_policy.h"
#include "autopar/support/status.h"

namespace autopar {

// Achieved fraction of a peak as a function of the work of one kernel (FLOPs for compute
// classes, bytes for memory-bound ones): piecewise linear in log10(work), flat beyond the ends.
class EfficiencyCurve {
 public:
  EfficiencyCurve() = default;
  // Points sorted by work, each efficiency in (0, 1].
  static StatusOr<EfficiencyCurve> create(std::vector<std::pair<double, double>> points);
  double at(double work) const;
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;
};

// Achieved fraction of the half-precision peak of a GEMM by its shape: (m, n, k) for an m x k by
// k x n product, measured at every point of a grid of m, n and k values and read between them
// linearly in the logarithms of the three dims. Rows above the grid read as its largest m with
// the columns grown by the same factor, and columns above it likewise (the rate follows the
// output tiles spread over the device), up to the grid's corner; a k above it reads as its
// largest k. A dim below its smallest value costs what the smallest does, so the rate falls in
// proportion: the kernel's tiles are padded, and a smaller product does not take less time.
class GemmShapeTable {
 public:
  GemmShapeTable() = default;
  // Rows [m, n, k, efficiency]: every combination of their distinct m, n and k values exactly
  // once, each dim positive and each efficiency in (0, 1].
  static StatusOr<GemmShapeTable> create(const std::vector<std::array<double, 4>>& rows);
  double at(double m, double n, double k) const;
  // The rows, m slowest and k fastest.
  std::vector<std::array<double, 4>> rows() const;

 private:
  std::array<std::vector<double>, 3> dims_;  // the grid's m, n and k values, ascending
  std::vector<double> efficiency_;           // at (m_i, n_j, k_l): [(i · |n| + j) · |k| + l]
};

enum class OpClass : uint8_t { kGemm, kConv, kElementwise, kNorm, kAttention };
const char* op_class_name(OpClass op_class);

enum class Collective : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kPointToPoint
};
const char* collective_name(Collective collective);

struct DeviceSpec {
  std::string name;
  std::map<std::string, double> peak_flops;  // per dtype: fp32, tf32, bf16, fp16 (FLOP/s)
  double memory_bytes = 0;
  double memory_bandwidth = 0;  // bytes/s
  double launch_overhead_s = 0;
  // Per program run (a forward, backward or update of one microbatch): the runtime's own
  // dispatch beyond its nodes. Optional, 0 by default.
  double program_overhead_s = 0;
  // Whether collectives run on a stream of their own beside the compute (GPUs with NCCL), or
  // in line on the compute stream (autopar's CPU runtime). Optional, true by default.
  bool overlap_communication = true;
  // The fraction of its rate a compute kernel loses while a collective runs beside it: NCCL
  // runs each channel of a collective as a thread block resident on an SM of its own, so the
  // compute gets the rest of the SMs (and of the memory bandwidth). Optional, 0 by default.
  double overlap_slowdown = 0;
  // Whether shape-only ops are views rather than kernels (GPU frameworks: a Reshape, Squeeze,
  // Unsqueeze, Flatten or Identity changes strides, and a GEMM reads an operand transposed in
  // its last two dims through its transpose flags). Optional; false: every node is a kernel
  // (autopar's CPU runtime copies them).
  bool free_views = false;
  // Seconds per element per operation inside a fused elementwise kernel, where the runtime
  // runs runs of consecutive elementwise nodes as one kernel (autopar's CPU runtime does;
  // frameworks running kernels one by one do not). Optional; 0: every node is its own kernel.
  double fused_op_element_s = 0;
  // Seconds per parameter element of a fused optimizer update (ai.autopar.training::Adam)
  // where its arithmetic, not memory, bounds it. Optional; 0: its FLOPs at
  // fused_op_element_s each.
  double optimizer_element_s = 0;
  // Whether those fused runs include bf16 and fp16 nodes (autopar's CUDA backend fuses them;
  // its CPU runtime fuses f32 and f64 runs only). Optional, false by default.
  bool fuses_half_types = false;
  // The fraction of its curve's rate a bf16 or fp16 GEMM keeps when a row of an operand or of
  // its result is not a whole number of 16-byte units: tensor-core kernels load rows 16 bytes
  // at a time, and cuBLASLt falls back to slower ones (NVIDIA, "Matrix Multiplication
  // Background User's Guide", on dimensions that are multiples of 8 for 16-bit types).
  // gpt2's vocabulary of 50257 is one. Optional, 1 by default.
  double gemm_unaligned_efficiency = 1;
  // Seconds each collective of a plan costs beyond the communication model's transfer: the
  // devices meeting for it (a runtime whose collectives run in line on the devices' threads
  // waits and wakes for each). Optional, 0 by default.
  double collective_overhead_s = 0;
  // Whether fp32 GEMMs and fp32 convolutions run on TF32 tensor cores (at the tf32 peak), as
  // the framework's defaults say: PyTorch's torch.backends.cuda.matmul.allow_tf32 is off by
  // default (since 1.12) and torch.backends.cudnn.allow_tf32 on. Optional, false by default.
  bool tf32_matmul = false;
  bool tf32_conv = false;
  // Whether its convolutions on tensor cores (half types; fp32 where tf32_conv) run on NHWC
  // operands, so that a stack keeping activations NCHW (kernels.memory_format) transposes each
  // convolution's operands in and its result out: cuDNN's tensor-core kernels. Optional, false
  // by default (autopar's CPU runtime convolves NCHW itself).
  bool nhwc_convolutions = false;
  double reserved_bytes = 0;  // held by the runtime and framework, not available to a plan
  // The last-level cache: a kernel's second pass over inputs that fit in it reads them from
  // the cache; over larger ones it streams them from memory again. Optional, 0 by default.
  double l2_bytes = 0;
  std::map<OpClass, EfficiencyCurve> efficiency;
  // FlashAttention's own rates, forward and backward, as fractions of the peak at a kernel's
  // FLOPs: the fused Attention op and its gradient (and a ring attention's steps) tile the scores
  // through shared memory with an online softmax, and reach less than a batched GEMM of the same
  // FLOPs. Optional (`efficiency.flash_attention`, `efficiency.flash_attention_backward`); the
  // attention curve where absent.
  std::optional<EfficiencyCurve> flash_attention, flash_attention_backward;
  // A bf16 or fp16 GEMM's rate by its shape where the profile has one measured
  // (`efficiency.gemm_shapes`): a product with a short dim (a column-split weight under tp 8, a
  // microbatch of few tokens) runs below a square one of the same FLOPs. It stands for the gemm
  // curve at those types; the curve prices the rest (fp32, tf32).
  std::optional<GemmShapeTable> gemm_shapes;

  // Peak FLOP/s for arithmetic in `dtype`.
  double peak(std::string_view dtype) const;
  // What model FLOPs utilisation is measured against: the dense bf16 peak (the fp32 one on a
  // device without bf16), whatever a plan computes in, so that MFUs of fp32 and bf16 plans
  // compare (PaLM's and Megatron-LM's convention).
  double mfu_peak() const { return peak("bf16"); }
};

// One level of the interconnect: within a node (NVLink/NVSwitch) or between nodes (InfiniBand).
struct Tier {
  std::string name;
  int64_t devices_per_group = 1;            // devices that reach each other through this tier alone
  double alpha_s = 0;                       // latency per message step
  double bandwidth = 0;                     // bytes/s per direction, per device (intra) or per NIC
  int64_t nics_per_node = 0;                // between-node tiers: NICs shared by the node's devices
  std::map<Collective, double> efficiency;  // achieved bus bandwidth / bandwidth
};

struct HardwareProfile {
  std::string name;
  std::string source;  // the file it was read from
  DeviceSpec device;
  int64_t devices_per_node = 1;
  std::vector<Tier> tiers;  // innermost first
  int64_t nodes = 1;        // a cluster of this many nodes (--nodes)
  // Whose memory accounting the estimate follows on this machine (a scheme may name its own):
  // autopar's runtime unless the profile says which framework its users run.
  MemoryPolicy memory_policy = MemoryPolicy::kAutopar;
  // The attention kernel its software stack runs (`kernels: {attention: flash|unfused}`; a scheme
  // may name its own): unfused unless the profile says so.
  AttentionKernel attention = AttentionKernel::kUnfused;
  // The fused kernels it runs (`kernels: {fusions: [...]}`): none unless the profile says so.
  std::set<Fusion> fusions;
  bool fuses(Fusion fusion) const { return fusions.count(fusion) > 0; }
  // The layout its stack keeps convolutional activations in (`kernels: {memory_format: ...}`; a
  // scheme may name its own): nhwc unless the profile says so.
  MemoryFormat memory_format = MemoryFormat::kNhwc;

  int64_t num_devices() const { return devices_per_node * nodes; }
  // The innermost tier whose groups hold every device of `group` (device ids, nodes of
  // devices_per_node consecutive ids); the last tier otherwise.
  const Tier& tier_for(const std::vector<int64_t>& group) const;
};

// Parses a profile; errors are one line "<source>: <field>: <what>".
StatusOr<HardwareProfile> parse_hardware_profile(std::string_view yaml, std::string_view source);
// The profile a lowering prices its choices on when none is named (`transform` without --hw):
// a generic accelerator of 10 TFLOP/s in every type, every kernel at its peak, 1 TB/s of memory,
// 1 µs per launch, views free, and one tier of 10 GB/s links with 10 µs latency between all
// devices. A byte over a link then takes as long as 1000 FLOPs, and a message's latency as long as
// 1e8.
std::shared_ptr<const HardwareProfile> neutral_profile();

// A profile by path, or by name from configs/hw/ (`dgx-a100-80g`).
StatusOr<HardwareProfile> read_hardware_profile(const std::string& path_or_name,
                                                const std::string& config_dir);

}  // namespace autopar
