// Exports checked against the targets' own argument lists (tests/data/export/, read from
// Megatron-LM core_v0.19.0's parser, DeepSpeed v0.19.5's config schema and torchtitan v0.2.2's
// JobConfig): every flag and key exists, takes the kind of value given, and the arithmetic the
// targets check at start-up (virtual stages, layouts, batch splits) holds.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "autopar/zoo/zoo.h"
#include "cli/export.h"
#include "testing/testing.h"

namespace autopar::cli {
namespace {

// name -> the rest of its line (Megatron: flag/value/values; DeepSpeed: "" or "*";
// torchtitan: type, default, notes).
std::map<std::string, std::vector<std::string>> read_list(const std::string& file) {
  std::ifstream in(testing::source_path("tests/data/export/" + file));
  std::map<std::string, std::vector<std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, '\t');) fields.push_back(f);
    const std::string name = fields.front();
    fields.erase(fields.begin());
    out[name] = fields;
  }
  return out;
}

Graph zoo(const std::string& name) {
  ZooOptions o;
  o.with_weights = false;
  auto g = build_zoo_model(name, o);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return std::move(g).value();
}

Scheme scheme(const std::string& yaml) {
  auto s = parse_scheme(yaml, "test");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return std::move(s).value();
}

Exported exported(ExportTarget target, const Scheme& s, const Graph& g, const std::string& model) {
  ExportSource source{model, &g, OptimizerSpec{}, 8, 8};
  auto e = export_scheme(target, s, source);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(e).value();
}

