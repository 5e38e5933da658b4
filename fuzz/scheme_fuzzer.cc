// Scheme YAML (`transform --scheme`, configs/schemes/): a scheme that parses lowers the mlp
// and gpt-tiny models shape-only or fails with a Status.
#include "autopar/parallel/lowering.h"
#include "autopar/parallel/scheme.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  auto scheme = parse_scheme(fuzz::as_text(data, size), "fuzz.yaml");
  if (!scheme.is_ok()) return 0;
  LoweringOptions options;
  options.shapes_only = true;
  for (const char* model : {"mlp", "gpt-tiny"})
    (void)lower(fuzz::tiny_model(model), *scheme, options);
  return 0;
}
