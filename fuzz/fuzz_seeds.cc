// fuzz_seeds OUT: writes each fuzz target's seed corpus to OUT/<target>/, from the
// repository's own files: zoo models exported to ONNX (with and without weights, and with
// their weights as external data), their graph text, plans of the tiny models as `transform`
// writes them, tensor files, and the YAML and JSON of configs/, tests/data/, tests/mpi/ and
// bench/baselines/.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "autopar/ir/text.h"
#include "autopar/onnx/onnx_export.h"
#include "autopar/onnx/onnx_tensor.h"
#include "autopar/parallel/plan.h"
#include "autopar/parallel/scheme.h"
#include "autopar/zoo/zoo.h"
#include "cli/plan_command.h"
#include "fuzz_support.h"

namespace autopar::fuzz {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = AUTOPAR_SOURCE_DIR;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

class Corpus {
 public:
  explicit Corpus(fs::path root) : root_(std::move(root)) {}

  void add(const std::string& target, const std::string& name, std::string_view bytes) {
    const fs::path dir = root_ / target;
    fs::create_directories(dir);
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error(fmt::format("cannot write {}", (dir / name).string()));
    ++count_[target];
  }

  // Every file of `dir` (relative to the source tree) whose name ends in `extension`.
  void add_files(const std::string& target, const fs::path& dir, const std::string& extension) {
    for (const auto& entry : fs::directory_iterator(kSource / dir)) {
      if (entry.path().extension() != extension) continue;
      std::string name = (dir / entry.path().filename()).string();
      std::replace(name.begin(), name.end(), '/', '_');
      add(target, name, read_bytes(entry.path()));
    }
  }

  void report() const {
    for (const auto& [target, n] : count_) std::printf("%-20s %d seeds\n", target.c_str(), n);
  }

 private:
  fs::path root_;
  std::map<std::string, int> count_;
};

Graph zoo_model(const char* name, bool weights) {
  ZooOptions options;
  options.with_weights = weights;
  auto model = build_zoo_model(name, options);
  if (!model.is_ok()) throw std::runtime_error(model.status().message());
  return std::move(model).value();
}

// The model with every initializer's data moved to weights.bin, as exporters write large
// models; packed as the onnx_external_data target reads it.
std::string with_external_data(onnx::ModelProto model) {
  std::string weights;
  for (onnx::TensorProto& t : *model.mutable_graph()->mutable_initializer()) {
    if (!t.has_raw_data()) continue;
    const size_t offset = weights.size();
    weights += t.raw_data();
    t.clear_raw_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    t.clear_external_data();
    auto entry = [&](const char* key, const std::string& value) {
      auto* e = t.add_external_data();
      e->set_key(key);
      e->set_value(value);
    };
    entry("location", "weights.bin");
    entry("offset", std::to_string(offset));
    entry("length", std::to_string(weights.size() - offset));
  }
  return pack({model.SerializeAsString(), weights});
}

void add_models(Corpus& corpus) {
  for (const char* name : {"mlp", "gpt-tiny", "bert-tiny", "resnet-tiny", "vit-tiny"}) {
    const Graph shapes = zoo_model(name, false);
    corpus.add("onnx_model", fmt::format("{}.onnx", name), export_onnx(shapes).SerializeAsString());
    corpus.add("graph_text", fmt::format("{}.txt", name), print(shapes));
  }
  // With weights: mlp's alone (55 KB); larger seeds only slow every mutation down.
  const Graph mlp = zoo_model("mlp", true);
  corpus.add("onnx_model", "mlp.weights.onnx", export_onnx(mlp).SerializeAsString());
  corpus.add("onnx_external_data", "mlp.packed", with_external_data(export_onnx(mlp)));
  // Shape-only exports name a weights.bin that is not there.
  corpus.add("onnx_external_data", "gpt-tiny.shapes.packed",
             export_onnx(zoo_model("gpt-tiny", false)).SerializeAsString());
}

void add_tensors(Corpus& corpus) {
  const std::vector<float> floats = {1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f};
  const std::vector<int64_t> ints = {0, 3, -1, 7};
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f32_2x3", Tensor::from_float({2, 3}, floats)}, {"i64_4", Tensor::from_int64({4}, ints)},
      {"i64_scalar", Tensor::scalar_int64(42)},        {"f16_2x2", Tensor(DType::kFloat16, {2, 2})},
      {"bf16_3", Tensor(DType::kBFloat16, {3})},       {"f64_1x2", Tensor(DType::kFloat64, {1, 2})},
      {"bool_2", Tensor(DType::kBool, {2})},
  };
  for (const auto& [name, tensor] : tensors) {
    corpus.add("tensor_proto", name + ".pb", tensor_to_proto(tensor, name).SerializeAsString());
  }
}

