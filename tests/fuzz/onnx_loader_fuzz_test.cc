// A short fuzz run of the ONNX loader: mutated models import or fail with a Status, never
// crash or hang. Mutations are byte-level (flips, cuts, splices) and structural (dims,
// attributes, op types, dtypes, opsets, wiring) on exporter-style and zoo models.
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "autopar/ir/model_summary.h"
#include "autopar/onnx/onnx_export.h"
#include "autopar/onnx/onnx_import.h"
#include "autopar/zoo/zoo.h"
#include "testing/onnx_proto.h"
#include "testing/testing.h"

namespace autopar {
namespace {

constexpr int kShards = 6;
constexpr int kMutationsPerShard = 500;

std::vector<onnx::ModelProto> seed_models() {
  std::vector<onnx::ModelProto> seeds;
  seeds.push_back(testing::torch_style_cnn().model());
  seeds.push_back(testing::torch_style_transformer().model());
  seeds.push_back(testing::torch_style_transformer(false).model());
  for (const char* name : {"gpt-tiny", "resnet-tiny", "bert-tiny", "vit-tiny", "mlp"}) {
    ZooOptions zoo;
    zoo.with_weights = false;
    seeds.push_back(export_onnx(*build_zoo_model(name, zoo)));
  }
  for (const char* name :
       {"pytorch-converted/test_Conv2d", "pytorch-converted/test_Linear",
        "pytorch-operator/test_operator_maxpool", "pytorch-converted/test_BatchNorm2d_eval",
        "pytorch-operator/test_operator_concat2"}) {
    const std::string path = std::string(AUTOPAR_ONNX_TESTDATA) + "/" + name + "/model.onnx";
    if (!std::filesystem::exists(path)) continue;
    auto model = read_model_proto(path);
    if (model.is_ok()) seeds.push_back(std::move(model).value());
  }
  return seeds;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  int64_t pick(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng_); }

  int64_t interesting_int() {
    static constexpr int64_t kValues[] = {
        0,       1,         -1,        2,         3,
        -2,      7,         64,        65,        -65,
        1 << 20, INT32_MAX, INT64_MAX, INT64_MIN, int64_t{1} << 40};
    return pick(3) == 0 ? static_cast<int64_t>(rng_()) : kValues[pick(std::size(kValues))];
  }

  std::string bytes(std::string data) {
    if (data.empty()) return data;
    switch (pick(5)) {
      case 0:  // flip bits
        for (int i = 0, n = 1 + static_cast<int>(pick(8)); i < n; ++i) {
          data[pick(data.size())] ^= static_cast<char>(1 << pick(8));
        }
        break;
      case 1:  // random bytes
        for (int i = 0, n = 1 + static_cast<int>(pick(4)); i < n; ++i) {
          data[pick(data.size())] = static_cast<char>(pick(256));
        }
        break;
      case 2:  // truncate
        data.resize(pick(data.size()));
        break;
      case 3: {  // duplicate a chunk
        const size_t from = pick(data.size());
        const size_t length = std::min<size_t>(1 + pick(64), data.size() - from);
        data.insert(pick(data.size()), data.substr(from, length));
        break;
      }
      default:  // remove a chunk
        data.erase(pick(data.size()), 1 + pick(32));
        break;
    }
    return data;
  }

  void structure(onnx::ModelProto& model) {
    onnx::GraphProto& g = *model.mutable_graph();
    switch (pick(11)) {
      case 0:
        if (g.node_size()) mutate_attribute(*g.mutable_node(pick(g.node_size())));
        break;
      case 1:
        if (g.input_size()) mutate_dims(*g.mutable_input(pick(g.input_size())));
        break;
      case 2:
        if (g.initializer_size()) {
          auto& t = *g.mutable_initializer(pick(g.initializer_size()));
          if (t.dims_size()) t.set_dims(pick(t.dims_size()), interesting_int());
        }
        break;
      case 3:
        if (g.node_size()) {
          static constexpr const char* kOps[] = {
              "Reshape", "MatMul", "Gather", "Concat", "Slice", "Conv", "Softmax", "Transpose",
              "Squeeze", "Expand", "Pad",    "Resize", "Split", "Tile", "Shape",   "Range"};
          g.mutable_node(pick(g.node_size()))->set_op_type(kOps[pick(std::size(kOps))]);
        }
        break;
      case 4:
        if (g.node_size() > 1) {
          auto& node = *g.mutable_node(pick(g.node_size()));
          const auto& other = g.node(pick(g.node_size()));
          if (node.input_size() && other.output_size()) {
            node.set_input(pick(node.input_size()), other.output(0));
          }
        }
        break;
      case 5:
        if (g.node_size()) g.mutable_node()->DeleteSubrange(pick(g.node_size()), 1);
        break;
      case 6:
        if (g.initializer_size()) {
          g.mutable_initializer(pick(g.initializer_size()))
              ->set_data_type(static_cast<int32_t>(pick(17)));
        }
        break;
      case 7:
        if (g.initializer_size()) {
          auto& t = *g.mutable_initializer(pick(g.initializer_size()));
          if (t.has_raw_data()) t.mutable_raw_data()->resize(pick(t.raw_data().size() + 8));
        }
        break;
      case 8:
        if (model.opset_import_size()) {
          static constexpr int64_t kOpsets[] = {1, 6, 7, 9, 11, 13, 17, 18, 1000};
          model.mutable_opset_import(0)->set_version(kOpsets[pick(std::size(kOpsets))]);
        }
        break;
      case 9:
        if (g.input_size()) {
          g.mutable_input(pick(g.input_size()))
              ->mutable_type()
              ->mutable_tensor_type()
              ->set_elem_type(static_cast<int32_t>(pick(17)));
        }
        break;
      default:
        if (g.node_size()) {
          auto& node = *g.mutable_node(pick(g.node_size()));
          if (node.input_size() && pick(2)) {
            node.mutable_input()->RemoveLast();
          } else if (node.input_size()) {
            node.add_input(node.input(0));
          }
        }
        break;
    }
  }

