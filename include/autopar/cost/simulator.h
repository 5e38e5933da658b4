// The simulator: an event-driven run of a plan's step. Every device (one per role stands for
// the role: its devices run the same program at the same times) has a compute stream and a
// communication stream per communicator (the collectives over one set of mesh axes, and the
// pipeline's transfers); nodes start when their inputs are ready and their stream is free;
// Recv waits for the matching Send's arrival on another role. Bubbles, overlap of collectives
// with computation and exposed communication come out of the timeline.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autopar/cost/hardware_profile.h"
#include "autopar/parallel/plan.h"
#include "autopar/support/status.h"

namespace autopar {

struct SimEvent {
  int32_t role = 0;
  bool communication = false;  // which stream
  std::string name;            // node name, with the schedule step ("F0.3 h.0/attn/MatMul")
  double start = 0, end = 0;
};

struct RoleTimeline {
  double compute_busy = 0;  // seconds the compute stream works
  double comm_busy = 0;     // seconds the communication streams work, summed over them
  double exposed_comm = 0;  // compute-stream idle time spent waiting on communication
  // Compute-stream idle time spent waiting for another pipeline stage to produce what it
  // sends (beyond the message's own transfer, which is exposed communication).
  double pipeline_wait = 0;
  double finish = 0;  // when its last program ends
};

struct Simulation {
  double step_seconds = 0;
  std::vector<RoleTimeline> roles;
  std::vector<SimEvent> events;  // when asked for
  double bubble_seconds = 0;     // the step minus the busiest role's compute
  // The paradigms' own terms (Paradigm::estimate), part of step_seconds: simulate() on a
  // profile adds them.
  double paradigm_seconds = 0;
};

// Seconds node `node` of the role's graph takes on its stream; `device` is the global id of
// the role's device.
using NodeSeconds = std::function<double(const Role& role, NodeId node, int64_t device)>;

// Whether a node runs on a device's communication stream: the ai.autopar collectives and
// transfers, not Recv (its wait is the sender's), Shard (a local slice) nor the ring
// attentions (compute that overlaps its own point-to-point steps).
bool is_communication(const Node& node);
bool is_ring_attention(const Node& node);

// Seconds of one node of a per-device graph on `device` of the profile: the compute roofline,
// or the communication model for collectives and transfers (groups from the mesh). A ring
// attention over n members takes n blocks of its attention, each but the last overlapped with
// the point-to-point step that brings the next key/value block (the backward's steps carry the
// blocks' gradients too, and one more step returns them to their owners): the slower of the
// two per step.
double device_node_seconds(const HardwareProfile& profile, const DeviceMesh& mesh,
                           const Graph& graph, const Node& node, int64_t device);

// Node costs from the profile: the compute roofline, the communication model for collectives
// and transfers (groups resolved from the device's mesh coordinates). Where the profile's
// runtime fuses elementwise runs, each run within a program is one kernel, its seconds spread
// evenly over the run's nodes.
NodeSeconds profile_costs(const Plan& plan, const HardwareProfile& profile);

// What the device's runtime adds beyond its nodes: a cost per program run, and whether
// collectives have a stream of their own (else they run in line on the compute stream).
struct StreamModel {
  double program_overhead_s = 0;
  bool overlap_communication = true;
  // What a compute node loses of its rate while the role's communication stream is busy
  // (device.overlap_slowdown).
  double overlap_slowdown = 0;
  // The framework keeps half-precision copies of its weights, cast once per step
  // (holds_weight_copies): a cast of a parameter costs time in the first microbatch's forward
  // of its program only, never in later ones or in a recompute.
  bool weights_cast_once = false;
  // Weight-gradient GEMMs accumulate into the fp32 main gradient (accumulates_in_gemm): the
  // nodes of gemm_accumulation cost nothing.
  bool accumulates_in_gemm = false;
  // The framework gathers ZeRO 3's weights again for the backward (regathers_parameters): a
  // backward program reading a weight its forward gathered gathers it again first, on the
  // communication stream (at the gather's cost), as the forward runs its gathers.
  bool regathers_parameters = false;
};
StreamModel stream_model(const HardwareProfile& profile);

StatusOr<Simulation> simulate(const Plan& plan, const NodeSeconds& costs,
                              bool record_events = false, const StreamModel& streams = {});
// The plan on a profile: profile_costs and the profile's stream model.
StatusOr<Simulation> simulate(const Plan& plan, const HardwareProfile& profile,
                              bool record_events = false);

// A Chrome/Perfetto trace: one process per role, a thread per stream, events named by node
// and microbatch.
std::string chrome_trace(const Plan& plan, const Simulation& simulation);

}  // namespace autopar
