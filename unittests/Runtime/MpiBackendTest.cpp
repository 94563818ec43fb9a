//===- MpiBackendTest.cpp - The MPI backend across processes --------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Runs under `mpiexec -np P` (ctest runs it with 2 and 3 processes): every
// rank runs every test in the same order, each over one MPI backend whose
// devices are spread three per process, with ids that are neither
// contiguous in list order nor in rank order. Every call is checked with
// pairs inside one process (the in-memory mailbox) and across processes
// (MPI messages), reductions against reduceArrays in member order (bit for
// bit, as the loopback backend gives), and the failure modes: a size that
// does not match, a receive nobody sends (a timeout naming the peer and its
// rank, the other ranks aborted with that rank's message), devices no
// process owns. Also the MPI store that carries NCCL's unique ids between
// processes.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/MpiBackend.h"

#include "absl/strings/str_cat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

using namespace polymesh::runtime;
using ::testing::HasSubstr;

namespace {

MpiWorld *world = nullptr;

constexpr int64_t kPerRank = 3;

/// Three devices per rank; list order is not id order, and the ids of rank
/// r are 3r..3r+2 (ownership by d / 3).
std::vector<int64_t> worldDevices() {
  std::vector<int64_t> devices;
  for (int64_t d = kPerRank * world->size() - 1; d >= 0; --d)
    devices.push_back(d);
  std::rotate(devices.begin(), devices.begin() + 1, devices.end());
  return devices;
}

std::unique_ptr<MpiBackend>
makeBackend(std::vector<int64_t> devices,
            absl::Duration timeout = absl::Seconds(30)) {
  MpiOptions options;
  options.timeout = timeout;
  options.ownership = DeviceOwnership::over(devices, world->size(), kPerRank);
  options.epoch = world->nextEpoch();
  absl::StatusOr<std::unique_ptr<MpiBackend>> backend =
      MpiBackend::create(*world, std::move(devices), options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

/// A device's data: distinct per device and per position.
std::vector<int32_t> stamp(int64_t device, int64_t count, int32_t salt = 0) {
  std::vector<int32_t> data(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    data[static_cast<size_t>(i)] =
        static_cast<int32_t>(device * 1000 + i + salt * 100000);
  return data;
}

absl::Status expectEq(const std::vector<int32_t> &actual,
                      const std::vector<int32_t> &expected, int64_t device,
                      const char *what) {
  if (actual == expected)
    return absl::OkStatus();
  size_t at = 0;
  while (at < actual.size() && at < expected.size() &&
         actual[at] == expected[at])
    ++at;
  return absl::InternalError(
      absl::StrCat(what, " on device ", device, ": first difference at ", at,
                   ": got ", at < actual.size() ? actual[at] : -1,
                   ", expected ", at < expected.size() ? expected[at] : -1));
}

int64_t indexOf(const std::vector<int64_t> &list, int64_t device) {
  return std::find(list.begin(), list.end(), device) - list.begin();
}

/// Every rank's verdict: a failure in one rank fails the test in all.
void expectAllRanksOk(const absl::Status &status) {
  EXPECT_TRUE(status.ok()) << "rank " << world->rank() << ": " << status;
  absl::StatusOr<std::vector<uint64_t>> all =
      world->allGather(status.ok() ? 0 : 1);
  ASSERT_TRUE(all.ok()) << all.status();
  for (size_t r = 0; r < all->size(); ++r)
    EXPECT_EQ((*all)[r], 0u) << "rank " << r << " failed";
}

//===----------------------------------------------------------------------===//
// Ownership and creation
//===----------------------------------------------------------------------===//

TEST(MpiOwnership, DefaultSplitsIdsIntoEqualBlocks) {
  DeviceOwnership four = DeviceOwnership::over({0, 5, 31, 7}, 4, 0);
  EXPECT_EQ(four.perRank, 8);
  EXPECT_EQ(four.ownerOf(0), 0);
  EXPECT_EQ(four.ownerOf(7), 0);
  EXPECT_EQ(four.ownerOf(8), 1);
  EXPECT_EQ(four.ownerOf(31), 3);
  EXPECT_EQ(four.ownerOf(32), -1);
  EXPECT_EQ(four.ownerOf(-1), -1);
  // Ids 0..8 over 2 ranks: ceil(9 / 2) = 5 per rank.
  DeviceOwnership uneven = DeviceOwnership::over({8, 0}, 2, 0);
  EXPECT_EQ(uneven.perRank, 5);
  EXPECT_EQ(uneven.ownerOf(4), 0);
  EXPECT_EQ(uneven.ownerOf(5), 1);
  // An explicit count wins, even when it leaves ids unowned.
  DeviceOwnership given = DeviceOwnership::over({0, 20}, 2, 4);
  EXPECT_EQ(given.ownerOf(7), 1);
  EXPECT_EQ(given.ownerOf(20), -1);
}

TEST(MpiCreate, RefusesUnownedDuplicateAndNegativeDevices) {
  MpiOptions options;
  options.ownership = DeviceOwnership::over({}, world->size(), kPerRank);
  int64_t unowned = kPerRank * world->size();
  EXPECT_THAT(
      MpiBackend::create(*world, {0, unowned}, options).status().message(),
      HasSubstr(absl::StrCat("device ", unowned, " is owned by no process")));
  EXPECT_THAT(MpiBackend::create(*world, {1, 1}, options).status().message(),
              HasSubstr("device 1 appears twice"));
  EXPECT_THAT(MpiBackend::create(*world, {-2}, options).status().message(),
              HasSubstr("negative"));
  EXPECT_THAT(MpiBackend::create(*world, {}, options).status().message(),
              HasSubstr("needs a device"));
}

TEST(MpiCreate, RunsOnlyOwnDevices) {
  auto backend = makeBackend(worldDevices());
  ASSERT_TRUE(backend);
  std::vector<int64_t> own(backend->devices().begin(),
                           backend->devices().end());
  std::sort(own.begin(), own.end());
  std::vector<int64_t> expected(kPerRank);
  std::iota(expected.begin(), expected.end(), kPerRank * world->rank());
  EXPECT_EQ(own, expected);
  // A call for another rank's device is refused, naming its owner.
  int64_t foreign =
      (kPerRank * (world->rank() + 1)) % (kPerRank * world->size());
  if (world->size() > 1) {
    int32_t value = 0;
    absl::Status status = backend->send(foreign, own.front(), &value, 4);
    EXPECT_THAT(status.message(), HasSubstr("is owned by rank"));
  }
}

//===----------------------------------------------------------------------===//
// send / recv
//===----------------------------------------------------------------------===//

TEST(MpiSendRecv, RingInsideGroupMixesLocalAndRemotePairs) {
  std::vector<int64_t> devices = worldDevices();
  auto backend = makeBackend(devices);
  ASSERT_TRUE(backend);
  int64_t n = static_cast<int64_t>(devices.size());
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t at = indexOf(devices, d);
    int64_t next = devices[(at + 1) % n], prev = devices[(at + n - 1) % n];
    std::vector<int32_t> mine = stamp(d, 1000), got(1000, -1);
    if (absl::Status s = backend->groupStart(d); !s.ok())
      return s;
    if (absl::Status s = backend->send(d, next, mine.data(), 4000); !s.ok())
      return s;
    if (absl::Status s = backend->recv(d, prev, got.data(), 4000); !s.ok())
      return s;
    if (absl::Status s = backend->groupEnd(d); !s.ok())
      return s;
    return expectEq(got, stamp(prev, 1000), d, "ring");
  });
  expectAllRanksOk(status);
}

TEST(MpiSendRecv, MessagesOfOnePairArriveInOrder) {
  // Device 0 sends three messages of different sizes to device 1 (the same
  // process) and to device kPerRank (the next process, when there is one).
  std::vector<int64_t> devices = worldDevices();
  auto backend = makeBackend(devices);
  ASSERT_TRUE(backend);
  std::vector<int64_t> receivers = {1};
  if (world->size() > 1)
    receivers.push_back(kPerRank);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    if (d == 0) {
      if (absl::Status s = backend->groupStart(d); !s.ok())
        return s;
      std::vector<std::vector<int32_t>> messages;
      for (int64_t receiver : receivers)
        for (int32_t m = 0; m < 3; ++m) {
          messages.push_back(stamp(receiver, 10 + m, m));
          if (absl::Status s =
                  backend->send(d, receiver, messages.back().data(),
                                4 * static_cast<int64_t>(10 + m));
              !s.ok())
            return s;
        }
      return backend->groupEnd(d);
    }
    if (std::find(receivers.begin(), receivers.end(), d) == receivers.end())
      return absl::OkStatus();
    for (int32_t m = 0; m < 3; ++m) {
      std::vector<int32_t> got(static_cast<size_t>(10 + m));
      if (absl::Status s = backend->recv(d, 0, got.data(), 4 * (10 + m));
          !s.ok())
        return s;
      if (absl::Status s = expectEq(got, stamp(d, 10 + m, m), d, "message");
          !s.ok())
        return s;
    }
    return absl::OkStatus();
  });
  expectAllRanksOk(status);
}

