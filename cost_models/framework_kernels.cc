// A plan's nodes as the kernels a framework's GPU stack runs them (the profile's `kernels:
// {fusions: [op_kernels, ...]}`): the nodes that carry out one source op in one direction, within
// a program, make one kernel, and so do those of the source ops a fused kernel of the stack
// (bias_gelu, bias_dropout_add, scale_mask_softmax) runs together.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "autopar/cost/compute.h"
#include "autopar/cost/hardware_profile.h"
#include "autopar/ops/op_def.h"

namespace autopar {
namespace {

bool is_comm(const Node& n) { return n.domain == kAutoparDomain; }

bool arithmetic(const std::optional<OpClass>& c) {
  return c == OpClass::kGemm || c == OpClass::kConv || c == OpClass::kAttention;
}

// The source ops that a framework's fused kernels run together (Megatron-LM's bias_gelu,
// bias_dropout_add, scale_mask_softmax), found on the forward nodes of a plan: each source op
// maps to the first source op of its fused kernel, the others to themselves. The backward of the
// ops then runs as one kernel too, as the fused functions' own backward does.
class SourceFusions {
 public:
  SourceFusions(const Graph& g, const std::set<Fusion>& fusions) : g_(g) {
    for (NodeId n = 0; n < g.num_nodes(); ++n) {
      const Node& node = g.node(n);
      if (node.phase != Phase::kForward || node.source < 0) continue;
      if (fusions.count(Fusion::kBiasGelu) && node.op_type == "Gelu") {
        const NodeId bias = producer(node.input(0));
        if (is_bias_add(bias)) join(bias, n);
      }
      if (fusions.count(Fusion::kBiasDropoutAdd) && is_op(n, "Add") && !is_bias_add(n)) {
        for (ValueId in : node.inputs) {
          NodeId p = producer(in);
          const NodeId dropout = is_op(p, "Dropout") ? p : kNoId;
          if (dropout != kNoId) p = producer(g.node(dropout).input(0));
          if (!is_bias_add(p)) continue;
          join(p, n);
          if (dropout != kNoId) join(p, dropout);
          break;
        }
      }
      if (fusions.count(Fusion::kScaleMaskSoftmax) && is_op(n, "Softmax")) {
        NodeId p = producer(node.input(0));
        if (is_op(p, "Add") || is_op(p, "Where")) {
          join(p, n);
          p = producer(g.node(p).input(is_op(p, "Where") ? 1 : 0));
        }
        if (is_scaling(p)) join(p, n);
      }
    }
  }

  // The source op whose kernel source op `source` runs in.
  int32_t kernel_of(int32_t source) const {
    auto it = parent_.find(source);
    while (it != parent_.end() && it->second != source) {
      source = it->second;
      it = parent_.find(source);
    }
    return source;
  }

 private:
  // The node computing v, looking through precision casts.
  NodeId producer(ValueId v) const {
    while (v != kNoId) {
      const NodeId p = g_.value(v).producer;
      if (p == kNoId || !is_op(p, "Cast")) return p;
      v = g_.node(p).input(0);
    }
    return kNoId;
  }
  bool is_op(NodeId n, std::string_view op) const {
    return n != kNoId && g_.node(n).op_type == op && g_.node(n).source >= 0 &&
           g_.node(n).phase == Phase::kForward;
  }
  // An Add of a vector along the last dim of the other operand: a projection's bias.
  bool is_bias_add(NodeId n) const {
    if (!is_op(n, "Add") || g_.node(n).inputs.size() != 2) return false;
    const std::vector<int64_t>& out = g_.value(g_.node(n).outputs[0]).shape.dims;
    for (ValueId in : g_.node(n).inputs) {
      const std::vector<int64_t>& dims = g_.value(in).shape.dims;
      if (dims.size() == 1 && !out.empty() && out.size() > 1 && dims[0] == out.back()) return true;
    }
    return false;
  }
  // A product or quotient by a scalar (the scores' 1/sqrt(d)).
  bool is_scaling(NodeId n) const {
    if (!is_op(n, "Div") && !is_op(n, "Mul")) return false;
    const ValueId by = g_.node(n).input(1);
    return by != kNoId && g_.value(by).shape.num_elements() == 1;
  }
  void join(NodeId a, NodeId b) {
    const int32_t x = kernel_of(g_.node(a).source), y = kernel_of(g_.node(b).source);
    if (x == y) return;
    parent_[std::max(x, y)] = std::min(x, y);
    parent_.try_emplace(std::min(x, y), std::min(x, y));
  }

