#include "testing/cuda_cases.h"

#include <random>

#include "autopar/parallel/lowering.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/plan_runner.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"

namespace autopar::testing {

TrainingStep tiny_training_step(const std::string& name, bool fused, DType precision) {
  ZooOptions zoo;
  zoo.batch = 4;
  zoo.with_weights = true;
  const Graph zoo_model = *build_zoo_model(name, zoo);
  const Graph model =
      precision == DType::kFloat32 ? zoo_model : *to_mixed_precision(zoo_model, precision);
  TrainingOptions options;
  options.fused = fused;
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::kSgd;
  TrainingStep step;
  step.training = *build_training_graph(model, {default_loss(model), ""}, sgd, options);
  const Graph& g = step.training.graph;
  const std::vector<TensorPtr> inputs = runtime::synthetic_inputs(model, 3);
  for (size_t i = 0; i < inputs.size(); ++i)
    step.feeds.emplace_back(*g.find_value(model.value(model.inputs()[i]).name), inputs[i]);
  const Value& labels = g.value(step.training.labels);
  Tensor label_values(labels.dtype, labels.shape.dims);
  for (int64_t i = 0; i < label_values.num_elements(); ++i) label_values.set_from_int(i, i % 3);
  step.feeds.emplace_back(step.training.labels,
                          std::make_shared<const Tensor>(std::move(label_values)));
  return step;
}

Tensor random_tensor(DType dtype, std::vector<int64_t> dims, uint64_t seed, double lo, double hi) {
  Tensor t(dtype, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(lo, hi);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, uniform(rng));
  return t;
}

std::vector<OpCase> llama_op_cases(DType t) {
  const std::string training(kTrainingDomain);
  std::vector<OpCase> cases = {{"RMSNormalization",
                                NodeRun("RMSNormalization", 17, training)
                                    .input(random_tensor(t, {6, 4, 32}, 200))
                                    .input(random_tensor(t, {32}, 201, 0.5, 1.5))
                                    .attr("axis", int64_t{1})
                                    .attr("epsilon", 1e-5f),
                                "map 1 reduce 1"},
                               {"RMSNormalizationGrad",
                                NodeRun("RMSNormalizationGrad", 17, training)
                                    .input(random_tensor(t, {6, 32}, 202))
                                    .input(random_tensor(t, {6, 32}, 203))
                                    .input(random_tensor(t, {32}, 204, 0.5, 1.5))
                                    .outputs(2),
                                "map 2 reduce 2"},
                               {"SwiGLU",
                                NodeRun("SwiGLU", 17, training)
                                    .input(random_tensor(t, {4, 50}, 208, -3, 3))
                                    .input(random_tensor(t, {4, 50}, 209)),
                                "map 1"},
                               {"SwiGLUGrad",
                                NodeRun("SwiGLUGrad", 17, training)
                                    .input(random_tensor(t, {4, 50}, 210))
                                    .input(random_tensor(t, {4, 50}, 211, -3, 3))
                                    .input(random_tensor(t, {4, 50}, 212))
                                    .outputs(2),
                                "map 1"}};
  for (int64_t inverse : {0, 1}) {
    cases.push_back({"RotaryEmbedding inverse " + std::to_string(inverse),
                     NodeRun("RotaryEmbedding", 17, training)
                         .input(random_tensor(t, {2, 3, 8, 16}, 205))
                         .input(random_tensor(t, {8, 16}, 206))
                         .input(random_tensor(t, {8, 16}, 207))
                         .attr("inverse", inverse),
                     "map 1"});
  }
  for (int64_t causal : {0, 1}) {
    const std::string what = "Attention causal " + std::to_string(causal);
    cases.push_back({what,
                     NodeRun("Attention", 17, training)
                         .input(random_tensor(t, {2, 4, 8, 16}, 213))
                         .input(random_tensor(t, {2, 2, 8, 16}, 214))
                         .input(random_tensor(t, {2, 2, 8, 12}, 215))
                         .attr("causal", causal)
                         .attr("scale", 0.25f)
                         .outputs(2),
                     causal ? "map 4 matmul 2 reduce 2" : "map 3 matmul 2 reduce 2"});
    cases.push_back({what + " grad",
                     NodeRun("AttentionGrad", 17, training)
                         .input(random_tensor(t, {2, 4, 8, 12}, 216))
                         .input(random_tensor(t, {2, 4, 8, 16}, 213))
                         .input(random_tensor(t, {2, 2, 8, 16}, 214))
                         .input(random_tensor(t, {2, 2, 8, 12}, 215))
                         .input(random_tensor(t, {2, 4, 8, 12}, 217))
                         .input(random_tensor(t, {2, 4, 8}, 218, 1, 2))
                         .attr("causal", causal)
                         .attr("scale", 0.25f)
                         .outputs(3),
                     causal ? "map 4 matmul 5 reduce 1" : "map 3 matmul 5 reduce 1"});
  }
  for (OpCase& c : cases) c.what += " " + std::string(dtype_name(t));
  return cases;
}

Tensor index_tensor(std::vector<int64_t> dims, int64_t range, uint64_t seed) {
  Tensor t(DType::kInt64, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> uniform(0, range - 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_int(i, uniform(rng));
  return t;
}

std::vector<OpCase> indexing_op_cases(DType t) {
  std::vector<OpCase> cases = {{"GatherElements",
                                NodeRun("GatherElements")
                                    .input(random_tensor(t, {6, 8}, 73))
                                    .input(index_tensor({6, 3}, 8, 74))
                                    .attr("axis", int64_t{1}),
                                "gather_elements 1"},
                               {"GatherElements axis 0, 3-D",
                                NodeRun("GatherElements")
                                    .input(random_tensor(t, {5, 4, 3}, 123))
                                    .input(index_tensor({7, 4, 2}, 5, 124)),
                                "gather_elements 1"},
                               {"ScatterElements add",
                                NodeRun("ScatterElements", 16)
                                    .input(random_tensor(t, {64}, 75))
                                    .input(index_tensor({200}, 64, 76))
                                    .input(random_tensor(t, {200}, 77))
                                    .attr("reduction", std::string("add")),
                                "scatter_elements 1"},
                               {"ScatterElements axis 1",
                                NodeRun("ScatterElements", 16)
                                    .input(random_tensor(t, {4, 9}, 125))
                                    .input(i64({4, 2}, {0, 8, 3, 4, 7, 1, 2, 5}))
                                    .input(random_tensor(t, {4, 2}, 126))
                                    .attr("axis", int64_t{1}),
                                "scatter_elements 1"},
                               {"GatherND",
                                NodeRun("GatherND")
                                    .input(random_tensor(t, {5, 6, 7}, 78))
                                    .input(i64({3, 2}, {0, 1, 4, 5, 2, 0})),
                                "gather_nd 1"},
                               {"GatherND whole dims, negative index",
                                NodeRun("GatherND")
                                    .input(random_tensor(t, {5, 6, 7}, 127))
                                    .input(i64({2, 2, 3}, {0, 1, 2, 4, -1, 6, 3, 3, 3, 1, 0, -7})),
                                "gather_nd 1"},
                               {"ScatterND",
                                NodeRun("ScatterND")
                                    .input(random_tensor(t, {5, 6, 7}, 79))
                                    .input(i64({2, 2}, {0, 1, 4, 5}))
                                    .input(random_tensor(t, {2, 7}, 80)),
                                "scatter_nd 1"}};
  for (OpCase& c : cases) c.what += " " + std::string(dtype_name(t));
  return cases;
}

std::vector<OpCase> resize_op_cases() {
  std::vector<OpCase> cases;
  const std::vector<std::pair<std::string, std::string>> modes = {{"nearest", "half_pixel"},
                                                                  {"nearest", "asymmetric"},
                                                                  {"linear", "half_pixel"},
                                                                  {"linear", "align_corners"},
                                                                  {"linear", "pytorch_half_pixel"}};
  uint64_t seed = 96;
  for (const auto& [mode, coordinate] : modes) {
    cases.push_back({"Resize " + mode + " " + coordinate + " x2",
                     NodeRun("Resize", 13)
                         .input(random_tensor(DType::kFloat32, {1, 3, 5, 7}, seed++))
                         .omitted()
                         .constant(f32({4}, {1, 1, 2, 2}))
                         .attr("mode", mode)
                         .attr("coordinate_transformation_mode", coordinate),
                     "resize 1"});
    cases.push_back({"Resize " + mode + " " + coordinate + " down",
                     NodeRun("Resize", 13)
                         .input(random_tensor(DType::kFloat32, {2, 2, 9, 6}, seed++))
                         .omitted()
                         .constant(f32({4}, {1, 1, 0.5f, 0.75f}))
                         .attr("mode", mode)
                         .attr("coordinate_transformation_mode", coordinate),
                     "resize 1"});
  }
  cases.push_back({"Resize nearest ceil, 1-D",
                   NodeRun("Resize", 13)
                       .input(random_tensor(DType::kFloat32, {2, 3, 7}, 140))
                       .omitted()
                       .constant(f32({3}, {1, 1, 1.5f}))
                       .attr("mode", std::string("nearest"))
                       .attr("nearest_mode", std::string("ceil")),
                   "resize 1"});
  return cases;
}

std::vector<OpCase> conv_op_cases(DType t) {
  using Ints = std::vector<int64_t>;
  const Tensor x = random_tensor(t, {2, 8, 12, 12}, 90);
  std::vector<OpCase> cases = {
      {"Conv 3x3 with bias",
       NodeRun("Conv")
           .input(x)
           .input(random_tensor(t, {16, 8, 3, 3}, 91))
           .input(random_tensor(t, {16}, 92))
           .attr("pads", Ints{1, 1, 1, 1}),
       "conv 1 map 1"},
      {"Conv grouped, strided, asymmetric pads",
       NodeRun("Conv")
           .input(x)
           .input(random_tensor(t, {8, 4, 3, 3}, 93))
           .attr("strides", Ints{2, 2})
           .attr("group", int64_t{2})
           .attr("pads", Ints{0, 0, 1, 1}),
       "conv 1 map 2"},
      {"Conv depthwise",
       NodeRun("Conv")
           .input(x)
           .input(random_tensor(t, {8, 1, 3, 3}, 101))
           .attr("group", int64_t{8})
           .attr("pads", Ints{1, 1, 1, 1}),
       "conv 1"},
      {"Conv 1-D dilated",
       NodeRun("Conv")
           .input(random_tensor(t, {2, 4, 20}, 102))
           .input(random_tensor(t, {6, 4, 3}, 103))
           .attr("dilations", Ints{2})
           .attr("pads", Ints{2, 2}),
       "conv 1"},
      {"Conv 3-D strided",
       NodeRun("Conv")
           .input(random_tensor(t, {1, 3, 5, 6, 7}, 104))
           .input(random_tensor(t, {4, 3, 2, 3, 2}, 105))
           .attr("strides", Ints{1, 2, 1})
           .attr("pads", Ints{1, 1, 1, 1, 1, 1}),
       "conv 1"},
      // Weight gradients as autodiff writes them (a filter larger than the output): cuDNN's
      // backward filter, plain and of a strided, padded forward convolution.
      {"Conv as a weight gradient",
       NodeRun("Conv")
           .input(random_tensor(t, {4, 2, 9, 9}, 97))
           .input(random_tensor(t, {5, 2, 4, 4}, 98))
           .attr("dilations", Ints{2, 2}),
       "conv 1 map 3"},
      {"Conv as a strided convolution's weight gradient",
       NodeRun("Conv")
           .input(random_tensor(t, {3, 2, 10, 10}, 99))
           .input(random_tensor(t, {4, 2, 5, 5}, 100))
           .attr("dilations", Ints{2, 2})
           .attr("pads", Ints{1, 1, 1, 1}),
       "conv 1 map 3"},
      {"ConvTranspose strided, output padding",
       NodeRun("ConvTranspose")
           .input(random_tensor(t, {2, 8, 6, 6}, 94))
           .input(random_tensor(t, {8, 4, 3, 3}, 95))
           .attr("strides", Ints{2, 2})
           .attr("pads", Ints{1, 1, 1, 1})
           .attr("output_padding", Ints{1, 1}),
       "conv 1"},
      {"ConvTranspose grouped with bias",
       NodeRun("ConvTranspose")
           .input(random_tensor(t, {2, 6, 5, 5}, 106))
           .input(random_tensor(t, {6, 2, 3, 3}, 107))
           .input(random_tensor(t, {6}, 108))
           .attr("group", int64_t{3}),
       "conv 1 map 1"},
      {"MaxPool with indices",
       NodeRun("MaxPool")
           .input(x)
           .attr("kernel_shape", Ints{3, 3})
           .attr("strides", Ints{2, 2})
           .attr("pads", Ints{1, 1, 1, 1})
           .outputs(2),
       "pool 1"},
      {"MaxPool dilated, ceil mode",
       NodeRun("MaxPool")
           .input(random_tensor(t, {2, 3, 11, 11}, 109))
           .attr("kernel_shape", Ints{3, 3})
           .attr("strides", Ints{2, 2})
           .attr("dilations", Ints{2, 2})
           .attr("ceil_mode", int64_t{1}),
       "pool 1"},
      {"MaxPool 1-D",
       NodeRun("MaxPool")
           .input(random_tensor(t, {3, 4, 17}, 110))
           .attr("kernel_shape", Ints{4})
           .attr("strides", Ints{3})
           .attr("pads", Ints{1, 2}),
       "pool 1"},
      {"MaxPoolGrad",
       NodeRun("MaxPoolGrad", 17, std::string(kTrainingDomain))
           .input(random_tensor(t, {2, 8, 6, 6}, 111))
           .input(x)
           .attr("kernel_shape", Ints{3, 3})
           .attr("strides", Ints{2, 2})
           .attr("pads", Ints{1, 1, 1, 1}),
       "pool 1"},
      {"AveragePool",
       NodeRun("AveragePool").input(x).attr("kernel_shape", Ints{2, 2}).attr("strides", Ints{2, 2}),
       "pool 1"},
      {"AveragePool counting pads, ceil mode",
       NodeRun("AveragePool")
           .input(random_tensor(t, {2, 3, 10, 9}, 112))
           .attr("kernel_shape", Ints{3, 3})
           .attr("strides", Ints{2, 2})
           .attr("pads", Ints{1, 1, 1, 1})
           .attr("count_include_pad", int64_t{1})
           .attr("ceil_mode", int64_t{1}),
       "pool 1"},
      {"BatchNormalization inference",
       NodeRun("BatchNormalization", 15)
           .input(random_tensor(t, {4, 6, 5, 5}, 113))
           .input(random_tensor(t, {6}, 114))
           .input(random_tensor(t, {6}, 115))
           .input(random_tensor(t, {6}, 116))
           .input(random_tensor(t, {6}, 117, 0.5, 1.5)),
       "batch_norm 1"}};
  if (t == DType::kFloat32 || t == DType::kFloat64) {
    cases.push_back({"BatchNormalization training",
                     NodeRun("BatchNormalization", 15)
                         .input(random_tensor(t, {4, 6, 5, 5}, 50))
                         .input(random_tensor(t, {6}, 51))
                         .input(random_tensor(t, {6}, 52))
                         .input(random_tensor(t, {6}, 53))
                         .input(random_tensor(t, {6}, 54, 0.5, 1.5))
                         .attr("training_mode", int64_t{1})
                         .outputs(3),
                     "batch_norm 1"});
    // Before opset 14: outputs 3 and 4 are the batch's own mean and biased variance.
    cases.push_back({"BatchNormalization training, opset 9",
                     NodeRun("BatchNormalization", 9)
                         .input(random_tensor(t, {3, 5, 4}, 118))
                         .input(random_tensor(t, {5}, 119))
                         .input(random_tensor(t, {5}, 120))
                         .input(random_tensor(t, {5}, 121))
                         .input(random_tensor(t, {5}, 122, 0.5, 1.5))
                         .outputs(5),
                     "batch_norm 1"});
  }
  for (OpCase& c : cases) c.what += " " + std::string(dtype_name(t));
  return cases;
}

Status lower_every_program(
    const Plan& plan, runtime::CudaCommunication communication,
    const std::function<void(int64_t device, const Program& program, const Graph& graph,
                             const runtime::CudaLowering& lowering)>& visit) {
  const int64_t devices = plan.scheme.mesh.num_devices();
  auto world = runtime::create_inproc_world(devices, std::chrono::milliseconds(5000));
  for (int64_t d = 0; d < devices; ++d) {
    world[d]->set_mesh(plan.scheme.mesh);
    const Role& role = plan.role_of(d);
    for (const Program& prog : role.programs) {
      ASSIGN_OR_RETURN(runtime::ProgramGraph pg, runtime::extract_program(role.graph, prog));
      runtime::CudaOptions options;
      options.communication = communication;
      options.communicator = world[d].get();
      auto lowered = runtime::lower_for_cuda(pg.graph, options);
      if (!lowered.is_ok())
        return error("device {} {}: {}", d, prog.name(), lowered.status().message());
      visit(d, prog, pg.graph, **lowered);
    }
  }
  return Status::ok();
}

}  // namespace autopar::testing
