// The ai.autopar schemas: the checker accepts comm ops and shape inference sizes them.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "autopar/ir/text.h"
#include "autopar/onnx/autopar_domain.h"
#include "autopar/onnx/onnx_export.h"

namespace autopar {
namespace {

onnx::ModelProto comm_model() {
  auto g = parse(
      "graph comm opset(ai.onnx=17, ai.autopar=1) {\n"
      "  input %x: f32[4,6]\n"
      "  %g: f32[?,?] = ai.autopar::AllGather(%x) {axis=1, group=[0, 1, 2]} @gather\n"
      "  %s: f32[?,?] = ai.autopar::ReduceScatter(%x) {axis=0, group=[0, 1]} @scatter\n"
      "  %r: f32[?] = ai.autopar::Recv() {dtype=1, peer=1, shape=[2, 3], tag=5} @recv\n"
      "  ai.autopar::Send(%r) {peer=1, tag=6} @send\n"
      "  output %g, %s\n"
      "}\n");
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  // Outputs are written with unknown dims, so the sizes below come from the schemas.
  return export_onnx(*g);
}

TEST(OnnxAutoparDomain, RegistersEverySchema) {
  register_autopar_onnx_schemas();
  register_autopar_onnx_schemas();  // idempotent
  for (const char* op :
       {"Send", "Recv", "AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast"}) {
    EXPECT_NE(onnx::OpSchemaRegistry::Schema(op, 1, "ai.autopar"), nullptr) << op;
  }
}

TEST(OnnxAutoparDomain, CheckerAcceptsAndInferenceSizesCommOps) {
  register_autopar_onnx_schemas();
  onnx::ModelProto model = comm_model();
  EXPECT_NO_THROW(onnx::checker::check_model(model));
  onnx::shape_inference::InferShapes(model);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& info : model.graph().value_info()) {
    for (const auto& d : info.type().tensor_type().shape().dim())
      shapes[info.name()].push_back(d.dim_value());
  }
  for (const auto& info : model.graph().output()) {
    for (const auto& d : info.type().tensor_type().shape().dim())
      shapes[info.name()].push_back(d.dim_value());
  }
  EXPECT_EQ(shapes["g"], (std::vector<int64_t>{4, 18}));
  EXPECT_EQ(shapes["s"], (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(shapes["r"], (std::vector<int64_t>{2, 3}));
}

}  // namespace
}  // namespace autopar
