// SearchSpace parsing: the mesh, constraints and batch fields, which shape the meshes and the
// batch the engine enumerates, and the paradigms' fields, each read by its paradigm
// (Paradigm::search).
#include "autopar/search/space.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "autopar/parallel/scheme_reader.h"

namespace autopar {
namespace {

// A list of sizes, or `auto` (every one that fits).
StatusOr<AxisChoices> degrees(const YAML::Node& node, const SchemeReader& r,
                              std::string_view field) {
  if (node.IsScalar() && node.Scalar() == "auto") return AxisChoices{true, {}};
  if (!node.IsScalar() && (!node.IsSequence() || node.size() == 0))
    return r.fail(field, "expected auto or a list of sizes, e.g. [1, 2, 4]");
  ASSIGN_OR_RETURN(std::vector<int64_t> values, r.sizes(node, field));
  return AxisChoices{false, std::move(values)};
}

Status parse_mesh(const YAML::Node& node, const SchemeReader& r, SearchSpace& space) {
  if (!node.IsMap())
    return r.fail("mesh", "expected {{tp: [...], pp: auto, dp: auto, sp: [1], cp: [1]}}");
  for (const auto& entry : node) {
    const std::string axis = entry.first.Scalar();
    AxisChoices* target = axis == "tp"   ? &space.tp
                          : axis == "pp" ? &space.pp
                          : axis == "dp" ? &space.dp
                          : axis == "sp" ? &space.sp
                          : axis == "cp" ? &space.cp
                                         : nullptr;
    if (!target) return r.fail("mesh." + axis, "unknown axis (known: tp, pp, dp, sp, cp)");
    ASSIGN_OR_RETURN(*target, degrees(entry.second, r, "mesh." + axis));
  }
  return Status::ok();
}

Status parse_constraints(const YAML::Node& node, const SchemeReader& r, SearchSpace& space) {
  if (!node.IsMap()) return r.fail("constraints", "expected {{tp_within_node: true}}");
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    if (key != "tp_within_node")
      return r.fail("constraints." + key, "unknown constraint (known: tp_within_node)");
    try {
      space.tp_within_node = entry.second.as<bool>();
    } catch (const YAML::Exception&) {
      return r.fail("constraints.tp_within_node", "expected true or false");
    }
  }
  return Status::ok();
}

Status parse_batch(const YAML::Node& node, const SchemeReader& r, SearchSpace& space) {
  if (!node.IsMap()) return r.fail("batch", "expected {{global: N, micro: [...]}}");
  RETURN_IF_ERROR(r.known_keys(node, "batch", {"global", "micro"}));
  if (const YAML::Node global = node["global"]) {
    ASSIGN_OR_RETURN(int64_t g, r.integer(global, "batch.global"));
    if (g < 1) return r.fail("batch.global", "{} must be at least 1", g);
    space.global_batch = g;
  }
  if (const YAML::Node micro = node["micro"]) {
    ASSIGN_OR_RETURN(space.micro, degrees(micro, r, "batch.micro"));
  }
  return Status::ok();
}

}  // namespace

StatusOr<SearchSpace> parse_search_space(std::string_view yaml, std::string_view source) {
  const SchemeReader r(source);
  ASSIGN_OR_RETURN(const YAML::Node root, load_yaml(yaml, source));
  SearchSpace s;
  s.source = std::string(source);
  if (root.IsNull()) return s;
  if (!root.IsMap()) return error("{}: a search space is a YAML mapping of fields", source);
  std::vector<std::string> known = {"mesh", "constraints", "batch"};
  for (const Paradigm& p : paradigms()) {
    if (!p.search.field.empty()) known.push_back(p.search.field);
  }
  RETURN_IF_ERROR(r.known_keys(root, "", known));
  if (const YAML::Node mesh = root["mesh"]) RETURN_IF_ERROR(parse_mesh(mesh, r, s));
  if (const YAML::Node c = root["constraints"]) RETURN_IF_ERROR(parse_constraints(c, r, s));
  if (const YAML::Node batch = root["batch"]) RETURN_IF_ERROR(parse_batch(batch, r, s));
  for (const Paradigm& p : paradigms()) {
    const SearchDimension& d = p.search;
    if (d.field.empty()) continue;
    const YAML::Node value = root[d.field];
    if (!value) continue;
    ASSIGN_OR_RETURN(Expansion expand, d.parse(value, r));
    s.choices.push_back({d.field, d.relowers, std::move(expand)});
  }
  return s;
}

StatusOr<SearchSpace> read_search_space(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error("{}: cannot read the search space", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_search_space(text.str(), path);
}

std::vector<Scheme> expand_choices(const SearchSpace& space, const Scheme& base, bool relowers,
                                   const SearchContext& context) {
  std::vector<Scheme> schemes = {base};
  for (const SearchSpace::Choices& c : space.choices) {
    if (c.relowers != relowers) continue;
    std::vector<Scheme> next;
    for (const Scheme& s : schemes) {
      for (Scheme& x : c.expand(s, context)) next.push_back(std::move(x));
    }
    schemes = std::move(next);
  }
  return schemes;
}

}  // namespace autopar
