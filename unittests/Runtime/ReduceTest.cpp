//===- ReduceTest.cpp - Reductions per dtype and 16-bit floats ------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The f16/bf16 conversions (exhaustive round trips, rounding ties, overflow,
// subnormals, NaN), all_reduce and reduce_scatter sums for every dtype
// through the loopback backend, and the documented rounding rule: 16-bit
// floats are combined in f32 and rounded once, integers wrap.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/Runtime.h"

#include "absl/strings/str_cat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace polymesh::runtime;

namespace {

std::unique_ptr<LoopbackBackend> makeBackend(std::vector<int64_t> devices) {
  LoopbackOptions options;
  options.timeout = absl::Seconds(20);
  auto backend = LoopbackBackend::create(std::move(devices), options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return *std::move(backend);
}

float bitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

TEST(Float16, ExhaustiveRoundTrip) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    uint16_t h = static_cast<uint16_t>(bits);
    float f = f16ToFloat(h);
    bool isNan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    EXPECT_EQ(std::isnan(f), isNan) << std::hex << bits;
    if (isNan)
      EXPECT_TRUE(floatToF16(f) & 0x200u) << "quiet NaN expected";
    else
      ASSERT_EQ(floatToF16(f), h) << std::hex << bits;
  }
}

TEST(Float16, Rounding) {
  EXPECT_EQ(floatToF16(1.0f), 0x3c00);
  EXPECT_EQ(floatToF16(-2.0f), 0xc000);
  EXPECT_EQ(floatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(floatToF16(65519.99f), 0x7bff);
  EXPECT_EQ(floatToF16(65520.0f), 0x7c00); // the tie goes to infinity
  EXPECT_EQ(floatToF16(1e10f), 0x7c00);
  EXPECT_EQ(floatToF16(-INFINITY), 0xfc00);
  EXPECT_EQ(floatToF16(-0.0f), 0x8000);
  // Ties to even between 1 and 1 + 2^-10.
  EXPECT_EQ(floatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(floatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties to 0; 3*2^-25 to 2*2^-24.
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(floatToF16(3 * std::ldexp(1.0f, -25)), 0x0002);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  EXPECT_EQ(f16ToFloat(0x0001), std::ldexp(1.0f, -24));
}

TEST(BFloat16, ExhaustiveRoundTrip) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    uint16_t b = static_cast<uint16_t>(bits);
    float f = bf16ToFloat(b);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(f))));
    else
      ASSERT_EQ(floatToBf16(f), b) << std::hex << bits;
  }
}

TEST(BFloat16, Rounding) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even.
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(floatToBf16(bitsFloat(0x7f7fffffu)), 0x7f80); // overflow to inf
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
}

//===----------------------------------------------------------------------===//
// Sums per dtype through the backend
//===----------------------------------------------------------------------===//

/// Device d contributes element e = (e + 1) * (d + 1) - 3, encoded as `type`.
std::vector<char> encode(DataType type, const std::vector<int64_t> &values) {
  int64_t size = dataTypeSize(type);
  std::vector<char> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    char *out = bytes.data() + i * size;
    int64_t v = values[i];
    switch (type) {
    case DataType::F32: {
      float f = static_cast<float>(v);
      std::memcpy(out, &f, 4);
      break;
    }
    case DataType::F64: {
      double f = static_cast<double>(v);
      std::memcpy(out, &f, 8);
      break;
    }
    case DataType::F16: {
      uint16_t h = floatToF16(static_cast<float>(v));
      std::memcpy(out, &h, 2);
      break;
    }
    case DataType::BF16: {
      uint16_t h = floatToBf16(static_cast<float>(v));
      std::memcpy(out, &h, 2);
      break;
    }
    case DataType::I32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(out, &x, 4);
      break;
    }
    case DataType::I64:
      std::memcpy(out, &v, 8);
      break;
    case DataType::I8:
    case DataType::U8: {
      uint8_t x = static_cast<uint8_t>(v); // wraps, as the runtime does
      std::memcpy(out, &x, 1);
      break;
    }
    }
  }
  return bytes;
}

class SumPerDtype : public ::testing::TestWithParam<DataType> {};

TEST_P(SumPerDtype, AllReduceAndReduceScatter) {
  DataType type = GetParam();
  std::vector<int64_t> members = {5, 2, 8};
  auto backend = makeBackend({2, 5, 8});
  const int64_t count = 6;
  auto input = [&](int64_t d) {
    std::vector<int64_t> v(count * 3);
    for (int64_t e = 0; e < count * 3; ++e)
      v[e] = (e + 1) * (d + 1) - 3;
    return v;
  };
  std::vector<int64_t> sum(count * 3, 0);
  for (int64_t d : members)
    for (int64_t e = 0; e < count * 3; ++e)
      sum[e] += input(d)[e];
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t rank = d == 5 ? 0 : d == 2 ? 1 : 2;
    std::vector<char> send = encode(type, input(d));
    std::vector<char> all(send.size()), mine(send.size() / 3);
    if (absl::Status s = backend->allReduce(d, members, send.data(), all.data(),
                                            count * 3, type, ReduceOp::Sum);
        !s.ok())
      return s;
    if (all != encode(type, sum))
      return absl::InternalError(
          absl::StrCat("all_reduce ", dataTypeName(type), " on ", d));
    if (absl::Status s = backend->reduceScatter(
            d, members, send.data(), mine.data(), count, type, ReduceOp::Sum);
        !s.ok())
      return s;
    std::vector<int64_t> chunk(sum.begin() + rank * count,
                               sum.begin() + (rank + 1) * count);
    if (mine != encode(type, chunk))
      return absl::InternalError(
          absl::StrCat("reduce_scatter ", dataTypeName(type), " on ", d));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SumPerDtype,
                         ::testing::Values(DataType::F32, DataType::F64,
                                           DataType::F16, DataType::BF16,
                                           DataType::I32, DataType::I64,
                                           DataType::I8, DataType::U8),
                         [](const ::testing::TestParamInfo<DataType> &info) {
                           return std::string(dataTypeName(info.param));
                         });

