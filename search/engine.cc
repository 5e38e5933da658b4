// The search engine: meshes, configurations in parallel, candidates in closed form.
#include "autopar/search/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include <tbb/parallel_for.h>

namespace autopar {
namespace {

std::vector<int64_t> divisors(int64_t n, int64_t limit) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n && d <= limit; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

std::vector<int64_t> degrees(const AxisChoices& c, int64_t devices, int64_t limit) {
  if (c.automatic) return divisors(devices, limit);
  return c.values;
}

// A scheme's position in the results: faster first, then by its text.
bool better(const Candidate& a, const Candidate& b) {
  if (a.step_s() != b.step_s()) return a.step_s() < b.step_s();
  return a.scheme.to_yaml() < b.scheme.to_yaml();
}

void keep_best(std::vector<Candidate>& list, size_t keep) {
  std::sort(list.begin(), list.end(), better);
  if (list.size() > keep) list.resize(keep);
}

// Seconds of one layer's forward and backward for one microbatch under `recompute`.
double layer_seconds(const LayerCost& c, Recompute recompute) {
  const LayerCost::Partial& partial = c.partial(recompute);
  return c.forward_compute + c.forward_comm + c.backward_compute + c.backward_comm +
         partial.compute + partial.comm;
}

// `layers` layers cut into `stages` ranges of equal length (`stages` divides `layers`).
std::vector<std::pair<int32_t, int32_t>> even_partition(int32_t layers, int64_t stages) {
  std::vector<std::pair<int32_t, int32_t>> out;
  const auto per = static_cast<int32_t>(layers / stages);
  for (int32_t first = 0; first < layers; first += per) out.emplace_back(first, first + per - 1);
  return out;
}

// Every way to cut `layers` layers into `stages` contiguous non-empty ranges.
void all_partitions(int32_t layers, int64_t stages, std::vector<std::pair<int32_t, int32_t>>& cur,
                    const std::function<void(const std::vector<std::pair<int32_t, int32_t>>&)>& f) {
  const int32_t first = cur.empty() ? 0 : cur.back().second + 1;
  const auto left = static_cast<int32_t>(stages - static_cast<int64_t>(cur.size()));
  if (left == 1) {
    cur.emplace_back(first, layers - 1);
    f(cur);
    cur.pop_back();
    return;
  }
  for (int32_t last = first; last <= layers - left; ++last) {
    cur.emplace_back(first, last);
    all_partitions(layers, stages, cur, f);
    cur.pop_back();
  }
}

double binomial(int64_t n, int64_t k) {
  double r = 1;
  for (int64_t i = 1; i <= k; ++i) r = r * static_cast<double>(n - k + i) / static_cast<double>(i);
  return r;
}

// The state bytes per device a mesh needs at least under ZeRO stage `zero`: 4 bytes of fp32
// parameter, 4 of gradient and the optimizer's slots per parameter, split over tp · pp at
// best, and over dp for what ZeRO shards.
double state_floor(const DeviceMesh& mesh, int zero, const SearchProblem& p,
                   double optimizer_bytes) {
  const double split = static_cast<double>(mesh.size("tp") * mesh.size("pp"));
  const double dp = static_cast<double>(mesh.size("dp"));
  const double params = zero >= 3 ? 4 / dp : 4;
  const double grads = zero >= 2 ? 4 / dp : 4;
  const double opt = zero >= 1 ? optimizer_bytes / dp : optimizer_bytes;
  return (params + grads + opt) * p.parameters / split;
}

// The least state any scheme of `schemes` (on one mesh) needs per device.
double state_floor(const std::vector<Scheme>& schemes, const SearchProblem& p,
                   double optimizer_bytes) {
  double best = std::numeric_limits<double>::infinity();
  for (const Scheme& s : schemes)
    best = std::min(best, state_floor(s.mesh, s.zero, p, optimizer_bytes));
  return best;
}

}  // namespace

std::vector<std::pair<int32_t, int32_t>> partition_stages(const LayerCosts& costs, int64_t stages,
                                                          Recompute recompute, int64_t microbatches,
                                                          const StageLimits* limits) {
  std::vector<double> seconds;
  seconds.reserve(costs.layers.size());
  for (const LayerCost& c : costs.layers) {
    double t = layer_seconds(c, recompute);
    if (microbatches > 0)
      t = t * static_cast<double>(microbatches) + c.update_compute + c.update_comm;
    seconds.push_back(t);
  }
  if (!limits) return balance_stages(seconds, stages);
  const auto n = static_cast<int64_t>(seconds.size());
  if (stages < 1 || stages > n) return balance_stages(seconds, stages);
  std::vector<double> prefix(n + 1, 0.0);
  for (int64_t l = 0; l < n; ++l) prefix[l + 1] = prefix[l] + seconds[l];
  const bool check_memory = static_cast<int64_t>(limits->in_flight.size()) == stages;
  if (check_memory) {
    // Some stage holds at least its share of the state: when that alone is too much, nothing
    // fits.
    double state = 0;
    for (const LayerCost& c : costs.layers)
      state += c.parameter_bytes + c.gradient_bytes + c.optimizer_bytes;
    if (state > limits->capacity * static_cast<double>(stages)) return {};
  }
  constexpr double kInf = 1e300;
  // best[i]: the slowest of k stages over the first i layers (before: of k - 1); cuts[i]: what
  // their cuts cost together (the tie-break); from[k][i]: where the last of them starts.
  std::vector<double> before(n + 1, kInf), before_cuts(n + 1, kInf), best(n + 1), cuts(n + 1);
  std::vector<int32_t> from(static_cast<size_t>((stages + 1) * (n + 1)), 0);
  before[0] = before_cuts[0] = 0.0;
  std::vector<double> cut_at(static_cast<size_t>(stages * n), -1.0);  // worked out when asked
  for (int64_t k = 1; k <= stages; ++k) {
    const int64_t stage = k - 1;
    std::fill(best.begin(), best.end(), kInf);
    std::fill(cuts.begin(), cuts.end(), kInf);
    for (int64_t i = k; i <= n - (stages - k); ++i) {
      const int32_t last = static_cast<int32_t>(i - 1);
      double& cut = cut_at[static_cast<size_t>(stage * n + last)];
      if (cut < 0) cut = k < stages ? limits->cut_seconds(stage, last) : 0.0;
      // The stage is layers j..i-1, grown leftwards: its time and memory only grow, so the
      // walk stops once the stage alone is slower than the best found.
      double state = 0, stash = 0, later = 0, out = 0, forward_peak = 0, backward_peak = 0;
      for (int64_t j = i - 1; j >= k - 1; --j) {
        const LayerCost& c = costs.layers[j];
        state += c.parameter_bytes + c.gradient_bytes + c.optimizer_bytes;
        stash += c.partial(recompute).stash_bytes;
        if (j < i - 1) later += c.partial(recompute).stash_later_bytes;
        out += c.backward_out_bytes;
        forward_peak = std::max(forward_peak, c.forward_peak_bytes);
        backward_peak = std::max(backward_peak, c.backward_peak_bytes);
        const double group = prefix[i] - prefix[j] + cut;
        if (group > best[i]) break;
        if (before[j] >= kInf) continue;
        if (check_memory) {
          double kept = stash + later;
          if (k < stages) kept += costs.layers[last].cut_forward_bytes;  // sent, kept
          if (j > 0) kept += costs.layers[j - 1].cut_forward_bytes;      // received
          const double bytes = state + static_cast<double>(limits->in_flight[stage]) * kept +
                               std::max(forward_peak, out + backward_peak);
          if (bytes > limits->capacity) break;  // and with more layers neither
        }
        const double v = std::max(before[j], group);
        const double total = before_cuts[j] + cut;
        if (v < best[i] || (v == best[i] && total < cuts[i])) {
          best[i] = v;
          cuts[i] = total;
          from[static_cast<size_t>(k * (n + 1) + i)] = static_cast<int32_t>(j);
        }
      }
    }
    std::swap(before, best);
    std::swap(before_cuts, cuts);
  }
  if (before[n] >= kInf) return {};
  std::vector<std::pair<int32_t, int32_t>> ranges(stages);
  int64_t i = n;
  for (int64_t k = stages; k >= 1; --k) {
    const int64_t j = from[static_cast<size_t>(k * (n + 1) + i)];
    ranges[k - 1] = {static_cast<int32_t>(j), static_cast<int32_t>(i - 1)};
    i = j;
  }
  return ranges;
}

StatusOr<std::vector<DeviceMesh>> enumerate_meshes(const SearchSpace& space,
                                                   const SearchProblem& p) {
  const int64_t node = space.tp_within_node ? p.devices_per_node : p.devices;
  std::vector<DeviceMesh> meshes;
  int64_t no_dp = 0, over_node = 0, over_layers = 0, batch = 0, tried = 0;
  for (int64_t tp : degrees(space.tp, p.devices, node)) {
    for (int64_t sp : degrees(space.sp, p.devices, node)) {
      for (int64_t cp : degrees(space.cp, p.devices, p.devices)) {
        for (int64_t pp : degrees(space.pp, p.devices, std::max<int32_t>(p.layers, 1))) {
          ++tried;
          if (tp * sp > node || node % (tp * sp) != 0) {
            ++over_node;
            continue;
          }
          if (pp > std::max<int32_t>(p.layers, 1)) {
            ++over_layers;
            continue;
          }
          if (p.devices % (tp * sp * cp * pp) != 0) {
            ++no_dp;
            continue;
          }
          const int64_t dp = p.devices / (tp * sp * cp * pp);
          if (!space.dp.automatic && std::find(space.dp.values.begin(), space.dp.values.end(),
                                               dp) == space.dp.values.end()) {
            ++no_dp;
            continue;
          }
          if (p.global_batch % dp != 0) {
            ++batch;
            continue;
          }
          std::vector<MeshAxis> axes;
          if (pp > 1) axes.push_back({"pp", pp});
          axes.push_back({"dp", dp});
          if (cp > 1) axes.push_back({"cp", cp});
          if (sp > 1) axes.push_back({"sp", sp});
          if (tp > 1) axes.push_back({"tp", tp});
          ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::create(axes));
          meshes.push_back(std::move(mesh));
        }
      }
    }
  }
  if (meshes.empty()) {
    std::vector<std::string> why;
    if (no_dp) why.push_back(fmt::format("{} leave no dp the space allows", no_dp));
    if (over_node)
      why.push_back(
          fmt::format("{} put tp · sp over a node's {} devices (constraints."
                      "tp_within_node)",
                      over_node, p.devices_per_node));
    if (over_layers)
      why.push_back(fmt::format("{} have more pipeline stages than the model's {} layers",
                                over_layers, p.layers));
    if (batch)
      why.push_back(fmt::format("{} have a dp that does not divide the global batch {}", batch,
                                p.global_batch));
    return error(
        "{}: mesh: no tp × pp × dp × sp × cp the space allows makes {} devices ({} of {} tried: "
        "{})",
        space.source, p.devices, tried, tried, fmt::join(why, "; "));
  }
  return meshes;
}

