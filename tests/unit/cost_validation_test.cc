// The validation suite's reader and the step times published figures imply. The FLOP formulas
// are checked against the publications' own pairs of figures: a formula that turns a paper's
// MFU into its iteration time (or its TFLOP/s into its training days) is the paper's formula.
#include "autopar/cost/validation.h"

#include <gtest/gtest.h>

namespace autopar {
namespace {

// Korthikanti et al. 2022, Table 3 (models on 8·pp A100s, tp 8, batch = pp) and Table 5
// (sequence parallelism + selective recompute: iteration time and MFU).
struct KorthikantiRow {
  const char* name;
  int64_t layers, hidden, heads, pp;
  double iteration_s, mfu;
};
constexpr KorthikantiRow kKorthikanti[] = {{"22b", 48, 6144, 64, 1, 1.10, 0.415},
                                           {"175b", 96, 12288, 96, 8, 13.75, 0.514},
                                           {"530b", 105, 20480, 128, 35, 37.83, 0.560},
                                           {"1t", 128, 25600, 160, 64, 71.49, 0.563}};

std::string korthikanti_run(const KorthikantiRow& row, const std::string& published) {
  const int64_t batch = row.pp == 1 ? 4 : row.pp * 8;
  return fmt::format(
      "publication: Korthikanti et al. 2022\n"
      "runs:\n"
      "  - name: k-{}\n"
      "    source: Table 5\n"
      "    model: {{zoo: gpt, layers: {}, hidden: {}, heads: {}, seq: 2048, vocab: 51200}}\n"
      "    hw: dgx-a100-80g\n"
      "    nodes: {}\n"
      "    scheme: {{mesh: {{pp: {}, tp: 8}}, batch: {{global: {}, micro: 1}}}}\n"
      "    published: {}\n",
      row.name, row.layers, row.hidden, row.heads, row.pp, row.pp, batch, published);
}

TEST(Validation, KorthikantiModelFlopsTurnEachMfuIntoItsIterationTime) {
  for (const KorthikantiRow& row : kKorthikanti) {
    SCOPED_TRACE(row.name);
    // Table 3's batch sizes: 4 for 22B, then 64, 280, 512 (= 8 · pp).
    auto runs = parse_validation_file(
        korthikanti_run(row,
                        fmt::format("{{mfu: {}, flops: korthikanti, peak_tflops: 312}}", row.mfu)),
        "k.yaml");
    ASSERT_TRUE(runs.is_ok()) << runs.status().message();
    ASSERT_EQ(runs->size(), 1u);
    if (row.pp == 1) {
      // 22B: one node, batch 4.
      EXPECT_EQ((*runs)[0].scheme.global_batch, 4);
    }
    auto seconds = published_step_seconds((*runs)[0], 0);
    ASSERT_TRUE(seconds.is_ok()) << seconds.status().message();
    // MFU is printed to 3 digits, so the time it implies agrees to about 0.2%.
    EXPECT_NEAR(*seconds / row.iteration_s, 1.0, 0.005) << *seconds;
  }
}

TEST(Validation, NarayananFlopsGiveTheirTrainingDaysForGpt3) {
  // Narayanan et al. 2021, §5.1: GPT-3 175B on 1024 A100s at batch 1536 runs at 140 TFLOP/s
  // per GPU, and 300 billion tokens take "about 34 days" (the paper's estimate 8·T·P/(n·X)
  // leaves out eq. 3's s/6h and V/16lh terms, 2% here).
  auto runs = parse_validation_file(
      "publication: Narayanan et al. 2021\n"
      "runs:\n"
      "  - name: gpt3\n"
      "    source: §5.1\n"
      "    model: {zoo: gpt, layers: 96, hidden: 12288, heads: 96, seq: 2048, vocab: 51200}\n"
      "    hw: dgx-a100-80g\n"
      "    nodes: 128\n"
      "    scheme: {mesh: {dp: 16, pp: 8, tp: 8}, batch: {global: 1536, micro: 1}}\n"
      "    published: {tflops_per_gpu: 140, flops: narayanan}\n",
      "n.yaml");
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  auto seconds = published_step_seconds((*runs)[0], 0);
  ASSERT_TRUE(seconds.is_ok()) << seconds.status().message();
  const double steps = 300e9 / (1536.0 * 2048.0);
  EXPECT_NEAR(*seconds * steps / 86400.0, 34.0 * 1.02, 0.2) << *seconds;
}

TEST(Validation, ThroughputsAreOverTheWholeStep) {
  auto runs = parse_validation_file(
      "publication: p\n"
      "runs:\n"
      "  - name: images\n"
      "    source: t\n"
      "    model: {zoo: resnet50}\n"
      "    hw: dgx-a100-80g\n"
      "    nodes: 1\n"
      "    scheme: {mesh: {dp: 8}, batch: {global: 2048}}\n"
      "    published: {samples_per_s: 16000}\n"
      "  - name: tokens\n"
      "    source: t\n"
      "    model: {zoo: gpt, layers: 2, hidden: 64, heads: 4, seq: 2048, vocab: 256}\n"
      "    hw: dgx-h100\n"
      "    nodes: 1\n"
      "    scheme: {mesh: {dp: 8}, batch: {global: 48, micro: 6}, zero: 3, precision: bf16}\n"
      "    published: {tokens_per_s: 85144, memory_gib: 60}\n"
      "    assumed: none\n",
      "t.yaml");
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].scheme.micro_batch, 256);  // global / dp when not given
  EXPECT_DOUBLE_EQ(*published_step_seconds((*runs)[0], 0), 2048.0 / 16000.0);
  EXPECT_DOUBLE_EQ(*published_step_seconds((*runs)[1], 0), 48.0 * 2048.0 / 85144.0);
  EXPECT_EQ((*runs)[1].scheme.zero, 3);
  EXPECT_EQ((*runs)[1].published.memory_gib, 60.0);
  EXPECT_EQ((*runs)[1].assumed, "none");
  EXPECT_EQ((*runs)[1].publication, "p");
}

