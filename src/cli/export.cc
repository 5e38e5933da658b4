// Megatron-LM arguments and DeepSpeed configurations from a scheme.
#include "export.h"

#include <nlohmann/json.hpp>

namespace autopar::cli {
namespace {

struct Shape {
  int32_t layers = 0;
  int64_t hidden = 0;
  int64_t sequence = 0;
};

// The transformer's size, read from the graph: layers, the width of its LayerNormalization
// (or, for norms written out as RMSNorm's are, of the first projection's [batch, seq, hidden]
// input) and the sequence of its activations.
StatusOr<Shape> transformer_shape(const Graph& g) {
  Shape s;
  bool attention = false;
  int64_t projected = 0, projected_sequence = 0;
  for (const Node& n : g.nodes()) {
    s.layers = std::max(s.layers, n.layer + 1);
    if (n.layer >= 0 && n.op_type == "Softmax") attention = true;
    if (n.layer < 0 || n.inputs.empty() || n.inputs[0] == kNoId) continue;
    const Value& x = g.value(n.inputs[0]);
    if (n.op_type == "LayerNormalization" && s.hidden == 0 && x.shape.rank() == 3) {
      s.sequence = x.shape.dims[1];
      s.hidden = x.shape.dims[2];
    }
    if (n.op_type == "MatMul" && projected == 0 && x.shape.rank() == 3 && n.inputs.size() == 2 &&
        g.value(n.inputs[1]).kind == ValueKind::kParameter) {
      projected_sequence = x.shape.dims[1];
      projected = x.shape.dims[2];
    }
  }
  if (s.hidden == 0) {
    s.hidden = projected;
    s.sequence = projected_sequence;
  }
  if (!attention || s.layers == 0 || s.hidden == 0)
    return error("--export: {} is not a transformer (no attention in repeated layers)", g.name);
  return s;
}

}  // namespace

StatusOr<std::string> export_scheme(const std::string& target, const Scheme& s,
                                    const Graph& model) {
  ASSIGN_OR_RETURN(Shape shape, transformer_shape(model));
  if (s.sp() > 1)
    return error(
        "--export {}: the scheme uses sp = {} (attribute parallelism), which {} is not "
        "given here",
        target, s.sp(), target);
  if (s.cp() > 1 && target == "deepspeed")
    return error(
        "--export deepspeed: the scheme uses cp = {} (context parallelism), which a "
        "DeepSpeed configuration does not express",
        s.cp());
  const int64_t accumulation = s.microbatches();
  if (target == "megatron") {
    std::vector<std::string> args = {fmt::format("--num-layers {}", shape.layers),
                                     fmt::format("--hidden-size {}", shape.hidden),
                                     fmt::format("--seq-length {}", shape.sequence),
                                     fmt::format("--tensor-model-parallel-size {}", s.tp()),
                                     fmt::format("--pipeline-model-parallel-size {}", s.pp()),
                                     fmt::format("--micro-batch-size {}", s.micro_batch),
                                     fmt::format("--global-batch-size {}", s.global_batch)};
    std::vector<std::string> notes;
    if (s.schedule == PipelineSchedule::kInterleaved && s.pp() > 1)
      args.push_back(fmt::format("--num-layers-per-virtual-pipeline-stage {}",
                                 shape.layers / (s.pp() * s.chunks)));
    if (s.schedule == PipelineSchedule::kGpipe && s.pp() > 1)
      notes.push_back("Megatron-LM runs 1F1B; the plan's GPipe order has no flag");
    if (s.tensor == TensorStrategy::kMegatronSp && s.tp() > 1)
      args.push_back("--sequence-parallel");
    if (s.cp() > 1) {
      // Megatron-LM lays the sequence out in the same chunk pairs; p2p is its ring attention.
      args.push_back(fmt::format("--context-parallel-size {} --cp-comm-type {}", s.cp(),
                                 s.context == ContextForm::kRing ? "p2p" : "a2a"));
    }
    if (s.recompute == Recompute::kSelective) args.push_back("--recompute-granularity selective");
    if (s.recompute == Recompute::kFull)
      args.push_back(
          "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1");
    if (s.precision == Precision::kBf16) args.push_back("--bf16");
    if (s.precision == Precision::kFp16) args.push_back("--fp16");
    if (s.zero >= 1) args.push_back("--use-distributed-optimizer");
    if (s.zero >= 2)
      notes.push_back(
          fmt::format("ZeRO {}: the distributed optimizer shards optimizer state and gradient "
                      "reduction (ZeRO 1-2); Megatron-LM has no sharding of parameters (ZeRO 3)",
                      s.zero));
    std::string out = fmt::format("{}\n", fmt::join(args, " \\\n  "));
    for (const std::string& n : notes) out += "# " + n + "\n";
    return out;
  }
  if (target == "deepspeed") {
    nlohmann::json config = {
        {"train_batch_size", s.global_batch},
        {"train_micro_batch_size_per_gpu", s.micro_batch},
        {"gradient_accumulation_steps", accumulation},
        {"zero_optimization", {{"stage", s.zero}}},
        {"bf16", {{"enabled", s.precision == Precision::kBf16}}},
        {"fp16", {{"enabled", s.precision == Precision::kFp16}}},
    };
    if (s.tp() > 1) config["tensor_parallel"] = {{"autotp_size", s.tp()}};
    if (s.recompute != Recompute::kNone)
      config["activation_checkpointing"] = {{"partition_activations", s.tp() > 1},
                                            {"contiguous_memory_optimization", false}};
    std::string out = config.dump(2) + "\n";
    if (s.pp() > 1)
      out += fmt::format(
          "# pipeline: deepspeed.pipe.PipelineModule(layers, num_stages={}) with {} "
          "layers per stage as planned\n",
          s.pp(), shape.layers / s.pp());
    if (s.pp() > 1 && s.zero >= 2) out += "# DeepSpeed's pipeline engine supports ZeRO 0-1 only\n";
    return out;
  }
  return error("--export {}: expected megatron or deepspeed", target);
}

}  // namespace autopar::cli
