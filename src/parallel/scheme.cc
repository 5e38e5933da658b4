// Scheme: YAML parsing with one-line errors, validation, and the YAML writer.
#include "autopar/parallel/scheme.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "autopar/parallel/lowering.h"
#include "autopar/parallel/scheme_reader.h"

namespace autopar {

int64_t Scheme::microbatches() const {
  const int64_t per_replica = global_batch / dp();
  return micro_batch > 0 ? per_replica / micro_batch : 1;
}

StatusOr<YAML::Node> load_yaml(std::string_view text, std::string_view source) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return error("{}: line {}: {}", source, e.mark.line + 1, e.msg);
  }
}

StatusOr<std::vector<size_t>> SchemeReader::names(const YAML::Node& node, std::string_view field,
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
    const auto index = static_cast<size_t>(it - allowed.begin());
    if (std::find(out.begin(), out.end(), index) == out.end()) out.push_back(index);
  }
  return out;
}

StatusOr<std::vector<int64_t>> SchemeReader::sizes(const YAML::Node& node,
                                                   std::string_view field) const {
  if (node.IsScalar()) {
    ASSIGN_OR_RETURN(int64_t v, integer(node, field));
    if (v < 1) return fail(field, "{} must be at least 1", v);
    return std::vector<int64_t>{v};
  }
  if (!node.IsSequence() || node.size() == 0)
    return fail(field, "expected a list of sizes, e.g. [1, 2, 4]");
  std::set<int64_t> values;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string item = fmt::format("{}[{}]", field, i);
    ASSIGN_OR_RETURN(int64_t v, integer(node[i], item));
    if (v < 1) return fail(item, "{} must be at least 1", v);
    values.insert(v);
  }
  return std::vector<int64_t>(values.begin(), values.end());
}

namespace {

// mesh (axes and sizes, default {dp: 1}) and devices (their product, when given).
Status parse_mesh(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
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
  return Status::ok();
}

}  // namespace

StatusOr<Scheme> parse_scheme(std::string_view yaml, std::string_view source) {
  const SchemeReader r(source);
  ASSIGN_OR_RETURN(const YAML::Node root, load_yaml(yaml, source));
  Scheme s;
  if (root.IsNull()) {
    s.mesh = *DeviceMesh::create({{"dp", 1}});
    return s;
  }
  if (!root.IsMap()) return error("{}: a scheme is a YAML mapping of fields", source);
  std::vector<std::string> known = {"mesh", "devices"};
  for (const Paradigm& paradigm : paradigms())
    known.insert(known.end(), paradigm.fields.begin(), paradigm.fields.end());
  RETURN_IF_ERROR(r.known_keys(root, "", known));
  RETURN_IF_ERROR(parse_mesh(root, r, s));
  // Each paradigm's own fields, in the order their decisions compose (the batch after the
  // mesh it divides over).
  for (const Paradigm& paradigm : paradigms()) {
    if (paradigm.parse) {
      RETURN_IF_ERROR(paradigm.parse(root, r, s));
      continue;
    }
    for (const std::string& field : paradigm.fields) {
      if (const YAML::Node value = root[field]) {
        YAML::Emitter text;
        text << YAML::Flow << value;
        s.extensions[field] = text.c_str();
      }
    }
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
  if (cp() > 1) out += fmt::format("context: {}\n", context_form_name(context));
  if (memory_policy) out += fmt::format("memory_policy: {}\n", memory_policy_name(*memory_policy));
  std::vector<std::string> kernels;
  if (attention) kernels.push_back(fmt::format("attention: {}", attention_kernel_name(*attention)));
  if (fusions) {
    std::vector<std::string> names;
    for (Fusion f : *fusions) names.emplace_back(fusion_name(f));
    kernels.push_back(fmt::format("fusions: [{}]", fmt::join(names, ", ")));
  }
  if (memory_format)
    kernels.push_back(fmt::format("memory_format: {}", memory_format_name(*memory_format)));
  if (!kernels.empty()) out += fmt::format("kernels: {{{}}}\n", fmt::join(kernels, ", "));
  for (const auto& [field, value] : extensions) out += fmt::format("{}: {}\n", field, value);
  return out;
}

}  // namespace autopar