TEST(MpiSendRecv, ZeroBytesAndSelfInGroup) {
  std::vector<int64_t> devices = worldDevices();
  auto backend = makeBackend(devices);
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int32_t> mine = stamp(d, 8), got(8, -1);
    int64_t peer = devices[(indexOf(devices, d) + 2) % devices.size()];
    int64_t from =
        devices[(indexOf(devices, d) + devices.size() - 2) % devices.size()];
    for (absl::Status s :
         {backend->groupStart(d), backend->send(d, d, mine.data(), 32),
          backend->recv(d, d, got.data(), 32),
          backend->send(d, peer, nullptr, 0),
          backend->recv(d, from, nullptr, 0), backend->groupEnd(d)})
      if (!s.ok())
        return s;
    return expectEq(got, mine, d, "self send");
  });
  expectAllRanksOk(status);
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// A member list over every rank: the last device of each rank, then the
/// first, in descending rank order (so members are not in id order and
/// some pairs share a process).
std::vector<int64_t> spanningMembers() {
  std::vector<int64_t> members;
  for (int r = world->size() - 1; r >= 0; --r) {
    members.push_back(kPerRank * r + kPerRank - 1);
    members.push_back(kPerRank * r);
  }
  return members;
}

bool isMember(const std::vector<int64_t> &members, int64_t d) {
  return std::find(members.begin(), members.end(), d) != members.end();
}