 private:
  void mutate_attribute(onnx::NodeProto& node) {
    if (!node.attribute_size()) {
      static constexpr const char* kNames[] = {"axis", "perm", "axes", "to", "group", "pads"};
      auto* a = node.add_attribute();
      a->set_name(kNames[pick(std::size(kNames))]);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(interesting_int());
      return;
    }
    auto& a = *node.mutable_attribute(pick(node.attribute_size()));
    switch (a.type()) {
      case onnx::AttributeProto::INT:
        a.set_i(interesting_int());
        break;
      case onnx::AttributeProto::INTS:
        if (a.ints_size() && pick(3)) {
          a.set_ints(pick(a.ints_size()), interesting_int());
        } else {
          a.add_ints(interesting_int());
        }
        break;
      case onnx::AttributeProto::FLOAT:
        a.set_f(pick(2) ? -1.0f : std::numeric_limits<float>::quiet_NaN());
        break;
      case onnx::AttributeProto::TENSOR:
        if (a.t().dims_size()) a.mutable_t()->set_dims(0, interesting_int());
        break;
      default:
        a.set_type(onnx::AttributeProto::INT);
        a.set_i(interesting_int());
        break;
    }
  }

  void mutate_dims(onnx::ValueInfoProto& info) {
    auto* shape = info.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (!shape->dim_size() || pick(4) == 0) {
      shape->add_dim()->set_dim_value(interesting_int());
      return;
    }
    auto* dim = shape->mutable_dim(pick(shape->dim_size()));
    if (pick(3) == 0) {
      dim->set_dim_param("fuzz");
    } else {
      dim->set_dim_value(interesting_int());
    }
  }

  std::mt19937_64 rng_;
};

class OnnxLoaderFuzz : public ::testing::TestWithParam<int> {};

TEST_P(OnnxLoaderFuzz, MutatedModelsImportOrFailCleanly) {
  const std::vector<onnx::ModelProto> seeds = seed_models();
  ASSERT_GE(seeds.size(), 8u);
  Mutator mutate(static_cast<uint64_t>(GetParam()) * 7919 + 17);
  int imported = 0;
  int rejected = 0;
  for (int i = 0; i < kMutationsPerShard; ++i) {
    onnx::ModelProto model = seeds[mutate.pick(seeds.size())];
    std::string bytes;
    if (mutate.pick(3) == 0) {
      bytes = mutate.bytes(model.SerializeAsString());
    } else {
      for (int k = 0, n = 1 + static_cast<int>(mutate.pick(3)); k < n; ++k) mutate.structure(model);
      bytes = model.SerializeAsString();
    }
    onnx::ModelProto parsed;
    if (!parsed.ParseFromString(bytes)) {
      ++rejected;
      continue;
    }
    ImportOptions options;
    options.batch = 1 + mutate.pick(4);
    SCOPED_TRACE(fmt::format("shard {} mutation {}", GetParam(), i));
    auto graph = import_onnx(parsed, options, "fuzz.onnx");
    if (!graph.is_ok()) {
      ++rejected;
      const std::string& message = graph.status().message();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      EXPECT_FALSE(message.empty());
      continue;
    }
    ++imported;
    (void)summarize(*graph);
  }
  EXPECT_EQ(imported + rejected, kMutationsPerShard);
  // The mix must exercise both paths, or the mutations are too weak (or too strong).
  EXPECT_GT(imported, kMutationsPerShard / 20);
  EXPECT_GT(rejected, kMutationsPerShard / 20);
}

INSTANTIATE_TEST_SUITE_P(Shards, OnnxLoaderFuzz, ::testing::Range(0, kShards));

}  // namespace
}  // namespace autopar