namespace {

// The baselines' families: what each varies, and how a member reads.
std::string describe_data_parallel(const Scheme& s) {
  return fmt::format("dp {}, micro {}, ZeRO {}", s.dp(), s.micro_batch, s.zero);
}

bool is_data_parallel(const Scheme& s) {
  return s.mesh.num_devices() == s.dp() && s.recompute == Recompute::kNone;
}

std::string describe_megatron(const Scheme& s) {
  std::string text =
      fmt::format("tp {}, pp {}, dp {}, micro {}", s.tp(), s.pp(), s.dp(), s.micro_batch);
  if (s.tensor == TensorStrategy::kMegatronSp && s.tp() > 1) text += ", sequence parallel";
  if (s.zero == 1) text += ", distributed optimizer";
  if (s.recompute != Recompute::kNone)
    text += fmt::format(", recompute {}", recompute_name(s.recompute));
  return text;
}

// Megatron-LM's recipe: tp of at most 8, 1F1B over even stages, ZeRO at most the
// distributed optimizer's (stage 1), no attribute or context parallelism.
bool is_megatron_recipe(const Scheme& s, int32_t layers) {
  if (s.sp() > 1 || s.cp() > 1 || s.tp() > 8 || s.zero > 1) return false;
  if (s.tp() > 1 && s.tensor == TensorStrategy::kAuto) return false;
  if (s.pp() == 1) return true;
  if (s.schedule != PipelineSchedule::kOneForwardOneBackward || layers % s.pp() != 0) return false;
  for (const auto& [first, last] : s.stages) {
    if (last - first + 1 != layers / s.pp()) return false;
  }
  return true;
}

// One search: the space's configurations priced in parallel, each configuration's pipelines
// and recompute policies in closed form, the best few refined and simulated.
class Searcher {
 public:
  Searcher(const SearchSpace& space, const SearchProblem& problem, CostModel& estimator,
           const SearchOptions& options)
      : space_(space),
        problem_(problem),
        estimator_(estimator),
        options_(options),
        profile_(estimator.profile()),
        capacity_(profile_.device.memory_bytes - profile_.device.reserved_bytes),
        keep_(static_cast<size_t>(std::max(options.top, options.simulate_top))) {}

