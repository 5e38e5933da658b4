// The paradigms, in the order their decisions compose.
#include "paradigms.h"

namespace autopar {

namespace {

std::vector<Paradigm>& registry() {
  static std::vector<Paradigm> list = {
      {"data", paradigm_files::configure_data, {"batch"}, paradigm_files::parse_data},
      {"attribute", paradigm_files::configure_attribute},
      {"context", paradigm_files::configure_context, {"context"}, paradigm_files::parse_context},
      {"operator", paradigm_files::configure_operator, {"tensor"}, paradigm_files::parse_operator},
      {"zero",
       paradigm_files::configure_zero,
       {"zero", "memory_policy"},
       paradigm_files::parse_zero},
      {"pipeline",
       paradigm_files::configure_pipeline,
       {"pipeline"},
       paradigm_files::parse_pipeline},
      {"recompute",
       paradigm_files::configure_recompute,
       {"recompute"},
       paradigm_files::parse_recompute},
      {"precision",
       paradigm_files::configure_precision,
       {"precision"},
       paradigm_files::parse_precision},
      {"kernels", paradigm_files::configure_kernels, {"kernels"}, paradigm_files::parse_kernels},
  };
  return list;
}

}  // namespace

const std::vector<Paradigm>& paradigms() { return registry(); }

void register_paradigm(Paradigm paradigm) { registry().push_back(std::move(paradigm)); }

}  // namespace autopar
