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

#include "CApiInternal.h"
#include "CudaDriverFake.h"
#include "NcclFake.h"

#include "polymesh/Runtime/NcclBackend.h"
#include "polymesh/Runtime/PolymeshCudaRuntime.h"
#include "polymesh/Runtime/Runtime.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace polymesh::runtime;

namespace {

PolymeshRuntime *simulatedRuntime(int n) {
  resetSimulatedGpus(n);
  NcclOptions options;
  options.api = &simulatedNcclApi();
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
// child process. Loading records the PTX only (a JIT's constructors load
// where there may be no GPU); the first launch loads it and says why not.
TEST(CudaCodegenRuntimeDeathTest, LaunchWithoutDriverFailsCleanly) {
  std::string why;
  if (realCudaDriverApi(why))
    GTEST_SKIP() << "this machine has a CUDA driver";
  EXPECT_EXIT(
      {
        setCudaDriverApi(nullptr);
        void *module = mgpuModuleLoadJIT(const_cast<char *>("not ptx"), 2);
        void *function = mgpuModuleGetFunction(module, "copy_outer0_u1");
        mgpuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,
                         nullptr, 0);
        mgpuModuleUnload(module);
        std::exit(module && function ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "polymesh: mgpuLaunchKernel: no CUDA driver: ");
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

//===----------------------------------------------------------------------===//
// The mgpu* wrappers and the rest of the codegen ABI on the simulated driver
//===----------------------------------------------------------------------===//

/// PTX that defines the kernels the tests launch (the simulated driver
/// checks names against `.entry`, and runs them by name).
const char kPtx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                    ".visible .entry copy_outer1_u1(\n)\n{\n}\n"
                    ".visible .entry accumulate_outer0_f32(\n)\n{\n}\n";

class SimulatedDriver : public ::testing::Test {
protected:
  void SetUp() override { FakeCudaDriver::reset(); }
  void TearDown() override { setCudaDriverApi(nullptr); }

  PolymeshRuntime *runtime(int n) {
    std::vector<int64_t> ids;
    for (int i = 0; i < n; ++i)
      ids.push_back(i);
    return createSimulatedCodegenRuntime(ids.data(), n, 30000);
  }
};

/// Launches copy_outer1_u1 over `counts` runs of `runBytes` bytes with the
/// given strides, on `device`'s stream.
void launchCopy(PolymeshRuntime *rt, int64_t device, void *function, void *src,
                void *dst, int64_t runBytes, int64_t count, int64_t srcStride,
                int64_t dstStride) {
  int64_t total = count * runBytes;
  void *args[] = {&src,       &dst,       &runBytes, &count,
                  &srcStride, &dstStride, &total};
  mgpuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0,
                   polymesh_rt_cuda_stream(rt, device), args, nullptr, 7);
}

TEST_F(SimulatedDriver, OneModuleServesEveryGpuLoadedOncePerContext) {
  PolymeshRuntime *rt = runtime(2);
  ASSERT_EQ(polymesh_rt_status(rt), POLYMESH_RT_OK)
      << polymesh_rt_last_error(rt);
  void *module = mgpuModuleLoadJIT(const_cast<char *>(kPtx), 2);
  void *function = mgpuModuleGetFunction(module, "copy_outer1_u1");
  // The same handle for the same name: generated code looks it up at every
  // launch.
  EXPECT_EQ(mgpuModuleGetFunction(module, "copy_outer1_u1"), function);
  EXPECT_EQ(FakeCudaDriver::counts().moduleLoads, 0);

  // Pack columns 1..2 of a 4x4 byte matrix on each device, twice.
  for (int64_t device = 0; device < 2; ++device) {
    std::vector<char> host(16), packed(8, 0);
    for (int i = 0; i < 16; ++i)
      host[i] = static_cast<char>(10 * device + i);
    void *src = polymesh_rt_device_alloc(rt, device, 16);
    void *dst = polymesh_rt_device_alloc(rt, device, 8);
    ASSERT_EQ(polymesh_rt_device_upload(rt, device, src, host.data(), 16),
              POLYMESH_RT_OK);
    for (int repeat = 0; repeat < 2; ++repeat)
      launchCopy(rt, device, function, static_cast<char *>(src) + 1, dst,
                 /*runBytes=*/2, /*count=*/4, /*srcStride=*/4,
                 /*dstStride=*/2);
    ASSERT_EQ(polymesh_rt_device_synchronize(rt, device), POLYMESH_RT_OK)
        << polymesh_rt_last_error(rt);
    ASSERT_EQ(polymesh_rt_device_download(rt, device, packed.data(), dst, 8),
              POLYMESH_RT_OK);
    for (int row = 0; row < 4; ++row)
      for (int column = 0; column < 2; ++column)
        EXPECT_EQ(packed[2 * row + column], host[4 * row + 1 + column]);
    polymesh_rt_device_free(rt, device, src);
    polymesh_rt_device_free(rt, device, dst);
  }
  FakeCudaDriver::Counts counts = FakeCudaDriver::counts();
  EXPECT_EQ(counts.moduleLoads, 2); // one per GPU, not per launch
  EXPECT_EQ(counts.launches["copy_outer1_u1"], 4);
  mgpuModuleUnload(module);
  EXPECT_EQ(FakeCudaDriver::counts().moduleUnloads, 2);
  EXPECT_EQ(polymesh_rt_status(rt), POLYMESH_RT_OK);
  polymesh_rt_destroy(rt);
}

TEST_F(SimulatedDriver, KernelMissingFromThePtxFailsTheNextSynchronize) {
  PolymeshRuntime *rt = runtime(1);
  void *module = mgpuModuleLoadJIT(const_cast<char *>(kPtx), 2);
  void *function = mgpuModuleGetFunction(module, "copy_outer2_u16");
  void *src = polymesh_rt_device_alloc(rt, 0, 16);
  launchCopy(rt, 0, function, src, src, 1, 1, 0, 0);
  EXPECT_NE(polymesh_rt_device_synchronize(rt, 0), POLYMESH_RT_OK);
  EXPECT_NE(std::string(polymesh_rt_last_error(rt))
                .find("cuModuleGetFunction failed"),
            std::string::npos)
      << polymesh_rt_last_error(rt);
  mgpuModuleUnload(module);
  polymesh_rt_destroy(rt);
}

TEST_F(SimulatedDriver, PtxThatDoesNotLoadFailsTheNextSynchronize) {
  PolymeshRuntime *rt = runtime(1);
  void *module = mgpuModuleLoadJIT(const_cast<char *>("not ptx"), 2);
  void *function = mgpuModuleGetFunction(module, "copy_outer1_u1");
  void *src = polymesh_rt_device_alloc(rt, 0, 16);
  launchCopy(rt, 0, function, src, src, 1, 1, 0, 0);
  EXPECT_NE(polymesh_rt_device_synchronize(rt, 0), POLYMESH_RT_OK);
  EXPECT_NE(std::string(polymesh_rt_last_error(rt))
                .find("cuModuleLoadDataEx (JIT-compiling the PTX) failed"),
            std::string::npos)
      << polymesh_rt_last_error(rt);
  mgpuModuleUnload(module);
  polymesh_rt_destroy(rt);
}

TEST_F(SimulatedDriver, AccumulateKernelAddsInTheElementType) {
  PolymeshRuntime *rt = runtime(1);
  void *module = mgpuModuleLoadJIT(const_cast<char *>(kPtx), 2);
  void *function = mgpuModuleGetFunction(module, "accumulate_outer0_f32");
  float a[] = {1.5f, -2.0f, 3.25f}, b[] = {0.5f, 4.0f, -3.25f}, out[3];
  void *src = polymesh_rt_device_alloc(rt, 0, sizeof(a));
  void *dst = polymesh_rt_device_alloc(rt, 0, sizeof(b));
  polymesh_rt_device_upload(rt, 0, src, a, sizeof(a));
  polymesh_rt_device_upload(rt, 0, dst, b, sizeof(b));
  int64_t runUnits = 3, total = 3;
  void *args[] = {&src, &dst, &runUnits, &total};
  mgpuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0,
                   polymesh_rt_cuda_stream(rt, 0), args, nullptr, 4);
  ASSERT_EQ(polymesh_rt_device_synchronize(rt, 0), POLYMESH_RT_OK)
      << polymesh_rt_last_error(rt);
  polymesh_rt_device_download(rt, 0, out, dst, sizeof(out));
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], 0.0f);
  mgpuModuleUnload(module);
  polymesh_rt_destroy(rt);
}

