// The zoo's registry of presets and families, option validation and dispatch to builders.
#include "autopar/zoo/zoo.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <variant>

#include <fmt/format.h>

#include "families.h"

namespace autopar {
namespace {

using zoo::BertConfig;
using zoo::GptConfig;
using zoo::LlamaConfig;
using zoo::MlpConfig;
using zoo::ResNetConfig;
using zoo::VitConfig;

using Config = std::variant<MlpConfig, GptConfig, LlamaConfig, BertConfig, ResNetConfig, VitConfig>;

// Bounds that keep every shape product, byte count and allocation well inside int64 and
// memory; a model beyond them is a typo, not a plan to make.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr __int128 kMaxElements = __int128{1} << 59;
// Generating data for more parameters than this would exhaust memory.
constexpr int64_t kMaxParamsWithData = 2'000'000'000;

struct Preset {
  std::string name;
  std::string family;
  std::string summary;
  Config config;
};

std::string format_count(__int128 n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) return fmt::format("{:.1f}B", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.1f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}K", v / 1e3);
  return fmt::format("{}", static_cast<int64_t>(n));
}

GptConfig gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t seq, int64_t vocab) {
  return {.layers = layers, .hidden = hidden, .heads = heads, .seq = seq, .vocab = vocab};
}

// A Llama preset from its published configuration (Hugging Face's config.json).
LlamaConfig llama(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn,
                  int64_t seq, int64_t vocab, double rope_theta) {
  return {.layers = layers,
          .hidden = hidden,
          .heads = heads,
          .kv_heads = kv_heads,
          .ffn = ffn,
          .seq = seq,
          .vocab = vocab,
          .rope_theta = rope_theta};
}

BertConfig bert(int64_t layers, int64_t hidden, int64_t heads, int64_t seq, int64_t vocab,
                int64_t max_positions) {
  return {.layers = layers,
          .hidden = hidden,
          .heads = heads,
          .seq = seq,
          .vocab = vocab,
          .max_positions = max_positions};
}

ResNetConfig torchvision_resnet(bool bottleneck, std::vector<int64_t> blocks,
                                int64_t width_factor = 1) {
  return {.bottleneck = bottleneck,
          .blocks = std::move(blocks),
          .widths = {64, 128, 256, 512},
          .width_factor = width_factor,
          .small_stem = false,
          .image = 224,
          .classes = 1000};
}

VitConfig vit(int64_t layers, int64_t hidden, int64_t heads, int64_t patch) {
  return {.layers = layers,
          .hidden = hidden,
          .heads = heads,
          .image = 224,
          .patch = patch,
          .classes = 1000,
          .pool = VitConfig::Pool::kClassToken};
}

