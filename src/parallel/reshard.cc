// reshard: one axis at a time, in the order that keeps every intermediate layout valid.
#include "autopar/parallel/reshard.h"

#include <algorithm>

namespace autopar {
namespace {

bool is_partial(const Layout& l, const std::string& axis) { return l.is_partial_over(axis); }

// Position of `axis` among the axes splitting its dim (0 = major), or -1.
int64_t depth(const Layout& l, const std::string& axis) {
  const int64_t dim = l.dim_of(axis);
  if (dim < 0) return -1;
  const auto& axes = l.dim_axes(dim);
  return std::find(axes.begin(), axes.end(), axis) - axes.begin();
}

}  // namespace

std::string ReshardStep::to_string() const {
  switch (kind) {
    case Kind::kAllReduce:
      return fmt::format("all-reduce({})", axis);
    case Kind::kReduceScatter:
      return fmt::format("reduce-scatter({}, dim {})", axis, dim);
    case Kind::kAllGather:
      return fmt::format("all-gather({}, dim {})", axis, dim);
    case Kind::kAllToAll:
      return fmt::format("all-to-all({}, dim {} -> {})", axis, dim, to_dim);
    case Kind::kSlice:
      return fmt::format("slice({}, dim {})", axis, dim);
    case Kind::kShare:
      return fmt::format("share({})", axis);
  }
  return "?";
}

StatusOr<std::vector<ReshardStep>> reshard_steps(const Layout& from, const Layout& to,
                                                 const std::vector<int64_t>& shape,
                                                 const DeviceMesh& mesh) {
  RETURN_IF_ERROR(from.validate(shape, mesh));
  RETURN_IF_ERROR(to.validate(shape, mesh));
  using Kind = ReshardStep::Kind;
  std::vector<ReshardStep> steps;
  Layout at = from;
  auto apply = [&](ReshardStep step, Layout next) -> Status {
    if (Status valid = next.validate(shape, mesh); !valid.is_ok())
      return valid.with_context(fmt::format("after {}", step.to_string()));
    step.axis_id = find_axis(step.axis);
    steps.push_back(std::move(step));
    at = std::move(next);
    return Status::ok();
  };
  // A split stays where `to` has it only if every axis before it in that dim stays too.
  auto stays = [&](const std::string& axis) {
    const int64_t dim = at.dim_of(axis);
    if (dim < 0 || to.dim_of(axis) != dim) return false;
    const auto& now = at.dim_axes(dim);
    const auto& want = to.dim_axes(dim);
    const int64_t d = depth(at, axis);
    return d < static_cast<int64_t>(want.size()) &&
           std::equal(now.begin(), now.begin() + d + 1, want.begin());
  };
  for (const MeshAxis& mesh_axis : mesh.axes()) {
    const std::string& axis = mesh_axis.name;
    if (at.dim_of(axis) >= 0 && is_partial(to, axis)) {
      return error("a tensor split over {} cannot become a partial sum over it", axis);
    }
  }
  // 1. Gathers: splits that do not stay and do not move by all-to-all (minor first).
  bool changed = true;
  while (changed) {
    changed = false;
    for (int64_t dim = 0; dim < at.rank(); ++dim) {
      const auto axes = at.dim_axes(dim);
      for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
        const std::string& axis = *it;
        if (stays(axis)) continue;
        const bool minor = axis == axes.back();
        const int64_t target = to.dim_of(axis);
        // An axis that moves to another dim and is minor here is an all-to-all later.
        if (target >= 0 && target != dim && minor) continue;
        if (!minor) continue;
        RETURN_IF_ERROR(apply({Kind::kAllGather, axis, dim, -1}, at.without(axis)));
        changed = true;
        break;
      }
      if (changed) break;
    }
  }
  // 2. Partial sums: reduce-scatter onto the dim `to` splits, else all-reduce.
  // A new split lands as the most minor of its dim: it is right only where the dim's current
  // axes are what `to` puts before it.
  auto lands_right = [&](const std::string& axis, int64_t target) {
    const auto& now = at.dim_axes(target);
    const auto& want = to.dim_axes(target);
    return now.size() < want.size() && std::equal(now.begin(), now.end(), want.begin()) &&
           want[now.size()] == axis;
  };
  for (const std::string& axis : std::vector<std::string>(at.partial_axes())) {
    const int64_t target = to.dim_of(axis);
    Layout resolved = at.without(axis);
    if (target >= 0 && lands_right(axis, target)) {
      RETURN_IF_ERROR(
          apply({Kind::kReduceScatter, axis, target, -1}, resolved.with_split(target, axis)));
    } else if (!is_partial(to, axis)) {
      RETURN_IF_ERROR(apply({Kind::kAllReduce, axis, -1, -1}, std::move(resolved)));
    }
  }
  // 3. All-to-alls: a split moving to another dim. Only the most minor split of a dim can
  // leave it (its shards are contiguous), so moves repeat until none is left.
  changed = true;
  while (changed) {
    changed = false;
    for (const MeshAxis& mesh_axis : mesh.axes()) {
      const std::string& axis = mesh_axis.name;
      const int64_t now = at.dim_of(axis), target = to.dim_of(axis);
      if (now < 0 || target < 0 || now == target) continue;
      if (at.dim_axes(now).back() != axis) continue;
      if (lands_right(axis, target)) {
        RETURN_IF_ERROR(apply({Kind::kAllToAll, axis, now, target}, at.with_split(target, axis)));
      } else {
        RETURN_IF_ERROR(apply({Kind::kAllGather, axis, now, -1}, at.without(axis)));
      }
      changed = true;
    }
  }
  // Splits still in the wrong place (under another axis of their dim) are gathered, minor
  // first, and sliced again below.
  for (int64_t dim = 0; dim < at.rank(); ++dim) {
    std::vector<std::string> axes = at.dim_axes(dim);
    while (!axes.empty() && !stays(axes.back())) {
      RETURN_IF_ERROR(apply({Kind::kAllGather, axes.back(), dim, -1}, at.without(axes.back())));
      axes.pop_back();
    }
  }
  // 4. Slices: replicated axes `to` splits, in `to`'s major-to-minor order per dim.
  for (int64_t dim = 0; dim < to.rank(); ++dim) {
    for (const std::string& axis : to.dim_axes(dim)) {
      if (at.dim_of(axis) == dim) continue;
      RETURN_IF_ERROR(apply({Kind::kSlice, axis, dim, -1}, at.with_split(dim, axis)));
    }
  }
  // 5. Shares: a replicated tensor `to` wants as a partial sum (an additive operand of a split
  // reduction) is kept by one member and zero on the others.
  for (const std::string& axis : std::vector<std::string>(to.partial_axes())) {
    if (at.is_partial_over(axis) || at.uses(axis)) continue;
    RETURN_IF_ERROR(apply({Kind::kShare, axis, -1, -1}, at.with_partial(axis)));
  }
  if (!(at == to)) {
    return error("cannot reshard {} to {} (reached {})", from.to_string(), to.to_string(),
                 at.to_string());
  }
  return steps;
}

}  // namespace autopar
