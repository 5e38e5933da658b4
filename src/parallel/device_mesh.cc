// DeviceMesh: coordinates, groups and the text form.
#include "autopar/parallel/device_mesh.h"

#include <array>
#include <atomic>
#include <cctype>
#include <mutex>
#include <set>

namespace autopar {
namespace {

bool is_identifier(std::string_view name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Devices any mesh may have: far above real clusters, far below int64 overflow.
constexpr int64_t kMaxDevices = int64_t{1} << 24;

}  // namespace

namespace {

// Names are written once, under the mutex, before `count` publishes them; readers scan the
// published ones without locking.
struct AxisTable {
  std::array<std::string, kMaxAxisNames + 1> names{"", "pp", "dp", "tp", "sp"};
  std::atomic<int> count{5};
  std::mutex mutex;
};

AxisTable& axis_table() {
  static AxisTable table;
  return table;
}

uint8_t find_in(const AxisTable& t, std::string_view name, int count) {
  for (int i = 1; i < count; ++i) {
    if (t.names[i] == name) return static_cast<uint8_t>(i);
  }
  return 0;
}

}  // namespace

uint8_t find_axis(std::string_view name) {
  if (name.size() == 2 && name[1] == 'p') {
    switch (name[0]) {
      case 'p':
        return 1;
      case 'd':
        return 2;
      case 't':
        return 3;
      case 's':
        return 4;
      default:
        break;
    }
  }
  const AxisTable& t = axis_table();
  return find_in(t, name, t.count.load(std::memory_order_acquire));
}

uint8_t intern_axis(std::string_view name) {
  if (const uint8_t id = find_axis(name)) return id;
  AxisTable& t = axis_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  const int count = t.count.load(std::memory_order_relaxed);
  if (const uint8_t id = find_in(t, name, count)) return id;
  if (count > kMaxAxisNames) return 0;
  t.names[count] = std::string(name);
  t.count.store(count + 1, std::memory_order_release);
  return static_cast<uint8_t>(count);
}

const std::string& axis_name(uint8_t id) {
  const AxisTable& t = axis_table();
  assert(id > 0 && id < t.count.load(std::memory_order_acquire));
  return t.names[id];
}

StatusOr<DeviceMesh> DeviceMesh::create(std::vector<MeshAxis> axes) {
  std::set<std::string> seen;
  int64_t devices = 1;
  for (const MeshAxis& axis : axes) {
    if (!is_identifier(axis.name)) return error("mesh axis '{}' is not a name", axis.name);
    if (!seen.insert(axis.name).second) return error("mesh axis '{}' is given twice", axis.name);
    if (axis.size < 1)
      return error("mesh axis '{}' has size {} (must be at least 1)", axis.name, axis.size);
    if (axis.size > kMaxDevices || devices * axis.size > kMaxDevices) {
      return error("the mesh has more than {} devices", kMaxDevices);
    }
    devices *= axis.size;
  }
  DeviceMesh mesh;
  for (const MeshAxis& axis : axes) {
    const uint8_t id = intern_axis(axis.name);
    if (id == 0)
      return error("mesh axis '{}': more than {} distinct axis names", axis.name, kMaxAxisNames);
    mesh.ids_.push_back(id);
  }
  mesh.axes_ = std::move(axes);
  return mesh;
}

int64_t DeviceMesh::num_devices() const {
  int64_t n = 1;
  for (const MeshAxis& axis : axes_) n *= axis.size;
  return n;
}

int64_t DeviceMesh::axis_index(std::string_view name) const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name == name) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t DeviceMesh::size(std::string_view name) const {
  const int64_t i = axis_index(name);
  return i < 0 ? 1 : axes_[i].size;
}

std::vector<int64_t> DeviceMesh::coords(int64_t device) const {
  assert(device >= 0 && device < num_devices());
  std::vector<int64_t> c(axes_.size());
  for (int64_t i = static_cast<int64_t>(axes_.size()) - 1; i >= 0; --i) {
    c[i] = device % axes_[i].size;
    device /= axes_[i].size;
  }
  return c;
}

int64_t DeviceMesh::device(const std::vector<int64_t>& coords) const {
  assert(coords.size() == axes_.size());
  int64_t id = 0;
  for (size_t i = 0; i < axes_.size(); ++i) {
    assert(coords[i] >= 0 && coords[i] < axes_[i].size);
    id = id * axes_[i].size + coords[i];
  }
  return id;
}

std::vector<int64_t> DeviceMesh::group(int64_t device, const std::vector<std::string>& axes) const {
  std::vector<bool> varies(axes_.size(), false);
  for (const std::string& name : axes) {
    const int64_t i = axis_index(name);
    if (i >= 0) varies[i] = true;
  }
  const std::vector<int64_t> base = coords(device);
  std::vector<int64_t> members;
  std::vector<int64_t> at = base;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (varies[i]) at[i] = 0;
  }
  while (true) {
    members.push_back(this->device(at));
    int64_t d = static_cast<int64_t>(axes_.size()) - 1;
    for (; d >= 0; --d) {
      if (!varies[d]) continue;
      if (++at[d] < axes_[d].size) break;
      at[d] = 0;
    }
    if (d < 0) break;
  }
  return members;
}

std::string DeviceMesh::to_string() const {
  std::string out = "{";
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (i) out += ", ";
    out += fmt::format("{}: {}", axes_[i].name, axes_[i].size);
  }
  return out + "}";
}

}  // namespace autopar
