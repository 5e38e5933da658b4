// The model zoo: exact parameter counts, graph structure, layer ids, data and option errors.
#include "autopar/zoo/zoo.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

#include "autopar/ir/verify.h"

namespace autopar {
namespace {

ZooOptions shape_only() {
  ZooOptions o;
  o.with_weights = false;
  return o;
}

Graph build(std::string_view name, const ZooOptions& options = {}) {
  StatusOr<Graph> g = build_zoo_model(name, options);
  EXPECT_TRUE(g.is_ok()) << name << ": " << g.status().message();
  return g.is_ok() ? std::move(g).value() : Graph();
}

int64_t count(std::string_view name, const ZooOptions& options = {}) {
  StatusOr<int64_t> n = zoo_parameter_count(name, options);
  EXPECT_TRUE(n.is_ok()) << name << ": " << n.status().message();
  return n.is_ok() ? *n : -1;
}

std::string build_error(std::string_view name, const ZooOptions& options) {
  StatusOr<Graph> g = build_zoo_model(name, options);
  EXPECT_FALSE(g.is_ok()) << name;
  return g.is_ok() ? "" : g.status().message();
}

int64_t gpt_formula(int64_t l, int64_t h, int64_t s, int64_t v) {
  return l * (12 * h * h + 13 * h) + (v + s) * h + 2 * h;
}

// Layer ids of the nodes, -1 excluded.
std::set<int32_t> layer_ids(const Graph& g) {
  std::set<int32_t> ids;
  for (const Node& n : g.nodes()) {
    if (n.layer >= 0) ids.insert(n.layer);
  }
  return ids;
}

std::set<int32_t> range(int32_t n) {
  std::set<int32_t> ids;
  for (int32_t i = 0; i < n; ++i) ids.insert(i);
  return ids;
}

const Value& value_named(const Graph& g, std::string_view name) {
  std::optional<ValueId> id = g.find_value(name);
  EXPECT_TRUE(id.has_value()) << name;
  return g.value(id.value_or(0));
}

TEST(Zoo, EntriesListEveryPresetAndFamily) {
  std::vector<std::string> names;
  for (const ZooEntry& e : zoo_entries()) {
    names.push_back(e.name);
    EXPECT_FALSE(e.description.empty()) << e.name;
  }
  const std::vector<std::string> expected = {
      "mlp",      "gpt",        "gpt-tiny",  "gpt2-small", "gpt2-medium",     "gpt2-large",
      "gpt2-xl",  "gpt3-1.3b",  "gpt3-2.7b", "gpt3-6.7b",  "gpt3-13b",        "gpt3-175b",
      "llama",    "llama-tiny", "llama2-7b", "llama3-8b",  "llama3-70b",      "llama3-405b",
      "bert",     "bert-tiny",  "bert-base", "bert-large", "resnet",          "resnet-tiny",
      "resnet18", "resnet50",   "resnet101", "resnet152",  "wide-resnet50-2", "vit",
      "vit-tiny", "vit-b16",    "vit-l16",   "vit-h14"};
  EXPECT_EQ(names, expected);
  for (const ZooEntry& e : zoo_entries()) {
    EXPECT_TRUE(
        std::set<std::string>({"mlp", "gpt", "llama", "bert", "resnet", "vit"}).count(e.family))
        << e.name;
  }
}

TEST(Zoo, Gpt3_175bParameterCount) {
  EXPECT_EQ(count("gpt3-175b"), 174'615'846'912);
  Graph g = build("gpt3-175b");  // its build time is measured by bench/zoo_bench.cc
  EXPECT_EQ(g.num_parameter_elements(), 174'615'846'912);
  for (ValueId id : g.parameters()) EXPECT_EQ(g.value(id).data, nullptr);
  EXPECT_EQ(layer_ids(g), range(96));
}

TEST(Zoo, PresetParameterCounts) {
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"gpt2-small", 124'439'808}, {"bert-base", 109'482'240},      {"bert-large", 335'141'888},
      {"resnet18", 11'689'512},    {"resnet50", 25'557'032},        {"resnet101", 44'549'160},
      {"resnet152", 60'192'808},   {"wide-resnet50-2", 68'883'240}, {"vit-b16", 86'567'656},
      {"vit-l16", 304'326'632},    {"vit-h14", 632'045'800},
  };
  for (const auto& [name, n] : expected) {
    EXPECT_EQ(count(name), n) << name;
    EXPECT_EQ(build(name, shape_only()).num_parameter_elements(), n) << name;
  }
}

// The published counts: Llama 2 7B's 6.74B, Llama 3's 8.03B, 70.6B and 405B (embeddings and
// output head untied, grouped-query attention with 8 key/value heads).
TEST(Zoo, LlamaPresetParameterCounts) {
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"llama2-7b", 6'738'415'616},
      {"llama3-8b", 8'030'261'248},
      {"llama3-70b", 70'553'706'496},
      {"llama3-405b", 405'853'388'800},
  };
  for (const auto& [name, n] : expected) EXPECT_EQ(count(name), n) << name;
  Graph g = build("llama3-8b");
  EXPECT_EQ(g.num_parameter_elements(), 8'030'261'248);
  EXPECT_EQ(layer_ids(g), range(32));
}

// llama-tiny as Hugging Face's LlamaForCausalLM exports it: per layer two RMSNorms (Pow,
// ReduceMean, Add, Sqrt, Div, Mul, Mul), four bias-free projections and three in the MLP,
// rotary embeddings of queries and keys (two Slices, Neg, Concat, two Muls and an Add each),
// key/value heads repeated over their query groups (Unsqueeze, Expand, Reshape) and SwiGLU.
TEST(Zoo, LlamaTinyStructure) {
  Graph g = build("llama-tiny");
  EXPECT_EQ(g.num_parameter_elements(), 180'800);
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes()) ++ops[n.op_type];
  EXPECT_EQ(ops["Pow"], 9);
  EXPECT_EQ(ops["Sqrt"], 9);
  EXPECT_EQ(ops["Sigmoid"], 4);
  EXPECT_EQ(ops["Neg"], 8);
  EXPECT_EQ(ops["Concat"], 8);
  EXPECT_EQ(ops["Expand"], 8);
  EXPECT_EQ(ops["Softmax"], 4);
  EXPECT_EQ(ops["MatMul"], 4 * 9 + 1);  // 7 projections and 2 attention products, the head
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight",
                           "model.layers.0.self_attn.k_proj.weight", "model.norm.weight"}) {
    EXPECT_TRUE(g.find_value(name).has_value()) << name;
  }
  // Two key/value heads of 16: k_proj is [64, 32].
  EXPECT_EQ(g.value(*g.find_value("model.layers.0.self_attn.k_proj.weight")).shape.dims,
            (std::vector<int64_t>{64, 32}));
  ZooOptions o = shape_only();
  o.kv_heads = 4;
  o.ffn = 96;
  // Full multi-head attention needs no repeat.
  Graph mha = build("llama-tiny", o);
  EXPECT_EQ(mha.num_parameter_elements(),
            4 * (4 * 64 * 64 + 3 * 64 * 96 + 2 * 64) + 2 * 256 * 64 + 64);
  int expands = 0;
  for (const Node& n : mha.nodes()) expands += n.op_type == "Expand" ? 1 : 0;
  EXPECT_EQ(expands, 0);
}

// Beyond 16K positions the causal mask is computed from positions (columns greater than the
// row, times −10⁴), as PyTorch exports the arange comparison: no 64 GiB constant at 128K, and
// small models build with weights at any length.
TEST(Zoo, LongSequencesComputeTheirCausalMask) {
  ZooOptions o = shape_only();
  o.seq = 131072;
  Graph g = build("llama3-8b", o);
  EXPECT_FALSE(g.find_value("causal_mask").has_value());
  const Value& columns = g.value(*g.find_value("causal_mask_columns"));
  EXPECT_EQ(columns.shape.dims, (std::vector<int64_t>{1, 131072}));
  ASSERT_NE(columns.data, nullptr);
  EXPECT_EQ(columns.data->float_at(131071), 131071.0);
  int greater = 0;
  for (const Node& n : g.nodes()) greater += n.op_type == "Greater" ? 1 : 0;
  EXPECT_EQ(greater, 1);
  // The rotary tables (64 MiB each) keep their data.
  EXPECT_NE(g.value(*g.find_value("rope_cos")).data, nullptr);
  ZooOptions weights;
  weights.with_weights = true;
  weights.seq = 32768;
  Graph tiny = build("llama-tiny", weights);
  EXPECT_NE(tiny.value(*tiny.find_value("causal_mask_rows")).data, nullptr);
}

TEST(Zoo, GptParameterFormula) {
  struct Case {
    int64_t layers, hidden, heads, seq, vocab;
  };
  for (const Case& c : {Case{1, 8, 2, 4, 10}, Case{3, 48, 6, 32, 100}, Case{2, 96, 3, 7, 1000},
                        Case{4, 64, 4, 16, 256}}) {
    ZooOptions o = shape_only();
    o.layers = c.layers;
    o.hidden = c.hidden;
    o.heads = c.heads;
    o.seq = c.seq;
    o.vocab = c.vocab;
    const int64_t n = gpt_formula(c.layers, c.hidden, c.seq, c.vocab);
    EXPECT_EQ(count("gpt", o), n);
    EXPECT_EQ(build("gpt", o).num_parameter_elements(), n);
  }
  EXPECT_EQ(count("gpt3-1.3b"), gpt_formula(24, 2048, 2048, 51200));
  EXPECT_EQ(count("gpt2-xl"), gpt_formula(48, 1600, 1024, 50257));
}

TEST(Zoo, EveryPresetBuildsVerifiesAndMatchesItsCount) {
  for (const ZooEntry& e : zoo_entries()) {
    Graph g = build(e.name, shape_only());
    Status s = verify(g);
    EXPECT_TRUE(s.is_ok()) << e.name << ": " << s.message();
    EXPECT_EQ(g.num_parameter_elements(), count(e.name)) << e.name;
    std::set<int32_t> ids = layer_ids(g);
    ASSERT_FALSE(ids.empty()) << e.name;
    EXPECT_EQ(ids, range(static_cast<int32_t>(ids.size()))) << e.name;
    for (ValueId id : g.inputs()) EXPECT_EQ(g.value(id).shape.symbol(0), "batch") << e.name;
    for (ValueId id : g.outputs()) EXPECT_EQ(g.value(id).shape.symbol(0), "batch") << e.name;
  }
}

TEST(Zoo, LayerIdsPerFamily) {
  EXPECT_EQ(layer_ids(build("gpt-tiny")), range(4));
  EXPECT_EQ(layer_ids(build("bert-tiny")), range(4));
  EXPECT_EQ(layer_ids(build("vit-tiny")), range(4));
  EXPECT_EQ(layer_ids(build("mlp")), range(4));
  // One id per residual block: resnet-tiny has one block per stage.
  EXPECT_EQ(layer_ids(build("resnet-tiny")), range(4));
  EXPECT_EQ(layer_ids(build("resnet18", shape_only())), range(8));
  EXPECT_EQ(layer_ids(build("resnet50", shape_only())), range(16));
  EXPECT_EQ(layer_ids(build("bert-large", shape_only())), range(24));
}

TEST(Zoo, NodeCounts) {
  // gpt-tiny: 3 embedding nodes; per block ln_1, attention (c_attn 2, Split, 3 Reshape,
  // 3 Transpose, MatMul, Div, mask Add, Softmax, MatMul, Transpose, Reshape, c_proj 2),
  // residual Add, ln_2, MLP (c_fc 2, GELU 5, c_proj 2), residual Add = 31; then ln_f,
  // Transpose of wte and the logits MatMul.
  EXPECT_EQ(build("gpt-tiny").num_nodes(), 3 + 4 * 31 + 3);
  // bert-tiny: embeddings 3 Gather, 2 Add, LayerNorm; per layer 18 self-attention, 4 attention
  // output, 7 intermediate, 4 output; pooler Gather, Gemm, Tanh.
  EXPECT_EQ(build("bert-tiny").num_nodes(), 6 + 4 * 33 + 3);
  // vit-tiny: Conv, Reshape, Transpose, position Add; 30 per block (gpt's 31 without the
  // mask); LayerNorm, ReduceMean, Gemm.
  EXPECT_EQ(build("vit-tiny").num_nodes(), 4 + 4 * 30 + 3);
  // vit-b16 adds the class token: Slice, Mul, Add, Concat; Gather replaces ReduceMean.
  EXPECT_EQ(build("vit-b16", shape_only()).num_nodes(), 8 + 12 * 30 + 3);
  // resnet-tiny: stem Conv, BN, Relu; blocks of 7 nodes, +2 for the downsample of stages
  // 2-4; GlobalAveragePool, Flatten, Gemm.
  EXPECT_EQ(build("resnet-tiny").num_nodes(), 3 + 4 * 7 + 3 * 2 + 3);
  EXPECT_EQ(build("resnet18", shape_only()).num_nodes(), 4 + 8 * 7 + 3 * 2 + 3);
  EXPECT_EQ(build("mlp").num_nodes(), 4 * 2 + 3);
}

TEST(Zoo, GptStructure) {
  Graph g = build("gpt-tiny");
  const Value& ids = value_named(g, "input_ids");
  EXPECT_EQ(ids.dtype, DType::kInt64);
  EXPECT_EQ(ids.shape.dims, (std::vector<int64_t>{1, 16}));
  ASSERT_EQ(g.outputs().size(), 1u);
  const Value& logits = g.value(g.outputs()[0]);
  EXPECT_EQ(logits.name, "logits");
  EXPECT_EQ(logits.shape.dims, (std::vector<int64_t>{1, 16, 256}));

  // Tied output embedding: wte feeds both the token Gather and the LM head's Transpose.
  const Value& wte = value_named(g, "wte.weight");
  EXPECT_EQ(wte.kind, ValueKind::kParameter);
  std::set<std::string> users;
  for (NodeId n : wte.consumers) users.insert(g.node(n).op_type);
  EXPECT_EQ(users, (std::set<std::string>{"Gather", "Transpose"}));

  std::optional<NodeId> qkv = g.find_node("h.3/attn/c_attn/MatMul");
  ASSERT_TRUE(qkv.has_value());
  EXPECT_EQ(g.node(*qkv).layer, 3);
  EXPECT_EQ(value_named(g, "h.3.attn.c_attn.weight").shape.dims, (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(g.node(*g.find_node("ln_f/LayerNormalization")).layer, -1);

  // One causal mask shared by all layers.
  const Value& mask = value_named(g, "causal_mask");
  EXPECT_EQ(mask.kind, ValueKind::kConstant);
  EXPECT_EQ(mask.consumers.size(), 4u);
  EXPECT_EQ(mask.data->data<float>()[1], -1e4f);
  EXPECT_EQ(mask.data->data<float>()[16], 0.0f);
}

// --dropout P: nn.Dropout as PyTorch exports it in training mode, Dropout(x, P, true) with its
// mask, after the embeddings and, per layer, on the attention probabilities and the attention
// and MLP outputs (before their residual sums); each node its own seed. No parameters change.
TEST(Zoo, DropoutAsPyTorchExportsItInTraining) {
  ZooOptions o;
  o.dropout = 0.1;
  for (std::string_view name : {"gpt-tiny", "bert-tiny"}) {
    SCOPED_TRACE(name);
    Graph g = build(name, o);
    EXPECT_EQ(g.num_parameter_elements(), count(name));
    EXPECT_EQ(g.num_nodes(), build(name).num_nodes() + 1 + 4 * 3);
    std::set<int64_t> seeds;
    std::map<std::string, int> before;  // what each Dropout reads
    for (const Node& n : g.nodes()) {
      if (n.op_type != "Dropout") continue;
      seeds.insert(n.attr_int("seed", -1));
      ASSERT_EQ(n.inputs.size(), 3u);
      ASSERT_EQ(n.outputs.size(), 2u);
      EXPECT_FLOAT_EQ(g.value(n.inputs[1]).data->float_at(0), 0.1f);
      EXPECT_EQ(g.value(n.inputs[2]).dtype, DType::kBool);
      EXPECT_EQ(g.value(n.inputs[2]).data->int_at(0), 1);
      EXPECT_EQ(g.value(n.outputs[1]).dtype, DType::kBool);
      const NodeId from = g.value(n.inputs[0]).producer;
      ++before[from == kNoId ? "input" : g.node(from).op_type];
    }
    EXPECT_EQ(seeds.size(), 13u);
    // The probabilities (Softmax), the projections' outputs (their bias Add), the embeddings.
    EXPECT_EQ(before["Softmax"], 4);
    EXPECT_EQ(before["Add"] + before["LayerNormalization"], 9);
  }
  // 0 is the model without dropout.
  o.dropout = 0;
  EXPECT_EQ(build("gpt-tiny", o).num_nodes(), build("gpt-tiny").num_nodes());
}

TEST(Zoo, BatchOptionKeepsConstantsBatchIndependent) {
  for (std::string_view name :
       {"gpt-tiny", "bert-tiny", "vit-tiny", "resnet-tiny", "mlp", "vit-b16"}) {
    ZooOptions one = shape_only();
    ZooOptions three = shape_only();
    three.batch = 3;
    Graph a = build(name, one);
    Graph b = build(name, three);
    ASSERT_EQ(a.num_values(), b.num_values()) << name;
    for (ValueId id = 0; id < a.num_values(); ++id) {
      const Value& va = a.value(id);
      const Value& vb = b.value(id);
      EXPECT_EQ(va.name, vb.name);
      if (va.kind == ValueKind::kConstant) {
        EXPECT_EQ(*va.data, *vb.data) << va.name;
      }
    }
    for (ValueId id : b.outputs()) EXPECT_EQ(b.value(id).shape.dims[0], 3) << name;
  }
}

TEST(Zoo, BertStructure) {
  Graph g = build("bert-tiny");
  ASSERT_EQ(g.inputs().size(), 2u);
  EXPECT_EQ(g.value(g.inputs()[1]).name, "token_type_ids");
  ASSERT_EQ(g.outputs().size(), 2u);
  EXPECT_EQ(g.value(g.outputs()[0]).name, "last_hidden_state");
  EXPECT_EQ(g.value(g.outputs()[0]).shape.dims, (std::vector<int64_t>{1, 16, 64}));
  EXPECT_EQ(g.value(g.outputs()[1]).name, "pooler_output");
  EXPECT_EQ(g.value(g.outputs()[1]).shape.dims, (std::vector<int64_t>{1, 64}));
  EXPECT_TRUE(g.find_node("encoder/layer.2/attention/self/query/MatMul").has_value());

  // bert-base reads 128 tokens from a 512-row position table.
  Graph base = build("bert-base", shape_only());
  EXPECT_EQ(value_named(base, "embeddings.position_embeddings.weight").shape.dims,
            (std::vector<int64_t>{512, 768}));
  EXPECT_EQ(value_named(base, "input_ids").shape.dims, (std::vector<int64_t>{1, 128}));

  ZooOptions o;
  o.classes = 3;
  Graph classifier = build("bert-tiny", o);
  ASSERT_EQ(classifier.outputs().size(), 1u);
  EXPECT_EQ(classifier.value(classifier.outputs()[0]).name, "logits");
  EXPECT_EQ(classifier.value(classifier.outputs()[0]).shape.dims, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(classifier.num_parameter_elements(), count("bert-tiny") + 64 * 3 + 3);
  EXPECT_EQ(count("bert-tiny", o), count("bert-tiny") + 64 * 3 + 3);
}

TEST(Zoo, ResNetAndVitStructure) {
  Graph r = build("resnet-tiny");
  EXPECT_EQ(value_named(r, "pixel_values").shape.dims, (std::vector<int64_t>{1, 3, 32, 32}));
  EXPECT_EQ(r.value(r.outputs()[0]).shape.dims, (std::vector<int64_t>{1, 10}));
  // BatchNorm running statistics are constants, not parameters.
  EXPECT_EQ(value_named(r, "layer1.0.bn1.running_mean").kind, ValueKind::kConstant);
  EXPECT_EQ(value_named(r, "layer1.0.bn1.weight").kind, ValueKind::kParameter);
  EXPECT_EQ(value_named(r, "fc.weight").shape.dims, (std::vector<int64_t>{10, 64}));

  Graph r50 = build("resnet50", shape_only());
  EXPECT_EQ(r50.value(r50.outputs()[0]).shape.dims, (std::vector<int64_t>{1, 1000}));
  EXPECT_EQ(value_named(r50, "layer4.2.conv3.weight").shape.dims,
            (std::vector<int64_t>{2048, 512, 1, 1}));

  Graph v = build("vit-tiny");
  EXPECT_EQ(v.value(v.outputs()[0]).shape.dims, (std::vector<int64_t>{1, 10}));
  EXPECT_FALSE(v.find_value("cls_token").has_value());
  EXPECT_EQ(value_named(v, "pos_embed").shape.dims, (std::vector<int64_t>{1, 16, 64}));
  Graph b16 = build("vit-b16", shape_only());
  EXPECT_EQ(value_named(b16, "pos_embed").shape.dims, (std::vector<int64_t>{1, 197, 768}));
  EXPECT_EQ(value_named(b16, "cls_token").kind, ValueKind::kParameter);
}

TEST(Zoo, SmallModelsHaveDataLargeOnesAreShapeOnly) {
  for (std::string_view name : {"resnet-tiny", "vit-tiny", "gpt-tiny", "bert-tiny", "mlp"}) {
    Graph g = build(name);
    for (ValueId id : g.parameters()) {
      ASSERT_NE(g.value(id).data, nullptr) << name << " " << g.value(id).name;
      EXPECT_EQ(g.value(id).data->dims(), g.value(id).shape.dims);
    }
  }
  for (std::string_view name : {"gpt2-small", "bert-base"}) {
    Graph g = build(name);
    for (ValueId id : g.parameters()) EXPECT_EQ(g.value(id).data, nullptr) << name;
  }
  ZooOptions o;
  o.with_weights = false;
  Graph g = build("gpt-tiny", o);
  for (ValueId id : g.parameters()) EXPECT_EQ(g.value(id).data, nullptr);
}

TEST(Zoo, DataIsDeterministicPerSeed) {
  ZooOptions seed1;
  seed1.seed = 1;
  ZooOptions seed2;
  seed2.seed = 2;
  Graph a = build("gpt-tiny", seed1);
  Graph b = build("gpt-tiny", seed1);
  Graph c = build("gpt-tiny", seed2);
  const Value& wa = value_named(a, "h.0.attn.c_attn.weight");
  EXPECT_EQ(*wa.data, *value_named(b, "h.0.attn.c_attn.weight").data);
  EXPECT_NE(*wa.data, *value_named(c, "h.0.attn.c_attn.weight").data);
  // Initialisers: LayerNorm ones, biases zeros.
  for (float x : value_named(a, "h.0.ln_1.weight").data->data<float>()) EXPECT_EQ(x, 1.0f);
  for (float x : value_named(a, "h.0.attn.c_attn.bias").data->data<float>()) EXPECT_EQ(x, 0.0f);
}

TEST(Zoo, FlagsApplyOnTopOfPresets) {
  ZooOptions o = shape_only();
  o.layers = 2;
  EXPECT_EQ(count("gpt2-small", o), gpt_formula(2, 768, 1024, 50257));
  Graph g = build("gpt2-small", o);
  EXPECT_EQ(layer_ids(g), range(2));

  ZooOptions mlp;
  mlp.inputs = 10;
  mlp.hidden = 20;
  mlp.layers = 2;
  mlp.classes = 3;
  EXPECT_EQ(count("mlp", mlp), 10 * 20 + 20 + 20 * 3 + 3);
  EXPECT_EQ(build("mlp", mlp).num_parameter_elements(), 10 * 20 + 20 + 20 * 3 + 3);

  ZooOptions vit;
  vit.image = 64;
  Graph v = build("vit", vit);
  EXPECT_EQ(value_named(v, "pos_embed").shape.dims, (std::vector<int64_t>{1, 64, 64}));

  ZooOptions seq;
  seq.seq = 32;
  Graph b = build("bert", seq);
  EXPECT_EQ(value_named(b, "embeddings.position_embeddings.weight").shape.dims,
            (std::vector<int64_t>{32, 64}));
}

TEST(Zoo, OptionErrors) {
  EXPECT_EQ(build_error("gpt5", {}).rfind("unknown model 'gpt5' (valid: mlp, gpt, gpt-tiny,", 0),
            0u);
  ZooOptions heads;
  heads.heads = 5;
  EXPECT_EQ(build_error("gpt", heads), "--heads: 5 does not divide --hidden 64");
  EXPECT_EQ(build_error("vit", heads), "--heads: 5 does not divide --hidden 64");
  ZooOptions layers;
  layers.layers = 0;
  EXPECT_EQ(build_error("bert-tiny", layers), "--layers: must be positive, got 0");
  ZooOptions hidden;
  hidden.hidden = -3;
  EXPECT_EQ(build_error("mlp", hidden), "--hidden: must be positive, got -3");
  ZooOptions patch;
  patch.image = 30;
  EXPECT_EQ(build_error("vit-tiny", patch), "--image: 30 is not divisible by --patch 8");
  ZooOptions vocab;
  vocab.vocab = 100;
  EXPECT_EQ(build_error("resnet18", vocab),
            "--vocab does not apply to the resnet family (it takes --image, --classes)");
  ZooOptions long_seq;
  long_seq.seq = 1024;
  EXPECT_EQ(build_error("bert-base", long_seq),
            "--seq: 1024 exceeds the 512 positions of bert-base");
  ZooOptions kv;
  kv.kv_heads = 3;
  EXPECT_EQ(build_error("llama-tiny", kv), "--kv-heads: 3 does not divide --heads 4");
  EXPECT_EQ(build_error("gpt-tiny", kv),
            "--kv-heads does not apply to the gpt family (it takes --layers, --hidden, --heads, "
            "--seq, --vocab, --dropout)");
  ZooOptions certain;
  certain.dropout = 1.0;
  EXPECT_EQ(build_error("gpt-tiny", certain), "--dropout: 1 is not a probability in [0, 1)");
  ZooOptions negative;
  negative.dropout = -0.1;
  EXPECT_EQ(build_error("bert-tiny", negative), "--dropout: -0.1 is not a probability in [0, 1)");
  ZooOptions dropout;
  dropout.dropout = 0.1;
  EXPECT_EQ(build_error("llama-tiny", dropout),
            "--dropout does not apply to the llama family (it takes --layers, --hidden, --heads, "
            "--kv-heads, --ffn, --seq, --vocab)");
  ZooOptions odd_head;
  odd_head.hidden = 60;
  odd_head.heads = 4;
  EXPECT_EQ(build_error("llama-tiny", odd_head),
            "--heads: the head size 15 (--hidden / --heads) must be even for rotary embeddings");
  ZooOptions batch;
  batch.batch = 0;
  EXPECT_EQ(build_error("mlp", batch), "--batch: must be positive, got 0");
  ZooOptions weights;
  weights.with_weights = true;
  EXPECT_EQ(build_error("gpt3-175b", weights).rfind("--with-weights: gpt3-175b has", 0), 0u);
  EXPECT_FALSE(zoo_parameter_count("nope", {}).is_ok());
  EXPECT_EQ(zoo_parameter_count("gpt", heads).status().message(),
            "--heads: 5 does not divide --hidden 64");
}

}  // namespace
}  // namespace autopar
