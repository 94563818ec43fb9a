//===- NcclBackendTest.cpp - Unit tests for the NCCL backend --------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Every scenario runs twice: on the simulated CUDA and NCCL (NcclFake.h),
// which runs anywhere and checks the backend's own logic, and on the real
// libraries, which needs GPUs: without one those instances are skipped with
// the reason ("no CUDA device: ..."), never passed. A scenario that needs
// more GPUs than the machine has is skipped the same way.
//
// Covered: every call with its in-place form and rank order, every dtype
// and reduction, communicators cached by member list and created inside
// groups in different orders, host buffers running planner plans through
// the plan executor (compared with the loopback backend), stream-ordered
// completion, one process per GPU (threads with their own backends, unique
// ids through a real TCP or file store), and the failure modes: no device,
// bad options, invalid calls, NCCL and CUDA errors, timeouts, aborts, and
// that every stream, event, allocation and communicator is released.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/NcclBackend.h"

#include "polymesh/Planner/Planner.h"
#include "polymesh/Runtime/PlanExecutor.h"

#include "NcclFake.h"
#include "Support/LayoutBuilders.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>

#include <arpa/inet.h>
#include <csignal>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace polymesh::runtime;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

#define RETURN_IF_ERROR(expr)                                                  \
  do {                                                                         \
    absl::Status status_ = (expr);                                             \
    if (!status_.ok())                                                         \
      return status_;                                                          \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr)                                            \
  auto lhs##_or = (expr);                                                      \
  if (!lhs##_or.ok())                                                          \
    return lhs##_or.status();                                                  \
  auto lhs = *std::move(lhs##_or)

enum class Target { Simulated, Gpu };

std::vector<int64_t> iota(int64_t n, int64_t first = 0) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// Device memory holding a copy of a host vector, freed on destruction.
class DeviceArray {
public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;
  ~DeviceArray() {
    if (backend && pointer)
      backend->deallocate(device, pointer).IgnoreError();
  }

  template <typename T>
  static absl::StatusOr<std::unique_ptr<DeviceArray>>
  upload(NcclBackend &backend, int64_t device, const std::vector<T> &values) {
    auto array = std::make_unique<DeviceArray>();
    array->backend = &backend;
    array->device = device;
    array->bytes = static_cast<int64_t>(values.size() * sizeof(T));
    ASSIGN_OR_RETURN(
        pointer, backend.allocate(device, std::max<int64_t>(array->bytes, 1)));
    array->pointer = pointer;
    RETURN_IF_ERROR(
        backend.copyToDevice(device, pointer, values.data(), array->bytes));
    return array;
  }

  template <typename T> absl::StatusOr<std::vector<T>> download() const {
    std::vector<T> values(static_cast<size_t>(bytes) / sizeof(T));
    RETURN_IF_ERROR(backend->copyToHost(device, values.data(), pointer, bytes));
    return values;
  }

  char *data() const { return static_cast<char *>(pointer); }

private:
  NcclBackend *backend = nullptr;
  int64_t device = 0;
  void *pointer = nullptr;
  int64_t bytes = 0;
};

template <typename T>
absl::Status expectValues(const std::vector<T> &actual,
                          const std::vector<T> &expected,
                          absl::string_view what, int64_t device) {
  if (actual.size() != expected.size())
    return absl::InternalError(absl::StrCat(what, " on device ", device, ": ",
                                            actual.size(), " values, expected ",
                                            expected.size()));
  for (size_t i = 0; i < actual.size(); ++i)
    if (std::memcmp(&actual[i], &expected[i], sizeof(T)) != 0)
      return absl::InternalError(
          absl::StrCat(what, " on device ", device, ": value ", i, " is ",
                       static_cast<double>(actual[i]), ", expected ",
                       static_cast<double>(expected[i])));
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// The fixture: one instance per target
//===----------------------------------------------------------------------===//

class NcclTest : public ::testing::TestWithParam<Target> {
protected:
  void SetUp() override {
    if (simulated()) {
      resetSimulatedGpus(4);
      gpus = 4;
      return;
    }
    absl::StatusOr<int> count = cudaDeviceCount();
    if (!count.ok())
      GTEST_SKIP() << count.status().message();
    gpus = *count;
  }

  void TearDown() override {
    if (!simulated() || IsSkipped())
      return;
    // Everything the backends and the tests made is released.
    FakeNccl::Counts counts = FakeNccl::counts();
    EXPECT_EQ(counts.allocations, 0);
    EXPECT_EQ(counts.streams, 0);
    EXPECT_EQ(counts.events, 0);
    EXPECT_EQ(counts.communicators, 0);
  }

  bool simulated() const { return GetParam() == Target::Simulated; }
  const NcclApi *api() const {
    return simulated() ? &simulatedNcclApi() : &realNcclApi();
  }

  /// False (and the test is to skip) when the machine has fewer devices.
  bool have(int n) const { return gpus >= n; }

  std::unique_ptr<NcclBackend> make(int n, NcclOptions options = {}) {
    options.api = api();
    if (options.timeout == absl::Minutes(5))
      options.timeout = absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
        NcclBackend::createSingleProcess(iota(n), options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? *std::move(backend) : nullptr;
  }

  int gpus = 0;
};

#define NEED_DEVICES(n)                                                        \
  do {                                                                         \
    if (!have(n))                                                              \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, this machine has "    \
                   << gpus;                                                    \
  } while (0)

std::string targetName(const ::testing::TestParamInfo<Target> &info) {
  return info.param == Target::Simulated ? "Simulated" : "Gpu";
}

INSTANTIATE_TEST_SUITE_P(, NcclTest,
                         ::testing::Values(Target::Simulated, Target::Gpu),
                         targetName);

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

TEST_P(NcclTest, AllReduceOverEveryDevice) {
  int n = std::min(gpus, 4);
  std::unique_ptr<NcclBackend> backend = make(n);
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->devices().size(), static_cast<size_t>(n));
  std::vector<int64_t> members = iota(n);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<float> mine(1000), expected(1000, 0.0f);
    for (int i = 0; i < 1000; ++i) {
      mine[i] = static_cast<float>(d * 100 + i);
      for (int r = 0; r < n; ++r)
        expected[i] += static_cast<float>(r * 100 + i);
    }
    ASSIGN_OR_RETURN(send, DeviceArray::upload(*backend, d, mine));
    ASSIGN_OR_RETURN(
        recv, DeviceArray::upload(*backend, d, std::vector<float>(1000, -1)));
    RETURN_IF_ERROR(backend->allReduce(d, members, send->data(), recv->data(),
                                       1000, DataType::F32, ReduceOp::Sum));
    ASSIGN_OR_RETURN(result, recv->download<float>());
    RETURN_IF_ERROR(expectValues(result, expected, "all_reduce", d));
    // In place.
    RETURN_IF_ERROR(backend->allReduce(d, members, send->data(), send->data(),
                                       1000, DataType::F32, ReduceOp::Sum));
    ASSIGN_OR_RETURN(inPlace, send->download<float>());
    return expectValues(inPlace, expected, "in-place all_reduce", d);
  });
  EXPECT_TRUE(status.ok()) << status;
  // The world's member list is the world communicator.
  EXPECT_EQ(backend->numCommunicators(), 1);
}

/// Small integers, so that every dtype holds the inputs and the results
/// exactly and every summation order agrees.
template <typename T> std::vector<T> reductionInput(int64_t rank) {
  std::vector<T> values(7);
  for (int i = 0; i < 7; ++i) {
    int v = ((rank * 3 + i * 5) % 5) - (std::is_signed_v<T> ? 2 : 0);
    values[i] = static_cast<T>(v == 0 ? 1 : v);
  }
  return values;
}

TEST_P(NcclTest, EveryTypeAndReduction) {
  int n = std::min(gpus, 3);
  std::unique_ptr<NcclBackend> backend = make(n);
  ASSERT_TRUE(backend);
  std::vector<int64_t> members = iota(n);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    for (int t = 0; t < kNumDataTypes; ++t) {
      DataType type = static_cast<DataType>(t);
      for (int o = 0; o < kNumReduceOps; ++o) {
        ReduceOp op = static_cast<ReduceOp>(o);
        // Inputs as bytes of the dtype, through f32 for the 16-bit floats.
        auto bytesOf = [&](int64_t rank) {
          std::vector<int8_t> ints = reductionInput<int8_t>(rank);
          std::vector<uint8_t> uints = reductionInput<uint8_t>(rank);
          std::vector<char> out(7 * dataTypeSize(type));
          for (int i = 0; i < 7; ++i) {
            char *at = out.data() + i * dataTypeSize(type);
            float f = static_cast<float>(ints[i]);
            switch (type) {
            case DataType::F32:
              std::memcpy(at, &f, 4);
              break;
            case DataType::F64: {
              double v = ints[i];
              std::memcpy(at, &v, 8);
              break;
            }
            case DataType::F16: {
              uint16_t v = floatToF16(f);
              std::memcpy(at, &v, 2);
              break;
            }
            case DataType::BF16: {
              uint16_t v = floatToBf16(f);
              std::memcpy(at, &v, 2);
              break;
            }
            case DataType::I32: {
              int32_t v = ints[i];
              std::memcpy(at, &v, 4);
              break;
            }
            case DataType::I64: {
              int64_t v = ints[i];
              std::memcpy(at, &v, 8);
              break;
            }
            case DataType::I8:
              std::memcpy(at, &ints[i], 1);
              break;
            case DataType::U8:
              std::memcpy(at, &uints[i], 1);
              break;
            }
          }
          return out;
        };
        std::vector<std::vector<char>> all;
        std::vector<const void *> pointers;
        for (int64_t r = 0; r < n; ++r)
          all.push_back(bytesOf(r));
        for (auto &v : all)
          pointers.push_back(v.data());
        std::vector<char> expected(all[0].size());
        reduceArrays(type, op, pointers.data(), n, 7, expected.data());
        ASSIGN_OR_RETURN(buffer, DeviceArray::upload(*backend, d, all[d]));
        RETURN_IF_ERROR(backend->allReduce(d, members, buffer->data(),
                                           buffer->data(), 7, type, op));
        ASSIGN_OR_RETURN(result, buffer->download<char>());
        RETURN_IF_ERROR(
            expectValues(result, expected,
                         absl::StrCat("all_reduce ", dataTypeName(type), " ",
                                      reduceOpName(op)),
                         d));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(NcclTest, BroadcastFromEveryRoot) {
  int n = std::min(gpus, 4);
  std::unique_ptr<NcclBackend> backend = make(n);
  ASSERT_TRUE(backend);
  // Members in reverse order: ranks are positions in the list.
  std::vector<int64_t> members = iota(n);
  std::reverse(members.begin(), members.end());
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    for (int64_t root = 0; root < n; ++root) {
      std::vector<int32_t> values(33);
      for (int i = 0; i < 33; ++i)
        values[i] = static_cast<int32_t>(root * 1000 + i);
      ASSIGN_OR_RETURN(
          buffer,
          DeviceArray::upload(
              *backend, d, d == root ? values : std::vector<int32_t>(33, -7)));
      // In place on the root; the others pass no send buffer.
      RETURN_IF_ERROR(backend->broadcast(d, members, root,
                                         d == root ? buffer->data() : nullptr,
                                         buffer->data(), 33 * 4));
      ASSIGN_OR_RETURN(result, buffer->download<int32_t>());
      RETURN_IF_ERROR(expectValues(result, values,
                                   absl::StrCat("broadcast from ", root), d));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(NcclTest, AllGatherInRankOrder) {
  int n = std::min(gpus, 4);
  std::unique_ptr<NcclBackend> backend = make(n);
  ASSERT_TRUE(backend);
  std::vector<int64_t> members = iota(n);
  std::reverse(members.begin(), members.end());
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t rank = n - 1 - d;
    std::vector<uint8_t> mine(5, static_cast<uint8_t>(10 + d));
    std::vector<uint8_t> expected;
    for (int64_t member : members)
      expected.insert(expected.end(), 5, static_cast<uint8_t>(10 + member));
    ASSIGN_OR_RETURN(send, DeviceArray::upload(*backend, d, mine));
    ASSIGN_OR_RETURN(
        recv, DeviceArray::upload(*backend, d, std::vector<uint8_t>(5 * n, 0)));
    RETURN_IF_ERROR(
        backend->allGather(d, members, send->data(), recv->data(), 5));
    ASSIGN_OR_RETURN(result, recv->download<uint8_t>());
    RETURN_IF_ERROR(expectValues(result, expected, "all_gather", d));
    // In place: the send buffer is this rank's block of recv.
    std::vector<uint8_t> prepared(5 * n, 0);
    std::fill(prepared.begin() + rank * 5, prepared.begin() + rank * 5 + 5,
              static_cast<uint8_t>(10 + d));
    ASSIGN_OR_RETURN(both, DeviceArray::upload(*backend, d, prepared));
    RETURN_IF_ERROR(backend->allGather(d, members, both->data() + rank * 5,
                                       both->data(), 5));
    ASSIGN_OR_RETURN(inPlace, both->download<uint8_t>());
    return expectValues(inPlace, expected, "in-place all_gather", d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(NcclTest, AllToAllAndInPlace) {
  NEED_DEVICES(2);
  int n = std::min(gpus, 4);
  std::unique_ptr<NcclBackend> backend = make(n);
  ASSERT_TRUE(backend);
  std::vector<int64_t> members = iota(n);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    // Chunk j of rank i holds 100 * i + j in each of its 3 elements.
    std::vector<int64_t> send(3 * n), expected(3 * n);
    for (int j = 0; j < n; ++j)
      for (int e = 0; e < 3; ++e) {
        send[j * 3 + e] = 100 * d + j;
        expected[j * 3 + e] = 100 * j + d;
      }
    ASSIGN_OR_RETURN(in, DeviceArray::upload(*backend, d, send));
    ASSIGN_OR_RETURN(
        out, DeviceArray::upload(*backend, d, std::vector<int64_t>(3 * n, -1)));
    RETURN_IF_ERROR(backend->allToAll(d, members, in->data(), out->data(), 24));
    ASSIGN_OR_RETURN(result, out->download<int64_t>());
    RETURN_IF_ERROR(expectValues(result, expected, "all_to_all", d));
    RETURN_IF_ERROR(backend->allToAll(d, members, in->data(), in->data(), 24));
    ASSIGN_OR_RETURN(inPlace, in->download<int64_t>());
    return expectValues(inPlace, expected, "in-place all_to_all", d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(NcclTest, ReduceScatterAndInPlace) {
  int n = std::min(gpus, 4);
  std::unique_ptr<NcclBackend> backend = make(n);
  ASSERT_TRUE(backend);
  std::vector<int64_t> members = iota(n);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    std::vector<int32_t> send(4 * n), expected(4, 0);
    for (int i = 0; i < 4 * n; ++i)
      send[i] = static_cast<int32_t>(d * 10 + i);
    for (int e = 0; e < 4; ++e)
      for (int r = 0; r < n; ++r)
        expected[e] += r * 10 + static_cast<int32_t>(d) * 4 + e;
    ASSIGN_OR_RETURN(in, DeviceArray::upload(*backend, d, send));
    ASSIGN_OR_RETURN(
        out, DeviceArray::upload(*backend, d, std::vector<int32_t>(4, -1)));
    RETURN_IF_ERROR(backend->reduceScatter(d, members, in->data(), out->data(),
                                           4, DataType::I32, ReduceOp::Sum));
    ASSIGN_OR_RETURN(result, out->download<int32_t>());
    RETURN_IF_ERROR(expectValues(result, expected, "reduce_scatter", d));
    // In place: recv is this rank's block of send.
    RETURN_IF_ERROR(backend->reduceScatter(d, members, in->data(),
                                           in->data() + d * 16, 4,
                                           DataType::I32, ReduceOp::Sum));
    ASSIGN_OR_RETURN(inPlace, in->download<int32_t>());
    std::vector<int32_t> block(inPlace.begin() + d * 4,
                               inPlace.begin() + d * 4 + 4);
    return expectValues(block, expected, "in-place reduce_scatter", d);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(NcclTest, SendRecvRingInAGroupAndPairsOutside) {
  NEED_DEVICES(2);
  int n = std::min(gpus, 4);
  std::unique_ptr<NcclBackend> backend = make(n);
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    int64_t next = (d + 1) % n, previous = (d + n - 1) % n;
    std::vector<int16_t> mine(9, static_cast<int16_t>(d + 1));
    ASSIGN_OR_RETURN(out, DeviceArray::upload(*backend, d, mine));
    ASSIGN_OR_RETURN(
        in, DeviceArray::upload(*backend, d, std::vector<int16_t>(9, 0)));
    // Everyone sends first: only a group makes that work.
    RETURN_IF_ERROR(backend->groupStart(d));
    RETURN_IF_ERROR(backend->send(d, next, out->data(), 18));
    RETURN_IF_ERROR(backend->recv(d, previous, in->data(), 18));
    RETURN_IF_ERROR(backend->groupEnd(d));
    ASSIGN_OR_RETURN(result, in->download<int16_t>());
    RETURN_IF_ERROR(expectValues(
        result, std::vector<int16_t>(9, static_cast<int16_t>(previous + 1)),
        "ring", d));
    // Outside a group: device 0 sends to device 1, which receives.
    if (d == 0)
      RETURN_IF_ERROR(backend->send(0, 1, out->data(), 18));
    if (d == 1) {
      RETURN_IF_ERROR(backend->recv(1, 0, in->data(), 18));
      ASSIGN_OR_RETURN(pair, in->download<int16_t>());
      RETURN_IF_ERROR(
          expectValues(pair, std::vector<int16_t>(9, 1), "send/recv", d));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(NcclTest, CommunicatorsAreCachedByMemberList) {
  NEED_DEVICES(3);
  std::unique_ptr<NcclBackend> backend = make(3);
  ASSERT_TRUE(backend);
  std::vector<std::vector<int64_t>> groups = {{0, 1}, {1, 0},    {0, 1},
                                              {1, 2}, {2, 0, 1}, {1, 0}};
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    for (const std::vector<int64_t> &group : groups) {
      auto rank = std::find(group.begin(), group.end(), d);
      if (rank == group.end())
        continue;
      std::vector<int32_t> mine(2, static_cast<int32_t>(d));
      ASSIGN_OR_RETURN(send, DeviceArray::upload(*backend, d, mine));
      ASSIGN_OR_RETURN(
          recv, DeviceArray::upload(
                    *backend, d, std::vector<int32_t>(2 * group.size(), -1)));
      RETURN_IF_ERROR(
          backend->allGather(d, group, send->data(), recv->data(), 8));
      std::vector<int32_t> expected;
      for (int64_t member : group)
        expected.insert(expected.end(), 2, static_cast<int32_t>(member));
      ASSIGN_OR_RETURN(result, recv->download<int32_t>());
      RETURN_IF_ERROR(expectValues(
          result, expected,
          absl::StrCat("all_gather on [", absl::StrJoin(group, ","), "]"), d));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  // The world, [0,1], [1,0], [1,2] and [2,0,1].
  EXPECT_EQ(backend->numCommunicators(), 5);
}

TEST_P(NcclTest, NewCommunicatorsInsideAGroupInAnyOrder) {
  NEED_DEVICES(3);
  std::unique_ptr<NcclBackend> backend = make(3);
  ASSERT_TRUE(backend);
  // Devices 0 and 1 use two new communicators (neither is the world) in one
  // group, in opposite orders: NCCL allows that inside a group, and creating
  // them in member-list order keeps it from deadlocking.
  std::vector<int64_t> a = {0, 1}, b = {1, 0};
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    if (d == 2)
      return absl::OkStatus();
    ASSIGN_OR_RETURN(
        x, DeviceArray::upload(*backend, d, std::vector<float>(3, d + 1.0f)));
    ASSIGN_OR_RETURN(
        y, DeviceArray::upload(*backend, d, std::vector<float>(3, d + 10.0f)));
    // x is summed on a, y maximized on b; device 0 calls a first, device 1
    // b first.
    auto onA = [&] {
      return backend->allReduce(d, a, x->data(), x->data(), 3, DataType::F32,
                                ReduceOp::Sum);
    };
    auto onB = [&] {
      return backend->allReduce(d, b, y->data(), y->data(), 3, DataType::F32,
                                ReduceOp::Max);
    };
    RETURN_IF_ERROR(backend->groupStart(d));
    RETURN_IF_ERROR(backend->groupStart(d)); // Groups nest.
    RETURN_IF_ERROR(d == 0 ? onA() : onB());
    RETURN_IF_ERROR(backend->groupEnd(d));
    RETURN_IF_ERROR(d == 0 ? onB() : onA());
    RETURN_IF_ERROR(backend->groupEnd(d));
    ASSIGN_OR_RETURN(xs, x->download<float>());
    ASSIGN_OR_RETURN(ys, y->download<float>());
    RETURN_IF_ERROR(
        expectValues(xs, std::vector<float>(3, 1.0f + 2.0f), "sum on a", d));
    return expectValues(ys, std::vector<float>(3, 11.0f), "max on b", d);
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(backend->numCommunicators(), 3);
}

TEST_P(NcclTest, ZeroSizedCallsCreateCommunicatorsAndMoveNothing) {
  NEED_DEVICES(2);
  std::unique_ptr<NcclBackend> backend = make(2);
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    RETURN_IF_ERROR(backend->allReduce(d, {1, 0}, nullptr, nullptr, 0,
                                       DataType::F32, ReduceOp::Sum));
    RETURN_IF_ERROR(backend->broadcast(d, {1, 0}, 1, nullptr, nullptr, 0));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(backend->numCommunicators(), 2);
}

//===----------------------------------------------------------------------===//
// Host buffers: planner plans through the plan executor
//===----------------------------------------------------------------------===//

using namespace polymesh::planner;
using namespace polymesh::planner::testing;

/// Runs the plan of (source, destination) on `backend` with host tiles
/// filled deterministically; returns every device's destination tile.
absl::StatusOr<std::map<int64_t, std::vector<int32_t>>>
runPlan(Backend &backend, const TensorLayout &source,
        const TensorLayout &destination) {
  absl::StatusOr<TransferPlan> plan = planReshard(source, destination, 4);
  if (!plan.ok())
    return plan.status();
  absl::StatusOr<PlanExecutor> executor =
      PlanExecutor::create(*plan, source, destination);
  if (!executor.ok())
    return executor.status();
  auto elements = [](const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t s : shape)
      n *= s;
    return n;
  };
  int64_t sourceElements = elements(source.localShape());
  int64_t destinationElements = elements(destination.localShape());
  std::map<int64_t, std::vector<int32_t>> sources, destinations;
  auto inMesh = [](const TensorLayout &layout, int64_t device) {
    for (int64_t p = 0; p < layout.numDevices(); ++p)
      if (layout.mesh().deviceAt(p) == device)
        return true;
    return false;
  };
  for (int64_t device : backend.devices()) {
    std::vector<int32_t> &src = sources[device];
    if (inMesh(source, device))
      for (int64_t i = 0; i < sourceElements; ++i)
        src.push_back(static_cast<int32_t>(device * 100000 + i));
    if (inMesh(destination, device))
      destinations[device].assign(destinationElements, -1);
    else
      destinations[device];
  }
  absl::StatusOr<std::map<int64_t, ExecutionStats>> stats =
      executePlan(backend, *executor, [&](int64_t device) {
        DeviceBuffers buffers;
        buffers.source =
            sources[device].empty() ? nullptr : sources[device].data();
        buffers.destination = destinations[device].empty()
                                  ? nullptr
                                  : destinations[device].data();
        buffers.elementBytes = 4;
        buffers.dtype = DataType::I32;
        return buffers;
      });
  if (!stats.ok())
    return stats.status();
  return destinations;
}

TEST_P(NcclTest, HostBuffersRunPlansLikeTheLoopbackBackend) {
  NEED_DEVICES(4);
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  Mesh pair = makeMesh({{"x", 2}}, {2, 3});
  std::vector<std::pair<TensorLayout, TensorLayout>> cases = {
      // All-gather, all-to-all, a cross-mesh broadcast, a permutation,
      // partial sums reduced and scattered.
      {layout(mesh, {{"a"}, {"b"}}, {8, 6}), layout(mesh, {{}, {}}, {8, 6})},
      {layout(mesh, {{"a"}, {}}, {8, 6}), layout(mesh, {{}, {"a"}}, {8, 6})},
      {layout(pair, {{}, {"x"}}, {8, 6}), layout(mesh, {{}, {"b"}}, {8, 6})},
      {layout(mesh, {{"a", "b"}, {}}, {8, 6}),
       layout(mesh, {{"b", "a"}, {}}, {8, 6})},
      {layout(mesh, {{}, {}}, {8, 6}, {"a"}),
       layout(mesh, {{"a"}, {}}, {8, 6})},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(absl::StrCat("case ", c));
    const auto &[source, destination] = cases[c];
    absl::StatusOr<std::unique_ptr<LoopbackBackend>> loopback =
        LoopbackBackend::create(iota(4));
    ASSERT_TRUE(loopback.ok());
    NcclOptions options;
    options.buffers = NcclBuffers::Host;
    std::unique_ptr<NcclBackend> nccl = make(4, options);
    ASSERT_TRUE(nccl);
    absl::StatusOr<std::map<int64_t, std::vector<int32_t>>> expected =
        runPlan(**loopback, source, destination);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<std::map<int64_t, std::vector<int32_t>>> actual =
        runPlan(*nccl, source, destination);
    ASSERT_TRUE(actual.ok()) << actual.status();
    EXPECT_EQ(*actual, *expected);
  }
}

//===----------------------------------------------------------------------===//
// Stream-ordered completion
//===----------------------------------------------------------------------===//

TEST_P(NcclTest, StreamOrderedCallsReturnBeforeTheirPeers) {
  NEED_DEVICES(2);
  NcclOptions options;
  options.completion = NcclCompletion::StreamOrdered;
  std::unique_ptr<NcclBackend> backend = make(2, options);
  ASSERT_TRUE(backend);
  std::atomic<bool> firstReturned{false};
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    ASSIGN_OR_RETURN(buffer, DeviceArray::upload(
                                 *backend, d, std::vector<double>(4, d + 1.0)));
    if (d == 1) {
      // Give device 0 the chance to return before its peer has called.
      auto start = std::chrono::steady_clock::now();
      while (!firstReturned && secondsSince(start) < 5)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    RETURN_IF_ERROR(backend->allReduce(d, {0, 1}, buffer->data(),
                                       buffer->data(), 4, DataType::F64,
                                       ReduceOp::Sum));
    if (d == 0)
      firstReturned = true;
    RETURN_IF_ERROR(backend->synchronize(d));
    ASSIGN_OR_RETURN(result, buffer->download<double>());
    return expectValues(result, std::vector<double>(4, 3.0), "all_reduce", d);
  });
  EXPECT_TRUE(status.ok()) << status;
  if (simulated()) {
    EXPECT_TRUE(firstReturned);
  }
}

TEST_P(NcclTest, StreamsOrderPackCommunicationAndUnpack) {
  NEED_DEVICES(2);
  NcclOptions options;
  options.completion = NcclCompletion::StreamOrdered;
  std::unique_ptr<NcclBackend> backend = make(2, options);
  ASSERT_TRUE(backend);
  const NcclApi &cuda = *api();
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    // A "compute" stream of the caller packs into `packed`, the backend
    // reduces it, the compute stream unpacks the result to the host.
    if (cuda.setDevice(backend->cudaDevice(d)) != cudaSuccess)
      return absl::InternalError("cudaSetDevice");
    cudaStream_t compute = nullptr;
    if (cuda.streamCreateWithFlags(&compute, cudaStreamNonBlocking) !=
        cudaSuccess)
      return absl::InternalError("cudaStreamCreateWithFlags");
    std::vector<int32_t> input(64, static_cast<int32_t>(d + 1)), output(64, 0);
    ASSIGN_OR_RETURN(packed, backend->allocate(d, 256));
    absl::Status result = [&]() -> absl::Status {
      if (cuda.memcpyAsync(packed, input.data(), 256, cudaMemcpyHostToDevice,
                           compute) != cudaSuccess)
        return absl::InternalError("pack");
      RETURN_IF_ERROR(backend->waitForStream(d, compute));
      RETURN_IF_ERROR(backend->allReduce(d, {0, 1}, packed, packed, 64,
                                         DataType::I32, ReduceOp::Sum));
      RETURN_IF_ERROR(backend->streamWaitForCommunication(d, compute));
      if (cuda.memcpyAsync(output.data(), packed, 256, cudaMemcpyDeviceToHost,
                           compute) != cudaSuccess)
        return absl::InternalError("unpack");
      auto start = std::chrono::steady_clock::now();
      cudaError_t e;
      while ((e = cuda.streamQuery(compute)) == cudaErrorNotReady &&
             secondsSince(start) < 30)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (e != cudaSuccess)
        return absl::InternalError("the compute stream did not finish");
      return expectValues(output, std::vector<int32_t>(64, 3), "unpacked", d);
    }();
    RETURN_IF_ERROR(backend->synchronize(d));
    cuda.streamDestroy(compute);
    RETURN_IF_ERROR(backend->deallocate(d, packed));
    return result;
  });
  EXPECT_TRUE(status.ok()) << status;
}

//===----------------------------------------------------------------------===//
// Errors a call can make
//===----------------------------------------------------------------------===//

TEST_P(NcclTest, InvalidCallsAreRefusedBeforeNccl) {
  NEED_DEVICES(2);
  struct Case {
    const char *name;
    std::function<absl::Status(NcclBackend &, char *device0, char *device1)>
        call;
    const char *message;
  };
  char host[64] = {};
  std::vector<Case> cases = {
      {"unknown device",
       [](NcclBackend &b, char *x, char *) { return b.send(7, 0, x, 4); },
       "calling device 7 is not a device of this process [0,1]"},
      {"peer outside the job",
       [](NcclBackend &b, char *x, char *) { return b.send(0, 9, x, 4); },
       "send: peer 9 is not a device of this job [0,1]"},
      {"not a member",
       [](NcclBackend &b, char *x, char *) {
         return b.allReduce(0, {1}, x, x, 1, DataType::F32, ReduceOp::Sum);
       },
       "all_reduce on group [1]: device 0 called it but is not a member"},
      {"member twice",
       [](NcclBackend &b, char *x, char *) {
         return b.allGather(0, {0, 0}, x, x, 1);
       },
       "device 0 appears twice"},
      {"empty group",
       [](NcclBackend &b, char *x, char *) {
         return b.allToAll(0, {}, x, x, 1);
       },
       "all_to_all on device 0: empty group"},
      {"root not a member",
       [](NcclBackend &b, char *x, char *) {
         return b.broadcast(0, {0}, 1, x, x, 4);
       },
       "broadcast on group [0]: root 1 is not a member"},
      {"negative size",
       [](NcclBackend &b, char *x, char *) { return b.recv(0, 1, x, -1); },
       "negative size -1"},
      {"null buffer",
       [](NcclBackend &b, char *, char *) {
         return b.allReduce(0, {0, 1}, nullptr, nullptr, 4, DataType::F32,
                            ReduceOp::Sum);
       },
       "send buffer is null for 16 bytes"},
      {"unknown dtype",
       [](NcclBackend &b, char *x, char *) {
         return b.allReduce(0, {0, 1}, x, x, 1, static_cast<DataType>(42),
                            ReduceOp::Sum);
       },
       "unknown dtype code 42"},
      {"host memory",
       [&host](NcclBackend &b, char *, char *) {
         return b.send(0, 1, host, 16);
       },
       "is host memory, not device memory"},
      {"another GPU's memory",
       [](NcclBackend &b, char *, char *y) { return b.send(0, 1, y, 16); },
       "the send buffer is memory of CUDA device 1, not of device 0 (CUDA "
       "device 0)"},
      {"partial overlap",
       [](NcclBackend &b, char *x, char *) {
         return b.allReduce(0, {0, 1}, x, x + 4, 4, DataType::F32,
                            ReduceOp::Sum);
       },
       "overlap, but not in NCCL's in-place form"},
      {"group end without start",
       [](NcclBackend &b, char *, char *) { return b.groupEnd(0); },
       "group_end on device 0 without a group_start"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<NcclBackend> backend = make(2);
    ASSERT_TRUE(backend);
    absl::StatusOr<void *> x = backend->allocate(0, 64);
    absl::StatusOr<void *> y = backend->allocate(1, 64);
    ASSERT_TRUE(x.ok() && y.ok());
    absl::Status status =
        c.call(*backend, static_cast<char *>(*x), static_cast<char *>(*y));
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << status;
    // The first error stays, and later calls fail as aborted.
    EXPECT_EQ(backend->firstError(), status);
    absl::Status later = backend->groupStart(1);
    EXPECT_TRUE(absl::IsAborted(later)) << later;
    EXPECT_TRUE(backend->deallocate(0, *x).ok());
    EXPECT_TRUE(backend->deallocate(1, *y).ok());
  }
}

TEST_P(NcclTest, TimeoutWhenAPeerNeverCalls) {
  NEED_DEVICES(2);
  NcclOptions options;
  options.timeout = absl::Milliseconds(300);
  std::unique_ptr<NcclBackend> backend = make(2, options);
  ASSERT_TRUE(backend);
  absl::StatusOr<void *> x = backend->allocate(0, 64);
  ASSERT_TRUE(x.ok());
  auto start = std::chrono::steady_clock::now();
  // Device 1 never joins the world's all-reduce.
  absl::Status status =
      backend->allReduce(0, {0, 1}, *x, *x, 4, DataType::F32, ReduceOp::Sum);
  double elapsed = secondsSince(start);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  // Where NCCL connects lazily, the wait ends in ncclGroupEnd's progress
  // instead of the stream's; either way the call and the device are named.
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("300ms"),
                    HasSubstr("all_reduce on the world [0,1] on device 0 "
                              "(CUDA device 0)")));
  if (simulated()) {
    EXPECT_THAT(status.message(), HasSubstr("timeout after 300ms"));
  }
  EXPECT_GE(elapsed, 0.29);
  EXPECT_LT(elapsed, 30.0);
  EXPECT_TRUE(backend->deallocate(0, *x).ok());
}

TEST_P(NcclTest, CommunicatorCreationTimesOut) {
  NEED_DEVICES(2);
  NcclOptions options;
  options.timeout = absl::Milliseconds(300);
  std::unique_ptr<NcclBackend> backend = make(2, options);
  ASSERT_TRUE(backend);
  absl::StatusOr<void *> x = backend->allocate(0, 64);
  ASSERT_TRUE(x.ok());
  // Device 1 is rank 0 of [1,0] and never publishes the group's id.
  // In place: device 0 is rank 1 of [1,0].
  absl::Status status =
      backend->allGather(0, {1, 0}, static_cast<char *>(*x) + 1, *x, 1);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("the unique id of group [1,0]"),
                    HasSubstr("key 'polymesh/nccl/comm/1,0'"),
                    HasSubstr("its rank 0 never reached the call")));
  EXPECT_TRUE(backend->deallocate(0, *x).ok());
}

TEST_P(NcclTest, AbortReleasesAWaitingDevice) {
  NEED_DEVICES(2);
  std::unique_ptr<NcclBackend> backend = make(2);
  ASSERT_TRUE(backend);
  absl::StatusOr<void *> x = backend->allocate(0, 64);
  ASSERT_TRUE(x.ok());
  absl::Status status;
  auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    status =
        backend->allReduce(0, {0, 1}, *x, *x, 4, DataType::F32, ReduceOp::Sum);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  backend->abort(absl::InternalError("device 1 crashed"));
  waiter.join();
  EXPECT_LT(secondsSince(start), 30.0);
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("aborted because of an earlier error: device 1 "
                        "crashed"));
  EXPECT_EQ(backend->firstError(), absl::InternalError("device 1 crashed"));
  EXPECT_TRUE(backend->deallocate(0, *x).ok());
}

TEST_P(NcclTest, ASecondThreadForABusyDeviceIsRefused) {
  NEED_DEVICES(2);
  std::unique_ptr<NcclBackend> backend = make(2);
  ASSERT_TRUE(backend);
  absl::StatusOr<void *> x = backend->allocate(0, 64);
  ASSERT_TRUE(x.ok());
  absl::Status status;
  std::thread waiter([&] {
    status =
        backend->allReduce(0, {0, 1}, *x, *x, 4, DataType::F32, ReduceOp::Sum);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  absl::Status concurrent = backend->groupStart(0);
  waiter.join();
  EXPECT_TRUE(absl::IsFailedPrecondition(concurrent)) << concurrent;
  EXPECT_THAT(concurrent.message(),
              HasSubstr("device 0 called the runtime while another thread is "
                        "in a call for it"));
  // That error aborts the backend, which releases the waiting call.
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("while another thread"));
  EXPECT_TRUE(backend->deallocate(0, *x).ok());
}

//===----------------------------------------------------------------------===//
// Simulated failures of CUDA and NCCL
//===----------------------------------------------------------------------===//

class NcclSimulatedTest : public ::testing::Test {
protected:
  void SetUp() override { resetSimulatedGpus(4); }
  void TearDown() override {
    FakeNccl::Counts counts = FakeNccl::counts();
    EXPECT_EQ(counts.allocations, 0);
    EXPECT_EQ(counts.streams, 0);
    EXPECT_EQ(counts.events, 0);
    EXPECT_EQ(counts.communicators, 0);
  }

  std::unique_ptr<NcclBackend> make(int n, NcclOptions options = {}) {
    options.api = &simulatedNcclApi();
    if (options.timeout == absl::Minutes(5))
      options.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
        NcclBackend::createSingleProcess(iota(n), options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? *std::move(backend) : nullptr;
  }
};

TEST_F(NcclSimulatedTest, NoDeviceIsUnavailable) {
  resetSimulatedGpus(0);
  NcclOptions options;
  options.api = &simulatedNcclApi();
  absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
      NcclBackend::createSingleProcess({}, options);
  EXPECT_TRUE(absl::IsUnavailable(backend.status())) << backend.status();
  EXPECT_THAT(std::string(backend.status().message()),
              StartsWith("no CUDA device: cudaGetDeviceCount failed: "
                         "cudaErrorNoDevice: no CUDA-capable device is "
                         "detected"));
}

TEST_F(NcclSimulatedTest, DevicesMustExist) {
  NcclOptions options;
  options.api = &simulatedNcclApi();
  options.worldDevices = {0, 1};
  options.localDevices = {{0, 0}, {1, 7}};
  absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
      NcclBackend::create(options);
  EXPECT_TRUE(absl::IsInvalidArgument(backend.status())) << backend.status();
  EXPECT_THAT(backend.status().message(),
              HasSubstr("device 1 is on CUDA device 7, but this process sees "
                        "4 CUDA devices"));
  backend = NcclBackend::createSingleProcess(iota(5), options);
  EXPECT_TRUE(absl::IsFailedPrecondition(backend.status())) << backend.status();
  EXPECT_THAT(backend.status().message(),
              HasSubstr("5 devices [0,1,2,3,4] need as many GPUs, but this "
                        "process sees 4"));
}

TEST_F(NcclSimulatedTest, AnNcclErrorIsReportedAndReleasesThePeers) {
  std::unique_ptr<NcclBackend> backend = make(2);
  ASSERT_TRUE(backend);
  FakeNccl::failNextNccl("ncclAllReduce", ncclUnhandledCudaError,
                         "injected: cudaLaunchKernel failed", /*device=*/1);
  std::vector<absl::Status> results(2);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    absl::StatusOr<void *> x = backend->allocate(d, 64);
    if (!x.ok())
      return x.status();
    results[d] =
        backend->allReduce(d, {0, 1}, *x, *x, 4, DataType::F32, ReduceOp::Sum);
    backend->deallocate(d, *x).IgnoreError();
    return results[d];
  });
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::IsInternal(results[1])) << results[1];
  EXPECT_THAT(std::string(results[1].message()),
              AllOf(StartsWith("ncclAllReduce for all_reduce on the world "
                               "[0,1] on device 1 (CUDA device 1) failed: "
                               "unhandled cuda error"),
                    HasSubstr("injected: cudaLaunchKernel failed")));
  // Device 0 was waiting for device 1's kernel, and is released.
  EXPECT_TRUE(absl::IsAborted(results[0])) << results[0];
  EXPECT_EQ(backend->firstError(), results[1]);
  backend.reset();
  // Both devices aborted their communicators instead of destroying them.
  EXPECT_EQ(FakeNccl::counts().abortedCommunicators, 2);
  EXPECT_EQ(FakeNccl::counts().destroyed, 0);
}

TEST_F(NcclSimulatedTest, AnAsynchronousErrorEndsTheWait) {
  std::unique_ptr<NcclBackend> backend = make(2);
  ASSERT_TRUE(backend);
  absl::StatusOr<void *> x = backend->allocate(0, 64);
  ASSERT_TRUE(x.ok());
  absl::Status status;
  std::thread waiter([&] {
    status =
        backend->allReduce(0, {0, 1}, *x, *x, 4, DataType::F32, ReduceOp::Sum);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  FakeNccl::failCommunicatorsAsync(0, ncclRemoteError,
                                   "peer rank 1 exited unexpectedly");
  waiter.join();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("on device 0 (CUDA device 0)"),
                    HasSubstr("remote process exited"),
                    HasSubstr("peer rank 1 exited unexpectedly")));
  EXPECT_TRUE(backend->deallocate(0, *x).ok());
}

TEST_F(NcclSimulatedTest, MismatchedCallsFailTheSimulatedCommunicator) {
  // Real NCCL cannot tell (it hangs or corrupts; the timeout reports the
  // hang); the simulator reports it, which shows the asynchronous path.
  std::unique_ptr<NcclBackend> backend = make(2);
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    ASSIGN_OR_RETURN(
        x, DeviceArray::upload(*backend, d, std::vector<float>(8, 1.0f)));
    return backend->allReduce(d, {0, 1}, x->data(), x->data(), d == 0 ? 4 : 8,
                              DataType::F32, ReduceOp::Sum);
  });
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("invalid usage"),
                    HasSubstr("members made different collective calls")));
}

TEST_F(NcclSimulatedTest, CudaErrorsNameTheCall) {
  NcclOptions options;
  options.buffers = NcclBuffers::Host;
  std::unique_ptr<NcclBackend> backend = make(2, options);
  ASSERT_TRUE(backend);
  FakeNccl::failNextCuda("cudaMalloc", cudaErrorMemoryAllocation, 0);
  std::vector<float> values(4, 1.0f);
  absl::Status status = backend->allReduce(
      0, {0, 1}, values.data(), values.data(), 4, DataType::F32, ReduceOp::Sum);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("cudaMalloc for 1048576 bytes of staging memory on "
                        "device 0 (CUDA device 0) failed: "
                        "cudaErrorMemoryAllocation: out of memory"));

  std::unique_ptr<NcclBackend> other = make(2);
  ASSERT_TRUE(other);
  absl::StatusOr<void *> x = other->allocate(1, 16);
  ASSERT_TRUE(x.ok());
  FakeNccl::failNextCuda("cudaStreamQuery", cudaErrorIllegalAddress, 1);
  std::vector<char> host(16, 'x');
  status = other->copyToDevice(1, *x, host.data(), 16);
  EXPECT_TRUE(absl::IsInternal(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("cudaStreamQuery for copy to the device on device 1 "
                        "(CUDA device 1) failed: cudaErrorIllegalAddress: an "
                        "illegal memory access was encountered"));
  EXPECT_TRUE(other->deallocate(1, *x).ok());
}

TEST_F(NcclSimulatedTest, FailedCreationReleasesEverything) {
  FakeNccl::failNextNccl("ncclCommInitRankConfig", ncclSystemError,
                         "injected: socket bind failed", 2);
  NcclOptions options;
  options.api = &simulatedNcclApi();
  absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
      NcclBackend::createSingleProcess(iota(4), options);
  EXPECT_TRUE(absl::IsInternal(backend.status())) << backend.status();
  EXPECT_THAT(
      backend.status().message(),
      AllOf(HasSubstr("ncclCommInitRankConfig for the communicator of "
                      "the world [0,1,2,3] on device 2 (CUDA device 2)"),
            HasSubstr("injected: socket bind failed")));
  // TearDown checks that no stream, event or communicator is left.
}

TEST_F(NcclSimulatedTest, ResourcesAreReleased) {
  std::unique_ptr<NcclBackend> backend = make(3);
  ASSERT_TRUE(backend);
  absl::Status status = runOnDevices(*backend, [&](int64_t d) -> absl::Status {
    ASSIGN_OR_RETURN(
        x, DeviceArray::upload(*backend, d, std::vector<int8_t>(12, 1)));
    RETURN_IF_ERROR(backend->allToAll(d, {2, 1, 0}, x->data(), x->data(), 4));
    if (d != 2)
      RETURN_IF_ERROR(backend->allReduce(d, {0, 1}, x->data(), x->data(), 12,
                                         DataType::I8, ReduceOp::Sum));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  FakeNccl::Counts counts = FakeNccl::counts();
  EXPECT_EQ(counts.streams, 3);
  EXPECT_EQ(counts.events, 6);
  EXPECT_EQ(counts.communicators, 3 + 3 + 2);
  // The all-to-all: one group of 2 sends and 2 receives per device.
  EXPECT_EQ(counts.largestGroup, 4);
  backend.reset();
  counts = FakeNccl::counts();
  EXPECT_EQ(counts.destroyed, 8);
  EXPECT_EQ(counts.abortedCommunicators, 0);
}

TEST_F(NcclSimulatedTest, BackendsSharingAStoreNeedTheirOwnPrefix) {
  // Two processes' worth of backends (one device each) on one store.
  auto store = std::make_shared<MemoryStore>();
  auto createPair = [&](const std::string &prefix) {
    std::vector<absl::StatusOr<std::unique_ptr<NcclBackend>>> made(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        NcclOptions options;
        options.api = &simulatedNcclApi();
        options.worldDevices = {0, 1};
        options.localDevices = {{r, r}};
        options.store = store;
        options.storePrefix = prefix;
        options.timeout = absl::Seconds(2);
        made[r] = NcclBackend::create(options);
      });
    for (std::thread &t : threads)
      t.join();
    return made;
  };
  auto first = createPair("job/a");
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  ASSERT_TRUE(first[1].ok()) << first[1].status();
  auto second = createPair("job/b");
  EXPECT_TRUE(second[0].ok()) << second[0].status();
  EXPECT_TRUE(second[1].ok()) << second[1].status();
  // The same prefix again: rank 0 cannot publish the world's id.
  NcclOptions options;
  options.api = &simulatedNcclApi();
  options.worldDevices = {0, 1};
  options.localDevices = {{0, 2}};
  options.store = store;
  options.storePrefix = "job/a";
  absl::StatusOr<std::unique_ptr<NcclBackend>> clash =
      NcclBackend::create(options);
  EXPECT_TRUE(absl::IsFailedPrecondition(clash.status())) << clash.status();
  EXPECT_THAT(clash.status().message(),
              AllOf(HasSubstr("'job/a/world' is already set"),
                    HasSubstr("give each its own storePrefix")));
}

//===----------------------------------------------------------------------===//
// One process per GPU, simulated by threads with their own backends
//===----------------------------------------------------------------------===//

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

/// What each "process" of a 3-rank job does with its one device.
absl::Status rankProgram(NcclBackend &backend) {
  int64_t d = backend.devices()[0];
  if (backend.worldDevices().size() != 3 || backend.cudaDevice(d) != d)
    return absl::InternalError("wrong world or CUDA device");
  std::vector<float> mine(16, static_cast<float>(d + 1));
  ASSIGN_OR_RETURN(x, DeviceArray::upload(backend, d, mine));
  RETURN_IF_ERROR(backend.allReduce(d, {0, 1, 2}, x->data(), x->data(), 16,
                                    DataType::F32, ReduceOp::Sum));
  ASSIGN_OR_RETURN(sum, x->download<float>());
  RETURN_IF_ERROR(expectValues(sum, std::vector<float>(16, 6.0f), "sum", d));
  // A group created on first use, its id through the store.
  if (d != 1) {
    ASSIGN_OR_RETURN(
        y, DeviceArray::upload(backend, d, std::vector<float>(2, d * 1.0f)));
    ASSIGN_OR_RETURN(
        z, DeviceArray::upload(backend, d, std::vector<float>(4, -1.0f)));
    RETURN_IF_ERROR(backend.allGather(d, {2, 0}, y->data(), z->data(), 8));
    ASSIGN_OR_RETURN(gathered, z->download<float>());
    RETURN_IF_ERROR(expectValues(gathered, {2.0f, 2.0f, 0.0f, 0.0f},
                                 "all_gather on [2,0]", d));
  }
  // A ring of send/recv over the world communicator.
  ASSIGN_OR_RETURN(
      in, DeviceArray::upload(backend, d, std::vector<float>(16, 0.0f)));
  RETURN_IF_ERROR(backend.groupStart(d));
  RETURN_IF_ERROR(backend.send(d, (d + 1) % 3, x->data(), 64));
  RETURN_IF_ERROR(backend.recv(d, (d + 2) % 3, in->data(), 64));
  RETURN_IF_ERROR(backend.groupEnd(d));
  ASSIGN_OR_RETURN(ring, in->download<float>());
  return expectValues(ring, std::vector<float>(16, 6.0f), "ring", d);
}

void runJob(const std::function<LaunchEnvironment(int)> &environmentOf) {
  std::vector<absl::Status> results(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      NcclOptions options;
      options.api = &simulatedNcclApi();
      options.timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
          NcclBackend::createFromLaunchEnvironment(environmentOf(r), options);
      if (!backend.ok()) {
        results[r] = backend.status();
        return;
      }
      results[r] = rankProgram(**backend);
    });
  for (std::thread &t : ranks)
    t.join();
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST_F(NcclSimulatedTest, OneProcessPerGpuThroughATcpStore) {
  int port = freePort();
  runJob([&](int rank) {
    LaunchEnvironment env;
    env.rank = rank;
    env.worldSize = 3;
    env.localRank = rank;
    env.masterAddr = "127.0.0.1";
    env.masterPort = port;
    return env;
  });
}

TEST_F(NcclSimulatedTest, OneProcessPerGpuThroughAFileStore) {
  char pattern[] = "/tmp/polymesh-nccl-XXXXXX";
  const char *dir = ::mkdtemp(pattern);
  ASSERT_NE(dir, nullptr);
  runJob([&](int rank) {
    LaunchEnvironment env;
    env.rank = rank;
    env.worldSize = 3;
    env.localRank = rank;
    env.storeDir = dir;
    return env;
  });
}

TEST_F(NcclSimulatedTest, ALaunchedJobNeedsAStore) {
  LaunchEnvironment env;
  env.rank = 1;
  env.worldSize = 2;
  env.localRank = 1;
  NcclOptions options;
  options.api = &simulatedNcclApi();
  absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
      NcclBackend::createFromLaunchEnvironment(env, options);
  EXPECT_TRUE(absl::IsInvalidArgument(backend.status())) << backend.status();
  EXPECT_THAT(backend.status().message(),
              HasSubstr("set MASTER_ADDR and MASTER_PORT"));
}

//===----------------------------------------------------------------------===//
// The real libraries without a GPU
//===----------------------------------------------------------------------===//

TEST(NcclWithoutGpuTest, CreationSaysNoCudaDevice) {
  absl::StatusOr<int> count = cudaDeviceCount();
  if (count.ok())
    GTEST_SKIP() << "this machine has " << *count
                 << " CUDA devices; the no-device path is not reachable";
  EXPECT_TRUE(absl::IsUnavailable(count.status())) << count.status();
  EXPECT_THAT(std::string(count.status().message()),
              StartsWith("no CUDA device: cudaGetDeviceCount failed: cuda"));
  absl::StatusOr<std::unique_ptr<NcclBackend>> single =
      NcclBackend::createSingleProcess();
  EXPECT_EQ(single.status(), count.status());
  NcclOptions options;
  options.worldDevices = {0, 1};
  options.localDevices = {{0, 0}, {1, 1}};
  absl::StatusOr<std::unique_ptr<NcclBackend>> created =
      NcclBackend::create(options);
  EXPECT_EQ(created.status(), count.status());
  // A launched rank fails at once instead of waiting for its peers.
  LaunchEnvironment env;
  env.rank = 1;
  env.worldSize = 2;
  env.localRank = 1;
  env.masterAddr = "127.0.0.1";
  env.masterPort = freePort();
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<NcclBackend>> launched =
      NcclBackend::createFromLaunchEnvironment(env);
  EXPECT_EQ(launched.status(), count.status());
  EXPECT_LT(secondsSince(start), 5.0);
}

TEST(NcclWithoutGpuTest, OptionsAreCheckedBeforeCuda) {
  struct Case {
    std::function<void(NcclOptions &)> change;
    const char *message;
  };
  std::vector<Case> cases = {
      {[](NcclOptions &o) { o.worldDevices.clear(); }, "no world devices"},
      {[](NcclOptions &o) {
         o.worldDevices = {0, -1};
       },
       "device id -1 is negative"},
      {[](NcclOptions &o) {
         o.worldDevices = {0, 1, 0};
       },
       "device id 0 appears twice in [0,1,0]"},
      {[](NcclOptions &o) { o.localDevices.clear(); },
       "this process drives no device"},
      {[](NcclOptions &o) {
         o.localDevices = {{5, 0}};
       },
       "local device 5 is not a world device [0,1]"},
      {[](NcclOptions &o) {
         o.localDevices = {{0, 0}, {0, 1}};
       },
       "local device 0 appears twice"},
      {[](NcclOptions &o) {
         o.localDevices = {{0, 0}, {1, 0}};
       },
       "devices 0 and 1 are both on CUDA device 0"},
      {[](NcclOptions &o) {
         o.localDevices = {{0, -1}, {1, 0}};
       },
       "negative CUDA device -1"},
      {[](NcclOptions &o) {
         o.localDevices = {{0, 0}};
       },
       "1 devices are driven by other processes, so a store is needed"},
      {[](NcclOptions &o) { o.timeout = absl::ZeroDuration(); },
       "the timeout must be positive and finite"},
      {[](NcclOptions &o) {
         o.buffers = NcclBuffers::Host;
         o.completion = NcclCompletion::StreamOrdered;
       },
       "host buffers need blocking completion"},
      {[](NcclOptions &o) { o.storePrefix.clear(); }, "empty store prefix"},
  };
  for (const Case &c : cases) {
    NcclOptions options;
    options.worldDevices = {0, 1};
    options.localDevices = {{0, 0}, {1, 1}};
    c.change(options);
    absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
        NcclBackend::create(options);
    EXPECT_TRUE(absl::IsInvalidArgument(backend.status()))
        << c.message << ": " << backend.status();
    EXPECT_THAT(backend.status().message(), HasSubstr(c.message));
  }
}

TEST(NcclWithoutGpuTest, RealUniqueIdsCrossProcessesThroughATcpStore) {
  // ncclGetUniqueId needs no GPU. Rank 0 makes a real id and serves it;
  // ranks 1 and 2 read it and send back what they read; rank 0 compares.
  // Where there is a GPU the NCCL tests above do this for real (and CUDA
  // does not survive a fork).
  if (absl::StatusOr<int> count = cudaDeviceCount(); count.ok())
    GTEST_SKIP() << "this machine has CUDA devices; the GPU tests cover ids";
  int port = freePort();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 3; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      TcpStoreOptions options;
      options.host = "127.0.0.1";
      options.listenAddress = "127.0.0.1";
      options.port = port;
      options.isServer = rank == 0;
      options.connectTimeout = absl::Seconds(20);
      absl::StatusOr<std::unique_ptr<TcpStore>> store =
          TcpStore::create(options);
      if (!store.ok())
        ::_exit(2);
      int code = 0;
      if (rank == 0) {
        ncclUniqueId id;
        if (ncclGetUniqueId(&id) != ncclSuccess)
          ::_exit(3);
        std::string bytes(id.internal, sizeof(id.internal));
        if (!(*store)->set("world", bytes).ok())
          ::_exit(4);
        for (int peer = 1; peer < 3; ++peer) {
          absl::StatusOr<std::string> echo =
              (*store)->get(absl::StrCat("echo/", peer), absl::Seconds(20));
          if (!echo.ok() || *echo != bytes)
            code = 5;
        }
      } else {
        absl::StatusOr<std::string> id =
            (*store)->get("world", absl::Seconds(20));
        if (!id.ok() || id->size() != 128 ||
            !(*store)->set(absl::StrCat("echo/", rank), *id).ok())
          code = 6;
      }
      store->reset();
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  for (int rank = 0; rank < 3; ++rank) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[rank], &status, 0), pids[rank]);
    EXPECT_TRUE(WIFEXITED(status)) << "rank " << rank;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "rank " << rank;
  }
}

} // namespace
