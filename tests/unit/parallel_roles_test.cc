// Role building and the placement it shares with the estimate, on small hand-built graphs:
// place_by_origin, recompute_closure, warmup_forwards and build_roles over a two-layer MLP
// cut into two pipeline ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "autopar/ir/builder.h"
#include "autopar/parallel/lowering.h"
#include "autopar/zoo/zoo.h"
#include "testing/testing.h"

namespace autopar {
namespace {

Scheme scheme_of(const std::string& yaml) {
  auto scheme = parse_scheme(yaml, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  return *scheme;
}

StatusOr<Graph> gpt_tiny() {
  ZooOptions zoo;
  zoo.batch = 2;
  return build_zoo_model("gpt-tiny", zoo);
}

// What `policy` re-runs on g (no sequence-parallel regather, no fused loss), its parameters
// as its state.
std::vector<bool> rerun_by(Recompute policy, const Graph& g) {
  return partially_recomputed(policy, false, false, g,
                              [&](ValueId v) { return g.value(v).kind == ValueKind::kParameter; });
}

LoweringOptions training() {
  LoweringOptions options;
  options.loss.kind = LossKind::kMse;
  options.optimizer.kind = OptimizerKind::kSgd;
  return options;
}

TEST(Placement, NodesGoWithTheSourceNodeTheyCameFrom) {
  // An SPMD graph of four nodes: two from source nodes 0 and 1, a forward and a backward node
  // with no source, and an update.
  SpmdResult spmd;
  GraphBuilder b("g");
  b.set_with_data(false);
  const ValueId x = b.input("x", DType::kFloat32, {2});
  const ValueId a = b.op1("Relu", {x});
  const ValueId c = b.op1("Neg", {a});
  const ValueId d = b.op1("Neg", {c});
  const ValueId e = b.op1("Neg", {d});
  b.op1("Neg", {e});
  spmd.graph = b.finish();
  spmd.graph.mutable_node(2).phase = Phase::kForward;
  spmd.graph.mutable_node(3).phase = Phase::kBackward;
  spmd.graph.mutable_node(4).phase = Phase::kOptimizer;
  spmd.origin = {0, 1, -1, -1, 1};
  const std::vector<int32_t> place = place_by_origin(spmd, {1, 5}, 3);
  // Source 1's place is clamped to the last; a forward node without one goes last, a
  // backward node first; the update has none.
  EXPECT_EQ(place, (std::vector<int32_t>{1, 3, 3, 0, -1}));
}

TEST(Placement, RecomputeClosureStopsWhereTheCallerKeeps) {
  // x → a → b → c, and a second branch x → d: the backward reads c and d.
  GraphBuilder bld("g");
  bld.set_with_data(false);
  const ValueId x = bld.input("x", DType::kFloat32, {2});
  const ValueId a = bld.op1("Relu", {x});
  const ValueId b = bld.op1("Neg", {a});
  const ValueId c = bld.op1("Relu", {b});
  const ValueId d = bld.op1("Neg", {x});
  const Graph g = bld.finish();
  // Everything recomputable: every node that leads to a root.
  EXPECT_EQ(recompute_closure(g, {c, d}, [](ValueId) { return true; }),
            (std::vector<bool>{true, true, true, true}));
  // Keeping b (its producer is not re-run) cuts the chain below it.
  EXPECT_EQ(recompute_closure(g, {c}, [&](ValueId v) { return v != b; }),
            (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(recompute_closure(g, {}, [](ValueId) { return true; }), std::vector<bool>(4, false));
}

// Updates go where the state they write is read: w0's update to place 0, w1's to place 1, and
// the step count's (which only updates read) to both, since both updates read its new value.
TEST(Placement, UpdatesRunWhereTheirStateIsRead) {
  GraphBuilder bld("g");
  bld.set_with_data(false);
  const ValueId x = bld.input("x", DType::kFloat32, {2, 2});
  const ValueId w0 = bld.input("w0", DType::kFloat32, {2, 2});
  const ValueId w1 = bld.input("w1", DType::kFloat32, {2, 2});
  const ValueId step = bld.input("step", DType::kFloat32, {});
  const ValueId h = bld.op1("MatMul", {x, w0});                              // 0: place 0
  bld.output(bld.op1("MatMul", {h, w1}), "y");                               // 1: place 1
  const ValueId next = bld.op1("Neg", {step});                               // 2: the step's update
  const ValueId w0_next = bld.op1("Sub", {w0, bld.op1("Mul", {w0, next})});  // 3, 4
  const ValueId w1_next = bld.op1("Sub", {w1, bld.op1("Mul", {w1, next})});  // 5, 6
  Graph g = bld.finish();
  ASSERT_EQ(g.num_nodes(), 7);
  for (NodeId n = 2; n < 7; ++n) g.mutable_node(n).phase = Phase::kOptimizer;
  const std::map<ValueId, NodeId> writers = {{w0, g.value(w0_next).producer},
                                             {w1, g.value(w1_next).producer},
                                             {step, g.value(next).producer}};
  const std::vector<std::vector<bool>> runs = updates_by_place(
      g, {0, 1, -1, -1, -1, -1, -1}, 2,
      [&](NodeId n) { return g.node(n).phase == Phase::kOptimizer; },
      [&](ValueId v) {
        auto it = writers.find(v);
        return it == writers.end() ? kNoId : it->second;
      });
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0], (std::vector<bool>{false, false, true, true, true, false, false}));
  EXPECT_EQ(runs[1], (std::vector<bool>{false, false, true, false, false, true, true}));
}

// The pipeline's time in closed form, two ranks taking 1 s forward and 2 s backward (the
// second 1.5 s and 2.5 s) per microbatch, four microbatches and 0.5 s of sends: 1F1B fills,
// runs the slowest rank's steady state and drains; GPipe runs all forwards, then all
// backwards; interleaved 1F1B over 2 chunks shrinks the bubble to (p - 1) / (p · v) of the ranks'
// sum; without training only forwards run.
TEST(Placement, PipelineTimeAsTheSchedulesRunIt) {
  using S = PipelineSchedule;
  const std::vector<RankSeconds> ranks = {{1.0, 2.0}, {1.5, 2.5}};
  EXPECT_DOUBLE_EQ(pipeline_seconds(S::kOneForwardOneBackward, 1, 4, true, ranks, 0.5),
                   7.0 + 3 * 4.0 + 0.5);
  EXPECT_DOUBLE_EQ(pipeline_seconds(S::kGpipe, 1, 4, true, ranks, 0.5),
                   2.5 + 3 * 1.5 + 4.5 + 3 * 2.5 + 0.5);
  EXPECT_DOUBLE_EQ(pipeline_seconds(S::kInterleaved, 2, 4, true, ranks, 0.5),
                   4 * 4.0 + 1.0 / 4.0 * 7.0 + 0.5);
  EXPECT_DOUBLE_EQ(pipeline_seconds(S::kOneForwardOneBackward, 1, 4, false, ranks, 0.5),
                   2.5 + 3 * 1.5 + 0.5);
  // In flight: 1F1B's rank 0 of 2 holds 2 microbatches, rank 1 one; GPipe all 4.
  EXPECT_EQ(in_flight(S::kOneForwardOneBackward, 0, 2, 1, 4), 2);
  EXPECT_EQ(in_flight(S::kOneForwardOneBackward, 1, 2, 1, 4), 1);
  EXPECT_EQ(in_flight(S::kGpipe, 1, 2, 1, 4), 4);
}

TEST(Placement, WarmupForwardsAsTheSchedulesRunThem) {
  using S = PipelineSchedule;
  // 1F1B: ranks − rank − 1, at most the microbatches.
  EXPECT_EQ(warmup_forwards(S::kOneForwardOneBackward, 0, 4, 1, 8), 3);
  EXPECT_EQ(warmup_forwards(S::kOneForwardOneBackward, 3, 4, 1, 8), 0);
  EXPECT_EQ(warmup_forwards(S::kOneForwardOneBackward, 0, 4, 1, 2), 2);
  // GPipe runs every forward first.
  EXPECT_EQ(warmup_forwards(S::kGpipe, 1, 4, 1, 8), 8);
  // Interleaved (Megatron-LM's order): (ranks − rank − 1) · 2 + (chunks − 1) · ranks.
  EXPECT_EQ(warmup_forwards(S::kInterleaved, 0, 4, 2, 8), 10);
  EXPECT_EQ(warmup_forwards(S::kInterleaved, 3, 4, 2, 8), 4);
  // As many microbatches as ranks: all forwards first.
  EXPECT_EQ(warmup_forwards(S::kInterleaved, 0, 4, 2, 4), 8);
  // Each schedule's first backward comes right after its warm-up and the forward after it.
  for (const auto& [schedule, chunks] :
       std::vector<std::pair<S, int64_t>>{{S::kOneForwardOneBackward, 1}, {S::kInterleaved, 2}}) {
    for (int64_t rank = 0; rank < 4; ++rank) {
      const std::vector<ScheduleStep> steps = make_schedule(schedule, rank, 4, chunks, 8, true);
      int64_t forwards = 0;
      while (steps[forwards].kind == ProgramKind::kForward) ++forwards;
      EXPECT_EQ(forwards,
                std::min<int64_t>(8 * chunks, warmup_forwards(schedule, rank, 4, chunks, 8) + 1))
          << "rank " << rank;
    }
  }
}

// Counts of (program, op) over a role.
std::map<std::string, int> ops_by_program(const Role& role) {
  std::map<std::string, int> out;
  for (const Program& p : role.programs) {
    for (int32_t n = p.begin; n < p.end; ++n) ++out[p.name() + " " + role.graph.node(n).op_type];
  }
  return out;
}

TEST(BuildRoles, CutsTwoLayersIntoTwoRanks) {
  const Graph model = testing::two_layer_mlp(false);
  auto lowered =
      lower_to_spmd(model, scheme_of("mesh: {pp: 2}\nbatch: {global: 4, micro: 2}\n"), training());
  ASSERT_TRUE(lowered.is_ok()) << lowered.status().message();
  ASSERT_EQ(lowered->policy.stage_layers,
            (std::vector<std::pair<int32_t, int32_t>>{{0, 0}, {1, 1}}));
  auto roles = build_roles(lowered->spmd, lowered->source_stage, lowered->policy, true);
  ASSERT_TRUE(roles.is_ok()) << roles.status().message();
  ASSERT_EQ(roles->size(), 2u);
  const Role& first = (*roles)[0];
  const Role& second = (*roles)[1];
  std::vector<std::string> programs;
  for (const Program& p : first.programs) programs.push_back(p.name());
  EXPECT_EQ(programs, (std::vector<std::string>{"F0", "B0", "U"}));
  // Layer 0's forward on rank 0 sends its activation; rank 1 receives it in its forward and
  // sends the activation's gradient back from its backward.
  const auto a = ops_by_program(first), b = ops_by_program(second);
  EXPECT_EQ(a.at("F0 MatMul"), 1);
  EXPECT_EQ(a.at("F0 Send"), 1);
  EXPECT_EQ(a.at("B0 Recv"), 1);
  EXPECT_EQ(b.at("F0 Recv"), 1);
  EXPECT_EQ(b.at("B0 Send"), 1);
  EXPECT_EQ(b.count("F0 Send"), 0u);
  // Each rank updates the parameter of its own layer, once.
  EXPECT_EQ(a.at("U Sub"), 1);
  EXPECT_EQ(b.at("U Sub"), 1);
  std::set<std::string> state_a, state_b;
  for (ValueId in : first.graph.inputs()) state_a.insert(first.graph.value(in).name);
  for (ValueId in : second.graph.inputs()) state_b.insert(second.graph.value(in).name);
  EXPECT_TRUE(state_a.count("w0") && !state_a.count("w1"));
  EXPECT_TRUE(state_b.count("w1") && !state_b.count("w0"));
  // The schedules cannot deadlock against the sends and receives.
  std::vector<Role> scheduled = *roles;
  for (Role& role : scheduled)
    role.schedule = make_schedule(PipelineSchedule::kOneForwardOneBackward, role.stage, 2, 1,
                                  lowered->microbatches, true);
  EXPECT_TRUE(check_schedule(scheduled).is_ok());
}

TEST(BuildRoles, FullRecomputeReRunsTheForwardInTheBackward) {
  const Graph model = testing::two_layer_mlp(false);
  auto plain = lower_to_spmd(model, scheme_of("mesh: {pp: 2}\nbatch: {global: 4}\n"), training());
  auto full = lower_to_spmd(
      model, scheme_of("mesh: {pp: 2}\nbatch: {global: 4}\nrecompute: full\n"), training());
  ASSERT_TRUE(plain.is_ok() && full.is_ok());
  auto without = build_roles(plain->spmd, plain->source_stage, plain->policy, true);
  auto with = build_roles(full->spmd, full->source_stage, full->policy, true);
  ASSERT_TRUE(without.is_ok() && with.is_ok());
  // Each layer keeps its output, which the next layer (or the loss) reads, and re-runs the
  // rest. Rank 0's backward reads its MatMul's output (Relu's gradient does) and the input x:
  // it re-runs the MatMul. Rank 1's reads its Relu's input and output and the loss's
  // difference: it re-runs the MatMul from the activation it received, and keeps the Relu's
  // output and the loss's difference (the loss is outside the layers).
  const std::vector<std::set<std::string>> expected = {{"MatMul/recompute"},
                                                       {"MatMul_1/recompute"}};
  for (size_t r = 0; r < 2; ++r) {
    std::set<std::string> copies;
    for (const Node& n : (*with)[r].graph.nodes()) {
      if (n.name.find("/recompute") == std::string::npos) continue;
      copies.insert(n.name);
      EXPECT_EQ(n.phase, Phase::kBackward) << n.name;
    }
    EXPECT_EQ(copies, expected[r]) << "rank " << r;
    EXPECT_EQ((*with)[r].graph.num_nodes(),
              (*without)[r].graph.num_nodes() + static_cast<int32_t>(copies.size()));
  }
}

// Selective recompute (Megatron-LM's) re-runs each layer's attention core, from the scores
// Q·Kᵀ to their product with V: on gpt-tiny's forward, per layer, the two products, the scaling,
// the causal mask and the softmax, and nothing else. Nonparametric re-runs everything but
// projections and norms: the core too, and the GELU, the residual sums and the reshapes.
TEST(Placement, SelectiveRecomputeReRunsTheAttentionCore) {
  auto model = gpt_tiny();
  ASSERT_TRUE(model.is_ok());
  const Graph& g = *model;
  const std::vector<bool> core = rerun_by(Recompute::kSelective, g);
  std::map<std::string, int> ops;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    if (core[n]) ++ops[g.node(n).op_type];
  }
  int32_t layers = 0;
  for (const Node& n : g.nodes()) layers = std::max(layers, n.layer + 1);
  ASSERT_EQ(layers, 4);
  const std::map<std::string, int> expected = {
      {"MatMul", 2 * layers}, {"Div", layers}, {"Add", layers}, {"Softmax", layers}};
  EXPECT_EQ(ops, expected);
  const std::vector<bool> nonparametric = rerun_by(Recompute::kNonParametric, g);
  int more = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    if (core[n]) EXPECT_TRUE(nonparametric[n]) << g.node(n).name;
    more += nonparametric[n] && !core[n];
  }
  EXPECT_GT(more, 4 * layers);
  EXPECT_EQ(rerun_by(Recompute::kNone, g), std::vector<bool>(g.num_nodes(), false));
}

// Full recompute (Megatron-LM's, one layer per checkpoint) re-runs every forward node of a
// layer but the residual sum that ends it, which the next layer (or the final norm) reads;
// the embeddings, the final norm, the head and the loss are never re-run.
TEST(Placement, FullRecomputeKeepsEachLayersOutput) {
  auto model = gpt_tiny();
  ASSERT_TRUE(model.is_ok());
  const Graph& g = *model;
  const std::vector<bool> full = rerun_by(Recompute::kFull, g);
  std::vector<std::string> kept;
  int rerun = 0, in_layers = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.layer < 0) {
      EXPECT_FALSE(full[n]) << node.name;
      continue;
    }
    ++in_layers;
    rerun += full[n];
    if (!full[n]) kept.push_back(node.name);
  }
  EXPECT_EQ(kept, (std::vector<std::string>{"h.0/Add_1", "h.1/Add_1", "h.2/Add_1", "h.3/Add_1"}));
  EXPECT_EQ(rerun, in_layers - 4);
  // Without layers the model is one checkpoint: every forward node re-runs.
  Graph flat = g;
  for (NodeId n = 0; n < flat.num_nodes(); ++n) flat.mutable_node(n).layer = -1;
  std::vector<bool> forward(static_cast<size_t>(flat.num_nodes()));
  for (NodeId n = 0; n < flat.num_nodes(); ++n) forward[n] = flat.node(n).phase == Phase::kForward;
  EXPECT_EQ(rerun_by(Recompute::kFull, flat), forward);
}

