// Paradigms added from outside src/parallel/paradigms/: one file (this one) and one
// registration each.
// - "replicate the last layer": with `replicate_last: true` in a scheme, the last layer's
//   parameters stay whole under tensor parallelism (its work runs replicated over tp), every
//   other layer is split as the tensor strategy says. A search space may list
//   `replicate_last: [false, true]`.
// - "checkpoint": with `checkpoint: {every: N, gbps: B}`, every device writes its parameters
//   and optimizer state to storage at B GB/s every N steps; a step pays its share of the
//   slowest rank's write (a term of its own in the estimate and the simulation).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <yaml-cpp/yaml.h>

#include "autopar/cost/estimate.h"
#include "autopar/cost/simulator.h"
#include "autopar/parallel/lowering.h"
#include "autopar/parallel/scheme_reader.h"
#include "autopar/parallel/verify.h"
#include "autopar/search/engine.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

Status configure_replicate_last(const Scheme& scheme, const Graph&, int32_t layers,
                                LoweringPolicy& policy) {
  auto field = scheme.extensions.find("replicate_last");
  if (field == scheme.extensions.end() || field->second == "false") return Status::ok();
  if (field->second != "true")
    return error("replicate_last: '{}' is not true or false", field->second);
  auto split = policy.spmd.parameter_split;
  const int32_t last = layers - 1;
  policy.spmd.parameter_split = [split, last](const Graph& g, const Node& consumer,
                                              std::string_view axis) {
    return consumer.layer != last && split(g, consumer, axis);
  };
  return Status::ok();
}

// Each value a space lists: true only where tp splits something.
StatusOr<Expansion> search_replicate_last(const YAML::Node& value, const SchemeReader& r) {
  ASSIGN_OR_RETURN(std::vector<size_t> listed, r.names(value, "replicate_last", {"false", "true"}));
  return Expansion([listed](const Scheme& base, const SearchContext&) {
    std::vector<Scheme> out;
    for (size_t replicate : listed) {
      if (replicate == 1 && base.tp() == 1) continue;
      out.push_back(base);
      if (replicate == 1) out.back().extensions["replicate_last"] = "true";
    }
    if (out.empty()) out.push_back(base);
    return out;
  });
}

struct Checkpoint {
  double every = 0, gbps = 0;
};

StatusOr<Checkpoint> checkpoint_of(const Scheme& scheme) {
  auto field = scheme.extensions.find("checkpoint");
  if (field == scheme.extensions.end()) return Checkpoint{};
  const YAML::Node node = YAML::Load(field->second);
  Checkpoint c;
  try {
    c.every = node["every"].as<double>();
    c.gbps = node["gbps"].as<double>();
  } catch (const YAML::Exception&) {
    return error("checkpoint: expected {{every: N, gbps: B}}");
  }
  if (c.every < 1 || c.gbps <= 0)
    return error("checkpoint: every must be at least 1, gbps above 0");
  return c;
}

Status configure_checkpoint(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy&) {
  return checkpoint_of(scheme).status();
}

EstimateTerms checkpoint_terms(const Scheme& scheme, const HardwareProfile&,
                               const std::vector<RoleMemory>& ranks) {
  auto c = checkpoint_of(scheme);
  if (!c.is_ok() || c->every == 0) return {};
  double slowest = 0;
  for (const RoleMemory& r : ranks)
    slowest = std::max(slowest, r.parameter_bytes + r.optimizer_bytes);
  return {slowest / (c->gbps * 1e9) / c->every, {}};
}

const bool kRegistered = [] {
  const Status replicate =
      register_paradigm({.name = "replicate-last",
                         .configure = configure_replicate_last,
                         .fields = {"replicate_last"},
                         .search = {"replicate_last", true, search_replicate_last}});
  const Status checkpoint = register_paradigm({.name = "checkpoint",
                                               .configure = configure_checkpoint,
                                               .fields = {"checkpoint"},
                                               .estimate = checkpoint_terms});
  return replicate.is_ok() && checkpoint.is_ok();
}();

Plan plan_of(const std::string& yaml, const Graph& model, const LoweringOptions& options) {
  auto scheme = parse_scheme(yaml, "scheme");
  EXPECT_TRUE(scheme.is_ok()) << scheme.status().message();
  auto plan = lower(model, *scheme, options);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  return std::move(plan).value();
}

// The layout a plan holds a parameter in, by name.
std::string layout_of(const Plan& plan, const std::string& name) {
  for (const StateSpec& s : plan.state) {
    if (s.name == name) return s.layout.to_string();
  }
  return "(none)";
}