TEST(MpiCollectives, BroadcastFromEveryRoot) {
  std::vector<int64_t> members = spanningMembers();
  auto backend = makeBackend(worldDevices());
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    if (!isMember(members, d))
      return absl::OkStatus();
    for (int64_t root : members) {
      std::vector<int32_t> buf =
          d == root ? stamp(root, 257) : std::vector<int32_t>(257, -1);
      if (absl::Status s = backend->broadcast(d, members, root, buf.data(),
                                              buf.data(), 4 * 257);
          !s.ok())
        return s;
      if (absl::Status s = expectEq(buf, stamp(root, 257), d, "broadcast");
          !s.ok())
        return s;
    }
    return absl::OkStatus();
  });
  expectAllRanksOk(status);
}

TEST(MpiCollectives, AllGatherInMemberOrderAndInPlace) {
  std::vector<int64_t> members = spanningMembers();
  int64_t n = static_cast<int64_t>(members.size()), block = 33;
  std::vector<int32_t> expected;
  for (int64_t member : members) {
    std::vector<int32_t> part = stamp(member, block);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  auto backend = makeBackend(worldDevices());
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    if (!isMember(members, d))
      return absl::OkStatus();
    int64_t rank = indexOf(members, d);
    std::vector<int32_t> mine = stamp(d, block), out(n * block, -1);
    if (absl::Status s =
            backend->allGather(d, members, mine.data(), out.data(), 4 * block);
        !s.ok())
      return s;
    if (absl::Status s = expectEq(out, expected, d, "all_gather"); !s.ok())
      return s;
    // In place: the own block already sits at its place in the output.
    std::vector<int32_t> inPlace(n * block, -1);
    std::copy(mine.begin(), mine.end(), inPlace.begin() + rank * block);
    if (absl::Status s =
            backend->allGather(d, members, inPlace.data() + rank * block,
                               inPlace.data(), 4 * block);
        !s.ok())
      return s;
    return expectEq(inPlace, expected, d, "in-place all_gather");
  });
  expectAllRanksOk(status);
}

