// Roofline per node with efficiency curves by op class.
#include "autopar/cost/compute.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "autopar/ir/pattern_fusion.h"
#include "autopar/ops/op_def.h"
#include "autopar/runtime/executor.h"

namespace autopar {
namespace {

bool reads_weight(const Graph& g, const Node& n) {
  for (ValueId in : n.inputs) {
    if (in == kNoId) continue;
    const Value& v = g.value(in);
    if (v.kind == ValueKind::kParameter) return true;
    // A weight cast to the compute type, or gathered from shards, is still a weight.
    if (v.producer != kNoId) {
      const Node& p = g.node(v.producer);
      if ((p.op_type == "Cast" || p.domain == kAutoparDomain) && !p.inputs.empty() &&
          p.inputs[0] != kNoId && g.value(p.inputs[0]).kind == ValueKind::kParameter)
        return true;
    }
  }
  return false;
}

// A bf16 or fp16 GEMM with a row (the last dim of an operand or of its result) that is not a
// whole number of 16-byte units.
bool unaligned_half_gemm(const Graph& g, const Node& n) {
  if (!n.domain.empty() || (n.op_type != "MatMul" && n.op_type != "Gemm")) return false;
  auto unaligned = [&](ValueId v) {
    if (v == kNoId) return false;
    const Value& value = g.value(v);
    if (value.dtype != DType::kBFloat16 && value.dtype != DType::kFloat16) return false;
    const int64_t row = value.shape.rank() > 0 ? value.shape.dims.back() : 1;
    return (row * dtype_size(value.dtype)) % 16 != 0;
  };
  return (n.inputs.size() > 0 && unaligned(n.inputs[0])) ||
         (n.inputs.size() > 1 && unaligned(n.inputs[1])) ||
         (!n.outputs.empty() && unaligned(n.outputs[0]));
}

// A MatMul's or Gemm's (m, n, k): k its reduction length, n its result's columns, m the rest
// of its FLOPs (rows times any batch dims); zeros where an operand is not a matrix.
std::array<double, 3> gemm_shape(const Graph& g, const Node& n, double flops) {
  if (n.inputs.size() < 2 || n.inputs[0] == kNoId || n.inputs[1] == kNoId) return {};
  const Shape& a = g.value(n.inputs[0]).shape;
  const Shape& b = g.value(n.inputs[1]).shape;
  if (a.rank() < 2 || b.rank() < 2 || (b.rank() > 2 && n.op_type == "Gemm")) return {};
  const bool gemm = n.op_type == "Gemm";
  const int64_t k = gemm && n.attr_int("transA", 0) ? a.dims[0] : a.dims.back();
  const int64_t cols = gemm && n.attr_int("transB", 0) ? b.dims[0] : b.dims.back();
  if (k <= 0 || cols <= 0 || !(flops > 0)) return {};
  const double kd = static_cast<double>(k), nd = static_cast<double>(cols);
  return {flops / (2 * nd * kd), nd, kd};
}

}  // namespace

std::optional<OpClass> op_class_of(const Graph& g, const Node& n) {
  if (n.domain == kAutoparDomain) {
    // Ring attention computes attention between its point-to-point steps.
    if (n.op_type == "RingAttention" || n.op_type == "RingAttentionGrad")
      return OpClass::kAttention;
    return std::nullopt;
  }
  const std::string& op = n.op_type;
  if (n.domain == kTrainingDomain) {
    // Attention is a tensor-core kernel; row reductions are norms; the rest (GELU, SwiGLU,
    // rotary embeddings, Adam) stream.
    if (op == "Attention" || op == "AttentionGrad") return OpClass::kAttention;
    return op == "LayerNormalizationGrad" || op == "RMSNormalization" ||
                   op == "RMSNormalizationGrad"
               ? OpClass::kNorm
               : OpClass::kElementwise;
  }
  if (op == "MatMul" || op == "Gemm") {
    // Attention multiplies two batched activations (scores, their weighted sum). A weight has
    // no batch dims, whether it is a parameter or, in a plan's role graph, a state input.
    auto batched = [&](size_t i) {
      return i < n.inputs.size() && n.inputs[i] != kNoId && g.value(n.inputs[i]).shape.rank() >= 3;
    };
    const bool activations = batched(0) && batched(1);
    return op == "Gemm" || reads_weight(g, n) || !activations ? OpClass::kGemm
                                                              : OpClass::kAttention;
  }
  if (op == "Conv" || op == "ConvTranspose") return OpClass::kConv;
  static const std::unordered_set<std::string_view> kNorm = {
      "Softmax",           "LogSoftmax", "LayerNormalization", "BatchNormalization",
      "ReduceSum",         "ReduceMean", "ReduceMax",          "SoftmaxCrossEntropyLoss",
      "GlobalAveragePool", "MaxPool",    "AveragePool"};
  return kNorm.count(op) ? OpClass::kNorm : OpClass::kElementwise;
}

const char* peak_key(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return peak_key(DType::kBFloat16);
    case Precision::kFp16:
      return peak_key(DType::kFloat16);
    case Precision::kFp32:
      break;
  }
  return peak_key(DType::kFloat32);
}

