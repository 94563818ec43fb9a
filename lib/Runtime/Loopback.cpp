//===- Loopback.cpp - One thread per device, NCCL semantics ---------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Every call of a device becomes an Op. Outside a group the op is posted at
// once and the device waits for it; inside a group ops are only recorded, and
// the outermost group_end posts them all and waits for all of them. Posting
// never blocks: it matches the op against what other devices posted (a send
// against the oldest recv of the same pair, a collective against the call
// with the same sequence number on the same communicator), and the thread
// whose post completes a match moves the bytes for every participant. Waiting
// is the only blocking, and every wait has a deadline.
//
// One mutex guards everything, bytes included. The loopback backend exists to
// check plans, not to be fast, and a single lock makes the matching, the
// abort and the deadlock proof easy to get right: a device's buffers are
// touched by another thread only while that device is blocked in a wait that
// the lock orders after its post and before its return.
//
// The mutex is std::mutex rather than absl::Mutex: Debian's Abseil is built
// without ThreadSanitizer annotations, so TSan would not see absl::Mutex's
// happens-before edges, while it intercepts the pthread calls of std::mutex.
//
//===----------------------------------------------------------------------===//

#include "BackendOps.h"

#include "polymesh/Runtime/Runtime.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

namespace polymesh::runtime {

namespace {

using Clock = std::chrono::steady_clock;

using detail::formatGroup;
using detail::OpKind;
using detail::opKindName;

bool isReduction(OpKind kind) {
  return kind == OpKind::AllReduce || kind == OpKind::ReduceScatter;
}

/// "device 2", "devices 2 and 3", "devices 1, 2 and 3".
std::string formatDevices(absl::Span<const int64_t> devices) {
  if (devices.size() == 1)
    return absl::StrCat("device ", devices[0]);
  std::string text = "devices ";
  for (size_t i = 0; i < devices.size(); ++i) {
    if (i > 0)
      absl::StrAppend(&text, i + 1 == devices.size() ? " and " : ", ");
    absl::StrAppend(&text, devices[i]);
  }
  return text;
}

struct Communicator;
struct Collective;

/// One call of one device.
struct Op {
  OpKind kind = OpKind::Send;
  int64_t device = 0;
  /// Send/Recv: the other device.
  int64_t peer = -1;
  /// Collectives.
  Communicator *comm = nullptr;
  int64_t rank = -1;
  /// Broadcast: the root's device id.
  int64_t root = -1;
  DataType type = DataType::F32;
  ReduceOp reduceOp = ReduceOp::Sum;
  /// Bytes for send/recv/broadcast, per rank for all_gather, per peer for
  /// all_to_all; elements for all_reduce, per rank for reduce_scatter.
  int64_t size = 0;
  const void *sendBuf = nullptr;
  void *recvBuf = nullptr;
  /// Set once posted: the collective's sequence number on its communicator.
  int64_t seq = -1;
  /// Not owning (the collective owns its ops): valid while the op is not
  /// done, because a collective stays in its communicator's `pending` map
  /// until it completes, and completing it marks all its ops done.
  Collective *collective = nullptr;
  bool done = false;
};

/// The calls with one sequence number on one communicator.
struct Collective {
  int64_t seq = 0;
  /// Per rank; null until that rank joins. The first joiner's op sets the
  /// parameters the others must match.
  std::vector<std::shared_ptr<Op>> ranks;
  std::shared_ptr<Op> first;
  int64_t numJoined = 0;
};

struct Communicator {
  std::vector<int64_t> members;
  absl::flat_hash_map<int64_t, int64_t> rankOf;
  /// Per rank: the sequence number of its next collective.
  std::vector<int64_t> nextSeq;
  absl::flat_hash_map<int64_t, std::unique_ptr<Collective>> pending;
};

struct DeviceState {
  int64_t id = 0;
  int64_t groupDepth = 0;
  std::vector<std::shared_ptr<Op>> grouped;
  bool inCall = false;
  /// Its device function returned: it will make no more calls.
  bool finished = false;
  /// Blocked in a wait for `waitingOn`.
  bool waiting = false;
  std::vector<std::shared_ptr<Op>> waitingOn;
  /// Matched send/recv pairs whose bytes this (receiving) device copies in
  /// its next wait, outside the lock, so that devices copy in parallel.
  std::vector<std::pair<std::shared_ptr<Op>, std::shared_ptr<Op>>> copies;
  /// Copying them right now, with the lock released.
  bool copying = false;
};

std::string describeOp(const Op &op) {
  switch (op.kind) {
  case OpKind::Send:
    return absl::StrCat("send of ", op.size, " bytes to device ", op.peer);
  case OpKind::Recv:
    return absl::StrCat("recv of ", op.size, " bytes from device ", op.peer);
  default:
    break;
  }
  std::string text = opKindName(op.kind);
  if (op.seq >= 0)
    absl::StrAppend(&text, " #", op.seq);
  absl::StrAppend(&text, " on group ", formatGroup(op.comm->members));
  return text;
}

bool allDone(const std::vector<std::shared_ptr<Op>> &ops) {
  for (const auto &op : ops)
    if (!op->done)
      return false;
  return true;
}

const Op *firstPending(const std::vector<std::shared_ptr<Op>> &ops) {
  for (const auto &op : ops)
    if (!op->done)
      return op.get();
  return nullptr;
}

/// a * b, or an error when it overflows int64.
absl::StatusOr<int64_t> bufferBytes(int64_t a, int64_t b, OpKind kind) {
  int64_t result;
  if (__builtin_mul_overflow(a, b, &result))
    return absl::InvalidArgumentError(absl::StrCat(
        opKindName(kind), ": buffer size overflows (", a, " x ", b, ")"));
  return result;
}

} // namespace

class LoopbackState {
public:
  LoopbackState(std::vector<int64_t> ids, LoopbackOptions options)
      : deviceIds(std::move(ids)), options(options) {
    devices.resize(deviceIds.size());
    for (size_t i = 0; i < deviceIds.size(); ++i) {
      devices[i].id = deviceIds[i];
      indexOf[deviceIds[i]] = static_cast<int64_t>(i);
    }
  }

