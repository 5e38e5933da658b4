// Hardware profiles (parsing, validation, efficiency curves) and the α–β communication model
// against closed forms. The profile here is a fixture with round numbers, not a real machine.
#include <array>
#include <cmath>

#include <gtest/gtest.h>

#include "autopar/cost/calibrate.h"
#include "autopar/cost/communication.h"
#include "autopar/cost/compute.h"
#include "autopar/cost/hardware_profile.h"
#include "autopar/ir/builder.h"
#include "autopar/ops/op_def.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

const char* const kFixture = R"(
name: fixture
device:
  name: test-gpu
  peak_flops: {fp32: 20e12, tf32: 160e12, bf16: 320e12}
  memory_bytes: 80e9
  memory_bandwidth: 2e12
  launch_overhead_s: 5e-6
  reserved_bytes: 2e9
  efficiency:
    gemm: [[1e6, 0.1], [1e10, 0.5], [1e12, 0.9]]
    conv: [[1e6, 0.1], [1e12, 0.8]]
    elementwise: [[1e3, 0.05], [1e8, 0.9]]
    norm: [[1e3, 0.05], [1e8, 0.8]]
    attention: [[1e6, 0.1], [1e12, 0.7]]
topology:
  devices_per_node: 8
  tiers:
    - name: nvlink
      devices_per_group: 8
      alpha_s: 1e-6
      bandwidth: 300e9
      efficiency: {all_reduce: 0.8, all_gather: 0.8, reduce_scatter: 0.8, all_to_all: 0.5, p2p: 0.9}
    - name: infiniband
      devices_per_group: 1024
      alpha_s: 5e-6
      bandwidth: 25e9
      nics_per_node: 8
      efficiency: {all_reduce: 0.9, all_gather: 0.9, reduce_scatter: 0.9, all_to_all: 0.6, p2p: 0.9}
)";

HardwareProfile fixture(int64_t nodes = 1) {
  auto p = parse_hardware_profile(kFixture, "fixture.yaml");
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  HardwareProfile profile = std::move(p).value();
  profile.nodes = nodes;
  return profile;
}

std::vector<int64_t> devices(int64_t first, int64_t count, int64_t stride = 1) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < count; ++i) ids.push_back(first + i * stride);
  return ids;
}

TEST(HardwareProfile, ParsesTheFixture) {
  const HardwareProfile p = fixture(4);
  EXPECT_EQ(p.name, "fixture");
  EXPECT_EQ(p.num_devices(), 32);
  EXPECT_EQ(p.device.peak("bf16"), 320e12);
  EXPECT_EQ(p.device.peak("fp16"), 20e12);  // not listed: the fp32 peak
  EXPECT_EQ(p.tiers.size(), 2u);
  EXPECT_EQ(p.tier_for(devices(0, 8)).name, "nvlink");
  EXPECT_EQ(p.tier_for(devices(0, 4, 8)).name, "infiniband");
}

// A calibrated profile is written from the profile it started from (calibrate --backend cuda
// --hw BASE): every shipped GPU profile reads back from profile_yaml as it was, its software
// stack (memory policy, attention kernel, fusions), TF32 flags and L2 size included.
TEST(HardwareProfile, WrittenProfilesReadBackAsTheyWere) {
  for (const char* name : {"dgx-a100-80g", "dgx-h100", "hgx-h200"}) {
    SCOPED_TRACE(name);
    auto shipped = read_hardware_profile(name, std::string(AUTOPAR_SOURCE_DIR) + "/configs/hw");
    ASSERT_TRUE(shipped.is_ok()) << shipped.status().message();
    auto back = parse_hardware_profile(profile_yaml(*shipped, "# written\n"), "written.yaml");
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(back->memory_policy, shipped->memory_policy);
    EXPECT_EQ(back->attention, shipped->attention);
    EXPECT_EQ(back->fusions, shipped->fusions);
    EXPECT_FALSE(back->fusions.empty());
    EXPECT_EQ(back->device.tf32_conv, shipped->device.tf32_conv);
    EXPECT_EQ(back->device.tf32_matmul, shipped->device.tf32_matmul);
    EXPECT_EQ(back->device.l2_bytes, shipped->device.l2_bytes);
    EXPECT_GT(back->device.l2_bytes, 0);
    EXPECT_EQ(back->device.peak_flops, shipped->device.peak_flops);
    EXPECT_EQ(back->device.free_views, shipped->device.free_views);
    EXPECT_EQ(back->device.overlap_slowdown, shipped->device.overlap_slowdown);
    EXPECT_GT(back->device.overlap_slowdown, 0.1);
    EXPECT_TRUE(back->device.nhwc_convolutions);
    EXPECT_EQ(back->memory_format, shipped->memory_format);
    // A stack keeping NCHW says so in what is written.
    shipped->memory_format = MemoryFormat::kNchw;
    auto nchw = parse_hardware_profile(profile_yaml(*shipped, "# written\n"), "written.yaml");
    ASSERT_TRUE(nchw.is_ok()) << nchw.status().message();
    EXPECT_EQ(nchw->memory_format, MemoryFormat::kNchw);
    EXPECT_EQ(back->device.efficiency.at(OpClass::kGemm).points().size(),
              shipped->device.efficiency.at(OpClass::kGemm).points().size());
    EXPECT_EQ(back->device.gemm_shapes.has_value(), shipped->device.gemm_shapes.has_value());
    if (shipped->device.gemm_shapes) {
      EXPECT_EQ(back->device.gemm_shapes->rows(), shipped->device.gemm_shapes->rows());
    }
    EXPECT_EQ(back->tiers.size(), shipped->tiers.size());
  }
}

TEST(HardwareProfile, CurvesInterpolateInLogWork) {
  const HardwareProfile p = fixture();
  const EfficiencyCurve& gemm = p.device.efficiency.at(OpClass::kGemm);
  EXPECT_DOUBLE_EQ(gemm.at(1e3), 0.1);   // flat before the first point
  EXPECT_DOUBLE_EQ(gemm.at(1e8), 0.3);   // half-way in log10 between 1e6 and 1e10
  EXPECT_DOUBLE_EQ(gemm.at(1e11), 0.7);  // half-way between 1e10 and 1e12
  EXPECT_DOUBLE_EQ(gemm.at(1e15), 0.9);  // flat after the last point
}

