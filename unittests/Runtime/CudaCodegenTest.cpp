//===- CudaCodegenTest.cpp - The ABI of CUDA-lowered code -----------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// PolymeshCudaRuntime.h on the simulated CUDA and NCCL (NcclFake.h): what
// --polymesh-lower-to-cuda's host code calls, from one thread per device as
// a run would; and its errors without a GPU or driver. Launching kernels
// needs a GPU: without one the wrappers must fail cleanly.
//
//===----------------------------------------------------------------------===//

#include "NcclFake.h"

#include "polymesh/Runtime/NcclBackend.h"
#include "polymesh/Runtime/PolymeshCudaRuntime.h"
#include "polymesh/Runtime/Runtime.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace polymesh::runtime;

namespace {

PolymeshRuntime *simulatedRuntime(int n) {
  FakeNccl::reset(n);
  NcclOptions options;
  options.api = &fakeNcclApi();
  options.timeout = absl::Seconds(30);
  std::vector<int64_t> ids;
  for (int i = 0; i < n; ++i)
    ids.push_back(i);
  absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
      NcclBackend::createSingleProcess(ids, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return wrapBackend(backend.ok() ? *std::move(backend) : nullptr);
}

/// What one device of a CUDA-lowered function does before and after its
/// kernels and NCCL calls: stream, world communicator, staging memory, a
/// copy, synchronize, free.
int32_t deviceProgram(PolymeshRuntime *rt, int64_t device, void *user) {
  auto *members = static_cast<std::vector<int64_t> *>(user);
  if (!polymesh_rt_cuda_stream(rt, device))
    return 1;
  if (!polymesh_rt_nccl_comm(rt, device, members->data(), members->size()))
    return 2;
  void *a = polymesh_rt_device_alloc(rt, device, 256);
  void *b = polymesh_rt_device_alloc(rt, device, 256);
  if (!a || !b)
    return 3;
  if (polymesh_rt_device_copy(rt, device, b, a, 256) != POLYMESH_RT_OK)
    return 4;
  if (polymesh_rt_device_synchronize(rt, device) != POLYMESH_RT_OK)
    return 5;
  polymesh_rt_device_free(rt, device, a);
  polymesh_rt_device_free(rt, device, b);
  return 0;
}

TEST(CudaCodegenRuntime, SimulatedDevicesGetStreamsCommunicatorsAndMemory) {
  PolymeshRuntime *rt = simulatedRuntime(4);
  std::vector<int64_t> members = {0, 1, 2, 3};
  EXPECT_EQ(polymesh_rt_run_devices(rt, deviceProgram, &members),
            POLYMESH_RT_OK)
      << polymesh_rt_last_error(rt);
  EXPECT_EQ(polymesh_rt_status(rt), POLYMESH_RT_OK);
  // One world communicator; the group of all four is the same member list.
  EXPECT_GE(FakeNccl::counts().communicators, 1);
  polymesh_rt_destroy(rt);
}

TEST(CudaCodegenRuntime, SubgroupCommunicatorIsCollectiveOverItsMembers) {
  PolymeshRuntime *rt = simulatedRuntime(4);
  // Devices 1 and 3 form a broadcast group; 0 and 2 do not take part.
  auto program = [](PolymeshRuntime *rt, int64_t device, void *) -> int32_t {
    if (device % 2 == 0)
      return 0;
    int64_t members[] = {1, 3};
    return polymesh_rt_nccl_comm(rt, device, members, 2) ? 0 : 1;
  };
  EXPECT_EQ(polymesh_rt_run_devices(rt, program, nullptr), POLYMESH_RT_OK)
      << polymesh_rt_last_error(rt);
  polymesh_rt_destroy(rt);
}

TEST(CudaCodegenRuntime, NonMemberAskingForACommunicatorFailsTheRun) {
  PolymeshRuntime *rt = simulatedRuntime(2);
  int64_t members[] = {1};
  EXPECT_EQ(polymesh_rt_nccl_comm(rt, 0, members, 1), nullptr);
  EXPECT_NE(polymesh_rt_status(rt), POLYMESH_RT_OK);
  EXPECT_NE(std::string(polymesh_rt_last_error(rt)).find("not a member"),
            std::string::npos)
      << polymesh_rt_last_error(rt);
  polymesh_rt_destroy(rt);
}

TEST(CudaCodegenRuntime, LoopbackRuntimeIsNotAnNcclRuntime) {
  int64_t ids[] = {0};
  PolymeshRuntime *rt = polymesh_rt_create_loopback(ids, 1, 0);
  EXPECT_EQ(polymesh_rt_cuda_stream(rt, 0), nullptr);
  EXPECT_NE(std::string(polymesh_rt_last_error(rt))
                .find("the runtime is not an NCCL runtime"),
            std::string::npos)
      << polymesh_rt_last_error(rt);
  polymesh_rt_destroy(rt);
}

TEST(CudaCodegenRuntime, RealNcclRuntimeWithoutGpuSaysSo) {
  absl::StatusOr<int> gpus = cudaDeviceCount();
  if (gpus.ok() && *gpus >= 2)
    GTEST_SKIP() << "this machine has " << *gpus << " GPUs";
  int64_t ids[] = {0, 1};
  PolymeshRuntime *rt = polymesh_rt_create_nccl(ids, 2, 0);
  EXPECT_NE(polymesh_rt_status(rt), POLYMESH_RT_OK);
  std::string error = polymesh_rt_last_error(rt);
  EXPECT_TRUE(error.find("no CUDA device") != std::string::npos ||
              error.find("need as many GPUs") != std::string::npos)
      << error;
  EXPECT_EQ(polymesh_rt_device_alloc(rt, 0, 16), nullptr);
  polymesh_rt_destroy(rt);
}

// The launch wrappers keep a process-wide error, so each case runs in a
// child process.
TEST(CudaCodegenRuntimeDeathTest, ModuleLoadOfBadPtxFailsCleanly) {
  EXPECT_EXIT(
      {
        void *module = mgpuModuleLoadJIT(const_cast<char *>("not ptx"), 2);
        void *function = mgpuModuleGetFunction(module, "copy_outer0_u1");
        mgpuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,
                         nullptr, 0);
        std::exit(module == nullptr && function == nullptr ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "polymesh: ");
}

TEST(CudaCodegenRuntimeDeathTest, FailedLaunchFailsTheNextSynchronize) {
  EXPECT_EXIT(
      {
        PolymeshRuntime *rt = simulatedRuntime(1);
        mgpuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,
                         nullptr, 0);
        int32_t status = polymesh_rt_device_synchronize(rt, 0);
        std::exit(status != POLYMESH_RT_OK &&
                          polymesh_rt_status(rt) != POLYMESH_RT_OK
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

} // namespace