TEST(MpiCollectives, AllToAllChunkJOfRankIGoesToChunkIOfRankJ) {
  std::vector<int64_t> members = spanningMembers();
  int64_t n = static_cast<int64_t>(members.size()), chunk = 17;
  auto backend = makeBackend(worldDevices());
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    if (!isMember(members, d))
      return absl::OkStatus();
    int64_t rank = indexOf(members, d);
    std::vector<int32_t> expected;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int32_t> part = stamp(members[i], chunk, rank + 1);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    std::vector<int32_t> send;
    for (int64_t j = 0; j < n; ++j) {
      std::vector<int32_t> part = stamp(d, chunk, j + 1);
      send.insert(send.end(), part.begin(), part.end());
    }
    std::vector<int32_t> out(n * chunk, -1);
    if (absl::Status s =
            backend->allToAll(d, members, send.data(), out.data(), 4 * chunk);
        !s.ok())
      return s;
    if (absl::Status s = expectEq(out, expected, d, "all_to_all"); !s.ok())
      return s;
    if (absl::Status s =
            backend->allToAll(d, members, send.data(), send.data(), 4 * chunk);
        !s.ok())
      return s;
    return expectEq(send, expected, d, "in-place all_to_all");
  });
  expectAllRanksOk(status);
}

/// A float per device and position whose sums depend on the order.
std::vector<float> floats(int64_t device, int64_t count) {
  std::vector<float> data(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    data[static_cast<size_t>(i)] =
        static_cast<float>((device + 1) * 0.1 + i * 1e-7) *
        (i % 3 == 0 ? 1e7f : 1.0f);
  return data;
}

TEST(MpiCollectives, ReductionsCombineInMemberOrderBitForBit) {
  std::vector<int64_t> members = spanningMembers();
  int64_t n = static_cast<int64_t>(members.size()), count = 64;
  // The reference: reduceArrays over the members' inputs in member order.
  std::vector<std::vector<float>> inputs;
  std::vector<const void *> pointers;
  for (int64_t member : members)
    inputs.push_back(floats(member, n * count));
  for (const auto &input : inputs)
    pointers.push_back(input.data());
  std::vector<float> sum(static_cast<size_t>(n * count));
  reduceArrays(DataType::F32, ReduceOp::Sum, pointers.data(), n, n * count,
               sum.data());
  auto backend = makeBackend(worldDevices());
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    if (!isMember(members, d))
      return absl::OkStatus();
    int64_t rank = indexOf(members, d);
    std::vector<float> buf = floats(d, n * count);
    if (absl::Status s =
            backend->allReduce(d, members, buf.data(), buf.data(), n * count,
                               DataType::F32, ReduceOp::Sum);
        !s.ok())
      return s;
    if (std::memcmp(buf.data(), sum.data(), 4 * n * count) != 0)
      return absl::InternalError(
          absl::StrCat("all_reduce on device ", d, " differs"));
    std::vector<float> in = floats(d, n * count), out(count, -1.0f);
    if (absl::Status s =
            backend->reduceScatter(d, members, in.data(), out.data(), count,
                                   DataType::F32, ReduceOp::Sum);
        !s.ok())
      return s;
    if (std::memcmp(out.data(), sum.data() + rank * count, 4 * count) != 0)
      return absl::InternalError(
          absl::StrCat("reduce_scatter on device ", d, " differs"));
    return absl::OkStatus();
  });
  expectAllRanksOk(status);
}

