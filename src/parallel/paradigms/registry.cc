// The paradigms, in the order their decisions compose.
#include "paradigms.h"

namespace autopar {

namespace {

std::vector<Paradigm>& registry() {
  static std::vector<Paradigm> list = {
      {"data", paradigm_files::configure_data},
      {"attribute", paradigm_files::configure_attribute},
      {"operator", paradigm_files::configure_operator},
      {"zero", paradigm_files::configure_zero},
      {"pipeline", paradigm_files::configure_pipeline},
      {"recompute", paradigm_files::configure_recompute},
      {"precision", paradigm_files::configure_precision},
  };
  return list;
}

}  // namespace

const std::vector<Paradigm>& paradigms() { return registry(); }

void register_paradigm(Paradigm paradigm) {
  for (const std::string& field : paradigm.fields) register_scheme_field(field);
  registry().push_back(std::move(paradigm));
}

}  // namespace autopar
