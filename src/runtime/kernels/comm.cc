// Kernels of the ai.autopar communication ops, on the device's Communicator.
#include <algorithm>

#include "autopar/runtime/communicator.h"
#include "kernel_util.h"

namespace autopar::runtime {
namespace {

StatusOr<Communicator*> communicator_of(const KernelContext& ctx) {
  if (!ctx.communicator()) return ctx.fail("runs outside a plan: no communicator");
  return ctx.communicator();
}

}  // namespace

StatusOr<std::vector<int64_t>> comm_group(const KernelContext& ctx, const Communicator& comm) {
  auto group = node_group(ctx.node(), comm.mesh(), comm.rank(), comm.size());
  if (!group.is_ok()) return ctx.fail("{}", group.status().message());
  return group;
}

namespace {

StatusOr<std::vector<int64_t>> group_of(const KernelContext& ctx, const Communicator& comm) {
  return comm_group(ctx, comm);
}

// A zigzag split (zigzag = 1): the dim holds chunk pairs (reorder_chunk_pairs).
bool zigzag(const KernelContext& ctx) { return ctx.node().attr_int("zigzag", 0) != 0; }

StatusOr<Tensor> reorder_pairs(const KernelContext& ctx, const Tensor& x, int64_t axis, int64_t n,
                               bool to_pairs) {
  if (x.dims()[axis] % (2 * n) != 0)
    return ctx.fail("dim {} ({}) does not split into 2·{} chunks", axis, x.dims()[axis], n);
  return reorder_chunk_pairs(x, axis, n, to_pairs);
}

StatusOr<int64_t> peer_of(const KernelContext& ctx, const Communicator& comm) {
  auto peer = node_peer(ctx.node(), comm.mesh(), comm.rank(), comm.size());
  if (!peer.is_ok()) return ctx.fail("{}", peer.status().message());
  return peer;
}

StatusOr<ReduceOp> reduction_of(const KernelContext& ctx) {
  return parse_reduce_op(ctx.node().attr_string("op", "sum"));
}

// The received tensor must have the output's static type.
Status set_checked(KernelContext& ctx, Tensor t) {
  if (t.dtype() != ctx.output_dtype(0) || t.dims() != ctx.output_dims(0)) {
    return ctx.fail("received {}[{}], the plan expects {}[{}]", dtype_name(t.dtype()),
                    fmt::join(t.dims(), ","), dtype_name(ctx.output_dtype(0)),
                    fmt::join(ctx.output_dims(0), ","));
  }
  ctx.set_output(0, std::move(t));
  return Status::ok();
}

}  // namespace

void register_comm_kernels(KernelRegistry& registry) {
  const std::string domain(kAutoparDomain);
  registry.add(domain, "Send", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(int64_t peer, peer_of(ctx, *comm));
    return comm->send(peer, ctx.node().attr_int("tag", 0), ctx.input(0));
  });
  registry.add(domain, "Recv", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(int64_t peer, peer_of(ctx, *comm));
    ASSIGN_OR_RETURN(Tensor t, comm->recv(peer, ctx.node().attr_int("tag", 0)));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "AllReduce", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(ReduceOp op, reduction_of(ctx));
    ASSIGN_OR_RETURN(std::vector<int64_t> group, group_of(ctx, *comm));
    ASSIGN_OR_RETURN(Tensor t, comm->all_reduce(ctx.input(0), group, op));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "AllGather", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), ctx.input(0).rank());
    ASSIGN_OR_RETURN(std::vector<int64_t> group, group_of(ctx, *comm));
    ASSIGN_OR_RETURN(Tensor t, comm->all_gather(ctx.input(0), group, axis));
    if (zigzag(ctx)) {
      ASSIGN_OR_RETURN(t, reorder_pairs(ctx, t, axis, static_cast<int64_t>(group.size()), false));
    }
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "ReduceScatter", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(ReduceOp op, reduction_of(ctx));
    const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), ctx.input(0).rank());
    ASSIGN_OR_RETURN(std::vector<int64_t> group, group_of(ctx, *comm));
    const int64_t n = static_cast<int64_t>(group.size());
    Tensor x = ctx.input(0);
    if (zigzag(ctx)) {
      ASSIGN_OR_RETURN(x, reorder_pairs(ctx, x, axis, n, true));
    }
    ASSIGN_OR_RETURN(Tensor t, comm->reduce_scatter(x, group, axis, op));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "AllToAll", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    const int64_t rank = ctx.input(0).rank();
    ASSIGN_OR_RETURN(std::vector<int64_t> group, group_of(ctx, *comm));
    const int64_t n = static_cast<int64_t>(group.size());
    const int64_t split_axis = normalize_axis(ctx.node().attr_int("split_axis", 0), rank);
    const int64_t concat_axis = normalize_axis(ctx.node().attr_int("concat_axis", 0), rank);
    // Under zigzag both sides are in chunk pairs: the dim split by the exchange and the one it
    // joins.
    Tensor x = ctx.input(0);
    if (zigzag(ctx)) {
      ASSIGN_OR_RETURN(x, reorder_pairs(ctx, x, split_axis, n, true));
    }
    ASSIGN_OR_RETURN(Tensor t, comm->all_to_all(x, group, split_axis, concat_axis));
    if (zigzag(ctx)) {
      ASSIGN_OR_RETURN(t, reorder_pairs(ctx, t, concat_axis, n, false));
    }
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "Broadcast", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(std::vector<int64_t> group, group_of(ctx, *comm));
    ASSIGN_OR_RETURN(Tensor t,
                     comm->broadcast(ctx.input(0), group, ctx.node().attr_int("root", 0)));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "HaloExchange", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(std::vector<int64_t> group, group_of(ctx, *comm));
    const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), ctx.input(0).rank());
    ASSIGN_OR_RETURN(
        Tensor t, comm->halo_exchange(ctx.input(0), group, axis, ctx.node().attr_int("before", 0),
                                      ctx.node().attr_int("after", 0)));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "Shard", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(std::vector<int64_t> group, group_of(ctx, *comm));
    const int64_t me =
        static_cast<int64_t>(std::find(group.begin(), group.end(), comm->rank()) - group.begin());
    if (me == static_cast<int64_t>(group.size()))
      return ctx.fail("rank {} is not in group [{}]", comm->rank(), fmt::join(group, ","));
    const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), ctx.input(0).rank());
    const int64_t n = static_cast<int64_t>(group.size());
    Tensor x = ctx.input(0);
    if (zigzag(ctx)) {
      ASSIGN_OR_RETURN(x, reorder_pairs(ctx, x, axis, n, true));
    }
    std::vector<Tensor> parts = split_tensor(x, axis, n);
    return set_checked(ctx, std::move(parts[me]));
  });
}

}  // namespace autopar::runtime
