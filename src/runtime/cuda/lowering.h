// The lowered form of a graph for the CUDA backend, shared by the lowering and the executor.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "autopar/runtime/cuda_executor.h"
#include "program.h"

namespace autopar::runtime {

struct CudaLowering {
  cuda::Program program;
  // Per graph value: where it lives (views share their source's), if it has storage.
  std::vector<std::optional<cuda::Ref>> refs;
  // Graph inputs and initializers the host may feed: their persistent refs.
  std::vector<ValueId> fed;
  // Where the random ops read the run's stream (one int64 the host writes before a run), if
  // any op draws.
  std::optional<cuda::Ref> random_stream;
  // The launches at the program's end that write the updates back into the state.
  int64_t update_launches = 0;
  // The updates written in place by the launch computing them (no copy).
  int64_t updates_in_place = 0;
  // The arena's values (roots; temporaries past the graph's values): the launches
  // [first, last] they live over, and their bytes from `offset`.
  struct ArenaBlock {
    ValueId value = kNoId;
    int64_t first = 0, last = 0, offset = 0, bytes = 0;
  };
  std::vector<ArenaBlock> arena_blocks;
  // Most bytes live at once by the arena values' lifetimes (the arena can be no smaller).
  int64_t live_peak_bytes = 0;
  CudaLoweringSummary summary;
};

// Device element type of an IR dtype; nullopt for types the device does not hold.
std::optional<cuda::Dt> device_dtype(DType dtype);

}  // namespace autopar::runtime
