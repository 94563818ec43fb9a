//===- CudaCodegenSymbols.h - What CUDA-lowered code links against -*- C++
//-*-===//
//
// Part of Polymesh. Implemented by PolymeshRuntimeNccl.
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

#include <string>
#include <vector>

namespace polymesh::runtime {

struct CodegenSymbol {
  std::string name;
  void *address = nullptr;
};

/// Every function CUDA-lowered code may call, bound to this process's
/// runtime and to the NCCL library it links.
std::vector<CodegenSymbol> cudaCodegenSymbols();

} // namespace polymesh::runtime

#endif // POLYMESH_RUNTIME_CUDACODEGENSYMBOLS_H
