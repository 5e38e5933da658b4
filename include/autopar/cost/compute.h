// The compute model: each node is a roofline, max(FLOPs / (peak · efficiency), bytes /
// (bandwidth · efficiency)), plus the device's kernel launch overhead. Efficiencies come from
// the profile's curve for the node's op class at the node's work.
#pragma once

#include <optional>

#include "autopar/cost/hardware_profile.h"
#include "autopar/ir/graph.h"
#include "autopar/parallel/scheme.h"

namespace autopar {

// The class whose efficiency curve prices the node: MatMul/Gemm (attention when both operands
// are batched, rank 3 or more, and neither is a weight), Conv/ConvTranspose, normalisations and
// reductions, elementwise and data movement. Communication ops have no compute class (they
// are priced by the communication model).
std::optional<OpClass> op_class_of(const Graph& graph, const Node& node);

// The profile's peak key for arithmetic in `dtype`: fp32, bf16, fp16 (fp64 for f64).
const char* peak_key(DType dtype);
// The peak key of a scheme's arithmetic: bf16 or fp16 under mixed precision, else fp32.
const char* peak_key(Precision precision);

struct NodeCost {
  double seconds = 0;
  bool memory_bound = false;
};

// One node on one device of the profile (0 for communication ops and nodes without work).
NodeCost node_cost(const HardwareProfile& profile, const Graph& graph, const Node& node);

}  // namespace autopar
