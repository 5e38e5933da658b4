#include "strategy_pricing.h"

namespace autopar {

StrategyPricing::StrategyPricing(const HardwareProfile& profile, const DeviceMesh& mesh,
                                 const Graph& graph)
    : profile_(profile), graph_(graph), work_(static_cast<size_t>(graph.num_nodes())) {
  // Every group of an axis has the same span over a mesh laid row-major on the cluster: the
  // group of device 0 prices them all.
  for (const MeshAxis& a : mesh.axes()) {
    const uint8_t id = find_axis(a.name);
    if (axes_.size() <= id) axes_.resize(id + 1u);
    Axis& axis = axes_[id].emplace();
    axis.span = group_span(profile, mesh.group(0, {a.name}));
    axis.bandwidth = device_bandwidth(profile, axis.span);
  }
}

const StrategyPricing::Axis& StrategyPricing::axis(uint8_t id) const {
  static const Axis kNone;
  return id < axes_.size() && axes_[id] ? *axes_[id] : kNone;
}

double StrategyPricing::compute(NodeId id, double degree) const {
  std::optional<NodeWork>& work = work_[static_cast<size_t>(id)];
  if (!work) work = node_work(profile_, graph_, graph_.node(id));
  return work->cost(profile_.device, degree).seconds;
}

double StrategyPricing::collective(Collective collective, double bytes, uint8_t id) const {
  const Axis& a = axis(id);
  if (a.span.devices <= 1) return 0.0;
  return collective_seconds(profile_, collective, bytes, a.span) +
         profile_.device.collective_overhead_s;
}

double StrategyPricing::moved(double bytes, uint8_t id) const {
  const Axis& a = axis(id);
  return a.span.devices <= 1 || a.bandwidth <= 0 ? 0.0 : bytes / a.bandwidth;
}

double StrategyPricing::local(double bytes) const {
  return profile_.device.memory_bandwidth > 0 ? bytes / profile_.device.memory_bandwidth : 0.0;
}

}  // namespace autopar