  const Graph& g_;
  std::map<int32_t, int32_t> parent_;  // union-find over source ops
};

// The value a node reduces across rows, or kNoId: a reduction over an axis ahead of one it
// keeps (a BatchNorm's statistics over N, H and W per channel, a scale's or bias's gradient
// summed over the batch and the sequence). Unlike a row's reduction (a LayerNorm's or a
// softmax's over the last dims, one block's work), its result is known only once every block
// has read its part of the input.
ValueId cross_row_input(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.input(0) == kNoId) return kNoId;
  const ValueId x = n.input(0);
  if (n.op_type == "BatchNormalization") return n.attr_int("training_mode", 0) != 0 ? x : kNoId;
  if (!n.op_type.starts_with("Reduce")) return kNoId;
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (axes.empty() && n.inputs.size() > 1 && n.input(1) != kNoId && g.value(n.input(1)).data)
    axes = g.value(n.input(1)).data->to_int64_vector();
  const int64_t rank = g.value(x).shape.rank();
  if (axes.empty()) return kNoId;  // everything: a full reduction, no rows kept
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    if (a < 0) a += rank;
    if (a >= 0 && a < rank) reduced[a] = true;
  }
  bool before = false;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      before = true;
    } else if (before && g.value(x).shape.dims[d] > 1) {
      return x;
    }
  }
  return kNoId;
}

class KernelGrouping {
 public:
  KernelGrouping(const HardwareProfile& profile, const Graph& g,
                 const std::vector<NodeId>& cut_before, const std::set<Fusion>& fusions)
      : profile_(profile), g_(g), group_(static_cast<size_t>(g.num_nodes()), -1) {
    const SourceFusions fused(g, fusions);
    std::vector<NodeId> cuts = cut_before;
    std::sort(cuts.begin(), cuts.end());
    // A node's kernel: its source op, its direction and its program.
    std::map<std::tuple<int32_t, bool, size_t>, int32_t> ids;
    // Per value: the source op whose partial result it carries through a collective (and
    // through the per-channel arithmetic the lowering puts around one), or -1.
    std::vector<int32_t> carried(static_cast<size_t>(g.num_values()), -1);
    std::vector<bool> through(static_cast<size_t>(g.num_values()), false);
    size_t program = 0;
    for (NodeId n = 0; n < g.num_nodes(); ++n) {
      while (program < cuts.size() && cuts[program] <= n) ++program;
      const Node& node = g.node(n);
      if (is_comm(node) || node.source < 0) {
        int32_t op = -1;
        bool crossed = is_comm(node);
        for (ValueId in : node.inputs) {
          if (in == kNoId || carried[in] < 0) continue;
          op = carried[in];
          crossed = crossed || through[in];
        }
        for (ValueId out : node.outputs) {
          if (out == kNoId) continue;
          carried[out] = op;
          through[out] = op >= 0 && crossed;
        }
        continue;
      }
      const bool backward = node.phase == Phase::kBackward;
      auto [it, added] = ids.try_emplace({fused.kernel_of(node.source), backward, program},
                                         static_cast<int32_t>(members_.size()));
      if (added) {
        members_.emplace_back();
        synced_.push_back(false);
      }
      group_[n] = it->second;
      members_[it->second].push_back(n);
      for (ValueId in : node.inputs) {
        if (in != kNoId && carried[in] == node.source && through[in]) synced_[it->second] = true;
      }
      for (ValueId out : node.outputs) {
        if (out != kNoId) carried[out] = node.source;
      }
    }
  }

  std::vector<double> seconds() const {
    std::vector<double> seconds(static_cast<size_t>(g_.num_nodes()), -1.0);
    for (const std::vector<NodeId>& nodes : members_) {
      if (nodes.size() < 2 && !two_passes(nodes)) continue;
      const bool gemm = std::any_of(nodes.begin(), nodes.end(), [&](NodeId n) {
        return arithmetic(op_class_of(g_, g_.node(n)));
      });
      if (gemm) {
        // cuBLAS and cuDNN read a GEMM's or a convolution's operands in the layout they are in
        // (a weight gradient of NCHW images needs no transposed copies).
        for (NodeId n : nodes) {
          if (g_.node(n).domain.empty() && g_.node(n).op_type == "Transpose") seconds[n] = 0;
        }
        continue;
      }
      const double kernel = kernel_seconds(nodes, synced_[group_[nodes.front()]]);
      for (NodeId n : nodes) seconds[n] = kernel / static_cast<double>(nodes.size());
    }
    return seconds;
  }

 private:
  bool member(NodeId n, int32_t group) const { return n != kNoId && group_[n] == group; }