//===----------------------------------------------------------------------===//
// Failures
//===----------------------------------------------------------------------===//

TEST(MpiErrors, SizesThatDoNotMatchNameTheSender) {
  // Local pair 0 -> 1 and, with two or more ranks, a remote pair.
  auto backend = makeBackend(worldDevices());
  ASSERT_TRUE(backend);
  int64_t remote = world->size() > 1 ? kPerRank : 2;
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int32_t> buf(4, 7);
    if (d == 0) {
      if (absl::Status s = backend->groupStart(d); !s.ok())
        return s;
      (void)backend->send(d, 1, buf.data(), 8);
      (void)backend->send(d, remote, buf.data(), 8);
      return backend->groupEnd(d);
    }
    if (d == 1 || d == remote)
      return backend->recv(d, 0, buf.data(), 16);
    return absl::OkStatus();
  });
  if (world->rank() == 0) {
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(),
                HasSubstr("device 0 sent 8 bytes where 16 were expected"));
  } else if (world->rank() == 1) {
    EXPECT_FALSE(status.ok());
  }
}

TEST(MpiErrors, ReceiveNobodySendsTimesOutAndAbortsTheOtherRanks) {
  std::vector<int64_t> devices = worldDevices();
  int64_t last = kPerRank * world->size() - 1;
  auto backend = makeBackend(devices, absl::Seconds(2));
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int32_t value = 0;
    // Device 0 waits for the last device, which never sends; every other
    // device waits for device 0, which never sends either.
    if (d == 0)
      return backend->recv(0, last, &value, 4);
    return backend->recv(d, 0, &value, 4);
  });
  ASSERT_FALSE(status.ok());
  int lastRank = static_cast<int>(last / kPerRank);
  // Some device of each rank times out first, or learns of another rank's
  // timeout; every message names who waited for whom.
  EXPECT_THAT(status.message(), HasSubstr("timed out after 2s"));
  if (world->rank() == 0 && absl::IsDeadlineExceeded(status) &&
      status.message().find("device 0 (rank 0) still waits") !=
          absl::string_view::npos) {
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("recv from device ", last, " (rank ",
                                       lastRank, ")")));
  }
}

//===----------------------------------------------------------------------===//
// Messages that generated code sends itself (the MPI lowering)
//===----------------------------------------------------------------------===//

using MpiSendFn = int (*)(const void *, int, MPI_Datatype, int, int, MPI_Comm);
using MpiRecvFn = int (*)(void *, int, MPI_Datatype, int, int, MPI_Comm,
                          MPI_Status *);

/// What the JIT binds the lowering's MPI_Send and MPI_Recv to.
std::pair<MpiSendFn, MpiRecvFn> codegenCalls() {
  MpiSendFn send = nullptr;
  MpiRecvFn recv = nullptr;
  for (const auto &[name, address] : mpiCodegenSymbols()) {
    if (name == "MPI_Send")
      send = reinterpret_cast<MpiSendFn>(address);
    if (name == "MPI_Recv")
      recv = reinterpret_cast<MpiRecvFn>(address);
  }
  return {send, recv};
}

