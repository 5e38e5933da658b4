// The plan directory: manifest.yaml, role_<k>.onnx, README.md.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "autopar/onnx/onnx_check.h"
#include "autopar/onnx/onnx_export.h"
#include "autopar/parallel/plan.h"

namespace autopar {
namespace {

std::string indent(const std::string& text, int spaces) {
  std::istringstream in(text);
  std::string line, out;
  const std::string pad(spaces, ' ');
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    out += pad + line + "\n";
  }
  return out;
}

std::string yaml_quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::vector<int64_t> devices_of(const Plan& plan, int32_t role) {
  std::vector<int64_t> devices;
  for (size_t d = 0; d < plan.device_role.size(); ++d) {
    if (plan.device_role[d] == role) devices.push_back(static_cast<int64_t>(d));
  }
  return devices;
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return error("{}: cannot write", path);
  return Status::ok();
}

std::string readme(const Plan& plan) {
  std::string text = fmt::format(
      "# autopar plan\n\n"
      "Model `{}` ({}), lowered for {} devices on mesh {}.\n\n"
      "- microbatches per step: {}; schedule: {}{}\n"
      "- tensor strategy: {}; ZeRO stage {}; recompute: {}; precision: {}\n"
      "- loss: {}; optimizer: {}\n\n"
      "## Roles\n\n"
      "Devices that run the same program share a role graph; rank-dependent values (which "
      "shard, which slice of the batch, the members of each group) come from the device's "
      "mesh coordinates at run time.\n\n"
      "| role | file | pipeline rank | devices | nodes | programs |\n|---|---|---|---|---|---|\n",
      plan.source.model, plan.source.sha256.empty() ? "built-in" : plan.source.sha256,
      plan.device_role.size(), plan.scheme.mesh.to_string(), plan.microbatches,
      schedule_name(plan.scheme.schedule),
      plan.scheme.chunks > 1 ? fmt::format(" ({} chunks)", plan.scheme.chunks) : "",
      tensor_strategy_name(plan.scheme.tensor), plan.scheme.zero,
      recompute_name(plan.scheme.recompute), precision_name(plan.scheme.precision),
      plan.source.loss, plan.source.optimizer);
  for (const Role& role : plan.roles) {
    std::vector<std::string> programs;
    for (const Program& p : role.programs)
      programs.push_back(fmt::format("{} ({} nodes)", p.name(), p.end - p.begin));
    const std::vector<int64_t> devices = devices_of(plan, role.id);
    text += fmt::format("| {} | role_{}.onnx | {} | {} | {} | {} |\n", role.id, role.id, role.stage,
                        devices.size(), role.graph.num_nodes(), fmt::join(programs, ", "));
  }
  text += "\n## Schedules\n\n";
  for (const Role& role : plan.roles) {
    std::vector<std::string> steps;
    for (const ScheduleStep& s : role.schedule) steps.push_back(s.to_string());
    text += fmt::format("- role {}: {}\n", role.id, fmt::join(steps, " "));
  }
  text +=
      "\nFx.i runs the forward program of chunk x on microbatch i, Bx.i its backward, X sends "
      "what other ranks' updates read (once per step, where there is any) and U is the update "
      "once per step.\n\n"
      "Run it with `autopar run PLAN` (threads) or `mpirun -np N autopar run PLAN --comm mpi`, "
      "and check it against one device with `autopar verify PLAN`.\n";
  return text;
}

}  // namespace

std::string role_onnx_bytes(const Plan& plan, const Role& role) {
  ExportOptions options;
  options.metadata["autopar.role"] = std::to_string(role.id);
  options.metadata["autopar.mesh"] = plan.scheme.mesh.to_string();
  std::vector<std::string> programs;
  for (const Program& p : role.programs)
    programs.push_back(fmt::format("{}:{}-{}", p.name(), p.begin, p.end));
  options.metadata["autopar.programs"] = fmt::format("{}", fmt::join(programs, " "));
  onnx::ModelProto model = export_onnx(role.graph, options);
  std::string bytes;
  model.SerializeToString(&bytes);
  return bytes;
}

