//===- NcclBackend.h - The runtime's Backend over NCCL ----------*- C++ -*-===//
//
// Part of Polymesh. Built only with POLYMESH_ENABLE_CUDA (library
// PolymeshRuntimeNccl); this header names no CUDA or NCCL type, so code that
// includes it needs no CUDA headers.
//
//===----------------------------------------------------------------------===//
//
// NcclBackend implements Backend (Runtime.h) with NCCL and the CUDA runtime.
// Each device of the job is one GPU and one NCCL rank. A process drives
// some of the job's devices, each from its own thread (runOnDevices starts
// one per local device):
//
//  - one process for all local GPUs (createSingleProcess), or
//  - one process per GPU across hosts (createFromLaunchEnvironment: device
//    id RANK on CUDA device LOCAL_RANK, WORLD_SIZE devices in all), or any
//    other split (create).
//
// Communicators. Creating the backend creates the world communicator (all
// devices of the job; it carries send/recv) on every local device; the
// processes of a job must create their backends together. A collective on
// another member list creates that group's communicator on first use, on
// each member, with ncclCommInitRankConfig: the group's rank 0 makes a
// unique id and publishes it in the Store under "<prefix>/comm/<members>",
// the other members read it. Communicators are cached by member list for the
// life of the backend. (ncclCommSplit would need every device of the job to
// take part in every split, which calls made by the members alone cannot
// promise.) Communicators are non-blocking, so that creation and every wait
// can be bounded by the timeout and abandoned with ncclCommAbort.
//
// Calls. Semantics are those of PolymeshRuntime.h, with NCCL's rules, and
// are checked on the host as far as one device can check them (members,
// roots, sizes, null buffers, dtype and op codes, buffers that overlap other
// than in NCCL's in-place forms, and with checkPointers where each buffer
// lives). Mismatched calls across devices cannot be detected before NCCL
// runs them; they hang or corrupt, and the timeout reports the hang. A
// group (groupStart/groupEnd, nesting) is recorded and posted at the
// outermost groupEnd: communicators it needs are created first, then its
// calls are issued between ncclGroupStart and ncclGroupEnd. allToAll is
// grouped ncclSend/ncclRecv (through a staging copy when in place), the
// chunk a device keeps a device-to-device copy.
//
// Buffers and completion. With NcclBuffers::Device (the default) buffers are
// device pointers of the calling device's GPU. With NcclBuffers::Host they
// are host memory: each call stages its inputs into device memory, runs on
// the GPUs and copies the results back, so host-side code such as the plan
// executor runs unchanged (verification, not speed). NcclCompletion::Blocking
// (the default) returns from a call, or the outermost groupEnd, when the
// GPU has finished it. StreamOrdered returns once the work is enqueued on
// the device's communication stream (stream()); order other work against it
// with waitForStream and streamWaitForCommunication, and wait with
// synchronize. Device buffers only.
//
// Errors. CUDA and NCCL errors become statuses that name the call, the
// device (and its CUDA device) and the group, with cudaGetErrorName and
// cudaGetErrorString, or ncclGetErrorString and ncclGetLastError. As on the
// loopback backend the first error aborts the backend: blocked devices are
// released (their communicators aborted) and later calls fail as aborted.
// Without a usable GPU, creation fails with Unavailable: "no CUDA device: ".
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_RUNTIME_NCCLBACKEND_H
#define POLYMESH_RUNTIME_NCCLBACKEND_H

#include "polymesh/Runtime/Runtime.h"
#include "polymesh/Runtime/Store.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

/// CUDA's stream type (cudaStream_t is CUstream_st *).
struct CUstream_st;