  StatusOr<SearchResult> run();

 private:
  // Configurations: what one SPMD lowering and its layer costs serve (mesh, micro-batch,
  // precision, tensor recipe, ZeRO stage), those whose state cannot fit pruned.
  StatusOr<std::vector<Scheme>> configurations(const std::vector<DeviceMesh>& meshes,
                                               SearchResult& result) const;
  // --exhaustive is for spaces whose stage partitions can be listed.
  Status check_exhaustive(const std::vector<Scheme>& configs) const;
  // The schemes the space's dimensions make of `base`: those that change the lowering
  // (`relowers`) or those priced over one lowering's layer costs, in the dimensions' order.
  std::vector<Scheme> expand(const Scheme& base, bool relowers, int32_t layers) const {
    return expand_choices(space_, base, relowers, {layers, problem_.training});
  }
  // A configuration's best scheme per pipeline and recompute (`found`, the best few kept).
  void evaluate(const Scheme& base, std::vector<Candidate>& found, int64_t& evaluated,
                std::string& failure) const;
  // One scheme per schedule and recompute: its best stage partition (others differ only in
  // where the layers are cut).
  std::optional<Candidate> best_partition(const LayerCosts& c, Scheme s, int64_t& evaluated) const;
  void refine(std::vector<Candidate>& all, SearchResult& result) const;
  // The fastest of `schemes` that fits, as baseline `name` (described by `describe`), or
  // why none does: the lowering's error, or the least memory any of them needs.
  Baseline best_of(const std::string& name, const std::vector<Scheme>& schemes,
                   const std::function<std::string(const Scheme&)>& describe) const;
  std::vector<int64_t> micro_choices(int64_t dp) const;
  // Each family's best: pure data parallelism over micro-batch and ZeRO stage, and
  // Megatron-LM's recipe (tp within a node, pp dividing the layers evenly, 1F1B) over tp,
  // pp, micro-batch, sequence parallelism, the distributed optimizer and recomputation.
  Baseline data_parallel_baseline(Precision precision) const;
  Baseline megatron_baseline(Precision precision) const;
  // The recipe's schemes on one tp and pp: micro-batch, sequence parallelism, the
  // distributed optimizer and recomputation.
  std::vector<Scheme> megatron_schemes(Precision precision, int64_t tp, int64_t pp) const;
  bool admissible(const Scheme& s) const { return !options_.admissible || options_.admissible(s); }
  Status simulate_best(std::vector<Candidate>& all, size_t simulated, SearchResult& result) const;