std::string manifest_yaml(const Plan& plan) {
  std::string y =
      "# autopar plan: the scheme, the source it was lowered from, roles and schedules\n";
  y += "source:\n";
  y += fmt::format("  model: {}\n", yaml_quoted(plan.source.model));
  y += fmt::format("  sha256: {}\n", yaml_quoted(plan.source.sha256));
  y += fmt::format("  loss: {}\n", plan.source.loss);
  y += fmt::format("  optimizer: {}\n", plan.source.optimizer);
  y += "  dims: {";
  for (size_t i = 0; i < plan.source.dims.size(); ++i) {
    y += fmt::format("{}{}: {}", i ? ", " : "", yaml_quoted(plan.source.dims[i].first),
                     plan.source.dims[i].second);
  }
  y += "}\n";
  if (plan.source.no_fusion) y += "  no_fusion: true\n";
  if (plan.source.keep_constants) y += "  keep_constants: true\n";
  if (!plan.source.hw.empty()) {
    y += fmt::format("  hw: {}\n  nodes: {}\n", yaml_quoted(plan.source.hw), plan.source.nodes);
  }
  y += "scheme:\n" + indent(plan.scheme.to_yaml(), 2);
  y += fmt::format("devices: {}\nmicrobatches: {}\n", plan.device_role.size(), plan.microbatches);
  y += "stage_layers: [";
  for (size_t i = 0; i < plan.stage_layers.size(); ++i) {
    y += fmt::format("{}[{}, {}]", i ? ", " : "", plan.stage_layers[i].first,
                     plan.stage_layers[i].second);
  }
  y += "]\n";
  if (!plan.loss.empty()) y += fmt::format("loss: {}\n", yaml_quoted(plan.loss));
  if (!plan.outputs.empty()) {
    std::vector<std::string> names;
    for (const std::string& o : plan.outputs) names.push_back(yaml_quoted(o));
    y += fmt::format("outputs: [{}]\n", fmt::join(names, ", "));
  }
  y += "roles:\n";
  for (const Role& role : plan.roles) {
    y += fmt::format("  - id: {}\n    file: role_{}.onnx\n    pipeline_rank: {}\n", role.id,
                     role.id, role.stage);
    y += fmt::format("    devices: [{}]\n", fmt::join(devices_of(plan, role.id), ", "));
    y += "    programs:\n";
    for (const Program& p : role.programs) {
      y += fmt::format("      - {{name: {}, kind: {}, chunk: {}, nodes: [{}, {}]}}\n", p.name(),
                       program_kind_name(p.kind), p.chunk, p.begin, p.end);
    }
    std::vector<std::string> steps;
    for (const ScheduleStep& s : role.schedule) steps.push_back(s.to_string());
    y += fmt::format("    schedule: [{}]\n", fmt::join(steps, ", "));
  }
  y += "device_map:\n";
  const DeviceMesh& mesh = plan.scheme.mesh;
  for (size_t d = 0; d < plan.device_role.size(); ++d) {
    std::vector<int64_t> coords = mesh.coords(static_cast<int64_t>(d));
    std::vector<std::string> parts;
    for (size_t a = 0; a < coords.size(); ++a)
      parts.push_back(fmt::format("{}: {}", mesh.axes()[a].name, coords[a]));
    y += fmt::format("  - {{device: {}, role: {}, coords: {{{}}}}}\n", d, plan.device_role[d],
                     fmt::join(parts, ", "));
  }
  y += "state:\n";
  for (const StateSpec& s : plan.state) {
    y += fmt::format(
        "  - {{name: {}, output: {}, dtype: {}, shape: [{}], layout: {}, init: {}{}}}\n",
        yaml_quoted(s.name), yaml_quoted(s.output), dtype_name(s.dtype), fmt::join(s.shape, ", "),
        yaml_quoted(s.layout.to_string()), s.init == StateSpec::Init::kZeros ? "zeros" : "model",
        s.is_parameter ? ", parameter: true" : "");
  }
  if (!plan.parts.empty()) {
    y += "parts:\n";
    for (const ParameterPart& p : plan.parts) {
      y += fmt::format("  - {{name: {}, of: {}, dim: {}, offset: {}, length: {}}}\n",
                       yaml_quoted(p.name), yaml_quoted(p.whole), p.dim, p.offset, p.length);
    }
  }
  y += "data:\n";
  for (const DataSpec& d : plan.data) {
    y += fmt::format("  - {{name: {}, dtype: {}, shape: [{}], layout: {}}}\n", yaml_quoted(d.name),
                     dtype_name(d.dtype), fmt::join(d.shape, ", "),
                     yaml_quoted(d.layout.to_string()));
  }
  return y;
}

