// Numeric gradient checks: a rule's analytic gradient against central differences in f64.
#pragma once

#include <string>
#include <vector>

#include "autopar/ir/graph.h"

namespace autopar::testing {

// One node whose differentiable inputs are checked. Inputs added with wrt() are graph inputs
// differentiated; constant() inputs are initializers (axes, indices, shapes, labels) that are
// not. The loss is Σ_k Σ (output_k · R_k) with fixed random R_k, so every output element
// gets a distinct upstream gradient.
class GradientCheck {
 public:
  explicit GradientCheck(std::string op_type, int64_t opset = 17);

  GradientCheck& wrt(Tensor t);
  GradientCheck& constant(Tensor t);
  GradientCheck& omitted();
  GradientCheck& attr(const std::string& name, Attribute value);
  GradientCheck& outputs(int count);
  // The op's domain (default ai.onnx): ai.autopar.training for the fused ops.
  GradientCheck& domain(std::string domain);
  // Which outputs feed the loss (default all floating ones).
  GradientCheck& loss_outputs(std::vector<int> outputs);

  // Empty when every checked element agrees to |analytic − numeric| ≤ atol + rtol·|numeric|;
  // otherwise the first disagreement (or the error that stopped the check).
  std::string check(double rtol = 1e-6, double atol = 1e-8);

 private:
  std::string op_type_;
  int64_t opset_;
  std::string domain_;
  std::vector<std::pair<Tensor, int>> inputs_;  // kind: 0 wrt, 1 constant, 2 omitted
  Attributes attrs_;
  int num_outputs_ = 1;
  std::vector<int> loss_outputs_;
};

// f64 tensor with values uniform in [low, high), from `seed`.
Tensor random_f64(std::vector<int64_t> dims, uint64_t seed, double low = -1.0, double high = 1.0);

}  // namespace autopar::testing
