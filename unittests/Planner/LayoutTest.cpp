//===- LayoutTest.cpp - Unit tests for the layout math --------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Hand-written cases for Mesh, AxisRef, Sharding, Box and TensorLayout: the
// validation rules, the uneven tile rule of DESIGN.md, arbitrary device ids,
// replica and reduction groups, and device equivalence. The randomized
// counterpart is LayoutPropertyTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

using namespace polymesh::planner;

namespace {

using Groups = std::vector<std::vector<int64_t>>;
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

Mesh makeMesh(std::vector<std::pair<std::string, int64_t>> axes,
              std::vector<int64_t> deviceIds = {}) {
  Mesh mesh;
  for (auto &[name, size] : axes)
    mesh.axes.push_back(MeshAxis{name, size});
  mesh.deviceIds = std::move(deviceIds);
  return mesh;
}

/// The whole axis `name` of `mesh`.
AxisRef axis(const Mesh &mesh, const std::string &name) {
  return AxisRef::whole(mesh, *mesh.axisIndex(name));
}

/// The sub-axis "name":(preSize)size of `mesh`.
AxisRef subAxis(const Mesh &mesh, const std::string &name, int64_t preSize,
                int64_t size) {
  return AxisRef{*mesh.axisIndex(name), preSize, size};
}

DimSharding dim(std::vector<AxisRef> axes, bool open = false) {
  return DimSharding{std::move(axes), open};
}

Sharding sharding(std::vector<DimSharding> dims,
                  std::vector<AxisRef> replicated = {},
                  std::vector<AxisRef> unreduced = {}) {
  return Sharding{std::move(dims), std::move(replicated), std::move(unreduced)};
}

Box box(std::vector<int64_t> lo, std::vector<int64_t> hi) {
  return Box{std::move(lo), std::move(hi)};
}

/// The dim-0 range of every mesh position, in position order.
Ranges rangesOfDim0(const TensorLayout &layout) {
  Ranges result;
  for (int64_t p = 0; p < layout.numDevices(); ++p) {
    Box b = layout.boxAtPosition(p);
    result.emplace_back(b.lo[0], b.hi[0]);
  }
  return result;
}

/// Creates a layout or fails the current test; use only in a void context.
#define ASSERT_LAYOUT(name, mesh, sharding, shape)                             \
  auto name##OrError = TensorLayout::create((mesh), (sharding), (shape));      \
  ASSERT_TRUE(name##OrError.ok()) << name##OrError.status();                   \
  const TensorLayout &name = *name##OrError

void expectInvalid(const absl::Status &status, const std::string &fragment) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(std::string(status.message()).find(fragment), std::string::npos)
      << "message \"" << status.message() << "\" lacks \"" << fragment << "\"";
}

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

TEST(MeshTest, DefaultIdsAreRowMajorIdentity) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 3}});
  ASSERT_TRUE(mesh.validate().ok());
  EXPECT_EQ(mesh.numDevices(), 6);
  EXPECT_EQ(mesh.deviceAt(4), 4);
  EXPECT_EQ(mesh.positionOf(5), 5);
  EXPECT_EQ(mesh.positionOf(6), std::nullopt);
  EXPECT_EQ(mesh.positionOf(-1), std::nullopt);
  // The last axis varies fastest.
  EXPECT_EQ(mesh.coordinates(0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(mesh.coordinates(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(mesh.coordinates(3), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(mesh.coordinates(5), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(mesh.axisIndex("b"), 1);
  EXPECT_EQ(mesh.axisIndex("c"), std::nullopt);
}

TEST(MeshTest, ExplicitIdsMapPositions) {
  Mesh mesh = makeMesh({{"dp", 2}, {"tp", 2}}, {7, 3, 5, 1});
  ASSERT_TRUE(mesh.validate().ok());
  EXPECT_EQ(mesh.deviceAt(0), 7);
  EXPECT_EQ(mesh.deviceAt(3), 1);
  EXPECT_EQ(mesh.positionOf(5), 2);
  EXPECT_EQ(mesh.positionOf(0), std::nullopt);
  EXPECT_EQ(mesh.positionOf(2), std::nullopt);
}

TEST(MeshTest, EmptyMeshIsDeviceZero) {
  Mesh mesh;
  ASSERT_TRUE(mesh.validate().ok());
  EXPECT_EQ(mesh.numDevices(), 1);
  EXPECT_EQ(mesh.deviceAt(0), 0);
  EXPECT_EQ(mesh.positionOf(0), 0);
  EXPECT_EQ(mesh.positionOf(1), std::nullopt);
  EXPECT_TRUE(mesh.coordinates(0).empty());
}

TEST(MeshTest, SingleDeviceMesh) {
  Mesh mesh = makeMesh({}, {3});
  ASSERT_TRUE(mesh.validate().ok());
  EXPECT_EQ(mesh.numDevices(), 1);
  EXPECT_EQ(mesh.deviceAt(0), 3);
  EXPECT_EQ(mesh.positionOf(3), 0);
  EXPECT_EQ(mesh.positionOf(0), std::nullopt);
}

TEST(MeshTest, RejectsNonPositiveSizes) {
  expectInvalid(makeMesh({{"a", 2}, {"b", 0}}).validate(), "\"b\" has size 0");
  expectInvalid(makeMesh({{"a", -2}}).validate(), "\"a\" has size -2");
}

TEST(MeshTest, RejectsDuplicateAxisNames) {
  expectInvalid(makeMesh({{"a", 2}, {"b", 2}, {"a", 2}}).validate(),
                "duplicate axis name \"a\"");
}

TEST(MeshTest, RejectsProductOverflow) {
  // 2^31 * 2^31 = 2^62 fits; one more factor of 2 reaches 2^63, which does
  // not.
  int64_t big = int64_t(1) << 31;
  EXPECT_TRUE(makeMesh({{"a", big}, {"b", big}}).validate().ok());
  expectInvalid(makeMesh({{"a", big}, {"b", big}, {"c", 2}}).validate(),
                "overflows");
  expectInvalid(makeMesh({{"a", std::numeric_limits<int64_t>::max()}, {"b", 2}})
                    .validate(),
                "overflows");
}

TEST(MeshTest, RejectsDeviceIdCountMismatch) {
  expectInvalid(makeMesh({{"a", 2}, {"b", 2}}, {0, 1, 2}).validate(),
                "3 device ids");
  expectInvalid(makeMesh({{"a", 2}}, {0, 1, 2}).validate(), "3 device ids");
  // An empty mesh holds exactly one device.
  expectInvalid(makeMesh({}, {0, 1}).validate(), "2 device ids");
}

TEST(MeshTest, RejectsDuplicateIds) {
  expectInvalid(makeMesh({{"a", 4}}, {4, 5, 4, 6}).validate(),
                "device id 4 appears more than once");
}

TEST(MeshTest, RejectsNegativeIds) {
  expectInvalid(makeMesh({{"a", 2}}, {0, -1}).validate(),
                "device id -1 is negative");
}

TEST(MeshTest, EqualityComparesDevicesNotSpelling) {
  Mesh implicit = makeMesh({{"a", 2}, {"b", 2}});
  Mesh explicitIds = makeMesh({{"a", 2}, {"b", 2}}, {0, 1, 2, 3});
  EXPECT_EQ(implicit, explicitIds);
  EXPECT_FALSE(implicit == makeMesh({{"a", 2}, {"b", 2}}, {1, 0, 2, 3}));
  EXPECT_FALSE(implicit == makeMesh({{"a", 2}, {"c", 2}}));
  EXPECT_FALSE(implicit == makeMesh({{"a", 4}}));
}

//===----------------------------------------------------------------------===//
// AxisRef
//===----------------------------------------------------------------------===//

TEST(AxisRefTest, WholeAxis) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  AxisRef b = AxisRef::whole(mesh, 1);
  EXPECT_EQ(b, (AxisRef{1, 1, 4}));
  EXPECT_TRUE(b.isWhole(mesh));
  EXPECT_FALSE(subAxis(mesh, "b", 1, 2).isWhole(mesh));
  EXPECT_FALSE(subAxis(mesh, "b", 2, 2).isWhole(mesh));
  for (int64_t p = 0; p < mesh.numDevices(); ++p)
    EXPECT_EQ(b.coordinate(mesh, mesh.coordinates(p)), p % 4);
}

TEST(AxisRefTest, SubAxisCoordinates) {
  // "x"=8 viewed as preSize x size x minor: the coordinate is the middle
  // digit of the axis coordinate c.
  Mesh mesh = makeMesh({{"y", 3}, {"x", 8}});
  for (int64_t c = 0; c < 8; ++c) {
    std::vector<int64_t> coords = {2, c};
    SCOPED_TRACE(c);
    EXPECT_EQ(subAxis(mesh, "x", 1, 2).coordinate(mesh, coords), c / 4);
    EXPECT_EQ(subAxis(mesh, "x", 2, 2).coordinate(mesh, coords), (c / 2) % 2);
    EXPECT_EQ(subAxis(mesh, "x", 4, 2).coordinate(mesh, coords), c % 2);
    EXPECT_EQ(subAxis(mesh, "x", 1, 4).coordinate(mesh, coords), c / 2);
    EXPECT_EQ(subAxis(mesh, "x", 2, 4).coordinate(mesh, coords), c % 4);
    EXPECT_EQ(axis(mesh, "x").coordinate(mesh, coords), c);
  }
  // "z"=6 as (1)2 x (2)3: the major factor splits 0..5 in halves.
  Mesh mesh6 = makeMesh({{"z", 6}});
  for (int64_t c = 0; c < 6; ++c) {
    EXPECT_EQ(subAxis(mesh6, "z", 1, 2).coordinate(mesh6, {c}), c / 3);
    EXPECT_EQ(subAxis(mesh6, "z", 2, 3).coordinate(mesh6, {c}), c % 3);
  }
}

TEST(AxisRefTest, Overlaps) {
  Mesh mesh = makeMesh({{"x", 8}, {"y", 8}, {"one", 1}});
  AxisRef x = axis(mesh, "x");
  AxisRef x12 = subAxis(mesh, "x", 1, 2), x14 = subAxis(mesh, "x", 1, 4);
  AxisRef x22 = subAxis(mesh, "x", 2, 2), x24 = subAxis(mesh, "x", 2, 4);
  AxisRef x42 = subAxis(mesh, "x", 4, 2);
  // "x":(1)4 and "x":(2)2 share the factor (2)2.
  EXPECT_TRUE(x14.overlaps(x22));
  EXPECT_TRUE(x22.overlaps(x14));
  EXPECT_TRUE(x14.overlaps(x24));
  EXPECT_TRUE(x.overlaps(x42));
  EXPECT_TRUE(x42.overlaps(x));
  EXPECT_TRUE(x22.overlaps(x22));
  // Adjacent factors are disjoint.
  EXPECT_FALSE(x12.overlaps(x22));
  EXPECT_FALSE(x12.overlaps(x24));
  EXPECT_FALSE(x14.overlaps(x42));
  EXPECT_FALSE(x12.overlaps(x42));
  // Different axes never overlap, whatever the factors.
  EXPECT_FALSE(x.overlaps(axis(mesh, "y")));
  EXPECT_FALSE(x14.overlaps(subAxis(mesh, "y", 1, 4)));
  // A size-1 axis has an empty factor range but still cannot be used twice.
  EXPECT_TRUE(axis(mesh, "one").overlaps(axis(mesh, "one")));
}

//===----------------------------------------------------------------------===//
// Sharding
//===----------------------------------------------------------------------===//

TEST(ShardingTest, ReplicatedOfRank) {
  Sharding s = Sharding::replicatedOfRank(3);
  ASSERT_EQ(s.dims.size(), 3u);
  for (const DimSharding &d : s.dims) {
    EXPECT_TRUE(d.axes.empty());
    EXPECT_FALSE(d.open);
  }
  EXPECT_TRUE(s.replicated.empty());
  EXPECT_TRUE(s.unreduced.empty());
  EXPECT_TRUE(s.validate(Mesh()).ok());
}

TEST(ShardingTest, AcceptsDisjointAxesAndFactors) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}, {"c", 2}, {"x", 8}});
  Sharding s = sharding({dim({axis(mesh, "a"), subAxis(mesh, "x", 1, 2)}),
                         dim({axis(mesh, "b")}, /*open=*/true)},
                        {axis(mesh, "c"), subAxis(mesh, "x", 4, 2)},
                        {subAxis(mesh, "x", 2, 2)});
  EXPECT_TRUE(s.validate(mesh).ok()) << s.validate(mesh);
  // "x":(1)2 and "x":(6)2 leave the factor (2)3 of "x"=12 between them.
  Mesh mesh12 = makeMesh({{"x", 12}});
  EXPECT_TRUE(sharding({dim({subAxis(mesh12, "x", 1, 2)}),
                        dim({subAxis(mesh12, "x", 6, 2)})})
                  .validate(mesh12)
                  .ok());
}

