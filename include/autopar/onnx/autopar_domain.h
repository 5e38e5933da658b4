// The ai.autopar ONNX domain (opset 1): communication operator schemas.
#pragma once

namespace autopar {

// Registers the domain and the schemas of Send, Recv, AllReduce, AllGather, ReduceScatter,
// AllToAll and Broadcast with ONNX, so onnx::checker and shape inference accept emitted
// plans. Safe to call more than once.
void register_autopar_onnx_schemas();

}  // namespace autopar