  const SearchSpace& space_;
  const SearchProblem& problem_;
  CostModel& estimator_;
  const SearchOptions& options_;
  const HardwareProfile& profile_;
  const double capacity_;
  const size_t keep_;
};

StatusOr<std::vector<Scheme>> Searcher::configurations(const std::vector<DeviceMesh>& meshes,
                                                       SearchResult& result) const {
  const double optimizer_bytes = problem_.optimizer_bytes;
  std::vector<Scheme> configs;
  int64_t micro_mismatch = 0;
  int64_t inadmissible = 0;  // configurations SearchOptions::admissible left out
  int highest_zero = 0;      // the most ZeRO shards of the schemes tried
  for (const DeviceMesh& mesh : meshes) {
    Scheme on_mesh;
    on_mesh.mesh = mesh;
    on_mesh.global_batch = problem_.global_batch;
    const std::vector<Scheme> variants = expand(on_mesh, true, problem_.layers);
    for (const Scheme& s : variants) highest_zero = std::max(highest_zero, s.zero);
    if (state_floor(variants, problem_, optimizer_bytes) > capacity_) {
      ++result.meshes_pruned;
      continue;
    }
    const int64_t dp = mesh.size("dp");
    const int64_t per_replica = problem_.global_batch / dp;
    std::vector<int64_t> micros;
    if (space_.micro.automatic) {
      for (int64_t m = 1; m <= per_replica; m *= 2) {
        if (per_replica % m == 0) micros.push_back(m);
      }
    } else {
      for (int64_t m : space_.micro.values) {
        if (per_replica % m == 0) micros.push_back(m);
      }
    }
    if (micros.empty()) ++micro_mismatch;
    for (int64_t micro : micros) {
      Scheme base;
      base.mesh = mesh;
      base.global_batch = problem_.global_batch;
      base.micro_batch = micro;
      for (Scheme& s : expand(base, true, problem_.layers)) {
        if (!admissible(s)) {
          ++inadmissible;
          continue;
        }
        if (state_floor(mesh, s.zero, problem_, optimizer_bytes) > capacity_) {
          ++result.configurations_pruned;
          continue;
        }
        configs.push_back(std::move(s));
      }
    }
  }
  if (configs.empty()) {
    if (inadmissible > 0 && result.configurations_pruned == 0)
      return error("{}: every scheme of the space was left out ({} configuration{})", space_.source,
                   inadmissible, inadmissible == 1 ? "" : "s");
    if (result.meshes_pruned == result.meshes || result.configurations_pruned > 0) {
      return error(
          "{}: zero: no mesh of {} devices can hold the model's {:.3g} parameters' state even "
          "at ZeRO stage {} ({:.1f} GiB free per device)",
          space_.source, problem_.devices, problem_.parameters, highest_zero,
          capacity_ / (1 << 30));
    }
    return error(
        "{}: batch.micro: no microbatch size the space allows divides the samples per "
        "data-parallel replica of the global batch {} ({} meshes)",
        space_.source, problem_.global_batch, micro_mismatch);
  }

  return configs;
}

Status Searcher::check_exhaustive(const std::vector<Scheme>& configs) const {
  int64_t stages = 1;
  for (const Scheme& c : configs) {
    for (const Scheme& s : expand(c, false, problem_.layers))
      stages = std::max(stages, s.pp() * s.chunks);
  }
  stages = std::min<int64_t>(stages, std::max<int32_t>(problem_.layers, 1));
  const double partitions = binomial(problem_.layers - 1, stages - 1);
  if (partitions > 1e5) {
    return error(
        "--exhaustive: {:.3g} ways to cut {} layers into {} stages per configuration; the "
        "exact mode is for small spaces",
        partitions, problem_.layers, stages);
  }
  return Status::ok();
}

void Searcher::evaluate(const Scheme& base, std::vector<Candidate>& found, int64_t& evaluated,
                        std::string& failure) const {
  auto costs = estimator_.layer_costs(base);
  if (!costs.is_ok()) {
    failure = costs.status().message();
    return;
  }
  const LayerCosts& c = **costs;
  for (const Scheme& s : expand(base, false, static_cast<int32_t>(c.layers.size()))) {
    if (!admissible(s)) continue;
    std::optional<Candidate> best = best_partition(c, s, evaluated);
    if (best) found.push_back(std::move(*best));
  }
  keep_best(found, keep_);
}

std::optional<Candidate> Searcher::best_partition(const LayerCosts& c, Scheme s,
                                                  int64_t& evaluated) const {
  const auto layers = static_cast<int32_t>(c.layers.size());
  const int64_t pp = s.pp();
  const int64_t m = s.microbatches();
  const int64_t chunks = s.chunks;
  const PipelineSchedule schedule = s.schedule;
  const Recompute recompute = s.recompute;
  // One scheme per schedule and recompute: its best stage partition (others differ
  // only in where the layers are cut).
  std::optional<Candidate> best_cut;
  // The least any rank of an infeasible partition needs (with the reserve).
  double least_rank = 0;
  auto consider = [&](const std::vector<std::pair<int32_t, int32_t>>& stages) {
    s.stages = stages;
    if (!stages.empty() && !admissible(s)) return;
    auto e = estimator_.combine(c, s);
    ++evaluated;
    if (e.is_ok() && !e->feasible && !e->memory_bytes_per_device.empty())
      least_rank =
          *std::min_element(e->memory_bytes_per_device.begin(), e->memory_bytes_per_device.end());
    if (!e.is_ok() || !e->feasible) return;
    Candidate candidate{s, std::move(e).value(), {}};
    if (!best_cut || better(candidate, *best_cut)) best_cut = std::move(candidate);
  };
  const int64_t virtual_stages = pp * chunks;
  if (virtual_stages == 1) {
    consider({});
  } else if (options_.exhaustive) {
    std::vector<std::pair<int32_t, int32_t>> cur;
    all_partitions(layers, virtual_stages, cur, consider);
  } else {
    const auto by_time = partition_stages(c, virtual_stages, recompute);
    consider(by_time);
    // Few microbatches leave the update a large part of the step: balance each
    // rank's microbatches and update together too.
    const auto by_step = partition_stages(c, virtual_stages, recompute, m);
    if (by_step != by_time) consider(by_step);
    const auto& by_flops = c.balanced(virtual_stages);
    if (by_flops != by_time && by_flops != by_step) consider(by_flops);
    // A target that runs only some partitions (--export) can run even ones.
    if (options_.admissible && layers % virtual_stages == 0) {
      const auto even = even_partition(layers, virtual_stages);
      if (even != by_time && even != by_step && even != by_flops) consider(even);
    }
    // Where every balance above leaves a rank that does not fit: what else a stage
    // pays, its cuts, and (one stage per rank) its memory.
    // (When every rank is over, moving layers between them cannot help.)
    if (best_cut || least_rank > profile_.device.memory_bytes) return best_cut;
    StageLimits limits;
    // (Cut messages are mostly alike: each size is priced once per pair of ranks.)
    std::map<std::tuple<int64_t, int64_t, double>, double> priced;
    auto message = [&](double bytes, int64_t from, int64_t to) {
      auto [it, added] = priced.try_emplace({from, to, bytes}, 0.0);
      if (added) it->second = pipeline_message_seconds(profile_, s.mesh, bytes, from, to);
      return it->second;
    };
    limits.cut_seconds = [&](int64_t stage, int32_t last) {
      return message(c.layers[last].cut_forward_bytes, stage % pp, (stage + 1) % pp) +
             message(c.layers[last].cut_backward_bytes, (stage + 1) % pp, stage % pp);
    };
    if (chunks == 1 && c.training) {
      for (int64_t r = 0; r < pp; ++r) limits.in_flight.push_back(in_flight(schedule, r, pp, 1, m));
      limits.capacity = capacity_;
    }
    const auto fitting = partition_stages(c, virtual_stages, recompute, m, &limits);
    if (!fitting.empty() && fitting != by_time && fitting != by_step && fitting != by_flops)
      consider(fitting);
  }
  return best_cut;
}

// The best few's stages, refined: a stage boundary moves by one layer while that makes the
// step faster. The dynamic programs balance a proxy (the slowest stage); the estimate also
// sees the fill, the drain and where each rank's update runs.
void Searcher::refine(std::vector<Candidate>& all, SearchResult& result) const {
  std::vector<int64_t> refined(all.size(), 0);
  tbb::parallel_for(size_t{0}, all.size(), [&](size_t i) {
    Candidate& cand = all[i];
    if (cand.scheme.stages.size() < 2) return;
    auto costs = estimator_.layer_costs(cand.scheme);
    if (!costs.is_ok()) return;
    for (bool improved = true; improved;) {
      improved = false;
      for (size_t b = 0; b + 1 < cand.scheme.stages.size(); ++b) {
        for (int32_t move : {-1, 1}) {
          Scheme s = cand.scheme;
          s.stages[b].second += move;
          s.stages[b + 1].first += move;
          if (s.stages[b].second < s.stages[b].first ||
              s.stages[b + 1].first > s.stages[b + 1].second || !admissible(s))
            continue;
          auto e = estimator_.combine(**costs, s);
          ++refined[i];
          if (e.is_ok() && e->feasible && e->step_time_s < cand.estimate.step_time_s) {
            cand = {std::move(s), std::move(e).value(), {}};
            improved = true;
          }
        }
      }
    }
  });
  for (int64_t n : refined) result.candidates_evaluated += n;
  keep_best(all, keep_);
  all.erase(std::unique(all.begin(), all.end(),
                        [](const Candidate& a, const Candidate& b) {
                          return a.scheme.to_yaml() == b.scheme.to_yaml();
                        }),
            all.end());
}

Baseline Searcher::best_of(const std::string& name, const std::vector<Scheme>& schemes,
                           const std::function<std::string(const Scheme&)>& describe) const {
  Baseline b{name, std::nullopt, ""};
  std::string lowering_error;
  std::optional<std::pair<double, const Scheme*>> least;  // the least memory that did not fit
  for (const Scheme& s : schemes) {
    auto costs = estimator_.layer_costs(s);
    if (!costs.is_ok()) {
      if (lowering_error.empty())
        lowering_error = fmt::format("{}: {}", describe(s), costs.status().message());
      continue;
    }
    auto e = estimator_.combine(**costs, s);
    if (!e.is_ok()) continue;
    if (!e->feasible) {
      if (!least || e->peak_memory_bytes < least->first) least = {e->peak_memory_bytes, &s};
      continue;
    }
    Candidate c{s, std::move(e).value(), {}};
    if (!b.candidate || better(c, *b.candidate)) b.candidate = std::move(c);
  }
  if (b.candidate) {
    b.note = describe(b.candidate->scheme);
  } else if (least) {
    b.note = fmt::format(
        "does not fit: the least memory any of its {} schemes needs is {:.1f} GiB per device "
        "({}) of {:.1f} GiB",
        schemes.size(), least->first / (1 << 30), describe(*least->second),
        profile_.device.memory_bytes / (1 << 30));
  } else if (!lowering_error.empty()) {
    b.note = "cannot be lowered: " + lowering_error;
  }
  return b;
}

std::vector<int64_t> Searcher::micro_choices(int64_t dp) const {
  std::vector<int64_t> out;
  const int64_t per_replica = problem_.global_batch / dp;
  for (int64_t m = 1; m <= per_replica && m <= 16; m *= 2) {
    if (per_replica % m == 0) out.push_back(m);
  }
  return out;
}

Baseline Searcher::data_parallel_baseline(Precision precision) const {
  const int64_t dp = problem_.devices;
  if (problem_.global_batch % dp != 0) {
    return {"data parallel", std::nullopt,
            fmt::format("the global batch {} does not split over {} devices", problem_.global_batch,
                        dp)};
  }
  std::vector<Scheme> schemes;
  const int highest_zero = problem_.training && dp > 1 ? 3 : 0;
  for (int zero = 0; zero <= highest_zero; ++zero) {
    for (int64_t micro : micro_choices(dp)) {
      Scheme s;
      s.mesh = *DeviceMesh::create({{"dp", dp}});
      s.global_batch = problem_.global_batch;
      s.micro_batch = micro;
      s.zero = zero;
      s.precision = precision;
      schemes.push_back(s);
    }
  }
  return best_of("data parallel", schemes, describe_data_parallel);
}

Baseline Searcher::megatron_baseline(Precision precision) const {
  if (!problem_.transformer)
    return {"megatron", std::nullopt, "Megatron-LM's recipe is for transformers"};
  const int64_t layers = std::max<int32_t>(problem_.layers, 1);
  // Per tp, pipeline degrees from the least: the recipe takes the least pp that fits (and
  // the next, which may run a larger micro-batch).
  std::vector<Scheme> tried;
  std::optional<Baseline> best;
  for (int64_t tp : {1, 2, 4, 8}) {
    if (tp > problem_.devices_per_node || problem_.devices % tp != 0) continue;
    int more = -1;  // pipeline degrees still to try once one fits
    for (int64_t pp : divisors(problem_.devices / tp, layers)) {
      const int64_t dp = problem_.devices / (tp * pp);
      if (layers % pp != 0 || problem_.global_batch % dp != 0) continue;
      const std::vector<Scheme> schemes = megatron_schemes(precision, tp, pp);
      tried.insert(tried.end(), schemes.begin(), schemes.end());
      Baseline b = best_of("megatron", schemes, describe_megatron);
      if (b.candidate) {
        if (more < 0) more = 1;
        if (!best || better(*b.candidate, *best->candidate)) best = std::move(b);
      }
      if (more >= 0 && more-- == 0) break;
    }
  }
  if (best) return *best;
  if (tried.empty()) {
    return {"megatron", std::nullopt,
            fmt::format("no tp in {{1, 2, 4, 8}} and pp dividing the {} layers make {} devices "
                        "with a dp dividing the global batch {}",
                        layers, problem_.devices, problem_.global_batch)};
  }
  // Nothing fits: the reason, over every scheme tried.
  return best_of("megatron", tried, describe_megatron);
}

std::vector<Scheme> Searcher::megatron_schemes(Precision precision, int64_t tp, int64_t pp) const {
  const int64_t layers = std::max<int32_t>(problem_.layers, 1);
  const int64_t dp = problem_.devices / (tp * pp);
  std::vector<MeshAxis> axes;
  if (pp > 1) axes.push_back({"pp", pp});
  axes.push_back({"dp", dp});
  if (tp > 1) axes.push_back({"tp", tp});
  Scheme s;
  s.mesh = *DeviceMesh::create(axes);
  s.global_batch = problem_.global_batch;
  s.precision = precision;
  if (pp > 1) s.stages = even_partition(static_cast<int32_t>(layers), pp);
  std::vector<Scheme> schemes;
  for (int64_t micro : micro_choices(dp)) {
    s.micro_batch = micro;
    for (TensorStrategy tensor : {TensorStrategy::kMegatron, TensorStrategy::kMegatronSp}) {
      if (tp == 1 && tensor == TensorStrategy::kMegatronSp) continue;
      s.tensor = tensor;
      for (int zero : {0, 1}) {
        if (zero == 1 && (dp == 1 || !problem_.training)) continue;
        s.zero = zero;
        for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
          if (r != Recompute::kNone && !problem_.training) continue;
          s.recompute = r;
          schemes.push_back(s);
        }
      }
    }
  }
  return schemes;
}

