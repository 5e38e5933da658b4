// The paradigms, in the order their decisions compose.
#include <map>
#include <string>

#include "paradigms.h"

namespace autopar {

namespace {

std::vector<Paradigm>& registry() {
  using namespace paradigm_files;
  static std::vector<Paradigm> list = {
      {.name = "data", .configure = configure_data, .fields = {"batch"}, .parse = parse_data},
      {.name = "attribute", .configure = configure_attribute},
      {.name = "context",
       .configure = configure_context,
       .fields = {"context"},
       .parse = parse_context,
       .search = {"context", true, search_context}},
      {.name = "operator",
       .configure = configure_operator,
       .fields = {"tensor"},
       .parse = parse_operator,
       .search = {"tensor", true, search_operator}},
      {.name = "zero",
       .configure = configure_zero,
       .fields = {"zero", "memory_policy"},
       .parse = parse_zero,
       .search = {"zero", true, search_zero}},
      {.name = "pipeline",
       .configure = configure_pipeline,
       .fields = {"pipeline"},
       .parse = parse_pipeline,
       .search = {"pipeline", false, search_pipeline}},
      {.name = "recompute",
       .configure = configure_recompute,
       .fields = {"recompute"},
       .parse = parse_recompute,
       .search = {"recompute", false, search_recompute}},
      {.name = "precision",
       .configure = configure_precision,
       .fields = {"precision"},
       .parse = parse_precision,
       .search = {"precision", true, search_precision}},
      {.name = "kernels",
       .configure = configure_kernels,
       .fields = {"kernels"},
       .parse = parse_kernels},
  };
  return list;
}

}  // namespace

const std::vector<Paradigm>& paradigms() { return registry(); }

Status register_paradigm(Paradigm paradigm) {
  if (paradigm.name.empty() || !paradigm.configure)
    return error("register_paradigm: a paradigm needs a name and a configure function");
  if (paradigm.search.field.empty() != !paradigm.search.parse)
    return error("register_paradigm: paradigm '{}': a search dimension needs a field and a parse",
                 paradigm.name);
  // Who owns each top-level field of a scheme, and of a search space.
  std::map<std::string, std::string> scheme = {{"mesh", "the mesh"}, {"devices", "the mesh"}};
  std::map<std::string, std::string> space = {
      {"mesh", "the search"}, {"constraints", "the search"}, {"batch", "the search"}};
  for (const Paradigm& p : registry()) {
    if (p.name == paradigm.name)
      return error("register_paradigm: a paradigm named '{}' is registered already", p.name);
    for (const std::string& f : p.fields) scheme[f] = fmt::format("paradigm '{}'", p.name);
    if (!p.search.field.empty()) space[p.search.field] = fmt::format("paradigm '{}'", p.name);
  }
  for (const std::string& f : paradigm.fields) {
    if (auto owner = scheme.find(f); owner != scheme.end())
      return error("register_paradigm: paradigm '{}': scheme field '{}' belongs to {}",
                   paradigm.name, f, owner->second);
  }
  if (auto owner = space.find(paradigm.search.field); owner != space.end())
    return error("register_paradigm: paradigm '{}': search-space field '{}' belongs to {}",
                 paradigm.name, paradigm.search.field, owner->second);
  registry().push_back(std::move(paradigm));
  return Status::ok();
}

}  // namespace autopar