TEST(HardwareProfile, ErrorsNameTheField) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string text = kFixture;
    text.replace(text.find(from), from.size(), to);
    auto p = parse_hardware_profile(text, "p.yaml");
    return p.is_ok() ? std::string("ok") : p.status().message();
  };
  EXPECT_EQ(with("memory_bandwidth: 2e12", "memory_bandwidth: -1"),
            "p.yaml: device.memory_bandwidth: -1 must be positive");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 90e9"),
            "p.yaml: device.reserved_bytes: leaves no memory for a plan");
  EXPECT_EQ(with("[[1e6, 0.1], [1e10, 0.5]", "[[1e6, 0.1], [1e5, 0.5]"),
            "p.yaml: device.efficiency.gemm: point [100000, 0.5]: work must grow from point to "
            "point");
  EXPECT_EQ(with("all_to_all: 0.5", "all_to_all: 1.5"),
            "p.yaml: topology.tiers[0].efficiency.all_to_all: 1.5 is not a fraction in (0, 1]");
  EXPECT_EQ(with("devices_per_group: 8", "devices_per_group: 4"),
            "p.yaml: topology.tiers[0].devices_per_group: 4 is not devices_per_node (8): the "
            "first tier joins one node's devices");
  EXPECT_EQ(with("bf16: 320e12", "int8: 320e12"),
            "p.yaml: device.peak_flops: 'int8' is not fp64, fp32, tf32, bf16 or fp16");
  EXPECT_EQ(with("      nics_per_node: 8\n", ""),
            "p.yaml: topology.tiers[1].nics_per_node: missing");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 2e9\n  overlap_communication: maybe"),
            "p.yaml: device.overlap_communication: expected true or false");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 2e9\n  program_overhead_s: -1"),
            "p.yaml: device.program_overhead_s: -1 must not be negative");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 2e9\n  fused_op_element_s: -1e-9"),
            "p.yaml: device.fused_op_element_s: -1e-9 must not be negative");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 2e9\n  optimizer_element_s: -2"),
            "p.yaml: device.optimizer_element_s: -2 must not be negative");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 2e9\n  collective_overhead_s: .inf"),
            "p.yaml: device.collective_overhead_s: .inf is not a finite number");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 2e9\n  free_views: often"),
            "p.yaml: device.free_views: expected true or false");
  EXPECT_EQ(with("name: fixture", "name: fixture\nmemory_policy: nemo"),
            "p.yaml: memory_policy: 'nemo' is not one of autopar, megatron, deepspeed, fsdp");
  EXPECT_EQ(with("name: fixture", "name: fixture\nkernels: {attention: xformers}"),
            "p.yaml: kernels.attention: 'xformers' is not one of unfused, flash");
  EXPECT_EQ(with("name: fixture", "name: fixture\nkernels: {fusions: [bias_relu]}"),
            "p.yaml: kernels.fusions: 'bias_relu' is not one of op_kernels, bias_gelu, "
            "bias_dropout_add, scale_mask_softmax, cross_entropy");
  EXPECT_EQ(with("name: fixture", "name: fixture\nkernels: {fusions: op_kernels}"),
            "p.yaml: kernels.fusions: expected a list, e.g. [op_kernels]");
  EXPECT_EQ(with("name: fixture", "name: fixture\nkernels: {fuse: [op_kernels]}"),
            "p.yaml: kernels.fuse: unknown field (known: attention, fusions, memory_format)");
  EXPECT_EQ(with("name: fixture", "name: fixture\nkernels: {memory_format: chwn}"),
            "p.yaml: kernels.memory_format: 'chwn' is not one of nhwc, nchw");
  // An optional field's default written out reads as the default.
  EXPECT_EQ(with("reserved_bytes: 2e9",
                 "reserved_bytes: 2e9\n  program_overhead_s: 0\n  overlap_slowdown: 0"),
            "ok");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 2e9\n  overlap_slowdown: 1"),
            "p.yaml: device.overlap_slowdown: 1 must be below 1 (compute would never finish)");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 2e9\n  overlap_slowdown: -0.1"),
            "p.yaml: device.overlap_slowdown: -0.1 must not be negative");
  EXPECT_EQ(with("reserved_bytes: 2e9", "reserved_bytes: 2e9\n  nhwc_convolutions: 1x"),
            "p.yaml: device.nhwc_convolutions: expected true or false");
  EXPECT_EQ(with("    attention: [[1e6, 0.1], [1e12, 0.7]]",
                 "    attention: [[1e6, 0.1], [1e12, 0.7]]\n    flash_atention: [[1e6, 0.1]]"),
            "p.yaml: device.efficiency.flash_atention: unknown curve (known: gemm, conv, "
            "elementwise, norm, attention, flash_attention, flash_attention_backward, "
            "gemm_shapes)");
  EXPECT_EQ(
      with("    attention: [[1e6, 0.1], [1e12, 0.7]]",
           "    attention: [[1e6, 0.1], [1e12, 0.7]]\n    flash_attention_backward: [[1e6, 2]]"),
      "p.yaml: device.efficiency.flash_attention_backward: 2 is not a fraction in (0, 1]");
  EXPECT_EQ(with("name: fixture", "name: fixture\nkernels: flash"),
            "p.yaml: kernels: expected {attention: flash|unfused, fusions: [op_kernels], "
            "memory_format: nhwc|nchw}");
  auto flash = parse_hardware_profile(
      std::string(kFixture).replace(std::string(kFixture).find("name: fixture"), 13,
                                    "name: fixture\nkernels: {attention: flash}"),
      "p.yaml");
  ASSERT_TRUE(flash.is_ok()) << flash.status().message();
  EXPECT_EQ(flash->attention, AttentionKernel::kFlash);
  EXPECT_FALSE(flash->fuses(Fusion::kOpKernels));
  auto fused = parse_hardware_profile(
      std::string(kFixture).replace(std::string(kFixture).find("name: fixture"), 13,
                                    "name: fixture\nkernels: {fusions: [op_kernels]}"),
      "p.yaml");
  ASSERT_TRUE(fused.is_ok()) << fused.status().message();
  EXPECT_TRUE(fused->fuses(Fusion::kOpKernels));
  EXPECT_EQ(fused->attention, AttentionKernel::kUnfused);
  // All optional: a GPU profile leaves them out (no per-program cost, NCCL's own streams).
  auto p = parse_hardware_profile(kFixture, "p.yaml");
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->attention, AttentionKernel::kUnfused);
  EXPECT_EQ(p->device.program_overhead_s, 0.0);
  EXPECT_TRUE(p->device.overlap_communication);
  EXPECT_EQ(p->device.fused_op_element_s, 0.0);
  EXPECT_EQ(p->device.optimizer_element_s, 0.0);
  EXPECT_FALSE(p->device.free_views);
  EXPECT_FALSE(p->device.nhwc_convolutions);
  EXPECT_EQ(p->memory_format, MemoryFormat::kNhwc);
  EXPECT_FALSE(p->device.flash_attention);
  EXPECT_FALSE(p->device.flash_attention_backward);
}

TEST(Communication, RingFormulasInsideANode) {
  const HardwareProfile p = fixture();
  const double bytes = 1e9;
  // Ring all-reduce over 8: 14 α + 2·7/8·S/(300e9·0.8).
  const CollectiveCost ar = collective_cost(p, Collective::kAllReduce, bytes, devices(0, 8));
  EXPECT_EQ(ar.algorithm, "ring");
  EXPECT_NEAR(ar.seconds, 14e-6 + 2 * 7.0 / 8.0 * bytes / 240e9, 1e-12);
  // All-gather: 7 α + 7/8 · S / 240e9.
  EXPECT_NEAR(collective_cost(p, Collective::kAllGather, bytes, devices(0, 8)).seconds,
              7e-6 + 7.0 / 8.0 * bytes / 240e9, 1e-12);
  // Point to point at 0.9 of 300e9.
  EXPECT_NEAR(collective_cost(p, Collective::kPointToPoint, bytes, devices(0, 2)).seconds,
              1e-6 + bytes / 270e9, 1e-12);
  // A tiny all-reduce is latency-bound: the tree's 2·log2(8) = 6 steps beat the ring's 14.
  const CollectiveCost small = collective_cost(p, Collective::kAllReduce, 1e3, devices(0, 8));
  EXPECT_EQ(small.algorithm, "tree");
  EXPECT_NEAR(small.seconds, 6e-6 + 2 * 1e3 / 240e9, 1e-15);
  EXPECT_EQ(collective_cost(p, Collective::kAllReduce, bytes, {3}).seconds, 0.0);
}

TEST(Communication, GroupsAcrossNodesAreHierarchicalAndShareNics) {
  const HardwareProfile p = fixture(4);
  const double bytes = 1e9;
  // One device per node on 4 nodes: each gets all 8 NICs (8·25e9 at 0.9).
  const double nic = 8 * 25e9 * 0.9;
  EXPECT_NEAR(collective_cost(p, Collective::kAllReduce, bytes, devices(0, 4, 8)).seconds,
              6 * 5e-6 + 2 * 3.0 / 4.0 * bytes / nic, 1e-12);
  // Eight such groups at once (dp across nodes, tp = 8 inside): an eighth of the NICs each.
  EXPECT_NEAR(collective_cost(p, Collective::kAllReduce, bytes, devices(0, 4, 8), 8).seconds,
              6 * 5e-6 + 2 * 3.0 / 4.0 * bytes / (nic / 8), 1e-12);
  // All 32 devices: reduce-scatter in the node, all-reduce of S/8 across nodes with a NIC each,
  // all-gather in the node.
  const CollectiveCost all = collective_cost(p, Collective::kAllReduce, bytes, devices(0, 32));
  EXPECT_EQ(all.algorithm, "hierarchical");
  const double intra = 7e-6 + 7.0 / 8.0 * bytes / 240e9;
  const double inter = 6 * 5e-6 + 2 * 3.0 / 4.0 * (bytes / 8) / (25e9 * 0.9);
  EXPECT_NEAR(all.seconds, 2 * intra + inter, 1e-12);
}

