// lower(): a Scheme realised on a model as a Plan, by the paradigms' compositions of the four
// primitives (DESIGN.md, "Lowering, step by step").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autopar/autodiff/autodiff.h"
#include "autopar/ir/graph.h"
#include "autopar/parallel/plan.h"
#include "autopar/parallel/scheme.h"
#include "autopar/parallel/spmd.h"
#include "autopar/support/status.h"

namespace YAML {
class Node;
}

namespace autopar {

class SchemeReader;

// The graph the SPMD pass reads: the model with its fused projections split and narrowed to
// the compute type, with its training step built (or the forward alone for inference).
struct PreparedGraph {
  bool training_graph = true;
  TrainingGraph training;
  Graph inference;
  std::vector<ParameterPart> parts;
  // Per node of the graph the SPMD pass reads: the layer it goes with (assign() over one stage
  // per layer), the same for every scheme that lowers this graph.
  std::vector<int32_t> layer_of;
  // Per node of the training graph: the forward node it is the backward of (forward_nodes()).
  std::vector<NodeId> forward_of;
  uint64_t id = 0;  // unique in the process (SpmdInput::graph_id)
};

struct LoweringOptions {
  bool inference = false;  // --loss none: the forward graph alone
  LossSpec loss;
  OptimizerSpec optimizer;
  // When set, lower_to_spmd asks it for the prepared graph of `key` (what the rewrites depend
  // on beyond the model and these options) and `make` builds one: a caller lowering one model
  // under many schemes builds each prepared graph once.
  std::function<StatusOr<std::shared_ptr<const PreparedGraph>>(
      const std::string& key, const std::function<StatusOr<PreparedGraph>()>& make)>
      prepared;
  // Node strategies shared by the lowerings of one model under many schemes (the search).
  std::shared_ptr<StrategyCache> strategies;
  // The lowering is costed, never run: constants may come without their data (the estimate
  // drops large ones' data, which no decision reads).
  bool shapes_only = false;
  // The hardware the plan is for: the SPMD pass prices its choices on it. Null:
  // neutral_profile().
  std::shared_ptr<const HardwareProfile> profile;
  // Called after each pass of lowering_passes() that runs, with the graph it left (after
  // "roles", once per role graph).
  std::function<void(std::string_view pass, const Graph& graph)> after_pass;
  // verify(graph) after every pass; an error names the pass. Always on in debug builds.
  bool verify_passes = false;
};

// The passes of lower(), in order: what each does and when it runs.
struct LoweringPass {
  std::string_view name;
  std::string_view what;
};
const std::vector<LoweringPass>& lowering_passes();

// What the paradigms decide, composed in the order of paradigms().
struct LoweringPolicy {
  SpmdPolicy spmd;
  // Contributions to the data inputs' layouts (batch over dp, sequence or height over sp).
  std::vector<std::function<Layout(const Value&, Layout)>> input_layouts;
  int64_t stages = 1;                                     // pipeline ranks
  int64_t chunks = 1;                                     // virtual stages per rank
  std::vector<std::pair<int32_t, int32_t>> stage_layers;  // per virtual stage
  PipelineSchedule schedule = PipelineSchedule::kOneForwardOneBackward;
  Recompute recompute = Recompute::kNone;
  // Split fused projections into one per part before building the training graph.
  bool split_fused_projections = false;
  // Write training-mode BatchNormalization as the reductions it is (when dp or sp splits the
  // dims its statistics average over).
  bool batch_norm_as_reductions = false;
  // The forward's arithmetic type (bf16, fp16: mixed precision with fp32 master weights).
  DType compute = DType::kFloat32;
  // Fuse attention (softmax(Q·Kᵀ)·V with its scale and causal mask) into one Attention op, as
  // FlashAttention runs it (what context parallelism splits): runs_flash_attention, set by
  // lower() once every paradigm is configured.
  bool fuse_attention = false;
  // Under sequence parallelism, the backward gathers the sequence shards a forward gather over
  // tp made again (regathers_sequence_shards of the plan's memory policy), rather than keep the
  // gathered values: set by lower() with the memory policy.
  bool regather = false;
  // The backward widens the loss's half-precision input again (a fused cross-entropy kernel
  // reads it so) rather than keep the forward's fp32 copy: runs_fused_cross_entropy, set by
  // lower().
  bool recast_loss = false;
};

// What a search's choices along one dimension are expanded for.
struct SearchContext {
  int32_t layers = 0;    // the model's
  bool training = true;  // false: an inference search (no backward, no optimizer state)
};
// The schemes a search space's choices along one dimension make of `base`: one per choice the
// base allows (`base` itself where none applies).
using Expansion = std::function<std::vector<Scheme>(const Scheme& base, const SearchContext&)>;

// A paradigm's dimension of a search space (configs/spaces/*.yaml): the top-level field that
// lists its choices, and what they expand a scheme into.
struct SearchDimension {
  std::string field;  // empty: the paradigm adds no dimension
  // Whether the choices change the SPMD lowering (each priced by layer costs of its own) or
  // only the closed forms over one lowering's layer costs (pipeline schedules, recompute).
  bool relowers = true;
  // Reads the field's value; an error names the field (scheme_reader.h). A space without the
  // field leaves every scheme at the paradigm's default.
  std::function<StatusOr<Expansion>(const YAML::Node& value, const SchemeReader&)> parse = nullptr;
};

struct RoleMemory;
// What a paradigm adds to a scheme's cost beyond the lowering its policy shapes: seconds on
// every step's critical path, and bytes on every device of each pipeline rank.
struct EstimateTerms {
  double step_s = 0;
  std::vector<double> rank_bytes;  // per pipeline rank; empty: none
};

// A paradigm: one file in src/parallel/paradigms/, one entry in paradigms().
struct Paradigm {
  std::string_view name;
  // Reads the scheme and the graph being lowered (with its layer count) and adds its
  // decisions to the policy; an error names the scheme field.
  std::function<Status(const Scheme&, const Graph&, int32_t layers, LoweringPolicy&)> configure;
  // The top-level scheme fields the paradigm owns: parse_scheme accepts them and nothing else
  // beyond mesh and devices.
  std::vector<std::string> fields = {};
  // Reads those fields from the scheme's YAML mapping into the scheme and checks them (an
  // error names the field; scheme_reader.h). Without it, a field's text is kept in
  // Scheme::extensions for configure to read.
  std::function<Status(const YAML::Node& root, const SchemeReader&, Scheme&)> parse = nullptr;
  // Its choices in a search space.
  SearchDimension search = {};
  // Its own terms in the estimate and the simulation (cost/), given the scheme, the hardware
  // and what each pipeline rank holds (cost/memory.h, before the framework's reserve); null:
  // none beyond what its policy does to the lowering.
  std::function<EstimateTerms(const Scheme&, const HardwareProfile&,
                              const std::vector<RoleMemory>& ranks)>
      estimate = nullptr;
};

// The built-in paradigms, then the registered ones, in the order their decisions compose.
const std::vector<Paradigm>& paradigms();
// Adds a paradigm after the others, and its scheme fields to what parse_scheme accepts: a
// paradigm outside src/parallel/paradigms/ is one file with one registration. Call it before
// any lowering (at static initialisation, or first thing in main).
// Refused (and not added) when it has no name or configure, or names a paradigm, a scheme
// field or a search-space field another one has (mesh, devices, constraints and batch
// included).
Status register_paradigm(Paradigm paradigm);

// Contiguous ranges of `costs` (per layer) in `parts` groups that minimise the largest group's
// sum: the linear partition, by dynamic programming over prefix sums.
std::vector<std::pair<int32_t, int32_t>> balance_stages(const std::vector<double>& costs,
                                                        int64_t parts);
// What balanced pipeline stages weigh per layer: its forward FLOPs (plus one per node).
std::vector<double> layer_forward_costs(const Graph& graph, int32_t layers);

// The first half of lower(): the paradigms' policy and the SPMD graph, before it is cut into
// pipeline ranks. The cost model's analytic estimate starts here.
struct SpmdLowering {
  LoweringPolicy policy;
  SpmdResult spmd;  // its `origin` indexes the graph below
  // Per node of the graph the SPMD pass read (the training graph, or the forward graph for
  // inference): its virtual stage, and the layer it goes with (a node's stage is its layer's).
  std::vector<int32_t> source_stage;
  std::vector<int32_t> source_layer;
  std::vector<ParameterPart> parts;
  int64_t microbatches = 1;
  int32_t layers = 0;
  bool training = true;
};
StatusOr<SpmdLowering> lower_to_spmd(const Graph& model, const Scheme& scheme,
                                     const LoweringOptions& options);

// `model` is bound at one microbatch over all data-parallel replicas (dp · micro samples).
StatusOr<Plan> lower(const Graph& model, const Scheme& scheme, const LoweringOptions& options);

// The reference of `plan`: the same graph and microbatches on one device.
StatusOr<Plan> lower_reference(const Graph& model, const Scheme& scheme,
                               const LoweringOptions& options);

// A MatMul (+ bias) whose output is Split into equal parts along its last dim becomes one
// projection per part on column slices of its parameters (recorded in `parts`, named
// "<parameter>.part<i>"); the graph computes the same values.
StatusOr<Graph> split_fused_projections(const Graph& model, std::vector<ParameterPart>& parts);

// The model computing in `low` (bf16 or fp16): parameters and float inputs stay fp32 and are
// cast down where they are read, constants are stored in `low`, float outputs are cast back
// to fp32 under their own names.
StatusOr<Graph> to_mixed_precision(const Graph& model, DType low);
// A parameter's gradient summed from several contributions in the compute type and
// then cast to fp32 (a tied embedding under mixed precision) becomes a sum of the
// contributions each cast to fp32: each contribution can then accumulate over microbatches
// where it is computed, in fp32 as main gradients accumulate, and no contribution crosses
// pipeline ranks every microbatch. Ids of `training` are remapped.
StatusOr<TrainingGraph> distribute_gradient_casts(TrainingGraph training);

// Sets each node's source op (Node::source) in a freshly built training graph, or in a forward
// graph (`forward_of` empty): a forward node is its own, a node a gradient rule emitted carries
// its forward node's (`forward_of`, per node), and a precision cast belongs, with its gradient,
// to the op it converts for: a widening Cast to the one op that reads all of its result (forward
// or backward), a narrowing one to the op whose result only it and that op's backward read.
// Optimizer updates and sums of gradient contributions have none.
void tag_source_ops(Graph& g, const std::vector<NodeId>& forward_of);

// Training-mode BatchNormalization nodes as ReduceMean, Sub, Mul, Sqrt, Div and Add over the
// batch and spatial dims, with the same outputs (values keep their names).
StatusOr<Graph> batch_norm_statistics_as_reductions(const Graph& training);

// Whether a plan's backward gathers sequence parallelism's shards again (LoweringPolicy::
// regather): its forward reduce-scatters onto them (tensor: megatron-sp) and its memory policy
// regathers (regathers_sequence_shards). lower() and the estimate both decide it here.
bool backward_regathers(const SpmdPolicy& spmd, const Scheme& scheme,
                        const HardwareProfile* profile);

// The forward nodes a recompute policy re-runs in the backward instead of keeping their
// outputs, per node of `g`:
// - full (Megatron-LM's `--recompute-granularity full --recompute-method uniform
//   --recompute-num-layers 1`, PyTorch's per-layer activation checkpointing): every node of a
//   layer but those whose output a later layer reads (its output, the next layer's input),
//   which are kept; the nodes outside the layers (embeddings, the output head, the loss) are
//   not re-run. A graph without layers is one checkpoint: every forward node re-runs;
// - selective (Megatron-LM's `--recompute-granularity selective`, Korthikanti et al. 2022): the
//   attention core, the nodes on the way from a product of two activations (the scores Q·Kᵀ)
//   to the product that consumes them (with V), both included: scale, mask, softmax, dropout
//   and the casts between them;
// - nonparametric: every node but projections (a MatMul with a state operand, gathered or
//   not), Gemm, convolutions, norms and collectives.
// None for none.
// With `regather` (sequence parallelism, tensor: megatron-sp), every policy also re-runs the
// forward's all-gathers over tp: the backward gathers a norm's sequence shards again for the
// projection's weight gradient, as Megatron-LM's sequence parallelism does, so the shards are
// kept rather than the gathered activations. With `recast_loss` (a fused cross-entropy
// kernel), every policy also re-runs the widening Cast of the loss's input (and the views
// between them), so the half-precision logits are kept. `is_state(v)` says whether value v is
// held state.
std::vector<bool> partially_recomputed(Recompute policy, bool regather, bool recast_loss,
                                       const Graph& g,
                                       const std::function<bool(ValueId)>& is_state);
// What the backward re-runs beyond what it reads, as roots of recompute_closure: under full
// recompute the outputs of every re-run node (`rerun`, partially_recomputed's) of a layer, since
// Megatron-LM's and PyTorch's checkpointing re-run a layer's whole forward; none otherwise.
std::vector<ValueId> whole_layer_roots(Recompute policy, const std::vector<bool>& rerun,
                                       const Graph& g);

// Where an SPMD graph's nodes run and what the backward recomputes, defined once: the
// lowering (build_roles) places nodes on pipeline stages with them, the estimate
// (layer_costs_of) on layers.
//
// The place of each forward and backward node of `spmd.graph`: the place of the source node
// it came from (`source_place[origin]`, a virtual pipeline stage or a layer), clamped to
// [0, last]; a node without one goes to `last` (forward) or 0 (backward). Update nodes get
// -1: they run where the state they write is held.
std::vector<int32_t> place_by_origin(const SpmdResult& spmd,
                                     const std::vector<int32_t>& source_place, int32_t last);

// The update nodes each place runs (build_roles: pipeline ranks; the estimate: layers): those
// writing state that the place's forward and backward nodes read and, closing over them, the
// update nodes whose results they read and those writing the state they read (an optimizer's
// moments, a shared step count). `place[n]` is the place of forward or backward node n;
// `is_update(n)` whether node n is an update node; `writer_of(v)` the update node writing the
// next value of state input v, kNoId for any other value. Indexed [place][node].
std::vector<std::vector<bool>> updates_by_place(const Graph& g, const std::vector<int32_t>& place,
                                                int32_t places,
                                                const std::function<bool(NodeId)>& is_update,
                                                const std::function<NodeId(ValueId)>& writer_of);
// The forward nodes the backward re-runs, by node id: from `roots` (values the backward
// reads) back through every value `recomputes(v)` accepts, whose producer is re-run and whose
// inputs are reached in turn.
std::vector<bool> recompute_closure(const Graph& g, std::vector<ValueId> roots,
                                    const std::function<bool(ValueId)>& recomputes);

// Programs and their placement: role graphs from the SPMD graph, one role per pipeline rank.
StatusOr<std::vector<Role>> build_roles(const SpmdResult& spmd,
                                        const std::vector<int32_t>& source_stage,
                                        const LoweringPolicy& policy, bool training);

// The forwards pipeline rank `rank` of `ranks` runs before its first backward under
// `schedule` (its warm-up; GPipe: all of them), counting each chunk's microbatches.
int64_t warmup_forwards(PipelineSchedule schedule, int64_t rank, int64_t ranks, int64_t chunks,
                        int64_t microbatches);
// Microbatches pipeline rank `rank` of `ranks` holds stashed at once under the schedule
// (make_schedule's orders), with `chunks` virtual stages per rank.
int64_t in_flight(PipelineSchedule schedule, int64_t rank, int64_t ranks, int64_t chunks,
                  int64_t microbatches);
// One pipeline rank's forward and backward of one microbatch (all its chunks), in seconds.
struct RankSeconds {
  double forward = 0, backward = 0;
};
// The pipeline's time for `microbatches` under `schedule` with `chunks` virtual stages per
// rank: fill, steady state at the slowest rank, drain, and `hops`, the send latencies of one
// microbatch's trip through every stage and back (the forwards alone without `training`).
double pipeline_seconds(PipelineSchedule schedule, int64_t chunks, int64_t microbatches,
                        bool training, const std::vector<RankSeconds>& ranks, double hops);
// The per-rank order of program runs (GPipe, 1F1B, interleaved 1F1B).
std::vector<ScheduleStep> make_schedule(PipelineSchedule schedule, int64_t rank, int64_t ranks,
                                        int64_t chunks, int64_t microbatches, bool training);
// Runs the roles' schedules against their Send/Recv pairs as if every receive blocked; an
// error names the ranks and programs that would wait forever.
Status check_schedule(const std::vector<Role>& roles);

}  // namespace autopar
