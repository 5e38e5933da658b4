// The Device of device.h: regions, stream and library handles, launch dispatch, CUDA graph
// capture and replay, the data-error flag, NCCL setup.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "device.h"
#include "launch.h"

namespace autopar::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{64} << 20;

std::string cublas_error(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return "";
  return std::string(what) + ": " + cublasLtGetStatusName(status) + " (" +
         cublasLtGetStatusString(status) + ")";
}

std::string cudnn_error(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return "";
  return std::string(what) + ": " + cudnnGetErrorString(status);
}

// ncclGetLastError ignores its communicator and answers the thread's last error.
std::string nccl_error(ncclResult_t status, ncclComm_t comm, const char* what) {
  if (status == ncclSuccess) return "";
  std::string message = std::string(what) + ": " + ncclGetErrorString(status);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') message += std::string(" (") + last + ")";
  return message;
}

std::string gib(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%lld bytes, %.2f GiB", static_cast<long long>(bytes),
                static_cast<double>(bytes) / double(int64_t{1} << 30));
  return text;
}

// Lets open() tell a device this build has no code for (sm_90a code runs on sm_90 only)
// before the first kernel fails with a less telling error.
__global__ void probe_kernel() {}

std::string copy_bytes(const Resolved& r, Context& ctx) {
  const int64_t bytes = r.launch->bytes;
  if (bytes == 0 || r.in[0] == r.out[0]) return "";
  return cuda_error(cudaMemcpyAsync(r.out[0], r.in[0], static_cast<size_t>(bytes),
                                    cudaMemcpyDeviceToDevice, ctx.stream),
                    "copy: cudaMemcpyAsync");
}

// A library call that succeeded can leave an error of an internal probe in CUDA's last-error
// slot, which the next kernel's check_launch would report as its own.
std::string library_call(std::string error) {
  if (error.empty()) cudaGetLastError();
  return error;
}

std::string dispatch(const Resolved& r, Context& ctx) {
  switch (r.launch->kind) {
    case Kind::kMap:
      return enqueue_map(r, ctx);
    case Kind::kReduce:
      return enqueue_reduce(r, ctx);
    case Kind::kSoftmax:
      return enqueue_softmax(r, ctx);
    case Kind::kLayerNorm:
      return enqueue_layer_norm(r, ctx);
    case Kind::kLayerNormGrad:
      return enqueue_layer_norm_grad(r, ctx);
    case Kind::kBatchNorm:
      return enqueue_batch_norm(r, ctx);
    case Kind::kCrossEntropy:
      return enqueue_cross_entropy(r, ctx);
    case Kind::kAdam:
      return enqueue_adam(r, ctx);
    case Kind::kGather:
      return enqueue_gather(r, ctx);
    case Kind::kGatherElements:
    case Kind::kScatterElements:
      return enqueue_elements(r, ctx);
    case Kind::kGatherND:
    case Kind::kScatterND:
      return enqueue_nd(r, ctx);
    case Kind::kPool:
      return enqueue_pool(r, ctx);
    case Kind::kResize:
      return enqueue_resize(r, ctx);
    case Kind::kDropout:
      return enqueue_dropout(r, ctx);
    case Kind::kMatMul:
      return library_call(enqueue_matmul(r, ctx));
    case Kind::kConv:
      return library_call(enqueue_conv(r, ctx));
    case Kind::kComm:
      return library_call(enqueue_comm(r, ctx));
    case Kind::kCopyBytes:
      return copy_bytes(r, ctx);
    case Kind::kHost:
      return "a host step reached the device's dispatch";
  }
  return "unknown launch kind " + std::to_string(static_cast<int>(r.launch->kind));
}

std::string launch_prefix(const Program& program, int64_t index) {
  std::string prefix = "launch " + std::to_string(index);
  if (index >= 0 && index < static_cast<int64_t>(program.launches.size()) &&
      !program.launches[static_cast<size_t>(index)].node.empty()) {
    prefix += " (node '" + program.launches[static_cast<size_t>(index)].node + "')";
  }
  return prefix + ": ";
}

// The launch being enqueued: a fault inside a library (cuBLASLt, cuDNN, NCCL) or a kernel
// family's host code then names the node it was running instead of dying silently.
std::atomic<const Launch*> current_launch{nullptr};

