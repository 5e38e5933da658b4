// Every user error we know of: one line on stderr naming the file, flag or node, exit code 2.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "autopar/onnx/onnx_export.h"
#include "autopar/onnx/onnx_tensor.h"
#include "testing/onnx_proto.h"
#include "testing/testing.h"

namespace autopar {
namespace {

using testing::run_autopar;

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
    return name;
  }
  std::string write(const std::string& name, const testing::OnnxProto& model) {
    return write(name, model.serialize());
  }
  // Runs autopar in the test's directory and expects exactly one error line and exit 2.
  void expect_error(const std::vector<std::string>& args, const std::string& line) {
    const testing::CommandResult r = run_autopar(args, dir_);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, line + "\n");
  }
  // A small valid model: x[batch, 4] · w → y.
  testing::OnnxProto linear() {
    testing::OnnxProto m;
    m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
    m.weight("w", {4, 2});
    m.node("MatMul", "mm", {"x", "w"}, {}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, {"batch", 2});
    return m;
  }

  std::string dir_;
};

TEST_F(CliErrors, MissingFile) {
  expect_error({"inspect", "absent.onnx"}, "autopar: error: absent.onnx: no such file");
}

TEST_F(CliErrors, EmptyFile) {
  expect_error({"inspect", write("empty.onnx", "")},
               "autopar: error: empty.onnx: empty file, not an ONNX model");
}

TEST_F(CliErrors, Directory) {
  std::filesystem::create_directory(dir_ + "/folder.onnx");
  expect_error({"inspect", "folder.onnx"}, "autopar: error: folder.onnx: not a regular file");
}

TEST_F(CliErrors, TruncatedModel) {
  const std::string bytes = linear().serialize();
  expect_error({"inspect", write("cut.onnx", bytes.substr(0, bytes.size() / 2))},
               "autopar: error: cut.onnx: not an ONNX model (the protobuf does not parse; "
               "truncated or another format?)");
}

TEST_F(CliErrors, NotAnOnnxFile) {
  expect_error({"inspect", write("notes.onnx", "hello world\n")},
               "autopar: error: notes.onnx: not an ONNX model (the protobuf does not parse; "
               "truncated or another format?)");
}

TEST_F(CliErrors, ProtobufWithoutGraph) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  expect_error({"inspect", write("nograph.onnx", model.SerializeAsString())},
               "autopar: error: nograph.onnx: not an ONNX model (it has no graph)");
}

TEST_F(CliErrors, CheckerFailure) {
  testing::OnnxProto m = linear();
  m.model().mutable_graph()->mutable_node(0)->set_op_type("MatMull");
  expect_error({"inspect", write("typo.onnx", m)},
               "autopar: error: typo.onnx: ONNX checker: No Op registered for MatMull with "
               "domain_version of 17");
}

TEST_F(CliErrors, UnsupportedOpWhenPlanning) {
  testing::OnnxProto m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
  m.node("Celu", "act", {"x"}, {}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, {"batch", 4});
  write("celu.onnx", m);
  // Inspecting reports it; planning (--strict) refuses it.
  const testing::CommandResult r = run_autopar({"inspect", "celu.onnx"}, dir_);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("unsupported  Celu"), std::string::npos) << r.out;
  expect_error({"inspect", "celu.onnx", "--strict"},
               "autopar: error: celu.onnx: node 'act' (Celu): unsupported op type");
}

TEST_F(CliErrors, UnboundDim) {
  testing::OnnxProto m;
  m.input("tokens", onnx::TensorProto::FLOAT, {"batch", "seq"});
  m.node("Relu", "act", {"tokens"}, {}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, {"batch", "seq"});
  expect_error({"inspect", write("seq.onnx", m)},
               "autopar: error: seq.onnx: input 'tokens' dim 1 'seq' is unbound: pass --dim seq=N");
}

