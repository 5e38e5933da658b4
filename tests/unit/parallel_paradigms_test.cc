// Each built-in paradigm on its own, on a hand-built two-layer graph: what its configure()
// decides on the lowering policy, and the errors it names, without lower() around it.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "autopar/ir/builder.h"
#include "autopar/parallel/lowering.h"

namespace autopar {
namespace {

const Paradigm& paradigm(std::string_view name) {
  for (const Paradigm& p : paradigms()) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no paradigm " << name;
  return paradigms().front();
}

// Two layers over an embedded sequence x [batch 8, seq `seq`, hidden 16]:
// layer 0 h = Relu(x · W1), layer 1 y = h · W2 + b2.
Graph two_layers(int64_t seq = 4) {
  GraphBuilder b("two-layers");
  b.set_with_data(false);
  const ValueId x = b.input("x", DType::kFloat32, {8, seq, 16});
  b.set_layer(0);
  const ValueId w1 = b.parameter("w1", {16, 32}, ParamInit::zeros());
  const ValueId h = b.op1("Relu", {b.op1("MatMul", {x, w1})});
  b.set_layer(1);
  const ValueId w2 = b.parameter("w2", {32, 16}, ParamInit::zeros());
  const ValueId b2 = b.parameter("b2", {16}, ParamInit::zeros());
  b.output(b.op1("Add", {b.op1("MatMul", {h, w2}), b2}), "y");
  return b.finish();
}

struct Configured {
  Status status = Status::ok();
  LoweringPolicy policy;
};

Configured configure(std::string_view name, const std::string& scheme_yaml, const Graph& graph) {
  auto scheme = parse_scheme(scheme_yaml, "s");
  Configured c;
  if (!scheme.is_ok()) {
    ADD_FAILURE() << scheme.status().message();
    c.status = scheme.status();
    return c;
  }
  c.status = paradigm(name).configure(*scheme, graph, 2, c.policy);
  return c;
}

// The layout the policy's input contributions give input `name`.
std::string input_layout(const LoweringPolicy& policy, const Graph& g, const std::string& name) {
  for (ValueId v : g.inputs()) {
    const Value& value = g.value(v);
    if (value.name != name) continue;
    Layout layout = Layout::replicated(value.shape.rank());
    for (const auto& contribute : policy.input_layouts) layout = contribute(value, layout);
    return layout.to_string();
  }
  return "(none)";
}

const Node& node_of(const Graph& g, std::string_view op_type, int32_t layer) {
  for (const Node& n : g.nodes()) {
    if (n.op_type == op_type && n.layer == layer) return n;
  }
  ADD_FAILURE() << "no " << op_type << " in layer " << layer;
  return g.nodes().front();
}

TEST(Paradigms, DataSplitsTheBatchOverDp) {
  const Graph g = two_layers();
  const Configured none = configure("data", "mesh: {dp: 1}\n", g);
  ASSERT_TRUE(none.status.is_ok());
  EXPECT_TRUE(none.policy.spmd.axes.empty());
  EXPECT_EQ(input_layout(none.policy, g, "x"), "[_, _, _]");

  const Configured dp = configure("data", "mesh: {dp: 2}\n", g);
  ASSERT_TRUE(dp.status.is_ok());
  EXPECT_EQ(dp.policy.spmd.axes, (std::vector<std::string>{"dp"}));
  EXPECT_TRUE(dp.policy.batch_norm_as_reductions);  // synchronised BatchNorm
  EXPECT_EQ(input_layout(dp.policy, g, "x"), "[dp, _, _]");
}

TEST(Paradigms, AttributeSplitsTheSequenceOverSpWhereItDivides) {
  const Configured sp = configure("attribute", "mesh: {sp: 2}\n", two_layers(4));
  ASSERT_TRUE(sp.status.is_ok());
  EXPECT_EQ(sp.policy.spmd.axes, (std::vector<std::string>{"sp"}));
  EXPECT_EQ(input_layout(sp.policy, two_layers(4), "x"), "[_, sp, _]");
  // Three positions do not split in two: the input stays whole (the SPMD pass decides).
  const Configured odd = configure("attribute", "mesh: {sp: 2}\n", two_layers(3));
  EXPECT_EQ(input_layout(odd.policy, two_layers(3), "x"), "[_, _, _]");
}

TEST(Paradigms, ContextSplitsTheSequenceIntoTheFormsChunks) {
  const Configured ring = configure("context", "mesh: {cp: 2}\n", two_layers(4));
  ASSERT_TRUE(ring.status.is_ok()) << ring.status.message();
  EXPECT_EQ(ring.policy.spmd.axes, (std::vector<std::string>{"cp"}));
  EXPECT_EQ(ring.policy.spmd.context_axis, "cp");
  EXPECT_TRUE(ring.policy.spmd.ring_attention);
  EXPECT_EQ(input_layout(ring.policy, two_layers(4), "x"), "[_, cp, _]");
  // A ring of 2 cuts the sequence into 4 chunks (pairs); all-to-all into 2.
  EXPECT_EQ(configure("context", "mesh: {cp: 2}\n", two_layers(6)).status.message(),
            "mesh.cp: input 'x' has 6 positions, which do not split into 4 chunks (2 per rank "
            "of a ring of 2)");
  const Configured a2a =
      configure("context", "mesh: {cp: 2}\ncontext: all-to-all\n", two_layers(6));
  ASSERT_TRUE(a2a.status.is_ok()) << a2a.status.message();
  EXPECT_FALSE(a2a.policy.spmd.ring_attention);
}

TEST(Paradigms, OperatorSplitsLinearLayersAndTheirBiasesUnderMegatron) {
  const Graph g = two_layers();
  const Configured megatron = configure("operator", "mesh: {tp: 2}\ntensor: megatron\n", g);
  ASSERT_TRUE(megatron.status.is_ok());
  EXPECT_EQ(megatron.policy.spmd.axes, (std::vector<std::string>{"tp"}));
  EXPECT_TRUE(megatron.policy.split_fused_projections);
  EXPECT_EQ(megatron.policy.spmd.tp_activations, SpmdPolicy::TpActivations::kFromParameters);
  const auto& split = megatron.policy.spmd.parameter_split;
  EXPECT_TRUE(split(g, node_of(g, "MatMul", 0), "tp"));
  EXPECT_TRUE(split(g, node_of(g, "Add", 1), "tp"));  // the bias of a linear layer
  EXPECT_FALSE(split(g, node_of(g, "Relu", 0), "tp"));

  const Configured sp = configure("operator", "mesh: {tp: 2}\ntensor: megatron-sp\n", g);
  EXPECT_EQ(sp.policy.spmd.tp_activations, SpmdPolicy::TpActivations::kReduceScatter);
  const Configured any = configure("operator", "mesh: {tp: 2}\ntensor: auto\n", g);
  EXPECT_EQ(any.policy.spmd.tp_activations, SpmdPolicy::TpActivations::kAny);
  EXPECT_TRUE(any.policy.spmd.parameter_split(g, node_of(g, "Relu", 0), "tp"));
  // Without tp the strategy is kept but nothing is split over tp.
  EXPECT_TRUE(configure("operator", "mesh: {dp: 2}\n", g).policy.spmd.axes.empty());
}

TEST(Paradigms, ZeroShardsOnlyOverDp) {
  const Graph g = two_layers();
  EXPECT_EQ(configure("zero", "mesh: {dp: 2}\nzero: 2\n", g).policy.spmd.zero, 2);
  EXPECT_EQ(configure("zero", "mesh: {tp: 2}\nzero: 2\n", g).policy.spmd.zero, 0);
}

TEST(Paradigms, PipelineBalancesOrTakesTheStages) {
  const Graph g = two_layers();
  const Configured pp = configure("pipeline", "mesh: {pp: 2}\n", g);
  ASSERT_TRUE(pp.status.is_ok()) << pp.status.message();
  EXPECT_EQ(pp.policy.stages, 2);
  EXPECT_EQ(pp.policy.stage_layers, (std::vector<std::pair<int32_t, int32_t>>{{0, 0}, {1, 1}}));
  const Configured one = configure("pipeline", "mesh: {dp: 2}\n", g);
  EXPECT_EQ(one.policy.stage_layers, (std::vector<std::pair<int32_t, int32_t>>{{0, 1}}));
  EXPECT_EQ(configure("pipeline", "mesh: {pp: 3}\n", g).status.message(),
            "mesh.pp: 3 pipeline stages (3 ranks × 1 chunks) but the model has 2 layers");
  const Configured given =
      configure("pipeline", "mesh: {pp: 2}\npipeline: {stages: [[0, 0], [1, 1]]}\n", g);
  ASSERT_TRUE(given.status.is_ok()) << given.status.message();
  EXPECT_EQ(given.policy.stage_layers, pp.policy.stage_layers);
}

TEST(Paradigms, RecomputePrecisionAndKernelsSetTheirDecisions) {
  const Graph g = two_layers();
  EXPECT_EQ(configure("recompute", "recompute: selective\n", g).policy.recompute,
            Recompute::kSelective);
  EXPECT_EQ(configure("precision", "precision: bf16\n", g).policy.compute, DType::kBFloat16);
  EXPECT_EQ(configure("precision", "precision: fp16\n", g).policy.compute, DType::kFloat16);
  EXPECT_EQ(configure("precision", "mesh: {dp: 1}\n", g).policy.compute, DType::kFloat32);
  EXPECT_EQ(
      configure("kernels", "mesh: {cp: 2}\nkernels: {attention: unfused}\n", g).status.message(),
      "kernels.attention: unfused, but context parallelism (mesh.cp 2) runs attention as "
      "one fused kernel");
}

// The registry's order is the order decisions compose; each built-in paradigm owns fields.
TEST(Paradigms, TheRegistryListsThemInOrder) {
  std::vector<std::string_view> names;
  for (const Paradigm& p : paradigms()) names.push_back(p.name);
  EXPECT_EQ(names,
            (std::vector<std::string_view>{"data", "attribute", "context", "operator", "zero",
                                           "pipeline", "recompute", "precision", "kernels"}));
}

}  // namespace
}  // namespace autopar