void report_crash(int signal) {
  if (const Launch* l = current_launch.load(std::memory_order_relaxed)) {
    static const char kHead[] = "autopar: crashed while enqueuing the launch of node '";
    static const char kTail[] = "'\n";
    ssize_t ignored = write(2, kHead, sizeof kHead - 1);
    ignored = write(2, l->node.data(), l->node.size());
    ignored = write(2, kTail, sizeof kTail - 1);
    (void)ignored;
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

double elapsed_seconds(cudaEvent_t start, cudaEvent_t stop, std::string* error) {
  float ms = 0;
  *error = cuda_error(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  return static_cast<double>(ms) / 1000.0;
}

}  // namespace

struct Device::Impl {
  int ordinal = 0;
  Context ctx;
  cudaEvent_t start = nullptr, stop = nullptr;

  Program program;
  bool loaded = false;
  char* arena = nullptr;
  char* persistent = nullptr;
  // Built once per load: the regions never move while a program is loaded.
  std::vector<Resolved> resolved;

  bool ran = false;  // library choices made, so capture() may proceed
  cudaGraphExec_t graph = nullptr;
  HostStep host_step;
  bool host_launches = false;  // the loaded program has kHost launches

  ~Impl();

  std::string set_device() const { return cuda_error(cudaSetDevice(ordinal), "cudaSetDevice"); }
  std::string sync(const char* what) const {
    return cuda_error(cudaStreamSynchronize(ctx.stream), what);
  }
  char* region_base(Region region) const { return region == Region::kArena ? arena : persistent; }
  int64_t region_bytes(Region region) const {
    return region == Region::kArena ? program.arena_bytes : program.persistent_bytes;
  }
  std::string check_range(const Ref& ref, int64_t bytes, const char* what) const;
  void drop_graph();
  void drop_launch_state();
  void free_regions();
  std::string validate() const;
  std::string enqueue_all(std::vector<double>* per_launch);
};

Device::Impl::~Impl() {
  cudaSetDevice(ordinal);
  if (ctx.stream != nullptr) cudaStreamSynchronize(ctx.stream);
  drop_graph();
  // Descriptors first: they belong to the handles.
  ctx.state.clear();
  ctx.nccl.reset();
  if (ctx.cudnn != nullptr) cudnnDestroy(static_cast<cudnnHandle_t>(ctx.cudnn));
  if (ctx.cublaslt != nullptr) cublasLtDestroy(static_cast<cublasLtHandle_t>(ctx.cublaslt));
  free_regions();
  if (ctx.workspace != nullptr) cudaFree(ctx.workspace);
  if (ctx.error != nullptr) cudaFree(ctx.error);
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  if (ctx.stream != nullptr) cudaStreamDestroy(ctx.stream);
}

void Device::Impl::drop_graph() {
  if (graph != nullptr) cudaGraphExecDestroy(graph);
  graph = nullptr;
}

void Device::Impl::drop_launch_state() { ctx.state.clear(); }

void Device::Impl::free_regions() {
  if (arena != nullptr) cudaFree(arena);
  if (persistent != nullptr) cudaFree(persistent);
  arena = persistent = nullptr;
}

std::string Device::Impl::check_range(const Ref& ref, int64_t bytes, const char* what) const {
  if (ref.region != Region::kArena && ref.region != Region::kPersistent) {
    return std::string(what) + ": bad region " + std::to_string(static_cast<int>(ref.region));
  }
  const int64_t size = region_bytes(ref.region);
  if (ref.offset < 0 || bytes < 0 || ref.offset > size || bytes > size - ref.offset) {
    return std::string(what) + ": bytes [" + std::to_string(ref.offset) + ", +" +
           std::to_string(bytes) + ") outside the " +
           (ref.region == Region::kArena ? "arena" : "persistent region") + " of " +
           std::to_string(size) + " bytes";
  }
  return "";
}

std::string Device::Impl::validate() const {
  if (program.arena_bytes < 0 || program.persistent_bytes < 0) return "negative region size";
  for (size_t u = 0; u < program.uploads.size(); ++u) {
    const Upload& upload = program.uploads[u];
    Ref ref;
    ref.region = Region::kPersistent;
    ref.offset = upload.offset;
    std::string error = check_range(ref, static_cast<int64_t>(upload.bytes.size()), "upload");
    if (!error.empty()) return "upload " + std::to_string(u) + ": " + error;
  }
  const Resolved probe;
  const size_t max_in = sizeof probe.in / sizeof probe.in[0];
  const size_t max_out = sizeof probe.out / sizeof probe.out[0];
  for (size_t i = 0; i < program.launches.size(); ++i) {
    const Launch& launch = program.launches[i];
    const std::string prefix = launch_prefix(program, static_cast<int64_t>(i));
    if (launch.in.size() > max_in || launch.out.size() > max_out) {
      return prefix + std::to_string(launch.in.size()) + " inputs and " +
             std::to_string(launch.out.size()) + " outputs (at most " + std::to_string(max_in) +
             " and " + std::to_string(max_out) + ")";
    }
    for (const Access& access : launch.in) {
      std::string error = check_range(access.ref, 0, "input");
      if (!error.empty()) return prefix + error;
    }
    for (const Access& access : launch.out) {
      if (access.ref.offset < 0) continue;  // an absent optional output
      std::string error = check_range(access.ref, 0, "output");
      if (!error.empty()) return prefix + error;
    }
    if (launch.kind == Kind::kCopyBytes) {
      if (launch.in.empty() || launch.out.empty()) return prefix + "copy without input or output";
      std::string error = check_range(launch.in[0].ref, launch.bytes, "copy source");
      if (error.empty()) error = check_range(launch.out[0].ref, launch.bytes, "copy target");
      if (!error.empty()) return prefix + error;
    }
  }
  return "";
}

std::string Device::Impl::enqueue_all(std::vector<double>* per_launch) {
  // Errors of earlier calls were answered there; the first kernel must not report them.
  cudaGetLastError();
  // Profiling: an event after every launch, read once at the end, so the launches queue as in
  // a plain run (a synchronisation after each would add its own latency to every kernel).
  std::vector<cudaEvent_t> marks;
  auto destroy_marks = [&] {
    for (cudaEvent_t m : marks) cudaEventDestroy(m);
  };
  if (per_launch != nullptr) {
    marks.resize(resolved.size() + 1, nullptr);
    for (cudaEvent_t& m : marks) {
      std::string error = cuda_error(cudaEventCreate(&m), "cudaEventCreate");
      if (!error.empty()) {
        destroy_marks();
        return error;
      }
    }
    std::string error = cuda_error(cudaEventRecord(marks[0], ctx.stream), "cudaEventRecord");
    if (!error.empty()) {
      destroy_marks();
      return error;
    }
  }
  for (size_t i = 0; i < resolved.size(); ++i) {
    ctx.launch_index = static_cast<int>(i);
    current_launch.store(resolved[i].launch, std::memory_order_relaxed);
    std::string error;
    if (resolved[i].launch->kind == Kind::kHost) {
      if (ctx.capturing)
        error = "a host step cannot be captured";
      else if (!host_step)
        error = "a host step, and no host to run it (Device::set_host_step)";
      else if ((error = sync("cudaStreamSynchronize")).empty())
        error = host_step(*resolved[i].launch);
    } else {
      error = dispatch(resolved[i], ctx);
    }
    if (error.empty() && per_launch != nullptr)
      error = cuda_error(cudaEventRecord(marks[i + 1], ctx.stream), "cudaEventRecord");
    if (!error.empty()) {
      current_launch.store(nullptr, std::memory_order_relaxed);
      destroy_marks();
      return launch_prefix(program, static_cast<int64_t>(i)) + error;
    }
  }
  current_launch.store(nullptr, std::memory_order_relaxed);
  if (per_launch != nullptr) {
    std::string error = cuda_error(cudaEventSynchronize(marks.back()), "cudaEventSynchronize");
    for (size_t i = 0; error.empty() && i < resolved.size(); ++i)
      (*per_launch)[i] = elapsed_seconds(marks[i], marks[i + 1], &error);
    destroy_marks();
    if (!error.empty()) return error;
  }
  return "";
}

// ---- free functions --------------------------------------------------------------------------

std::string device_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorInsufficientDriver) {
    cudaGetLastError();
    return "no CUDA driver on this machine (or one older than this build's CUDA " +
           std::to_string(CUDART_VERSION / 1000) + "." +
           std::to_string(CUDART_VERSION % 1000 / 10) + " runtime)";
  }
  if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0)) {
    cudaGetLastError();
    return "no CUDA device";
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    return cuda_error(status, "cudaGetDeviceCount");
  }
  return "";
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string device_description(int ordinal) {
  cudaDeviceProp prop;
  std::string error =
      cuda_error(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  if (!error.empty()) return "device " + std::to_string(ordinal) + ": " + error;
  char text[512];
  std::snprintf(text, sizeof text, "%s (sm_%d%d, %d SMs, %.1f GiB)", prop.name, prop.major,
                prop.minor, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / double(int64_t{1} << 30));
  return text;
}

std::string nccl_unique_id(std::string* error) {
  ncclUniqueId id;
  const std::string e = nccl_error(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
  if (!e.empty()) {
    if (error != nullptr) *error = e;
    return "";
  }
  return std::string(id.internal, NCCL_UNIQUE_ID_BYTES);
}

// ---- Device ----------------------------------------------------------------------------------

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::~Device() = default;

std::unique_ptr<Device> Device::open(int ordinal, std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error != nullptr) *error = "device " + std::to_string(ordinal) + ": " + message;
    return std::unique_ptr<Device>();
  };
  std::string reason = device_unavailable_reason();
  if (!reason.empty()) return fail(reason);
  const int count = device_count();
  if (ordinal < 0 || ordinal >= count) {
    return fail("no such device (" + std::to_string(count) + " present)");
  }

  static const bool handlers = [] {
    std::signal(SIGSEGV, report_crash);
    std::signal(SIGBUS, report_crash);
    std::signal(SIGFPE, report_crash);
    return true;
  }();
  (void)handlers;
  auto impl = std::make_unique<Impl>();
  impl->ordinal = ordinal;
  std::string e = impl->set_device();
  if (!e.empty()) return fail(e);

  cudaFuncAttributes attributes;
  const cudaError_t probe = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (probe != cudaSuccess) {
    cudaGetLastError();
    cudaDeviceProp prop;
    if (probe == cudaErrorNoKernelImageForDevice || probe == cudaErrorInvalidDeviceFunction) {
      if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess) {
        return fail("this build has no code for sm_" + std::to_string(prop.major) +
                    std::to_string(prop.minor) +
                    " (rebuild with AUTOPAR_CUDA_ARCHITECTURES naming it)");
      }
    }
    return fail(cuda_error(probe, "cudaFuncGetAttributes"));
  }

  Context& ctx = impl->ctx;
  e = cuda_error(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
  if (e.empty()) e = cuda_error(cudaEventCreate(&impl->start), "cudaEventCreate");
  if (e.empty()) e = cuda_error(cudaEventCreate(&impl->stop), "cudaEventCreate");
  if (!e.empty()) return fail(e);

  cublasLtHandle_t lt = nullptr;
  e = cublas_error(cublasLtCreate(&lt), "cublasLtCreate");
  if (!e.empty()) return fail(e);
  ctx.cublaslt = lt;

  cudnnHandle_t dnn = nullptr;
  e = cudnn_error(cudnnCreate(&dnn), "cudnnCreate");
  if (!e.empty()) return fail(e);
  ctx.cudnn = dnn;
  e = cudnn_error(cudnnSetStream(dnn, ctx.stream), "cudnnSetStream");
  if (!e.empty()) return fail(e);

  e = cuda_error(cudaMalloc(&ctx.workspace, kWorkspaceBytes), "cudaMalloc workspace");
  if (!e.empty()) return fail(e);
  ctx.workspace_bytes = kWorkspaceBytes;

  e = cuda_error(cudaMalloc(reinterpret_cast<void**>(&ctx.error), sizeof(DataError)),
                 "cudaMalloc error flag");
  if (e.empty()) {
    e = cuda_error(cudaMemset(ctx.error, 0, sizeof(DataError)), "cudaMemset error flag");
  }
  if (!e.empty()) return fail(e);

  return std::unique_ptr<Device>(new Device(std::move(impl)));
}

