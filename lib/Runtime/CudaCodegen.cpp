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
#include "CudaDriverApi.h"
#include "NcclApi.h"

#include "polymesh/Runtime/NcclBackend.h"
#include "polymesh/Runtime/PolymeshCudaRuntime.h"

#include "absl/strings/str_cat.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>

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

/// Records `error` in the runtime (which aborts it) and returns null.
void *failed(PolymeshRuntime *rt, const absl::Status &error) {
  if (rt && rt->backend)
    rt->backend->abort(error);
  return nullptr;
}

/// The code of a call on a runtime without an NCCL backend: what ncclOf
/// recorded, or why the runtime could not be created.
int32_t notNccl(PolymeshRuntime *rt) {
  if (!rt)
    return POLYMESH_RT_INVALID_ARGUMENT;
  if (!rt->backend)
    return polymesh::runtime::statusCodeOf(rt->createError);
  return POLYMESH_RT_FAILED_PRECONDITION;
}

/// A status-returning entry point: `body` on the runtime's NCCL backend; an
/// error becomes the runtime's (which aborts it) and its code is returned.
template <typename Body>
int32_t statusCall(PolymeshRuntime *rt, const char *call, Body body) {
  NcclBackend *backend = ncclOf(rt, call);
  if (!backend)
    return notNccl(rt);
  absl::Status status = body(*backend);
  if (!status.ok())
    failed(rt, status);
  return polymesh::runtime::statusCodeOf(status);
}

//===----------------------------------------------------------------------===//
// The CUDA driver, loaded on first use
//===----------------------------------------------------------------------===//

constexpr int kJitOptimizationLevel = 7; // CU_JIT_OPTIMIZATION_LEVEL

struct LoadedDriver {
  polymesh::runtime::CudaDriverApi api{};
  std::string error;
};

const LoadedDriver &loadedDriver() {
  static LoadedDriver loaded = [] {
    LoadedDriver d;
    d.api.name = "cuda";
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
    load(d.api.init, "cuInit");
    load(d.api.streamGetCtx, "cuStreamGetCtx");
    load(d.api.ctxGetCurrent, "cuCtxGetCurrent");
    load(d.api.ctxPushCurrent, "cuCtxPushCurrent_v2");
    load(d.api.ctxPopCurrent, "cuCtxPopCurrent_v2");
    load(d.api.moduleLoadDataEx, "cuModuleLoadDataEx");
    load(d.api.moduleUnload, "cuModuleUnload");
    load(d.api.moduleGetFunction, "cuModuleGetFunction");
    load(d.api.launchKernel, "cuLaunchKernel");
    load(d.api.getErrorString, "cuGetErrorString");
    if (d.error.empty())
      if (int r = d.api.init(0); r != 0)
        d.error = absl::StrCat("cuInit failed with CUDA error ", r);
    return d;
  }();
  return loaded;
}

std::atomic<const polymesh::runtime::CudaDriverApi *> driverOverride{nullptr};

/// Set by a failed driver call; polymesh_rt_device_synchronize reports it.
std::atomic<bool> launchFailed{false};
std::mutex launchErrorMu;
std::string launchError;

void recordLaunchError(std::string message) {
  std::lock_guard<std::mutex> lock(launchErrorMu);
  std::fprintf(stderr, "polymesh: %s\n", message.c_str());
  if (!launchFailed)
    launchError = std::move(message);
  launchFailed = true;
}

/// The driver to use now, or null after recording why there is none.
const polymesh::runtime::CudaDriverApi *driverFor(const char *call) {
  if (const polymesh::runtime::CudaDriverApi *api = driverOverride.load())
    return api;
  std::string error;
  if (const polymesh::runtime::CudaDriverApi *api =
          polymesh::runtime::realCudaDriverApi(error))
    return api;
  recordLaunchError(absl::StrCat(call, ": ", error));
  return nullptr;
}

bool check(const polymesh::runtime::CudaDriverApi &api, const char *call,
           int result) {
  if (result == 0)
    return true;
  const char *text = nullptr;
  if (api.getErrorString)
    api.getErrorString(result, &text);
  recordLaunchError(absl::StrCat(call, " failed: CUDA error ", result, " (",
                                 text ? text : "unknown", ")"));
  return false;
}

