// Hardware profiles: YAML in, validated values out.
#include "autopar/cost/hardware_profile.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "autopar/parallel/scheme_reader.h"

namespace autopar {
namespace {

struct Reader {
  std::string source;

  template <typename... Args>
  Status fail(std::string_view field, fmt::format_string<Args...> format, Args&&... args) const {
    return error("{}: {}: {}", source, field, fmt::format(format, std::forward<Args>(args)...));
  }

  StatusOr<double> number(const YAML::Node& node, std::string_view field) const {
    if (!node) return fail(field, "missing");
    if (!node.IsScalar()) return fail(field, "expected a number");
    double v = 0;
    try {
      v = node.as<double>();
    } catch (const YAML::Exception&) {
      return fail(field, "'{}' is not a number", node.Scalar());
    }
    if (!std::isfinite(v)) return fail(field, "{} is not a finite number", node.Scalar());
    return v;
  }

  StatusOr<double> positive(const YAML::Node& node, std::string_view field) const {
    ASSIGN_OR_RETURN(double v, number(node, field));
    if (!(v > 0)) return fail(field, "{} must be positive", node.Scalar());
    return v;
  }

  StatusOr<int64_t> count(const YAML::Node& node, std::string_view field) const {
    ASSIGN_OR_RETURN(double v, positive(node, field));
    if (v != std::floor(v) || v > 1e9) return fail(field, "{} is not a whole count", node.Scalar());
    return static_cast<int64_t>(v);
  }

  StatusOr<double> fraction(const YAML::Node& node, std::string_view field) const {
    ASSIGN_OR_RETURN(double v, positive(node, field));
    if (v > 1) return fail(field, "{} is not a fraction in (0, 1]", node.Scalar());
    return v;
  }

  // An optional flag: `value` unchanged where the node is absent.
  Status flag(const YAML::Node& node, std::string_view field, bool& value) const {
    if (!node) return Status::ok();
    try {
      value = node.as<bool>();
    } catch (const YAML::Exception&) {
      return fail(field, "expected true or false");
    }
    return Status::ok();
  }

  // An optional number, 0 by default: `value` unchanged where the node is absent.
  Status optional_nonnegative(const YAML::Node& node, std::string_view field, double& value) const {
    if (!node) return Status::ok();
    ASSIGN_OR_RETURN(value, number(node, field));
    if (value < 0) return fail(field, "{} must not be negative", node.Scalar());
    return Status::ok();
  }
};

const std::pair<OpClass, const char*> kOpClasses[] = {{OpClass::kGemm, "gemm"},
                                                      {OpClass::kConv, "conv"},
                                                      {OpClass::kElementwise, "elementwise"},
                                                      {OpClass::kNorm, "norm"},
                                                      {OpClass::kAttention, "attention"}};
const std::pair<Collective, const char*> kCollectives[] = {
    {Collective::kAllReduce, "all_reduce"},
    {Collective::kAllGather, "all_gather"},
    {Collective::kReduceScatter, "reduce_scatter"},
    {Collective::kAllToAll, "all_to_all"},
    {Collective::kPointToPoint, "p2p"}};

}  // namespace

const char* op_class_name(OpClass op_class) {
  for (const auto& [c, name] : kOpClasses) {
    if (c == op_class) return name;
  }
  return "";
}

const char* collective_name(Collective collective) {
  for (const auto& [c, name] : kCollectives) {
    if (c == collective) return name;
  }
  return "";
}

StatusOr<EfficiencyCurve> EfficiencyCurve::create(std::vector<std::pair<double, double>> points) {
  if (points.empty()) return error("an efficiency curve needs at least one point");
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [work, eff] = points[i];
    if (!(work > 0) || !(eff > 0) || eff > 1) {
      return error("point [{}, {}]: work must be positive and efficiency in (0, 1]", work, eff);
    }
    if (i > 0 && !(work > points[i - 1].first)) {
      return error("point [{}, {}]: work must grow from point to point", work, eff);
    }
  }
  EfficiencyCurve curve;
  curve.points_ = std::move(points);
  return curve;
}

