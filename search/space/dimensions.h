// The fields of a search space, one file per paradigm: each reads its YAML field into the
// space. A new paradigm adds its choices by adding a file here and an entry in dimensions().
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "autopar/search/space.h"

namespace autopar::space {

// One-line errors "<source>: <field>: <what>" and the scalar readers the fields share.
struct Reader {
  std::string source;

  template <typename... Args>
  Status fail(std::string_view field, fmt::format_string<Args...> format, Args&&... args) const {
    return error("{}: {}: {}", source, field, fmt::format(format, std::forward<Args>(args)...));
  }
  StatusOr<int64_t> integer(const YAML::Node& node, std::string_view field) const;
  // A list of positive integers, or `auto`.
  StatusOr<AxisChoices> degrees(const YAML::Node& node, std::string_view field) const;
  // A non-empty list of names, each one of `names` (their position in it is the value).
  StatusOr<std::vector<size_t>> names(const YAML::Node& node, std::string_view field,
                                      const std::vector<std::string>& allowed) const;
};

// What the search varies along one dimension: `expand` gives the schemes the space's values
// make of `base` (each value set on it, where the scheme allows it); `relowers` says whether
// they change the SPMD lowering (configurations, each priced by layer costs of its own) or only
// the closed form over one configuration's layer costs (pipeline schedules, recompute).
struct Choices {
  bool relowers = true;
  std::function<std::vector<Scheme>(const Scheme& base, const SearchSpace& space, int32_t layers)>
      expand;
};

struct Dimension {
  std::string_view field;  // the top-level YAML key
  std::function<Status(const YAML::Node&, const Reader&, SearchSpace&)> parse;
  Choices choices = {};  // none: the dimension shapes the meshes or the batch (the engine's own)
};
const std::vector<Dimension>& dimensions();

Status parse_mesh(const YAML::Node& node, const Reader& r, SearchSpace& space);
Status parse_constraints(const YAML::Node& node, const Reader& r, SearchSpace& space);
Status parse_batch(const YAML::Node& node, const Reader& r, SearchSpace& space);
Status parse_pipeline(const YAML::Node& node, const Reader& r, SearchSpace& space);
Status parse_context(const YAML::Node& node, const Reader& r, SearchSpace& space);
Status parse_tensor(const YAML::Node& node, const Reader& r, SearchSpace& space);
Status parse_zero(const YAML::Node& node, const Reader& r, SearchSpace& space);
Status parse_recompute(const YAML::Node& node, const Reader& r, SearchSpace& space);
Status parse_precision(const YAML::Node& node, const Reader& r, SearchSpace& space);

// One scheme per value of `values`, `set` giving it to a copy of `base`.
template <typename T, typename Set>
std::vector<Scheme> one_per(const Scheme& base, const std::vector<T>& values, Set set) {
  std::vector<Scheme> out;
  for (const T& value : values) {
    out.push_back(base);
    set(out.back(), value);
  }
  return out;
}

std::vector<Scheme> expand_pipeline(const Scheme& base, const SearchSpace& space, int32_t layers);
std::vector<Scheme> expand_context(const Scheme& base, const SearchSpace& space, int32_t layers);
std::vector<Scheme> expand_tensor(const Scheme& base, const SearchSpace& space, int32_t layers);
std::vector<Scheme> expand_zero(const Scheme& base, const SearchSpace& space, int32_t layers);
std::vector<Scheme> expand_recompute(const Scheme& base, const SearchSpace& space, int32_t layers);
std::vector<Scheme> expand_precision(const Scheme& base, const SearchSpace& space, int32_t layers);

}  // namespace autopar::space
