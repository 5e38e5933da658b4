// A published-runs suite file `autopar validate` reads (configs/validation/*.yaml), and the
// step times its figures imply.
#include "autopar/cost/validation.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  auto runs = parse_validation_file(fuzz::as_text(data, size), "fuzz.yaml");
  if (!runs.is_ok()) return 0;
  for (const ValidationRun& run : *runs) {
    auto parameters = zoo_parameter_count(run.zoo, run.model);
    (void)published_step_seconds(run, parameters.is_ok() ? *parameters : 0);
  }
  return 0;
}
