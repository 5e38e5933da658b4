// The communication model: α–β per tier with the standard ring and tree factors, hierarchical
// collectives for groups that span nodes, and NIC sharing between the groups of one node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autopar/cost/hardware_profile.h"

namespace autopar {

struct CollectiveCost {
  double seconds = 0;
  std::string algorithm;  // "ring", "tree", "hierarchical", "direct"
};

// How a group of devices lies on the profile's cluster: its devices, the nodes it spans and its
// devices on the first of them (the groups of a mesh axis hold as many on each node).
struct GroupSpan {
  int64_t devices = 1;
  int64_t nodes = 1;
  int64_t per_node = 1;
};
GroupSpan group_span(const HardwareProfile& profile, const std::vector<int64_t>& group);
// The bandwidth one device of such a group has over the links it crosses: the intra-node
// tier's, or across nodes its share of the node's NICs (`sharing` groups crossing at once).
double device_bandwidth(const HardwareProfile& profile, const GroupSpan& span, int64_t sharing = 1);

// One collective over `group` (device ids on the profile's cluster). `bytes` is the whole
// tensor: the all-reduce operand, the all-gather result, the reduce-scatter input, one
// device's all-to-all input, the point-to-point message. `sharing` is how many groups of
// the same kind cross nodes from one node at the same time (they share its NICs).
CollectiveCost collective_cost(const HardwareProfile& profile, Collective collective, double bytes,
                               const std::vector<int64_t>& group, int64_t sharing = 1);
// The same over a group by its span (its seconds alone).
double collective_seconds(const HardwareProfile& profile, Collective collective, double bytes,
                          const GroupSpan& span, int64_t sharing = 1);

}  // namespace autopar
