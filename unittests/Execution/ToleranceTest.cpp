//===- ToleranceTest.cpp - The bound of reordered float sums --------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The bound that `polymesh-run --verify` allows a reordered float sum
// (Tolerance.h), and compareLeaf with errors injected within and beyond it:
// a correct reordering must pass, a wrong result must still be caught, and
// without a bound every difference fails.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/Tolerance.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace polymesh;
using namespace polymesh::execution;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(ToleranceTest, UnitRoundoff) {
  EXPECT_EQ(unitRoundoff(ElementType::F32), std::ldexp(1.0, -24));
  EXPECT_EQ(unitRoundoff(ElementType::F64), std::ldexp(1.0, -53));
  EXPECT_EQ(unitRoundoff(ElementType::F16), std::ldexp(1.0, -11));
  EXPECT_EQ(unitRoundoff(ElementType::BF16), std::ldexp(1.0, -8));
  EXPECT_EQ(unitRoundoff(ElementType::I32), 0);
}

TEST(ToleranceTest, Gamma) {
  double u = std::ldexp(1.0, -24);
  EXPECT_EQ(gammaBound(0, u), 0);
  EXPECT_DOUBLE_EQ(gammaBound(3, u), 3 * u / (1 - 3 * u));
  // bf16: 63 additions give gamma 63/193, 256 give no bound at all.
  EXPECT_DOUBLE_EQ(gammaBound(63, std::ldexp(1.0, -8)), 63.0 / 193.0);
  EXPECT_EQ(gammaBound(256, std::ldexp(1.0, -8)), kInf);
}

TEST(ToleranceTest, HalfUlp) {
  EXPECT_EQ(halfUlp(ElementType::F32, 1.0), std::ldexp(1.0, -24));
  EXPECT_EQ(halfUlp(ElementType::F32, 1.99), std::ldexp(1.0, -24));
  EXPECT_EQ(halfUlp(ElementType::F32, -2.0), std::ldexp(1.0, -23));
  // bf16 in [4, 8): ulp 2^-5.
  EXPECT_EQ(halfUlp(ElementType::BF16, 6.59375), std::ldexp(1.0, -6));
  // Zero and subnormals: half the smallest subnormal spacing.
  EXPECT_EQ(halfUlp(ElementType::F32, 0), std::ldexp(1.0, -150));
  EXPECT_EQ(halfUlp(ElementType::F16, 1e-7), std::ldexp(1.0, -25));
}

TEST(ToleranceTest, SumErrorBound) {
  // The f32 sum of squares of test/Run/verify-tolerance.mlir: 4096 terms,
  // sum 87412.48. 2 gamma_4095 S / (1 - gamma_4095).
  double u = std::ldexp(1.0, -24);
  double gamma = 4095 * u / (1 - 4095 * u);
  double bound = sumErrorBound(ElementType::F32, 4096, 87412.48, 87412.48);
  EXPECT_DOUBLE_EQ(bound, 2 * gamma * 87412.48 / (1 - gamma));
  EXPECT_NEAR(bound, 42.69, 0.01);
  // f16/bf16 add half an ulp of the value (one final rounding from f32).
  double g63 = 63.0 / 193.0;
  EXPECT_DOUBLE_EQ(sumErrorBound(ElementType::BF16, 64, 100, 6.59375),
                   2 * g63 * 100 / (1 - g63) + std::ldexp(1.0, -6));
  // One term: nothing is added, nothing may differ.
  EXPECT_EQ(sumErrorBound(ElementType::F32, 1, 5, 5), 0);
  // No bound follows where n u >= 1 or the magnitude overflowed.
  EXPECT_EQ(sumErrorBound(ElementType::BF16, 257, 1, 1), kInf);
  EXPECT_EQ(sumErrorBound(ElementType::F32, 8, kInf, 1), kInf);
  EXPECT_EQ(sumErrorBound(ElementType::I32, 8, 100, 1), 0);
}

TEST(ToleranceTest, UlpDistance) {
  auto ulps = [](float a, float b) {
    return ulpDistance(ElementType::F32, reinterpret_cast<uint8_t *>(&a),
                       reinterpret_cast<uint8_t *>(&b));
  };
  EXPECT_EQ(ulps(1.0f, 1.0f), 0u);
  EXPECT_EQ(ulps(1.0f, std::nextafter(1.0f, 2.0f)), 1u);
  EXPECT_EQ(ulps(0.0f, -0.0f), 0u);
  float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(ulps(tiny, -tiny), 2u);
  // The f32 sum of verify-tolerance.mlir: 0x47aaba3d against 0x47aaba12.
  float want, got;
  uint32_t a = 0x47aaba3d, b = 0x47aaba12;
  std::memcpy(&want, &a, 4);
  std::memcpy(&got, &b, 4);
  EXPECT_EQ(ulps(want, got), 43u);
  uint16_t x = 0x40d3, y = 0x40cc;
  EXPECT_EQ(ulpDistance(ElementType::BF16, reinterpret_cast<uint8_t *>(&x),
                        reinterpret_cast<uint8_t *>(&y)),
            7u);
}

