//===- NcclFake.h - A simulated CUDA runtime and NCCL -----------*- C++ -*-===//
//
// Part of Polymesh. Internal to the runtime's tests: library
// PolymeshGpuSimulator, whose public face is polymesh/Runtime/GpuSimulator.h.
//
//===----------------------------------------------------------------------===//
//
// simulatedNcclApi() (GpuSimulator.h) is an NcclApi whose CUDA and NCCL run in
// this process on the host, so the NCCL backend's own logic runs where there is
// no GPU. It is strict where the real libraries are silent, to catch the
// backend's mistakes:
//
//  - "device memory" is host memory from the simulated cudaMalloc, tagged
//    with its device; a copy whose direction does not match where its
//    pointers live, a collective buffer that is not memory of the
//    communicator's device (or too small), and a stream of another device
//    are errors;
//  - streams are queues executed in order: copies, event waits and NCCL
//    calls (a group's calls on one stream form one entry). An NCCL call
//    completes when all its members' calls are posted, as kernels that
//    wait for their peers would; anything that polls (cudaStreamQuery,
//    ncclCommGetAsyncError) makes progress;
//  - communicators rendezvous by unique id (any thread, any number of
//    backends of this process), are non-blocking when asked, and report
//    mismatched calls (kinds, sizes, roots, types) as asynchronous errors;
//  - ncclCommAbort drops a communicator's pending calls, so that its stream
//    drains while its peers keep waiting.
//
// What it is not: a model of NCCL's performance, of its exact rounding of
// f16/bf16 sums (it rounds once, as the loopback backend does), of
// network failures between processes (connectSimulatedGpus), or of anything a
// GPU kernel does.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_RUNTIME_NCCLFAKE_H
#define POLYMESH_LIB_RUNTIME_NCCLFAKE_H

#include "NcclApi.h"
#include "polymesh/Runtime/GpuSimulator.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace polymesh::runtime {

/// Controls of the simulator, which is process-wide like the libraries it
/// stands for.
class FakeNccl {
public:
  /// The next call named `call` ("ncclAllReduce", "ncclCommInitRankConfig",
  /// ...) on CUDA device `device` (-1: any) returns `result`;
  /// ncclGetLastError then says `lastError`.
  static void failNextNccl(const std::string &call, ncclResult_t result,
                           const std::string &lastError, int device = -1);
  /// The same for a CUDA call ("cudaMalloc", "cudaMemcpyAsync", ...).
  static void failNextCuda(const std::string &call, cudaError_t error,
                           int device = -1);
  /// Every live communicator on `device` fails asynchronously with
  /// `result` (a peer process that died looks like this).
  static void failCommunicatorsAsync(int device, ncclResult_t result,
                                     const std::string &lastError);

  struct Counts {
    /// Live simulated device allocations, streams, events, communicators.
    int64_t allocations = 0;
    int64_t streams = 0;
    int64_t events = 0;
    int64_t communicators = 0;
    /// Communicators ended by ncclCommDestroy and by ncclCommAbort.
    int64_t destroyed = 0;
    int64_t abortedCommunicators = 0;
    /// NCCL collective and point-to-point calls accepted.
    int64_t ncclCalls = 0;
    /// Largest number of NCCL calls issued in one group on one stream.
    int64_t largestGroup = 0;
  };
  static Counts counts();

  /// The simulated CUDA device of a live stream, or -1.
  static int streamDevice(cudaStream_t stream);
};

} // namespace polymesh::runtime

#endif // POLYMESH_LIB_RUNTIME_NCCLFAKE_H
