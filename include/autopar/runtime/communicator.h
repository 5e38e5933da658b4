// Communicator: how devices of a plan exchange tensors. Backends provide point-to-point
// send and receive; the collectives are built on them here, reducing in group order so every
// backend and every timing gives the same bits.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/ir/tensor.h"
#include "autopar/parallel/device_mesh.h"
#include "autopar/support/status.h"

namespace autopar::runtime {

enum class ReduceOp : uint8_t { kSum, kMax, kMin };
StatusOr<ReduceOp> parse_reduce_op(std::string_view name);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;

  // Point to point; messages between two ranks with one tag arrive in the order sent.
  virtual Status send(int64_t peer, int64_t tag, const Tensor& tensor) = 0;
  virtual StatusOr<Tensor> recv(int64_t peer, int64_t tag) = 0;

  // Collectives over `group` (device ids in ring order; this rank is a member). Every member
  // calls them in the same order, as SPMD programs do.
  StatusOr<Tensor> all_reduce(const Tensor& x, const std::vector<int64_t>& group, ReduceOp op);
  // Concatenation of the members' tensors along `axis`, in group order.
  StatusOr<Tensor> all_gather(const Tensor& x, const std::vector<int64_t>& group, int64_t axis);
  // The reduction, split along `axis`: member i keeps part i.
  StatusOr<Tensor> reduce_scatter(const Tensor& x, const std::vector<int64_t>& group, int64_t axis,
                                  ReduceOp op);
  // x split along `split_axis` into one part per member; part j goes to member j; the received
  // parts are concatenated along `concat_axis` in group order.
  StatusOr<Tensor> all_to_all(const Tensor& x, const std::vector<int64_t>& group,
                              int64_t split_axis, int64_t concat_axis);
  StatusOr<Tensor> broadcast(const Tensor& x, const std::vector<int64_t>& group, int64_t root);
  // Rows of the neighbours along `axis` (the group splits it in order): `before` rows from the
  // previous member's end and `after` from the next one's start, zeros past the first and last
  // member; a negative count drops that many of this member's own rows at that end.
  StatusOr<Tensor> halo_exchange(const Tensor& x, const std::vector<int64_t>& group, int64_t axis,
                                 int64_t before, int64_t after);

  // Sends x to the next member of `group` (the first after the last) and returns what the
  // previous member sent: one step of a ring.
  StatusOr<Tensor> ring_shift(const Tensor& x, const std::vector<int64_t>& group);

  // The plan's mesh (device ids are ranks): ops of role graphs name mesh axes, and each device
  // resolves them from its own coordinates.
  void set_mesh(DeviceMesh mesh) { mesh_ = std::move(mesh); }
  const DeviceMesh& mesh() const { return mesh_; }

 private:
  // A tag per collective call of one group: members count their calls alike.
  int64_t next_collective_tag(const std::vector<int64_t>& group);
  // Sends part(j) to member j and receives one part from every member, in group order; this
  // member's own slot stays empty (the caller has its part).
  StatusOr<std::vector<Tensor>> exchange(const std::function<const Tensor&(size_t)>& part,
                                         const std::vector<int64_t>& group);

  std::vector<std::pair<std::vector<int64_t>, int64_t>> collective_calls_;
  DeviceMesh mesh_;
};

// Ranks of one process, one thread each: `create_inproc_world(n)` gives n communicators
// sharing mailboxes. A receive that waits longer than `timeout` fails (a plan that deadlocks
// is a bug; it must not hang).
std::vector<std::unique_ptr<Communicator>> create_inproc_world(
    int64_t size, std::chrono::milliseconds timeout = std::chrono::milliseconds(120000));

// This process's rank of an MPI world (mpirun -np N), initialising MPI when it is not. The
// communicator finalises MPI when destroyed. A tensor has at most 16 dims on the wire.
StatusOr<std::unique_ptr<Communicator>> create_mpi_communicator(int* argc = nullptr,
                                                                char*** argv = nullptr);

// The devices of an ai.autopar node's group, as device `rank` of `mesh` runs it: its explicit
// `group`, or the devices sharing every coordinate but those of its `axes` with `rank`. An
// error says what is wrong without naming the node.
StatusOr<std::vector<int64_t>> node_group(const Node& node, const DeviceMesh& mesh, int64_t rank,
                                          int64_t size);
// The peer of a Send or Recv run by device `rank`: its `peer`, or the device at `peer_coord`
// along `peer_axis` with this one's other coordinates.
StatusOr<int64_t> node_peer(const Node& node, const DeviceMesh& mesh, int64_t rank, int64_t size);

// Splits along `axis` into `parts` equal pieces; concatenates along `axis`.
std::vector<Tensor> split_tensor(const Tensor& x, int64_t axis, int64_t parts);
Tensor concat_tensors(const std::vector<Tensor>& parts, int64_t axis);
// A zigzag split over n members cuts `axis` (divisible by 2·n) into 2·n chunks, member r
// holding chunks r and 2·n − 1 − r. `to_pairs` reorders a whole tensor's chunks so that a
// plain split into n parts gives each member its pair; without it, gathered pairs go back in
// order.
Tensor reorder_chunk_pairs(const Tensor& x, int64_t axis, int64_t n, bool to_pairs);
// `count` rows from `begin` along `axis`; parts of any sizes along `axis` joined.
Tensor slice_along(const Tensor& x, int64_t axis, int64_t begin, int64_t count);
Tensor join_along(const std::vector<Tensor>& parts, int64_t axis);

}  // namespace autopar::runtime