TEST(ShardingTest, RejectsAxisUsedTwice) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  AxisRef a = axis(mesh, "a"), b = axis(mesh, "b");
  const char *msg = "axis \"a\" is used more than once";
  // Across dims, within one dim, and across dims / replicated / unreduced.
  expectInvalid(sharding({dim({a}), dim({a})}).validate(mesh), msg);
  expectInvalid(sharding({dim({a, b, a}), dim({})}).validate(mesh), msg);
  expectInvalid(sharding({dim({a}), dim({b})}, {a}).validate(mesh), msg);
  expectInvalid(sharding({dim({a}), dim({b})}, {}, {a}).validate(mesh), msg);
  expectInvalid(sharding({dim({}), dim({b})}, {a}, {a}).validate(mesh), msg);
  expectInvalid(sharding({dim({}), dim({})}, {a, a}).validate(mesh), msg);
  // A whole axis and one of its sub-axes.
  expectInvalid(
      sharding({dim({b}), dim({subAxis(mesh, "b", 2, 2)})}).validate(mesh),
      "axis \"b\" is used more than once");
}

TEST(ShardingTest, RejectsSizeOneAxisUsedTwice) {
  Mesh mesh = makeMesh({{"one", 1}, {"a", 2}});
  AxisRef one = axis(mesh, "one");
  EXPECT_TRUE(sharding({dim({one}), dim({})}).validate(mesh).ok());
  expectInvalid(sharding({dim({one}), dim({one})}).validate(mesh),
                "axis \"one\" is used more than once");
  expectInvalid(sharding({dim({one}), dim({})}, {}, {one}).validate(mesh),
                "axis \"one\" is used more than once");
}

