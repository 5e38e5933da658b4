// verify_plan: a plan's training step (or inference) against the same step of its single-device
// reference on the same feeds, tensor by tensor. `autopar verify` is this function over a plan
// directory; tests and library users call it on a Plan in memory.
#pragma once

#include <string>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/parallel/lowering.h"
#include "autopar/parallel/plan.h"
#include "autopar/runtime/plan_runner.h"
#include "autopar/support/status.h"

namespace autopar {

struct TensorDifference {
  std::string name;  // "loss", a parameter, a running statistic, or "<output> (microbatch m)"
  double relative_error = 0;  // max |plan − reference| over max(max |reference|, 1e-6)
  double scale = 0;           // max |reference|
};

struct PlanComparison {
  std::vector<TensorDifference> differences;  // worst first
  double worst() const { return differences.empty() ? 0.0 : differences.front().relative_error; }
  bool within(double tolerance) const { return worst() <= tolerance; }
};

// Feeds for `steps` steps of `plan` (lowered from `model` with `options`): the model's
// initial state (parts of split parameters sliced from the whole), and per microbatch
// synthetic inputs and labels (class ids for cross entropy, normal targets otherwise) drawn
// from `seed`.
StatusOr<runtime::PlanFeeds> synthetic_plan_feeds(const Graph& model, const Plan& plan,
                                                  const LoweringOptions& options, int steps,
                                                  uint64_t seed);

// What `ran` (one step of `plan`) computed against what `expected` (the same feeds through
// `reference`) computed: for training, the loss and every model-initialised parameter and
// running statistic after the update; for inference, every output of every microbatch.
// Parameters the plan split into parts are compared whole. An error names what the plan lost.
StatusOr<PlanComparison> compare_plan_step(const Plan& plan, runtime::PlanResult ran,
                                           const Plan& reference,
                                           const runtime::PlanResult& expected);

// Runs one step of `plan` (lowered from `model` with `options`) and of its single-device
// reference on `feeds`, in this process, and compares them. `run` says how the plan runs (its
// backend); the reference runs on the CPU.
StatusOr<PlanComparison> verify_plan(const Graph& model, const Plan& plan,
                                     const LoweringOptions& options,
                                     const runtime::PlanFeeds& feeds,
                                     const runtime::PlanRunOptions& run = {});

}  // namespace autopar
