// Models written at ai.onnx opsets 18 to 21 (torch 2.x's exporters, onnxscript) read as opset
// 17, the newest the linked ONNX library knows: the ops whose signatures changed are rewritten
// to their opset-17 forms (Reduce* axes from inputs to attributes, Split's num_outputs, the
// attributes later opsets added at their defaults), Gelu (20) becomes ai.autopar.training's
// Gelu and Mish (18) its Softplus·Tanh·Mul definition. What has no opset-17 form (a non-default
// new attribute, a float8 or int4 tensor, a new op autopar does not run) is refused, naming the
// node or value.
#pragma once

#include <cstdint>
#include <string_view>

#include <onnx/onnx_pb.h>

#include "autopar/support/status.h"

namespace autopar {

inline constexpr int64_t kOpsetConvertedTo = 17;
inline constexpr int64_t kNewestConvertibleOpset = 21;

struct OpsetConversion {
  int64_t from = 0;          // the model's ai.onnx opset
  int rewritten_nodes = 0;   // nodes whose form changed (attributes dropped at their defaults
                             // do not count)
};

// The model read at opset 17. `model` must import an ai.onnx opset in 18..21.
StatusOr<onnx::ModelProto> convert_to_opset17(const onnx::ModelProto& model,
                                              std::string_view source,
                                              OpsetConversion* report = nullptr);

}  // namespace autopar
