// The kernels the software stack running a plan uses where it has a choice.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace autopar {

// Attention as FlashAttention (one fused kernel forward and one backward; the s × s scores and
// their softmax never held, each row's log-sum-exp kept instead) or unfused (scores, softmax and
// the weighted sum as kernels of their own, the softmax output kept for the backward). A hardware
// profile says what its stack runs (`kernels: {attention: ...}`); a scheme may override it.
// Context parallelism always runs the fused form.
enum class AttentionKernel : uint8_t { kUnfused, kFlash };
const char* attention_kernel_name(AttentionKernel kernel);
// The kernel of a name (unfused, flash); nullopt for any other.
std::optional<AttentionKernel> attention_kernel_named(std::string_view name);

struct HardwareProfile;
struct Scheme;
// Whether a plan of `scheme` runs attention fused: under context parallelism always, otherwise
// as the scheme names it, or the profile (unfused without one).
bool runs_flash_attention(const Scheme& scheme, const HardwareProfile* profile);

}  // namespace autopar
