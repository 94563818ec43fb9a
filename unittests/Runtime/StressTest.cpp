//===- StressTest.cpp - Randomized rounds of collectives ------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Many rounds of random calls on random groups (random subsets of
// non-contiguous device ids, in random rank order) with random sizes, dtypes,
// reduction ops and in-place forms, checked against a host reference. Every
// device runs the calls it takes part in, in one global order, so the
// schedule cannot deadlock; inputs are a hash of (seed, call, device,
// element), so each device computes the expected output of every call
// itself. Reduction inputs are small integers: the exact result, encoded in
// the dtype (integers wrap), is the reference for every dtype and op.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/Runtime.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace polymesh::runtime;

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

enum class Kind {
  Permute,
  Broadcast,
  AllGather,
  AllToAll,
  AllReduce,
  ReduceScatter,
  GroupedPair,
};
constexpr int kNumKinds = 7;

struct Call {
  Kind kind = Kind::Permute;
  std::vector<int64_t> members;
  /// Permute: rank i sends to rank perm[i].
  std::vector<int64_t> perm;
  /// GroupedPair: the second collective's members (an all-gather posted in
  /// one group with an all-reduce over `members`).
  std::vector<int64_t> otherMembers;
  int64_t root = 0;
  int64_t count = 0;
  DataType type = DataType::I32;
  ReduceOp op = ReduceOp::Sum;
  bool inPlace = false;

  int64_t rankOf(int64_t device) const {
    auto it = std::find(members.begin(), members.end(), device);
    return it == members.end() ? -1 : it - members.begin();
  }
};

std::vector<Call> makeSchedule(uint64_t seed, const std::vector<int64_t> &ids,
                               int numCalls) {
  std::mt19937_64 rng(seed);
  auto randomGroup = [&] {
    std::vector<int64_t> group = ids;
    std::shuffle(group.begin(), group.end(), rng);
    group.resize(1 + rng() % ids.size());
    return group;
  };
  std::vector<Call> calls(numCalls);
  for (Call &call : calls) {
    call.kind = static_cast<Kind>(rng() % kNumKinds);
    call.members = randomGroup();
    call.count = static_cast<int64_t>(rng() % 34);
    call.inPlace = rng() % 2;
    call.root = call.members[rng() % call.members.size()];
    call.type = static_cast<DataType>(rng() % kNumDataTypes);
    call.op = static_cast<ReduceOp>(rng() % kNumReduceOps);
    call.perm.resize(call.members.size());
    for (size_t i = 0; i < call.perm.size(); ++i)
      call.perm[i] = static_cast<int64_t>(i);
    std::shuffle(call.perm.begin(), call.perm.end(), rng);
    call.otherMembers = randomGroup();
  }
  return calls;
}

/// Byte-moving calls carry int32 words.
int32_t word(uint64_t seed, int64_t call, int64_t device, int64_t index) {
  return static_cast<int32_t>(
      mix(seed ^ mix(call * 1000003 + device * 7919 + index)));
}

/// Reduction inputs: small integers, non-negative for u8.
int64_t small(uint64_t seed, int64_t call, int64_t device, int64_t index,
              DataType type) {
  int64_t v = static_cast<int64_t>(
      mix(seed + mix(call * 31 + device * 131 + index * 17)) % 17);
  return type == DataType::U8 ? v / 2 : v - 8;
}

void encode(DataType type, int64_t v, char *out) {
  switch (type) {
  case DataType::F32: {
    float f = static_cast<float>(v);
    std::memcpy(out, &f, 4);
    return;
  }
  case DataType::F64: {
    double f = static_cast<double>(v);
    std::memcpy(out, &f, 8);
    return;
  }
  case DataType::F16: {
    uint16_t h = floatToF16(static_cast<float>(v));
    std::memcpy(out, &h, 2);
    return;
  }
  case DataType::BF16: {
    uint16_t h = floatToBf16(static_cast<float>(v));
    std::memcpy(out, &h, 2);
    return;
  }
  case DataType::I32: {
    int32_t x = static_cast<int32_t>(v);
    std::memcpy(out, &x, 4);
    return;
  }
  case DataType::I64:
    std::memcpy(out, &v, 8);
    return;
  case DataType::I8:
  case DataType::U8: {
    uint8_t x = static_cast<uint8_t>(v);
    std::memcpy(out, &x, 1);
    return;
  }
  }
}

/// Equal values: floats compare by value, since a product of a zero and a
/// negative number is -0 while the integer reference encodes +0.
bool sameValues(DataType type, const char *a, const char *b, int64_t count) {
  int64_t size = dataTypeSize(type);
  for (int64_t e = 0; e < count; ++e) {
    const char *x = a + e * size, *y = b + e * size;
    double fx, fy;
    switch (type) {
    case DataType::F32: {
      float f, g;
      std::memcpy(&f, x, 4);
      std::memcpy(&g, y, 4);
      fx = f, fy = g;
      break;
    }
    case DataType::F64:
      std::memcpy(&fx, x, 8);
      std::memcpy(&fy, y, 8);
      break;
    case DataType::F16:
    case DataType::BF16: {
      uint16_t h, k;
      std::memcpy(&h, x, 2);
      std::memcpy(&k, y, 2);
      auto widen = type == DataType::F16 ? f16ToFloat : bf16ToFloat;
      fx = widen(h), fy = widen(k);
      break;
    }
    default:
      if (std::memcmp(x, y, size) != 0)
        return false;
      continue;
    }
    if (fx != fy)
      return false;
  }
  return true;
}

