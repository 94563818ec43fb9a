//===- NcclBackend.cpp - The runtime's Backend over NCCL ------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// A call of a device is validated on the host and becomes an Op. Outside a
// group it is posted at once; inside one it is recorded until the outermost
// groupEnd posts all of them. Posting a list of ops on a device:
//
//   1. creates the communicators they need that the device does not have
//      yet, in member-list order (so that devices whose groups first use
//      several new communicators create them in the same order), each
//      outside any NCCL group;
//   2. stages: host buffers into device memory (NcclBuffers::Host), the
//      input of an all-to-all whose buffers overlap into scratch;
//   3. issues every op between ncclGroupStart and ncclGroupEnd, then the
//      chunk an all-to-all keeps and the copies back to host memory;
//   4. with Blocking completion, waits until the stream is idle.
//
// Every wait polls (cudaStreamQuery, ncclCommGetAsyncError) against a
// deadline and the abort flag, so no call hangs: a timeout, an asynchronous
// NCCL error or an abort from another thread ends it, and the device aborts
// its own communicators (ncclCommAbort) so that the GPU is released. A
// device's communicator handles are only touched by the thread calling for
// that device (and by the destructor), as NCCL requires.
//
//===----------------------------------------------------------------------===//

#include "BackendOps.h"

#include "polymesh/Runtime/NcclAbi.h"
#include "polymesh/Runtime/NcclBackend.h"

#include "NcclApi.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace polymesh::runtime {

const NcclApi &realNcclApi() {
  static const NcclApi api = {
      "CUDA and NCCL",
      cudaGetDeviceCount,
      cudaDriverGetVersion,
      cudaGetErrorName,
      cudaGetErrorString,
      cudaGetLastError,
      cudaSetDevice,
      cudaStreamCreateWithFlags,
      cudaStreamDestroy,
      cudaStreamQuery,
      cudaEventCreateWithFlags,
      cudaEventDestroy,
      cudaEventRecord,
      cudaStreamWaitEvent,
      cudaMalloc,
      cudaFree,
      cudaMemcpyAsync,
      cudaPointerGetAttributes,
      ncclGetUniqueId,
      ncclCommInitRankConfig,
      ncclCommGetAsyncError,
      ncclCommFinalize,
      ncclCommDestroy,
      ncclCommAbort,
      ncclGetErrorString,
      ncclGetLastError,
      ncclGroupStart,
      ncclGroupEnd,
      ncclSend,
      ncclRecv,
      ncclBroadcast,
      ncclAllGather,
      ncclAllReduce,
      ncclReduceScatter,
  };
  return api;
}

namespace {

using Clock = std::chrono::steady_clock;

using detail::formatGroup;
using detail::OpKind;
using detail::opKindName;

// What generated code passes (NcclAbi.h) is what this nccl.h means.
static_assert(nccl_abi::kInt8 == static_cast<int>(ncclInt8) &&
                  nccl_abi::kUint8 == static_cast<int>(ncclUint8) &&
                  nccl_abi::kInt32 == static_cast<int>(ncclInt32) &&
                  nccl_abi::kInt64 == static_cast<int>(ncclInt64) &&
                  nccl_abi::kFloat16 == static_cast<int>(ncclFloat16) &&
                  nccl_abi::kFloat32 == static_cast<int>(ncclFloat32) &&
                  nccl_abi::kFloat64 == static_cast<int>(ncclFloat64) &&
                  nccl_abi::kBfloat16 == static_cast<int>(ncclBfloat16),
              "NcclAbi.h's ncclDataType_t values differ from nccl.h's");
static_assert(nccl_abi::kSum == static_cast<int>(ncclSum),
              "NcclAbi.h's ncclRedOp_t values differ from nccl.h's");

ncclDataType_t ncclType(DataType type) {
  switch (type) {
  case DataType::F32:
    return ncclFloat32;
  case DataType::F64:
    return ncclFloat64;
  case DataType::F16:
    return ncclFloat16;
  case DataType::BF16:
    return ncclBfloat16;
  case DataType::I32:
    return ncclInt32;
  case DataType::I64:
    return ncclInt64;
  case DataType::I8:
    return ncclInt8;
  case DataType::U8:
    return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return ncclSum;
  case ReduceOp::Prod:
    return ncclProd;
  case ReduceOp::Max:
    return ncclMax;
  case ReduceOp::Min:
    return ncclMin;
  }
  return ncclSum;
}

/// A point in time; waits poll until it passes.
struct Deadline {
  Clock::time_point at;
  static Deadline after(absl::Duration timeout) {
    return {Clock::now() + absl::ToChronoNanoseconds(timeout)};
  }
  bool expired() const { return Clock::now() >= at; }
  absl::Duration left() const {
    return absl::FromChrono(
        std::max(Clock::duration::zero(), at - Clock::now()));
  }
};

/// Polling with a short spin, then sleeps that grow to 200 us.
class Backoff {
public:
  void pause() {
    if (++spins < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(200));
  }

private:
  int spins = 0;
  std::chrono::microseconds sleep{10};
};

struct Communicator {
  std::vector<int64_t> members;
  absl::flat_hash_map<int64_t, int> rankOf;
  /// "group [0,1,2]".
  std::string name;
  std::string storeKey;
  /// Per local device (index); null until that device created its handle.
  /// Written and read by that device's thread only.
  std::vector<ncclComm_t> handles;
};

/// One validated call.
struct Op {
  OpKind kind = OpKind::Send;
  Communicator *comm = nullptr;
  /// Send/recv: the other device and its world rank.
  int64_t peer = -1;
  int peerRank = -1;
  /// Broadcast: the root device and its rank in the communicator.
  int64_t root = -1;
  int rootRank = -1;
  /// This device's rank in `comm`.
  int rank = 0;
  const void *send = nullptr;
  void *recv = nullptr;
  /// As in Backend: bytes for send/recv/broadcast, per rank for all_gather,
  /// per peer for all_to_all, elements for all_reduce, per rank for
  /// reduce_scatter.
  int64_t size = 0;
  DataType type = DataType::U8;
  ReduceOp reduceOp = ReduceOp::Sum;
  /// Bytes the call reads from `send` and writes to `recv` on this device.
  int64_t sendBytes = 0;
  int64_t recvBytes = 0;
  /// The device buffers the NCCL calls use: the caller's, or staging.
  const void *deviceSend = nullptr;
  void *deviceRecv = nullptr;
};

std::string describeOp(const Op &op) {
  switch (op.kind) {
  case OpKind::Send:
    return absl::StrCat("send of ", op.size, " bytes to device ", op.peer);
  case OpKind::Recv:
    return absl::StrCat("recv of ", op.size, " bytes from device ", op.peer);
  default:
    return absl::StrCat(opKindName(op.kind), " on ", op.comm->name);
  }
}

std::string describeOps(const std::vector<Op> &ops) {
  if (ops.size() == 1)
    return describeOp(ops[0]);
  std::string text = absl::StrCat("a group of ", ops.size(), " calls (");
  for (size_t i = 0; i < ops.size() && i < 3; ++i)
    absl::StrAppend(&text, i ? ", " : "", describeOp(ops[i]));
  absl::StrAppend(&text, ops.size() > 3 ? ", ...)" : ")");
  return text;
}

struct Device {
  int64_t id = 0;
  int cuda = 0;
  int index = 0;
  int worldRank = 0;
  std::string label; // "device 3 (CUDA device 1)"
  cudaStream_t stream = nullptr;
  cudaEvent_t inputEvent = nullptr;
  cudaEvent_t doneEvent = nullptr;
  void *scratch = nullptr;
  int64_t scratchBytes = 0;
  int groupDepth = 0;
  std::vector<Op> grouped;
  std::atomic<bool> inCall{false};
  /// The communicators this device has a handle of, in creation order.
  std::vector<Communicator *> owned;
  /// Its communicators were aborted after an error.
  bool dead = false;
  /// Device memory to free once the stream has finished the work that was
  /// enqueued before the free was asked for (deallocateAfterStream).
  std::mutex pendingMu;
  std::vector<void *> pendingFrees;
};

int64_t alignUp(int64_t bytes) { return (bytes + 255) / 256 * 256; }

bool rangesOverlap(const void *a, int64_t aBytes, const void *b,
                   int64_t bBytes) {
  if (aBytes <= 0 || bBytes <= 0)
    return false;
  auto x = reinterpret_cast<uintptr_t>(a);
  auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + static_cast<uintptr_t>(bBytes) &&
         y < x + static_cast<uintptr_t>(aBytes);
}

} // namespace

