// The MPI backend under mpirun: the collectives and point-to-point messages of the inproc
// tests, one rank per process. Every rank runs every case; a rank's failure fails the run.
#include <gtest/gtest.h>

#include <mpi.h>

#include "autopar/runtime/communicator.h"

namespace autopar::runtime {
namespace {

Communicator* world = nullptr;

Tensor iota(std::vector<int64_t> dims, double start) {
  Tensor t(DType::kFloat32, std::move(dims));
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.set_from_double(i, start + static_cast<double>(i));
  return t;
}

std::vector<double> values(const StatusOr<Tensor>& t) {
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  std::vector<double> v;
  if (!t.is_ok()) return v;
  for (int64_t i = 0; i < t->num_elements(); ++i) v.push_back(t->float_at(i));
  return v;
}

TEST(MpiCommunicator, WorldOfFour) {
  ASSERT_EQ(world->size(), 4);
  const double r = static_cast<double>(world->rank());
  EXPECT_EQ(values(world->all_reduce(iota({2}, 10 * r), {0, 1, 2, 3}, ReduceOp::kSum)),
            (std::vector<double>{60, 64}));
  EXPECT_EQ(values(world->all_gather(iota({1}, r), {0, 1, 2, 3}, 0)),
            (std::vector<double>{0, 1, 2, 3}));
  const std::vector<double> scattered =
      values(world->reduce_scatter(iota({4}, r), {0, 1, 2, 3}, 0, ReduceOp::kMax));
  EXPECT_EQ(scattered, (std::vector<double>{3.0 + r}));
  EXPECT_EQ(values(world->broadcast(iota({2}, r), {0, 1, 2, 3}, 2)), (std::vector<double>{2, 3}));
}

TEST(MpiCommunicator, GroupsAndPointToPoint) {
  const int64_t rank = world->rank();
  const std::vector<int64_t> group =
      rank % 2 == 0 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{1, 3};
  EXPECT_EQ(values(world->all_reduce(iota({1}, static_cast<double>(rank)), group, ReduceOp::kSum)),
            (std::vector<double>{rank % 2 == 0 ? 2.0 : 4.0}));
  if (rank == 0) EXPECT_TRUE(world->send(3, 7, iota({2, 3}, 42)).is_ok());
  if (rank == 3)
    EXPECT_EQ(values(world->recv(0, 7)), (std::vector<double>{42, 43, 44, 45, 46, 47}));
  const std::vector<double> moved =
      values(world->all_to_all(iota({4, 1}, 10.0 * static_cast<double>(rank)), {0, 1, 2, 3}, 0, 1));
  std::vector<double> expected;
  for (int64_t member = 0; member < 4; ++member)
    expected.push_back(10.0 * static_cast<double>(member) + static_cast<double>(rank));
  EXPECT_EQ(moved, expected);
}

}  // namespace
}  // namespace autopar::runtime

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto comm = autopar::runtime::create_mpi_communicator(&argc, &argv);
  if (!comm.is_ok()) {
    fmt::print(stderr, "{}\n", comm.status().message());
    return 1;
  }
  autopar::runtime::world = comm->get();
  const int failed = RUN_ALL_TESTS();
  // Every rank must finish its cases before any rank finalises.
  int local = failed, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