  /// Runs one non-group call: validates and builds the op under the lock,
  /// then records it (in a group) or posts it and waits.
  template <typename BuildFn> absl::Status call(int64_t device, BuildFn build) {
    std::unique_lock<std::mutex> lock(mu);
    absl::StatusOr<DeviceState *> entered = enter(device);
    if (!entered.ok())
      return entered.status();
    DeviceState &d = **entered;
    CallGuard guard(d);
    absl::StatusOr<std::shared_ptr<Op>> op = build();
    if (!op.ok())
      return fail(op.status());
    if (d.groupDepth > 0) {
      d.grouped.push_back(*std::move(op));
      return absl::OkStatus();
    }
    if (absl::Status posted = post(*op); !posted.ok())
      return fail(posted);
    return wait(lock, d, {*op});
  }

  absl::Status groupStart(int64_t device) {
    std::unique_lock<std::mutex> lock(mu);
    absl::StatusOr<DeviceState *> entered = enter(device);
    if (!entered.ok())
      return entered.status();
    ++(*entered)->groupDepth;
    return absl::OkStatus();
  }

  absl::Status groupEnd(int64_t device) {
    std::unique_lock<std::mutex> lock(mu);
    absl::StatusOr<DeviceState *> entered = enter(device);
    if (!entered.ok())
      return entered.status();
    DeviceState &d = **entered;
    CallGuard guard(d);
    if (d.groupDepth == 0)
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "group_end on device ", device, " without a group_start")));
    if (--d.groupDepth > 0)
      return absl::OkStatus();
    std::vector<std::shared_ptr<Op>> ops = std::move(d.grouped);
    d.grouped.clear();
    for (const std::shared_ptr<Op> &op : ops)
      if (absl::Status posted = post(op); !posted.ok())
        return fail(posted);
    return wait(lock, d, ops);
  }

  //===--------------------------------------------------------------------===//
  // Validation
  //===--------------------------------------------------------------------===//

  absl::Status checkDevice(int64_t device, absl::string_view role) const {
    if (indexOf.contains(device))
      return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(role, " ", device, " is not a device of this runtime ",
                     formatGroup(deviceIds)));
  }

  absl::Status checkBuffer(const void *buf, int64_t bytes,
                           absl::string_view what, const Op &op) const {
    if (bytes < 0)
      return absl::InvalidArgumentError(
          absl::StrCat(opKindName(op.kind), " on device ", op.device,
                       ": negative size ", bytes));
    if (bytes > 0 && buf == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat(opKindName(op.kind), " on device ", op.device, ": ",
                       what, " buffer is null for ", bytes, " bytes"));
    return absl::OkStatus();
  }

  /// The communicator of `members` for a call of `kind` by `device`, created
  /// on first use.
  absl::StatusOr<Communicator *>
  communicator(OpKind kind, int64_t device, absl::Span<const int64_t> members) {
    std::vector<int64_t> key(members.begin(), members.end());
    auto it = comms.find(key);
    if (it == comms.end()) {
      if (members.empty())
        return absl::InvalidArgumentError(absl::StrCat(
            opKindName(kind), " on device ", device, ": empty group"));
      auto comm = std::make_unique<Communicator>();
      comm->members = key;
      for (size_t r = 0; r < members.size(); ++r) {
        if (absl::Status known = checkDevice(members[r], "member"); !known.ok())
          return absl::InvalidArgumentError(
              absl::StrCat(opKindName(kind), " on group ", formatGroup(members),
                           ": ", known.message()));
        if (!comm->rankOf.emplace(members[r], static_cast<int64_t>(r)).second)
          return absl::InvalidArgumentError(
              absl::StrCat(opKindName(kind), " on group ", formatGroup(members),
                           ": device ", members[r], " appears twice"));
      }
      comm->nextSeq.assign(members.size(), 0);
      it = comms.emplace(std::move(key), std::move(comm)).first;
    }
    Communicator *comm = it->second.get();
    if (!comm->rankOf.contains(device))
      return absl::InvalidArgumentError(
          absl::StrCat(opKindName(kind), " on group ", formatGroup(members),
                       ": device ", device, " called it but is not a member"));
    return comm;
  }

  /// Builds a collective op after checking everything one device can check
  /// alone. `size` counts units of `unitBytes`; the send (recv) buffer holds
  /// `size` units, or one block of them per member when `sendScales`
  /// (`recvScales`). `checkSend` is false where the send buffer is unused.
  absl::StatusOr<std::shared_ptr<Op>>
  makeCollective(OpKind kind, int64_t device, absl::Span<const int64_t> members,
                 const void *send, void *recv, int64_t size, int64_t unitBytes,
                 bool sendScales, bool recvScales, bool checkSend = true) {
    absl::StatusOr<Communicator *> comm = communicator(kind, device, members);
    if (!comm.ok())
      return comm.status();
    auto op = std::make_shared<Op>();
    op->kind = kind;
    op->device = device;
    op->comm = *comm;
    op->rank = (*comm)->rankOf.at(device);
    op->size = size;
    op->sendBuf = send;
    op->recvBuf = recv;
    if (size < 0)
      return absl::InvalidArgumentError(
          absl::StrCat(opKindName(kind), " on group ", formatGroup(members),
                       ": device ", device, " passed a negative size ", size));
    absl::StatusOr<int64_t> unit = bufferBytes(size, unitBytes, kind);
    if (!unit.ok())
      return unit.status();
    absl::StatusOr<int64_t> scaled =
        bufferBytes(*unit, static_cast<int64_t>(members.size()), kind);
    if (!scaled.ok())
      return scaled.status();
    if (checkSend)
      if (absl::Status ok =
              checkBuffer(send, sendScales ? *scaled : *unit, "send", *op);
          !ok.ok())
        return ok;
    if (absl::Status ok =
            checkBuffer(recv, recvScales ? *scaled : *unit, "recv", *op);
        !ok.ok())
      return ok;
    return op;
  }

  /// An all_reduce or reduce_scatter of `count` elements (per rank for
  /// reduce_scatter, whose send buffer holds one block per member).
  absl::StatusOr<std::shared_ptr<Op>>
  makeReduction(OpKind kind, int64_t device, absl::Span<const int64_t> members,
                const void *send, void *recv, int64_t count, DataType type,
                ReduceOp reduceOp) {
    // The enums may carry any value cast from a C caller's code.
    if (absl::StatusOr<DataType> known =
            dataTypeFromCode(static_cast<int32_t>(type));
        !known.ok())
      return known.status();
    if (absl::StatusOr<ReduceOp> known =
            reduceOpFromCode(static_cast<int32_t>(reduceOp));
        !known.ok())
      return known.status();
    absl::StatusOr<std::shared_ptr<Op>> op = makeCollective(
        kind, device, members, send, recv, count, dataTypeSize(type),
        /*sendScales=*/kind == OpKind::ReduceScatter, /*recvScales=*/false);
    if (op.ok()) {
      (*op)->type = type;
      (*op)->reduceOp = reduceOp;
    }
    return op;
  }

  //===--------------------------------------------------------------------===//
  // Posting and matching
  //===--------------------------------------------------------------------===//

  absl::Status post(const std::shared_ptr<Op> &op) {
    switch (op->kind) {
    case OpKind::Send: {
      auto &queue = recvs[{op->device, op->peer}];
      if (queue.empty()) {
        sends[{op->device, op->peer}].push_back(op);
        return absl::OkStatus();
      }
      std::shared_ptr<Op> recvOp = queue.front();
      queue.pop_front();
      return matchPointToPoint(op, recvOp);
    }
    case OpKind::Recv: {
      auto &queue = sends[{op->peer, op->device}];
      if (queue.empty()) {
        recvs[{op->peer, op->device}].push_back(op);
        return absl::OkStatus();
      }
      std::shared_ptr<Op> sendOp = queue.front();
      queue.pop_front();
      return matchPointToPoint(sendOp, op);
    }
    default:
      return joinCollective(op);
    }
  }

  absl::Status matchPointToPoint(const std::shared_ptr<Op> &sendOp,
                                 const std::shared_ptr<Op> &recvOp) {
    if (sendOp->size != recvOp->size)
      return absl::InvalidArgumentError(absl::StrCat(
          "mismatched send/recv: device ", sendOp->device, " sends ",
          sendOp->size, " bytes to device ", recvOp->device,
          ", which receives ", recvOp->size, " bytes from it"));
    if (sendOp->size == 0) {
      sendOp->done = recvOp->done = true;
      cv.notify_all();
      return absl::OkStatus();
    }
    // The receiver copies the bytes in its wait, outside the lock: every
    // pair of devices copies at once instead of one copy at a time.
    devices[indexOf.at(recvOp->device)].copies.emplace_back(sendOp, recvOp);
    cv.notify_all();
    return absl::OkStatus();
  }

  /// Copies the bytes of `d`'s matched receives with the lock released,
  /// then marks both sides done. Both buffers stay valid: neither device
  /// returns from its wait before its op is done.
  void copyMatched(std::unique_lock<std::mutex> &lock, DeviceState &d) {
    while (!d.copies.empty()) {
      auto copies = std::move(d.copies);
      d.copies.clear();
      d.copying = true;
      lock.unlock();
      for (auto &[sendOp, recvOp] : copies)
        std::memmove(recvOp->recvBuf, sendOp->sendBuf,
                     static_cast<size_t>(sendOp->size));
      lock.lock();
      d.copying = false;
      for (auto &[sendOp, recvOp] : copies)
        sendOp->done = recvOp->done = true;
      cv.notify_all();
    }
  }

  absl::Status joinCollective(const std::shared_ptr<Op> &op) {
    Communicator &comm = *op->comm;
    op->seq = comm.nextSeq[op->rank]++;
    std::unique_ptr<Collective> &slot = comm.pending[op->seq];
    if (!slot) {
      slot = std::make_unique<Collective>();
      slot->seq = op->seq;
      slot->ranks.resize(comm.members.size());
      slot->first = op;
    }
    Collective *coll = slot.get();
    if (absl::Status matches = checkMatches(*coll->first, *op); !matches.ok())
      return matches;
    coll->ranks[op->rank] = op;
    op->collective = coll;
    if (++coll->numJoined < static_cast<int64_t>(comm.members.size()))
      return absl::OkStatus();
    execute(comm, *coll);
    for (const std::shared_ptr<Op> &member : coll->ranks)
      member->done = true;
    comm.pending.erase(coll->seq);
    cv.notify_all();
    return absl::OkStatus();
  }

  /// The call of `op` must be the same collective as that of `first`.
  static absl::Status checkMatches(const Op &first, const Op &op) {
    std::string where =
        absl::StrCat(opKindName(first.kind), " #", op.seq, " on group ",
                     formatGroup(op.comm->members));
    auto mismatch = [&](absl::string_view what, auto mine, auto theirs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mismatched ", where, ": device ", op.device, " passed ", what, " ",
          mine, " but device ", first.device, " passed ", theirs));
    };
    if (first.kind != op.kind)
      return absl::InvalidArgumentError(
          absl::StrCat("mismatched collectives: call #", op.seq, " on group ",
                       formatGroup(op.comm->members), " is ",
                       opKindName(op.kind), " on device ", op.device, " but ",
                       opKindName(first.kind), " on device ", first.device));
    const char *sizeName = "bytes";
    if (op.kind == OpKind::AllGather)
      sizeName = "bytes per rank";
    else if (op.kind == OpKind::AllToAll)
      sizeName = "bytes per peer";
    else if (op.kind == OpKind::AllReduce)
      sizeName = "element count";
    else if (op.kind == OpKind::ReduceScatter)
      sizeName = "element count per rank";
    if (first.size != op.size)
      return mismatch(sizeName, op.size, first.size);
    if (op.kind == OpKind::Broadcast && first.root != op.root)
      return mismatch("root", op.root, first.root);
    if (isReduction(op.kind) && first.type != op.type)
      return mismatch("dtype", dataTypeName(op.type), dataTypeName(first.type));
    if (isReduction(op.kind) && first.reduceOp != op.reduceOp)
      return mismatch("op", reduceOpName(op.reduceOp),
                      reduceOpName(first.reduceOp));
    return absl::OkStatus();
  }

  /// Moves the bytes of a complete collective. Inputs are staged first, so
  /// every in-place form reads its inputs before anything is overwritten.
  static void execute(const Communicator &comm, const Collective &coll) {
    const Op &first = *coll.first;
    const auto &ranks = coll.ranks;
    size_t n = ranks.size();
    size_t size = static_cast<size_t>(first.size);
    switch (first.kind) {
    case OpKind::Broadcast: {
      if (size == 0)
        return;
      const Op &root = *ranks[comm.rankOf.at(first.root)];
      std::vector<char> staged(static_cast<const char *>(root.sendBuf),
                               static_cast<const char *>(root.sendBuf) + size);
      // An in-place root (receive buffer = send buffer) is not written, as
      // in NCCL: its buffer may be read-only (a constant's global).
      for (const auto &op : ranks)
        if (op->recvBuf != root.sendBuf)
          std::memcpy(op->recvBuf, staged.data(), size);
      return;
    }
    case OpKind::AllGather: {
      if (size == 0)
        return;
      std::vector<char> staged(n * size);
      for (size_t r = 0; r < n; ++r)
        std::memcpy(staged.data() + r * size, ranks[r]->sendBuf, size);
      for (const auto &op : ranks)
        std::memcpy(op->recvBuf, staged.data(), staged.size());
      return;
    }
    case OpKind::AllToAll: {
      if (size == 0)
        return;
      // Out of place (no receive buffer overlaps a send buffer): straight
      // from every send buffer to every receive buffer, without staging.
      auto overlaps = [&](const void *a, const void *b) {
        const char *x = static_cast<const char *>(a);
        const char *y = static_cast<const char *>(b);
        return x < y + n * size && y < x + n * size;
      };
      bool apart = true;
      for (size_t i = 0; apart && i < n; ++i)
        for (size_t j = 0; apart && j < n; ++j)
          apart = !overlaps(ranks[i]->sendBuf, ranks[j]->recvBuf);
      if (apart) {
        for (size_t j = 0; j < n; ++j)
          for (size_t i = 0; i < n; ++i)
            std::memcpy(static_cast<char *>(ranks[j]->recvBuf) + i * size,
                        static_cast<const char *>(ranks[i]->sendBuf) + j * size,
                        size);
        return;
      }
      std::vector<char> staged(n * n * size);
      for (size_t i = 0; i < n; ++i)
        std::memcpy(staged.data() + i * n * size, ranks[i]->sendBuf, n * size);
      for (size_t j = 0; j < n; ++j)
        for (size_t i = 0; i < n; ++i)
          std::memcpy(static_cast<char *>(ranks[j]->recvBuf) + i * size,
                      staged.data() + (i * n + j) * size, size);
      return;
    }
    case OpKind::AllReduce:
    case OpKind::ReduceScatter: {
      int64_t count = first.size;
      int64_t total = first.kind == OpKind::AllReduce
                          ? count
                          : count * static_cast<int64_t>(n);
      if (count == 0)
        return;
      size_t elementBytes = static_cast<size_t>(dataTypeSize(first.type));
      std::vector<const void *> inputs;
      for (const auto &op : ranks)
        inputs.push_back(op->sendBuf);
      std::vector<char> result(static_cast<size_t>(total) * elementBytes);
      reduceArrays(first.type, first.reduceOp, inputs.data(),
                   static_cast<int64_t>(n), total, result.data());
      size_t chunk = static_cast<size_t>(count) * elementBytes;
      for (size_t r = 0; r < n; ++r)
        std::memcpy(ranks[r]->recvBuf,
                    result.data() +
                        (first.kind == OpKind::AllReduce ? 0 : r * chunk),
                    chunk);
      return;
    }
    case OpKind::Send:
    case OpKind::Recv:
      return;
    }
  }

  //===--------------------------------------------------------------------===//
  // Errors, waiting and diagnostics
  //===--------------------------------------------------------------------===//

  /// Marks `d` as inside a call until the guard dies (under the lock).
  struct CallGuard {
    explicit CallGuard(DeviceState &d) : d(d) { d.inCall = true; }
    ~CallGuard() { d.inCall = false; }
    DeviceState &d;
  };

  absl::StatusOr<DeviceState *> enter(int64_t device) {
    if (aborted)
      return abortedStatus();
    if (absl::Status known = checkDevice(device, "calling device"); !known.ok())
      return fail(known);
    DeviceState &d = devices[indexOf.at(device)];
    if (d.inCall)
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "device ", device,
          " called the runtime while another thread is in a call for it")));
    // A device that calls is live, whatever the launcher said.
    d.finished = false;
    return &d;
  }

  absl::Status abortedStatus() const {
    return absl::AbortedError(absl::StrCat(
        "aborted because of an earlier error: ", firstError.message()));
  }

  /// Records `error` as the first error (unless one is recorded already),
  /// releases every waiting device and returns `error`.
  absl::Status fail(absl::Status error) {
    if (firstError.ok())
      firstError = error;
    aborted = true;
    cv.notify_all();
    return error;
  }

  absl::Status wait(std::unique_lock<std::mutex> &lock, DeviceState &d,
                    std::vector<std::shared_ptr<Op>> ops) {
    copyMatched(lock, d);
    if (allDone(ops))
      return absl::OkStatus();
    d.waiting = true;
    d.waitingOn = std::move(ops);
    struct Unblock {
      DeviceState &d;
      ~Unblock() {
        d.waiting = false;
        d.waitingOn.clear();
      }
    } unblock{d};
    if (options.detectDeadlocks && provesDeadlock())
      return fail(absl::DeadlineExceededError(diagnose("deadlock", &d)));
    Clock::time_point deadline =
        Clock::now() + absl::ToChronoNanoseconds(options.timeout);
    while (true) {
      copyMatched(lock, d);
      if (allDone(d.waitingOn))
        return absl::OkStatus();
      if (aborted)
        return abortedStatus();
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout &&
          !allDone(d.waitingOn) && !aborted)
        return fail(absl::DeadlineExceededError(diagnose(
            absl::StrCat("timeout after ",
                         absl::ToInt64Milliseconds(options.timeout), " ms"),
            &d)));
    }
  }

  bool blocked(const DeviceState &d) const {
    return d.waiting && d.copies.empty() && !d.copying && !allDone(d.waitingOn);
  }

  /// True when no call can ever complete: every device is blocked in a wait
  /// that only another device's post could end, or has finished for good.
  bool provesDeadlock() const {
    bool anyBlocked = false;
    for (const DeviceState &d : devices) {
      if (blocked(d))
        anyBlocked = true;
      else if (!d.finished || d.inCall)
        return false;
    }
    return anyBlocked;
  }

  /// Why the first pending op of `waiter` (or of the first blocked device)
  /// cannot complete, then where every device is.
  std::string diagnose(absl::string_view reason, const DeviceState *waiter) {
    if (!waiter || !blocked(*waiter))
      for (const DeviceState &d : devices)
        if (blocked(d)) {
          waiter = &d;
          break;
        }
    std::string text(reason);
    if (waiter && blocked(*waiter)) {
      const Op &op = *firstPending(waiter->waitingOn);
      absl::StrAppend(&text, " in ", describeOp(op), " on device ", waiter->id,
                      ": ", whyPending(op));
    }
    absl::StrAppend(&text, "; ", summary());
    return text;
  }

  std::string whyPending(const Op &op) const {
    switch (op.kind) {
    case OpKind::Send:
      return absl::StrCat("device ", op.peer,
                          " never posted the matching recv (", whereIs(op.peer),
                          ")");
    case OpKind::Recv:
      return absl::StrCat("device ", op.peer,
                          " never posted the matching send (", whereIs(op.peer),
                          ")");
    default:
      break;
    }
    std::vector<int64_t> joined, missing;
    for (size_t r = 0; r < op.comm->members.size(); ++r)
      (op.collective->ranks[r] ? joined : missing)
          .push_back(op.comm->members[r]);
    return absl::StrCat(formatDevices(missing), " never joined (",
                        formatDevices(joined),
                        joined.size() == 1 ? " is" : " are", " waiting)");
  }

  std::string whereIs(int64_t device) const {
    const DeviceState &d = devices[indexOf.at(device)];
    if (blocked(d))
      return absl::StrCat("it is waiting in ",
                          describeOp(*firstPending(d.waitingOn)));
    if (d.finished)
      return "it has finished";
    return "it is not blocked in the runtime";
  }

  /// "waiting: device 0 in recv ...; device 1 in ...; finished: devices 2
  /// and 3 (device 3 inside an open group)".
  std::string summary() const {
    std::vector<std::string> waiting;
    std::vector<int64_t> finished, openGroups;
    for (const DeviceState &d : devices) {
      if (blocked(d))
        waiting.push_back(absl::StrCat("device ", d.id, " in ",
                                       describeOp(*firstPending(d.waitingOn))));
      else if (d.finished)
        finished.push_back(d.id);
      if (d.finished && d.groupDepth > 0)
        openGroups.push_back(d.id);
    }
    std::string text = absl::StrCat("waiting: ", absl::StrJoin(waiting, ", "));
    if (!finished.empty())
      absl::StrAppend(&text, "; finished: ", formatDevices(finished));
    if (!openGroups.empty())
      absl::StrAppend(&text, " (", formatDevices(openGroups),
                      " left a group open)");
    return text;
  }

  void setDeviceFinished(int64_t device, bool finished) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = indexOf.find(device);
    if (it == indexOf.end())
      return;
    devices[it->second].finished = finished;
    if (finished && !aborted && options.detectDeadlocks && provesDeadlock())
      fail(absl::DeadlineExceededError(diagnose("deadlock", nullptr)))
          .IgnoreError();
  }

  const std::vector<int64_t> deviceIds;
  absl::flat_hash_map<int64_t, int64_t> indexOf;
  const LoopbackOptions options;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<DeviceState> devices;
  absl::Status firstError;
  bool aborted = false;
  absl::flat_hash_map<std::vector<int64_t>, std::unique_ptr<Communicator>>
      comms;
  /// Posted, unmatched sends and recvs by (sender, receiver), oldest first.
  absl::flat_hash_map<std::pair<int64_t, int64_t>,
                      std::deque<std::shared_ptr<Op>>>
      sends, recvs;
};

