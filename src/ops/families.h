// The op families; register_all_ops() lists them, one source file each.
#pragma once

#include "autopar/ops/op_def.h"

namespace autopar {

void register_matmul_ops(OpRegistry& registry);
void register_elementwise_ops(OpRegistry& registry);

// Numpy multidirectional broadcast of two shapes; nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcast_shapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b);
std::string dims_text(DType dtype, const std::vector<int64_t>& dims);
double output_elements(const Graph& graph, const Node& node, size_t output = 0);

}  // namespace autopar
