//===- HostTensorTest.cpp - Host tensors: boxes and bit-exact compare ----===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/HostTensor.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace polymesh::execution;

namespace {

/// A tensor whose element e holds e, for checking where boxes come from.
HostTensor iota(ElementType type, std::vector<int64_t> shape) {
  HostTensor t(type, std::move(shape));
  for (int64_t e = 0; e < t.getNumElements(); ++e) {
    if (type == ElementType::I64) {
      std::memcpy(t.getData() + 8 * e, &e, 8);
    } else {
      int32_t v = static_cast<int32_t>(e);
      std::memcpy(t.getData() + 4 * e, &v, 4);
    }
  }
  return t;
}

template <typename T> T at(const HostTensor &t, int64_t linear) {
  T v;
  std::memcpy(&v, t.getData() + linear * sizeof(T), sizeof(T));
  return v;
}

template <typename T> void set(HostTensor &t, int64_t linear, T v) {
  std::memcpy(t.getData() + linear * sizeof(T), &v, sizeof(T));
}

TEST(HostTensor, ElementTypes) {
  EXPECT_EQ(elementSize(ElementType::F32), 4);
  EXPECT_EQ(elementSize(ElementType::F64), 8);
  EXPECT_EQ(elementSize(ElementType::F16), 2);
  EXPECT_EQ(elementSize(ElementType::BF16), 2);
  EXPECT_EQ(elementSize(ElementType::I1), 1);
  EXPECT_EQ(elementSize(ElementType::I8), 1);
  EXPECT_EQ(elementSize(ElementType::I32), 4);
  EXPECT_EQ(elementSize(ElementType::I64), 8);
  for (const char *name :
       {"f32", "f64", "f16", "bf16", "i1", "i8", "i32", "i64"}) {
    std::optional<ElementType> type = parseElementType(name);
    ASSERT_TRUE(type) << name;
    EXPECT_STREQ(elementTypeName(*type), name);
  }
  EXPECT_FALSE(parseElementType("f8"));
  EXPECT_FALSE(parseElementType("ui32"));
  EXPECT_EQ(formatTensorType(ElementType::BF16, {4, 8}), "4x8xbf16");
  EXPECT_EQ(formatTensorType(ElementType::I1, {}), "i1");
}

TEST(HostTensor, ZeroFilledAndSized) {
  HostTensor t(ElementType::F64, {3, 5});
  EXPECT_EQ(t.getRank(), 2);
  EXPECT_EQ(t.getNumElements(), 15);
  EXPECT_EQ(t.getSizeInBytes(), 120);
  for (int64_t e = 0; e < 15; ++e)
    EXPECT_EQ(at<double>(t, e), 0.0);
  HostTensor scalar(ElementType::I32, {});
  EXPECT_EQ(scalar.getNumElements(), 1);
  HostTensor empty(ElementType::F32, {4, 0});
  EXPECT_EQ(empty.getNumElements(), 0);
  EXPECT_EQ(empty.getSizeInBytes(), 0);
}

TEST(HostTensor, LinearizeRoundTrips) {
  HostTensor t(ElementType::I8, {2, 3, 4});
  for (int64_t e = 0; e < t.getNumElements(); ++e)
    EXPECT_EQ(t.linearize(t.delinearize(e)), e);
  EXPECT_EQ(t.linearize({1, 2, 3}), 23);
  EXPECT_EQ(t.delinearize(13), (std::vector<int64_t>{1, 0, 1}));
}

TEST(HostTensor, ExtractBox2D) {
  HostTensor t = iota(ElementType::I32, {4, 6});
  HostTensor box = t.extractBox({1, 2}, {3, 5});
  ASSERT_EQ(box.getShape(), (std::vector<int64_t>{2, 3}));
  const int32_t expected[] = {8, 9, 10, 14, 15, 16};
  for (int64_t e = 0; e < 6; ++e)
    EXPECT_EQ(at<int32_t>(box, e), expected[e]) << e;
}

TEST(HostTensor, ExtractBox3DMatchesElementwise) {
  HostTensor t = iota(ElementType::I64, {3, 4, 5});
  std::vector<int64_t> lo = {1, 0, 2}, hi = {3, 3, 5};
  HostTensor box = t.extractBox(lo, hi);
  ASSERT_EQ(box.getShape(), (std::vector<int64_t>{2, 3, 3}));
  for (int64_t e = 0; e < box.getNumElements(); ++e) {
    std::vector<int64_t> local = box.delinearize(e);
    std::vector<int64_t> global = {lo[0] + local[0], lo[1] + local[1],
                                   lo[2] + local[2]};
    EXPECT_EQ(at<int64_t>(box, e), t.linearize(global)) << e;
  }
}

TEST(HostTensor, ExtractBoxEdgeCases) {
  HostTensor t = iota(ElementType::I32, {4, 6});
  // The whole tensor, an empty box, a box at the far corner.
  EXPECT_FALSE(compareBitExact(t, t.extractBox({0, 0}, {4, 6})));
  EXPECT_EQ(t.extractBox({2, 6}, {4, 6}).getNumElements(), 0);
  EXPECT_EQ(t.extractBox({4, 0}, {4, 6}).getShape(),
            (std::vector<int64_t>{0, 6}));
  HostTensor corner = t.extractBox({3, 5}, {4, 6});
  EXPECT_EQ(at<int32_t>(corner, 0), 23);
  // Rank 0: the only box is the tensor.
  HostTensor scalar(ElementType::I32, {});
  set<int32_t>(scalar, 0, 42);
  EXPECT_EQ(at<int32_t>(scalar.extractBox({}, {}), 0), 42);
  // Rank 1.
  HostTensor vector = iota(ElementType::I32, {10});
  HostTensor slice = vector.extractBox({7}, {10});
  EXPECT_EQ(slice.getShape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(at<int32_t>(slice, 2), 9);
}

TEST(HostTensor, FormatElement) {
  HostTensor f32(ElementType::F32, {3});
  set<float>(f32, 0, 1.5f);
  set<float>(f32, 1, -0.0f);
  set<float>(f32, 2, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(f32.formatElement(0), "1.5 (0x3fc00000)");
  EXPECT_EQ(f32.formatElement(1), "-0 (0x80000000)");
  EXPECT_EQ(f32.formatElement(2), "nan (0x7fc00000)");

  HostTensor bf16(ElementType::BF16, {1});
  set<uint16_t>(bf16, 0, 0x3fc0); // 1.5
  EXPECT_EQ(bf16.formatElement(0), "1.5 (0x3fc0)");
  HostTensor f16(ElementType::F16, {1});
  set<uint16_t>(f16, 0, 0xc100); // -2.5
  EXPECT_EQ(f16.formatElement(0), "-2.5 (0xc100)");
  HostTensor f64(ElementType::F64, {1});
  set<double>(f64, 0, 0.25);
  EXPECT_EQ(f64.formatElement(0), "0.25 (0x3fd0000000000000)");

  HostTensor i1(ElementType::I1, {3});
  set<uint8_t>(i1, 1, 1);
  set<uint8_t>(i1, 2, 7);
  EXPECT_EQ(i1.formatElement(0), "false");
  EXPECT_EQ(i1.formatElement(1), "true");
  EXPECT_EQ(i1.formatElement(2), "byte 7");
  HostTensor i8(ElementType::I8, {1});
  set<int8_t>(i8, 0, -5);
  EXPECT_EQ(i8.formatElement(0), "-5");
  HostTensor i64(ElementType::I64, {1});
  set<int64_t>(i64, 0, -(int64_t(1) << 40));
  EXPECT_EQ(i64.formatElement(0), "-1099511627776");
}

TEST(HostTensor, ToStringListsLeadingElements) {
  HostTensor t = iota(ElementType::I32, {2, 3});
  EXPECT_EQ(t.toString(), "2x3xi32 [0, 1, 2, 3, 4, 5]");
  EXPECT_EQ(t.toString(2), "2x3xi32 [0, 1, ...]");
}

TEST(CompareBitExact, EqualTensors) {
  HostTensor a = iota(ElementType::I32, {5, 7});
  EXPECT_FALSE(compareBitExact(a, iota(ElementType::I32, {5, 7})));
  HostTensor empty(ElementType::F32, {0, 3});
  EXPECT_FALSE(compareBitExact(empty, HostTensor(ElementType::F32, {0, 3})));
}

TEST(CompareBitExact, ReportsTheFirstMismatch) {
  HostTensor expected = iota(ElementType::I32, {3, 4});
  HostTensor actual = iota(ElementType::I32, {3, 4});
  set<int32_t>(actual, 9, -1);
  set<int32_t>(actual, 6, 100);
  std::optional<Mismatch> m = compareBitExact(expected, actual);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, "value");
  EXPECT_EQ(m->index, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(m->linearIndex, 6);
  EXPECT_EQ(m->expected, "6");
  EXPECT_EQ(m->actual, "100");
  EXPECT_EQ(m->message(), "value at [1, 2] (linear 6): expected 6, got 100");
}

TEST(CompareBitExact, BitsNotValues) {
  // 0 == -0 and NaN != NaN as floats; bit-exact comparison says otherwise
  // for the first and agrees for identical NaNs.
  HostTensor zero(ElementType::F32, {1});
  HostTensor negZero(ElementType::F32, {1});
  set<float>(negZero, 0, -0.0f);
  std::optional<Mismatch> m = compareBitExact(zero, negZero);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->message(), "value at [0] (linear 0): expected 0 (0x00000000), "
                          "got -0 (0x80000000)");

  HostTensor nan1(ElementType::F32, {1}), nan2(ElementType::F32, {1});
  set<float>(nan1, 0, std::numeric_limits<float>::quiet_NaN());
  set<float>(nan2, 0, std::numeric_limits<float>::quiet_NaN());
  EXPECT_FALSE(compareBitExact(nan1, nan2));
  set<uint32_t>(nan2, 0, 0x7fc00001); // another payload
  EXPECT_TRUE(compareBitExact(nan1, nan2));

  // The last byte of a wide element differs.
  HostTensor a(ElementType::F64, {2}), b(ElementType::F64, {2});
  set<double>(a, 1, 1.0);
  set<double>(b, 1, std::nextafter(1.0, 2.0));
  m = compareBitExact(a, b);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->linearIndex, 1);
}

TEST(CompareBitExact, TypeAndShape) {
  std::optional<Mismatch> m = compareBitExact(
      HostTensor(ElementType::F32, {2}), HostTensor(ElementType::I32, {2}));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->message(), "element type: expected f32, got i32");
  m = compareBitExact(HostTensor(ElementType::F32, {2, 3}),
                      HostTensor(ElementType::F32, {3, 2}));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->message(), "shape: expected [2, 3], got [3, 2]");
}

} // namespace
