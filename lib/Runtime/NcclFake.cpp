//===- NcclFake.cpp - A simulated CUDA runtime and NCCL -------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// One mutex guards the whole simulation. Handles (streams, events,
// communicators) are never freed before reset(), so a stale handle is caught
// by a lookup instead of a use after free.
//
//===----------------------------------------------------------------------===//

#include "NcclFake.h"

#include "polymesh/Runtime/Runtime.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

// Opaque handle types of the libraries, defined here for the simulation.
struct CUstream_st {
  int device = 0;
  bool live = true;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  struct Work;
  std::deque<std::unique_ptr<Work>> queue;
};

struct CUevent_st {
  bool live = true;
  CUstream_st *stream = nullptr;
  uint64_t target = 0;
};

namespace {

struct FakeOp;

struct Clique;

} // namespace

struct ncclComm {
  Clique *clique = nullptr;
  int rank = 0;
  int device = 0;
  bool blocking = true;
  bool live = true;
  bool finalizing = false;
  ncclResult_t asyncError = ncclSuccess;
  std::string lastError;
};

namespace {

enum class Kind { Send, Recv, Broadcast, AllGather, AllReduce, ReduceScatter };

struct FakeOp {
  Kind kind = Kind::Send;
  ncclComm *comm = nullptr;
  CUstream_st *stream = nullptr;
  const void *send = nullptr;
  void *recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclInt8;
  ncclRedOp_t op = ncclSum;
  /// Peer rank (send/recv) or root rank (broadcast).
  int peer = -1;
  bool done = false;
  /// A call made in another process (comm is null): its input, and room
  /// for the output that this process's simulation of it writes.
  std::vector<char> owned;
};

struct Collective {
  std::vector<std::shared_ptr<FakeOp>> ranks;
  int joined = 0;
  std::shared_ptr<FakeOp> first;
};

struct Clique {
  std::string id;
  int nranks = 0;
  std::vector<ncclComm *> ranks;
  /// Per rank: the process it joined from (connectSimulatedGpus), or -1.
  std::vector<int> processOf;
  int joined = 0;
  std::vector<uint64_t> nextSeq;
  std::map<uint64_t, Collective> pending;
  /// Unmatched point-to-point calls by (sender rank, receiver rank).
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<FakeOp>>> sends,
      recvs;
  bool ready() const { return joined == nranks; }
};

} // namespace

struct CUstream_st::Work {
  enum { Copy, Wait, Calls } kind = Copy;
  void *dst = nullptr;
  const void *src = nullptr;
  size_t bytes = 0;
  CUstream_st *waitStream = nullptr;
  uint64_t waitTarget = 0;
  std::vector<std::shared_ptr<FakeOp>> ops;
  bool posted = false;
};