namespace polymesh::runtime {

/// The table of CUDA and NCCL entry points (lib/Runtime/NcclApi.h).
struct NcclApi;

/// Where the buffers passed to calls live.
enum class NcclBuffers : uint8_t {
  /// Device memory of the calling device's GPU.
  Device,
  /// Host memory, staged through device memory by every call.
  Host,
};

/// When a call returns.
enum class NcclCompletion : uint8_t {
  /// When the GPU has finished it (the loopback backend's semantics).
  Blocking,
  /// When it is enqueued on the device's communication stream.
  StreamOrdered,
};

/// A device this process drives.
struct NcclLocalDevice {
  /// Its id among NcclOptions::worldDevices.
  int64_t id = 0;
  /// Its CUDA device ordinal in this process.
  int cudaDevice = 0;
};

struct NcclOptions {
  /// Every device id of the job; a device's NCCL rank in the world
  /// communicator is its index here. Distinct and non-negative.
  std::vector<int64_t> worldDevices;
  /// The devices this process drives; at least one, distinct ids and CUDA
  /// devices.
  std::vector<NcclLocalDevice> localDevices;
  /// Carries unique ids between processes. Required when some world device
  /// is not local; otherwise a MemoryStore is used when null. Backends that
  /// share a store need distinct storePrefix values.
  std::shared_ptr<Store> store;
  std::string storePrefix = "polymesh/nccl";
  /// The longest any wait lasts: communicator creation, a store read, a
  /// call (Blocking), synchronize(), the destructor's flush.
  absl::Duration timeout = absl::Minutes(5);
  NcclBuffers buffers = NcclBuffers::Device;
  NcclCompletion completion = NcclCompletion::Blocking;
  /// With device buffers: check with cudaPointerGetAttributes that every
  /// buffer is memory of the calling device's GPU (or managed memory).
  bool checkPointers = true;
  /// Null: the real CUDA runtime and NCCL. Tests pass a simulator.
  const NcclApi *api = nullptr;
};

/// The number of CUDA devices this process sees, or Unavailable with a
/// message that starts "no CUDA device: " and says why (no driver, no
/// device, CUDA_VISIBLE_DEVICES hiding them all, ...).
absl::StatusOr<int> cudaDeviceCount(const NcclApi *api = nullptr);

class NcclState;

class NcclBackend final : public Backend {
public:
  /// Checks the options (no GPU needed for that), then that the CUDA
  /// devices exist, creates a stream per local device and the world
  /// communicator. Collective over the job: every process creates its
  /// backend with the same worldDevices.
  static absl::StatusOr<std::unique_ptr<NcclBackend>>
  create(NcclOptions options);

  /// One process drives `deviceIds` (empty: 0..n-1 for the n visible GPUs)
  /// on CUDA devices 0, 1, ... in order. options.worldDevices and
  /// options.localDevices are replaced.
  static absl::StatusOr<std::unique_ptr<NcclBackend>>
  createSingleProcess(std::vector<int64_t> deviceIds = {},
                      NcclOptions options = {});

  /// One process per GPU: devices 0..WORLD_SIZE-1, this process drives
  /// device RANK on CUDA device LOCAL_RANK. The store is options.store, or
  /// the environment's (createStoreFromEnvironment).
  static absl::StatusOr<std::unique_ptr<NcclBackend>>
  createFromLaunchEnvironment(const LaunchEnvironment &environment,
                              NcclOptions options = {});

  /// Waits (at most the timeout) for work still in flight, then releases
  /// communicators (ncclCommFinalize and ncclCommDestroy, or ncclCommAbort
  /// after an error), staging memory, events and streams. No device may be
  /// in a call.
  ~NcclBackend() override;

