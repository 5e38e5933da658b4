// Megatron-LM arguments, DeepSpeed configurations and torchtitan job configurations from a
// scheme. The releases named here are the ones tests/data/export/ lists the flags of.
#include "export.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

namespace autopar::cli {
namespace {

constexpr const char* kMegatronRelease = "Megatron-LM core_v0.19.0";
constexpr const char* kDeepSpeedRelease = "DeepSpeed v0.19.5";
constexpr const char* kTorchtitanRelease = "torchtitan v0.2.2";

bool is_parameter(const Graph& g, ValueId v) {
  return v != kNoId && g.value(v).kind == ValueKind::kParameter;
}

// The width a projection node maps its input to, when it is one (MatMul or Gemm with a
// rank-2 parameter).
std::optional<std::pair<int64_t, int64_t>> projection(const Graph& g, const Node& n) {
  if ((n.op_type != "MatMul" && n.op_type != "Gemm") || n.inputs.size() < 2 ||
      !is_parameter(g, n.inputs[1]) || n.outputs.empty())
    return std::nullopt;
  const Shape& w = g.value(n.inputs[1]).shape;
  const Shape& y = g.value(n.outputs[0]).shape;
  if (w.rank() != 2 || y.rank() < 1) return std::nullopt;
  const int64_t out = y.dims.back();
  const int64_t in = w.dims[0] == out ? w.dims[1] : w.dims[0];
  return std::make_pair(in, out);
}

std::string toml_string(const std::string& s) { return nlohmann::json(s).dump(); }

// A TOML float: always with a decimal point or an exponent.
std::string toml_float(double x) {
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Whether every stage has the same number of layers.
bool even_stages(const Scheme& s, int32_t layers) {
  const int64_t stages = s.pp() * s.chunks;
  if (s.stages.empty()) return layers % stages == 0;
  for (const auto& [first, last] : s.stages) {
    if ((last - first + 1) * stages != layers) return false;
  }
  return true;
}

// Layers per virtual stage, in layer order (the scheme's, or an even split).
std::vector<int32_t> stage_layers(const Scheme& s, int32_t layers) {
  std::vector<int32_t> out;
  const int64_t stages = s.pp() * s.chunks;
  if (!s.stages.empty()) {
    for (const auto& [first, last] : s.stages) out.push_back(last - first + 1);
    return out;
  }
  for (int64_t i = 0; i < stages; ++i)
    out.push_back(static_cast<int32_t>((i + 1) * layers / stages - i * layers / stages));
  return out;
}

std::optional<std::string> megatron_obstacle(const Scheme& s,
                                             const std::optional<TransformerShape>& shape) {
  if (!shape) return "Megatron-LM's pretrain_gpt.py trains transformer decoders";
  if (s.sp() > 1) return "attribute parallelism (sp) has no Megatron-LM argument";
  if (s.tp() > 1 && s.tensor == TensorStrategy::kAuto)
    return "tensor: auto lays activations out per layer; Megatron-LM runs tensor: megatron or "
           "megatron-sp";
  if (shape->heads % s.tp() != 0 || shape->kv_heads % s.tp() != 0)
    return fmt::format("tp {} does not divide the {} attention heads ({} key/value heads)", s.tp(),
                       shape->heads, shape->kv_heads);
  if (s.pp() > 1 && s.schedule == PipelineSchedule::kGpipe)
    return "Megatron-LM has no GPipe schedule (it runs 1F1B, interleaved with virtual stages)";
  if (s.recompute == Recompute::kNonParametric)
    return "nonparametric recomputation also recomputes the elementwise ops between "
           "projections, which Megatron-LM's selective (--recompute-modules core_attn) keeps: the "
           "run would hold more activations than planned";
  if (s.zero >= 2 && s.pp() > 1)
    return fmt::format(
        "ZeRO {} is Megatron-FSDP's, which is not combined with pipeline "
        "parallelism here",
        s.zero);
  if (s.cp() > 1 && shape->sequence % (2 * s.cp()) != 0)
    return fmt::format("context parallelism needs the sequence {} to be a multiple of 2·cp = {}",
                       shape->sequence, 2 * s.cp());
  if (s.cp() > 1 && s.context == ContextForm::kAllToAll && shape->heads % (s.tp() * s.cp()) != 0)
    return fmt::format("all-to-all context parallelism needs tp·cp = {} to divide the {} heads",
                       s.tp() * s.cp(), shape->heads);
  return std::nullopt;
}

std::optional<std::string> deepspeed_obstacle(const Scheme& s,
                                              const std::optional<TransformerShape>& shape) {
  if (s.sp() > 1) return "attribute parallelism (sp) has no DeepSpeed configuration";
  if (s.cp() > 1)
    return "context parallelism is DeepSpeed-Ulysses code in the model "
           "(deepspeed.sequence.layer.DistributedAttention), not a configuration";
  if (s.tp() > 1 && s.tensor != TensorStrategy::kMegatron)
    return fmt::format("DeepSpeed's AutoTP splits projections as tensor: megatron does, not as {}",
                       tensor_strategy_name(s.tensor));
  // AutoTP training is a data-parallel engine's: not with the pipeline engine, nor with
  // ZeRO 3's parameter partitioning.
  if (s.tp() > 1 && (s.pp() > 1 || s.zero >= 3))
    return "DeepSpeed's AutoTP training runs with ZeRO 0-2 and without pipeline stages";
  if (s.pp() > 1) {
    if (!shape) return "DeepSpeed's pipeline engine needs the model as a PipelineModule of layers";
    if (s.zero >= 2) return "DeepSpeed's pipeline engine runs ZeRO stages 0 and 1 only";
    if (s.schedule != PipelineSchedule::kOneForwardOneBackward)
      return fmt::format("DeepSpeed's pipeline engine runs its 1F1B schedule, not {}",
                         schedule_name(s.schedule));
    if (!even_stages(s, shape->layers))
      return "DeepSpeed's PipelineModule splits the layers evenly (partition_method "
             "\"type:...\"), not as planned";
  }
  if (s.recompute == Recompute::kSelective || s.recompute == Recompute::kNonParametric)
    return fmt::format("DeepSpeed checkpoints whole layers; {} recomputation has no counterpart",
                       recompute_name(s.recompute));
  return std::nullopt;
}

std::optional<std::string> torchtitan_obstacle(const Scheme& s,
                                               const std::optional<TransformerShape>& shape) {
  if (!shape) return "torchtitan trains transformer decoders";
  if (s.sp() > 1) return "attribute parallelism (sp) has no torchtitan setting";
  if (s.tp() > 1 && s.tensor != TensorStrategy::kMegatronSp)
    return "torchtitan's tensor parallelism runs norms on sequence shards (tensor: megatron-sp)";
  if (s.cp() > 1 && s.context != ContextForm::kRing)
    return "torchtitan's context parallelism is ring attention";
  if (s.zero == 1) return "torchtitan shards with FSDP2: ZeRO 0, 2 or 3, not 1";
  if (s.precision == Precision::kFp16) return "torchtitan trains in bf16 or fp32, not fp16";
  if (s.precision == Precision::kBf16 && s.zero == 0 && (s.tp() > 1 || s.pp() > 1 || s.cp() > 1))
    return "torchtitan's mixed precision is FSDP's (or DDP's alone): bf16 with tp, pp or cp "
           "needs ZeRO 2 or 3";
  if (s.recompute == Recompute::kSelective || s.recompute == Recompute::kNonParametric)
    return fmt::format(
        "torchtitan's selective checkpointing saves other ops than {} "
        "recomputation",
        recompute_name(s.recompute));
  return std::nullopt;
}

// Whether the plan runs attention fused (context parallelism always does).
bool flash_attention(const Scheme& s, const ExportSource& src) {
  return s.cp() > 1 || src.fused_attention;
}

// --- Megatron-LM ------------------------------------------------------------------------

std::string megatron(const Scheme& s, const TransformerShape& m, const ExportSource& src,
                     std::vector<std::string>& notes) {
  std::vector<std::string> args = {
      fmt::format("--num-layers {}", m.layers),
      fmt::format("--hidden-size {}", m.hidden),
      fmt::format("--num-attention-heads {}", m.heads),
      fmt::format("--ffn-hidden-size {}", m.ffn),
      fmt::format("--seq-length {}", m.sequence),
      fmt::format("--max-position-embeddings {}", std::max(m.max_positions, m.sequence))};
  if (m.kv_heads < m.heads)
    args.push_back(fmt::format("--group-query-attention --num-query-groups {}", m.kv_heads));
  if (m.rms_norm) args.emplace_back("--normalization RMSNorm");
  if (m.gated) args.emplace_back("--swiglu");
  if (m.rope) args.emplace_back("--position-embedding-type rope");
  if (!m.tied) args.emplace_back("--untie-embeddings-and-output-weights");
  if (!m.bias) args.emplace_back("--disable-bias-linear");
  // The planned vocabulary: the null tokenizer with padding only to a multiple of tp.
  args.push_back(fmt::format(
      "--tokenizer-type NullTokenizer --vocab-size {} --make-vocab-size-divisible-by 1", m.vocab));
  if (m.vocab % s.tp() != 0)
    notes.push_back(
        fmt::format("Megatron-LM pads the vocabulary {} to a multiple of tp {}", m.vocab, s.tp()));
  args.push_back(fmt::format("--tensor-model-parallel-size {}", s.tp()));
  args.push_back(fmt::format("--pipeline-model-parallel-size {}", s.pp()));
  if (s.pp() > 1 && !even_stages(s, m.layers)) {
    // Uneven stages as planned: one layout entry per virtual stage, in layer order
    // (E: the embedding, t: a transformer layer, L: the loss).
    const std::vector<int32_t> per = stage_layers(s, m.layers);
    std::vector<std::string> stages;
    for (size_t i = 0; i < per.size(); ++i) {
      stages.push_back((i == 0 ? "E" : "") + std::string(static_cast<size_t>(per[i]), 't') +
                       (i + 1 == per.size() ? "L" : ""));
    }
    args.push_back(fmt::format("--pipeline-model-parallel-layout \"{}\"", fmt::join(stages, "|")));
  } else if (s.pp() > 1 && s.chunks > 1) {
    args.push_back(fmt::format("--num-virtual-stages-per-pipeline-rank {}", s.chunks));
  }
  if (s.tp() > 1 && s.tensor == TensorStrategy::kMegatronSp)
    args.emplace_back("--sequence-parallel");
  // The attention kernel planned: FlashAttention (Transformer Engine's, or the flash-attn
  // package), or the unfused softmax path that keeps the scores.
  args.push_back(
      fmt::format("--attention-backend {}", flash_attention(s, src) ? "flash" : "unfused"));
  if (s.cp() > 1) {
    // Megatron-LM lays the sequence out in the same chunk pairs; p2p is its ring attention.
    args.push_back(fmt::format("--context-parallel-size {} --cp-comm-type {}", s.cp(),
                               s.context == ContextForm::kRing ? "p2p" : "a2a"));
  }
  args.push_back(fmt::format("--micro-batch-size {}", s.micro_batch));
  args.push_back(fmt::format("--global-batch-size {}", s.global_batch));
  if (s.recompute == Recompute::kFull)
    args.emplace_back(
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1");
  if (s.recompute == Recompute::kSelective) args.emplace_back("--recompute-granularity selective");
  if (s.precision == Precision::kBf16) args.emplace_back("--bf16");
  if (s.precision == Precision::kFp16) args.emplace_back("--fp16");
  if (s.zero == 1) args.emplace_back("--use-distributed-optimizer");
  if (s.zero >= 2)
    args.push_back(fmt::format("--use-megatron-fsdp --data-parallel-sharding-strategy {}",
                               s.zero == 2 ? "optim_grads" : "optim_grads_params"));
  // The optimizer as planned. Megatron-LM's adam decays weights decoupled (AdamW).
  const OptimizerSpec& o = src.optimizer;
  if (o.kind == OptimizerKind::kSgd) {
    args.push_back(fmt::format("--optimizer sgd --sgd-momentum {}", o.momentum));
  } else {
    args.push_back(fmt::format("--optimizer adam --adam-beta1 {} --adam-beta2 {} --adam-eps {}",
                               o.beta1, o.beta2, o.epsilon));
    if (o.kind == OptimizerKind::kAdam && o.decay() != 0)
      notes.push_back(
          "autopar's adam adds weight decay to the gradient (L2); Megatron-LM's "
          "decays decoupled, as AdamW");
  }
  args.push_back(fmt::format("--lr {} --weight-decay {}", o.learning_rate(), o.decay()));
  args.emplace_back("--train-iters 100 --mock-data");
  notes.push_back(
      "--train-iters and --mock-data stand for your run's length and data "
      "(--data-path)");
  std::string out = fmt::format("torchrun --nproc-per-node {} --nnodes {} pretrain_gpt.py \\\n  ",
                                src.devices_per_node, src.nodes);
  out += fmt::format("{}\n", fmt::join(args, " \\\n  "));
  return out;
}

// --- DeepSpeed --------------------------------------------------------------------------

std::string deepspeed(const Scheme& s, const std::optional<TransformerShape>& m,
                      const ExportSource& src, std::vector<std::string>& notes) {
  const int64_t per_replica = s.global_batch / std::max<int64_t>(s.dp(), 1);
  nlohmann::ordered_json config;
  config["train_batch_size"] = s.global_batch;
  config["train_micro_batch_size_per_gpu"] = s.micro_batch;
  config["gradient_accumulation_steps"] = per_replica / s.micro_batch;
  const OptimizerSpec& o = src.optimizer;
  if (o.kind == OptimizerKind::kSgd) {
    config["optimizer"] = {
        {"type", "SGD"},
        {"params",
         {{"lr", o.learning_rate()}, {"momentum", o.momentum}, {"weight_decay", o.decay()}}}};
  } else {
    config["optimizer"] = {{"type", o.kind == OptimizerKind::kAdamW ? "AdamW" : "Adam"},
                           {"params",
                            {{"lr", o.learning_rate()},
                             {"betas", {o.beta1, o.beta2}},
                             {"eps", o.epsilon},
                             {"weight_decay", o.decay()}}}};
  }
  config["zero_optimization"] = {{"stage", s.zero}};
  if (s.precision == Precision::kBf16) config["bf16"] = {{"enabled", true}};
  if (s.precision == Precision::kFp16) config["fp16"] = {{"enabled", true}};
  if (s.tp() > 1) config["tensor_parallel"] = {{"autotp_size", s.tp()}};
  if (s.pp() > 1 && s.recompute == Recompute::kFull)
    config["pipeline"] = {{"activation_checkpoint_interval", 1}};
  if (s.pp() == 1 && s.recompute == Recompute::kFull) {
    config["activation_checkpointing"] = {{"partition_activations", s.tp() > 1},
                                          {"contiguous_memory_optimization", false}};
    notes.push_back(
        "full recomputation: wrap each layer's forward in deepspeed.checkpointing.checkpoint "
        "(the activation_checkpointing block configures it)");
  }
  if (s.pp() > 1 && m) {
    notes.push_back(
        fmt::format("pipeline: deepspeed.pipe.PipelineModule(layers, num_stages={}, "
                    "partition_method=\"type:<your layer class>\"): {} layers per stage as planned",
                    s.pp(), m->layers / s.pp()));
  }
  if (s.tp() > 1)
    notes.push_back(
        "tensor parallelism: AutoTP training (deepspeed.initialize with the "
        "tensor_parallel block) splits the projections column- and row-wise");
  return config.dump(2) + "\n";
}

// --- torchtitan -------------------------------------------------------------------------

// torchtitan's llama3 flavors, by (layers, hidden).
std::optional<std::string> llama3_flavor(const TransformerShape& m) {
  static const std::map<std::pair<int32_t, int64_t>, std::string> kFlavors = {
      {{32, 4096}, "8B"}, {{80, 8192}, "70B"}, {{126, 16384}, "405B"}};
  if (!m.rms_norm || !m.gated || !m.rope) return std::nullopt;
  auto it = kFlavors.find({m.layers, m.hidden});
  if (it == kFlavors.end()) return std::nullopt;
  return it->second;
}

std::string torchtitan(const Scheme& s, const TransformerShape& m, const ExportSource& src,
                       std::vector<std::string>& notes) {
  std::string out;
  auto line = [&out](const std::string& key, const std::string& value) {
    out += fmt::format("{} = {}\n", key, value);
  };
  out += "[job]\n";
  line("description", toml_string(fmt::format("autopar plan for {}", src.model)));
  out += "\n[model]\n";
  if (auto flavor = llama3_flavor(m)) {
    line("name", toml_string("llama3"));
    line("flavor", toml_string(*flavor));
  } else {
    line("name", toml_string(src.model));
    notes.push_back(fmt::format(
        "torchtitan ships llama3, llama4, qwen3, deepseek_v3, gpt_oss and flux: register a "
        "TrainSpec named \"{}\" for this model (torchtitan/protocols/train_spec.py)",
        src.model));
  }
  if (!flash_attention(s, src))
    notes.push_back(
        "torchtitan's models run attention through PyTorch's scaled_dot_product_attention "
        "(FlashAttention kernels): less memory and time than the unfused attention planned");
  const int64_t dp = s.dp();
  out += "\n[training]\n";
  // A rank's batch per optimizer step under pp (its microbatches run by the schedule), else
  // per forward (torchtitan accumulates global / (local · dp) of them).
  line("local_batch_size", fmt::format("{}", s.pp() > 1 ? s.global_batch / dp : s.micro_batch));
  line("global_batch_size", fmt::format("{}", s.global_batch));
  line("seq_len", fmt::format("{}", m.sequence));
  line("mixed_precision_param",
       toml_string(s.precision == Precision::kBf16 ? "bfloat16" : "float32"));
  const OptimizerSpec& o = src.optimizer;
  out += "\n[optimizer]\n";
  line("name", toml_string("AdamW"));
  line("lr", toml_float(o.learning_rate()));
  line("beta1", toml_float(o.beta1));
  line("beta2", toml_float(o.beta2));
  line("eps", toml_float(o.epsilon));
  line("weight_decay", toml_float(o.decay()));
  if (o.kind != OptimizerKind::kAdamW)
    notes.push_back(
        fmt::format("torchtitan's optimizer section is set for AdamW; the plan "
                    "trains with {}",
                    optimizer_name(o.kind)));
  out += "\n[parallelism]\n";
  line("data_parallel_replicate_degree", fmt::format("{}", s.zero == 0 ? dp : 1));
  line("data_parallel_shard_degree", fmt::format("{}", s.zero == 0 ? 1 : dp));
  if (s.zero >= 2)
    line("fsdp_reshard_after_forward", toml_string(s.zero == 3 ? "always" : "never"));
  line("tensor_parallel_degree", fmt::format("{}", s.tp()));
  // Loss parallelism (the loss on vocabulary shards over tp) as the plan runs it.
  if (s.tp() > 1) line("disable_loss_parallel", src.vocab_parallel_loss ? "false" : "true");
  line("context_parallel_degree", fmt::format("{}", s.cp()));
  if (s.cp() > 1) {
    // Rank r holds chunks r and 2cp-1-r ("headtail"); the K/V blocks pass round the ring.
    line("context_parallel_load_balancer", toml_string("headtail"));
    line("context_parallel_rotate_method", toml_string("alltoall"));
  }
  line("pipeline_parallel_degree", fmt::format("{}", s.pp()));
  if (s.pp() > 1) {
    line("pipeline_parallel_schedule",
         toml_string(s.schedule == PipelineSchedule::kGpipe         ? "GPipe"
                     : s.schedule == PipelineSchedule::kInterleaved ? "Interleaved1F1B"
                                                                    : "1F1B"));
    line("pipeline_parallel_microbatch_size", fmt::format("{}", s.micro_batch));
    const std::vector<int32_t> per = stage_layers(s, m.layers);
    if (even_stages(s, m.layers)) {
      line("pipeline_parallel_layers_per_stage", fmt::format("{}", per.front()));
      line("pipeline_parallel_first_stage_less_layers", "0");
      line("pipeline_parallel_last_stage_less_layers", "0");
    } else {
      // Uneven stages as planned, by the modules of torchtitan's decoders.
      std::vector<std::string> parts;
      int32_t layer = 0;
      for (size_t i = 0; i < per.size(); ++i) {
        std::vector<std::string> fqns;
        if (i == 0) fqns.push_back(toml_string("tok_embeddings"));
        for (int32_t k = 0; k < per[i]; ++k)
          fqns.push_back(toml_string(fmt::format("layers.{}", layer++)));
        if (i + 1 == per.size()) {
          fqns.push_back(toml_string("norm"));
          fqns.push_back(toml_string("output"));
        }
        parts.push_back(fmt::format("[{}]", fmt::join(fqns, ", ")));
      }
      line("module_fqns_per_model_part", fmt::format("[{}]", fmt::join(parts, ", ")));
    }
  }
  out += "\n[activation_checkpoint]\n";
  line("mode", toml_string(s.recompute == Recompute::kFull ? "full" : "none"));
  return out;
}

}  // namespace

StatusOr<ExportTarget> parse_export_target(const std::string& name) {
  if (name == "megatron") return ExportTarget::kMegatron;
  if (name == "deepspeed") return ExportTarget::kDeepSpeed;
  if (name == "torchtitan") return ExportTarget::kTorchtitan;
  return error("--export {}: expected megatron, deepspeed or torchtitan", name);
}

const char* export_target_name(ExportTarget target) {
  switch (target) {
    case ExportTarget::kMegatron:
      return "megatron";
    case ExportTarget::kDeepSpeed:
      return "deepspeed";
    case ExportTarget::kTorchtitan:
      break;
  }
  return "torchtitan";
}

StatusOr<TransformerShape> transformer_shape(const Graph& g) {
  TransformerShape s;
  std::map<int64_t, int> widths;  // layer 0's projection widths, counted
  int64_t projected = 0;
  bool layer_norm = false, bias = false;
  for (const Node& n : g.nodes()) {
    s.layers = std::max(s.layers, n.layer + 1);
    if (n.layer != 0 || n.inputs.empty() || n.inputs[0] == kNoId) continue;
    const Shape& x = g.value(n.inputs[0]).shape;
    if (n.op_type == "Softmax" && x.rank() == 4 && s.heads == 0) {
      s.heads = x.dims[1];
      s.sequence = x.dims[2];
    }
    if (n.op_type == "LayerNormalization") layer_norm = true;
    if (auto p = projection(g, n)) {
      if (projected == 0) projected = p->first;
      if (p->first == projected) ++widths[p->second];
    }
    // Biases: a Gemm's third input, or a rank-1 parameter added in the layer.
    auto is_bias = [&g](ValueId v) { return is_parameter(g, v) && g.value(v).shape.rank() == 1; };
    if ((n.op_type == "Gemm" && n.inputs.size() == 3 && is_parameter(g, n.inputs[2])) ||
        (n.op_type == "Add" && n.inputs.size() == 2 &&
         (is_bias(n.inputs[0]) || is_bias(n.inputs[1]))))
      bias = true;
  }
  if (s.heads == 0 || s.layers == 0 || projected == 0)
    return error("{} is not a transformer (no attention in its repeated layers)", g.name);
  s.hidden = projected;
  const int64_t head_dim = s.hidden / s.heads;
  s.kv_heads = s.heads;
  for (const auto& [w, count] : widths) {
    if (w < s.hidden && head_dim > 0 && w % head_dim == 0)
      s.kv_heads = std::min(s.kv_heads, w / head_dim);
  }
  // The FFN width: the widest projection of the hidden width (the fused QKV of GPT-2, 3h, is
  // narrower than its 4h FFN); two of them are SwiGLU's gate and up.
  s.ffn = widths.rbegin()->first;
  s.gated = widths.rbegin()->second >= 2 && s.ffn != s.hidden;
  s.rms_norm = !layer_norm;
  s.bias = bias;
  // Embeddings: Gathers of [rows, hidden] parameters outside the layers; the one indexed by a
  // graph input of token ids is the vocabulary, any other a learned position table.
  ValueId token_table = kNoId;
  s.rope = true;
  for (const Node& n : g.nodes()) {
    if (n.op_type != "Gather" || n.inputs.size() < 2 || !is_parameter(g, n.inputs[0])) continue;
    const Shape& w = g.value(n.inputs[0]).shape;
    if (w.rank() != 2 || w.dims[1] != s.hidden) continue;
    if (g.value(n.inputs[1]).kind == ValueKind::kInput && token_table == kNoId) {
      token_table = n.inputs[0];
      s.vocab = w.dims[0];
    } else {
      s.rope = false;
      s.max_positions = w.dims[0];
    }
  }
  if (token_table != kNoId) s.tied = g.value(token_table).consumers.size() > 1;
  if (s.max_positions == 0) s.max_positions = s.sequence;
  return s;
}

std::optional<std::string> export_obstacle(ExportTarget target, const Scheme& scheme,
                                           const std::optional<TransformerShape>& shape) {
  switch (target) {
    case ExportTarget::kMegatron:
      return megatron_obstacle(scheme, shape);
    case ExportTarget::kDeepSpeed:
      return deepspeed_obstacle(scheme, shape);
    case ExportTarget::kTorchtitan:
      break;
  }
  return torchtitan_obstacle(scheme, shape);
}

std::string Exported::printed() const {
  std::string out;
  for (const std::string& n : notes) out += "# " + n + "\n";
  return out + text;
}

StatusOr<Exported> export_scheme(ExportTarget target, const Scheme& s, const ExportSource& source) {
  std::optional<TransformerShape> shape;
  if (auto t = transformer_shape(*source.graph); t.is_ok()) shape = *t;
  if (!shape && target != ExportTarget::kDeepSpeed)
    return error("--export {}: {} is not a transformer (no attention in its repeated layers)",
                 export_target_name(target), source.model);
  Exported e;
  if (auto obstacle = export_obstacle(target, s, shape))
    e.notes.push_back("NOT AS PLANNED: " + *obstacle);
  switch (target) {
    case ExportTarget::kMegatron:
      e.file = "megatron.sh";
      e.notes.insert(e.notes.begin(), fmt::format("{} ({})", kMegatronRelease, source.model));
      e.text = megatron(s, *shape, source, e.notes);
      break;
    case ExportTarget::kDeepSpeed:
      e.file = "deepspeed.json";
      e.notes.insert(e.notes.begin(), fmt::format("{} ({})", kDeepSpeedRelease, source.model));
      e.text = deepspeed(s, shape, source, e.notes);
      break;
    case ExportTarget::kTorchtitan:
      e.file = "torchtitan.toml";
      e.notes.insert(e.notes.begin(), fmt::format("{} ({})", kTorchtitanRelease, source.model));
      e.text = torchtitan(s, *shape, source, e.notes);
      break;
  }
  return e;
}

}  // namespace autopar::cli
