// The CPU executor: kernel lookup, buffer lifetimes, feeds, and the run loop.
#include "autopar/runtime/executor.h"

#include <chrono>
#include <thread>

#include <tbb/task_arena.h>

#include "allocator.h"
#include "autopar/ir/verify.h"
#include "autopar/ops/op_def.h"
#include "fusion.h"

namespace autopar::runtime {
namespace {

std::string type_text(DType dtype, const std::vector<int64_t>& dims) {
  return fmt::format("{}[{}]", dtype_name(dtype), fmt::join(dims, ","));
}

}  // namespace

Status check_feed(const Value& value, const Tensor& tensor) {
  if (tensor.dtype() != value.dtype || tensor.dims() != value.shape.dims) {
    return error("{} '{}': expected {}, got {}",
                 value.kind == ValueKind::kInput ? "input" : "value", value.name,
                 type_text(value.dtype, value.shape.dims),
                 type_text(tensor.dtype(), tensor.dims()));
  }
  return Status::ok();
}

StatusOr<Executor> Executor::create(Graph graph, const ExecutorOptions& options) {
  RETURN_IF_ERROR(verify(graph));
  keep_freed_memory();
  Executor e;
  const KernelRegistry& registry = kernel_registry();
  for (const Node& node : graph.nodes()) {
    const Kernel* kernel = registry.find(node.domain, node.op_type);
    if (!kernel) {
      return error("node '{}' ({}): the CPU runtime has no kernel for this op", node.name,
                   node.op_type);
    }
    e.kernels_.push_back(kernel);
  }
  // Ops over half types (but Cast, which converts them, and the communication ops, which move
  // bytes; the ring attentions compute, and every member widens its blocks alike) run widened
  // to float32.
  e.widened_.assign(graph.num_nodes(), false);
  bool any_widened = false;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    const bool moves_bytes = node.domain == kAutoparDomain && node.op_type != "RingAttention" &&
                             node.op_type != "RingAttentionGrad";
    if (moves_bytes || node.op_type == "Cast") continue;
    bool half = false;
    for (ValueId v : node.inputs) half = half || (v != kNoId && is_half(graph.value(v).dtype));
    for (ValueId v : node.outputs) half = half || (v != kNoId && is_half(graph.value(v).dtype));
    e.widened_[id] = half;
    any_widened = any_widened || half;
  }
  if (any_widened) {
    Graph wide = graph;
    for (ValueId v = 0; v < wide.num_values(); ++v) {
      Value& value = wide.mutable_value(v);
      if (!is_half(value.dtype)) continue;
      value.dtype = DType::kFloat32;
      if (value.data)
        value.data = std::make_shared<const Tensor>(float_converted(*value.data, DType::kFloat32));
    }
    e.wide_graph_ = std::make_shared<const Graph>(std::move(wide));
  }
  std::vector<FusedGroup> groups;
  if (options.fuse_elementwise) groups = find_fused_groups(graph);
  e.group_starting_at_.assign(graph.num_nodes(), -1);
  std::vector<bool> never_stored(graph.num_values(), false);
  for (size_t k = 0; k < groups.size(); ++k) {
    e.group_starting_at_[groups[k].first] = static_cast<int>(k);
    for (size_t i = 0; i < groups[k].internals.size(); ++i) {
      if (!groups[k].escapes[i]) never_stored[groups[k].internals[i]] = true;
    }
  }
  e.groups_ = std::make_shared<const std::vector<FusedGroup>>(std::move(groups));
  // A convolution's output that only its activation reads is never stored: the convolution
  // writes the activation's output.
  e.activation_at_.assign(graph.num_nodes(), -1);
  e.absorbed_.assign(graph.num_nodes(), false);
  std::vector<FusedActivation> activations;
  if (options.fuse_elementwise) {
    for (const FusedActivation& f : find_fused_activations(graph)) {
      if (e.widened_[f.conv] || e.widened_[f.activation]) continue;
      e.activation_at_[f.conv] = static_cast<int>(activations.size());
      e.absorbed_[f.activation] = true;
      never_stored[graph.node(f.conv).output(0)] = true;
      activations.push_back(f);
    }
  }
  e.activations_ = std::make_shared<const std::vector<FusedActivation>>(std::move(activations));
  // A value dies after its last consumer; graph outputs live to the end. Values nobody reads
  // (unused side outputs) die right after their producer.
  std::vector<NodeId> last_use(graph.num_values(), kNoId);
  for (ValueId id = 0; id < graph.num_values(); ++id) {
    const Value& v = graph.value(id);
    if (v.kind != ValueKind::kIntermediate || graph.is_output(id) || never_stored[id]) continue;
    NodeId last = v.producer;
    for (NodeId consumer : v.consumers) last = std::max(last, consumer);
    last_use[id] = last;
  }
  e.release_.resize(graph.num_nodes());
  for (ValueId id = 0; id < graph.num_values(); ++id) {
    if (last_use[id] != kNoId) e.release_[last_use[id]].push_back(id);
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  e.num_threads_ = options.num_threads > 0 ? options.num_threads : cores;
  e.profile_ = options.profile;
  e.communicator_ = options.communicator;
  e.graph_ = std::make_shared<const Graph>(std::move(graph));
  return e;
}

ValueId Executor::stored_output(NodeId id, size_t i) const {
  const int k = activation_at_[id];
  if (i == 0 && k >= 0) return graph_->node((*activations_)[k].activation).output(0);
  return graph_->node(id).output(i);
}

int64_t Executor::planned_peak_bytes() const {
  // As run() counts: a fused group's stored values, then each node's outputs, each freed
  // after its last reader.
  const Graph& g = *graph_;
  int64_t live = 0, peak = 0;
  auto release = [&](NodeId id) {
    for (ValueId dead : release_[id]) live -= g.value(dead).num_bytes();
  };
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (const int k = group_starting_at_[id]; k >= 0) {
      const FusedGroup& group = (*groups_)[k];
      for (size_t i = 0; i < group.internals.size(); ++i) {
        if (group.escapes[i]) live += g.value(group.internals[i]).num_bytes();
      }
      peak = std::max(peak, live);
      for (NodeId member = group.first; member <= group.last; ++member) release(member);
      id = group.last;
      continue;
    }
    if (!absorbed_[id]) {
      for (size_t i = 0; i < g.node(id).outputs.size(); ++i) {
        const ValueId out = stored_output(id, i);
        if (out != kNoId) live += g.value(out).num_bytes();
      }
    }
    peak = std::max(peak, live);
    release(id);
  }
  return peak;
}