// Generated code releases staging right after enqueuing the work that uses
// it: the memory must outlive that work.
TEST_F(SimulatedDriver, DeviceFreeWaitsForTheStream) {
  PolymeshRuntime *rt = runtime(1);
  int64_t before = FakeNccl::counts().allocations;
  void *memory = polymesh_rt_device_alloc(rt, 0, 64);
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(FakeNccl::counts().allocations, before + 1);
  polymesh_rt_device_free(rt, 0, memory);
  EXPECT_EQ(FakeNccl::counts().allocations, before + 1);
  ASSERT_EQ(polymesh_rt_device_synchronize(rt, 0), POLYMESH_RT_OK);
  EXPECT_EQ(FakeNccl::counts().allocations, before);
  polymesh_rt_destroy(rt);
}

TEST_F(SimulatedDriver, NcclCheckWaitsOutInProgressAndReportsErrors) {
  PolymeshRuntime *rt = runtime(2);
  auto program = [](PolymeshRuntime *rt, int64_t device, void *) -> int32_t {
    int64_t members[] = {0, 1};
    void *comm = polymesh_rt_nccl_comm(rt, device, members, 2);
    if (!comm)
      return 1;
    // ncclInProgress (7): non-blocking communicators still enqueuing.
    return polymesh_rt_nccl_check(rt, device, comm, ncclInProgress,
                                  "ncclGroupEnd");
  };
  EXPECT_EQ(polymesh_rt_run_devices(rt, program, nullptr), POLYMESH_RT_OK)
      << polymesh_rt_last_error(rt);
  int64_t members[] = {0, 1};
  void *comm = polymesh_rt_nccl_comm(rt, 0, members, 2);
  EXPECT_NE(
      polymesh_rt_nccl_check(rt, 0, comm, ncclInvalidArgument, "ncclSend"),
      POLYMESH_RT_OK);
  std::string error = polymesh_rt_last_error(rt);
  EXPECT_NE(error.find("ncclSend"), std::string::npos) << error;
  EXPECT_NE(error.find("generated code"), std::string::npos) << error;
  polymesh_rt_destroy(rt);
}