//===----------------------------------------------------------------------===//
// Rounding and overflow rules
//===----------------------------------------------------------------------===//

/// All-reduce of one element per device; returns what device 0 received.
template <typename T>
T allReduceOne(DataType type, ReduceOp op, std::vector<T> values) {
  std::vector<int64_t> ids(values.size());
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int64_t>(i);
  auto backend = makeBackend(ids);
  T result{};
  absl::Status status = runOnDevices(*backend, [&](int64_t d) {
    T out{};
    absl::Status s = backend->allReduce(d, ids, &values[d], &out, 1, type, op);
    if (d == 0)
      result = out;
    return s;
  });
  EXPECT_TRUE(status.ok()) << status;
  return result;
}

TEST(ReduceRounding, Bf16SumRoundsOnceInF32) {
  // 1 + 2^-8 + 2^-8: rounding after each step would give 1 (the first sum
  // ties to even); combining in f32 and rounding once gives 1 + 2^-7.
  float tiny = std::ldexp(1.0f, -8);
  uint16_t got = allReduceOne<uint16_t>(
      DataType::BF16, ReduceOp::Sum,
      {floatToBf16(1.0f), floatToBf16(tiny), floatToBf16(tiny)});
  EXPECT_EQ(bf16ToFloat(got), 1.0f + std::ldexp(1.0f, -7));
}

TEST(ReduceRounding, F16SumRoundsOnceInF32) {
  float tiny = std::ldexp(1.0f, -11);
  uint16_t got = allReduceOne<uint16_t>(
      DataType::F16, ReduceOp::Sum,
      {floatToF16(1.0f), floatToF16(tiny), floatToF16(tiny)});
  EXPECT_EQ(f16ToFloat(got), 1.0f + std::ldexp(1.0f, -10));
}

TEST(ReduceRounding, F16SumOverflowsToInfinity) {
  uint16_t got =
      allReduceOne<uint16_t>(DataType::F16, ReduceOp::Sum,
                             {floatToF16(60000.0f), floatToF16(60000.0f)});
  EXPECT_EQ(got, 0x7c00);
}

TEST(ReduceRounding, IntegersWrap) {
  EXPECT_EQ(allReduceOne<int8_t>(DataType::I8, ReduceOp::Sum, {100, 100}), -56);
  EXPECT_EQ(allReduceOne<uint8_t>(DataType::U8, ReduceOp::Sum, {200, 100}), 44);
  EXPECT_EQ(allReduceOne<int32_t>(DataType::I32, ReduceOp::Sum,
                                  {std::numeric_limits<int32_t>::max(), 1}),
            std::numeric_limits<int32_t>::min());
  EXPECT_EQ(allReduceOne<int8_t>(DataType::I8, ReduceOp::Max, {-5, 3, -7}), 3);
  EXPECT_EQ(allReduceOne<int8_t>(DataType::I8, ReduceOp::Min, {-5, 3, -7}), -7);
}

TEST(ReduceRounding, BoolsAsU8) {
  // i1 is reduced as u8: max is "or", min is "and".
  EXPECT_EQ(allReduceOne<uint8_t>(DataType::U8, ReduceOp::Max, {0, 1, 0}), 1);
  EXPECT_EQ(allReduceOne<uint8_t>(DataType::U8, ReduceOp::Min, {1, 1, 0}), 0);
  EXPECT_EQ(allReduceOne<uint8_t>(DataType::U8, ReduceOp::Min, {1, 1, 1}), 1);
}

TEST(ReduceRounding, MaxAndMinPropagateNaN) {
  EXPECT_TRUE(std::isnan(
      allReduceOne<float>(DataType::F32, ReduceOp::Max, {1.0f, NAN, 2.0f})));
  EXPECT_TRUE(std::isnan(
      allReduceOne<double>(DataType::F64, ReduceOp::Min, {NAN, 1.0, 2.0})));
  EXPECT_EQ(
      allReduceOne<double>(DataType::F64, ReduceOp::Prod, {1.5, -2.0, 4.0}),
      -12.0);
}

TEST(ReduceArrays, OutputMayAliasAnInput) {
  std::vector<int32_t> a = {1, 2, 3}, b = {10, 20, 30};
  const void *inputs[] = {a.data(), b.data()};
  reduceArrays(DataType::I32, ReduceOp::Sum, inputs, 2, 3, b.data());
  EXPECT_EQ(b, (std::vector<int32_t>{11, 22, 33}));
}

TEST(DataTypes, SizesNamesAndCodes) {
  EXPECT_EQ(dataTypeSize(DataType::BF16), 2);
  EXPECT_EQ(dataTypeSize(DataType::F64), 8);
  EXPECT_EQ(dataTypeSize(DataType::U8), 1);
  EXPECT_STREQ(dataTypeName(DataType::BF16), "bf16");
  EXPECT_STREQ(reduceOpName(ReduceOp::Min), "min");
  EXPECT_FALSE(dataTypeFromCode(8).ok());
  EXPECT_FALSE(reduceOpFromCode(-1).ok());
  EXPECT_EQ(*dataTypeFromCode(POLYMESH_RT_I64), DataType::I64);
}

} // namespace