// Rooflines on the fixture (bf16 peak 320 TF, fp32 20 TF, 2 TB/s, 5 µs launches).
TEST(Compute, NodesAreRooflinesWithTheirClassCurves) {
  const HardwareProfile p = fixture();
  ZooOptions zoo;
  zoo.batch = 8;
  auto model = build_zoo_model("gpt-tiny", zoo);
  ASSERT_TRUE(model.is_ok());
  const Graph& g = *model;
  const Node& fc = g.node(*g.find_node("h.0/mlp/c_fc/MatMul"));
  const Node& scores = g.node(*g.find_node("h.0/attn/MatMul"));
  const Node& gelu = g.node(*g.find_node("h.0/mlp/act/Mul"));
  EXPECT_EQ(op_class_of(g, fc), OpClass::kGemm);
  EXPECT_EQ(op_class_of(g, scores), OpClass::kAttention);  // activations × activations
  EXPECT_EQ(op_class_of(g, gelu), OpClass::kElementwise);
  // c_fc: [8,16,64] × [64,256] = 2·8·16·64·256 FLOPs in fp32, gemm efficiency at that size.
  const double flops = 2.0 * 8 * 16 * 64 * 256;
  const double gemm_eff = p.device.efficiency.at(OpClass::kGemm).at(flops);
  const double bytes = 4.0 * (8 * 16 * 64 + 64 * 256 + 8 * 16 * 256);
  const NodeCost c = node_cost(p, g, fc);
  EXPECT_NEAR(c.seconds, std::max(flops / (20e12 * gemm_eff), bytes / 2e12) + 5e-6, 1e-15);
  // An elementwise Mul is bound by memory at the elementwise curve's fraction of 2 TB/s.
  const double mul_bytes = 4.0 * 3 * 8 * 16 * 256;
  const NodeCost m = node_cost(p, g, gelu);
  EXPECT_TRUE(m.memory_bound);
  EXPECT_NEAR(
      m.seconds,
      mul_bytes / (2e12 * p.device.efficiency.at(OpClass::kElementwise).at(mul_bytes)) + 5e-6,
      1e-15);
}

// The fused attention op and its gradient are read on the profile's FlashAttention curves, a
// MatMul of scores on the attention class's; without those curves, the fused ops take the
// attention class's too.
TEST(Compute, FusedAttentionRunsAtTheFlashAttentionRates) {
  GraphBuilder b;
  const std::vector<int64_t> dims = {2, 16, 1024, 128};
  std::vector<ValueId> qkv;
  for (const char* name : {"q", "k", "v"}) qkv.push_back(b.input(name, DType::kBFloat16, dims));
  const std::vector<ValueId> y = b.op("Attention", qkv, {{"causal", 1}}, 2, kTrainingDomain);
  const ValueId dy = b.input("dy", DType::kBFloat16, dims);
  b.op("AttentionGrad", {dy, qkv[0], qkv[1], qkv[2], y[0], y[1]}, {{"causal", 1}}, 3,
       kTrainingDomain);
  const ValueId kt = b.op1("Transpose", {qkv[1]}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});
  b.op1("MatMul", {qkv[0], kt});
  const Graph g = b.finish();
  const Node& forward = g.node(0);
  const Node& backward = g.node(1);
  const Node& scores = g.node(3);
  ASSERT_EQ(forward.op_type, "Attention");
  ASSERT_EQ(backward.op_type, "AttentionGrad");
  ASSERT_EQ(scores.op_type, "MatMul");
  // Causal: 2·16·1024·1025/2 visible pairs, 4·128 + 3 FLOPs each forward, 10·128 + 4 backward.
  const double pairs = 2.0 * 16 * 1024 * 1025 / 2;
  EXPECT_DOUBLE_EQ(node_flops(g, forward), pairs * (4 * 128 + 3));
  EXPECT_DOUBLE_EQ(node_flops(g, backward), pairs * (10 * 128 + 4));

  HardwareProfile p = fixture();
  p.device.flash_attention = *EfficiencyCurve::create({{1e6, 0.05}, {1e12, 0.3}});
  p.device.flash_attention_backward = *EfficiencyCurve::create({{1e6, 0.04}, {1e12, 0.25}});
  const EfficiencyCurve& attention = p.device.efficiency.at(OpClass::kAttention);
  auto seconds = [&](const Node& n, const EfficiencyCurve& curve) {
    const double flops = node_flops(g, n);
    return std::max(flops / (320e12 * curve.at(flops)), node_bytes(g, n) / 2e12) + 5e-6;
  };
  EXPECT_DOUBLE_EQ(node_cost(p, g, forward).seconds, seconds(forward, *p.device.flash_attention));
  EXPECT_DOUBLE_EQ(node_cost(p, g, backward).seconds,
                   seconds(backward, *p.device.flash_attention_backward));
  EXPECT_DOUBLE_EQ(node_cost(p, g, scores).seconds, seconds(scores, attention));
  // The flash curves are slower here than the attention class's at these FLOPs.
  EXPECT_GT(node_cost(p, g, forward).seconds, seconds(forward, attention));
  const HardwareProfile plain = fixture();
  EXPECT_DOUBLE_EQ(node_cost(plain, g, forward).seconds, seconds(forward, attention));
  EXPECT_DOUBLE_EQ(node_cost(plain, g, backward).seconds, seconds(backward, attention));
}

// Where the runtime fuses, a run of elementwise nodes is one kernel: one launch, the bytes that
// cross its boundary, and fused_op_element_s per element and op; nodes outside runs are -1.
TEST(Compute, FusedRunsAreOneKernel) {
  GraphBuilder b("chain");
  const ValueId x = b.input("x", DType::kFloat32, {1024, 256});
  const ValueId bias = b.input("bias", DType::kFloat32, {256});
  ValueId y = b.op1("Add", {x, bias});  // a run of three: Add, Mul, Sqrt
  y = b.op1("Mul", {y, x});
  y = b.op1("Sqrt", {y});
  y = b.op1("Softmax", {y}, {{"axis", int64_t{-1}}});  // not fusible: ends the run
  y = b.op1("Neg", {y});                               // a run of one is no run
  b.output(y);
  const Graph g = b.finish();
  HardwareProfile p = fixture();
  EXPECT_TRUE(fused_node_seconds(p, g).empty());  // the profile does not fuse
  p.device.fused_op_element_s = 1e-10;
  const std::vector<double> s = fused_node_seconds(p, g);
  ASSERT_EQ(s.size(), 5u);
  // Reads x and the bias row, writes the Sqrt (the Softmax reads it); 3 ops over 262144
  // elements at 0.1 ns is 78.6 µs, above the 2.1 MB over 2 TB/s at the curve's fraction.
  const double elements = 1024.0 * 256, bytes = 4.0 * (2 * elements + 256);
  const double memory = bytes / (2e12 * p.device.efficiency.at(OpClass::kElementwise).at(bytes));
  EXPECT_LT(memory, 3 * elements * 1e-10);
  const double kernel = 3 * elements * 1e-10 + 5e-6;
  for (int n = 0; n < 3; ++n) EXPECT_NEAR(s[n], kernel / 3, 1e-15) << n;
  EXPECT_EQ(s[3], -1.0);
  EXPECT_EQ(s[4], -1.0);
  // A program boundary at the Mul splits the run: Add is alone, Mul and Sqrt a run of two.
  const std::vector<double> cut = fused_node_seconds(p, g, {1});
  EXPECT_EQ(cut[0], -1.0);
  EXPECT_NEAR(cut[1] + cut[2], 2 * elements * 1e-10 + 5e-6, 1e-15);
}