namespace polymesh::runtime {

namespace {

struct Allocation {
  size_t bytes = 0;
  int device = 0;
};

struct Injection {
  std::string call;
  int device = -1;
  bool nccl = true;
  ncclResult_t result = ncclSuccess;
  cudaError_t error = cudaSuccess;
  std::string lastError;
};

struct Engine {
  std::mutex mu;
  std::condition_variable cv;
  int numDevices = 0;
  std::map<uintptr_t, Allocation> allocations;
  std::vector<std::unique_ptr<CUstream_st>> streams;
  std::vector<std::unique_ptr<CUevent_st>> events;
  std::vector<std::unique_ptr<ncclComm>> comms;
  std::map<std::string, std::unique_ptr<Clique>> cliques;
  std::vector<Injection> injections;
  std::string lastError;
  uint64_t nextId = 1;
  FakeNccl::Counts counts;
  /// The other processes of the job, if any (connectSimulatedGpus).
  std::shared_ptr<SimulatedGpuTransport> transport;
  /// While other processes are connected, streams progress on a thread of
  /// their own, as GPUs and NCCL do without the host: otherwise a process
  /// whose threads all wait elsewhere (on a store, for a unique id) would
  /// never take in or post what its streams hold, and a peer process whose
  /// host waits for that work (a kernel launch after a collective) would
  /// never publish what the first waits for.
  std::thread progressThread;
  std::condition_variable stopCv;
  bool stopProgress = false;
};

Engine &engine() {
  static Engine *e = new Engine;
  return *e;
}

thread_local int currentDevice = 0;
thread_local int groupDepth = 0;
thread_local std::vector<std::shared_ptr<FakeOp>> groupOps;
thread_local bool groupNonBlocking = false;

size_t typeSize(ncclDataType_t type) {
  switch (type) {
  case ncclInt8:
  case ncclUint8:
  case ncclFloat8e4m3:
  case ncclFloat8e5m2:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64:
    return 8;
  default:
    return 0;
  }
}

bool runtimeType(ncclDataType_t type, DataType *out) {
  switch (type) {
  case ncclInt8:
    *out = DataType::I8;
    return true;
  case ncclUint8:
    *out = DataType::U8;
    return true;
  case ncclInt32:
    *out = DataType::I32;
    return true;
  case ncclInt64:
    *out = DataType::I64;
    return true;
  case ncclFloat16:
    *out = DataType::F16;
    return true;
  case ncclBfloat16:
    *out = DataType::BF16;
    return true;
  case ncclFloat32:
    *out = DataType::F32;
    return true;
  case ncclFloat64:
    *out = DataType::F64;
    return true;
  default:
    return false;
  }
}

bool runtimeOp(ncclRedOp_t op, ReduceOp *out) {
  switch (op) {
  case ncclSum:
    *out = ReduceOp::Sum;
    return true;
  case ncclProd:
    *out = ReduceOp::Prod;
    return true;
  case ncclMax:
    *out = ReduceOp::Max;
    return true;
  case ncclMin:
    *out = ReduceOp::Min;
    return true;
  default:
    return false;
  }
}

/// The allocation holding [p, p + bytes), or null.
const Allocation *findAllocation(Engine &e, const void *p, size_t bytes,
                                 uintptr_t *base = nullptr) {
  auto address = reinterpret_cast<uintptr_t>(p);
  auto it = e.allocations.upper_bound(address);
  if (it == e.allocations.begin())
    return nullptr;
  --it;
  if (address < it->first || address + bytes > it->first + it->second.bytes)
    return nullptr;
  if (base)
    *base = it->first;
  return &it->second;
}

bool liveStream(Engine &e, CUstream_st *s) {
  for (auto &stream : e.streams)
    if (stream.get() == s)
      return stream->live;
  return false;
}

bool liveEvent(Engine &e, CUevent_st *ev) {
  for (auto &event : e.events)
    if (event.get() == ev)
      return event->live;
  return false;
}

bool liveComm(Engine &e, ncclComm *c) {
  for (auto &comm : e.comms)
    if (comm.get() == c)
      return comm->live;
  return false;
}

/// An injected failure for `call` on the current device, consumed.
const Injection *takeInjection(Engine &e, const char *call, bool nccl,
                               Injection *out) {
  for (auto it = e.injections.begin(); it != e.injections.end(); ++it)
    if (it->nccl == nccl && it->call == call &&
        (it->device < 0 || it->device == currentDevice)) {
      *out = *it;
      e.injections.erase(it);
      return out;
    }
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Matching and execution
//===----------------------------------------------------------------------===//

void failBoth(ncclComm *a, ncclComm *b, const std::string &message) {
  for (ncclComm *c : {a, b})
    if (c && c->asyncError == ncclSuccess) {
      c->asyncError = ncclInvalidUsage;
      c->lastError = message;
    }
}

/// Mismatched calls fail both communicators and never complete: a real
/// kernel would hang or corrupt.
void matchPointToPoint(FakeOp &send, FakeOp &recv) {
  if (send.count * typeSize(send.type) != recv.count * typeSize(recv.type)) {
    failBoth(send.comm, recv.comm,
             "simulated NCCL: mismatched send/recv sizes");
    return;
  }
  if (send.count > 0)
    std::memmove(recv.recv, send.send, send.count * typeSize(send.type));
  send.done = recv.done = true;
}

void execute(Clique &clique, Collective &coll) {
  const FakeOp &first = *coll.first;
  size_t n = static_cast<size_t>(clique.nranks);
  size_t elementBytes = typeSize(first.type);
  size_t bytes = first.count * elementBytes;
  auto &ranks = coll.ranks;
  switch (first.kind) {
  case Kind::Broadcast: {
    const FakeOp &root = *ranks[first.peer];
    std::vector<char> staged(static_cast<const char *>(root.send),
                             static_cast<const char *>(root.send) + bytes);
    for (auto &op : ranks)
      if (bytes)
        std::memcpy(op->recv, staged.data(), bytes);
    break;
  }
  case Kind::AllGather: {
    std::vector<char> staged(n * bytes);
    for (size_t r = 0; r < n; ++r)
      if (bytes)
        std::memcpy(staged.data() + r * bytes, ranks[r]->send, bytes);
    for (auto &op : ranks)
      if (bytes)
        std::memcpy(op->recv, staged.data(), staged.size());
    break;
  }
  case Kind::AllReduce:
  case Kind::ReduceScatter: {
    DataType type;
    ReduceOp op;
    if (!runtimeType(first.type, &type) || !runtimeOp(first.op, &op)) {
      for (auto &member : ranks)
        failBoth(member->comm, nullptr,
                 "simulated NCCL: unsupported reduction type or operator");
      break;
    }
    size_t total =
        first.kind == Kind::AllReduce ? first.count : first.count * n;
    std::vector<std::vector<char>> inputs(n);
    std::vector<const void *> pointers(n);
    for (size_t r = 0; r < n; ++r) {
      const char *src = static_cast<const char *>(ranks[r]->send);
      inputs[r].assign(src, src + total * elementBytes);
      pointers[r] = inputs[r].data();
    }
    std::vector<char> result(total * elementBytes);
    if (total)
      reduceArrays(type, op, pointers.data(), static_cast<int64_t>(n),
                   static_cast<int64_t>(total), result.data());
    for (size_t r = 0; r < n; ++r)
      if (bytes)
        std::memcpy(ranks[r]->recv,
                    result.data() +
                        (first.kind == Kind::AllReduce ? 0 : r * bytes),
                    bytes);
    break;
  }
  default:
    break;
  }
}

/// Places a call of `rank` (made here, or in another process) in its
/// clique: matches a point-to-point call with its partner, or completes a
/// collective whose last member it is.
void place(Clique &clique, int rank, const std::shared_ptr<FakeOp> &op) {
  ncclComm *comm = op->comm;
  if (op->kind == Kind::Send || op->kind == Kind::Recv) {
    bool isSend = op->kind == Kind::Send;
    std::pair<int, int> key = isSend ? std::make_pair(rank, op->peer)
                                     : std::make_pair(op->peer, rank);
    auto &other = isSend ? clique.recvs[key] : clique.sends[key];
    if (other.empty()) {
      (isSend ? clique.sends[key] : clique.recvs[key]).push_back(op);
      return;
    }
    std::shared_ptr<FakeOp> match = other.front();
    other.pop_front();
    if (isSend)
      matchPointToPoint(*op, *match);
    else
      matchPointToPoint(*match, *op);
    return;
  }
  uint64_t seq = clique.nextSeq[rank]++;
  Collective &coll = clique.pending[seq];
  if (coll.ranks.empty()) {
    coll.ranks.resize(clique.nranks);
    coll.first = op;
  }
  const FakeOp &first = *coll.first;
  if (first.kind != op->kind || first.count != op->count ||
      first.type != op->type || first.op != op->op || first.peer != op->peer) {
    failBoth(comm, first.comm,
             "simulated NCCL: members made different collective calls "
             "(kind, count, type, operator or root)");
    return;
  }
  coll.ranks[rank] = op;
  if (++coll.joined < clique.nranks)
    return;
  execute(clique, coll);
  for (auto &member : coll.ranks)
    member->done = true;
  clique.pending.erase(seq);
}

//===----------------------------------------------------------------------===//
// Several processes (connectSimulatedGpus)
//===----------------------------------------------------------------------===//

/// What one process tells the others: a rank joined a communicator, a rank
/// sent to a rank of the receiver's process, a rank made a collective call.
enum class Message : uint8_t { Join, Send, Collective };

/// The fields of a message, in order, after its kind and the clique id.
struct Wire {
  int32_t nranks = 0, rank = 0, process = 0, peer = -1;
  int32_t kind = 0, type = 0, op = 0;
  uint64_t count = 0;
};

constexpr size_t kIdBytes = sizeof(ncclUniqueId::internal);

std::string encode(Message kind, const std::string &id, const Wire &wire,
                   const void *payload, size_t bytes) {
  std::string message(1, static_cast<char>(kind));
  message += id;
  message.append(reinterpret_cast<const char *>(&wire), sizeof wire);
  if (bytes)
    message.append(static_cast<const char *>(payload), bytes);
  return message;
}

/// The clique of `id`, created on first sight (a join or call from another
/// process may come before any rank of this process joins).
Clique &cliqueOf(Engine &e, const std::string &id, int nranks) {
  std::unique_ptr<Clique> &slot = e.cliques[id];
  if (!slot) {
    slot = std::make_unique<Clique>();
    slot->id = id;
    slot->nranks = nranks;
    slot->ranks.assign(nranks, nullptr);
    slot->processOf.assign(nranks, -1);
    slot->nextSeq.assign(nranks, 0);
  }
  return *slot;
}

bool isRemote(const Engine &e, const Clique &clique, int rank) {
  return e.transport && clique.processOf[rank] >= 0 &&
         clique.processOf[rank] != e.transport->process();
}

/// Sends `message` to every process (other than this one) that holds a
/// rank of `clique`, or to every other process when `clique` is null.
void sendToOthers(Engine &e, const Clique *clique, const std::string &message,
                  ncclComm *comm) {
  std::set<int> processes;
  for (int p = 0; p < e.transport->numProcesses(); ++p)
    if (p != e.transport->process() &&
        (!clique ||
         std::count(clique->processOf.begin(), clique->processOf.end(), p) > 0))
      processes.insert(p);
  for (int p : processes)
    if (absl::Status status = e.transport->send(p, message); !status.ok())
      failBoth(comm, nullptr,
               "simulated NCCL: to process " + std::to_string(p) + ": " +
                   std::string(status.message()));
}

/// The bytes of a collective's input: what the other processes need to
/// compute it.
size_t inputBytes(const FakeOp &op, int rank, int nranks) {
  size_t bytes = op.count * typeSize(op.type);
  switch (op.kind) {
  case Kind::Broadcast:
    return rank == op.peer ? bytes : 0;
  case Kind::ReduceScatter:
    return bytes * static_cast<size_t>(nranks);
  default:
    return bytes;
  }
}

/// Places a local call; a send to another process's rank, or a collective
/// with members elsewhere, is also sent there.
void post(Engine &e, const std::shared_ptr<FakeOp> &op) {
  ncclComm *comm = op->comm;
  if (!comm->live) {
    op->done = true;
    return;
  }
  Clique &clique = *comm->clique;
  Wire wire;
  wire.rank = comm->rank;
  wire.nranks = clique.nranks;
  wire.peer = op->peer;
  wire.kind = static_cast<int32_t>(op->kind);
  wire.type = op->type;
  wire.op = op->op;
  wire.count = op->count;
  if (op->kind == Kind::Send && isRemote(e, clique, op->peer)) {
    std::string message = encode(Message::Send, clique.id, wire, op->send,
                                 op->count * typeSize(op->type));
    if (absl::Status status =
            e.transport->send(clique.processOf[op->peer], std::move(message));
        !status.ok())
      failBoth(comm, nullptr,
               "simulated NCCL: " + std::string(status.message()));
    op->done = true;
    return;
  }
  if (op->kind != Kind::Send && op->kind != Kind::Recv && e.transport &&
      std::any_of(clique.processOf.begin(), clique.processOf.end(),
                  [&](int p) { return p != e.transport->process(); }))
    sendToOthers(e, &clique,
                 encode(Message::Collective, clique.id, wire, op->send,
                        inputBytes(*op, comm->rank, clique.nranks)),
                 comm);
  place(clique, comm->rank, op);
}

/// Takes one message of another process into the simulation.
void receive(Engine &e, const std::string &message) {
  if (message.size() < 1 + kIdBytes + sizeof(Wire))
    return;
  auto kind = static_cast<Message>(message[0]);
  std::string id = message.substr(1, kIdBytes);
  Wire wire;
  std::memcpy(&wire, message.data() + 1 + kIdBytes, sizeof wire);
  const char *payload = message.data() + 1 + kIdBytes + sizeof wire;
  size_t payloadBytes = message.size() - 1 - kIdBytes - sizeof wire;
  if (wire.nranks < 1 || wire.rank < 0 || wire.rank >= wire.nranks)
    return;
  Clique &clique = cliqueOf(e, id, wire.nranks);
  if (clique.nranks != wire.nranks)
    return;
  if (kind == Message::Join) {
    if (clique.processOf[wire.rank] < 0) {
      clique.processOf[wire.rank] = wire.process;
      ++clique.joined;
    }
    return;
  }
  auto op = std::make_shared<FakeOp>();
  op->kind = static_cast<Kind>(wire.kind);
  op->type = static_cast<ncclDataType_t>(wire.type);
  op->op = static_cast<ncclRedOp_t>(wire.op);
  op->peer = wire.peer;
  op->count = wire.count;
  size_t bytes = op->count * typeSize(op->type);
  // Room for what this process's simulation writes for the remote member.
  size_t outputBytes = op->kind == Kind::AllGather
                           ? bytes * static_cast<size_t>(clique.nranks)
                           : bytes;
  op->owned.assign(payload, payload + payloadBytes);
  op->owned.resize(std::max(payloadBytes, outputBytes));
  op->send = op->owned.data();
  op->recv = op->owned.data();
  if (op->kind == Kind::AllGather || op->kind == Kind::ReduceScatter) {
    // Output apart from input: the simulation reads every input first, but
    // keep them apart as a GPU's buffers would be.
    op->owned.resize(payloadBytes + outputBytes);
    op->send = op->owned.data();
    op->recv = op->owned.data() + payloadBytes;
  }
  place(clique, wire.rank, op);
}

/// Takes in every message that arrived from other processes.
void pollTransport(Engine &e) {
  if (!e.transport)
    return;
  while (true) {
    absl::StatusOr<std::optional<std::string>> message = e.transport->poll();
    if (!message.ok()) {
      e.lastError =
          "simulated NCCL: " + std::string(message.status().message());
      return;
    }
    if (!*message)
      return;
    receive(e, **message);
  }
}

/// Runs every stream as far as it can go.
void progress(Engine &e) {
  pollTransport(e);
  bool changed = true;
  while (changed) {
    changed = false;
    for (auto &stream : e.streams) {
      CUstream_st &s = *stream;
      while (s.live && !s.queue.empty()) {
        CUstream_st::Work &w = *s.queue.front();
        if (w.kind == CUstream_st::Work::Wait) {
          if (w.waitStream && w.waitStream->live &&
              w.waitStream->completed < w.waitTarget)
            break;
        } else if (w.kind == CUstream_st::Work::Copy) {
          if (w.bytes)
            std::memmove(w.dst, w.src, w.bytes);
        } else {
          if (!w.posted) {
            w.posted = true;
            changed = true;
            for (auto &op : w.ops)
              post(e, op);
          }
          if (!std::all_of(w.ops.begin(), w.ops.end(),
                           [](const auto &op) { return op->done; }))
            break;
        }
        s.queue.pop_front();
        ++s.completed;
        changed = true;
      }
    }
  }
  e.cv.notify_all();
}

void enqueue(Engine &e, CUstream_st *s, std::unique_ptr<CUstream_st::Work> w) {
  if (w->kind == CUstream_st::Work::Calls)
    e.counts.largestGroup =
        std::max(e.counts.largestGroup, static_cast<int64_t>(w->ops.size()));
  s->queue.push_back(std::move(w));
  ++s->enqueued;
  progress(e);
}

//===----------------------------------------------------------------------===//
// CUDA runtime
//===----------------------------------------------------------------------===//

#define INJECT_CUDA(name)                                                      \
  do {                                                                         \
    Injection injection_;                                                      \
    if (takeInjection(e, name, false, &injection_))                            \
      return injection_.error;                                                 \
  } while (0)

cudaError_t fakeGetDeviceCount(int *count) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  INJECT_CUDA("cudaGetDeviceCount");
  if (e.numDevices == 0) {
    *count = 0;
    return cudaErrorNoDevice;
  }
  *count = e.numDevices;
  return cudaSuccess;
}

cudaError_t fakeDriverGetVersion(int *version) {
  *version = 13000;
  return cudaSuccess;
}

cudaError_t fakeGetLastError() { return cudaSuccess; }

cudaError_t fakeSetDevice(int device) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  INJECT_CUDA("cudaSetDevice");
  if (device < 0 || device >= e.numDevices)
    return cudaErrorInvalidDevice;
  currentDevice = device;
  return cudaSuccess;
}

cudaError_t fakeStreamCreateWithFlags(cudaStream_t *stream, unsigned) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  INJECT_CUDA("cudaStreamCreateWithFlags");
  auto s = std::make_unique<CUstream_st>();
  s->device = currentDevice;
  *stream = s.get();
  e.streams.push_back(std::move(s));
  ++e.counts.streams;
  return cudaSuccess;
}

