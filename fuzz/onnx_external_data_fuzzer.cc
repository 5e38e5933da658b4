// A model whose initializers live in a file beside it (ONNX external data): the model and
// weights.bin, packed (fuzz_support.h), read from a directory as `autopar run model.onnx`
// reads them.
#include "autopar/onnx/onnx_import.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  const auto parts = fuzz::unpack(fuzz::as_text(data, size));
  fuzz::ScratchDir dir;
  if (!dir.write("model.onnx", parts[0])) return 0;
  if (parts.size() > 1 && !dir.write("weights.bin", parts[1])) return 0;
  ImportOptions options;
  options.batch = 2;
  options.batch_is_default = true;
  options.upgrade_below = 13;  // as every command reads a model (opsets below 13 converted)
  (void)read_onnx_file(dir.path() + "/model.onnx", options);
  return 0;
}