std::string Device::load(Program program) {
  Impl& d = *impl_;
  std::string e = d.set_device();
  if (!e.empty()) return "load: " + e;
  // The previous program's replays may still be running on its regions.
  e = d.sync("load: cudaStreamSynchronize");
  if (!e.empty()) return e;
  d.drop_graph();
  d.drop_launch_state();
  d.free_regions();
  d.resolved.clear();
  d.loaded = false;
  d.ran = false;
  d.program = std::move(program);
  d.host_launches = false;
  for (const Launch& launch : d.program.launches) d.host_launches |= launch.kind == Kind::kHost;

  e = d.validate();
  if (!e.empty()) return "load: " + e;

  // cudaMalloc aligns to at least 256 bytes, which the arena's offsets and cuBLASLt's
  // preferred alignment assume.
  const Program& p = d.program;
  if (p.arena_bytes > 0) {
    e = cuda_error(
        cudaMalloc(reinterpret_cast<void**>(&d.arena), static_cast<size_t>(p.arena_bytes)),
        ("load: cudaMalloc arena (" + gib(p.arena_bytes) + ")").c_str());
    if (!e.empty()) return e;
  }
  if (p.persistent_bytes > 0) {
    e = cuda_error(
        cudaMalloc(reinterpret_cast<void**>(&d.persistent),
                   static_cast<size_t>(p.persistent_bytes)),
        ("load: cudaMalloc persistent region (" + gib(p.persistent_bytes) + ")").c_str());
    if (!e.empty()) {
      d.free_regions();
      return e;
    }
  }
  // Zeroed so that a value read before anything writes it reads the same on every run.
  if (d.arena != nullptr) {
    e = cuda_error(cudaMemsetAsync(d.arena, 0, static_cast<size_t>(p.arena_bytes), d.ctx.stream),
                   "load: cudaMemsetAsync arena");
  }
  if (e.empty() && d.persistent != nullptr) {
    e = cuda_error(
        cudaMemsetAsync(d.persistent, 0, static_cast<size_t>(p.persistent_bytes), d.ctx.stream),
        "load: cudaMemsetAsync persistent region");
  }
  for (size_t u = 0; e.empty() && u < p.uploads.size(); ++u) {
    const Upload& upload = p.uploads[u];
    if (upload.bytes.empty()) continue;
    e = cuda_error(cudaMemcpyAsync(d.persistent + upload.offset, upload.bytes.data(),
                                   upload.bytes.size(), cudaMemcpyHostToDevice, d.ctx.stream),
                   ("load: upload " + std::to_string(u) + ": cudaMemcpyAsync").c_str());
  }
  const std::string synced = d.sync("load: cudaStreamSynchronize");
  if (e.empty()) e = synced;
  if (!e.empty()) {
    d.free_regions();
    return e;
  }

  d.resolved.resize(p.launches.size());
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& launch = p.launches[i];
    Resolved& r = d.resolved[i];
    r.launch = &launch;
    for (size_t j = 0; j < launch.in.size(); ++j) {
      r.in[j] = d.region_base(launch.in[j].ref.region) + launch.in[j].ref.offset;
    }
    for (size_t j = 0; j < launch.out.size(); ++j) {
      r.out[j] = launch.out[j].ref.offset < 0
                     ? nullptr
                     : d.region_base(launch.out[j].ref.region) + launch.out[j].ref.offset;
    }
  }
  d.loaded = true;
  return "";
}