cudaError_t fakeStreamDestroy(cudaStream_t stream) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!liveStream(e, stream))
    return cudaErrorInvalidResourceHandle;
  stream->live = false;
  stream->queue.clear();
  --e.counts.streams;
  progress(e);
  return cudaSuccess;
}

cudaError_t fakeStreamQuery(cudaStream_t stream) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  INJECT_CUDA("cudaStreamQuery");
  if (!liveStream(e, stream))
    return cudaErrorInvalidResourceHandle;
  progress(e);
  return stream->queue.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t fakeEventCreateWithFlags(cudaEvent_t *event, unsigned) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  INJECT_CUDA("cudaEventCreateWithFlags");
  e.events.push_back(std::make_unique<CUevent_st>());
  *event = e.events.back().get();
  ++e.counts.events;
  return cudaSuccess;
}

cudaError_t fakeEventDestroy(cudaEvent_t event) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!liveEvent(e, event))
    return cudaErrorInvalidResourceHandle;
  event->live = false;
  --e.counts.events;
  return cudaSuccess;
}

cudaError_t fakeEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!liveEvent(e, event) || !liveStream(e, stream))
    return cudaErrorInvalidResourceHandle;
  event->stream = stream;
  event->target = stream->enqueued;
  return cudaSuccess;
}