TEST(ShardingTest, RejectsOverlappingSubAxes) {
  Mesh mesh = makeMesh({{"x", 8}});
  expectInvalid(sharding({dim({subAxis(mesh, "x", 1, 4)}),
                          dim({subAxis(mesh, "x", 2, 2)})})
                    .validate(mesh),
                "axis \"x\" is used more than once");
  expectInvalid(
      sharding({dim({subAxis(mesh, "x", 1, 4)})}, {subAxis(mesh, "x", 2, 4)})
          .validate(mesh),
      "axis \"x\" is used more than once");
}

TEST(ShardingTest, RejectsSubAxisThatDoesNotDivide) {
  Mesh mesh = makeMesh({{"x", 8}, {"y", 6}});
  // 3 does not divide 8; 4 * 4 = 16 does not divide 8; 4 * 2 does not
  // divide 6.
  expectInvalid(sharding({dim({subAxis(mesh, "x", 1, 3)})}).validate(mesh),
                "\"x\":(1)3 does not divide axis \"x\" of size 8");
  expectInvalid(sharding({dim({subAxis(mesh, "x", 4, 4)})}).validate(mesh),
                "does not divide");
  expectInvalid(sharding({dim({subAxis(mesh, "y", 4, 2)})}).validate(mesh),
                "does not divide");
  expectInvalid(sharding({dim({subAxis(mesh, "x", 0, 2)})}).validate(mesh),
                "non-positive");
  expectInvalid(sharding({dim({subAxis(mesh, "x", 1, 0)})}).validate(mesh),
                "non-positive");
  // pre-size * size overflows int64.
  expectInvalid(
      sharding({dim({AxisRef{0, int64_t(1) << 62, 4}})}).validate(mesh),
      "does not divide");
}

