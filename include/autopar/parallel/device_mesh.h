// DeviceMesh: the logical N-D mesh of devices with named axes (pp, dp, tp, sp, ...).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/support/status.h"

namespace autopar {

// Mesh axis names are interned process-wide: each distinct name has a small non-zero id, so
// layouts hold bytes rather than strings. intern_axis gives 0 once kMaxAxisNames names exist
// (DeviceMesh::create and Layout::parse report that as an error); find_axis gives 0 for a
// name never interned.
constexpr int kMaxAxisNames = 254;
uint8_t intern_axis(std::string_view name);
uint8_t find_axis(std::string_view name);
const std::string& axis_name(uint8_t id);

struct MeshAxis {
  std::string name;
  int64_t size = 1;
  bool operator==(const MeshAxis&) const = default;
};

// Axes are ordered outer to inner: device ids enumerate the mesh row-major, so the last axis
// varies fastest (tp = 8 as the last axis keeps a tensor-parallel group inside one node).
class DeviceMesh {
 public:
  DeviceMesh() = default;
  // Axis names are unique, non-empty identifiers; sizes are at least 1.
  static StatusOr<DeviceMesh> create(std::vector<MeshAxis> axes);

  const std::vector<MeshAxis>& axes() const { return axes_; }
  int64_t num_devices() const;
  bool has_axis(std::string_view name) const { return axis_index(name) >= 0; }
  // Index of the named axis, or -1.
  int64_t axis_index(std::string_view name) const;
  // Size of the named axis; 1 for an axis the mesh does not have.
  int64_t size(std::string_view name) const;
  // The same by the name's interned id.
  int64_t size_of(uint8_t id) const {
    for (size_t i = 0; i < ids_.size(); ++i) {
      if (ids_[i] == id) return axes_[i].size;
    }
    return 1;
  }

  std::vector<int64_t> coords(int64_t device) const;
  int64_t device(const std::vector<int64_t>& coords) const;
  // The devices that share every coordinate with `device` except those of `axes`: one
  // communication group, in ring order (row-major over `axes` in mesh order).
  std::vector<int64_t> group(int64_t device, const std::vector<std::string>& axes) const;

  // The axis whose splits hold chunk pairs (member r of n: chunks r and 2·n − 1 − r of 2·n,
  // ring attention's balanced causal layout), so a dim it splits must divide by 2·n. Not part
  // of the text form: the scheme's context decides it (zigzag_axis in scheme.h).
  void set_paired_axis(std::string_view name) { paired_ = find_axis(name); }
  bool is_paired(uint8_t id) const { return id != 0 && id == paired_; }

  // "{pp: 2, dp: 2, tp: 2}"
  std::string to_string() const;
  bool operator==(const DeviceMesh&) const = default;

 private:
  std::vector<MeshAxis> axes_;
  std::vector<uint8_t> ids_;  // per axis: its name's interned id
  uint8_t paired_ = 0;        // the paired axis's id, 0 for none
};

}  // namespace autopar