// Where the stack runs op kernels, the nodes carrying out one source op in one direction are one
// kernel: what crosses its boundary read or written once (a wide copy made by a Cast inside it at
// its narrow size, for the op's backward too), one launch.
TEST(Compute, OpKernelsRunEachSourceOpAsOneKernelPerDirection) {
  GraphBuilder b("ops");
  b.mutable_graph().opsets[std::string(kAutoparDomain)] = 1;
  const int64_t e = 64 * 32 * 16 * 16;
  const ValueId x = b.input("x", DType::kFloat16, {64, 32, 16, 16});
  const ValueId wide = b.op1("Cast", {x}, {{"to", int64_t{1}}});           // 0: op 1
  const ValueId soft = b.op1("Softmax", {wide}, {{"axis", int64_t{-1}}});  // 1: op 1
  const ValueId narrow = b.op1("Cast", {soft}, {{"to", int64_t{10}}});     // 2: op 1
  const ValueId relu = b.op1("Relu", {narrow});                            // 3: op 3
  b.output(relu, "r");
  const ValueId grad = b.op1("Mul", {wide, wide});  // 4: op 1, backward
  const ValueId root = b.op1("Sqrt", {grad});       // 5: op 1, backward
  const ValueId mean = b.op1("ReduceMean", {root}, {{"axes", std::vector<int64_t>{0, 2, 3}}});
  const ValueId summed =  // 6: op 7; 7: comm
      b.op("AllReduce", {mean}, {{"group", std::vector<int64_t>{0, 1}}}, 1, kAutoparDomain)[0];
  const ValueId centered = b.op1("Sub", {root, summed});  // 8: op 7
  b.output(b.op1("Mul", {centered, centered}), "y");      // 9: op 7
  Graph g = b.finish();
  const std::vector<int32_t> sources = {1, 1, 1, 3, 1, 1, 7, -1, 7, 7};
  ASSERT_EQ(g.num_nodes(), 10);
  for (NodeId n = 0; n < g.num_nodes(); ++n) g.mutable_node(n).source = sources[n];
  for (NodeId n : {4, 5}) g.mutable_node(n).phase = Phase::kBackward;
  HardwareProfile p = fixture();
  EXPECT_TRUE(fused_node_seconds(p, g).empty());  // the profile runs no op kernels
  p.fusions.insert(Fusion::kOpKernels);
  const std::vector<double> s = fused_node_seconds(p, g);
  ASSERT_EQ(s.size(), 10u);
  auto kernel = [&](std::initializer_list<NodeId> nodes, OpClass op_class, double bytes) {
    double flops = 0;
    for (NodeId n : nodes) flops += node_flops(g, g.node(n));
    const double memory = bytes / (2e12 * p.device.efficiency.at(op_class).at(bytes));
    return std::max(flops / 20e12, memory) + 5e-6;
  };
  // Forward: reads x in fp16 and writes the fp16 result; the fp32 copy is never written.
  const double forward = kernel({0, 1, 2}, OpClass::kNorm, 2.0 * e + 2.0 * e);
  EXPECT_NEAR(s[0] + s[1] + s[2], forward, 1e-15);
  EXPECT_NEAR(s[0], forward / 3, 1e-15);
  EXPECT_EQ(s[3], -1.0);  // a kernel of one node: priced alone
  // Backward: reads x again (not its fp32 copy), writes the Sqrt's fp32 result (the next op
  // reads it).
  const double backward = kernel({4, 5}, OpClass::kElementwise, 2.0 * e + 4.0 * e);
  EXPECT_NEAR(s[4] + s[5], backward, 1e-15);
  // Op 7 waits on an all-reduce of its own partial mean: two kernels, as SyncBatchNorm runs (a
  // reduction pass, the collective, an elementwise pass reading the inputs again).
  EXPECT_EQ(s[7], -1.0);  // the collective, priced as communication
  const double reads = 4.0 * e + 4.0 * 32;
  // It writes its partial mean (the all-reduce reads it) and the product.
  const double synced = kernel({6, 8, 9}, OpClass::kNorm, 2 * reads + 4.0 * 32 + 4.0 * e) + 5e-6;
  EXPECT_NEAR(s[6] + s[8] + s[9], synced, 1e-15);
  // A program boundary between the forward's Softmax and its output cast cuts that kernel.
  const std::vector<double> cut = fused_node_seconds(p, g, {2});
  EXPECT_EQ(cut[2], -1.0);
  EXPECT_NEAR(cut[0] + cut[1], kernel({0, 1}, OpClass::kNorm, 2.0 * e + 4.0 * e), 1e-15);
}

// An op kernel that reduces across rows (over an axis ahead of one it keeps, as a BatchNorm's
// statistics do) and writes a full-size result needs the reduction before its elementwise part:
// two passes over its inputs, the second from memory where they exceed the L2 cache
// (device.l2_bytes), from the cache where they fit. A reduction alone (a bias gradient), or one
// along the rows (a LayerNorm's, a softmax's), is one pass.
TEST(Compute, ACrossRowReductionReadsItsInputsTwiceBeyondTheCache) {
  GraphBuilder b("reductions");
  const int64_t e = 64 * 32 * 16 * 16;
  const ValueId x = b.input("x", DType::kFloat16, {64, 32, 16, 16});
  // Op 1, a BatchNorm's centring: statistics over N, H, W per channel, then the full-size output.
  const ValueId wide = b.op1("Cast", {x}, {{"to", int64_t{1}}});  // 0
  const ValueId mean =                                            // 1
      b.op1("ReduceMean", {wide}, {{"axes", std::vector<int64_t>{0, 2, 3}}});
  const ValueId centred = b.op1("Sub", {wide, mean});                    // 2
  b.output(b.op1("Cast", {centred}, {{"to", int64_t{10}}}), "centred");  // 3
  // Op 2, a bias gradient: the reduction alone.
  b.output(b.op1("ReduceSum", {x, b.constant_ints("axes", {0, 2, 3})}), "bias_grad");  // 4
  // Op 3, a row's centring: the reduction over the last dim, one block's work per row.
  const ValueId row = b.op1("ReduceMean", {x}, {{"axes", std::vector<int64_t>{3}}});  // 5
  b.output(b.op1("Sub", {x, row}), "row_centred");                                    // 6
  Graph g = b.finish();
  ASSERT_EQ(g.num_nodes(), 7);
  const std::vector<int32_t> sources = {1, 1, 1, 1, 2, 3, 3};
  for (NodeId n = 0; n < g.num_nodes(); ++n) g.mutable_node(n).source = sources[n];
  HardwareProfile p = fixture();
  p.fusions.insert(Fusion::kOpKernels);
  auto kernel = [&](std::initializer_list<NodeId> nodes, double bytes) {
    double flops = 0;
    for (NodeId n : nodes) flops += node_flops(g, g.node(n));
    const double memory = bytes / (2e12 * p.device.efficiency.at(OpClass::kNorm).at(bytes));
    return std::max(flops / 20e12, memory) + 5e-6;
  };
  const double in = 2.0 * e;  // x in fp16, read narrow through the op's own cast
  for (const double l2 : {0.0, 4.0 * in}) {
    SCOPED_TRACE(l2);
    p.device.l2_bytes = l2;
    const std::vector<double> s = fused_node_seconds(p, g);
    ASSERT_EQ(s.size(), 7u);
    // Op 1 writes its fp16 output; it reads x a second time, with a launch of its own, unless
    // x fits in the cache.
    const double centring = l2 < in ? kernel({0, 1, 2, 3}, 2 * in + 2.0 * e) + 5e-6
                                    : kernel({0, 1, 2, 3}, in + 2.0 * e);
    EXPECT_NEAR(s[0] + s[1] + s[2] + s[3], centring, 1e-15);
    EXPECT_EQ(s[4], -1.0);  // a kernel of one node that writes nothing full-size: priced alone
    EXPECT_NEAR(s[5] + s[6], kernel({5, 6}, in + 2.0 * e), 1e-15);
  }
}

