// Pipeline schedules, their deadlock check, shards of whole tensors, and fused projections.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "autopar/parallel/lowering.h"
#include "autopar/parallel/primitives.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/plan_runner.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

std::string steps(PipelineSchedule schedule, int64_t rank, int64_t ranks, int64_t chunks,
                  int64_t micro) {
  std::vector<std::string> out;
  for (const ScheduleStep& s : make_schedule(schedule, rank, ranks, chunks, micro, true))
    out.push_back(s.to_string());
  return fmt::format("{}", fmt::join(out, " "));
}

TEST(Schedule, GpipeRunsAllForwardsThenAllBackwards) {
  EXPECT_EQ(steps(PipelineSchedule::kGpipe, 1, 2, 1, 3), "F0.0 F0.1 F0.2 B0.0 B0.1 B0.2 U");
}

TEST(Schedule, OneForwardOneBackwardWarmsUpByDepth) {
  EXPECT_EQ(steps(PipelineSchedule::kOneForwardOneBackward, 0, 4, 1, 4),
            "F0.0 F0.1 F0.2 F0.3 B0.0 B0.1 B0.2 B0.3 U");
  EXPECT_EQ(steps(PipelineSchedule::kOneForwardOneBackward, 2, 4, 1, 4),
            "F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3 U");
  EXPECT_EQ(steps(PipelineSchedule::kOneForwardOneBackward, 3, 4, 1, 4),
            "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3 U");
}

TEST(Schedule, InterleavedWalksGroupsOfRanksThroughTheChunks) {
  // 2 ranks, 2 chunks, 4 microbatches: rank 0 warms up (2 − 0 − 1)·2 + (2 − 1)·2 = 4 forwards.
  EXPECT_EQ(steps(PipelineSchedule::kInterleaved, 0, 2, 2, 4),
            "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3 U");
  EXPECT_EQ(steps(PipelineSchedule::kInterleaved, 1, 2, 2, 4),
            "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3 U");
}

// Two ranks whose first programs each receive before sending: the check names both.
TEST(Schedule, CheckFindsADeadlock) {
  std::vector<Role> roles(2);
  for (int r = 0; r < 2; ++r) {
    Role& role = roles[r];
    role.id = r;
    role.stage = r;
    Graph& g = role.graph;
    g.opsets[std::string(kAutoparDomain)] = 1;
    auto x = augment_recv(g, "x", DType::kFloat32, {2}, "pp", 1 - r, 7, Phase::kForward, 0);
    ASSERT_TRUE(x.is_ok()) << x.status().message();
    augment_send(g, *x, "pp", 1 - r, 7, Phase::kForward, 0);
    role.programs.push_back({ProgramKind::kForward, 0, 0, g.num_nodes()});
    role.schedule = {{ProgramKind::kForward, 0, 0}};
  }
  Status status = check_schedule(roles);
  EXPECT_EQ(status.message(), "the pipeline schedule deadlocks: rank 0 at F0.0, rank 1 at F0.0");
}

