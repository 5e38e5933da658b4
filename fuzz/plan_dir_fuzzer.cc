// Plan directories as `run PLAN`, `verify` and `profile` load them: manifest.yaml and the
// role files, packed (fuzz_support.h) and unpacked into a directory; the plan the manifest
// records is rebuilt shape-only and compared with the role files.
#include <fmt/format.h>

#include "cli/plan_command.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  const auto parts = fuzz::unpack(fuzz::as_text(data, size));
  fuzz::ScratchDir dir;
  if (!dir.write("manifest.yaml", parts[0])) return 0;
  for (size_t k = 1; k < parts.size(); ++k) {
    if (!dir.write(fmt::format("role_{}.onnx", k - 1), parts[k])) return 0;
  }
  (void)cli::load_plan(dir.path(), false);
  return 0;
}
