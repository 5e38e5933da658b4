// ONNX models as `inspect`, `run` and `transform` read them: the protobuf, the import (checker,
// shape inference, folding, fusion), the summary and the training graph.
#include <climits>

#include <onnx/onnx_pb.h>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/model_summary.h"
#include "autopar/onnx/onnx_import.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  if (size > INT_MAX) return 0;
  onnx::ModelProto proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  ImportOptions options;
  options.batch = 2;
  options.batch_is_default = true;
  options.upgrade_below = 13;  // as every command reads a model (opsets below 13 converted)
  ImportReport report;
  auto model = import_onnx(proto, options, "fuzz.onnx", "", &report);
  if (!model.is_ok()) return 0;
  (void)summarize(*model);
  LossSpec loss;
  loss.kind = default_loss(*model);
  (void)build_training_graph(*model, loss, OptimizerSpec{});
  return 0;
}