/// What mgpuModuleLoadJIT returns. A CUDA module belongs to one context, and
/// one process drives every local GPU (one primary context each), so the
/// PTX is loaded lazily, once per context that launches one of its kernels:
/// the context of the launch's stream. The generated code keeps the PTX in
/// a constant global that outlives this handle.
struct LazyModule;

struct LazyFunction {
  LazyModule *module = nullptr;
  std::string name;
  /// Per context: the function, loaded on first launch there.
  std::mutex mu;
  std::map<void *, void *> loaded;
};

struct LazyModule {
  /// The driver of the first load: every context's module is its.
  const polymesh::runtime::CudaDriverApi *api = nullptr;
  const void *image = nullptr;
  int optLevel = 0;
  std::mutex mu;
  std::map<void *, void *> loaded;
  std::map<std::string, std::unique_ptr<LazyFunction>> functions;

  /// The module in `context` (current on this thread, made so by `driver`),
  /// loading it first.
  void *in(const polymesh::runtime::CudaDriverApi &driver, void *context) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = loaded.find(context);
    if (it != loaded.end())
      return it->second;
    if (api && api != &driver) {
      recordLaunchError("mgpuLaunchKernel: the CUDA driver changed after the "
                        "module's first launch");
      return nullptr;
    }
    api = &driver;
    int options[] = {kJitOptimizationLevel};
    void *values[] = {
        reinterpret_cast<void *>(static_cast<intptr_t>(optLevel))};
    void *module = nullptr;
    if (!check(*api, "cuModuleLoadDataEx (JIT-compiling the PTX)",
               api->moduleLoadDataEx(&module, image, 1, options, values)))
      return nullptr;
    loaded[context] = module;
    return module;
  }
};

/// `function` in `context` (current on this thread), loading it first.
void *functionIn(const polymesh::runtime::CudaDriverApi &api,
                 LazyFunction &function, void *context) {
  std::lock_guard<std::mutex> lock(function.mu);
  auto it = function.loaded.find(context);
  if (it != function.loaded.end())
    return it->second;
  void *module = function.module->in(api, context);
  if (!module)
    return nullptr;
  void *loaded = nullptr;
  if (!check(api, "cuModuleGetFunction",
             api.moduleGetFunction(&loaded, module, function.name.c_str())))
    return nullptr;
  function.loaded[context] = loaded;
  return loaded;
}

} // namespace

const polymesh::runtime::CudaDriverApi *
polymesh::runtime::realCudaDriverApi(std::string &error) {
  const LoadedDriver &d = loadedDriver();
  if (!d.error.empty()) {
    error = d.error;
    return nullptr;
  }
  return &d.api;
}

void polymesh::runtime::setCudaDriverApi(const CudaDriverApi *api) {
  driverOverride = api;
}

std::vector<polymesh::runtime::CodegenSymbol>
polymesh::runtime::cudaCodegenSymbols(const NcclApi &nccl) {
  std::vector<CodegenSymbol> symbols;
  auto add = [&](const char *name, auto *function) {
    symbols.push_back({name, reinterpret_cast<void *>(function)});
  };
#define POLYMESH_SYMBOL(name) add(#name, &name)
  POLYMESH_SYMBOL(polymesh_rt_cuda_stream);
  POLYMESH_SYMBOL(polymesh_rt_nccl_comm);
  POLYMESH_SYMBOL(polymesh_rt_nccl_check);
  POLYMESH_SYMBOL(polymesh_rt_device_alloc);
  POLYMESH_SYMBOL(polymesh_rt_device_free);
  POLYMESH_SYMBOL(polymesh_rt_device_copy);
  POLYMESH_SYMBOL(polymesh_rt_device_upload);
  POLYMESH_SYMBOL(polymesh_rt_device_download);
  POLYMESH_SYMBOL(polymesh_rt_device_synchronize);
  POLYMESH_SYMBOL(mgpuModuleLoadJIT);
  POLYMESH_SYMBOL(mgpuModuleUnload);
  POLYMESH_SYMBOL(mgpuModuleGetFunction);
  POLYMESH_SYMBOL(mgpuLaunchKernel);
#undef POLYMESH_SYMBOL
  add("ncclGroupStart", nccl.groupStart);
  add("ncclGroupEnd", nccl.groupEnd);
  add("ncclSend", nccl.send);
  add("ncclRecv", nccl.recv);
  add("ncclBroadcast", nccl.broadcast);
  add("ncclAllGather", nccl.allGather);
  add("ncclAllReduce", nccl.allReduce);
  add("ncclReduceScatter", nccl.reduceScatter);
  return symbols;
}