double EfficiencyCurve::at(double work) const {
  if (points_.empty()) return 1.0;
  if (work <= points_.front().first) return points_.front().second;
  if (work >= points_.back().first) return points_.back().second;
  const double x = std::log10(work);
  for (size_t i = 1; i < points_.size(); ++i) {
    if (work <= points_[i].first) {
      const double x0 = std::log10(points_[i - 1].first), x1 = std::log10(points_[i].first);
      const double t = (x - x0) / (x1 - x0);
      return points_[i - 1].second + t * (points_[i].second - points_[i - 1].second);
    }
  }
  return points_.back().second;
}

StatusOr<GemmShapeTable> GemmShapeTable::create(const std::vector<std::array<double, 4>>& rows) {
  if (rows.empty()) return error("a GEMM shape table needs at least one row");
  GemmShapeTable table;
  for (const auto& row : rows) {
    for (int d = 0; d < 3; ++d) {
      if (!(row[d] > 0))
        return error("row [{}]: m, n and k must be positive", fmt::join(row, ", "));
      table.dims_[d].push_back(row[d]);
    }
    if (!(row[3] > 0) || row[3] > 1)
      return error("row [{}]: the efficiency must be in (0, 1]", fmt::join(row, ", "));
  }
  for (std::vector<double>& dim : table.dims_) {
    std::sort(dim.begin(), dim.end());
    dim.erase(std::unique(dim.begin(), dim.end()), dim.end());
  }
  const size_t points = table.dims_[0].size() * table.dims_[1].size() * table.dims_[2].size();
  if (rows.size() != points) {
    return error(
        "{} rows for a grid of {} m x {} n x {} k values ({} points): every combination "
        "must appear exactly once",
        rows.size(), table.dims_[0].size(), table.dims_[1].size(), table.dims_[2].size(), points);
  }
  table.efficiency_.assign(points, 0.0);
  for (const auto& row : rows) {
    size_t index = 0;
    for (int d = 0; d < 3; ++d) {
      const std::vector<double>& dim = table.dims_[d];
      index = index * dim.size() +
              static_cast<size_t>(std::lower_bound(dim.begin(), dim.end(), row[d]) - dim.begin());
    }
    if (table.efficiency_[index] > 0)
      return error("row [{}]: the shape appears twice", fmt::join(row, ", "));
    table.efficiency_[index] = row[3];
  }
  return table;
}

double GemmShapeTable::at(double m, double n, double k) const {
  if (efficiency_.empty()) return 1.0;
  // Per dim: the two grid points around it and the weight of the upper one, in log space; and
  // what a dim below the grid keeps of the rate.
  // Rows and columns beyond the grid trade against each other: a product's rate follows the
  // output tiles it spreads over the device, so an m above the grid reads as its largest m with
  // n grown by the same factor (and an n above it likewise), up to the grid's corner.
  const double m_max = dims_[0].back(), n_max = dims_[1].back();
  if (m > m_max && n < n_max) {
    n = std::min(n_max, n * m / m_max);
    m = m_max;
  } else if (n > n_max && m < m_max) {
    m = std::min(m_max, m * n / n_max);
    n = n_max;
  }
  std::array<size_t, 3> lo{}, hi{};
  std::array<double, 3> t{};
  double padded = 1.0;
  const std::array<double, 3> x = {m, n, k};
  for (int d = 0; d < 3; ++d) {
    const std::vector<double>& dim = dims_[d];
    if (x[d] <= dim.front()) {
      lo[d] = hi[d] = 0;
      if (x[d] > 0) padded *= x[d] / dim.front();
      continue;
    }
    if (x[d] >= dim.back()) {
      lo[d] = hi[d] = dim.size() - 1;
      continue;
    }
    hi[d] = static_cast<size_t>(std::upper_bound(dim.begin(), dim.end(), x[d]) - dim.begin());
    lo[d] = hi[d] - 1;
    t[d] = std::log(x[d] / dim[lo[d]]) / std::log(dim[hi[d]] / dim[lo[d]]);
  }
  auto value = [&](size_t i, size_t j, size_t l) {
    return efficiency_[(i * dims_[1].size() + j) * dims_[2].size() + l];
  };
  double eff = 0;
  for (int corner = 0; corner < 8; ++corner) {
    const bool um = corner & 1, un = corner & 2, uk = corner & 4;
    const double w = (um ? t[0] : 1 - t[0]) * (un ? t[1] : 1 - t[1]) * (uk ? t[2] : 1 - t[2]);
    if (w == 0) continue;
    eff += w * value(um ? hi[0] : lo[0], un ? hi[1] : lo[1], uk ? hi[2] : lo[2]);
  }
  return eff * padded;
}

