// Shared test helpers.
#include "testing/testing.h"

#include "autopar/ir/builder.h"

namespace autopar::testing {

Graph tiny_linear_graph() {
  GraphBuilder b("tiny");
  b.set_seed(7);
  ValueId x = b.input("x", DType::kFloat32, {2, 4}, {"batch", ""});
  b.push_scope("fc");
  ValueId w = b.parameter("weight", {4, 3}, ParamInit::normal(0.5f));
  ValueId bias = b.parameter("bias", {3}, ParamInit::zeros());
  ValueId y = b.op1("Add", {b.op1("MatMul", {x, w}), bias});
  b.pop_scope();
  b.output(b.op1("Relu", {y}), "y", {"batch", ""});
  return b.finish();
}

std::string source_path(const std::string& relative) {
  return std::string(AUTOPAR_SOURCE_DIR) + "/" + relative;
}

}  // namespace autopar::testing
