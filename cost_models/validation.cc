#include "autopar/cost/validation.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "autopar/parallel/scheme_reader.h"

namespace autopar {
namespace {

const std::vector<std::string> kFileFields = {"publication", "runs"};
// Clusters beyond this many nodes are no published run (and their device counts overflow).
constexpr int64_t kMaxNodes = 1'000'000;
const std::vector<std::string> kRunFields = {"name",  "source", "model",     "hw",
                                             "nodes", "scheme", "published", "assumed"};
const std::vector<std::string> kModelFields = {"zoo",      "layers", "hidden",  "heads",
                                               "kv_heads", "ffn",    "seq",     "vocab",
                                               "image",    "patch",  "classes", "dropout"};
const std::vector<std::string> kPublishedFields = {"iteration_s",  "tflops_per_gpu", "mfu",
                                                   "tokens_per_s", "samples_per_s",  "flops",
                                                   "peak_tflops",  "memory_gib"};
const std::vector<std::pair<const char*, FlopsFormula>> kFormulas = {
    {"narayanan", FlopsFormula::kNarayanan},
    {"korthikanti", FlopsFormula::kKorthikanti},
    {"bigscience", FlopsFormula::kBigScience}};

// Reads fields of one mapping, each error "<file>: <where>.<field>: <what>".
class Fields {
 public:
  Fields(const YAML::Node& node, std::string source, std::string where)
      : node_(node), source_(std::move(source)), where_(std::move(where)) {}

  std::string path(std::string_view field) const {
    return where_.empty() ? std::string(field) : fmt::format("{}.{}", where_, field);
  }
  Status fail(std::string_view field, std::string_view what) const {
    return error("{}: {}: {}", source_, path(field), what);
  }

  Status mapping_of(const std::vector<std::string>& known) const {
    if (!node_.IsMap())
      return error("{}: {}: expected a mapping of {}", source_, where_.empty() ? "top" : where_,
                   fmt::join(known, ", "));
    for (const auto& entry : node_) {
      if (!entry.first.IsScalar())
        return error("{}: {}: expected field names", source_, where_.empty() ? "top" : where_);
      const std::string key = entry.first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end())
        return fail(key, fmt::format("unknown field (known: {})", fmt::join(known, ", ")));
    }
    return Status::ok();
  }

  bool has(const char* field) const { return static_cast<bool>(node_[field]); }

  StatusOr<std::string> text(const char* field, bool required = true) const {
    const YAML::Node n = node_[field];
    if (!n) {
      if (required) return fail(field, "missing");
      return std::string();
    }
    if (!n.IsScalar() || n.Scalar().empty()) return fail(field, "expected a non-empty string");
    return n.Scalar();
  }

  StatusOr<int64_t> count(const char* field) const {
    const YAML::Node n = node_[field];
    if (!n) return fail(field, "missing");
    int64_t value = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, value))
      return fail(field, "expected an integer");
    if (value < 1) return fail(field, fmt::format("{} must be at least 1", value));
    return value;
  }

  StatusOr<double> positive(const char* field) const {
    const YAML::Node n = node_[field];
    if (!n) return fail(field, "missing");
    double value = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, value))
      return fail(field, "expected a number");
    if (!std::isfinite(value) || value <= 0)
      return fail(field, fmt::format("{} must be a positive number", n.Scalar()));
    return value;
  }

 private:
  const YAML::Node& node_;
  std::string source_;
  std::string where_;
};

Status read_model(const YAML::Node& node, const std::string& source, const std::string& where,
                  ValidationRun& run) {
  Fields f(node, source, where);
  RETURN_IF_ERROR(f.mapping_of(kModelFields));
  ASSIGN_OR_RETURN(run.zoo, f.text("zoo"));
  if (!is_zoo_name(run.zoo)) {
    return f.fail("zoo", fmt::format("'{}' is not a zoo model (autopar zoo --list)", run.zoo));
  }
  const std::pair<const char*, std::optional<int64_t> ZooOptions::*> dims[] = {
      {"layers", &ZooOptions::layers}, {"hidden", &ZooOptions::hidden},
      {"heads", &ZooOptions::heads},   {"kv_heads", &ZooOptions::kv_heads},
      {"ffn", &ZooOptions::ffn},       {"seq", &ZooOptions::seq},
      {"vocab", &ZooOptions::vocab},   {"image", &ZooOptions::image},
      {"patch", &ZooOptions::patch},   {"classes", &ZooOptions::classes}};
  for (const auto& dim : dims) {
    if (!f.has(dim.first)) continue;
    ASSIGN_OR_RETURN(int64_t value, f.count(dim.first));
    run.model.*(dim.second) = value;
  }
  if (f.has("dropout")) {
    const YAML::Node n = node["dropout"];
    double p = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, p) || !(p >= 0 && p < 1))
      return f.fail("dropout", "expected a probability in [0, 1)");
    run.model.dropout = p;
  }
  run.model.with_weights = false;
  // The shape must build: heads dividing hidden, a family that has the dims given.
  auto count = zoo_parameter_count(run.zoo, run.model);
  if (!count.is_ok()) return error("{}: {}: {}", source, where, count.status().message());
  return Status::ok();
}