// Family names build their small default and take every flag of the family.
std::vector<Preset> make_presets() {
  const GptConfig gpt_tiny = gpt(4, 64, 4, 16, 256);
  // bert-tiny's position table follows --seq (max_positions 0), so the default 16 rows
  // keep every parallel degree up to 4 dividing the sequence.
  const BertConfig bert_tiny = bert(4, 64, 4, 16, 256, 0);
  const LlamaConfig llama_tiny{};
  const ResNetConfig resnet_tiny{};
  const VitConfig vit_tiny{};
  return {
      {"mlp", "mlp", "MLP: Linear layers with Relu between", MlpConfig{}},
      {"gpt", "gpt", "GPT family with gpt-tiny's defaults", gpt_tiny},
      {"gpt-tiny", "gpt", "small GPT for tests", gpt_tiny},
      {"gpt2-small", "gpt", "GPT-2 small", gpt(12, 768, 12, 1024, 50257)},
      {"gpt2-medium", "gpt", "GPT-2 medium", gpt(24, 1024, 16, 1024, 50257)},
      {"gpt2-large", "gpt", "GPT-2 large", gpt(36, 1280, 20, 1024, 50257)},
      {"gpt2-xl", "gpt", "GPT-2 XL", gpt(48, 1600, 25, 1024, 50257)},
      {"gpt3-1.3b", "gpt", "GPT-3 XL", gpt(24, 2048, 16, 2048, 51200)},
      {"gpt3-2.7b", "gpt", "GPT-3 2.7B", gpt(32, 2560, 32, 2048, 51200)},
      {"gpt3-6.7b", "gpt", "GPT-3 6.7B", gpt(32, 4096, 32, 2048, 51200)},
      {"gpt3-13b", "gpt", "GPT-3 13B", gpt(40, 5120, 40, 2048, 51200)},
      {"gpt3-175b", "gpt", "GPT-3 175B", gpt(96, 12288, 96, 2048, 51200)},
      {"llama", "llama", "Llama family with llama-tiny's defaults", llama_tiny},
      {"llama-tiny", "llama", "small Llama for tests (grouped-query attention)", llama_tiny},
      // Sequences of the published pretraining context: 4K for Llama 2, 8K for Llama 3.
      {"llama2-7b", "llama", "Llama 2 7B", llama(32, 4096, 32, 32, 11008, 4096, 32000, 1e4)},
      {"llama3-8b", "llama", "Llama 3 8B", llama(32, 4096, 32, 8, 14336, 8192, 128256, 5e5)},
      {"llama3-70b", "llama", "Llama 3 70B", llama(80, 8192, 64, 8, 28672, 8192, 128256, 5e5)},
      {"llama3-405b", "llama", "Llama 3 405B", llama(126, 16384, 128, 8, 53248, 8192, 128256, 5e5)},
      {"bert", "bert", "BERT family with bert-tiny's defaults", bert_tiny},
      {"bert-tiny", "bert", "small BERT for tests", bert_tiny},
      // Inputs of 128 tokens, the usual fine-tuning length; the table keeps BERT's 512.
      {"bert-base", "bert", "BERT base (uncased)", bert(12, 768, 12, 128, 30522, 512)},
      {"bert-large", "bert", "BERT large (uncased)", bert(24, 1024, 16, 128, 30522, 512)},
      {"resnet", "resnet", "ResNet family with resnet-tiny's defaults", resnet_tiny},
      {"resnet-tiny", "resnet", "CIFAR-style ResNet for tests", resnet_tiny},
      {"resnet18", "resnet", "ResNet-18", torchvision_resnet(false, {2, 2, 2, 2})},
      {"resnet50", "resnet", "ResNet-50", torchvision_resnet(true, {3, 4, 6, 3})},
      {"resnet101", "resnet", "ResNet-101", torchvision_resnet(true, {3, 4, 23, 3})},
      {"resnet152", "resnet", "ResNet-152", torchvision_resnet(true, {3, 8, 36, 3})},
      {"wide-resnet50-2", "resnet", "Wide ResNet-50-2", torchvision_resnet(true, {3, 4, 6, 3}, 2)},
      {"vit", "vit", "ViT family with vit-tiny's defaults", vit_tiny},
      {"vit-tiny", "vit", "small ViT for tests (mean-pooled, no class token)", vit_tiny},
      {"vit-b16", "vit", "ViT-B/16", vit(12, 768, 12, 16)},
      {"vit-l16", "vit", "ViT-L/16", vit(24, 1024, 16, 16)},
      {"vit-h14", "vit", "ViT-H/14", vit(32, 1280, 16, 14)},
  };
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = make_presets();
  return all;
}

