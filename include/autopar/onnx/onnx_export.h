// Export: any Graph back to an ONNX ModelProto that passes onnx::checker.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

struct ExportOptions {
  // Initializers without data are written as external data at this location (a file that
  // is not written), the ONNX way of saying "shape only".
  std::string missing_data_location = "weights.bin";
  // Write value_info for intermediate values (only valid when no dim is symbolic).
  bool write_value_info = false;
  // Initializers also listed as graph inputs, so a runtime can feed them (a training step's
  // parameters and optimizer state); their data stays as the default.
  std::vector<std::string> initializers_as_inputs;
  // Extra model metadata entries.
  std::map<std::string, std::string> metadata;
};

onnx::ModelProto export_onnx(const Graph& graph, const ExportOptions& options = {});
// Writes the model; errors name the path.
Status write_onnx_file(const Graph& graph, const std::string& path,
                       const ExportOptions& options = {});

}  // namespace autopar