// Megatron-LM: the arguments after pretrain_gpt.py, each checked against the parser's list;
// returns them as flag -> values.
std::map<std::string, std::vector<std::string>> megatron_arguments(const std::string& text) {
  static const auto known = read_list("megatron_lm_arguments.txt");
  std::stringstream ss(text.substr(text.find("pretrain_gpt.py") + 15));
  std::vector<std::string> tokens;
  for (std::string t; ss >> t;) {
    if (t == "\\") continue;
    if (t.size() > 1 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
    tokens.push_back(t);
  }
  std::map<std::string, std::vector<std::string>> args;
  for (size_t i = 0; i < tokens.size();) {
    const std::string flag = tokens[i++];
    EXPECT_EQ(flag.rfind("--", 0), 0u) << "not a flag: " << flag;
    auto it = known.find(flag);
    EXPECT_NE(it, known.end()) << flag << " is not a Megatron-LM argument";
    EXPECT_EQ(args.count(flag), 0u) << flag << " given twice";
    std::vector<std::string>& values = args[flag];
    while (i < tokens.size() && tokens[i].rfind("--", 0) != 0) values.push_back(tokens[i++]);
    if (it == known.end()) continue;
    const std::string kind = it->second.front();
    if (kind == "flag") {
      EXPECT_TRUE(values.empty()) << flag << " takes no value";
    }
    if (kind == "value") {
      EXPECT_EQ(values.size(), 1u) << flag << " takes one value";
    }
    if (kind == "values") {
      EXPECT_GE(values.size(), 1u) << flag << " takes values";
    }
  }
  return args;
}

int64_t number(const std::map<std::string, std::vector<std::string>>& args,
               const std::string& flag) {
  auto it = args.find(flag);
  return it == args.end() || it->second.empty() ? 0 : std::stoll(it->second.front());
}

TEST(Export, MegatronArgumentsAreMegatronLmsAndComplete) {
  const Graph g = zoo("gpt3-13b");
  const Exported e = exported(ExportTarget::kMegatron,
                              scheme("mesh: {pp: 4, dp: 2, tp: 8}\nbatch: {global: 64, micro: 1}\n"
                                     "pipeline: {schedule: interleaved, chunks: 2}\n"
                                     "tensor: megatron-sp\nzero: 1\nrecompute: full\n"
                                     "precision: bf16\n"),
                              g, "gpt3-13b");
  EXPECT_EQ(e.file, "megatron.sh");
  const auto args = megatron_arguments(e.text);
  // What pretrain_gpt.py needs to start (validate_args and the training loop).
  for (const char* flag :
       {"--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length",
        "--max-position-embeddings", "--micro-batch-size", "--global-batch-size", "--lr",
        "--train-iters", "--tokenizer-type", "--vocab-size", "--mock-data"})
    EXPECT_EQ(args.count(flag), 1u) << flag << "\n" << e.text;
  EXPECT_EQ(number(args, "--num-layers"), 40);
  EXPECT_EQ(number(args, "--hidden-size"), 5120);
  EXPECT_EQ(number(args, "--num-attention-heads"), 40);
  EXPECT_EQ(number(args, "--ffn-hidden-size"), 20480);
  EXPECT_EQ(number(args, "--seq-length"), 2048);
  EXPECT_EQ(number(args, "--vocab-size"), 51200);
  EXPECT_EQ(number(args, "--tensor-model-parallel-size"), 8);
  EXPECT_EQ(number(args, "--pipeline-model-parallel-size"), 4);
  // 40 layers over 4 ranks of 2 virtual stages: 5 layers each, as planned.
  EXPECT_EQ(number(args, "--num-virtual-stages-per-pipeline-rank"), 2);
  EXPECT_EQ(args.count("--num-layers-per-virtual-pipeline-stage"), 0u);
  for (const char* flag : {"--sequence-parallel", "--use-distributed-optimizer", "--bf16"})
    EXPECT_EQ(args.count(flag), 1u) << flag;
  EXPECT_EQ(args.at("--recompute-granularity"), std::vector<std::string>{"full"});
  EXPECT_EQ(args.at("--recompute-method"), std::vector<std::string>{"uniform"});
  // GPT-3: learned positions, LayerNorm, GELU, biases, tied embeddings: Megatron's defaults.
  for (const char* flag : {"--normalization", "--swiglu", "--position-embedding-type",
                           "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                           "--group-query-attention"})
    EXPECT_EQ(args.count(flag), 0u) << flag;
  EXPECT_EQ(e.text.find("NOT AS PLANNED"), std::string::npos);
}

TEST(Export, MegatronGetsUnevenAndIndivisibleStagesAsALayout) {
  const Graph g = zoo("gpt3-13b");
  // pp 4 × 4 chunks: 16 virtual stages of 40 layers (2 or 3 each), which no
  // layers-per-virtual-stage count gives; and stages a search balanced unevenly.
  for (const std::string& pipeline :
       {std::string("pipeline: {schedule: interleaved, chunks: 4}\n"),
        std::string(
            "pipeline: {schedule: 1f1b, stages: [[0, 8], [9, 19], [20, 30], [31, 39]]}\n")}) {
    const Scheme s = scheme("mesh: {pp: 4, dp: 2, tp: 8}\nbatch: {global: 64, micro: 1}\n" +
                            pipeline + "precision: bf16\n");
    const auto args = megatron_arguments(exported(ExportTarget::kMegatron, s, g, "gpt3-13b").text);
    ASSERT_EQ(args.count("--pipeline-model-parallel-layout"), 1u) << pipeline;
    EXPECT_EQ(args.count("--num-virtual-stages-per-pipeline-rank"), 0u);
    // Megatron-LM's checks: stages a multiple of pp, the embedding first, the loss last,
    // every decoder layer once.
    const std::string layout = args.at("--pipeline-model-parallel-layout").front();
    std::vector<std::string> stages;
    std::stringstream ss(layout);
    for (std::string stage; std::getline(ss, stage, '|');) stages.push_back(stage);
    EXPECT_EQ(static_cast<int64_t>(stages.size()), s.pp() * s.chunks) << layout;
    EXPECT_EQ(layout.front(), 'E');
    EXPECT_EQ(layout.back(), 'L');
    EXPECT_EQ(std::count(layout.begin(), layout.end(), 't'), 40) << layout;
    EXPECT_EQ(std::count(layout.begin(), layout.end(), 'E'), 1);
  }
}

TEST(Export, MegatronFlagsForLlama) {
  const Graph g = zoo("llama3-8b");
  const auto shape = transformer_shape(g);
  ASSERT_TRUE(shape.is_ok()) << shape.status().message();
  EXPECT_EQ(shape->heads, 32);
  EXPECT_EQ(shape->kv_heads, 8);
  EXPECT_EQ(shape->ffn, 14336);
  EXPECT_EQ(shape->vocab, 128256);
  EXPECT_TRUE(shape->rms_norm && shape->gated && shape->rope);
  EXPECT_FALSE(shape->tied || shape->bias);
  const auto args = megatron_arguments(
      exported(ExportTarget::kMegatron,
               scheme("mesh: {dp: 2, cp: 2, tp: 2}\nbatch: {global: 8, micro: 1}\n"
                      "tensor: megatron-sp\ncontext: ring\nprecision: bf16\n"),
               g, "llama3-8b")
          .text);
  EXPECT_EQ(number(args, "--num-query-groups"), 8);
  EXPECT_EQ(args.at("--normalization"), std::vector<std::string>{"RMSNorm"});
  EXPECT_EQ(args.at("--position-embedding-type"), std::vector<std::string>{"rope"});
  EXPECT_EQ(args.at("--cp-comm-type"), std::vector<std::string>{"p2p"});
  for (const char* flag : {"--group-query-attention", "--swiglu",
                           "--untie-embeddings-and-output-weights", "--disable-bias-linear"})
    EXPECT_EQ(args.count(flag), 1u) << flag;
}

// DeepSpeed: every key path is one the config schema reads.
void expect_deepspeed_keys(const nlohmann::json& j, const std::string& prefix) {
  static const auto known = read_list("deepspeed_config_keys.txt");
  for (const auto& [key, value] : j.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    auto it = known.find(path);
    const bool free_form = it != known.end() && !it->second.empty() && it->second.front() == "*";
    if (value.is_object() && !free_form) {
      // A section: some key of the schema lies under it, and so does each of its own.
      auto under = known.lower_bound(path + ".");
      ASSERT_TRUE(under != known.end() && under->first.rfind(path + ".", 0) == 0)
          << path << " is not a DeepSpeed config section";
      expect_deepspeed_keys(value, path);
    } else {
      ASSERT_NE(it, known.end()) << path << " is not a DeepSpeed config key";
    }
  }
}

TEST(Export, DeepSpeedConfigsAreDeepSpeedsAndCoverCnns) {
  const Graph gpt = zoo("gpt3-13b");
  const Exported e = exported(ExportTarget::kDeepSpeed,
                              scheme("mesh: {dp: 32, tp: 2}\nbatch: {global: 512, micro: 2}\n"
                                     "zero: 2\nrecompute: full\nprecision: bf16\n"),
                              gpt, "gpt3-13b");
  EXPECT_EQ(e.file, "deepspeed.json");
  const auto config = nlohmann::json::parse(e.text);  // pure JSON: the notes are apart
  expect_deepspeed_keys(config, "");
  EXPECT_EQ(config["train_batch_size"].get<int64_t>(),
            config["train_micro_batch_size_per_gpu"].get<int64_t>() *
                config["gradient_accumulation_steps"].get<int64_t>() * 32);
  EXPECT_EQ(config["optimizer"]["type"], "Adam");
  EXPECT_EQ(config["zero_optimization"]["stage"], 2);
  for (const std::string& n : e.notes) EXPECT_EQ(n.find("NOT AS PLANNED"), std::string::npos) << n;
  EXPECT_EQ(config["tensor_parallel"]["autotp_size"], 2);
  EXPECT_TRUE(config["bf16"]["enabled"].get<bool>());

  // ZeRO and data parallelism apply to any model, ResNet-50 included.
  const Graph resnet = zoo("resnet50");
  const Exported r = exported(ExportTarget::kDeepSpeed,
                              scheme("mesh: {dp: 8}\nbatch: {global: 256, micro: 32}\nzero: 1\n"
                                     "precision: bf16\n"),
                              resnet, "resnet50");
  expect_deepspeed_keys(nlohmann::json::parse(r.text), "");
  EXPECT_EQ(r.text.find("NOT AS PLANNED"), std::string::npos);
  for (const std::string& n : r.notes) EXPECT_EQ(n.find("NOT AS PLANNED"), std::string::npos) << n;
}

// torchtitan: section.key lines, each a JobConfig field with a value of its type.
std::map<std::string, std::string> torchtitan_keys(const std::string& text) {
  static const auto known = read_list("torchtitan_job_config.txt");
  std::map<std::string, std::string> out;
  std::stringstream ss(text);
  std::string section;
  for (std::string line; std::getline(ss, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t eq = line.find(" = ");
    const std::string key = section + "." + line.substr(0, eq);
    const std::string value = line.substr(eq + 3);
    auto it = known.find(key);
    EXPECT_NE(it, known.end()) << key << " is not a torchtitan JobConfig field";
    if (it == known.end()) continue;
    const std::string& type = it->second.front();
    if (type == "int") {
      EXPECT_EQ(value.find_first_not_of("-0123456789"), std::string::npos) << key;
    }
    if (type == "float") {
      EXPECT_NE(value.find_first_of(".e"), std::string::npos) << key;
    }
    if (type == "str") {
      EXPECT_EQ(value.front(), '"') << key;
    }
    if (type == "bool") {
      EXPECT_TRUE(value == "true" || value == "false") << key;
    }
    if (type == "list") {
      EXPECT_EQ(value.front(), '[') << key;
    }
    // A field with choices takes one of them.
    if (it->second.size() > 2) {
      const std::string& notes = it->second[2];
      const size_t c = notes.find("choices=");
      if (c != std::string::npos) {
        const std::string choices = "|" + notes.substr(c + 8, notes.find(';', c) - c - 8) + "|";
        EXPECT_NE(choices.find("|" + value.substr(1, value.size() - 2) + "|"), std::string::npos)
            << key << " = " << value;
      }
    }
    out[key] = value;
  }
  return out;
}

TEST(Export, TorchtitanJobConfigsAreTorchtitans) {
  const Graph llama = zoo("llama3-8b");
  const Exported e = exported(ExportTarget::kTorchtitan,
                              scheme("mesh: {pp: 2, dp: 4, tp: 2}\nbatch: {global: 64, micro: 2}\n"
                                     "pipeline: {schedule: interleaved, chunks: 2}\n"
                                     "tensor: megatron-sp\nzero: 3\nrecompute: full\n"
                                     "precision: bf16\n"),
                              llama, "llama3-8b");
  const auto keys = torchtitan_keys(e.text);
  EXPECT_EQ(keys.at("model.name"), "\"llama3\"");
  EXPECT_EQ(keys.at("model.flavor"), "\"8B\"");
  EXPECT_EQ(keys.at("parallelism.data_parallel_shard_degree"), "4");
  EXPECT_EQ(keys.at("parallelism.tensor_parallel_degree"), "2");
  EXPECT_EQ(keys.at("parallelism.disable_loss_parallel"), "true");
  // A plan that runs the loss on vocabulary shards (llama3's head splits the vocabulary over
  // tp) keeps torchtitan's loss parallelism.
  ExportSource vocab_parallel{"llama3-8b", &llama, OptimizerSpec{}, 8, 8};
  vocab_parallel.vocab_parallel_loss = true;
  auto parallel_loss = export_scheme(ExportTarget::kTorchtitan,
                                     scheme("mesh: {pp: 2, dp: 4, tp: 2}\nbatch: {global: 64, "
                                            "micro: 2}\ntensor: megatron-sp\nzero: 3\n"
                                            "precision: bf16\n"),
                                     vocab_parallel);
  ASSERT_TRUE(parallel_loss.is_ok()) << parallel_loss.status().message();
  EXPECT_EQ(torchtitan_keys(parallel_loss->text).at("parallelism.disable_loss_parallel"), "false");
  EXPECT_EQ(keys.at("parallelism.pipeline_parallel_schedule"), "\"Interleaved1F1B\"");
  EXPECT_EQ(keys.at("parallelism.pipeline_parallel_microbatch_size"), "2");
  // 32 layers over 4 virtual stages of 8, none for the embedding and the output.
  EXPECT_EQ(keys.at("parallelism.pipeline_parallel_layers_per_stage"), "8");
  EXPECT_EQ(keys.at("parallelism.pipeline_parallel_first_stage_less_layers"), "0");
  EXPECT_EQ(keys.at("training.local_batch_size"), "16");
  EXPECT_EQ(keys.at("activation_checkpoint.mode"), "\"full\"");
  EXPECT_EQ(e.printed().find("NOT AS PLANNED"), std::string::npos) << e.printed();

  // Without pp, a rank's batch per forward is the microbatch; torchtitan accumulates the rest.
  const Graph gpt = zoo("gpt3-13b");
  const auto flat =
      torchtitan_keys(exported(ExportTarget::kTorchtitan,
                               scheme("mesh: {dp: 32, tp: 2}\nbatch: {global: 512, micro: 4}\n"
                                      "tensor: megatron-sp\nzero: 2\nprecision: bf16\n"),
                               gpt, "gpt3-13b")
                          .text);
  EXPECT_EQ(flat.at("training.local_batch_size"), "4");
  EXPECT_EQ(flat.at("parallelism.fsdp_reshard_after_forward"), "\"never\"");
}

TEST(Export, ObstaclesNameWhatATargetCannotRun) {
  const Graph g = zoo("gpt2-small");
  const auto shape = transformer_shape(g);
  ASSERT_TRUE(shape.is_ok());
  auto obstacle = [&](ExportTarget t, const std::string& yaml) {
    return export_obstacle(t, scheme(yaml), *shape).value_or("");
  };
  EXPECT_NE(obstacle(ExportTarget::kMegatron, "mesh: {dp: 2, tp: 4}\ntensor: auto\n").find("auto"),
            std::string::npos);
  // Megatron-LM's selective recomputation is autopar's; nonparametric recomputes more.
  EXPECT_EQ(obstacle(ExportTarget::kMegatron, "mesh: {dp: 8}\nrecompute: selective\n"), "");
  EXPECT_NE(obstacle(ExportTarget::kMegatron, "mesh: {dp: 8}\nrecompute: nonparametric\n")
                .find("core_attn"),
            std::string::npos);
  EXPECT_NE(obstacle(ExportTarget::kDeepSpeed, "mesh: {dp: 8}\nrecompute: selective\n")
                .find("whole layers"),
            std::string::npos);
  EXPECT_NE(obstacle(ExportTarget::kMegatron, "mesh: {pp: 2, dp: 4}\npipeline: {schedule: gpipe}\n")
                .find("GPipe"),
            std::string::npos);
  EXPECT_NE(obstacle(ExportTarget::kMegatron, "mesh: {tp: 8}\n").find("12 attention heads"),
            std::string::npos);
  EXPECT_NE(obstacle(ExportTarget::kDeepSpeed, "mesh: {pp: 2, dp: 4}\nzero: 2\n").find("ZeRO"),
            std::string::npos);
  EXPECT_NE(obstacle(ExportTarget::kTorchtitan, "mesh: {dp: 8}\nzero: 1\n").find("FSDP2"),
            std::string::npos);
  EXPECT_EQ(obstacle(ExportTarget::kMegatron, "mesh: {pp: 2, dp: 2, tp: 2}\nzero: 1\n"), "");
  EXPECT_EQ(obstacle(ExportTarget::kDeepSpeed, "mesh: {dp: 8}\nzero: 3\n"), "");
  EXPECT_NE(obstacle(ExportTarget::kDeepSpeed, "mesh: {dp: 4, tp: 2}\nzero: 3\n").find("AutoTP"),
            std::string::npos);
}

TEST(Export, AutotuneSearchesOnlyWhatTheTargetRuns) {
  const std::string dir = testing::temp_dir("export_search");
  std::ofstream(dir + "/space.yaml")
      << "mesh: {tp: [1, 2], pp: [1, 2], dp: auto}\nbatch: {micro: [1, 2]}\n"
         "pipeline: {schedules: [gpipe, 1f1b]}\ntensor: [megatron, megatron-sp, auto]\n"
         "zero: [0, 1, 2, 3]\nrecompute: [none, selective, nonparametric, full]\n";
  const std::string profile = testing::source_path("tests/data/hw/fixture.yaml");
  for (const char* target : {"megatron", "deepspeed", "torchtitan"}) {
    auto r =
        testing::run_autopar({"autotune", "gpt-tiny", "--hw", profile, "--space",
                              dir + "/space.yaml", "--batch", "16", "-o", dir + "/" + target,
                              "--top", "20", "--simulate-top", "1", "--export", target, "--json"});
    ASSERT_EQ(r.exit_code, 0) << target << ": " << r.err;
    const auto json = nlohmann::json::parse(r.out);
    for (const auto& c : json["top"]) {
      const Scheme s = scheme(c["scheme"].get<std::string>());
      const auto shape = transformer_shape(zoo("gpt-tiny"));
      EXPECT_FALSE(export_obstacle(*parse_export_target(target), s, *shape).has_value())
          << target << ": " << c["scheme"].get<std::string>();
    }
    const auto& e = json["export"];
    EXPECT_EQ(e["target"], target);
    EXPECT_TRUE(std::filesystem::exists(e["file"].get<std::string>())) << e["file"];
    for (const auto& n : e["notes"])
      EXPECT_EQ(n.get<std::string>().find("NOT AS PLANNED"), std::string::npos) << n;
  }
  // --export-any: the whole space, and the export says what the target would change.
  auto any =
      testing::run_autopar({"autotune", "gpt-tiny", "--hw", profile, "--space", dir + "/space.yaml",
                            "--batch", "16", "-o", dir + "/any", "--simulate-top", "0", "--export",
                            "megatron", "--export-any", "--json"});
  ASSERT_EQ(any.exit_code, 0) << any.err;
}

}  // namespace
}  // namespace autopar::cli
