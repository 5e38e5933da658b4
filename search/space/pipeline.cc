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

}  // namespace autopar::space
