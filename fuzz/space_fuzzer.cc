// Search-space YAML (`autotune --space`, configs/spaces/).
#include "autopar/search/space.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  (void)parse_search_space(fuzz::as_text(data, size), "fuzz.yaml");
  return 0;
}
