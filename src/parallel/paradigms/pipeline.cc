// Pipeline parallelism: layers split into pp · chunks virtual stages, each rank running
// chunks of them (interleaved 1F1B gives rank r the virtual stages r, r + pp, ...). Explicit
// layer ranges come from the scheme; otherwise stages balance the forward FLOPs of the layers.
#include <algorithm>
#include <numeric>

#include "autopar/ops/op_def.h"
#include "paradigms.h"

namespace autopar {

int64_t in_flight(PipelineSchedule schedule, int64_t rank, int64_t ranks, int64_t chunks,
                  int64_t microbatches) {
  // The warm-up's forwards and the one that follows them, before the first backward frees any.
  return std::min(microbatches * std::max<int64_t>(chunks, 1),
                  warmup_forwards(schedule, rank, ranks, chunks, microbatches) + 1);
}

double pipeline_seconds(PipelineSchedule schedule, int64_t chunks, int64_t microbatches,
                        bool training, const std::vector<RankSeconds>& ranks, double hops) {
  double busiest = 0, sum = 0, max_forward = 0, max_backward = 0;
  double sum_forward = 0, sum_backward = 0;
  for (const RankSeconds& r : ranks) {
    busiest = std::max(busiest, r.forward + r.backward);
    sum += r.forward + r.backward;
    max_forward = std::max(max_forward, r.forward);
    max_backward = std::max(max_backward, r.backward);
    sum_forward += r.forward;
    sum_backward += r.backward;
  }
  const double dm = static_cast<double>(microbatches);
  const auto p = static_cast<int64_t>(ranks.size());
  const int64_t v = schedule == PipelineSchedule::kInterleaved ? std::max<int64_t>(chunks, 1) : 1;
  if (!training) return sum_forward + (dm - 1) * max_forward + hops;
  // Interleaved 1F1B: the bubble shrinks by the chunks (Narayanan et al. 2021).
  if (v > 1)
    return dm * busiest + static_cast<double>(p - 1) / static_cast<double>(p * v) * sum + hops;
  if (schedule == PipelineSchedule::kGpipe)
    return sum_forward + (dm - 1) * max_forward + sum_backward + (dm - 1) * max_backward + hops;
  return sum + (dm - 1) * busiest + hops;
}

std::vector<std::pair<int32_t, int32_t>> balance_stages(const std::vector<double>& costs,
                                                        int64_t parts) {
  const int64_t n = static_cast<int64_t>(costs.size());
  std::vector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const double inf = 1e300;
  // best[k][i]: the smallest largest sum splitting the first i layers into k groups.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> cut(parts + 1, std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0.0;
  for (int64_t k = 1; k <= parts; ++k) {
    for (int64_t i = k; i <= n; ++i) {
      // The last group is layers j..i−1. Walking j down, the group only grows: once it alone
      // exceeds the best so far, no smaller j can match it. (Ties go to the smallest j.)
      for (int64_t j = i - 1; j >= k - 1; --j) {
        const double group = prefix[i] - prefix[j];
        if (group > best[k][i]) break;
        const double v = std::max(best[k - 1][j], group);
        if (v <= best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<std::pair<int32_t, int32_t>> ranges(parts);
  int64_t i = n;
  for (int64_t k = parts; k >= 1; --k) {
    const int64_t j = cut[k][i];
    ranges[k - 1] = {static_cast<int32_t>(j), static_cast<int32_t>(i - 1)};
    i = j;
  }
  return ranges;
}

std::vector<double> layer_forward_costs(const Graph& graph, int32_t layers) {
  std::vector<double> costs(std::max(layers, 0), 0.0);
  for (const Node& n : graph.nodes()) {
    if (n.phase == Phase::kForward && n.layer >= 0 && n.layer < layers)
      costs[n.layer] += node_flops(graph, n) + 1.0;
  }
  return costs;
}

}  // namespace autopar

namespace autopar {
namespace {

const std::initializer_list<std::pair<const char*, PipelineSchedule>> kSchedules = {
    {"gpipe", PipelineSchedule::kGpipe},
    {"1f1b", PipelineSchedule::kOneForwardOneBackward},
    {"interleaved", PipelineSchedule::kInterleaved}};

// pipeline.stages: auto, or [first, last] layer ranges, one per virtual stage, in order.
Status parse_stages(const YAML::Node& stages, const SchemeReader& r, Scheme& s) {
  if (stages.IsScalar()) {
    if (stages.Scalar() != "auto")
      return r.fail("pipeline.stages", "expected auto or a list of [first, last] layer ranges");
    return Status::ok();
  }
  if (!stages.IsSequence())
    return r.fail("pipeline.stages", "expected auto or a list of [first, last] layer ranges");
  int32_t next = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string field = fmt::format("pipeline.stages[{}]", i);
    const YAML::Node range = stages[i];
    if (!range.IsSequence() || range.size() != 2) return r.fail(field, "expected [first, last]");
    ASSIGN_OR_RETURN(int64_t first, r.integer(range[0], field));
    ASSIGN_OR_RETURN(int64_t last, r.integer(range[1], field));
    if (first != next || last < first) {
      return r.fail(field, "[{}, {}] must start at layer {} and not end before it", first, last,
                    next);
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
  return Status::ok();
}

}  // namespace

const char* schedule_name(PipelineSchedule s) { return name_of(s, kSchedules); }

}  // namespace autopar

namespace autopar::paradigm_files {

Status configure_pipeline(const Scheme& scheme, const Graph& graph, int32_t layers,
                          LoweringPolicy& policy) {
  policy.stages = scheme.pp();
  policy.chunks = scheme.chunks;
  policy.schedule = scheme.schedule;
  const int64_t virtual_stages = policy.stages * policy.chunks;
  if (!scheme.stages.empty()) {
    if (static_cast<int64_t>(scheme.stages.size()) != virtual_stages) {
      return error("pipeline.stages: {} layer ranges for pp · chunks = {} stages",
                   scheme.stages.size(), virtual_stages);
    }
    policy.stage_layers = scheme.stages;
    return Status::ok();
  }
  if (virtual_stages == 1) {
    policy.stage_layers = {{0, std::max(layers - 1, 0)}};
    return Status::ok();
  }
  if (layers < virtual_stages) {
    return error("mesh.pp: {} pipeline stages ({} ranks × {} chunks) but the model has {} layers",
                 virtual_stages, policy.stages, policy.chunks, layers);
  }
  policy.stage_layers = balance_stages(layer_forward_costs(graph, layers), virtual_stages);
  return Status::ok();
}

Status parse_pipeline(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
  const YAML::Node pipeline = root["pipeline"];
  if (!pipeline) return Status::ok();
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
  if (const YAML::Node stages = pipeline["stages"]) RETURN_IF_ERROR(parse_stages(stages, r, s));
  if (s.schedule == PipelineSchedule::kInterleaved && s.chunks < 2)
    return r.fail("pipeline.chunks", "schedule interleaved needs chunks of at least 2");
  return Status::ok();
}

// Under pp > 1, each schedule a space lists, interleaved with each chunk count that fits the
// layers and divides the microbatches over pp; without pp, 1F1B. An inference search runs
// 1F1B's forwards as GPipe does, and tries one of them.
StatusOr<Expansion> search_pipeline(const YAML::Node& value, const SchemeReader& r) {
  if (!value.IsMap()) return r.fail("pipeline", "expected {{schedules: [...], chunks: [...]}}");
  RETURN_IF_ERROR(r.known_keys(value, "pipeline", {"schedules", "chunks"}));
  std::vector<PipelineSchedule> schedules = {PipelineSchedule::kOneForwardOneBackward};
  std::vector<int64_t> chunks = {1};
  if (const YAML::Node listed_schedules = value["schedules"]) {
    ASSIGN_OR_RETURN(schedules, listed(listed_schedules, r, "pipeline.schedules", kSchedules));
  }
  if (const YAML::Node listed_chunks = value["chunks"]) {
    if (listed_chunks.IsScalar() && listed_chunks.Scalar() == "auto")
      return r.fail("pipeline.chunks", "expected a list, e.g. [1, 2, 4]");
    ASSIGN_OR_RETURN(chunks, r.sizes(listed_chunks, "pipeline.chunks"));
  }
  return Expansion([schedules, chunks](const Scheme& base, const SearchContext& c) {
    std::vector<Scheme> out;
    auto with = [&](PipelineSchedule schedule, int64_t k) {
      Scheme s = base;
      s.schedule = schedule;
      s.chunks = k;
      out.push_back(std::move(s));
    };
    const int64_t pp = base.pp();
    if (pp == 1) {
      with(PipelineSchedule::kOneForwardOneBackward, 1);
      return out;
    }
    const auto has = [&](PipelineSchedule s) {
      return std::find(schedules.begin(), schedules.end(), s) != schedules.end();
    };
    for (PipelineSchedule schedule : schedules) {
      if (schedule == PipelineSchedule::kGpipe && !c.training &&
          has(PipelineSchedule::kOneForwardOneBackward))
        continue;
      if (schedule != PipelineSchedule::kInterleaved) {
        with(schedule, 1);
        continue;
      }
      for (int64_t k : chunks) {
        if (k > 1 && pp * k <= c.layers && base.microbatches() % pp == 0) with(schedule, k);
      }
    }
    return out;
  });
}

}  // namespace autopar::paradigm_files
