// Runs onnx::checker on a model, accepting shape-only initializers.
#pragma once

#include <string_view>

#include <onnx/onnx_pb.h>

#include "autopar/support/status.h"

namespace autopar {

// True when an initializer carries no data: no value field, or external data whose file
// `model_dir` does not hold.
bool is_shape_only_initializer(const onnx::TensorProto& tensor, std::string_view model_dir);

// Turns shape-only initializers into graph inputs of the same type (ONNX's checker and shape
// inference insist that external data exists).
void shape_only_initializers_to_inputs(onnx::ModelProto& model, std::string_view model_dir);

// onnx::checker::check_model over a copy in which shape-only initializers are graph inputs
// of the same type (the checker insists external data exists). Errors read
// "<source>: ONNX checker: <first line of the checker's message>".
Status check_onnx_model(const onnx::ModelProto& model, std::string_view source,
                        std::string_view model_dir = "");

}  // namespace autopar