cudaError_t fakeStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!liveEvent(e, event) || !liveStream(e, stream))
    return cudaErrorInvalidResourceHandle;
  if (!event->stream)
    return cudaSuccess;
  auto w = std::make_unique<CUstream_st::Work>();
  w->kind = CUstream_st::Work::Wait;
  w->waitStream = event->stream;
  w->waitTarget = event->target;
  enqueue(e, stream, std::move(w));
  return cudaSuccess;
}

cudaError_t fakeMalloc(void **pointer, size_t bytes) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  INJECT_CUDA("cudaMalloc");
  if (e.numDevices == 0)
    return cudaErrorNoDevice;
  void *p = std::malloc(std::max<size_t>(bytes, 1));
  if (!p)
    return cudaErrorMemoryAllocation;
  // Garbage, as fresh device memory would be.
  std::memset(p, 0xa5, std::max<size_t>(bytes, 1));
  e.allocations[reinterpret_cast<uintptr_t>(p)] = {std::max<size_t>(bytes, 1),
                                                   currentDevice};
  ++e.counts.allocations;
  *pointer = p;
  return cudaSuccess;
}

cudaError_t fakeFree(void *pointer) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!pointer)
    return cudaSuccess;
  auto it = e.allocations.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == e.allocations.end())
    return cudaErrorInvalidValue;
  e.allocations.erase(it);
  std::free(pointer);
  --e.counts.allocations;
  return cudaSuccess;
}

