//===- CApiTest.cpp - Tests of the C ABI ----------------------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Every polymesh_rt_* function, called the way generated code calls it: a
// device function per device through polymesh_rt_run_devices, status codes,
// and the first error kept in the runtime. CApiSmoke.c runs a program
// compiled as C.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/PolymeshRuntime.h"

#include "CApiSmoke.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

/// Owns a runtime; runs a C++ callable as the C device function.
class Runtime {
public:
  Runtime(std::vector<int64_t> devices, int64_t timeoutMs = 20000)
      : rt(polymesh_rt_create_loopback(
            devices.data(), static_cast<int64_t>(devices.size()), timeoutMs)) {}
  ~Runtime() { polymesh_rt_destroy(rt); }

  int32_t run(std::function<int32_t(PolymeshRuntime *, int64_t)> fn) {
    return polymesh_rt_run_devices(
        rt,
        [](PolymeshRuntime *rt, int64_t device, void *user) {
          return (*static_cast<decltype(fn) *>(user))(rt, device);
        },
        &fn);
  }

  PolymeshRuntime *rt;
};

TEST(CApi, ProgramCompiledAsC) { EXPECT_EQ(polymeshCSmokeRun(), 0); }

TEST(CApi, Queries) {
  Runtime r({4, 7, 9});
  EXPECT_EQ(polymesh_rt_num_devices(r.rt), 3);
  EXPECT_EQ(polymesh_rt_device_id(r.rt, 1), 7);
  EXPECT_EQ(polymesh_rt_device_id(r.rt, 3), -1);
  EXPECT_EQ(polymesh_rt_status(r.rt), POLYMESH_RT_OK);
  EXPECT_STREQ(polymesh_rt_last_error(r.rt), "");
  EXPECT_EQ(polymesh_rt_dtype_size(POLYMESH_RT_BF16), 2);
  EXPECT_EQ(polymesh_rt_dtype_size(POLYMESH_RT_I64), 8);
  EXPECT_EQ(polymesh_rt_dtype_size(99), 0);
  // One process: the runtime carries every message of the MPI lowering.
  EXPECT_EQ(polymesh_rt_mpi_route(r.rt, 4, 9, 1), -1);
  EXPECT_EQ(polymesh_rt_mpi_route(r.rt, 9, 4, 0), -1);
  EXPECT_EQ(polymesh_rt_mpi_route(nullptr, 4, 9, 1), -1);
  EXPECT_EQ(polymesh_rt_status(r.rt), POLYMESH_RT_OK);
}

TEST(CApi, FailedCreationKeepsTheReason) {
  int64_t ids[] = {1, 1};
  PolymeshRuntime *rt = polymesh_rt_create_loopback(ids, 2, 100);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(polymesh_rt_status(rt), POLYMESH_RT_INVALID_ARGUMENT);
  EXPECT_THAT(polymesh_rt_last_error(rt), HasSubstr("appears twice"));
  EXPECT_EQ(polymesh_rt_num_devices(rt), 0);
  int64_t x = 0;
  EXPECT_EQ(polymesh_rt_send(rt, 1, 1, &x, 8), POLYMESH_RT_INVALID_ARGUMENT);
  polymesh_rt_destroy(rt);

  PolymeshRuntime *empty = polymesh_rt_create_loopback(nullptr, 0, 100);
  EXPECT_THAT(polymesh_rt_last_error(empty), HasSubstr("empty or null"));
  polymesh_rt_destroy(empty);
  polymesh_rt_destroy(nullptr);
}

TEST(CApi, EveryCollective) {
  const int64_t members[] = {7, 4, 9};
  Runtime r({4, 7, 9});
  int32_t status = r.run([&](PolymeshRuntime *rt, int64_t d) -> int32_t {
    int64_t rank = d == 7 ? 0 : d == 4 ? 1 : 2;
    int32_t s;
    // broadcast from 9, in place on the root
    int32_t b[2] = {int32_t(d), int32_t(d)};
    if ((s = polymesh_rt_broadcast(rt, d, members, 3, 9, b, b, 8)))
      return s;
    if (b[0] != 9 || b[1] != 9)
      return 100;
    // all_gather in rank order
    int32_t mine = int32_t(d), all[3];
    if ((s = polymesh_rt_all_gather(rt, d, members, 3, &mine, all, 4)))
      return s;
    if (all[0] != 7 || all[1] != 4 || all[2] != 9)
      return 101;
    // all_to_all: chunk j of rank i is 10 * i + j
    int32_t out[3], in[3];
    for (int j = 0; j < 3; ++j)
      out[j] = int32_t(10 * rank + j);
    if ((s = polymesh_rt_all_to_all(rt, d, members, 3, out, in, 4)))
      return s;
    for (int i = 0; i < 3; ++i)
      if (in[i] != 10 * i + rank)
        return 102;
    // all_reduce f32 max
    float x = float(d), m = 0;
    if ((s = polymesh_rt_all_reduce(rt, d, members, 3, &x, &m, 1,
                                    POLYMESH_RT_F32, POLYMESH_RT_MAX)))
      return s;
    if (m != 9.0f)
      return 103;
    // reduce_scatter i64 sum, in place
    int64_t full[3] = {d, 2 * d, 3 * d};
    if ((s = polymesh_rt_reduce_scatter(rt, d, members, 3, full, full + rank, 1,
                                        POLYMESH_RT_I64, POLYMESH_RT_SUM)))
      return s;
    if (full[rank] != (rank + 1) * (4 + 7 + 9))
      return 104;
    // copy
    int64_t src[2] = {d, -d}, dst[2] = {0, 0};
    if ((s = polymesh_rt_copy(rt, d, dst, src, 16)))
      return s;
    return dst[0] == d && dst[1] == -d ? 0 : 105;
  });
  EXPECT_EQ(status, POLYMESH_RT_OK) << polymesh_rt_last_error(r.rt);
}

