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

bool regathers_parameters(MemoryPolicy policy, const Scheme& scheme) {
  return policy != MemoryPolicy::kAutopar && scheme.dp() > 1 && scheme.zero == 3;
}

MemoryPolicy memory_policy_of(const Scheme& scheme, const HardwareProfile* profile) {
  return scheme.memory_policy.value_or(profile ? profile->memory_policy : MemoryPolicy::kAutopar);
}

std::optional<FrameworkState> framework_state(MemoryPolicy policy, const Scheme& scheme,
                                              double parameter_elements,
                                              double optimizer_slot_bytes) {
  const int zero = scheme.dp() > 1 ? scheme.zero : 0;
  const double d = static_cast<double>(scheme.dp());
  const bool half = scheme.precision != Precision::kFp32;
  // Elements of the parameters per device before ZeRO-3's dp sharding.
  const double params = parameter_elements * (zero == 3 ? d : 1.0);
  const double weights = half ? 2.0 : 4.0;  // the weights the forward reads
  const double master = half ? 4.0 : 0.0;   // fp32 master weights beside them
  const double slots = optimizer_slot_bytes;
  FrameworkState state;
  switch (policy) {
    case MemoryPolicy::kAutopar:
      return std::nullopt;
    case MemoryPolicy::kMegatron:
      state.parameter_bytes = weights * params / (zero == 3 ? d : 1.0);
      state.gradient_bytes = 4.0 * params / (zero == 3 ? d : 1.0);  // fp32 main gradients
      state.optimizer_bytes = slots + master * params / (zero >= 1 ? d : 1.0);
      break;
    case MemoryPolicy::kDeepSpeed: {
      // fp16 gradients beside fp16 weights; BF16_Optimizer accumulates them in fp32.
      const double gradient = scheme.precision == Precision::kFp16 ? 2.0 : 4.0;
      state.parameter_bytes = weights * params / (zero == 3 ? d : 1.0);
      state.gradient_bytes = gradient * params / (zero >= 2 ? d : 1.0);
      state.optimizer_bytes = slots + master * params / (zero >= 1 ? d : 1.0);
      break;
    }
    case MemoryPolicy::kFsdp:
      // fp32 parameters (the master weights), sharded from SHARD_GRAD_OP on; that one keeps the
      // gathered weights (in the compute dtype) from forward to backward. Below FULL_SHARD
      // autocast's weight copies are saved for the backward per microbatch.
      state.parameter_bytes =
          4.0 * params / (zero >= 2 ? d : 1.0) + (zero == 2 ? weights * params : 0.0);
      state.gradient_bytes = 4.0 * params / (zero >= 2 ? d : 1.0);
      state.optimizer_bytes = slots;
      state.weight_copies_stashed = zero < 3;
      break;
  }
  return state;
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

// The stages a space lists, where dp shards something: without dp, and in an inference search
// (no optimizer state), only stage 0.
StatusOr<Expansion> search_zero(const YAML::Node& value, const SchemeReader& r) {
  ASSIGN_OR_RETURN(std::vector<size_t> picked, r.names(value, "zero", {"0", "1", "2", "3"}));
  return Expansion([picked](const Scheme& base, const SearchContext& c) {
    std::vector<int> stages;
    for (size_t zero : picked) {
      if (zero == 0 || (c.training && base.dp() > 1)) stages.push_back(static_cast<int>(zero));
    }
    if (stages.empty()) stages.push_back(0);
    return one_per(base, stages, [](Scheme& s, int zero) { s.zero = zero; });
  });
}

}  // namespace autopar::paradigm_files