const char* peak_key(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "fp16";
    case DType::kFloat64:
      return "fp64";
    default:
      return "fp32";
  }
}

namespace {

// A convolution on tensor cores over NCHW activations where the device's kernels want NHWC:
// the seconds of transposing each operand in and the result out (its tensors of rank 3 and up;
// a bias is laid out alike either way), one kernel each.
double layout_transposes(const DeviceSpec& device, const Graph& g, const Node& node) {
  DType dtype = DType::kFloat32;
  if (node.output(0) != kNoId) dtype = g.value(node.output(0)).dtype;
  const bool tensor_cores = is_half(dtype) || (dtype == DType::kFloat32 && device.tf32_conv);
  if (!tensor_cores) return 0.0;
  double seconds = 0;
  auto transpose = [&](ValueId v) {
    if (v == kNoId || g.value(v).shape.rank() < 3 || g.value(v).num_bytes() == 0) return;
    NodeWork work;
    work.op_class = OpClass::kElementwise;
    work.bytes = 2.0 * static_cast<double>(g.value(v).num_bytes());
    seconds += work.cost(device).seconds;
  };
  for (ValueId v : node.inputs) transpose(v);
  for (ValueId v : node.outputs) transpose(v);
  return seconds;
}

// The NCHW layout's transposes added to each convolution's seconds (`seconds` may be empty:
// every node priced alone).
void add_layout_transposes(const HardwareProfile& profile, const Graph& g,
                           std::optional<MemoryFormat> memory_format,
                           std::vector<double>& seconds) {
  if (!profile.device.nhwc_convolutions ||
      memory_format.value_or(profile.memory_format) != MemoryFormat::kNchw)
    return;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (op_class_of(g, node) != OpClass::kConv) continue;
    const double extra = layout_transposes(profile.device, g, node);
    if (extra <= 0) continue;
    if (seconds.empty()) seconds.assign(static_cast<size_t>(g.num_nodes()), -1.0);
    seconds[n] = (seconds[n] >= 0 ? seconds[n] : node_cost(profile, g, node).seconds) + extra;
  }
}

}  // namespace

std::vector<double> fused_node_seconds(const HardwareProfile& profile, const Graph& g,
                                       const std::vector<NodeId>& cut_before,
                                       const std::set<Fusion>* fusions,
                                       std::optional<MemoryFormat> memory_format) {
  const DeviceSpec& device = profile.device;
  if (device.fused_op_element_s <= 0) {
    std::vector<double> seconds =
        framework_kernel_seconds(profile, g, cut_before, fusions ? *fusions : profile.fusions);
    add_layout_transposes(profile, g, memory_format, seconds);
    return seconds;
  }
  std::vector<double> seconds(static_cast<size_t>(g.num_nodes()), -1.0);
  const auto curve = device.efficiency.find(OpClass::kElementwise);
  for (const runtime::FusedRun& run : runtime::fused_runs(g, cut_before, device.fuses_half_types)) {
    const double efficiency =
        curve != device.efficiency.end() ? curve->second.at(run.external_bytes) : 1.0;
    const double memory = run.external_bytes / (device.memory_bandwidth * efficiency);
    const double compute = static_cast<double>(run.ops) * static_cast<double>(run.elements) *
                           device.fused_op_element_s;
    const double kernel = std::max(memory, compute) + device.launch_overhead_s;
    for (NodeId n = run.first; n <= run.last; ++n)
      seconds[n] = kernel / static_cast<double>(run.last - run.first + 1);
  }
  // A fused training op (an optimizer's update, LayerNorm's gradient, a GELU and its gradient)
  // runs the arithmetic of the nodes it replaces in one kernel.
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    // (Attention is a tensor-core kernel, priced by its class's roofline.)
    if (node.domain != kTrainingDomain || op_class_of(g, node) == OpClass::kAttention) continue;
    const double bytes = node_bytes(g, node);
    const auto own = device.efficiency.find(*op_class_of(g, node));
    const double efficiency = own != device.efficiency.end() ? own->second.at(bytes) : 1.0;
    const double memory = bytes / (device.memory_bandwidth * efficiency);
    const double compute =
        node.op_type == "Adam" && device.optimizer_element_s > 0
            ? static_cast<double>(node.inputs.empty() || node.inputs[0] == kNoId
                                      ? 0
                                      : g.value(node.inputs[0]).shape.num_elements()) *
                  device.optimizer_element_s
            : node_flops(g, node) * device.fused_op_element_s;
    seconds[n] = std::max(memory, compute) + device.launch_overhead_s;
  }
  add_layout_transposes(profile, g, memory_format, seconds);
  return seconds;
}