TEST_F(CliErrors, DimWithoutSize) {
  testing::OnnxProto m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", -1});
  m.node("Relu", "act", {"x"}, {}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, {"batch", -1});
  expect_error({"inspect", write("unknown.onnx", m)},
               "autopar: error: unknown.onnx: input 'x' dim 1 has no size: pass a model with a "
               "static or named dim");
}

TEST_F(CliErrors, DimNotInModel) {
  expect_error({"inspect", write("m.onnx", linear()), "--dim", "seq=8"},
               "autopar: error: --dim seq: m.onnx has no symbolic dim named 'seq' (it has: batch)");
}

TEST_F(CliErrors, MalformedDim) {
  expect_error({"inspect", write("m.onnx", linear()), "--dim", "seq"},
               "autopar: error: --dim seq: expected NAME=N");
  expect_error({"inspect", "m.onnx", "--dim", "batch=-3"},
               "autopar: error: --dim batch=-3: '-3' is not a positive integer");
}

TEST_F(CliErrors, SeqFlag) {
  // --seq sizes a zoo model's sequence; an ONNX file's dims are bound by name.
  expect_error({"inspect", write("m.onnx", linear()), "--seq", "128"},
               "autopar: error: --seq: m.onnx is an ONNX file; bind its sequence dim with --dim "
               "NAME=N");
  expect_error({"inspect", "llama-tiny", "--seq", "0"},
               "autopar: error: --seq 0: must be positive");
  expect_error({"inspect", "llama-tiny", "--seq", "8", "--dim", "seq=16"},
               "autopar: error: --seq 8: the dim 'seq' is bound twice (by --dim)");
  expect_error({"inspect", "llama-tiny", "--dim", "tokens=8"},
               "autopar: error: --dim tokens=8: zoo models have only the batch and seq dims (use "
               "--batch, --seq)");
}

TEST_F(CliErrors, NonPositiveBatch) {
  expect_error({"inspect", write("m.onnx", linear()), "--batch", "0"},
               "autopar: error: --batch 0: the batch must be positive");
}

TEST_F(CliErrors, BadFlags) {
  expect_error({"inspect", write("m.onnx", linear()), "--nope"},
               "autopar: error: The following argument was not expected: --nope");
  expect_error({"inspect", "m.onnx", "--batch", "abc"},
               "autopar: error: Could not convert: --batch = abc");
  expect_error({"inspect"}, "autopar: error: model is required");
  expect_error({"frobnicate"},
               "autopar: error: The following argument was not expected: frobnicate");
}

TEST_F(CliErrors, OpsetTooNew) {
  testing::OnnxProto m = linear();
  m.model().mutable_opset_import(0)->set_version(22);
  expect_error(
      {"inspect", write("new.onnx", m)},
      "autopar: error: new.onnx: ai.onnx opset 22 is newer than the newest supported (21)");
}

// An old-opset model is upgraded through ONNX's shape inference, which divides by strides:
// a zero one is refused first (it ended autopar with SIGFPE).
TEST_F(CliErrors, ZeroStride) {
  testing::OnnxProto m(9);
  m.input("x", onnx::TensorProto::FLOAT, {1, 3, 8, 8});
  m.weight("w", {4, 3, 3, 3});
  m.node("Conv", "conv1", {"x", "w"},
         {testing::attr_ints("kernel_shape", {3, 3}), testing::attr_ints("strides", {1, 0})},
         {"y"});
  m.output("y", onnx::TensorProto::FLOAT, {1, 4, 6, 6});
  expect_error({"inspect", write("conv.onnx", m)},
               "autopar: error: conv.onnx: node 'conv1' (Conv): attribute strides: 0 is not "
               "positive");
}

