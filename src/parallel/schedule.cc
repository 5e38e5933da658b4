// Pipeline schedules, and a check that a plan's schedules cannot deadlock.
#include <algorithm>
#include <map>
#include <tuple>

#include "autopar/parallel/lowering.h"

namespace autopar {

int64_t warmup_forwards(PipelineSchedule schedule, int64_t rank, int64_t ranks, int64_t chunks,
                        int64_t microbatches) {
  if (chunks > 1) {
    // Interleaved: the deeper pipeline of ranks × chunks virtual stages.
    const int64_t total = microbatches * chunks;
    return std::min(total,
                    microbatches == ranks ? total : (ranks - rank - 1) * 2 + (chunks - 1) * ranks);
  }
  if (schedule == PipelineSchedule::kGpipe) return microbatches;
  return std::min(ranks - rank - 1, microbatches);
}

std::vector<ScheduleStep> make_schedule(PipelineSchedule schedule, int64_t rank, int64_t ranks,
                                        int64_t chunks, int64_t microbatches, bool training) {
  using K = ProgramKind;
  std::vector<ScheduleStep> steps;
  const auto m = static_cast<int32_t>(microbatches);
  if (!training) {
    for (int32_t c = 0; c < chunks; ++c) {
      for (int32_t i = 0; i < m; ++i) steps.push_back({K::kForward, c, i});
    }
    return steps;
  }
  if (chunks > 1) {
    // Interleaved 1F1B (Narayanan et al. 2021, as Megatron-LM orders it): microsteps walk
    // groups of `ranks` microbatches through the chunks; warm-up covers the deeper pipeline.
    const int64_t total = microbatches * chunks;
    auto forward_at = [&](int64_t k) {
      const auto chunk = static_cast<int32_t>((k / ranks) % chunks);
      const auto micro = static_cast<int32_t>((k / (ranks * chunks)) * ranks + k % ranks);
      return ScheduleStep{K::kForward, chunk, micro};
    };
    auto backward_at = [&](int64_t k) {
      const auto chunk = static_cast<int32_t>(chunks - 1 - (k / ranks) % chunks);
      const auto micro = static_cast<int32_t>((k / (ranks * chunks)) * ranks + k % ranks);
      return ScheduleStep{K::kBackward, chunk, micro};
    };
    const int64_t warmup = warmup_forwards(schedule, rank, ranks, chunks, microbatches);
    for (int64_t k = 0; k < warmup; ++k) steps.push_back(forward_at(k));
    for (int64_t k = 0; k < total - warmup; ++k) {
      steps.push_back(forward_at(warmup + k));
      steps.push_back(backward_at(k));
    }
    for (int64_t k = total - warmup; k < total; ++k) steps.push_back(backward_at(k));
  } else if (schedule == PipelineSchedule::kGpipe) {
    for (int32_t i = 0; i < m; ++i) steps.push_back({K::kForward, 0, i});
    for (int32_t i = 0; i < m; ++i) steps.push_back({K::kBackward, 0, i});
  } else {
    // 1F1B: ranks − rank − 1 warm-up forwards, then one forward and one backward, then the
    // remaining backwards.
    const auto warmup =
        static_cast<int32_t>(warmup_forwards(schedule, rank, ranks, chunks, microbatches));
    for (int32_t i = 0; i < warmup; ++i) steps.push_back({K::kForward, 0, i});
    for (int32_t i = 0; i < m - warmup; ++i) {
      steps.push_back({K::kForward, 0, warmup + i});
      steps.push_back({K::kBackward, 0, i});
    }
    for (int32_t i = m - warmup; i < m; ++i) steps.push_back({K::kBackward, 0, i});
  }
  steps.push_back({K::kUpdate, 0, 0});
  return steps;
}

Status check_schedule(const std::vector<Role>& roles) {
  struct Io {
    std::vector<std::pair<int64_t, int64_t>> recvs;  // (peer, tag)
    std::vector<std::pair<int64_t, int64_t>> sends;
  };
  // Per role and program: its receives and sends.
  std::vector<std::map<std::pair<ProgramKind, int32_t>, Io>> io(roles.size());
  for (const Role& role : roles) {
    for (const Program& prog : role.programs) {
      Io& x = io[role.id][{prog.kind, prog.chunk}];
      for (int32_t n = prog.begin; n < prog.end; ++n) {
        const Node& node = role.graph.node(n);
        if (node.domain != kAutoparDomain) continue;
        const int64_t peer = node.attr_int("peer_coord", -1), tag = node.attr_int("tag", 0);
        if (node.op_type == "Recv") x.recvs.emplace_back(peer, tag);
        if (node.op_type == "Send") x.sends.emplace_back(peer, tag);
      }
    }
  }
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> in_flight;  // (from, to, tag)
  std::vector<size_t> next(roles.size(), 0);
  size_t remaining = 0;
  for (const Role& role : roles) remaining += role.schedule.size();
  while (remaining > 0) {
    bool progress = false;
    for (const Role& role : roles) {
      while (next[role.id] < role.schedule.size()) {
        const ScheduleStep& step = role.schedule[next[role.id]];
        auto it = io[role.id].find({step.kind, step.chunk});
        if (it == io[role.id].end()) {
          return error("rank {}: schedule step {} has no program", role.id, step.to_string());
        }
        bool ready = true;
        std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> need;
        for (const auto& [peer, tag] : it->second.recvs) ++need[{peer, role.id, tag}];
        for (const auto& [channel, count] : need) ready &= in_flight[channel] >= count;
        if (!ready) break;
        for (const auto& [channel, count] : need) in_flight[channel] -= count;
        for (const auto& [peer, tag] : it->second.sends) ++in_flight[{role.id, peer, tag}];
        ++next[role.id];
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      std::vector<std::string> stuck;
      for (const Role& role : roles) {
        if (next[role.id] < role.schedule.size())
          stuck.push_back(
              fmt::format("rank {} at {}", role.id, role.schedule[next[role.id]].to_string()));
      }
      return error("the pipeline schedule deadlocks: {}", fmt::join(stuck, ", "));
    }
  }
  return Status::ok();
}

}  // namespace autopar