cudaError_t fakeMemcpyAsync(void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  INJECT_CUDA("cudaMemcpyAsync");
  if (!liveStream(e, stream))
    return cudaErrorInvalidResourceHandle;
  bool dstDevice = findAllocation(e, dst, bytes) != nullptr;
  bool srcDevice = findAllocation(e, src, bytes) != nullptr;
  bool ok = true;
  switch (kind) {
  case cudaMemcpyHostToDevice:
    ok = dstDevice && !srcDevice;
    break;
  case cudaMemcpyDeviceToHost:
    ok = !dstDevice && srcDevice;
    break;
  case cudaMemcpyDeviceToDevice:
    ok = dstDevice && srcDevice;
    break;
  default:
    break;
  }
  if (!ok)
    return cudaErrorInvalidValue;
  auto w = std::make_unique<CUstream_st::Work>();
  w->kind = CUstream_st::Work::Copy;
  w->dst = dst;
  w->src = src;
  w->bytes = bytes;
  enqueue(e, stream, std::move(w));
  return cudaSuccess;
}

cudaError_t fakePointerGetAttributes(cudaPointerAttributes *attributes,
                                     const void *pointer) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  std::memset(attributes, 0, sizeof(*attributes));
  if (const Allocation *a = findAllocation(e, pointer, 1)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = a->device;
    attributes->devicePointer = const_cast<void *>(pointer);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    attributes->hostPointer = const_cast<void *>(pointer);
  }
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// NCCL
//===----------------------------------------------------------------------===//

#define INJECT_NCCL(name, comm)                                                \
  do {                                                                         \
    Injection injection_;                                                      \
    if (takeInjection(e, name, true, &injection_)) {                           \
      e.lastError = injection_.lastError;                                      \
      if (comm)                                                                \
        (comm)->lastError = injection_.lastError;                              \
      return injection_.result;                                                \
    }                                                                          \
  } while (0)

ncclResult_t setError(Engine &e, ncclComm *comm, ncclResult_t result,
                      const std::string &message) {
  e.lastError = message;
  if (comm)
    comm->lastError = message;
  return result;
}