const Preset* find_preset(std::string_view name) {
  for (const Preset& p : presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Status unknown_model(std::string_view name) {
  std::vector<std::string_view> names;
  for (const Preset& p : presets()) names.push_back(p.name);
  return error("unknown model '{}' (valid: {})", name, fmt::join(names, ", "));
}

// ---- option validation ---------------------------------------------------------------

struct Flag {
  std::string_view name;
  const std::optional<int64_t>& value;
};

std::vector<Flag> all_flags(const ZooOptions& o) {
  return {{"--layers", o.layers},     {"--hidden", o.hidden}, {"--heads", o.heads},
          {"--kv-heads", o.kv_heads}, {"--ffn", o.ffn},       {"--seq", o.seq},
          {"--vocab", o.vocab},       {"--image", o.image},   {"--patch", o.patch},
          {"--classes", o.classes},   {"--inputs", o.inputs}};
}

Status check_flags_apply(const ZooOptions& o, std::string_view family,
                         std::initializer_list<std::string_view> allowed) {
  std::vector<std::string_view> given;
  for (const Flag& f : all_flags(o)) {
    if (f.value) given.push_back(f.name);
  }
  if (o.dropout) given.push_back("--dropout");
  for (std::string_view flag : given) {
    if (std::find(allowed.begin(), allowed.end(), flag) == allowed.end()) {
      return error("{} does not apply to the {} family (it takes {})", flag, family,
                   fmt::join(allowed, ", "));
    }
  }
  return Status::ok();
}

Status check_size(std::string_view flag, int64_t value) {
  if (value <= 0) return error("{}: must be positive, got {}", flag, value);
  if (value > kMaxDim) return error("{}: {} exceeds the limit of {}", flag, value, kMaxDim);
  return Status::ok();
}

// A dropout probability in [0, 1).
Status resolve_dropout(const std::optional<double>& given, double& field) {
  if (!given) return Status::ok();
  if (!(*given >= 0 && *given < 1))
    return error("--dropout: {} is not a probability in [0, 1)", *given);
  field = *given;
  return Status::ok();
}

// Resolves `flag` over the preset's value and validates it.
Status resolve(std::string_view flag, const std::optional<int64_t>& given, int64_t& field) {
  if (given) field = *given;
  return check_size(flag, field);
}

Status check_heads(int64_t heads, int64_t hidden) {
  if (hidden % heads != 0) return error("--heads: {} does not divide --hidden {}", heads, hidden);
  return Status::ok();
}

// Rejects a model one of whose tensors would have more elements than int64 can safely count.
Status check_elements(std::string_view model, std::string_view what,
                      std::initializer_list<int64_t> dims) {
  __int128 n = 1;
  for (int64_t d : dims) {
    n *= d;
    if (n > kMaxElements) {
      return error("model '{}': {} would have more than 2^59 elements", model, what);
    }
  }
  return Status::ok();
}

StatusOr<Config> resolve_mlp(MlpConfig c, const ZooOptions& o) {
  RETURN_IF_ERROR(check_flags_apply(o, "mlp", {"--layers", "--hidden", "--inputs", "--classes"}));
  RETURN_IF_ERROR(resolve("--layers", o.layers, c.layers));
  RETURN_IF_ERROR(resolve("--hidden", o.hidden, c.hidden));
  RETURN_IF_ERROR(resolve("--inputs", o.inputs, c.inputs));
  RETURN_IF_ERROR(resolve("--classes", o.classes, c.classes));
  return Config(c);
}

StatusOr<Config> resolve_gpt(GptConfig c, const ZooOptions& o, std::string_view name) {
  RETURN_IF_ERROR(check_flags_apply(
      o, "gpt", {"--layers", "--hidden", "--heads", "--seq", "--vocab", "--dropout"}));
  RETURN_IF_ERROR(resolve_dropout(o.dropout, c.dropout));
  RETURN_IF_ERROR(resolve("--layers", o.layers, c.layers));
  RETURN_IF_ERROR(resolve("--hidden", o.hidden, c.hidden));
  RETURN_IF_ERROR(resolve("--heads", o.heads, c.heads));
  RETURN_IF_ERROR(resolve("--seq", o.seq, c.seq));
  RETURN_IF_ERROR(resolve("--vocab", o.vocab, c.vocab));
  RETURN_IF_ERROR(check_heads(c.heads, c.hidden));
  RETURN_IF_ERROR(check_elements(name, "the attention scores [batch, heads, seq, seq]",
                                 {o.batch, c.heads, c.seq, c.seq}));
  RETURN_IF_ERROR(check_elements(name, "the MLP activations [batch, seq, 4*hidden]",
                                 {o.batch, c.seq, 4, c.hidden}));
  RETURN_IF_ERROR(
      check_elements(name, "the logits [batch, seq, vocab]", {o.batch, c.seq, c.vocab}));
  return Config(c);
}

StatusOr<Config> resolve_llama(LlamaConfig c, const ZooOptions& o, std::string_view name) {
  RETURN_IF_ERROR(check_flags_apply(
      o, "llama", {"--layers", "--hidden", "--heads", "--kv-heads", "--ffn", "--seq", "--vocab"}));
  RETURN_IF_ERROR(resolve("--layers", o.layers, c.layers));
  RETURN_IF_ERROR(resolve("--hidden", o.hidden, c.hidden));
  RETURN_IF_ERROR(resolve("--heads", o.heads, c.heads));
  RETURN_IF_ERROR(resolve("--kv-heads", o.kv_heads, c.kv_heads));
  RETURN_IF_ERROR(resolve("--ffn", o.ffn, c.ffn));
  RETURN_IF_ERROR(resolve("--seq", o.seq, c.seq));
  RETURN_IF_ERROR(resolve("--vocab", o.vocab, c.vocab));
  RETURN_IF_ERROR(check_heads(c.heads, c.hidden));
  if (c.heads % c.kv_heads != 0) {
    return error("--kv-heads: {} does not divide --heads {}", c.kv_heads, c.heads);
  }
  if ((c.hidden / c.heads) % 2 != 0) {
    return error(
        "--heads: the head size {} (--hidden / --heads) must be even for rotary "
        "embeddings",
        c.hidden / c.heads);
  }
  RETURN_IF_ERROR(check_elements(name, "the attention scores [batch, heads, seq, seq]",
                                 {o.batch, c.heads, c.seq, c.seq}));
  RETURN_IF_ERROR(
      check_elements(name, "the MLP activations [batch, seq, ffn]", {o.batch, c.seq, c.ffn}));
  RETURN_IF_ERROR(
      check_elements(name, "the logits [batch, seq, vocab]", {o.batch, c.seq, c.vocab}));
  return Config(c);
}

StatusOr<Config> resolve_bert(BertConfig c, const ZooOptions& o, std::string_view name) {
  RETURN_IF_ERROR(check_flags_apply(
      o, "bert",
      {"--layers", "--hidden", "--heads", "--seq", "--vocab", "--classes", "--dropout"}));
  RETURN_IF_ERROR(resolve_dropout(o.dropout, c.dropout));
  RETURN_IF_ERROR(resolve("--layers", o.layers, c.layers));
  RETURN_IF_ERROR(resolve("--hidden", o.hidden, c.hidden));
  RETURN_IF_ERROR(resolve("--heads", o.heads, c.heads));
  RETURN_IF_ERROR(resolve("--seq", o.seq, c.seq));
  RETURN_IF_ERROR(resolve("--vocab", o.vocab, c.vocab));
  if (o.classes) RETURN_IF_ERROR(resolve("--classes", o.classes, c.classes));
  RETURN_IF_ERROR(check_heads(c.heads, c.hidden));
  if (c.max_positions == 0) {
    c.max_positions = c.seq;
  } else if (c.seq > c.max_positions) {
    return error("--seq: {} exceeds the {} positions of {}", c.seq, c.max_positions, name);
  }
  RETURN_IF_ERROR(check_elements(name, "the attention scores [batch, heads, seq, seq]",
                                 {o.batch, c.heads, c.seq, c.seq}));
  RETURN_IF_ERROR(check_elements(name, "the intermediate activations [batch, seq, 4*hidden]",
                                 {o.batch, c.seq, 4, c.hidden}));
  return Config(c);
}

StatusOr<Config> resolve_resnet(ResNetConfig c, const ZooOptions& o, std::string_view name) {
  RETURN_IF_ERROR(check_flags_apply(o, "resnet", {"--image", "--classes"}));
  RETURN_IF_ERROR(resolve("--image", o.image, c.image));
  RETURN_IF_ERROR(resolve("--classes", o.classes, c.classes));
  // Feature maps only shrink after the stem, whose output is the largest activation.
  RETURN_IF_ERROR(
      check_elements(name, "the feature maps [batch, channels, image, image]",
                     {o.batch, c.widths.back() * 4 * c.width_factor, c.image, c.image}));
  return Config(c);
}

StatusOr<Config> resolve_vit(VitConfig c, const ZooOptions& o, std::string_view name) {
  RETURN_IF_ERROR(check_flags_apply(
      o, "vit", {"--layers", "--hidden", "--heads", "--image", "--patch", "--classes"}));
  RETURN_IF_ERROR(resolve("--layers", o.layers, c.layers));
  RETURN_IF_ERROR(resolve("--hidden", o.hidden, c.hidden));
  RETURN_IF_ERROR(resolve("--heads", o.heads, c.heads));
  RETURN_IF_ERROR(resolve("--image", o.image, c.image));
  RETURN_IF_ERROR(resolve("--patch", o.patch, c.patch));
  RETURN_IF_ERROR(resolve("--classes", o.classes, c.classes));
  RETURN_IF_ERROR(check_heads(c.heads, c.hidden));
  if (c.image % c.patch != 0) {
    return error("--image: {} is not divisible by --patch {}", c.image, c.patch);
  }
  const int64_t tokens = (c.image / c.patch) * (c.image / c.patch) + 1;
  RETURN_IF_ERROR(
      check_elements(name, "the input [batch, 3, image, image]", {o.batch, 3, c.image, c.image}));
  RETURN_IF_ERROR(check_elements(name, "the attention scores [batch, heads, tokens, tokens]",
                                 {o.batch, c.heads, tokens, tokens}));
  RETURN_IF_ERROR(check_elements(name, "the MLP activations [batch, tokens, 4*hidden]",
                                 {o.batch, tokens, 4, c.hidden}));
  return Config(c);
}

StatusOr<Config> resolve_config(std::string_view name, const ZooOptions& o) {
  const Preset* preset = find_preset(name);
  if (!preset) return unknown_model(name);
  RETURN_IF_ERROR(check_size("--batch", o.batch));
  return std::visit(
      [&](const auto& base) -> StatusOr<Config> {
        using T = std::decay_t<decltype(base)>;
        if constexpr (std::is_same_v<T, MlpConfig>) {
          return resolve_mlp(base, o);
        } else if constexpr (std::is_same_v<T, GptConfig>) {
          return resolve_gpt(base, o, name);
        } else if constexpr (std::is_same_v<T, LlamaConfig>) {
          return resolve_llama(base, o, name);
        } else if constexpr (std::is_same_v<T, BertConfig>) {
          return resolve_bert(base, o, name);
        } else if constexpr (std::is_same_v<T, ResNetConfig>) {
          return resolve_resnet(base, o, name);
        } else {
          return resolve_vit(base, o, name);
        }
      },
      preset->config);
}

__int128 parameter_count(const Config& config) {
  return std::visit(
      [](const auto& c) -> __int128 {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, MlpConfig>) {
          return zoo::mlp_parameter_count(c);
        } else if constexpr (std::is_same_v<T, GptConfig>) {
          return zoo::gpt_parameter_count(c);
        } else if constexpr (std::is_same_v<T, LlamaConfig>) {
          return zoo::llama_parameter_count(c);
        } else if constexpr (std::is_same_v<T, BertConfig>) {
          return zoo::bert_parameter_count(c);
        } else if constexpr (std::is_same_v<T, ResNetConfig>) {
          return zoo::resnet_parameter_count(c);
        } else {
          return zoo::vit_parameter_count(c);
        }
      },
      config);
}

StatusOr<int64_t> checked_parameter_count(std::string_view name, const Config& config) {
  const __int128 count = parameter_count(config);
  if (count > kMaxElements) return error("model '{}': more than 2^59 parameters", name);
  return static_cast<int64_t>(count);
}

// "GPT-2 small: 12 layers, hidden 768, ..." for `autopar zoo --list`.
std::string describe(const Preset& p) {
  std::string shape = std::visit(
      [](const auto& c) -> std::string {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, MlpConfig>) {
          return fmt::format("{} layers, hidden {}, {} inputs, {} classes", c.layers, c.hidden,
                             c.inputs, c.classes);
        } else if constexpr (std::is_same_v<T, GptConfig>) {
          return fmt::format("{} layers, hidden {}, {} heads, seq {}, vocab {}", c.layers, c.hidden,
                             c.heads, c.seq, c.vocab);
        } else if constexpr (std::is_same_v<T, LlamaConfig>) {
          return fmt::format("{} layers, hidden {}, {}/{} heads, ffn {}, seq {}, vocab {}",
                             c.layers, c.hidden, c.heads, c.kv_heads, c.ffn, c.seq, c.vocab);
        } else if constexpr (std::is_same_v<T, BertConfig>) {
          return fmt::format("{} layers, hidden {}, {} heads, seq {}, vocab {}", c.layers, c.hidden,
                             c.heads, c.seq, c.vocab);
        } else if constexpr (std::is_same_v<T, ResNetConfig>) {
          return fmt::format("{} blocks [{}], image {}, {} classes",
                             c.bottleneck ? "bottleneck" : "basic", fmt::join(c.blocks, ","),
                             c.image, c.classes);
        } else {
          return fmt::format("{} layers, hidden {}, {} heads, image {}, patch {}, {} classes",
                             c.layers, c.hidden, c.heads, c.image, c.patch, c.classes);
        }
      },
      p.config);
  StatusOr<Config> resolved = resolve_config(p.name, ZooOptions{});
  assert(resolved.is_ok() && "every preset resolves with default options");
  return fmt::format("{}: {} ({} parameters)", p.summary, shape,
                     format_count(parameter_count(*resolved)));
}

}  // namespace

