// OnnxProto: builds ONNX ModelProtos directly, the way exporters write them (symbolic dims,
// Constant nodes, shape subgraphs, scoped node names), for import tests.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <onnx/onnx_pb.h>

namespace autopar::testing {

// A dim: a size, or the name of a symbolic dim.
struct Dim {
  Dim(int64_t v) : value(v) {}      // NOLINT: implicit by design
  Dim(int v) : value(v) {}          // NOLINT: implicit by design
  Dim(const char* p) : param(p) {}  // NOLINT: implicit by design
  int64_t value = -1;
  std::string param;
};

onnx::AttributeProto attr_int(const std::string& name, int64_t v);
onnx::AttributeProto attr_float(const std::string& name, float v);
onnx::AttributeProto attr_string(const std::string& name, const std::string& v);
onnx::AttributeProto attr_ints(const std::string& name, std::vector<int64_t> v);
onnx::AttributeProto attr_tensor(const std::string& name, onnx::TensorProto t);

onnx::TensorProto int64_tensor(const std::string& name, std::vector<int64_t> dims,
                               std::vector<int64_t> values);
onnx::TensorProto float_tensor(const std::string& name, std::vector<int64_t> dims,
                               std::vector<float> values);

class OnnxProto {
 public:
  explicit OnnxProto(int64_t opset = 17, std::string graph_name = "exported");

  void input(const std::string& name, int32_t elem_type, std::vector<Dim> dims);
  void output(const std::string& name, int32_t elem_type, std::vector<Dim> dims);
  // A float initializer with seeded values (raw_data).
  void weight(const std::string& name, std::vector<int64_t> dims, uint64_t seed = 1);
  void initializer(onnx::TensorProto t);
  // Adds a node with `outputs` named outputs (given, or "<name>_output_<i>" as torch does);
  // returns the first output's name.
  std::string node(const std::string& op_type, const std::string& name,
                   std::vector<std::string> inputs, std::vector<onnx::AttributeProto> attrs = {},
                   std::vector<std::string> outputs = {});
  // A Constant node holding int64 values; returns its output.
  std::string constant_ints(const std::string& name, std::vector<int64_t> values,
                            bool scalar = false);
  std::string constant_float(const std::string& name, float value);

  onnx::ModelProto& model() { return model_; }
  const onnx::ModelProto& model() const { return model_; }
  std::string serialize() const;
  void write(const std::string& path) const;

 private:
  onnx::ModelProto model_;
};

// Torch-style CNN (dynamic "batch_size"): conv1/bn1/relu stem, two residual blocks
// layer1.0 and layer1.1 (conv-bn-relu-conv-bn + skip), global pool, flatten through
// Shape → Gather → Unsqueeze → Concat → Reshape, and fc as Gemm. 10 classes.
OnnxProto torch_style_cnn();
// Its trainable parameter count: convs, BatchNorm scale/bias and fc.
inline constexpr int64_t kTorchCnnParams =
    3 * 8 * 9 + 8 + 2 * 8 + 2 * (2 * (8 * 8 * 9 + 2 * 8)) + 8 * 10 + 10;

// Torch-style transformer encoder (dynamic "batch_size" and "sequence_length"; hidden 32,
// 2 heads): word and position embeddings, two layers /encoder/layer.{0,1} whose attention
// reshapes through Shape/Gather/Unsqueeze/Concat, scales by a Sqrt of a shape-derived value,
// and decomposed LayerNorms (ReduceMean, Sub, Pow, Sqrt, Div); a classifier of 3 outputs.
// With `names` false every node is unnamed, as older exporters write them.
OnnxProto torch_style_transformer(bool names = true);
inline constexpr int64_t kTorchTransformerHidden = 32;
inline constexpr int64_t kTorchTransformerParams =
    100 * 32 + 64 * 32 +  // word, position embeddings
    2 * (4 * (32 * 32 + 32) + 2 * 2 * 32 + 32 * 64 + 64 + 64 * 32 + 32) +  // layers
    32 * 3 + 3;                                                            // classifier

}  // namespace autopar::testing
