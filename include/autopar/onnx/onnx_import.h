// Import: an ONNX model (file or ModelProto) to a Graph with static shapes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <onnx/onnx_pb.h>

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

// Model metadata keys autopar writes so that its own models re-import exactly.
inline constexpr std::string_view kMetadataConstants = "autopar.constants";  // JSON list
inline constexpr std::string_view kMetadataNodes = "autopar.nodes";          // JSON object
// A training step written by `train-graph`: JSON object; its "dims" (symbol → size) are the
// sizes its gradients were built at, which the import binds by default and holds to.
inline constexpr std::string_view kMetadataTraining = "autopar.training";

struct ImportOptions {
  // Binds dims named "batch" (or "batch_size", "N") and the unnamed or otherwise unbound
  // leading dim of every graph input.
  std::optional<int64_t> batch;
  // `batch` is a command's default, not the user's: the sizes a training step was built at
  // take precedence over it.
  bool batch_is_default = false;
  // Binds symbolic dims by name; takes precedence over `batch`.
  std::map<std::string, int64_t> dims;
};

// What the import saw besides the graph.
struct ImportReport {
  int folded_nodes = 0;          // nodes evaluated away by constant folding
  std::string layer_source;      // "metadata", "names", "structure" or "" (none found)
  int unknown_shape_values = 0;  // values left without a static shape (after unsupported ops)
};

// Checks the model with onnx::checker, binds symbolic dims, runs ONNX shape inference, builds
// the Graph, folds shape subgraphs and infers every static shape with the op registry. Ops
// without an OpDef are kept (with ONNX's inferred types); values downstream of them may stay
// without a static shape. Initializers keep their data when present; absent data (no data
// fields, or external data whose file is missing) makes them shape-only. Floating
// initializers are parameters unless they only configure ops (shapes, axes, running
// statistics) or are scalars; autopar's own models say which are constants in metadata.
// Layer ids come from metadata, node names (`h.3`, `layer.3`, `layer1.0`) or the repeated
// op sequence. Every error is one line prefixed with `source`.
StatusOr<Graph> import_onnx(const onnx::ModelProto& model, const ImportOptions& options,
                            std::string_view source, std::string_view model_dir = "",
                            ImportReport* report = nullptr);

// Reads and imports a model file; external data is looked up next to it.
StatusOr<Graph> read_onnx_file(const std::string& path, const ImportOptions& options = {},
                               ImportReport* report = nullptr);

// Parses the protobuf of a model file without checking it; errors name the path.
StatusOr<onnx::ModelProto> read_model_proto(const std::string& path);

}  // namespace autopar
