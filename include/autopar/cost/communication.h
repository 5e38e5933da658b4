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

// One collective over `group` (device ids on the profile's cluster). `bytes` is the whole
// tensor: the all-reduce operand, the all-gather result, the reduce-scatter input, one
// device's all-to-all input, the point-to-point message. `sharing` is how many groups of
// the same kind cross nodes from one node at the same time (they share its NICs).
CollectiveCost collective_cost(const HardwareProfile& profile, Collective collective, double bytes,
                               const std::vector<int64_t>& group, int64_t sharing = 1);

}  // namespace autopar
