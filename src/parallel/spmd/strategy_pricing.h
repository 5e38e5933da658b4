// What the SPMD pass's choices cost, in seconds on the hardware the plan is for: one device's
// share of a node by the compute model (its roofline on the profile's curves), a collective over
// the group a mesh axis forms by the communication model (α–β per tier, the tier's collective
// efficiencies). The lowering has no prices of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "autopar/cost/communication.h"
#include "autopar/cost/compute.h"
#include "autopar/ir/graph.h"
#include "autopar/parallel/device_mesh.h"

namespace autopar {

class StrategyPricing {
 public:
  // Prices nodes of `graph` on `profile`, with the mesh laid over the profile's cluster in
  // device order (the last axis innermost, as the runtime numbers devices).
  StrategyPricing(const HardwareProfile& profile, const DeviceMesh& mesh, const Graph& graph);

  // One device's part of node `id` when its work divides over `degree` devices.
  double compute(NodeId id, double degree) const;
  // One collective over the mesh axis `axis` (an interned id, find_axis): `bytes` as
  // collective_cost takes them (the all-gather's result, the all-reduce's operand, ...).
  double collective(Collective collective, double bytes, uint8_t axis) const;
  // `bytes` at the bandwidth of the links `axis` crosses, without a collective's latency.
  double moved(double bytes, uint8_t axis) const;
  // One pass of one device over `bytes` of its memory (a local step, no communication).
  double local(double bytes) const;

 private:
  struct Axis {
    GroupSpan span;
    double bandwidth = 0;  // per device, over the tier the axis's groups cross
  };
  const Axis& axis(uint8_t id) const;

  const HardwareProfile& profile_;
  const Graph& graph_;
  std::vector<std::optional<Axis>> axes_;  // by interned axis id
  mutable std::vector<std::optional<NodeWork>> work_;
};

}  // namespace autopar
