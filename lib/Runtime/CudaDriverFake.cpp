//===- CudaDriverFake.cpp - A simulated CUDA driver for generated code ----===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "CudaDriverFake.h"

#include "NcclFake.h"

#include "polymesh/Runtime/Runtime.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace polymesh::runtime {
namespace {

// The driver's result codes that the simulation returns.
constexpr int kSuccess = 0;          // CUDA_SUCCESS
constexpr int kInvalidValue = 1;     // CUDA_ERROR_INVALID_VALUE
constexpr int kInvalidContext = 201; // CUDA_ERROR_INVALID_CONTEXT
constexpr int kInvalidImage = 200;   // CUDA_ERROR_INVALID_IMAGE
constexpr int kInvalidHandle = 400;  // CUDA_ERROR_INVALID_HANDLE
constexpr int kNotFound = 500;       // CUDA_ERROR_NOT_FOUND
constexpr int kLaunchFailed = 719;   // CUDA_ERROR_LAUNCH_FAILED

enum class KernelKind { Copy, Zero, Accumulate, Fill };

struct FakeFunction {
  std::string name;
  KernelKind kind = KernelKind::Copy;
  int64_t outer = 0;
  /// Bytes per unit (Copy, Zero) or per element (Accumulate).
  int64_t unitBytes = 1;
  /// Accumulate: the element type; nullopt for i1 (summed as or).
  std::optional<DataType> element;
};

struct FakeModule {
  void *context = nullptr;
  std::string ptx;
  std::vector<std::unique_ptr<FakeFunction>> functions;
};

struct DriverState {
  std::mutex mu;
  std::vector<std::unique_ptr<FakeModule>> modules;
  FakeCudaDriver::Counts counts;
};

DriverState &state() {
  static DriverState s;
  return s;
}

thread_local std::vector<void *> contextStack;

/// A context is a device: its number plus one, so that none is null.
void *contextOf(int device) {
  return reinterpret_cast<void *>(static_cast<intptr_t>(device) + 1);
}

/// Parses `copy_outer1_u16`, `zero_outer0_u1`, `accumulate_outer2_bf16`,
/// `fill_u4`.
std::optional<FakeFunction> parseKernel(const std::string &name) {
  FakeFunction f;
  f.name = name;
  if (name.rfind("fill_u", 0) == 0) {
    f.kind = KernelKind::Fill;
    f.unitBytes = std::stoll(name.substr(6));
    if (f.unitBytes != 1 && f.unitBytes != 2 && f.unitBytes != 4 &&
        f.unitBytes != 8)
      return std::nullopt;
    return f;
  }
  std::string rest;
  for (auto [prefix, kind] :
       {std::pair{"copy_outer", KernelKind::Copy},
        std::pair{"zero_outer", KernelKind::Zero},
        std::pair{"accumulate_outer", KernelKind::Accumulate}}) {
    if (name.rfind(prefix, 0) == 0) {
      f.kind = kind;
      rest = name.substr(std::strlen(prefix));
      break;
    }
  }
  size_t underscore = rest.find('_');
  if (rest.empty() || underscore == std::string::npos || underscore == 0)
    return std::nullopt;
  f.outer = std::stoll(rest.substr(0, underscore));
  std::string suffix = rest.substr(underscore + 1);
  if (f.kind != KernelKind::Accumulate) {
    if (suffix.size() < 2 || suffix[0] != 'u')
      return std::nullopt;
    f.unitBytes = std::stoll(suffix.substr(1));
    return f.unitBytes > 0 ? std::optional(f) : std::nullopt;
  }
  if (suffix == "i1") {
    f.unitBytes = 1;
    return f;
  }
  for (int code = 0; code < kNumDataTypes; ++code) {
    absl::StatusOr<DataType> type = dataTypeFromCode(code);
    if (!type.ok())
      continue;
    // MLIR spells the runtime's u8 as i8 (signless): a sum is the same.
    if (suffix == dataTypeName(*type)) {
      f.element = *type;
      f.unitBytes = dataTypeSize(*type);
      return f;
    }
  }
  return std::nullopt;
}

int fakeInit(unsigned) { return kSuccess; }

int fakeStreamGetCtx(void *stream, void **context) {
  int device = FakeNccl::streamDevice(static_cast<cudaStream_t>(stream));
  if (device < 0)
    return kInvalidHandle;
  *context = contextOf(device);
  return kSuccess;
}

int fakeCtxGetCurrent(void **context) {
  *context = contextStack.empty() ? nullptr : contextStack.back();
  return kSuccess;
}

int fakeCtxPushCurrent(void *context) {
  if (!context)
    return kInvalidContext;
  contextStack.push_back(context);
  return kSuccess;
}

int fakeCtxPopCurrent(void **context) {
  if (contextStack.empty())
    return kInvalidContext;
  if (context)
    *context = contextStack.back();
  contextStack.pop_back();
  return kSuccess;
}

int fakeModuleLoadDataEx(void **module, const void *image, unsigned, int *,
                         void **) {
  if (contextStack.empty())
    return kInvalidContext;
  const char *ptx = static_cast<const char *>(image);
  if (!ptx || !std::strstr(ptx, ".version") || !std::strstr(ptx, ".target"))
    return kInvalidImage;
  DriverState &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto loaded = std::make_unique<FakeModule>();
  loaded->context = contextStack.back();
  loaded->ptx = ptx;
  *module = loaded.get();
  s.modules.push_back(std::move(loaded));
  ++s.counts.moduleLoads;
  return kSuccess;
}

FakeModule *liveModule(DriverState &s, void *module) {
  for (auto &m : s.modules)
    if (m.get() == module)
      return m.get();
  return nullptr;
}

int fakeModuleUnload(void *module) {
  DriverState &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  FakeModule *m = liveModule(s, module);
  if (!m)
    return kInvalidHandle;
  if (contextStack.empty() || contextStack.back() != m->context)
    return kInvalidContext;
  ++s.counts.moduleUnloads;
  // Functions stay allocated: a stale handle must not become a new one.
  m->ptx.clear();
  return kSuccess;
}

int fakeModuleGetFunction(void **function, void *module, const char *name) {
  DriverState &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  FakeModule *m = liveModule(s, module);
  if (!m || m->ptx.empty() || !name)
    return kInvalidHandle;
  if (contextStack.empty() || contextStack.back() != m->context)
    return kInvalidContext;
  // The kernel must be in the PTX, as the driver's lookup requires.
  std::string entry = std::string(".entry ") + name + "(";
  if (m->ptx.find(entry) == std::string::npos)
    return kNotFound;
  std::optional<FakeFunction> parsed = parseKernel(name);
  if (!parsed)
    return kNotFound;
  m->functions.push_back(std::make_unique<FakeFunction>(*parsed));
  *function = m->functions.back().get();
  return kSuccess;
}

/// The kernel's loops, run by run: the same decomposition of a unit index
/// into a run and loop indices as the generated kernel.
void runKernel(const FakeFunction &f, void **params) {
  auto pointer = [&](int i) { return *static_cast<char **>(params[i]); };
  auto scalar = [&](int64_t i) { return *static_cast<int64_t *>(params[i]); };
  if (f.kind == KernelKind::Fill) {
    // (dst, pattern, count): the pattern's low unitBytes bytes, per element.
    char *dst = pointer(0);
    uint64_t pattern = static_cast<uint64_t>(scalar(1));
    for (int64_t i = 0, count = scalar(2); i < count; ++i)
      std::memcpy(dst + i * f.unitBytes, &pattern, f.unitBytes);
    return;
  }
  char *src = pointer(0), *dst = pointer(1);
  int64_t runUnits = scalar(2);
  int64_t total = scalar(3 + 3 * f.outer);
  if (runUnits <= 0 || total <= 0)
    return;
  for (int64_t first = 0; first < total; first += runUnits) {
    int64_t run = first / runUnits;
    int64_t srcOffset = 0, dstOffset = 0;
    for (int64_t d = f.outer - 1; d >= 0; --d) {
      int64_t count = scalar(3 + d);
      int64_t index = run % count;
      run /= count;
      srcOffset += index * scalar(3 + f.outer + d);
      dstOffset += index * scalar(3 + 2 * f.outer + d);
    }
    int64_t units = std::min(runUnits, total - first);
    int64_t bytes = units * f.unitBytes;
    switch (f.kind) {
    case KernelKind::Copy:
      std::memmove(dst + dstOffset, src + srcOffset, bytes);
      break;
    case KernelKind::Zero:
      std::memset(dst + dstOffset, 0, bytes);
      break;
    case KernelKind::Fill:
      break;
    case KernelKind::Accumulate:
      if (f.element) {
        const void *inputs[] = {dst + dstOffset, src + srcOffset};
        reduceArrays(*f.element, ReduceOp::Sum, inputs, 2, units,
                     dst + dstOffset);
      } else {
        for (int64_t i = 0; i < bytes; ++i)
          dst[dstOffset + i] =
              static_cast<char>((dst[dstOffset + i] | src[srcOffset + i]) & 1);
      }
      break;
    }
  }
}

int fakeLaunchKernel(void *function, unsigned gridX, unsigned gridY,
                     unsigned gridZ, unsigned blockX, unsigned blockY,
                     unsigned blockZ, unsigned, void *stream, void **params,
                     void **extra) {
  if (!function || !params || extra)
    return kInvalidValue;
  if (gridX * gridY * gridZ == 0 || blockX * blockY * blockZ == 0 ||
      blockX * blockY * blockZ > 1024)
    return kInvalidValue;
  DriverState &s = state();
  const FakeFunction *f = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto &m : s.modules)
      for (auto &candidate : m->functions)
        if (candidate.get() == function) {
          if (contextStack.empty() || contextStack.back() != m->context)
            return kInvalidContext;
          f = candidate.get();
        }
    if (!f)
      return kInvalidHandle;
    ++s.counts.launches[f->name];
  }
  int device = FakeNccl::streamDevice(static_cast<cudaStream_t>(stream));
  if (device < 0 || contextOf(device) != contextStack.back())
    return kInvalidHandle;
  // Stream order: the kernel runs after everything enqueued before it.
  // Polling makes the simulated streams progress.
  const NcclApi &api = simulatedNcclApi();
  while (true) {
    cudaError_t e = api.streamQuery(static_cast<cudaStream_t>(stream));
    if (e == cudaSuccess)
      break;
    if (e != cudaErrorNotReady)
      return kLaunchFailed;
    std::this_thread::yield();
  }
  runKernel(*f, params);
  return kSuccess;
}

