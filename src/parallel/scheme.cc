// Scheme: YAML parsing with one-line errors, validation, and the YAML writer.
#include "autopar/parallel/scheme.h"

#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace autopar {
namespace {

struct Reader {
  std::string_view source;

  template <typename... Args>
  Status fail(std::string_view field, fmt::format_string<Args...> format, Args&&... args) const {
    return Status::error(
        fmt::format("{}: {}: {}", source, field, fmt::format(format, std::forward<Args>(args)...)));
  }

  StatusOr<int64_t> integer(const YAML::Node& node, std::string_view field) const {
    if (!node.IsScalar()) return fail(field, "expected an integer");
    try {
      return node.as<int64_t>();
    } catch (const YAML::Exception&) {
      return fail(field, "'{}' is not an integer", node.Scalar());
    }
  }

  StatusOr<std::string> text(const YAML::Node& node, std::string_view field) const {
    if (!node.IsScalar()) return fail(field, "expected a name");
    return node.Scalar();
  }

  template <typename Enum>
  StatusOr<Enum> choice(const YAML::Node& node, std::string_view field,
                        std::initializer_list<std::pair<const char*, Enum>> options) const {
    ASSIGN_OR_RETURN(std::string value, text(node, field));
    std::vector<std::string> names;
    for (const auto& [name, e] : options) {
      if (value == name) return e;
      names.emplace_back(name);
    }
    return fail(field, "'{}' is not one of {}", value, fmt::join(names, ", "));
  }

