//===- LoopbackTest.cpp - Unit tests for the loopback backend -------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// One or more tests per call of the Backend interface on the loopback
// backend: point-to-point in and out of groups, every collective with its
// in-place form and rank order, concurrent communicators over overlapping
// groups, non-contiguous device ids, and the failure modes: deadlocks and
// devices that never join (proved at once, or caught by the timeout), and
// mismatched or invalid calls. Reductions per dtype are in ReduceTest.cpp,
// the randomized stress test in StressTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/Runtime.h"

#include "absl/strings/str_cat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

using namespace polymesh::runtime;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

/// Success paths get a generous deadline (a loaded CI machine or TSan may
/// start threads slowly); failure paths use short ones.
std::unique_ptr<LoopbackBackend>
makeBackend(std::vector<int64_t> devices,
            absl::Duration timeout = absl::Seconds(20),
            bool detectDeadlocks = true) {
  LoopbackOptions options;
  options.timeout = timeout;
  options.detectDeadlocks = detectDeadlocks;
  absl::StatusOr<std::unique_ptr<LoopbackBackend>> backend =
      LoopbackBackend::create(std::move(devices), options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

/// Turns a failed expectation inside a device function into its status, so
/// the test reports the device and the values.
#define RETURN_IF_ERROR(expr)                                                  \
  do {                                                                         \
    absl::Status status_ = (expr);                                             \
    if (!status_.ok())                                                         \
      return status_;                                                          \
  } while (0)

template <typename T>
absl::Status expectEq(const std::vector<T> &actual,
                      const std::vector<T> &expected, int64_t device) {
  if (actual == expected)
    return absl::OkStatus();
  std::string text = absl::StrCat("device ", device, ": got [");
  for (const T &v : actual)
    absl::StrAppend(&text, static_cast<int64_t>(v), " ");
  absl::StrAppend(&text, "] expected [");
  for (const T &v : expected)
    absl::StrAppend(&text, static_cast<int64_t>(v), " ");
  return absl::InternalError(absl::StrCat(text, "]"));
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

TEST(LoopbackCreate, RejectsBadDeviceLists) {
  EXPECT_THAT(LoopbackBackend::create({}).status().message(),
              HasSubstr("needs a device"));
  EXPECT_THAT(LoopbackBackend::create({0, 1, 0}).status().message(),
              HasSubstr("device id 0 appears twice"));
  EXPECT_THAT(LoopbackBackend::create({-1}).status().message(),
              HasSubstr("negative"));
  LoopbackOptions options;
  options.timeout = absl::InfiniteDuration();
  EXPECT_THAT(LoopbackBackend::create({0}, options).status().message(),
              HasSubstr("positive and finite"));
}

TEST(LoopbackCreate, KeepsDeviceOrder) {
  auto backend = makeBackend({9, 4, 7});
  EXPECT_THAT(std::vector<int64_t>(backend->devices().begin(),
                                   backend->devices().end()),
              ::testing::ElementsAre(9, 4, 7));
  EXPECT_TRUE(backend->firstError().ok());
}

//===----------------------------------------------------------------------===//
// send / recv
//===----------------------------------------------------------------------===//

TEST(LoopbackSendRecv, PairOutsideGroup) {
  auto backend = makeBackend({0, 1});
  std::vector<int32_t> received(4, 0);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) {
    std::vector<int32_t> data = {1, 2, 3, 4};
    if (d == 0)
      return backend->send(0, 1, data.data(), 16);
    return backend->recv(1, 0, received.data(), 16);
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(received, (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST(LoopbackSendRecv, MessagesOfOnePairArriveInOrder) {
  auto backend = makeBackend({0, 1});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    for (int32_t i = 0; i < 20; ++i) {
      if (d == 0) {
        // Grouped: the sends post together and still match in call order.
        RETURN_IF_ERROR(backend->groupStart(0));
        int32_t a = 2 * i, b = 2 * i + 1;
        RETURN_IF_ERROR(backend->send(0, 1, &a, 4));
        RETURN_IF_ERROR(backend->send(0, 1, &b, 4));
        RETURN_IF_ERROR(backend->groupEnd(0));
      } else {
        int32_t a = -1, b = -1;
        RETURN_IF_ERROR(backend->recv(1, 0, &a, 4));
        RETURN_IF_ERROR(backend->recv(1, 0, &b, 4));
        RETURN_IF_ERROR(expectEq<int32_t>({a, b}, {2 * i, 2 * i + 1}, d));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackSendRecv, RingInsideGroupDoesNotDeadlock) {
  // Every device sends first: without a group this is the classic deadlock.
  std::vector<int64_t> ids = {0, 1, 2, 3, 4};
  auto backend = makeBackend(ids);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t n = static_cast<int64_t>(ids.size());
    std::vector<int64_t> out = {d, 100 + d}, in(2, -1);
    RETURN_IF_ERROR(backend->groupStart(d));
    RETURN_IF_ERROR(backend->send(d, (d + 1) % n, out.data(), 16));
    RETURN_IF_ERROR(backend->recv(d, (d + n - 1) % n, in.data(), 16));
    RETURN_IF_ERROR(backend->groupEnd(d));
    int64_t from = (d + n - 1) % n;
    return expectEq<int64_t>(in, {from, 100 + from}, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackSendRecv, SwapsAndSelfSendInOneGroup) {
  auto backend = makeBackend({4, 7, 9});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    // 4 <-> 7 swap, 9 sends to itself; nested groups post at the outer end.
    int64_t peer = d == 4 ? 7 : d == 7 ? 4 : 9;
    int64_t out = d * 10, in = -1;
    RETURN_IF_ERROR(backend->groupStart(d));
    RETURN_IF_ERROR(backend->groupStart(d));
    RETURN_IF_ERROR(backend->recv(d, peer, &in, 8));
    RETURN_IF_ERROR(backend->groupEnd(d));
    RETURN_IF_ERROR(backend->send(d, peer, &out, 8));
    RETURN_IF_ERROR(backend->groupEnd(d));
    return expectEq<int64_t>({in}, {peer * 10}, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackSendRecv, ZeroBytes) {
  auto backend = makeBackend({0, 1});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) {
    return d == 0 ? backend->send(0, 1, nullptr, 0)
                  : backend->recv(1, 0, nullptr, 0);
  });
  EXPECT_TRUE(status.ok()) << status;
}

//===----------------------------------------------------------------------===//
// broadcast
//===----------------------------------------------------------------------===//

TEST(LoopbackBroadcast, FromNonZeroRootOnNonContiguousIds) {
  std::vector<int64_t> ids = {4, 7, 9};
  auto backend = makeBackend(ids);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int32_t> send = {int32_t(d), 1, 2}, recv(3, -1);
    // Only the root's send buffer is read: the others pass none.
    RETURN_IF_ERROR(backend->broadcast(
        d, ids, /*root=*/7, d == 7 ? send.data() : nullptr, recv.data(), 12));
    return expectEq<int32_t>(recv, {7, 1, 2}, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackBroadcast, InPlaceOnRoot) {
  std::vector<int64_t> ids = {0, 1, 2, 3};
  auto backend = makeBackend(ids);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int64_t> buf(5, d == 2 ? 42 : -1);
    RETURN_IF_ERROR(
        backend->broadcast(d, ids, /*root=*/2, buf.data(), buf.data(), 40));
    return expectEq<int64_t>(buf, std::vector<int64_t>(5, 42), d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackBroadcast, SubgroupsAndSingleMember) {
  auto backend = makeBackend({0, 1, 2, 3});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int64_t> group =
        d < 2 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{3, 2};
    int64_t root = d < 2 ? 1 : 3;
    int64_t value = d * 11, got = -1;
    RETURN_IF_ERROR(backend->broadcast(d, group, root, &value, &got, 8));
    RETURN_IF_ERROR(expectEq<int64_t>({got}, {root * 11}, d));
    // A group of one completes alone.
    int64_t self = -1;
    RETURN_IF_ERROR(backend->broadcast(d, {d}, d, &value, &self, 8));
    return expectEq<int64_t>({self}, {value}, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

//===----------------------------------------------------------------------===//
// all_gather
//===----------------------------------------------------------------------===//

TEST(LoopbackAllGather, OrderedByRankInMemberList) {
  // Ranks follow the list as given, not device ids: [2, 0, 3, 1].
  std::vector<int64_t> members = {2, 0, 3, 1};
  auto backend = makeBackend({0, 1, 2, 3});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int32_t> send = {int32_t(d), int32_t(d * 10)}, recv(8, -1);
    RETURN_IF_ERROR(
        backend->allGather(d, members, send.data(), recv.data(), 8));
    return expectEq<int32_t>(recv, {2, 20, 0, 0, 3, 30, 1, 10}, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackAllGather, InPlace) {
  std::vector<int64_t> members = {4, 7, 9};
  auto backend = makeBackend(members);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t rank = d == 4 ? 0 : d == 7 ? 1 : 2;
    std::vector<int64_t> buf(3, -1);
    buf[rank] = d;
    RETURN_IF_ERROR(
        backend->allGather(d, members, buf.data() + rank, buf.data(), 8));
    return expectEq<int64_t>(buf, {4, 7, 9}, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

//===----------------------------------------------------------------------===//
// all_to_all
//===----------------------------------------------------------------------===//

TEST(LoopbackAllToAll, ChunkJOfRankIGoesToChunkIOfRankJ) {
  std::vector<int64_t> members = {3, 1, 2};
  auto backend = makeBackend({1, 2, 3});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t rank = d == 3 ? 0 : d == 1 ? 1 : 2;
    std::vector<int32_t> send(3), recv(3, -1);
    for (int j = 0; j < 3; ++j)
      send[j] = int32_t(10 * rank + j); // "from rank, to rank j"
    RETURN_IF_ERROR(backend->allToAll(d, members, send.data(), recv.data(), 4));
    std::vector<int32_t> expected(3);
    for (int i = 0; i < 3; ++i)
      expected[i] = int32_t(10 * i + rank);
    return expectEq<int32_t>(recv, expected, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackAllToAll, InPlace) {
  std::vector<int64_t> members = {0, 1, 2, 3};
  auto backend = makeBackend(members);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int64_t> buf(8);
    for (int j = 0; j < 4; ++j) {
      buf[2 * j] = d;
      buf[2 * j + 1] = j;
    }
    RETURN_IF_ERROR(backend->allToAll(d, members, buf.data(), buf.data(), 16));
    std::vector<int64_t> expected;
    for (int64_t i = 0; i < 4; ++i) {
      expected.push_back(i);
      expected.push_back(d);
    }
    return expectEq<int64_t>(buf, expected, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

//===----------------------------------------------------------------------===//
// all_reduce / reduce_scatter (sum of every dtype is in ReduceTest.cpp)
//===----------------------------------------------------------------------===//

TEST(LoopbackAllReduce, SumMaxMinProdInPlace) {
  std::vector<int64_t> members = {0, 1, 2, 3};
  auto backend = makeBackend(members);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int32_t> x = {int32_t(d), int32_t(-d), int32_t(d + 1)};
    std::vector<int32_t> sum = x, max = x, min = x, prod = x;
    RETURN_IF_ERROR(backend->allReduce(d, members, sum.data(), sum.data(), 3,
                                       DataType::I32, ReduceOp::Sum));
    RETURN_IF_ERROR(backend->allReduce(d, members, max.data(), max.data(), 3,
                                       DataType::I32, ReduceOp::Max));
    RETURN_IF_ERROR(backend->allReduce(d, members, min.data(), min.data(), 3,
                                       DataType::I32, ReduceOp::Min));
    RETURN_IF_ERROR(backend->allReduce(d, members, prod.data(), prod.data(), 3,
                                       DataType::I32, ReduceOp::Prod));
    RETURN_IF_ERROR(expectEq<int32_t>(sum, {6, -6, 10}, d));
    RETURN_IF_ERROR(expectEq<int32_t>(max, {3, 0, 4}, d));
    RETURN_IF_ERROR(expectEq<int32_t>(min, {0, -3, 1}, d));
    return expectEq<int32_t>(prod, {0, 0, 24}, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackReduceScatter, EachRankKeepsItsChunk) {
  std::vector<int64_t> members = {9, 4, 7};
  auto backend = makeBackend({4, 7, 9});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t rank = d == 9 ? 0 : d == 4 ? 1 : 2;
    // Element e of the full array is e + 100 * d on device d.
    std::vector<int64_t> send(6), recv(2, -1);
    std::iota(send.begin(), send.end(), 100 * d);
    RETURN_IF_ERROR(backend->reduceScatter(d, members, send.data(), recv.data(),
                                           2, DataType::I64, ReduceOp::Sum));
    int64_t base = 100 * (4 + 7 + 9);
    return expectEq<int64_t>(
        recv, {base + 3 * (2 * rank), base + 3 * (2 * rank + 1)}, d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackReduceScatter, InPlace) {
  std::vector<int64_t> members = {0, 1};
  auto backend = makeBackend(members);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<float> buf = {1.5f, 2.5f, 3.5f, 4.5f};
    float *mine = buf.data() + 2 * d;
    RETURN_IF_ERROR(backend->reduceScatter(d, members, buf.data(), mine, 2,
                                           DataType::F32, ReduceOp::Max));
    if (mine[0] != buf[2 * d] || buf[2 * d] != (d == 0 ? 1.5f : 3.5f))
      return absl::InternalError(absl::StrCat("device ", d, ": ", buf[2 * d]));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

TEST(LoopbackCommunicators, OverlappingGroupsConcurrently) {
  // Four communicators over overlapping groups; each device runs the
  // collectives it is in, in one global order, many times.
  std::vector<std::vector<int64_t>> groups = {
      {0, 1, 2}, {1, 2, 3}, {0, 3}, {3, 2, 1, 0}};
  auto backend = makeBackend({0, 1, 2, 3});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    for (int round = 0; round < 50; ++round) {
      for (size_t g = 0; g < groups.size(); ++g) {
        const std::vector<int64_t> &members = groups[g];
        auto it = std::find(members.begin(), members.end(), d);
        if (it == members.end())
          continue;
        int64_t value = round * 1000 + int64_t(g) * 100 + d, sum = 0;
        RETURN_IF_ERROR(backend->allReduce(d, members, &value, &sum, 1,
                                           DataType::I64, ReduceOp::Sum));
        int64_t expected = 0;
        for (int64_t m : members)
          expected += round * 1000 + int64_t(g) * 100 + m;
        RETURN_IF_ERROR(expectEq<int64_t>({sum}, {expected}, d));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(backend->numCommunicators(), 4);
}

TEST(LoopbackCommunicators, CollectivesOnTwoGroupsInOneGroupCall) {
  // Devices post the two collectives in opposite orders: outside a group
  // that deadlocks, inside one they post together.
  auto backend = makeBackend({0, 1});
  std::vector<int64_t> a = {0, 1}, b = {1, 0};
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t x = d + 1, gatheredA[2], gatheredB[2];
    RETURN_IF_ERROR(backend->groupStart(d));
    if (d == 0) {
      RETURN_IF_ERROR(backend->allGather(d, a, &x, gatheredA, 8));
      RETURN_IF_ERROR(backend->allGather(d, b, &x, gatheredB, 8));
    } else {
      RETURN_IF_ERROR(backend->allGather(d, b, &x, gatheredB, 8));
      RETURN_IF_ERROR(backend->allGather(d, a, &x, gatheredA, 8));
    }
    RETURN_IF_ERROR(backend->groupEnd(d));
    RETURN_IF_ERROR(expectEq<int64_t>({gatheredA[0], gatheredA[1]}, {1, 2}, d));
    return expectEq<int64_t>({gatheredB[0], gatheredB[1]}, {2, 1}, d);
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(backend->numCommunicators(), 2);
}

TEST(LoopbackCommunicators, CreatedOnceUnderContention) {
  // Sixteen devices create the same communicator at once.
  std::vector<int64_t> ids(16);
  std::iota(ids.begin(), ids.end(), 0);
  auto backend = makeBackend(ids);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int64_t> all(16, -1);
    RETURN_IF_ERROR(backend->allGather(d, ids, &d, all.data(), 8));
    return expectEq<int64_t>(all, ids, d);
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(backend->numCommunicators(), 1);
}

//===----------------------------------------------------------------------===//
// Deadlocks and timeouts
//===----------------------------------------------------------------------===//

TEST(LoopbackDeadlock, RecvWithoutSendIsProvedAtOnce) {
  auto backend = makeBackend({0, 1}, absl::Seconds(20));
  auto start = std::chrono::steady_clock::now();
  int64_t buf = 0;
  absl::Status status = runOnDevices(*backend, [&](int64_t d) {
    if (d == 0)
      return backend->recv(0, 1, &buf, 8);
    return absl::OkStatus(); // device 1 never sends
  });
  EXPECT_LT(secondsSince(start), 10.0);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("deadlock in recv of 8 bytes from device 1 on "
                              "device 0: device 1 never posted the matching "
                              "send (it has finished)"),
                    HasSubstr("waiting: device 0 in recv"),
                    HasSubstr("finished: device 1")));
}

TEST(LoopbackDeadlock, RecvWithoutSendTimesOut) {
  // Without the proof the deadline catches it, on time.
  auto backend = makeBackend({0, 1}, absl::Milliseconds(200),
                             /*detectDeadlocks=*/false);
  auto start = std::chrono::steady_clock::now();
  int64_t buf = 0;
  absl::Status status = runOnDevices(*backend, [&](int64_t d) {
    if (d == 0)
      return backend->recv(0, 1, &buf, 8);
    return absl::OkStatus();
  });
  double elapsed = secondsSince(start);
  EXPECT_GE(elapsed, 0.19);
  EXPECT_LT(elapsed, 5.0);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              HasSubstr("timeout after 200 ms in recv of 8 bytes from device "
                        "1 on device 0: device 1 never posted the matching "
                        "send"));
}

TEST(LoopbackDeadlock, SendsToEachOtherOutsideGroup) {
  auto backend = makeBackend({0, 1});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t out = d, in = -1;
    RETURN_IF_ERROR(backend->send(d, 1 - d, &out, 8));
    return backend->recv(d, 1 - d, &in, 8);
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("never posted the matching recv (it is waiting "
                              "in send of 8 bytes to device"),
                    HasSubstr("waiting: device 0 in send of 8 bytes to device "
                              "1, device 1 in send of 8 bytes to device 0")));
}

TEST(LoopbackDeadlock, DevicesThatNeverJoinAreNamed) {
  std::vector<int64_t> members = {0, 1, 2, 3};
  auto backend = makeBackend(members);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    if (d >= 2)
      return absl::OkStatus();
    int64_t recv[4];
    return backend->allGather(d, members, &d, recv, 8);
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("all_gather #0 on group [0,1,2,3]"),
                    HasSubstr("devices 2 and 3 never joined (devices 0 and 1 "
                              "are waiting)"),
                    HasSubstr("finished: devices 2 and 3")));
}

TEST(LoopbackDeadlock, NeverJoiningTimesOutAndReleasesEveryWaiter) {
  // Plain threads, no launcher: nothing tells the backend that device 3 is
  // gone, so only the deadline can end the wait, and every waiter must
  // return (one with the diagnostic, the others aborted).
  std::vector<int64_t> members = {0, 1, 2, 3};
  auto backend = makeBackend(members, absl::Milliseconds(200));
  std::vector<absl::Status> results(3);
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int64_t d = 0; d < 3; ++d)
    threads.emplace_back([&, d] {
      int64_t recv[4];
      results[d] = backend->allGather(d, members, &d, recv, 8);
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_LT(secondsSince(start), 5.0);
  int timeouts = 0;
  for (const absl::Status &s : results) {
    EXPECT_FALSE(s.ok());
    timeouts += s.code() == absl::StatusCode::kDeadlineExceeded;
  }
  EXPECT_GE(timeouts, 1);
  absl::Status first = backend->firstError();
  EXPECT_THAT(first.message(),
              AllOf(HasSubstr("timeout after 200 ms in all_gather #0 on group "
                              "[0,1,2,3]"),
                    HasSubstr("device 3 never joined (devices 0, 1 and 2 are "
                              "waiting)")));
  // The runtime stays failed: later calls are refused at once.
  int64_t x = 0;
  EXPECT_EQ(backend->send(0, 1, &x, 8).code(), absl::StatusCode::kAborted);
}

TEST(LoopbackDeadlock, WrongMemberListsAreDiagnosed) {
  // Devices 0 and 1 call on [0,1], device 2 on [0,1,2]: two communicators,
  // neither complete.
  auto backend = makeBackend({0, 1, 2});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int64_t> members =
        d == 2 ? std::vector<int64_t>{0, 1, 2} : std::vector<int64_t>{0, 1};
    int64_t x = d, out = 0;
    RETURN_IF_ERROR(backend->allReduce(d, members, &x, &out, 1, DataType::I64,
                                       ReduceOp::Sum));
    // Only 0 and 1 get here; 1 then waits on 0 forever.
    if (d == 1)
      return backend->recv(1, 0, &out, 8);
    return absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("deadlock"),
                    HasSubstr("device 2 in all_reduce #0 on group [0,1,2]")));
}

TEST(LoopbackDeadlock, FinishingInsideAnOpenGroupIsReported) {
  auto backend = makeBackend({0, 1});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t x = 5;
    if (d == 0) {
      RETURN_IF_ERROR(backend->groupStart(0));
      return backend->send(0, 1, &x, 8); // group_end forgotten
    }
    return backend->recv(1, 0, &x, 8);
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("device 0 left a group open"));
}

TEST(LoopbackDeadlock, NoFalseProofAfterALauncherRun) {
  // After runOnDevices no device counts as finished: device 0 may wait for
  // device 1 whose plain thread starts late.
  auto backend = makeBackend({0, 1});
  ASSERT_TRUE(
      runOnDevices(*backend, [](int64_t) { return absl::OkStatus(); }).ok());
  int64_t in = -1, out = 7;
  absl::Status received;
  std::thread receiver([&] { received = backend->recv(0, 1, &in, 8); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  absl::Status sent = backend->send(1, 0, &out, 8);
  receiver.join();
  EXPECT_TRUE(sent.ok()) << sent;
  EXPECT_TRUE(received.ok()) << received;
  EXPECT_EQ(in, 7);
}

//===----------------------------------------------------------------------===//
// Mismatched and invalid calls
//===----------------------------------------------------------------------===//

TEST(LoopbackErrors, MismatchedAllGatherSizes) {
  std::vector<int64_t> members = {0, 1, 2};
  auto backend = makeBackend(members);
  auto start = std::chrono::steady_clock::now();
  absl::Status status = runOnDevices(*backend, [&](int64_t d) {
    int64_t bytes = d == 1 ? 16 : 8;
    std::vector<char> send(16), recv(48);
    return backend->allGather(d, members, send.data(), recv.data(), bytes);
  });
  EXPECT_LT(secondsSince(start), 10.0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              ::testing::MatchesRegex(
                  "mismatched all_gather #0 on group \\[0,1,2\\]: device [0-2] "
                  "passed bytes per rank (8|16) but device [0-2] passed "
                  "(8|16)"));
}

TEST(LoopbackErrors, MismatchedSendRecvSizes) {
  auto backend = makeBackend({0, 1});
  absl::Status status = runOnDevices(*backend, [&](int64_t d) {
    std::vector<char> buf(16);
    return d == 0 ? backend->send(0, 1, buf.data(), 16)
                  : backend->recv(1, 0, buf.data(), 8);
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("mismatched send/recv: device 0 sends 16 bytes to "
                        "device 1, which receives 8 bytes from it"));
}

TEST(LoopbackErrors, MismatchedKindsRootsDtypesOps) {
  struct Case {
    std::function<absl::Status(LoopbackBackend &, int64_t)> call;
    const char *message;
  };
  std::vector<int64_t> members = {0, 1};
  std::vector<Case> cases = {
      {[&](LoopbackBackend &b, int64_t d) {
         int64_t x = 0, y[2];
         return d == 0 ? b.allGather(d, members, &x, y, 8)
                       : b.broadcast(d, members, 0, &x, &x, 8);
       },
       "mismatched collectives: call #0 on group [0,1] is"},
      {[&](LoopbackBackend &b, int64_t d) {
         int64_t x = 0;
         return b.broadcast(d, members, /*root=*/d, &x, &x, 8);
       },
       "passed root"},
      {[&](LoopbackBackend &b, int64_t d) {
         int64_t x = 0, y = 0;
         return b.allReduce(d, members, &x, &y, 1,
                            d == 0 ? DataType::I64 : DataType::F64,
                            ReduceOp::Sum);
       },
       "passed dtype"},
      {[&](LoopbackBackend &b, int64_t d) {
         int64_t x = 0, y = 0;
         return b.allReduce(d, members, &x, &y, 1, DataType::I64,
                            d == 0 ? ReduceOp::Sum : ReduceOp::Max);
       },
       "passed op"},
  };
  for (const Case &c : cases) {
    auto backend = makeBackend(members);
    absl::Status status =
        runOnDevices(*backend, [&](int64_t d) { return c.call(*backend, d); });
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
}

TEST(LoopbackErrors, InvalidArguments) {
  struct Case {
    std::function<absl::Status(LoopbackBackend &)> call;
    const char *message;
  };
  int64_t x = 0, y[4];
  std::vector<Case> cases = {
      {[&](LoopbackBackend &b) {
         return b.allGather(0, {1, 2}, &x, y, 8);
       },
       "all_gather on group [1,2]: device 0 called it but is not a member"},
      {[&](LoopbackBackend &b) {
         return b.broadcast(0, {0, 1}, 2, &x, &x, 8);
       },
       "broadcast on group [0,1]: root 2 is not a member"},
      {[&](LoopbackBackend &b) {
         return b.allGather(0, {0, 5}, &x, y, 8);
       },
       "member 5 is not a device of this runtime [0,1,2]"},
      {[&](LoopbackBackend &b) {
         return b.allGather(0, {0, 1, 0}, &x, y, 8);
       },
       "device 0 appears twice"},
      {[&](LoopbackBackend &b) { return b.allGather(0, {}, &x, y, 8); },
       "empty group"},
      {[&](LoopbackBackend &b) { return b.send(7, 0, &x, 8); },
       "calling device 7 is not a device of this runtime"},
      {[&](LoopbackBackend &b) { return b.recv(0, 9, &x, 8); },
       "recv: peer 9 is not a device of this runtime"},
      {[&](LoopbackBackend &b) { return b.send(0, 1, &x, -8); },
       "negative size -8"},
      {[&](LoopbackBackend &b) { return b.allGather(0, {0}, &x, nullptr, 8); },
       "recv buffer is null for 8 bytes"},
      {[&](LoopbackBackend &b) {
         return b.allReduce(0, {0}, &x, &x, 1, static_cast<DataType>(42),
                            ReduceOp::Sum);
       },
       "unknown dtype code 42"},
      {[&](LoopbackBackend &b) { return b.groupEnd(0); },
       "group_end on device 0 without a group_start"},
      {[&](LoopbackBackend &b) {
         return b.allGather(0, {0, 1}, &x, y, int64_t(1) << 62);
       },
       "buffer size overflows"},
  };
  for (const Case &c : cases) {
    auto backend = makeBackend({0, 1, 2});
    absl::Status status = c.call(*backend);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr(c.message));
    EXPECT_EQ(backend->firstError(), status);
  }
}

TEST(LoopbackErrors, OneErrorReleasesEveryWaiterAtOnce) {
  // Device 2 fails on its own; devices 0 and 1 wait for it in a collective
  // and must be released well before the 20 s deadline.
  std::vector<int64_t> members = {0, 1, 2};
  auto backend = makeBackend(members, absl::Seconds(20),
                             /*detectDeadlocks=*/false);
  auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> results(3);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) {
    if (d == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      results[d] = absl::InternalError("bad input");
    } else {
      int64_t y[3];
      results[d] = backend->allGather(d, members, &d, y, 8);
    }
    return results[d];
  });
  EXPECT_LT(secondsSince(start), 10.0);
  EXPECT_EQ(status.message(), "device 2: bad input");
  EXPECT_EQ(results[0].code(), absl::StatusCode::kAborted);
  EXPECT_EQ(results[1].code(), absl::StatusCode::kAborted);
  EXPECT_THAT(results[0].message(),
              HasSubstr("aborted because of an earlier error: device 2: bad "
                        "input"));
}

TEST(LoopbackErrors, TwoThreadsCallingForOneDevice) {
  auto backend = makeBackend({0, 1}, absl::Seconds(20));
  absl::Status blockedResult;
  std::thread blocked([&] {
    int64_t x = 0;
    blockedResult = backend->recv(0, 1, &x, 8); // waits: no sender
  });
  // Give the first thread time to block; if it has not, the second call
  // still fails (then the first one is refused as aborted).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int64_t y = 0;
  absl::Status second = backend->send(0, 1, &y, 8);
  blocked.join();
  EXPECT_FALSE(second.ok());
  EXPECT_FALSE(blockedResult.ok());
  EXPECT_THAT(backend->firstError().message(),
              HasSubstr("device 0 called the runtime while another thread is "
                        "in a call for it"));
}

} // namespace
