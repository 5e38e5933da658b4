// Hardware profile YAML (`--hw`, configs/hw/, `calibrate -o`): a profile that parses prices
// every node of gpt-tiny's forward and every collective over groups within a node and across
// nodes.
#include <algorithm>

#include "autopar/cost/communication.h"
#include "autopar/cost/compute.h"
#include "autopar/cost/hardware_profile.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  auto parsed = parse_hardware_profile(fuzz::as_text(data, size), "fuzz.yaml");
  if (!parsed.is_ok()) return 0;
  HardwareProfile& profile = *parsed;
  profile.nodes = 2;
  const Graph& graph = fuzz::tiny_model("gpt-tiny");
  for (const Node& node : graph.nodes()) (void)node_cost(profile, graph, node);
  const int64_t per_node = std::min<int64_t>(profile.devices_per_node, 64);
  std::vector<int64_t> within, across;
  for (int64_t d = 0; d < per_node; ++d) within.push_back(d);
  across = {0, profile.devices_per_node};
  for (auto collective : {Collective::kAllReduce, Collective::kAllGather,
                          Collective::kReduceScatter, Collective::kAllToAll}) {
    for (const auto* group : {&within, &across}) {
      for (double bytes : {0.0, 4.0, 1e6, 1e12})
        (void)collective_cost(profile, collective, bytes, *group);
    }
  }
  return 0;
}