// Opsets 18..21 read as 17; what has no opset-17 form is refused, naming the node.
TEST_F(CliErrors, OpsetConversionRefusals) {
  {
    testing::OnnxProto m(18);
    m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
    m.input("axes", onnx::TensorProto::INT64, {1});
    m.node("ReduceMean", "mean", {"x", "axes"}, {}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, {"batch", 1});
    expect_error({"inspect", write("axes.onnx", m)},
                 "autopar: error: axes.onnx: node 'mean' (ReduceMean, opset 18): axes 'axes' "
                 "must be a constant (an initializer or a Constant node)");
  }
  {
    testing::OnnxProto m(19);
    m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
    m.node("Pad", "pad", {"x", m.constant_ints("pads", {0, 1, 0, 1})},
           {testing::attr_string("mode", "wrap")}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, {"batch", 6});
    expect_error({"inspect", write("wrap.onnx", m)},
                 "autopar: error: wrap.onnx: node 'pad' (Pad, opset 19): Pad mode 'wrap' is not "
                 "supported");
  }
  {
    testing::OnnxProto m(18);
    m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
    m.node("Split", "split", {"x"},
           {testing::attr_int("axis", 1), testing::attr_int("num_outputs", 3)}, {"a", "b"});
    m.output("a", onnx::TensorProto::FLOAT, {"batch", 2});
    m.output("b", onnx::TensorProto::FLOAT, {"batch", 2});
    expect_error({"inspect", write("split.onnx", m)},
                 "autopar: error: split.onnx: node 'split' (Split, opset 18): num_outputs 3 but 2 "
                 "outputs");
  }
  {
    testing::OnnxProto m(21);
    m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
    m.node("Gelu", "act", {"x"}, {testing::attr_string("approximate", "erf")}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, {"batch", 4});
    expect_error({"inspect", write("gelu.onnx", m)},
                 "autopar: error: gelu.onnx: node 'act' (Gelu, opset 21): approximate 'erf' is "
                 "neither 'none' nor 'tanh'");
  }
  {
    testing::OnnxProto m(20);
    m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
    m.node("Cast", "cast", {"x"}, {testing::attr_int("to", 17)}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, {"batch", 4});
    expect_error({"inspect", write("fp8.onnx", m)},
                 "autopar: error: fp8.onnx: node 'cast' (Cast, opset 20): casts to float8e4m3fn, "
                 "which autopar does not support");
  }
  {
    testing::OnnxProto m(18);
    m.input("x", onnx::TensorProto::INT32, {"batch", 4});
    m.node("BitwiseNot", "not", {"x"}, {}, {"y"});
    m.output("y", onnx::TensorProto::INT32, {"batch", 4});
    expect_error({"inspect", write("bitwise.onnx", m)},
                 "autopar: error: bitwise.onnx: node 'not' (BitwiseNot, opset 18): BitwiseNot is "
                 "new in opset 18-21 and has no opset-17 form autopar runs");
  }
}

TEST_F(CliErrors, NonTensorInput) {
  testing::OnnxProto m = linear();
  auto* input = m.model().mutable_graph()->mutable_input(0);
  input->mutable_type()
      ->mutable_sequence_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(1);
  expect_error({"inspect", write("seq.onnx", m)},
               "autopar: error: seq.onnx: input 'x' is not a tensor (sequence, map and optional "
               "inputs are not supported)");
}

TEST_F(CliErrors, StringInput) {
  testing::OnnxProto m;
  m.input("text", onnx::TensorProto::STRING, {"batch"});
  m.node("Identity", "id", {"text"}, {}, {"y"});
  m.output("y", onnx::TensorProto::STRING, {"batch"});
  expect_error({"inspect", write("text.onnx", m)},
               "autopar: error: text.onnx: input 'text': element type STRING is not supported");
}

TEST_F(CliErrors, ShapeThatIsNotConstant) {
  testing::OnnxProto m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
  m.input("shape", onnx::TensorProto::INT64, {2});
  m.node("Reshape", "view", {"x", "shape"}, {}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, {-1, -1});
  expect_error({"inspect", write("dynamic.onnx", m)},
               "autopar: error: dynamic.onnx: node 'view' (Reshape): shape input 'shape' is not a "
               "constant");
}

TEST_F(CliErrors, BadInitializerData) {
  testing::OnnxProto m = linear();
  m.model().mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(7);
  expect_error({"inspect", write("short.onnx", m)},
               "autopar: error: short.onnx: initializer 'w': raw_data holds 7 bytes, f32[4,2] "
               "needs 32");
}