TEST(MpiCodegen, RoutesOnlyPeersOfOtherProcessesWithMatchingTags) {
  auto backend = makeBackend(worldDevices());
  ASSERT_TRUE(backend);
  int rank = world->rank();
  int size = world->size();
  int64_t mine = kPerRank * rank;
  // Same process: the runtime carries it.
  auto local = backend->mpiRoute(mine, mine + 1, /*isSend=*/true);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_FALSE(local->has_value());
  if (size < 2)
    return;
  // Rank r's device 3r sends to device 3(r+1)+2; that device receives
  // from device 3r in rank r+1. Both ends must name the message alike.
  int next = (rank + 1) % size;
  int previous = (rank + size - 1) % size;
  auto send = backend->mpiRoute(mine, kPerRank * next + 2, /*isSend=*/true);
  auto recv = backend->mpiRoute(mine + 2, kPerRank * previous,
                                /*isSend=*/false);
  // The other direction of a pair has a tag of its own.
  auto back = backend->mpiRoute(mine, kPerRank * next + 2, /*isSend=*/false);
  ASSERT_TRUE(send.ok() && recv.ok() && back.ok());
  ASSERT_TRUE(send->has_value() && recv->has_value() && back->has_value());
  EXPECT_NE((*back)->tag, (*send)->tag);
  EXPECT_EQ((*send)->rank, next);
  EXPECT_EQ((*recv)->rank, previous);
  absl::StatusOr<std::vector<uint64_t>> sendTags =
      world->allGather(static_cast<uint64_t>((*send)->tag));
  absl::StatusOr<std::vector<uint64_t>> recvTags =
      world->allGather(static_cast<uint64_t>((*recv)->tag));
  ASSERT_TRUE(sendTags.ok() && recvTags.ok());
  for (int r = 0; r < size; ++r)
    EXPECT_EQ((*sendTags)[r], (*recvTags)[(r + 1) % size])
        << "rank " << r << "'s send and its receiver's recv differ";
  // Not a device of this process: refused, and the run fails (the other
  // ranks hear of it, so this comes after every rank's routes).
  auto foreign = backend->mpiRoute(kPerRank * next, mine, /*isSend=*/true);
  EXPECT_FALSE(foreign.ok());
  EXPECT_THAT(foreign.status().message(), HasSubstr("owned by rank"));
}

TEST(MpiCodegen, BlockingCallsMoveBytesBetweenProcesses) {
  if (world->size() < 2)
    GTEST_SKIP() << "needs two processes";
  auto backend = makeBackend(worldDevices());
  ASSERT_TRUE(backend);
  auto [send, recv] = codegenCalls();
  ASSERT_TRUE(send && recv);
  // Ring over ranks: device 3r sends to device 3(r+1) (the next rank);
  // rank 0 sends first, the others receive first, so the blocking calls
  // complete in order around the ring.
  int rank = world->rank();
  int size = world->size();
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    if (d != kPerRank * rank)
      return absl::OkStatus();
    int64_t next = kPerRank * ((rank + 1) % size);
    int64_t previous = kPerRank * ((rank + size - 1) % size);
    std::vector<int32_t> out = stamp(d, 1000), in(1000, -1);
    auto to = backend->mpiRoute(d, next, true);
    auto from = backend->mpiRoute(d, previous, false);
    if (!to.ok() || !from.ok())
      return to.ok() ? from.status() : to.status();
    int bytes = static_cast<int>(out.size() * sizeof(int32_t));
    auto sendOut = [&] {
      return send(out.data(), bytes, MPI_INT8_T, (*to)->rank, (*to)->tag,
                  MPI_COMM_WORLD);
    };
    auto recvIn = [&] {
      return recv(in.data(), bytes, MPI_INT8_T, (*from)->rank, (*from)->tag,
                  MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    };
    int first = rank == 0 ? sendOut() : recvIn();
    int second = rank == 0 ? recvIn() : sendOut();
    if (first != MPI_SUCCESS || second != MPI_SUCCESS)
      return backend->firstError();
    return expectEq(in, stamp(previous, 1000), d, "ring");
  });
  expectAllRanksOk(status);
}

