// A paradigm added from outside src/parallel/paradigms/: one file (this one) and one
// registration. "replicate the last layer": with `replicate_last: true` in a scheme, the
// last layer's parameters stay whole under tensor parallelism (its work runs replicated over
// tp), every other layer is split as the tensor strategy says.
#include <gtest/gtest.h>

#include <string>

#include "autopar/parallel/lowering.h"
#include "autopar/parallel/verify.h"
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

const bool kRegistered = [] {
  register_paradigm({"replicate-last", configure_replicate_last, {"replicate_last"}});
  return true;
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
  EXPECT_EQ(paradigms().back().name, "replicate-last");
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
      "memory_policy, pipeline, recompute, precision, kernels, replicate_last)");
}

}  // namespace
}  // namespace autopar