int fakeGetErrorString(int result, const char **text) {
  switch (result) {
  case kSuccess:
    *text = "no error";
    return kSuccess;
  case kInvalidValue:
    *text = "invalid argument";
    return kSuccess;
  case kInvalidImage:
    *text = "device kernel image is invalid";
    return kSuccess;
  case kInvalidContext:
    *text = "invalid device context";
    return kSuccess;
  case kInvalidHandle:
    *text = "invalid resource handle";
    return kSuccess;
  case kNotFound:
    *text = "named symbol not found";
    return kSuccess;
  case kLaunchFailed:
    *text = "unspecified launch failure";
    return kSuccess;
  default:
    *text = nullptr;
    return kInvalidValue;
  }
}

} // namespace

const CudaDriverApi &fakeCudaDriverApi() {
  static const CudaDriverApi api = {
      "simulated",          fakeInit,           fakeStreamGetCtx,
      fakeCtxGetCurrent,    fakeCtxPushCurrent, fakeCtxPopCurrent,
      fakeModuleLoadDataEx, fakeModuleUnload,   fakeModuleGetFunction,
      fakeLaunchKernel,     fakeGetErrorString,
  };
  return api;
}

std::vector<CodegenSymbol> simulatedCudaCodegenSymbols() {
  return cudaCodegenSymbols(simulatedNcclApi());
}

PolymeshRuntime *createSimulatedCodegenRuntime(const int64_t *deviceIds,
                                               int64_t numDevices,
                                               int64_t timeoutMs) {
  CodegenRuntimeOptions options;
  if (deviceIds && numDevices > 0)
    options.worldDevices.assign(deviceIds, deviceIds + numDevices);
  options.timeoutMs = timeoutMs;
  return createSimulatedCodegenRuntime(options);
}

PolymeshRuntime *
createSimulatedCodegenRuntime(const CodegenRuntimeOptions &options) {
  size_t gpus = options.localDevices.empty() ? options.worldDevices.size()
                                             : options.localDevices.size();
  resetSimulatedGpus(static_cast<int>(gpus));
  setCudaDriverApi(&fakeCudaDriverApi());
  return createCodegenRuntime(simulatedNcclApi(), options);
}

FakeCudaDriver::Counts FakeCudaDriver::counts() {
  DriverState &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.counts;
}

void FakeCudaDriver::reset() {
  DriverState &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.counts = {};
}

} // namespace polymesh::runtime
