// A plan's program on one device's backend, as the plan runner drives it: inputs in the
// program graph's input order, its outputs back on the host. The runner makes one per program
// and device: the CPU executor's, the CUDA backend's, or one a caller supplies
// (PlanRunOptions::make_program).
#pragma once

#include <cstdint>
#include <vector>

#include "autopar/ir/tensor.h"
#include "autopar/runtime/executor.h"
#include "autopar/support/status.h"

namespace autopar::runtime {

class ProgramRunner {
 public:
  virtual ~ProgramRunner() = default;
  // One run; `stream` numbers it (step and microbatch) for the random ops' draws. `stats`
  // (optional) receives per-node seconds where the backend times nodes.
  virtual StatusOr<std::vector<TensorPtr>> run(const std::vector<TensorPtr>& inputs,
                                               RunStats* stats, uint64_t stream) = 0;
};

}  // namespace autopar::runtime
