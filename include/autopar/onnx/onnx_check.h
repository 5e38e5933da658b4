// Runs onnx::checker on a model, accepting shape-only initializers.
#pragma once

#include <string_view>

#include <onnx/onnx_pb.h>

#include "autopar/support/status.h"

namespace autopar {

// True when an initializer carries no data: no value field, or external data whose file
// `model_dir` does not hold.
bool is_shape_only_initializer(const onnx::TensorProto& tensor, std::string_view model_dir);

// Turns initializers without inline data (external or absent) into graph inputs of the same
// type: ONNX's checker and shape inference would look for external files relative to the
// working directory; import reads and checks them itself.
void detach_initializers_without_inline_data(onnx::ModelProto& model);

// onnx::checker::check_model over a copy detached as above. Errors read
// "<source>: ONNX checker: <first line of the checker's message>".
Status check_onnx_model(const onnx::ModelProto& model, std::string_view source);

}  // namespace autopar
