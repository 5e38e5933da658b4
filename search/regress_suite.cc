#include "autopar/search/regress_suite.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "autopar/parallel/scheme_reader.h"
#include "autopar/zoo/zoo.h"

namespace autopar {
namespace {

const std::vector<std::string> kCaseFields = {"name",  "model", "hw", "nodes",
                                              "space", "batch", "seq"};

struct SuitePaths {
  std::string source;
  std::filesystem::path config_dir;

  std::string resolve(const std::string& path) const {
    const std::filesystem::path p(path);
    return p.is_absolute() ? path : (config_dir.parent_path() / p).lexically_normal().string();
  }

  std::vector<std::string> profile_names() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(config_dir / "hw", ec)) {
      if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

StatusOr<std::string> case_text(const YAML::Node& node, const std::string& suite,
                                const std::string& field) {
  if (!node) return error("{}: {}: missing", suite, field);
  if (!node.IsScalar() || node.Scalar().empty())
    return error("{}: {}: expected a non-empty string", suite, field);
  return node.Scalar();
}

StatusOr<int64_t> case_count(const YAML::Node& node, const std::string& suite,
                             const std::string& field) {
  if (!node) return error("{}: {}: missing", suite, field);
  int64_t value = 0;
  if (!node.IsScalar() || !YAML::convert<int64_t>::decode(node, value))
    return error("{}: {}: expected an integer", suite, field);
  if (value < 1) return error("{}: {}: {} must be at least 1", suite, field, value);
  return value;
}

StatusOr<SuiteCase> read_case(const YAML::Node& node, const SuitePaths& paths, size_t index) {
  const std::string& suite = paths.source;
  const std::string where = fmt::format("cases[{}]", index);
  if (!node.IsMap())
    return error("{}: {}: expected a mapping of {}", suite, where, fmt::join(kCaseFields, ", "));
  for (const auto& entry : node) {
    if (!entry.first.IsScalar())
      return error("{}: {}: expected field names, not a {}", suite, where,
                   entry.first.IsMap() ? "mapping" : "list");
    const std::string key = entry.first.Scalar();
    if (std::find(kCaseFields.begin(), kCaseFields.end(), key) == kCaseFields.end())
      return error("{}: {}.{}: unknown field (known: {})", suite, where, key,
                   fmt::join(kCaseFields, ", "));
  }
  SuiteCase c;
  ASSIGN_OR_RETURN(c.name, case_text(node["name"], suite, where + ".name"));
  ASSIGN_OR_RETURN(c.model, case_text(node["model"], suite, where + ".model"));
  ASSIGN_OR_RETURN(c.hw, case_text(node["hw"], suite, where + ".hw"));
  ASSIGN_OR_RETURN(c.nodes, case_count(node["nodes"], suite, where + ".nodes"));
  ASSIGN_OR_RETURN(c.space, case_text(node["space"], suite, where + ".space"));
  ASSIGN_OR_RETURN(c.batch, case_count(node["batch"], suite, where + ".batch"));
  if (node["seq"]) {
    ASSIGN_OR_RETURN(c.seq, case_count(node["seq"], suite, where + ".seq"));
  }

  if (!is_zoo_name(c.model))
    return error("{}: {}.model: '{}' is not a zoo model (autopar zoo lists them)", suite, where,
                 c.model);
  // A name without a slash or .yaml is a profile of configs/hw/; anything else is a file.
  const bool is_file =
      c.hw.find('/') != std::string::npos || std::filesystem::path(c.hw).extension() == ".yaml";
  std::error_code ec;
  if (is_file) {
    c.hw_path = paths.resolve(c.hw);
    if (!std::filesystem::is_regular_file(c.hw_path, ec))
      return error("{}: {}.hw: {}: no such file", suite, where, c.hw_path);
  } else {
    c.hw_path = (paths.config_dir / "hw" / (c.hw + ".yaml")).string();
    if (!std::filesystem::is_regular_file(c.hw_path, ec))
      return error("{}: {}.hw: '{}' is not a profile (profiles: {}) nor a .yaml file", suite, where,
                   c.hw, fmt::join(paths.profile_names(), ", "));
  }
  c.space_path = paths.resolve(c.space);
  if (!std::filesystem::is_regular_file(c.space_path, ec))
    return error("{}: {}.space: {}: no such file", suite, where, c.space_path);
  return c;
}

StatusOr<std::string> read_text(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return error("{}: no such file{}", path, what);
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return error("{}: cannot read it", path);
  return text.str();
}

}  // namespace

StatusOr<std::vector<SuiteCase>> parse_regress_suite(std::string_view yaml, std::string_view source,
                                                     const std::string& config_dir) {
  const SuitePaths paths{std::string(source), config_dir};
  const std::string& path = paths.source;
  ASSIGN_OR_RETURN(const YAML::Node root, load_yaml(yaml, path));
  if (!root.IsMap())
    return error("{}: a suite is a mapping {{cases: [{{{}}}, ...]}}", path,
                 fmt::join(kCaseFields, ", "));
  for (const auto& entry : root) {
    if (!entry.first.IsScalar() || entry.first.Scalar() != "cases")
      return error("{}: {}: unknown field (known: cases)", path,
                   entry.first.IsScalar() ? entry.first.Scalar() : "a non-scalar key");
  }
  const YAML::Node cases = root["cases"];
  if (!cases) return error("{}: cases: missing", path);
  if (!cases.IsSequence() || cases.size() == 0)
    return error("{}: cases: expected a non-empty list of cases", path);
  std::vector<SuiteCase> out;
  std::map<std::string, size_t> index_of_name;
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSIGN_OR_RETURN(SuiteCase c, read_case(cases[i], paths, i));
    auto [it, inserted] = index_of_name.emplace(c.name, i);
    if (!inserted)
      return error("{}: cases[{}].name: '{}' is also the name of cases[{}]", path, i, c.name,
                   it->second);
    out.push_back(std::move(c));
  }
  return out;
}

StatusOr<std::vector<SuiteCase>> read_regress_suite(const std::string& path,
                                                    const std::string& config_dir) {
  ASSIGN_OR_RETURN(std::string text, read_text(path, ""));
  return parse_regress_suite(text, path, config_dir);
}

StatusOr<std::map<std::string, Recorded>> parse_regress_baseline(std::string_view json,
                                                                 std::string_view source) {
  const std::string path(source);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, ...": the part after the tag.
    std::string what = e.what();
    const size_t tag = what.find("] ");
    if (tag != std::string::npos) what = what.substr(tag + 2);
    return error("{}: {}", path, what);
  }
  if (!root.is_object()) return error("{}: expected an object of cases by name", path);
  std::map<std::string, Recorded> out;
  for (const auto& item : root.items()) {
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    if (!entry.is_object())
      return error(
          "{}: {}: expected an object with step_time_s, search_time_s, scheme, "
          "candidates_evaluated",
          path, name);
    auto number = [&](const char* key, bool positive) -> StatusOr<double> {
      if (!entry.contains(key)) return error("{}: {}.{}: missing", path, name, key);
      const nlohmann::json& v = entry[key];
      if (!v.is_number() || (positive ? v.get<double>() <= 0 : v.get<double>() < 0))
        return error("{}: {}.{}: expected a {} number", path, name, key,
                     positive ? "positive" : "non-negative");
      return v.get<double>();
    };
    Recorded r;
    ASSIGN_OR_RETURN(r.step_time_s, number("step_time_s", true));
    ASSIGN_OR_RETURN(r.search_time_s, number("search_time_s", false));
    if (!entry.contains("scheme") || !entry["scheme"].is_string())
      return error("{}: {}.scheme: expected the best scheme's YAML as a string", path, name);
    r.scheme = entry["scheme"].get<std::string>();
    if (!entry.contains("candidates_evaluated") ||
        !entry["candidates_evaluated"].is_number_integer())
      return error("{}: {}.candidates_evaluated: expected an integer", path, name);
    r.candidates_evaluated = entry["candidates_evaluated"].get<int64_t>();
    out.emplace(name, std::move(r));
  }
  return out;
}

StatusOr<std::map<std::string, Recorded>> read_regress_baseline(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, read_text(path, " (run with --update to write it)"));
  return parse_regress_baseline(text, path);
}

}  // namespace autopar
