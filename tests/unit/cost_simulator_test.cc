// The simulator on hand-computed cases: unit costs on the MatMuls (every other node free)
// make step times countable by hand.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "autopar/cost/compute.h"
#include "autopar/cost/simulator.h"
#include "autopar/parallel/lowering.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

// A zoo model's plan under a scheme, with `micro_global` samples bound to its batch (SGD).
Plan zoo_plan(const std::string& scheme_yaml, int64_t micro_global,
              const std::string& zoo_model = "mlp") {
  auto scheme = parse_scheme(scheme_yaml, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  ZooOptions zoo;
  zoo.batch = micro_global;
  auto model = build_zoo_model(zoo_model, zoo);
  EXPECT_TRUE(model.is_ok());
  LoweringOptions options;
  options.optimizer.kind = OptimizerKind::kSgd;
  auto plan = lower(*model, *scheme, options);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  return std::move(plan).value();
}

// MatMuls take one unit; with `all_reduce`, an all-reduce of a matrix takes that many.
NodeSeconds unit_costs(double all_reduce = 0) {
  return [all_reduce](const Role& role, NodeId n, int64_t) -> double {
    const Node& node = role.graph.node(n);
    if (node.op_type == "MatMul") return 1.0;
    const auto& dims = role.graph.value(node.inputs[0]).shape.dims;
    if (node.op_type == "AllReduce" && dims.size() == 2 && dims[0] > 1 && dims[1] > 1)
      return all_reduce;  // a weight's gradient, not a bias's [1, n] sum
    return 0.0;
  };
}

// mlp's 4 layers on 2 stages, GPipe over 2 microbatches. A forward is 2 MatMuls per stage;
// the backward is 3 on stage 0 (no input gradient for layer 0) and 4 on stage 1, whose
// order is dX3 dW3 dX2 dW2: the gradient stage 0 waits for is sent after its third MatMul.
//   stage 1: F.0 [2,4] F.1 [4,6] B.0 [6,10] (sends at 9) B.1 [10,14] (sends at 13)
//   stage 0: F.0 [0,2] F.1 [2,4] B.0 [9,12] B.1 [13,16]
TEST(Simulator, TwoStageGpipeByHand) {
  const Plan plan =
      zoo_plan("mesh: {pp: 2}\nbatch: {global: 4, micro: 2}\npipeline: {schedule: gpipe}\n", 2);
  auto sim = simulate(plan, unit_costs(), true);
  ASSERT_TRUE(sim.is_ok()) << sim.status().message();
  EXPECT_DOUBLE_EQ(sim->step_seconds, 16.0);
  EXPECT_DOUBLE_EQ(sim->roles[0].compute_busy, 10.0);
  EXPECT_DOUBLE_EQ(sim->roles[1].compute_busy, 12.0);
  EXPECT_DOUBLE_EQ(sim->roles[1].finish, 14.0);
  EXPECT_DOUBLE_EQ(sim->bubble_seconds, 4.0);
}

// Data parallel over 2, one microbatch: after the forward's 4 MatMuls, the backward's 7
// produce the weight gradients at 6, 8, 10 and 11; each is all-reduced (2 units) right after
// it is computed, one after another on the communication stream: [6,8] [8,10] [10,12]
// [12,14], while the backward goes on. Without the overlap the step would take 4 + 7 + 8.
TEST(Simulator, GradientReductionOverlapsTheBackward) {
  const Plan plan = zoo_plan("mesh: {dp: 2}\nbatch: {global: 4}\n", 4);
  auto sim = simulate(plan, unit_costs(2.0));
  ASSERT_TRUE(sim.is_ok()) << sim.status().message();
  EXPECT_DOUBLE_EQ(sim->roles[0].compute_busy, 4.0 + 7.0);
  EXPECT_DOUBLE_EQ(sim->roles[0].comm_busy, 8.0);
  EXPECT_DOUBLE_EQ(sim->step_seconds, 4.0 + 10.0);
  auto trace = chrome_trace(plan, *simulate(plan, unit_costs(2.0), true));
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("\"name\": \"communication\""), std::string::npos);
  EXPECT_NE(trace.find("B0.0 grad/fc.0/MatMul/MatMul/AllReduce.dp"), std::string::npos);
}

