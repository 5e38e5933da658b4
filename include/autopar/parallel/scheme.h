// Scheme: one point of the search space, the declarative description of a parallel plan.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/parallel/device_mesh.h"
#include "autopar/parallel/kernel_choice.h"
#include "autopar/parallel/memory_policy.h"
#include "autopar/support/status.h"

namespace autopar {

enum class PipelineSchedule : uint8_t { kGpipe, kOneForwardOneBackward, kInterleaved };
enum class TensorStrategy : uint8_t { kMegatron, kMegatronSp, kAuto };
enum class Recompute : uint8_t { kNone, kSelective, kNonParametric, kFull };
enum class Precision : uint8_t { kFp32, kBf16, kFp16 };
// How context parallelism (mesh axis cp) splits attention: ring attention or all-to-all over
// heads (DeepSpeed-Ulysses).
enum class ContextForm : uint8_t { kRing, kAllToAll };

const char* schedule_name(PipelineSchedule schedule);
const char* tensor_strategy_name(TensorStrategy strategy);
const char* recompute_name(Recompute recompute);
const char* precision_name(Precision precision);
const char* context_form_name(ContextForm form);

// Per-op override of the tensor strategy: nodes whose name matches `pattern` (a glob with *)
// use `layout` for their first output.
struct OpOverride {
  std::string pattern;
  std::string strategy;
  bool operator==(const OpOverride&) const = default;
};

struct Scheme {
  DeviceMesh mesh;                 // default {dp: 1}
  std::optional<int64_t> devices;  // when given, must equal the mesh's product
  int64_t global_batch = 0;        // 0: the model's batch
  int64_t micro_batch = 0;         // samples per microbatch per dp replica; 0: global / dp
  PipelineSchedule schedule = PipelineSchedule::kOneForwardOneBackward;
  int64_t chunks = 1;  // virtual stages per device (interleaved)
  // Layer ranges [first, last] per stage; empty: balanced automatically.
  std::vector<std::pair<int32_t, int32_t>> stages;
  TensorStrategy tensor = TensorStrategy::kMegatron;
  std::vector<OpOverride> overrides;
  int zero = 0;  // 0..3
  Recompute recompute = Recompute::kNone;
  Precision precision = Precision::kFp32;
  ContextForm context = ContextForm::kRing;  // written when the mesh has cp > 1
  // The memory policy the scheme is priced under; unset: the hardware profile's.
  std::optional<MemoryPolicy> memory_policy;
  // `kernels: {attention: ..., fusions: [...]}`; unset: the hardware profile's
  // (kernel_choice.h).
  std::optional<AttentionKernel> attention;
  std::optional<std::set<Fusion>> fusions;
  // `kernels: {memory_format: nhwc|nchw}`; unset: the hardware profile's.
  std::optional<MemoryFormat> memory_format;
  // Fields of paradigms without a parse function of their own (Paradigm::parse), as a
  // registered paradigm may be: field name → its value's YAML text, read and checked by the
  // paradigm's configure.
  std::map<std::string, std::string> extensions;

  int64_t dp() const { return mesh.size("dp"); }
  int64_t pp() const { return mesh.size("pp"); }
  int64_t tp() const { return mesh.size("tp"); }
  int64_t sp() const { return mesh.size("sp"); }
  int64_t cp() const { return mesh.size("cp"); }
  // Microbatches per step: global / (dp · micro).
  int64_t microbatches() const;

  // The YAML text, every field written (defaults included), in the field order of the docs.
  std::string to_yaml() const;
  bool operator==(const Scheme&) const = default;
};

// The mesh axis whose splits hold chunk pairs (member r of n: chunks r and 2·n − 1 − r of
// 2·n): cp under ring attention; empty otherwise.
std::string_view zigzag_axis(const Scheme& scheme);

// Parses a scheme; errors are one line "<source>: <field>: <what>". The mesh and devices are
// read here, every other field by the paradigm that owns it (Paradigm::fields, parse), which
// checks what the scheme alone decides: micro dividing global/dp, chunks only with the
// interleaved schedule, stage ranges ordered, zero in 0..3.
StatusOr<Scheme> parse_scheme(std::string_view yaml, std::string_view source);
StatusOr<Scheme> read_scheme_file(const std::string& path);

// Checks the scheme against a model: the global batch divisible by dp, no more stages than
// layers (times chunks), stage ranges within the model's layers.
Status validate_scheme(const Scheme& scheme, const Graph& model, std::string_view source);

}  // namespace autopar