std::string Device::poison_arena() {
  Impl& d = *impl_;
  if (!d.loaded) return "poison_arena: no program loaded";
  if (d.arena == nullptr) return "";
  std::string e = d.set_device();
  if (e.empty()) {
    e = cuda_error(
        cudaMemsetAsync(d.arena, 0xFF, static_cast<size_t>(d.program.arena_bytes), d.ctx.stream),
        "poison_arena: cudaMemsetAsync");
  }
  const std::string synced = d.sync("cudaStreamSynchronize");
  return e.empty() ? synced : e;
}

std::string Device::write(const Ref& ref, const void* data, int64_t bytes) {
  Impl& d = *impl_;
  if (!d.loaded) return "write: no program loaded";
  std::string e = d.check_range(ref, bytes, "write");
  if (!e.empty()) return e;
  if (bytes == 0) return "";
  if (data == nullptr) return "write: null host pointer";
  e = d.set_device();
  // On the stream (not cudaMemcpy's legacy stream, which a non-blocking stream does not wait
  // for) so the write lands after whatever is still running.
  if (e.empty()) {
    e = cuda_error(
        cudaMemcpyAsync(d.region_base(ref.region) + ref.offset, data, static_cast<size_t>(bytes),
                        cudaMemcpyHostToDevice, d.ctx.stream),
        "cudaMemcpyAsync");
  }
  const std::string synced = d.sync("cudaStreamSynchronize");
  if (e.empty()) e = synced;
  return e.empty() ? "" : "write: " + e;
}