ncclResult_t fakeGetUniqueId(ncclUniqueId *id) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  INJECT_NCCL("ncclGetUniqueId", static_cast<ncclComm *>(nullptr));
  std::memset(id->internal, 0, sizeof(id->internal));
  // Ids made in different processes of one job differ.
  std::string text =
      "simulated-nccl-" +
      (e.transport ? "p" + std::to_string(e.transport->process()) + "-"
                   : std::string()) +
      std::to_string(e.nextId++);
  std::memcpy(id->internal, text.data(), text.size());
  // Bytes past the text are not zero, as a real id's are not.
  for (size_t i = text.size() + 1; i < sizeof(id->internal); ++i)
    id->internal[i] = static_cast<char>(i * 31 + e.nextId);
  return ncclSuccess;
}

ncclResult_t fakeCommInitRankConfig(ncclComm_t *out, int nranks,
                                    ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  Engine &e = engine();
  std::unique_lock<std::mutex> lock(e.mu);
  *out = nullptr;
  INJECT_NCCL("ncclCommInitRankConfig", static_cast<ncclComm *>(nullptr));
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return setError(e, nullptr, ncclInvalidArgument,
                    "simulated NCCL: invalid rank or size");
  std::string key(id.internal, sizeof(id.internal));
  pollTransport(e);
  Clique &clique = cliqueOf(e, key, nranks);
  if (clique.nranks != nranks)
    return setError(e, nullptr, ncclInvalidUsage,
                    "simulated NCCL: ranks disagree on the communicator size");
  if (clique.ranks[rank] || clique.processOf[rank] >= 0)
    return setError(e, nullptr, ncclInvalidUsage,
                    "simulated NCCL: two ranks with the same number");
  for (ncclComm *other : clique.ranks)
    if (other && other->device == currentDevice)
      return setError(e, nullptr, ncclInvalidUsage,
                      "simulated NCCL: duplicate GPU in one communicator");
  auto comm = std::make_unique<ncclComm>();
  comm->clique = &clique;
  comm->rank = rank;
  comm->device = currentDevice;
  comm->blocking = !(config && config->blocking == 0);
  ncclComm *c = comm.get();
  e.comms.push_back(std::move(comm));
  clique.ranks[rank] = c;
  ++clique.joined;
  ++e.counts.communicators;
  *out = c;
  if (e.transport) {
    clique.processOf[rank] = e.transport->process();
    Wire wire;
    wire.nranks = nranks;
    wire.rank = rank;
    wire.process = e.transport->process();
    sendToOthers(e, nullptr, encode(Message::Join, key, wire, nullptr, 0), c);
  }
  e.cv.notify_all();
  if (!c->blocking) {
    if (groupDepth > 0)
      groupNonBlocking = true;
    return clique.ready() ? ncclSuccess : ncclInProgress;
  }
  // Ranks of other processes join through the transport: poll it.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!clique.ready()) {
    if (std::chrono::steady_clock::now() > deadline)
      return setError(e, c, ncclSystemError,
                      "simulated NCCL: blocking init timed out");
    e.cv.wait_for(lock, std::chrono::milliseconds(e.transport ? 1 : 100));
    pollTransport(e);
  }
  return ncclSuccess;
}

ncclResult_t fakeCommGetAsyncError(ncclComm_t comm, ncclResult_t *error) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!liveComm(e, comm))
    return setError(e, nullptr, ncclInvalidArgument,
                    "simulated NCCL: invalid communicator");
  progress(e);
  if (comm->asyncError != ncclSuccess)
    *error = comm->asyncError;
  else if (!comm->clique->ready())
    *error = ncclInProgress;
  else
    *error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t fakeCommFinalize(ncclComm_t comm) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!liveComm(e, comm))
    return ncclInvalidArgument;
  comm->finalizing = true;
  return comm->blocking ? ncclSuccess : ncclInProgress;
}

void dropPendingCalls(Engine &e, ncclComm *comm) {
  for (auto &stream : e.streams)
    for (auto &work : stream->queue)
      for (auto &op : work->ops)
        if (op->comm == comm)
          op->done = true;
  Clique &clique = *comm->clique;
  for (auto *queues : {&clique.sends, &clique.recvs})
    for (auto &[key, queue] : *queues)
      queue.erase(
          std::remove_if(queue.begin(), queue.end(),
                         [&](const auto &op) { return op->comm == comm; }),
          queue.end());
  for (auto &[seq, coll] : clique.pending)
    if (coll.ranks[comm->rank] && coll.ranks[comm->rank]->comm == comm) {
      coll.ranks[comm->rank] = nullptr;
      --coll.joined;
    }
  clique.ranks[comm->rank] = nullptr;
}

ncclResult_t fakeCommDestroy(ncclComm_t comm) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!liveComm(e, comm))
    return ncclInvalidArgument;
  dropPendingCalls(e, comm);
  comm->live = false;
  --e.counts.communicators;
  ++e.counts.destroyed;
  progress(e);
  return ncclSuccess;
}

ncclResult_t fakeCommAbort(ncclComm_t comm) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!liveComm(e, comm))
    return ncclInvalidArgument;
  dropPendingCalls(e, comm);
  comm->live = false;
  --e.counts.communicators;
  ++e.counts.abortedCommunicators;
  progress(e);
  return ncclSuccess;
}

const char *fakeErrorString(ncclResult_t result) {
  return ncclGetErrorString(result);
}

