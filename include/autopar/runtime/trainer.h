// Training on a synthetic, learnable task: labels come from a fixed random teacher.
#pragma once

#include <cstdint>
#include <vector>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar::runtime {

struct SyntheticTrainingOptions {
  int steps = 50;
  // Fixed batches cycled through, so the task can be learned in a few steps.
  int batches = 4;
  uint64_t seed = 0;
  int num_threads = 0;
  // Run the steps on the CUDA backend (device 0): the state stays on the device, the first
  // step runs eagerly and the others replay it as a captured CUDA graph.
  bool cuda = false;
};

struct TrainingRun {
  std::vector<double> losses;  // one per step
  double seconds = 0;          // all steps
  // Per step: its seconds (CPU: wall clock of the executor's run; CUDA: device events around
  // the program, the eager first step included).
  std::vector<double> step_seconds;
  int64_t peak_activation_bytes = 0;
  int64_t training_nodes = 0;
};

// Builds the training graph of `model` (which must carry parameter data) and runs `steps`
// steps. The teacher is the model with every parameter redrawn (seeded, with the
// parameter's own standard deviation); labels are its argmax classes (cross-entropy) or its
// outputs (MSE) on synthetic inputs: floats N(0, 1), integer ids uniform over the range of
// the table they index.
StatusOr<TrainingRun> train_synthetic(const Graph& model, const LossSpec& loss,
                                      const OptimizerSpec& optimizer,
                                      const SyntheticTrainingOptions& options);

// Synthetic inputs for `graph` in graph-input order (see train_synthetic).
std::vector<TensorPtr> synthetic_inputs(const Graph& graph, uint64_t seed);

}  // namespace autopar::runtime