  /// The devices this process drives, in options.localDevices order:
  /// runOnDevices starts one thread for each.
  absl::Span<const int64_t> devices() const override;
  absl::Status groupStart(int64_t device) override;
  absl::Status groupEnd(int64_t device) override;
  absl::Status send(int64_t device, int64_t peer, const void *buf,
                    int64_t bytes) override;
  absl::Status recv(int64_t device, int64_t peer, void *buf,
                    int64_t bytes) override;
  absl::Status broadcast(int64_t device, absl::Span<const int64_t> members,
                         int64_t root, const void *send, void *recv,
                         int64_t bytes) override;
  absl::Status allGather(int64_t device, absl::Span<const int64_t> members,
                         const void *send, void *recv,
                         int64_t bytesPerRank) override;
  absl::Status allToAll(int64_t device, absl::Span<const int64_t> members,
                        const void *send, void *recv,
                        int64_t bytesPerPeer) override;
  absl::Status allReduce(int64_t device, absl::Span<const int64_t> members,
                         const void *send, void *recv, int64_t count,
                         DataType type, ReduceOp op) override;
  absl::Status reduceScatter(int64_t device, absl::Span<const int64_t> members,
                             const void *send, void *recv, int64_t recvCount,
                             DataType type, ReduceOp op) override;
  absl::Status firstError() const override;
  void abort(const absl::Status &error) override;

  /// Every device of the job.
  absl::Span<const int64_t> worldDevices() const;
  /// The CUDA device of a local device, or -1.
  int cudaDevice(int64_t device) const;
  NcclBuffers buffers() const;
  NcclCompletion completion() const;
  /// Communicators in the cache, the world communicator included.
  int64_t numCommunicators() const;

  /// The device's communication stream: every NCCL call and staging copy
  /// of the device runs on it.
  /// The NCCL communicator (an ncclComm_t) of `members` on `device`, for
  /// generated code that calls NCCL itself; created on first use, which is
  /// collective over the members (each must ask for it), and cached.
  absl::StatusOr<void *> communicatorHandle(int64_t device,
                                            absl::Span<const int64_t> members);
  absl::StatusOr<CUstream_st *> stream(int64_t device);
  /// Generated code called NCCL on `comm` (from communicatorHandle) and got
  /// `result` (an ncclResult_t). Communicators are non-blocking, so
  /// ncclInProgress means "still being enqueued": this polls the
  /// communicator until it is not, as NCCL requires before its next call.
  /// Any other error is the backend's first error (it aborts), named by
  /// `call`.
  absl::Status finishGeneratedCall(int64_t device, void *comm, int result,
                                   absl::string_view call);
  /// Makes later communication of `device` wait for the work enqueued so
  /// far on `producer` (a pack kernel, say). Host-side enqueue only.
  absl::Status waitForStream(int64_t device, CUstream_st *producer);
  /// Makes later work on `consumer` (an unpack kernel, say) wait for the
  /// communication enqueued so far on `device`. Host-side enqueue only.
  absl::Status streamWaitForCommunication(int64_t device,
                                          CUstream_st *consumer);
  /// Waits until everything enqueued on the device's stream has finished,
  /// at most the timeout.
  absl::Status synchronize(int64_t device);

  /// Device memory on `device`'s GPU (cudaMalloc); bytes > 0.
  absl::StatusOr<void *> allocate(int64_t device, int64_t bytes);
  absl::Status deallocate(int64_t device, void *pointer);
  /// Frees `pointer` once the work enqueued so far on the device's stream
  /// has finished: at the next synchronize(device), or when the backend is
  /// destroyed. Generated code releases staging right after enqueuing the
  /// kernels and NCCL calls that use it; cudaFree would free it under them.
  absl::Status deallocateAfterStream(int64_t device, void *pointer);
  /// Copies between host and device memory of `device`, ordered after the
  /// device's communication; they return when the copy is done.
  absl::Status copyToDevice(int64_t device, void *deviceDst,
                            const void *hostSrc, int64_t bytes);
  absl::Status copyToHost(int64_t device, void *hostDst, const void *deviceSrc,
                          int64_t bytes);
  /// polymesh_rt_copy on this backend: a copy within the device's memory
  /// (NcclBuffers::Device, ordered on its stream, completing as calls do;
  /// the ranges must not overlap unless equal) or host memory (Host,
  /// memmove).
  absl::Status copy(int64_t device, void *dst, const void *src, int64_t bytes);

private:
  explicit NcclBackend(std::unique_ptr<NcclState> state);
  std::unique_ptr<NcclState> state;
};

} // namespace polymesh::runtime

#endif // POLYMESH_RUNTIME_NCCLBACKEND_H
