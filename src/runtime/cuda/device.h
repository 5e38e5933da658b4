// One GPU running one Program: its memory regions, stream, library handles (cuBLASLt, cuDNN,
// NCCL) and the CUDA graph the program is captured into. C++17 and free of CUDA's headers, so
// the host side (C++20) includes it; device.cu implements it, no_cuda.cc stands in for it in
// builds without CUDA. Every call returns "" on success or one line saying what failed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "program.h"

namespace autopar::cuda {

// "" when a CUDA device can be used, else why not (built without CUDA; no driver; no device).
std::string device_unavailable_reason();
// The number of devices, 0 where none can be used.
int device_count();
// One line naming the device: "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)".
std::string device_description(int ordinal);

// Timing of one program run, by CUDA events around it.
struct RunTiming {
  double seconds = 0;
};

class Device {
 public:
  // Opens device `ordinal` (cudaSetDevice), creates its stream and library handles.
  static std::unique_ptr<Device> open(int ordinal, std::string* error);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Allocates the program's regions and uploads its constants. The program is kept (by
  // value) for the device's lifetime; loading again replaces it.
  std::string load(Program program);

  // Fills the arena with 0xFF bytes (NaN in every float type, -1 in integers): a value a
  // launch should have written and did not shows up in tests.
  std::string poison_arena();

  // Host <-> persistent or arena bytes (synchronous).
  std::string write(const Ref& ref, const void* data, int64_t bytes);
  std::string read(const Ref& ref, void* data, int64_t bytes);

  // Runs every launch on the stream, eagerly (library algorithms are chosen on the first
  // run). Waits for the end. `timing`: events around the whole run.
  std::string run(RunTiming* timing = nullptr);
  // Runs launches [first, last) eagerly and times each by events (a profile); seconds[i] is
  // launch first+i's time. Slower than run(): every launch is synchronised.
  std::string run_profiled(std::vector<double>& seconds);
  // Captures the whole program into a CUDA graph (after at least one run(), so every
  // library choice and workspace is made) and instantiates it.
  std::string capture();
  bool captured() const;
  // Replays the captured graph `times` times back to back and records each replay's seconds.
  std::string replay(int times, std::vector<double>* seconds = nullptr);

  // An error flag set by kernels on bad data (an index out of range): "" or what went wrong,
  // read (and cleared) after a run.
  std::string take_data_error();

  // NCCL: joins a communicator of `size` ranks as `rank`; `unique_id` is NCCL's 128-byte id
  // from rank 0 (nccl_unique_id()). Needed before a program with kComm launches runs.
  std::string init_nccl(int rank, int size, const std::string& unique_id);

  int64_t arena_bytes() const;
  int64_t persistent_bytes() const;

  struct Impl;

 private:
  explicit Device(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// NCCL's unique id (128 bytes) for rank 0 to broadcast, or "" with *error set.
std::string nccl_unique_id(std::string* error);

}  // namespace autopar::cuda