//===----------------------------------------------------------------------===//
// NcclState
//===----------------------------------------------------------------------===//

class NcclState {
public:
  NcclState(const NcclApi &api, NcclOptions options)
      : api(api), options(std::move(options)) {}

  ~NcclState() { shutdown(); }

  const NcclApi &api;
  NcclOptions options;
  std::vector<int64_t> localIds;
  absl::flat_hash_map<int64_t, int> worldRankOf;
  absl::flat_hash_map<int64_t, int> localIndexOf;
  std::vector<std::unique_ptr<Device>> devices;

  mutable std::mutex commMu;
  absl::flat_hash_map<std::vector<int64_t>, std::unique_ptr<Communicator>>
      comms;
  Communicator *world = nullptr;

  mutable std::mutex errorMu;
  absl::Status firstError;
  std::atomic<bool> aborted{false};

  //===--------------------------------------------------------------------===//
  // Errors
  //===--------------------------------------------------------------------===//

  absl::Status cudaError(cudaError_t error, absl::string_view call,
                         const Device &d, absl::string_view context = "") {
    // A non-sticky error would otherwise be reported again by a later call.
    api.getLastError();
    absl::StatusCode code = absl::StatusCode::kInternal;
    if (error == cudaErrorMemoryAllocation)
      code = absl::StatusCode::kResourceExhausted;
    else if (error == cudaErrorInvalidValue)
      code = absl::StatusCode::kInvalidArgument;
    return absl::Status(code, absl::StrCat(call, context.empty() ? "" : " for ",
                                           context, " on ", d.label,
                                           " failed: ", api.getErrorName(error),
                                           ": ", api.getErrorString(error)));
  }

  absl::Status ncclError(ncclResult_t result, absl::string_view call,
                         const Device &d, ncclComm_t handle,
                         absl::string_view context) {
    absl::StatusCode code = absl::StatusCode::kInternal;
    if (result == ncclInvalidArgument)
      code = absl::StatusCode::kInvalidArgument;
    else if (result == ncclInvalidUsage)
      code = absl::StatusCode::kFailedPrecondition;
    else if (result == ncclRemoteError)
      code = absl::StatusCode::kUnavailable;
    const char *last = api.ncclLastError(handle);
    return absl::Status(
        code, absl::StrCat(call, " for ", context, " on ", d.label,
                           " failed: ", api.ncclErrorString(result),
                           last && *last ? absl::StrCat(": ", last) : ""));
  }

  /// Records `error` as the first error (unless there is one) and aborts.
  absl::Status fail(absl::Status error) {
    {
      std::lock_guard<std::mutex> lock(errorMu);
      if (firstError.ok())
        firstError = error;
    }
    aborted = true;
    return error;
  }

  /// fail(), and the device gives up its communicators, so that kernels
  /// waiting for peers that will never come end.
  absl::Status failDevice(Device &d, absl::Status error) {
    fail(error).IgnoreError();
    abortCommunicators(d);
    return error;
  }

  absl::Status abortedStatus() const {
    std::lock_guard<std::mutex> lock(errorMu);
    return absl::AbortedError(absl::StrCat(
        "aborted because of an earlier error: ", firstError.message()));
  }

  void abortCommunicators(Device &d) {
    if (d.dead)
      return;
    d.dead = true;
    api.setDevice(d.cuda);
    for (Communicator *comm : d.owned) {
      ncclComm_t &handle = comm->handles[d.index];
      if (handle)
        api.commAbort(handle);
      handle = nullptr;
    }
    d.owned.clear();
  }

  //===--------------------------------------------------------------------===//
  // Entering a call
  //===--------------------------------------------------------------------===//

  struct CallGuard {
    explicit CallGuard(Device &d) : d(d) {}
    ~CallGuard() { d.inCall = false; }
    Device &d;
  };

  absl::StatusOr<Device *> find(int64_t device) {
    auto it = localIndexOf.find(device);
    if (it == localIndexOf.end())
      return absl::InvalidArgumentError(absl::StrCat(
          "calling device ", device, " is not a device of this process ",
          formatGroup(localIds)));
    return devices[it->second].get();
  }