// Megatron-LM's fused kernels (bias_gelu, bias_dropout_add, scale_mask_softmax) each run their
// source ops as one kernel per direction: what crosses the kernel's boundary read or written
// once, one launch. Without them each op is a kernel of its own (op_kernels alone prices these
// one-node kernels node by node).
TEST(Compute, MegatronsFusedKernelsRunTheirOpsAsOne) {
  GraphBuilder b("fusions");
  b.mutable_graph().opsets[std::string(kTrainingDomain)] = 1;
  const int64_t e = 8 * 128 * 64, s = 8 * 4 * 128 * 128;
  const ValueId x = b.input("x", DType::kFloat16, {8, 128, 64});
  const ValueId bias = b.input("bias", DType::kFloat16, {64});
  const ValueId residual = b.input("residual", DType::kFloat16, {8, 128, 64});
  const ValueId scores = b.input("scores", DType::kFloat16, {8, 4, 128, 128});
  const ValueId mask = b.input("mask", DType::kFloat16, {128, 128});
  const ValueId sum = b.op1("Add", {x, bias});                          // 0
  const ValueId gelu = b.op("Gelu", {sum}, {}, 1, kTrainingDomain)[0];  // 1
  const ValueId projected = b.op1("Add", {gelu, bias});                 // 2
  const ValueId ratio = b.constant_scalar("ratio", 0.1f);
  Tensor on(DType::kBool, {});
  on.set_from_int(0, 1);
  const ValueId training = b.constant("training", on);
  const std::vector<ValueId> dropped = b.op("Dropout", {projected, ratio, training}, {}, 2);  // 3
  b.output(b.op1("Add", {dropped[0], residual}), "y");                                        // 4
  b.output(dropped[1], "kept");  // the backward reads it
  const ValueId scaled = b.op1("Div", {scores, b.input("root", DType::kFloat16, {})});
  const ValueId masked = b.op1("Add", {scaled, mask});                 // 6
  b.output(b.op1("Softmax", {masked}, {{"axis", int64_t{-1}}}), "p");  // 7
  Graph g = b.finish();
  ASSERT_EQ(g.num_nodes(), 8);
  for (NodeId n = 0; n < g.num_nodes(); ++n) g.mutable_node(n).source = n;
  HardwareProfile p = fixture();
  p.fusions = {Fusion::kOpKernels};
  EXPECT_EQ(fused_node_seconds(p, g), std::vector<double>(8, -1.0));
  p.fusions = {Fusion::kOpKernels, Fusion::kBiasGelu, Fusion::kBiasDropoutAdd,
               Fusion::kScaleMaskSoftmax};
  const std::vector<double> t = fused_node_seconds(p, g);
  ASSERT_EQ(t.size(), 8u);
  auto kernel = [&](std::initializer_list<NodeId> nodes, OpClass op_class, double bytes) {
    double flops = 0;
    for (NodeId n : nodes) flops += node_flops(g, g.node(n));
    const double memory = bytes / (2e12 * p.device.efficiency.at(op_class).at(bytes));
    return std::max(flops / 20e12, memory) + 5e-6;
  };
  // bias + GELU: x and the bias in, the GELU's output out (the sum never leaves the kernel).
  EXPECT_NEAR(t[0] + t[1], kernel({0, 1}, OpClass::kElementwise, 2.0 * e + 2 * 64 + 2.0 * e),
              1e-15);
  EXPECT_EQ(t[0], t[1]);
  // bias + dropout + residual add: the GELU's output, the bias, the ratio, the mode and the
  // residual in; the mask and the sum out.
  EXPECT_NEAR(t[2] + t[3] + t[4],
              kernel({2, 3, 4}, OpClass::kElementwise,
                     2.0 * e + 2 * 64 + 4 + 1 + 2.0 * e + 1.0 * e + 2.0 * e),
              1e-15);
  // scale + mask + softmax: the scores, the scale and the mask in, the probabilities out.
  EXPECT_NEAR(t[5] + t[6] + t[7],
              kernel({5, 6, 7}, OpClass::kNorm, 2.0 * s + 2 + 2.0 * 128 * 128 + 2.0 * s), 1e-15);
  // Each alone: bias + GELU only.
  p.fusions = {Fusion::kOpKernels, Fusion::kBiasGelu};
  const std::vector<double> gelu_only = fused_node_seconds(p, g);
  EXPECT_NE(gelu_only[0], -1.0);
  for (NodeId n = 2; n < 8; ++n) EXPECT_EQ(gelu_only[n], -1.0) << n;
}

// A GEMM's or a convolution's op kernel keeps its arithmetic nodes priced alone and makes its
// transposes free: the library reads its operands in the layout they are in.
TEST(Compute, OpKernelsOfGemmsReadTheirOperandsInPlace) {
  GraphBuilder b("wgrad");
  const ValueId x = b.input("x", DType::kFloat32, {8, 16, 4, 4});
  const ValueId dy = b.input("dy", DType::kFloat32, {8, 32, 4, 4});
  const ValueId xt = b.op1("Transpose", {x}, {{"perm", std::vector<int64_t>{1, 0, 2, 3}}});
  const ValueId dyt = b.op1("Transpose", {dy}, {{"perm", std::vector<int64_t>{1, 0, 2, 3}}});
  const ValueId w = b.op1("Conv", {xt, dyt}, {{"kernel_shape", std::vector<int64_t>{4, 4}}});
  b.output(b.op1("Transpose", {w}, {{"perm", std::vector<int64_t>{1, 0, 2, 3}}}), "dw");
  Graph g = b.finish();
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    g.mutable_node(n).source = 0;
    g.mutable_node(n).phase = Phase::kBackward;
  }
  HardwareProfile p = fixture();
  p.fusions.insert(Fusion::kOpKernels);
  EXPECT_EQ(fused_node_seconds(p, g), (std::vector<double>{0, 0, -1, 0}));
}

// NCHW activations on a device whose convolutions run on NHWC operands: each tensor-core
// convolution (bf16 here; fp32 only where it runs as TF32) also transposes x, w and y, one
// kernel each reading and writing the tensor at the elementwise curve; nothing where the device
// convolves NCHW itself or the stack keeps NHWC.
TEST(Compute, NchwConvolutionsTransposeTheirOperandsOnNhwcKernels) {
  for (DType t : {DType::kBFloat16, DType::kFloat32}) {
    GraphBuilder b("conv");
    const ValueId x = b.input("x", t, {8, 16, 14, 14});
    const ValueId w = b.input("w", t, {32, 16, 3, 3});
    const ValueId bias = b.input("b", t, {32});  // not transposed: one layout either way
    b.output(b.op1("Conv", {x, w, bias}, {{"kernel_shape", std::vector<int64_t>{3, 3}}}), "y");
    const Graph g = b.finish();
    HardwareProfile p = fixture();
    EXPECT_TRUE(fused_node_seconds(p, g, {}, nullptr, MemoryFormat::kNchw).empty());
    p.device.nhwc_convolutions = true;
    EXPECT_TRUE(fused_node_seconds(p, g, {}, nullptr, MemoryFormat::kNhwc).empty());
    EXPECT_TRUE(fused_node_seconds(p, g).empty());  // the profile's own: nhwc
    const std::vector<double> nchw = fused_node_seconds(p, g, {}, nullptr, MemoryFormat::kNchw);
    if (t == DType::kFloat32) {
      EXPECT_TRUE(nchw.empty());  // fp32 convolutions on the FP32 units: NCHW kernels
      p.device.tf32_conv = true;
    }
    const std::vector<double> s = fused_node_seconds(p, g, {}, nullptr, MemoryFormat::kNchw);
    ASSERT_EQ(s.size(), 1u);
    const double size = static_cast<double>(dtype_size(t));
    double transposes = 0;
    for (double elements : {8.0 * 16 * 14 * 14, 32.0 * 16 * 3 * 3, 8.0 * 32 * 12 * 12}) {
      const double bytes = 2 * elements * size;
      transposes += bytes / (2e12 * p.device.efficiency.at(OpClass::kElementwise).at(bytes)) + 5e-6;
    }
    EXPECT_NEAR(s[0], node_cost(p, g, g.node(0)).seconds + transposes, 1e-15);
  }
}

// bf16 runs are fused only where the profile says its runtime fuses half types (the CUDA
// backend's calibrated profiles do; the CPU runtime does not).
TEST(Compute, HalfTypeRunsFuseWhereTheProfileSaysSo) {
  GraphBuilder b("chain");
  const ValueId x = b.input("x", DType::kBFloat16, {1024, 256});
  ValueId y = b.op1("Mul", {x, x});
  y = b.op1("Sqrt", {y});
  b.output(y);
  const Graph g = b.finish();
  HardwareProfile p = fixture();
  p.device.fused_op_element_s = 1e-10;
  std::vector<double> s = fused_node_seconds(p, g);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], -1.0);
  p.device.fuses_half_types = true;
  s = fused_node_seconds(p, g);
  EXPECT_NEAR(s[0] + s[1], 2 * 1024.0 * 256 * 1e-10 + 5e-6, 1e-15);
}