//===----------------------------------------------------------------------===//
// LoopbackBackend
//===----------------------------------------------------------------------===//

absl::StatusOr<std::unique_ptr<LoopbackBackend>>
LoopbackBackend::create(std::vector<int64_t> devices, LoopbackOptions options) {
  if (devices.empty())
    return absl::InvalidArgumentError("a loopback runtime needs a device");
  absl::flat_hash_map<int64_t, int> seen;
  for (int64_t device : devices) {
    if (device < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("device id ", device, " is negative"));
    if (!seen.emplace(device, 0).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "device id ", device, " appears twice in ", formatGroup(devices)));
  }
  // A runtime that never hangs needs a finite deadline on every wait.
  if (options.timeout <= absl::ZeroDuration() ||
      options.timeout == absl::InfiniteDuration())
    return absl::InvalidArgumentError(
        absl::StrCat("the timeout must be positive and finite, got ",
                     absl::FormatDuration(options.timeout)));
  return std::unique_ptr<LoopbackBackend>(new LoopbackBackend(
      std::make_unique<LoopbackState>(std::move(devices), options)));
}

LoopbackBackend::LoopbackBackend(std::unique_ptr<LoopbackState> state)
    : state(std::move(state)) {}

LoopbackBackend::~LoopbackBackend() = default;

