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

// Explicit device ids, or the devices sharing every coordinate but those of `axes` with this
// one.
StatusOr<std::vector<int64_t>> group_of(const KernelContext& ctx, const Communicator& comm) {
  const Node& n = ctx.node();
  if (n.attr("group")) return n.attr_ints("group");
  const Attribute* axes = n.attr("axes");
  if (!axes) return ctx.fail("has neither 'group' nor 'axes'");
  const DeviceMesh& mesh = comm.mesh();
  if (mesh.num_devices() != comm.size())
    return ctx.fail("names mesh axes, but the communicator has no mesh of {} devices", comm.size());
  for (const std::string& axis : axes->strings()) {
    if (!mesh.has_axis(axis)) return ctx.fail("mesh {} has no axis '{}'", mesh.to_string(), axis);
  }
  std::vector<int64_t> group = mesh.group(comm.rank(), axes->strings());
  if (static_cast<int64_t>(group.size()) != n.attr_int("group_size", -1)) {
    return ctx.fail("group over [{}] has {} devices on mesh {}, the graph expects {}",
                    fmt::join(axes->strings(), ","), group.size(), mesh.to_string(),
                    n.attr_int("group_size", -1));
  }
  return group;
}

StatusOr<int64_t> peer_of(const KernelContext& ctx, const Communicator& comm) {
  const Node& n = ctx.node();
  if (!n.attr("peer_axis")) return n.attr_int("peer", -1);
  const DeviceMesh& mesh = comm.mesh();
  const std::string axis = n.attr_string("peer_axis", "");
  const int64_t a = mesh.axis_index(axis);
  if (a < 0 || mesh.num_devices() != comm.size())
    return ctx.fail("mesh {} has no axis '{}'", mesh.to_string(), axis);
  std::vector<int64_t> coords = mesh.coords(comm.rank());
  const int64_t coord = n.attr_int("peer_coord", -1);
  if (coord < 0 || coord >= mesh.axes()[a].size)
    return ctx.fail("peer_coord {} is outside axis {} of size {}", coord, axis,
                    mesh.axes()[a].size);
  coords[a] = coord;
  return mesh.device(coords);
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
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "ReduceScatter", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(ReduceOp op, reduction_of(ctx));
    const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), ctx.input(0).rank());
    ASSIGN_OR_RETURN(std::vector<int64_t> group, group_of(ctx, *comm));
    ASSIGN_OR_RETURN(Tensor t, comm->reduce_scatter(ctx.input(0), group, axis, op));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "AllToAll", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    const int64_t rank = ctx.input(0).rank();
    ASSIGN_OR_RETURN(std::vector<int64_t> group, group_of(ctx, *comm));
    ASSIGN_OR_RETURN(Tensor t,
                     comm->all_to_all(ctx.input(0), group,
                                      normalize_axis(ctx.node().attr_int("split_axis", 0), rank),
                                      normalize_axis(ctx.node().attr_int("concat_axis", 0), rank)));
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
    std::vector<Tensor> parts =
        split_tensor(ctx.input(0), axis, static_cast<int64_t>(group.size()));
    return set_checked(ctx, std::move(parts[me]));
  });
}

}  // namespace autopar::runtime
