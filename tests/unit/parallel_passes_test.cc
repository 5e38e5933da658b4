// lower() as named passes, each checked by verify(graph); verify_plan as a library function.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autopar/parallel/lowering.h"
#include "autopar/parallel/primitives.h"
#include "autopar/parallel/verify.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

Scheme scheme_of(const std::string& yaml) {
  auto scheme = parse_scheme(yaml, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  return *scheme;
}

Graph gpt_tiny(int64_t batch, bool weights) {
  ZooOptions zoo;
  zoo.batch = batch;
  zoo.with_weights = weights;
  auto model = build_zoo_model("gpt-tiny", zoo);
  EXPECT_TRUE(model.is_ok());
  return std::move(model).value();
}

// Megatron's 3-D recipe in bf16 over two microbatches runs every pass (batch-norm-statistics
// runs wherever dp or sp splits the batch, here on a model without BatchNorm); each leaves a
// graph verify() accepts (one per role after "roles").
TEST(LoweringPasses, RunInOrderAndEachLeavesAValidGraph) {
  const Scheme scheme = scheme_of(
      "mesh: {pp: 2, dp: 2, tp: 2}\nbatch: {global: 16, micro: 2}\ntensor: megatron-sp\n"
      "zero: 1\nprecision: bf16\n");
  LoweringOptions options;
  options.verify_passes = true;
  std::vector<std::string> seen;
  options.after_pass = [&](std::string_view pass, const Graph&) { seen.emplace_back(pass); };
  auto plan = lower(gpt_tiny(scheme.dp() * scheme.micro_batch, false), scheme, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(seen, (std::vector<std::string>{"split-projections", "mixed-precision",
                                            "training-graph", "batch-norm-statistics",
                                            "gradient-casts", "spmd", "roles", "roles"}));
  std::vector<std::string> listed;
  for (const LoweringPass& p : lowering_passes()) listed.emplace_back(p.name);
  EXPECT_EQ(listed,
            (std::vector<std::string>{"split-projections", "mixed-precision", "training-graph",
                                      "batch-norm-statistics", "gradient-casts", "spmd", "roles"}));
}

// Data parallelism in fp32 skips the passes it does not need.
TEST(LoweringPasses, SkipWhatTheSchemeDoesNotNeed) {
  const Scheme scheme = scheme_of("mesh: {dp: 2}\nbatch: {global: 8, micro: 4}\n");
  LoweringOptions options;
  std::vector<std::string> seen;
  options.after_pass = [&](std::string_view pass, const Graph&) { seen.emplace_back(pass); };
  ASSERT_TRUE(lower(gpt_tiny(8, false), scheme, options).is_ok());
  EXPECT_EQ(seen,
            (std::vector<std::string>{"training-graph", "batch-norm-statistics", "spmd", "roles"}));
}

// verify_plan runs the plan and its single-device reference on the same feeds: a correct
// plan agrees to rounding; a tampered result is caught and named.
TEST(VerifyPlan, AgreesWithTheReferenceAndCatchesADifference) {
  const Scheme scheme = scheme_of("mesh: {dp: 2, tp: 2}\nbatch: {global: 8, micro: 2}\n");
  const Graph model = gpt_tiny(scheme.dp() * scheme.micro_batch, true);
  LoweringOptions options;
  options.optimizer.kind = OptimizerKind::kSgd;
  auto plan = lower(model, scheme, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  auto feeds = synthetic_plan_feeds(model, *plan, options, 1, 3);
  ASSERT_TRUE(feeds.is_ok()) << feeds.status().message();
  EXPECT_EQ(feeds->steps.size(), 1u);
  EXPECT_EQ(feeds->steps[0].size(), 2u);  // two microbatches
  auto compared = verify_plan(model, *plan, options, *feeds);
  ASSERT_TRUE(compared.is_ok()) << compared.status().message();
  // The loss and gpt-tiny's 52 parameters (the split q/k/v parts compared whole).
  EXPECT_EQ(compared->differences.size(), 53u);
  EXPECT_TRUE(compared->within(1e-4))
      << compared->differences.front().name << " " << compared->worst();

  auto ran = runtime::run_plan_inproc(*plan, *feeds);
  auto reference = lower_reference(model, scheme, options);
  ASSERT_TRUE(ran.is_ok() && reference.is_ok());
  auto expected = runtime::run_plan_inproc(*reference, *feeds);
  ASSERT_TRUE(expected.is_ok());
  runtime::PlanResult tampered = *ran;
  Tensor bias = tampered.state.at("ln_f.bias");
  bias.set_from_double(0, bias.float_at(0) + 1.0);
  tampered.state.insert_or_assign("ln_f.bias", bias);
  auto caught = compare_plan_step(*plan, tampered, *reference, *expected);
  ASSERT_TRUE(caught.is_ok());
  EXPECT_EQ(caught->differences.front().name, "ln_f.bias");
  EXPECT_FALSE(caught->within(1e-2));
  tampered.state.erase("ln_f.bias");
  EXPECT_EQ(compare_plan_step(*plan, tampered, *reference, *expected).status().message(),
            "the plan lost state 'ln_f.bias'");
}

}  // namespace
}  // namespace autopar

namespace autopar {
namespace {

// Pipeline staging reads the training graph's forward_of map, not node names: renaming every
// backward node leaves each on the stage of the forward node it differentiates, and the
// structure maps name every slot's parameter.
TEST(TrainingStructure, StagesFollowTheMapNotTheNames) {
  const Graph model = gpt_tiny(2, false);
  LossSpec loss;
  loss.kind = default_loss(model);
  OptimizerSpec adam;
  auto training = build_training_graph(model, loss, adam, TrainingOptions{.fused = true});
  ASSERT_TRUE(training.is_ok()) << training.status().message();
  const std::vector<int32_t> layer_stage = {0, 0, 1, 1};
  const std::vector<NodeId> forward = forward_nodes(*training);
  const std::vector<int32_t> before = assign(training->graph, layer_stage, 2, forward);

  TrainingGraph renamed = *training;
  int backward = 0;
  for (NodeId n = 0; n < renamed.graph.num_nodes(); ++n) {
    Node& node = renamed.graph.mutable_node(n);
    if (node.phase != Phase::kBackward) continue;
    const std::string old = node.name;
    node.name = fmt::format("b{}", backward++);
    for (auto& [b, f] : renamed.forward_of) {
      if (b == old) b = node.name;
    }
  }
  EXPECT_EQ(backward, 295);
  EXPECT_EQ(forward_nodes(renamed), forward);
  EXPECT_EQ(assign(renamed.graph, layer_stage, 2, forward_nodes(renamed)), before);
  // Every backward node of a gradient rule sits on its forward node's stage, across the cut.
  int mapped = 0;
  for (NodeId n = 0; n < renamed.graph.num_nodes(); ++n) {
    if (forward[n] == kNoId) continue;
    ++mapped;
    EXPECT_EQ(before[n], before[forward[n]]) << renamed.graph.node(n).name;
  }
  // 286 of the 295: the rest are the loss seed and sums of gradient contributions.
  EXPECT_EQ(mapped, 286);

  // Adam's two moments per parameter, each naming its parameter.
  EXPECT_EQ(training->slots.size(), 2 * training->gradients.size());
  for (const auto& [slot, parameter] : training->slots)
    EXPECT_EQ(training->graph.value(parameter).kind, ValueKind::kParameter);
}

}  // namespace
}  // namespace autopar

namespace autopar {
namespace {

// A CNN's plan is compared on its BatchNorm running statistics too: the training graph marks
// them (TrainingGraph::statistics, StateSpec::is_statistic), whatever their names.
// Each node records the source op it carries out, through every pass: a BatchNorm's forward, its
// precision casts and its gradient share one, whether the BatchNorm stays one node (dp 1) or is
// written as reductions whose partial sums are all-reduced (dp 2), and the collectives have none.
TEST(SourceOps, ABatchNormItsCastsAndItsGradientAreOneOp) {
  ZooOptions zoo;
  zoo.batch = 4;
  zoo.with_weights = false;
  auto model = build_zoo_model("resnet-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  for (int dp : {1, 2}) {
    SCOPED_TRACE(dp);
    const Scheme scheme = scheme_of(fmt::format(
        "mesh: {{dp: {}}}\nbatch: {{global: 4, micro: {}}}\nprecision: fp16\n", dp, 4 / dp));
    auto plan = lower(*model, scheme, LoweringOptions{});
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    const Graph& g = plan->roles.at(0).graph;
    // The first BatchNorm reads the first Conv's fp16 result through a Cast to fp32.
    NodeId conv = kNoId;
    for (NodeId n = 0; n < g.num_nodes() && conv == kNoId; ++n) {
      if (g.node(n).op_type == "Conv") conv = n;
    }
    ASSERT_NE(conv, kNoId);
    const std::vector<NodeId>& readers = g.value(g.node(conv).outputs[0]).consumers;
    const NodeId cast = readers.front();
    ASSERT_EQ(g.node(cast).op_type, "Cast");
    const int32_t bn = g.node(cast).source;
    ASSERT_GE(bn, 0);
    EXPECT_NE(bn, g.node(conv).source);
    int forward = 0, backward = 0, casts = 0, batch_norms = 0;
    for (const Node& node : g.nodes()) {
      if (node.domain == kAutoparDomain) {
        EXPECT_EQ(node.source, -1) << node.op_type;
        continue;
      }
      if (node.source != bn) continue;
      EXPECT_NE(node.phase, Phase::kOptimizer);
      (node.phase == Phase::kForward ? forward : backward) += 1;
      casts += node.op_type == "Cast";
      batch_norms += node.op_type == "BatchNormalization";
    }
    // The gradient rule's 22 nodes (statistics re-derived, the input's gradient, the scale's
    // and the bias's) and the gradients of the two casts.
    EXPECT_EQ(backward, 24);
    EXPECT_EQ(casts, 4);
    if (dp == 1) {
      EXPECT_EQ(forward, 3);  // Cast, BatchNormalization, Cast
      EXPECT_EQ(batch_norms, 1);
    } else {
      EXPECT_EQ(batch_norms, 0);
      EXPECT_EQ(forward, 21);  // the two casts and the 19 nodes it is written as
    }
  }
}

// MaxPool's gradient is one op (MaxPoolGrad) that splits over N and C as the pool does: a data
// parallel plan of a CNN takes it on each device's own images, where the scatter of MaxPool's
// flat indices (which count across the whole batch) had every device gather every image.
TEST(MaxPoolGradient, SplitsOverTheBatchUnderDataParallelism) {
  ZooOptions zoo;
  zoo.batch = 8;
  zoo.image = 32;
  zoo.classes = 10;
  zoo.with_weights = false;
  auto model = build_zoo_model("resnet18", zoo);  // its stem ends in a 3x3, stride-2 MaxPool
  ASSERT_TRUE(model.is_ok());
  auto plan =
      lower(*model, scheme_of("mesh: {dp: 4}\nbatch: {global: 8, micro: 2}\n"), LoweringOptions{});
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  const Graph& g = plan->roles.at(0).graph;
  int grads = 0;
  for (const Node& node : g.nodes()) {
    if (node.op_type == "MaxPoolGrad") {
      ++grads;
      EXPECT_EQ(g.value(node.inputs[1]).shape.dims.at(0), 2);  // the device's two images
      EXPECT_EQ(g.value(node.outputs[0]).shape.dims.at(0), 2);
    }
    // No device gathers the batch's images (weight gradients are gathered, [C_out, ...]).
    EXPECT_NE(node.op_type, "ScatterElements") << node.name;
    if (node.op_type == "AllGather") {
      const Shape& gathered = g.value(node.outputs[0]).shape;
      EXPECT_FALSE(gathered.rank() == 4 && gathered.dims[0] == 8) << node.name;
    }
  }
  EXPECT_EQ(grads, 1);
}

// gpt-tiny with weights and a vocabulary of 16,384 words, where the loss pays to run on the
// vocabulary's shards.
Graph large_vocabulary_gpt_tiny(int64_t batch, int64_t seq) {
  ZooOptions zoo;
  zoo.batch = batch;
  zoo.vocab = 16384;
  zoo.seq = seq;
  zoo.with_weights = true;
  auto model = build_zoo_model("gpt-tiny", zoo);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  return model.is_ok() ? *model : Graph{};
}

// One step of `plan` against one device on feeds seeded `seed`, to rounding; the tensors
// compared.
size_t expect_verifies(const Graph& model, const Plan& plan, const LoweringOptions& options,
                       uint64_t seed) {
  auto feeds = synthetic_plan_feeds(model, plan, options, 1, seed);
  EXPECT_TRUE(feeds.is_ok()) << feeds.status().message();
  if (!feeds.is_ok()) return 0;
  auto compared = verify_plan(model, plan, options, *feeds);
  EXPECT_TRUE(compared.is_ok()) << compared.status().message();
  if (!compared.is_ok()) return 0;
  EXPECT_TRUE(compared->within(1e-4))
      << compared->differences.front().name << " " << compared->worst();
  return compared->differences.size();
}

// Under tensor parallelism the head's logits come out split over tp on the vocabulary (the
// tied embedding is split by rows), and where that pays (here 16,384 words a position; the
// SPMD pass weighs three all-reduces of a row against gathering the scores) the loss runs on
// those shards as Megatron-LM's vocab_parallel_cross_entropy does: each row's max all-reduced
// (max), its sum of exponentials and its label's score all-reduced (sum), for the loss and for
// the softmax its gradient takes, whose one-hot labels compare each device's own class ids.
// No device gathers the logits, and the plan computes what one device computes.
TEST(VerifyPlan, CrossEntropyRunsOnTheVocabularyShards) {
  const Scheme scheme = scheme_of("mesh: {dp: 2, tp: 2}\nbatch: {global: 8, micro: 2}\n");
  const Graph model = large_vocabulary_gpt_tiny(scheme.dp() * scheme.micro_batch, 16);
  LoweringOptions options;
  options.optimizer.kind = OptimizerKind::kSgd;
  auto plan = lower(model, scheme, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  const Graph& g = plan->roles.at(0).graph;
  const std::vector<int64_t> row = {32, 1};  // 2 sequences of 16 a device
  int max_reductions = 0, row_sums = 0;
  for (const Node& node : g.nodes()) {
    if (node.op_type == "AllReduce" && node.attr_string("op", "") == "max") {
      ++max_reductions;
      EXPECT_EQ(g.value(node.outputs[0]).shape.dims, row);
    }
    if (node.op_type == "AllReduce" && g.value(node.outputs[0]).shape.dims == row) ++row_sums;
    // A device holds 8192 of a position's 16,384 scores, in the loss and in its gradient
    // (softmax minus the one-hot labels, on the device's classes).
    if (node.op_type == "AllGather" && node.phase == Phase::kForward) {
      EXPECT_NE(g.value(node.outputs[0]).shape.dims.back(), 16384) << node.name;
    }
    if (node.name.rfind("grad/loss/SoftmaxCrossEntropyLoss/", 0) == 0 &&
        (node.op_type == "Sub" || node.op_type == "Mul" || node.op_type == "Equal")) {
      EXPECT_EQ(g.value(node.outputs[0]).shape.dims, (std::vector<int64_t>{32, 8192})) << node.name;
    }
  }
  // Loss: max, sum, label score; its gradient's softmax: max, sum.
  EXPECT_EQ(max_reductions, 2);
  EXPECT_EQ(row_sums, 5);
  EXPECT_EQ(expect_verifies(model, *plan, options, 5), 53u);
}

// A tied embedding's two gradient contributions in different layouts (the embedding's whole
// table, the head's vocabulary shards from the loss on the shards) each accumulate over the
// microbatches in their own layout on the rank that computes them, and meet once per step in the
// layout the parameter is read in; no microbatch reshards a [vocabulary, hidden] gradient. The
// plan still computes what one device computes.
TEST(VerifyPlan, TiedGradientsAccumulateInTheirOwnLayouts) {
  const Scheme scheme = scheme_of("mesh: {pp: 2, tp: 2}\nbatch: {global: 4, micro: 2}\n");
  const Graph model = large_vocabulary_gpt_tiny(scheme.micro_batch, 32);
  LoweringOptions options;
  options.optimizer.kind = OptimizerKind::kSgd;
  auto plan = lower(model, scheme, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  std::map<std::string, std::string> accumulators;  // part -> layout
  for (const StateSpec& s : plan->state) {
    if (s.gradient_of == "wte.weight") accumulators[s.gradient_part] = s.layout.to_string();
  }
  EXPECT_EQ(accumulators,
            (std::map<std::string, std::string>{{"rank0.1", "[_, _]"}, {"rank1.0", "[tp, _]"}}));
  for (const Role& role : plan->roles) {
    for (const Node& node : role.graph.nodes()) {
      // (The exchange sends one rank's accumulator to the other once per step.)
      if (node.domain != kAutoparDomain || node.phase != Phase::kBackward || node.outputs.empty() ||
          node.op_type == "Recv")
        continue;
      EXPECT_NE(role.graph.value(node.outputs[0]).shape.dims, (std::vector<int64_t>{16384, 64}))
          << node.name;
    }
  }
  EXPECT_EQ(expect_verifies(model, *plan, options, 7), 53u);
}

TEST(VerifyPlan, ComparesRunningStatistics) {
  const Scheme scheme = scheme_of("mesh: {dp: 2}\nbatch: {global: 8, micro: 2}\n");
  ZooOptions zoo;
  zoo.batch = scheme.dp() * scheme.micro_batch;
  auto model = build_zoo_model("resnet-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  LoweringOptions options;
  options.loss.kind = default_loss(*model);
  auto plan = lower(*model, scheme, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  int statistics = 0;
  for (const StateSpec& s : plan->state) statistics += s.is_statistic ? 1 : 0;
  EXPECT_EQ(statistics, 24);  // 12 BatchNorms: running mean and variance
  auto feeds = synthetic_plan_feeds(*model, *plan, options, 1, 0);
  ASSERT_TRUE(feeds.is_ok()) << feeds.status().message();
  auto compared = verify_plan(*model, *plan, options, *feeds);
  ASSERT_TRUE(compared.is_ok()) << compared.status().message();
  // The loss, 38 parameters and the 24 statistics.
  EXPECT_EQ(compared->differences.size(), 63u);
  EXPECT_TRUE(compared->within(1e-4)) << compared->worst();
}

}  // namespace
}  // namespace autopar
