// Import for a run on given input tensors: dims from the inputs, shape inputs as constants.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

#include "autopar/ir/graph.h"
#include "autopar/onnx/onnx_import.h"
#include "autopar/support/status.h"

namespace autopar {

struct BoundModel {
  Graph graph;
  // The inputs still fed at run time, by value id, in graph-input order.
  std::vector<std::pair<ValueId, TensorPtr>> feeds;
};

// Imports `model` to run it on `inputs` (one per graph input, in order). Each input must have
// the declared dtype and rank and agree with every static dim; symbolic and unknown dims take
// the input's sizes (one name, one size across inputs). An input read as a shape (a Reshape's
// shape, Slice's starts, axes: OpDef::shape_inputs) becomes a constant holding its data, so
// every shape in the graph is static. Errors name the input.
// `options` carries what is not a dim (fusion, Constant-node weights); its dims and batch
// must be empty.
StatusOr<BoundModel> import_for_inputs(const onnx::ModelProto& model, std::vector<Tensor> inputs,
                                       std::string_view source, std::string_view model_dir = "",
                                       ImportReport* report = nullptr,
                                       const ImportOptions& options = {});

}  // namespace autopar