  /// The device of a call; marks it as inside a call (release with a
  /// CallGuard). Fails when the backend failed, for an unknown device and
  /// for a second concurrent call.
  absl::StatusOr<Device *> enter(int64_t device) {
    if (aborted)
      return abortedStatus();
    absl::StatusOr<Device *> d = find(device);
    if (!d.ok())
      return fail(d.status());
    if ((*d)->inCall.exchange(true))
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "device ", device,
          " called the runtime while another thread is in a call for it")));
    return *d;
  }

  absl::Status setDevice(Device &d) {
    if (cudaError_t e = api.setDevice(d.cuda); e != cudaSuccess)
      return cudaError(e, "cudaSetDevice", d);
    return absl::OkStatus();
  }

  //===--------------------------------------------------------------------===//
  // Validation
  //===--------------------------------------------------------------------===//

  absl::Status checkMember(int64_t id, absl::string_view role) const {
    if (worldRankOf.contains(id))
      return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(role, " ", id, " is not a device of this job ",
                     formatGroup(options.worldDevices)));
  }

  /// The communicator of `members`, created in the cache (without handles)
  /// on first use.
  absl::StatusOr<Communicator *>
  communicator(OpKind kind, int64_t device, absl::Span<const int64_t> members) {
    std::vector<int64_t> key(members.begin(), members.end());
    std::lock_guard<std::mutex> lock(commMu);
    auto it = comms.find(key);
    if (it == comms.end()) {
      if (members.empty())
        return absl::InvalidArgumentError(absl::StrCat(
            opKindName(kind), " on device ", device, ": empty group"));
      auto comm = std::make_unique<Communicator>();
      comm->members = key;
      comm->name = absl::StrCat("group ", formatGroup(members));
      comm->storeKey =
          absl::StrCat(options.storePrefix, "/comm/", absl::StrJoin(key, ","));
      comm->handles.assign(devices.size(), nullptr);
      for (size_t r = 0; r < members.size(); ++r) {
        if (absl::Status known = checkMember(members[r], "member"); !known.ok())
          return absl::InvalidArgumentError(absl::StrCat(
              opKindName(kind), " on ", comm->name, ": ", known.message()));
        if (!comm->rankOf.emplace(members[r], static_cast<int>(r)).second)
          return absl::InvalidArgumentError(
              absl::StrCat(opKindName(kind), " on ", comm->name, ": device ",
                           members[r], " appears twice"));
      }
      it = comms.emplace(std::move(key), std::move(comm)).first;
    }
    Communicator *comm = it->second.get();
    if (!comm->rankOf.contains(device))
      return absl::InvalidArgumentError(
          absl::StrCat(opKindName(kind), " on ", comm->name, ": device ",
                       device, " called it but is not a member"));
    return comm;
  }

  /// a * b, or an error when it overflows.
  static absl::StatusOr<int64_t> product(int64_t a, int64_t b, OpKind kind) {
    int64_t result;
    if (__builtin_mul_overflow(a, b, &result))
      return absl::InvalidArgumentError(absl::StrCat(
          opKindName(kind), ": buffer size overflows (", a, " x ", b, ")"));
    return result;
  }

  /// Null and placement checks of one buffer of `op` on `d`.
  absl::Status checkBuffer(const Device &d, const Op &op, const void *buf,
                           int64_t bytes, absl::string_view what) {
    std::string where = absl::StrCat(describeOp(op), " on device ", d.id);
    if (bytes > 0 && buf == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", what, " buffer is null for ", bytes, " bytes"));
    if (bytes <= 0 || options.buffers == NcclBuffers::Host ||
        !options.checkPointers)
      return absl::OkStatus();
    cudaPointerAttributes attributes;
    std::memset(&attributes, 0, sizeof(attributes));
    if (cudaError_t e = api.pointerGetAttributes(&attributes, buf);
        e != cudaSuccess)
      return cudaError(e, "cudaPointerGetAttributes", d,
                       absl::StrCat("the ", what, " buffer of ", where));
    if (attributes.type == cudaMemoryTypeUnregistered ||
        attributes.type == cudaMemoryTypeHost)
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the ", what, " buffer ", absl::Hex(uintptr_t(buf)),
          " is host memory, not device memory (with NcclBuffers::Host the "
          "backend takes host buffers)"));
    if (attributes.type == cudaMemoryTypeDevice && attributes.device != d.cuda)
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the ", what, " buffer is memory of CUDA device ",
          attributes.device, ", not of ", d.label));
    return absl::OkStatus();
  }

  /// Sizes, nulls, placement and aliasing of a built op.
  absl::Status checkOp(const Device &d, Op &op) {
    if (op.size < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          describeOp(op), " on device ", d.id, ": negative size ", op.size));
    int64_t n = op.comm ? static_cast<int64_t>(op.comm->members.size()) : 1;
    int64_t unit = op.size;
    if (op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter) {
      absl::StatusOr<int64_t> bytes =
          product(op.size, dataTypeSize(op.type), op.kind);
      if (!bytes.ok())
        return bytes.status();
      unit = *bytes;
    }
    absl::StatusOr<int64_t> scaled = unit;
    if (op.kind == OpKind::AllGather || op.kind == OpKind::AllToAll ||
        op.kind == OpKind::ReduceScatter)
      scaled = product(unit, n, op.kind);
    if (!scaled.ok())
      return scaled.status();
    switch (op.kind) {
    case OpKind::Send:
      op.sendBytes = unit;
      break;
    case OpKind::Recv:
      op.recvBytes = unit;
      break;
    case OpKind::Broadcast:
      op.sendBytes = op.rank == op.rootRank ? unit : 0;
      op.recvBytes = unit;
      break;
    case OpKind::AllGather:
      op.sendBytes = unit;
      op.recvBytes = *scaled;
      break;
    case OpKind::AllToAll:
      op.sendBytes = op.recvBytes = *scaled;
      break;
    case OpKind::AllReduce:
      op.sendBytes = op.recvBytes = unit;
      break;
    case OpKind::ReduceScatter:
      op.sendBytes = *scaled;
      op.recvBytes = unit;
      break;
    }
    if (absl::Status ok = checkBuffer(d, op, op.send, op.sendBytes, "send");
        !ok.ok())
      return ok;
    if (absl::Status ok = checkBuffer(d, op, op.recv, op.recvBytes, "recv");
        !ok.ok())
      return ok;
    // NCCL defines only its in-place forms; other overlaps are refused
    // rather than left to corrupt. Host buffers are staged apart anyway, and
    // an all-to-all whose buffers overlap is staged.
    if (options.buffers == NcclBuffers::Host || op.kind == OpKind::AllToAll ||
        !rangesOverlap(op.send, op.sendBytes, op.recv, op.recvBytes))
      return absl::OkStatus();
    auto at = [](const void *base, int64_t offset) {
      return static_cast<const char *>(base) + offset;
    };
    bool inPlace = false;
    switch (op.kind) {
    case OpKind::Broadcast:
    case OpKind::AllReduce:
      inPlace = op.send == op.recv;
      break;
    case OpKind::AllGather:
      inPlace = op.send == at(op.recv, op.rank * op.sendBytes);
      break;
    case OpKind::ReduceScatter:
      inPlace = op.recv == at(op.send, op.rank * op.recvBytes);
      break;
    default:
      break;
    }
    if (!inPlace)
      return absl::InvalidArgumentError(absl::StrCat(
          describeOp(op), " on device ", d.id,
          ": the send and recv buffers overlap, but not in NCCL's in-place "
          "form"));
    return absl::OkStatus();
  }

  absl::StatusOr<Op> makeCollective(Device &d, OpKind kind,
                                    absl::Span<const int64_t> members,
                                    const void *send, void *recv,
                                    int64_t size) {
    absl::StatusOr<Communicator *> comm = communicator(kind, d.id, members);
    if (!comm.ok())
      return comm.status();
    Op op;
    op.kind = kind;
    op.comm = *comm;
    op.rank = (*comm)->rankOf.at(d.id);
    op.send = send;
    op.recv = recv;
    op.size = size;
    return op;
  }

  //===--------------------------------------------------------------------===//
  // Calls
  //===--------------------------------------------------------------------===//

  template <typename BuildFn> absl::Status call(int64_t device, BuildFn build) {
    absl::StatusOr<Device *> entered = enter(device);
    if (!entered.ok())
      return entered.status();
    Device &d = **entered;
    CallGuard guard(d);
    absl::StatusOr<Op> op = build(d);
    if (op.ok()) {
      absl::Status checked = checkOp(d, *op);
      if (!checked.ok())
        op = checked;
    }
    if (!op.ok())
      return fail(op.status());
    if (d.groupDepth > 0) {
      d.grouped.push_back(*std::move(op));
      return absl::OkStatus();
    }
    std::vector<Op> ops;
    ops.push_back(*std::move(op));
    return post(d, ops);
  }

  absl::Status groupStart(int64_t device) {
    absl::StatusOr<Device *> entered = enter(device);
    if (!entered.ok())
      return entered.status();
    CallGuard guard(**entered);
    ++(*entered)->groupDepth;
    return absl::OkStatus();
  }

  absl::Status groupEnd(int64_t device) {
    absl::StatusOr<Device *> entered = enter(device);
    if (!entered.ok())
      return entered.status();
    Device &d = **entered;
    CallGuard guard(d);
    if (d.groupDepth == 0)
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "group_end on device ", device, " without a group_start")));
    if (--d.groupDepth > 0)
      return absl::OkStatus();
    std::vector<Op> ops = std::move(d.grouped);
    d.grouped.clear();
    if (ops.empty())
      return absl::OkStatus();
    return post(d, ops);
  }

  /// Steps 1-4 of the file comment.
  absl::Status post(Device &d, std::vector<Op> &ops) {
    if (absl::Status ok = setDevice(d); !ok.ok())
      return failDevice(d, ok);
    // 1. Communicators, in member-list order.
    std::vector<Communicator *> missing;
    for (const Op &op : ops)
      if (!op.comm->handles[d.index] &&
          std::find(missing.begin(), missing.end(), op.comm) == missing.end())
        missing.push_back(op.comm);
    std::sort(missing.begin(), missing.end(),
              [](const Communicator *a, const Communicator *b) {
                return a->members < b->members;
              });
    for (Communicator *comm : missing)
      if (absl::Status made = createHandle(d, *comm); !made.ok())
        return failDevice(d, made);
    // 2. Staging.
    if (absl::Status staged = stage(d, ops); !staged.ok())
      return failDevice(d, staged);
    // 3. The calls.
    if (absl::Status issued = issue(d, ops); !issued.ok())
      return failDevice(d, issued);
    // 4. Completion.
    if (options.completion == NcclCompletion::Blocking ||
        options.buffers == NcclBuffers::Host)
      if (absl::Status done = waitIdle(d, describeOps(ops)); !done.ok())
        return failDevice(d, done);
    return absl::OkStatus();
  }

  absl::Status ensureScratch(Device &d, int64_t bytes) {
    if (bytes <= d.scratchBytes)
      return absl::OkStatus();
    if (d.scratch) {
      // Work in flight may still read the old staging memory.
      if (absl::Status idle = waitIdle(d, "staging memory release"); !idle.ok())
        return idle;
      api.free(d.scratch);
      d.scratch = nullptr;
      d.scratchBytes = 0;
    }
    int64_t size = std::max(bytes, int64_t(1) << 20);
    if (cudaError_t e = api.malloc(&d.scratch, static_cast<size_t>(size));
        e != cudaSuccess) {
      d.scratch = nullptr;
      return cudaError(e, "cudaMalloc", d,
                       absl::StrCat(size, " bytes of staging memory"));
    }
    d.scratchBytes = size;
    return absl::OkStatus();
  }

  absl::Status copyAsync(Device &d, void *dst, const void *src, int64_t bytes,
                         cudaMemcpyKind kind, absl::string_view context) {
    if (bytes <= 0 || dst == src)
      return absl::OkStatus();
    if (cudaError_t e = api.memcpyAsync(dst, src, static_cast<size_t>(bytes),
                                        kind, d.stream);
        e != cudaSuccess)
      return cudaError(e, "cudaMemcpyAsync", d, context);
    return absl::OkStatus();
  }

  absl::Status stage(Device &d, std::vector<Op> &ops) {
    bool host = options.buffers == NcclBuffers::Host;
    // Offsets first, then one allocation.
    std::vector<std::pair<int64_t, int64_t>> offsets(ops.size(), {-1, -1});
    int64_t total = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      Op &op = ops[i];
      bool stageSend =
          op.sendBytes > 0 && (host || (op.kind == OpKind::AllToAll &&
                                        rangesOverlap(op.send, op.sendBytes,
                                                      op.recv, op.recvBytes)));
      if (stageSend) {
        offsets[i].first = total;
        total += alignUp(op.sendBytes);
      }
      if (host && op.recvBytes > 0) {
        offsets[i].second = total;
        total += alignUp(op.recvBytes);
      }
    }
    if (total > 0)
      if (absl::Status ok = ensureScratch(d, total); !ok.ok())
        return ok;
    char *scratch = static_cast<char *>(d.scratch);
    for (size_t i = 0; i < ops.size(); ++i) {
      Op &op = ops[i];
      op.deviceSend = op.send;
      op.deviceRecv = op.recv;
      if (offsets[i].second >= 0)
        op.deviceRecv = scratch + offsets[i].second;
      if (offsets[i].first >= 0) {
        op.deviceSend = scratch + offsets[i].first;
        if (absl::Status ok = copyAsync(
                d, scratch + offsets[i].first, op.send, op.sendBytes,
                host ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice,
                absl::StrCat("staging the input of ", describeOp(op)));
            !ok.ok())
          return ok;
      }
      // NCCL reads the send buffer of a broadcast on the root only; the
      // others pass their recv buffer, as NCCL's in-place form does.
      if (op.kind == OpKind::Broadcast && op.rank != op.rootRank)
        op.deviceSend = op.deviceRecv;
    }
    return absl::OkStatus();
  }

  /// The NCCL calls of `ops` in one NCCL group, then what follows them on
  /// the stream (an all-to-all's own chunk, copies back to the host).
  absl::Status issue(Device &d, std::vector<Op> &ops) {
    ncclComm_t firstHandle = ops[0].comm->handles[d.index];
    if (ncclResult_t r = api.groupStart(); r != ncclSuccess)
      return ncclError(r, "ncclGroupStart", d, nullptr, describeOps(ops));
    absl::Status first;
    for (Op &op : ops) {
      ncclComm_t handle = op.comm->handles[d.index];
      cudaStream_t s = d.stream;
      auto check = [&](ncclResult_t r, const char *call) {
        if (first.ok() && r != ncclSuccess && r != ncclInProgress)
          first = ncclError(r, call, d, handle, describeOp(op));
      };
      // Zero-sized calls are skipped by every member alike (sizes must
      // match), after the communicator exists.
      size_t count = static_cast<size_t>(op.size);
      switch (op.kind) {
      case OpKind::Send:
        if (count > 0)
          check(
              api.send(op.deviceSend, count, ncclInt8, op.peerRank, handle, s),
              "ncclSend");
        break;
      case OpKind::Recv:
        if (count > 0)
          check(
              api.recv(op.deviceRecv, count, ncclInt8, op.peerRank, handle, s),
              "ncclRecv");
        break;
      case OpKind::Broadcast:
        if (count > 0)
          check(api.broadcast(op.deviceSend, op.deviceRecv, count, ncclInt8,
                              op.rootRank, handle, s),
                "ncclBroadcast");
        break;
      case OpKind::AllGather:
        if (count > 0)
          check(api.allGather(op.deviceSend, op.deviceRecv, count, ncclInt8,
                              handle, s),
                "ncclAllGather");
        break;
      case OpKind::AllToAll:
        if (count == 0)
          break;
        for (int j = 0; j < static_cast<int>(op.comm->members.size()); ++j) {
          if (j == op.rank)
            continue;
          check(api.send(static_cast<const char *>(op.deviceSend) + j * count,
                         count, ncclInt8, j, handle, s),
                "ncclSend");
          check(api.recv(static_cast<char *>(op.deviceRecv) + j * count, count,
                         ncclInt8, j, handle, s),
                "ncclRecv");
          if (!first.ok())
            break;
        }
        break;
      case OpKind::AllReduce:
        if (count > 0)
          check(api.allReduce(op.deviceSend, op.deviceRecv, count,
                              ncclType(op.type), ncclOp(op.reduceOp), handle,
                              s),
                "ncclAllReduce");
        break;
      case OpKind::ReduceScatter:
        if (count > 0)
          check(api.reduceScatter(op.deviceSend, op.deviceRecv, count,
                                  ncclType(op.type), ncclOp(op.reduceOp),
                                  handle, s),
                "ncclReduceScatter");
        break;
      }
      if (!first.ok())
        break;
    }
    // The group is closed even after a failed call: NCCL's group state is
    // per thread.
    ncclResult_t ended = api.groupEnd();
    if (!first.ok())
      return first;
    if (ended != ncclSuccess && ended != ncclInProgress)
      return ncclError(ended, "ncclGroupEnd", d, firstHandle, describeOps(ops));
    // Non-blocking communicators: the group is launched once none of them
    // is in progress any more.
    std::vector<ncclComm_t> handles;
    for (const Op &op : ops)
      handles.push_back(op.comm->handles[d.index]);
    if (absl::Status ok =
            waitCommunicators(d, handles, Deadline::after(options.timeout),
                              "ncclGroupEnd", describeOps(ops));
        !ok.ok())
      return ok;
    for (Op &op : ops) {
      if (op.kind == OpKind::AllToAll && op.size > 0) {
        int64_t offset = op.rank * op.size;
        if (absl::Status ok =
                copyAsync(d, static_cast<char *>(op.deviceRecv) + offset,
                          static_cast<const char *>(op.deviceSend) + offset,
                          op.size, cudaMemcpyDeviceToDevice,
                          absl::StrCat("the chunk device ", d.id, " keeps in ",
                                       describeOp(op)));
            !ok.ok())
          return ok;
      }
      if (options.buffers == NcclBuffers::Host)
        if (absl::Status ok = copyAsync(
                d, op.recv, op.deviceRecv, op.recvBytes, cudaMemcpyDeviceToHost,
                absl::StrCat("the result of ", describeOp(op)));
            !ok.ok())
          return ok;
    }
    return absl::OkStatus();
  }

  //===--------------------------------------------------------------------===//
  // Waiting
  //===--------------------------------------------------------------------===//

  /// Polls until none of `handles` is in progress. An asynchronous error
  /// of one of them, the abort flag or the deadline end the wait.
  absl::Status waitCommunicators(Device &d,
                                 const std::vector<ncclComm_t> &handles,
                                 Deadline deadline, absl::string_view call,
                                 absl::string_view context) {
    Backoff backoff;
    while (true) {
      bool busy = false;
      for (ncclComm_t handle : handles) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = api.commGetAsyncError(handle, &state);
        if (r != ncclSuccess)
          return ncclError(r, "ncclCommGetAsyncError", d, handle, context);
        if (state == ncclInProgress)
          busy = true;
        else if (state != ncclSuccess)
          return ncclError(state, call, d, handle, context);
      }
      if (!busy)
        return absl::OkStatus();
      if (aborted)
        return abortedStatus();
      if (deadline.expired())
        return absl::DeadlineExceededError(absl::StrCat(
            call, " for ", context, " on ", d.label, " did not finish within ",
            absl::FormatDuration(options.timeout),
            ": does every member make the same calls?"));
      backoff.pause();
    }
  }

  /// Polls until the device's stream is idle; asynchronous NCCL errors of
  /// its communicators, the abort flag and the timeout end the wait.
  absl::Status waitIdle(Device &d, absl::string_view what) {
    Deadline deadline = Deadline::after(options.timeout);
    Backoff backoff;
    while (true) {
      cudaError_t e = api.streamQuery(d.stream);
      if (e == cudaSuccess)
        return absl::OkStatus();
      if (e != cudaErrorNotReady)
        return cudaError(e, "cudaStreamQuery", d, what);
      for (Communicator *comm : d.owned) {
        ncclComm_t handle = comm->handles[d.index];
        ncclResult_t state = ncclSuccess;
        if (ncclResult_t r = api.commGetAsyncError(handle, &state);
            r != ncclSuccess)
          return ncclError(r, "ncclCommGetAsyncError", d, handle, what);
        if (state != ncclSuccess && state != ncclInProgress)
          return ncclError(state, "NCCL (an asynchronous error)", d, handle,
                           absl::StrCat(what, ", reported by ", comm->name));
      }
      if (aborted)
        return abortedStatus();
      if (deadline.expired())
        return absl::DeadlineExceededError(absl::StrCat(
            "timeout after ", absl::FormatDuration(options.timeout), ": ", what,
            " on ", d.label,
            " did not complete: a member may not have made the matching "
            "call, or may have failed"));
      backoff.pause();
    }
  }

  //===--------------------------------------------------------------------===//
  // Communicators
  //===--------------------------------------------------------------------===//

  /// Reads `key`, in short slices so that an abort ends the wait.
  absl::StatusOr<std::string> readId(Device &d, const std::string &key,
                                     Deadline deadline,
                                     absl::string_view what) {
    while (true) {
      absl::Duration slice = std::min(deadline.left(), absl::Milliseconds(250));
      absl::StatusOr<std::string> value = options.store->get(key, slice);
      if (value.ok() || !absl::IsDeadlineExceeded(value.status()))
        return value;
      if (aborted)
        return abortedStatus();
      if (deadline.expired())
        return absl::DeadlineExceededError(absl::StrCat(
            "the unique id of ", what, " (key '", key, "' in ",
            options.store->describe(), ") was not published within ",
            absl::FormatDuration(options.timeout),
            ": its rank 0 never "
            "reached the call (",
            d.label, " waited)"));
    }
  }

  absl::Status publishId(Device &d, const std::string &key,
                         const ncclUniqueId &id, absl::string_view what) {
    absl::Status set = options.store->set(
        key, absl::string_view(id.internal, sizeof(id.internal)));
    if (absl::IsAlreadyExists(set))
      return absl::FailedPreconditionError(
          absl::StrCat("publishing the unique id of ", what, " from ", d.label,
                       ": ", set.message(),
                       " (another backend on the same store? give each its own "
                       "storePrefix)"));
    return set;
  }

  absl::StatusOr<ncclUniqueId> idFromBytes(const std::string &bytes,
                                           const std::string &key) {
    ncclUniqueId id;
    if (bytes.size() != sizeof(id.internal))
      return absl::DataLossError(absl::StrCat(
          "the store holds ", bytes.size(), " bytes under '", key, "', not a ",
          sizeof(id.internal), "-byte NCCL unique id"));
    std::memcpy(id.internal, bytes.data(), bytes.size());
    return id;
  }

  /// Creates `d`'s handle of `comm` (ncclCommInitRankConfig, non-blocking)
  /// with the unique id that the group's rank 0 publishes.
  absl::Status createHandle(Device &d, Communicator &comm) {
    int rank = comm.rankOf.at(d.id);
    int n = static_cast<int>(comm.members.size());
    std::string what = comm.name;
    Deadline deadline = Deadline::after(options.timeout);
    ncclUniqueId id;
    if (rank == 0) {
      if (ncclResult_t r = api.getUniqueId(&id); r != ncclSuccess)
        return ncclError(r, "ncclGetUniqueId", d, nullptr,
                         absl::StrCat("the communicator of ", what));
      if (absl::Status ok = publishId(d, comm.storeKey, id, what); !ok.ok())
        return ok;
    } else {
      absl::StatusOr<std::string> bytes =
          readId(d, comm.storeKey, deadline, what);
      if (!bytes.ok())
        return bytes.status();
      absl::StatusOr<ncclUniqueId> read = idFromBytes(*bytes, comm.storeKey);
      if (!read.ok())
        return read.status();
      id = *read;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t handle = nullptr;
    std::string context = absl::StrCat("the communicator of ", what, " (rank ",
                                       rank, " of ", n, ")");
    ncclResult_t r = api.commInitRankConfig(&handle, n, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      absl::Status error =
          ncclError(r, "ncclCommInitRankConfig", d, handle, context);
      if (handle)
        api.commAbort(handle);
      return error;
    }
    if (absl::Status ok = waitCommunicators(d, {handle}, deadline,
                                            "ncclCommInitRankConfig", context);
        !ok.ok()) {
      api.commAbort(handle);
      return ok;
    }
    comm.handles[d.index] = handle;
    d.owned.push_back(&comm);
    return absl::OkStatus();
  }

  /// The world communicator on every local device, from this thread: the
  /// handles are created in one NCCL group, as NCCL requires of a thread
  /// that initializes several ranks.
  absl::Status createWorld() {
    std::vector<int64_t> members = options.worldDevices;
    absl::StatusOr<Communicator *> comm =
        communicator(OpKind::AllReduce, devices[0]->id, members);
    if (!comm.ok())
      return comm.status();
    world = *comm;
    world->name = absl::StrCat("the world ", formatGroup(members));
    world->storeKey = absl::StrCat(options.storePrefix, "/world");
    Device &first = *devices[0];
    Deadline deadline = Deadline::after(options.timeout);
    ncclUniqueId id;
    int64_t rank0 = members[0];
    if (localIndexOf.contains(rank0)) {
      Device &d = *devices[localIndexOf.at(rank0)];
      if (ncclResult_t r = api.getUniqueId(&id); r != ncclSuccess)
        return ncclError(r, "ncclGetUniqueId", d, nullptr,
                         "the world communicator");
      if (localIds.size() < members.size())
        if (absl::Status ok = publishId(d, world->storeKey, id, world->name);
            !ok.ok())
          return ok;
    } else {
      absl::StatusOr<std::string> bytes =
          readId(first, world->storeKey, deadline, world->name);
      if (!bytes.ok())
        return bytes.status();
      absl::StatusOr<ncclUniqueId> read = idFromBytes(*bytes, world->storeKey);
      if (!read.ok())
        return read.status();
      id = *read;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    int n = static_cast<int>(members.size());
    std::vector<ncclComm_t> handles(devices.size(), nullptr);
    absl::Status error;
    if (ncclResult_t r = api.groupStart(); r != ncclSuccess)
      return ncclError(r, "ncclGroupStart", first, nullptr,
                       "the world communicator");
    for (auto &d : devices) {
      if (absl::Status ok = setDevice(*d); !ok.ok()) {
        error = ok;
        break;
      }
      ncclResult_t r = api.commInitRankConfig(&handles[d->index], n, id,
                                              d->worldRank, &config);
      if (r != ncclSuccess && r != ncclInProgress) {
        error = ncclError(r, "ncclCommInitRankConfig", *d, handles[d->index],
                          absl::StrCat("the communicator of ", world->name));
        break;
      }
    }
    ncclResult_t ended = api.groupEnd();
    if (error.ok() && ended != ncclSuccess && ended != ncclInProgress)
      error = ncclError(ended, "ncclGroupEnd", first, handles[0],
                        absl::StrCat("the communicator of ", world->name));
    if (error.ok()) {
      error = waitCommunicators(
          first, handles, deadline, "ncclCommInitRankConfig",
          absl::StrCat("the communicator of ", world->name, " (",
                       devices.size(), " local ranks of ", n, ")"));
    }
    if (!error.ok()) {
      for (auto &d : devices)
        if (handles[d->index]) {
          api.setDevice(d->cuda);
          api.commAbort(handles[d->index]);
        }
      return error;
    }
    for (auto &d : devices) {
      world->handles[d->index] = handles[d->index];
      d->owned.push_back(world);
    }
    return absl::OkStatus();
  }

  //===--------------------------------------------------------------------===//
  // Shutdown
  //===--------------------------------------------------------------------===//

  void shutdown() {
    // Work still in flight finishes first (stream-ordered calls).
    for (auto &d : devices) {
      if (d->dead || !d->stream)
        continue;
      api.setDevice(d->cuda);
      if (aborted || !waitIdle(*d, "the work in flight at shutdown").ok())
        abortCommunicators(*d);
    }
    // Healthy communicators are finalized together (one group: this thread
    // holds ranks of several), then destroyed.
    std::vector<std::pair<Device *, Communicator *>> live;
    for (auto &d : devices)
      for (Communicator *comm : d->owned)
        live.push_back({d.get(), comm});
    if (!live.empty()) {
      bool finalized = api.groupStart() == ncclSuccess;
      for (auto &[d, comm] : live) {
        api.setDevice(d->cuda);
        ncclResult_t r = api.commFinalize(comm->handles[d->index]);
        finalized &= r == ncclSuccess || r == ncclInProgress;
      }
      ncclResult_t ended = api.groupEnd();
      finalized &= ended == ncclSuccess || ended == ncclInProgress;
      Deadline deadline = Deadline::after(options.timeout);
      Backoff backoff;
      while (finalized) {
        bool busy = false;
        for (auto &[d, comm] : live) {
          ncclResult_t state = ncclSuccess;
          if (api.commGetAsyncError(comm->handles[d->index], &state) !=
                  ncclSuccess ||
              (state != ncclSuccess && state != ncclInProgress))
            finalized = false;
          busy |= state == ncclInProgress;
        }
        if (!busy || deadline.expired()) {
          finalized &= !busy;
          break;
        }
        backoff.pause();
      }
      for (auto &[d, comm] : live) {
        api.setDevice(d->cuda);
        if (finalized)
          api.commDestroy(comm->handles[d->index]);
        else
          api.commAbort(comm->handles[d->index]);
        comm->handles[d->index] = nullptr;
      }
      for (auto &d : devices)
        d->owned.clear();
    }
    for (auto &d : devices) {
      api.setDevice(d->cuda);
      // The streams are idle or aborted by now.
      for (void *pointer : d->pendingFrees)
        api.free(pointer);
      d->pendingFrees.clear();
      if (d->scratch)
        api.free(d->scratch);
      if (d->inputEvent)
        api.eventDestroy(d->inputEvent);
      if (d->doneEvent)
        api.eventDestroy(d->doneEvent);
      if (d->stream)
        api.streamDestroy(d->stream);
      d->scratch = nullptr;
      d->inputEvent = d->doneEvent = nullptr;
      d->stream = nullptr;
    }
  }
};

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

absl::StatusOr<int> cudaDeviceCount(const NcclApi *api) {
  const NcclApi &a = api ? *api : realNcclApi();
  int count = 0;
  cudaError_t e = a.getDeviceCount(&count);
  const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string visibleNote =
      visible ? absl::StrCat(" (CUDA_VISIBLE_DEVICES='", visible, "')") : "";
  if (e != cudaSuccess) {
    a.getLastError();
    int driver = 0;
    std::string driverNote;
    if (a.driverGetVersion(&driver) == cudaSuccess && driver == 0)
      driverNote = "; no NVIDIA driver is loaded";
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device: cudaGetDeviceCount failed: ", a.getErrorName(e), ": ",
        a.getErrorString(e), driverNote, visibleNote));
  }
  if (count <= 0)
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device: cudaGetDeviceCount reports 0 devices", visibleNote));
  return count;
}