//===----------------------------------------------------------------------===//
// One status-code table for both C ABIs
//===----------------------------------------------------------------------===//

/// PolymeshRuntime.h's table, one entry per absl::StatusCode (0..16, in
/// code order), written out here rather than taken from the library so
/// that a change to either side fails this test.
constexpr int32_t kDocumentedCodes[] = {
    POLYMESH_RT_OK,                  // kOk
    POLYMESH_RT_INTERNAL,            // kCancelled
    POLYMESH_RT_DEVICE_FAILED,       // kUnknown: a device's failure
    POLYMESH_RT_INVALID_ARGUMENT,    // kInvalidArgument
    POLYMESH_RT_TIMEOUT,             // kDeadlineExceeded
    POLYMESH_RT_INTERNAL,            // kNotFound
    POLYMESH_RT_INTERNAL,            // kAlreadyExists
    POLYMESH_RT_INTERNAL,            // kPermissionDenied
    POLYMESH_RT_INTERNAL,            // kResourceExhausted
    POLYMESH_RT_FAILED_PRECONDITION, // kFailedPrecondition
    POLYMESH_RT_ABORTED,             // kAborted
    POLYMESH_RT_INTERNAL,            // kOutOfRange
    POLYMESH_RT_INTERNAL,            // 12: an unsupported call
    POLYMESH_RT_INTERNAL,            // kInternal
    POLYMESH_RT_INTERNAL,            // kUnavailable
    POLYMESH_RT_INTERNAL,            // kDataLoss
    POLYMESH_RT_INTERNAL,            // kUnauthenticated
};

int32_t documentedCode(absl::StatusCode code) {
  return kDocumentedCodes[static_cast<int>(code)];
}

/// The code-generation ABI's status-returning calls on device 0.
std::vector<std::pair<const char *, std::function<int32_t(PolymeshRuntime *)>>>
codegenStatusCalls() {
  static char host[16], device[16];
  return {
      {"polymesh_rt_device_upload",
       [](PolymeshRuntime *rt) {
         return polymesh_rt_device_upload(rt, 0, device, host, 16);
       }},
      {"polymesh_rt_device_download",
       [](PolymeshRuntime *rt) {
         return polymesh_rt_device_download(rt, 0, host, device, 16);
       }},
      {"polymesh_rt_device_copy",
       [](PolymeshRuntime *rt) {
         return polymesh_rt_device_copy(rt, 0, device, device + 8, 8);
       }},
      {"polymesh_rt_device_synchronize",
       [](PolymeshRuntime *rt) {
         return polymesh_rt_device_synchronize(rt, 0);
       }},
      {"polymesh_rt_nccl_check",
       [](PolymeshRuntime *rt) {
         return polymesh_rt_nccl_check(rt, 0, nullptr, /*ncclSystemError=*/2,
                                       "ncclSend");
       }},
  };
}