const std::vector<ZooEntry>& zoo_entries() {
  static const std::vector<ZooEntry> entries = [] {
    std::vector<ZooEntry> out;
    for (const Preset& p : presets()) out.push_back({p.name, p.family, describe(p)});
    return out;
  }();
  return entries;
}

bool is_zoo_name(std::string_view name) {
  const auto& entries = zoo_entries();
  return std::any_of(entries.begin(), entries.end(),
                     [&](const ZooEntry& e) { return e.name == name; });
}

StatusOr<int64_t> zoo_parameter_count(std::string_view name, const ZooOptions& options) {
  ASSIGN_OR_RETURN(Config config, resolve_config(name, options));
  return checked_parameter_count(name, config);
}

StatusOr<Graph> build_zoo_model(std::string_view name, const ZooOptions& options) {
  ASSIGN_OR_RETURN(Config config, resolve_config(name, options));
  ASSIGN_OR_RETURN(int64_t count, checked_parameter_count(name, config));
  // The count decides shape-only before anything is built or allocated.
  const bool with_data = options.with_weights.value_or(count <= kZooMaxParamsWithWeights);
  if (with_data && count > kMaxParamsWithData) {
    return error("--with-weights: {} has {} parameters, too many to generate data for (at most {})",
                 name, count, kMaxParamsWithData);
  }
  const zoo::BuildSettings settings{
      .with_data = with_data, .seed = options.seed, .batch = options.batch};
  Graph graph = std::visit(
      [&](const auto& c) -> Graph {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, MlpConfig>) {
          return zoo::build_mlp(c, settings);
        } else if constexpr (std::is_same_v<T, GptConfig>) {
          return zoo::build_gpt(c, settings);
        } else if constexpr (std::is_same_v<T, LlamaConfig>) {
          return zoo::build_llama(c, settings);
        } else if constexpr (std::is_same_v<T, BertConfig>) {
          return zoo::build_bert(c, settings);
        } else if constexpr (std::is_same_v<T, ResNetConfig>) {
          return zoo::build_resnet(c, settings);
        } else {
          return zoo::build_vit(c, settings);
        }
      },
      config);
  graph.name = std::string(name);
  assert(graph.num_parameter_elements() == count && "closed-form parameter count is wrong");
  return graph;
}

}  // namespace autopar