namespace {

absl::Status checkOptions(const NcclOptions &options) {
  const std::vector<int64_t> &world = options.worldDevices;
  if (world.empty())
    return absl::InvalidArgumentError("NCCL backend: no world devices");
  absl::flat_hash_map<int64_t, int> seen;
  for (int64_t id : world) {
    if (id < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL backend: device id ", id, " is negative"));
    if (!seen.emplace(id, 0).second)
      return absl::InvalidArgumentError(absl::StrCat("NCCL backend: device id ",
                                                     id, " appears twice in ",
                                                     formatGroup(world)));
  }
  if (world.size() > size_t(1) << 30)
    return absl::InvalidArgumentError("NCCL backend: too many devices");
  if (options.localDevices.empty())
    return absl::InvalidArgumentError(
        "NCCL backend: this process drives no device");
  absl::flat_hash_map<int64_t, int> local;
  absl::flat_hash_map<int, int64_t> cuda;
  for (const NcclLocalDevice &d : options.localDevices) {
    if (!seen.contains(d.id))
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL backend: local device ", d.id,
                       " is not a world device ", formatGroup(world)));
    if (!local.emplace(d.id, 0).second)
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL backend: local device ", d.id, " appears twice"));
    if (d.cudaDevice < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL backend: device ", d.id,
                       " has a negative CUDA device ", d.cudaDevice));
    if (auto [it, inserted] = cuda.emplace(d.cudaDevice, d.id); !inserted)
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL backend: devices ", it->second, " and ", d.id,
                       " are both on CUDA device ", d.cudaDevice,
                       " (NCCL needs one GPU per rank)"));
  }
  if (local.size() < world.size() && !options.store)
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL backend: ", world.size() - local.size(),
        " devices are driven by other processes, so a store is needed to "
        "exchange NCCL unique ids (NcclOptions::store)"));
  if (options.timeout <= absl::ZeroDuration() ||
      options.timeout == absl::InfiniteDuration())
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL backend: the timeout must be positive and finite, "
                     "got ",
                     absl::FormatDuration(options.timeout)));
  if (options.buffers == NcclBuffers::Host &&
      options.completion == NcclCompletion::StreamOrdered)
    return absl::InvalidArgumentError(
        "NCCL backend: host buffers need blocking completion (the host "
        "reads the results when a call returns)");
  if (options.storePrefix.empty())
    return absl::InvalidArgumentError("NCCL backend: empty store prefix");
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::unique_ptr<NcclBackend>>
NcclBackend::create(NcclOptions options) {
  if (absl::Status ok = checkOptions(options); !ok.ok())
    return ok;
  const NcclApi &api = options.api ? *options.api : realNcclApi();
  absl::StatusOr<int> count = cudaDeviceCount(&api);
  if (!count.ok())
    return count.status();
  for (const NcclLocalDevice &d : options.localDevices)
    if (d.cudaDevice >= *count)
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL backend: device ", d.id, " is on CUDA device ",
                       d.cudaDevice, ", but this process sees ", *count,
                       " CUDA device", *count == 1 ? "" : "s"));
  if (!options.store)
    options.store = std::make_shared<MemoryStore>();

  auto state = std::make_unique<NcclState>(api, std::move(options));
  NcclState &s = *state;
  for (size_t r = 0; r < s.options.worldDevices.size(); ++r)
    s.worldRankOf[s.options.worldDevices[r]] = static_cast<int>(r);
  for (const NcclLocalDevice &local : s.options.localDevices) {
    auto d = std::make_unique<Device>();
    d->id = local.id;
    d->cuda = local.cudaDevice;
    d->index = static_cast<int>(s.devices.size());
    d->worldRank = s.worldRankOf.at(local.id);
    d->label = absl::StrCat("device ", local.id, " (CUDA device ",
                            local.cudaDevice, ")");
    s.localIndexOf[local.id] = d->index;
    s.localIds.push_back(local.id);
    s.devices.push_back(std::move(d));
  }
  for (auto &d : s.devices) {
    if (absl::Status ok = s.setDevice(*d); !ok.ok())
      return ok;
    if (cudaError_t e =
            api.streamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      d->stream = nullptr;
      return s.cudaError(e, "cudaStreamCreateWithFlags", *d);
    }
    for (cudaEvent_t *event : {&d->inputEvent, &d->doneEvent})
      if (cudaError_t e =
              api.eventCreateWithFlags(event, cudaEventDisableTiming);
          e != cudaSuccess) {
        *event = nullptr;
        return s.cudaError(e, "cudaEventCreateWithFlags", *d);
      }
  }
  if (absl::Status ok = s.createWorld(); !ok.ok())
    return ok;
  return std::unique_ptr<NcclBackend>(new NcclBackend(std::move(state)));
}

