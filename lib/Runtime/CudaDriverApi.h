//===- CudaDriverApi.h - The CUDA driver calls of the mgpu* wrappers C++
//-*-===//
//
// Part of Polymesh. Internal to the runtime, its tests and tools.
//
//===----------------------------------------------------------------------===//
//
// The mgpu* wrappers that CUDA-lowered code calls (PolymeshCudaRuntime.h) use
// a handful of CUDA driver functions. They go through this table, so that the
// real driver is loaded with dlopen only when a kernel is launched, and so
// that a simulation (CudaDriverFake.h) can stand in for it where there is no
// GPU. Types are the driver's, as opaque pointers and ints.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_RUNTIME_CUDADRIVERAPI_H
#define POLYMESH_LIB_RUNTIME_CUDADRIVERAPI_H

#include "polymesh/Runtime/CudaCodegenSymbols.h"

#include <cstdint>
#include <string>
#include <vector>

struct PolymeshRuntime;

namespace polymesh::runtime {

struct NcclApi;

struct CudaDriverApi {
  /// "cuda" or "simulated".
  const char *name;
  int (*init)(unsigned flags);
  /// cuStreamGetCtx: the context a stream belongs to.
  int (*streamGetCtx)(void *stream, void **context);
  int (*ctxGetCurrent)(void **context);
  int (*ctxPushCurrent)(void *context);
  int (*ctxPopCurrent)(void **context);
  int (*moduleLoadDataEx)(void **module, const void *image, unsigned numOptions,
                          int *options, void **optionValues);
  int (*moduleUnload)(void *module);
  int (*moduleGetFunction)(void **function, void *module, const char *name);
  int (*launchKernel)(void *function, unsigned gridX, unsigned gridY,
                      unsigned gridZ, unsigned blockX, unsigned blockY,
                      unsigned blockZ, unsigned sharedMemoryBytes, void *stream,
                      void **params, void **extra);
  int (*getErrorString)(int result, const char **text);
};

/// The real driver (libcuda.so.1, loaded and cuInit'ed on first call), or
/// null with `error` saying why it cannot be used.
const CudaDriverApi *realCudaDriverApi(std::string &error);

/// Makes the mgpu* wrappers use `api` from now on (null: the real driver
/// again). Modules loaded before keep the driver they were loaded with, so
/// switch before any CUDA-lowered code runs.
void setCudaDriverApi(const CudaDriverApi *api);

/// createCodegenRuntime over `api` (the real libraries or the simulation).
PolymeshRuntime *createCodegenRuntime(const NcclApi &api,
                                      const CodegenRuntimeOptions &options);

/// cudaCodegenSymbols() with NCCL's functions taken from `nccl` (the real
/// library, or the simulation's).
std::vector<CodegenSymbol> cudaCodegenSymbols(const NcclApi &nccl);

} // namespace polymesh::runtime

#endif // POLYMESH_LIB_RUNTIME_CUDADRIVERAPI_H
