// Search spaces and the search engine: parsing with one-line errors, the meshes a space
// allows, the stage partition, determinism, and the optimality gap of the fast search against
// the exhaustive one on small spaces.
#include <tbb/global_control.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>

#include <gtest/gtest.h>

#include "autopar/search/engine.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

HardwareProfile fixture_profile(int64_t nodes) {
  auto profile =
      read_hardware_profile(std::string(AUTOPAR_SOURCE_DIR) + "/tests/data/hw/fixture.yaml", "");
  EXPECT_TRUE(profile.is_ok()) << profile.status().message();
  profile->nodes = nodes;
  return *profile;
}

SearchSpace space_of(const std::string& yaml) {
  auto space = parse_search_space(yaml, "space.yaml");
  EXPECT_TRUE(space.is_ok()) << space.status().message();
  return space.is_ok() ? *space : SearchSpace{};
}

// The schemes a space's choices make of `base`, as text (one per line).
std::string expanded(const SearchSpace& space, const Scheme& base, bool relowers,
                     SearchContext context) {
  std::string text;
  for (const Scheme& s : expand_choices(space, base, relowers, context)) {
    text += fmt::format("{} {} zero {} {} {} {} {}\n", context_form_name(s.context),
                        tensor_strategy_name(s.tensor), s.zero, precision_name(s.precision),
                        recompute_name(s.recompute), schedule_name(s.schedule), s.chunks);
  }
  return text;
}

Scheme on_mesh(const std::vector<MeshAxis>& axes, int64_t global, int64_t micro) {
  Scheme s;
  s.mesh = *DeviceMesh::create(axes);
  s.global_batch = global;
  s.micro_batch = micro;
  return s;
}