// The same step with compute at half its rate while a reduction runs beside it:
//   backward dX3 [4,5] dW3 [5,6] → AR [6,8]; dX2 [6,8] (half rate); dW2 [8,9] → AR [9,11];
//   dX1 [9,11]; dW1 [11,12] → AR [12,14]; dW0 [12,14] → AR [14,16].
TEST(Simulator, ComputeBesideACollectiveRunsAtTheRateItLeaves) {
  const Plan plan = zoo_plan("mesh: {dp: 2}\nbatch: {global: 4}\n", 4);
  StreamModel streams;
  streams.overlap_slowdown = 0.5;
  auto sim = simulate(plan, unit_costs(2.0), false, streams);
  ASSERT_TRUE(sim.is_ok()) << sim.status().message();
  EXPECT_DOUBLE_EQ(sim->roles[0].compute_busy, 4.0 + 10.0);
  EXPECT_DOUBLE_EQ(sim->roles[0].comm_busy, 8.0);
  EXPECT_DOUBLE_EQ(sim->step_seconds, 16.0);
  // In line, nothing runs beside a collective.
  streams.overlap_communication = false;
  auto in_line = simulate(plan, unit_costs(2.0), false, streams);
  ASSERT_TRUE(in_line.is_ok());
  EXPECT_DOUBLE_EQ(in_line->step_seconds, 4.0 + 7.0 + 8.0);
}

// ZeRO 2 over two microbatches reduce-scatters each microbatch's weight gradients (2 units each)
// onto the rank's shard and adds them into its accumulator there, behind the reduction on the
// communication stream, as FSDP and DeepSpeed do: the backward never waits for them.
//   microbatch 0: F [0,4] B [4,11], reductions [6,8] [8,10] [10,12] [12,14]
//   microbatch 1: F [11,15] B [15,22], reductions [17,19] [19,21] [21,23] [23,25]
// Waiting for each reduction before going on would take 2 x (4 + 7 + 8) = 38.
TEST(Simulator, ReducedGradientsAccumulateBehindTheirReduction) {
  const Plan plan = zoo_plan("mesh: {dp: 2}\nbatch: {global: 8, micro: 2}\nzero: 2\n", 4);
  const NodeSeconds costs = [](const Role& role, NodeId n, int64_t) -> double {
    const Node& node = role.graph.node(n);
    if (node.op_type == "MatMul") return 1.0;
    const auto& dims = role.graph.value(node.inputs[0]).shape.dims;
    if (node.op_type == "ReduceScatter" && dims.size() == 2 && dims[0] > 1 && dims[1] > 1)
      return 2.0;
    return 0.0;
  };
  int behind = 0;
  for (bool b : reduction_accumulation(plan.roles[0].graph)) behind += b;
  EXPECT_EQ(behind, 2 * 8);  // a Mul by 1/2 and an Add per weight and bias of the 4 layers
  auto sim = simulate(plan, costs);
  ASSERT_TRUE(sim.is_ok()) << sim.status().message();
  EXPECT_DOUBLE_EQ(sim->roles[0].comm_busy, 16.0);
  EXPECT_DOUBLE_EQ(sim->step_seconds, 25.0);
}

// Collectives of different communicators run on streams of their own, as NCCL runs each process
// group: with dp 2 · tp 2, a tp all-reduce the forward waits for does not queue behind the dp
// gathers of later layers' weights (ZeRO 3), which run from the program's start. With every
// collective and MatMul one unit, tp and dp collectives overlap in time, which one stream
// running them in turn could not do.
TEST(Simulator, EachCommunicatorHasAStreamOfItsOwn) {
  const Plan plan = zoo_plan("mesh: {dp: 2, tp: 2}\nbatch: {global: 8}\nzero: 3\n", 8, "gpt-tiny");
  const NodeSeconds costs = [](const Role& role, NodeId n, int64_t) -> double {
    const Node& node = role.graph.node(n);
    return node.op_type == "MatMul" || is_communication(node) ? 1.0 : 0.0;
  };
  auto sim = simulate(plan, costs, true);
  ASSERT_TRUE(sim.is_ok()) << sim.status().message();
  std::vector<std::pair<double, double>> tp, dp;
  for (const SimEvent& e : sim->events) {
    if (e.role != 0 || !e.communication) continue;
    (e.name.find(".tp") != std::string::npos ? tp : dp).emplace_back(e.start, e.end);
  }
  ASSERT_FALSE(tp.empty());
  ASSERT_FALSE(dp.empty());
  bool overlapped = false;
  for (const auto& [ts, te] : tp) {
    for (const auto& [ds, de] : dp) overlapped |= ts < de && ds < te;
  }
  EXPECT_TRUE(overlapped);
}

