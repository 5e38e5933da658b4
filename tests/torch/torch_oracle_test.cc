// PyTorch as the oracle (label torch): models built in PyTorch with seeded random weights
// (tests/torch/torch_models.py: an MLP, a small CNN, GPT-2-style transformers (one as Hugging
// Face writes it), a BERT-style encoder, a ViT, torchvision's ResNet-18 and MobileNetV2),
// exported by torch.onnx.export at opsets 13 to 17, with BatchNorm folded (eval) and kept
// (training-preserving). Each export runs on autopar against PyTorch's own outputs; one
// training step (SGD with momentum, Adam) in float64 matches torch.optim's, loss and every
// parameter and BatchNorm statistic; its training plans under data, tensor (megatron and
// auto), sequence and pipeline parallelism and ZeRO verify against one device, and Megatron's
// recipe gives the column/row layout. Skips, saying why, where no python3 with torch is
// installed.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "autopar/onnx/onnx_tensor.h"
#include "testing/testing.h"

namespace autopar {
namespace {

const std::string kPython = AUTOPAR_TORCH_PYTHON;

#define SKIP_WITHOUT_TORCH()                                                            \
  do {                                                                                  \
    if (kPython.empty())                                                                \
      GTEST_SKIP() << "no python3 with torch (Debian: python3-torch python3-torchvision)"; \
  } while (0)

// Exports `model` at `opset` into a fresh folder: model.onnx, inputs/, expected/.
std::string export_model(const std::string& model, int opset, const std::string& mode) {
  const std::string dir =
      testing::temp_dir("torch_" + model + "_" + std::to_string(opset) + "_" + mode);
  const std::string log = dir + "/export.log";
  const std::string command = kPython + " " + testing::source_path("tests/torch/torch_models.py") +
                              " " + model + " " + std::to_string(opset) + " " + dir +
                              " --mode " + mode + " >" + log + " 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ADD_FAILURE() << "export of " << model << " at opset " << opset << " failed:\n" << text;
    return "";
  }
  return dir;
}

// ‖a − b‖ / ‖b‖ over every element; NaN anywhere is infinite.
double relative_error(const Tensor& a, const Tensor& b) {
  if (a.dims() != b.dims()) return INFINITY;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    const double x = a.float_at(i), y = b.float_at(i);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Whether `a` is `b` to `relative` (of b's norm), with an absolute floor per element for
// values that are zero in exact arithmetic (a BatchNorm bias whose gradient vanishes
// because the next BatchNorm removes any per-channel shift; that BatchNorm's running mean of
// a zero-mean input), where both sides hold only rounding.
bool close_to(const Tensor& a, const Tensor& b, double relative, double absolute) {
  if (a.dims() != b.dims()) return false;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    const double x = a.float_at(i), y = b.float_at(i);
    if (std::isnan(x) || std::isnan(y)) return false;
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff) <=
         relative * std::sqrt(norm) + absolute * std::sqrt(static_cast<double>(b.num_elements()));
}

int64_t batch_of(const std::string& model) { return model == "mlp" || model == "cnn" ? 4 : 2; }

struct Export {
  std::string model;
  int opset;
  std::string mode;  // eval: BatchNorm folded; train: kept (TrainingMode.PRESERVE)
};

std::string export_name(const ::testing::TestParamInfo<Export>& info) {
  return info.param.model + "_opset" + std::to_string(info.param.opset) + "_" + info.param.mode;
}

class TorchExport : public ::testing::TestWithParam<Export> {};

// autopar's forward pass of the export against PyTorch's, in float32.
TEST_P(TorchExport, RunsAsPyTorchDoes) {
  SKIP_WITHOUT_TORCH();
  const Export& e = GetParam();
  const std::string dir = export_model(e.model, e.opset, e.mode);
  ASSERT_FALSE(dir.empty());
  auto run = testing::run_autopar({"run", dir + "/model.onnx", "--inputs", dir + "/inputs",
                                   "--outputs", dir + "/outputs"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  int compared = 0;
  for (int i = 0; std::filesystem::exists(dir + "/expected/output_" + std::to_string(i) + ".pb");
       ++i) {
    const std::string file = "/output_" + std::to_string(i) + ".pb";
    auto expected = read_tensor_file(dir + "/expected" + file);
    auto got = read_tensor_file(dir + "/outputs" + file);
    ASSERT_TRUE(expected.is_ok()) << expected.status().message();
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_LE(relative_error(*got, *expected), 1e-5) << e.model << " output " << i;
    ++compared;
  }
  EXPECT_GE(compared, 1);
}

// Training plans of the export verify against one device (float64): data, tensor (Megatron's
// recipe and autopar's own), both with ZeRO-3, sequence and pipeline parallelism.
TEST_P(TorchExport, PlansVerify) {
  SKIP_WITHOUT_TORCH();
  const Export& e = GetParam();
  const std::string dir = export_model(e.model, e.opset, e.mode);
  ASSERT_FALSE(dir.empty());
  const int64_t batch = batch_of(e.model);
  std::vector<std::pair<std::string, std::string>> schemes = {
      {"dp2", "mesh: {dp: 2}\n"},
      {"tp2-megatron", "mesh: {tp: 2}\ntensor: megatron\n"},
      {"tp2-auto", "mesh: {tp: 2}\ntensor: auto\n"},
      {"dp2-tp2-zero3", "mesh: {dp: 2, tp: 2}\ntensor: megatron\nzero: 3\n"},
      {"sp2", "mesh: {sp: 2}\n"},
      {"pp2", "mesh: {pp: 2}\nbatch: {global: " + std::to_string(batch) +
                  ", micro: 1}\npipeline: {schedule: 1f1b, stages: auto}\n"},
  };
  // An MLP has no sequence or image dims to split; the small sequential CNN and the MLP have
  // no layers autopar finds to stage (named blocks: transformers' and torchvision's). ResNet-18
  // verifies in float64 at about 17 s a plan here: two schemes cover its tensor and pipeline
  // cases.
  auto drop = [&](const std::string& name) {
    schemes.erase(std::remove_if(schemes.begin(), schemes.end(),
                                 [&](const auto& s) { return s.first == name; }),
                  schemes.end());
  };
  if (e.model == "mlp") drop("sp2");
  if (e.model == "mlp" || e.model == "cnn") drop("pp2");
  if (e.model == "resnet18") {
    for (const char* name : {"dp2", "tp2-megatron", "tp2-auto", "sp2"}) drop(name);
  }
  for (const auto& [name, text] : schemes) {
    const std::string scheme = dir + "/" + name + ".yaml";
    std::ofstream(scheme) << text;
    const std::string plan = dir + "/plan-" + name;
    auto t = testing::run_autopar({"transform", dir + "/model.onnx", "--batch",
                                   std::to_string(batch), "--scheme", scheme, "-o", plan});
    ASSERT_EQ(t.exit_code, 0) << e.model << " " << name << ": " << t.err;
    auto v = testing::run_autopar({"verify", plan, "--json"});
    ASSERT_EQ(v.exit_code, 0) << e.model << " " << name << ": " << v.out << v.err;
    const auto json = nlohmann::json::parse(v.out);
    EXPECT_TRUE(json["ok"].get<bool>()) << e.model << " " << name << ": " << v.out;
  }
}

// Exports `model` for the training-step oracle (torch_models.py --step) into a fresh folder.
std::string export_step(const std::string& model, int opset) {
  const std::string dir = testing::temp_dir("torch_step_" + model + "_" + std::to_string(opset));
  const std::string log = dir + "/export.log";
  const std::string command = kPython + " " + testing::source_path("tests/torch/torch_models.py") +
                              " " + model + " " + std::to_string(opset) + " " + dir +
                              " --step >" + log + " 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ADD_FAILURE() << "step export of " << model << " failed:\n" << text;
    return "";
  }
  return dir;
}

// One training step of the float64 export, written by train-graph and run by `autopar run`,
// against the same step in PyTorch: the loss and every parameter and BatchNorm statistic
// after torch.optim.SGD (lr 0.1, momentum 0.9) and torch.optim.Adam (lr 1e-3). BatchNorm's
// running variance is PyTorch's (unbiased) with --bn-running-var unbiased and ONNX's (the
// population variance) by default.
class TorchTrainingStep : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchTrainingStep, MatchesPyTorchsOptimizers) {
  SKIP_WITHOUT_TORCH();
  const std::string& model = GetParam();
  const std::string dir = export_step(model, 17);
  ASSERT_FALSE(dir.empty());
  const std::string batch = std::to_string(batch_of(model));
  struct Case {
    std::string name, expected;
    std::vector<std::string> flags;
    bool unbiased;
  };
  std::vector<Case> cases = {
      {"sgd", "sgd", {"--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"}, true},
      {"adam", "adam", {"--optimizer", "adam", "--lr", "0.001"}, true}};
  // ONNX's running variance on the small CNN (ResNet-18's and MobileNetV2's steps take about
  // 15 s each here).
  if (model == "cnn") {
    cases.push_back(
        {"sgd-biased", "sgd", {"--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"}, false});
  }
  for (const Case& c : cases) {
    const std::string step = dir + "/" + c.name + ".onnx";
    std::vector<std::string> args = {"train-graph", dir + "/model.onnx", "--batch", batch, "-o",
                                     step, "--bn-running-var", c.unbiased ? "unbiased" : "biased"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    auto t = testing::run_autopar(args);
    ASSERT_EQ(t.exit_code, 0) << model << " " << c.name << ": " << t.err;
    const std::string out = dir + "/out-" + c.name;
    auto r = testing::run_autopar(
        {"run", step, "--inputs", dir + "/inputs", "--outputs", out, "--json"});
    ASSERT_EQ(r.exit_code, 0) << model << " " << c.name << ": " << r.err;
    const auto outputs = nlohmann::json::parse(r.out)["outputs"];
    const std::string expected = dir + "/expected_" + c.expected + "/";
    std::set<std::string> vanishing;  // gradients that are rounding only
    {
      std::ifstream in(dir + "/vanishing_" + c.expected + ".txt");
      for (std::string line; std::getline(in, line);) vanishing.insert(line);
    }
    int compared = 0, running_vars = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string name = outputs[i]["name"].get<std::string>();
      const std::string suffix = ".updated";
      if (name.size() > suffix.size() && name.ends_with(suffix))
        name.resize(name.size() - suffix.size());
      const bool running_var = name.ends_with(".running_var");
      std::string file = expected + name + (running_var && !c.unbiased ? ".biased" : "") + ".pb";
      if (!std::filesystem::exists(file)) continue;  // optimizer state (momenta, moments, step)
      auto want = read_tensor_file(file);
      auto got = read_tensor_file(out + "/output_" + std::to_string(i) + ".pb");
      ASSERT_TRUE(want.is_ok()) << want.status().message();
      ASSERT_TRUE(got.is_ok()) << got.status().message();
      // float64 on both sides: about 1e-12 for most, up to 3e-9 for the CNNs, whose last
      // BatchNorms normalise 2 values per channel (batch 2 at 1×1) and amplify rounding.
      // Adam's first step, lr·g/(|g| + ε), amplifies it further where |g| is near ε, and
      // turns a vanishing gradient's rounding (1e-17) into steps of up to lr·1e-7.
      const bool adam = c.name == "adam";
      ++compared;
      running_vars += running_var;
      if (adam && vanishing.count(name)) {
        // Adam's step of a rounding-only gradient is any value up to lr: only bounded.
        EXPECT_TRUE(close_to(*got, *want, 0.0, 2e-3)) << model << " adam: " << name;
        continue;
      }
      EXPECT_TRUE(close_to(*got, *want, adam ? 1e-5 : 1e-8, adam ? 1e-10 : 1e-12))
          << model << " " << c.name << ": " << name << ": relative error "
          << relative_error(*got, *want);
    }
    // Every parameter and statistic PyTorch has (and the loss) was compared.
    int expected_files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(expected)) {
      expected_files += !entry.path().string().ends_with(".biased.pb");
    }
    EXPECT_EQ(compared, expected_files) << model << " " << c.name;
    if (model == "cnn" || model == "resnet18" || model == "mobilenet_v2")
      EXPECT_GT(running_vars, 0) << model;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TorchTrainingStep,
                         ::testing::Values("mlp", "cnn", "gpt", "bert", "vit", "resnet18",
                                           "mobilenet_v2"));

// The layout of parameter `name` in a plan's manifest ("[tp]", "[_]"), or "" if absent.
std::string layout_in_manifest(const std::string& plan, const std::string& name) {
  std::ifstream in(plan + "/manifest.yaml");
  const std::string key = "{name: \"" + name + "\",";
  for (std::string line; std::getline(in, line);) {
    if (line.find(key) == std::string::npos) continue;
    const size_t at = line.find("layout: \"");
    if (at == std::string::npos) return "";
    const size_t begin = at + 9;
    return line.substr(begin, line.find('"', begin) - begin);
  }
  return "";
}

// Megatron's layout on PyTorch exports: Hugging Face GPT-2's blocks (Conv1D projections
// exported as Gemm on the flattened tokens and a Reshape back) get column-parallel c_attn
// (split per q, k and v) and c_fc, row-parallel c_proj and mlp.c_proj with their biases
// whole; at opset 14 (LayerNorm and the tanh GELU written out, fused on import) as at 17.
// Before, a Gemm could not be row-parallel (its bias could not be read as a partial sum),
// and the fused c_attn behind a Reshape was not split per part.
TEST(TorchMegatron, Gpt2GetsMegatronsLayout) {
  SKIP_WITHOUT_TORCH();
  for (int opset : {14, 17}) {
    const std::string dir = export_model("gpt2", opset, "eval");
    ASSERT_FALSE(dir.empty());
    auto inspect = testing::run_autopar({"inspect", dir + "/model.onnx", "--batch", "2", "--json"});
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    const auto fused = nlohmann::json::parse(inspect.out)["fused"];
    EXPECT_EQ(fused["layer_norms"], opset == 14 ? 5 : 0) << opset;  // ln_1, ln_2 per block, ln_f
    EXPECT_EQ(fused["tanh_gelus"], 2) << opset;
    EXPECT_EQ(fused["raised_opset_from"], opset == 14 ? nlohmann::json(14) : nlohmann::json())
        << opset;
    std::ofstream(dir + "/tp2.yaml") << "mesh: {tp: 2}\ntensor: megatron\n";
    const std::string plan = dir + "/plan-megatron";
    auto t = testing::run_autopar({"transform", dir + "/model.onnx", "--batch", "2", "--scheme",
                                   dir + "/tp2.yaml", "-o", plan});
    ASSERT_EQ(t.exit_code, 0) << opset << ": " << t.err;
    for (int block = 0; block < 2; ++block) {
      const std::string p = "h." + std::to_string(block);
      for (int part = 0; part < 3; ++part) {
        const std::string suffix = ".part" + std::to_string(part);
        EXPECT_EQ(layout_in_manifest(plan, p + ".c_attn.weight" + suffix), "[_, tp]") << opset;
        EXPECT_EQ(layout_in_manifest(plan, p + ".c_attn.bias" + suffix), "[tp]") << opset;
      }
      EXPECT_EQ(layout_in_manifest(plan, p + ".c_proj.weight"), "[tp, _]") << opset << " " << p;
      EXPECT_EQ(layout_in_manifest(plan, p + ".c_proj.bias"), "[_]") << opset << " " << p;
      EXPECT_EQ(layout_in_manifest(plan, p + ".c_fc.weight"), "[_, tp]") << opset << " " << p;
      EXPECT_EQ(layout_in_manifest(plan, p + ".c_fc.bias"), "[tp]") << opset << " " << p;
      EXPECT_EQ(layout_in_manifest(plan, p + ".mlp_proj.weight"), "[tp, _]") << opset << " " << p;
      EXPECT_EQ(layout_in_manifest(plan, p + ".mlp_proj.bias"), "[_]") << opset << " " << p;
    }
    auto v = testing::run_autopar({"verify", plan, "--json"});
    ASSERT_EQ(v.exit_code, 0) << opset << ": " << v.out << v.err;
    EXPECT_TRUE(nlohmann::json::parse(v.out)["ok"].get<bool>()) << opset << ": " << v.out;
  }
}

// nn.Sequential(Linear, ReLU, Linear) exports as two Gemms (weights [out, in]): the first
// splits its output features, the second its input features, its bias added once.
TEST(TorchMegatron, MlpOfGemmsIsColumnThenRowParallel) {
  SKIP_WITHOUT_TORCH();
  const std::string dir = export_model("mlp", 14, "eval");
  ASSERT_FALSE(dir.empty());
  std::ofstream(dir + "/tp2.yaml") << "mesh: {tp: 2}\ntensor: megatron\n";
  const std::string plan = dir + "/plan-megatron";
  auto t = testing::run_autopar({"transform", dir + "/model.onnx", "--batch", "4", "--scheme",
                                 dir + "/tp2.yaml", "-o", plan});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(layout_in_manifest(plan, "0.weight"), "[tp, _]");
  EXPECT_EQ(layout_in_manifest(plan, "0.bias"), "[tp]");
  EXPECT_EQ(layout_in_manifest(plan, "2.weight"), "[_, tp]");
  EXPECT_EQ(layout_in_manifest(plan, "2.bias"), "[_]");
  auto v = testing::run_autopar({"verify", plan, "--json"});
  ASSERT_EQ(v.exit_code, 0) << v.out << v.err;
  const auto json = nlohmann::json::parse(v.out);
  EXPECT_TRUE(json["ok"].get<bool>()) << v.out;
  EXPECT_LT(json["worst_relative_error"].get<double>(), 1e-12) << v.out;
}

INSTANTIATE_TEST_SUITE_P(
    Models, TorchExport,
    ::testing::Values(Export{"mlp", 13, "eval"}, Export{"mlp", 17, "eval"},
                      Export{"cnn", 13, "eval"}, Export{"cnn", 17, "train"},
                      Export{"gpt", 13, "eval"}, Export{"gpt", 17, "eval"},
                      Export{"gpt2", 14, "eval"},
                      Export{"bert", 14, "eval"}, Export{"vit", 17, "eval"},
                      Export{"resnet18", 13, "train"}, Export{"resnet18", 17, "eval"},
                      Export{"mobilenet_v2", 17, "eval"}),
    export_name);

}  // namespace
}  // namespace autopar
