// The SPMD pass prices its choices with the cost model on the hardware the plan is for.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "autopar/cost/communication.h"
#include "autopar/cost/compute.h"
#include "autopar/cost/simulator.h"
#include "autopar/parallel/lowering.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

HardwareProfile dgx_a100() {
  auto profile =
      read_hardware_profile("dgx-a100-80g", std::string(AUTOPAR_SOURCE_DIR) + "/configs/hw");
  EXPECT_TRUE(profile.is_ok()) << profile.status().message();
  return *profile;
}

// The same devices two to a node: a group of four crosses InfiniBand between two nodes.
HardwareProfile two_per_node() {
  HardwareProfile p = dgx_a100();
  p.name = "a100-2";
  p.devices_per_node = 2;
  p.tiers.front().devices_per_group = 2;
  p.tiers.back().nics_per_node = 2;
  p.nodes = 4;
  return p;
}

Plan mlp_plan(const std::string& scheme_yaml, const HardwareProfile& profile) {
  auto scheme = parse_scheme(scheme_yaml, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  ZooOptions zoo;
  zoo.batch = scheme->micro_batch * scheme->dp();
  auto model = build_zoo_model("mlp", zoo);
  EXPECT_TRUE(model.is_ok());
  LoweringOptions options;
  options.profile = std::make_shared<const HardwareProfile>(profile);
  auto plan = lower(*model, *scheme, options);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  return std::move(plan).value();
}

// Collectives of the first role by "op axes": {"AllReduce tp": 10, ...}.
std::map<std::string, int> collectives(const Plan& plan) {
  std::map<std::string, int> counts;
  for (const Node& n : plan.roles[0].graph.nodes()) {
    const Attribute* axes = n.attr("axes");
    if (n.domain != kAutoparDomain || !axes) continue;
    ++counts[fmt::format("{} {}", n.op_type, fmt::join(axes->strings(), ","))];
  }
  return counts;
}

TEST(NeutralProfile, PricesAByteAsAThousandFlopsAndALatencyAsAHundredMillion) {
  const std::shared_ptr<const HardwareProfile> neutral = neutral_profile();
  ASSERT_NE(neutral, nullptr);
  EXPECT_EQ(neutral->name, "neutral");
  const double flop_s = 1.0 / neutral->device.peak("bf16");
  const Tier& link = neutral->tiers.front();
  EXPECT_DOUBLE_EQ((1.0 / link.bandwidth) / flop_s, 1000.0);
  EXPECT_DOUBLE_EQ(link.alpha_s / flop_s, 1e8);
  // One message of 1 MB between two devices: its latency and its bytes at 10 GB/s.
  EXPECT_DOUBLE_EQ(collective_seconds(*neutral, Collective::kPointToPoint, 1e6, GroupSpan{2, 1, 2}),
                   10e-6 + 1e-4);
}

TEST(GroupSpan, CountsNodesAndDevicesPerNode) {
  const HardwareProfile p = two_per_node();
  const GroupSpan inside = group_span(p, {0, 1});
  EXPECT_EQ(inside.devices, 2);
  EXPECT_EQ(inside.nodes, 1);
  const GroupSpan across = group_span(p, {0, 1, 2, 3});
  EXPECT_EQ(across.nodes, 2);
  EXPECT_EQ(across.per_node, 2);
  // The span prices as the group does.
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::kAllReduce, 1e8, across),
                   collective_cost(p, Collective::kAllReduce, 1e8, {0, 1, 2, 3}).seconds);
}

// A node's part of its work over `degree` devices is its roofline at the part's work: a GEMM's
// curve rises with its FLOPs, so a quarter of the work takes more than a quarter of the time.
TEST(NodeWork, APartIsPricedAtThePartsWork) {
  ZooOptions zoo;
  zoo.batch = 1;
  zoo.with_weights = false;
  auto model = build_zoo_model("gpt2-small", zoo);
  ASSERT_TRUE(model.is_ok());
  const HardwareProfile p = dgx_a100();
  for (const Node& n : model->nodes()) {
    // The first projection: 1024 tokens × 768 × 2304, 3.6 GFLOPs, on the rising part of the
    // A100's GEMM curve.
    if (n.op_type != "MatMul") continue;
    const NodeWork work = node_work(p, *model, n);
    EXPECT_DOUBLE_EQ(work.cost(p.device).seconds, node_cost(p, *model, n).seconds);
    const double whole = work.cost(p.device).seconds - p.device.launch_overhead_s;
    const double quarter = work.cost(p.device, 4).seconds - p.device.launch_overhead_s;
    EXPECT_GT(quarter, whole / 4);
    EXPECT_LT(quarter, whole);
    return;
  }
  FAIL() << "gpt2-small has no MatMul";
}

// On the same mesh, tensor auto chooses differently when tp's groups stay on one node's NVLink
// and when they cross nodes; the plan priced for the cross-node links runs faster on them than
// the one priced for NVLink.
TEST(TensorAuto, ChoosesForTheLinksTpCrosses) {
  const std::string scheme = "mesh: {dp: 2, tp: 4}\nbatch: {global: 16, micro: 8}\ntensor: auto\n";
  const HardwareProfile nvlink = dgx_a100(), across = two_per_node();
  const Plan for_nvlink = mlp_plan(scheme, nvlink);
  const Plan for_across = mlp_plan(scheme, across);
  EXPECT_EQ(collectives(for_nvlink), (std::map<std::string, int>{{"AllGather tp", 2},
                                                                 {"AllReduce dp", 9},
                                                                 {"AllReduce tp", 1},
                                                                 {"ReduceScatter tp", 2}}));
  EXPECT_EQ(
      collectives(for_across),
      (std::map<std::string, int>{
          {"AllGather tp", 3}, {"AllReduce dp", 9}, {"ReduceScatter tp", 3}, {"Shard tp", 1}}));
  auto nvlink_plan_across = simulate(for_nvlink, across);
  auto across_plan_across = simulate(for_across, across);
  ASSERT_TRUE(nvlink_plan_across.is_ok() && across_plan_across.is_ok());
  EXPECT_LT(across_plan_across->step_seconds, nvlink_plan_across->step_seconds);
}

}  // namespace
}  // namespace autopar
