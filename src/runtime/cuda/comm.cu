// kComm on NCCL: collectives over a group's communicator, point-to-point over the world's.
// Every communicator is made by open_nccl before a program runs (see device.h), so a launch
// only looks its group up.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "launch.h"

namespace autopar::cuda {
namespace {

const char* op_name(CommOp op) {
  switch (op) {
    case CommOp::kSend:
      return "send";
    case CommOp::kRecv:
      return "recv";
    case CommOp::kAllReduce:
      return "all-reduce";
    case CommOp::kAllGather:
      return "all-gather";
    case CommOp::kReduceScatter:
      return "reduce-scatter";
    case CommOp::kAllToAll:
      return "all-to-all";
    case CommOp::kBroadcast:
      return "broadcast";
  }
  return "comm";
}

std::string group_text(const std::vector<int>& group) {
  std::string text = "{";
  for (size_t i = 0; i < group.size(); ++i) text += (i ? ", " : "") + std::to_string(group[i]);
  return text + "}";
}

std::string nccl_error(ncclResult_t status, const CommParams& p, const char* what) {
  if (status == ncclSuccess) return "";
  std::string message =
      std::string(op_name(p.op)) + ": " + what + ": " + ncclGetErrorString(status);
  // ncclGetLastError ignores its communicator and answers the thread's last error.
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') message += std::string(" (") + last + ")";
  return message;
}

bool nccl_type(Dt dt, ncclDataType_t* type) {
  switch (dt) {
    case Dt::kF32:
      *type = ncclFloat32;
      return true;
    case Dt::kF16:
      *type = ncclFloat16;
      return true;
    case Dt::kBF16:
      *type = ncclBfloat16;
      return true;
    case Dt::kF64:
      *type = ncclFloat64;
      return true;
    case Dt::kI64:
      *type = ncclInt64;
      return true;
    case Dt::kI32:
      *type = ncclInt32;
      return true;
    case Dt::kI8:
      *type = ncclInt8;
      return true;
    case Dt::kU8:
    case Dt::kBool:
      *type = ncclUint8;
      return true;
  }
  return false;
}

bool nccl_reduce(int reduce, ncclRedOp_t* op) {
  switch (reduce) {
    case 0:
      *op = ncclSum;
      return true;
    case 1:
      *op = ncclMax;
      return true;
    case 2:
      *op = ncclMin;
      return true;
    case 3:
      *op = ncclAvg;
      return true;
    default:
      return false;
  }
}

// The communicator of `group` and this rank's place in it.
std::string group_communicator(const CommParams& p, const NcclComms& comms, ncclComm_t* comm,
                               int* rank) {
  const std::vector<int>& group = p.group;
  if (group.empty()) return std::string(op_name(p.op)) + ": empty group";
  const auto mine = std::find(group.begin(), group.end(), comms.rank);
  if (mine == group.end()) {
    return std::string(op_name(p.op)) + ": rank " + std::to_string(comms.rank) +
           " is not in group " + group_text(group);
  }
  *rank = static_cast<int>(mine - group.begin());
  const auto found = comms.groups.find(group);
  if (found == comms.groups.end()) {
    return std::string(op_name(p.op)) + ": group " + group_text(group) +
           " has no communicator (open_nccl was not given it)";
  }
  *comm = static_cast<ncclComm_t>(found->second);
  return "";
}

}  // namespace

std::string enqueue_comm(const Resolved& r, Context& ctx) {
  const Launch& launch = *r.launch;
  const CommParams& p = launch.comm;
  const std::string name = op_name(p.op);
  if (ctx.nccl == nullptr) return name + ": no NCCL communicator (Device::use_nccl first)";
  const NcclComms& comms = *ctx.nccl;
  if (p.count < 0) return name + ": negative count";
  const bool sends = p.op != CommOp::kRecv;
  const bool receives = p.op != CommOp::kSend;
  if ((sends && p.op != CommOp::kBroadcast && launch.in.empty()) ||
      (receives && launch.out.empty())) {
    return name + ": missing " + (receives && launch.out.empty() ? "output" : "input");
  }
  const Dt dt = receives ? launch.out[0].ref.dt : launch.in[0].ref.dt;
  ncclDataType_t type;
  if (!nccl_type(dt, &type)) return name + ": no NCCL type for the dtype";
  const size_t count = static_cast<size_t>(p.count);

  if (p.op == CommOp::kSend || p.op == CommOp::kRecv) {
    ncclComm_t world = static_cast<ncclComm_t>(comms.world);
    // The world's ranks are the global ranks, so the peer needs no map.
    if (p.peer < 0 || p.peer >= comms.size || p.peer == comms.rank) {
      return name + ": peer " + std::to_string(p.peer) + " (rank " + std::to_string(comms.rank) +
             " of " + std::to_string(comms.size) + ")";
    }
    if (p.op == CommOp::kSend) {
      return nccl_error(ncclSend(r.in[0], count, type, p.peer, world, ctx.stream), p, "ncclSend");
    }
    return nccl_error(ncclRecv(r.out[0], count, type, p.peer, world, ctx.stream), p, "ncclRecv");
  }

  ncclComm_t comm = nullptr;
  int rank = 0;
  std::string e = group_communicator(p, comms, &comm, &rank);
  if (!e.empty()) return e;
  const size_t ranks = p.group.size();

  switch (p.op) {
    case CommOp::kAllReduce:
    case CommOp::kReduceScatter: {
      ncclRedOp_t op;
      if (!nccl_reduce(p.reduce, &op)) return name + ": reduction " + std::to_string(p.reduce);
      if (p.op == CommOp::kAllReduce) {
        return nccl_error(ncclAllReduce(r.in[0], r.out[0], count, type, op, comm, ctx.stream), p,
                          "ncclAllReduce");
      }
      if (count % ranks != 0) {
        return name + ": " + std::to_string(count) + " elements do not split over " +
               std::to_string(ranks) + " ranks";
      }
      return nccl_error(
          ncclReduceScatter(r.in[0], r.out[0], count / ranks, type, op, comm, ctx.stream), p,
          "ncclReduceScatter");
    }
    case CommOp::kAllGather:
      return nccl_error(ncclAllGather(r.in[0], r.out[0], count, type, comm, ctx.stream), p,
                        "ncclAllGather");
    case CommOp::kAllToAll: {
      if (count % ranks != 0) {
        return name + ": " + std::to_string(count) + " elements do not split over " +
               std::to_string(ranks) + " ranks";
      }
      const size_t chunk = count / ranks;
      const size_t chunk_bytes = chunk * static_cast<size_t>(dt_size(dt));
      const char* in = static_cast<const char*>(r.in[0]);
      char* out = static_cast<char*>(r.out[0]);
      e = nccl_error(ncclGroupStart(), p, "ncclGroupStart");
      if (!e.empty()) return e;
      for (size_t j = 0; e.empty() && j < ranks; ++j) {
        const int peer = static_cast<int>(j);
        e = nccl_error(ncclSend(in + j * chunk_bytes, chunk, type, peer, comm, ctx.stream), p,
                       "ncclSend");
        if (e.empty()) {
          e = nccl_error(ncclRecv(out + j * chunk_bytes, chunk, type, peer, comm, ctx.stream), p,
                         "ncclRecv");
        }
      }
      // Closed whatever happened, or NCCL's group stays open for the next call.
      const std::string ended = nccl_error(ncclGroupEnd(), p, "ncclGroupEnd");
      return e.empty() ? ended : e;
    }
    case CommOp::kBroadcast: {
      if (p.root < 0 || p.root >= static_cast<int>(ranks)) {
        return name + ": root " + std::to_string(p.root) + " of a group of " +
               std::to_string(ranks);
      }
      if (launch.in.empty() && rank == p.root) return name + ": the root has no input";
      // Only the root's send buffer is read.
      const void* send = launch.in.empty() ? r.out[0] : r.in[0];
      return nccl_error(ncclBroadcast(send, r.out[0], count, type, p.root, comm, ctx.stream), p,
                        "ncclBroadcast");
    }
    default:
      break;
  }
  return name + ": unknown communication op";
}

NcclComms::~NcclComms() {
  cudaSetDevice(ordinal);
  for (auto& entry : groups) {
    if (entry.second != world) ncclCommDestroy(static_cast<ncclComm_t>(entry.second));
  }
  if (world != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(world));
}

std::shared_ptr<NcclComms> open_nccl(int ordinal, int rank, int size, const std::string& unique_id,
                                     const std::vector<std::vector<int>>& groups,
                                     std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error != nullptr)
      *error =
          "NCCL (rank " + std::to_string(rank) + " of " + std::to_string(size) + "): " + message;
    return std::shared_ptr<NcclComms>();
  };
  if (size <= 0 || rank < 0 || rank >= size) return fail("no such rank");
  if (unique_id.size() != NCCL_UNIQUE_ID_BYTES) {
    return fail("the unique id has " + std::to_string(unique_id.size()) + " bytes, not " +
                std::to_string(NCCL_UNIQUE_ID_BYTES));
  }
  std::string e = cuda_error(cudaSetDevice(ordinal), "cudaSetDevice");
  if (!e.empty()) return fail(e);
  auto comms = std::make_shared<NcclComms>();
  comms->rank = rank;
  comms->size = size;
  comms->ordinal = ordinal;
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), NCCL_UNIQUE_ID_BYTES);
  ncclComm_t world = nullptr;
  ncclResult_t status = ncclCommInitRank(&world, size, id, rank);
  if (status != ncclSuccess)
    return fail(std::string("ncclCommInitRank: ") + ncclGetErrorString(status));
  comms->world = world;
  for (const std::vector<int>& group : groups) {
    if (comms->groups.count(group)) continue;
    std::vector<int> sorted = group;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.empty() || sorted.front() < 0 || sorted.back() >= size ||
        std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return fail("group " + group_text(group) + " is not a set of ranks below " +
                  std::to_string(size));
    }
    const auto mine = std::find(group.begin(), group.end(), rank);
    bool everyone = static_cast<int>(group.size()) == size;
    for (size_t i = 0; everyone && i < group.size(); ++i)
      everyone = group[i] == static_cast<int>(i);
    if (everyone) {
      comms->groups.emplace(group, world);
      continue;
    }
    // Every rank takes part in every split; ranks outside the group take no communicator.
    ncclComm_t split = nullptr;
    const int color = mine == group.end() ? NCCL_SPLIT_NOCOLOR : 0;
    const int key = mine == group.end() ? 0 : static_cast<int>(mine - group.begin());
    status = ncclCommSplit(world, color, key, &split, nullptr);
    if (status != ncclSuccess) {
      return fail("ncclCommSplit of group " + group_text(group) + ": " +
                  ncclGetErrorString(status));
    }
    if (split != nullptr) comms->groups.emplace(group, split);
  }
  return comms;
}

}  // namespace autopar::cuda