const char *fakeLastError(ncclComm_t comm) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  // A copy per thread: the engine's strings change under other threads.
  thread_local std::string copy;
  copy = comm && liveComm(e, comm) ? comm->lastError : e.lastError;
  return copy.c_str();
}

ncclResult_t fakeGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}

ncclResult_t fakeGroupEnd() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (groupDepth == 0)
    return setError(e, nullptr, ncclInvalidUsage,
                    "simulated NCCL: ncclGroupEnd without ncclGroupStart");
  if (--groupDepth > 0)
    return ncclSuccess;
  std::vector<std::shared_ptr<FakeOp>> ops = std::move(groupOps);
  groupOps.clear();
  bool nonBlocking = groupNonBlocking;
  groupNonBlocking = false;
  // One entry per stream, in call order.
  std::vector<CUstream_st *> order;
  for (auto &op : ops) {
    nonBlocking |= !op->comm->blocking;
    if (std::find(order.begin(), order.end(), op->stream) == order.end())
      order.push_back(op->stream);
  }
  for (CUstream_st *s : order) {
    auto w = std::make_unique<CUstream_st::Work>();
    w->kind = CUstream_st::Work::Calls;
    for (auto &op : ops)
      if (op->stream == s)
        w->ops.push_back(op);
    enqueue(e, s, std::move(w));
  }
  return nonBlocking ? ncclInProgress : ncclSuccess;
}

/// Checks and records one call; outside a group it is enqueued at once.
ncclResult_t submit(const char *name, std::shared_ptr<FakeOp> op,
                    size_t sendBytes, size_t recvBytes) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  ncclComm *comm = op->comm;
  if (!liveComm(e, comm))
    return setError(e, nullptr, ncclInvalidArgument,
                    std::string("simulated NCCL: ") + name +
                        " on an invalid communicator");
  INJECT_NCCL(name, comm);
  if (!comm->clique->ready())
    return setError(e, comm, ncclInvalidUsage,
                    std::string("simulated NCCL: ") + name +
                        " before the communicator is initialized");
  if (!liveStream(e, op->stream) || op->stream->device != comm->device)
    return setError(e, comm, ncclInvalidArgument,
                    std::string("simulated NCCL: ") + name +
                        " on a stream of another device");
  if (typeSize(op->type) == 0)
    return setError(e, comm, ncclInvalidArgument,
                    "simulated NCCL: invalid data type");
  if ((op->kind == Kind::Send || op->kind == Kind::Recv) &&
      (op->peer < 0 || op->peer >= comm->clique->nranks))
    return setError(e, comm, ncclInvalidArgument,
                    "simulated NCCL: peer out of range");
  if (op->kind == Kind::Broadcast &&
      (op->peer < 0 || op->peer >= comm->clique->nranks))
    return setError(e, comm, ncclInvalidArgument,
                    "simulated NCCL: root out of range");
  for (auto [p, bytes] :
       {std::make_pair(op->send, sendBytes),
        std::make_pair(static_cast<const void *>(op->recv), recvBytes)}) {
    if (bytes == 0)
      continue;
    const Allocation *a = findAllocation(e, p, bytes);
    if (!a || a->device != comm->device)
      return setError(e, comm, ncclInvalidArgument,
                      std::string("simulated NCCL: ") + name +
                          ": a buffer is not device memory of the "
                          "communicator's GPU, or is too small");
  }
  ++e.counts.ncclCalls;
  if (groupDepth > 0) {
    groupOps.push_back(std::move(op));
    return ncclSuccess;
  }
  auto w = std::make_unique<CUstream_st::Work>();
  w->kind = CUstream_st::Work::Calls;
  CUstream_st *s = op->stream;
  w->ops.push_back(std::move(op));
  enqueue(e, s, std::move(w));
  return ncclSuccess;
}

std::shared_ptr<FakeOp> makeOp(Kind kind, const void *send, void *recv,
                               size_t count, ncclDataType_t type,
                               ncclComm_t comm, cudaStream_t stream) {
  auto op = std::make_shared<FakeOp>();
  op->kind = kind;
  op->send = send;
  op->recv = recv;
  op->count = count;
  op->type = type;
  op->comm = comm;
  op->stream = stream;
  return op;
}

ncclResult_t fakeSend(const void *buf, size_t count, ncclDataType_t type,
                      int peer, ncclComm_t comm, cudaStream_t stream) {
  auto op = makeOp(Kind::Send, buf, nullptr, count, type, comm, stream);
  op->peer = peer;
  return submit("ncclSend", op, count * typeSize(type), 0);
}

ncclResult_t fakeRecv(void *buf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  auto op = makeOp(Kind::Recv, nullptr, buf, count, type, comm, stream);
  op->peer = peer;
  return submit("ncclRecv", op, 0, count * typeSize(type));
}

ncclResult_t fakeBroadcast(const void *send, void *recv, size_t count,
                           ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  auto op = makeOp(Kind::Broadcast, send, recv, count, type, comm, stream);
  op->peer = root;
  size_t bytes = count * typeSize(type);
  bool isRoot = false;
  {
    Engine &e = engine();
    std::lock_guard<std::mutex> lock(e.mu);
    isRoot = liveComm(e, comm) && comm->rank == root;
  }
  return submit("ncclBroadcast", op, isRoot ? bytes : 0, bytes);
}