namespace {

// A swap of the last two dims that only GEMMs read, directly or through more such swaps: their
// transpose flags absorb it (a weight's transpose for the forward, transposed back for the
// backward's GEMM).
bool absorbed_transpose(const Graph& g, const Node& n, int depth) {
  if (depth > 4 || !n.domain.empty() || n.op_type != "Transpose" || n.outputs.size() != 1 ||
      n.output(0) == kNoId)
    return false;
  const std::vector<int64_t> perm = n.attr_ints("perm");
  const auto rank = static_cast<int64_t>(perm.size());
  if (rank < 2) return false;
  for (int64_t d = 0; d + 2 < rank; ++d) {
    if (perm[d] != d) return false;
  }
  if (perm[rank - 2] != rank - 1 || perm[rank - 1] != rank - 2) return false;
  const std::vector<NodeId>& readers = g.value(n.outputs[0]).consumers;
  return !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](NodeId r) {
    const Node& reader = g.node(r);
    return (reader.domain.empty() && (reader.op_type == "MatMul" || reader.op_type == "Gemm")) ||
           absorbed_transpose(g, reader, depth + 1);
  });
}

}  // namespace

bool is_view(const Graph& g, const Node& n) {
  if (!n.domain.empty()) return false;
  static const std::unordered_set<std::string_view> kViews = {"Reshape", "Squeeze", "Unsqueeze",
                                                              "Flatten", "Identity"};
  return kViews.count(n.op_type) > 0 || absorbed_transpose(g, n, 0);
}

std::vector<bool> gemm_accumulation(const Graph& g) {
  std::vector<bool> part(static_cast<size_t>(g.num_nodes()), false);
  auto producer_part = [&](ValueId v) {
    return v != kNoId && g.value(v).producer != kNoId && part[g.value(v).producer];
  };
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (!node.domain.empty() || node.phase != Phase::kBackward || node.outputs.size() != 1 ||
        node.output(0) == kNoId)
      continue;
    if (node.op_type == "Cast") {
      const ValueId in = node.input(0);
      const NodeId p = in == kNoId ? kNoId : g.value(in).producer;
      part[n] = p != kNoId && g.node(p).domain.empty() &&
                (g.node(p).op_type == "Gemm" || g.node(p).op_type == "MatMul") &&
                g.value(in).shape.rank() == 2 &&
                dtype_size(g.value(node.output(0)).dtype) > dtype_size(g.value(in).dtype);
    } else if (node.op_type == "Mul" && node.inputs.size() == 2) {
      for (int k = 0; k < 2; ++k) {
        const Value& other = g.value(node.inputs[1 - k]);
        if (producer_part(node.inputs[k]) && other.kind == ValueKind::kConstant &&
            other.shape.num_elements() == 1)
          part[n] = true;
      }
    } else if (node.op_type == "Add" && node.inputs.size() == 2) {
      for (int k = 0; k < 2; ++k) {
        if (producer_part(node.inputs[k]) && node.inputs[1 - k] != kNoId &&
            g.value(node.inputs[1 - k]).kind == ValueKind::kInput)
          part[n] = true;
      }
    }
  }
  // Each read only by the next of the chain, the update or a collective.
  for (NodeId n = g.num_nodes() - 1; n >= 0; --n) {
    if (!part[n]) continue;
    for (NodeId r : g.value(g.node(n).outputs[0]).consumers) {
      const Node& reader = g.node(r);
      if (!part[r] && reader.phase != Phase::kOptimizer && reader.domain != kAutoparDomain)
        part[n] = false;
    }
  }
  return part;
}