TEST(Shards, LayoutsCutAndRebuildTheWholeTensor) {
  const DeviceMesh mesh = *DeviceMesh::create({{"dp", 2}, {"tp", 2}});
  std::vector<float> values(4 * 6);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const Tensor whole = Tensor::from_float({4, 6}, values);
  const Layout layout = *Layout::parse("[tp*dp, _]");
  // Device (dp 1, tp 0) holds block tp 0, dp 1 of dim 0: row 1.
  const Tensor shard = runtime::shard_of(whole, layout, mesh, {1, 0});
  EXPECT_EQ(shard.dims(), (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(shard.float_at(0), 6.0);
  Tensor rebuilt(DType::kFloat32, {4, 6});
  for (int64_t d = 0; d < 4; ++d)
    runtime::place_shard(rebuilt, runtime::shard_of(whole, layout, mesh, mesh.coords(d)), layout,
                         mesh, mesh.coords(d));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(rebuilt.float_at(i), whole.float_at(i));
}

// Ring attention's chunk pairs: over cp = 2 a sequence of 8 positions is 4 chunks of 2, member
// 0 holding chunks 0 and 3, member 1 chunks 1 and 2; under dp the pairs are cut within each
// dp block. The pairs need the dim to divide by 2 · cp.
TEST(Shards, ZigzagAxisHoldsChunkPairs) {
  const DeviceMesh mesh = *DeviceMesh::create({{"dp", 2}, {"cp", 2}});
  std::vector<float> values(2 * 8);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const Tensor whole = Tensor::from_float({2, 8}, values);
  const Layout layout = *Layout::parse("[dp, cp]");
  const Tensor first = runtime::shard_of(whole, layout, mesh, {0, 0}, "cp");
  const Tensor second = runtime::shard_of(whole, layout, mesh, {1, 1}, "cp");
  EXPECT_EQ(first.dims(), (std::vector<int64_t>{1, 4}));
  auto floats = [](const Tensor& t) {
    std::vector<float> out;
    for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(static_cast<float>(t.float_at(i)));
    return out;
  };
  EXPECT_EQ(floats(first), (std::vector<float>{0, 1, 6, 7}));
  EXPECT_EQ(floats(second), (std::vector<float>{10, 11, 12, 13}));
  Tensor rebuilt(DType::kFloat32, {2, 8});
  for (int64_t d = 0; d < 4; ++d)
    runtime::place_shard(rebuilt, runtime::shard_of(whole, layout, mesh, mesh.coords(d), "cp"),
                         layout, mesh, mesh.coords(d), "cp");
  EXPECT_EQ(floats(rebuilt), values);

  DeviceMesh paired = mesh;
  paired.set_paired_axis("cp");
  EXPECT_TRUE(layout.validate({2, 8}, paired).is_ok());
  EXPECT_EQ(layout.validate({2, 6}, paired).message(),
            "dim 1 of [2,6]: 6 is not divisible by cp (chunk pairs: 2 per member) = 4");
  EXPECT_TRUE(layout.validate({2, 6}, mesh).is_ok());
}

TEST(SplitProjections, GptTinyAttentionBecomesThreeProjectionsPerLayer) {
  ZooOptions zoo;
  zoo.batch = 2;
  zoo.with_weights = true;
  auto model = build_zoo_model("gpt-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  std::vector<ParameterPart> parts;
  auto split = split_fused_projections(*model, parts);
  ASSERT_TRUE(split.is_ok()) << split.status().message();
  // 4 layers × (weight, bias) × 3 parts; the Split nodes stay out, 2 nodes per part come in.
  EXPECT_EQ(parts.size(), 24u);
  EXPECT_EQ(parts[1].name, "h.0.attn.c_attn.bias.part0");
  EXPECT_EQ(parts[2].whole, "h.0.attn.c_attn.weight");
  EXPECT_EQ(parts[2].offset, 64);
  EXPECT_EQ(split->num_nodes(), model->num_nodes() + 4 * (6 - 3));
  EXPECT_EQ(split->num_parameter_elements(), model->num_parameter_elements());
  // The same logits, up to the GEMMs' summation order.
  const std::vector<TensorPtr> inputs = runtime::synthetic_inputs(*model, 3);
  auto a = runtime::Executor::create(*model);
  auto b = runtime::Executor::create(*split);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto ya = a->run_inputs(inputs);
  auto yb = b->run_inputs(inputs);
  ASSERT_TRUE(ya.is_ok() && yb.is_ok());
  double worst = 0;
  for (int64_t i = 0; i < (*ya)[0]->num_elements(); ++i)
    worst = std::max(worst, std::fabs((*ya)[0]->float_at(i) - (*yb)[0]->float_at(i)));
  EXPECT_LT(worst, 1e-5);
}

// The collectives of kind `op` over `axis` on the first role of gpt-tiny's plan, counted by
// phase and by the type they move: {"bwd bf16": 52, ...}.
std::map<std::string, int> collectives(const std::string& scheme_yaml, const std::string& op,
                                       const std::string& axis) {
  auto scheme = parse_scheme(scheme_yaml, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  ZooOptions zoo;
  zoo.batch = scheme->micro_batch * scheme->dp();
  auto model = build_zoo_model("gpt-tiny", zoo);
  EXPECT_TRUE(model.is_ok());
  auto plan = lower(*model, *scheme, LoweringOptions{});
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  std::map<std::string, int> counts;
  if (!plan.is_ok()) return counts;
  const Graph& g = plan->roles[0].graph;
  for (const Node& n : g.nodes()) {
    const Attribute* axes = n.attr("axes");
    if (n.domain != kAutoparDomain || n.op_type != op || !axes ||
        axes->strings() != std::vector<std::string>{axis})
      continue;
    ++counts[fmt::format("{} {}", phase_name(n.phase), dtype_name(g.value(n.inputs[0]).dtype))];
  }
  return counts;
}

// Under mixed precision a weight gradient is computed in bf16 and cast to fp32. With one
// microbatch per replica and no ZeRO, each of gpt-tiny's 52 gradients is all-reduced in bf16
// before its cast, right after the backward computes it. When microbatches accumulate, the
// partial sums pass through the cast and the update reduces them once, in fp32, as without
// mixed precision; under ZeRO they are reduce-scattered in fp32 onto the update's shards (in
// the backward with one microbatch or sharded accumulators, ZeRO 2; in the update for ZeRO 1's
// whole accumulators). The embeddings' gradients too: a Gather's gradient scatters each
// device's rows into zeros, a partial sum like the others (each of the tied wte's two
// contributions is cast to fp32 before they meet). The forward all-reduces the loss.
TEST(MixedPrecision, GradientsAreReducedWhereTheyWouldBeInFp32) {
  using Counts = std::map<std::string, int>;
  auto scheme = [](int micro, int zero) {
    return fmt::format(
        "mesh: {{dp: 2}}\nbatch: {{global: 8, micro: {}}}\nzero: {}\n"
        "precision: bf16\n",
        micro, zero);
  };
  EXPECT_EQ(collectives(scheme(4, 0), "AllReduce", "dp"),
            (Counts{{"bwd bf16", 52}, {"fwd f32", 1}}));
  EXPECT_EQ(collectives(scheme(4, 0), "ReduceScatter", "dp"), Counts{});
  EXPECT_EQ(collectives(scheme(1, 0), "AllReduce", "dp"),
            (Counts{{"fwd f32", 1}, {"opt f32", 52}}));
  EXPECT_EQ(collectives(scheme(4, 1), "ReduceScatter", "dp"), (Counts{{"bwd f32", 52}}));
  EXPECT_EQ(collectives(scheme(1, 1), "ReduceScatter", "dp"), (Counts{{"opt f32", 52}}));
  EXPECT_EQ(collectives(scheme(1, 2), "ReduceScatter", "dp"), (Counts{{"bwd f32", 52}}));
  EXPECT_EQ(collectives(scheme(1, 1), "AllReduce", "dp"), (Counts{{"fwd f32", 1}}));
  // ZeRO 3 casts each parameter's shard and gathers it in bf16 (half the bytes of its fp32
  // master), once per parameter in the forward: 52 gathers, and no activation's. (The
  // position-embedding lookup stays whole: only its constant ids could carry a split over dp,
  // and its 16 × 64 result would be gathered back for the add that broadcasts it.)
  Counts gathers = collectives(scheme(1, 3), "AllGather", "dp");
  EXPECT_EQ(gathers["fwd bf16"], 52);
  EXPECT_EQ(gathers.count("fwd f32"), 0u);
}

// Under Megatron's tensor parallelism a layer all-reduces twice forward and twice backward.
// gpt-tiny's attention projection is split into three (so heads shard): their input
// gradients are partial sums that meet in one Sum and are all-reduced once after it, not once
// each. 4 layers: 8 forward, 8 backward. (A norm's gradient is one fused node over whole rows,
// so no norm's backward runs on hidden shards and all-reduces its means.) gpt-tiny's 256-word
// vocabulary is gathered for the loss: three all-reduces of a row each would cost more
// (VerifyPlan.CrossEntropyRunsOnTheVocabularyShards has a vocabulary where they do not).
TEST(TensorParallel, SplitProjectionsReduceTheirInputGradientOnce) {
  using Counts = std::map<std::string, int>;
  const std::string megatron = "mesh: {tp: 2}\nbatch: {global: 8}\ntensor: megatron\n";
  EXPECT_EQ(collectives(megatron, "AllReduce", "tp"), (Counts{{"bwd f32", 8}, {"fwd f32", 8}}));
}

// Tensor auto plans each layer's forward by dynamic programming (SPMD pass). gpt-tiny's
// repeated layers hand the residual stream on in the layout it came in, so each repeat plans
// alike: the same forward collectives over tp in layers 1 and 2 (layer 0 also holds the
// embeddings, layer 3 the head). A second lowering sharing the first one's strategies takes
// its cached layer plans and builds the same graph.
TEST(TensorAuto, RepeatedLayersArePlannedAlike) {
  auto scheme =
      parse_scheme("mesh: {dp: 2, tp: 2}\nbatch: {global: 16, micro: 4}\ntensor: auto\n", "s");
  ASSERT_TRUE(scheme.is_ok()) << scheme.status().message();
  ZooOptions zoo;
  zoo.batch = 8;
  auto model = build_zoo_model("gpt-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  LoweringOptions options;
  options.strategies = std::make_shared<StrategyCache>();
  auto first = lower(*model, *scheme, options);
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  auto second = lower(*model, *scheme, options);
  ASSERT_TRUE(second.is_ok()) << second.status().message();
  const Graph& g = first->roles[0].graph;
  std::map<int32_t, std::map<std::string, int>> per_layer;  // layer → collective → count
  for (const Node& n : g.nodes()) {
    const Attribute* axes = n.attr("axes");
    if (n.domain != kAutoparDomain || n.phase != Phase::kForward || !axes ||
        axes->strings() != std::vector<std::string>{"tp"})
      continue;
    ++per_layer[n.layer][n.op_type];
  }
  // At 4 samples per device gpt-tiny's GEMMs are too small to split: each layer runs
  // replicated over tp where it can and gathers what the split parameters' products leave.
  const std::map<std::string, int> gathers{{"AllGather", 2}};
  EXPECT_EQ(per_layer.size(), 5u);  // layers 0-3 and the nodes outside them (-1)
  for (int32_t layer = -1; layer < 4; ++layer) EXPECT_EQ(per_layer[layer], gathers) << layer;
  const Graph& h = second->roles[0].graph;
  ASSERT_EQ(g.num_nodes(), h.num_nodes());
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    EXPECT_EQ(g.node(n).op_type, h.node(n).op_type) << n;
    EXPECT_EQ(g.node(n).name, h.node(n).name) << n;
  }
}

// ViT prepends its class token by slicing the first patch token (Slice along the tokens) and
// concatenating. Slice splits every dim it does not slice; vit-tiny's mean pool has an Expand
// in its gradient, which splits the batch too (its target shape written per device, as a
// Reshape's); vit-l16 pools the class token with a Gather, whose gradient (a ScatterND into
// zeros) splits the batch it carries, slicing the zeros for free. Under data parallelism the
// batch stays split forward and backward. Before, the forward gathered the whole batch at the
// slice and the backward at the pool's gradient, and every block ran on all of it; vit-l16 on
// 8 A100s simulated 114 ms a step, 66 ms now. The only collectives over dp left are the loss's
// all-reduce and one all-reduce per gradient.
TEST(DataParallel, SlicedTokensKeepTheBatchSplit) {
  auto scheme = parse_scheme("mesh: {dp: 2}\nbatch: {global: 8, micro: 4}\n", "s");
  ASSERT_TRUE(scheme.is_ok()) << scheme.status().message();
  ZooOptions zoo;
  zoo.batch = 8;
  auto model = build_zoo_model("vit-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  auto plan = lower(*model, *scheme, LoweringOptions{});
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  std::map<std::string, int> collectives;  // "<phase> <op>"
  for (const Node& n : plan->roles[0].graph.nodes()) {
    if (n.domain == kAutoparDomain)
      ++collectives[fmt::format("{} {}", phase_name(n.phase), n.op_type)];
  }
  const int64_t parameters = static_cast<int64_t>(model->parameters().size());
  EXPECT_EQ(collectives,
            (std::map<std::string, int>{{"fwd AllReduce", 1}, {"bwd AllReduce", parameters}}));
}

// gpt-tiny ties its token embedding to its head. On two pipeline ranks each computes a
// gradient contribution every microbatch; each accumulates it where it is computed, and the
// ranks' exchange programs send the accumulators once per step, before the updates (which add
// them and apply the same update to both copies). The backward sends only the activations'
// gradient [2, 16, 64] per microbatch, nothing of the [256, 64] table.
// Under bf16 as in fp32: the last rank casts its own copy of the table rather than receiving
// rank 0's cast every microbatch, and each rank casts its contribution to the table's gradient
// to fp32 and accumulates it, so only activations cross ranks per microbatch and the fp32
// accumulators once per step.
TEST(PipelineParallel, TiedEmbeddingGradientsCrossRanksOncePerStep) {
  ZooOptions zoo;
  zoo.batch = 2;
  auto model = build_zoo_model("gpt-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  for (const char* precision : {"fp32", "bf16"}) {
    auto scheme = parse_scheme(
        fmt::format("mesh: {{pp: 2}}\nbatch: {{global: 8, micro: 2}}\nprecision: {}\n", precision),
        "scheme");
    ASSERT_TRUE(scheme.is_ok());
    auto plan = lower(*model, *scheme, LoweringOptions{});
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    for (const Role& role : plan->roles) {
      std::vector<std::string> steps;
      for (const ScheduleStep& s : role.schedule) steps.push_back(s.to_string());
      EXPECT_EQ(steps.end()[-2], "X") << precision << " rank " << role.id;
      EXPECT_EQ(steps.back(), "U");
      // program → the types and shapes it sends
      std::map<std::string, std::vector<std::string>> sent;
      for (const Program& program : role.programs) {
        for (int32_t n = program.begin; n < program.end; ++n) {
          const Node& node = role.graph.node(n);
          if (node.domain == kAutoparDomain && node.op_type == "Send") {
            const Value& v = role.graph.value(node.inputs[0]);
            sent[program.name()].push_back(
                fmt::format("{}[{}]", dtype_name(v.dtype), fmt::join(v.shape.dims, "x")));
          }
        }
      }
      const std::string activations =
          fmt::format("{}[2x16x64]", std::string(precision) == "bf16" ? "bf16" : "f32");
      EXPECT_EQ(sent["X"], std::vector<std::string>{"f32[256x64]"})
          << precision << " rank " << role.id;
      EXPECT_EQ(sent[role.id == 0 ? "F0" : "B0"], std::vector<std::string>{activations})
          << precision << " rank " << role.id;
      EXPECT_EQ(sent.count(role.id == 0 ? "B0" : "F0"), 0u) << precision << " rank " << role.id;
    }
  }
}

}  // namespace
}  // namespace autopar
