// Export: builder graphs become ONNX models the checker accepts, symbols and data kept.
#include <gtest/gtest.h>
#include <onnx/checker.h>

#include "autopar/onnx/onnx_check.h"
#include "autopar/onnx/onnx_export.h"
#include "testing/testing.h"

namespace autopar {
namespace {

TEST(OnnxExport, WritesCheckedModelWithData) {
  Graph g = testing::tiny_linear_graph();
  onnx::ModelProto model = export_onnx(g);
  EXPECT_NO_THROW(onnx::checker::check_model(model));
  ASSERT_EQ(model.graph().node_size(), 3);
  EXPECT_EQ(model.graph().node(0).op_type(), "MatMul");
  ASSERT_EQ(model.graph().initializer_size(), 2);
  EXPECT_EQ(model.graph().initializer(0).raw_data().size(), 48u);
  EXPECT_EQ(model.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(model.graph().output(0).type().tensor_type().shape().dim(1).dim_value(), 3);
}

TEST(OnnxExport, ShapeOnlyInitializersBecomeAbsentExternalData) {
  Graph g = testing::tiny_linear_graph();
  for (ValueId id : g.parameters()) g.mutable_value(id).data.reset();
  onnx::ModelProto model = export_onnx(g);
  // The checker itself insists that external data exists; check_onnx_model accepts it.
  EXPECT_THROW(onnx::checker::check_model(model), onnx::checker::ValidationError);
  Status checked = check_onnx_model(model, "tiny.onnx");
  EXPECT_TRUE(checked.is_ok()) << checked.message();
  EXPECT_TRUE(is_shape_only_initializer(model.graph().initializer(0), "/nonexistent"));
  const onnx::TensorProto& w = model.graph().initializer(0);
  EXPECT_EQ(w.data_location(), onnx::TensorProto::EXTERNAL);
  EXPECT_FALSE(w.has_raw_data());
  EXPECT_EQ(w.external_data(0).value(), "weights.bin");
}

}  // namespace
}  // namespace autopar

namespace autopar {
namespace {

TEST(OnnxCheck, ReportsCheckerFailureOnOneLine) {
  onnx::ModelProto model = export_onnx(testing::tiny_linear_graph());
  model.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
  Status s = check_onnx_model(model, "bad.onnx");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message().rfind("bad.onnx: ONNX checker: ", 0), 0u) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_NE(s.message().find("NoSuchOp"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace autopar
