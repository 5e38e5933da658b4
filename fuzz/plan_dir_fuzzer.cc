// Plan directories as `run PLAN`, `verify` and `profile` load them: manifest.yaml and the
// role files, packed (fuzz_support.h). Every input's manifest is parsed; the first input whose
// manifest records a given plan (scheme and source) takes load_plan's whole path from a directory
// (the plan rebuilt shape-only and its role files compared byte for byte with the lowering's). Role
// files are only ever compared, never parsed, so inputs that change nothing but them, or the
// manifest's spelling, add nothing after that: the fuzzer's time goes to manifests.
#include <memory>
#include <set>

#include <fmt/format.h>

#include "autopar/parallel/plan.h"
#include "cli/plan_command.h"
#include "fuzz_support.h"

namespace {
constexpr size_t kMaxManifestsRemembered = 100000;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  const auto parts = fuzz::unpack(fuzz::as_text(data, size));
  auto manifest = parse_plan_manifest(parts[0], "manifest.yaml");
  if (!manifest.is_ok()) return 0;
  const PlanSource& source = manifest->source;
  std::string dims;
  for (const auto& [name, value] : source.dims) dims += fmt::format("{}={},", name, value);
  const std::string key = fmt::format(
      "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", manifest->scheme.to_yaml(), source.model,
      source.sha256, source.loss, source.optimizer, dims, source.no_fusion, source.keep_constants,
      source.hw, source.nodes, manifest->devices, manifest->roles, parts.size());
  static std::set<std::string> loaded;
  if (loaded.size() >= kMaxManifestsRemembered) loaded.clear();
  if (!loaded.insert(key).second) return 0;
  fuzz::ScratchDir dir;
  if (!dir.write("manifest.yaml", parts[0])) return 0;
  for (size_t k = 1; k < parts.size(); ++k) {
    if (!dir.write(fmt::format("role_{}.onnx", k - 1), parts[k])) return 0;
  }
  (void)cli::load_plan(dir.path(), false);
  return 0;
}