absl::StatusOr<std::unique_ptr<NcclBackend>>
NcclBackend::createSingleProcess(std::vector<int64_t> deviceIds,
                                 NcclOptions options) {
  absl::StatusOr<int> count = cudaDeviceCount(options.api);
  if (!count.ok())
    return count.status();
  if (deviceIds.empty())
    for (int i = 0; i < *count; ++i)
      deviceIds.push_back(i);
  if (static_cast<int64_t>(deviceIds.size()) > *count)
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL backend: ", deviceIds.size(), " devices ", formatGroup(deviceIds),
        " need as many GPUs, but this process sees ", *count));
  options.worldDevices = deviceIds;
  options.localDevices.clear();
  for (size_t i = 0; i < deviceIds.size(); ++i)
    options.localDevices.push_back({deviceIds[i], static_cast<int>(i)});
  return create(std::move(options));
}

absl::StatusOr<std::unique_ptr<NcclBackend>>
NcclBackend::createFromLaunchEnvironment(const LaunchEnvironment &environment,
                                         NcclOptions options) {
  if (environment.worldSize < 1 || environment.rank < 0 ||
      environment.rank >= environment.worldSize || environment.localRank < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL backend: invalid launch environment: RANK=", environment.rank,
        " WORLD_SIZE=", environment.worldSize,
        " LOCAL_RANK=", environment.localRank));
  options.worldDevices.clear();
  for (int64_t r = 0; r < environment.worldSize; ++r)
    options.worldDevices.push_back(r);
  options.localDevices = {
      {environment.rank, static_cast<int>(environment.localRank)}};
  if (!options.store && environment.worldSize > 1) {
    // Without a GPU there is no point in waiting for the other ranks.
    absl::StatusOr<int> count = cudaDeviceCount(options.api);
    if (!count.ok())
      return count.status();
    absl::StatusOr<std::unique_ptr<Store>> store =
        createStoreFromEnvironment(environment, options.timeout);
    if (!store.ok())
      return store.status();
    options.store = std::shared_ptr<Store>(std::move(*store));
  }
  return create(std::move(options));
}

