// lower(): training graph → paradigms' policy → SPMD graph → roles → schedules.
#include "autopar/parallel/lowering.h"

#include <algorithm>
#include <atomic>

#include "autopar/cost/hardware_profile.h"
#include "autopar/ir/pattern_fusion.h"
#include "autopar/ir/verify.h"
#include "autopar/parallel/primitives.h"

namespace autopar {

const char* program_kind_name(ProgramKind kind) {
  switch (kind) {
    case ProgramKind::kForward:
      return "forward";
    case ProgramKind::kBackward:
      return "backward";
    case ProgramKind::kUpdate:
      return "update";
    case ProgramKind::kExchange:
      return "exchange";
  }
  return "";
}

std::string Program::name() const {
  switch (kind) {
    case ProgramKind::kForward:
      return fmt::format("F{}", chunk);
    case ProgramKind::kBackward:
      return fmt::format("B{}", chunk);
    case ProgramKind::kUpdate:
      return "U";
    case ProgramKind::kExchange:
      return "X";
  }
  return "";
}

int Role::program_of(const ScheduleStep& step) const {
  for (size_t p = 0; p < programs.size(); ++p) {
    if (programs[p].kind == step.kind && programs[p].chunk == step.chunk)
      return static_cast<int>(p);
  }
  return -1;
}

std::string ScheduleStep::to_string() const {
  switch (kind) {
    case ProgramKind::kForward:
      return fmt::format("F{}.{}", chunk, micro);
    case ProgramKind::kBackward:
      return fmt::format("B{}.{}", chunk, micro);
    case ProgramKind::kUpdate:
      return "U";
    case ProgramKind::kExchange:
      return "X";
  }
  return "";
}

const std::vector<LoweringPass>& lowering_passes() {
  static const std::vector<LoweringPass> passes = {
      {"split-projections",
       "fused projections (q/k/v) split into one per part (tensor parallelism)"},
      {"mixed-precision", "the forward narrowed to bf16 or fp16 with fp32 master weights"},
      {"training-graph", "loss, backward and optimizer added (training)"},
      {"batch-norm-statistics", "training BatchNorm written as reductions (dp or sp)"},
      {"gradient-casts", "tied gradients cast per contribution (mixed precision, microbatches)"},
      {"spmd", "one program for a pipeline stage's devices: strategies, reshards, ZeRO"},
      {"roles", "the SPMD graph cut into one graph per pipeline rank, with Send/Recv"},
  };
  return passes;
}

namespace {

// After a pass: its graph checked (under options.verify_passes, and in debug builds) and shown
// to options.after_pass.
Status after_pass(const LoweringOptions& options, std::string_view pass, const Graph& graph) {
#ifdef AUTOPAR_VERIFY_PASSES
  constexpr bool kAlways = true;
#else
  constexpr bool kAlways = false;
#endif
  if (kAlways || options.verify_passes) {
    Status valid = verify(graph);
    if (!valid.is_ok()) return error("after pass {}: {}", pass, valid.message());
  }
  if (options.after_pass) options.after_pass(pass, graph);
  return Status::ok();
}

// The graph the SPMD pass lowers: fused projections split, the forward narrowed, the training
// graph built and rewritten as the policy asks, each node's layer assigned.
StatusOr<PreparedGraph> prepare_graph(const Graph& model, const LoweringPolicy& policy,
                                      const LoweringOptions& options, int32_t layers,
                                      int64_t microbatches) {
  PreparedGraph prepared;
  Graph rewritten;
  const Graph* source = &model;
  if (policy.split_fused_projections) {
    ASSIGN_OR_RETURN(rewritten, split_fused_projections(model, prepared.parts));
    source = &rewritten;
    RETURN_IF_ERROR(after_pass(options, "split-projections", rewritten));
  }
  Graph narrowed;
  if (policy.compute != DType::kFloat32) {
    ASSIGN_OR_RETURN(narrowed, to_mixed_precision(*source, policy.compute));
    source = &narrowed;
    RETURN_IF_ERROR(after_pass(options, "mixed-precision", narrowed));
  }
  static std::atomic<uint64_t> next_id{1};
  prepared.id = next_id++;
  prepared.training_graph = !options.inference;
  // The layer each node goes with: assign over one stage per layer. Stages are contiguous
  // layer ranges, so a node's stage is always the stage of its layer.
  std::vector<int32_t> identity(std::max(layers, 1));
  for (int32_t l = 0; l < static_cast<int32_t>(identity.size()); ++l) identity[l] = l;
  if (!prepared.training_graph) {
    prepared.inference = policy.fuse_attention
                             ? fuse_training_patterns(*source, nullptr, {.attention = true})
                             : *source;
    tag_source_ops(prepared.inference, {});
    prepared.layer_of = assign(prepared.inference, identity, static_cast<int32_t>(identity.size()));
    return prepared;
  }
  TrainingGraph& training = prepared.training;
  // Plans run fused training ops (each parameter's Adam update, LayerNorm's gradient).
  ASSIGN_OR_RETURN(training,
                   build_training_graph(
                       *source, options.loss, options.optimizer,
                       TrainingOptions{.fused = true, .fuse_attention = policy.fuse_attention}));
  tag_source_ops(training.graph, forward_nodes(training));
  RETURN_IF_ERROR(after_pass(options, "training-graph", training.graph));
  if (policy.batch_norm_as_reductions) {
    ASSIGN_OR_RETURN(Graph rewritten_training, batch_norm_statistics_as_reductions(training.graph));
    training = with_rewritten_graph(training, std::move(rewritten_training));
    RETURN_IF_ERROR(after_pass(options, "batch-norm-statistics", training.graph));
  }
  if (policy.compute != DType::kFloat32 && microbatches > 1) {
    ASSIGN_OR_RETURN(training, distribute_gradient_casts(std::move(training)));
    RETURN_IF_ERROR(after_pass(options, "gradient-casts", training.graph));
  }
  prepared.forward_of = forward_nodes(training);
  prepared.layer_of =
      assign(training.graph, identity, static_cast<int32_t>(identity.size()), prepared.forward_of);
  return prepared;
}

// Every axis that splits the devices must be one a paradigm uses.
Status check_mesh_axes(const Scheme& scheme, const LoweringPolicy& policy) {
  for (const MeshAxis& axis : scheme.mesh.axes()) {
    if (axis.size == 1 || axis.name == "pp") continue;
    if (std::find(policy.spmd.axes.begin(), policy.spmd.axes.end(), axis.name) ==
        policy.spmd.axes.end()) {
      return error("mesh.{}: no paradigm splits over '{}' (the axes are pp, dp, tp, sp and cp)",
                   axis.name, axis.name);
    }
  }
  return Status::ok();
}

// An axis that splits nothing would only replicate the work: say why instead.
Status check_axes_split(const Scheme& scheme, const SpmdResult& spmd, const Graph& graph) {
  auto splits_any = [](const auto& specs, std::string_view axis) {
    for (const auto& spec : specs) {
      if (spec.layout.dim_of(axis) >= 0) return true;
    }
    return false;
  };
  if (scheme.tp() > 1 && !splits_any(spmd.state, "tp")) {
    const Value* first = nullptr;
    for (ValueId p : graph.parameters()) {
      if (graph.value(p).shape.rank() >= 2) {
        first = &graph.value(p);
        break;
      }
    }
    return error("mesh.tp: {} divides no dim of a parameter the model splits{}", scheme.tp(),
                 first ? fmt::format(" (e.g. {} {}[{}])", first->name, dtype_name(first->dtype),
                                     fmt::join(first->shape.dims, ","))
                       : std::string());
  }
  if (scheme.sp() > 1 && !splits_any(spmd.data, "sp")) {
    return error("mesh.sp: {} divides no sequence or height dim of the inputs ({})", scheme.sp(),
                 fmt::format("{}", fmt::join(
                                       [&] {
                                         std::vector<std::string> shapes;
                                         for (const DataSpec& d : spmd.data)
                                           shapes.push_back(fmt::format("{} [{}]", d.name,
                                                                        fmt::join(d.shape, ",")));
                                         return shapes;
                                       }(),
                                       ", ")));
  }

  return Status::ok();
}

// Each source node's virtual pipeline stage: its layer's, by the policy's stage ranges.
std::vector<int32_t> source_stages(const Graph& graph, const LoweringPolicy& policy, int32_t layers,
                                   const std::vector<NodeId>& forward_of) {
  const int64_t virtual_stages = policy.stages * policy.chunks;
  std::vector<int32_t> layer_stage(std::max(layers, 1), 0);
  for (int32_t s = 0; s < static_cast<int32_t>(policy.stage_layers.size()); ++s) {
    const auto [first, last] = policy.stage_layers[s];
    for (int32_t l = std::max(first, 0); l <= last && l < static_cast<int32_t>(layer_stage.size());
         ++l)
      layer_stage[l] = s;
  }
  return assign(graph, layer_stage, static_cast<int32_t>(virtual_stages), forward_of);
}

}  // namespace

StatusOr<SpmdLowering> lower_to_spmd(const Graph& model, const Scheme& scheme,
                                     const LoweringOptions& options) {
  SpmdLowering out;
  int32_t layers = 0;
  for (const Node& n : model.nodes()) layers = std::max(layers, n.layer + 1);

  const int64_t microbatches = scheme.microbatches();
  if (microbatches < 1) return error("batch: the scheme has no microbatches");
  if (scheme.schedule == PipelineSchedule::kInterleaved && scheme.pp() > 1 &&
      microbatches % scheme.pp() != 0) {
    return error(
        "pipeline.schedule: interleaved needs the microbatches ({}) to be a multiple of pp ({})",
        microbatches, scheme.pp());
  }
  LoweringPolicy& policy = out.policy;
  policy.spmd.microbatches = microbatches;
  policy.spmd.parameter_split = [](const Graph&, const Node&, std::string_view) { return true; };
  for (const Paradigm& paradigm : paradigms()) {
    RETURN_IF_ERROR(paradigm.configure(scheme, model, layers, policy));
  }
  // The attention kernel the scheme names, or else the hardware's software stack runs.
  policy.fuse_attention = runs_flash_attention(scheme, options.profile.get());
  policy.regather = backward_regathers(policy.spmd, scheme, options.profile.get());
  policy.recast_loss = runs_fused_cross_entropy(scheme, options.profile.get());

  auto prepare = [&]() -> StatusOr<PreparedGraph> {
    return prepare_graph(model, policy, options, layers, microbatches);
  };
  std::shared_ptr<const PreparedGraph> prepared;
  if (options.prepared) {
    const std::string key = fmt::format(
        "split {}|compute {}|bn {}|acc {}|attention {}", policy.split_fused_projections ? 1 : 0,
        dtype_name(policy.compute), policy.batch_norm_as_reductions ? 1 : 0,
        microbatches > 1 ? 1 : 0, policy.fuse_attention ? 1 : 0);
    ASSIGN_OR_RETURN(prepared, options.prepared(key, prepare));
  } else {
    ASSIGN_OR_RETURN(PreparedGraph made, prepare());
    prepared = std::make_shared<const PreparedGraph>(std::move(made));
  }
  out.parts = prepared->parts;
  const bool train = prepared->training_graph;
  SpmdInput input;
  input.shapes_only = options.shapes_only;
  input.graph_id = prepared->id;
  if (train) {
    input.graph = &prepared->training.graph;
    input.gradients = prepared->training.gradients;
    input.updates = prepared->training.updates;
    input.slots = prepared->training.slots;
    input.statistics = prepared->training.statistics;
    input.loss = prepared->training.loss;
    input.forward_of = &prepared->forward_of;
  } else {
    input.graph = &prepared->inference;
  }
  const Graph& graph = *input.graph;

  RETURN_IF_ERROR(check_mesh_axes(scheme, policy));
  policy.spmd.strategies = options.strategies;
  policy.spmd.profile = options.profile;
  auto contributions = policy.input_layouts;
  policy.spmd.input_layout = [contributions](const Value& v) {
    Layout layout = Layout::replicated(v.shape.rank());
    for (const auto& contribute : contributions) layout = contribute(v, layout);
    return layout;
  };

  out.source_stage =
      source_stages(graph, policy, layers, train ? prepared->forward_of : std::vector<NodeId>{});
  if (policy.stages > 1) {
    for (int32_t s : out.source_stage)
      policy.spmd.stage_of.push_back(static_cast<int32_t>(s % policy.stages));
  }
  out.source_layer = prepared->layer_of;
  policy.spmd.layer_of = out.source_layer;

  // Under ring attention the context axis splits into chunk pairs.
  DeviceMesh mesh = scheme.mesh;
  mesh.set_paired_axis(zigzag_axis(scheme));
  ASSIGN_OR_RETURN(out.spmd, lower_spmd(input, mesh, policy.spmd));
  RETURN_IF_ERROR(after_pass(options, "spmd", out.spmd.graph));
  RETURN_IF_ERROR(check_axes_split(scheme, out.spmd, graph));
  out.microbatches = microbatches;
  out.layers = layers;
  out.training = train;
  return out;
}

StatusOr<Plan> lower(const Graph& model, const Scheme& scheme, const LoweringOptions& options) {
  ASSIGN_OR_RETURN(SpmdLowering lowered, lower_to_spmd(model, scheme, options));
  const LoweringPolicy& policy = lowered.policy;
  SpmdResult& spmd = lowered.spmd;
  const std::vector<int32_t>& stage = lowered.source_stage;
  const int64_t microbatches = lowered.microbatches;
  const bool train = lowered.training;
  ASSIGN_OR_RETURN(std::vector<Role> roles, build_roles(spmd, stage, policy, train));
  for (const Role& role : roles) RETURN_IF_ERROR(after_pass(options, "roles", role.graph));
  for (Role& role : roles) {
    role.schedule = make_schedule(policy.schedule, role.stage, policy.stages, policy.chunks,
                                  microbatches, train);
    // The exchange, where the rank has one, runs right before the update.
    for (const Program& program : role.programs) {
      if (program.kind != ProgramKind::kExchange) continue;
      role.schedule.insert(role.schedule.end() - 1, ScheduleStep{ProgramKind::kExchange, 0, 0});
    }
  }
  RETURN_IF_ERROR(check_schedule(roles));

  Plan plan;
  plan.scheme = scheme;
  plan.microbatches = microbatches;
  plan.stage_layers = policy.stage_layers;
  plan.state = std::move(spmd.state);
  plan.parts = std::move(lowered.parts);
  plan.data = std::move(spmd.data);
  plan.loss = spmd.loss;
  plan.outputs = spmd.outputs;
  plan.roles = std::move(roles);
  const DeviceMesh& mesh = scheme.mesh;
  const int64_t pp_axis = mesh.axis_index("pp");
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    plan.device_role.push_back(pp_axis < 0 ? 0 : static_cast<int32_t>(mesh.coords(d)[pp_axis]));
  }
  return plan;
}

bool backward_regathers(const SpmdPolicy& spmd, const Scheme& scheme,
                        const HardwareProfile* profile) {
  return spmd.tp_activations == SpmdPolicy::TpActivations::kReduceScatter &&
         regathers_sequence_shards(memory_policy_of(scheme, profile));
}

StatusOr<Plan> lower_reference(const Graph& model, const Scheme& scheme,
                               const LoweringOptions& options) {
  Scheme reference;
  ASSIGN_OR_RETURN(reference.mesh, DeviceMesh::create({{"dp", 1}}));
  const int64_t micro = scheme.micro_batch > 0 ? scheme.micro_batch : 0;
  reference.global_batch = scheme.global_batch;
  reference.micro_batch = micro * scheme.dp();
  return lower(model, reference, options);
}

}  // namespace autopar
