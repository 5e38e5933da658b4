// Import: zoo models round-trip exactly; exporter-style models fold to static shapes.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "autopar/ir/model_summary.h"
#include "autopar/ir/text.h"
#include "autopar/ir/verify.h"
#include "autopar/onnx/onnx_export.h"
#include "autopar/onnx/onnx_import.h"
#include "autopar/zoo/zoo.h"
#include "testing/onnx_proto.h"
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

TEST(OnnxImport, NewerOpsetsAreRefused) {
  onnx::ModelProto model = export_onnx(testing::tiny_linear_graph());
  model.mutable_opset_import(0)->set_version(19);
  const std::string message = import_error(model, batch(2));
  EXPECT_NE(message.find("model.onnx: "), std::string::npos) << message;
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

}  // namespace
}  // namespace autopar
