//===- CudaCodegenSymbols.h - What CUDA-lowered code links against -*- C++
//-*-===//
//
// Part of Polymesh. Implemented by PolymeshRuntimeNccl (and, for simulated
// GPUs, PolymeshRuntimeNcclFake).
//
//===----------------------------------------------------------------------===//
//
// A JIT that runs --polymesh-lower-to-cuda's host code binds its external
// calls by name: the runtime's polymesh_rt_* functions of
// PolymeshCudaRuntime.h, the mgpu* kernel-launch wrappers, and NCCL's
// functions (ncclGroupStart, ncclSend, ncclAllReduce, ...).
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_RUNTIME_CUDACODEGENSYMBOLS_H
#define POLYMESH_RUNTIME_CUDACODEGENSYMBOLS_H

#include <cstdint>
#include <string>
#include <vector>

struct PolymeshRuntime;

namespace polymesh::runtime {

struct CodegenSymbol {
  std::string name;
  void *address = nullptr;
};

/// Every function CUDA-lowered code may call, bound to this process's
/// runtime and to the NCCL library it links.
std::vector<CodegenSymbol> cudaCodegenSymbols();

// Simulated GPUs (implemented by PolymeshRuntimeNcclFake, for tests and
// --simulate-gpus): the same symbols with the simulated NCCL, and
// polymesh_rt_create_nccl on one simulated GPU per device, which also
// switches the mgpu* wrappers to the simulated driver. Only one simulated
// runtime may be alive at a time.
std::vector<CodegenSymbol> simulatedCudaCodegenSymbols();
PolymeshRuntime *createSimulatedCodegenRuntime(const int64_t *deviceIds,
                                               int64_t numDevices,
                                               int64_t timeoutMs);

} // namespace polymesh::runtime

#endif // POLYMESH_RUNTIME_CUDACODEGENSYMBOLS_H
