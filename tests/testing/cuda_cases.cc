#include "testing/cuda_cases.h"

#include <random>

#include "autopar/runtime/communicator.h"
#include "autopar/runtime/plan_runner.h"
#include "autopar/runtime/trainer.h"
#include "autopar/zoo/zoo.h"

namespace autopar::testing {

TrainingStep tiny_training_step(const std::string& name, bool fused) {
  ZooOptions zoo;
  zoo.batch = 4;
  zoo.with_weights = true;
  const Graph model = *build_zoo_model(name, zoo);
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