std::string Device::read(const Ref& ref, void* data, int64_t bytes) {
  Impl& d = *impl_;
  if (!d.loaded) return "read: no program loaded";
  std::string e = d.check_range(ref, bytes, "read");
  if (!e.empty()) return e;
  if (bytes == 0) return "";
  if (data == nullptr) return "read: null host pointer";
  e = d.set_device();
  if (e.empty()) {
    e = cuda_error(
        cudaMemcpyAsync(data, d.region_base(ref.region) + ref.offset, static_cast<size_t>(bytes),
                        cudaMemcpyDeviceToHost, d.ctx.stream),
        "cudaMemcpyAsync");
  }
  const std::string synced = d.sync("cudaStreamSynchronize");
  if (e.empty()) e = synced;
  return e.empty() ? "" : "read: " + e;
}

std::string Device::run(RunTiming* timing) {
  Impl& d = *impl_;
  if (!d.loaded) return "run: no program loaded";
  std::string e = d.set_device();
  if (!e.empty()) return "run: " + e;
  if (timing != nullptr) {
    e = cuda_error(cudaEventRecord(d.start, d.ctx.stream), "run: cudaEventRecord");
    if (!e.empty()) return e;
  }
  e = d.enqueue_all(nullptr);
  if (e.empty() && timing != nullptr) {
    e = cuda_error(cudaEventRecord(d.stop, d.ctx.stream), "run: cudaEventRecord");
  }
  // Synchronised even after a failed enqueue, so nothing of this run is left in flight.
  const std::string synced = d.sync("run: cudaStreamSynchronize");
  if (!e.empty()) return e;
  if (!synced.empty()) return synced;
  if (timing != nullptr) {
    timing->seconds = elapsed_seconds(d.start, d.stop, &e);
    if (!e.empty()) return "run: " + e;
  }
  d.ran = true;
  return "";
}

