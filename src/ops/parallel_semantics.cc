// Iteration spaces: the text form and the registry lookup.
#include "autopar/ops/parallel_semantics.h"

#include "autopar/ops/op_def.h"

namespace autopar {

int IterationSpace::find(std::string_view name) const {
  for (size_t i = 0; i < loops.size(); ++i) {
    if (loops[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string IterationSpace::to_string() const {
  std::vector<std::string> parallel, reduction;
  for (const Loop& l : loops) {
    const std::string text = fmt::format("{}={}{}", l.name, l.extent, l.splittable ? "" : "!");
    (l.kind == LoopKind::kParallel ? parallel : reduction).push_back(text);
  }
  auto operands = [&](const std::vector<std::vector<int>>& maps) {
    std::vector<std::string> parts;
    for (const auto& map : maps) {
      std::vector<std::string> dims;
      for (int loop : map) dims.push_back(loop < 0 ? "1" : loops[loop].name);
      parts.push_back(fmt::format("[{}]", fmt::join(dims, ",")));
    }
    return fmt::format("{}", fmt::join(parts, " "));
  };
  std::string added;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (is_additive(i)) added += fmt::format(" +{}", i);
  }
  return fmt::format("{}{}{}: {} -> {}{}", fmt::join(parallel, " "), reduction.empty() ? "" : " | ",
                     fmt::join(reduction, " "), operands(inputs), operands(outputs), added);
}

std::optional<IterationSpace> iteration_space(const Graph& graph, const Node& node) {
  const OpDef* def = op_registry().find(node.domain, node.op_type);
  if (!def || !def->iteration_space) return std::nullopt;
  return def->iteration_space(graph, node);
}

}  // namespace autopar
