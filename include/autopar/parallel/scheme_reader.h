// What a paradigm reads its scheme fields (Paradigm::parse) and its search-space choices
// (SearchDimension::parse) with: one-line errors "<source>: <field>: <what>" and the readers of
// the values both share.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "autopar/support/status.h"

namespace autopar {

class SchemeReader {
 public:
  explicit SchemeReader(std::string_view source) : source_(source) {}

  std::string_view source() const { return source_; }

  template <typename... Args>
  Status fail(std::string_view field, fmt::format_string<Args...> format, Args&&... args) const {
    return Status::error(fmt::format("{}: {}: {}", source_, field,
                                     fmt::format(format, std::forward<Args>(args)...)));
  }

  StatusOr<int64_t> integer(const YAML::Node& node, std::string_view field) const {
    if (!node.IsScalar()) return fail(field, "expected an integer");
    try {
      return node.as<int64_t>();
    } catch (const YAML::Exception&) {
      return fail(field, "'{}' is not an integer", node.Scalar());
    }
  }

  StatusOr<std::string> text(const YAML::Node& node, std::string_view field) const {
    if (!node.IsScalar()) return fail(field, "expected a name");
    return node.Scalar();
  }

  // One of `options` by name.
  template <typename Enum>
  StatusOr<Enum> choice(const YAML::Node& node, std::string_view field,
                        std::initializer_list<std::pair<const char*, Enum>> options) const {
    ASSIGN_OR_RETURN(std::string value, text(node, field));
    std::vector<std::string> names;
    for (const auto& [name, e] : options) {
      if (value == name) return e;
      names.emplace_back(name);
    }
    return fail(field, "'{}' is not one of {}", value, fmt::join(names, ", "));
  }

  // A list of names (one name alone: a list of one), each one of `allowed`: their positions in
  // it, in the order given, each once.
  StatusOr<std::vector<size_t>> names(const YAML::Node& node, std::string_view field,
                                      const std::vector<std::string>& allowed) const;
  // A list of integers of at least 1 (one alone: a list of one), ascending, each once.
  StatusOr<std::vector<int64_t>> sizes(const YAML::Node& node, std::string_view field) const;

  // Every key of mapping `node` (the field `field`; empty: the top level) is one of `keys`.
  Status known_keys(const YAML::Node& node, std::string_view field,
                    const std::vector<std::string>& keys) const {
    for (const auto& entry : node) {
      const std::string key = entry.first.Scalar();
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      return fail(field.empty() ? key : fmt::format("{}.{}", field, key),
                  "unknown field (known: {})", fmt::join(keys, ", "));
    }
    return Status::ok();
  }

 private:
  std::string_view source_;
};

// The YAML document `text` from `source`; a syntax error is one line "<source>: line N: <what>".
StatusOr<YAML::Node> load_yaml(std::string_view text, std::string_view source);

// The value named `name` among `options`; nullopt when none is.
template <typename Enum>
std::optional<Enum> value_named(std::string_view name,
                                std::initializer_list<std::pair<const char*, Enum>> options) {
  for (const auto& [n, e] : options) {
    if (name == n) return e;
  }
  return std::nullopt;
}

// The name of `value` among `options` ("?" when none).
template <typename Enum>
const char* name_of(Enum value, std::initializer_list<std::pair<const char*, Enum>> options) {
  for (const auto& [name, e] : options) {
    if (e == value) return name;
  }
  return "?";
}

}  // namespace autopar
