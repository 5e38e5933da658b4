// The graph text form (ir/text.h): what parses prints back to text that parses to the same
// text.
#include <cstdio>
#include <cstdlib>

#include "autopar/ir/text.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  auto graph = parse(fuzz::as_text(data, size), "fuzz.txt");
  if (!graph.is_ok()) return 0;
  const std::string printed = print(*graph);
  auto again = parse(printed, "printed");
  if (!again.is_ok()) {
    std::fprintf(stderr, "the printed graph does not parse: %s\n%s\n",
                 again.status().message().c_str(), printed.c_str());
    std::abort();
  }
  if (print(*again) != printed) {
    std::fprintf(stderr, "printing is not a fixed point:\n%s\n---\n%s\n", printed.c_str(),
                 print(*again).c_str());
    std::abort();
  }
  return 0;
}
