// NodeRun: one node in its own graph, run by the CPU executor, for kernel tests.
#pragma once

#include <string>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar::testing {

// Builder-style: NodeRun("Add").input(a).input(b).run() → output tensors, or the error.
// Inputs marked const() are initializers (so shape inputs, axes and the like fold into the
// node's static shapes); the others are graph inputs fed at run time.
class NodeRun {
 public:
  explicit NodeRun(std::string op_type, int64_t opset = 17, std::string domain = "");

  NodeRun& input(Tensor t);
  NodeRun& constant(Tensor t);
  NodeRun& omitted();  // an omitted optional input
  NodeRun& attr(const std::string& name, Attribute value);
  NodeRun& outputs(int count);
  NodeRun& threads(int count);

  // The node in a graph of its own, output shapes inferred by the op's shape rule; `feeds`
  // receives the non-constant inputs.
  StatusOr<Graph> build(std::vector<std::pair<ValueId, std::shared_ptr<const Tensor>>>* feeds);
  // Infers the output shapes with the op's shape rule and runs the node.
  StatusOr<std::vector<Tensor>> run();
  // run() that must succeed; returns output 0.
  Tensor run1();

 private:
  std::string op_type_;
  std::string domain_;
  int64_t opset_;
  std::vector<std::pair<Tensor, bool>> inputs_;  // (tensor, is constant); omitted: undefined dtype
  Attributes attrs_;
  int num_outputs_ = 1;
  int threads_ = 2;
};

// f32 / f64 / i64 tensors from values.
Tensor f32(std::vector<int64_t> dims, std::vector<float> values);
Tensor f64(std::vector<int64_t> dims, std::vector<double> values);
Tensor i64(std::vector<int64_t> dims, std::vector<int64_t> values);
Tensor boolean(std::vector<int64_t> dims, std::vector<bool> values);
// Deterministic pseudo-random f32 data in [-1, 1).
Tensor random_f32(std::vector<int64_t> dims, uint64_t seed);

// Elements as doubles, for EXPECT comparisons.
std::vector<double> values_of(const Tensor& t);

}  // namespace autopar::testing
