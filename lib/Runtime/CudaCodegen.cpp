//===- CudaCodegen.cpp - The ABI of CUDA-lowered code ---------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// What --polymesh-lower-to-cuda's host code calls (PolymeshCudaRuntime.h):
// streams, communicators and memory of a PolymeshRuntime over the NCCL
// backend, and the mgpu* kernel-launch wrappers over the CUDA driver API.
// The driver is loaded with dlopen on first use, so binaries linking this
// library start (and say "no CUDA driver") on machines without one.
//
//===----------------------------------------------------------------------===//

#include "CApiInternal.h"

#include "polymesh/Runtime/NcclBackend.h"
#include "polymesh/Runtime/PolymeshCudaRuntime.h"

#include "absl/strings/str_cat.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <mutex>

using polymesh::runtime::NcclBackend;
using polymesh::runtime::NcclOptions;

namespace {

/// The runtime's NCCL backend, or null after recording why there is none.
NcclBackend *ncclOf(PolymeshRuntime *rt, const char *call) {
  if (!rt)
    return nullptr;
  auto *backend = dynamic_cast<NcclBackend *>(rt->backend.get());
  if (!backend && rt->backend)
    rt->backend->abort(absl::FailedPreconditionError(
        absl::StrCat(call, ": the runtime is not an NCCL runtime")));
  return backend;
}

int32_t codeOf(const absl::Status &status) {
  if (status.ok())
    return POLYMESH_RT_OK;
  if (status.code() == absl::StatusCode::kInvalidArgument)
    return POLYMESH_RT_INVALID_ARGUMENT;
  if (status.code() == absl::StatusCode::kDeadlineExceeded)
    return POLYMESH_RT_TIMEOUT;
  if (status.code() == absl::StatusCode::kAborted)
    return POLYMESH_RT_ABORTED;
  return POLYMESH_RT_INTERNAL;
}

/// Records `error` in the runtime (which aborts it) and returns null.
void *failed(PolymeshRuntime *rt, const absl::Status &error) {
  if (rt && rt->backend)
    rt->backend->abort(error);
  return nullptr;
}

//===----------------------------------------------------------------------===//
// The CUDA driver, loaded on first use
//===----------------------------------------------------------------------===//

using CUresult = int;
using CUmodule = void *;
using CUfunction = void *;
using CUstream = void *;
constexpr int kJitOptimizationLevel = 7; // CU_JIT_OPTIMIZATION_LEVEL

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*moduleLoadDataEx)(CUmodule *, const void *, unsigned, int *,
                               void **);
  CUresult (*moduleUnload)(CUmodule);
  CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void **,
                           void **);
  CUresult (*getErrorString)(CUresult, const char **);
  std::string error;
};

const Driver &driver() {
  static Driver loaded = [] {
    Driver d{};
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!library) {
      d.error = absl::StrCat("no CUDA driver: ", dlerror());
      return d;
    }
    auto load = [&](auto &slot, const char *name) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(
          dlsym(library, name));
      if (!slot && d.error.empty())
        d.error = absl::StrCat("the CUDA driver lacks ", name);
    };
    load(d.init, "cuInit");
    load(d.moduleLoadDataEx, "cuModuleLoadDataEx");
    load(d.moduleUnload, "cuModuleUnload");
    load(d.moduleGetFunction, "cuModuleGetFunction");
    load(d.launchKernel, "cuLaunchKernel");
    load(d.getErrorString, "cuGetErrorString");
    if (d.error.empty())
      if (CUresult r = d.init(0); r != 0)
        d.error = absl::StrCat("cuInit failed with CUDA error ", r);
    return d;
  }();
  return loaded;
}

/// Set by a failed driver call; polymesh_rt_device_synchronize reports it.
std::atomic<bool> launchFailed{false};
std::mutex launchErrorMu;
std::string launchError;

void reportDriverError(const char *call, CUresult result) {
  const Driver &d = driver();
  const char *text = nullptr;
  if (d.getErrorString)
    d.getErrorString(result, &text);
  std::lock_guard<std::mutex> lock(launchErrorMu);
  launchError = absl::StrCat(call, " failed: CUDA error ", result, " (",
                             text ? text : "unknown", ")");
  std::fprintf(stderr, "polymesh: %s\n", launchError.c_str());
  launchFailed = true;
}

bool driverReady(const char *call) {
  const Driver &d = driver();
  if (d.error.empty())
    return true;
  std::lock_guard<std::mutex> lock(launchErrorMu);
  launchError = absl::StrCat(call, ": ", d.error);
  std::fprintf(stderr, "polymesh: %s\n", launchError.c_str());
  launchFailed = true;
  return false;
}

} // namespace

