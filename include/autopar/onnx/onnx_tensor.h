// ONNX TensorProto ↔ Tensor, and tensor files (the ONNX test-data convention).
#pragma once

#include <string>
#include <string_view>

#include <onnx/onnx_pb.h>

#include "autopar/ir/tensor.h"
#include "autopar/support/status.h"

namespace autopar {

// The dtype of an ONNX element type code; strings, complex and unknown codes are errors that
// start with `what`.
StatusOr<DType> supported_dtype(int32_t onnx_code, std::string_view what);

// Whether load_tensor reads the data or only checks that it is well-formed.
enum class DataMode : uint8_t { kRead, kCheck };

// Tensor data from a TensorProto: raw_data, the typed fields, or external data next to the
// model in `model_dir` (a location outside that folder is an error). Null when the tensor is
// shape-only (no data, or external data whose file is absent) or only checked. Every
// mismatch between the declared shape and the data is an error starting with `what`.
StatusOr<TensorPtr> load_tensor(const onnx::TensorProto& proto, std::string_view model_dir,
                                std::string_view what, DataMode mode = DataMode::kRead);

// A TensorProto with raw_data.
onnx::TensorProto tensor_to_proto(const Tensor& tensor, const std::string& name);

// Reads one serialized TensorProto (input_0.pb, output_0.pb); `name` receives its name.
StatusOr<Tensor> read_tensor_file(const std::string& path, std::string* name = nullptr);
Status write_tensor_file(const std::string& path, const Tensor& tensor, const std::string& name);

}  // namespace autopar