// A fused cross-entropy kernel reads the logits in the compute type: under bf16 the backward
// widens them again (the Cast re-run, and the view between it and the loss) and no fp32 copy
// of the logits is kept from the forward.
TEST(BuildRoles, AFusedCrossEntropyKeepsTheHalfPrecisionLogits) {
  auto model = gpt_tiny();
  ASSERT_TRUE(model.is_ok());
  LoweringOptions options;
  options.loss.kind = LossKind::kCrossEntropy;
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    const std::string fusions = fused ? "[op_kernels, cross_entropy]" : "[op_kernels]";
    auto plan =
        lower(*model, scheme_of("precision: bf16\nkernels: {fusions: " + fusions + "}\n"), options);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    const Graph& rg = plan->roles.at(0).graph;
    std::set<std::string> copies;
    bool wide_logits_stashed = false;
    for (const Node& n : rg.nodes()) {
      if (n.name.find("/recompute") != std::string::npos) copies.insert(n.op_type);
      if (n.phase != Phase::kForward) continue;
      for (ValueId out : n.outputs) {
        const Value& v = rg.value(out);
        if (v.dtype != DType::kFloat32 || v.shape.num_elements() != 2 * 16 * 256) continue;
        for (NodeId r : v.consumers) wide_logits_stashed |= rg.node(r).phase == Phase::kBackward;
      }
    }
    EXPECT_EQ(wide_logits_stashed, !fused);
    const std::set<std::string> widened = {"Cast", "Reshape"};
    EXPECT_EQ(copies, fused ? widened : std::set<std::string>());
  }
}

}  // namespace
}  // namespace autopar