//===----------------------------------------------------------------------===//
// NcclBackend
//===----------------------------------------------------------------------===//

NcclBackend::NcclBackend(std::unique_ptr<NcclState> state)
    : state(std::move(state)) {}

NcclBackend::~NcclBackend() = default;

absl::Span<const int64_t> NcclBackend::devices() const {
  return state->localIds;
}

absl::Span<const int64_t> NcclBackend::worldDevices() const {
  return state->options.worldDevices;
}

int NcclBackend::cudaDevice(int64_t device) const {
  auto it = state->localIndexOf.find(device);
  return it == state->localIndexOf.end() ? -1
                                         : state->devices[it->second]->cuda;
}

NcclBuffers NcclBackend::buffers() const { return state->options.buffers; }

NcclCompletion NcclBackend::completion() const {
  return state->options.completion;
}

int64_t NcclBackend::numCommunicators() const {
  std::lock_guard<std::mutex> lock(state->commMu);
  return static_cast<int64_t>(state->comms.size());
}

absl::Status NcclBackend::groupStart(int64_t device) {
  return state->groupStart(device);
}

absl::Status NcclBackend::groupEnd(int64_t device) {
  return state->groupEnd(device);
}

absl::Status NcclBackend::send(int64_t device, int64_t peer, const void *buf,
                               int64_t bytes) {
  return state->call(device, [&](Device &d) -> absl::StatusOr<Op> {
    if (absl::Status known = state->checkMember(peer, "send: peer");
        !known.ok())
      return known;
    Op op;
    op.kind = OpKind::Send;
    op.comm = state->world;
    op.rank = d.worldRank;
    op.peer = peer;
    op.peerRank = state->worldRankOf.at(peer);
    op.send = buf;
    op.size = bytes;
    return op;
  });
}

