// Property test of the transformation compiler: random schemes over 2 to 8 devices for each
// tiny model, every plan verified against one device. A failure prints the seed and the
// scheme; AUTOPAR_PLAN_SEED=<seed> runs that one case alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "testing/testing.h"

namespace autopar {
namespace {

using testing::run_autopar;

struct Model {
  const char* name;
  int layers;
  bool conv;        // sp splits image height; transformers split the sequence
  bool cp = false;  // context parallelism (attention fused, ring or all-to-all)
};

constexpr Model kModels[] = {
    {"mlp", 4, false},        {"gpt-tiny", 4, false}, {"bert-tiny", 4, false},
    {"resnet-tiny", 4, true}, {"vit-tiny", 4, false}, {"llama-tiny", 4, false, true},
};
constexpr int kNumModels = static_cast<int>(std::size(kModels));
constexpr int kSchemesPerModel = 20;

struct Drawn {
  std::string yaml;
  std::map<std::string, int> mesh;
  std::string schedule;
  int zero = 0;
  std::string recompute;
  std::string tensor;
  std::string precision;
  bool inference = false;  // --loss none
  std::string context;     // under cp > 1
};

// One random scheme; every paradigm appears alone and mixed across seeds (checked below).
Drawn random_scheme(const Model& model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const int devices = 1 << (1 + pick(3));  // 2, 4, 8
  // Split the devices over the axes, one factor of 2 at a time.
  std::map<std::string, int> mesh = {{"pp", 1}, {"dp", 1}, {"tp", 1}, {"sp", 1}, {"cp", 1}};
  const char* axes[] = {"pp", "dp", "tp", "sp", "cp"};
  const bool sp_ok = model.name != std::string("mlp");
  for (int d = devices; d > 1; d /= 2) {
    std::string axis;
    do {
      axis = axes[pick(model.cp ? 5 : 4)];
    } while ((axis == "sp" && !sp_ok) || (axis == "pp" && mesh["pp"] * 2 > model.layers));
    mesh[axis] *= 2;
  }
  const int pp = mesh["pp"];
  std::string schedule = "1f1b";
  int chunks = 1;
  if (pp > 1) {
    const int s = pick(3);
    schedule = s == 0 ? "gpipe" : s == 1 ? "1f1b" : "interleaved";
    if (schedule == "interleaved") {
      if (pp * 2 <= model.layers)
        chunks = 2;
      else
        schedule = "1f1b";
    }
  }
  int microbatches = 1 << pick(3);  // 1, 2, 4
  if (schedule == "interleaved") microbatches = pp * (1 + pick(2));
  const int micro = 1 + pick(2);
  const int global = mesh["dp"] * micro * microbatches;
  const int zero = mesh["dp"] > 1 ? pick(4) : 0;
  const char* recompute_names[] = {"none", "selective", "nonparametric", "full"};
  const char* tensor_names[] = {"megatron", "megatron-sp", "auto"};
  const char* tensor = tensor_names[pick(3)];
  const char* recompute = recompute_names[pick(4)];
  const char* precision = pick(4) == 0 ? "bf16" : "fp32";
  const bool inference = pick(6) == 0;
  const std::string context = mesh["cp"] > 1 ? (pick(2) == 0 ? "ring" : "all-to-all") : "";
  std::string text = "mesh: {";
  bool first = true;
  for (const char* axis : axes) {
    if (mesh[axis] == 1) continue;
    text += fmt::format("{}{}: {}", first ? "" : ", ", axis, mesh[axis]);
    first = false;
  }
  text += "}\n";
  text += fmt::format("batch: {{global: {}, micro: {}}}\n", global, micro);
  text += fmt::format("pipeline: {{schedule: {}, chunks: {}}}\n", schedule, chunks);
  text += fmt::format("tensor: {}\nzero: {}\nrecompute: {}\nprecision: {}\n", tensor, zero,
                      recompute, precision);
  if (!context.empty()) text += fmt::format("context: {}\n", context);
  return {text, mesh, schedule, zero, recompute, tensor, precision, inference, context};
}

void verify_one(const Model& model, uint64_t seed) {
  const Drawn drawn = random_scheme(model, seed);
  const std::string& scheme = drawn.yaml;
  const std::string dir = testing::temp_dir(fmt::format("plan_property_{}_{}", model.name, seed));
  {
    std::ofstream out(dir + "/scheme.yaml");
    out << scheme;
  }
  const std::string repro = fmt::format(
      "seed {} ({}), reproduce with AUTOPAR_PLAN_SEED={} ctest -R PlanProperty, or\n"
      "  autopar transform {} --scheme {}/scheme.yaml -o {}/plan{} && autopar verify {}/plan\n{}",
      seed, model.name, seed, model.name, dir, dir, drawn.inference ? " --loss none" : "", dir,
      scheme);
  std::vector<std::string> transform = {"transform",          model.name, "--scheme",
                                        dir + "/scheme.yaml", "-o",       dir + "/plan"};
  if (drawn.inference) {
    transform.push_back("--loss");
    transform.push_back("none");
  }
  auto t = run_autopar(transform);
  ASSERT_EQ(t.exit_code, 0) << t.err << "\n" << repro;
  auto v = run_autopar({"verify", dir + "/plan", "--json"});
  ASSERT_EQ(v.exit_code, 0) << v.out << v.err << "\n" << repro;
  auto json = nlohmann::json::parse(v.out);
  EXPECT_TRUE(json["ok"].get<bool>()) << v.out << repro;
  EXPECT_LE(json["worst_relative_error"].get<double>(), 1e-6) << v.out << repro;
  EXPECT_GT(json["compared"].get<int>(), drawn.inference ? 0 : 8) << repro;
  // verify checks the float64 instance; a bf16 plan as stored must run too.
  if (drawn.precision != "fp32" && !drawn.inference) {
    auto r = run_autopar({"run", dir + "/plan", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err << "\n" << repro;
    EXPECT_TRUE(std::isfinite(nlohmann::json::parse(r.out)["losses"][0].get<double>())) << repro;
  }
}

uint64_t seed_of(int model, int i) { return static_cast<uint64_t>(model) * 1000 + i; }

// The drawn schemes cover every paradigm alone and mixed, 2-D and 3-D meshes, every schedule,
// ZeRO 1 to 3, both recomputations, every tensor strategy, sp on conv nets and transformers,
// and both forms of cp.
TEST(PlanPropertyDraws, CoverEveryParadigm) {
  std::set<std::string> seen;
  for (int m = 0; m < kNumModels; ++m) {
    for (int i = 0; i < kSchemesPerModel; ++i) {
      const Drawn d = random_scheme(kModels[m], seed_of(m, i));
      int axes = 0;
      for (const auto& [axis, size] : d.mesh) axes += size > 1;
      for (const auto& [axis, size] : d.mesh) {
        if (size > 1 && axes == 1) seen.insert(axis + " alone");
      }
      if (axes >= 2) seen.insert("2-D or more");
      if (axes >= 3) seen.insert("3-D");
      if (d.mesh.at("sp") > 1) seen.insert(kModels[m].conv ? "sp conv" : "sp transformer");
      if (d.mesh.at("pp") > 1) seen.insert("schedule " + d.schedule);
      seen.insert(fmt::format("zero {}", d.zero));
      seen.insert("recompute " + d.recompute);
      if (d.mesh.at("tp") > 1) seen.insert("tensor " + d.tensor);
      seen.insert("precision " + d.precision);
      if (d.inference) seen.insert("inference");
      if (!d.context.empty()) seen.insert("cp " + d.context);
    }
  }
  for (const char* want : {"dp alone",
                           "tp alone",
                           "pp alone",
                           "sp alone",
                           "2-D or more",
                           "3-D",
                           "sp conv",
                           "sp transformer",
                           "schedule gpipe",
                           "schedule 1f1b",
                           "schedule interleaved",
                           "zero 1",
                           "zero 2",
                           "zero 3",
                           "recompute selective",
                           "recompute nonparametric",
                           "recompute full",
                           "tensor megatron",
                           "tensor megatron-sp",
                           "tensor auto",
                           "precision bf16",
                           "inference",
                           "cp ring",
                           "cp all-to-all"}) {
    EXPECT_TRUE(seen.count(want)) << want;
  }
}

class PlanProperty : public ::testing::TestWithParam<int> {};

TEST_P(PlanProperty, RandomSchemesVerify) {
  const Model& model = kModels[GetParam()];
  if (const char* only = std::getenv("AUTOPAR_PLAN_SEED")) {
    const uint64_t seed = std::strtoull(only, nullptr, 10);
    if (seed / 1000 == static_cast<uint64_t>(GetParam())) verify_one(model, seed);
    return;
  }
  for (int i = 0; i < kSchemesPerModel; ++i) {
    verify_one(model, seed_of(GetParam(), i));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PlanProperty, ::testing::Range(0, kNumModels),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string name = kModels[info.param].name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace autopar
