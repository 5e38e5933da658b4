// Kernels of the ai.autopar communication ops, on the device's Communicator.
#include "autopar/runtime/communicator.h"
#include "kernel_util.h"

namespace autopar::runtime {
namespace {

StatusOr<Communicator*> communicator_of(const KernelContext& ctx) {
  if (!ctx.communicator()) return ctx.fail("runs outside a plan: no communicator");
  return ctx.communicator();
}

std::vector<int64_t> group_of(const KernelContext& ctx) { return ctx.node().attr_ints("group"); }

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
    return comm->send(ctx.node().attr_int("peer", -1), ctx.node().attr_int("tag", 0), ctx.input(0));
  });
  registry.add(domain, "Recv", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(Tensor t,
                     comm->recv(ctx.node().attr_int("peer", -1), ctx.node().attr_int("tag", 0)));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "AllReduce", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(ReduceOp op, reduction_of(ctx));
    ASSIGN_OR_RETURN(Tensor t, comm->all_reduce(ctx.input(0), group_of(ctx), op));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "AllGather", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), ctx.input(0).rank());
    ASSIGN_OR_RETURN(Tensor t, comm->all_gather(ctx.input(0), group_of(ctx), axis));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "ReduceScatter", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(ReduceOp op, reduction_of(ctx));
    const int64_t axis = normalize_axis(ctx.node().attr_int("axis", 0), ctx.input(0).rank());
    ASSIGN_OR_RETURN(Tensor t, comm->reduce_scatter(ctx.input(0), group_of(ctx), axis, op));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "AllToAll", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    const int64_t rank = ctx.input(0).rank();
    ASSIGN_OR_RETURN(Tensor t,
                     comm->all_to_all(ctx.input(0), group_of(ctx),
                                      normalize_axis(ctx.node().attr_int("split_axis", 0), rank),
                                      normalize_axis(ctx.node().attr_int("concat_axis", 0), rank)));
    return set_checked(ctx, std::move(t));
  });
  registry.add(domain, "Broadcast", [](KernelContext& ctx) -> Status {
    ASSIGN_OR_RETURN(Communicator * comm, communicator_of(ctx));
    ASSIGN_OR_RETURN(Tensor t,
                     comm->broadcast(ctx.input(0), group_of(ctx), ctx.node().attr_int("root", 0)));
    return set_checked(ctx, std::move(t));
  });
}

}  // namespace autopar::runtime