absl::Span<const int64_t> LoopbackBackend::devices() const {
  return state->deviceIds;
}

absl::Status LoopbackBackend::groupStart(int64_t device) {
  return state->groupStart(device);
}

absl::Status LoopbackBackend::groupEnd(int64_t device) {
  return state->groupEnd(device);
}

absl::Status LoopbackBackend::send(int64_t device, int64_t peer,
                                   const void *buf, int64_t bytes) {
  return state->call(device, [&]() -> absl::StatusOr<std::shared_ptr<Op>> {
    auto op = std::make_shared<Op>();
    op->kind = OpKind::Send;
    op->device = device;
    op->peer = peer;
    op->size = bytes;
    op->sendBuf = buf;
    if (absl::Status known = state->checkDevice(peer, "send: peer");
        !known.ok())
      return known;
    if (absl::Status ok = state->checkBuffer(buf, bytes, "send", *op); !ok.ok())
      return ok;
    return op;
  });
}

absl::Status LoopbackBackend::recv(int64_t device, int64_t peer, void *buf,
                                   int64_t bytes) {
  return state->call(device, [&]() -> absl::StatusOr<std::shared_ptr<Op>> {
    auto op = std::make_shared<Op>();
    op->kind = OpKind::Recv;
    op->device = device;
    op->peer = peer;
    op->size = bytes;
    op->recvBuf = buf;
    if (absl::Status known = state->checkDevice(peer, "recv: peer");
        !known.ok())
      return known;
    if (absl::Status ok = state->checkBuffer(buf, bytes, "recv", *op); !ok.ok())
      return ok;
    return op;
  });
}