PolymeshRuntime *
polymesh::runtime::createCodegenRuntime(const NcclApi &api,
                                        const CodegenRuntimeOptions &run) {
  auto rt = std::make_unique<PolymeshRuntime>();
  {
    // A launch error belongs to the run that made it; a new runtime starts a
    // new run.
    std::lock_guard<std::mutex> lock(launchErrorMu);
    launchFailed = false;
    launchError.clear();
  }
  if (run.worldDevices.empty()) {
    rt->createError = absl::InvalidArgumentError(
        "polymesh_rt_create_nccl: empty device list");
    return rt.release();
  }
  NcclOptions options;
  options.api = &api;
  if (run.timeoutMs > 0)
    options.timeout = absl::Milliseconds(run.timeoutMs);
  // Generated code enqueues kernels and NCCL calls on the device's stream
  // and synchronizes when a function returns.
  options.completion = polymesh::runtime::NcclCompletion::StreamOrdered;
  options.worldDevices = run.worldDevices;
  const std::vector<int64_t> &local =
      run.localDevices.empty() ? run.worldDevices : run.localDevices;
  for (size_t i = 0; i < local.size(); ++i)
    options.localDevices.push_back(
        {local[i], run.firstCudaDevice + static_cast<int>(i)});
  options.store = run.store;
  options.storePrefix = run.storePrefix;
  absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
      NcclBackend::create(std::move(options));
  if (backend.ok())
    rt->backend = *std::move(backend);
  else
    rt->createError = backend.status();
  return rt.release();
}

PolymeshRuntime *
polymesh::runtime::createCodegenRuntime(const CodegenRuntimeOptions &options) {
  return createCodegenRuntime(realNcclApi(), options);
}

std::vector<polymesh::runtime::CodegenSymbol>
polymesh::runtime::cudaCodegenSymbols() {
  return cudaCodegenSymbols(realNcclApi());
}