// A bf16 GEMM with a row that is not a whole number of 16-byte units (an odd vocabulary) runs
// at the profile's gemm_unaligned_efficiency of its curve; fp32 ones and aligned ones do not.
TEST(Compute, UnalignedHalfGemmsRunAtTheProfilesFraction) {
  GraphBuilder b("vocab");
  const ValueId x = b.input("x", DType::kBFloat16, {4096, 768});
  const ValueId w_odd = b.input("w_odd", DType::kBFloat16, {768, 50257});
  const ValueId w_even = b.input("w_even", DType::kBFloat16, {768, 50256});
  const ValueId x32 = b.input("x32", DType::kFloat32, {4096, 768});
  const ValueId w32 = b.input("w32", DType::kFloat32, {768, 50257});
  b.output(b.op1("MatMul", {x, w_odd}));
  b.output(b.op1("MatMul", {x, w_even}));
  b.output(b.op1("MatMul", {x32, w32}));
  const Graph g = b.finish();
  HardwareProfile p = fixture();
  const double odd = node_cost(p, g, g.node(0)).seconds;
  const double even = node_cost(p, g, g.node(1)).seconds;
  const double fp32 = node_cost(p, g, g.node(2)).seconds;
  p.device.gemm_unaligned_efficiency = 0.25;
  const double flops = 2.0 * 4096 * 768 * 50257;
  const double eff = p.device.efficiency.at(OpClass::kGemm).at(flops);
  EXPECT_NEAR(node_cost(p, g, g.node(0)).seconds, flops / (320e12 * eff * 0.25) + 5e-6, 1e-12);
  EXPECT_GT(node_cost(p, g, g.node(0)).seconds, 3.9 * (odd - 5e-6));
  EXPECT_EQ(node_cost(p, g, g.node(1)).seconds, even);
  EXPECT_EQ(node_cost(p, g, g.node(2)).seconds, fp32);
  // Read from YAML as a fraction.
  std::string text = kFixture;
  text.replace(text.find("  reserved_bytes"), 0, "  gemm_unaligned_efficiency: 1.5\n");
  auto bad = parse_hardware_profile(text, "bad.yaml");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("device.gemm_unaligned_efficiency"), std::string::npos)
      << bad.status().message();
}

// A GEMM shape table on a 2 x 2 x 2 grid (m, n, k each 256 or 4096): exact at its points,
// linear in the logarithms between them, padded below the grid, rows traded for columns above
// it, k held at its largest.
TEST(HardwareProfile, GemmShapeTablesReadBetweenTheirPoints) {
  std::vector<std::array<double, 4>> rows;
  for (double m : {256.0, 4096.0}) {
    for (double n : {256.0, 4096.0}) {
      for (double k : {256.0, 4096.0}) {
        // 0.1 at the smallest corner, +0.2 for a large m, +0.3 for a large n, +0.1 for a large k.
        rows.push_back(
            {m, n, k, 0.1 + (m > 256 ? 0.2 : 0) + (n > 256 ? 0.3 : 0) + (k > 256 ? 0.1 : 0)});
      }
    }
  }
  auto table = GemmShapeTable::create(rows);
  ASSERT_TRUE(table.is_ok()) << table.status().message();
  EXPECT_DOUBLE_EQ(table->at(256, 256, 256), 0.1);
  EXPECT_DOUBLE_EQ(table->at(4096, 4096, 4096), 0.7);
  EXPECT_DOUBLE_EQ(table->at(4096, 256, 4096), 0.4);
  EXPECT_DOUBLE_EQ(table->at(1024, 256, 256), 0.2);  // half-way in log2 between 256 and 4096
  EXPECT_DOUBLE_EQ(table->at(1024, 1024, 1024), 0.4);
  // Below the grid a dim is padded to its smallest value: an eighth of the rows, an eighth of
  // the rate (the same time).
  EXPECT_DOUBLE_EQ(table->at(32, 256, 256), 0.1 / 8);
  EXPECT_DOUBLE_EQ(table->at(32, 128, 256), 0.1 / 16);
  // Rows above the grid grow the columns by the same factor: 16384 x 256 reads as 4096 x 1024.
  EXPECT_DOUBLE_EQ(table->at(16384, 256, 256), table->at(4096, 1024, 256));
  EXPECT_DOUBLE_EQ(table->at(256, 16384, 4096), table->at(1024, 4096, 4096));
  EXPECT_DOUBLE_EQ(table->at(65536, 1024, 256), 0.6);   // up to the grid's corner
  EXPECT_DOUBLE_EQ(table->at(4096, 4096, 65536), 0.7);  // a long k reads as the largest
  // Rows come back m slowest, k fastest.
  EXPECT_EQ(table->rows(), rows);

  auto message = [](std::vector<std::array<double, 4>> r) {
    auto t = GemmShapeTable::create(r);
    return t.is_ok() ? std::string("ok") : t.status().message();
  };
  std::vector<std::array<double, 4>> missing = rows;
  missing.pop_back();
  EXPECT_EQ(message(missing),
            "7 rows for a grid of 2 m x 2 n x 2 k values (8 points): every combination must "
            "appear exactly once");
  std::vector<std::array<double, 4>> twice = rows;
  twice.back() = twice.front();
  EXPECT_EQ(message(twice), "row [256, 256, 256, 0.1]: the shape appears twice");
  std::vector<std::array<double, 4>> zero = rows;
  zero[0][2] = 0;
  EXPECT_EQ(message(zero), "row [256, 256, 0, 0.1]: m, n and k must be positive");
  std::vector<std::array<double, 4>> over = rows;
  over[0][3] = 1.5;
  EXPECT_EQ(message(over), "row [256, 256, 256, 1.5]: the efficiency must be in (0, 1]");
  EXPECT_EQ(message({}), "a GEMM shape table needs at least one row");

  // From YAML, with the field named in errors.
  auto with_table = [](const std::string& table_yaml) {
    std::string text = kFixture;
    text.replace(text.find("    attention:"), 0, "    gemm_shapes: " + table_yaml + "\n");
    auto p = parse_hardware_profile(text, "p.yaml");
    return p;
  };
  auto parsed = with_table("[[256, 256, 256, 0.1], [256, 256, 4096, 0.2]]");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  ASSERT_TRUE(parsed->device.gemm_shapes.has_value());
  EXPECT_DOUBLE_EQ(parsed->device.gemm_shapes->at(256, 256, 1024), 0.15);
  EXPECT_EQ(with_table("[[256, 256, 256]]").status().message(),
            "p.yaml: device.efficiency.gemm_shapes: row 0 is not [m, n, k, efficiency]");
  EXPECT_EQ(with_table("[[256, 256, 256, 0.1], [512, 512, 256, 0.2]]").status().message(),
            "p.yaml: device.efficiency.gemm_shapes: 2 rows for a grid of 2 m x 2 n x 1 k values "
            "(4 points): every combination must appear exactly once");
  EXPECT_EQ(with_table("7").status().message(),
            "p.yaml: device.efficiency.gemm_shapes: expected [[m, n, k, efficiency], ...]");
}

