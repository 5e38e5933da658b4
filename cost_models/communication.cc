// α–β collective costs. For n devices and S bytes at bus bandwidth B (bandwidth × the tier's
// achieved fraction for the collective):
//   ring all-reduce       2(n−1)·α + 2(n−1)/n · S/B
//   tree all-reduce       2⌈log2 n⌉·α + 2·S/B          (NCCL's double binary tree)
//   all-gather, reduce-scatter, all-to-all   (n−1)·α + (n−1)/n · S/B
//   point-to-point        α + S/B
// A group spanning nodes with k devices on each of m nodes runs hierarchically: reduce-scatter
// inside the node, the collective over S/k between nodes, all-gather inside the node. Between
// nodes a device gets its share of the node's NICs: nics · bandwidth / (k · sharing).
#include "autopar/cost/communication.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace autopar {
namespace {

double bus(const Tier& tier, Collective c, double per_device_bandwidth) {
  return per_device_bandwidth * tier.efficiency.at(c);
}

CollectiveCost flat(const Tier& tier, Collective c, double bytes, int64_t n, double bandwidth) {
  const double b = bus(tier, c, bandwidth);
  const double steps = static_cast<double>(n - 1);
  const double share = steps / static_cast<double>(n);
  switch (c) {
    case Collective::kAllReduce: {
      const double ring = 2 * steps * tier.alpha_s + 2 * share * bytes / b;
      const double tree =
          2 * std::ceil(std::log2(static_cast<double>(n))) * tier.alpha_s + 2 * bytes / b;
      if (tree < ring) return {tree, "tree"};
      return {ring, "ring"};
    }
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return {steps * tier.alpha_s + share * bytes / b, "ring"};
    case Collective::kPointToPoint:
      return {tier.alpha_s + bytes / b, "direct"};
  }
  return {};
}

CollectiveCost cost_over(const HardwareProfile& profile, Collective collective, double bytes,
                         const GroupSpan& span, int64_t sharing) {
  const int64_t n = span.devices;
  if (n <= 1 && collective != Collective::kPointToPoint) return {0.0, "none"};
  const Tier& intra = profile.tiers.front();
  if (span.nodes == 1 || profile.tiers.size() == 1) {
    return flat(intra, collective, bytes, std::max<int64_t>(n, 2), intra.bandwidth);
  }
  const Tier& inter = profile.tiers.back();
  const int64_t nodes = span.nodes;
  const int64_t k = span.per_node;  // devices of the group on one node
  const double nic_share = device_bandwidth(profile, span, sharing);
  if (collective == Collective::kPointToPoint) {
    return flat(inter, collective, bytes, 2, nic_share);
  }
  if (k == 1) {
    CollectiveCost c = flat(inter, collective, bytes, nodes, nic_share);
    return c;
  }
  double seconds = 0;
  switch (collective) {
    case Collective::kAllReduce:
      seconds =
          flat(intra, Collective::kReduceScatter, bytes, k, intra.bandwidth).seconds +
          flat(inter, Collective::kAllReduce, bytes / static_cast<double>(k), nodes, nic_share)
              .seconds +
          flat(intra, Collective::kAllGather, bytes, k, intra.bandwidth).seconds;
      break;
    case Collective::kAllGather:
      seconds =
          flat(inter, Collective::kAllGather, bytes / static_cast<double>(k), nodes, nic_share)
              .seconds +
          flat(intra, Collective::kAllGather, bytes, k, intra.bandwidth).seconds;
      break;
    case Collective::kReduceScatter:
      seconds =
          flat(intra, Collective::kReduceScatter, bytes, k, intra.bandwidth).seconds +
          flat(inter, Collective::kReduceScatter, bytes / static_cast<double>(k), nodes, nic_share)
              .seconds;
      break;
    case Collective::kAllToAll: {
      // Each device sends (n − k)/n of its input across nodes and (k − 1)/n inside its node.
      const double across = bytes * static_cast<double>(n - k) / static_cast<double>(n);
      const double inside = bytes * static_cast<double>(k - 1) / static_cast<double>(n);
      seconds = static_cast<double>(n - k) * inter.alpha_s +
                across / bus(inter, Collective::kAllToAll, nic_share) +
                static_cast<double>(k - 1) * intra.alpha_s +
                inside / bus(intra, Collective::kAllToAll, intra.bandwidth);
      break;
    }
    case Collective::kPointToPoint:
      break;
  }
  return {seconds, "hierarchical"};
}

}  // namespace

GroupSpan group_span(const HardwareProfile& profile, const std::vector<int64_t>& group) {
  GroupSpan span;
  span.devices = static_cast<int64_t>(group.size());
  std::map<int64_t, int64_t> per_node;
  for (int64_t d : group) ++per_node[d / profile.devices_per_node];
  span.nodes = std::max<int64_t>(static_cast<int64_t>(per_node.size()), 1);
  span.per_node = per_node.empty() ? 1 : per_node.begin()->second;
  return span;
}

double device_bandwidth(const HardwareProfile& profile, const GroupSpan& span, int64_t sharing) {
  if (span.nodes == 1 || profile.tiers.size() == 1) return profile.tiers.front().bandwidth;
  const Tier& inter = profile.tiers.back();
  return static_cast<double>(inter.nics_per_node) * inter.bandwidth /
         static_cast<double>(std::max<int64_t>(span.per_node, 1) * std::max<int64_t>(sharing, 1));
}

CollectiveCost collective_cost(const HardwareProfile& profile, Collective collective, double bytes,
                               const std::vector<int64_t>& group, int64_t sharing) {
  return cost_over(profile, collective, bytes, group_span(profile, group), sharing);
}

double collective_seconds(const HardwareProfile& profile, Collective collective, double bytes,
                          const GroupSpan& span, int64_t sharing) {
  return cost_over(profile, collective, bytes, span, sharing).seconds;
}

}  // namespace autopar
