// SearchSpace parsing: the shared readers, the mesh, constraints and batch fields, and the
// table of fields.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "dimensions.h"

namespace autopar {
namespace space {

StatusOr<int64_t> Reader::integer(const YAML::Node& node, std::string_view field) const {
  if (!node.IsScalar()) return fail(field, "expected an integer");
  try {
    return node.as<int64_t>();
  } catch (const YAML::Exception&) {
    return fail(field, "'{}' is not an integer", node.Scalar());
  }
}

StatusOr<AxisChoices> Reader::degrees(const YAML::Node& node, std::string_view field) const {
  AxisChoices c;
  if (node.IsScalar() && node.Scalar() == "auto") {
    c.automatic = true;
    return c;
  }
  if (node.IsScalar()) {
    ASSIGN_OR_RETURN(int64_t v, integer(node, field));
    if (v < 1) return fail(field, "{} must be at least 1", v);
    c.values = {v};
    return c;
  }
  if (!node.IsSequence() || node.size() == 0)
    return fail(field, "expected auto or a list of sizes, e.g. [1, 2, 4]");
  std::set<int64_t> values;
  for (size_t i = 0; i < node.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t v, integer(node[i], fmt::format("{}[{}]", field, i)));
    if (v < 1) return fail(fmt::format("{}[{}]", field, i), "{} must be at least 1", v);
    values.insert(v);
  }
  c.values.assign(values.begin(), values.end());
  return c;
}

StatusOr<std::vector<size_t>> Reader::names(const YAML::Node& node, std::string_view field,
                                            const std::vector<std::string>& allowed) const {
  YAML::Node list = node;
  if (node.IsScalar()) {
    list = YAML::Node(YAML::NodeType::Sequence);
    list.push_back(node);
  }
  if (!list.IsSequence() || list.size() == 0)
    return fail(field, "expected a list of {}", fmt::join(allowed, ", "));
  std::vector<size_t> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item = fmt::format("{}[{}]", field, i);
    if (!list[i].IsScalar()) return fail(item, "expected one of {}", fmt::join(allowed, ", "));
    const std::string value = list[i].Scalar();
    auto it = std::find(allowed.begin(), allowed.end(), value);
    if (it == allowed.end())
      return fail(item, "'{}' is not one of {}", value, fmt::join(allowed, ", "));
    const size_t index = static_cast<size_t>(it - allowed.begin());
    if (std::find(out.begin(), out.end(), index) == out.end()) out.push_back(index);
  }
  return out;
}

Status parse_mesh(const YAML::Node& node, const Reader& r, SearchSpace& space) {
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
    ASSIGN_OR_RETURN(*target, r.degrees(entry.second, "mesh." + axis));
  }
  return Status::ok();
}

Status parse_constraints(const YAML::Node& node, const Reader& r, SearchSpace& space) {
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

Status parse_batch(const YAML::Node& node, const Reader& r, SearchSpace& space) {
  if (!node.IsMap()) return r.fail("batch", "expected {{global: N, micro: [...]}}");
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    if (key == "global") {
      ASSIGN_OR_RETURN(int64_t g, r.integer(entry.second, "batch.global"));
      if (g < 1) return r.fail("batch.global", "{} must be at least 1", g);
      space.global_batch = g;
    } else if (key == "micro") {
      ASSIGN_OR_RETURN(space.micro, r.degrees(entry.second, "batch.micro"));
    } else {
      return r.fail("batch." + key, "unknown field (known: global, micro)");
    }
  }
  return Status::ok();
}

const std::vector<Dimension>& dimensions() {
  static const std::vector<Dimension> kDimensions = {
      {"mesh", parse_mesh},
      {"constraints", parse_constraints},
      {"batch", parse_batch},
      {"pipeline", parse_pipeline, {false, expand_pipeline}},
      {"context", parse_context, {true, expand_context}},
      {"tensor", parse_tensor, {true, expand_tensor}},
      {"zero", parse_zero, {true, expand_zero}},
      {"recompute", parse_recompute, {false, expand_recompute}},
      {"precision", parse_precision, {true, expand_precision}},
  };
  return kDimensions;
}

}  // namespace space

StatusOr<SearchSpace> parse_search_space(std::string_view yaml, std::string_view source) {
  const space::Reader r{std::string(source)};
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return error("{}: line {}: {}", source, e.mark.line + 1, e.msg);
  }
  SearchSpace s;
  s.source = std::string(source);
  if (root.IsNull()) return s;
  if (!root.IsMap()) return error("{}: a search space is a YAML mapping of fields", source);
  std::vector<std::string> known;
  for (const space::Dimension& d : space::dimensions()) known.emplace_back(d.field);
  for (const auto& entry : root) {
    const std::string key = entry.first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end())
      return r.fail(key, "unknown field (known: {})", fmt::join(known, ", "));
  }
  for (const space::Dimension& d : space::dimensions()) {
    if (const YAML::Node node = root[std::string(d.field)]) RETURN_IF_ERROR(d.parse(node, r, s));
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

}  // namespace autopar
