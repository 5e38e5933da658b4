// reshard: the collective sequence that turns one layout of a tensor into another.
#pragma once

#include <string>
#include <vector>

#include "autopar/parallel/device_mesh.h"
#include "autopar/parallel/layout.h"
#include "autopar/support/status.h"

namespace autopar {

struct ReshardStep {
  enum class Kind : uint8_t {
    kAllReduce,      // partial over `axis` → replicated over it
    kReduceScatter,  // partial over `axis` → split on `dim`
    kAllGather,      // split on `dim` → replicated
    kAllToAll,       // split on `dim` → split on `to_dim`
    kSlice,          // replicated → split on `dim` (local, no communication)
    kShare,          // replicated → partial over `axis`: the axis's first member keeps the
                     // value, the others hold zeros (local, no communication)
  };
  Kind kind;
  std::string axis;
  int64_t dim = -1;
  int64_t to_dim = -1;
  uint8_t axis_id = 0;  // the axis's interned id (find_axis); set by reshard_steps

  // "all-gather(tp, dim 1)", "all-to-all(sp, dim 1 -> 2)", ...
  std::string to_string() const;
  bool operator==(const ReshardStep&) const = default;
};

// The steps from `from` to `to`, one mesh axis at a time: gathers first (they free dims for
// later splits, minor axes before major ones), then reductions of partial sums, then all-to-alls,
// then local slices (they communicate nothing). Each step's layout after it is valid for the
// shape. A replicated tensor cannot become a partial sum, nor a split one: an error naming the
// axis.
StatusOr<std::vector<ReshardStep>> reshard_steps(const Layout& from, const Layout& to,
                                                 const std::vector<int64_t>& shape,
                                                 const DeviceMesh& mesh);

}  // namespace autopar
