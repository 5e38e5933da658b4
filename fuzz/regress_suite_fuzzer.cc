// The plan-quality suite YAML `autopar regress` reads (configs/regress/suite.yaml).
#include "autopar/search/regress_suite.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  (void)parse_regress_suite(fuzz::as_text(data, size), "fuzz.yaml", AUTOPAR_CONFIG_DIR);
  return 0;
}