absl::Status LoopbackBackend::broadcast(int64_t device,
                                        absl::Span<const int64_t> members,
                                        int64_t root, const void *send,
                                        void *recv, int64_t bytes) {
  return state->call(device, [&]() -> absl::StatusOr<std::shared_ptr<Op>> {
    // Only the root's send buffer is read.
    absl::StatusOr<std::shared_ptr<Op>> op = state->makeCollective(
        OpKind::Broadcast, device, members, send, recv, bytes, 1,
        /*sendScales=*/false, /*recvScales=*/false,
        /*checkSend=*/device == root);
    if (!op.ok())
      return op;
    if (!(*op)->comm->rankOf.contains(root))
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast on group ", formatGroup(members), ": root ",
                       root, " is not a member"));
    (*op)->root = root;
    return op;
  });
}

absl::Status LoopbackBackend::allGather(int64_t device,
                                        absl::Span<const int64_t> members,
                                        const void *send, void *recv,
                                        int64_t bytesPerRank) {
  return state->call(device, [&]() {
    return state->makeCollective(OpKind::AllGather, device, members, send, recv,
                                 bytesPerRank, 1, /*sendScales=*/false,
                                 /*recvScales=*/true);
  });
}

absl::Status LoopbackBackend::allToAll(int64_t device,
                                       absl::Span<const int64_t> members,
                                       const void *send, void *recv,
                                       int64_t bytesPerPeer) {
  return state->call(device, [&]() {
    return state->makeCollective(OpKind::AllToAll, device, members, send, recv,
                                 bytesPerPeer, 1, /*sendScales=*/true,
                                 /*recvScales=*/true);
  });
}