TEST(SearchSpace, DefaultSpaceAllowsEveryParadigm) {
  auto space = read_search_space(std::string(AUTOPAR_SOURCE_DIR) + "/configs/spaces/default.yaml");
  ASSERT_TRUE(space.is_ok()) << space.status().message();
  EXPECT_EQ(space->tp.values, (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_TRUE(space->pp.automatic);
  EXPECT_TRUE(space->dp.automatic);
  EXPECT_TRUE(space->tp_within_node);
  // The paradigms' fields, in the paradigms' order.
  std::vector<std::string> fields;
  for (const SearchSpace::Choices& c : space->choices) fields.push_back(c.field);
  EXPECT_EQ(fields,
            (std::vector<std::string>{"tensor", "zero", "pipeline", "recompute", "precision"}));
  // tp 2 · dp 2: three tensor strategies times four ZeRO stages, in bf16.
  const Scheme tp_dp = on_mesh({{"dp", 2}, {"tp", 2}}, 8, 1);
  std::string twelve;
  for (const char* tensor : {"megatron", "megatron-sp", "auto"}) {
    for (int zero = 0; zero <= 3; ++zero)
      twelve += fmt::format("ring {} zero {} bf16 none 1f1b 1\n", tensor, zero);
  }
  EXPECT_EQ(expanded(*space, tp_dp, true, {4, true}), twelve);
  // Without tp or dp, one strategy and stage 0; an inference search shards no state.
  EXPECT_EQ(expand_choices(*space, on_mesh({{"dp", 1}}, 8, 1), true, {4, true}).size(), 1u);
  EXPECT_EQ(expand_choices(*space, tp_dp, true, {4, false}).size(), 3u);
  // pp 2 over 4 layers, 8 microbatches: GPipe, 1F1B, interleaved with 2 chunks (4 would
  // need 8 layers), each with four recompute policies.
  const Scheme pp = on_mesh({{"pp", 2}, {"dp", 1}}, 8, 1);
  EXPECT_EQ(expanded(*space, pp, false, {4, true}),
            "ring megatron zero 0 fp32 none gpipe 1\n"
            "ring megatron zero 0 fp32 selective gpipe 1\n"
            "ring megatron zero 0 fp32 nonparametric gpipe 1\n"
            "ring megatron zero 0 fp32 full gpipe 1\n"
            "ring megatron zero 0 fp32 none 1f1b 1\n"
            "ring megatron zero 0 fp32 selective 1f1b 1\n"
            "ring megatron zero 0 fp32 nonparametric 1f1b 1\n"
            "ring megatron zero 0 fp32 full 1f1b 1\n"
            "ring megatron zero 0 fp32 none interleaved 2\n"
            "ring megatron zero 0 fp32 selective interleaved 2\n"
            "ring megatron zero 0 fp32 nonparametric interleaved 2\n"
            "ring megatron zero 0 fp32 full interleaved 2\n");
  // Inference: 1F1B's forwards run as GPipe's, so one of them; nothing to recompute.
  EXPECT_EQ(expanded(*space, pp, false, {4, false}),
            "ring megatron zero 0 fp32 none 1f1b 1\n"
            "ring megatron zero 0 fp32 none interleaved 2\n");
  // A space without a paradigm's field leaves the scheme at that paradigm's default.
  EXPECT_EQ(expanded(space_of("mesh: {tp: [2]}\n"), tp_dp, true, {4, true}),
            "ring megatron zero 0 fp32 none 1f1b 1\n");
}

TEST(SearchSpace, ErrorsNameTheField) {
  struct Case {
    const char* yaml;
    const char* error;
  };
  for (const Case& c : {
           Case{"meshes: {}\n",
                "space.yaml: meshes: unknown field (known: mesh, constraints, "
                "batch, context, tensor, zero, pipeline, recompute, precision)"},
           Case{"mesh: {xp: [1]}\n",
                "space.yaml: mesh.xp: unknown axis (known: tp, pp, dp, sp, cp)"},
           Case{"mesh: {tp: [1, 0]}\n", "space.yaml: mesh.tp[1]: 0 must be at least 1"},
           Case{"mesh: {tp: many}\n", "space.yaml: mesh.tp: 'many' is not an integer"},
           Case{"zero: [0, 4]\n", "space.yaml: zero[1]: '4' is not one of 0, 1, 2, 3"},
           Case{"pipeline: {schedules: [zigzag]}\n",
                "space.yaml: pipeline.schedules[0]: 'zigzag' is not one of gpipe, 1f1b, "
                "interleaved"},
           Case{"pipeline: {chunks: auto}\n",
                "space.yaml: pipeline.chunks: expected a list, e.g. [1, 2, 4]"},
           Case{"pipeline: {chunks: [2, 0]}\n",
                "space.yaml: pipeline.chunks[1]: 0 must be at least 1"},
           Case{"pipeline: {schedule: [1f1b]}\n",
                "space.yaml: pipeline.schedule: unknown field (known: schedules, chunks)"},
           Case{"tensor: megatron-sp\ncontext: [zigzag]\n",
                "space.yaml: context[0]: 'zigzag' is not one of ring, all-to-all"},
           Case{"batch: {micro: []}\n",
                "space.yaml: batch.micro: expected auto or a list of sizes, e.g. [1, 2, 4]"},
           Case{"recompute: []\n",
                "space.yaml: recompute: expected a list of none, selective, nonparametric, full"},
           Case{"constraints: {tp_within_rack: true}\n",
                "space.yaml: constraints.tp_within_rack: unknown constraint (known: "
                "tp_within_node)"},
           Case{"batch: {global: 0}\n", "space.yaml: batch.global: 0 must be at least 1"},
       }) {
    auto space = parse_search_space(c.yaml, "space.yaml");
    ASSERT_FALSE(space.is_ok()) << c.yaml;
    EXPECT_EQ(space.status().message(), c.error);
  }
}

TEST(SearchSpace, MeshesOrderPipelineOutsideAndTensorInside) {
  SearchProblem p;
  p.devices = 16;
  p.devices_per_node = 8;
  p.global_batch = 64;
  p.layers = 4;
  auto meshes = enumerate_meshes(space_of("mesh: {tp: [1, 2, 4, 8, 16], pp: auto}\n"), p);
  ASSERT_TRUE(meshes.is_ok()) << meshes.status().message();
  // tp ≤ 8 (a node), pp ∈ {1, 2, 4} (≤ 4 layers): tp 1: pp 1, 2, 4; tp 2: 1, 2, 4; tp 4: 1,
  // 2, 4; tp 8: 1, 2.
  EXPECT_EQ(meshes->size(), 11u);
  EXPECT_EQ(meshes->back().to_string(), "{pp: 2, dp: 1, tp: 8}");
}

TEST(SearchSpace, AnEmptyMeshSetSaysWhichConstraintEmptiedIt) {
  SearchProblem p;
  p.devices = 16;
  p.devices_per_node = 8;
  p.global_batch = 64;
  p.layers = 4;
  auto meshes = enumerate_meshes(space_of("mesh: {tp: [16], pp: [1], dp: auto}\n"), p);
  ASSERT_FALSE(meshes.is_ok());
  EXPECT_EQ(meshes.status().message(),
            "space.yaml: mesh: no tp × pp × dp × sp × cp the space allows makes 16 devices (1 of 1 "
            "tried: 1 put tp · sp over a node's 8 devices (constraints.tp_within_node))");
}

TEST(PartitionStages, MinimisesTheSlowestStage) {
  LayerCosts costs;
  for (double t : {1.0, 1.0, 1.0, 3.0, 1.0, 1.0}) {
    LayerCost c;
    c.forward_compute = t;
    c.backward_compute = 2 * t;
    costs.layers.push_back(c);
  }
  // Layer times 3, 3, 3, 9, 3, 3. Two stages: [0, 2] = 9 and [3, 5] = 15 beat [0, 3] = 18
  // and 6; three stages: 9 | 9 | 6.
  EXPECT_EQ(partition_stages(costs, 2, Recompute::kNone),
            (std::vector<std::pair<int32_t, int32_t>>{{0, 2}, {3, 5}}));
  EXPECT_EQ(partition_stages(costs, 3, Recompute::kNone),
            (std::vector<std::pair<int32_t, int32_t>>{{0, 2}, {3, 3}, {4, 5}}));
}

// With limits: each stage pays its cut, a stage that does not fit is not allowed, and of
// equally slow partitions the cheaper cuts win.
TEST(PartitionStages, PaysCutsAndKeepsStagesInMemory) {
  LayerCosts costs;
  for (int l = 0; l < 6; ++l) {
    LayerCost c;
    c.forward_compute = 1.0;
    c.backward_compute = 2.0;
    c.parameter_bytes = 10;
    c.none.stash_bytes = 5;
    // Cutting after layer 2 sends four times what a cut elsewhere does.
    c.cut_forward_bytes = l == 2 ? 4 : 1;
    costs.layers.push_back(c);
  }
  StageLimits limits;
  limits.cut_seconds = [&](int64_t, int32_t last) {
    return costs.layers[last].cut_forward_bytes * 0.25;
  };
  using Ranges = std::vector<std::pair<int32_t, int32_t>>;
  // Layers take 3 seconds each. Without limits: 9 | 9. With them the cut after layer 2 costs 1
  // second and the others 0.25: [0, 2] | [3, 5] is 10 | 9, still faster than 6.25 | 12 or
  // 12.25 | 6.
  EXPECT_EQ(partition_stages(costs, 2, Recompute::kNone), (Ranges{{0, 2}, {3, 5}}));
  EXPECT_EQ(partition_stages(costs, 2, Recompute::kNone, 0, &limits), (Ranges{{0, 2}, {3, 5}}));
  // Three stages of two layers each (6 | 6 | 6) cut after layers 1 and 3: 6.25 | 6.25 | 6.
  EXPECT_EQ(partition_stages(costs, 3, Recompute::kNone, 0, &limits),
            (Ranges{{0, 1}, {2, 3}, {4, 5}}));
  // Memory: under 1F1B the first of two stages keeps 2 microbatches' stash, the second 1. A
  // stage holds 10 bytes of state and 5 of stash per layer plus what crosses its cuts. With 46
  // bytes, three layers on the first stage (30 + 2 · (15 + 4) = 68) do not fit; two do
  // (20 + 2 · (10 + 1) = 42), and the second stage's four (40 + 1 · (20 + 1) = 61) do not
  // either: nothing fits.
  limits.in_flight = {2, 1};
  limits.capacity = 46;
  EXPECT_EQ(partition_stages(costs, 2, Recompute::kNone, 0, &limits), Ranges{});
  // With 62 bytes, two layers first (42) and four after (61) fit, three first (68) do not.
  limits.capacity = 62;
  EXPECT_EQ(partition_stages(costs, 2, Recompute::kNone, 0, &limits), (Ranges{{0, 1}, {2, 5}}));
}

struct Problem {
  std::string model;
  int64_t nodes;
  int64_t batch;
  const char* space;
};

StatusOr<SearchResult> run(const Problem& p, bool exhaustive, Estimator* shared = nullptr) {
  const HardwareProfile profile = fixture_profile(p.nodes);
  ModelAt model_at = [name = p.model](int64_t batch) -> StatusOr<Graph> {
    ZooOptions options;
    options.with_weights = false;
    options.batch = batch;
    return build_zoo_model(name, options);
  };
  ASSIGN_OR_RETURN(Graph probe, model_at(1));
  LoweringOptions options;
  options.loss.kind = default_loss(probe);
  Estimator local(model_at, options, profile);
  Estimator& estimator = shared ? *shared : local;
  SearchProblem problem;
  problem.devices = profile.num_devices();
  problem.devices_per_node = profile.devices_per_node;
  problem.global_batch = p.batch;
  for (const Node& n : probe.nodes()) problem.layers = std::max(problem.layers, n.layer + 1);
  problem.parameters = static_cast<double>(probe.num_parameter_elements());
  SearchOptions search_options;
  search_options.top = 3;
  search_options.simulate_top = 0;
  search_options.exhaustive = exhaustive;
  return search(space_of(p.space), problem, estimator, search_options);
}

constexpr const char* kSmallSpace =
    "mesh: {tp: [1, 2], pp: auto, dp: auto}\n"
    "batch: {micro: [1, 2, 4]}\n"
    "pipeline: {schedules: [gpipe, 1f1b, interleaved], chunks: [1, 2]}\n"
    "recompute: [none, full]\n"
    "zero: [0, 1]\n";

// The same answer at any thread count: the search run on one thread and on two gives the
// same candidates, in the same order, at the same predicted step times.
TEST(Search, IsDeterministicAtAnyThreadCount) {
  const Problem p{"gpt-tiny", 1, 32, kSmallSpace};
  auto on = [&](size_t threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    return run(p, false);
  };
  auto a = on(1);
  auto b = on(2);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_TRUE(b.is_ok());
  ASSERT_EQ(a->top.size(), b->top.size());
  for (size_t i = 0; i < a->top.size(); ++i) {
    EXPECT_EQ(a->top[i].scheme.to_yaml(), b->top[i].scheme.to_yaml());
    EXPECT_EQ(a->top[i].estimate.step_time_s, b->top[i].estimate.step_time_s);
  }
  EXPECT_EQ(a->candidates_evaluated, b->candidates_evaluated);
  EXPECT_EQ(a->configurations, b->configurations);
  EXPECT_EQ(a->baselines.size(), 2u);
}

// A cost model the test writes: every layer alike, and a step that is a closed form of the
// mesh, so the best scheme is known without the analytic estimate. The search depends on the
// CostModel interface alone.
class FakeCostModel : public CostModel {
 public:
  FakeCostModel(HardwareProfile profile, int32_t layers)
      : profile_(std::move(profile)), layers_(layers) {}
  const HardwareProfile& profile() const override { return profile_; }
  StatusOr<const LayerCosts*> layer_costs(const Scheme& scheme) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++asked_;
    auto costs = std::make_unique<LayerCosts>();
    for (int32_t l = 0; l < layers_; ++l) {
      LayerCost c;
      c.forward_compute = 1e-3 / static_cast<double>(scheme.tp() * scheme.dp());
      c.backward_compute = 2 * c.forward_compute;
      c.parameter_bytes = 1e6;
      costs->layers.push_back(c);
      costs->stage_costs.push_back(1.0);
    }
    costs_.push_back(std::move(costs));
    return costs_.back().get();
  }
  // Data parallelism costs nothing, tensor parallelism 0.5 ms a degree, pipeline stages 2 ms
  // each, a micro batch of 1 is 10% slower: the best is all data parallel at the largest micro
  // batch, whatever the schedule.
  StatusOr<Estimate> combine(const LayerCosts& costs, const Scheme& scheme) const override {
    Estimate e;
    double layer_s = 0;
    for (const LayerCost& c : costs.layers) layer_s += c.forward_compute + c.backward_compute;
    e.step_time_s = layer_s * static_cast<double>(scheme.microbatches()) *
                        (scheme.micro_batch == 1 ? 1.1 : 1.0) +
                    0.5e-3 * static_cast<double>(scheme.tp() - 1) +
                    2e-3 * static_cast<double>(scheme.pp() - 1);
    e.ranks.resize(static_cast<size_t>(scheme.pp()));
    e.memory.resize(static_cast<size_t>(scheme.pp()));
    e.peak_memory_bytes = too_large(scheme) ? 1e12 : 1e9;
    e.memory_bytes_per_device.assign(static_cast<size_t>(scheme.pp()), e.peak_memory_bytes);
    e.feasible = !too_large(scheme);
    return e;
  }
  int asked() const { return asked_; }
  // Schemes for which every rank needs 1 TB: they do not fit.
  std::function<bool(const Scheme&)> too_large = [](const Scheme&) { return false; };

 private:
  HardwareProfile profile_;
  int32_t layers_;
  std::mutex mutex_;
  int asked_ = 0;
  std::vector<std::unique_ptr<LayerCosts>> costs_;
};

SearchProblem fake_problem(const HardwareProfile& profile) {
  SearchProblem problem;
  problem.devices = profile.num_devices();
  problem.devices_per_node = profile.devices_per_node;
  problem.global_batch = 32;
  problem.layers = 4;
  problem.parameters = 1e6;
  return problem;
}

TEST(Search, RanksByTheCostModelItIsGiven) {
  const HardwareProfile profile = fixture_profile(1);
  FakeCostModel fake(profile, 4);
  const SearchProblem problem = fake_problem(profile);
  SearchOptions options;
  options.top = 3;
  options.simulate_top = 0;
  auto result = search(space_of(kSmallSpace), problem, fake, options);
  ASSERT_TRUE(result.is_ok()) << result.status().message();
  ASSERT_FALSE(result->top.empty());
  const Scheme& best = result->top.front().scheme;
  EXPECT_EQ(best.tp(), 1);
  EXPECT_EQ(best.pp(), 1);
  EXPECT_EQ(best.dp(), problem.devices);
  EXPECT_EQ(best.micro_batch, 4);
  const double layer_s = 4 * 3e-3 / static_cast<double>(problem.devices);
  EXPECT_DOUBLE_EQ(result->top.front().estimate.step_time_s,
                   layer_s * static_cast<double>(32 / problem.devices / 4));
  EXPECT_GT(fake.asked(), 0);
  for (size_t i = 1; i < result->top.size(); ++i)
    EXPECT_LE(result->top[i - 1].step_s(), result->top[i].step_s());
}

// The simulation disagrees with the estimate (pure data parallelism simulates 3× slower):
// the simulated rank first by their simulation, and every candidate whose estimate beats the
// best simulated step is simulated too, so that no estimate-only row could be the best.
TEST(Search, SimulatedRowsRankFirstAndNoEstimateOnlyRowCouldBeTheBest) {
  const HardwareProfile profile = fixture_profile(1);
  FakeCostModel fake(profile, 4);
  SearchOptions options;
  options.top = 8;
  options.simulate_top = 2;
  std::atomic<int> simulated{0};
  options.simulate = [&](const Scheme& s) -> StatusOr<double> {
    ++simulated;
    ASSIGN_OR_RETURN(const LayerCosts* costs, fake.layer_costs(s));
    ASSIGN_OR_RETURN(Estimate e, fake.combine(*costs, s));
    return e.step_time_s * (s.tp() == 1 && s.pp() == 1 ? 3.0 : 1.0);
  };
  auto result = search(space_of(kSmallSpace), fake_problem(profile), fake, options);
  ASSERT_TRUE(result.is_ok()) << result.status().message();
  const std::vector<Candidate>& top = result->top;
  ASSERT_EQ(top.size(), 8u);
  size_t first_estimated = top.size();
  for (size_t i = 0; i < top.size(); ++i) {
    if (!top[i].simulated_s && first_estimated == top.size()) first_estimated = i;
    if (i >= first_estimated) {
      EXPECT_FALSE(top[i].simulated_s) << i << ": simulated after est";
    }
    if (i > 0 && (i < first_estimated || i > first_estimated)) {
      EXPECT_LE(top[i - 1].step_s(), top[i].step_s()) << i;
    }
  }
  // More were simulated than the best two: the estimate's best few were slower in the
  // simulation than other rows' estimates.
  EXPECT_GT(first_estimated, 2u);
  for (size_t i = first_estimated; i < top.size(); ++i)
    EXPECT_GE(top[i].estimate.step_time_s, top.front().step_s()) << i;
  std::set<std::string> schemes;
  for (const Candidate& c : top) EXPECT_TRUE(schemes.insert(c.scheme.to_yaml()).second);
  // The data-parallel baseline is that family's best by the simulation.
  ASSERT_TRUE(result->baselines[0].candidate);
  EXPECT_TRUE(result->baselines[0].candidate->simulated_s);
  EXPECT_GT(simulated.load(), 2 + 2);
}

// Baselines: each family's best over what it varies, or exactly why none of it fits.
TEST(Search, BaselinesAreEachFamilysBestOrSayWhyNoneFits) {
  const HardwareProfile profile = fixture_profile(1);
  FakeCostModel fake(profile, 4);
  SearchOptions options;
  options.simulate_top = 0;
  auto result = search(space_of(kSmallSpace), fake_problem(profile), fake, options);
  ASSERT_TRUE(result.is_ok()) << result.status().message();
  ASSERT_EQ(result->baselines.size(), 2u);
  const Baseline& dp = result->baselines[0];
  ASSERT_TRUE(dp.candidate) << dp.note;
  // The largest micro batch (fewest microbatches); ZeRO changes nothing in this model, and
  // of equal steps the first scheme by its text is kept.
  EXPECT_EQ(dp.note, "dp 8, micro 4, ZeRO 0");
  const Baseline& megatron = result->baselines[1];
  ASSERT_TRUE(megatron.candidate) << megatron.note;
  // (Recomputation costs nothing in this model: which policy the tie leaves is not asked.)
  EXPECT_EQ(megatron.note.rfind("tp 1, pp 1, dp 8, micro 4", 0), 0u) << megatron.note;

  // Without tp, nothing fits: data parallelism says by how much; Megatron's recipe takes tp.
  fake.too_large = [](const Scheme& s) { return s.tp() == 1; };
  auto large = search(space_of(kSmallSpace), fake_problem(profile), fake, options);
  ASSERT_TRUE(large.is_ok()) << large.status().message();
  EXPECT_FALSE(large->baselines[0].candidate);
  EXPECT_EQ(large->baselines[0].note,
            "does not fit: the least memory any of its 12 schemes needs is 931.3 GiB per device "
            "(dp 8, micro 1, ZeRO 0) of 74.5 GiB");
  ASSERT_TRUE(large->baselines[1].candidate) << large->baselines[1].note;
  EXPECT_EQ(large->baselines[1].candidate->scheme.tp(), 2);

  // A global batch that does not split over the devices.
  SearchProblem odd = fake_problem(profile);
  odd.global_batch = 12;
  fake.too_large = [](const Scheme&) { return false; };
  auto split =
      search(space_of("mesh: {tp: [1, 2, 4], pp: [1, 2], dp: auto}\n"), odd, fake, options);
  ASSERT_TRUE(split.is_ok()) << split.status().message();
  EXPECT_EQ(split->baselines[0].note, "the global batch 12 does not split over 8 devices");
}

// An inference search varies no ZeRO stage, recomputation or GPipe against 1F1B (they would
// repeat one plan); --export's admissibility keeps the search to what the target runs.
TEST(Search, InferenceAndAdmissibilityNarrowTheSearch) {
  const HardwareProfile profile = fixture_profile(1);
  FakeCostModel fake(profile, 4);
  SearchProblem problem = fake_problem(profile);
  problem.training = false;
  SearchOptions options;
  options.top = 50;
  options.simulate_top = 0;
  auto result = search(space_of(kSmallSpace), problem, fake, options);
  ASSERT_TRUE(result.is_ok()) << result.status().message();
  std::set<std::string> schemes;
  for (const Candidate& c : result->top) {
    EXPECT_EQ(c.scheme.zero, 0);
    EXPECT_EQ(c.scheme.recompute, Recompute::kNone);
    EXPECT_NE(c.scheme.schedule, PipelineSchedule::kGpipe);
    EXPECT_TRUE(schemes.insert(c.scheme.to_yaml()).second) << c.scheme.to_yaml();
  }

  options.admissible = [](const Scheme& s) { return s.tp() == 2 && s.chunks == 1; };
  auto admitted = search(space_of(kSmallSpace), fake_problem(profile), fake, options);
  ASSERT_TRUE(admitted.is_ok()) << admitted.status().message();
  ASSERT_FALSE(admitted->top.empty());
  for (const Candidate& c : admitted->top) {
    EXPECT_EQ(c.scheme.tp(), 2);
    EXPECT_EQ(c.scheme.chunks, 1);
  }
}

// The fast search (stages by dynamic programming) against every stage partition: the exact
// optimum's cost in at least 95% of the problems, within 2% in all.
TEST(Search, OptimalityGapOnSmallSpaces) {
  const std::vector<Problem> problems = {
      {"gpt-tiny", 1, 16, kSmallSpace},
      {"gpt-tiny", 1, 64, kSmallSpace},
      {"gpt-tiny", 2, 64, kSmallSpace},
      {"bert-tiny", 1, 32, kSmallSpace},
      {"bert-tiny", 2, 128, kSmallSpace},
      {"vit-tiny", 1, 32, kSmallSpace},
      {"vit-tiny", 2, 64, kSmallSpace},
      {"mlp", 1, 64, kSmallSpace},
      {"gpt-tiny", 1, 32,
       "mesh: {tp: [1], pp: [2, 4], dp: auto}\nbatch: {micro: [1, 2]}\n"
       "pipeline: {schedules: [1f1b, gpipe]}\nrecompute: [none, selective]\n"},
      {"bert-tiny", 1, 64, "mesh: {tp: [2], pp: [2, 4], dp: auto}\nbatch: {micro: [2]}\n"},
      // Twelve layers: the embedding and head make the end stages uneven.
      {"bert-base", 1, 64,
       "mesh: {tp: [1], pp: [2, 4], dp: auto}\nbatch: {micro: [1, 2]}\n"
       "pipeline: {schedules: [1f1b, interleaved], chunks: [1, 2]}\nrecompute: [none, full]\n"},
  };
  int exact = 0;
  double worst = 0;
  for (const Problem& p : problems) {
    auto fast = run(p, false);
    auto full = run(p, true);
    ASSERT_TRUE(fast.is_ok()) << p.model << ": " << fast.status().message();
    ASSERT_TRUE(full.is_ok()) << p.model << ": " << full.status().message();
    const double f = fast->top.front().estimate.step_time_s;
    const double e = full->top.front().estimate.step_time_s;
    EXPECT_GE(f, e * (1 - 1e-12)) << p.model;  // the exhaustive search is the optimum
    EXPECT_LE(f, e * 1.02) << p.model << " on " << p.nodes << " nodes, batch " << p.batch;
    if (f <= e * (1 + 1e-9)) {
      ++exact;
    } else {
      std::printf("  %s on %d nodes, batch %d:\n%s at %.6g s, exact\n%s at %.6g s\n",
                  p.model.c_str(), static_cast<int>(p.nodes), static_cast<int>(p.batch),
                  fast->top.front().scheme.to_yaml().c_str(), f,
                  full->top.front().scheme.to_yaml().c_str(), e);
    }
    worst = std::max(worst, f / e - 1);
    EXPECT_GE(full->candidates_evaluated, fast->candidates_evaluated);
  }
  EXPECT_GE(exact * 100, 95 * static_cast<int>(problems.size()))
      << exact << " of " << problems.size() << " exact";
  std::printf("optimality gap: %d of %zu problems exact, worst %.3f%%\n", exact, problems.size(),
              worst * 100);
}

TEST(Search, NothingFitsSaysSo) {
  const Problem p{"gpt-tiny", 1, 16, "mesh: {tp: [1], pp: [1]}\nzero: [0, 3]\n"};
  HardwareProfile profile = fixture_profile(1);
  profile.device.memory_bytes = profile.device.reserved_bytes + 1e5;
  ModelAt model_at = [](int64_t batch) -> StatusOr<Graph> {
    ZooOptions options;
    options.with_weights = false;
    options.batch = batch;
    return build_zoo_model("gpt-tiny", options);
  };
  Estimator estimator(model_at, LoweringOptions{}, profile);
  auto result = run(p, false, &estimator);
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().message(),
            "space.yaml: zero: no mesh of 8 devices can hold the model's 2.17e+05 parameters' "
            "state even at ZeRO stage 3 (0.0 GiB free per device)");
}

}  // namespace
}  // namespace autopar
