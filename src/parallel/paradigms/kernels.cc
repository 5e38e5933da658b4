// Kernel choices: attention as FlashAttention or unfused (kernel_choice.h). Not a way to split
// the work, but a decision of the plan's lowering like the others: the scheme's `kernels:`
// field, or, where it is silent, the hardware profile's.
#include "autopar/parallel/kernel_choice.h"

#include "autopar/cost/hardware_profile.h"
#include "paradigms.h"

namespace autopar {
namespace {

const std::initializer_list<std::pair<const char*, AttentionKernel>> kAttentionKernels = {
    {"unfused", AttentionKernel::kUnfused}, {"flash", AttentionKernel::kFlash}};
const std::initializer_list<std::pair<const char*, Fusion>> kFusions = {
    {"op_kernels", Fusion::kOpKernels},
    {"bias_gelu", Fusion::kBiasGelu},
    {"bias_dropout_add", Fusion::kBiasDropoutAdd},
    {"scale_mask_softmax", Fusion::kScaleMaskSoftmax},
    {"cross_entropy", Fusion::kCrossEntropy}};
const std::initializer_list<std::pair<const char*, MemoryFormat>> kMemoryFormats = {
    {"nhwc", MemoryFormat::kNhwc}, {"nchw", MemoryFormat::kNchw}};

}  // namespace

const char* memory_format_name(MemoryFormat format) { return name_of(format, kMemoryFormats); }

std::optional<MemoryFormat> memory_format_named(std::string_view name) {
  return value_named(name, kMemoryFormats);
}

MemoryFormat memory_format_of(const Scheme& scheme, const HardwareProfile& profile) {
  return scheme.memory_format.value_or(profile.memory_format);
}

const char* attention_kernel_name(AttentionKernel kernel) {
  return name_of(kernel, kAttentionKernels);
}

std::optional<AttentionKernel> attention_kernel_named(std::string_view name) {
  return value_named(name, kAttentionKernels);
}

const char* fusion_name(Fusion fusion) { return name_of(fusion, kFusions); }

std::optional<Fusion> fusion_named(std::string_view name) { return value_named(name, kFusions); }

std::string fusion_names() {
  std::string names;
  for (const auto& [name, fusion] : kFusions) {
    if (!names.empty()) names += ", ";
    names += name;
  }
  return names;
}

const std::set<Fusion>& fusions_of(const Scheme& scheme, const HardwareProfile& profile) {
  return scheme.fusions ? *scheme.fusions : profile.fusions;
}

bool runs_flash_attention(const Scheme& scheme, const HardwareProfile* profile) {
  if (scheme.cp() > 1) return true;
  const AttentionKernel stack = profile ? profile->attention : AttentionKernel::kUnfused;
  return scheme.attention.value_or(stack) == AttentionKernel::kFlash;
}

bool runs_fused_cross_entropy(const Scheme& scheme, const HardwareProfile* profile) {
  const std::set<Fusion>* fusions = scheme.fusions ? &*scheme.fusions
                                    : profile      ? &profile->fusions
                                                   : nullptr;
  return fusions && fusions->count(Fusion::kCrossEntropy) > 0;
}

}  // namespace autopar

namespace autopar::paradigm_files {

// Checks the scheme's choice; lower() applies runs_flash_attention, which also reads the profile.
Status configure_kernels(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy&) {
  if (scheme.attention == AttentionKernel::kUnfused && scheme.cp() > 1) {
    return error(
        "kernels.attention: unfused, but context parallelism (mesh.cp {}) runs attention as one "
        "fused kernel",
        scheme.cp());
  }
  return Status::ok();
}

Status parse_kernels(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
  const YAML::Node kernels = root["kernels"];
  if (!kernels) return Status::ok();
  if (!kernels.IsMap())
    return r.fail("kernels",
                  "expected {{attention: flash|unfused, fusions: [op_kernels], memory_format: "
                  "nhwc|nchw}}");
  RETURN_IF_ERROR(r.known_keys(kernels, "kernels", {"attention", "fusions", "memory_format"}));
  if (const YAML::Node format = kernels["memory_format"]) {
    ASSIGN_OR_RETURN(s.memory_format, r.choice(format, "kernels.memory_format", kMemoryFormats));
  }
  if (const YAML::Node attention = kernels["attention"]) {
    ASSIGN_OR_RETURN(s.attention, r.choice(attention, "kernels.attention", kAttentionKernels));
  }
  if (const YAML::Node fusions = kernels["fusions"]) {
    if (!fusions.IsSequence())
      return r.fail("kernels.fusions", "expected a list, e.g. [op_kernels] ([] for none)");
    s.fusions.emplace();
    for (const YAML::Node& fusion : fusions) {
      ASSIGN_OR_RETURN(Fusion f, r.choice(fusion, "kernels.fusions", kFusions));
      s.fusions->insert(f);
    }
  }
  return Status::ok();
}

}  // namespace autopar::paradigm_files