TEST(MpiCodegen, SendNobodyReceivesTimesOutNamingBothEnds) {
  if (world->size() < 2)
    GTEST_SKIP() << "needs two processes";
  auto backend = makeBackend(worldDevices(), absl::Seconds(2));
  ASSERT_TRUE(backend);
  auto [send, recv] = codegenCalls();
  ASSERT_TRUE(send && recv);
  // Rank 0's device 0 sends 64 MiB (past any eager limit) to device 3,
  // which never receives; no call may wait past the timeout.
  std::vector<char> big(64 << 20, 1);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    if (d != 0)
      return absl::OkStatus();
    auto to = backend->mpiRoute(0, kPerRank, true);
    if (!to.ok())
      return to.status();
    if (send(big.data(), static_cast<int>(big.size()), MPI_INT8_T, (*to)->rank,
             (*to)->tag, MPI_COMM_WORLD) == MPI_SUCCESS)
      return absl::InternalError("a send nobody receives completed");
    return backend->firstError();
  });
  if (world->rank() == 0) {
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(),
                HasSubstr("timed out after 2s: mpi.send to device 3 (rank 1) "
                          "on device 0 (rank 0) never completed"));
  }
  // The other ranks learn of it from rank 0's notice, or finish first.
  absl::StatusOr<std::vector<uint64_t>> synced = world->allGather(0);
  ASSERT_TRUE(synced.ok());
}

//===----------------------------------------------------------------------===//
// MpiStore
//===----------------------------------------------------------------------===//

TEST(MpiStore, EveryRankReadsWhatAnyRankSet) {
  auto channel = MpiChannel::create(*world);
  ASSERT_TRUE(channel.ok()) << channel.status();
  MpiStore store(*std::move(channel));
  // Every rank sets its own key (binary values with zero bytes included)
  // and reads everybody's, in an order that makes some wait.
  std::string mine = absl::StrCat("id-of-", world->rank());
  mine.push_back('\0');
  mine += std::string(128, static_cast<char>(world->rank() + 1));
  ASSERT_TRUE(store.set(absl::StrCat("comm/", world->rank()), mine).ok());
  for (int r = world->size() - 1; r >= 0; --r) {
    absl::StatusOr<std::string> value =
        store.get(absl::StrCat("comm/", r), absl::Seconds(30));
    ASSERT_TRUE(value.ok()) << value.status();
    std::string expected = absl::StrCat("id-of-", r);
    expected.push_back('\0');
    expected += std::string(128, static_cast<char>(r + 1));
    EXPECT_EQ(*value, expected);
  }
  // A key is set once.
  EXPECT_TRUE(absl::IsAlreadyExists(
      store.set(absl::StrCat("comm/", world->rank()), "again")));
  // Nobody sets this one: the wait ends at its deadline, naming the key.
  absl::StatusOr<std::string> missing =
      store.get("never/set", absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(missing.status()));
  EXPECT_THAT(missing.status().message(), HasSubstr("\"never/set\""));
  EXPECT_THAT(store.describe(), HasSubstr("MPI store"));
  expectAllRanksOk(absl::OkStatus());
}

} // namespace

int main(int argc, char **argv) {
  absl::StatusOr<std::unique_ptr<MpiWorld>> initialized =
      MpiWorld::init(&argc, &argv, absl::Seconds(60));
  if (!initialized.ok()) {
    std::fprintf(stderr, "MPI: %s\n",
                 std::string(initialized.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<MpiWorld> owner = *std::move(initialized);
  world = owner.get();
  ::testing::InitGoogleTest(&argc, argv);
  int result = RUN_ALL_TESTS();
  absl::StatusOr<std::vector<uint64_t>> results =
      world->allGather(static_cast<uint64_t>(result));
  if (!results.ok())
    return 1;
  for (uint64_t r : *results)
    if (r != 0)
      result = 1;
  return result;
}