// Plans as `autopar transform MODEL --scheme FILE` writes them, packed: the manifest, then
// the role files in order.
void add_plans(Corpus& corpus, const fs::path& scratch) {
  const std::vector<std::pair<std::string, std::string>> plans = {
      {"mlp", "mesh: {dp: 2}\n"},
      {"mlp", "mesh: {tp: 2}\n"},
      {"mlp", "mesh: {pp: 2}\nbatch: {global: 4, micro: 1}\n"},
      {"gpt-tiny", "mesh: {dp: 2, tp: 2}\nzero: 3\n"},
      {"gpt-tiny",
       "mesh: {pp: 2}\nbatch: {global: 4, micro: 1}\npipeline: {schedule: 1f1b}\n"
       "recompute: full\n"},
  };
  auto given = cli::plan_source("", "", "adam", cli::DimFlags{});
  if (!given.is_ok()) throw std::runtime_error(given.status().message());
  int index = 0;
  for (const auto& [model, yaml] : plans) {
    auto scheme = parse_scheme(yaml, "seed");
    if (!scheme.is_ok()) throw std::runtime_error(scheme.status().message());
    auto built = cli::build_plan(model, *scheme, *given, "seed", false);
    if (!built.is_ok()) throw std::runtime_error(built.status().message());
    const fs::path dir = scratch / fmt::format("plan{}", index);
    const Status written = write_plan(built->plan, dir.string());
    if (!written.is_ok()) throw std::runtime_error(written.message());
    std::vector<std::string> parts = {read_bytes(dir / "manifest.yaml")};
    // The role files of mlp's plans only: they are compared, never parsed, and larger inputs
    // slow every mutation down; gpt-tiny's manifests alone still rebuild their plans.
    for (size_t k = 0; model == "mlp" && fs::exists(dir / fmt::format("role_{}.onnx", k)); ++k)
      parts.push_back(read_bytes(dir / fmt::format("role_{}.onnx", k)));
    corpus.add("plan_dir", fmt::format("{}.{}.packed", model, index++), pack(parts));
  }
}

}  // namespace
}  // namespace autopar::fuzz

int main(int argc, char** argv) {
  using namespace autopar::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT\n");
    return 2;
  }
  try {
    const fs::path out(argv[1]);
    fs::remove_all(out);
    Corpus corpus(out);
    add_models(corpus);
    add_tensors(corpus);
    add_plans(corpus, out / ".scratch");
    fs::remove_all(out / ".scratch");
    corpus.add_files("scheme", "configs/schemes", ".yaml");
    corpus.add_files("scheme", "tests/mpi/schemes", ".yaml");
    corpus.add_files("space", "configs/spaces", ".yaml");
    corpus.add_files("hardware_profile", "configs/hw", ".yaml");
    corpus.add_files("hardware_profile", "tests/data/hw", ".yaml");
    corpus.add_files("regress_suite", "configs/regress", ".yaml");
    corpus.add_files("regress_baseline", "bench/baselines", ".json");
    corpus.add_files("validation_suite", "configs/validation", ".yaml");
    corpus.report();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