std::vector<std::array<double, 4>> GemmShapeTable::rows() const {
  std::vector<std::array<double, 4>> rows;
  for (size_t i = 0; i < dims_[0].size(); ++i) {
    for (size_t j = 0; j < dims_[1].size(); ++j) {
      for (size_t l = 0; l < dims_[2].size(); ++l) {
        rows.push_back({dims_[0][i], dims_[1][j], dims_[2][l],
                        efficiency_[(i * dims_[1].size() + j) * dims_[2].size() + l]});
      }
    }
  }
  return rows;
}

double DeviceSpec::peak(std::string_view dtype) const {
  auto it = peak_flops.find(std::string(dtype));
  if (it != peak_flops.end()) return it->second;
  it = peak_flops.find("fp32");
  return it != peak_flops.end() ? it->second : 0.0;
}

const Tier& HardwareProfile::tier_for(const std::vector<int64_t>& group) const {
  if (group.empty()) return tiers.front();
  const int64_t node = group.front() / devices_per_node;
  const bool one_node = std::all_of(group.begin(), group.end(),
                                    [&](int64_t d) { return d / devices_per_node == node; });
  return one_node ? tiers.front() : tiers.back();
}

namespace {

constexpr const char* kFlashForward = "flash_attention";
constexpr const char* kFlashBackward = "flash_attention_backward";
constexpr const char* kGemmShapes = "gemm_shapes";

// One efficiency curve, curves[name]: [[work, efficiency], ...].
StatusOr<EfficiencyCurve> parse_curve(const Reader& r, const YAML::Node& curves, const char* name) {
  const std::string field = fmt::format("device.efficiency.{}", name);
  const YAML::Node points = curves[name];
  if (!points || !points.IsSequence()) return r.fail(field, "expected [[work, efficiency], ...]");
  std::vector<std::pair<double, double>> xy;
  for (size_t i = 0; i < points.size(); ++i) {
    const YAML::Node pt = points[i];
    if (!pt.IsSequence() || pt.size() != 2)
      return r.fail(field, "point {} is not [work, efficiency]", i);
    ASSIGN_OR_RETURN(double work, r.positive(pt[0], field));
    ASSIGN_OR_RETURN(double eff, r.fraction(pt[1], field));
    xy.emplace_back(work, eff);
  }
  auto curve = EfficiencyCurve::create(std::move(xy));
  if (!curve.is_ok()) return r.fail(field, "{}", curve.status().message());
  return std::move(curve).value();
}

// The GEMM shape table, curves[gemm_shapes]: [[m, n, k, efficiency], ...].
StatusOr<GemmShapeTable> parse_gemm_shapes(const Reader& r, const YAML::Node& curves) {
  const std::string field = fmt::format("device.efficiency.{}", kGemmShapes);
  const YAML::Node rows = curves[kGemmShapes];
  if (!rows.IsSequence()) return r.fail(field, "expected [[m, n, k, efficiency], ...]");
  std::vector<std::array<double, 4>> table;
  for (size_t i = 0; i < rows.size(); ++i) {
    const YAML::Node row = rows[i];
    if (!row.IsSequence() || row.size() != 4)
      return r.fail(field, "row {} is not [m, n, k, efficiency]", i);
    std::array<double, 4>& out = table.emplace_back();
    for (size_t d = 0; d < 3; ++d) {
      ASSIGN_OR_RETURN(out[d], r.positive(row[d], field));
    }
    ASSIGN_OR_RETURN(out[3], r.fraction(row[3], field));
  }
  auto parsed = GemmShapeTable::create(table);
  if (!parsed.is_ok()) return r.fail(field, "{}", parsed.status().message());
  return std::move(parsed).value();
}

// The device: its peaks, memory, overheads and flags, then its efficiency curves.
Status parse_device(const Reader& r, const YAML::Node& device, HardwareProfile& p) {
  p.device.name = device["name"] && device["name"].IsScalar() ? device["name"].Scalar() : p.name;
  const YAML::Node peaks = device["peak_flops"];
  if (!peaks || !peaks.IsMap())
    return r.fail("device.peak_flops", "expected {{fp32: ..., bf16: ...}}");
  for (const auto& kv : peaks) {
    const std::string dtype = kv.first.Scalar();
    if (dtype != "fp32" && dtype != "tf32" && dtype != "bf16" && dtype != "fp16" &&
        dtype != "fp64") {
      return r.fail("device.peak_flops", "'{}' is not fp64, fp32, tf32, bf16 or fp16", dtype);
    }
    ASSIGN_OR_RETURN(p.device.peak_flops[dtype],
                     r.positive(kv.second, "device.peak_flops." + dtype));
  }
  if (!p.device.peak_flops.count("fp32")) return r.fail("device.peak_flops", "needs fp32");
  ASSIGN_OR_RETURN(p.device.memory_bytes,
                   r.positive(device["memory_bytes"], "device.memory_bytes"));
  ASSIGN_OR_RETURN(p.device.memory_bandwidth,
                   r.positive(device["memory_bandwidth"], "device.memory_bandwidth"));
  ASSIGN_OR_RETURN(p.device.launch_overhead_s,
                   r.positive(device["launch_overhead_s"], "device.launch_overhead_s"));
  ASSIGN_OR_RETURN(p.device.reserved_bytes,
                   r.positive(device["reserved_bytes"], "device.reserved_bytes"));
  for (const auto& [key, value] :
       {std::pair{"program_overhead_s", &p.device.program_overhead_s},
        std::pair{"fused_op_element_s", &p.device.fused_op_element_s},
        std::pair{"optimizer_element_s", &p.device.optimizer_element_s},
        std::pair{"collective_overhead_s", &p.device.collective_overhead_s},
        std::pair{"l2_bytes", &p.device.l2_bytes}}) {
    RETURN_IF_ERROR(r.optional_nonnegative(device[key], fmt::format("device.{}", key), *value));
  }
  if (const YAML::Node unaligned = device["gemm_unaligned_efficiency"]) {
    ASSIGN_OR_RETURN(p.device.gemm_unaligned_efficiency,
                     r.fraction(unaligned, "device.gemm_unaligned_efficiency"));
  }
  RETURN_IF_ERROR(
      r.flag(device["fuses_half_types"], "device.fuses_half_types", p.device.fuses_half_types));
  RETURN_IF_ERROR(r.flag(device["free_views"], "device.free_views", p.device.free_views));
  RETURN_IF_ERROR(r.flag(device["tf32_matmul"], "device.tf32_matmul", p.device.tf32_matmul));
  RETURN_IF_ERROR(r.flag(device["tf32_conv"], "device.tf32_conv", p.device.tf32_conv));
  RETURN_IF_ERROR(
      r.flag(device["nhwc_convolutions"], "device.nhwc_convolutions", p.device.nhwc_convolutions));
  RETURN_IF_ERROR(r.flag(device["overlap_communication"], "device.overlap_communication",
                         p.device.overlap_communication));
  RETURN_IF_ERROR(r.optional_nonnegative(device["overlap_slowdown"], "device.overlap_slowdown",
                                         p.device.overlap_slowdown));
  if (p.device.overlap_slowdown >= 1) {
    return r.fail("device.overlap_slowdown", "{} must be below 1 (compute would never finish)",
                  p.device.overlap_slowdown);
  }
  if (p.device.reserved_bytes >= p.device.memory_bytes)
    return r.fail("device.reserved_bytes", "leaves no memory for a plan");
  const YAML::Node curves = device["efficiency"];
  if (!curves || !curves.IsMap()) return r.fail("device.efficiency", "missing");
  for (const auto& [op_class, name] : kOpClasses) {
    ASSIGN_OR_RETURN(p.device.efficiency[op_class], parse_curve(r, curves, name));
  }
  for (const auto& [name, curve] :
       {std::pair{kFlashForward, &p.device.flash_attention},
        std::pair{kFlashBackward, &p.device.flash_attention_backward}}) {
    if (!curves[name]) continue;
    ASSIGN_OR_RETURN(*curve, parse_curve(r, curves, name));
  }
  if (curves[kGemmShapes]) {
    ASSIGN_OR_RETURN(p.device.gemm_shapes, parse_gemm_shapes(r, curves));
  }
  std::vector<std::string> known;
  for (const auto& [op_class, name] : kOpClasses) known.emplace_back(name);
  known.insert(known.end(), {kFlashForward, kFlashBackward, kGemmShapes});
  for (const auto& kv : curves) {
    const std::string name = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return r.fail("device.efficiency." + name, "unknown curve (known: {})",
                    fmt::join(known, ", "));
    }
  }
  return Status::ok();
}

