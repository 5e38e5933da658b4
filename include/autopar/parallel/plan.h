// Plan: a Scheme realised as per-role graphs, the device → role map and each role's schedule.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/parallel/layout.h"
#include "autopar/parallel/scheme.h"
#include "autopar/support/status.h"

namespace autopar {

// A tensor that lives on the devices across program runs: a parameter, an optimizer slot, a
// BatchNorm statistic, a gradient accumulator. Role graphs read it as the input `name` and
// write its next value as the output `output`.
struct StateSpec {
  std::string name;
  std::string output;  // the role-graph value holding the new value
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // whole (global) shape
  Layout layout;               // how the devices hold it
  enum class Init : uint8_t { kModel, kZeros } init = Init::kModel;
  // kZeros state is cleared at the start of every step (gradient accumulators).
  bool is_parameter = false;
  // A gradient accumulator: the parameter whose gradient it sums, and which of several
  // accumulators of it this is (empty: its only one; a pipeline rank's contribution otherwise).
  std::string gradient_of;
  std::string gradient_part;
  // An optimizer slot: its parameter, and its place among that parameter's slots (Adam's
  // first moment 0, its second 1).
  std::string slot_of;
  int32_t slot_index = 0;
  bool is_statistic = false;  // a running statistic the forward updates (BatchNorm's)
};

// A parameter of the plan that is a slice of a model parameter (a fused projection split into
// its parts): elements [offset, offset + length) of `whole` along `dim`.
struct ParameterPart {
  std::string name;
  std::string whole;
  int64_t dim = 0;
  int64_t offset = 0;
  int64_t length = 0;
  bool operator==(const ParameterPart&) const = default;
};

// A graph input fed per microbatch: the model's inputs and the labels.
struct DataSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // one microbatch over all data-parallel replicas
  Layout layout;
};

// One program of a role: a contiguous range of the role graph's nodes run as a unit.
// kExchange runs once per step before the update, on ranks whose update is read by another
// rank's: it sends what those updates read (a tied embedding's gradient accumulators), so
// two ranks' updates that read each other's values do not wait on each other.
enum class ProgramKind : uint8_t { kForward, kBackward, kUpdate, kExchange };
const char* program_kind_name(ProgramKind kind);

struct Program {
  ProgramKind kind = ProgramKind::kForward;
  int32_t chunk = 0;  // virtual stage index on this device (interleaved schedules)
  int32_t begin = 0;  // node range [begin, end) of the role graph
  int32_t end = 0;
  std::string name() const;  // "F0", "B1", "U"
};

struct ScheduleStep {
  ProgramKind kind = ProgramKind::kForward;
  int32_t chunk = 0;
  int32_t micro = 0;              // microbatch; 0 for the update
  std::string to_string() const;  // "F0.3" (chunk 0, microbatch 3), "U"
  bool operator==(const ScheduleStep&) const = default;
};

struct Role {
  int32_t id = 0;
  int64_t stage = 0;  // pipeline rank (pp coordinate)
  Graph graph;
  std::vector<Program> programs;
  std::vector<ScheduleStep> schedule;

  // The index of the program a schedule step runs, or -1.
  int program_of(const ScheduleStep& step) const;
};

struct PlanSource {
  std::string model;   // path or zoo name
  std::string sha256;  // of the model file; empty for zoo models
  std::string loss;    // cross_entropy | mse | none
  std::string optimizer;
  std::vector<std::pair<std::string, int64_t>> dims;  // --batch / --dim bindings
  bool no_fusion = false;       // --no-fusion: written-out LayerNorms and GELUs kept
  bool keep_constants = false;  // --keep-constants: Constant-node weights kept constant
  // The hardware the strategies were priced on (--hw: a profile name or file; empty: the
  // neutral profile) and its nodes (--nodes).
  std::string hw;
  int64_t nodes = 1;
};

struct Plan {
  Scheme scheme;
  PlanSource source;
  int64_t microbatches = 1;
  std::vector<std::pair<int32_t, int32_t>> stage_layers;  // per virtual stage: [first, last]
  std::vector<StateSpec> state;
  std::vector<ParameterPart> parts;  // plan parameters that are slices of model parameters
  std::vector<DataSpec> data;
  std::string loss;                  // role-graph output holding the loss ("" for inference)
  std::vector<std::string> outputs;  // model outputs (inference plans)
  std::vector<Role> roles;
  std::vector<int32_t> device_role;  // per device id

  const Role& role_of(int64_t device) const { return roles.at(device_role.at(device)); }
};

// Faults injected into write_plan, for tests: called before a file is written (under its
// temporary name) and before it takes its name; an error stops the write there.
struct PlanWriteOptions {
  std::function<Status(const std::string& file)> before_write;
  std::function<Status(const std::string& file)> before_rename;
};

// Writes PLAN/manifest.yaml, PLAN/role_<k>.onnx (each checked by onnx::checker) and
// PLAN/README.md, replacing a plan already there. Atomic as a plan: the files are written
// under temporary names first and the manifest takes its name last, so a write that fails or
// is killed part-way leaves the earlier plan, or a directory without a manifest (no plan),
// never a manifest beside another plan's role files.
Status write_plan(const Plan& plan, const std::string& dir, const PlanWriteOptions& options = {});

// The manifest's YAML text (what write_plan writes).
std::string manifest_yaml(const Plan& plan);

// What a plan directory records to rebuild its plan: the scheme and the source model with the
// options it was lowered with. Errors name the file and field.
struct PlanManifest {
  Scheme scheme;
  PlanSource source;
  int64_t devices = 0;
  int64_t roles = 0;
};
StatusOr<PlanManifest> read_plan_manifest(const std::string& dir);
// The same from the manifest's text; errors name `path`.
StatusOr<PlanManifest> parse_plan_manifest(std::string_view yaml, const std::string& path);

// Checks that the role files of `dir` are exactly the ONNX of `plan`'s role graphs (a plan is
// run from its lowering, which must be the one on disk).
Status check_plan_files(const Plan& plan, const std::string& dir);

// The ONNX model of one role graph, with the ai.autopar domain; model metadata carries the
// node phases and layers, the role, the mesh and the programs' node ranges.
std::string role_onnx_bytes(const Plan& plan, const Role& role);

}  // namespace autopar