TEST(ShardingTest, RejectsUnknownAxis) {
  Mesh mesh = makeMesh({{"x", 2}});
  expectInvalid(sharding({dim({AxisRef{1, 1, 2}})}).validate(mesh),
                "axis index 1 is not an axis of the mesh");
  expectInvalid(sharding({dim({})}, {AxisRef{-1, 1, 2}}).validate(mesh),
                "axis index -1");
}

TEST(ShardingTest, RejectsSubAxesFromDifferentFactorizations) {
  // "x"=12 = 2 x 6 for "x":(1)2 but 3 x 2 x 2 for "x":(3)2: no common
  // factorization, so the remaining coordinates would not form a factor.
  Mesh mesh = makeMesh({{"x", 12}});
  expectInvalid(sharding({dim({subAxis(mesh, "x", 1, 2)}),
                          dim({subAxis(mesh, "x", 3, 2)})})
                    .validate(mesh),
                "do not belong to one factorization");
  expectInvalid(sharding({dim({subAxis(mesh, "x", 1, 3)})}, {},
                         {subAxis(mesh, "x", 4, 3)})
                    .validate(mesh),
                "do not belong to one factorization");
}

//===----------------------------------------------------------------------===//
// Box
//===----------------------------------------------------------------------===//

TEST(BoxTest, ElementsContainsIntersect) {
  Box a = box({0, 2}, {3, 5});
  EXPECT_EQ(a.numElements(), 9);
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a.contains({2, 4}));
  EXPECT_FALSE(a.contains({3, 4}));
  EXPECT_FALSE(a.contains({0, 1}));
  EXPECT_EQ(a.intersect(box({1, 4}, {9, 9})), box({1, 4}, {3, 5}));
  Box none = a.intersect(box({5, 0}, {6, 9}));
  EXPECT_TRUE(none.empty());
  EXPECT_LE(none.lo[0], none.hi[0]);
  EXPECT_TRUE(box({1, 1}, {1, 5}).empty());
  // Rank 0: one element, contained everywhere.
  EXPECT_EQ(Box().numElements(), 1);
  EXPECT_TRUE(Box().contains({}));
}

TEST(BoxTest, Encloses) {
  Box a = box({0, 2}, {3, 5});
  EXPECT_TRUE(a.encloses(a));
  EXPECT_TRUE(a.encloses(box({1, 2}, {3, 4})));
  EXPECT_FALSE(a.encloses(box({1, 2}, {4, 4})));
  EXPECT_FALSE(a.encloses(box({0, 1}, {2, 4})));
  EXPECT_FALSE(box({1, 2}, {3, 4}).encloses(a));
  EXPECT_TRUE(Box().encloses(Box()));
}

//===----------------------------------------------------------------------===//
// TensorLayout: creation and the tile rule
//===----------------------------------------------------------------------===//

TEST(TensorLayoutTest, CreateRejectsInvalidInputs) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  Sharding s = sharding({dim({axis(mesh, "a")}), dim({})});
  expectInvalid(TensorLayout::create(mesh, s, {4}).status(),
                "sharding has 2 dimensions but the tensor has rank 1");
  expectInvalid(TensorLayout::create(mesh, s, {4, 4, 4}).status(), "rank 3");
  expectInvalid(TensorLayout::create(mesh, s, {4, -1}).status(),
                "negative extent");
  expectInvalid(
      TensorLayout::create(mesh, s, {int64_t(1) << 32, int64_t(1) << 32})
          .status(),
      "overflows");
  expectInvalid(
      TensorLayout::create(makeMesh({{"a", 2}, {"b", 4}}, {0, 1}), s, {4, 4})
          .status(),
      "2 device ids");
  expectInvalid(TensorLayout::create(
                    mesh,
                    sharding({dim({axis(mesh, "a")}), dim({axis(mesh, "a")})}),
                    {4, 4})
                    .status(),
                "used more than once");
  // A zero extent makes the element count 0, which is fine.
  EXPECT_TRUE(TensorLayout::create(mesh, s, {0, 7}).ok());
}

TEST(TensorLayoutTest, TenOverFourShards) {
  Mesh mesh = makeMesh({{"x", 4}});
  ASSERT_LAYOUT(layout, mesh, sharding({dim({axis(mesh, "x")})}),
                std::vector<int64_t>{10});
  EXPECT_EQ(layout.numShards(0), 4);
  EXPECT_EQ(layout.tileExtent(0), 3);
  EXPECT_EQ(layout.localShape(), std::vector<int64_t>{3});
  // t = ceil(10/4) = 3: extents 3, 3, 3, 1.
  EXPECT_EQ(rangesOfDim0(layout), (Ranges{{0, 3}, {3, 6}, {6, 9}, {9, 10}}));
}