// The topology: devices per node and the tiers that join them, innermost first.
Status parse_topology(const Reader& r, const YAML::Node& topology, HardwareProfile& p) {
  ASSIGN_OR_RETURN(p.devices_per_node,
                   r.count(topology["devices_per_node"], "topology.devices_per_node"));
  const YAML::Node tiers = topology["tiers"];
  if (!tiers || !tiers.IsSequence() || tiers.size() == 0)
    return r.fail("topology.tiers", "expected a list, innermost first");
  for (size_t i = 0; i < tiers.size(); ++i) {
    const YAML::Node t = tiers[i];
    const std::string field = fmt::format("topology.tiers[{}]", i);
    if (!t.IsMap()) return r.fail(field, "expected a mapping");
    Tier tier;
    tier.name = t["name"] && t["name"].IsScalar() ? t["name"].Scalar() : std::string();
    if (tier.name.empty()) return r.fail(field + ".name", "missing");
    ASSIGN_OR_RETURN(tier.devices_per_group,
                     r.count(t["devices_per_group"], field + ".devices_per_group"));
    ASSIGN_OR_RETURN(tier.alpha_s, r.positive(t["alpha_s"], field + ".alpha_s"));
    ASSIGN_OR_RETURN(tier.bandwidth, r.positive(t["bandwidth"], field + ".bandwidth"));
    if (t["nics_per_node"]) {
      ASSIGN_OR_RETURN(tier.nics_per_node, r.count(t["nics_per_node"], field + ".nics_per_node"));
    }
    const YAML::Node eff = t["efficiency"];
    if (!eff || !eff.IsMap()) return r.fail(field + ".efficiency", "missing");
    for (const auto& [collective, name] : kCollectives) {
      ASSIGN_OR_RETURN(tier.efficiency[collective],
                       r.fraction(eff[name], fmt::format("{}.efficiency.{}", field, name)));
    }
    p.tiers.push_back(std::move(tier));
  }
  if (p.tiers.front().devices_per_group != p.devices_per_node) {
    return r.fail("topology.tiers[0].devices_per_group",
                  "{} is not devices_per_node ({}): the first tier joins one node's devices",
                  p.tiers.front().devices_per_group, p.devices_per_node);
  }
  if (p.tiers.size() > 1 && p.tiers.back().nics_per_node < 1)
    return r.fail(fmt::format("topology.tiers[{}].nics_per_node", p.tiers.size() - 1), "missing");
  return Status::ok();
}

}  // namespace

