//===- CudaCodegenSymbols.h - What CUDA-lowered code links against C++ -*-===//
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
#include <memory>
#include <string>
#include <vector>

struct PolymeshRuntime;

namespace polymesh::runtime {

class Store;

/// The runtime of one run of CUDA-lowered code whose devices may live in
/// several processes (one per host or per GPU).
struct CodegenRuntimeOptions {
  /// Every device of the run, the same list in every process.
  std::vector<int64_t> worldDevices;
  /// The devices this process drives, on its CUDA devices firstCudaDevice,
  /// firstCudaDevice + 1, ... in this order. Empty: all of worldDevices.
  std::vector<int64_t> localDevices;
  int firstCudaDevice = 0;
  /// Carries NCCL's unique ids between the processes; required when some
  /// device is not local. Keys start with storePrefix, which must differ
  /// between the runs that share a store.
  std::shared_ptr<Store> store;
  std::string storePrefix = "polymesh/nccl";
  /// The longest any wait lasts (0: the backend's default).
  int64_t timeoutMs = 0;
};

/// A runtime over the real CUDA and NCCL (PolymeshRuntimeNccl); never null
/// (a failed runtime says why in polymesh_rt_last_error).
PolymeshRuntime *createCodegenRuntime(const CodegenRuntimeOptions &options);

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
/// The same over simulated GPUs, one per local device. With several
/// processes, their simulations must be connected first (connectSimulatedGpus).
PolymeshRuntime *
createSimulatedCodegenRuntime(const CodegenRuntimeOptions &options);

} // namespace polymesh::runtime

#endif // POLYMESH_RUNTIME_CUDACODEGENSYMBOLS_H