// Re-scores the best `simulated` of `all`, and the baselines, by simulating their plans (in
// parallel: each builds a whole plan); then any other kept candidate whose estimate is below
// the best simulated step, so that no estimate-only row could be the best. The simulated rank
// first, by the simulation; the rest follow by their estimates.
Status Searcher::simulate_best(std::vector<Candidate>& all, size_t simulated,
                               SearchResult& result) const {
  auto run = [&](const std::vector<Candidate*>& to_simulate) {
    std::vector<Status> failed(to_simulate.size(), Status::ok());
    tbb::parallel_for(size_t{0}, to_simulate.size(), [&](size_t i) {
      auto seconds = options_.simulate(to_simulate[i]->scheme);
      if (seconds.is_ok()) {
        to_simulate[i]->simulated_s = *seconds;
      } else {
        failed[i] = seconds.status();
      }
    });
    for (const Status& s : failed) RETURN_IF_ERROR(s);
    return Status::ok();
  };
  std::vector<Candidate*> first;
  for (size_t i = 0; i < simulated; ++i) first.push_back(&all[i]);
  for (Baseline& b : result.baselines) {
    if (b.candidate) first.push_back(&*b.candidate);
  }
  RETURN_IF_ERROR(run(first));
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < simulated; ++i) best = std::min(best, *all[i].simulated_s);
  std::vector<Candidate*> more;
  for (size_t i = simulated; i < all.size(); ++i) {
    if (all[i].estimate.step_time_s < best) more.push_back(&all[i]);
  }
  RETURN_IF_ERROR(run(more));
  const auto unsimulated = std::stable_partition(
      all.begin(), all.end(), [](const Candidate& c) { return c.simulated_s.has_value(); });
  std::sort(all.begin(), unsimulated, better);
  std::sort(unsimulated, all.end(), better);
  return Status::ok();
}

