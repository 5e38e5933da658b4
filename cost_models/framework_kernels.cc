// A plan's nodes as the kernels a framework's GPU stack runs them (the profile's `kernels:
// {fusions: [op_kernels]}`): the nodes that carry out one source op in one direction, within a
// program, make one kernel.
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

class KernelGrouping {
 public:
  KernelGrouping(const HardwareProfile& profile, const Graph& g,
                 const std::vector<NodeId>& cut_before)
      : profile_(profile), g_(g), group_(static_cast<size_t>(g.num_nodes()), -1) {
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
      auto [it, added] =
          ids.try_emplace({node.source, backward, program}, static_cast<int32_t>(members_.size()));
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
      if (nodes.size() < 2) continue;
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

  // One kernel for the nodes: what crosses its boundary read or written once, its arithmetic
  // at the peak of fp32 (the type such kernels compute in), one launch. An op that waits on a
  // collective of its own partial results (a synchronised BatchNorm's statistics) runs as two
  // kernels, as SyncBatchNorm does: a reduction pass over its inputs, the collective, and the
  // elementwise pass reading them again.
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
    NodeWork work;
    work.op_class = reduces ? OpClass::kNorm : OpClass::kElementwise;
    work.flops = flops;
    work.bytes = bytes + (synced ? reads : 0.0);
    work.peak = profile_.device.peak(peak_key(DType::kFloat32));
    const NodeCost cost = work.cost(profile_.device);
    return cost.seconds + (synced ? profile_.device.launch_overhead_s : 0.0);
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
  return KernelGrouping(profile, g, cut_before).seconds();
}

}  // namespace autopar
