// The paradigms, in the order their decisions compose.
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

void register_paradigm(Paradigm paradigm) { registry().push_back(std::move(paradigm)); }

}  // namespace autopar
