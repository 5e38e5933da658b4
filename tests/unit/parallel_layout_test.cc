// DeviceMesh coordinates and groups; Layout values, text form, validation and shard shapes.
#include <unordered_set>

#include <gtest/gtest.h>

#include "autopar/parallel/device_mesh.h"
#include "autopar/parallel/layout.h"

namespace autopar {
namespace {

DeviceMesh mesh3() {
  auto mesh = DeviceMesh::create({{"pp", 2}, {"dp", 2}, {"tp", 2}});
  EXPECT_TRUE(mesh.is_ok());
  return *mesh;
}

TEST(DeviceMesh, CoordinatesAreRowMajorWithTheLastAxisFastest) {
  const DeviceMesh mesh = mesh3();
  EXPECT_EQ(mesh.num_devices(), 8);
  EXPECT_EQ(mesh.coords(5), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(mesh.device({1, 1, 0}), 6);
  EXPECT_EQ(mesh.to_string(), "{pp: 2, dp: 2, tp: 2}");
  EXPECT_EQ(mesh.size("sp"), 1);
  EXPECT_FALSE(mesh.has_axis("sp"));
}

TEST(DeviceMesh, GroupsVaryOnlyTheirAxes) {
  const DeviceMesh mesh = mesh3();
  EXPECT_EQ(mesh.group(5, {"tp"}), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(mesh.group(5, {"dp"}), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(mesh.group(5, {"pp"}), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(mesh.group(5, {"dp", "tp"}), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(mesh.group(2, {}), (std::vector<int64_t>{2}));
}

TEST(DeviceMesh, Errors) {
  EXPECT_EQ(DeviceMesh::create({{"dp", 2}, {"dp", 4}}).status().message(),
            "mesh axis 'dp' is given twice");
  EXPECT_EQ(DeviceMesh::create({{"tp", 0}}).status().message(),
            "mesh axis 'tp' has size 0 (must be at least 1)");
  EXPECT_EQ(DeviceMesh::create({{"2d", 2}}).status().message(), "mesh axis '2d' is not a name");
  EXPECT_EQ(DeviceMesh::create({{"a", 1 << 20}, {"b", 1 << 20}}).status().message(),
            "the mesh has more than 16777216 devices");
}

TEST(Layout, TextFormRoundTrips) {
  const Layout l =
      Layout::replicated(3).with_split(0, "dp").with_split(0, "sp").with_split(2, "tp");
  EXPECT_EQ(l.to_string(), "[dp*sp, _, tp]");
  EXPECT_EQ(Layout::replicated(2).with_partial("tp").with_partial("dp").to_string(),
            "[_, _] partial(dp, tp)");
  EXPECT_EQ(Layout::replicated(0).to_string(), "[]");
  for (const char* text :
       {"[dp*sp, _, tp]", "[_, _] partial(dp, tp)", "[]", "[_pipe, _]", "[tp] partial(dp)"}) {
    auto parsed = Layout::parse(text);
    ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
    EXPECT_EQ(parsed->to_string(), text);
  }
  auto spaced = Layout::parse("  [ dp * sp ,_ ]partial( tp ) ");
  ASSERT_TRUE(spaced.is_ok());
  EXPECT_EQ(spaced->to_string(), "[dp*sp, _] partial(tp)");
}

TEST(Layout, ParseErrors) {
  EXPECT_EQ(Layout::parse("dp, tp").status().message(),
            "layout 'dp, tp': expected '[' at column 1");
  EXPECT_EQ(Layout::parse("[dp, dp]").status().message(),
            "layout '[dp, dp]': axis 'dp' is used twice");
  EXPECT_EQ(Layout::parse("[dp] partial(dp)").status().message(),
            "layout '[dp] partial(dp)': axis 'dp' is used twice");
  EXPECT_EQ(Layout::parse("[dp,]").status().message(),
            "layout '[dp,]': expected a mesh axis name at column 5");
  EXPECT_EQ(Layout::parse("[dp] extra").status().message(),
            "layout '[dp] extra': unexpected text at column 6");
}

TEST(Layout, ValuesCompareAndHash) {
  const Layout a = Layout::split(2, 1, {"tp"});
  const Layout b = *Layout::parse("[_, tp]");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a, a.with_partial("dp"));
  std::unordered_set<Layout, LayoutHash> set = {a, b, Layout::replicated(2)};
  EXPECT_EQ(set.size(), 2u);
  EXPECT_TRUE(Layout::replicated(3).is_replicated());
  EXPECT_FALSE(a.is_replicated());
  EXPECT_EQ(a.dim_of("tp"), 1);
  EXPECT_EQ(a.without("tp"), Layout::replicated(2));
  // Splitting an axis moves it: one axis, one place.
  EXPECT_EQ(a.with_split(0, "tp").to_string(), "[tp, _]");
  EXPECT_EQ(a.with_partial("tp").to_string(), "[_, _] partial(tp)");
}

TEST(Layout, QueriesOnSplitsAndPartialSums) {
  const DeviceMesh mesh = mesh3();
  const Layout l = *Layout::parse("[dp*pp, _, tp] partial(x_axis, sp)");
  EXPECT_EQ(l.rank(), 3);
  EXPECT_EQ(l.dim_axes(0), (std::vector<std::string>{"dp", "pp"}));
  EXPECT_EQ(l.dim_axes(1), (std::vector<std::string>{}));
  // Partial-sum axes keep name order whatever order they were added in.
  EXPECT_EQ(l.partial_axes(), (std::vector<std::string>{"sp", "x_axis"}));
  EXPECT_EQ(l.to_string(), "[dp*pp, _, tp] partial(sp, x_axis)");
  EXPECT_EQ(l.dim_of("pp"), 0);
  EXPECT_EQ(l.dim_of("tp"), 2);
  EXPECT_EQ(l.dim_of("sp"), -1);  // a partial-sum axis splits no dim
  EXPECT_EQ(l.dim_of("never_seen"), -1);
  EXPECT_TRUE(l.uses("sp"));
  EXPECT_TRUE(l.is_partial_over("sp"));
  EXPECT_FALSE(l.is_partial_over("tp"));
  EXPECT_FALSE(l.uses("never_seen"));
  EXPECT_EQ(l.split_degree(mesh), 8);
  EXPECT_FALSE(l.splits_only_over("tp"));
  EXPECT_TRUE(Layout::parse("[_, tp] partial(dp)")->splits_only_over("tp"));
  EXPECT_TRUE(Layout::replicated(2).splits_only_over("tp"));
  // A scalar can be a partial sum: no dims, one axis.
  const Layout scalar = Layout::replicated(0).with_partial("tp");
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_TRUE(scalar.is_partial());
  EXPECT_EQ(scalar.shard_shape({}, mesh), (std::vector<int64_t>{}));
  EXPECT_EQ(scalar.without("tp"), Layout::replicated(0));
  // A partial-sum axis moved onto a dim is a split there, and no longer a partial sum.
  EXPECT_EQ(l.with_split(1, "sp").to_string(), "[dp*pp, sp, tp] partial(x_axis)");
}

TEST(Layout, ValidateAndShardShapes) {
  const DeviceMesh mesh = mesh3();
  const Layout l = *Layout::parse("[dp*pp, _, tp]");
  EXPECT_TRUE(l.validate({8, 3, 6}, mesh).is_ok());
  EXPECT_EQ(l.shard_shape({8, 3, 6}, mesh), (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(l.validate({6, 3, 6}, mesh).message(),
            "dim 0 of [6,3,6]: 6 is not divisible by dp*pp = 4");
  EXPECT_EQ(l.validate({8, 3}, mesh).message(),
            "layout [dp*pp, _, tp] has rank 3, the tensor [8,3] has rank 2");
  EXPECT_EQ(Layout::parse("[sp]")->validate({4}, mesh).message(),
            "layout [sp]: the mesh {pp: 2, dp: 2, tp: 2} has no axis 'sp'");
}

}  // namespace
}  // namespace autopar
