// A plan's program on one device's backend, as the plan runner drives it: inputs in the
// program graph's input order, its outputs back on the host.
#pragma once

#include <memory>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/parallel/plan.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/executor.h"
#include "autopar/runtime/plan_runner.h"
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

// What the programs of one device share on the CUDA backend: its GPU, how its communication
// runs, and over NCCL the process's communicators.
struct CudaDeviceContext;

// The CUDA side of a device of `plan` whose communicator is `comm`: with `nccl` (one process
// per GPU, under mpirun) an NCCL world bootstrapped over `comm` with every group of the plan
// split up front, and the GPU of the process's local rank; without, communication through the
// host and GPU rank % device count. Called by every device of the plan.
StatusOr<std::shared_ptr<CudaDeviceContext>> open_cuda_device(const Plan& plan, Communicator& comm,
                                                              bool nccl);
// A program of that device on the CUDA backend.
StatusOr<std::unique_ptr<ProgramRunner>> cuda_program_runner(
    const Graph& program, const std::shared_ptr<CudaDeviceContext>& device);

// Every group a communication op of the plan names, as each device that runs it resolves it,
// once each, in a fixed order (role by role, node by node, device by device).
StatusOr<std::vector<std::vector<int64_t>>> plan_comm_groups(const Plan& plan);

}  // namespace autopar::runtime