Status write_plan(const Plan& plan, const std::string& dir, const PlanWriteOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error("{}: cannot create the plan directory: {}", dir, ec.message());
  // Every file is written under a temporary name in the directory, then the old manifest is
  // removed (the directory is no plan from then on), the files take their names and the
  // manifest comes last: a write killed part-way leaves the old plan or no plan, never a mix.
  std::vector<std::pair<std::string, std::string>> files;  // (name, bytes), manifest last
  for (const Role& role : plan.roles) {
    const std::string name = fmt::format("role_{}.onnx", role.id);
    std::string bytes = role_onnx_bytes(plan, role);
    onnx::ModelProto model;
    model.ParseFromString(bytes);
    RETURN_IF_ERROR(check_onnx_model(model, dir + "/" + name));
    files.emplace_back(name, std::move(bytes));
  }
  files.emplace_back("README.md", readme(plan));
  files.emplace_back("manifest.yaml", manifest_yaml(plan));
  const std::string suffix = ".partial";
  auto discard = [&] {
    for (const auto& [name, bytes] : files) fs::remove(dir + "/" + name + suffix, ec);
  };
  for (const auto& [name, bytes] : files) {
    Status written = options.before_write ? options.before_write(name) : Status::ok();
    if (written.is_ok()) written = write_text(dir + "/" + name + suffix, bytes);
    if (!written.is_ok()) {
      discard();
      return written;
    }
  }
  fs::remove(dir + "/manifest.yaml", ec);
  if (ec) {
    const std::string why = ec.message();
    discard();
    return error("{}/manifest.yaml: cannot replace it: {}", dir, why);
  }
  // Role files of an earlier plan with more roles than this one.
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("role_", 0) != 0 || entry.path().extension() != ".onnx") continue;
    if (std::none_of(files.begin(), files.end(), [&](const auto& f) { return f.first == name; }))
      stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) fs::remove(path, ec);
  for (const auto& [name, bytes] : files) {
    Status moved = options.before_rename ? options.before_rename(name) : Status::ok();
    if (moved.is_ok()) {
      fs::rename(dir + "/" + name + suffix, dir + "/" + name, ec);
      if (ec) moved = error("{}/{}: cannot write: {}", dir, name, ec.message());
    }
    if (!moved.is_ok()) {
      discard();
      return moved;
    }
  }
  return Status::ok();
}

StatusOr<PlanManifest> read_plan_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.yaml";
  if (!std::filesystem::exists(path))
    return error("{}: no plan here (manifest.yaml is missing)", dir);
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return error("{}: cannot read it", path);
  return parse_plan_manifest(text.str(), path);
}

StatusOr<PlanManifest> parse_plan_manifest(std::string_view yaml, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return error("{}:{}: {}", path, e.mark.line + 1, e.msg);
  }
  PlanManifest m;
  try {
    const YAML::Node source = root["source"];
    if (!source || !source.IsMap()) return error("{}: source: missing", path);
    if (!source["model"]) return error("{}: source.model: missing", path);
    m.source.model = source["model"].as<std::string>();
    m.source.sha256 = source["sha256"] ? source["sha256"].as<std::string>() : "";
    m.source.loss = source["loss"] ? source["loss"].as<std::string>() : "cross_entropy";
    m.source.optimizer = source["optimizer"] ? source["optimizer"].as<std::string>() : "adam";
    if (source["dims"]) {
      for (const auto& kv : source["dims"])
        m.source.dims.emplace_back(kv.first.as<std::string>(), kv.second.as<int64_t>());
    }
    m.source.no_fusion = source["no_fusion"] && source["no_fusion"].as<bool>();
    m.source.keep_constants = source["keep_constants"] && source["keep_constants"].as<bool>();
    m.source.hw = source["hw"] ? source["hw"].as<std::string>() : "";
    m.source.nodes = source["nodes"] ? source["nodes"].as<int64_t>() : 1;
    if (m.source.nodes < 1)
      return error("{}: source.nodes: {} must be at least 1", path, m.source.nodes);
    if (!root["scheme"]) return error("{}: scheme: missing", path);
    YAML::Emitter out;
    out << root["scheme"];
    ASSIGN_OR_RETURN(m.scheme, parse_scheme(out.c_str(), path + ": scheme"));
    m.devices = root["devices"] ? root["devices"].as<int64_t>() : 0;
    m.roles = root["roles"] ? static_cast<int64_t>(root["roles"].size()) : 0;
  } catch (const YAML::Exception& e) {
    return error("{}:{}: {}", path, e.mark.line + 1, e.msg);
  }
  return m;
}

Status check_plan_files(const Plan& plan, const std::string& dir) {
  for (const Role& role : plan.roles) {
    const std::string path = fmt::format("{}/role_{}.onnx", dir, role.id);
    std::ifstream in(path, std::ios::binary);
    if (!in) return error("{}: missing from the plan", path);
    std::stringstream bytes;
    bytes << in.rdbuf();
    if (bytes.str() != role_onnx_bytes(plan, role)) {
      return error(
          "{}: differs from the lowering of {} with the recorded scheme (the plan was edited or "
          "the model changed); run `autopar transform` again",
          path, plan.source.model);
    }
  }
  return Status::ok();
}

}  // namespace autopar
