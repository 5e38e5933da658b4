// Import: an ONNX model (file or ModelProto) to a Graph with static shapes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <onnx/onnx_pb.h>

#include "autopar/ir/graph.h"
#include "autopar/ir/pattern_fusion.h"
#include "autopar/support/status.h"

namespace autopar {

// Model metadata keys autopar writes so that its own models re-import exactly.
inline constexpr std::string_view kMetadataConstants = "autopar.constants";  // JSON list
inline constexpr std::string_view kMetadataNodes = "autopar.nodes";          // JSON object
// String attributes autopar writes on standard ops that ONNX's schemas lack: a sharded Dropout's
// place in the whole tensor (its input's layout, and the mesh axis of ring attention's chunk
// pairs). The node metadata carries them ("attributes"), so the nodes pass ONNX's checker.
inline constexpr std::string_view kShardPositionAttributes[] = {"layout", "zigzag_axis"};
inline bool is_shard_position_attribute(std::string_view name) {
  for (std::string_view a : kShardPositionAttributes) {
    if (a == name) return true;
  }
  return false;
}
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
  // Fuses the chains exporters write for LayerNorm and GELU into one op each (see
  // ir/pattern_fusion.h); autopar's own exports are read as written.
  bool fuse_patterns = true;
  // Floating Constant nodes read as weights (a convolution's or matrix product's weight or
  // bias, a normalisation's scale, an embedding table) are trainable parameters, as
  // initializers are; false keeps them constant.
  bool constant_weights_trainable = true;
  // Models at ai.onnx opsets 9 up to this one (exclusive) are upgraded to 13 by ONNX's
  // version converter where it can (training needs 13); 0 keeps them at their opset.
  int64_t upgrade_below = 0;
};

// What the import saw besides the graph.
struct ImportReport {
  int folded_nodes = 0;              // nodes evaluated away by constant folding
  std::string layer_source;          // "metadata", "names", "structure" or "" (none found)
  int unknown_shape_values = 0;      // values left without a static shape (after unsupported ops)
  int64_t converted_from_opset = 0;  // an opset 18..21 model read as 17 (0: not converted)
  int converted_nodes = 0;           // nodes whose form the conversion changed
  FusionReport fusion;               // written-out LayerNorms and GELUs fused
  int constant_weights = 0;          // Constant-node weights made trainable parameters
  int untied_parameters = 0;         // Identity copies of a parameter made parameters again
  int64_t upgraded_from_opset = 0;   // an opset 9..12 model upgraded to 13 (0: not upgraded)
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
