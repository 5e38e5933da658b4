// Pipeline parallelism's choices: schedules and chunks (virtual stages per rank).
#include "dimensions.h"

namespace autopar::space {

Status parse_pipeline(const YAML::Node& node, const Reader& r, SearchSpace& space) {
  if (!node.IsMap()) return r.fail("pipeline", "expected {{schedules: [...], chunks: [...]}}");
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    if (key == "schedules") {
      const std::vector<PipelineSchedule> all = {PipelineSchedule::kGpipe,
                                                 PipelineSchedule::kOneForwardOneBackward,
                                                 PipelineSchedule::kInterleaved};
      std::vector<std::string> names;
      for (PipelineSchedule s : all) names.emplace_back(schedule_name(s));
      ASSIGN_OR_RETURN(std::vector<size_t> picked,
                       r.names(entry.second, "pipeline.schedules", names));
      space.schedules.clear();
      for (size_t i : picked) space.schedules.push_back(all[i]);
    } else if (key == "chunks") {
      ASSIGN_OR_RETURN(AxisChoices chunks, r.degrees(entry.second, "pipeline.chunks"));
      if (chunks.automatic) return r.fail("pipeline.chunks", "expected a list, e.g. [1, 2, 4]");
      space.chunks = chunks.values;
    } else {
      return r.fail("pipeline." + key, "unknown field (known: schedules, chunks)");
    }
  }
  return Status::ok();
}

// One scheme per schedule the space allows: under pp > 1, each schedule, interleaved with each
// chunk count that fits the layers and divides the microbatches over pp; without pp, 1F1B.
std::vector<Scheme> expand_pipeline(const Scheme& base, const SearchSpace& space, int32_t layers) {
  std::vector<Scheme> out;
  auto with = [&](PipelineSchedule schedule, int64_t chunks) {
    Scheme s = base;
    s.schedule = schedule;
    s.chunks = chunks;
    out.push_back(std::move(s));
  };
  const int64_t pp = base.pp();
  if (pp == 1) {
    with(PipelineSchedule::kOneForwardOneBackward, 1);
    return out;
  }
  for (PipelineSchedule schedule : space.schedules) {
    if (schedule != PipelineSchedule::kInterleaved) {
      with(schedule, 1);
      continue;
    }
    for (int64_t chunks : space.chunks) {
      if (chunks > 1 && pp * chunks <= layers && base.microbatches() % pp == 0)
        with(schedule, chunks);
    }
  }
  return out;
}

}  // namespace autopar::space
