// SearchSpace: the declarative set of schemes a search may choose from (configs/spaces/*.yaml).
// Each field lists the values allowed, or `auto` for every value the model and the cluster
// allow. A field left out allows only the scheme default (no such paradigm).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/parallel/lowering.h"
#include "autopar/parallel/scheme.h"
#include "autopar/support/status.h"

namespace autopar {

// Degrees of one mesh axis: a list, or every divisor that fits (auto).
struct AxisChoices {
  bool automatic = false;
  std::vector<int64_t> values;  // ascending, when not automatic
};

struct SearchSpace {
  std::string source;  // the file it was read from
  // Mesh axes: tp, pp, dp, sp and cp. Devices are ordered pp, dp, cp, sp, tp (outer to
  // inner), so tensor-parallel groups are consecutive devices; a cp ring may span nodes.
  AxisChoices tp{false, {1}}, pp{false, {1}}, dp{true, {}}, sp{false, {1}}, cp{false, {1}};
  bool tp_within_node = true;           // constraints.tp_within_node: tp · sp devices share a node
  std::optional<int64_t> global_batch;  // batch.global; absent: the model's batch
  AxisChoices micro{true, {}};          // batch.micro: samples per microbatch per replica
  // The paradigms' dimensions the space lists (Paradigm::search), in the paradigms' order: a
  // paradigm whose field is absent leaves every scheme at its default.
  struct Choices {
    std::string field;
    bool relowers = true;
    Expansion expand;
  };
  std::vector<Choices> choices;
};

// Parses a space; errors are one line "<source>: <field>: <what>". Beyond mesh, constraints and
// batch, the fields are the paradigms' (Paradigm::search).
StatusOr<SearchSpace> parse_search_space(std::string_view yaml, std::string_view source);
StatusOr<SearchSpace> read_search_space(const std::string& path);

// The schemes the space's choices make of `base`: along the dimensions that change the SPMD
// lowering (`relowers`) or along the others, in the paradigms' order.
std::vector<Scheme> expand_choices(const SearchSpace& space, const Scheme& base, bool relowers,
                                   const SearchContext& context);

}  // namespace autopar