ncclResult_t fakeAllGather(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  auto op = makeOp(Kind::AllGather, send, recv, count, type, comm, stream);
  size_t n = 1;
  {
    Engine &e = engine();
    std::lock_guard<std::mutex> lock(e.mu);
    if (liveComm(e, comm))
      n = static_cast<size_t>(comm->clique->nranks);
  }
  size_t bytes = count * typeSize(type);
  return submit("ncclAllGather", op, bytes, bytes * n);
}

ncclResult_t fakeAllReduce(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclRedOp_t redOp,
                           ncclComm_t comm, cudaStream_t stream) {
  auto op = makeOp(Kind::AllReduce, send, recv, count, type, comm, stream);
  op->op = redOp;
  size_t bytes = count * typeSize(type);
  return submit("ncclAllReduce", op, bytes, bytes);
}

ncclResult_t fakeReduceScatter(const void *send, void *recv, size_t count,
                               ncclDataType_t type, ncclRedOp_t redOp,
                               ncclComm_t comm, cudaStream_t stream) {
  auto op = makeOp(Kind::ReduceScatter, send, recv, count, type, comm, stream);
  op->op = redOp;
  size_t n = 1;
  {
    Engine &e = engine();
    std::lock_guard<std::mutex> lock(e.mu);
    if (liveComm(e, comm))
      n = static_cast<size_t>(comm->clique->nranks);
  }
  size_t bytes = count * typeSize(type);
  return submit("ncclReduceScatter", op, bytes * n, bytes);
}

} // namespace

const NcclApi &simulatedNcclApi() {
  static const NcclApi api = {
      "simulated CUDA and NCCL",
      fakeGetDeviceCount,
      fakeDriverGetVersion,
      cudaGetErrorName,
      cudaGetErrorString,
      fakeGetLastError,
      fakeSetDevice,
      fakeStreamCreateWithFlags,
      fakeStreamDestroy,
      fakeStreamQuery,
      fakeEventCreateWithFlags,
      fakeEventDestroy,
      fakeEventRecord,
      fakeStreamWaitEvent,
      fakeMalloc,
      fakeFree,
      fakeMemcpyAsync,
      fakePointerGetAttributes,
      fakeGetUniqueId,
      fakeCommInitRankConfig,
      fakeCommGetAsyncError,
      fakeCommFinalize,
      fakeCommDestroy,
      fakeCommAbort,
      fakeErrorString,
      fakeLastError,
      fakeGroupStart,
      fakeGroupEnd,
      fakeSend,
      fakeRecv,
      fakeBroadcast,
      fakeAllGather,
      fakeAllReduce,
      fakeReduceScatter,
  };
  return api;
}

SimulatedGpuTransport::~SimulatedGpuTransport() = default;

void connectSimulatedGpus(std::shared_ptr<SimulatedGpuTransport> transport) {
  Engine &e = engine();
  std::thread running;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    e.stopProgress = true;
    running = std::move(e.progressThread);
  }
  e.stopCv.notify_all();
  if (running.joinable())
    running.join();
  std::lock_guard<std::mutex> lock(e.mu);
  e.transport = std::move(transport);
  if (!e.transport)
    return;
  e.stopProgress = false;
  e.progressThread = std::thread([&e] {
    std::unique_lock<std::mutex> lock(e.mu);
    while (!e.stopProgress) {
      progress(e);
      e.stopCv.wait_for(lock, std::chrono::milliseconds(1),
                        [&e] { return e.stopProgress; });
    }
  });
}

void resetSimulatedGpus(int numDevices) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  for (auto &[address, allocation] : e.allocations)
    std::free(reinterpret_cast<void *>(address));
  e.allocations.clear();
  e.streams.clear();
  e.events.clear();
  e.comms.clear();
  // A clique only other processes joined may be of a run this process has
  // not reached yet (the progress thread takes in their messages early):
  // it stays. Unique ids are never reused, so it cannot be a stale one's.
  for (auto it = e.cliques.begin(); it != e.cliques.end();) {
    const std::vector<ncclComm *> &ranks = it->second->ranks;
    bool local = std::any_of(ranks.begin(), ranks.end(),
                             [](ncclComm *rank) { return rank != nullptr; });
    it = local || !e.transport ? e.cliques.erase(it) : std::next(it);
  }
  e.injections.clear();
  e.lastError.clear();
  e.counts = FakeNccl::Counts();
  e.numDevices = numDevices;
  currentDevice = 0;
}

void FakeNccl::failNextNccl(const std::string &call, ncclResult_t result,
                            const std::string &lastError, int device) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  Injection injection;
  injection.call = call;
  injection.device = device;
  injection.nccl = true;
  injection.result = result;
  injection.lastError = lastError;
  e.injections.push_back(injection);
}

void FakeNccl::failNextCuda(const std::string &call, cudaError_t error,
                            int device) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  Injection injection;
  injection.call = call;
  injection.device = device;
  injection.nccl = false;
  injection.error = error;
  e.injections.push_back(injection);
}

int FakeNccl::streamDevice(cudaStream_t stream) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  return liveStream(e, stream) ? stream->device : -1;
}

void FakeNccl::failCommunicatorsAsync(int device, ncclResult_t result,
                                      const std::string &lastError) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  for (auto &comm : e.comms)
    if (comm->live && comm->device == device) {
      comm->asyncError = result;
      comm->lastError = lastError;
    }
}

FakeNccl::Counts FakeNccl::counts() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  return e.counts;
}

} // namespace polymesh::runtime
