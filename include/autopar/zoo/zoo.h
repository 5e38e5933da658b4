// The model zoo: built-in generators for the model families autopar plans for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

// Options of `autopar zoo NAME`; unset fields take the preset's values.
struct ZooOptions {
  std::optional<int64_t> layers;
  std::optional<int64_t> hidden;
  std::optional<int64_t> heads;
  std::optional<int64_t> kv_heads;  // llama: key/value heads (grouped-query attention)
  std::optional<int64_t> ffn;       // llama: SwiGLU intermediate size
  std::optional<int64_t> seq;
  std::optional<int64_t> vocab;
  std::optional<int64_t> image;    // image side (vit, resnet)
  std::optional<int64_t> patch;    // vit patch side
  std::optional<int64_t> classes;  // classifier outputs (mlp, vit, resnet, bert)
  std::optional<int64_t> inputs;   // mlp input features
  // gpt, bert: training-mode Dropout with this probability after the embeddings, on the
  // attention probabilities, and on the attention and MLP outputs (Megatron-LM's and Hugging
  // Face's places); unset or 0: none.
  std::optional<double> dropout;
  // Parameters carry seeded random data unless false; unset: data only for models with at
  // most kZooMaxParamsWithWeights parameters.
  std::optional<bool> with_weights;
  uint64_t seed = 0;
  // Concrete value used for the symbolic batch dim while building (shapes are static in
  // the IR; the dim stays symbolic, named "batch", in the written ONNX file).
  int64_t batch = 1;
};

inline constexpr int64_t kZooMaxParamsWithWeights = 100'000'000;
// The dim name a zoo model's sequence length is bound by (--seq, or --dim seq=N) and
// recorded under in plans.
inline constexpr std::string_view kZooSeqDim = "seq";

struct ZooEntry {
  std::string name;         // preset or family name: "gpt2-small", "gpt"
  std::string family;       // mlp | gpt | llama | bert | resnet | vit
  std::string description;  // one line for `autopar zoo --list`
};

// Every preset and family, in a stable order.
const std::vector<ZooEntry>& zoo_entries();
// Whether `name` is one of them.
bool is_zoo_name(std::string_view name);

// Builds the named model. Errors (unknown name, heads not dividing hidden, ...) name the
// option at fault.
StatusOr<Graph> build_zoo_model(std::string_view name, const ZooOptions& options);

// Trainable parameters the named model will have, computed without building it.
StatusOr<int64_t> zoo_parameter_count(std::string_view name, const ZooOptions& options);

}  // namespace autopar