StatusOr<HardwareProfile> parse_hardware_profile(std::string_view yaml, std::string_view source) {
  Reader r{std::string(source)};
  ASSIGN_OR_RETURN(const YAML::Node root, load_yaml(yaml, source));
  if (!root.IsMap()) return error("{}: a hardware profile is a YAML mapping", source);
  HardwareProfile p;
  p.source = std::string(source);
  p.name = root["name"] && root["name"].IsScalar() ? root["name"].Scalar() : std::string();
  if (p.name.empty()) return r.fail("name", "missing");
  const YAML::Node device = root["device"];
  if (!device || !device.IsMap()) return r.fail("device", "missing");
  RETURN_IF_ERROR(parse_device(r, device, p));
  if (const YAML::Node policy = root["memory_policy"]) {
    const auto named = policy.IsScalar() ? memory_policy_named(policy.Scalar()) : std::nullopt;
    if (!named) {
      return r.fail("memory_policy", "'{}' is not one of autopar, megatron, deepspeed, fsdp",
                    policy.IsScalar() ? policy.Scalar() : std::string("?"));
    }
    p.memory_policy = *named;
  }
  if (const YAML::Node kernels = root["kernels"]) {
    constexpr const char* kShape =
        "expected {{attention: flash|unfused, fusions: [op_kernels], memory_format: nhwc|nchw}}";
    if (!kernels.IsMap()) return r.fail("kernels", kShape);
    for (const auto& entry : kernels) {
      const std::string field = entry.first.Scalar();
      if (field != "attention" && field != "fusions" && field != "memory_format")
        return r.fail("kernels." + field,
                      "unknown field (known: attention, fusions, memory_format)");
    }
    if (const YAML::Node format = kernels["memory_format"]) {
      const auto named = format.IsScalar() ? memory_format_named(format.Scalar()) : std::nullopt;
      if (!named) {
        return r.fail("kernels.memory_format", "'{}' is not one of nhwc, nchw",
                      format.IsScalar() ? format.Scalar() : std::string("?"));
      }
      p.memory_format = *named;
    }
    if (const YAML::Node attention = kernels["attention"]) {
      const auto named =
          attention.IsScalar() ? attention_kernel_named(attention.Scalar()) : std::nullopt;
      if (!named) {
        return r.fail("kernels.attention", "'{}' is not one of unfused, flash",
                      attention.IsScalar() ? attention.Scalar() : std::string("?"));
      }
      p.attention = *named;
    }
    if (const YAML::Node fusions = kernels["fusions"]) {
      if (!fusions.IsSequence())
        return r.fail("kernels.fusions", "expected a list, e.g. [op_kernels]");
      for (const YAML::Node& fusion : fusions) {
        const auto named = fusion.IsScalar() ? fusion_named(fusion.Scalar()) : std::nullopt;
        if (!named) {
          return r.fail("kernels.fusions", "'{}' is not one of {}",
                        fusion.IsScalar() ? fusion.Scalar() : std::string("?"), fusion_names());
        }
        p.fusions.insert(*named);
      }
    }
  }
  const YAML::Node topology = root["topology"];
  if (!topology || !topology.IsMap()) return r.fail("topology", "missing");
  RETURN_IF_ERROR(parse_topology(r, topology, p));
  return p;
}