std::vector<bool> reduction_accumulation(const Graph& g) {
  std::vector<bool> part(static_cast<size_t>(g.num_nodes()), false);
  auto behind = [&](ValueId v) {
    if (v == kNoId || g.value(v).producer == kNoId) return false;
    const NodeId p = g.value(v).producer;
    const Node& producer = g.node(p);
    return part[p] || (producer.domain == kAutoparDomain &&
                       (producer.op_type == "ReduceScatter" || producer.op_type == "AllReduce"));
  };
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (!node.domain.empty() || node.phase != Phase::kBackward || node.inputs.size() != 2 ||
        node.outputs.size() != 1 || node.output(0) == kNoId)
      continue;
    for (int k = 0; k < 2; ++k) {
      const ValueId other = node.inputs[1 - k];
      if (!behind(node.inputs[k]) || other == kNoId) continue;
      const Value& o = g.value(other);
      if (node.op_type == "Mul" && o.kind == ValueKind::kConstant && o.shape.num_elements() == 1)
        part[n] = true;
      if (node.op_type == "Add" && o.kind == ValueKind::kInput) part[n] = true;
    }
  }
  // Each read only by the next of the chain or the update.
  for (NodeId n = g.num_nodes() - 1; n >= 0; --n) {
    if (!part[n]) continue;
    for (NodeId r : g.value(g.node(n).outputs[0]).consumers) {
      if (!part[r] && g.node(r).phase != Phase::kOptimizer) part[n] = false;
    }
  }
  return part;
}

NodeWork node_work(const HardwareProfile& profile, const Graph& g, const Node& n) {
  NodeWork work;
  work.op_class = op_class_of(g, n);
  if (!work.op_class) return work;
  work.view = is_view(g, n);
  work.flops = node_flops(g, n);
  work.bytes = node_bytes(g, n);
  if (*work.op_class == OpClass::kAttention && !n.domain.empty()) {  // not a MatMul of scores
    const bool grad = n.op_type == "AttentionGrad" || n.op_type == "RingAttentionGrad";
    work.flash = grad ? NodeWork::Flash::kBackward : NodeWork::Flash::kForward;
  }
  DType dtype = DType::kFloat32;
  for (ValueId out : n.outputs) {
    if (out != kNoId && is_floating(g.value(out).dtype)) {
      dtype = g.value(out).dtype;
      break;
    }
  }
  const DeviceSpec& device = profile.device;
  const bool tf32 = dtype == DType::kFloat32 &&
                    (*work.op_class == OpClass::kConv ? device.tf32_conv
                                                      : (*work.op_class == OpClass::kGemm ||
                                                         *work.op_class == OpClass::kAttention) &&
                                                            device.tf32_matmul);
  work.peak = device.peak(tf32 ? "tf32" : peak_key(dtype));
  if (*work.op_class == OpClass::kGemm && is_half(dtype) && device.gemm_shapes)
    work.gemm_shape = gemm_shape(g, n, work.flops);
  if (device.gemm_unaligned_efficiency < 1 && unaligned_half_gemm(g, n))
    work.aligned = device.gemm_unaligned_efficiency;
  return work;
}

const EfficiencyCurve& NodeWork::curve(const DeviceSpec& device) const {
  if (flash == Flash::kForward && device.flash_attention) return *device.flash_attention;
  if (flash == Flash::kBackward && device.flash_attention_backward)
    return *device.flash_attention_backward;
  return device.efficiency.at(*op_class);
}

NodeCost NodeWork::cost(const DeviceSpec& device, double degree) const {
  if (!op_class || (device.free_views && view)) return {};
  const double part_flops = flops / degree, part_bytes = bytes / degree;
  if (part_flops <= 0 && part_bytes <= 0) return {};
  const bool arithmetic = *op_class == OpClass::kGemm || *op_class == OpClass::kConv ||
                          *op_class == OpClass::kAttention;
  // Compute classes: the curve is the fraction of peak FLOP/s at the kernel's FLOPs; memory
  // classes: the fraction of memory bandwidth at the kernel's bytes.
  const EfficiencyCurve& curve = this->curve(device);
  const double rate =
      gemm_shape[0] > 0 && device.gemm_shapes
          ? device.gemm_shapes->at(gemm_shape[0] / degree, gemm_shape[1], gemm_shape[2])
          : curve.at(part_flops);
  const double compute =
      part_flops > 0 ? part_flops / (peak * (arithmetic ? rate * aligned : 1.0)) : 0.0;
  const double memory =
      part_bytes > 0
          ? part_bytes / (device.memory_bandwidth * (arithmetic ? 1.0 : curve.at(part_bytes)))
          : 0.0;
  NodeCost cost;
  cost.memory_bound = memory > compute;
  cost.seconds = std::max(compute, memory) + device.launch_overhead_s;
  return cost;
}

NodeCost node_cost(const HardwareProfile& profile, const Graph& g, const Node& n) {
  return node_work(profile, g, n).cost(profile.device);
}

double model_forward_flops(const Graph& model) {
  const Graph fused = fuse_training_patterns(model, nullptr, {.attention = true});
  double flops = 0;
  for (const Node& n : fused.nodes()) flops += node_flops(fused, n);
  return flops;
}

}  // namespace autopar
