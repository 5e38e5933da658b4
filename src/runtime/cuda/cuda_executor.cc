// The CUDA executor: a lowered graph loaded on one device, fed and read by the host, run
// eagerly once (libraries choose their algorithms) and replayed as a CUDA graph after.
#include "autopar/runtime/cuda_executor.h"

#include "autopar/runtime/kernel.h"
#include "device.h"
#include "lowering.h"

namespace autopar::runtime {

std::string cuda_unavailable_reason() { return cuda::device_unavailable_reason(); }

std::string cuda_device_description() {
  const std::string why = cuda::device_unavailable_reason();
  return why.empty() ? cuda::device_description(0) : why;
}

int cuda_device_count() { return cuda::device_count(); }

StatusOr<std::string> cuda_nccl_id() {
  std::string problem;
  std::string id = cuda::nccl_unique_id(&problem);
  if (id.empty()) return error("NCCL: {}", problem);
  return id;
}

StatusOr<std::shared_ptr<cuda::NcclComms>> open_cuda_nccl(
    int device, int rank, int size, const std::string& id,
    const std::vector<std::vector<int64_t>>& groups) {
  std::vector<std::vector<int>> narrow;
  for (const auto& g : groups) narrow.emplace_back(g.begin(), g.end());
  std::string problem;
  std::shared_ptr<cuda::NcclComms> comms =
      cuda::open_nccl(device, rank, size, id, narrow, &problem);
  if (!comms) return error("{}", problem);
  return comms;
}

CudaExecutor::~CudaExecutor() = default;

StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::create(const Graph& graph,
                                                             const CudaOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<const CudaLowering> lowering, lower_for_cuda(graph, options));
  if (const std::string why = cuda::device_unavailable_reason(); !why.empty())
    return error("--backend cuda: {}", why);
  std::string problem;
  std::unique_ptr<cuda::Device> device = cuda::Device::open(options.device, &problem);
  if (!device) return error("CUDA device {}: {}", options.device, problem);
  if (problem = device->load(lowering->program); !problem.empty())
    return error("CUDA device {}: {}", options.device, problem);
  if (options.poison_arena) {
    if (problem = device->poison_arena(); !problem.empty())
      return error("CUDA device {}: {}", options.device, problem);
  }
  if (options.communication == CudaCommunication::kNccl) {
    if (problem = device->use_nccl(options.nccl); !problem.empty())
      return error("CUDA device {}: {}", options.device, problem);
  }
  std::unique_ptr<CudaExecutor> e(new CudaExecutor());
  e->graph_ = std::make_shared<const Graph>(graph);
  e->lowering_ = std::move(lowering);
  e->device_ = std::move(device);
  e->communicator_ = options.communicator;
  CudaExecutor* self = e.get();
  e->device_->set_host_step([self](const cuda::Launch& l) { return self->run_on_host(l); });
  return e;
}

Status CudaExecutor::feed(const std::vector<Feed>& feeds) {
  for (const auto& [id, tensor] : feeds) {
    const Value& v = graph_->value(id);
    if (v.kind == ValueKind::kIntermediate)
      return error("value '{}' is computed by the graph and cannot be fed", v.name);
    if (!tensor) return error("input '{}' is fed no tensor", v.name);
    RETURN_IF_ERROR(check_feed(v, *tensor));
    const auto& ref = lowering_->refs[id];
    if (!ref) continue;  // read by nothing on the device
    if (std::string problem = device_->write(*ref, tensor->bytes().data(), tensor->num_bytes());
        !problem.empty())
      return error("feeding '{}': {}", v.name, problem);
  }
  return Status::ok();
}

Status CudaExecutor::set_random_stream(uint64_t stream) {
  if (!lowering_->random_stream) return Status::ok();  // nothing draws
  const auto value = static_cast<int64_t>(stream);
  if (std::string problem = device_->write(*lowering_->random_stream, &value, sizeof value);
      !problem.empty())
    return error("random stream: {}", problem);
  return Status::ok();
}

StatusOr<double> CudaExecutor::step() {
  if (device_->has_host_steps()) {
    // Communication through the host cannot be captured: every run is eager.
    cuda::RunTiming timing;
    if (std::string problem = device_->run(&timing); !problem.empty()) return error("{}", problem);
    if (std::string bad = device_->take_data_error(); !bad.empty()) return error("{}", bad);
    ran_ = true;
    return timing.seconds;
  }
  if (!ran_) {
    cuda::RunTiming timing;
    if (std::string problem = device_->run(&timing); !problem.empty()) return error("{}", problem);
    if (std::string bad = device_->take_data_error(); !bad.empty()) return error("{}", bad);
    if (std::string problem = device_->capture(); !problem.empty()) return error("{}", problem);
    ran_ = true;
    return timing.seconds;
  }
  ASSIGN_OR_RETURN(std::vector<double> seconds, replay(1));
  return seconds.front();
}