/// 8 f32 elements split over 2 devices (4 each), every tile equal to the
/// reference's box; `magnitude` everywhere as the bound's S.
struct Case {
  HostTensor reference{ElementType::F32, {8}};
  ShardedTensor actual;
  SumBound bound;

  static planner::TensorLayout layout(int unreduced) {
    planner::Mesh mesh{{{"x", 2}}, {}};
    planner::Sharding sharding;
    planner::DimSharding dim;
    if (!unreduced)
      dim.axes.push_back(planner::AxisRef::whole(mesh, 0));
    else
      sharding.unreduced.push_back(planner::AxisRef::whole(mesh, 0));
    sharding.dims.push_back(dim);
    absl::StatusOr<planner::TensorLayout> layout =
        planner::TensorLayout::create(mesh, sharding, {8});
    EXPECT_TRUE(layout.ok()) << layout.status();
    return *layout;
  }

  explicit Case(int64_t terms, float magnitude, bool unreduced = false)
      : actual{ElementType::F32, layout(unreduced), {}},
        bound{terms, HostTensor(ElementType::F32, {8})} {
    for (int i = 0; i < 8; ++i) {
      ref()[i] = 100.0f + i;
      reinterpret_cast<float *>(bound.magnitudes.getData())[i] = magnitude;
    }
    for (int64_t p = 0; p < 2; ++p) {
      planner::Box box = actual.layout.boxAtPosition(p);
      HostTensor tile = reference.extractBox(box.lo, box.hi);
      // Unreduced: device 0 holds the value, device 1 zeros.
      if (unreduced && p == 1)
        tile = HostTensor(ElementType::F32, tile.getShape());
      actual.tiles.emplace(actual.layout.mesh().deviceAt(p), std::move(tile));
    }
  }
  float *ref() { return reinterpret_cast<float *>(reference.getData()); }
  float *tile(int64_t device) {
    return reinterpret_cast<float *>(actual.tiles.at(device).getData());
  }
};

TEST(ToleranceTest, IdenticalPassesEitherWay) {
  Case c(16, 1000);
  EXPECT_TRUE(compareLeaf(c.reference, c.actual).passed());
  LeafComparison bounded = compareLeaf(c.reference, c.actual, &c.bound);
  EXPECT_TRUE(bounded.passed());
  EXPECT_TRUE(bounded.bounded);
  EXPECT_EQ(bounded.differing, 0);
  EXPECT_EQ(bounded.elements, 8);
  EXPECT_EQ(bounded.tiles.size(), 2u);
}

TEST(ToleranceTest, ErrorWithinTheBoundPasses) {
  // 16 terms of S = 1000: bound 2 gamma_15 * 1000 / (1 - gamma_15), about
  // 1.8e-3; an error of 2 ulp at 105 (1.5e-5) is well inside.
  Case c(16, 1000);
  float &element = c.tile(1)[1]; // global index 5
  element = std::nextafter(std::nextafter(element, 200.0f), 200.0f);

  LeafComparison exact = compareLeaf(c.reference, c.actual);
  ASSERT_FALSE(exact.passed());
  EXPECT_EQ(exact.failing, 1);
  EXPECT_EQ(exact.failureMessage(),
            "device 1: value at [5]: expected 105 (0x42d20000), got "
            "105.000015 (0x42d20002) (1 of 8 elements differ, in 1 of 2 "
            "tiles: device 1 1 of 4)");

  LeafComparison bounded = compareLeaf(c.reference, c.actual, &c.bound);
  EXPECT_TRUE(bounded.passed()) << bounded.failureMessage();
  EXPECT_EQ(bounded.differing, 1);
  EXPECT_EQ(bounded.failing, 0);
  EXPECT_EQ(bounded.maxUlps, 2u);
  EXPECT_NEAR(bounded.maxRelativeError, 2 * std::ldexp(1.0, -17) / 105, 1e-12);
  EXPECT_GT(bounded.maxBoundFraction, 0);
  EXPECT_LT(bounded.maxBoundFraction, 0.01);
  EXPECT_EQ(bounded.summary().substr(0, 46),
            "max 2 ulp, rel 1.5e-07, 1 of 8 elements differ");
}

