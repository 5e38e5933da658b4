// Operator (tensor) parallelism: parameters split over tp. A parameter's layout is chosen by
// its first consumer's cheapest strategy, which gives Megatron's column/row pairs for MLPs and
// attention: the first projection splits its output features, the second contracts over them
// and leaves a partial sum that one all-reduce resolves. `megatron` lets only linear layers,
// embeddings and the elementwise ops after them (biases) split parameters; `auto` lets every op.
#include "paradigms.h"

namespace autopar::paradigm_files {

Status configure_operator(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  const TensorStrategy tensor = scheme.tensor;
  policy.spmd.parameter_split = [tensor](const Graph&, const Node& consumer, std::string_view) {
    if (tensor == TensorStrategy::kAuto) return true;
    static const char* const kLinear[] = {"MatMul", "Gemm", "Gather", "Add", "Mul", "Sub"};
    for (const char* op : kLinear) {
      if (consumer.op_type == op) return true;
    }
    return false;
  };
  if (scheme.tp() > 1) policy.spmd.axes.push_back("tp");
  return Status::ok();
}

}  // namespace autopar::paradigm_files