absl::Status NcclBackend::recv(int64_t device, int64_t peer, void *buf,
                               int64_t bytes) {
  return state->call(device, [&](Device &d) -> absl::StatusOr<Op> {
    if (absl::Status known = state->checkMember(peer, "recv: peer");
        !known.ok())
      return known;
    Op op;
    op.kind = OpKind::Recv;
    op.comm = state->world;
    op.rank = d.worldRank;
    op.peer = peer;
    op.peerRank = state->worldRankOf.at(peer);
    op.recv = buf;
    op.size = bytes;
    return op;
  });
}

absl::Status NcclBackend::broadcast(int64_t device,
                                    absl::Span<const int64_t> members,
                                    int64_t root, const void *send, void *recv,
                                    int64_t bytes) {
  return state->call(device, [&](Device &d) -> absl::StatusOr<Op> {
    absl::StatusOr<Op> op =
        state->makeCollective(d, OpKind::Broadcast, members, send, recv, bytes);
    if (!op.ok())
      return op;
    auto it = op->comm->rankOf.find(root);
    if (it == op->comm->rankOf.end())
      return absl::InvalidArgumentError(absl::StrCat("broadcast on ",
                                                     op->comm->name, ": root ",
                                                     root, " is not a member"));
    op->root = root;
    op->rootRank = it->second;
    return op;
  });
}

absl::Status NcclBackend::allGather(int64_t device,
                                    absl::Span<const int64_t> members,
                                    const void *send, void *recv,
                                    int64_t bytesPerRank) {
  return state->call(device, [&](Device &d) {
    return state->makeCollective(d, OpKind::AllGather, members, send, recv,
                                 bytesPerRank);
  });
}

absl::Status NcclBackend::allToAll(int64_t device,
                                   absl::Span<const int64_t> members,
                                   const void *send, void *recv,
                                   int64_t bytesPerPeer) {
  return state->call(device, [&](Device &d) {
    return state->makeCollective(d, OpKind::AllToAll, members, send, recv,
                                 bytesPerPeer);
  });
}

namespace {

absl::Status checkReduction(DataType type, ReduceOp op) {
  // The enums may carry any value cast from a C caller's code.
  if (absl::StatusOr<DataType> known =
          dataTypeFromCode(static_cast<int32_t>(type));
      !known.ok())
    return known.status();
  if (absl::StatusOr<ReduceOp> known =
          reduceOpFromCode(static_cast<int32_t>(op));
      !known.ok())
    return known.status();
  return absl::OkStatus();
}

} // namespace

absl::Status NcclBackend::allReduce(int64_t device,
                                    absl::Span<const int64_t> members,
                                    const void *send, void *recv, int64_t count,
                                    DataType type, ReduceOp op) {
  return state->call(device, [&](Device &d) -> absl::StatusOr<Op> {
    if (absl::Status ok = checkReduction(type, op); !ok.ok())
      return ok;
    absl::StatusOr<Op> built =
        state->makeCollective(d, OpKind::AllReduce, members, send, recv, count);
    if (built.ok()) {
      built->type = type;
      built->reduceOp = op;
    }
    return built;
  });
}

absl::Status NcclBackend::reduceScatter(int64_t device,
                                        absl::Span<const int64_t> members,
                                        const void *send, void *recv,
                                        int64_t recvCount, DataType type,
                                        ReduceOp op) {
  return state->call(device, [&](Device &d) -> absl::StatusOr<Op> {
    if (absl::Status ok = checkReduction(type, op); !ok.ok())
      return ok;
    absl::StatusOr<Op> built = state->makeCollective(
        d, OpKind::ReduceScatter, members, send, recv, recvCount);
    if (built.ok()) {
      built->type = type;
      built->reduceOp = op;
    }
    return built;
  });
}

absl::Status NcclBackend::firstError() const {
  std::lock_guard<std::mutex> lock(state->errorMu);
  return state->firstError;
}

void NcclBackend::abort(const absl::Status &error) {
  if (!error.ok())
    state->fail(error).IgnoreError();
}

//===----------------------------------------------------------------------===//
// Streams and memory
//===----------------------------------------------------------------------===//

absl::StatusOr<void *>
NcclBackend::communicatorHandle(int64_t device,
                                absl::Span<const int64_t> members) {
  absl::StatusOr<Device *> entered = state->enter(device);
  if (!entered.ok())
    return entered.status();
  Device &d = **entered;
  NcclState::CallGuard guard(d);
  absl::StatusOr<Communicator *> comm =
      state->communicator(OpKind::Broadcast, device, members);
  if (!comm.ok())
    return state->fail(comm.status());
  if (!(*comm)->handles[d.index]) {
    // Collective over the members: each creates its handle on first use,
    // as a grouped call would.
    if (absl::Status ok = state->setDevice(d); !ok.ok())
      return state->failDevice(d, ok);
    if (absl::Status made = state->createHandle(d, **comm); !made.ok())
      return state->failDevice(d, made);
  }
  return static_cast<void *>((*comm)->handles[d.index]);
}