absl::Status LoopbackBackend::allReduce(int64_t device,
                                        absl::Span<const int64_t> members,
                                        const void *send, void *recv,
                                        int64_t count, DataType type,
                                        ReduceOp op) {
  return state->call(device, [&]() {
    return state->makeReduction(OpKind::AllReduce, device, members, send, recv,
                                count, type, op);
  });
}

absl::Status LoopbackBackend::reduceScatter(int64_t device,
                                            absl::Span<const int64_t> members,
                                            const void *send, void *recv,
                                            int64_t recvCount, DataType type,
                                            ReduceOp op) {
  return state->call(device, [&]() {
    return state->makeReduction(OpKind::ReduceScatter, device, members, send,
                                recv, recvCount, type, op);
  });
}

absl::Status LoopbackBackend::firstError() const {
  std::lock_guard<std::mutex> lock(state->mu);
  return state->firstError;
}

void LoopbackBackend::abort(const absl::Status &error) {
  if (error.ok())
    return;
  std::lock_guard<std::mutex> lock(state->mu);
  state->fail(error).IgnoreError();
}

void LoopbackBackend::setDeviceFinished(int64_t device, bool finished) {
  state->setDeviceFinished(device, finished);
}

int64_t LoopbackBackend::numCommunicators() const {
  std::lock_guard<std::mutex> lock(state->mu);
  return static_cast<int64_t>(state->comms.size());
}

} // namespace polymesh::runtime