StatusOr<SearchResult> Searcher::run() {
  const auto start = std::chrono::steady_clock::now();
  SearchResult result;
  ASSIGN_OR_RETURN(std::vector<DeviceMesh> meshes, enumerate_meshes(space_, problem_));
  result.meshes = static_cast<int64_t>(meshes.size());
  ASSIGN_OR_RETURN(std::vector<Scheme> configs, configurations(meshes, result));
  if (options_.exhaustive) RETURN_IF_ERROR(check_exhaustive(configs));
  std::vector<std::vector<Candidate>> found(configs.size());
  std::vector<int64_t> evaluated(configs.size(), 0);
  std::vector<std::string> errors(configs.size());
  std::atomic<int64_t> done{0};
  std::mutex progress_mutex;
  // Configurations grouped by the SPMD structure they share (pipeline degrees and every dp > 1
  // lower alike): one task lowers a structure and prices each configuration on it, so no
  // thread waits for a structure another is lowering.
  std::vector<std::vector<size_t>> groups;
  {
    std::map<std::string, size_t> group_of;
    for (size_t i = 0; i < configs.size(); ++i) {
      auto [it, added] = group_of.emplace(spmd_structure_key(configs[i]), groups.size());
      if (added) groups.emplace_back();
      groups[it->second].push_back(i);
    }
  }
  tbb::parallel_for(size_t{0}, groups.size(), [&](size_t g) {
    for (size_t i : groups[g]) {
      evaluate(configs[i], found[i], evaluated[i], errors[i]);
      const int64_t now = ++done;
      if (options_.progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        options_.progress(static_cast<double>(now) / static_cast<double>(configs.size()));
      }
    }
    estimator_.release_structure(configs[groups[g].front()]);
  });

  std::vector<Candidate> all;
  for (size_t i = 0; i < configs.size(); ++i) {
    result.candidates_evaluated += evaluated[i];
    for (Candidate& c : found[i]) all.push_back(std::move(c));
  }
  std::map<std::string, const Candidate*> family_best;
  for (const Candidate& c : all) {
    const std::string family = paradigm_family(c.scheme);
    result.points.push_back({c.estimate.step_time_s, c.estimate.peak_memory_bytes, family});
    auto [it, added] = family_best.try_emplace(family, &c);
    if (!added && better(c, *it->second)) it->second = &c;
  }
  for (const auto& [family, c] : family_best) result.family_best.push_back(*c);
  std::sort(result.family_best.begin(), result.family_best.end(), better);
  result.configurations = static_cast<int64_t>(configs.size());
  result.feasible = static_cast<int64_t>(all.size());
  if (all.empty()) {
    std::string first_error;
    for (const std::string& e : errors) {
      if (!e.empty()) {
        first_error = e;
        break;
      }
    }
    if (!first_error.empty() && result.candidates_evaluated == 0)
      return error("{}: no scheme of the space can be lowered: {}", space_.source, first_error);
    if (options_.admissible && result.candidates_evaluated == 0)
      return error("{}: every scheme of the space was left out ({} configuration{})", space_.source,
                   result.configurations, result.configurations == 1 ? "" : "s");
    // Without context parallelism a long sequence's activations may not fit at any degree.
    const bool has_cp =
        space_.cp.automatic || std::any_of(space_.cp.values.begin(), space_.cp.values.end(),
                                           [](int64_t cp) { return cp > 1; });
    return error(
        "{}: no scheme fits in memory: {} candidates over {} meshes exceed {:.1f} GiB per device "
        "(allow more zero, recompute or pp{})",
        space_.source, result.candidates_evaluated, result.meshes, capacity_ / (1 << 30),
        has_cp ? "" : ", or cp for long sequences: configs/spaces/long-context.yaml");
  }
  keep_best(all, keep_);
  if (!options_.exhaustive) refine(all, result);

  const size_t simulated =
      std::min(all.size(), static_cast<size_t>(std::max(options_.simulate_top, 0)));
  // The baselines compute as the best scheme does.
  const Precision precision = all.front().scheme.precision;
  result.baselines.push_back(data_parallel_baseline(precision));
  result.baselines.push_back(megatron_baseline(precision));
  if (options_.simulate && simulated > 0) RETURN_IF_ERROR(simulate_best(all, simulated, result));
  // A ranked candidate of a family that the simulation finds faster than the family's best
  // by estimate is that family's best.
  for (Baseline& b : result.baselines) {
    const bool dp = b.name == "data parallel";
    for (const Candidate& c : all) {
      if (c.scheme.precision != precision ||
          !(dp ? is_data_parallel(c.scheme) : is_megatron_recipe(c.scheme, problem_.layers)))
        continue;
      // (A simulated step is compared with simulated steps only.)
      if (b.candidate && b.candidate->simulated_s.has_value() != c.simulated_s.has_value())
        continue;
      if (!b.candidate || better(c, *b.candidate)) {
        b.candidate = c;
        b.note = dp ? describe_data_parallel(c.scheme) : describe_megatron(c.scheme);
      }
    }
  }
  if (all.size() > static_cast<size_t>(options_.top)) all.resize(options_.top);
  result.top = std::move(all);
  result.search_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

std::string paradigm_family(const Scheme& scheme) {
  std::vector<std::string> axes;
  for (const MeshAxis& a : scheme.mesh.axes()) {
    if (a.size > 1) axes.push_back(a.name);
  }
  if (axes.empty()) return "1 device";
  return fmt::format("{}", fmt::join(axes, "·"));
}

StatusOr<SearchResult> search(const SearchSpace& space, const SearchProblem& problem,
                              CostModel& estimator, const SearchOptions& options) {
  return Searcher(space, problem, estimator, options).run();
}

}  // namespace autopar
