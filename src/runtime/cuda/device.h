// One GPU running one Program: its memory regions, stream, library handles (cuBLASLt, cuDNN,
// NCCL) and the CUDA graph the program is captured into. C++17 and free of CUDA's headers, so
// the host side (C++20) includes it; device.cu implements it, no_cuda.cc stands in for it in
// builds without CUDA. Every call returns "" on success or one line saying what failed.
#pragma once

#include <cstdint>
#include <functional>
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

// NCCL communicators of one process (launch.h defines it): the world, one rank per GPU, and a
// communicator for each group the programs use.
struct NcclComms;

// Joins an NCCL world of `size` ranks as `rank` on device `ordinal` (`unique_id`: rank 0's
// nccl_unique_id(), 128 bytes) and splits one communicator for every group in `groups` (the
// global ranks, in order). Every rank passes the same groups in the same order: the splits are
// collective over the world, so all of them are made here, before any program runs, and no
// rank's first use of a group can wait on another's. Null with *error set on failure.
std::shared_ptr<NcclComms> open_nccl(int ordinal, int rank, int size, const std::string& unique_id,
                                     const std::vector<std::vector<int>>& groups,
                                     std::string* error);

// NCCL's unique id (128 bytes) for rank 0 to send to the others, or "" with *error set.
std::string nccl_unique_id(std::string* error);

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

  // The communicators kComm launches run on (open_nccl, on this device's ordinal); shared by
  // the devices of one process's programs. Needed before a program with kComm launches runs.
  std::string use_nccl(std::shared_ptr<NcclComms> comms);

  // What runs a kHost launch: called after every earlier launch has finished, it reads the
  // launch's inputs and writes its outputs (read() and write()). A program with kHost launches
  // runs eagerly: capture() refuses it.
  using HostStep = std::function<std::string(const Launch&)>;
  void set_host_step(HostStep step);
  bool has_host_steps() const;

  int64_t arena_bytes() const;
  int64_t persistent_bytes() const;

  struct Impl;

 private:
  explicit Device(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace autopar::cuda
