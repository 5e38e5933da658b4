// ZeRO: optimizer state (stage 1), accumulated gradients (2) and parameters (3) held as dp
// shards. The update runs on each replica's shard; the new parameters are all-gathered into
// their storage layout (stages 1, 2) or stay shards that every use gathers (3).
#include "autopar/cost/hardware_profile.h"
#include "paradigms.h"

namespace autopar {
namespace {

const std::initializer_list<std::pair<const char*, MemoryPolicy>> kMemoryPolicies = {
    {"autopar", MemoryPolicy::kAutopar},
    {"megatron", MemoryPolicy::kMegatron},
    {"deepspeed", MemoryPolicy::kDeepSpeed},
    {"fsdp", MemoryPolicy::kFsdp}};

}  // namespace

const char* memory_policy_name(MemoryPolicy policy) { return name_of(policy, kMemoryPolicies); }

std::optional<MemoryPolicy> memory_policy_named(std::string_view name) {
  return value_named(name, kMemoryPolicies);
}

bool holds_weight_copies(MemoryPolicy policy) {
  return policy == MemoryPolicy::kMegatron || policy == MemoryPolicy::kDeepSpeed;
}

bool accumulates_in_gemm(MemoryPolicy policy) { return policy == MemoryPolicy::kMegatron; }

bool regathers_sequence_shards(MemoryPolicy policy) { return policy != MemoryPolicy::kFsdp; }

MemoryPolicy memory_policy_of(const Scheme& scheme, const HardwareProfile* profile) {
  return scheme.memory_policy.value_or(profile ? profile->memory_policy : MemoryPolicy::kAutopar);
}

}  // namespace autopar

namespace autopar::paradigm_files {

Status configure_zero(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  policy.spmd.zero = scheme.dp() > 1 ? scheme.zero : 0;
  return Status::ok();
}

Status parse_zero(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
  if (const YAML::Node policy = root["memory_policy"]) {
    ASSIGN_OR_RETURN(s.memory_policy, r.choice(policy, "memory_policy", kMemoryPolicies));
  }
  const YAML::Node zero = root["zero"];
  if (!zero) return Status::ok();
  ASSIGN_OR_RETURN(int64_t stage, r.integer(zero, "zero"));
  if (stage < 0 || stage > 3) return r.fail("zero", "{} is not a ZeRO stage (0, 1, 2 or 3)", stage);
  s.zero = static_cast<int>(stage);
  return Status::ok();
}

}  // namespace autopar::paradigm_files