TEST(RuntimeStatusCodes, EveryCodeIsTheSameFromBothAbis) {
  for (int c = 0; c <= 16; ++c) {
    auto code = static_cast<absl::StatusCode>(c);
    SCOPED_TRACE(absl::StatusCodeToString(code));
    EXPECT_EQ(statusCodeOf(absl::Status(code, "injected")),
              documentedCode(code));
    if (code == absl::StatusCode::kOk)
      continue;
    absl::Status injected(code, "injected");

    // The runtime ABI: the first error's code, whatever backend holds it.
    absl::StatusOr<std::unique_ptr<LoopbackBackend>> loopback =
        LoopbackBackend::create({0}, LoopbackOptions());
    ASSERT_TRUE(loopback.ok()) << loopback.status();
    Backend *loopbackRaw = loopback->get();
    PolymeshRuntime *cpu = wrapBackend(*std::move(loopback));
    loopbackRaw->abort(injected);
    EXPECT_EQ(polymesh_rt_status(cpu), documentedCode(code));
    EXPECT_EQ(polymesh_rt_group_start(cpu, 0), POLYMESH_RT_ABORTED);
    polymesh_rt_destroy(cpu);

    // The code-generation ABI on an NCCL runtime: every later call is
    // refused as aborted, and the status still names the first error.
    resetSimulatedGpus(1);
    NcclOptions options;
    options.api = &simulatedNcclApi();
    absl::StatusOr<std::unique_ptr<NcclBackend>> nccl =
        NcclBackend::createSingleProcess({0}, options);
    ASSERT_TRUE(nccl.ok()) << nccl.status();
    Backend *ncclRaw = nccl->get();
    PolymeshRuntime *gpu = wrapBackend(*std::move(nccl));
    ncclRaw->abort(injected);
    for (auto &[name, call] : codegenStatusCalls())
      EXPECT_EQ(call(gpu), POLYMESH_RT_ABORTED) << name;
    EXPECT_EQ(polymesh_rt_status(gpu), documentedCode(code));
    polymesh_rt_destroy(gpu);
  }
}

TEST(RuntimeStatusCodes, AFailedCallReturnsWhatTheStatusThenSays) {
  // A loopback runtime is not an NCCL runtime: a failed precondition, from
  // the call and from polymesh_rt_status alike.
  for (auto &[name, call] : codegenStatusCalls()) {
    int64_t ids[] = {0};
    PolymeshRuntime *rt = polymesh_rt_create_loopback(ids, 1, 0);
    EXPECT_EQ(call(rt), POLYMESH_RT_FAILED_PRECONDITION) << name;
    EXPECT_EQ(polymesh_rt_status(rt), POLYMESH_RT_FAILED_PRECONDITION) << name;
    polymesh_rt_destroy(rt);
  }
  // A runtime that could not be created: the creation error's code.
  for (auto &[name, call] : codegenStatusCalls()) {
    PolymeshRuntime *rt = polymesh_rt_create_loopback(nullptr, 0, 0);
    EXPECT_EQ(call(rt), POLYMESH_RT_INVALID_ARGUMENT) << name;
    EXPECT_EQ(polymesh_rt_status(rt), POLYMESH_RT_INVALID_ARGUMENT) << name;
    polymesh_rt_destroy(rt);
  }
  // No runtime at all.
  for (auto &[name, call] : codegenStatusCalls())
    EXPECT_EQ(call(nullptr), POLYMESH_RT_INVALID_ARGUMENT) << name;
  EXPECT_EQ(polymesh_rt_status(nullptr), POLYMESH_RT_INVALID_ARGUMENT);
  // An NCCL error in generated code: the code its status maps to.
  struct NcclCase {
    int result;
    int32_t code;
  };
  for (NcclCase c :
       {NcclCase{/*ncclInvalidArgument=*/4, POLYMESH_RT_INVALID_ARGUMENT},
        NcclCase{/*ncclInvalidUsage=*/5, POLYMESH_RT_FAILED_PRECONDITION},
        NcclCase{/*ncclSystemError=*/2, POLYMESH_RT_INTERNAL}}) {
    PolymeshRuntime *rt = simulatedRuntime(1);
    EXPECT_EQ(polymesh_rt_nccl_check(rt, 0, nullptr, c.result, "ncclSend"),
              c.code)
        << c.result;
    EXPECT_EQ(polymesh_rt_status(rt), c.code) << c.result;
    polymesh_rt_destroy(rt);
  }
}

} // namespace