Status read_published(const YAML::Node& node, const std::string& source, const std::string& where,
                      PublishedFigure& figure) {
  Fields f(node, source, where);
  RETURN_IF_ERROR(f.mapping_of(kPublishedFields));
  const std::pair<const char*, PublishedFigure::Kind> kinds[] = {
      {"iteration_s", PublishedFigure::Kind::kIterationSeconds},
      {"tflops_per_gpu", PublishedFigure::Kind::kTflopsPerGpu},
      {"mfu", PublishedFigure::Kind::kMfu},
      {"tokens_per_s", PublishedFigure::Kind::kTokensPerSecond},
      {"samples_per_s", PublishedFigure::Kind::kSamplesPerSecond}};
  std::vector<std::string> given;
  for (const auto& [name, kind] : kinds) {
    if (!f.has(name)) continue;
    given.emplace_back(name);
    figure.kind = kind;
    ASSIGN_OR_RETURN(figure.value, f.positive(name));
  }
  if (given.size() != 1) {
    return error(
        "{}: {}: expected exactly one of iteration_s, tflops_per_gpu, mfu, tokens_per_s, "
        "samples_per_s{}",
        source, where,
        given.empty() ? std::string() : fmt::format(" (given: {})", fmt::join(given, ", ")));
  }
  const bool needs_flops = figure.kind == PublishedFigure::Kind::kTflopsPerGpu ||
                           figure.kind == PublishedFigure::Kind::kMfu;
  if (needs_flops) {
    if (!f.has("flops"))
      return f.fail("flops", fmt::format("missing: {} needs the publication's FLOP formula "
                                         "(narayanan, korthikanti or bigscience)",
                                         given.front()));
    ASSIGN_OR_RETURN(std::string name, f.text("flops"));
    for (const auto& [n, formula] : kFormulas) {
      if (name == n) figure.flops = formula;
    }
    if (!figure.flops)
      return f.fail("flops",
                    fmt::format("'{}' is not one of narayanan, korthikanti, bigscience", name));
  } else if (f.has("flops")) {
    return f.fail("flops", fmt::format("only with tflops_per_gpu or mfu, not {}", given.front()));
  }
  if (figure.kind == PublishedFigure::Kind::kMfu) {
    ASSIGN_OR_RETURN(figure.peak_tflops, f.positive("peak_tflops"));
    if (figure.value > 1) return f.fail("mfu", fmt::format("{} is not a fraction", figure.value));
  } else if (f.has("peak_tflops")) {
    return f.fail("peak_tflops", "only with mfu");
  }
  if (f.has("memory_gib")) {
    ASSIGN_OR_RETURN(double gib, f.positive("memory_gib"));
    figure.memory_gib = gib;
  }
  return Status::ok();
}

StatusOr<ValidationRun> read_run(const YAML::Node& node, const std::string& source,
                                 const std::string& publication, size_t index) {
  const std::string where = fmt::format("runs[{}]", index);
  Fields f(node, source, where);
  RETURN_IF_ERROR(f.mapping_of(kRunFields));
  ValidationRun run;
  run.file = source;
  run.publication = publication;
  ASSIGN_OR_RETURN(run.name, f.text("name"));
  const std::string at = fmt::format("runs[{}] ({})", index, run.name);
  Fields g(node, source, at);
  ASSIGN_OR_RETURN(run.source, g.text("source"));
  ASSIGN_OR_RETURN(run.assumed, g.text("assumed", false));
  if (!node["model"]) return g.fail("model", "missing");
  RETURN_IF_ERROR(read_model(node["model"], source, g.path("model"), run));
  ASSIGN_OR_RETURN(run.hw, g.text("hw"));
  ASSIGN_OR_RETURN(run.nodes, g.count("nodes"));
  if (run.nodes > kMaxNodes)
    return g.fail("nodes", fmt::format("{} is more than {}", run.nodes, kMaxNodes));
  if (!node["scheme"] || !node["scheme"].IsMap())
    return g.fail("scheme", "expected a scheme mapping");
  YAML::Emitter emitter;
  emitter << node["scheme"];
  ASSIGN_OR_RETURN(run.scheme,
                   parse_scheme(emitter.c_str(), fmt::format("{}: {}", source, g.path("scheme"))));
  Scheme& s = run.scheme;
  if (s.global_batch == 0) return g.fail("scheme.batch.global", "missing: a run's step has a size");
  if (s.micro_batch == 0) s.micro_batch = s.global_batch / s.dp();
  if (!node["published"]) return g.fail("published", "missing");
  RETURN_IF_ERROR(read_published(node["published"], source, g.path("published"), run.published));
  return run;
}

}  // namespace