extern "C" {

PolymeshRuntime *polymesh_rt_create_nccl(const int64_t *device_ids,
                                         int64_t num_devices,
                                         int64_t timeout_ms) {
  auto rt = std::make_unique<PolymeshRuntime>();
  if (num_devices <= 0 || !device_ids) {
    rt->createError = absl::InvalidArgumentError(
        absl::StrCat("polymesh_rt_create_nccl: empty or null device list (",
                     num_devices, " devices)"));
    return rt.release();
  }
  NcclOptions options;
  if (timeout_ms > 0)
    options.timeout = absl::Milliseconds(timeout_ms);
  // Generated code enqueues kernels and NCCL calls on the device's stream
  // and synchronizes when a function returns.
  options.completion = polymesh::runtime::NcclCompletion::StreamOrdered;
  absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
      NcclBackend::createSingleProcess(
          std::vector<int64_t>(device_ids, device_ids + num_devices), options);
  if (backend.ok())
    rt->backend = *std::move(backend);
  else
    rt->createError = backend.status();
  return rt.release();
}

void *polymesh_rt_cuda_stream(PolymeshRuntime *rt, int64_t device) {
  NcclBackend *backend = ncclOf(rt, "polymesh_rt_cuda_stream");
  if (!backend)
    return nullptr;
  absl::StatusOr<CUstream_st *> stream = backend->stream(device);
  return stream.ok() ? static_cast<void *>(*stream)
                     : failed(rt, stream.status());
}

void *polymesh_rt_nccl_comm(PolymeshRuntime *rt, int64_t device,
                            const int64_t *members, int64_t num_members) {
  NcclBackend *backend = ncclOf(rt, "polymesh_rt_nccl_comm");
  if (!backend)
    return nullptr;
  if (!members || num_members <= 0)
    return failed(rt, absl::InvalidArgumentError(
                          "polymesh_rt_nccl_comm: empty member list"));
  absl::StatusOr<void *> comm = backend->communicatorHandle(
      device, absl::Span<const int64_t>(members, num_members));
  return comm.ok() ? *comm : failed(rt, comm.status());
}

void *polymesh_rt_device_alloc(PolymeshRuntime *rt, int64_t device,
                               int64_t bytes) {
  NcclBackend *backend = ncclOf(rt, "polymesh_rt_device_alloc");
  if (!backend)
    return nullptr;
  absl::StatusOr<void *> memory =
      backend->allocate(device, std::max<int64_t>(bytes, 1));
  return memory.ok() ? *memory : failed(rt, memory.status());
}

void polymesh_rt_device_free(PolymeshRuntime *rt, int64_t device, void *ptr) {
  NcclBackend *backend = ncclOf(rt, "polymesh_rt_device_free");
  if (!backend || !ptr)
    return;
  if (absl::Status freed = backend->deallocate(device, ptr); !freed.ok())
    failed(rt, freed);
}

int32_t polymesh_rt_device_copy(PolymeshRuntime *rt, int64_t device, void *dst,
                                const void *src, int64_t bytes) {
  NcclBackend *backend = ncclOf(rt, "polymesh_rt_device_copy");
  if (!backend)
    return POLYMESH_RT_INVALID_ARGUMENT;
  absl::Status copied = backend->copy(device, dst, src, bytes);
  if (!copied.ok())
    failed(rt, copied);
  return codeOf(copied);
}

int32_t polymesh_rt_device_synchronize(PolymeshRuntime *rt, int64_t device) {
  NcclBackend *backend = ncclOf(rt, "polymesh_rt_device_synchronize");
  if (!backend)
    return POLYMESH_RT_INVALID_ARGUMENT;
  if (launchFailed) {
    std::lock_guard<std::mutex> lock(launchErrorMu);
    absl::Status error = absl::InternalError(launchError);
    failed(rt, error);
    return codeOf(error);
  }
  absl::Status done = backend->synchronize(device);
  if (!done.ok())
    failed(rt, done);
  return codeOf(done);
}

void *mgpuModuleLoadJIT(void *ptx, int32_t optLevel) {
  if (!driverReady("mgpuModuleLoadJIT"))
    return nullptr;
  int options[] = {kJitOptimizationLevel};
  void *values[] = {reinterpret_cast<void *>(static_cast<intptr_t>(optLevel))};
  CUmodule module = nullptr;
  if (CUresult r = driver().moduleLoadDataEx(&module, ptx, 1, options, values))
    reportDriverError("cuModuleLoadDataEx (JIT-compiling the PTX)", r);
  return module;
}

void mgpuModuleUnload(void *module) {
  if (module && driverReady("mgpuModuleUnload"))
    if (CUresult r = driver().moduleUnload(module))
      reportDriverError("cuModuleUnload", r);
}

void *mgpuModuleGetFunction(void *module, const char *name) {
  if (!module || !driverReady("mgpuModuleGetFunction"))
    return nullptr;
  CUfunction function = nullptr;
  if (CUresult r = driver().moduleGetFunction(&function, module, name))
    reportDriverError("cuModuleGetFunction", r);
  return function;
}

void mgpuLaunchKernel(void *function, int64_t gridX, int64_t gridY,
                      int64_t gridZ, int64_t blockX, int64_t blockY,
                      int64_t blockZ, int32_t sharedMemoryBytes, void *stream,
                      void **params, void **extra, int64_t /*paramsCount*/) {
  if (!function || !driverReady("mgpuLaunchKernel")) {
    launchFailed = true;
    return;
  }
  if (CUresult r = driver().launchKernel(function, gridX, gridY, gridZ, blockX,
                                         blockY, blockZ, sharedMemoryBytes,
                                         stream, params, extra))
    reportDriverError("cuLaunchKernel", r);
}

} // extern "C"
