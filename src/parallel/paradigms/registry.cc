// The paradigms, in the order their decisions compose.
#include "paradigms.h"

namespace autopar {

const std::vector<Paradigm>& paradigms() {
  static const std::vector<Paradigm> list = {
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

}  // namespace autopar