TEST(TensorLayoutTest, FiveOverEightShardsLeavesEmptyTiles) {
  Mesh mesh = makeMesh({{"x", 8}});
  ASSERT_LAYOUT(layout, mesh, sharding({dim({axis(mesh, "x")})}),
                std::vector<int64_t>{5});
  EXPECT_EQ(layout.tileExtent(0), 1);
  EXPECT_EQ(
      rangesOfDim0(layout),
      (Ranges{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 5}, {5, 5}, {5, 5}}));
  EXPECT_TRUE(layout.boxAtPosition(6).empty());
}

TEST(TensorLayoutTest, TrailingEmptyTileAfterFullOnes) {
  // t = ceil(9/4) = 3 and three full tiles already cover 9: the last device
  // holds nothing even though 9 > 4. Likewise 6 over 4: 2, 2, 2, 0.
  Mesh mesh = makeMesh({{"x", 4}});
  Sharding s = sharding({dim({axis(mesh, "x")})});
  ASSERT_LAYOUT(nine, mesh, s, std::vector<int64_t>{9});
  EXPECT_EQ(rangesOfDim0(nine), (Ranges{{0, 3}, {3, 6}, {6, 9}, {9, 9}}));
  ASSERT_LAYOUT(six, mesh, s, std::vector<int64_t>{6});
  EXPECT_EQ(rangesOfDim0(six), (Ranges{{0, 2}, {2, 4}, {4, 6}, {6, 6}}));
}

