// The plan-quality baseline JSON `autopar regress --baseline` reads
// (bench/baselines/plan_quality.json).
#include "autopar/search/regress_suite.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  (void)parse_regress_baseline(fuzz::as_text(data, size), "fuzz.json");
  return 0;
}
