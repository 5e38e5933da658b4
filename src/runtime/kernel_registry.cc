// The kernel registry.
#include "autopar/runtime/kernel.h"

namespace autopar::runtime {

void KernelRegistry::add(std::string_view domain, std::string_view op_type, Kernel kernel) {
  auto [it, added] = kernels_.emplace(std::make_pair(std::string(domain), std::string(op_type)),
                                      std::move(kernel));
  assert(added && "a kernel is registered once");
  (void)it;
}

const Kernel* KernelRegistry::find(std::string_view domain, std::string_view op_type) const {
  auto it = kernels_.find({std::string(domain == "ai.onnx" ? "" : domain), std::string(op_type)});
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::keys() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, kernel] : kernels_) out.push_back(key);
  return out;
}

const KernelRegistry& kernel_registry() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    register_all_kernels(*r);
    return r;
  }();
  return *registry;
}

}  // namespace autopar::runtime