std::string Device::run_profiled(std::vector<double>& seconds) {
  Impl& d = *impl_;
  if (!d.loaded) return "run_profiled: no program loaded";
  std::string e = d.set_device();
  if (!e.empty()) return "run_profiled: " + e;
  seconds.assign(d.resolved.size(), 0.0);
  e = d.enqueue_all(&seconds);
  const std::string synced = d.sync("run_profiled: cudaStreamSynchronize");
  if (!e.empty()) return e;
  if (!synced.empty()) return synced;
  d.ran = true;
  return "";
}

std::string Device::capture() {
  Impl& d = *impl_;
  if (!d.loaded) return "capture: no program loaded";
  if (!d.ran) return "capture: the program has not run yet (library choices are made by run())";
  if (d.host_launches) return "capture: the program has host steps; it runs eagerly";
  std::string e = d.set_device();
  if (!e.empty()) return "capture: " + e;
  d.drop_graph();

  e = cuda_error(cudaStreamBeginCapture(d.ctx.stream, cudaStreamCaptureModeThreadLocal),
                 "capture: cudaStreamBeginCapture");
  if (!e.empty()) return e;
  d.ctx.capturing = true;
  e = d.enqueue_all(nullptr);
  d.ctx.capturing = false;
  // Ended even after a failed enqueue: a stream left capturing rejects everything after.
  cudaGraph_t graph = nullptr;
  const std::string ended =
      cuda_error(cudaStreamEndCapture(d.ctx.stream, &graph), "capture: cudaStreamEndCapture");
  if (e.empty()) e = ended;
  if (e.empty()) {
    e = cuda_error(cudaGraphInstantiate(&d.graph, graph, 0), "capture: cudaGraphInstantiate");
    if (!e.empty()) d.graph = nullptr;
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  // Uploading now keeps the first replay's time a replay's, not the upload's.
  if (e.empty()) e = cuda_error(cudaGraphUpload(d.graph, d.ctx.stream), "capture: cudaGraphUpload");
  const std::string synced = d.sync("capture: cudaStreamSynchronize");
  if (e.empty()) e = synced;
  if (!e.empty()) d.drop_graph();
  return e;
}

bool Device::captured() const { return impl_->graph != nullptr; }

std::string Device::replay(int times, std::vector<double>* seconds) {
  Impl& d = *impl_;
  if (d.graph == nullptr) return "replay: no captured graph (capture() first)";
  if (times < 0) return "replay: negative count " + std::to_string(times);
  std::string e = d.set_device();
  if (!e.empty()) return "replay: " + e;
  if (seconds != nullptr) seconds->assign(static_cast<size_t>(times), 0.0);
  if (times == 0) return "";

  // One event between consecutive replays, so they run back to back with nothing but an
  // event record between them.
  std::vector<cudaEvent_t> events;
  if (seconds != nullptr) {
    events.assign(static_cast<size_t>(times) + 1, nullptr);
    for (size_t i = 0; e.empty() && i < events.size(); ++i) {
      e = cuda_error(cudaEventCreate(&events[i]), "replay: cudaEventCreate");
    }
  }
  if (e.empty() && seconds != nullptr) {
    e = cuda_error(cudaEventRecord(events[0], d.ctx.stream), "replay: cudaEventRecord");
  }
  for (int i = 0; e.empty() && i < times; ++i) {
    e = cuda_error(cudaGraphLaunch(d.graph, d.ctx.stream), "replay: cudaGraphLaunch");
    if (e.empty() && seconds != nullptr) {
      e = cuda_error(cudaEventRecord(events[static_cast<size_t>(i) + 1], d.ctx.stream),
                     "replay: cudaEventRecord");
    }
  }
  const std::string synced = d.sync("replay: cudaStreamSynchronize");
  if (e.empty()) e = synced;
  for (int i = 0; e.empty() && seconds != nullptr && i < times; ++i) {
    (*seconds)[static_cast<size_t>(i)] =
        elapsed_seconds(events[static_cast<size_t>(i)], events[static_cast<size_t>(i) + 1], &e);
    if (!e.empty()) e = "replay: " + e;
  }
  for (cudaEvent_t event : events) {
    if (event != nullptr) cudaEventDestroy(event);
  }
  return e;
}

std::string Device::take_data_error() {
  Impl& d = *impl_;
  std::string e = d.set_device();
  if (!e.empty()) return "data error flag: " + e;
  DataError flag;
  std::memset(&flag, 0, sizeof flag);
  e = cuda_error(
      cudaMemcpyAsync(&flag, d.ctx.error, sizeof flag, cudaMemcpyDeviceToHost, d.ctx.stream),
      "data error flag: cudaMemcpyAsync");
  const std::string synced = d.sync("data error flag: cudaStreamSynchronize");
  if (e.empty()) e = synced;
  if (!e.empty()) return e;
  if (flag.code == 0) return "";

  e = cuda_error(cudaMemsetAsync(d.ctx.error, 0, sizeof(DataError), d.ctx.stream),
                 "data error flag: cudaMemsetAsync");
  const std::string cleared = d.sync("data error flag: cudaStreamSynchronize");
  if (e.empty()) e = cleared;

  std::string message = launch_prefix(d.program, flag.launch);
  switch (flag.code) {
    case 1:
      message += "index " + std::to_string(flag.value) + " out of range";
      break;
    case 2:
      message += "label " + std::to_string(flag.value) + " out of range";
      break;
    default:
      message +=
          "data error " + std::to_string(flag.code) + " (value " + std::to_string(flag.value) + ")";
  }
  if (!e.empty()) message += "; clearing the flag failed: " + e;
  return message;
}

std::string Device::use_nccl(std::shared_ptr<NcclComms> comms) {
  Impl& d = *impl_;
  if (comms == nullptr) return "use_nccl: no communicators";
  if (comms->ordinal != d.ordinal) {
    return "use_nccl: the communicators are on device " + std::to_string(comms->ordinal) +
           ", this device is " + std::to_string(d.ordinal);
  }
  std::string e = d.set_device();
  if (e.empty()) e = d.sync("cudaStreamSynchronize");
  if (!e.empty()) return "use_nccl: " + e;
  // A graph captured over other communicators must be captured again.
  d.drop_graph();
  d.ctx.nccl = std::move(comms);
  return "";
}

void Device::set_host_step(HostStep step) { impl_->host_step = std::move(step); }
bool Device::has_host_steps() const { return impl_->host_launches; }

int64_t Device::arena_bytes() const { return impl_->loaded ? impl_->program.arena_bytes : 0; }
int64_t Device::persistent_bytes() const {
  return impl_->loaded ? impl_->program.persistent_bytes : 0;
}

}  // namespace autopar::cuda