TEST(ToleranceTest, ErrorBeyondTheBoundIsCaught) {
  // The same bound (about 1.8e-3), errors of 0.01 in two tiles: wrong, and
  // reported per tile.
  Case c(16, 1000);
  c.tile(0)[2] += 0.01f;
  c.tile(1)[0] -= 0.01f;
  c.tile(1)[3] += 1e-5f; // within: differs, does not fail
  LeafComparison bounded = compareLeaf(c.reference, c.actual, &c.bound);
  ASSERT_FALSE(bounded.passed());
  EXPECT_EQ(bounded.differing, 3);
  EXPECT_EQ(bounded.failing, 2);
  EXPECT_EQ(bounded.tiles[0].failing, 1);
  EXPECT_EQ(bounded.tiles[1].failing, 1);
  EXPECT_EQ(bounded.tiles[1].differing, 2);
  std::string message = bounded.failureMessage();
  EXPECT_NE(message.find("device 0: value at [2]: expected 102 (0x42cc0000)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("> bound 0.00179 (n = 16)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("(2 of 8 elements beyond the bound, in 2 of 2 "
                         "tiles: device 0 1 of 4, device 1 1 of 4)"),
            std::string::npos)
      << message;
}

TEST(ToleranceTest, TheBoundScalesWithTheMagnitudes) {
  // The same 0.01 error passes where the terms were large enough: the bound
  // follows S, not the result (which may be small after cancellation).
  Case c(16, 1e4);
  c.tile(0)[2] += 0.01f;
  EXPECT_TRUE(compareLeaf(c.reference, c.actual, &c.bound).passed());
  Case small(16, 1e3);
  small.tile(0)[2] += 0.01f;
  EXPECT_FALSE(
      compareLeaf(small.reference, small.actual, &small.bound).passed());
}

TEST(ToleranceTest, LostPartialIsCaught) {
  // Partial sums (unreduced): the group's sum is compared. A device that
  // added its partial twice is far beyond the bound.
  Case c(16, 1000, /*unreduced=*/true);
  EXPECT_TRUE(compareLeaf(c.reference, c.actual, &c.bound).passed());
  c.tile(1)[4] = c.ref()[4];
  LeafComparison bounded = compareLeaf(c.reference, c.actual, &c.bound);
  ASSERT_FALSE(bounded.passed());
  EXPECT_EQ(bounded.failing, 1);
  EXPECT_EQ(bounded.firstFailure->globalIndex, std::vector<int64_t>{4});
}

TEST(ToleranceTest, NonFiniteValues) {
  Case c(16, 1000);
  float nan = std::numeric_limits<float>::quiet_NaN();
  c.ref()[0] = nan;
  c.tile(0)[0] = -nan; // another NaN: passes under a bound only
  EXPECT_TRUE(compareLeaf(c.reference, c.actual, &c.bound).passed());
  EXPECT_FALSE(compareLeaf(c.reference, c.actual).passed());
  c.tile(0)[1] = std::numeric_limits<float>::infinity();
  LeafComparison bounded = compareLeaf(c.reference, c.actual, &c.bound);
  ASSERT_FALSE(bounded.passed());
  EXPECT_NE(bounded.failureMessage().find("not finite"), std::string::npos);
}

TEST(ToleranceTest, NoBoundWhereTheStandardBoundSaysNothing) {
  // n u >= 1: no tolerance can be derived, so any difference fails.
  Case c(int64_t(1) << 25, 1000);
  c.tile(0)[0] = std::nextafter(c.tile(0)[0], 200.0f);
  LeafComparison bounded = compareLeaf(c.reference, c.actual, &c.bound);
  ASSERT_FALSE(bounded.passed());
  EXPECT_NE(bounded.failureMessage().find("no bound holds"), std::string::npos);
}

TEST(ToleranceTest, ABoundOfAnotherShapeIsIgnored) {
  Case c(16, 1000);
  c.bound.magnitudes = HostTensor(ElementType::F32, {4});
  c.tile(0)[0] = std::nextafter(c.tile(0)[0], 200.0f);
  LeafComparison comparison = compareLeaf(c.reference, c.actual, &c.bound);
  EXPECT_FALSE(comparison.bounded);
  EXPECT_FALSE(comparison.passed());
}

} // namespace