TEST(ToyParadigm, ReplicatesTheLastLayerAndStillVerifies) {
  ASSERT_TRUE(kRegistered);
  EXPECT_EQ(paradigms()[paradigms().size() - 2].name, "replicate-last");
  ZooOptions zoo;
  zoo.batch = 4;
  zoo.with_weights = true;
  auto model = build_zoo_model("gpt-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  LoweringOptions options;
  options.optimizer.kind = OptimizerKind::kSgd;
  const std::string base = "mesh: {tp: 2}\nbatch: {global: 4, micro: 4}\ntensor: megatron\n";

  const Plan plain = plan_of(base, *model, options);
  const Plan toy = plan_of(base + "replicate_last: true\n", *model, options);
  // gpt-tiny's MLP: column-parallel c_fc, row-parallel c_proj in every layer but the last.
  EXPECT_EQ(layout_of(plain, "h.3.mlp.c_fc.weight"), "[_, tp]");
  EXPECT_EQ(layout_of(toy, "h.3.mlp.c_fc.weight"), "[_, _]");
  EXPECT_EQ(layout_of(toy, "h.3.mlp.c_proj.weight"), "[_, _]");
  EXPECT_EQ(layout_of(toy, "h.0.mlp.c_fc.weight"), "[_, tp]");
  EXPECT_EQ(layout_of(toy, "h.2.mlp.c_proj.weight"), "[tp, _]");
  // The field round-trips through the scheme's YAML (and so through a plan's manifest).
  EXPECT_NE(toy.scheme.to_yaml().find("replicate_last: true\n"), std::string::npos);
  EXPECT_EQ(plain.scheme.to_yaml().find("replicate_last"), std::string::npos);

  auto feeds = synthetic_plan_feeds(*model, toy, options, 1, 5);
  ASSERT_TRUE(feeds.is_ok()) << feeds.status().message();
  auto compared = verify_plan(*model, toy, options, *feeds);
  ASSERT_TRUE(compared.is_ok()) << compared.status().message();
  EXPECT_TRUE(compared->within(1e-4))
      << compared->differences.front().name << " " << compared->worst();
}

TEST(ToyParadigm, ARegistrationMayNotTakeWhatAnotherOwns) {
  ASSERT_TRUE(kRegistered);
  const size_t before = paradigms().size();
  auto configure = [](const Scheme&, const Graph&, int32_t, LoweringPolicy&) {
    return Status::ok();
  };
  EXPECT_EQ(register_paradigm({.name = "zero", .configure = configure}).message(),
            "register_paradigm: a paradigm named 'zero' is registered already");
  EXPECT_EQ(
      register_paradigm({.name = "z", .configure = configure, .fields = {"tensor"}}).message(),
      "register_paradigm: paradigm 'z': scheme field 'tensor' belongs to paradigm 'operator'");
  EXPECT_EQ(
      register_paradigm({.name = "z", .configure = configure, .fields = {"devices"}}).message(),
      "register_paradigm: paradigm 'z': scheme field 'devices' belongs to the mesh");
  EXPECT_EQ(
      register_paradigm(
          {.name = "z", .configure = configure, .search = {"batch", true, search_replicate_last}})
          .message(),
      "register_paradigm: paradigm 'z': search-space field 'batch' belongs to the search");
  EXPECT_EQ(register_paradigm({.name = "z"}).message(),
            "register_paradigm: a paradigm needs a name and a configure function");
  EXPECT_EQ(
      register_paradigm({.name = "z", .configure = configure, .search = {"z_choices"}}).message(),
      "register_paradigm: paradigm 'z': a search dimension needs a field and a parse");
  EXPECT_EQ(paradigms().size(), before);
}

TEST(ToyParadigm, OwnsItsFieldsErrors) {
  ZooOptions zoo;
  zoo.batch = 4;
  auto model = build_zoo_model("gpt-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  auto scheme = parse_scheme("mesh: {tp: 2}\nbatch: {global: 4}\nreplicate_last: maybe\n", "s");
  ASSERT_TRUE(scheme.is_ok()) << scheme.status().message();
  EXPECT_EQ(lower(*model, *scheme, LoweringOptions{}).status().message(),
            "replicate_last: 'maybe' is not true or false");
  // A field no paradigm owns is still refused, and the message lists the registered ones.
  EXPECT_EQ(
      parse_scheme("replicate_first: true\n", "s").status().message(),
      "s: replicate_first: unknown field (known: mesh, devices, batch, context, tensor, zero, "
      "memory_policy, pipeline, recompute, precision, kernels, replicate_last, checkpoint)");
}

HardwareProfile fixture_profile() {
  auto profile =
      read_hardware_profile(std::string(AUTOPAR_SOURCE_DIR) + "/tests/data/hw/fixture.yaml", "");
  EXPECT_TRUE(profile.is_ok()) << profile.status().message();
  return *profile;
}

ModelAt gpt_tiny_at() {
  return [](int64_t batch) -> StatusOr<Graph> {
    ZooOptions zoo;
    zoo.with_weights = false;
    zoo.batch = batch;
    return build_zoo_model("gpt-tiny", zoo);
  };
}

// The search tries the paradigm's choices as it tries the built-in ones, and prices each
// through its lowering: the estimate holds what the built plans hold.
TEST(ToyParadigm, ASearchTriesItsChoices) {
  HardwareProfile profile = fixture_profile();
  profile.devices_per_node = 2;
  profile.nodes = 1;
  Estimator estimator(gpt_tiny_at(), LoweringOptions{}, profile);
  auto space = parse_search_space(
      "mesh: {tp: [2], pp: [1], dp: [1]}\nbatch: {micro: [4]}\nreplicate_last: [false, true]\n",
      "space.yaml");
  ASSERT_TRUE(space.is_ok()) << space.status().message();
  SearchProblem problem;
  problem.devices = 2;
  problem.devices_per_node = 2;
  problem.global_batch = 4;
  problem.layers = 4;
  problem.parameters = 1e5;
  SearchOptions options;
  options.top = 10;
  options.simulate_top = 0;
  auto result = search(*space, problem, estimator, options);
  ASSERT_TRUE(result.is_ok()) << result.status().message();
  ASSERT_EQ(result->top.size(), 2u);
  EXPECT_EQ(result->candidates_evaluated, 2);
  const Candidate* plain = nullptr;
  const Candidate* toy = nullptr;
  for (const Candidate& c : result->top)
    (c.scheme.extensions.count("replicate_last") ? toy : plain) = &c;
  ASSERT_TRUE(plain && toy);

  // What the last layer's whole parameters add on the device, in the plans and in the
  // estimate alike.
  auto model = gpt_tiny_at()(4);
  ASSERT_TRUE(model.is_ok());
  LoweringOptions lowering;
  lowering.profile = std::make_shared<const HardwareProfile>(profile);
  auto plain_plan = lower(*model, plain->scheme, lowering);
  auto toy_plan = lower(*model, toy->scheme, lowering);
  ASSERT_TRUE(plain_plan.is_ok() && toy_plan.is_ok());
  const double planned = plan_memory(*toy_plan).front().parameter_bytes -
                         plan_memory(*plain_plan).front().parameter_bytes;
  const double estimated =
      toy->estimate.memory.front().parameter_bytes - plain->estimate.memory.front().parameter_bytes;
  EXPECT_GT(planned, 0);
  EXPECT_DOUBLE_EQ(estimated, planned);
}

TEST(ToyParadigm, TermsOfItsOwnInTheEstimateAndTheSimulation) {
  const HardwareProfile profile = fixture_profile();
  Estimator estimator(gpt_tiny_at(), LoweringOptions{}, profile);
  const std::string base = "mesh: {dp: 2, tp: 2}\nbatch: {global: 8, micro: 2}\n";
  auto without = parse_scheme(base, "s");
  auto with = parse_scheme(base + "checkpoint: {every: 10, gbps: 0.5}\n", "s");
  ASSERT_TRUE(without.is_ok() && with.is_ok()) << with.status().message();
  auto e0 = estimator.estimate(*without);
  auto e1 = estimator.estimate(*with);
  ASSERT_TRUE(e0.is_ok() && e1.is_ok()) << e1.status().message();
  const RoleMemory& m = e1->memory.front();
  const double term = (m.parameter_bytes + m.optimizer_bytes) / 0.5e9 / 10;
  EXPECT_GT(term, 1e-6);
  EXPECT_DOUBLE_EQ(e1->breakdown.paradigm_s, term);
  EXPECT_DOUBLE_EQ(e0->breakdown.paradigm_s, 0.0);
  EXPECT_NEAR(e1->step_time_s - e0->step_time_s, term, 1e-15);

  auto model = gpt_tiny_at()(8);
  ASSERT_TRUE(model.is_ok());
  auto p0 = lower(*model, *without, LoweringOptions{});
  auto p1 = lower(*model, *with, LoweringOptions{});
  ASSERT_TRUE(p0.is_ok() && p1.is_ok());
  auto s0 = simulate(*p0, profile);
  auto s1 = simulate(*p1, profile);
  ASSERT_TRUE(s0.is_ok() && s1.is_ok());
  const RoleMemory planned = plan_memory(*p1).front();
  const double simulated_term = (planned.parameter_bytes + planned.optimizer_bytes) / 0.5e9 / 10;
  EXPECT_DOUBLE_EQ(s1->paradigm_seconds, simulated_term);
  EXPECT_NEAR(s1->step_seconds - s0->step_seconds, simulated_term, 1e-12);

  auto bad = parse_scheme(base + "checkpoint: {every: 0, gbps: 1}\n", "s");
  ASSERT_TRUE(bad.is_ok());
  EXPECT_EQ(estimator.estimate(*bad).status().message(),
            "checkpoint: every must be at least 1, gbps above 0");
}

}  // namespace
}  // namespace autopar
