// Parallel semantics of the op families and the strategies derived from them.
#include <gtest/gtest.h>

#include "autopar/ir/builder.h"
#include "autopar/ops/parallel_semantics.h"
#include "autopar/parallel/op_strategy.h"

namespace autopar {
namespace {

// One node over graph inputs of the given shapes; constants via `constants`.
struct OneNode {
  Graph graph;
  NodeId node = 0;
};

OneNode one_node(const std::string& op, std::vector<std::vector<int64_t>> shapes,
                 Attributes attrs = {}, std::vector<Tensor> constants = {}) {
  GraphBuilder b("t");
  b.set_with_data(false);
  std::vector<ValueId> inputs;
  for (size_t i = 0; i < shapes.size(); ++i)
    inputs.push_back(b.input(fmt::format("x{}", i), DType::kFloat32, shapes[i]));
  for (size_t i = 0; i < constants.size(); ++i)
    inputs.push_back(b.constant(fmt::format("c{}", i), constants[i]));
  b.output(b.op1(op, inputs, std::move(attrs)), "y");
  OneNode result{b.finish(), 0};
  return result;
}

std::string space_of(const OneNode& n) {
  auto space = iteration_space(n.graph, n.graph.node(n.node));
  return space ? space->to_string() : "none";
}

DeviceMesh mesh(std::vector<MeshAxis> axes) { return *DeviceMesh::create(std::move(axes)); }

TEST(ParallelSemantics, IterationSpacesOfOpFamilies) {
  EXPECT_EQ(space_of(one_node("MatMul", {{8, 16, 32}, {32, 64}})),
            "b0=8 m=16 n=64 | k=32: [b0,m,k] [k,n] -> [b0,m,n]");
  EXPECT_EQ(space_of(one_node("MatMul", {{2, 1, 4, 8}, {3, 8, 5}})),
            "b0=2 b1=3 m=4 n=5 | k=8: [b0,1,m,k] [b1,k,n] -> [b0,b1,m,n]");
  EXPECT_EQ(space_of(one_node("Gemm", {{4, 8}, {16, 8}, {16}}, {{"transB", int64_t{1}}})),
            "m=4 n=16 | k=8: [m,k] [n,k] [n] -> [m,n] +2");
  EXPECT_EQ(space_of(one_node("Add", {{2, 3, 4}, {4}})),
            "d0=2 d1=3 d2=4: [d0,d1,d2] [d2] -> [d0,d1,d2]");
  EXPECT_EQ(space_of(one_node("Softmax", {{2, 3, 4}})),
            "d0=2 d1=3 d2=4!: [d0,d1,d2] -> [d0,d1,d2]");
  EXPECT_EQ(
      space_of(one_node("LayerNormalization", {{2, 3, 4}, {4}, {4}}, {{"axis", int64_t{-1}}})),
      "d0=2 d1=3 d2=4!: [d0,d1,d2] [d2] [d2] -> [d0,d1,d2]");
  EXPECT_EQ(space_of(one_node("ReduceSum", {{2, 3, 4}}, {{"keepdims", int64_t{0}}},
                              {Tensor::vector_int64({1})})),
            "d0=2 d2=4 | d1=3: [d0,d1,d2] [1] -> [d0,d2]");
  EXPECT_EQ(space_of(one_node("Transpose", {{2, 3, 4}}, {{"perm", std::vector<int64_t>{0, 2, 1}}})),
            "d0=2 d1=3 d2=4: [d0,d1,d2] -> [d0,d2,d1]");
  EXPECT_EQ(
      space_of(one_node("Reshape", {{2, 16, 64}}, {}, {Tensor::vector_int64({2, 16, 4, 16})})),
      "g0=2 g1=16 g2=64: [g0,g1,g2] [1] -> [g0,g1,g2,1]");
  EXPECT_EQ(space_of(one_node("Concat", {{2, 3}, {2, 5}}, {{"axis", int64_t{1}}})),
            "d0=2 d1=8!: [d0,1] [d0,1] -> [d0,1]");
}

TEST(ParallelSemantics, GatherOverASplitVocabularyIsAPartialSum) {
  GraphBuilder b("embedding");
  b.set_with_data(false);
  const ValueId ids = b.input("ids", DType::kInt64, {4, 16});
  const ValueId table = b.parameter("table", {256, 64}, ParamInit::normal(0.02f));
  b.output(b.op1("Gather", {table, ids}), "y");
  const Graph g = b.finish();
  const auto space = iteration_space(g, g.node(0));
  ASSERT_TRUE(space);
  EXPECT_EQ(space->to_string(), "i0=4 i1=16 d1=64 | v=256: [v,d1] [i0,i1] -> [i0,i1,d1]");
  auto split = derive_strategy(g, g.node(0), *space, {{"tp", space->find("v")}}, mesh({{"tp", 4}}));
  ASSERT_TRUE(split.is_ok()) << split.status().message();
  EXPECT_EQ(split->to_string(*space), "tp:v | [tp, _] [_, _] -> [_, _, _] partial(tp)");
}

// A Gather's gradient scatters the rows of each device's batch into zeros: a partial sum
// over the devices that split the rows. Scattering into data that is not zeros would count
// the data once per device: it runs replicated.
TEST(ParallelSemantics, ScatterSplitsItsSliceDimsAndIntoZerosItsRowsIntoPartialSums) {
  for (bool zeros : {true, false}) {
    GraphBuilder b("scatter");
    b.set_with_data(false);
    const ValueId indices = b.input("indices", DType::kInt64, {4, 16, 1});
    const ValueId updates = b.input("updates", DType::kFloat32, {4, 16, 64});
    Tensor zero(DType::kFloat32, {1});
    const ValueId data =
        zeros ? b.op1("ConstantOfShape", {b.constant_ints("shape", {256, 64})},
                      {{"value", Attribute(std::make_shared<const Tensor>(std::move(zero)))}})
              : b.input("data", DType::kFloat32, {256, 64});
    b.output(b.op1("ScatterND", {data, indices, updates}, {{"reduction", "add"}}), "y");
    const Graph g = b.finish();
    const Node& scatter = g.node(g.num_nodes() - 1);
    const auto space = iteration_space(g, scatter);
    ASSERT_TRUE(space);
    // Into other data only the slice dim splits: every device scatters its block of each row.
    auto columns =
        derive_strategy(g, scatter, *space, {{"dp", space->find("d1")}}, mesh({{"dp", 2}}));
    ASSERT_TRUE(columns.is_ok()) << columns.status().message();
    EXPECT_EQ(columns->to_string(*space), "dp:d1 | [_, dp] [_, _, _] [_, _, dp] -> [_, dp]");
    if (!zeros) {
      EXPECT_FALSE(
          derive_strategy(g, scatter, *space, {{"dp", space->find("r0")}}, mesh({{"dp", 2}}))
              .is_ok());
      continue;
    }
    EXPECT_EQ(space->to_string(), "d1=64 | r0=4 r1=16: [1,d1] [r0,r1,1] [r0,r1,d1] -> [1,d1]");
    auto split =
        derive_strategy(g, scatter, *space, {{"dp", space->find("r0")}}, mesh({{"dp", 2}}));
    ASSERT_TRUE(split.is_ok()) << split.status().message();
    EXPECT_EQ(split->to_string(*space),
              "dp:r0 | [_, _] [dp, _, _] [dp, _, _] -> [_, _] partial(dp)");
  }
}

TEST(OpStrategy, MatMulColumnRowAndDataSplits) {
  const OneNode n = one_node("MatMul", {{8, 16, 32}, {32, 64}});
  const Node& node = n.graph.node(0);
  const auto space = *iteration_space(n.graph, node);
  const DeviceMesh m = mesh({{"dp", 2}, {"tp", 4}});
  auto derive = [&](LoopAssignment a) {
    auto s = derive_strategy(n.graph, node, space, a, m);
    return s.is_ok() ? s->to_string(space) : s.status().message();
  };
  EXPECT_EQ(derive({{"dp", space.find("b0")}, {"tp", space.find("n")}}),
            "dp:b0 tp:n | [dp, _, _] [_, tp] -> [dp, _, tp]");
  EXPECT_EQ(derive({{"tp", space.find("k")}}),
            "tp:k | [_, _, tp] [tp, _] -> [_, _, _] partial(tp)");
  EXPECT_EQ(derive({{"dp", space.find("m")}, {"tp", space.find("k")}}),
            "dp:m tp:k | [_, dp, tp] [tp, _] -> [_, dp, _] partial(tp)");
  // Two axes on one loop split it major to minor.
  EXPECT_EQ(derive({{"tp", space.find("b0")}, {"dp", space.find("b0")}}),
            "tp:b0 dp:b0 | [tp*dp, _, _] [_, _] -> [tp*dp, _, _]");
  EXPECT_EQ(derive_strategy(n.graph, node, space, {{"tp", space.find("b0")}}, mesh({{"tp", 3}}))
                .status()
                .message(),
            "node 'MatMul' (MatMul): input 0: dim 0 of [8,16,32]: 8 is not divisible by tp = 3");
}

TEST(OpStrategy, Errors) {
  const OneNode n = one_node("Softmax", {{2, 3, 6}});
  const Node& node = n.graph.node(0);
  const auto space = *iteration_space(n.graph, node);
  const DeviceMesh m = mesh({{"tp", 2}});
  EXPECT_EQ(derive_strategy(n.graph, node, space, {{"tp", 2}}, m).status().message(),
            "node 'Softmax' (Softmax): loop d2 cannot be split (it is read whole)");
  EXPECT_EQ(derive_strategy(n.graph, node, space, {{"dp", 0}}, m).status().message(),
            "node 'Softmax' (Softmax): the mesh {tp: 2} has no axis 'dp'");
  EXPECT_EQ(derive_strategy(n.graph, node, space, {{"tp", 1}}, m).status().message(),
            "node 'Softmax' (Softmax): input 0: dim 1 of [2,3,6]: 3 is not divisible by tp = 2");
  const OneNode max = one_node("ReduceMax", {{4, 6}}, {{"axes", std::vector<int64_t>{1}}});
  const auto max_space = *iteration_space(max.graph, max.graph.node(0));
  EXPECT_EQ(
      derive_strategy(max.graph, max.graph.node(0), max_space, {{"tp", 1}}, m).status().message(),
      "node 'ReduceMax' (ReduceMax): splitting reduction loop d1 needs a max, not a sum, of the "
      "parts");
}

TEST(OpStrategy, EnumerationCoversEveryValidAssignment) {
  const OneNode n = one_node("MatMul", {{8, 16, 32}, {32, 64}});
  const auto strategies =
      enumerate_strategies(n.graph, n.graph.node(0), mesh({{"dp", 2}, {"tp", 2}}), {"dp", "tp"});
  // Each axis: none or one of 4 loops (b0, m, n, k) → 5 × 5 = 25 choices, minus the 4 that put
  // both axes on the same loop... which are valid here (8, 16, 64, 32 are divisible by 4), and
  // nest in either order: 4 more.
  EXPECT_EQ(strategies.size(), 29u);
  const auto space = *iteration_space(n.graph, n.graph.node(0));
  EXPECT_EQ(strategies[0].to_string(space), "replicated | [_, _, _] [_, _] -> [_, _, _]");
  const OneNode none = one_node("HardSwish", {{4}});
  // Elementwise ops have semantics; an op without them runs replicated only.
  EXPECT_EQ(enumerate_strategies(none.graph, none.graph.node(0), mesh({{"tp", 2}}), {"tp"}).size(),
            2u);
}

// The cache hands out one list per signature: nodes of equal op, attributes, shapes and
// small constants share it; a different shape, axis size or constant axes does not.
TEST(StrategyCache, OneListPerSignature) {
  StrategyCache cache;
  const DeviceMesh dp2tp2 = mesh({{"dp", 2}, {"tp", 2}});
  const OneNode a = one_node("MatMul", {{8, 16, 32}, {32, 64}});
  const OneNode b = one_node("MatMul", {{8, 16, 32}, {32, 64}});  // another graph, same node
  const auto first = cache.get(a.graph, a.graph.node(0), dp2tp2, {"dp", "tp"});
  EXPECT_EQ(first->strategies,
            enumerate_strategies(a.graph, a.graph.node(0), dp2tp2, {"dp", "tp"}));
  EXPECT_EQ(cache.get(b.graph, b.graph.node(0), dp2tp2, {"dp", "tp"}), first);
  // 29 strategies ask for 19 layouts of [b0, m, k] (each axis on b0, m, k, or elsewhere, both
  // on one dim in either order) and 11 of [k, n]; each strategy's degree is the product of its
  // axes' sizes.
  ASSERT_EQ(first->input_layouts.size(), 2u);
  EXPECT_EQ(first->input_layouts[0].size(), 19u);
  EXPECT_EQ(first->input_layouts[1].size(), 11u);
  for (size_t s = 0; s < first->strategies.size(); ++s) {
    for (size_t i = 0; i < 2; ++i)
      EXPECT_EQ(first->input_layouts[i][first->input_choice[s][i]], first->strategies[s].inputs[i]);
    EXPECT_EQ(first->degree[s], 1 << first->strategies[s].assignment.size());
  }
  EXPECT_EQ(cache.size(), 1u);
  // Another shape is another signature, even where its list comes out the same.
  const OneNode wider = one_node("MatMul", {{8, 16, 48}, {48, 64}});
  EXPECT_NE(cache.get(wider.graph, wider.graph.node(0), dp2tp2, {"dp", "tp"}), first);
  const auto tp8 = cache.get(a.graph, a.graph.node(0), mesh({{"dp", 2}, {"tp", 8}}), {"dp", "tp"});
  EXPECT_EQ(tp8->strategies, enumerate_strategies(a.graph, a.graph.node(0),
                                                  mesh({{"dp", 2}, {"tp", 8}}), {"dp", "tp"}));
  EXPECT_LT(tp8->strategies.size(),
            first->strategies.size());  // dp · tp = 16 no longer divides b0 = 8 or k = 32
  EXPECT_EQ(cache.get(a.graph, a.graph.node(0), dp2tp2, {"tp"})->strategies.size(), 5u);
  EXPECT_EQ(cache.size(), 4u);
  // ReduceSum reads its axes from a constant: axes 0 and axes 1 are different signatures.
  Tensor axis0(DType::kInt64, {1}), axis1(DType::kInt64, {1});
  axis0.set_from_double(0, 0);
  axis1.set_from_double(0, 1);
  const OneNode r0 = one_node("ReduceSum", {{8, 16}}, {}, {axis0});
  const OneNode r1 = one_node("ReduceSum", {{8, 16}}, {}, {axis1});
  const auto s0 = cache.get(r0.graph, r0.graph.node(0), dp2tp2, {"dp", "tp"});
  const auto s1 = cache.get(r1.graph, r1.graph.node(0), dp2tp2, {"dp", "tp"});
  EXPECT_NE(s0, s1);
  EXPECT_EQ(s0->strategies, enumerate_strategies(r0.graph, r0.graph.node(0), dp2tp2, {"dp", "tp"}));
  EXPECT_EQ(s1->strategies, enumerate_strategies(r1.graph, r1.graph.node(0), dp2tp2, {"dp", "tp"}));
  EXPECT_NE(s0->strategies, s1->strategies);
}

}  // namespace
}  // namespace autopar