extern "C" {

PolymeshRuntime *polymesh_rt_create_nccl(const int64_t *device_ids,
                                         int64_t num_devices,
                                         int64_t timeout_ms) {
  polymesh::runtime::CodegenRuntimeOptions options;
  if (device_ids && num_devices > 0)
    options.worldDevices.assign(device_ids, device_ids + num_devices);
  options.timeoutMs = timeout_ms;
  return polymesh::runtime::createCodegenRuntime(
      polymesh::runtime::realNcclApi(), options);
}

int32_t polymesh_rt_device_upload(PolymeshRuntime *rt, int64_t device,
                                  void *dst, const void *src, int64_t bytes) {
  return statusCall(rt, "polymesh_rt_device_upload", [&](NcclBackend &backend) {
    return backend.copyToDevice(device, dst, src, bytes);
  });
}

int32_t polymesh_rt_device_download(PolymeshRuntime *rt, int64_t device,
                                    void *dst, const void *src, int64_t bytes) {
  return statusCall(rt, "polymesh_rt_device_download",
                    [&](NcclBackend &backend) {
                      return backend.copyToHost(device, dst, src, bytes);
                    });
}

int32_t polymesh_rt_nccl_check(PolymeshRuntime *rt, int64_t device, void *comm,
                               int32_t result, const char *call) {
  return statusCall(rt, "polymesh_rt_nccl_check", [&](NcclBackend &backend) {
    return backend.finishGeneratedCall(device, comm, result,
                                       call ? call : "NCCL");
  });
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
  if (absl::Status freed = backend->deallocateAfterStream(device, ptr);
      !freed.ok())
    failed(rt, freed);
}

int32_t polymesh_rt_device_copy(PolymeshRuntime *rt, int64_t device, void *dst,
                                const void *src, int64_t bytes) {
  return statusCall(rt, "polymesh_rt_device_copy", [&](NcclBackend &backend) {
    return backend.copy(device, dst, src, bytes);
  });
}

int32_t polymesh_rt_device_synchronize(PolymeshRuntime *rt, int64_t device) {
  return statusCall(rt, "polymesh_rt_device_synchronize",
                    [&](NcclBackend &backend) {
                      // A failed launch is this run's error.
                      if (launchFailed) {
                        std::lock_guard<std::mutex> lock(launchErrorMu);
                        return absl::InternalError(launchError);
                      }
                      return backend.synchronize(device);
                    });
}

void *mgpuModuleLoadJIT(void *ptx, int32_t optLevel) {
  // Nothing touches the driver yet: a JIT's constructors call this where
  // there may be no GPU, and the first launch says so instead.
  if (!ptx)
    return nullptr;
  auto module = std::make_unique<LazyModule>();
  module->image = ptx;
  module->optLevel = optLevel;
  return module.release();
}

void mgpuModuleUnload(void *handle) {
  std::unique_ptr<LazyModule> module(static_cast<LazyModule *>(handle));
  if (!module || !module->api)
    return;
  const polymesh::runtime::CudaDriverApi &api = *module->api;
  for (auto &[context, loaded] : module->loaded) {
    if (!check(api, "cuCtxPushCurrent", api.ctxPushCurrent(context)))
      continue;
    check(api, "cuModuleUnload", api.moduleUnload(loaded));
    void *popped = nullptr;
    check(api, "cuCtxPopCurrent", api.ctxPopCurrent(&popped));
  }
}

void *mgpuModuleGetFunction(void *handle, const char *name) {
  auto *module = static_cast<LazyModule *>(handle);
  if (!module || !name)
    return nullptr;
  std::lock_guard<std::mutex> lock(module->mu);
  std::unique_ptr<LazyFunction> &function = module->functions[name];
  if (!function) {
    function = std::make_unique<LazyFunction>();
    function->module = module;
    function->name = name;
  }
  return function.get();
}

void mgpuLaunchKernel(void *handle, int64_t gridX, int64_t gridY, int64_t gridZ,
                      int64_t blockX, int64_t blockY, int64_t blockZ,
                      int32_t sharedMemoryBytes, void *stream, void **params,
                      void **extra, int64_t /*paramsCount*/) {
  auto *function = static_cast<LazyFunction *>(handle);
  if (!function) {
    recordLaunchError("mgpuLaunchKernel: no kernel (its module did not load)");
    return;
  }
  const polymesh::runtime::CudaDriverApi *driver =
      driverFor("mgpuLaunchKernel");
  if (!driver)
    return;
  const polymesh::runtime::CudaDriverApi &api = *driver;
  // The kernel runs in its stream's context: the GPU of the calling device.
  void *context = nullptr;
  int found =
      stream ? api.streamGetCtx(stream, &context) : api.ctxGetCurrent(&context);
  if (!check(api, stream ? "cuStreamGetCtx" : "cuCtxGetCurrent", found))
    return;
  if (!check(api, "cuCtxPushCurrent", api.ctxPushCurrent(context)))
    return;
  if (void *loaded = functionIn(api, *function, context))
    check(api, "cuLaunchKernel",
          api.launchKernel(
              loaded, static_cast<unsigned>(gridX),
              static_cast<unsigned>(gridY), static_cast<unsigned>(gridZ),
              static_cast<unsigned>(blockX), static_cast<unsigned>(blockY),
              static_cast<unsigned>(blockZ),
              static_cast<unsigned>(sharedMemoryBytes), stream, params, extra));
  void *popped = nullptr;
  check(api, "cuCtxPopCurrent", api.ctxPopCurrent(&popped));
}

} // extern "C"
