// device.h for builds without CUDA: every call answers why there is no device.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device.h"

namespace autopar::cuda {
namespace {

const char kReason[] = "autopar was built without CUDA (-DAUTOPAR_CUDA=OFF or no nvcc)";

}  // namespace

std::string device_unavailable_reason() { return kReason; }
int device_count() { return 0; }
std::string device_description(int) { return kReason; }

std::string nccl_unique_id(std::string* error) {
  if (error != nullptr) *error = kReason;
  return "";
}

std::shared_ptr<NcclComms> open_nccl(int, int, int, const std::string&,
                                     const std::vector<std::vector<int>>&, std::string* error) {
  if (error != nullptr) *error = kReason;
  return nullptr;
}

struct Device::Impl {};

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::~Device() = default;

std::unique_ptr<Device> Device::open(int, std::string* error) {
  if (error != nullptr) *error = kReason;
  return nullptr;
}

std::string Device::load(Program) { return kReason; }
std::string Device::poison_arena() { return kReason; }
std::string Device::write(const Ref&, const void*, int64_t) { return kReason; }
std::string Device::read(const Ref&, void*, int64_t) { return kReason; }
std::string Device::run(RunTiming*) { return kReason; }
std::string Device::run_profiled(std::vector<double>&) { return kReason; }
std::string Device::capture() { return kReason; }
bool Device::captured() const { return false; }
std::string Device::replay(int, std::vector<double>*) { return kReason; }
std::string Device::take_data_error() { return kReason; }
std::string Device::use_nccl(std::shared_ptr<NcclComms>) { return kReason; }
void Device::set_host_step(HostStep) {}
bool Device::has_host_steps() const { return false; }
int64_t Device::arena_bytes() const { return 0; }
int64_t Device::persistent_bytes() const { return 0; }

}  // namespace autopar::cuda
