// The inproc communicator: point to point, every collective, deadlock detection, and the
// ai.autopar kernels running in executors on threads.
#include <thread>

#include <gtest/gtest.h>

#include "autopar/ir/builder.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/executor.h"

namespace autopar::runtime {
namespace {

// Runs body(rank, communicator) on one thread per rank and collects what each returns.
template <typename Body>
std::vector<std::string> on_ranks(int64_t size, Body body) {
  auto world = create_inproc_world(size, std::chrono::milliseconds(5000));
  std::vector<std::string> results(size);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { results[r] = body(r, *world[r]); });
  }
  for (auto& t : threads) t.join();
  return results;
}

Tensor iota(std::vector<int64_t> dims, double start) {
  Tensor t(DType::kFloat32, std::move(dims));
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.set_from_double(i, start + static_cast<double>(i));
  return t;
}

std::string text(const StatusOr<Tensor>& t) {
  if (!t.is_ok()) return "error: " + t.status().message();
  std::vector<double> v;
  for (int64_t i = 0; i < t->num_elements(); ++i) v.push_back(t->float_at(i));
  return fmt::format("[{}] {}", fmt::join(t->dims(), ","), fmt::join(v, " "));
}

TEST(Communicator, Collectives) {
  const auto reduce = on_ranks(3, [](int64_t r, Communicator& c) {
    return text(c.all_reduce(iota({2}, 10.0 * static_cast<double>(r)), {0, 1, 2}, ReduceOp::kSum));
  });
  EXPECT_EQ(reduce, std::vector<std::string>(3, "[2] 30 33"));
  const auto gather = on_ranks(2, [](int64_t r, Communicator& c) {
    return text(c.all_gather(iota({1, 2}, 10.0 * static_cast<double>(r)), {0, 1}, 1));
  });
  EXPECT_EQ(gather, std::vector<std::string>(2, "[1,4] 0 1 10 11"));
  const auto scatter = on_ranks(2, [](int64_t r, Communicator& c) {
    return text(c.reduce_scatter(iota({4}, static_cast<double>(r)), {0, 1}, 0, ReduceOp::kMax));
  });
  EXPECT_EQ(scatter, (std::vector<std::string>{"[2] 1 2", "[2] 3 4"}));
  // [2, 2] per rank, split on dim 0, concatenated on dim 1.
  const auto to_all = on_ranks(2, [](int64_t r, Communicator& c) {
    return text(c.all_to_all(iota({2, 2}, 10.0 * static_cast<double>(r)), {0, 1}, 0, 1));
  });
  EXPECT_EQ(to_all, (std::vector<std::string>{"[1,4] 0 1 10 11", "[1,4] 2 3 12 13"}));
  const auto broadcast = on_ranks(3, [](int64_t r, Communicator& c) {
    return text(c.broadcast(iota({2}, static_cast<double>(r)), {2, 0, 1}, 2));
  });
  EXPECT_EQ(broadcast, std::vector<std::string>(3, "[2] 2 3"));
}

// Rows 0-2 on rank 0, 3-5 on rank 1, 6-8 on rank 2 (a [3, 1] block each): one row from each
// side, zeros past the ends; negative counts drop own rows.
TEST(Communicator, HaloExchange) {
  const auto both = on_ranks(3, [](int64_t r, Communicator& c) {
    return text(c.halo_exchange(iota({3, 1}, 3.0 * static_cast<double>(r)), {0, 1, 2}, 0, 1, 1));
  });
  EXPECT_EQ(both,
            (std::vector<std::string>{"[5,1] 0 0 1 2 3", "[5,1] 2 3 4 5 6", "[5,1] 5 6 7 8 0"}));
  const auto dropped = on_ranks(3, [](int64_t r, Communicator& c) {
    return text(c.halo_exchange(iota({3, 1}, 3.0 * static_cast<double>(r)), {0, 1, 2}, 0, 2, -1));
  });
  EXPECT_EQ(dropped, (std::vector<std::string>{"[4,1] 0 0 0 1", "[4,1] 1 2 3 4", "[4,1] 4 5 6 7"}));
  const auto too_wide = on_ranks(2, [](int64_t r, Communicator& c) {
    return text(c.halo_exchange(iota({2}, 0.0), {0, 1}, 0, 3, 0));
  });
  EXPECT_EQ(too_wide[0], "error: a halo of 3 and 0 rows around 2 rows");
}

TEST(Communicator, GroupsAndPointToPoint) {
  // Two groups {0, 2} and {1, 3} reduce independently; then 0 sends to 3.
  const auto results = on_ranks(4, [](int64_t r, Communicator& c) {
    const std::vector<int64_t> group =
        r % 2 == 0 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{1, 3};
    std::string out = text(c.all_reduce(iota({1}, static_cast<double>(r)), group, ReduceOp::kSum));
    if (r == 0) {
      Status sent = c.send(3, 7, iota({1}, 42));
      if (!sent.is_ok()) return sent.message();
    }
    if (r == 3) out += " | " + text(c.recv(0, 7));
    return out;
  });
  EXPECT_EQ(results, (std::vector<std::string>{"[1] 2", "[1] 4", "[1] 2", "[1] 4 | [1] 42"}));
}

TEST(Communicator, ADeadlockFailsInsteadOfHanging) {
  auto world = create_inproc_world(2, std::chrono::milliseconds(50));
  EXPECT_EQ(world[0]->recv(1, 5).status().message(),
            "rank 0 waited 50 ms for tag 5 from rank 1: the plan deadlocks");
  EXPECT_EQ(world[0]->send(2, 0, iota({1}, 0)).message(), "send to rank 2 of a world of 2");
}

TEST(Communicator, KernelsRunInExecutorsOnThreads) {
  // Each device: y = AllGather(AllReduce(x), axis 0) over {0, 1}.
  GraphBuilder b("device");
  b.mutable_graph().opsets[std::string(kAutoparDomain)] = 1;
  const ValueId x = b.input("x", DType::kFloat32, {2});
  const Attributes group = {{"group", std::vector<int64_t>{0, 1}}};
  const ValueId summed = b.op("AllReduce", {x}, group, 1, kAutoparDomain)[0];
  Attributes gather = group;
  gather["axis"] = int64_t{0};
  b.output(b.op("AllGather", {summed}, gather, 1, kAutoparDomain)[0], "y");
  const Graph g = b.finish();
  const auto results = on_ranks(2, [&](int64_t r, Communicator& c) {
    ExecutorOptions options;
    options.num_threads = 1;
    options.communicator = &c;
    auto executor = Executor::create(g, options);
    if (!executor.is_ok()) return executor.status().message();
    auto out = executor->run_inputs(
        {std::make_shared<const Tensor>(iota({2}, 10.0 * static_cast<double>(r)))});
    return out.is_ok() ? text(*(*out)[0]) : out.status().message();
  });
  EXPECT_EQ(results, std::vector<std::string>(2, "[4] 10 12 10 12"));
  // Outside a plan the ops have no communicator.
  auto alone = Executor::create(g, {});
  ASSERT_TRUE(alone.is_ok());
  EXPECT_EQ(alone->run_inputs({std::make_shared<const Tensor>(iota({2}, 0))}).status().message(),
            "node 'AllReduce' (AllReduce): runs outside a plan: no communicator");
}

}  // namespace
}  // namespace autopar::runtime
