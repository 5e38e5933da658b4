// Private to the zoo: each family's resolved configuration, its closed-form parameter count
// and builder, and the module-scoped building helpers the families share.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/ir/builder.h"
#include "autopar/ir/graph.h"

namespace autopar::zoo {

// What every family builder needs besides its own configuration.
struct BuildSettings {
  bool with_data = true;
  uint64_t seed = 0;
  int64_t batch = 1;
};

struct MlpConfig {
  int64_t inputs = 64;
  int64_t hidden = 64;
  int64_t layers = 4;  // Linear layers, Relu between consecutive ones
  int64_t classes = 16;
};

struct GptConfig {
  int64_t layers = 4;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t seq = 16;  // also the size of the learned position table
  int64_t vocab = 256;
  double dropout = 0;  // embeddings, attention probabilities, attention and MLP outputs
};

struct LlamaConfig {
  int64_t layers = 4;
  int64_t hidden = 64;
  int64_t heads = 4;     // query heads
  int64_t kv_heads = 2;  // key/value heads, dividing heads (grouped-query attention)
  int64_t ffn = 128;     // SwiGLU intermediate size
  int64_t seq = 16;
  int64_t vocab = 256;
  double rope_theta = 10000.0;
  float epsilon = 1e-5f;  // RMSNorm
};

struct BertConfig {
  int64_t layers = 4;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t seq = 16;
  int64_t vocab = 256;
  // Rows of the position table, seq <= max_positions. 0 in a preset: the table follows seq
  // (bert-tiny); resolved configurations always have it set.
  int64_t max_positions = 0;
  int64_t classes = 0;  // > 0: a sequence classifier on the pooler, output "logits"
  double dropout = 0;   // embeddings, attention probabilities, attention and MLP outputs
};

struct ResNetConfig {
  bool bottleneck = false;
  std::vector<int64_t> blocks = {1, 1, 1, 1};     // residual blocks per stage
  std::vector<int64_t> widths = {8, 16, 32, 64};  // planes per stage
  int64_t width_factor = 1;                       // bottleneck inner width multiplier (wide)
  bool small_stem = true;  // 3x3 stride-1 stem without max pool (CIFAR style)
  int64_t image = 32;
  int64_t classes = 10;
};

struct VitConfig {
  enum class Pool : uint8_t { kClassToken, kMean };
  int64_t layers = 4;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t image = 32;
  int64_t patch = 8;
  int64_t classes = 10;
  Pool pool = Pool::kMean;
};

// Closed forms: equal to Graph::num_parameter_elements() of the built graph. __int128 so
// that callers can reject configurations whose count does not fit int64.
__int128 mlp_parameter_count(const MlpConfig& config);
__int128 gpt_parameter_count(const GptConfig& config);
__int128 llama_parameter_count(const LlamaConfig& config);
__int128 bert_parameter_count(const BertConfig& config);
__int128 resnet_parameter_count(const ResNetConfig& config);
__int128 vit_parameter_count(const VitConfig& config);

// Builders; configurations are validated by the caller, so shape rules cannot fail.
Graph build_mlp(const MlpConfig& config, const BuildSettings& settings);
Graph build_gpt(const GptConfig& config, const BuildSettings& settings);
Graph build_llama(const LlamaConfig& config, const BuildSettings& settings);
Graph build_bert(const BertConfig& config, const BuildSettings& settings);
Graph build_resnet(const ResNetConfig& config, const BuildSettings& settings);
Graph build_vit(const VitConfig& config, const BuildSettings& settings);

// GraphBuilder with a PyTorch-like module path: nodes are named "<a>/<b>/<OpType>" as the
// PyTorch exporter scopes them, parameters "<a>.<b>.<name>" as in a state dict. Shared
// constants (shapes, scalars, masks) are created once per model and reused by every block.
class ZooBuilder {
 public:
  ZooBuilder(std::string graph_name, const BuildSettings& settings);

  // Enters a module for the guard's lifetime.
  class Module {
   public:
    Module(ZooBuilder& zb, std::string_view name) : zb_(zb) { zb_.modules_.emplace_back(name); }
    ~Module() { zb_.modules_.pop_back(); }
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

   private:
    ZooBuilder& zb_;
  };

  int64_t batch() const { return batch_; }
  void set_layer(int32_t layer) { b_.set_layer(layer); }

