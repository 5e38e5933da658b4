// The four primitives on a hand-built graph: duplicate, split, augment (and assign, in
// parallel_passes_test.cc), without the SPMD pass around them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autopar/ir/builder.h"
#include "autopar/parallel/primitives.h"

namespace autopar {
namespace {

DeviceMesh tp2() { return *DeviceMesh::create({{"tp", 2}}); }

// y = x · W with x [8, 16] and W [16, 32].
Graph matmul() {
  GraphBuilder b("m");
  b.set_with_data(false);
  const ValueId x = b.input("x", DType::kFloat32, {8, 16});
  const ValueId w = b.input("w", DType::kFloat32, {16, 32});
  b.output(b.op1("MatMul", {x, w}), "y");
  return b.finish();
}

// The strategy of `node` whose assignment is exactly {axis → loop named `loop`}.
OpStrategy strategy(const Graph& g, const Node& node, const std::string& loop) {
  const auto space = iteration_space(g, node);
  EXPECT_TRUE(space.has_value());
  for (size_t l = 0; l < space->loops.size(); ++l) {
    if (space->loops[l].name != loop) continue;
    auto s = derive_strategy(g, node, *space, {{"tp", static_cast<int>(l)}}, tp2());
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    return *s;
  }
  ADD_FAILURE() << "no loop " << loop;
  return {};
}

ValueId input(Graph& g, const std::string& name, std::vector<int64_t> dims) {
  Value v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.shape = Shape(std::move(dims));
  v.kind = ValueKind::kInput;
  const ValueId id = g.add_value(std::move(v));
  g.add_input(id);
  return id;
}

TEST(Primitives, DuplicateCopiesANodeUnderASuffix) {
  const Graph src = matmul();
  Graph dst;
  const ValueId x = input(dst, "x", {8, 16}), w = input(dst, "w", {16, 32});
  auto out = duplicate(dst, src, src.node(0), {x, w}, ".copy");
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ(dst.num_nodes(), 1);
  EXPECT_EQ(dst.value((*out)[0]).shape.dims, (std::vector<int64_t>{8, 32}));
  EXPECT_NE(dst.value((*out)[0]).name.find(".copy"), std::string::npos);
}

// Megatron's column split (tp on n) and row split (tp on k): per-device shapes, and the row
// split's output a partial sum over tp.
TEST(Primitives, SplitRunsANodeOnItsShards) {
  const Graph src = matmul();
  const Node& mm = src.node(0);
  {
    const OpStrategy column = strategy(src, mm, "n");
    EXPECT_EQ(column.outputs[0].to_string(), "[_, tp]");
    Graph dst;
    const ValueId x = input(dst, "x", {8, 16}), w = input(dst, "w", {16, 16});
    auto out = split(dst, src, mm, {x, w}, column, tp2());
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    EXPECT_EQ(dst.value((*out)[0]).shape.dims, (std::vector<int64_t>{8, 16}));
  }
  {
    const OpStrategy row = strategy(src, mm, "k");
    EXPECT_EQ(row.inputs[0].to_string(), "[_, tp]");
    EXPECT_EQ(row.outputs[0].to_string(), "[_, _] partial(tp)");
    Graph dst;
    const ValueId x = input(dst, "x", {8, 8}), w = input(dst, "w", {8, 32});
    auto out = split(dst, src, mm, {x, w}, row, tp2());
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    EXPECT_EQ(dst.value((*out)[0]).shape.dims, (std::vector<int64_t>{8, 32}));
  }
}

// augment: one collective per reshard step, its group named by the mesh axis.
TEST(Primitives, AugmentInsertsOneCollectivePerStep) {
  const DeviceMesh mesh = tp2();
  Graph dst;
  const ValueId partial = input(dst, "p", {8, 32});
  auto reduced = augment_reshard(dst, partial, *Layout::parse("[_, _] partial(tp)"),
                                 *Layout::parse("[_, _]"), {8, 32}, mesh, Phase::kForward, 0);
  ASSERT_TRUE(reduced.is_ok()) << reduced.status().message();
  const Node& all_reduce = dst.node(dst.value(*reduced).producer);
  EXPECT_EQ(all_reduce.op_type, "AllReduce");
  EXPECT_EQ(all_reduce.attr("axes")->strings(), std::vector<std::string>{"tp"});
  EXPECT_EQ(dst.value(*reduced).shape.dims, (std::vector<int64_t>{8, 32}));

  const ValueId shard = input(dst, "s", {8, 16});
  auto gathered = augment_reshard(dst, shard, *Layout::parse("[_, tp]"), *Layout::parse("[_, _]"),
                                  {8, 32}, mesh, Phase::kBackward, 1);
  ASSERT_TRUE(gathered.is_ok()) << gathered.status().message();
  const Node& all_gather = dst.node(dst.value(*gathered).producer);
  EXPECT_EQ(all_gather.op_type, "AllGather");
  EXPECT_EQ(all_gather.phase, Phase::kBackward);
  EXPECT_EQ(all_gather.layer, 1);
  EXPECT_EQ(dst.value(*gathered).shape.dims, (std::vector<int64_t>{8, 32}));

  // A partial sum onto a split: one reduce-scatter, not an all-reduce and a slice.
  const ValueId sum = input(dst, "q", {8, 32});
  const int before = dst.num_nodes();
  auto scattered = augment_reshard(dst, sum, *Layout::parse("[_, _] partial(tp)"),
                                   *Layout::parse("[tp, _]"), {8, 32}, mesh, Phase::kForward, 0);
  ASSERT_TRUE(scattered.is_ok()) << scattered.status().message();
  EXPECT_EQ(dst.num_nodes(), before + 1);
  EXPECT_EQ(dst.node(dst.value(*scattered).producer).op_type, "ReduceScatter");
  EXPECT_EQ(dst.value(*scattered).shape.dims, (std::vector<int64_t>{4, 32}));
}

}  // namespace
}  // namespace autopar
