// The CUDA backend's host side, tested without a GPU: which ops it lowers, how MatMul maps onto
// cuBLASLt's strided batches, what elementwise runs fuse into, and the arena planned from the
// values' lifetimes against the CPU executor's peak.
#include <algorithm>
#include <cstring>

#include <gtest/gtest.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/builder.h"
#include "autopar/parallel/lowering.h"
#include "autopar/parallel/scheme.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/cuda_executor.h"
#include "autopar/runtime/cuda_plan.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/kernel.h"
#include "autopar/runtime/plan_runner.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"
#include "runtime/cuda/lowering.h"

namespace autopar::runtime {
namespace {

TrainingGraph tiny_training_graph(const std::string& name, int64_t batch = 2) {
  ZooOptions zoo;
  zoo.batch = batch;
  zoo.with_weights = true;
  const Graph model = *build_zoo_model(name, zoo);
  auto training = build_training_graph(model, {default_loss(model), ""}, OptimizerSpec{});
  EXPECT_TRUE(training.is_ok()) << training.status().message();
  return *training;
}

std::shared_ptr<const CudaLowering> lowered(const Graph& g, const CudaOptions& options = {}) {
  auto l = lower_for_cuda(g, options);
  EXPECT_TRUE(l.is_ok()) << l.status().message();
  return l.is_ok() ? *l : nullptr;
}

// A training step lowered with its updates written back on the device.
std::shared_ptr<const CudaLowering> lowered_step(const TrainingGraph& t) {
  CudaOptions options;
  options.updates = t.updates;
  return lowered(t.graph, options);
}

ValueId add_value(Graph& g, const std::string& name, std::vector<int64_t> dims, bool input) {
  Value v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.shape = Shape(std::move(dims));
  v.kind = input ? ValueKind::kInput : ValueKind::kIntermediate;
  const ValueId id = g.add_value(std::move(v));
  if (input) g.add_input(id);
  return id;
}

// Graph with one MatMul of the given operand dims (both graph inputs).
Graph matmul_graph(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                   const std::vector<int64_t>& y) {
  Graph g;
  const ValueId va = add_value(g, "a", a, true);
  const ValueId vb = add_value(g, "b", b, true);
  const ValueId vy = add_value(g, "y", y, false);
  Node n;
  n.name = "mm";
  n.op_type = "MatMul";
  n.inputs = {va, vb};
  n.outputs = {vy};
  g.add_node(std::move(n));
  g.add_output(vy);
  return g;
}

std::vector<cuda::MatMulParams> gemms_of(const Graph& g) {
  std::vector<cuda::MatMulParams> out;
  const auto lowering = lowered(g);
  for (const cuda::Launch& l : lowering->program.launches)
    if (l.kind == cuda::Kind::kMatMul) out.push_back(l.matmul);
  return out;
}

TEST(CudaLowering, MatMulWithASharedWeightIsOneGemmOverEveryRow) {
  const auto gemms = gemms_of(matmul_graph({2, 3, 4, 5}, {5, 6}, {2, 3, 4, 6}));
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_EQ(gemms[0].m, 24);
  EXPECT_EQ(gemms[0].n, 6);
  EXPECT_EQ(gemms[0].k, 5);
  EXPECT_EQ(gemms[0].batch, 1);
  EXPECT_EQ(gemms[0].lda, 5);
  EXPECT_EQ(gemms[0].ldb, 6);
  EXPECT_EQ(gemms[0].ldc, 6);
}

TEST(CudaLowering, BatchedMatMulIsOneStridedBatch) {
  const auto gemms = gemms_of(matmul_graph({2, 3, 4, 5}, {2, 3, 5, 6}, {2, 3, 4, 6}));
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_EQ(gemms[0].m, 4);
  EXPECT_EQ(gemms[0].batch, 6);
  EXPECT_EQ(gemms[0].stride_a, 20);
  EXPECT_EQ(gemms[0].stride_b, 30);
  EXPECT_EQ(gemms[0].stride_c, 24);
}

TEST(CudaLowering, ABroadcastLeftOperandHasBatchStrideZero) {
  const auto gemms = gemms_of(matmul_graph({4, 5}, {3, 5, 6}, {3, 4, 6}));
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_EQ(gemms[0].batch, 3);
  EXPECT_EQ(gemms[0].stride_a, 0);
  EXPECT_EQ(gemms[0].stride_b, 30);
}

TEST(CudaLowering, PartlyBroadcastBatchesRunOneGemmEach) {
  const Graph g = matmul_graph({2, 1, 4, 5}, {1, 3, 5, 6}, {2, 3, 4, 6});
  const auto l = lowered(g);
  std::vector<int64_t> bases_a, bases_b, bases_c;
  for (const cuda::Launch& launch : l->program.launches) {
    ASSERT_EQ(launch.kind, cuda::Kind::kMatMul);
    bases_a.push_back(launch.in[0].base);
    bases_b.push_back(launch.in[1].base);
    bases_c.push_back(launch.out[0].base);
  }
  EXPECT_EQ(bases_a, (std::vector<int64_t>{0, 0, 0, 20, 20, 20}));
  EXPECT_EQ(bases_b, (std::vector<int64_t>{0, 30, 60, 0, 30, 60}));
  EXPECT_EQ(bases_c, (std::vector<int64_t>{0, 24, 48, 72, 96, 120}));
}

// Attention's scores: q · kᵀ with kᵀ a Transpose of the last two dims that only the MatMul
// reads: the MatMul reads k through cuBLASLt's transpose flag and the Transpose launches nothing.
TEST(CudaLowering, ATransposeOnlyMatMulsReadIsATransposeFlag) {
  Graph g;
  const ValueId q = add_value(g, "q", {2, 4, 16, 8}, true);
  const ValueId k = add_value(g, "k", {2, 4, 16, 8}, true);
  const ValueId kt = add_value(g, "kt", {2, 4, 8, 16}, false);
  const ValueId s = add_value(g, "s", {2, 4, 16, 16}, false);
  Node t;
  t.name = "t";
  t.op_type = "Transpose";
  t.inputs = {k};
  t.outputs = {kt};
  t.attrs = {{"perm", std::vector<int64_t>{0, 1, 3, 2}}};
  g.add_node(std::move(t));
  Node mm;
  mm.name = "scores";
  mm.op_type = "MatMul";
  mm.inputs = {q, kt};
  mm.outputs = {s};
  g.add_node(std::move(mm));
  g.add_output(s);
  const auto l = lowered(g);
  ASSERT_EQ(l->program.launches.size(), 1u);
  const cuda::MatMulParams& p = l->program.launches[0].matmul;
  EXPECT_FALSE(p.trans_a);
  EXPECT_TRUE(p.trans_b);
  EXPECT_EQ(p.m, 16);
  EXPECT_EQ(p.n, 16);
  EXPECT_EQ(p.k, 8);
  EXPECT_EQ(p.batch, 8);
  EXPECT_EQ(p.ldb, 8);
  EXPECT_EQ(p.stride_b, 128);
  EXPECT_EQ(l->program.launches[0].in[1].ref.offset, l->refs[k]->offset);
}

TEST(CudaLowering, GemmTransposesAreFlagsAndItsBiasIsCopiedUnderBeta) {
  Graph g;
  const ValueId a = add_value(g, "a", {8, 4}, true);
  const ValueId w = add_value(g, "w", {16, 8}, true);
  const ValueId c = add_value(g, "c", {16}, true);
  const ValueId y = add_value(g, "y", {4, 16}, false);
  Node n;
  n.name = "gemm";
  n.op_type = "Gemm";
  n.inputs = {a, w, c};
  n.outputs = {y};
  n.attrs = {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"beta", 0.5f}};
  g.add_node(std::move(n));
  g.add_output(y);
  const auto l = lowered(g);
  ASSERT_EQ(l->program.launches.size(), 2u);
  EXPECT_EQ(l->program.launches[0].kind, cuda::Kind::kMap);  // c broadcast into y
  const cuda::MatMulParams& p = l->program.launches[1].matmul;
  EXPECT_TRUE(p.trans_a);
  EXPECT_TRUE(p.trans_b);
  EXPECT_EQ(p.m, 4);
  EXPECT_EQ(p.n, 16);
  EXPECT_EQ(p.k, 8);
  EXPECT_EQ(p.lda, 4);
  EXPECT_EQ(p.ldb, 8);
  EXPECT_DOUBLE_EQ(p.beta, 0.5);
}

// Every op of the tiny zoo models' training graphs (standard and fused) lowers.
TEST(CudaLowering, CoversEveryOpOfTheZoosTrainingGraphs) {
  for (const char* name : {"mlp", "gpt-tiny", "bert-tiny", "resnet-tiny", "vit-tiny"}) {
    for (bool fused : {false, true}) {
      ZooOptions zoo;
      zoo.batch = 2;
      zoo.with_weights = true;
      const Graph model = *build_zoo_model(name, zoo);
      TrainingOptions options;
      options.fused = fused;
      auto training =
          build_training_graph(model, {default_loss(model), ""}, OptimizerSpec{}, options);
      ASSERT_TRUE(training.is_ok()) << training.status().message();
      for (const Node& node : training->graph.nodes())
        EXPECT_TRUE(cuda_supports(node.domain, node.op_type))
            << name << ": " << node.domain << " " << node.op_type;
      CudaOptions cuda_options;
      cuda_options.updates = training->updates;
      auto l = lower_for_cuda(training->graph, cuda_options);
      EXPECT_TRUE(l.is_ok()) << name << (fused ? " fused: " : ": ") << l.status().message();
    }
  }
}

// The full-size models lower too (shape-only: parameters without data), where values pass the
// host's folding limit (gpt2-small's gradient of its 50257-row embedding starts as a fill).
TEST(CudaLowering, FullSizeTrainingGraphsLower) {
  for (const char* name : {"gpt2-small", "bert-base", "resnet50"}) {
    ZooOptions zoo;
    zoo.batch = 2;
    zoo.with_weights = false;
    const Graph model = *build_zoo_model(name, zoo);
    auto training = build_training_graph(model, {default_loss(model), ""}, OptimizerSpec{});
    ASSERT_TRUE(training.is_ok()) << training.status().message();
    CudaOptions options;
    options.updates = training->updates;
    auto l = lower_for_cuda(training->graph, options);
    ASSERT_TRUE(l.is_ok()) << name << ": " << l.status().message();
    // Every optimizer update is written in place; BatchNorm's running statistics (computed by
    // the normalisation itself) are copied back.
    int64_t batch_norms = 0;
    for (const Node& node : training->graph.nodes())
      batch_norms += node.op_type == "BatchNormalization";
    EXPECT_EQ((*l)->update_launches, 2 * batch_norms) << name;
    EXPECT_EQ((*l)->updates_in_place + (*l)->update_launches,
              static_cast<int64_t>(training->updates.size()))
        << name;
  }
}

// Every program of every role of plans across paradigms and precisions lowers with its
// communication stubbed (a role profiled alone on one GPU), the full-size plans of
// scripts/gpu-check.sh among them, each of their roles well within one GPU's memory.
TEST(CudaLowering, PlanProgramsLowerWithCommunicationStubbed) {
  // (model, scheme, the model's batch: a microbatch over dp)
  const std::vector<std::tuple<std::string, std::string, int64_t>> cases = {
      {"gpt-tiny",
       "mesh: {dp: 2, tp: 2}\nbatch: {global: 8, micro: 2}\ntensor: megatron\nprecision: bf16\n",
       4},
      {"gpt-tiny",
       "mesh: {pp: 2, dp: 2}\nbatch: {global: 8, micro: 2}\npipeline: {schedule: 1f1b}\nzero: 1\n",
       4},
      {"gpt-tiny",
       "mesh: {dp: 2, tp: 2}\nbatch: {global: 8, micro: 2}\ntensor: megatron-sp\nzero: "
       "3\nrecompute: selective\n",
       4},
      {"resnet-tiny", "mesh: {dp: 4}\nbatch: {global: 8, micro: 2}\nprecision: bf16\n", 8},
      {"bert-tiny", "mesh: {dp: 2, tp: 2}\nbatch: {global: 4, micro: 2}\ntensor: auto\n", 4},
      // The plans scripts/gpu-check.sh profiles role by role on one GPU, at full size.
      {"bert-base", "mesh: {dp: 8}\nbatch: {global: 64, micro: 8}\nprecision: bf16\n", 64},
      {"gpt2-small",
       "mesh: {dp: 4, tp: 2}\nbatch: {global: 32, micro: 8}\ntensor: megatron\nprecision: bf16\n",
       32},
      {"resnet50", "mesh: {dp: 8}\nbatch: {global: 64, micro: 8}\nprecision: bf16\n", 64}};
  for (const auto& [name, yaml, batch] : cases) {
    auto scheme = parse_scheme(yaml, "scheme");
    ASSERT_TRUE(scheme.is_ok()) << scheme.status().message();
    ZooOptions zoo;
    zoo.batch = batch;
    zoo.with_weights = false;
    auto model = build_zoo_model(name, zoo);
    ASSERT_TRUE(model.is_ok());
    auto plan = lower(*model, *scheme, LoweringOptions{});
    ASSERT_TRUE(plan.is_ok()) << name << ": " << plan.status().message();
    int64_t programs = 0;
    for (const Role& role : plan->roles) {
      int64_t role_bytes = 0;
      for (const Program& prog : role.programs) {
        auto pg = extract_program(role.graph, prog);
        ASSERT_TRUE(pg.is_ok());
        CudaOptions options;
        options.communication = CudaCommunication::kStub;
        auto l = lower_for_cuda(pg->graph, options);
        EXPECT_TRUE(l.is_ok()) << name << " " << yaml << " role " << role.id << " " << prog.name()
                               << ": " << l.status().message();
        if (l.is_ok()) role_bytes += (*l)->program.arena_bytes + (*l)->program.persistent_bytes;
        ++programs;
      }
      // Each program holds its own arena and persistent region; a role's fit on one GPU with
      // room (measured: gpt2-small's role 15.8 GiB, bert-base's 4.7, resnet50's 2.3).
      EXPECT_LT(role_bytes, int64_t{24} << 30) << name << " role " << role.id;
    }
    EXPECT_GT(programs, 1) << name;
  }
}

// splitmix64 of (seed, index) as a number in [0, 1): the draw the CPU and CUDA kernels make.
double uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// A plan's Dropout on a shard draws by its elements' places in the whole tensor: the lowering
// writes, per dim, the whole-tensor offsets of the device's shard, and the draws they give
// under the run's stream are the CPU kernel's mask, on every device and for every stream.
TEST(CudaLowering, AShardedDropoutDrawsByItsPlaceInTheWholeTensor) {
  ZooOptions zoo;
  zoo.batch = 4;
  zoo.dropout = 0.1;
  auto model = build_zoo_model("gpt-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  auto scheme = parse_scheme("mesh: {dp: 2}\nbatch: {global: 4, micro: 2}\n", "scheme");
  ASSERT_TRUE(scheme.is_ok());
  auto plan = lower(*model, *scheme, LoweringOptions{});
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  auto pg = extract_program(plan->roles.at(0).graph, plan->roles.at(0).programs.at(0));
  ASSERT_TRUE(pg.is_ok());
  const Graph& g = pg->graph;
  auto world = create_inproc_world(2);
  int64_t checked = 0;
  for (int64_t d = 0; d < 2; ++d) {
    world[d]->set_mesh(plan->scheme.mesh);
    CudaOptions options;
    options.communication = CudaCommunication::kHost;
    options.communicator = world[d].get();
    auto l = lower_for_cuda(g, options);
    ASSERT_TRUE(l.is_ok()) << l.status().message();
    ASSERT_TRUE((*l)->random_stream.has_value());
    for (const cuda::Launch& launch : (*l)->program.launches) {
      if (launch.kind != cuda::Kind::kDropout) continue;
      const Node& node = g.node(launch.node_id);
      ASSERT_FALSE(node.attr_string("layout", "").empty()) << node.name;
      // The offsets the device reads, from the program's uploads.
      std::vector<int64_t> table;
      for (const cuda::Upload& u : (*l)->program.uploads) {
        if (u.offset != launch.in[1].ref.offset) continue;
        table.resize(u.bytes.size() / sizeof(int64_t));
        std::memcpy(table.data(), u.bytes.data(), table.size() * sizeof(int64_t));
      }
      const cuda::DropoutParams& p = launch.dropout;
      int64_t entries = 0;
      for (int k = 0; k < p.rank; ++k) entries += p.dims[k];
      ASSERT_EQ(static_cast<int64_t>(table.size()), entries) << node.name;
      const Value& xv = g.value(node.inputs[0]);
      Tensor x(xv.dtype, xv.shape.dims);
      for (int64_t i = 0; i < x.num_elements(); ++i) x.set_from_double(i, 1.0);
      for (uint64_t stream : {uint64_t{0}, uint64_t{5}}) {
        std::vector<const Tensor*> inputs;
        for (ValueId v : node.inputs)
          inputs.push_back(v == kNoId ? nullptr : g.value(v).data ? g.value(v).data.get() : &x);
        KernelContext ctx(g, node, inputs, 1);
        ctx.set_communicator(world[d].get());
        ctx.set_random_stream(stream);
        ASSERT_TRUE((*kernel_registry().find("", "Dropout"))(ctx).is_ok());
        const Tensor& y = *ctx.outputs()[0];
        const uint64_t key = draw_key(p.seed, stream);
        int64_t dropped = 0, differ = 0;
        for (int64_t i = 0; i < p.count; ++i) {
          int64_t e = 0, rest = i, start = entries;
          for (int k = p.rank - 1; k >= 0; --k) {
            start -= p.dims[k];
            e += table[static_cast<size_t>(start + rest % p.dims[k])];
            rest /= p.dims[k];
          }
          const bool keep = uniform(key, static_cast<uint64_t>(e)) >= p.ratio;
          dropped += !keep;
          differ += keep != (y.float_at(i) != 0.0);
        }
        EXPECT_EQ(differ, 0) << node.name << " device " << d << " stream " << stream;
        EXPECT_GT(dropped, 0) << node.name;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 4);
}

// The CPU kernels the CUDA backend does not run, exactly: none (Shape, Size and Range are
// evaluated on the host, which knows every shape and their constant inputs).
TEST(CudaLowering, TheCpuOpsWithoutACudaKernelAreKnown) {
  std::vector<std::string> missing;
  for (const auto& [domain, op] : kernel_registry().keys())
    if (!cuda_supports(domain, op)) missing.push_back(domain.empty() ? op : domain + "." + op);
  std::sort(missing.begin(), missing.end());
  // Ring attention has no device kernel: a plan's ring runs on the host (a host step) where the
  // device communicates, and is refused, naming it, where a role is profiled alone.
  EXPECT_EQ(missing,
            (std::vector<std::string>{"ai.autopar.RingAttention", "ai.autopar.RingAttentionGrad"}));
}

// The arena holds every value a launch writes at an offset no other value live at the same
// time overlaps; best fit leaves it within a few percent of the most bytes live at once, and
// since views alias it stays under the CPU executor's peak (which copies them).
TEST(CudaLowering, TheArenaIsCloseToTheLiveBytesAndUnderTheCpuPeak) {
  for (const char* name : {"gpt-tiny", "resnet-tiny"}) {
    const TrainingGraph t = tiny_training_graph(name);
    const auto l = lowered_step(t);
    ASSERT_TRUE(l);
    EXPECT_GE(l->program.arena_bytes, l->live_peak_bytes) << name;
    EXPECT_LE(l->program.arena_bytes, l->live_peak_bytes * 115 / 100) << name;
    // The CPU's peak over the same step.
    ExecutorOptions cpu_options;
    cpu_options.num_threads = 2;
    auto cpu = Executor::create(t.graph, cpu_options);
    ASSERT_TRUE(cpu.is_ok());
    std::vector<Feed> feeds;
    for (ValueId in : t.graph.inputs()) {
      const Value& v = t.graph.value(in);
      feeds.emplace_back(in, std::make_shared<const Tensor>(v.dtype, v.shape.dims));
    }
    RunStats stats;
    ASSERT_TRUE(cpu->run(feeds, &stats).is_ok());
    EXPECT_LE(l->live_peak_bytes, stats.peak_activation_bytes * 11 / 10) << name;
  }
}

// No two arena values whose lifetimes overlap share bytes, and every arena operand of a launch
// lies inside a value live at that launch.
TEST(CudaLowering, ArenaValuesLiveAtOnceNeverOverlap) {
  for (const char* name : {"gpt-tiny", "resnet-tiny"}) {
    const TrainingGraph t = tiny_training_graph(name);
    const auto l = lowered_step(t);
    ASSERT_TRUE(l);
    const auto& blocks = l->arena_blocks;
    ASSERT_GT(blocks.size(), 10u);
    int64_t overlapping_lifetimes = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_LE(blocks[i].offset + blocks[i].bytes, l->program.arena_bytes);
      EXPECT_EQ(blocks[i].offset % 256, 0);
      for (size_t j = i + 1; j < blocks.size(); ++j) {
        const auto& a = blocks[i];
        const auto& b = blocks[j];
        if (a.last < b.first || b.last < a.first) continue;
        ++overlapping_lifetimes;
        EXPECT_TRUE(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset)
            << name << ": values " << a.value << " and " << b.value << " share bytes";
      }
    }
    EXPECT_GT(overlapping_lifetimes, 0) << name;
    const auto& launches = l->program.launches;
    for (size_t i = 0; i < launches.size(); ++i) {
      auto check = [&](const cuda::Access& a) {
        if (a.ref.region != cuda::Region::kArena || a.ref.offset < 0) return;
        bool inside = false;
        for (const auto& b : blocks) {
          inside = inside || (b.offset == a.ref.offset && b.first <= static_cast<int64_t>(i) &&
                              static_cast<int64_t>(i) <= b.last);
        }
        EXPECT_TRUE(inside) << name << ": launch " << i << " (" << launches[i].node
                            << ") reads or writes arena offset " << a.ref.offset
                            << " outside a live value";
      };
      for (const auto& a : launches[i].in) check(a);
      for (const auto& a : launches[i].out) check(a);
    }
  }
}

// gpt-tiny's Adam step: elementwise runs fuse (Adam's dozen ops per parameter become one
// launch), reshapes are aliases, and the updates are copied back into the state.
TEST(CudaLowering, GptTinyStepFusesElementwiseRunsAndAliasesViews) {
  const TrainingGraph t = tiny_training_graph("gpt-tiny");
  const auto l = lowered_step(t);
  ASSERT_TRUE(l);
  const CudaLoweringSummary s = summarize(*l);
  // 1,232 nodes: 857 of them in multi-node elementwise runs, 106 reshapes and 33 transposes
  // read by MatMuls as aliases, every one of the 157 updates in place.
  EXPECT_EQ(t.graph.num_nodes(), 1232);
  EXPECT_EQ(s.fused_nodes, 857);
  EXPECT_EQ(s.views, 139);
  EXPECT_EQ(l->updates_in_place, 157);
  EXPECT_EQ(l->update_launches, 0);
  EXPECT_EQ(s.launches, 417);
  const std::map<std::string, int64_t> by_kind = {
      {"cross_entropy", 1}, {"gather", 2},  {"layer_norm", 9}, {"map", 248},
      {"matmul", 75},       {"reduce", 75}, {"scatter_nd", 2}, {"softmax", 5}};
  EXPECT_EQ(s.launches_by_kind, by_kind);
  EXPECT_LT(s.launches, t.graph.num_nodes());
}

// A fused run names how many nodes it runs and the bytes it moves: y = relu(a + bias) over
// [4, 8] f32 with bias [8] reads a (128 B) and bias once (32 B) and writes y (128 B).
TEST(CudaLowering, AFusedRunCountsItsNodesAndBytes) {
  GraphBuilder b("bias_relu");
  const ValueId a = b.input("a", DType::kFloat32, {4, 8});
  const ValueId bias = b.input("bias", DType::kFloat32, {8});
  b.output(b.op1("Relu", {b.op1("Add", {a, bias})}));
  const Graph g = b.finish();
  const auto l = lowered(g);
  ASSERT_TRUE(l);
  ASSERT_EQ(l->program.launches.size(), 1u);
  const cuda::Launch& launch = l->program.launches[0];
  EXPECT_STREQ(cuda::kind_name(launch.kind), "map");
  EXPECT_EQ(launch.nodes, 2);
  EXPECT_EQ(cuda::launch_bytes(launch), 128 + 32 + 128);
  // gpt-tiny's step: every node a launch runs is counted once (views and host-side shape
  // arithmetic launch nothing).
  const TrainingGraph t = tiny_training_graph("gpt-tiny");
  const auto step = lowered_step(t);
  ASSERT_TRUE(step);
  int64_t nodes = 0, multi = 0;
  for (const cuda::Launch& x : step->program.launches) {
    nodes += x.nodes;
    if (x.nodes > 1) multi += x.nodes;
  }
  EXPECT_EQ(multi, summarize(*step).fused_nodes);
  EXPECT_LT(nodes, t.graph.num_nodes());
}

// ai.autopar.training's Gelu and GeluGrad lower to the map op of their form (the erf one by
// default, the tanh one with approximate = "tanh").
TEST(CudaLowering, GeluFormsLowerToTheirMapOps) {
  for (const std::string form : {"none", "tanh"}) {
    GraphBuilder b("gelu");
    const ValueId x = b.input("x", DType::kFloat32, {4, 8});
    const ValueId dy = b.input("dy", DType::kFloat32, {4, 8});
    const ValueId y = b.op("Gelu", {x}, {{"approximate", form}}, 1, kTrainingDomain)[0];
    const ValueId dx = b.op("GeluGrad", {dy, x}, {{"approximate", form}}, 1, kTrainingDomain)[0];
    b.output(y);
    b.output(dx);
    const auto l = lowered(b.finish());
    ASSERT_TRUE(l);
    std::vector<cuda::MapOp> ops;
    for (const cuda::Launch& launch : l->program.launches) {
      for (const cuda::MapInstr& instr : launch.map.code) ops.push_back(instr.op);
    }
    const bool tanh = form == "tanh";
    const cuda::MapOp forward = tanh ? cuda::MapOp::kGeluTanh : cuda::MapOp::kGelu;
    const cuda::MapOp other = tanh ? cuda::MapOp::kGelu : cuda::MapOp::kGeluTanh;
    EXPECT_NE(std::find(ops.begin(), ops.end(), forward), ops.end()) << form;
    EXPECT_NE(std::find(ops.begin(), ops.end(),
                        tanh ? cuda::MapOp::kGeluTanhGrad : cuda::MapOp::kGeluGrad),
              ops.end())
        << form;
    EXPECT_EQ(std::find(ops.begin(), ops.end(), other), ops.end()) << form;
  }
}

// cuDNN pads symmetrically: a Conv with pads [0, 0, 1, 1] convolves a zero-filled copy of its
// input grown by the pads, unpadded. The copy's temporary is the lowering's own value, added
// while the node's shapes are read.
TEST(CudaLowering, AnAsymmetricallyPaddedConvConvolvesAPaddedCopy) {
  GraphBuilder b("conv");
  const ValueId x = b.input("x", DType::kFloat32, {2, 8, 12, 12});
  const ValueId w = b.input("w", DType::kFloat32, {8, 4, 3, 3});
  b.output(b.op1("Conv", {x, w},
                 {{"strides", std::vector<int64_t>{2, 2}},
                  {"group", int64_t{2}},
                  {"pads", std::vector<int64_t>{0, 0, 1, 1}}}));
  const auto l = lowered(b.finish());
  ASSERT_TRUE(l);
  ASSERT_EQ(l->program.launches.size(), 3u);
  const cuda::Launch& fill = l->program.launches[0];
  const cuda::Launch& copy = l->program.launches[1];
  const cuda::Launch& conv = l->program.launches[2];
  EXPECT_EQ(fill.kind, cuda::Kind::kMap);
  EXPECT_EQ(fill.space.count(), 2 * 8 * 13 * 13);
  EXPECT_EQ(copy.space.count(), 2 * 8 * 12 * 12);
  EXPECT_EQ(copy.out[0].ref.offset, fill.out[0].ref.offset);
  ASSERT_EQ(conv.kind, cuda::Kind::kConv);
  EXPECT_EQ(conv.in[0].ref.offset, fill.out[0].ref.offset);
  EXPECT_EQ(conv.conv.in[0], 13);
  EXPECT_EQ(conv.conv.in[1], 13);
  EXPECT_EQ(conv.conv.out[0], 6);
  EXPECT_EQ(conv.conv.out[1], 6);
  EXPECT_EQ(conv.conv.pad[0], 0);
  EXPECT_EQ(conv.conv.pad[1], 0);
  EXPECT_EQ(conv.conv.kernel[0], 3);
  EXPECT_EQ(conv.conv.group, 2);
  EXPECT_EQ(conv.conv.c, 8);
  EXPECT_EQ(conv.conv.k, 8);
}

// A weight gradient written as a convolution (a filter larger than the output) runs as cuDNN's
// backward filter of the forward convolution: its operands swapped into packed copies, the
// result swapped back. In resnet-tiny's step, 11 of its 12 weight gradients take that form (one
// has a filter that covers fewer positions than its output, and keeps the forward form).
TEST(CudaLowering, WeightGradientConvolutionsRunAsBackwardFilter) {
  GraphBuilder b("wgrad");
  const ValueId a = b.input("a", DType::kFloat32, {4, 2, 9, 9});  // [C, N, S]
  const ValueId w = b.input("b", DType::kFloat32, {5, 2, 4, 4});  // [M, N, O]
  b.output(
      b.op1("Conv", {a, w},
            {{"strides", std::vector<int64_t>{1, 1}}, {"dilations", std::vector<int64_t>{2, 2}}}));
  const auto l = lowered(b.finish());
  ASSERT_TRUE(l);
  ASSERT_EQ(l->program.launches.size(), 4u);
  const cuda::Launch& conv = l->program.launches[2];
  ASSERT_EQ(conv.kind, cuda::Kind::kConv);
  EXPECT_TRUE(conv.conv.filter_grad);
  EXPECT_EQ(conv.conv.n, 2);
  EXPECT_EQ(conv.conv.c, 4);
  EXPECT_EQ(conv.conv.k, 5);
  EXPECT_EQ(conv.conv.in[0], 9);
  EXPECT_EQ(conv.conv.out[0], 4);
  EXPECT_EQ(conv.conv.kernel[0], 3);  // (9 - 2·3 - 1) / 1 + 1
  EXPECT_EQ(conv.conv.stride[0], 2);  // the forward stride is this form's dilation
  EXPECT_EQ(conv.conv.dilation[0], 1);
  // The operands are read swapped: x[n, c, s] = a[c, n, s].
  const cuda::Launch& x = l->program.launches[0];
  EXPECT_EQ(x.space.count(), 4 * 2 * 81);
  const cuda::Launch& back = l->program.launches[3];
  EXPECT_EQ(back.space.count(), 4 * 5 * 9);

  const TrainingGraph t = tiny_training_graph("resnet-tiny");
  const auto step = lowered_step(t);
  ASSERT_TRUE(step);
  int64_t forward_convs = 0, filter_grads = 0;
  for (const Node& n : t.graph.nodes())
    if (n.op_type == "Conv" && n.name.rfind("grad/", 0) != 0) ++forward_convs;
  for (const cuda::Launch& x : step->program.launches)
    if (x.kind == cuda::Kind::kConv && x.conv.filter_grad) ++filter_grads;
  EXPECT_EQ(forward_convs, 12);
  EXPECT_EQ(filter_grads, 11);
}

// Stand-in ids for profiles range over what they index: bert-tiny's token ids over its
// vocabulary (the embedding's Gather, and its gradient's ScatterND through an Unsqueeze),
// token types over 2, labels over the classifier's classes.
TEST(CudaPlanStandIns, IntegerInputsRangeOverWhatTheyIndex) {
  const TrainingGraph t = tiny_training_graph("bert-tiny");
  const Graph& g = t.graph;
  std::map<std::string, int64_t> bounds;
  for (ValueId in : g.inputs()) {
    const Value& v = g.value(in);
    if (v.dtype == DType::kInt64 && !v.is_initializer()) bounds[v.name] = index_bound(g, in);
  }
  ASSERT_EQ(bounds.size(), 3u);
  int64_t vocab = 0, types = 0, classes = 0;
  for (const Value& v : g.values()) {
    if (v.name == "embeddings.word_embeddings.weight") vocab = v.shape.dims[0];
    if (v.name == "embeddings.token_type_embeddings.weight") types = v.shape.dims[0];
  }
  classes = g.value(g.node(*g.find_node("loss/SoftmaxCrossEntropyLoss")).inputs[0]).shape.dims[1];
  ASSERT_GT(vocab, 2);
  EXPECT_EQ(types, 2);
  std::vector<int64_t> got;
  for (const auto& [name, bound] : bounds) got.push_back(bound);
  std::sort(got.begin(), got.end());
  std::vector<int64_t> want = {types, classes, vocab};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
}

TEST(CudaLowering, AnUnsupportedOpIsAnErrorNamingTheNode) {
  Graph g;
  const ValueId x = add_value(g, "x", {4}, true);
  const ValueId y = add_value(g, "y", {4}, false);
  Node n;
  n.name = "odd";
  n.op_type = "Send";
  n.domain = std::string(kAutoparDomain);
  n.inputs = {x};
  g.add_node(std::move(n));
  Node m;
  m.name = "neg";
  m.op_type = "Neg";
  m.inputs = {x};
  m.outputs = {y};
  g.add_node(std::move(m));
  g.add_output(y);
  auto l = lower_for_cuda(g);
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.status().message().find("node 'odd' (Send)"), std::string::npos)
      << l.status().message();
  CudaOptions stub;
  stub.communication = CudaCommunication::kStub;
  EXPECT_TRUE(lower_for_cuda(g, stub).is_ok());
}

TEST(CudaLowering, WithoutADeviceCreatingAnExecutorSaysWhy) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a CUDA device is present";
  const Graph g = matmul_graph({4, 5}, {5, 6}, {4, 6});
  auto e = CudaExecutor::create(g);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("--backend cuda: "), std::string::npos)
      << e.status().message();
}

}  // namespace
}  // namespace autopar::runtime