TEST_F(CliErrors, ExternalDataOutsideTheModelFolder) {
  testing::OnnxProto m = linear();
  auto* w = m.model().mutable_graph()->mutable_initializer(0);
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* entry = w->add_external_data();
  entry->set_key("location");
  entry->set_value("/etc/passwd");
  expect_error({"inspect", write("escape.onnx", m)},
               "autopar: error: escape.onnx: initializer 'w': external data location "
               "'/etc/passwd' must be a relative path inside the model's folder");
}

TEST_F(CliErrors, ExternalDataTooShort) {
  testing::OnnxProto m = linear();
  auto* w = m.model().mutable_graph()->mutable_initializer(0);
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* entry = w->add_external_data();
  entry->set_key("location");
  entry->set_value("w.bin");
  write("w.bin", "0123456789");
  expect_error({"inspect", write("ext.onnx", m)},
               "autopar: error: ext.onnx: initializer 'w': external data 32 bytes at offset 0 of "
               "'w.bin' (10 bytes) do not hold the 32 bytes it needs");
}

TEST_F(CliErrors, ZooUnknownModel) {
  const testing::CommandResult r = run_autopar({"zoo", "gpt5"}, dir_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("autopar: error: unknown model 'gpt5' (valid: mlp, gpt, gpt-tiny, ", 0), 0u)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
}

TEST_F(CliErrors, ZooBadOption) {
  expect_error({"zoo", "gpt", "--heads", "3"},
               "autopar: error: --heads: 3 does not divide --hidden 64");
  expect_error({"zoo", "gpt-tiny", "--no-weights", "--with-weights"},
               "autopar: error: --no-weights and --with-weights contradict each other");
  expect_error({"zoo", "gpt-tiny", "--dropout", "1.5"},
               "autopar: error: --dropout: 1.5 is not a probability in [0, 1)");
  expect_error({"zoo", "resnet-tiny", "--dropout", "0.1"},
               "autopar: error: --dropout does not apply to the resnet family (it takes --image, "
               "--classes)");
}

TEST_F(CliErrors, ZooUnwritableOutput) {
  expect_error({"zoo", "gpt-tiny", "-o", "missing/dir/gpt.onnx"},
               "autopar: error: missing/dir/gpt.onnx: cannot write: No such file or directory");
}

// ---- autopar run: inputs that do not fit the model ----------------------------------

class RunErrors : public CliErrors {
 protected:
  void SetUp() override {
    CliErrors::SetUp();
    write("linear.onnx", linear());
    std::filesystem::create_directory(dir_ + "/in");
  }
  void input(int i, const Tensor& t) {
    ASSERT_TRUE(write_tensor_file(fmt::format("{}/in/input_{}.pb", dir_, i), t, "x").is_ok());
  }
};

TEST_F(RunErrors, NoInputFiles) {
  expect_error({"run", "linear.onnx", "--inputs", "in"},
               "autopar: error: --inputs in: holds no input_0.pb");
  expect_error({"run", "linear.onnx"},
               "autopar: error: --inputs DIR is required to run linear.onnx (or pass --train)");
}

TEST_F(RunErrors, DimsGivenWithInputFiles) {
  input(0, Tensor(DType::kFloat32, {2, 4}));
  expect_error(
      {"run", "linear.onnx", "--inputs", "in", "--batch", "8"},
      "autopar: error: --batch/--dim: with --inputs the dims come from the input files (they bind "
      "dims for --train)");
}

TEST_F(RunErrors, InputCount) {
  input(0, Tensor(DType::kFloat32, {2, 4}));
  input(1, Tensor(DType::kFloat32, {2, 4}));
  expect_error({"run", "linear.onnx", "--inputs", "in"},
               "autopar: error: linear.onnx: the model has 1 input (x), 2 given");
}

TEST_F(RunErrors, InputDtype) {
  input(0, Tensor(DType::kInt64, {2, 4}));
  expect_error({"run", "linear.onnx", "--inputs", "in"},
               "autopar: error: linear.onnx: input 'x': expected f32, got i64");
}

