// The kernels the software stack running a plan uses where it has a choice.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
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

// Fusions a GPU software stack runs, as a profile lists them (`kernels: {fusions: [...]}`).
enum class Fusion : uint8_t {
  // op_kernels: each source op's forward, and its backward, as one kernel (an autograd
  // function's, cuDNN's BatchNorm), the precision casts that convert for it inside, its
  // operands read and its results written once; GEMM and convolution gradients read their
  // operands in the layout they are in (no transposes of their own).
  kOpKernels,
  // The fused kernels of Megatron-LM (its --bias-gelu-fusion, --bias-dropout-fusion and
  // --masked-softmax-fusion, on by default), each one kernel forward and one backward over the
  // ops' kernels of op_kernels:
  // bias_gelu: a bias Add and the GELU reading it;
  kBiasGelu,
  // bias_dropout_add: a bias Add, the Dropout of its sum (where there is one) and the residual
  // Add of that;
  kBiasDropoutAdd,
  // scale_mask_softmax: the attention scores' scaling, their mask (an Add or a Where) and the
  // Softmax.
  kScaleMaskSoftmax,
  // cross_entropy: the loss as one kernel that reads the logits in the compute type and widens
  // them inside (flash-attn's xentropy, llm-foundry's `loss_fn: fused_crossentropy`), so the
  // backward widens the half-precision logits again rather than keep an fp32 copy.
  kCrossEntropy,
};
const char* fusion_name(Fusion fusion);
// The fusion of a name (op_kernels, bias_gelu, ...); nullopt for any other.
std::optional<Fusion> fusion_named(std::string_view name);
// Every fusion's name, comma-separated, for messages.
std::string fusion_names();

// The layout the framework keeps a convolutional net's activations in: nhwc (channels last:
// TensorFlow's default, PyTorch's torch.channels_last, NVIDIA's tuned examples) or nchw
// (PyTorch's default, torch.contiguous_format). Where the device's convolution kernels run on
// NHWC operands (device.nhwc_convolutions: cuDNN's tensor-core kernels), an nchw stack pays a
// transpose of each convolution's operands in and of its result out (NVIDIA, "Convolutional
// Layers User's Guide", Tensor Layouts In Memory: NCHW vs NHWC). A profile names its stack's
// (`kernels: {memory_format: ...}`, nhwc where it does not); a scheme may override it.
enum class MemoryFormat : uint8_t { kNhwc, kNchw };
const char* memory_format_name(MemoryFormat format);
// The layout of a name (nhwc, nchw); nullopt for any other.
std::optional<MemoryFormat> memory_format_named(std::string_view name);

struct HardwareProfile;
struct Scheme;
// The layout a plan of `scheme` keeps activations in: the scheme's, else the profile's.
MemoryFormat memory_format_of(const Scheme& scheme, const HardwareProfile& profile);
// The fusions a plan of `scheme` is priced with: the scheme's `kernels.fusions` where it names
// them (an empty list: none), the profile's otherwise.
const std::set<Fusion>& fusions_of(const Scheme& scheme, const HardwareProfile& profile);
// Whether a plan of `scheme` runs attention fused: under context parallelism always, otherwise
// as the scheme names it, or the profile (unfused without one).
bool runs_flash_attention(const Scheme& scheme, const HardwareProfile* profile);
// Whether a plan of `scheme` runs the loss as a fused cross-entropy kernel (Fusion::kCrossEntropy
// among the scheme's fusions, or else the profile's).
bool runs_fused_cross_entropy(const Scheme& scheme, const HardwareProfile* profile);

}  // namespace autopar