TEST(Validation, BigScienceCountsEightFlopsPerParameterAndToken) {
  auto runs = parse_validation_file(
      "publication: p\n"
      "runs:\n"
      "  - name: b\n"
      "    source: t\n"
      "    model: {zoo: gpt, layers: 2, hidden: 64, heads: 4, seq: 2048, vocab: 256}\n"
      "    hw: dgx-a100-80g\n"
      "    nodes: 48\n"
      "    scheme: {mesh: {dp: 8, pp: 12, tp: 4}, batch: {global: 2048, micro: 2}}\n"
      "    published: {tflops_per_gpu: 149.02, flops: bigscience}\n",
      "b.yaml");
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  // BLOOM's log line: 176,247M parameters, 105.22 s per iteration at 149.02 TFLOP/s.
  const double seconds = *published_step_seconds((*runs)[0], 176'247'271'424);
  EXPECT_NEAR(seconds, 105.22, 105.22 * 0.02);
}

void expect_error(const std::string& run_fields, const std::string& message) {
  auto runs = parse_validation_file(
      "publication: p\nruns:\n  - name: r\n    source: t\n" + run_fields, "v.yaml");
  ASSERT_FALSE(runs.is_ok());
  EXPECT_EQ(runs.status().message(), message);
}

constexpr const char* kModel =
    "    model: {zoo: gpt, layers: 2, hidden: 64, heads: 4, seq: 16, vocab: 256}\n"
    "    hw: dgx-a100-80g\n    nodes: 1\n";

TEST(Validation, ErrorsNameTheFileRunAndField) {
  expect_error(std::string(kModel) + "    scheme: {mesh: {dp: 2}, batch: {global: 8}}\n" +
                   "    published: {iteration_s: 1, samples_per_s: 2}\n",
               "v.yaml: runs[0] (r).published: expected exactly one of iteration_s, "
               "tflops_per_gpu, mfu, tokens_per_s, samples_per_s (given: iteration_s, "
               "samples_per_s)");
  expect_error(std::string(kModel) + "    scheme: {mesh: {dp: 2}, batch: {global: 8}}\n" +
                   "    published: {tflops_per_gpu: 100}\n",
               "v.yaml: runs[0] (r).published.flops: missing: tflops_per_gpu needs the "
               "publication's FLOP formula (narayanan, korthikanti or bigscience)");
  expect_error(std::string(kModel) + "    scheme: {mesh: {dp: 2}, batch: {global: 8}}\n" +
                   "    published: {mfu: 45, flops: korthikanti, peak_tflops: 312}\n",
               "v.yaml: runs[0] (r).published.mfu: 45 is not a fraction");
  expect_error(
      std::string(kModel) + "    scheme: {mesh: {dp: 2}}\n" + "    published: {iteration_s: 1}\n",
      "v.yaml: runs[0] (r).scheme.batch.global: missing: a run's step has a size");
  expect_error(std::string(kModel) + "    scheme: {mesh: {dp: 3}, batch: {global: 8}}\n" +
                   "    published: {iteration_s: 1}\n",
               "v.yaml: runs[0] (r).scheme: batch.global: 8 is not divisible by dp = 3");
  expect_error(
      "    model: {zoo: gpt-tiny}\n    hw: dgx-a100-80g\n    nodes: 9000000000000000000\n"
      "    scheme: {mesh: {dp: 2}, batch: {global: 8}}\n"
      "    published: {iteration_s: 1}\n",
      "v.yaml: runs[0] (r).nodes: 9000000000000000000 is more than 1000000");
  expect_error("    model: {zoo: mixtral, layers: 2}\n    hw: x\n    nodes: 1\n",
               "v.yaml: runs[0] (r).model.zoo: 'mixtral' is not a zoo model (autopar zoo --list)");
  expect_error(std::string(kModel) + "    scheme: {mesh: {dp: 2}, batch: {global: 8}}\n" +
                   "    published: {iteration_s: 1}\n    year: 2021\n",
               "v.yaml: runs[0].year: unknown field (known: name, source, model, hw, nodes, "
               "scheme, published, assumed)");
}

TEST(Validation, FormulasNeedTheShapesTheyCount) {
  auto runs = parse_validation_file(
      "publication: p\nruns:\n  - name: r\n    source: t\n"
      "    model: {zoo: gpt3-1.3b}\n    hw: dgx-a100-80g\n    nodes: 1\n"
      "    scheme: {mesh: {dp: 8}, batch: {global: 8}}\n"
      "    published: {tflops_per_gpu: 100, flops: narayanan}\n",
      "v.yaml");
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  auto seconds = published_step_seconds((*runs)[0], 0);
  ASSERT_FALSE(seconds.is_ok());
  EXPECT_EQ(seconds.status().message(),
            "v.yaml: r: model: published.flops: narayanan needs layers, hidden, seq and vocab");
}

}  // namespace
}  // namespace autopar
