// Tensor-parallel plans of layers whose bias is part of the op (Gemm's C, a convolution's
// bias), as PyTorch exports nn.Linear on 2-D inputs and nn.Conv2d: splitting the reduction
// makes the output a partial sum, and the bias must be added once (by one member), not once
// per member.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "autopar/ir/builder.h"
#include "autopar/onnx/onnx_export.h"
#include "testing/testing.h"

namespace autopar {
namespace {

Graph linear_and_conv_model() {
  GraphBuilder b("biased");
  b.set_seed(3);
  const ValueId image = b.input("image", DType::kFloat32, {4, 3, 8, 8});
  ValueId y = b.op1("Conv", {image, b.parameter("conv.weight", {8, 3, 3, 3}, ParamInit::normal(0.2f)),
                             b.parameter("conv.bias", {8}, ParamInit::normal(0.2f))},
                    {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  y = b.op1("Relu", {y});
  y = b.op1("Conv", {y, b.parameter("conv2.weight", {16, 8, 3, 3}, ParamInit::normal(0.2f)),
                     b.parameter("conv2.bias", {16}, ParamInit::normal(0.2f))},
            {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  y = b.op1("Flatten", {b.op1("GlobalAveragePool", {b.op1("Relu", {y})})});
  y = b.op1("Gemm", {y, b.parameter("fc1.weight", {32, 16}, ParamInit::normal(0.2f)),
                     b.parameter("fc1.bias", {32}, ParamInit::normal(0.2f))},
            {{"transB", int64_t{1}}});
  y = b.op1("Gemm", {b.op1("Relu", {y}), b.parameter("fc2.weight", {10, 32}, ParamInit::normal(0.2f)),
                     b.parameter("fc2.bias", {10}, ParamInit::normal(0.2f))},
            {{"transB", int64_t{1}}});
  b.output(y, "logits");
  return b.finish();
}

TEST(AdditiveOperands, BiasedGemmsAndConvolutionsVerifyUnderTensorParallelism) {
  const std::string dir = testing::temp_dir("additive_operands");
  const std::string model = dir + "/model.onnx";
  ASSERT_TRUE(write_onnx_file(linear_and_conv_model(), model).is_ok());
  for (const char* text : {"mesh: {tp: 2}\ntensor: megatron\n", "mesh: {tp: 4}\ntensor: auto\n",
                           "mesh: {dp: 2, tp: 2}\ntensor: megatron\n"}) {
    std::ofstream(dir + "/s.yaml") << text;
    const std::string plan = dir + "/plan";
    std::filesystem::remove_all(plan);
    auto t = testing::run_autopar({"transform", model, "--scheme", dir + "/s.yaml", "-o", plan});
    ASSERT_EQ(t.exit_code, 0) << text << t.err;
    auto v = testing::run_autopar({"verify", plan, "--json"});
    ASSERT_EQ(v.exit_code, 0) << text << v.out << v.err;
    const auto json = nlohmann::json::parse(v.out);
    EXPECT_TRUE(json["ok"].get<bool>()) << text << v.out;
    // Exact to rounding: the bias once, not 2 or 4 times (1.7e-2 before).
    EXPECT_LT(json["worst_relative_error"].get<double>(), 1e-12) << text << v.out;
  }
}

}  // namespace
}  // namespace autopar
