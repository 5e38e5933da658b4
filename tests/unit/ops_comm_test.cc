// The ai.autopar communication ops: per-device shapes, group checks and reduction FLOPs.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace autopar {
namespace {

using ::testing::HasSubstr;

using Ints = std::vector<int64_t>;

ops_test::OpCase comm(const char* op) {
  return ops_test::OpCase(op, 17, std::string(kAutoparDomain));
}

TEST(OpsComm, AllReduceKeepsShapeAndCountsRingAdditions) {
  auto c = comm("AllReduce");
  c.in({4, 8}).attr("group", Ints{0, 1, 2, 3}).attr("op", "sum");
  EXPECT_EQ(c.infer(), "f32[4,8]");
  EXPECT_EQ(c.flops(), 3.0 / 4.0 * 32);
  EXPECT_THAT(comm("AllReduce").in({4}).infer(), HasSubstr("needs attribute 'group' or 'axes'"));
  EXPECT_THAT(comm("AllReduce").in({4}).attr("group", Ints{0, 1}).attr("op", "avg").infer(),
              HasSubstr("reduction 'avg' is not sum, max or min"));
  EXPECT_THAT(comm("AllReduce").in({4}).attr("group", Ints{0, 0}).infer(),
              HasSubstr("group [0,0] lists device 0 twice"));
  EXPECT_THAT(comm("AllReduce").in({4}).attr("group", Ints{}).infer(), HasSubstr("group is empty"));
}

TEST(OpsComm, GroupsNamedByMeshAxesTakeTheirSizeFromGroupSize) {
  auto c = comm("AllGather");
  c.in({4, 8}).attr("axis", 0).attr("axes", std::vector<std::string>{"tp"}).attr("group_size", 4);
  EXPECT_EQ(c.infer(), "f32[16,8]");
  auto r = comm("AllReduce");
  r.in({4, 8}).attr("axes", std::vector<std::string>{"dp"}).attr("group_size", 2);
  EXPECT_EQ(r.infer(), "f32[4,8]");
  EXPECT_EQ(r.flops(), 0.5 * 32);
  EXPECT_THAT(comm("AllReduce").in({4}).attr("axes", std::vector<std::string>{"dp"}).infer(),
              HasSubstr("required attribute 'group_size' is missing"));
  EXPECT_THAT(comm("AllReduce")
                  .in({4})
                  .attr("axes", std::vector<std::string>{"dp"})
                  .attr("group_size", 0)
                  .infer(),
              HasSubstr("group_size 0 is not positive"));
}

TEST(OpsComm, ShardKeepsThisDevicesSlice) {
  auto c = comm("Shard");
  c.in({6, 8}).attr("axis", 1).attr("axes", std::vector<std::string>{"tp"}).attr("group_size", 4);
  EXPECT_EQ(c.infer(), "f32[6,2]");
  EXPECT_EQ(c.flops(), 0);
  EXPECT_THAT(comm("Shard")
                  .in({6, 8})
                  .attr("axis", 0)
                  .attr("axes", std::vector<std::string>{"tp"})
                  .attr("group_size", 4)
                  .infer(),
              HasSubstr("does not divide by group size 4"));
}

TEST(OpsComm, AllGatherAndReduceScatterResizeTheAxis) {
  auto gather = comm("AllGather");
  gather.in({4, 8}).attr("axis", 1).attr("group", Ints{0, 1});
  EXPECT_EQ(gather.infer(), "f32[4,16]");
  EXPECT_EQ(gather.flops(), 0);
  auto scatter = comm("ReduceScatter");
  scatter.in({4, 8}).attr("axis", -2).attr("group", Ints{0, 1});
  EXPECT_EQ(scatter.infer(), "f32[2,8]");
  EXPECT_EQ(scatter.flops(), 0.5 * 32);
  EXPECT_EQ(comm("ReduceScatter").in({4, 8}).attr("group", Ints{0, 1, 2}).infer(),
            "error: node 'n' (ReduceScatter): dim 0 of input 'in0' f32[4,8] (4) does not "
            "divide by group size 3");
  EXPECT_THAT(comm("AllGather").in({4, 8}).attr("axis", 2).attr("group", Ints{0, 1}).infer(),
              HasSubstr("axis 2 is out of range for rank 2"));
}

TEST(OpsComm, AllToAllSplitsOneAxisAndJoinsAnother) {
  auto c = comm("AllToAll");
  c.in({4, 8}).attr("split_axis", 0).attr("concat_axis", 1).attr("group", Ints{0, 1});
  EXPECT_EQ(c.infer(), "f32[2,16]");
  EXPECT_THAT(comm("AllToAll").in({3, 8}).attr("group", Ints{0, 1}).infer(),
              HasSubstr("dim 0 of input 'in0' f32[3,8] (3) does not divide by group size 2"));
}

TEST(OpsComm, BroadcastNeedsItsRootInTheGroup) {
  EXPECT_EQ(comm("Broadcast").in({3}).attr("root", 1).attr("group", Ints{0, 1}).infer(), "f32[3]");
  EXPECT_THAT(comm("Broadcast").in({3}).attr("root", 5).attr("group", Ints{0, 1}).infer(),
              HasSubstr("root 5 is not in group [0,1]"));
  EXPECT_THAT(comm("Broadcast").in({3}).attr("group", Ints{0, 1}).infer(),
              HasSubstr("required attribute 'root' is missing"));
}

TEST(OpsComm, SendAndRecvCarryPeerTagAndType) {
  auto send = comm("Send");
  send.in({2, 3}).attr("peer", 1).attr("tag", 7).outputs(0);
  EXPECT_EQ(send.infer(), "");
  EXPECT_EQ(send.bytes(), 24);
  EXPECT_THAT(comm("Send").in({2, 3}).attr("peer", 1).outputs(0).infer(),
              HasSubstr("required attribute 'tag' is missing"));
  auto recv = comm("Recv");
  recv.attr("peer", 0).attr("tag", 7).attr("dtype", 1).attr("shape", Ints{2, 3});
  EXPECT_EQ(recv.infer(), "f32[2,3]");
  EXPECT_THAT(
      comm("Recv").attr("peer", 0).attr("tag", 7).attr("dtype", 99).attr("shape", Ints{2}).infer(),
      HasSubstr("attribute 'dtype' = 99 is not a supported ONNX data type"));
  EXPECT_THAT(comm("Recv").attr("peer", 0).attr("tag", 7).attr("dtype", 1).infer(),
              HasSubstr("required attribute 'shape' is missing"));
  EXPECT_THAT(comm("Recv")
                  .attr("peer", 0)
                  .attr("tag", 7)
                  .attr("dtype", 1)
                  .attr("shape", Ints{int64_t{1} << 40, int64_t{1} << 40})
                  .infer(),
              HasSubstr("is negative or has more than 2^56 elements"));
  EXPECT_THAT(comm("Recv").attr("peer", -1).attr("tag", 7).infer(),
              HasSubstr("peer -1 is negative"));
}

}  // namespace
}  // namespace autopar