  Status known_keys(const YAML::Node& node, std::string_view field,
                    std::initializer_list<const char*> keys,
                    const std::vector<std::string>& more = {}) const {
    for (const auto& entry : node) {
      const std::string key = entry.first.Scalar();
      bool known = std::find(more.begin(), more.end(), key) != more.end();
      for (const char* k : keys) known = known || key == k;
      if (!known) {
        std::vector<std::string> all(keys.begin(), keys.end());
        all.insert(all.end(), more.begin(), more.end());
        return fail(field.empty() ? key : fmt::format("{}.{}", field, key),
                    "unknown field (known: {})", fmt::join(all, ", "));
      }
    }
    return Status::ok();
  }
};

const std::initializer_list<std::pair<const char*, PipelineSchedule>> kSchedules = {
    {"gpipe", PipelineSchedule::kGpipe},
    {"1f1b", PipelineSchedule::kOneForwardOneBackward},
    {"interleaved", PipelineSchedule::kInterleaved}};
const std::initializer_list<std::pair<const char*, TensorStrategy>> kTensor = {
    {"megatron", TensorStrategy::kMegatron},
    {"megatron-sp", TensorStrategy::kMegatronSp},
    {"auto", TensorStrategy::kAuto}};
const std::initializer_list<std::pair<const char*, Recompute>> kRecompute = {
    {"none", Recompute::kNone}, {"selective", Recompute::kSelective}, {"full", Recompute::kFull}};
const std::initializer_list<std::pair<const char*, Precision>> kPrecision = {
    {"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}};

}  // namespace

const char* schedule_name(PipelineSchedule s) {
  for (const auto& [name, e] : kSchedules) {
    if (e == s) return name;
  }
  return "?";
}
const char* tensor_strategy_name(TensorStrategy t) {
  for (const auto& [name, e] : kTensor) {
    if (e == t) return name;
  }
  return "?";
}
const char* recompute_name(Recompute r) {
  for (const auto& [name, e] : kRecompute) {
    if (e == r) return name;
  }
  return "?";
}
const char* precision_name(Precision p) {
  for (const auto& [name, e] : kPrecision) {
    if (e == p) return name;
  }
  return "?";
}

int64_t Scheme::microbatches() const {
  const int64_t per_replica = global_batch / dp();
  return micro_batch > 0 ? per_replica / micro_batch : 1;
}

StatusOr<Scheme> parse_scheme(std::string_view yaml, std::string_view source) {
  const Reader r{source};
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return error("{}: line {}: {}", source, e.mark.line + 1, e.msg);
  }
  Scheme s;
  if (root.IsNull()) {
    s.mesh = *DeviceMesh::create({{"dp", 1}});
    return s;
  }
  if (!root.IsMap()) return error("{}: a scheme is a YAML mapping of fields", source);
  RETURN_IF_ERROR(r.known_keys(
      root, "",
      {"mesh", "devices", "batch", "pipeline", "tensor", "zero", "recompute", "precision"},
      registered_scheme_fields()));
  for (const std::string& field : registered_scheme_fields()) {
    if (const YAML::Node value = root[field]) {
      YAML::Emitter text;
      text << YAML::Flow << value;
      s.extensions[field] = text.c_str();
    }
  }

  std::vector<MeshAxis> axes;
  if (const YAML::Node mesh = root["mesh"]) {
    if (!mesh.IsMap() || mesh.size() == 0)
      return r.fail("mesh", "expected axes and sizes, e.g. {{dp: 2, tp: 2}}");
    for (const auto& entry : mesh) {
      const std::string axis = entry.first.Scalar();
      ASSIGN_OR_RETURN(int64_t size, r.integer(entry.second, "mesh." + axis));
      axes.push_back({axis, size});
    }
  } else {
    axes.push_back({"dp", 1});
  }
  auto mesh = DeviceMesh::create(axes);
  if (!mesh.is_ok()) return r.fail("mesh", "{}", mesh.status().message());
  s.mesh = std::move(mesh).value();
  if (const YAML::Node devices = root["devices"]) {
    ASSIGN_OR_RETURN(int64_t n, r.integer(devices, "devices"));
    if (n != s.mesh.num_devices()) {
      return r.fail("mesh", "{} has {} devices, but devices is {}", s.mesh.to_string(),
                    s.mesh.num_devices(), n);
    }
    s.devices = n;
  }

  if (const YAML::Node batch = root["batch"]) {
    if (!batch.IsMap()) return r.fail("batch", "expected {{global: N, micro: M}}");
    RETURN_IF_ERROR(r.known_keys(batch, "batch", {"global", "micro"}));
    if (batch["global"]) {
      ASSIGN_OR_RETURN(s.global_batch, r.integer(batch["global"], "batch.global"));
    }
    if (batch["micro"]) {
      ASSIGN_OR_RETURN(s.micro_batch, r.integer(batch["micro"], "batch.micro"));
    }
    if (batch["global"] && s.global_batch < 1)
      return r.fail("batch.global", "{} must be at least 1", s.global_batch);
    if (batch["micro"] && s.micro_batch < 1)
      return r.fail("batch.micro", "{} must be at least 1", s.micro_batch);
    if (s.micro_batch > 0 && s.global_batch == 0)
      return r.fail("batch.micro", "needs batch.global");
  }
  if (s.global_batch > 0) {
    if (s.global_batch % s.dp() != 0) {
      return r.fail("batch.global", "{} is not divisible by dp = {}", s.global_batch, s.dp());
    }
    const int64_t per_replica = s.global_batch / s.dp();
    if (s.micro_batch == 0) s.micro_batch = per_replica;
    if (per_replica % s.micro_batch != 0) {
      return r.fail("batch.micro", "{} does not divide global / dp = {} / {} = {}", s.micro_batch,
                    s.global_batch, s.dp(), per_replica);
    }
  }

  if (const YAML::Node pipeline = root["pipeline"]) {
    if (!pipeline.IsMap())
      return r.fail("pipeline", "expected {{schedule: ..., chunks: ..., stages: ...}}");
    RETURN_IF_ERROR(r.known_keys(pipeline, "pipeline", {"schedule", "chunks", "stages"}));
    if (pipeline["schedule"]) {
      ASSIGN_OR_RETURN(s.schedule, r.choice(pipeline["schedule"], "pipeline.schedule", kSchedules));
    }
    if (pipeline["chunks"]) {
      ASSIGN_OR_RETURN(s.chunks, r.integer(pipeline["chunks"], "pipeline.chunks"));
    }
    if (s.chunks < 1) return r.fail("pipeline.chunks", "{} must be at least 1", s.chunks);
    if (s.chunks > 1 && s.schedule != PipelineSchedule::kInterleaved) {
      return r.fail("pipeline.chunks", "{} chunks need schedule interleaved, not {}", s.chunks,
                    schedule_name(s.schedule));
    }
    if (const YAML::Node stages = pipeline["stages"]) {
      if (stages.IsScalar()) {
        if (stages.Scalar() != "auto")
          return r.fail("pipeline.stages", "expected auto or a list of [first, last] layer ranges");
      } else if (stages.IsSequence()) {
        int32_t next = 0;
        for (size_t i = 0; i < stages.size(); ++i) {
          const std::string field = fmt::format("pipeline.stages[{}]", i);
          const YAML::Node range = stages[i];
          if (!range.IsSequence() || range.size() != 2)
            return r.fail(field, "expected [first, last]");
          ASSIGN_OR_RETURN(int64_t first, r.integer(range[0], field));
          ASSIGN_OR_RETURN(int64_t last, r.integer(range[1], field));
          if (first != next || last < first) {
            return r.fail(field, "[{}, {}] must start at layer {} and not end before it", first,
                          last, next);
          }
          s.stages.emplace_back(static_cast<int32_t>(first), static_cast<int32_t>(last));
          next = static_cast<int32_t>(last + 1);
        }
        const int64_t expected = s.pp() * s.chunks;
        if (static_cast<int64_t>(s.stages.size()) != expected) {
          return r.fail("pipeline.stages", "{} ranges given for {} stages ({})", s.stages.size(),
                        expected,
                        s.chunks > 1 ? fmt::format("pp {} × chunks {}", s.pp(), s.chunks)
                                     : fmt::format("pp = {}", s.pp()));
        }
      } else {
        return r.fail("pipeline.stages", "expected auto or a list of [first, last] layer ranges");
      }
    }
  }
  if (s.schedule == PipelineSchedule::kInterleaved && s.chunks < 2) {
    return r.fail("pipeline.chunks", "schedule interleaved needs chunks of at least 2");
  }

  if (const YAML::Node tensor = root["tensor"]) {
    if (tensor.IsScalar()) {
      ASSIGN_OR_RETURN(s.tensor, r.choice(tensor, "tensor", kTensor));
    } else if (tensor.IsMap()) {
      s.tensor = TensorStrategy::kAuto;
      for (const auto& entry : tensor) {
        const std::string pattern = entry.first.Scalar();
        ASSIGN_OR_RETURN(std::string strategy, r.text(entry.second, "tensor." + pattern));
        if (pattern == "default") {
          ASSIGN_OR_RETURN(s.tensor, r.choice(entry.second, "tensor.default", kTensor));
          continue;
        }
        s.overrides.push_back({pattern, strategy});
      }
    } else {
      return r.fail("tensor",
                    "expected megatron, megatron-sp, auto, or a map of node-name patterns");
    }
  }
  if (const YAML::Node zero = root["zero"]) {
    ASSIGN_OR_RETURN(int64_t stage, r.integer(zero, "zero"));
    if (stage < 0 || stage > 3)
      return r.fail("zero", "{} is not a ZeRO stage (0, 1, 2 or 3)", stage);
    s.zero = static_cast<int>(stage);
  }
  if (const YAML::Node recompute = root["recompute"]) {
    ASSIGN_OR_RETURN(s.recompute, r.choice(recompute, "recompute", kRecompute));
  }
  if (const YAML::Node precision = root["precision"]) {
    ASSIGN_OR_RETURN(s.precision, r.choice(precision, "precision", kPrecision));
  }
  return s;
}

StatusOr<Scheme> read_scheme_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error("{}: cannot open", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_scheme(text.str(), path);
}

Status validate_scheme(const Scheme& s, const Graph& model, std::string_view source) {
  int32_t max_layer = -1;
  for (const Node& n : model.nodes()) max_layer = std::max(max_layer, n.layer);
  const int64_t layers = max_layer + 1;
  const int64_t stages = s.pp() * s.chunks;
  if (stages > 1 && stages > layers) {
    return error("{}: mesh.pp: {} stages{} for a model of {} layers", source, stages,
                 s.chunks > 1 ? fmt::format(" (pp {} × chunks {})", s.pp(), s.chunks) : "", layers);
  }
  if (!s.stages.empty() && s.stages.back().second != max_layer) {
    return error("{}: pipeline.stages: the ranges end at layer {}, the model's last layer is {}",
                 source, s.stages.back().second, max_layer);
  }
  return Status::ok();
}

std::string Scheme::to_yaml() const {
  std::string out = "mesh: {";
  for (size_t i = 0; i < mesh.axes().size(); ++i) {
    out += fmt::format("{}{}: {}", i ? ", " : "", mesh.axes()[i].name, mesh.axes()[i].size);
  }
  out += "}\n";
  if (devices) out += fmt::format("devices: {}\n", *devices);
  if (global_batch > 0)
    out += fmt::format("batch: {{global: {}, micro: {}}}\n", global_batch, micro_batch);
  out += fmt::format("pipeline: {{schedule: {}, chunks: {}, stages: ", schedule_name(schedule),
                     chunks);
  if (stages.empty()) {
    out += "auto}\n";
  } else {
    std::vector<std::string> ranges;
    for (const auto& [first, last] : stages) ranges.push_back(fmt::format("[{}, {}]", first, last));
    out += fmt::format("[{}]}}\n", fmt::join(ranges, ", "));
  }
  if (overrides.empty()) {
    out += fmt::format("tensor: {}\n", tensor_strategy_name(tensor));
  } else {
    out += fmt::format("tensor:\n  default: {}\n", tensor_strategy_name(tensor));
    for (const OpOverride& o : overrides)
      out += fmt::format("  \"{}\": \"{}\"\n", o.pattern, o.strategy);
  }
  out += fmt::format("zero: {}\nrecompute: {}\nprecision: {}\n", zero, recompute_name(recompute),
                     precision_name(precision));
  for (const auto& [field, value] : extensions) out += fmt::format("{}: {}\n", field, value);
  return out;
}

namespace {
std::vector<std::string>& scheme_fields() {
  static std::vector<std::string> fields;
  return fields;
}
}  // namespace

void register_scheme_field(std::string name) { scheme_fields().push_back(std::move(name)); }

const std::vector<std::string>& registered_scheme_fields() { return scheme_fields(); }

}  // namespace autopar