std::shared_ptr<const HardwareProfile> neutral_profile() {
  static const std::shared_ptr<const HardwareProfile> neutral = [] {
    constexpr std::string_view kNeutral = R"(
name: neutral
device:
  name: neutral accelerator
  peak_flops: {fp32: 10e12, tf32: 10e12, bf16: 10e12, fp16: 10e12, fp64: 10e12}
  memory_bytes: 1e12
  reserved_bytes: 1e9
  memory_bandwidth: 1e12
  launch_overhead_s: 1e-6
  free_views: true
  efficiency:
    gemm: [[1, 1]]
    conv: [[1, 1]]
    attention: [[1, 1]]
    elementwise: [[1, 1]]
    norm: [[1, 1]]
topology:
  devices_per_node: 1000000
  tiers:
    - name: link
      devices_per_group: 1000000
      alpha_s: 10e-6
      bandwidth: 10e9
      efficiency: {all_reduce: 1, all_gather: 1, reduce_scatter: 1, all_to_all: 1, p2p: 1}
)";
    StatusOr<HardwareProfile> parsed = parse_hardware_profile(kNeutral, "neutral profile");
    return std::make_shared<const HardwareProfile>(std::move(parsed).value());
  }();
  return neutral;
}

StatusOr<HardwareProfile> read_hardware_profile(const std::string& path_or_name,
                                                const std::string& config_dir) {
  std::string path = path_or_name;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    const std::string named = config_dir + "/" + path_or_name + ".yaml";
    if (!std::filesystem::exists(named, ec)) {
      std::vector<std::string> known;
      for (const auto& entry : std::filesystem::directory_iterator(config_dir, ec)) {
        if (entry.path().extension() == ".yaml") known.push_back(entry.path().stem().string());
      }
      std::sort(known.begin(), known.end());
      if (known.empty())
        return error("--hw {}: no such file, and {} holds no profiles", path_or_name, config_dir);
      return error("--hw {}: no such file or profile (profiles: {})", path_or_name,
                   fmt::join(known, ", "));
    }
    path = named;
  }
  std::ifstream in(path);
  if (!in) return error("{}: cannot read", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_hardware_profile(text.str(), path);
}

}  // namespace autopar