  // A graph input whose dim 0 is the symbolic batch.
  ValueId batched_input(std::string_view name, DType dtype, std::vector<int64_t> dims);
  // A parameter named after the current module path.
  ValueId param(std::string_view name, std::vector<int64_t> dims, ParamInit init);
  // A non-trainable initializer named after the current module path.
  ValueId constant(std::string_view name, Tensor data);
  // One constant per model under `name`; later calls return the first one.
  ValueId shared_ints(const std::string& name, const std::vector<int64_t>& values);
  ValueId shared_scalar(const std::string& name, float value);
  ValueId shared_tensor(const std::string& name, Tensor data);
  // A shared table (a mask, rotary tables), made unless it is over 1 GiB in a model without
  // weights: shape-only models of long sequences would otherwise hold gigabytes of constants.
  ValueId shared_table(const std::string& name, DType dtype, std::vector<int64_t> dims,
                       const std::function<Tensor()>& make);

  std::vector<ValueId> op(std::string_view op_type, std::vector<ValueId> inputs, Attributes attrs,
                          int num_outputs);
  ValueId op1(std::string_view op_type, std::vector<ValueId> inputs, Attributes attrs = {}) {
    return op(op_type, std::move(inputs), std::move(attrs), 1)[0];
  }

  // Training-mode Dropout of `x` with probability `ratio` (x itself when 0), as PyTorch exports
  // nn.Dropout in training: Dropout(x, ratio, training_mode = true) with its mask output, and
  // a seed of its own per node.
  ValueId dropout(ValueId x, double ratio);

  // Marks a graph output whose dim 0 is the symbolic batch.
  void batched_output(ValueId id, std::string_view name);
  const Graph& graph() const { return b_.graph(); }
  Graph finish() { return b_.finish(); }

 private:
  std::string path(char separator) const;

  GraphBuilder b_;
  int64_t batch_;
  std::vector<std::string> modules_;
  std::map<std::string, ValueId> shared_;
  uint64_t seed_ = 0;
  int64_t dropouts_ = 0;  // Dropout nodes so far
};

// Linear layer as PyTorch exports it for rank >= 3 inputs: MatMul by weight [in, out], Add.
ValueId linear(ZooBuilder& zb, std::string_view module, ValueId x, int64_t in, int64_t out,
               ParamInit init);
// Linear layer on a [batch, in] input as PyTorch exports it: Gemm with weight [out, in].
ValueId linear_gemm(ZooBuilder& zb, std::string_view module, ValueId x, int64_t in, int64_t out,
                    ParamInit init);
ValueId layer_norm(ZooBuilder& zb, std::string_view module, ValueId x, int64_t hidden,
                   float epsilon);
// The additive causal mask [seq, seq] every layer of a decoder shares: -1e4 (GPT-2's
// masked_bias) above the diagonal, so that exp() underflows to exactly zero without inf
// arithmetic. A constant up to 16K positions, computed beyond (computed_causal_mask).
ValueId causal_mask(ZooBuilder& zb, int64_t seq);
// The same mask computed from positions, as PyTorch exports Hugging Face's arange comparison:
// Mul(Cast(Greater(columns [1, seq], rows [seq, 1])), -1e4).
ValueId computed_causal_mask(ZooBuilder& zb, int64_t seq);
// erf GELU in the exporter's form: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5.
ValueId gelu(ZooBuilder& zb, ValueId x);

// How attention scores are scaled: HF GPT-2 and BERT divide by sqrt(head dim), timm
// multiplies by its inverse.
enum class ScoreScale : uint8_t { kDivSqrt, kMulInverse };

// Multi-head attention on q, k, v of [batch, seq, hidden]: split heads, scaled scores, an
// optional additive mask [seq, seq], Softmax, Dropout of the probabilities (none at 0), merge
// heads. Returns [batch, seq, hidden].
ValueId attention_heads(ZooBuilder& zb, ValueId q, ValueId k, ValueId v, int64_t hidden,
                        int64_t heads, ScoreScale scale, ValueId mask, double dropout = 0);

// Module names of a pre-LayerNorm transformer block (GPT-2 and timm ViT spell them
// differently).
struct PreLnNames {
  const char* ln_1;
  const char* attn;
  const char* qkv;
  const char* attn_proj;
  const char* ln_2;
  const char* mlp;
  const char* fc_in;
  const char* fc_out;
};

struct PreLnBlock {
  PreLnNames names;
  int64_t hidden = 0;
  int64_t heads = 0;
  float epsilon = 1e-5f;
  ScoreScale scale = ScoreScale::kDivSqrt;
  ValueId mask = kNoId;
  float init_stddev = 0.02f;
  double dropout = 0;  // attention probabilities, attention and MLP outputs
};

// x + attn(ln_1(x)), then + mlp(ln_2(.)) with a fused qkv projection split three ways and
// a 4x GELU MLP; the caller has entered the block's module and set its layer.
ValueId pre_ln_block(ZooBuilder& zb, ValueId x, const PreLnBlock& block);

}  // namespace autopar::zoo