// Where the profile has a GEMM shape table, bf16 and fp16 GEMMs are priced at its rate for
// their (m, n, k), batch dims folded into m and a Gemm's transposes read; fp32 GEMMs and
// batched activation products stay on their curves.
TEST(Compute, HalfGemmsRunAtTheirShapesRate) {
  GraphBuilder b("shapes");
  const ValueId x = b.input("x", DType::kBFloat16, {4, 512, 1024});
  const ValueId w = b.input("w", DType::kBFloat16, {1024, 256});
  const ValueId wt = b.input("wt", DType::kFloat16, {256, 1024});
  const ValueId x2 = b.input("x2", DType::kFloat16, {2048, 1024});
  const ValueId x32 = b.input("x32", DType::kFloat32, {2048, 1024});
  const ValueId w32 = b.input("w32", DType::kFloat32, {1024, 256});
  const ValueId q = b.input("q", DType::kBFloat16, {8, 512, 64});
  const ValueId kt = b.input("kt", DType::kBFloat16, {8, 64, 512});
  b.output(b.op1("MatMul", {x, w}));
  b.output(b.op1("Gemm", {x2, wt}, {{"transB", int64_t{1}}}));
  b.output(b.op1("MatMul", {x32, w32}));
  b.output(b.op1("MatMul", {q, kt}));
  const Graph g = b.finish();
  HardwareProfile p = fixture();
  std::vector<double> before;
  for (NodeId n = 0; n < 4; ++n) before.push_back(node_cost(p, g, g.node(n)).seconds);
  std::vector<std::array<double, 4>> rows;
  for (double m : {256.0, 4096.0}) {
    for (double n : {256.0, 4096.0}) {
      for (double k : {256.0, 4096.0})
        rows.push_back({m, n, k, m * n * k / (4096.0 * 4096 * 4096)});
    }
  }
  p.device.gemm_shapes = GemmShapeTable::create(rows).value();
  const double flops = 2.0 * 2048 * 256 * 1024;
  // 2048 x 256 x 1024 (m the 4 x 512 rows): three quarters of the way up from 256 to 4096 in
  // log m, half-way in log k, at the grid's n; weights 1/8, 3/8, 1/8, 3/8 on the four corners
  // (m, k) = (256, 256), (4096, 256), (256, 4096), (4096, 4096).
  const double rate = p.device.gemm_shapes->at(2048, 256, 1024);
  EXPECT_NEAR(rate, 0.125 / 4096 + 0.375 / 256 + 0.125 / 256 + 0.375 / 16, 1e-15);
  EXPECT_NEAR(node_cost(p, g, g.node(0)).seconds, flops / (320e12 * rate) + 5e-6, 1e-12);
  // The fp16 Gemm with transB: the same (m, n, k), at the fp16 peak (the fixture's fp32 one).
  EXPECT_NEAR(node_cost(p, g, g.node(1)).seconds, flops / (20e12 * rate) + 5e-6, 1e-12);
  EXPECT_EQ(node_cost(p, g, g.node(2)).seconds, before[2]);
  EXPECT_EQ(node_cost(p, g, g.node(3)).seconds, before[3]);
  // Split over 4 devices, a part has a quarter of the rows.
  const NodeWork work = node_work(p, g, g.node(0));
  EXPECT_NEAR(work.cost(p.device, 4).seconds,
              flops / 4 / (320e12 * p.device.gemm_shapes->at(512, 256, 1024)) + 5e-6, 1e-12);
}

