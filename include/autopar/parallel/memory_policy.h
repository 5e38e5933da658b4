// The memory policy of a plan: whose accounting of state and activations its memory follows.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace autopar {

// Who holds a plan's state and activations when it runs, and so how much memory they take:
// autopar's own runtime (as its plans are written), or a framework running the scheme:
// Megatron-LM (half-precision weights, fp32 main gradients, fp32 master weights and Adam; ZeRO
// 1 and 2 as its distributed optimizer, 3 as its FSDP), DeepSpeed (ZeRO 0-3) or PyTorch FSDP
// (ZeRO 3 FULL_SHARD, 2 SHARD_GRAD_OP, 0 DDP with autocast).
enum class MemoryPolicy : uint8_t { kAutopar, kMegatron, kDeepSpeed, kFsdp };
const char* memory_policy_name(MemoryPolicy policy);
// The policy of a name (autopar, megatron, deepspeed, fsdp); nullopt for any other.
std::optional<MemoryPolicy> memory_policy_named(std::string_view name);
// Whether the framework keeps its parameters' half-precision copies with its state, written
// once per step after the update (Megatron-LM's fp16/bf16 parameters, DeepSpeed's fp16
// parameters, their ZeRO-3 shards included), so that no forward or recompute of the step casts
// a weight: not autopar's runtime (it casts per microbatch), not PyTorch FSDP (its mixed
// precision casts the fp32 shard before every gather).
bool holds_weight_copies(MemoryPolicy policy);
// Whether a weight-gradient GEMM accumulates straight into the fp32 main gradient (Megatron-LM's
// --gradient-accumulation-fusion, on by default: the GEMM's beta = 1 on main_grad), so the
// gradient's cast to fp32, its scaling and its addition into the accumulator cost nothing.
bool accumulates_in_gemm(MemoryPolicy policy);
// Whether the backward of a sequence-parallel projection gathers its input's sequence shards
// again rather than keep the gathered input from the forward: Megatron-LM does (its
// LinearWithGradAccumulationAndAsyncCommunication saves the shard and all-gathers it for the
// weight gradient), and so do DeepSpeed's Megatron-based runs and autopar's runtime; PyTorch's
// DTensor sequence parallelism (torchtitan, FSDP runs) saves the gathered input for autograd.
bool regathers_sequence_shards(MemoryPolicy policy);

struct Scheme;
struct HardwareProfile;
// Whether the framework gathers ZeRO 3's weights again for the backward rather than keep the
// forward's gathered copies until then: PyTorch FSDP's FULL_SHARD reshards after the forward,
// DeepSpeed's stage 3 releases and re-fetches its partitions, Megatron-FSDP's
// optim_grads_params does the same; autopar's runtime keeps them (the plan as built).
bool regathers_parameters(MemoryPolicy policy, const Scheme& scheme);
// The scheme's memory policy, else the profile's, else autopar's.
MemoryPolicy memory_policy_of(const Scheme& scheme, const HardwareProfile* profile);

// A rank's state as a framework holds it, in bytes: what the estimate counts in place of the
// plan's own state under a framework's memory policy.
struct FrameworkState {
  double parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;
  // Whether the half-precision weight copies a forward reads stay in the activations' stash
  // (autocast's, below FSDP's FULL_SHARD) rather than with the state.
  bool weight_copies_stashed = false;
};
// The state of a rank holding `parameter_elements` parameter elements (its shards under ZeRO 3)
// and `optimizer_slot_bytes` of optimizer slots (as the plan shards them) under `policy`, with
// the scheme's ZeRO stage, dp and precision; nullopt under autopar's own (the plan's state).
std::optional<FrameworkState> framework_state(MemoryPolicy policy, const Scheme& scheme,
                                              double parameter_elements,
                                              double optimizer_slot_bytes);

}  // namespace autopar
