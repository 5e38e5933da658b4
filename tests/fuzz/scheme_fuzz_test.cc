// A short fuzz run of schemes: random and mutated scheme YAML parses or fails with a Status,
// and every scheme that parses lowers mlp or gpt-tiny or fails with a Status, never crashing
// or hanging.
#include <random>

#include <gtest/gtest.h>

#include "autopar/parallel/lowering.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

constexpr int kShards = 4;
constexpr int kSchemesPerShard = 400;

class SchemeMaker {
 public:
  explicit SchemeMaker(uint64_t seed) : rng_(seed) {}

  int64_t pick(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng_); }

  std::string number() {
    static const char* const kNumbers[] = {"1",   "2",  "3",  "4",   "8",
                                           "0",   "-1", "16", "1e9", "9223372036854775807",
                                           "2.5", "x",  "[]", "{}"};
    return kNumbers[pick(14)];
  }
  // A valid word mostly, a wrong one in one case out of ten.
  std::string word(std::initializer_list<const char*> good) {
    std::vector<std::string> words(good.begin(), good.end());
    if (pick(10) > 0) return words[pick(static_cast<int64_t>(words.size()))];
    static const char* const kBad[] = {"bogus", "\"\"", "[1, 2]"};
    return kBad[pick(3)];
  }
  bool junk() { return pick(10) == 0; }

  std::string scheme() {
    std::string y;
    if (pick(10) > 0) {
      y += "mesh: {";
      const int axes = static_cast<int>(pick(4));
      const char* names[] = {"pp", "dp", "tp", "sp", "foo", "dp"};
      for (int i = 0; i < axes; ++i) {
        y += fmt::format("{}{}: {}", i ? ", " : "", names[pick(6)],
                         junk() ? number() : std::to_string(1 << pick(3)));
      }
      y += "}\n";
    }
    if (junk()) y += "devices: " + number() + "\n";
    if (pick(2) == 0) {
      y += fmt::format("batch: {{global: {}, micro: {}}}\n",
                       junk() ? number() : std::to_string(1 << pick(5)),
                       junk() ? number() : std::to_string(1 << pick(3)));
    }
    if (pick(2) == 0) {
      std::string stages = "auto";
      if (pick(3) == 0) {
        stages = fmt::format("[[0, {}], [{}, {}]]", pick(5) - 1, pick(5) - 1, pick(6) - 1);
      }
      y += fmt::format("pipeline: {{schedule: {}, chunks: {}, stages: {}}}\n",
                       word({"gpipe", "1f1b", "interleaved"}),
                       junk() ? number() : std::to_string(1 + pick(3)), stages);
    }
    if (pick(2) == 0) {
      if (pick(4) == 0) {
        y += fmt::format("tensor:\n  default: {}\n  \"{}\": \"{}\"\n",
                         word({"megatron", "megatron-sp", "auto"}), pick(2) ? "fc.*/MatMul" : "*",
                         pick(2) ? "[_, tp]" : "[dp, _] partial(tp)");
      } else {
        y += "tensor: " + word({"megatron", "megatron-sp", "auto"}) + "\n";
      }
    }
    if (pick(2) == 0) y += "zero: " + (junk() ? number() : std::to_string(pick(4))) + "\n";
    if (pick(2) == 0) y += "recompute: " + word({"none", "selective", "full"}) + "\n";
    if (pick(3) == 0) y += "precision: " + word({"fp32", "bf16", "fp16"}) + "\n";
    // Byte-level damage now and then.
    if (pick(20) == 0 && !y.empty())
      y.erase(static_cast<size_t>(pick(static_cast<int64_t>(y.size()))), 1);
    if (pick(30) == 0) y.insert(static_cast<size_t>(pick(static_cast<int64_t>(y.size()) + 1)), "{");
    return y;
  }

 private:
  std::mt19937_64 rng_;
};

class SchemeFuzz : public ::testing::TestWithParam<int> {};

TEST_P(SchemeFuzz, SchemesParseAndLowerOrFailCleanly) {
  SchemeMaker maker(static_cast<uint64_t>(GetParam()) * 7919 + 11);
  int parsed = 0, lowered = 0;
  for (int i = 0; i < kSchemesPerShard; ++i) {
    const std::string yaml = maker.scheme();
    auto scheme = parse_scheme(yaml, "fuzz.yaml");
    if (!scheme.is_ok()) {
      EXPECT_FALSE(scheme.status().message().empty()) << yaml;
      continue;
    }
    ++parsed;
    if (scheme->mesh.num_devices() > 16) continue;           // keep the run short
    const int which = static_cast<int>(maker.pick(4) == 0);  // mostly mlp
    const int64_t dp = scheme->dp();
    const int64_t global = scheme->global_batch > 0 ? scheme->global_batch : 4 * dp;
    if (global % dp != 0) continue;
    Scheme resolved = *scheme;
    resolved.global_batch = global;
    if (resolved.micro_batch == 0) resolved.micro_batch = global / dp;
    if (resolved.micro_batch <= 0 || (global / dp) % resolved.micro_batch != 0) continue;
    ZooOptions zoo;
    zoo.batch = dp * resolved.micro_batch;
    if (zoo.batch > 64) continue;
    auto model = build_zoo_model(which ? "gpt-tiny" : "mlp", zoo);
    ASSERT_TRUE(model.is_ok());
    if (!validate_scheme(resolved, *model, "fuzz.yaml").is_ok()) continue;
    auto plan = lower(*model, resolved, LoweringOptions{});
    if (plan.is_ok()) {
      ++lowered;
      EXPECT_EQ(plan->device_role.size(), static_cast<size_t>(resolved.mesh.num_devices()));
    } else {
      EXPECT_FALSE(plan.status().message().empty()) << yaml;
    }
  }
  RecordProperty("parsed", parsed);
  RecordProperty("lowered", lowered);
  // The generator must reach the lowering, not only the parser.
  EXPECT_GT(parsed, kSchemesPerShard / 10);
  EXPECT_GT(lowered, kSchemesPerShard / 20);
}

INSTANTIATE_TEST_SUITE_P(Shards, SchemeFuzz, ::testing::Range(0, kShards));

}  // namespace
}  // namespace autopar
