// Import: zoo models round-trip exactly; exporter-style models fold to static shapes.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "autopar/ir/model_summary.h"
#include "autopar/ir/text.h"
#include "autopar/ir/verify.h"
#include "autopar/onnx/onnx_check.h"
#include "autopar/onnx/onnx_export.h"
#include "autopar/onnx/onnx_import.h"
#include "autopar/runtime/executor.h"
#include "autopar/zoo/zoo.h"
#include "testing/onnx_proto.h"
#include "testing/run_node.h"
#include "testing/testing.h"

namespace autopar {
namespace {

ImportOptions batch(int64_t n) {
  ImportOptions options;
  options.batch = n;
  return options;
}

Graph import_ok(const onnx::ModelProto& model, const ImportOptions& options,
                ImportReport* report = nullptr) {
  auto graph = import_onnx(model, options, "model.onnx", "", report);
  EXPECT_TRUE(graph.is_ok()) << graph.status().message();
  return graph.is_ok() ? std::move(graph).value() : Graph();
}

std::string import_error(const onnx::ModelProto& model, const ImportOptions& options) {
  auto graph = import_onnx(model, options, "model.onnx");
  EXPECT_FALSE(graph.is_ok());
  return graph.is_ok() ? "" : graph.status().message();
}

int count_ops(const Graph& g, std::string_view op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op_type == op ? 1 : 0;
  return n;
}

class ZooRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooRoundTrip, ExportThenImportGivesTheBuiltGraph) {
  ZooOptions zoo;
  zoo.batch = 2;
  auto built = build_zoo_model(GetParam(), zoo);
  ASSERT_TRUE(built.is_ok()) << built.status().message();
  Graph imported = import_ok(export_onnx(*built), batch(2));
  EXPECT_EQ(print(imported), print(*built));
  Graph again = import_ok(export_onnx(imported), batch(2));
  EXPECT_EQ(print(again), print(imported));
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooRoundTrip,
                         ::testing::Values("mlp", "gpt-tiny", "bert-tiny", "resnet-tiny",
                                           "vit-tiny"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(OnnxImport, TorchStyleCnnFoldsFlattenAndFindsBlocks) {
  ImportReport report;
  Graph g = import_ok(testing::torch_style_cnn().model(), batch(4), &report);
  // Shape, Gather, Unsqueeze, Concat and their three Constants fold into one constant shape.
  EXPECT_EQ(report.folded_nodes, 7);
  EXPECT_EQ(count_ops(g, "Shape"), 0);
  EXPECT_EQ(g.num_nodes(), 3 + 2 * 7 + 3);
  const Node& reshape = g.node(*g.find_node("/Reshape"));
  const Value& shape = g.value(reshape.inputs[1]);
  ASSERT_TRUE(shape.data);
  EXPECT_EQ(shape.data->to_int64_vector(), (std::vector<int64_t>{4, -1}));
  EXPECT_EQ(g.value(g.outputs()[0]).shape.dims, (std::vector<int64_t>{4, 10}));
  EXPECT_EQ(g.value(g.outputs()[0]).shape.symbol(0), "batch_size");
  EXPECT_EQ(g.value(g.inputs()[0]).shape.symbol(0), "batch_size");
  EXPECT_EQ(g.num_parameter_elements(), testing::kTorchCnnParams);
  EXPECT_EQ(g.value(*g.find_value("bn1.running_var")).kind, ValueKind::kConstant);
  EXPECT_EQ(g.value(*g.find_value("bn1.weight")).kind, ValueKind::kParameter);
  EXPECT_EQ(report.layer_source, "names");
  EXPECT_EQ(g.node(*g.find_node("/layer1/layer1.1/Add")).layer, 1);
  EXPECT_EQ(g.node(*g.find_node("/layer1/layer1.0/conv1/Conv")).layer, 0);
  EXPECT_EQ(g.node(*g.find_node("/fc/Gemm")).layer, -1);
  const ModelSummary s = summarize(g);
  ASSERT_EQ(s.layers.kinds.size(), 1u);
  EXPECT_EQ(s.layers.kinds[0].layers, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(s.layers.kinds[0].nodes, 7);
  EXPECT_EQ(s.layers.kinds[0].params, 2 * (8 * 8 * 9 + 2 * 8));
  // conv 2·(3·9)·8·64 + 2·8·64 bias; each block 2 convs 2·(8·9)·8·64 ... counted per node.
  EXPECT_TRUE(verify(g).is_ok());
}

TEST(OnnxImport, TorchStyleTransformerBindsDimsAndFoldsShapeArithmetic) {
  ImportOptions options = batch(2);
  options.dims["sequence_length"] = 16;
  options.fuse_patterns = false;  // the LayerNorms and GELUs as written; fused below
  ImportReport report;
  Graph g = import_ok(testing::torch_style_transformer().model(), options, &report);
  for (const char* op : {"Shape", "Gather_shape", "Concat", "Range", "Constant", "Unsqueeze",
                         "Slice", "Cast", "Sqrt"}) {
    if (std::string_view(op) == "Sqrt") continue;  // LayerNorm's Sqrt stays, the scale's folds
    EXPECT_EQ(count_ops(g, op), 0) << op;
  }
  // Each layer keeps two LayerNorm Sqrts; the attention scale's Sqrt folded away.
  EXPECT_EQ(count_ops(g, "Sqrt"), 4);
  const Node& reshape = g.node(*g.find_node("/encoder/layer.1/attention/self/Reshape_1"));
  EXPECT_EQ(g.value(reshape.inputs[1]).data->to_int64_vector(),
            (std::vector<int64_t>{2, 16, 2, 16}));
  const Node& div = g.node(*g.find_node("/encoder/layer.0/attention/self/Div"));
  ASSERT_TRUE(g.value(div.inputs[1]).data);
  EXPECT_FLOAT_EQ(static_cast<float>(g.value(div.inputs[1]).data->float_at(0)), 4.0f);
  EXPECT_EQ(g.value(*g.find_value("/embeddings/position_embeddings/Gather_output_0")).shape.dims,
            (std::vector<int64_t>{1, 16, 32}));
  EXPECT_EQ(g.num_parameter_elements(), testing::kTorchTransformerParams);
  EXPECT_EQ(g.value(*g.find_value("onnx::Div_sqrt2")).kind, ValueKind::kConstant);
  EXPECT_EQ(report.layer_source, "names");
  const ModelSummary s = summarize(g);
  EXPECT_EQ(s.layers.count, 2);
  ASSERT_EQ(s.layers.kinds.size(), 1u);
  EXPECT_TRUE(s.unsupported_ops.empty());
  EXPECT_TRUE(verify(g).is_ok());
}

// The same export read with its written-out LayerNorms (ReduceMean, Sub, Pow, ReduceMean,
// Add, Sqrt, Div, Mul, Add) and erf GELUs fused: one LayerNormalization and one Gelu each,
// the same outputs, the same parameters and layers.
TEST(OnnxImport, TorchStyleTransformerFusesLayerNormsAndGelus) {
  ImportOptions options = batch(2);
  options.dims["sequence_length"] = 16;
  ImportReport report;
  Graph fused = import_ok(testing::torch_style_transformer().model(), options, &report);
  EXPECT_EQ(report.fusion.layer_norms, 4);  // two per layer
  EXPECT_EQ(report.fusion.gelus, 2);
  EXPECT_EQ(report.fusion.tanh_gelus, 0);
  EXPECT_EQ(report.fusion.raised_from, 0);  // written at opset 17
  EXPECT_EQ(count_ops(fused, "LayerNormalization"), 4);
  EXPECT_EQ(count_ops(fused, "Gelu"), 2);
  for (const char* op : {"Sqrt", "Pow", "Erf"}) EXPECT_EQ(count_ops(fused, op), 0) << op;
  EXPECT_EQ(count_ops(fused, "ReduceMean"), 1);  // the pooler's
  const Node& ln = fused.node(
      *fused.find_node("/encoder/layer.1/attention/output/LayerNorm/LayerNormalization"));
  EXPECT_EQ(ln.layer, 1);
  EXPECT_FLOAT_EQ(ln.attr_float("epsilon", 0), 1e-12f);
  EXPECT_EQ(fused.num_parameter_elements(), testing::kTorchTransformerParams);
  EXPECT_EQ(summarize(fused).layers.count, 2);
  EXPECT_TRUE(verify(fused).is_ok());

  options.fuse_patterns = false;
  Graph written = import_ok(testing::torch_style_transformer().model(), options);
  auto ids = Tensor(DType::kInt64, {2, 16});
  for (int64_t i = 0; i < ids.num_elements(); ++i) {
    ids.mutable_data<int64_t>()[i] = (i * 37) % 100;
  }
  const auto input_ids = std::make_shared<Tensor>(std::move(ids));
  auto run = [&](const Graph& g) {
    auto executor = runtime::Executor::create(g);
    EXPECT_TRUE(executor.is_ok()) << executor.status().message();
    std::vector<runtime::Feed> feed = {{g.inputs()[0], input_ids}};
    auto out = executor->run(feed);
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    return testing::values_of(*(*out)[0]);
  };
  const std::vector<double> a = run(fused), b = run(written);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << i;
}

// GELU in the forms exporters write: PyTorch's tanh form (x·x·x by Muls, the constants
// first), Hugging Face's (Pow(x, 3), ½·x computed first), and the erf form with x·(1/√2):
// each becomes one Gelu computing what the chain computes; a chain whose intermediate is
// read elsewhere stays.
TEST(OnnxImport, GeluFormsAreFused) {
  testing::OnnxProto m(14);
  m.input("x", onnx::TensorProto::FLOAT, {"batch", 8});
  auto c = [&](const std::string& name, float v) { return m.constant_float(name, v); };
  // PyTorch: 0.5·(x·(1 + tanh(0.79788·(x + 0.044715·(x·(x·x))))))
  const std::string sq = m.node("Mul", "t/sq", {"x", "x"});
  const std::string cube = m.node("Mul", "t/cube", {"x", sq});
  const std::string inner = m.node(
      "Add", "t/add", {"x", m.node("Mul", "t/k", {c("t/kc", 0.044715f), cube})});
  const std::string th =
      m.node("Tanh", "t/tanh", {m.node("Mul", "t/s", {c("t/sc", 0.7978845608f), inner})});
  const std::string a = m.node("Add", "t/one", {c("t/onec", 1.0f), th});
  const std::string y1 =
      m.node("Mul", "t/half", {c("t/halfc", 0.5f), m.node("Mul", "t/xa", {"x", a})});
  // Hugging Face: (y1·½)·(1 + tanh(√(2/π)·(y1 + 0.044715·y1³)))
  const std::string half = m.node("Mul", "h/half", {y1, c("h/halfc", 0.5f)});
  const std::string pow = m.node("Pow", "h/pow", {y1, c("h/three", 3.0f)});
  const std::string inner2 =
      m.node("Add", "h/add", {y1, m.node("Mul", "h/k", {pow, c("h/kc", 0.044715f)})});
  const std::string th2 =
      m.node("Tanh", "h/tanh", {m.node("Mul", "h/s", {inner2, c("h/sc", 0.7978845608f)})});
  const std::string y2 =
      m.node("Mul", "h/out", {half, m.node("Add", "h/one", {th2, c("h/onec", 1.0f)})});
  // erf with a product: x·(1/√2)
  const std::string e = m.node(
      "Erf", "e/erf", {m.node("Mul", "e/scale", {y2, c("e/rsqrt2", 0.70710678f)})});
  const std::string y3 = m.node(
      "Mul", "e/half",
      {m.node("Mul", "e/xa", {y2, m.node("Add", "e/one", {e, c("e/onec", 1.0f)})}),
       c("e/halfc", 0.5f)});
  // An erf chain whose Erf output is also an output of the graph: kept.
  const std::string e2 = m.node(
      "Erf", "k/erf", {m.node("Div", "k/div", {y3, c("k/sqrt2", 1.41421356f)})}, {}, {"erf"});
  m.node("Mul", "k/half",
         {m.node("Mul", "k/xa", {y3, m.node("Add", "k/one", {e2, c("k/onec", 1.0f)})}),
          c("k/halfc", 0.5f)},
         {}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, {"batch", 8});
  m.output("erf", onnx::TensorProto::FLOAT, {"batch", 8});
  ImportReport report;
  const Graph fused = import_ok(m.model(), batch(3), &report);
  EXPECT_EQ(report.fusion.tanh_gelus, 2);
  EXPECT_EQ(report.fusion.gelus, 1);
  EXPECT_EQ(count_ops(fused, "Gelu"), 3);
  EXPECT_EQ(count_ops(fused, "Tanh"), 0);
  EXPECT_EQ(count_ops(fused, "Erf"), 1);  // the kept chain's
  ImportOptions written_options = batch(3);
  written_options.fuse_patterns = false;
  const Graph written = import_ok(m.model(), written_options);
  const auto x = std::make_shared<Tensor>(testing::random_f32({3, 8}, 4));
  auto run = [&](const Graph& g) {
    auto executor = runtime::Executor::create(g);
    EXPECT_TRUE(executor.is_ok()) << executor.status().message();
    auto out = executor->run({{g.inputs()[0], x}});
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    return testing::values_of(*(*out)[0]);
  };
  const std::vector<double> a1 = run(fused), b1 = run(written);
  ASSERT_EQ(a1.size(), b1.size());
  for (size_t i = 0; i < a1.size(); ++i) EXPECT_NEAR(a1[i], b1[i], 1e-6 * (1 + std::abs(b1[i])));
}

TEST(OnnxImport, UnnamedNodesGetLayersFromTheRepeatedSequence) {
  ImportOptions options = batch(2);
  options.dims["sequence_length"] = 8;
  ImportReport report;
  Graph g = import_ok(testing::torch_style_transformer(/*names=*/false).model(), options, &report);
  EXPECT_EQ(report.layer_source, "structure");
  const ModelSummary s = summarize(g);
  EXPECT_EQ(s.layers.count, 2);
  ASSERT_EQ(s.layers.kinds.size(), 1u);
  EXPECT_EQ(g.num_parameter_elements(), testing::kTorchTransformerParams);
}

TEST(OnnxImport, UnboundDimsAreNamedInTheError) {
  const auto model = testing::torch_style_transformer().model();
  EXPECT_EQ(import_error(model, batch(2)),
            "model.onnx: input 'input_ids' dim 1 'sequence_length' is unbound: pass --dim "
            "sequence_length=N");
  EXPECT_EQ(import_error(model, ImportOptions{}),
            "model.onnx: input 'input_ids' dim 0 'batch_size' is unbound: pass --batch N");
  ImportOptions typo = batch(2);
  typo.dims["seq_len"] = 8;
  EXPECT_EQ(import_error(model, typo),
            "--dim seq_len: model.onnx has no symbolic dim named 'seq_len' (it has: batch_size, "
            "sequence_length)");
}

TEST(OnnxImport, ShapeOnlyAndExternalData) {
  Graph g = testing::tiny_linear_graph();
  const auto dir = std::filesystem::temp_directory_path() / "autopar_import_external";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ExportOptions shape_only;
  shape_only.missing_data_location = "weights.bin";
  Graph stripped = g;
  for (ValueId id : stripped.parameters()) stripped.mutable_value(id).data.reset();
  onnx::ModelProto model = export_onnx(stripped, shape_only);
  // Without the file: shape-only.
  auto imported = import_onnx(model, batch(2), "tiny.onnx", dir.string());
  ASSERT_TRUE(imported.is_ok()) << imported.status().message();
  for (ValueId id : imported->parameters()) EXPECT_FALSE(imported->value(id).data);
  // With it: data at offsets.
  std::ofstream out(dir / "weights.bin", std::ios::binary);
  int64_t offset = 0;
  for (auto& t : *model.mutable_graph()->mutable_initializer()) {
    const Tensor& data = *g.value(*g.find_value(t.name())).data;
    out.write(reinterpret_cast<const char*>(data.bytes().data()), data.num_bytes());
    auto* entry = t.add_external_data();
    entry->set_key("offset");
    entry->set_value(std::to_string(offset));
    offset += data.num_bytes();
  }
  out.close();
  imported = import_onnx(model, batch(2), "tiny.onnx", dir.string());
  ASSERT_TRUE(imported.is_ok()) << imported.status().message();
  for (ValueId id : g.parameters()) {
    const Value& v = imported->value(*imported->find_value(g.value(id).name));
    ASSERT_TRUE(v.data);
    EXPECT_EQ(*v.data, *g.value(id).data);
  }
  // A location outside the model's folder is refused.
  model.mutable_graph()->mutable_initializer(0)->mutable_external_data(0)->set_value("../w.bin");
  auto escaped = import_onnx(model, batch(2), "tiny.onnx", dir.string());
  ASSERT_FALSE(escaped.is_ok());
  EXPECT_EQ(escaped.status().message(),
            "tiny.onnx: initializer 'fc/weight': external data location '../w.bin' must be a "
            "relative path inside the model's folder");
  std::filesystem::remove_all(dir);
}

TEST(OnnxImport, RawDataOfTheWrongSizeIsAnError) {
  onnx::ModelProto model = export_onnx(testing::tiny_linear_graph());
  model.mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(10);
  EXPECT_EQ(import_error(model, batch(2)),
            "model.onnx: initializer 'fc/weight': raw_data holds 10 bytes, f32[4,3] needs 48");
}

TEST(OnnxImport, OldOpsetsAreUpgraded) {
  const std::string path =
      std::string(AUTOPAR_ONNX_TESTDATA) + "/pytorch-operator/test_operator_addmm/model.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "libonnx-testdata is not installed";
  auto g = read_onnx_file(path);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ(g->opset(), 13);
  EXPECT_TRUE(verify(*g).is_ok());
}

TEST(OnnxImport, OpsetsAfter21AreRefused) {
  onnx::ModelProto model = export_onnx(testing::tiny_linear_graph());
  model.mutable_opset_import(0)->set_version(22);
  EXPECT_EQ(import_error(model, batch(2)),
            "model.onnx: ai.onnx opset 22 is newer than the newest supported (21)");
}

TEST(OnnxImport, UnsupportedOpsAreKeptWithOnnxTypes) {
  testing::OnnxProto m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
  const std::string y = m.node("Celu", "act", {"x"});
  m.weight("w", {4, 2});
  m.node("MatMul", "mm", {y, "w"}, {}, {"out"});
  m.output("out", onnx::TensorProto::FLOAT, {"batch", 2});
  Graph g = import_ok(m.model(), batch(3));
  const ModelSummary s = summarize(g);
  EXPECT_EQ(s.unsupported_ops, (std::vector<std::string>{"Celu"}));
  EXPECT_EQ(g.value(g.outputs()[0]).shape.dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(s.nodes_without_flops, 1);
  EXPECT_DOUBLE_EQ(s.flops_forward, 2.0 * 3 * 4 * 2);
}

// A zero stride or dilation is refused before ONNX's shape inference runs, which divides by
// them (found by the ASan build of the mutation fuzz test: an opset-9 Conv with strides 0 ended
// the process with SIGFPE inside the version converter's shape inference).
TEST(OnnxImport, ZeroStridesAndDilationsAreRefusedBeforeShapeInference) {
  for (const char* attribute : {"strides", "dilations", "kernel_shape"}) {
    SCOPED_TRACE(attribute);
    testing::OnnxProto m(9);
    m.input("x", onnx::TensorProto::FLOAT, {1, 3, 8, 8});
    m.weight("w", {4, 3, 3, 3});
    std::vector<onnx::AttributeProto> attrs = {testing::attr_ints("kernel_shape", {3, 3})};
    if (std::string(attribute) == "kernel_shape") {
      attrs[0] = testing::attr_ints("kernel_shape", {3, 0});
    } else {
      attrs.push_back(testing::attr_ints(attribute, {1, 0}));
    }
    m.node("Conv", "conv", {"x", "w"}, attrs, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, {1, 4, 6, 6});
    EXPECT_EQ(import_error(m.model(), batch(1)),
              fmt::format("model.onnx: node 'conv' (Conv): attribute {}: 0 is not positive",
                          attribute));
  }
}

// An initializer without data is shape-only unless a dim is zero, however large its dims'
// product (found by the onnx_external_data fuzzer: 2^32 · 2^32 wrapped to 0 and the tensor
// was taken for an empty one, and 1161125198363750400 · 18 overflowed).
TEST(ShapeOnlyInitializers, DimsWhoseProductOverflows) {
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {int64_t{1} << 32, int64_t{1} << 32}) t.add_dims(d);
  EXPECT_TRUE(is_shape_only_initializer(t, ""));
  t.clear_dims();
  for (int64_t d : {int64_t{1161125198363750400}, int64_t{18}}) t.add_dims(d);
  EXPECT_TRUE(is_shape_only_initializer(t, ""));
  t.add_dims(0);
  EXPECT_FALSE(is_shape_only_initializer(t, ""));
}

}  // namespace
}  // namespace autopar
