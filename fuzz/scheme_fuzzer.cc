// Scheme YAML (`transform --scheme`, configs/schemes/): a scheme that parses lowers the mlp
// and gpt-tiny models shape-only or fails with a Status. As the search does, the lowerings of
// one model share its prepared graphs and node strategies, and a scheme lowered once (the same
// scheme written another way) is not lowered again: the fuzzer's time goes to new schemes.
#include <map>
#include <memory>
#include <set>

#include "autopar/parallel/lowering.h"
#include "autopar/parallel/op_strategy.h"
#include "autopar/parallel/scheme.h"
#include "fuzz_support.h"

namespace autopar::fuzz {
namespace {

// Bounds on what the caches keep, so a long run's memory stays flat.
constexpr size_t kMaxSchemesRemembered = 200000;
constexpr size_t kMaxPreparedGraphs = 256;

struct ModelCaches {
  std::map<std::string, std::shared_ptr<const PreparedGraph>> prepared;
  std::shared_ptr<StrategyCache> strategies = std::make_shared<StrategyCache>();
};

LoweringOptions options_for(ModelCaches& caches) {
  LoweringOptions options;
  options.shapes_only = true;
  options.strategies = caches.strategies;
  options.prepared = [&caches](const std::string& key,
                               const std::function<StatusOr<PreparedGraph>()>& make)
      -> StatusOr<std::shared_ptr<const PreparedGraph>> {
    if (auto it = caches.prepared.find(key); it != caches.prepared.end()) return it->second;
    ASSIGN_OR_RETURN(PreparedGraph graph, make());
    if (caches.prepared.size() >= kMaxPreparedGraphs) caches.prepared.clear();
    auto shared = std::make_shared<const PreparedGraph>(std::move(graph));
    caches.prepared.emplace(key, shared);
    return shared;
  };
  return options;
}

}  // namespace
}  // namespace autopar::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  auto scheme = parse_scheme(fuzz::as_text(data, size), "fuzz.yaml");
  if (!scheme.is_ok()) return 0;
  static std::set<std::string> lowered;
  if (lowered.size() >= fuzz::kMaxSchemesRemembered) lowered.clear();
  if (!lowered.insert(scheme->to_yaml()).second) return 0;
  static std::map<std::string, fuzz::ModelCaches> caches;
  for (const char* model : {"mlp", "gpt-tiny"}) {
    (void)lower(fuzz::tiny_model(model), *scheme, fuzz::options_for(caches[model]));
  }
  return 0;
}