// A framework keeping half-precision weights (Megatron-LM, DeepSpeed) casts each parameter once
// per step: with casts of parameters one unit each and everything else free, a bf16 step of four
// microbatches takes one unit per cast, where autopar's runtime, casting per microbatch, takes
// four.
TEST(Simulator, AFrameworkHoldingHalfWeightsCastsThemOncePerStep) {
  const Plan plan = zoo_plan("mesh: {dp: 1}\nbatch: {global: 8, micro: 2}\nprecision: bf16\n", 2);
  ASSERT_EQ(plan.microbatches, 4);
  const Role& role = plan.roles.at(0);
  auto is_weight_cast = [&](NodeId n) {
    const Node& node = role.graph.node(n);
    if (node.op_type != "Cast") return false;
    const Value& in = role.graph.value(node.inputs[0]);
    for (const StateSpec& s : plan.state)
      if (s.is_parameter && s.name == in.name && in.kind == ValueKind::kInput) return true;
    return false;
  };
  int casts = 0;
  for (NodeId n = 0; n < role.graph.num_nodes(); ++n) casts += is_weight_cast(n);
  EXPECT_EQ(casts, 8);  // mlp's four weights and four biases
  const NodeSeconds costs = [&](const Role&, NodeId n, int64_t) {
    return is_weight_cast(n) ? 1.0 : 0.0;
  };
  auto per_microbatch = simulate(plan, costs);
  ASSERT_TRUE(per_microbatch.is_ok()) << per_microbatch.status().message();
  EXPECT_DOUBLE_EQ(per_microbatch->roles[0].compute_busy, 4.0 * casts);
  StreamModel once;
  once.weights_cast_once = true;
  auto held = simulate(plan, costs, false, once);
  ASSERT_TRUE(held.is_ok()) << held.status().message();
  EXPECT_DOUBLE_EQ(held->roles[0].compute_busy, casts);
}

// Megatron-LM's weight-gradient GEMMs accumulate into the fp32 main gradient: each of mlp's four
// weights has a Cast of its bf16 gradient, a scaling Mul and the accumulating Add behind its GEMM
// (a bias's gradient is a reduction, not a GEMM, and keeps its own). With those nodes one unit
// each, four microbatches take 48 units, and none where the GEMM accumulates.
TEST(Simulator, GemmsAccumulatingIntoMainGradientsDoTheAccumulation) {
  const Plan plan = zoo_plan("mesh: {dp: 1}\nbatch: {global: 8, micro: 2}\nprecision: bf16\n", 2);
  const std::vector<bool> accumulation = gemm_accumulation(plan.roles.at(0).graph);
  std::map<std::string, int> ops;
  for (NodeId n = 0; n < plan.roles[0].graph.num_nodes(); ++n) {
    if (accumulation[n]) ++ops[plan.roles[0].graph.node(n).op_type];
  }
  EXPECT_EQ(ops, (std::map<std::string, int>{{"Add", 4}, {"Cast", 4}, {"Mul", 4}}));
  const NodeSeconds costs = [&](const Role&, NodeId n, int64_t) {
    return accumulation[n] ? 1.0 : 0.0;
  };
  auto per_node = simulate(plan, costs);
  ASSERT_TRUE(per_node.is_ok()) << per_node.status().message();
  EXPECT_DOUBLE_EQ(per_node->roles[0].compute_busy, 4.0 * 12);
  StreamModel fused;
  fused.accumulates_in_gemm = true;
  auto in_gemm = simulate(plan, costs, false, fused);
  ASSERT_TRUE(in_gemm.is_ok()) << in_gemm.status().message();
  EXPECT_DOUBLE_EQ(in_gemm->roles[0].compute_busy, 0.0);
}

}  // namespace
}  // namespace autopar