int64_t combineExact(ReduceOp op, int64_t a, int64_t b) {
  switch (op) {
  case ReduceOp::Sum:
    return a + b;
  case ReduceOp::Prod:
    return a * b;
  case ReduceOp::Max:
    return std::max(a, b);
  case ReduceOp::Min:
    return std::min(a, b);
  }
  return a;
}

class Runner {
public:
  Runner(Backend &backend, uint64_t seed) : backend(backend), seed(seed) {}

  absl::Status run(const Call &call, int64_t index, int64_t d) {
    switch (call.kind) {
    case Kind::Permute:
      return permute(call, index, d);
    case Kind::Broadcast:
      return broadcast(call, index, d);
    case Kind::AllGather:
      return allGather(call, index, d);
    case Kind::AllToAll:
      return allToAll(call, index, d);
    case Kind::AllReduce:
    case Kind::ReduceScatter:
      return reduce(call, index, d);
    case Kind::GroupedPair:
      return groupedPair(call, index, d);
    }
    return absl::OkStatus();
  }

private:
  std::vector<int32_t> words(int64_t index, int64_t device, int64_t n,
                             int64_t offset = 0) const {
    std::vector<int32_t> out(n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = word(seed, index, device, offset + i);
    return out;
  }

  static absl::Status check(bool ok, const Call &call, int64_t index, int64_t d,
                            absl::string_view what) {
    if (ok)
      return absl::OkStatus();
    return absl::InternalError(absl::StrCat(
        "call ", index, " (", what, " on [", absl::StrJoin(call.members, ","),
        "], count ", call.count, ", ", dataTypeName(call.type), " ",
        reduceOpName(call.op), ", in place ", call.inPlace,
        "): wrong result on device ", d));
  }

  absl::Status permute(const Call &call, int64_t index, int64_t d) {
    int64_t r = call.rankOf(d);
    int64_t n = static_cast<int64_t>(call.members.size());
    int64_t to = call.members[call.perm[r]], from = -1;
    for (int64_t i = 0; i < n; ++i)
      if (call.perm[i] == r)
        from = call.members[i];
    std::vector<int32_t> out = words(index, d, call.count), in(call.count, 0);
    int64_t bytes = call.count * 4;
    // Receives first on odd devices: the order inside a group is free.
    absl::Status s = backend.groupStart(d);
    if (s.ok() && d % 2)
      s = backend.recv(d, from, in.data(), bytes);
    if (s.ok())
      s = backend.send(d, to, out.data(), bytes);
    if (s.ok() && !(d % 2))
      s = backend.recv(d, from, in.data(), bytes);
    if (s.ok())
      s = backend.groupEnd(d);
    if (!s.ok())
      return s;
    return check(in == words(index, from, call.count), call, index, d,
                 "permute");
  }

  absl::Status broadcast(const Call &call, int64_t index, int64_t d) {
    std::vector<int32_t> send = words(index, d, call.count),
                         recv(call.count, 0);
    void *out = call.inPlace && d == call.root ? send.data() : recv.data();
    if (absl::Status s = backend.broadcast(d, call.members, call.root,
                                           send.data(), out, call.count * 4);
        !s.ok())
      return s;
    const int32_t *got = static_cast<const int32_t *>(out);
    return check(std::vector<int32_t>(got, got + call.count) ==
                     words(index, call.root, call.count),
                 call, index, d, "broadcast");
  }

  absl::Status allGather(const Call &call, int64_t index, int64_t d) {
    int64_t n = static_cast<int64_t>(call.members.size());
    int64_t r = call.rankOf(d);
    std::vector<int32_t> mine = words(index, d, call.count);
    std::vector<int32_t> recv(n * call.count, 0);
    const void *send = mine.data();
    if (call.inPlace) {
      std::copy(mine.begin(), mine.end(), recv.begin() + r * call.count);
      send = recv.data() + r * call.count;
    }
    if (absl::Status s = backend.allGather(d, call.members, send, recv.data(),
                                           call.count * 4);
        !s.ok())
      return s;
    std::vector<int32_t> expected;
    for (int64_t m : call.members) {
      std::vector<int32_t> part = words(index, m, call.count);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    return check(recv == expected, call, index, d, "all_gather");
  }

  absl::Status allToAll(const Call &call, int64_t index, int64_t d) {
    int64_t n = static_cast<int64_t>(call.members.size());
    int64_t r = call.rankOf(d);
    std::vector<int32_t> send = words(index, d, n * call.count);
    std::vector<int32_t> recv(n * call.count, 0);
    std::vector<int32_t> &out = call.inPlace ? send : recv;
    if (absl::Status s = backend.allToAll(d, call.members, send.data(),
                                          out.data(), call.count * 4);
        !s.ok())
      return s;
    std::vector<int32_t> expected;
    for (int64_t m : call.members) {
      std::vector<int32_t> part = words(index, m, call.count, r * call.count);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    return check(out == expected, call, index, d, "all_to_all");
  }

  absl::Status reduce(const Call &call, int64_t index, int64_t d) {
    int64_t n = static_cast<int64_t>(call.members.size());
    int64_t r = call.rankOf(d);
    bool scatter = call.kind == Kind::ReduceScatter;
    int64_t total = scatter ? n * call.count : call.count;
    int64_t size = dataTypeSize(call.type);
    std::vector<char> send(total * size), recv(call.count * size);
    for (int64_t e = 0; e < total; ++e)
      encode(call.type, small(seed, index, d, e, call.type),
             send.data() + e * size);
    void *out = recv.data();
    if (call.inPlace)
      out = send.data() + (scatter ? r * call.count * size : 0);
    absl::Status s =
        scatter ? backend.reduceScatter(d, call.members, send.data(), out,
                                        call.count, call.type, call.op)
                : backend.allReduce(d, call.members, send.data(), out,
                                    call.count, call.type, call.op);
    if (!s.ok())
      return s;
    std::vector<char> expected(call.count * size);
    for (int64_t e = 0; e < call.count; ++e) {
      int64_t element = scatter ? r * call.count + e : e;
      int64_t acc = 0;
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = small(seed, index, call.members[i], element, call.type);
        acc = i == 0 ? v : combineExact(call.op, acc, v);
      }
      encode(call.type, acc, expected.data() + e * size);
    }
    return check(sameValues(call.type, static_cast<const char *>(out),
                            expected.data(), call.count),
                 call, index, d, scatter ? "reduce_scatter" : "all_reduce");
  }

  absl::Status groupedPair(const Call &call, int64_t index, int64_t d) {
    bool inSum = call.rankOf(d) >= 0;
    const std::vector<int64_t> &gatherGroup = call.otherMembers;
    auto gatherIt = std::find(gatherGroup.begin(), gatherGroup.end(), d);
    bool inGather = gatherIt != gatherGroup.end();
    int64_t gn = static_cast<int64_t>(gatherGroup.size());
    std::vector<int64_t> value(call.count, d + index), sum(call.count, 0);
    std::vector<int32_t> mine = words(index, d, call.count),
                         gathered(gn * call.count, 0);
    auto postSum = [&] {
      return backend.allReduce(d, call.members, value.data(), sum.data(),
                               call.count, DataType::I64, ReduceOp::Sum);
    };
    auto postGather = [&] {
      return backend.allGather(d, gatherGroup, mine.data(), gathered.data(),
                               call.count * 4);
    };
    // Two communicators may be posted in any order within a group; one
    // communicator's calls must keep one order on every member.
    bool reversed = d % 2 && call.members != gatherGroup;
    absl::Status s = backend.groupStart(d);
    if (s.ok() && inGather && reversed)
      s = postGather();
    if (s.ok() && inSum)
      s = postSum();
    if (s.ok() && inGather && !reversed)
      s = postGather();
    if (s.ok())
      s = backend.groupEnd(d);
    if (!s.ok())
      return s;
    if (inSum) {
      int64_t expected = 0;
      for (int64_t m : call.members)
        expected += m + index;
      for (int64_t v : sum)
        if (v != expected)
          return check(false, call, index, d, "grouped all_reduce");
    }
    if (inGather) {
      std::vector<int32_t> expected;
      for (int64_t m : gatherGroup) {
        std::vector<int32_t> part = words(index, m, call.count);
        expected.insert(expected.end(), part.begin(), part.end());
      }
      return check(gathered == expected, call, index, d, "grouped all_gather");
    }
    return absl::OkStatus();
  }

  Backend &backend;
  uint64_t seed;
};

class LoopbackStress : public ::testing::TestWithParam<uint64_t> {};

TEST_P(LoopbackStress, RandomCallsMatchTheHostReference) {
  const std::vector<int64_t> ids = {0, 2, 3, 5, 8, 11, 12};
  const int numCalls = 300;
  uint64_t seed = GetParam();
  std::vector<Call> calls = makeSchedule(seed, ids, numCalls);
  LoopbackOptions options;
  options.timeout = absl::Seconds(30);
  auto backend = LoopbackBackend::create(ids, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  Runner runner(**backend, seed);
  absl::Status status = runOnDevices(**backend, [&](int64_t d) {
    for (int64_t i = 0; i < numCalls; ++i) {
      const Call &call = calls[i];
      bool member = call.rankOf(d) >= 0;
      if (call.kind == Kind::GroupedPair)
        member |= std::find(call.otherMembers.begin(), call.otherMembers.end(),
                            d) != call.otherMembers.end();
      if (!member)
        continue;
      if (absl::Status s = runner.run(call, i, d); !s.ok())
        return s;
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << "seed " << seed << ": " << status;
}

INSTANTIATE_TEST_SUITE_P(Seeds, LoopbackStress,
                         ::testing::Values(1, 2, 3, 0x5eed));

} // namespace