StatusOr<std::vector<TensorPtr>> Executor::run(const std::vector<Feed>& feeds, RunStats* stats,
                                               uint64_t random_stream) const {
  const Graph& g = *graph_;
  std::vector<TensorPtr> slots(g.num_values());
  int64_t initializer_bytes = 0;
  for (ValueId id = 0; id < g.num_values(); ++id) {
    const Value& v = g.value(id);
    if (v.is_initializer()) slots[id] = v.data;
  }
  for (const auto& [id, tensor] : feeds) {
    assert(id >= 0 && id < g.num_values());
    const Value& v = g.value(id);
    if (v.kind == ValueKind::kIntermediate) {
      return error("value '{}' is computed by the graph and cannot be fed", v.name);
    }
    if (!tensor) return error("input '{}' is fed no tensor", v.name);
    RETURN_IF_ERROR(check_feed(v, *tensor));
    slots[id] = tensor;
  }
  for (ValueId id = 0; id < g.num_values(); ++id) {
    const Value& v = g.value(id);
    if (v.kind == ValueKind::kIntermediate) continue;
    if (!slots[id]) {
      return error("{} '{}' has no data: feed it",
                   v.kind == ValueKind::kInput ? "input" : "initializer", v.name);
    }
    if (v.is_initializer()) initializer_bytes += slots[id]->num_bytes();
  }

  std::vector<double> node_seconds(profile_ ? g.num_nodes() : 0, 0.0);
  int64_t live = 0, peak = 0;
  Status status;
  const auto start = std::chrono::steady_clock::now();
  tbb::task_arena arena(num_threads_);
  arena.execute([&] {
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      if (const int k = group_starting_at_[id]; k >= 0) {
        const FusedGroup& group = (*groups_)[k];
        const auto group_start = std::chrono::steady_clock::now();
        run_fused_group(group, slots);
        if (profile_) {
          const double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - group_start).count();
          const double share = seconds / static_cast<double>(group.last - group.first + 1);
          for (NodeId member = group.first; member <= group.last; ++member)
            node_seconds[member] = share;
        }
        for (size_t i = 0; i < group.internals.size(); ++i) {
          if (group.escapes[i]) live += slots[group.internals[i]]->num_bytes();
        }
        peak = std::max(peak, live);
        for (NodeId member = group.first; member <= group.last; ++member) {
          for (ValueId dead : release_[member]) {
            live -= slots[dead]->num_bytes();
            slots[dead].reset();
          }
        }
        id = group.last;
        continue;
      }
      if (absorbed_[id]) {  // its convolution computed it
        for (ValueId dead : release_[id]) {
          live -= slots[dead]->num_bytes();
          slots[dead].reset();
        }
        continue;
      }
      const Node& node = g.node(id);
      std::vector<const Tensor*> inputs;
      inputs.reserve(node.inputs.size());
      for (ValueId in : node.inputs) inputs.push_back(in == kNoId ? nullptr : slots[in].get());
      const bool widen = widened_[id];
      std::vector<Tensor> wide_inputs;
      if (widen) {
        wide_inputs.reserve(node.inputs.size());
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (!inputs[i] || !is_half(inputs[i]->dtype())) continue;
          wide_inputs.push_back(float_converted(*inputs[i], DType::kFloat32));
          inputs[i] = &wide_inputs.back();
        }
      }
      KernelContext ctx(widen ? *wide_graph_ : g, widen ? wide_graph_->node(id) : node,
                        std::move(inputs), num_threads_);
      ctx.set_communicator(communicator_);
      ctx.set_random_stream(random_stream);
      if (const int k = activation_at_[id]; k >= 0) ctx.set_activation(&(*activations_)[k].kind);
      const auto node_start = std::chrono::steady_clock::now();
      status = (*kernels_[id])(ctx);
      if (!status.is_ok()) return;
      if (profile_) {
        node_seconds[id] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - node_start).count();
      }
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        const ValueId out = stored_output(id, i);
        if (out == kNoId) continue;
        auto& produced = ctx.outputs()[i];
        if (!produced) {
          status = ctx.fail("kernel produced no output {}", i);
          return;
        }
        if (widen && produced->dtype() != g.value(out).dtype)
          produced = std::make_shared<Tensor>(float_converted(*produced, g.value(out).dtype));
        assert(produced->dtype() == g.value(out).dtype &&
               produced->dims() == g.value(out).shape.dims);
        live += produced->num_bytes();
        slots[out] = std::move(produced);
      }
      peak = std::max(peak, live);
      for (ValueId dead : release_[id]) {
        live -= slots[dead]->num_bytes();
        slots[dead].reset();
      }
    }
  });
  RETURN_IF_ERROR(status);
  if (stats) {
    stats->peak_activation_bytes = peak;
    stats->initializer_bytes = initializer_bytes;
    stats->seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats->node_seconds = std::move(node_seconds);
  }
  std::vector<TensorPtr> outputs;
  for (ValueId out : g.outputs()) outputs.push_back(slots[out]);
  return outputs;
}

StatusOr<std::vector<TensorPtr>> Executor::run_inputs(const std::vector<TensorPtr>& inputs,
                                                      RunStats* stats,
                                                      uint64_t random_stream) const {
  const Graph& g = *graph_;
  if (inputs.size() != g.inputs().size()) {
    return error("the graph has {} inputs, {} given", g.inputs().size(), inputs.size());
  }
  std::vector<Feed> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds.emplace_back(g.inputs()[i], inputs[i]);
  return run(feeds, stats, random_stream);
}

}  // namespace autopar::runtime