TEST_F(RunErrors, InputRank) {
  input(0, Tensor(DType::kFloat32, {8}));
  expect_error({"run", "linear.onnx", "--inputs", "in"},
               "autopar: error: linear.onnx: input 'x': expected rank 2, got 1 [8]");
}

TEST_F(RunErrors, InputDim) {
  input(0, Tensor(DType::kFloat32, {2, 5}));
  expect_error({"run", "linear.onnx", "--inputs", "in"},
               "autopar: error: linear.onnx: input 'x' dim 1: expected 4, got 5");
}

// A run whose activations need more memory than the machine has is refused before any is
// allocated: x[1000, 1] expanded to [1000, 1e8] floats is 372.5 GiB.
TEST_F(RunErrors, ActivationsTooLargeForThisMachine) {
  testing::OnnxProto m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", 1});
  m.initializer(testing::int64_tensor("shape", {2}, {1, 100000000}));
  m.node("Expand", "expand", {"x", "shape"}, {}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, {"batch", 100000000});
  write("expand.onnx", m);
  input(0, Tensor(DType::kFloat32, {1000, 1}));
  const testing::CommandResult r = run_autopar({"run", "expand.onnx", "--inputs", "in"}, dir_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(std::regex_match(
      r.err, std::regex("autopar: error: expand\\.onnx: running it on these inputs needs about "
                        "372\\.5 GiB of activations and this machine has [0-9]+\\.[0-9] GiB "
                        "available\n")))
      << r.err;
}

TEST_F(RunErrors, NotATensorFile) {
  write("in/input_0.pb", std::string("\xff\xff\xff", 3));
  expect_error(
      {"run", "linear.onnx", "--inputs", "in"},
      "autopar: error: in/input_0.pb: not an ONNX TensorProto (the protobuf does not parse)");
}

// ---- training: hyper-parameters and losses that cannot work ---------------------------

TEST_F(CliErrors, HyperParametersThatMakeNaN) {
  expect_error({"run", "mlp", "--train", "--lr", "-1"},
               "autopar: error: --lr -1: must be positive and finite");
  expect_error({"run", "mlp", "--train", "--beta2", "1"},
               "autopar: error: --beta2 1: must be in [0, 1)");
  expect_error({"run", "mlp", "--train", "--optimizer", "sgd", "--momentum", "1.5"},
               "autopar: error: --momentum 1.5: must be in [0, 1)");
  expect_error({"run", "mlp", "--train", "--epsilon", "0"},
               "autopar: error: --epsilon 0: must be positive and finite");
  expect_error({"train-graph", "mlp", "--weight-decay", "-0.1"},
               "autopar: error: --weight-decay -0.1: must be zero or positive and finite");
}

TEST_F(CliErrors, TrainingThatDiverges) {
  expect_error({"run", "mlp", "--train", "--optimizer", "sgd", "--lr", "1e30", "--steps", "5"},
               "autopar: error: step 2: the loss is nan (lower --lr?)");
}

TEST_F(CliErrors, LossThatDoesNotFitTheModel) {
  expect_error({"run", "mlp", "--train", "--loss", "hinge"},
               "autopar: error: --loss hinge: expected cross_entropy or mse");
  expect_error({"run", "mlp", "--train", "--optimizer", "lion"},
               "autopar: error: --optimizer lion: expected sgd, adam or adamw");
}

TEST_F(CliErrors, CrossEntropyWithoutClasses) {
  ASSERT_EQ(run_autopar({"zoo", "mlp", "--classes", "1", "-o", "regression.onnx"}, dir_).exit_code,
            0);
  expect_error(
      {"run", "regression.onnx", "--train", "--loss", "cross_entropy"},
      "autopar: error: cross_entropy: output 'logits' f32[4,1] has no class axis (its last dim "
      "must count at least 2 classes); use --loss mse");
}

TEST_F(CliErrors, TrainingAShapeOnlyModel) {
  ASSERT_EQ(run_autopar({"zoo", "mlp", "--no-weights", "-o", "shapes.onnx"}, dir_).exit_code, 0);
  expect_error({"run", "shapes.onnx", "--train"},
               "autopar: error: parameter 'fc.0.weight' has no data: training needs a model with "
               "weights (autopar zoo --with-weights)");
}

TEST_F(CliErrors, TrainingSteps) {
  expect_error({"run", "mlp", "--train", "--steps", "0"},
               "autopar: error: --steps 0: must be at least 1");
  expect_error({"run", "mlp", "--train", "--batches", "0"},
               "autopar: error: --batches 0: must be at least 1");
}

TEST_F(CliErrors, TrainingStepAtAnotherBatch) {
  ASSERT_EQ(run_autopar({"train-graph", "mlp", "--batch", "2", "-o", "train.onnx"}, dir_).exit_code,
            0);
  expect_error({"inspect", "train.onnx", "--batch", "8"},
               "autopar: error: train.onnx: --batch 8: this training step was built with batch = 2 "
               "(its gradients are shaped for it); rebuild it with train-graph --batch 8");
}

// profile: a missing plan, a broken profile, bad flags, and a plan needing more devices than
// the machine has cores (each device runs on a core of its own).
TEST_F(CliErrors, Profile) {
  auto transform = [&](int64_t dp, const std::string& out) {
    std::ofstream(dir_ + "/" + out + ".yaml") << fmt::format("mesh: {{dp: {}}}\n", dp);
    const testing::CommandResult t = run_autopar({"transform", "mlp", "--scheme", out + ".yaml",
                                                  "-o", out, "--batch", std::to_string(2 * dp)},
                                                 dir_);
    ASSERT_EQ(t.exit_code, 0) << t.err;
  };
  std::ofstream(dir_ + "/broken.yaml") << "name: broken\ndevice: {peak_flops: {fp32: -1}}\n";
  expect_error({"profile", "absent", "--hw", "broken.yaml"},
               "autopar: error: absent: no plan here (manifest.yaml is missing)");
  transform(1, "one");
  expect_error({"profile", "one", "--hw", "broken.yaml"},
               "autopar: error: broken.yaml: device.peak_flops.fp32: -1 must be positive");
  {
    // A shipped profile with one optional field spelled wrong.
    std::ifstream shipped(std::string(AUTOPAR_SOURCE_DIR) + "/configs/hw/dgx-h100.yaml");
    std::string text((std::istreambuf_iterator<char>(shipped)), std::istreambuf_iterator<char>());
    const size_t at = text.find("free_views: true");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 16, "free_views: often");
    std::ofstream(dir_ + "/views.yaml") << text;
  }
  expect_error({"profile", "one", "--hw", "views.yaml"},
               "autopar: error: views.yaml: device.free_views: expected true or false");
  {
    // The same profile with an L2 cache of a negative size.
    std::ifstream shipped(std::string(AUTOPAR_SOURCE_DIR) + "/configs/hw/dgx-h100.yaml");
    std::string text((std::istreambuf_iterator<char>(shipped)), std::istreambuf_iterator<char>());
    const size_t at = text.find("l2_bytes: 52428800");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 18, "l2_bytes: -1");
    std::ofstream(dir_ + "/l2.yaml") << text;
  }
  expect_error({"profile", "one", "--hw", "l2.yaml"},
               "autopar: error: l2.yaml: device.l2_bytes: -1 must not be negative");
  expect_error({"profile", "one", "--hw", "dgx-h100", "--steps", "0"},
               "autopar: error: --steps 0: must be at least 1");
  const int64_t cores = std::max<unsigned>(1, std::thread::hardware_concurrency());
  transform(2 * cores, "wide");
  expect_error({"profile", "wide", "--hw", "dgx-h100"},
               fmt::format("autopar: error: wide: the plan has {} devices but this machine has {} "
                           "cores (profile runs each device on a core of its own)",
                           2 * cores, cores));
}

}  // namespace
}  // namespace autopar
