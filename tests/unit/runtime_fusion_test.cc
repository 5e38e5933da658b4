// Elementwise fusion gives the bits of node-by-node execution, and never more memory.
#include <cmath>

#include <gtest/gtest.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/builder.h"
#include "autopar/ir/pattern_fusion.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"
#include "testing/run_node.h"

namespace autopar::runtime {
namespace {

void expect_same_step(const std::string& name, OptimizerKind optimizer) {
  ZooOptions zoo;
  zoo.batch = 2;
  zoo.with_weights = true;
  const Graph model = *build_zoo_model(name, zoo);
  OptimizerSpec spec;
  spec.kind = optimizer;
  auto training = build_training_graph(model, {default_loss(model), ""}, spec);
  ASSERT_TRUE(training.is_ok()) << training.status().message();
  const Graph& g = training->graph;
  std::vector<Feed> feeds;
  const std::vector<TensorPtr> inputs = synthetic_inputs(model, 4);
  for (size_t i = 0; i < inputs.size(); ++i)
    feeds.emplace_back(*g.find_value(model.value(model.inputs()[i]).name), inputs[i]);
  feeds.emplace_back(training->labels,
                     std::make_shared<const Tensor>(g.value(training->labels).dtype,
                                                    g.value(training->labels).shape.dims));
  RunStats fused_stats, plain_stats;
  ExecutorOptions fused_options;
  fused_options.num_threads = 2;
  ExecutorOptions plain_options = fused_options;
  plain_options.fuse_elementwise = false;
  auto fused = Executor::create(g, fused_options)->run(feeds, &fused_stats);
  auto plain = Executor::create(g, plain_options)->run(feeds, &plain_stats);
  ASSERT_TRUE(fused.is_ok()) << fused.status().message();
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  ASSERT_EQ(fused->size(), plain->size());
  for (size_t i = 0; i < fused->size(); ++i) {
    EXPECT_EQ(*(*fused)[i], *(*plain)[i]) << name << " output " << g.value(g.outputs()[i]).name;
  }
  EXPECT_LE(fused_stats.peak_activation_bytes, plain_stats.peak_activation_bytes);
}

TEST(ElementwiseFusion, GptTinyAdamStepIsBitIdentical) {
  expect_same_step("gpt-tiny", OptimizerKind::kAdam);
}
TEST(ElementwiseFusion, ResnetTinySgdStepIsBitIdentical) {
  expect_same_step("resnet-tiny", OptimizerKind::kSgd);
}
TEST(ElementwiseFusion, MlpAdamWStepIsBitIdentical) {
  expect_same_step("mlp", OptimizerKind::kAdamW);
}

// Exp, Erf and Tanh run in tiles at fixed offsets, so Eigen's vector and scalar paths cover
// the same elements whatever the thread count: one and two threads give the same bits.
TEST(ElementwiseFusion, TranscendentalsDoNotDependOnTheThreadCount) {
  for (const char* op : {"Exp", "Erf", "Tanh"}) {
    Graph g;
    Value x;
    x.name = "x";
    x.dtype = DType::kFloat32;
    x.shape = Shape({3, 1111});
    x.kind = ValueKind::kInput;
    const ValueId xi = g.add_value(std::move(x));
    g.add_input(xi);
    Value y;
    y.name = "y";
    y.shape = Shape::unknown();
    const ValueId yi = g.add_value(std::move(y));
    Node n;
    n.name = "n";
    n.op_type = op;
    n.inputs = {xi};
    n.outputs = {yi};
    g.add_node(std::move(n));
    g.mutable_value(yi).dtype = DType::kFloat32;
    g.mutable_value(yi).shape = Shape({3, 1111});
    g.add_output(yi);
    Tensor input(DType::kFloat32, {3, 1111});
    for (int64_t i = 0; i < input.num_elements(); ++i)
      input.set_from_double(i, std::sin(0.37 * static_cast<double>(i)) * 4.0);
    const std::vector<TensorPtr> inputs = {std::make_shared<const Tensor>(input)};
    ExecutorOptions one, two;
    one.num_threads = 1;
    two.num_threads = 2;
    auto a = Executor::create(g, one)->run_inputs(inputs);
    auto b = Executor::create(g, two)->run_inputs(inputs);
    ASSERT_TRUE(a.is_ok() && b.is_ok()) << op;
    EXPECT_EQ(*(*a)[0], *(*b)[0]) << op;
  }
}

// ---- a convolution's activation --------------------------------------------------------

struct ConvCase {
  const char* name;
  std::vector<int64_t> x_dims, w_dims;
  Attributes attrs;
};

// The convolution paths: pointwise, depthwise (strides 2 and 1, padded), one position (a
// matrix-vector product), im2col, 1-D.
std::vector<ConvCase> conv_cases() {
  using Ints = std::vector<int64_t>;
  return {
      {"pointwise", {1, 6, 9, 7}, {8, 6, 1, 1}, {}},
      {"depthwise",
       {2, 6, 11, 10},
       {6, 1, 3, 3},
       {{"group", int64_t{6}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}},
      {"depthwise stride 1",
       {1, 5, 9, 12},
       {5, 1, 5, 5},
       {{"group", int64_t{5}}, {"pads", Ints{2, 2, 2, 2}}}},
      {"one position", {1, 20, 1, 1}, {7, 20, 1, 1}, {}},
      {"im2col", {1, 3, 8, 9}, {5, 3, 3, 3}, {{"pads", Ints{1, 1, 1, 1}}}},
      {"1-D", {2, 4, 20}, {3, 4, 5}, {{"pads", Ints{2, 2}}}},
  };
}

struct ActivationCase {
  const char* op;
  Attributes attrs;
  std::vector<float> bounds;  // Clip's min and max inputs (opset 11 on)
};

std::vector<ActivationCase> activation_cases() {
  return {{"Relu", {}, {}},
          {"LeakyRelu", {{"alpha", 0.07f}}, {}},
          {"Clip", {}, {-0.5f, 0.75f}},
          {"Clip", {}, {-0.25f}},  // no upper bound
          {"HardSigmoid", {{"alpha", 0.3f}, {"beta", 0.4f}}, {}},
          {"HardSwish", {}, {}}};
}

// x → Conv (with bias) → activation → output, in `dtype`.
Graph conv_activation_graph(const ConvCase& conv, const ActivationCase& act, DType dtype,
                            int64_t opset = 17) {
  GraphBuilder b("conv_activation", opset);
  auto typed = [&](const Tensor& t) {
    if (dtype == DType::kFloat32) return t;
    Tensor out(dtype, t.dims());
    for (int64_t i = 0; i < t.num_elements(); ++i) out.set_from_double(i, t.float_at(i));
    return out;
  };
  const ValueId x = b.input("x", dtype, conv.x_dims);
  const ValueId w = b.constant("w", typed(testing::random_f32(conv.w_dims, 3)));
  const ValueId bias = b.constant("b", typed(testing::random_f32({conv.w_dims[0]}, 4)));
  const ValueId y = b.op1("Conv", {x, w, bias}, conv.attrs);
  std::vector<ValueId> inputs = {y};
  for (size_t i = 0; i < act.bounds.size(); ++i) {
    Tensor bound(dtype, {});
    bound.set_from_double(0, act.bounds[i]);
    inputs.push_back(b.constant(i == 0 ? "lo" : "hi", bound));
  }
  b.output(b.op1(act.op, inputs, act.attrs));
  return b.finish();
}

// Runs `g` fused and node by node on input x (values in [-2, 2), one NaN); expects the same bits,
// and the fused run holding less (the convolution's own output is never stored).
void expect_fused_activation_is_exact(const Graph& g, const std::string& what) {
  const Value& x = g.value(g.inputs()[0]);
  Tensor input(x.dtype, x.shape.dims);
  for (int64_t i = 0; i < input.num_elements(); ++i)
    input.set_from_double(i, std::sin(0.71 * static_cast<double>(i)) * 2.0);
  // A NaN reaches the outputs whose windows hold it: kept alike.
  input.set_from_double(5, std::nan(""));
  const std::vector<TensorPtr> inputs = {std::make_shared<const Tensor>(input)};
  ExecutorOptions fused_options, plain_options;
  fused_options.num_threads = plain_options.num_threads = 2;
  plain_options.fuse_elementwise = false;
  auto fused = Executor::create(g, fused_options);
  auto plain = Executor::create(g, plain_options);
  ASSERT_TRUE(fused.is_ok() && plain.is_ok()) << what;
  RunStats fused_stats, plain_stats;
  auto a = fused->run_inputs(inputs, &fused_stats);
  auto b = plain->run_inputs(inputs, &plain_stats);
  ASSERT_TRUE(a.is_ok()) << what << ": " << a.status().message();
  ASSERT_TRUE(b.is_ok()) << what << ": " << b.status().message();
  EXPECT_EQ(*(*a)[0], *(*b)[0]) << what;
  // Plain: the convolution's output and the activation's live together; fused: one of them.
  const int64_t bytes = (*a)[0]->num_bytes();
  EXPECT_EQ(plain_stats.peak_activation_bytes, 2 * bytes) << what;
  EXPECT_EQ(fused_stats.peak_activation_bytes, bytes) << what;
  EXPECT_EQ(fused->planned_peak_bytes(), fused_stats.peak_activation_bytes) << what;
}

TEST(ConvActivationFusion, EveryActivationGivesTheBitsOfTheSeparateNodes) {
  for (const ConvCase& conv : conv_cases()) {
    for (const ActivationCase& act : activation_cases()) {
      expect_fused_activation_is_exact(conv_activation_graph(conv, act, DType::kFloat32),
                                       std::string(conv.name) + " " + act.op);
    }
  }
  // float64, and Clip's bounds as attributes (opset 10).
  expect_fused_activation_is_exact(
      conv_activation_graph(conv_cases()[1], activation_cases().back(), DType::kFloat64),
      "depthwise HardSwish f64");
  ActivationCase clip10{"Clip", {{"min", -0.3f}, {"max", 0.6f}}, {}};
  expect_fused_activation_is_exact(
      conv_activation_graph(conv_cases()[0], clip10, DType::kFloat32, 10), "pointwise Clip-10");
}

// An output that another node reads too, or that the graph returns, is stored as computed;
// bounds computed at run time keep Clip a node of its own.
TEST(ConvActivationFusion, OnlyAnOutputTheActivationAloneReadsIsFused) {
  for (int variant = 0; variant < 3; ++variant) {
    GraphBuilder b("shared", 17);
    const ValueId x = b.input("x", DType::kFloat32, {1, 4, 6, 6});
    const ValueId lo = b.input("lo", DType::kFloat32, {});
    const ValueId w = b.constant("w", testing::random_f32({4, 4, 1, 1}, 5));
    const ValueId y = b.op1("Conv", {x, w});
    if (variant == 0) {
      b.output(b.op1("Relu", {y}));
      b.output(b.op1("Neg", {y}));
    } else if (variant == 1) {
      b.output(b.op1("Relu", {y}));
      b.output(y);
    } else {
      b.output(b.op1("Clip", {y, lo}));
    }
    const Graph g = b.finish();
    Tensor input(DType::kFloat32, {1, 4, 6, 6});
    for (int64_t i = 0; i < input.num_elements(); ++i)
      input.set_from_double(i, std::cos(0.3 * static_cast<double>(i)));
    const std::vector<TensorPtr> inputs = {
        std::make_shared<const Tensor>(input),
        std::make_shared<const Tensor>(testing::f32({}, {-0.1f}))};
    ExecutorOptions plain_options;
    plain_options.fuse_elementwise = false;
    auto fused = Executor::create(g)->run_inputs(inputs);
    auto plain = Executor::create(g, plain_options)->run_inputs(inputs);
    ASSERT_TRUE(fused.is_ok() && plain.is_ok()) << variant;
    ASSERT_EQ(fused->size(), plain->size());
    for (size_t i = 0; i < fused->size(); ++i)
      EXPECT_EQ(*(*fused)[i], *(*plain)[i]) << variant << " output " << i;
    // The Conv's output is stored either way: the same peak.
    EXPECT_EQ(Executor::create(g)->planned_peak_bytes(),
              Executor::create(g, plain_options)->planned_peak_bytes())
        << variant;
  }
}

// ---- BatchNormalization folded into the convolution before it (inference) ----------------

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op_type == op;
  return n;
}

// x → Conv → BatchNormalization → Relu → y folds to x → Conv → Relu → y with the same values;
// a Conv output that something else reads too, and statistics fed at run time, stay.
TEST(InferenceBatchNormFolding, ConvThenBatchNormBecomesOneConv) {
  using Ints = std::vector<int64_t>;
  GraphBuilder b("conv_bn", 15);
  const ValueId x = b.input("x", DType::kFloat32, {2, 4, 7, 7});
  const ValueId fed_mean = b.input("fed_mean", DType::kFloat32, {6});
  auto positive = [](Tensor t) {
    for (int64_t i = 0; i < t.num_elements(); ++i)
      t.set_from_double(i, 0.5 + std::abs(t.float_at(i)));
    return t;
  };
  auto stats = [&](const std::string& name, uint64_t seed) {
    return std::vector<ValueId>{
        b.constant(name + ".scale", testing::random_f32({6}, seed)),
        b.constant(name + ".bias", testing::random_f32({6}, seed + 1)),
        b.constant(name + ".mean", testing::random_f32({6}, seed + 2)),
        b.constant(name + ".var", positive(testing::random_f32({6}, seed + 3)))};
  };
  const ValueId w = b.constant("w", testing::random_f32({6, 4, 3, 3}, 1));
  const ValueId bias = b.constant("b", testing::random_f32({6}, 2));
  // Folded: with the Conv's bias, and a depthwise one without.
  const ValueId c1 = b.op1("Conv", {x, w, bias}, {{"pads", Ints{1, 1, 1, 1}}});
  std::vector<ValueId> in1 = {c1};
  for (ValueId v : stats("bn1", 10)) in1.push_back(v);
  const ValueId y1 = b.op1("BatchNormalization", in1, {{"epsilon", 1e-3f}});
  const ValueId dw = b.constant("dw", testing::random_f32({6, 1, 3, 3}, 3));
  const ValueId c2 = b.op1("Conv", {b.op1("Relu", {y1}), dw}, {{"group", int64_t{6}}});
  std::vector<ValueId> in2 = {c2};
  for (ValueId v : stats("bn2", 20)) in2.push_back(v);
  b.output(b.op1("BatchNormalization", in2), "y");
  // Kept: the Conv's output read twice; the mean fed at run time.
  const ValueId c3 = b.op1("Conv", {x, w});
  std::vector<ValueId> in3 = {c3};
  for (ValueId v : stats("bn3", 30)) in3.push_back(v);
  b.output(b.op1("Add", {b.op1("BatchNormalization", in3), c3}), "z");
  const ValueId c4 = b.op1("Conv", {x, w});
  std::vector<ValueId> in4 = stats("bn4", 40);
  in4.insert(in4.begin(), c4);
  in4[3] = fed_mean;
  b.output(b.op1("BatchNormalization", in4), "u");
  const Graph original = b.finish();

  Graph folded = original;
  EXPECT_EQ(fold_inference_batch_norms(folded), 2);
  EXPECT_EQ(count_op(folded, "BatchNormalization"), 2);
  EXPECT_EQ(count_op(folded, "Conv"), 4);
  EXPECT_EQ(folded.num_nodes(), original.num_nodes() - 2);
  ASSERT_EQ(folded.outputs().size(), 3u);
  EXPECT_EQ(folded.value(folded.outputs()[0]).name, "y");

  Tensor input(DType::kFloat32, {2, 4, 7, 7});
  for (int64_t i = 0; i < input.num_elements(); ++i)
    input.set_from_double(i, std::sin(0.37 * static_cast<double>(i)));
  const std::vector<TensorPtr> inputs = {
      std::make_shared<const Tensor>(input),
      std::make_shared<const Tensor>(testing::random_f32({6}, 50))};
  auto want = Executor::create(original)->run_inputs(inputs);
  auto got = Executor::create(folded)->run_inputs(inputs);
  ASSERT_TRUE(want.is_ok() && got.is_ok());
  for (size_t o = 0; o < 3; ++o) {
    const Tensor& a = *(*got)[o];
    const Tensor& e = *(*want)[o];
    ASSERT_EQ(a.dims(), e.dims());
    for (int64_t i = 0; i < a.num_elements(); ++i)
      ASSERT_NEAR(a.float_at(i), e.float_at(i), 2e-5 * (1 + std::abs(e.float_at(i))))
          << "output " << o << " at " << i;
  }
  EXPECT_EQ(fold_inference_batch_norms(folded), 0);  // nothing left to fold
}

// A constant causal mask computed from positions instead: the same forward values, and a
// shape-only copy (its constants' data dropped, as the estimate drops them) still fuses each
// layer's attention, which the constant without its data would not.
TEST(CausalMasks, ComputedFromPositionsAsTheConstantWas) {
  ZooOptions zoo;
  zoo.batch = 2;
  zoo.with_weights = true;
  const Graph model = *build_zoo_model("gpt-tiny", zoo);
  const Graph computed = computed_causal_masks(model);
  EXPECT_EQ(computed.num_nodes(), model.num_nodes() + 3);  // Greater, Cast, Mul
  EXPECT_EQ(count_op(computed, "Greater"), 1);
  const std::vector<TensorPtr> inputs = synthetic_inputs(model, 7);
  auto want = Executor::create(model)->run_inputs(inputs);
  auto got = Executor::create(computed)->run_inputs(inputs);
  ASSERT_TRUE(want.is_ok() && got.is_ok());
  const Tensor& a = *(*got)[0];
  const Tensor& e = *(*want)[0];
  ASSERT_EQ(a.dims(), e.dims());
  for (int64_t i = 0; i < a.num_elements(); ++i)
    ASSERT_NEAR(a.float_at(i), e.float_at(i), 1e-6 * (1 + std::abs(e.float_at(i)))) << i;
  auto without_data = [](Graph g) {
    for (ValueId v = 0; v < g.num_values(); ++v) {
      Value& value = g.mutable_value(v);
      if (value.kind == ValueKind::kConstant && is_floating(value.dtype) && value.data &&
          value.data->num_elements() > 16)
        value.data.reset();
    }
    return g;
  };
  FusionReport fused, constant;
  fuse_training_patterns(without_data(computed), &fused, {.attention = true});
  fuse_training_patterns(without_data(model), &constant, {.attention = true});
  EXPECT_EQ(fused.attentions, 4);  // one per layer
  EXPECT_EQ(constant.attentions, 0);
  EXPECT_EQ(computed_causal_masks(computed).num_nodes(), computed.num_nodes());  // none left
}

// Attention whose masked scores a Where fills, as PyTorch exports masked_fill(mask above the
// diagonal, −inf) and torch.where(mask on and below it, scores, −10⁴): one causal Attention,
// computing what the chain computes. A condition that is not causal stays a chain.
TEST(CausalMasks, WhereFilledScoresFuseIntoCausalAttention) {
  const int64_t s = 6;
  for (int form = 0; form < 3; ++form) {
    GraphBuilder b("where_attention", 17);
    const ValueId q = b.input("q", DType::kFloat32, {1, 2, s, 4});
    const ValueId k = b.input("k", DType::kFloat32, {1, 2, s, 4});
    const ValueId v = b.input("v", DType::kFloat32, {1, 2, s, 4});
    Tensor condition(DType::kBool, {s, s});
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t j = 0; j < s; ++j) {
        const bool above = form == 2 ? j >= i : j > i;  // form 2: the diagonal masked too
        condition.set_from_int(i * s + j, form == 1 ? !above : above);
      }
    }
    const ValueId mask = b.constant("mask", std::move(condition));
    const ValueId scores = b.op1(
        "Div", {b.op1("MatMul",
                      {q, b.op1("Transpose", {k}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}})}),
                b.constant_scalar("scale", 2.0f)});
    const ValueId fill = b.constant_scalar("fill", form == 1 ? -1e4f : -INFINITY);
    const ValueId filled =
        form == 1 ? b.op1("Where", {mask, scores, fill}) : b.op1("Where", {mask, fill, scores});
    b.output(b.op1("MatMul", {b.op1("Softmax", {filled}, {{"axis", int64_t{-1}}}), v}));
    const Graph chain = b.finish();
    FusionReport report;
    const Graph fused = fuse_training_patterns(chain, &report, {.attention = true});
    SCOPED_TRACE(form);
    EXPECT_EQ(report.attentions, form == 2 ? 0 : 1);
    if (form == 2) continue;
    std::vector<TensorPtr> inputs;
    for (uint64_t seed : {1, 2, 3})
      inputs.push_back(std::make_shared<const Tensor>(testing::random_f32({1, 2, s, 4}, seed)));
    auto want = Executor::create(chain)->run_inputs(inputs);
    auto got = Executor::create(fused)->run_inputs(inputs);
    ASSERT_TRUE(want.is_ok() && got.is_ok());
    for (int64_t i = 0; i < (*want)[0]->num_elements(); ++i)
      EXPECT_NEAR((*got)[0]->float_at(i), (*want)[0]->float_at(i), 1e-6) << i;
  }
}

}  // namespace
}  // namespace autopar::runtime
