// Layout: how one tensor lives on a DeviceMesh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/parallel/device_mesh.h"
#include "autopar/support/status.h"

namespace autopar {

// For each tensor dim, the mesh axes that split it (major to minor); the mesh axes over which
// the tensor is a partial sum; replicated over every other axis. An immutable value with a
// canonical text form:
//   [dp, _, tp]        dim 0 split over dp, dim 1 whole, dim 2 split over tp
//   [dp*sp, _]         dim 0 split over dp, then each dp shard over sp
//   [_, _] partial(tp) a whole tensor that is a partial sum over tp (summing it gives the value)
//   []                 a replicated scalar
class Layout {
 public:
  Layout() = default;
  static Layout replicated(int64_t rank);
  // Dim `dim` split over `axes`.
  static Layout split(int64_t rank, int64_t dim, std::vector<std::string> axes);

  int64_t rank() const;
  std::vector<std::string> dim_axes(int64_t dim) const;
  std::vector<std::vector<std::string>> dims() const;
  // Sorted.
  std::vector<std::string> partial_axes() const;

  bool is_replicated() const;  // no split and no partial sum
  bool is_partial() const;
  // Whether `axis` splits some dim or is a partial-sum axis.
  bool uses(std::string_view axis) const;
  // Whether `axis` is a partial-sum axis.
  bool is_partial_over(std::string_view axis) const;
  // The dim `axis` splits, or -1.
  int64_t dim_of(std::string_view axis) const;
  // Whether every split is over `axis` (true when nothing is split).
  bool splits_only_over(std::string_view axis) const;
  // The devices one shard is spread over: the product of the split axes' sizes.
  int64_t split_degree(const DeviceMesh& mesh) const;

  // New layouts: the axis appended (as the most minor split) to `dim`, the axis removed from
  // wherever it is, and partial sums added or resolved.
  Layout with_split(int64_t dim, std::string_view axis) const;
  Layout without(std::string_view axis) const;
  Layout with_partial(std::string_view axis) const;

  // Checks the axes exist in `mesh`, each is used once, and every split dim is divisible by
  // the product of its axes. Messages name the dim and the axes ("dim 1 of f32[8,6]: 6 is
  // not divisible by tp = 4").
  Status validate(const std::vector<int64_t>& shape, const DeviceMesh& mesh) const;
  // The shape of one device's shard.
  std::vector<int64_t> shard_shape(const std::vector<int64_t>& shape, const DeviceMesh& mesh) const;

  std::string to_string() const;
  static StatusOr<Layout> parse(std::string_view text);

  bool operator==(const Layout& other) const {
    // A few bytes: compared in line rather than by a call to memcmp.
    if (code_.size() != other.code_.size()) return false;
    for (size_t i = 0; i < code_.size(); ++i) {
      if (code_[i] != other.code_[i]) return false;
    }
    return true;
  }
  size_t hash() const;
  // The compact form (see code_ below): equal layouts have equal codes, for keys.
  const std::string& code() const { return code_; }

 private:
  // Axis names are interned (one process-wide table gives each a small non-zero id). Per
  // dim: the ids of its axes, major to minor, and a 0; then the partial-sum axes' ids, in
  // name order. A layout of a few dims fits in the string's own storage: copies, comparisons
  // and hashes touch a few bytes and allocate nothing.
  std::string code_;
};

struct LayoutHash {
  size_t operator()(const Layout& layout) const { return layout.hash(); }
};

}  // namespace autopar
