// The op registry: the exact set of ops, their declarations, lookups and default costs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "autopar/ir/builder.h"
#include "autopar/ops/op_def.h"
#include "ops_test_util.h"

namespace autopar {
namespace {

using ops_test::OpCase;
using ::testing::HasSubstr;

const std::vector<std::string> kOnnxOps = {
    "MatMul",
    "Gemm",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Sqrt",
    "Reciprocal",
    "Neg",
    "Exp",
    "Log",
    "Erf",
    "Tanh",
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Abs",
    "Softplus",
    "Softsign",
    "Elu",
    "Selu",
    "PRelu",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Sign",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Not",
    "ConstantOfShape",
    "ScatterElements",
    "ScatterND",
    "SoftmaxCrossEntropyLoss",
    "Range",
    "GatherElements",
    "GatherND",
    "Floor",
    "Ceil",
    "Size",
    "Clip",
    "Equal",
    "Where",
    "Identity",
    "Cast",
    "Dropout",
    "Softmax",
    "LogSoftmax",
    "LayerNormalization",
    "BatchNormalization",
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "Flatten",
    "Reshape",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Expand",
    "Shape",
    "Tile",
    "Pad",
    "Resize",
    "Constant",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
};
const std::vector<std::string> kAutoparOps = {
    "Send",      "Recv",  "AllReduce",    "AllGather",     "ReduceScatter",    "AllToAll",
    "Broadcast", "Shard", "HaloExchange", "RingAttention", "RingAttentionGrad"};

TEST(OpsRegistry, RegistersExactlyTheRequiredOps) {
  const OpRegistry& registry = op_registry();
  for (const std::string& op : kOnnxOps) EXPECT_NE(registry.find("", op), nullptr) << op;
  for (const std::string& op : kAutoparOps) {
    EXPECT_NE(registry.find(kAutoparDomain, op), nullptr) << op;
    EXPECT_EQ(registry.find("", op), nullptr) << op << " lives only in ai.autopar";
  }
  // The fused optimizer update is computation: it lives apart from ai.autopar's communication.
  EXPECT_NE(registry.find(kTrainingDomain, "Adam"), nullptr);
  EXPECT_NE(registry.find(kTrainingDomain, "LayerNormalizationGrad"), nullptr);
  EXPECT_NE(registry.find(kTrainingDomain, "Gelu"), nullptr);
  EXPECT_NE(registry.find(kTrainingDomain, "GeluGrad"), nullptr);
  for (const char* op : {"RMSNormalization", "RMSNormalizationGrad", "RotaryEmbedding", "SwiGLU",
                         "SwiGLUGrad", "Attention", "AttentionGrad", "MaxPoolGrad"})
    EXPECT_NE(registry.find(kTrainingDomain, op), nullptr) << op;
  EXPECT_EQ(registry.find(kAutoparDomain, "Adam"), nullptr);
  EXPECT_EQ(kOnnxOps.size(), 80u);
  EXPECT_EQ(registry.size(), 103u);
  EXPECT_EQ(registry.all().size(), registry.size());
}

TEST(OpsRegistry, EveryOpHasRuleCostAndDoc) {
  for (const OpDef* def : op_registry().all()) {
    EXPECT_TRUE(def->infer) << def->op_type;
    EXPECT_TRUE(def->flops) << def->op_type;
    EXPECT_FALSE(def->flops_doc.empty()) << def->op_type;
  }
}

TEST(OpsRegistry, FindsAiOnnxAliasAndMissesUnknownOps) {
  EXPECT_EQ(op_registry().find("ai.onnx", "MatMul"), op_registry().find("", "MatMul"));
  EXPECT_EQ(op_registry().find("", "NoSuchOp"), nullptr);
  EXPECT_EQ(op_registry().find("ai.autopar", "MatMul"), nullptr);
}

TEST(OpsRegistry, DeclaresConfigInputs) {
  auto config = [](const char* op) { return op_registry().find("", op)->config_inputs; };
  EXPECT_EQ(config("Reshape"), (std::vector<int>{1}));
  EXPECT_EQ(config("Slice"), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(config("Split"), (std::vector<int>{1}));
  EXPECT_EQ(config("Squeeze"), (std::vector<int>{1}));
  EXPECT_EQ(config("Unsqueeze"), (std::vector<int>{1}));
  EXPECT_EQ(config("ReduceSum"), (std::vector<int>{1}));
  EXPECT_EQ(config("Clip"), (std::vector<int>{1, 2}));
  EXPECT_EQ(config("Pad"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(config("Resize"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(config("Expand"), (std::vector<int>{1}));
  EXPECT_EQ(config("Tile"), (std::vector<int>{1}));
  EXPECT_EQ(config("Gather"), (std::vector<int>{1}));
  EXPECT_EQ(config("BatchNormalization"), (std::vector<int>{3, 4}));
  EXPECT_EQ(config("Dropout"), (std::vector<int>{1, 2}));
  EXPECT_EQ(config("Where"), (std::vector<int>{0}));
  EXPECT_TRUE(config("LayerNormalization").empty());
  EXPECT_TRUE(config("MatMul").empty());
  const OpDef* bn = op_registry().find("", "BatchNormalization");
  EXPECT_TRUE(bn->is_config_input(3));
  EXPECT_FALSE(bn->is_config_input(1));
}

TEST(OpsRegistry, DefaultBytesCountEveryInputAndOutput) {
  OpCase c("MatMul");
  c.in({2, 3}).in({3, 4});
  ASSERT_EQ(c.infer(), "f32[2,4]");
  EXPECT_EQ(c.bytes(), (6 + 12 + 8) * 4);
  EXPECT_EQ(default_bytes(c.graph(), c.graph().node(0)), (6 + 12 + 8) * 4);
}

TEST(OpsRegistry, UnknownOpCostsNothingAndFailsInference) {
  OpCase c("NoSuchOp");
  c.in({2, 3});
  EXPECT_EQ(c.infer(), "error: node 'n' (NoSuchOp): unsupported op type");
  EXPECT_EQ(c.flops(), 0.0);
}

TEST(OpsRegistry, RejectsInputsTooLargeToCount) {
  OpCase c("Relu");
  c.in({int64_t{1} << 40, int64_t{1} << 40});
  EXPECT_THAT(c.infer(), HasSubstr("input 'in0' f32[1099511627776,1099511627776] has a dim or "
                                   "element count above 2^56"));
  OpCase empty_but_huge("Relu");
  empty_but_huge.in({0, int64_t{1} << 60});
  EXPECT_THAT(empty_but_huge.infer(), HasSubstr("above 2^56"));
}

TEST(OpsRegistry, RejectsWrongInputAndOutputCounts) {
  EXPECT_EQ(OpCase("Add").in({2}).infer(), "error: node 'n' (Add): expects 2 inputs, got 1");
  EXPECT_EQ(OpCase("Relu").in({2}).outputs(2).infer(),
            "error: node 'n' (Relu): expects 1 output, got 2");
  EXPECT_EQ(OpCase("Gemm").in({2, 2}).none().infer(),
            "error: node 'n' (Gemm): required input 1 is missing");
}

TEST(OpsRegistry, BuilderInfersAChainThroughTheRegistry) {
  GraphBuilder b("chain");
  ValueId x = b.input("x", DType::kFloat32, {2, 8});
  ValueId w = b.parameter("w", {8, 6}, ParamInit::normal(0.1f));
  ValueId bias = b.parameter("b", {6}, ParamInit::zeros());
  ValueId y = b.op1("Relu", {b.op1("Add", {b.op1("MatMul", {x, w}), bias})});
  ValueId r = b.op1("Reshape", {y, b.constant_ints("shape", {0, 3, -1})});
  ValueId t = b.op1("Transpose", {r}, {{"perm", std::vector<int64_t>{2, 0, 1}}});
  std::vector<ValueId> parts = b.op("Split", {t, b.constant_ints("split", {1, 1})}, {}, 2);
  ValueId s = b.op1("Softmax", {parts[1]});
  const Graph& g = b.graph();
  EXPECT_EQ(g.value(r).shape.dims, (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(g.value(t).shape.dims, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(g.value(parts[0]).shape.dims, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(g.value(s).shape.dims, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(node_flops(g, g.node(0)), 2.0 * 2 * 6 * 8);
}

}  // namespace
}  // namespace autopar
