//===- CudaTarget.h - Sharded runs on GPUs, real or simulated --*- C++ -*-===//
//
// Part of Polymesh. Header only: PolymeshExecution links no CUDA, so the
// tools that run on GPUs (polymesh-run, polymesh-gpu-bench) include this and
// link PolymeshRuntimeNccl and PolymeshRuntimeNcclFake themselves.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_CUDATARGET_H
#define POLYMESH_EXECUTION_CUDATARGET_H

#include "polymesh/Execution/ShardedRunner.h"
#include "polymesh/Runtime/CudaCodegenSymbols.h"
#include "polymesh/Runtime/PolymeshCudaRuntime.h"

namespace polymesh::execution {

/// Makes `options` run the partitioned program lowered to CUDA: on the
/// local GPUs, one per device, or with `simulated` on simulated GPUs in this
/// process (kernels interpreted on the host).
inline void useCudaTarget(ShardedRunnerOptions &options, bool simulated) {
  options.target = ShardedTarget::Cuda;
  PolymeshRuntime *(*simulatedRuntime)(const int64_t *, int64_t, int64_t) =
      runtime::createSimulatedCodegenRuntime;
  options.cuda.createRuntime =
      simulated ? simulatedRuntime : polymesh_rt_create_nccl;
  options.cuda.alloc = polymesh_rt_device_alloc;
  options.cuda.free = polymesh_rt_device_free;
  options.cuda.upload = polymesh_rt_device_upload;
  options.cuda.download = polymesh_rt_device_download;
  options.jit.symbols.clear();
  for (const runtime::CodegenSymbol &symbol :
       simulated ? runtime::simulatedCudaCodegenSymbols()
                 : runtime::cudaCodegenSymbols())
    options.jit.symbols.emplace_back(symbol.name, symbol.address);
}

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_CUDATARGET_H