StatusOr<std::vector<double>> CudaExecutor::replay(int times) {
  if (device_->has_host_steps()) {
    std::vector<double> seconds;
    for (int i = 0; i < times; ++i) {
      ASSIGN_OR_RETURN(double s, step());
      seconds.push_back(s);
    }
    return seconds;
  }
  if (!ran_) {
    ASSIGN_OR_RETURN(double first, step());
    (void)first;
  }
  std::vector<double> seconds;
  if (std::string problem = device_->replay(times, &seconds); !problem.empty())
    return error("{}", problem);
  if (std::string bad = device_->take_data_error(); !bad.empty()) return error("{}", bad);
  return seconds;
}

StatusOr<std::vector<CudaLaunchTiming>> CudaExecutor::profile_launches() {
  std::vector<double> launch_seconds;
  if (std::string problem = device_->run_profiled(launch_seconds); !problem.empty())
    return error("{}", problem);
  const auto& launches = lowering_->program.launches;
  std::vector<CudaLaunchTiming> timings;
  timings.reserve(launches.size());
  for (size_t i = 0; i < launches.size() && i < launch_seconds.size(); ++i) {
    const cuda::Launch& l = launches[i];
    timings.push_back({cuda::kind_name(l.kind), l.node, l.node_id, l.nodes, cuda::launch_bytes(l),
                       launch_seconds[i]});
  }
  return timings;
}

StatusOr<std::vector<double>> CudaExecutor::profile_nodes() {
  ASSIGN_OR_RETURN(std::vector<CudaLaunchTiming> launches, profile_launches());
  std::vector<double> node_seconds(static_cast<size_t>(graph_->num_nodes()), 0.0);
  for (const CudaLaunchTiming& l : launches) {
    if (l.node_id >= 0) node_seconds[static_cast<size_t>(l.node_id)] += l.seconds;
  }
  return node_seconds;
}

StatusOr<Tensor> CudaExecutor::read(ValueId id) {
  const Value& v = graph_->value(id);
  Tensor t(v.dtype, v.shape.dims);
  const auto& ref = lowering_->refs[id];
  if (!ref) {
    if (v.data) return *v.data;
    return error("value '{}' has no storage on the device", v.name);
  }
  if (t.num_bytes() == 0) return t;
  if (std::string problem = device_->read(*ref, t.mutable_bytes().data(), t.num_bytes());
      !problem.empty())
    return error("reading '{}': {}", v.name, problem);
  return t;
}

StatusOr<std::vector<TensorPtr>> CudaExecutor::outputs() {
  std::vector<TensorPtr> out;
  for (ValueId id : graph_->outputs()) {
    ASSIGN_OR_RETURN(Tensor t, read(id));
    out.push_back(std::make_shared<const Tensor>(std::move(t)));
  }
  return out;
}

std::string CudaExecutor::run_on_host(const cuda::Launch& launch) {
  if (launch.node_id < 0 || launch.node_id >= graph_->num_nodes()) return "a host step of no node";
  const Node& node = graph_->node(launch.node_id);
  const Kernel* kernel = kernel_registry().find(node.domain, node.op_type);
  if (!kernel) return fmt::format("node '{}' ({}): no host kernel", node.name, node.op_type);
  std::vector<Tensor> held;
  held.reserve(node.inputs.size());
  for (ValueId v : node.inputs) {
    if (v == kNoId) continue;
    auto t = read(v);
    if (!t.is_ok()) return fmt::format("node '{}': {}", node.name, t.status().message());
    held.push_back(std::move(t).value());
  }
  std::vector<const Tensor*> inputs;
  size_t next = 0;
  for (ValueId v : node.inputs) inputs.push_back(v == kNoId ? nullptr : &held[next++]);
  KernelContext ctx(*graph_, node, std::move(inputs), 1);
  ctx.set_communicator(communicator_);
  if (Status status = (*kernel)(ctx); !status.is_ok()) return status.message();
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const ValueId out = node.outputs[i];
    const std::shared_ptr<Tensor>& t = ctx.outputs()[i];
    if (out == kNoId || !t || !lowering_->refs[out]) continue;
    if (std::string problem =
            device_->write(*lowering_->refs[out], t->bytes().data(), t->num_bytes());
        !problem.empty())
      return fmt::format("node '{}': writing '{}': {}", node.name, graph_->value(out).name,
                         problem);
  }
  return "";
}

StatusOr<std::vector<TensorPtr>> CudaExecutor::run(const std::vector<Feed>& feeds) {
  RETURN_IF_ERROR(feed(feeds));
  ASSIGN_OR_RETURN(double seconds, step());
  (void)seconds;
  return outputs();
}

}  // namespace autopar::runtime
