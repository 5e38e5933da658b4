// ONNX TensorProto files as `autopar run MODEL --inputs` reads them.
#include "autopar/onnx/onnx_tensor.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autopar;
  fuzz::ScratchDir dir;
  if (!dir.write("input_0.pb", fuzz::as_text(data, size))) return 0;
  std::string name;
  (void)read_tensor_file(dir.path() + "/input_0.pb", &name);
  return 0;
}