  // A Cast of the op's input to a wider type inside the op's kernel: the kernel reads the
  // narrow input, and the op's other kernel (its backward) reads that input again rather than
  // a wide copy.
  bool input_cast(NodeId n) const {
    const Node& node = g_.node(n);
    if (!node.domain.empty() || node.op_type != "Cast" || node.input(0) == kNoId) return false;
    const ValueId in = node.input(0);
    if (dtype_size(g_.value(node.output(0)).dtype) <= dtype_size(g_.value(in).dtype)) return false;
    const NodeId producer = g_.value(in).producer;
    return group_[n] >= 0 && (producer == kNoId || g_.node(producer).source != node.source);
  }

  // Bytes a kernel reads for value v: a wide copy made by an input cast costs its narrow input.
  double read_bytes(ValueId v) const {
    const NodeId producer = g_.value(v).producer;
    if (producer != kNoId && input_cast(producer))
      return static_cast<double>(g_.value(g_.node(producer).inputs[0]).num_bytes());
    return static_cast<double>(g_.value(v).num_bytes());
  }

  // Whether the nodes reduce across rows and write a value as large as what they reduce (a
  // BatchNorm's output, the input gradient beside a LayerNorm scale's): the elementwise part
  // needs the reduction's result, which exists only after a whole pass over the input.
  bool two_passes(const std::vector<NodeId>& nodes) const {
    int64_t reduced = -1;
    for (NodeId n : nodes) {
      const ValueId x = cross_row_input(g_, g_.node(n));
      if (x != kNoId) reduced = std::max(reduced, g_.value(x).shape.num_elements());
    }
    if (reduced < 0) return false;
    const int32_t group = group_[nodes.front()];
    for (NodeId n : nodes) {
      for (ValueId out : g_.node(n).outputs) {
        if (out == kNoId || g_.value(out).shape.num_elements() < reduced) continue;
        const Value& value = g_.value(out);
        if (g_.is_output(out) || std::any_of(value.consumers.begin(), value.consumers.end(),
                                             [&](NodeId r) { return !member(r, group); }))
          return true;
      }
    }
    return false;
  }

  // One kernel for the nodes: what crosses its boundary read or written once, its arithmetic
  // at the peak of fp32 (the type such kernels compute in), one launch. An op that reduces
  // across rows and writes a full-size result runs as two passes over its inputs, as cuDNN's
  // and ATen's BatchNorm and LayerNorm-backward kernels do (statistics, then the normalised
  // output or the input gradient): the second pass reads them from memory again unless they
  // fit in the L2 cache (device.l2_bytes). An op that waits on a collective of its own partial
  // results (a synchronised BatchNorm's statistics) always runs as two kernels, as
  // SyncBatchNorm does: a reduction pass over its inputs, the collective, and the elementwise
  // pass reading them again.
  double kernel_seconds(const std::vector<NodeId>& nodes, bool synced) const {
    const int32_t group = group_[nodes.front()];
    std::set<ValueId> read;
    double bytes = 0, reads = 0, flops = 0;
    bool reduces = false;
    for (NodeId n : nodes) {
      const Node& node = g_.node(n);
      flops += node_flops(g_, node);
      reduces = reduces || op_class_of(g_, node) == OpClass::kNorm;
      for (ValueId in : node.inputs) {
        if (in == kNoId || member(g_.value(in).producer, group) || !read.insert(in).second)
          continue;
        reads += read_bytes(in);
      }
      if (input_cast(n)) continue;  // never written: its readers read the narrow input
      for (ValueId out : node.outputs) {
        if (out == kNoId) continue;
        const Value& value = g_.value(out);
        const bool leaves =
            g_.is_output(out) || std::any_of(value.consumers.begin(), value.consumers.end(),
                                             [&](NodeId r) { return !member(r, group); });
        if (leaves) bytes += static_cast<double>(value.num_bytes());
      }
    }
    bytes += reads;
    const bool again = synced || (reads > profile_.device.l2_bytes && two_passes(nodes));
    NodeWork work;
    work.op_class = reduces ? OpClass::kNorm : OpClass::kElementwise;
    work.flops = flops;
    work.bytes = bytes + (again ? reads : 0.0);
    work.peak = profile_.device.peak(peak_key(DType::kFloat32));
    const NodeCost cost = work.cost(profile_.device);
    return cost.seconds + (again ? profile_.device.launch_overhead_s : 0.0);
  }

  const HardwareProfile& profile_;
  const Graph& g_;
  std::vector<int32_t> group_;
  std::vector<std::vector<NodeId>> members_;
  std::vector<bool> synced_;  // per kernel: it waits on a collective of its own results
};

}  // namespace

std::vector<double> framework_kernel_seconds(const HardwareProfile& profile, const Graph& g,
                                             const std::vector<NodeId>& cut_before,
                                             const std::set<Fusion>& fusions) {
  if (!fusions.count(Fusion::kOpKernels)) return {};
  return KernelGrouping(profile, g, cut_before, fusions).seconds();
}

}  // namespace autopar
