//===- NcclApi.h - The CUDA and NCCL calls of the NCCL backend --*- C++ -*-===//
//
// Part of Polymesh. Internal to the runtime and its tests.
//
//===----------------------------------------------------------------------===//
//
// Every CUDA runtime and NCCL call the NCCL backend makes goes through one
// table of function pointers. realNcclApi() holds the libraries' own
// functions; NcclFake.h provides a simulated CUDA and NCCL in one process
// (host memory as device memory, one thread per device), so the backend's
// logic (communicator cache, unique-id exchange, group mapping, staging,
// error translation) runs in tests on machines without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_RUNTIME_NCCLAPI_H
#define POLYMESH_LIB_RUNTIME_NCCLAPI_H

#include <cuda_runtime_api.h>
#include <nccl.h>

namespace polymesh::runtime {

struct NcclApi {
  /// "CUDA and NCCL", or the simulator's name: it appears in diagnostics.
  const char *name;

  // CUDA runtime.
  cudaError_t (*getDeviceCount)(int *count);
  cudaError_t (*driverGetVersion)(int *version);
  const char *(*getErrorName)(cudaError_t error);
  const char *(*getErrorString)(cudaError_t error);
  cudaError_t (*getLastError)();
  cudaError_t (*setDevice)(int device);
  cudaError_t (*streamCreateWithFlags)(cudaStream_t *stream, unsigned flags);
  cudaError_t (*streamDestroy)(cudaStream_t stream);
  cudaError_t (*streamQuery)(cudaStream_t stream);
  cudaError_t (*eventCreateWithFlags)(cudaEvent_t *event, unsigned flags);
  cudaError_t (*eventDestroy)(cudaEvent_t event);
  cudaError_t (*eventRecord)(cudaEvent_t event, cudaStream_t stream);
  cudaError_t (*streamWaitEvent)(cudaStream_t stream, cudaEvent_t event,
                                 unsigned flags);
  cudaError_t (*malloc)(void **pointer, size_t bytes);
  cudaError_t (*free)(void *pointer);
  cudaError_t (*memcpyAsync)(void *dst, const void *src, size_t bytes,
                             cudaMemcpyKind kind, cudaStream_t stream);
  cudaError_t (*pointerGetAttributes)(cudaPointerAttributes *attributes,
                                      const void *pointer);

  // NCCL.
  ncclResult_t (*getUniqueId)(ncclUniqueId *id);
  ncclResult_t (*commInitRankConfig)(ncclComm_t *comm, int nranks,
                                     ncclUniqueId id, int rank,
                                     ncclConfig_t *config);
  ncclResult_t (*commGetAsyncError)(ncclComm_t comm, ncclResult_t *error);
  ncclResult_t (*commFinalize)(ncclComm_t comm);
  ncclResult_t (*commDestroy)(ncclComm_t comm);
  ncclResult_t (*commAbort)(ncclComm_t comm);
  const char *(*ncclErrorString)(ncclResult_t result);
  const char *(*ncclLastError)(ncclComm_t comm);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
  ncclResult_t (*send)(const void *buf, size_t count, ncclDataType_t type,
                       int peer, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*recv)(void *buf, size_t count, ncclDataType_t type, int peer,
                       ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*broadcast)(const void *send, void *recv, size_t count,
                            ncclDataType_t type, int root, ncclComm_t comm,
                            cudaStream_t stream);
  ncclResult_t (*allGather)(const void *send, void *recv, size_t sendCount,
                            ncclDataType_t type, ncclComm_t comm,
                            cudaStream_t stream);
  ncclResult_t (*allReduce)(const void *send, void *recv, size_t count,
                            ncclDataType_t type, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*reduceScatter)(const void *send, void *recv, size_t recvCount,
                                ncclDataType_t type, ncclRedOp_t op,
                                ncclComm_t comm, cudaStream_t stream);
};

/// The CUDA runtime and NCCL this library links.
const NcclApi &realNcclApi();

} // namespace polymesh::runtime

#endif // POLYMESH_LIB_RUNTIME_NCCLAPI_H