// Where views are free (GPU frameworks), reshapes cost nothing, and so does a transpose of the
// last two dims that only GEMMs read; a transpose that moves other dims, or that something
// else reads, is a kernel.
TEST(Compute, ViewsAreFreeWhereTheProfileSaysSo) {
  GraphBuilder b("views");
  const ValueId x = b.input("x", DType::kFloat32, {8, 16, 64});
  const ValueId w = b.input("w", DType::kFloat32, {32, 64});
  const ValueId flat = b.op1("Reshape", {x, b.constant_ints("shape", {128, 64})});
  const ValueId wt = b.op1("Transpose", {w}, {{"perm", std::vector<int64_t>{1, 0}}});
  const ValueId y = b.op1("MatMul", {flat, wt});
  const ValueId heads = b.op1("Transpose", {x}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
  const ValueId read = b.op1("Transpose", {w}, {{"perm", std::vector<int64_t>{1, 0}}});
  b.output(y);
  b.output(heads);
  b.output(b.op1("Neg", {read}));
  const Graph g = b.finish();
  HardwareProfile p = fixture();
  auto seconds = [&](ValueId v) { return node_cost(p, g, g.node(g.value(v).producer)).seconds; };
  for (ValueId v : {flat, wt, heads, read}) EXPECT_GT(seconds(v), 0.0);
  p.device.free_views = true;
  EXPECT_EQ(seconds(flat), 0.0);
  EXPECT_EQ(seconds(wt), 0.0);
  EXPECT_GT(seconds(heads), 0.0);
  EXPECT_GT(seconds(read), 0.0);
  EXPECT_GT(seconds(y), 0.0);
}

// The shipped profiles in configs/hw/, read by name as `--hw` does. Their numbers come from
// datasheets and public measurements (named in each YAML); these cases pin the main ones.
HardwareProfile shipped(const std::string& name, int64_t nodes = 1) {
  auto p = read_hardware_profile(name, std::string(AUTOPAR_SOURCE_DIR) + "/configs/hw");
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  if (!p.is_ok()) return fixture(nodes);
  HardwareProfile profile = std::move(p).value();
  profile.nodes = nodes;
  return profile;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TEST(ShippedProfiles, DgxA100MatchesTheDatasheet) {
  const HardwareProfile p = shipped("dgx-a100-80g");
  EXPECT_EQ(p.name, "dgx-a100-80g");
  EXPECT_EQ(p.device.peak("bf16"), 312e12);
  EXPECT_EQ(p.device.peak("fp16"), 312e12);
  EXPECT_EQ(p.device.peak("tf32"), 156e12);
  EXPECT_EQ(p.device.peak("fp32"), 19.5e12);
  EXPECT_EQ(p.device.memory_bytes, 80 * kGiB);  // 81920 MiB
  EXPECT_EQ(p.device.memory_bandwidth, 2.039e12);
  EXPECT_EQ(p.devices_per_node, 8);
  ASSERT_EQ(p.tiers.size(), 2u);
  EXPECT_EQ(p.tiers[0].bandwidth, 300e9);  // NVLink 3: 600 GB/s both ways
  EXPECT_EQ(p.tiers[1].bandwidth, 25e9);   // HDR 200 Gb/s
  EXPECT_EQ(p.tiers[1].nics_per_node, 8);
}

TEST(ShippedProfiles, DgxH100MatchesTheDatasheet) {
  const HardwareProfile p = shipped("dgx-h100");
  EXPECT_EQ(p.device.peak("bf16"), 989e12);  // dense, not the 1,979 TF with sparsity
  EXPECT_EQ(p.device.peak("tf32"), 494.5e12);
  EXPECT_EQ(p.device.peak("fp32"), 67e12);
  EXPECT_NEAR(p.device.memory_bytes / kGiB, 79.65, 0.01);  // 81559 MiB
  EXPECT_EQ(p.device.memory_bandwidth, 3.35e12);
  EXPECT_EQ(p.devices_per_node, 8);
  ASSERT_EQ(p.tiers.size(), 2u);
  EXPECT_EQ(p.tiers[0].bandwidth, 450e9);  // NVLink 4: 900 GB/s both ways
  EXPECT_EQ(p.tiers[1].bandwidth, 50e9);   // NDR 400 Gb/s
  EXPECT_EQ(p.tiers[1].nics_per_node, 8);
}

TEST(ShippedProfiles, HgxH200HasTheH100ComputeAndMoreMemory) {
  const HardwareProfile h200 = shipped("hgx-h200");
  const HardwareProfile h100 = shipped("dgx-h100");
  EXPECT_EQ(h200.device.peak_flops, h100.device.peak_flops);
  EXPECT_NEAR(h200.device.memory_bytes / kGiB, 140.4, 0.1);  // 143771 MiB, the "141 GB"
  EXPECT_EQ(h200.device.memory_bandwidth, 4.8e12);
  EXPECT_EQ(h200.devices_per_node, 8);
  EXPECT_EQ(h200.tiers[0].bandwidth, 450e9);
  EXPECT_EQ(h200.tiers[1].bandwidth, 50e9);
}

// The H100 and H200 run FlashAttention-2 at the rates Shah et al. measured on an H100 SXM5
// ("FlashAttention-3", 2024, Figures 5 and 6: 16k tokens, 16 heads of 128): read at the FLOPs of
// their kernels, the curves give back the published TFLOP/s. The A100 has no such curve.
TEST(ShippedProfiles, HopperFlashAttentionRunsAtThePublishedRates) {
  auto tflops = [](const HardwareProfile& p, const EfficiencyCurve& curve, double flops) {
    return curve.at(flops) * p.device.peak("bf16") / 1e12;
  };
  for (const char* name : {"dgx-h100", "hgx-h200"}) {
    const HardwareProfile p = shipped(name);
    ASSERT_TRUE(p.device.flash_attention && p.device.flash_attention_backward) << name;
    const double tokens = 16384, heads = 16, d = 128;
    const struct {
      double s, forward_causal, backward;
    } published[] = {{512, 191, 214},  {1024, 260, 260}, {2048, 298, 291},
                     {4096, 319, 310}, {8192, 333, 318}, {16384, 335, 322}};
    for (const auto& row : published) {
      const double forward = 4 * row.s * row.s * d * heads * (tokens / row.s);
      EXPECT_NEAR(tflops(p, *p.device.flash_attention, forward / 2), row.forward_causal,
                  0.015 * row.forward_causal)
          << name << " s=" << row.s;
      EXPECT_NEAR(tflops(p, *p.device.flash_attention_backward, 2.5 * forward), row.backward,
                  0.015 * row.backward)
          << name << " s=" << row.s;
    }
  }
  EXPECT_FALSE(shipped("dgx-a100-80g").device.flash_attention);
}

TEST(ShippedProfiles, GpuFrameworksRunViewsWithoutKernels) {
  for (const char* name : {"dgx-a100-80g", "dgx-h100", "hgx-h200"})
    EXPECT_TRUE(shipped(name).device.free_views) << name;
}

// The GPU profiles price memory as Megatron-LM holds it; the fixture (and any profile that
// says nothing) as autopar's runtime does.
TEST(ShippedProfiles, GpuProfilesHoldMemoryAsMegatronDoes) {
  for (const char* name : {"dgx-a100-80g", "dgx-h100", "hgx-h200"})
    EXPECT_EQ(shipped(name).memory_policy, MemoryPolicy::kMegatron) << name;
  auto fixture = parse_hardware_profile(kFixture, "fixture.yaml");
  ASSERT_TRUE(fixture.is_ok());
  EXPECT_EQ(fixture->memory_policy, MemoryPolicy::kAutopar);
}

TEST(ShippedProfiles, EveryProfileLeavesMostMemoryToThePlan) {
  for (const char* name : {"dgx-a100-80g", "dgx-h100", "hgx-h200"}) {
    const HardwareProfile p = shipped(name);
    EXPECT_GT(p.device.reserved_bytes, 0.5 * kGiB) << name;
    EXPECT_LT(p.device.reserved_bytes, 0.1 * p.device.memory_bytes) << name;
  }
}

TEST(ShippedProfiles, GroupsSpanningTwoNodesUseInfiniband) {
  for (const char* name : {"dgx-a100-80g", "dgx-h100", "hgx-h200"}) {
    const HardwareProfile p = shipped(name, /*nodes=*/2);
    EXPECT_EQ(p.num_devices(), 16) << name;
    EXPECT_EQ(p.tier_for(devices(0, 8)).name, "nvlink") << name;
    EXPECT_EQ(p.tier_for(devices(8, 8)).name, "nvlink") << name;
    EXPECT_EQ(p.tier_for(devices(0, 16)).name, "infiniband") << name;
    EXPECT_EQ(p.tier_for({7, 8}).name, "infiniband") << name;
    // Across nodes an all-reduce costs more than the same one inside a node.
    EXPECT_GT(collective_cost(p, Collective::kAllReduce, kGiB, devices(0, 16)).seconds,
              collective_cost(p, Collective::kAllReduce, kGiB, devices(0, 8)).seconds)
        << name;
  }
}

// An 8-GPU all-reduce of 1 GiB is a ring over NVLink: 2(n−1)·α + 2(n−1)/n · S / (bw · eff).
TEST(ShippedProfiles, EightGpuAllReduceIsTheRingFormula) {
  for (const char* name : {"dgx-a100-80g", "dgx-h100", "hgx-h200"}) {
    const HardwareProfile p = shipped(name);
    const Tier& nvlink = p.tiers.front();
    const double bytes = kGiB;
    const double bus = nvlink.bandwidth * nvlink.efficiency.at(Collective::kAllReduce);
    const double expected = 14 * nvlink.alpha_s + 2 * 7.0 / 8.0 * bytes / bus;
    const CollectiveCost c = collective_cost(p, Collective::kAllReduce, bytes, devices(0, 8));
    EXPECT_EQ(c.algorithm, "ring") << name;
    EXPECT_NEAR(c.seconds, expected, 1e-9 * expected) << name;
    // Between the link rate (the fastest a ring can be) and half of it.
    const double at_link_rate = 2 * 7.0 / 8.0 * bytes / nvlink.bandwidth;
    EXPECT_GE(c.seconds, at_link_rate) << name;
    EXPECT_LE(c.seconds, 2 * at_link_rate) << name;
  }
  // Against published nccl-tests bus bandwidths: ~200 GB/s on 8 A100 (nccl-tests #149),
  // 476 GB/s on 8 H100 with NVLink SHARP (nccl-tests #290); within 10%.
  const double a100 =
      collective_cost(shipped("dgx-a100-80g"), Collective::kAllReduce, kGiB, devices(0, 8)).seconds;
  EXPECT_NEAR(a100, 2 * 7.0 / 8.0 * kGiB / 200e9, 0.1 * a100);
  const double h100 =
      collective_cost(shipped("dgx-h100"), Collective::kAllReduce, kGiB, devices(0, 8)).seconds;
  EXPECT_NEAR(h100, 2 * 7.0 / 8.0 * kGiB / 476e9, 0.1 * h100);
}

// Large bf16 GEMMs reach the measured maximum achievable matmul FLOP/s (stas00/ml-engineering:
// 271.2 TF on A100 SXM, 794.5 TF on H100 SXM, "H200 is the same"); small ones are far below.
// The Hopper profiles price bf16 GEMMs by shape, from OpenXLA's measured sm_90 table: its
// entries come back at their points (786 TF at 4096³, 631 TF at 2048³, 399 TF at
// 4096x256x4096), and a narrow product runs well below a square one of the same FLOPs.
TEST(ShippedProfiles, HopperGemmsRunAtTheirMeasuredShapeRates) {
  for (const char* name : {"dgx-h100", "hgx-h200"}) {
    SCOPED_TRACE(name);
    const HardwareProfile p = shipped(name);
    ASSERT_TRUE(p.device.gemm_shapes.has_value());
    const GemmShapeTable& t = *p.device.gemm_shapes;
    EXPECT_EQ(t.rows().size(), 125u);
    const double peak = p.device.peak("bf16");
    EXPECT_NEAR(t.at(4096, 4096, 4096) * peak, 786e12, 1e12);
    EXPECT_NEAR(t.at(2048, 2048, 2048) * peak, 631e12, 1e12);
    EXPECT_NEAR(t.at(4096, 256, 4096) * peak, 399e12, 1e12);
    // 4096 x 256 x 4096 and 1024 x 1024 x 4096 have the same FLOPs.
    EXPECT_LT(t.at(4096, 256, 4096), 0.9 * t.at(1024, 1024, 4096));
    // Beyond the grid no rate exceeds the measured matmul peak (794.5 TF).
    EXPECT_LE(t.at(16384, 16384, 16384) * peak, 794.5e12);
  }
  EXPECT_FALSE(shipped("dgx-a100-80g").device.gemm_shapes.has_value());  // no public sm_80 table
}

TEST(ShippedProfiles, LargeGemmsReachTheMeasuredMatmulPeak) {
  const struct {
    const char* name;
    double measured_flops;
  } cases[] = {{"dgx-a100-80g", 271.2e12}, {"dgx-h100", 794.5e12}, {"hgx-h200", 794.5e12}};
  for (const auto& c : cases) {
    const HardwareProfile p = shipped(c.name);
    const EfficiencyCurve& gemm = p.device.efficiency.at(OpClass::kGemm);
    const double large = 2.0 * 8192 * 8192 * 8192;
    EXPECT_NEAR(gemm.at(large) * p.device.peak("bf16"), c.measured_flops, 0.02 * c.measured_flops)
        << c.name;
    EXPECT_LT(gemm.at(2.0 * 256 * 256 * 256), 0.05) << c.name;
    // Efficiency never falls as kernels grow.
    for (const OpClass op : {OpClass::kGemm, OpClass::kConv, OpClass::kAttention,
                             OpClass::kElementwise, OpClass::kNorm}) {
      const auto& points = p.device.efficiency.at(op).points();
      for (size_t i = 1; i < points.size(); ++i)
        EXPECT_GE(points[i].second, points[i - 1].second) << c.name << " " << op_class_name(op);
    }
  }
}

}  // namespace
}  // namespace autopar