const char* flops_formula_name(FlopsFormula formula) {
  for (const auto& [name, f] : kFormulas) {
    if (f == formula) return name;
  }
  return "?";
}

StatusOr<std::vector<ValidationRun>> parse_validation_file(std::string_view yaml,
                                                           std::string_view source_view) {
  const std::string source(source_view);
  ASSIGN_OR_RETURN(const YAML::Node root, load_yaml(yaml, source));
  Fields f(root, source, "");
  RETURN_IF_ERROR(f.mapping_of(kFileFields));
  ASSIGN_OR_RETURN(std::string publication, f.text("publication"));
  const YAML::Node runs = root["runs"];
  if (!runs || !runs.IsSequence() || runs.size() == 0)
    return f.fail("runs", "expected a non-empty list of runs");
  std::vector<ValidationRun> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    ASSIGN_OR_RETURN(ValidationRun run, read_run(runs[i], source, publication, i));
    out.push_back(std::move(run));
  }
  return out;
}

StatusOr<std::vector<ValidationRun>> read_validation_suite(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
    }
    if (ec) return error("{}: cannot read the directory: {}", path, ec.message());
    std::sort(files.begin(), files.end());
    if (files.empty()) return error("{}: no .yaml suite files in the directory", path);
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    return error("{}: no such suite file or directory", path);
  }
  std::vector<ValidationRun> runs;
  std::map<std::string, std::string> seen;  // run name → its file
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in && !in.eof()) return error("{}: cannot read the file", file);
    ASSIGN_OR_RETURN(std::vector<ValidationRun> more, parse_validation_file(text.str(), file));
    for (ValidationRun& run : more) {
      auto [it, fresh] = seen.emplace(run.name, file);
      if (!fresh) return error("{}: run '{}' is named in {} already", file, run.name, it->second);
      runs.push_back(std::move(run));
    }
  }
  return runs;
}

StatusOr<double> published_step_flops(const ValidationRun& run, FlopsFormula formula,
                                      int64_t parameters) {
  const double batch = static_cast<double>(run.scheme.global_batch);
  if (formula == FlopsFormula::kBigScience) {
    if (!run.model.seq)
      return error("{}: {}: model.seq: needed by published.flops: bigscience", run.file, run.name);
    return 8.0 * static_cast<double>(parameters) * batch * static_cast<double>(*run.model.seq);
  }
  const ZooOptions& m = run.model;
  if (!m.layers || !m.hidden || !m.seq || !m.vocab) {
    return error("{}: {}: model: published.flops: {} needs layers, hidden, seq and vocab", run.file,
                 run.name, flops_formula_name(formula));
  }
  const double l = static_cast<double>(*m.layers), h = static_cast<double>(*m.hidden);
  const double s = static_cast<double>(*m.seq), v = static_cast<double>(*m.vocab);
  if (formula == FlopsFormula::kNarayanan)
    return 96.0 * batch * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
  return 72.0 * batch * l * s * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * h * l));
}

StatusOr<double> published_step_seconds(const ValidationRun& run, int64_t parameters) {
  const PublishedFigure& p = run.published;
  const double devices = static_cast<double>(run.scheme.mesh.num_devices());
  switch (p.kind) {
    case PublishedFigure::Kind::kIterationSeconds:
      return p.value;
    case PublishedFigure::Kind::kSamplesPerSecond:
      return static_cast<double>(run.scheme.global_batch) / p.value;
    case PublishedFigure::Kind::kTokensPerSecond:
      if (!run.model.seq)
        return error("{}: {}: model.seq: needed by published.tokens_per_s", run.file, run.name);
      return static_cast<double>(run.scheme.global_batch * *run.model.seq) / p.value;
    case PublishedFigure::Kind::kTflopsPerGpu: {
      ASSIGN_OR_RETURN(double flops, published_step_flops(run, *p.flops, parameters));
      return flops / (devices * p.value * 1e12);
    }
    case PublishedFigure::Kind::kMfu: {
      ASSIGN_OR_RETURN(double flops, published_step_flops(run, *p.flops, parameters));
      return flops / (devices * p.value * p.peak_tflops * 1e12);
    }
  }
  return error("{}: {}: published: unknown figure", run.file, run.name);
}

}  // namespace autopar