TEST(TensorLayoutTest, ZeroExtent) {
  Mesh mesh = makeMesh({{"x", 4}});
  ASSERT_LAYOUT(layout, mesh, sharding({dim({axis(mesh, "x")}), dim({})}),
                (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(layout.localShape(), (std::vector<int64_t>{0, 3}));
  for (int64_t p = 0; p < 4; ++p)
    EXPECT_EQ(layout.boxAtPosition(p), box({0, 0}, {0, 3}));
  EXPECT_TRUE(layout.devicesHolding({0, 0}).empty());
}

TEST(TensorLayoutTest, ExtentsNearInt64MaxDoNotOverflow) {
  // (d + k - 1) / k and (i + 1) * t both overflow here.
  const int64_t max = std::numeric_limits<int64_t>::max();
  Mesh mesh2 = makeMesh({{"x", 2}});
  ASSERT_LAYOUT(halves, mesh2, sharding({dim({axis(mesh2, "x")})}),
                std::vector<int64_t>{max});
  EXPECT_EQ(halves.tileExtent(0), int64_t(1) << 62);
  EXPECT_EQ(rangesOfDim0(halves),
            (Ranges{{0, int64_t(1) << 62}, {int64_t(1) << 62, max}}));

  Mesh mesh3 = makeMesh({{"x", 3}});
  ASSERT_LAYOUT(thirds, mesh3, sharding({dim({axis(mesh3, "x")})}),
                std::vector<int64_t>{max});
  const int64_t t = max / 3 + 1; // max = 3 * (max / 3) + 1.
  EXPECT_EQ(thirds.tileExtent(0), t);
  EXPECT_EQ(rangesOfDim0(thirds), (Ranges{{0, t}, {t, 2 * t}, {2 * t, max}}));
}

TEST(TensorLayoutTest, MultiAxisDimIsMajorToMinor) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  // {"a", "b"}: shard = a * 4 + b, which is the mesh position.
  ASSERT_LAYOUT(ab, mesh,
                sharding({dim({axis(mesh, "a"), axis(mesh, "b")}), dim({})}),
                (std::vector<int64_t>{8, 2}));
  for (int64_t p = 0; p < 8; ++p) {
    EXPECT_EQ(ab.shardIndex(p), (std::vector<int64_t>{p, 0}));
    EXPECT_EQ(ab.boxAtPosition(p), box({p, 0}, {p + 1, 2}));
  }
  // {"b", "a"}: shard = b * 2 + a.
  ASSERT_LAYOUT(ba, mesh,
                sharding({dim({axis(mesh, "b"), axis(mesh, "a")}), dim({})}),
                (std::vector<int64_t>{8, 2}));
  std::vector<int64_t> expected = {0, 2, 4, 6, 1, 3, 5, 7};
  for (int64_t p = 0; p < 8; ++p)
    EXPECT_EQ(ba.shardIndex(p)[0], expected[p]) << "position " << p;
}

TEST(TensorLayoutTest, TwoShardedDims) {
  // 4x8 over ["a"=2, "b"=4] as [{"a"}, {"b"}]: 2x2 tiles.
  //        b=0    b=1    b=2    b=3
  //  a=0  [0,2)x[0,2) ... [0,2)x[6,8)
  //  a=1  [2,4)x[0,2) ... [2,4)x[6,8)
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  ASSERT_LAYOUT(layout, mesh,
                sharding({dim({axis(mesh, "a")}), dim({axis(mesh, "b")})}),
                (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(layout.localShape(), (std::vector<int64_t>{2, 2}));
  for (int64_t p = 0; p < 8; ++p) {
    int64_t a = p / 4, b = p % 4;
    EXPECT_EQ(layout.boxAtPosition(p),
              box({2 * a, 2 * b}, {2 * a + 2, 2 * b + 2}));
  }
}

TEST(TensorLayoutTest, SubAxesSplitOneAxisOverTwoDims) {
  // "x"=8 as (1)2 on dim 0 and (2)4 on dim 1: position c gives shard c / 4
  // on dim 0 and c % 4 on dim 1.
  Mesh mesh = makeMesh({{"x", 8}});
  ASSERT_LAYOUT(layout, mesh,
                sharding({dim({subAxis(mesh, "x", 1, 2)}),
                          dim({subAxis(mesh, "x", 2, 4)})}),
                (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(layout.localShape(), (std::vector<int64_t>{3, 2}));
  for (int64_t c = 0; c < 8; ++c) {
    EXPECT_EQ(layout.shardIndex(c), (std::vector<int64_t>{c / 4, c % 4}));
    EXPECT_EQ(layout.boxAtPosition(c), box({3 * (c / 4), 2 * (c % 4)},
                                           {3 * (c / 4) + 3, 2 * (c % 4) + 2}));
  }
  // The minor sub-axis listed first: shard = (c % 2) * 2 + (c / 4).
  ASSERT_LAYOUT(
      swapped, mesh,
      sharding({dim({subAxis(mesh, "x", 4, 2), subAxis(mesh, "x", 1, 2)})}),
      std::vector<int64_t>{4});
  for (int64_t c = 0; c < 8; ++c)
    EXPECT_EQ(swapped.shardIndex(c)[0], (c % 2) * 2 + c / 4) << c;
}

TEST(TensorLayoutTest, ExplicitDeviceIds) {
  // A sub-mesh on devices 4..7 and a permuted, non-contiguous one.
  for (std::vector<int64_t> ids :
       {std::vector<int64_t>{4, 5, 6, 7}, std::vector<int64_t>{7, 3, 5, 1}}) {
    Mesh mesh = makeMesh({{"dp", 2}, {"tp", 2}}, ids);
    ASSERT_LAYOUT(layout, mesh, sharding({dim({axis(mesh, "dp")}), dim({})}),
                  (std::vector<int64_t>{5, 2}));
    for (int64_t p = 0; p < 4; ++p) {
      std::optional<Box> b = layout.boxOfDevice(ids[p]);
      ASSERT_TRUE(b.has_value());
      EXPECT_EQ(*b, layout.boxAtPosition(p));
      EXPECT_EQ(*b, p < 2 ? box({0, 0}, {3, 2}) : box({3, 0}, {5, 2}));
    }
    EXPECT_EQ(layout.boxOfDevice(0), std::nullopt);
    EXPECT_EQ(layout.boxOfDevice(2), std::nullopt);
  }
  Mesh mesh = makeMesh({{"dp", 2}, {"tp", 2}}, {7, 3, 5, 1});
  ASSERT_LAYOUT(layout, mesh, sharding({dim({axis(mesh, "dp")}), dim({})}),
                (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(layout.replicaGroups(), (Groups{{1, 5}, {3, 7}}));
  EXPECT_EQ(layout.devicesHolding({0, 1}), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(layout.devicesHolding({4, 0}), (std::vector<int64_t>{1, 5}));
}

TEST(TensorLayoutTest, SingleDeviceMesh) {
  Mesh mesh = makeMesh({}, {3});
  ASSERT_LAYOUT(layout, mesh, Sharding::replicatedOfRank(2),
                (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(layout.numDevices(), 1);
  EXPECT_EQ(layout.localShape(), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(layout.boxOfDevice(3), box({0, 0}, {4, 5}));
  EXPECT_EQ(layout.boxOfDevice(0), std::nullopt);
  EXPECT_EQ(layout.replicaGroups(), (Groups{{3}}));
  EXPECT_EQ(layout.reductionGroups(), (Groups{{3}}));
  EXPECT_EQ(layout.devicesHolding({3, 4}), (std::vector<int64_t>{3}));
  // The same data on the empty mesh lives on device 0 instead.
  ASSERT_LAYOUT(onZero, Mesh(), Sharding::replicatedOfRank(2),
                (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(onZero.boxOfDevice(0), box({0, 0}, {4, 5}));
  EXPECT_FALSE(layout.isDeviceEquivalent(onZero));
}

TEST(TensorLayoutTest, RankZero) {
  Mesh mesh = makeMesh({{"a", 2}});
  ASSERT_LAYOUT(layout, mesh, Sharding::replicatedOfRank(0),
                std::vector<int64_t>{});
  EXPECT_EQ(layout.boxAtPosition(1), Box());
  EXPECT_EQ(layout.devicesHolding({}), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(layout.replicaGroups(), (Groups{{0, 1}}));
}

//===----------------------------------------------------------------------===//
// TensorLayout: groups and lookups
//===----------------------------------------------------------------------===//

TEST(TensorLayoutTest, ReplicaGroupsSortedByFirstId) {
  // [{"b"}, {}] over ["a"=2, "b"=4]: positions b and b + 4 hold the same
  // tile; with these ids the groups are {10, 0}, {11, 1}, ... sorted.
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}}, {10, 11, 12, 13, 0, 1, 2, 3});
  ASSERT_LAYOUT(layout, mesh, sharding({dim({axis(mesh, "b")}), dim({})}),
                (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(layout.replicaGroups(),
            (Groups{{0, 10}, {1, 11}, {2, 12}, {3, 13}}));
  EXPECT_EQ(layout.reductionGroups(),
            (Groups{{0}, {1}, {2}, {3}, {10}, {11}, {12}, {13}}));
}

TEST(TensorLayoutTest, ReplicaAndReductionGroupsWithUnreducedAxis) {
  // Mesh ["a"=2, "b"=2, "c"=2], position = 4a + 2b + c. Dim 0 split on "a",
  // partial sums over "b", replicated over "c".
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}, {"c", 2}});
  ASSERT_LAYOUT(layout, mesh,
                sharding({dim({axis(mesh, "a")})}, {}, {axis(mesh, "b")}),
                std::vector<int64_t>{4});
  // Identical data: same a, same b (c varies).
  EXPECT_EQ(layout.replicaGroups(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  // Partial sums to add: same a, same c (b varies).
  EXPECT_EQ(layout.reductionGroups(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(TensorLayoutTest, UnreducedRankFollowsCoordinatesNotIds) {
  // As above, with ids that reverse the order of "b" on one replica: the
  // partial a device holds must not depend on how its group sorts by id,
  // or replicas (same a and b, other c) would hold different partials.
  Mesh mesh =
      makeMesh({{"a", 2}, {"b", 2}, {"c", 2}}, {0, 1, 2, 3, 6, 5, 4, 7});
  ASSERT_LAYOUT(layout, mesh,
                sharding({dim({axis(mesh, "a")})}, {}, {axis(mesh, "b")}),
                std::vector<int64_t>{4});
  for (int64_t p = 0; p < 8; ++p)
    EXPECT_EQ(layout.unreducedRank(p), (p / 2) % 2) << "position " << p;
  // Replicas agree on the rank.
  for (const std::vector<int64_t> &group : layout.replicaGroups()) {
    int64_t first = layout.unreducedRank(*mesh.positionOf(group.front()));
    for (int64_t device : group)
      EXPECT_EQ(layout.unreducedRank(*mesh.positionOf(device)), first);
  }
}

TEST(TensorLayoutTest, GroupsWithUnreducedSubAxis) {
  // "x"=8 with the middle factor (2)2 unreduced: devices c and c ^ 2 hold
  // the two partial sums.
  Mesh mesh = makeMesh({{"x", 8}}, {8, 9, 10, 11, 12, 13, 14, 15});
  ASSERT_LAYOUT(layout, mesh,
                sharding({dim({})}, {}, {subAxis(mesh, "x", 2, 2)}),
                std::vector<int64_t>{3});
  EXPECT_EQ(layout.reductionGroups(),
            (Groups{{8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(layout.replicaGroups(), (Groups{{8, 9, 12, 13}, {10, 11, 14, 15}}));

  // Two unreduced sub-axes (1)2 and (4)2 with (2)2 sharding the tensor: a
  // reduction group varies the outer factors, i.e. {c, c^1, c^4, c^5}.
  ASSERT_LAYOUT(outer, mesh,
                sharding({dim({subAxis(mesh, "x", 2, 2)})}, {},
                         {subAxis(mesh, "x", 1, 2), subAxis(mesh, "x", 4, 2)}),
                std::vector<int64_t>{4});
  EXPECT_EQ(outer.reductionGroups(),
            (Groups{{8, 9, 12, 13}, {10, 11, 14, 15}}));
  // Every device holds distinct data: a different tile or a different
  // partial sum.
  EXPECT_EQ(outer.replicaGroups().size(), 8u);
}

TEST(TensorLayoutTest, DevicesHolding) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  ASSERT_LAYOUT(layout, mesh, sharding({dim({axis(mesh, "a")}), dim({})}),
                (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(layout.devicesHolding({2, 2}), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(layout.devicesHolding({3, 0}), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_TRUE(layout.devicesHolding({5, 0}).empty());
  EXPECT_TRUE(layout.devicesHolding({-1, 0}).empty());
  EXPECT_TRUE(layout.devicesHolding({0, 3}).empty());
  // The wrong rank holds nothing rather than reading out of bounds.
  EXPECT_TRUE(layout.devicesHolding({0}).empty());
  EXPECT_TRUE(layout.devicesHolding({0, 0, 0}).empty());

  // Five elements over eight shards: each element lives on one device.
  Mesh ids = makeMesh({{"x", 8}}, {7, 6, 5, 4, 3, 2, 1, 0});
  ASSERT_LAYOUT(sparse, ids, sharding({dim({axis(ids, "x")})}),
                std::vector<int64_t>{5});
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(sparse.devicesHolding({i}), (std::vector<int64_t>{7 - i}));
}

//===----------------------------------------------------------------------===//
// TensorLayout: device equivalence
//===----------------------------------------------------------------------===//

TEST(DeviceEquivalenceTest, FlattenedMeshIsEquivalent) {
  Mesh mesh1 = makeMesh({{"a", 2}, {"b", 4}});
  Mesh mesh3 = makeMesh({{"c", 8}});
  std::vector<int64_t> shape = {16, 16};
  ASSERT_LAYOUT(l1, mesh1,
                sharding({dim({axis(mesh1, "a"), axis(mesh1, "b")}), dim({})}),
                shape);
  ASSERT_LAYOUT(l3, mesh3, sharding({dim({axis(mesh3, "c")}), dim({})}), shape);
  EXPECT_TRUE(l1.isDeviceEquivalent(l3));
  EXPECT_TRUE(l3.isDeviceEquivalent(l1));
  EXPECT_TRUE(l1.isDeviceEquivalent(l1));

  // "a" alone is the major sub-axis of "c".
  ASSERT_LAYOUT(aOnly, mesh1, sharding({dim({axis(mesh1, "a")}), dim({})}),
                shape);
  ASSERT_LAYOUT(cMajor, mesh3,
                sharding({dim({subAxis(mesh3, "c", 1, 2)}), dim({})}), shape);
  EXPECT_TRUE(aOnly.isDeviceEquivalent(cMajor));
  EXPECT_FALSE(aOnly.isDeviceEquivalent(l3));

  // Minor-to-major order is a different layout.
  ASSERT_LAYOUT(ba, mesh1,
                sharding({dim({axis(mesh1, "b"), axis(mesh1, "a")}), dim({})}),
                shape);
  EXPECT_FALSE(ba.isDeviceEquivalent(l3));
  // A different shape is never equivalent.
  ASSERT_LAYOUT(l3Other, mesh3, sharding({dim({axis(mesh3, "c")}), dim({})}),
                (std::vector<int64_t>{16, 8}));
  EXPECT_FALSE(l3.isDeviceEquivalent(l3Other));
}

TEST(DeviceEquivalenceTest, DeviceIdsMustMatch) {
  std::vector<int64_t> shape = {16};
  Mesh mesh1 = makeMesh({{"a", 2}, {"b", 4}}, {4, 5, 6, 7, 8, 9, 10, 11});
  Mesh mesh3 = makeMesh({{"c", 8}}, {4, 5, 6, 7, 8, 9, 10, 11});
  Mesh mesh3Default = makeMesh({{"c", 8}});
  Sharding s1 = sharding({dim({axis(mesh1, "a"), axis(mesh1, "b")})});
  Sharding s3 = sharding({dim({axis(mesh3, "c")})});
  ASSERT_LAYOUT(l1, mesh1, s1, shape);
  ASSERT_LAYOUT(l3, mesh3, s3, shape);
  ASSERT_LAYOUT(l3Default, mesh3Default, s3, shape);
  EXPECT_TRUE(l1.isDeviceEquivalent(l3));
  EXPECT_FALSE(l1.isDeviceEquivalent(l3Default));
  EXPECT_FALSE(l3Default.isDeviceEquivalent(l1));

  // The same sharding with reversed ids puts shard 0 on another device.
  Mesh reversed = makeMesh({{"c", 8}}, {11, 10, 9, 8, 7, 6, 5, 4});
  ASSERT_LAYOUT(lReversed, reversed, s3, shape);
  EXPECT_FALSE(l3.isDeviceEquivalent(lReversed));

  // A 4-device layout is not equivalent to an 8-device one even if the
  // shared devices agree.
  Mesh half = makeMesh({{"c", 4}}, {4, 5, 6, 7});
  ASSERT_LAYOUT(lHalf, half, sharding({dim({})}), shape);
  ASSERT_LAYOUT(lReplicated, mesh3, sharding({dim({})}), shape);
  EXPECT_FALSE(lHalf.isDeviceEquivalent(lReplicated));
}

TEST(DeviceEquivalenceTest, PermutedIdsCanCompensateAxisOrder) {
  // ["x"=2, "y"=2] as [{"y", "x"}] puts shard 2y + x on device 2x + y; the
  // 1-D mesh with ids [0, 2, 1, 3] puts shard s on the same device.
  std::vector<int64_t> shape = {8};
  Mesh xy = makeMesh({{"x", 2}, {"y", 2}});
  Mesh z = makeMesh({{"z", 4}}, {0, 2, 1, 3});
  ASSERT_LAYOUT(a, xy, sharding({dim({axis(xy, "y"), axis(xy, "x")})}), shape);
  ASSERT_LAYOUT(b, z, sharding({dim({axis(z, "z")})}), shape);
  EXPECT_TRUE(a.isDeviceEquivalent(b));
  EXPECT_TRUE(b.isDeviceEquivalent(a));
}

TEST(DeviceEquivalenceTest, UnreducedStructureMatters) {
  std::vector<int64_t> shape = {4, 4};
  Mesh mesh1 = makeMesh({{"a", 2}, {"b", 4}});
  Mesh mesh3 = makeMesh({{"c", 8}});
  ASSERT_LAYOUT(
      partialA, mesh1,
      sharding({dim({axis(mesh1, "b")}), dim({})}, {}, {axis(mesh1, "a")}),
      shape);
  ASSERT_LAYOUT(partialC, mesh3,
                sharding({dim({subAxis(mesh3, "c", 2, 4)}), dim({})}, {},
                         {subAxis(mesh3, "c", 1, 2)}),
                shape);
  EXPECT_TRUE(partialA.isDeviceEquivalent(partialC));
  // Same boxes, but the values are already reduced.
  ASSERT_LAYOUT(reduced, mesh1, sharding({dim({axis(mesh1, "b")}), dim({})}),
                shape);
  EXPECT_FALSE(partialA.isDeviceEquivalent(reduced));
  EXPECT_FALSE(reduced.isDeviceEquivalent(partialA));
  // Same boxes, replicated (not unreduced) over "a": equivalent to reduced.
  ASSERT_LAYOUT(
      replicatedA, mesh1,
      sharding({dim({axis(mesh1, "b")}), dim({})}, {axis(mesh1, "a")}), shape);
  EXPECT_TRUE(replicatedA.isDeviceEquivalent(reduced));
}

} // namespace