TEST(CApi, DevicesThatNeverJoinAreNamed) {
  const int64_t members[] = {0, 1, 2, 3};
  Runtime r({0, 1, 2, 3}, /*timeoutMs=*/200);
  // Devices 2 and 3 never join; devices 0 and 1 wait on them.
  int32_t status = r.run([&](PolymeshRuntime *rt, int64_t d) -> int32_t {
    int64_t all[4];
    return d < 2 ? polymesh_rt_all_gather(rt, d, members, 4, &d, all, 8) : 0;
  });
  EXPECT_EQ(status, POLYMESH_RT_TIMEOUT);
  EXPECT_EQ(polymesh_rt_status(r.rt), POLYMESH_RT_TIMEOUT);
  const char *error = polymesh_rt_last_error(r.rt);
  EXPECT_THAT(error, AllOf(HasSubstr("all_gather #0 on group [0,1,2,3]"),
                           HasSubstr("devices 2 and 3 never joined")));
  // The message is kept: later failures do not replace it.
  int64_t x = 0;
  EXPECT_EQ(polymesh_rt_send(r.rt, 0, 1, &x, 8), POLYMESH_RT_ABORTED);
  EXPECT_EQ(polymesh_rt_copy(r.rt, 0, &x, &x, 8), POLYMESH_RT_ABORTED);
  EXPECT_EQ(polymesh_rt_last_error(r.rt), error);
}

TEST(CApi, DeviceFunctionFailureAbortsTheRun) {
  Runtime r({0, 1});
  int32_t status = r.run([&](PolymeshRuntime *rt, int64_t d) -> int32_t {
    if (d == 1)
      return 42;
    int64_t x = 0;
    return polymesh_rt_recv(rt, 0, 1, &x, 8); // released by the failure
  });
  EXPECT_EQ(status, POLYMESH_RT_DEVICE_FAILED);
  EXPECT_STREQ(polymesh_rt_last_error(r.rt),
               "device 1: device function returned status 42");
}

TEST(CApi, InvalidCodesAndMembers) {
  struct Case {
    std::function<int32_t(PolymeshRuntime *)> call;
    int32_t code;
    const char *message;
  };
  const int64_t members[] = {0};
  int64_t x = 0, y = 0;
  std::vector<Case> cases = {
      {[&](PolymeshRuntime *rt) {
         return polymesh_rt_all_reduce(rt, 0, members, 1, &x, &y, 1, 77,
                                       POLYMESH_RT_SUM);
       },
       POLYMESH_RT_INVALID_ARGUMENT, "unknown dtype code 77"},
      {[&](PolymeshRuntime *rt) {
         return polymesh_rt_reduce_scatter(rt, 0, members, 1, &x, &y, 1,
                                           POLYMESH_RT_I64, 9);
       },
       POLYMESH_RT_INVALID_ARGUMENT, "unknown reduction op code 9"},
      {[&](PolymeshRuntime *rt) {
         return polymesh_rt_all_gather(rt, 0, nullptr, 2, &x, &y, 8);
       },
       POLYMESH_RT_INVALID_ARGUMENT, "all_gather: empty or null member list"},
      {[&](PolymeshRuntime *rt) { return polymesh_rt_group_end(rt, 0); },
       POLYMESH_RT_FAILED_PRECONDITION, "without a group_start"},
      {[&](PolymeshRuntime *rt) { return polymesh_rt_copy(rt, 3, &x, &y, 8); },
       POLYMESH_RT_INVALID_ARGUMENT, "copy: calling device 3"},
      {[&](PolymeshRuntime *rt) {
         return polymesh_rt_run_devices(rt, nullptr, nullptr);
       },
       POLYMESH_RT_INVALID_ARGUMENT, "null device function"},
  };
  for (const Case &c : cases) {
    Runtime r({0});
    EXPECT_EQ(c.call(r.rt), c.code);
    EXPECT_THAT(polymesh_rt_last_error(r.rt), HasSubstr(c.message));
  }
}

TEST(CApi, GroupedSendRecvAndZeroBytes) {
  Runtime r({2, 3});
  int32_t status = r.run([&](PolymeshRuntime *rt, int64_t d) -> int32_t {
    int64_t peer = 5 - d, out = d, in = -1;
    int32_t s;
    if ((s = polymesh_rt_group_start(rt, d)) ||
        (s = polymesh_rt_send(rt, d, peer, &out, 8)) ||
        (s = polymesh_rt_send(rt, d, peer, nullptr, 0)) ||
        (s = polymesh_rt_recv(rt, d, peer, &in, 8)) ||
        (s = polymesh_rt_recv(rt, d, peer, nullptr, 0)) ||
        (s = polymesh_rt_group_end(rt, d)))
      return s;
    return in == peer ? 0 : 100;
  });
  EXPECT_EQ(status, POLYMESH_RT_OK) << polymesh_rt_last_error(r.rt);
}

} // namespace