absl::Status NcclBackend::finishGeneratedCall(int64_t device, void *comm,
                                              int result,
                                              absl::string_view call) {
  if (result == ncclSuccess)
    return absl::OkStatus();
  absl::StatusOr<Device *> entered = state->enter(device);
  if (!entered.ok())
    return entered.status();
  Device &d = **entered;
  NcclState::CallGuard guard(d);
  auto handle = static_cast<ncclComm_t>(comm);
  if (result != ncclInProgress)
    return state->failDevice(
        d, state->ncclError(static_cast<ncclResult_t>(result), call, d, handle,
                            "generated code"));
  if (absl::Status ok = state->setDevice(d); !ok.ok())
    return state->failDevice(d, ok);
  absl::Status done = state->waitCommunicators(
      d, {handle}, Deadline::after(state->options.timeout), call,
      "generated code");
  return done.ok() ? done : state->failDevice(d, done);
}

absl::StatusOr<CUstream_st *> NcclBackend::stream(int64_t device) {
  absl::StatusOr<Device *> d = state->find(device);
  if (!d.ok())
    return d.status();
  return (*d)->stream;
}

absl::Status NcclBackend::waitForStream(int64_t device, CUstream_st *producer) {
  absl::StatusOr<Device *> entered = state->enter(device);
  if (!entered.ok())
    return entered.status();
  Device &d = **entered;
  NcclState::CallGuard guard(d);
  if (absl::Status ok = state->setDevice(d); !ok.ok())
    return state->fail(ok);
  if (cudaError_t e = state->api.eventRecord(d.inputEvent, producer);
      e != cudaSuccess)
    return state->fail(
        state->cudaError(e, "cudaEventRecord", d, "the producer stream"));
  if (cudaError_t e = state->api.streamWaitEvent(d.stream, d.inputEvent, 0);
      e != cudaSuccess)
    return state->fail(state->cudaError(e, "cudaStreamWaitEvent", d,
                                        "the communication stream"));
  return absl::OkStatus();
}

absl::Status NcclBackend::streamWaitForCommunication(int64_t device,
                                                     CUstream_st *consumer) {
  absl::StatusOr<Device *> entered = state->enter(device);
  if (!entered.ok())
    return entered.status();
  Device &d = **entered;
  NcclState::CallGuard guard(d);
  if (absl::Status ok = state->setDevice(d); !ok.ok())
    return state->fail(ok);
  if (cudaError_t e = state->api.eventRecord(d.doneEvent, d.stream);
      e != cudaSuccess)
    return state->fail(
        state->cudaError(e, "cudaEventRecord", d, "the communication stream"));
  if (cudaError_t e = state->api.streamWaitEvent(consumer, d.doneEvent, 0);
      e != cudaSuccess)
    return state->fail(
        state->cudaError(e, "cudaStreamWaitEvent", d, "the consumer stream"));
  return absl::OkStatus();
}

absl::Status NcclBackend::synchronize(int64_t device) {
  absl::StatusOr<Device *> entered = state->enter(device);
  if (!entered.ok())
    return entered.status();
  Device &d = **entered;
  NcclState::CallGuard guard(d);
  if (absl::Status ok = state->setDevice(d); !ok.ok())
    return state->failDevice(d, ok);
  if (absl::Status ok = state->waitIdle(d, "synchronize"); !ok.ok())
    return state->failDevice(d, ok);
  std::vector<void *> frees;
  {
    std::lock_guard<std::mutex> lock(d.pendingMu);
    frees.swap(d.pendingFrees);
  }
  for (void *pointer : frees)
    if (cudaError_t e = state->api.free(pointer); e != cudaSuccess)
      return state->failDevice(d, state->cudaError(e, "cudaFree", d));
  return absl::OkStatus();
}

absl::Status NcclBackend::deallocateAfterStream(int64_t device, void *pointer) {
  absl::StatusOr<Device *> d = state->find(device);
  if (!d.ok())
    return d.status();
  if (!pointer)
    return absl::OkStatus();
  std::lock_guard<std::mutex> lock((*d)->pendingMu);
  (*d)->pendingFrees.push_back(pointer);
  return absl::OkStatus();
}

absl::StatusOr<void *> NcclBackend::allocate(int64_t device, int64_t bytes) {
  absl::StatusOr<Device *> d = state->find(device);
  if (!d.ok())
    return d.status();
  if (bytes <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("allocate on device ", device, ": ", bytes, " bytes"));
  if (absl::Status ok = state->setDevice(**d); !ok.ok())
    return ok;
  void *pointer = nullptr;
  if (cudaError_t e = state->api.malloc(&pointer, static_cast<size_t>(bytes));
      e != cudaSuccess)
    return state->cudaError(e, "cudaMalloc", **d,
                            absl::StrCat(bytes, " bytes"));
  return pointer;
}

absl::Status NcclBackend::deallocate(int64_t device, void *pointer) {
  absl::StatusOr<Device *> d = state->find(device);
  if (!d.ok())
    return d.status();
  if (!pointer)
    return absl::OkStatus();
  if (absl::Status ok = state->setDevice(**d); !ok.ok())
    return ok;
  if (cudaError_t e = state->api.free(pointer); e != cudaSuccess)
    return state->cudaError(e, "cudaFree", **d);
  return absl::OkStatus();
}

namespace {

/// A copy on the device's stream, then a wait for it (or, for
/// device-to-device copies with stream-ordered completion, not).
absl::Status streamCopy(NcclState &s, int64_t device, void *dst,
                        const void *src, int64_t bytes, cudaMemcpyKind kind,
                        const char *what) {
  absl::StatusOr<Device *> entered = s.enter(device);
  if (!entered.ok())
    return entered.status();
  Device &d = **entered;
  NcclState::CallGuard guard(d);
  if (bytes < 0 || (bytes > 0 && (!dst || !src)))
    return s.fail(absl::InvalidArgumentError(
        absl::StrCat(what, " on device ", device, ": invalid buffers for ",
                     bytes, " bytes")));
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status ok = s.setDevice(d); !ok.ok())
    return s.failDevice(d, ok);
  if (absl::Status ok = s.copyAsync(d, dst, src, bytes, kind, what); !ok.ok())
    return s.failDevice(d, ok);
  if (kind == cudaMemcpyDeviceToDevice &&
      s.options.completion == NcclCompletion::StreamOrdered)
    return absl::OkStatus();
  if (absl::Status ok = s.waitIdle(d, what); !ok.ok())
    return s.failDevice(d, ok);
  return absl::OkStatus();
}

} // namespace

absl::Status NcclBackend::copyToDevice(int64_t device, void *deviceDst,
                                       const void *hostSrc, int64_t bytes) {
  return streamCopy(*state, device, deviceDst, hostSrc, bytes,
                    cudaMemcpyHostToDevice, "copy to the device");
}

absl::Status NcclBackend::copyToHost(int64_t device, void *hostDst,
                                     const void *deviceSrc, int64_t bytes) {
  return streamCopy(*state, device, hostDst, deviceSrc, bytes,
                    cudaMemcpyDeviceToHost, "copy to the host");
}

absl::Status NcclBackend::copy(int64_t device, void *dst, const void *src,
                               int64_t bytes) {
  if (state->options.buffers == NcclBuffers::Device) {
    if (dst != src && rangesOverlap(dst, bytes, src, bytes))
      return state->fail(absl::InvalidArgumentError(absl::StrCat(
          "copy on device ", device,
          ": overlapping device ranges (only equal ones are allowed)")));
    return streamCopy(*state, device, dst, src, bytes, cudaMemcpyDeviceToDevice,
                      "copy");
  }
  absl::StatusOr<Device *> entered = state->enter(device);
  if (!entered.ok())
    return entered.status();
  NcclState::CallGuard guard(**entered);
  if (bytes < 0 || (bytes > 0 && (!dst || !src)))
    return state->fail(absl::InvalidArgumentError(absl::StrCat(
        "copy on device ", device, ": invalid buffers for ", bytes, " bytes")));
  if (bytes > 0)
    std::memmove(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

} // namespace polymesh::runtime
