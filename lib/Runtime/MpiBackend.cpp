//===- MpiBackend.cpp - Devices spread over the processes of an MPI job ---===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Every call becomes a Pending: the messages it posted and what to do once
// all of them completed (reduce received blocks, say). Outside a group a
// device waits for its Pending at once; inside one it keeps them until the
// outermost group_end. A message to a device of another process is an MPI
// request; one between two devices of this process never enters MPI: it
// meets its partner in the receiving device's mailbox, and whichever of the
// two comes second copies the bytes. Waiting polls both (MPI_Test: Open MPI
// makes progress only inside MPI calls), backs off to short sleeps, and
// gives up at the deadline or when the run failed, here or in another rank.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/MpiBackend.h"

#include "BackendOps.h"

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace polymesh::runtime {

namespace {

using Clock = std::chrono::steady_clock;
using detail::formatGroup;
using detail::OpKind;
using detail::opKindName;

/// Messages larger than this go in pieces: MPI counts are ints.
constexpr int64_t kPieceBytes = int64_t(1) << 30;
/// What an error notice carries of the message.
constexpr int kNoticeBytes = 4096;

/// The communicators of this process's world: runs and tools never share
/// one, so a tool's message cannot match a transfer.
MPI_Comm runComm = MPI_COMM_NULL;
MPI_Comm toolComm = MPI_COMM_NULL;
int tagUpperBound = 32767;

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return absl::StrCat("MPI error ", code);
  return std::string(text, static_cast<size_t>(length));
}

/// Polls until `test(i)` said true for every i not yet marked in `done`,
/// `deadline` passed or `cancelled()` says to stop; returns the first error
/// of a test, DeadlineExceeded or Aborted.
absl::Status
pollUntilDone(std::vector<char> &done,
              const std::function<absl::StatusOr<bool>(size_t)> &test,
              Clock::time_point deadline,
              const std::function<bool()> &cancelled) {
  size_t left = 0;
  for (char d : done)
    left += d ? 0 : 1;
  int idle = 0;
  while (left > 0) {
    bool progressed = false;
    for (size_t i = 0; i < done.size(); ++i) {
      if (done[i])
        continue;
      absl::StatusOr<bool> finished = test(i);
      if (!finished.ok())
        return finished.status();
      if (!*finished)
        continue;
      done[i] = 1;
      --left;
      progressed = true;
    }
    if (left == 0)
      break;
    if (cancelled())
      return absl::AbortedError("cancelled");
    if (Clock::now() > deadline)
      return absl::DeadlineExceededError("deadline");
    // Spin briefly (a small message completes within microseconds), then
    // sleep, so that many device threads on few cores leave MPI's progress
    // engine room to run.
    if (progressed)
      idle = 0;
    else if (++idle > 64)
      std::this_thread::sleep_for(
          std::chrono::microseconds(std::min(200, 10 * (idle - 64))));
  }
  return absl::OkStatus();
}

/// MPI_Test of one request: whether it completed, or its error.
absl::StatusOr<bool> testRequest(MPI_Request &request, MPI_Status &status) {
  int flag = 0;
  if (int code = MPI_Test(&request, &flag, &status); code != MPI_SUCCESS)
    return absl::InternalError(mpiErrorText(code));
  if (flag && status.MPI_ERROR != MPI_SUCCESS &&
      status.MPI_ERROR != MPI_ERR_PENDING)
    return absl::InternalError(mpiErrorText(status.MPI_ERROR));
  return flag != 0;
}

/// Polls `requests` (see pollUntilDone); `statuses` gets their statuses.
absl::Status pollRequests(std::vector<MPI_Request> &requests,
                          std::vector<char> &done,
                          std::vector<MPI_Status> &statuses,
                          Clock::time_point deadline,
                          const std::function<bool()> &cancelled) {
  return pollUntilDone(
      done, [&](size_t i) { return testRequest(requests[i], statuses[i]); },
      deadline, cancelled);
}

/// Cancels and frees every request not marked done.
void dropRequests(std::vector<MPI_Request> &requests,
                  const std::vector<char> &done) {
  for (size_t i = 0; i < requests.size(); ++i) {
    if (done[i] || requests[i] == MPI_REQUEST_NULL)
      continue;
    MPI_Cancel(&requests[i]);
    MPI_Request_free(&requests[i]);
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// MpiWorld
//===----------------------------------------------------------------------===//

absl::StatusOr<std::unique_ptr<MpiWorld>>
MpiWorld::init(int *argc, char ***argv, absl::Duration timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return absl::FailedPreconditionError("MPI is initialized already");
  int provided = MPI_THREAD_SINGLE;
  if (int code = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
      code != MPI_SUCCESS)
    return absl::UnavailableError("MPI_Init_thread failed: " +
                                  mpiErrorText(code));
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    return absl::UnavailableError(
        "this MPI does not provide MPI_THREAD_MULTIPLE, which a run needs "
        "(one thread per device calls MPI)");
  }
  std::unique_ptr<MpiWorld> world(new MpiWorld());
  world->waitLimit = timeout;
  MPI_Comm_rank(MPI_COMM_WORLD, &world->rankId);
  MPI_Comm_size(MPI_COMM_WORLD, &world->numRanks);
  MPI_Comm_dup(MPI_COMM_WORLD, &runComm);
  MPI_Comm_dup(MPI_COMM_WORLD, &toolComm);
  // Errors come back as codes and become diagnostics; MPI's default would
  // abort the job without saying which call failed.
  MPI_Comm_set_errhandler(runComm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(toolComm, MPI_ERRORS_RETURN);
  void *bound = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &bound, &found);
  if (found && bound)
    tagUpperBound = *static_cast<int *>(bound);
  return world;
}

MpiWorld::~MpiWorld() {
  MPI_Comm_free(&runComm);
  MPI_Comm_free(&toolComm);
  MPI_Finalize();
}

void MpiWorld::abortJob(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

namespace {

/// Waits for one request of a tool collective within the world's timeout.
absl::Status waitTool(MPI_Request &request, absl::Duration timeout, int rank,
                      const char *what) {
  std::vector<MPI_Request> requests = {request};
  std::vector<char> done(1, 0);
  std::vector<MPI_Status> statuses(1);
  absl::Status status = pollRequests(
      requests, done, statuses,
      Clock::now() + absl::ToChronoMilliseconds(timeout), [] { return false; });
  if (status.ok())
    return status;
  // A nonblocking collective may be neither cancelled nor freed (Open MPI
  // aborts the job on MPI_Cancel of one): the request stays pending, and
  // the caller leaves its buffers to it (leaks them), since a late rank may
  // still write them.
  if (absl::IsDeadlineExceeded(status))
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", rank, " waited ", absl::FormatDuration(timeout), " in ", what,
        " for a rank that never arrived (it hung, died or runs another "
        "program)"));
  return absl::InternalError(
      absl::StrCat("rank ", rank, ": ", what, ": ", status.message()));
}

} // namespace

absl::StatusOr<std::vector<uint64_t>> MpiWorld::allGather(uint64_t value) {
  // On the heap: a pending call keeps both buffers (waitTool).
  auto buffers = std::make_unique<std::pair<uint64_t, std::vector<uint64_t>>>(
      value, std::vector<uint64_t>(static_cast<size_t>(numRanks)));
  MPI_Request request;
  MPI_Iallgather(&buffers->first, 1, MPI_UINT64_T, buffers->second.data(), 1,
                 MPI_UINT64_T, toolComm, &request);
  if (absl::Status status =
          waitTool(request, waitLimit, rankId, "an all-gather of the ranks");
      !status.ok()) {
    buffers.release();
    return status;
  }
  return std::move(buffers->second);
}

absl::Status MpiWorld::barrier(absl::Duration limit, const char *what) {
  MPI_Request request;
  MPI_Ibarrier(toolComm, &request);
  return waitTool(request, limit, rankId, what);
}

absl::StatusOr<std::vector<std::string>>
MpiWorld::gatherToRoot(const std::string &text) {
  // Every buffer the calls use is on the heap, with a copy of `text`: a
  // call left pending by a timeout keeps them (waitTool).
  struct Buffers {
    std::string text;
    int length = 0;
    std::vector<int> lengths, offsets;
    std::string all;
  };
  auto buffers = std::make_unique<Buffers>();
  buffers->text = text;
  buffers->length = static_cast<int>(text.size());
  buffers->lengths.assign(rankId == 0 ? static_cast<size_t>(numRanks) : 0, 0);
  MPI_Request request;
  MPI_Igather(&buffers->length, 1, MPI_INT, buffers->lengths.data(), 1, MPI_INT,
              0, toolComm, &request);
  if (absl::Status status = waitTool(request, waitLimit, rankId,
                                     "a gather of the ranks' results");
      !status.ok()) {
    buffers.release();
    return status;
  }
  const std::vector<int> &lengths = buffers->lengths;
  std::vector<int> &offsets = buffers->offsets;
  offsets.assign(lengths.size(), 0);
  int total = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  buffers->all.assign(static_cast<size_t>(total), '\0');
  MPI_Igatherv(buffers->text.data(), buffers->length, MPI_CHAR,
               buffers->all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
               toolComm, &request);
  if (absl::Status status = waitTool(request, waitLimit, rankId,
                                     "a gather of the ranks' results");
      !status.ok()) {
    buffers.release();
    return status;
  }
  std::vector<std::string> texts;
  for (size_t r = 0; r < lengths.size(); ++r)
    texts.push_back(buffers->all.substr(static_cast<size_t>(offsets[r]),
                                        static_cast<size_t>(lengths[r])));
  return texts;
}

absl::Status MpiWorld::exchange(const std::vector<Block> &sends,
                                const std::vector<Block> &recvs) {
  std::vector<MPI_Request> requests;
  std::vector<int64_t> expected;
  auto post = [&](const Block &block, bool isSend) -> absl::Status {
    if (block.bytes > kPieceBytes * 2 - 1 || block.bytes < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("a block of ", block.bytes, " bytes is too large"));
    for (int64_t offset = 0; offset < block.bytes || offset == 0;
         offset += kPieceBytes) {
      int count = static_cast<int>(std::min(kPieceBytes, block.bytes - offset));
      char *data = static_cast<char *>(block.data) + offset;
      MPI_Request request;
      int code = isSend ? MPI_Isend(data, count, MPI_BYTE, block.peer, 0,
                                    toolComm, &request)
                        : MPI_Irecv(data, count, MPI_BYTE, block.peer, 0,
                                    toolComm, &request);
      if (code != MPI_SUCCESS)
        return absl::InternalError(mpiErrorText(code));
      requests.push_back(request);
      expected.push_back(isSend ? -1 : count);
      if (block.bytes == 0)
        break;
    }
    return absl::OkStatus();
  };
  for (const Block &block : sends)
    if (absl::Status status = post(block, true); !status.ok())
      return status;
  for (const Block &block : recvs)
    if (absl::Status status = post(block, false); !status.ok())
      return status;
  std::vector<char> done(requests.size(), 0);
  std::vector<MPI_Status> statuses(requests.size());
  absl::Status status =
      pollRequests(requests, done, statuses,
                   Clock::now() + absl::ToChronoMilliseconds(waitLimit),
                   [] { return false; });
  if (!status.ok()) {
    dropRequests(requests, done);
    if (absl::IsDeadlineExceeded(status))
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", rankId, " waited ", absl::FormatDuration(waitLimit),
          " for result tiles of other ranks"));
    return status;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (expected[i] < 0)
      continue;
    int count = 0;
    MPI_Get_count(&statuses[i], MPI_BYTE, &count);
    if (count != expected[i])
      return absl::InternalError(absl::StrCat(
          "rank ", rankId, " expected a block of ", expected[i],
          " bytes from rank ", statuses[i].MPI_SOURCE, ", got ", count));
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// MpiChannel
//===----------------------------------------------------------------------===//

struct MpiChannel::State {
  MPI_Comm comm = MPI_COMM_NULL;
  std::mutex mu;
  /// Sends MPI still reads from, with their buffers.
  std::deque<std::pair<MPI_Request, std::string>> inFlight;

  /// Frees the sends that completed.
  void reap() {
    for (auto it = inFlight.begin(); it != inFlight.end();) {
      int flag = 0;
      MPI_Test(&it->first, &flag, MPI_STATUS_IGNORE);
      it = flag ? inFlight.erase(it) : std::next(it);
    }
  }
};

absl::StatusOr<std::unique_ptr<MpiChannel>>
MpiChannel::create(MpiWorld &world) {
  auto state = std::make_unique<State>();
  if (int code = MPI_Comm_dup(MPI_COMM_WORLD, &state->comm);
      code != MPI_SUCCESS)
    return absl::InternalError("MPI_Comm_dup: " + mpiErrorText(code));
  MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN);
  std::unique_ptr<MpiChannel> channel(new MpiChannel(std::move(state)));
  channel->rankId = world.rank();
  channel->numRanks = world.size();
  return channel;
}

MpiChannel::MpiChannel(std::unique_ptr<State> state)
    : state(std::move(state)) {}

MpiChannel::~MpiChannel() {
  std::lock_guard<std::mutex> lock(state->mu);
  // A message to a rank that already left is never received: give the
  // others a moment, then drop what is left.
  auto deadline = Clock::now() + std::chrono::milliseconds(200);
  while (!state->inFlight.empty() && Clock::now() < deadline) {
    state->reap();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (auto &[request, message] : state->inFlight) {
    MPI_Cancel(&request);
    MPI_Request_free(&request);
  }
  MPI_Comm_free(&state->comm);
}

absl::Status MpiChannel::send(int to, std::string message) {
  if (to < 0 || to >= numRanks || to == rankId)
    return absl::InvalidArgumentError(
        absl::StrCat("MPI channel: no rank ", to, " to send to"));
  if (message.size() > static_cast<size_t>(kPieceBytes))
    return absl::InvalidArgumentError(absl::StrCat(
        "MPI channel: a message of ", message.size(), " bytes is too large"));
  std::lock_guard<std::mutex> lock(state->mu);
  state->reap();
  state->inFlight.emplace_back(MPI_REQUEST_NULL, std::move(message));
  auto &[request, text] = state->inFlight.back();
  if (int code = MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_BYTE,
                           to, 0, state->comm, &request);
      code != MPI_SUCCESS) {
    state->inFlight.pop_back();
    return absl::InternalError("MPI channel: " + mpiErrorText(code));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<MpiChannel::Received>> MpiChannel::poll() {
  std::lock_guard<std::mutex> lock(state->mu);
  state->reap();
  int flag = 0;
  MPI_Status status;
  if (int code = MPI_Iprobe(MPI_ANY_SOURCE, 0, state->comm, &flag, &status);
      code != MPI_SUCCESS)
    return absl::InternalError("MPI channel: " + mpiErrorText(code));
  if (!flag)
    return std::optional<Received>();
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  Received received;
  received.from = status.MPI_SOURCE;
  received.message.resize(static_cast<size_t>(bytes));
  if (int code = MPI_Recv(received.message.data(), bytes, MPI_BYTE,
                          status.MPI_SOURCE, 0, state->comm, MPI_STATUS_IGNORE);
      code != MPI_SUCCESS)
    return absl::InternalError("MPI channel: " + mpiErrorText(code));
  return std::optional<Received>(std::move(received));
}

//===----------------------------------------------------------------------===//
// MpiStore
//===----------------------------------------------------------------------===//

struct MpiStore::State {
  std::unique_ptr<MpiChannel> channel;
  std::mutex mu;
  absl::flat_hash_map<std::string, std::string> values;

  /// Takes every set that arrived into `values`.
  absl::Status drain() {
    while (true) {
      absl::StatusOr<std::optional<MpiChannel::Received>> received =
          channel->poll();
      if (!received.ok())
        return received.status();
      if (!*received)
        return absl::OkStatus();
      // A set is the key's length, the key, then the value.
      const std::string &message = (*received)->message;
      uint64_t keyBytes = 0;
      if (message.size() < sizeof keyBytes)
        return absl::InternalError("MPI store: a short message");
      std::memcpy(&keyBytes, message.data(), sizeof keyBytes);
      if (message.size() - sizeof keyBytes < keyBytes)
        return absl::InternalError("MPI store: a short message");
      std::string key = message.substr(sizeof keyBytes, keyBytes);
      values.emplace(std::move(key),
                     message.substr(sizeof keyBytes + keyBytes));
    }
  }
};

MpiStore::MpiStore(std::unique_ptr<MpiChannel> channel)
    : state(std::make_unique<State>()) {
  state->channel = std::move(channel);
}

MpiStore::~MpiStore() = default;

absl::Status MpiStore::set(absl::string_view key, absl::string_view value) {
  std::lock_guard<std::mutex> lock(state->mu);
  if (absl::Status status = state->drain(); !status.ok())
    return status;
  if (!state->values.emplace(std::string(key), std::string(value)).second)
    return absl::AlreadyExistsError(
        absl::StrCat("key \"", key, "\" is already set in ", describe()));
  uint64_t keyBytes = key.size();
  std::string message(reinterpret_cast<const char *>(&keyBytes),
                      sizeof keyBytes);
  absl::StrAppend(&message, key, value);
  for (int r = 0; r < state->channel->size(); ++r)
    if (r != state->channel->rank())
      if (absl::Status status = state->channel->send(r, message); !status.ok())
        return status;
  return absl::OkStatus();
}

absl::StatusOr<std::string> MpiStore::get(absl::string_view key,
                                          absl::Duration timeout) {
  auto deadline = Clock::now() + absl::ToChronoMilliseconds(timeout);
  for (int idle = 0;; ++idle) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (absl::Status status = state->drain(); !status.ok())
        return status;
      auto it = state->values.find(std::string(key));
      if (it != state->values.end())
        return it->second;
    }
    if (Clock::now() > deadline)
      return absl::DeadlineExceededError(
          absl::StrCat("key \"", key, "\" was not set within ",
                       absl::FormatDuration(timeout), " in ", describe()));
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::min(1000, 10 * idle)));
  }
}

std::string MpiStore::describe() const {
  return absl::StrCat("MPI store (rank ", state->channel->rank(), " of ",
                      state->channel->size(), ")");
}

//===----------------------------------------------------------------------===//
// DeviceOwnership
//===----------------------------------------------------------------------===//

DeviceOwnership DeviceOwnership::over(const std::vector<int64_t> &devices,
                                      int numRanks, int64_t perRank) {
  DeviceOwnership ownership;
  ownership.numRanks = std::max(1, numRanks);
  if (perRank > 0) {
    ownership.perRank = perRank;
    return ownership;
  }
  int64_t maxId = 0;
  for (int64_t device : devices)
    maxId = std::max(maxId, device);
  ownership.perRank = std::max<int64_t>(
      1, (maxId + 1 + ownership.numRanks - 1) / ownership.numRanks);
  return ownership;
}

int DeviceOwnership::ownerOf(int64_t device) const {
  if (device < 0 || perRank <= 0)
    return -1;
  int64_t rank = device / perRank;
  return rank < numRanks ? static_cast<int>(rank) : -1;
}

//===----------------------------------------------------------------------===//
// MpiState
//===----------------------------------------------------------------------===//

/// One half of a message between two devices of this process. The second
/// half to arrive in the mailbox copies the bytes and completes both.
struct LocalSlot {
  /// A send's source or a receive's destination.
  char *data = nullptr;
  int64_t bytes = 0;
  /// A receive's: the bytes its sender sent.
  int64_t received = -1;
  std::atomic<bool> done{false};
};

/// The unmatched halves of messages to one device of this process, by
/// (channel, sending device), in posting order: MPI's non-overtaking order
/// for one source, tag and communicator.
struct Mailbox {
  using Key = std::pair<int, int64_t>;
  using Queue = std::deque<std::shared_ptr<LocalSlot>>;
  std::mutex mu;
  absl::flat_hash_map<Key, Queue> sends;
  absl::flat_hash_map<Key, Queue> recvs;

  /// Posts one half; matches it with the oldest opposite half of `key`.
  /// The copy runs under the lock, so a half that is withdrawn (drop)
  /// is either copied already or never touched.
  void post(const Key &key, bool isSend, std::shared_ptr<LocalSlot> slot) {
    std::lock_guard<std::mutex> lock(mu);
    Queue &partners = (isSend ? recvs : sends)[key];
    if (partners.empty()) {
      (isSend ? sends : recvs)[key].push_back(std::move(slot));
      return;
    }
    std::shared_ptr<LocalSlot> partner = std::move(partners.front());
    partners.pop_front();
    LocalSlot &from = isSend ? *slot : *partner;
    LocalSlot &to = isSend ? *partner : *slot;
    if (int64_t bytes = std::min(from.bytes, to.bytes); bytes > 0)
      std::memcpy(to.data, from.data, static_cast<size_t>(bytes));
    to.received = from.bytes;
    from.done.store(true, std::memory_order_release);
    to.done.store(true, std::memory_order_release);
  }

  /// Withdraws a half that was never matched.
  void drop(const Key &key, bool isSend, const LocalSlot *slot) {
    std::lock_guard<std::mutex> lock(mu);
    Queue &queue = (isSend ? sends : recvs)[key];
    queue.erase(std::remove_if(queue.begin(), queue.end(),
                               [&](const std::shared_ptr<LocalSlot> &entry) {
                                 return entry.get() == slot;
                               }),
                queue.end());
  }
};

/// One message of a call: an MPI request, or a half in a local mailbox.
struct Message {
  MPI_Request request = MPI_REQUEST_NULL;
  std::shared_ptr<LocalSlot> local;
  Mailbox *mailbox = nullptr;
  Mailbox::Key key;
  bool isSend = false;
  /// The peer device, and the bytes a receive expects.
  int64_t peer = 0;
  int64_t expected = 0;
};

/// What one call posted, and what completes it.
struct Pending {
  std::string what;
  std::vector<Message> messages;
  /// Blocks to reduce, own data that an in-place call would overwrite.
  std::vector<char> temp;
  std::function<void()> finish;
};

/// Withdraws the messages not marked done: cancels MPI requests, takes
/// local halves out of their mailboxes.
void dropMessages(std::vector<Message> &messages,
                  const std::vector<char> &done) {
  for (size_t i = 0; i < messages.size(); ++i) {
    if (done[i])
      continue;
    Message &message = messages[i];
    if (message.local) {
      message.mailbox->drop(message.key, message.isSend, message.local.get());
      continue;
    }
    if (message.request == MPI_REQUEST_NULL)
      continue;
    MPI_Cancel(&message.request);
    MPI_Request_free(&message.request);
  }
}

struct DeviceState {
  int groupDepth = 0;
  std::vector<std::unique_ptr<Pending>> grouped;
  std::atomic<bool> busy{false};
};

class MpiState {
public:
  int rank = 0;
  int numRanks = 1;
  MpiOptions options;
  std::vector<int64_t> deviceIds;
  std::vector<int64_t> owned;
  /// Per device: its rank and its index among its rank's devices.
  absl::flat_hash_map<int64_t, int> ownerOf;
  absl::flat_hash_map<int64_t, int> localIndexOf;
  absl::flat_hash_map<int64_t, std::unique_ptr<DeviceState>> states;
  /// Per device of this process: messages to it from this process.
  absl::flat_hash_map<int64_t, std::unique_ptr<Mailbox>> mailboxes;
  /// Devices of the busiest rank: the side of the tag square.
  int64_t side = 1;
  int64_t epochSlot = 0;

  mutable std::mutex errorMu;
  absl::Status error;
  std::atomic<bool> failed{false};

  /// The other ranks' error notices: one receive from any rank, tested by
  /// whichever waiting thread gets the lock.
  std::mutex noticeMu;
  MPI_Request noticeRequest = MPI_REQUEST_NULL;
  std::vector<char> noticeBuffer = std::vector<char>(kNoticeBytes);
  /// Our own notices, kept until they complete or the runtime goes.
  std::vector<MPI_Request> noticeSends;
  std::string noticeText;

  enum Channel { P2P = 0, Collective = 1, Notice = 2 };

  int tag(Channel channel, int64_t from, int64_t to) const {
    int64_t square = side * side;
    int64_t value = (epochSlot * 3 + channel) * square +
                    localIndexOf.at(from) * side + localIndexOf.at(to);
    return static_cast<int>(value);
  }

  //===--------------------------------------------------------------------===//
  // Errors
  //===--------------------------------------------------------------------===//

  absl::Status firstError() const {
    std::lock_guard<std::mutex> lock(errorMu);
    return error;
  }

  /// Records `status` as the run's first error; a local one is also sent
  /// to every other rank of the run.
  void fail(const absl::Status &status, bool local) {
    {
      std::lock_guard<std::mutex> lock(errorMu);
      if (!error.ok())
        return;
      error = status;
      failed = true;
    }
    if (!local)
      return;
    std::lock_guard<std::mutex> lock(noticeMu);
    noticeText = absl::StrCat("rank ", rank, ": ", status.message());
    noticeText.resize(std::min<size_t>(noticeText.size(), kNoticeBytes - 1));
    int noticeTag = static_cast<int>((epochSlot * 3 + Notice) * side * side);
    for (int r = 0; r < numRanks; ++r) {
      if (r == rank || !involves(r))
        continue;
      MPI_Request request;
      if (MPI_Isend(noticeText.data(), static_cast<int>(noticeText.size()),
                    MPI_CHAR, r, noticeTag, runComm, &request) == MPI_SUCCESS)
        noticeSends.push_back(request);
    }
  }

  /// Whether rank `r` owns a device of this run.
  bool involves(int r) const {
    for (const auto &[device, owner] : ownerOf)
      if (owner == r)
        return true;
    return false;
  }

  /// True once the run failed; takes another rank's notice when one came.
  bool checkFailed() {
    if (failed)
      return true;
    std::unique_lock<std::mutex> lock(noticeMu, std::try_to_lock);
    if (!lock.owns_lock() || noticeRequest == MPI_REQUEST_NULL)
      return failed;
    int flag = 0;
    MPI_Status status;
    if (MPI_Test(&noticeRequest, &flag, &status) != MPI_SUCCESS || !flag)
      return failed;
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    std::string text(noticeBuffer.data(), static_cast<size_t>(count));
    lock.unlock();
    fail(absl::AbortedError(text), /*local=*/false);
    return true;
  }

  absl::Status abortedStatus() const {
    absl::Status first = firstError();
    return absl::AbortedError(
        absl::StrCat("aborted after an earlier error: ", first.message()));
  }

  //===--------------------------------------------------------------------===//
  // Validation
  //===--------------------------------------------------------------------===//

  absl::StatusOr<DeviceState *> ownDevice(int64_t device) {
    auto it = states.find(device);
    if (it != states.end())
      return it->second.get();
    auto owner = ownerOf.find(device);
    if (owner == ownerOf.end())
      return absl::InvalidArgumentError(
          absl::StrCat("device ", device, " is not a device of this runtime ",
                       formatGroup(deviceIds)));
    return absl::FailedPreconditionError(
        absl::StrCat("device ", device, " is owned by rank ", owner->second,
                     ", not by this process (rank ", rank, ")"));
  }

  absl::Status checkPeer(OpKind kind, int64_t device, int64_t peer) const {
    if (ownerOf.contains(peer))
      return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        opKindName(kind), " on device ", device, ": peer ", peer,
        " is not a device of this runtime ", formatGroup(deviceIds)));
  }

  static absl::Status checkBuffer(OpKind kind, int64_t device, const void *buf,
                                  int64_t bytes, const char *what) {
    if (bytes < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          opKindName(kind), " on device ", device, ": negative size ", bytes));
    if (bytes > 0 && !buf)
      return absl::InvalidArgumentError(
          absl::StrCat(opKindName(kind), " on device ", device, ": ", what,
                       " buffer is null for ", bytes, " bytes"));
    return absl::OkStatus();
  }

  /// The rank of `device` in `members`, after checking the member list.
  absl::StatusOr<int64_t> rankIn(OpKind kind, int64_t device,
                                 absl::Span<const int64_t> members) const {
    if (members.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          opKindName(kind), " on device ", device, ": empty group"));
    int64_t self = -1;
    absl::flat_hash_map<int64_t, int> seen;
    for (size_t r = 0; r < members.size(); ++r) {
      if (!ownerOf.contains(members[r]))
        return absl::InvalidArgumentError(absl::StrCat(
            opKindName(kind), " on group ", formatGroup(members), ": member ",
            members[r], " is not a device of this runtime ",
            formatGroup(deviceIds)));
      if (!seen.emplace(members[r], 1).second)
        return absl::InvalidArgumentError(
            absl::StrCat(opKindName(kind), " on group ", formatGroup(members),
                         ": device ", members[r], " appears twice"));
      if (members[r] == device)
        self = static_cast<int64_t>(r);
    }
    if (self < 0)
      return absl::InvalidArgumentError(
          absl::StrCat(opKindName(kind), " on group ", formatGroup(members),
                       ": device ", device, " called it but is not a member"));
    return self;
  }

  //===--------------------------------------------------------------------===//
  // Posting and waiting
  //===--------------------------------------------------------------------===//

  /// Posts one message of `device` to or from `peer`: through MPI when the
  /// peer lives in another process (in pieces MPI's int counts can carry),
  /// through the receiver's mailbox when it lives here.
  absl::Status postPieces(Pending &pending, bool isSend, Channel channel,
                          int64_t device, int64_t peer, const void *buf,
                          int64_t bytes) {
    int peerRank = ownerOf.at(peer);
    if (peerRank == rank) {
      Message message;
      message.local = std::make_shared<LocalSlot>();
      message.local->data = const_cast<char *>(static_cast<const char *>(buf));
      message.local->bytes = bytes;
      message.mailbox = mailboxes.at(isSend ? peer : device).get();
      message.key = {channel, isSend ? device : peer};
      message.isSend = isSend;
      message.peer = peer;
      message.expected = isSend ? -1 : bytes;
      message.mailbox->post(message.key, isSend, message.local);
      pending.messages.push_back(std::move(message));
      return absl::OkStatus();
    }
    int messageTag =
        isSend ? tag(channel, device, peer) : tag(channel, peer, device);
    for (int64_t offset = 0;; offset += kPieceBytes) {
      int count = static_cast<int>(std::min(kPieceBytes, bytes - offset));
      char *data = const_cast<char *>(static_cast<const char *>(buf)) + offset;
      MPI_Request request;
      int code = isSend ? MPI_Isend(data, count, MPI_BYTE, peerRank, messageTag,
                                    runComm, &request)
                        : MPI_Irecv(data, count, MPI_BYTE, peerRank, messageTag,
                                    runComm, &request);
      if (code != MPI_SUCCESS)
        return absl::InternalError(
            absl::StrCat(pending.what, ": ", mpiErrorText(code)));
      Message message;
      message.request = request;
      message.isSend = isSend;
      message.peer = peer;
      message.expected = isSend ? -1 : count;
      pending.messages.push_back(std::move(message));
      if (offset + kPieceBytes >= bytes)
        break;
    }
    return absl::OkStatus();
  }

  /// Waits for `work` of `device` (in order) and runs their finishers.
  absl::Status wait(int64_t device,
                    std::vector<std::unique_ptr<Pending>> &work) {
    std::vector<Message> messages;
    std::vector<const Pending *> origin;
    for (auto &pending : work)
      for (Message &message : pending->messages) {
        messages.push_back(std::move(message));
        origin.push_back(pending.get());
      }
    std::vector<char> done(messages.size(), 0);
    std::vector<MPI_Status> statuses(messages.size());
    auto test = [&](size_t i) -> absl::StatusOr<bool> {
      if (messages[i].local)
        return messages[i].local->done.load(std::memory_order_acquire);
      return testRequest(messages[i].request, statuses[i]);
    };
    auto deadline = Clock::now() + absl::ToChronoMilliseconds(options.timeout);
    absl::Status status =
        pollUntilDone(done, test, deadline, [this] { return checkFailed(); });
    // The calls' descriptions (origin) live until `work` is cleared.
    auto clearWork = absl::MakeCleanup([&work] { work.clear(); });
    if (!status.ok()) {
      dropMessages(messages, done);
      if (absl::IsAborted(status))
        return abortedStatus();
      if (absl::IsDeadlineExceeded(status)) {
        std::vector<std::string> waiting;
        for (size_t i = 0; i < messages.size() && waiting.size() < 4; ++i) {
          if (done[i])
            continue;
          waiting.push_back(absl::StrCat(
              origin[i]->what, ": ",
              messages[i].isSend ? "send to" : "recv from", " device ",
              messages[i].peer, " (rank ", ownerOf.at(messages[i].peer), ")"));
        }
        return absl::DeadlineExceededError(absl::StrCat(
            "timed out after ", absl::FormatDuration(options.timeout),
            ": device ", device, " (rank ", rank, ") still waits for ",
            absl::StrJoin(waiting, "; ")));
      }
      return status;
    }
    for (size_t i = 0; i < messages.size(); ++i) {
      const Message &message = messages[i];
      if (message.isSend)
        continue;
      int64_t count = 0;
      if (message.local) {
        count = message.local->received;
      } else {
        int received = 0;
        MPI_Get_count(&statuses[i], MPI_BYTE, &received);
        count = received;
      }
      if (count != message.expected)
        return absl::InvalidArgumentError(absl::StrCat(
            origin[i]->what, ": device ", message.peer, " sent ", count,
            " bytes where ", message.expected, " were expected"));
    }
    for (auto &pending : work)
      if (pending->finish)
        pending->finish();
    return absl::OkStatus();
  }

  /// Runs one call of `device`: `build` validates and posts into a
  /// Pending; outside a group the device then waits for it.
  absl::Status call(int64_t device,
                    const std::function<absl::Status(Pending &)> &build) {
    if (checkFailed())
      return abortedStatus();
    absl::StatusOr<DeviceState *> state = ownDevice(device);
    if (!state.ok())
      return failWith(state.status());
    if ((*state)->busy.exchange(true))
      return failWith(absl::FailedPreconditionError(
          absl::StrCat("two threads call for device ", device, " at once")));
    auto pending = std::make_unique<Pending>();
    absl::Status status = build(*pending);
    if (status.ok()) {
      if ((*state)->groupDepth > 0) {
        (*state)->grouped.push_back(std::move(pending));
      } else {
        std::vector<std::unique_ptr<Pending>> work;
        work.push_back(std::move(pending));
        status = wait(device, work);
      }
    } else {
      std::vector<char> done(pending->messages.size(), 0);
      dropMessages(pending->messages, done);
    }
    (*state)->busy = false;
    if (!status.ok() && !absl::IsAborted(status))
      return failWith(status);
    return status;
  }

  absl::Status failWith(const absl::Status &status) {
    fail(status, /*local=*/true);
    return status;
  }

  /// A blocking send or receive of generated code (mpi.send, mpi.recv),
  /// waited for like the runtime's own messages: until the timeout or the
  /// run's first error. Returns an MPI error code; a failure is also the
  /// run's error, so the device's next runtime call fails.
  int blockingTransfer(bool isSend, void *buf, int count, MPI_Datatype type,
                       int peerRank, int messageTag, MPI_Comm comm) {
    if (checkFailed())
      return MPI_ERR_OTHER;
    std::string what =
        absl::StrCat(isSend ? "mpi.send to" : "mpi.recv from", " device ",
                     routeContext.peer, " (rank ", peerRank, ") on device ",
                     routeContext.device, " (rank ", rank, ")");
    MPI_Request request;
    int code =
        isSend
            ? MPI_Isend(buf, count, type, peerRank, messageTag, comm, &request)
            : MPI_Irecv(buf, count, type, peerRank, messageTag, comm, &request);
    if (code != MPI_SUCCESS) {
      fail(absl::InternalError(absl::StrCat(what, ": ", mpiErrorText(code))),
           /*local=*/true);
      return code;
    }
    std::vector<char> done(1, 0);
    // MPI_Test sets no MPI_ERROR of its status, which testRequest reads.
    MPI_Status status{};
    absl::Status waited = pollUntilDone(
        done, [&](size_t) { return testRequest(request, status); },
        Clock::now() + absl::ToChronoMilliseconds(options.timeout),
        [this] { return checkFailed(); });
    if (!waited.ok()) {
      std::vector<MPI_Request> requests{request};
      dropRequests(requests, done);
      if (absl::IsDeadlineExceeded(waited))
        fail(absl::DeadlineExceededError(absl::StrCat(
                 "timed out after ", absl::FormatDuration(options.timeout),
                 ": ", what, " never completed")),
             /*local=*/true);
      else if (!absl::IsAborted(waited))
        fail(absl::InternalError(absl::StrCat(what, ": ", waited.message())),
             /*local=*/true);
      return MPI_ERR_OTHER;
    }
    int received = count;
    if (!isSend)
      MPI_Get_count(&status, type, &received);
    if (received != count) {
      fail(absl::InvalidArgumentError(absl::StrCat(what, ": ", received,
                                                   " elements came where ",
                                                   count, " were expected")),
           /*local=*/true);
      return MPI_ERR_TRUNCATE;
    }
    return MPI_SUCCESS;
  }

  /// The call the device's thread routed last, for diagnostics.
  struct RouteContext {
    int64_t device = -1;
    int64_t peer = -1;
  };
  static thread_local RouteContext routeContext;
};

thread_local MpiState::RouteContext MpiState::routeContext;

namespace {

/// The MpiBackend of the run in progress: generated code's MPI_Send and
/// MPI_Recv wait as it says. Runs of one process follow each other.
std::atomic<MpiState *> activeState{nullptr};

int generatedSend(const void *buf, int count, MPI_Datatype type, int dest,
                  int tag, MPI_Comm comm) {
  MpiState *state = activeState.load(std::memory_order_acquire);
  if (!state)
    return MPI_Send(buf, count, type, dest, tag, comm);
  return state->blockingTransfer(true, const_cast<void *>(buf), count, type,
                                 dest, tag, comm);
}

int generatedRecv(void *buf, int count, MPI_Datatype type, int source, int tag,
                  MPI_Comm comm, MPI_Status *status) {
  MpiState *state = activeState.load(std::memory_order_acquire);
  if (!state)
    return MPI_Recv(buf, count, type, source, tag, comm, status);
  return state->blockingTransfer(false, buf, count, type, source, tag, comm);
}

} // namespace

//===----------------------------------------------------------------------===//
// MpiBackend
//===----------------------------------------------------------------------===//

absl::StatusOr<std::unique_ptr<MpiBackend>>
MpiBackend::create(MpiWorld &world, std::vector<int64_t> devices,
                   MpiOptions options) {
  if (devices.empty())
    return absl::InvalidArgumentError("an MPI runtime needs a device");
  auto state = std::make_unique<MpiState>();
  state->rank = world.rank();
  state->numRanks = world.size();
  state->options = options;
  state->options.ownership.numRanks = world.size();
  std::vector<int64_t> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  absl::flat_hash_map<int, int> perRank;
  for (size_t i = 0; i < sorted.size(); ++i) {
    int64_t device = sorted[i];
    if (device < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("device id ", device, " is negative"));
    if (i > 0 && sorted[i - 1] == device)
      return absl::InvalidArgumentError(
          absl::StrCat("device ", device, " appears twice"));
    int owner = state->options.ownership.ownerOf(device);
    if (owner < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", device, " is owned by no process: ", world.size(),
          " processes x ", state->options.ownership.perRank,
          " devices per process own the ids 0..",
          world.size() * state->options.ownership.perRank - 1,
          " (--devices-per-process)"));
    state->ownerOf[device] = owner;
    state->localIndexOf[device] = perRank[owner]++;
    if (owner == state->rank) {
      state->owned.push_back(device);
      state->states[device] = std::make_unique<DeviceState>();
      state->mailboxes[device] = std::make_unique<Mailbox>();
    }
  }
  for (const auto &[rank, count] : perRank)
    state->side = std::max<int64_t>(state->side, count);
  int64_t square = state->side * state->side;
  int64_t slots = static_cast<int64_t>(tagUpperBound) / (3 * square);
  if (slots < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "a rank owns ", state->side, " devices of this run; MPI's tags (up to ",
        tagUpperBound, ") cannot name every pair of them"));
  state->epochSlot = options.epoch % slots;
  state->deviceIds = std::move(devices);
  int noticeTag =
      static_cast<int>((state->epochSlot * 3 + MpiState::Notice) * square);
  if (state->involves(state->rank))
    MPI_Irecv(state->noticeBuffer.data(), kNoticeBytes, MPI_CHAR,
              MPI_ANY_SOURCE, noticeTag, runComm, &state->noticeRequest);
  return std::unique_ptr<MpiBackend>(new MpiBackend(std::move(state)));
}

MpiBackend::MpiBackend(std::unique_ptr<MpiState> state)
    : state(std::move(state)) {
  activeState.store(this->state.get(), std::memory_order_release);
}

MpiBackend::~MpiBackend() {
  MpiState *mine = state.get();
  activeState.compare_exchange_strong(mine, nullptr);
  std::lock_guard<std::mutex> lock(state->noticeMu);
  if (state->noticeRequest != MPI_REQUEST_NULL) {
    MPI_Cancel(&state->noticeRequest);
    MPI_Wait(&state->noticeRequest, MPI_STATUS_IGNORE);
  }
  // A notice to a rank that already left is never received; give the
  // others a moment, then let MPI finish or drop them.
  std::vector<char> done(state->noticeSends.size(), 0);
  std::vector<MPI_Status> statuses(state->noticeSends.size());
  if (!state->noticeSends.empty() &&
      !pollRequests(state->noticeSends, done, statuses,
                    Clock::now() + std::chrono::milliseconds(200),
                    [] { return false; })
           .ok())
    dropRequests(state->noticeSends, done);
}

absl::Span<const int64_t> MpiBackend::devices() const { return state->owned; }

absl::Status MpiBackend::groupStart(int64_t device) {
  if (state->checkFailed())
    return state->abortedStatus();
  absl::StatusOr<DeviceState *> own = state->ownDevice(device);
  if (!own.ok())
    return state->failWith(own.status());
  ++(*own)->groupDepth;
  return absl::OkStatus();
}

absl::Status MpiBackend::groupEnd(int64_t device) {
  absl::StatusOr<DeviceState *> own = state->ownDevice(device);
  if (!own.ok())
    return state->failWith(own.status());
  if ((*own)->groupDepth == 0)
    return state->failWith(absl::FailedPreconditionError(
        absl::StrCat("group_end on device ", device, " without group_start")));
  if (--(*own)->groupDepth > 0)
    return absl::OkStatus();
  if (state->checkFailed()) {
    for (auto &pending : (*own)->grouped) {
      std::vector<char> done(pending->messages.size(), 0);
      dropMessages(pending->messages, done);
    }
    (*own)->grouped.clear();
    return state->abortedStatus();
  }
  absl::Status status = state->wait(device, (*own)->grouped);
  if (!status.ok() && !absl::IsAborted(status))
    return state->failWith(status);
  return status;
}

absl::Status MpiBackend::send(int64_t device, int64_t peer, const void *buf,
                              int64_t bytes) {
  return state->call(device, [&](Pending &pending) -> absl::Status {
    pending.what = absl::StrCat("send on device ", device, " to device ", peer);
    if (absl::Status s = state->checkPeer(OpKind::Send, device, peer); !s.ok())
      return s;
    if (absl::Status s =
            MpiState::checkBuffer(OpKind::Send, device, buf, bytes, "send");
        !s.ok())
      return s;
    return state->postPieces(pending, true, MpiState::P2P, device, peer, buf,
                             bytes);
  });
}

absl::Status MpiBackend::recv(int64_t device, int64_t peer, void *buf,
                              int64_t bytes) {
  return state->call(device, [&](Pending &pending) -> absl::Status {
    pending.what =
        absl::StrCat("recv on device ", device, " from device ", peer);
    if (absl::Status s = state->checkPeer(OpKind::Recv, device, peer); !s.ok())
      return s;
    if (absl::Status s =
            MpiState::checkBuffer(OpKind::Recv, device, buf, bytes, "recv");
        !s.ok())
      return s;
    return state->postPieces(pending, false, MpiState::P2P, device, peer, buf,
                             bytes);
  });
}

absl::StatusOr<std::optional<Backend::MpiRoute>>
MpiBackend::mpiRoute(int64_t device, int64_t peer, bool isSend) {
  if (state->checkFailed())
    return state->abortedStatus();
  if (absl::StatusOr<DeviceState *> own = state->ownDevice(device); !own.ok())
    return state->failWith(own.status());
  OpKind kind = isSend ? OpKind::Send : OpKind::Recv;
  if (absl::Status s = state->checkPeer(kind, device, peer); !s.ok())
    return state->failWith(s);
  int peerRank = state->ownerOf.at(peer);
  if (peerRank == state->rank)
    return std::optional<MpiRoute>();
  MpiState::routeContext = {device, peer};
  int messageTag = isSend ? state->tag(MpiState::P2P, device, peer)
                          : state->tag(MpiState::P2P, peer, device);
  return std::optional<MpiRoute>(MpiRoute{peerRank, messageTag});
}

absl::Status MpiBackend::broadcast(int64_t device,
                                   absl::Span<const int64_t> members,
                                   int64_t root, const void *send, void *recv,
                                   int64_t bytes) {
  return state->call(device, [&](Pending &pending) -> absl::Status {
    pending.what = absl::StrCat("broadcast on group ", formatGroup(members),
                                " from device ", root);
    absl::StatusOr<int64_t> rank =
        state->rankIn(OpKind::Broadcast, device, members);
    if (!rank.ok())
      return rank.status();
    if (std::find(members.begin(), members.end(), root) == members.end())
      return absl::InvalidArgumentError(
          absl::StrCat(pending.what, ": the root is not a member"));
    if (absl::Status s = MpiState::checkBuffer(OpKind::Broadcast, device, recv,
                                               bytes, "recv");
        !s.ok())
      return s;
    if (device != root)
      return state->postPieces(pending, false, MpiState::Collective, device,
                               root, recv, bytes);
    if (absl::Status s = MpiState::checkBuffer(OpKind::Broadcast, device, send,
                                               bytes, "send");
        !s.ok())
      return s;
    for (int64_t member : members)
      if (member != device)
        if (absl::Status s =
                state->postPieces(pending, true, MpiState::Collective, device,
                                  member, send, bytes);
            !s.ok())
          return s;
    if (bytes > 0 && send != recv)
      std::memmove(recv, send, static_cast<size_t>(bytes));
    return absl::OkStatus();
  });
}

absl::Status MpiBackend::allGather(int64_t device,
                                   absl::Span<const int64_t> members,
                                   const void *send, void *recv,
                                   int64_t bytesPerRank) {
  return state->call(device, [&](Pending &pending) -> absl::Status {
    pending.what = absl::StrCat("all_gather on group ", formatGroup(members));
    absl::StatusOr<int64_t> rank =
        state->rankIn(OpKind::AllGather, device, members);
    if (!rank.ok())
      return rank.status();
    int64_t n = static_cast<int64_t>(members.size());
    if (absl::Status s = MpiState::checkBuffer(OpKind::AllGather, device, send,
                                               bytesPerRank, "send");
        !s.ok())
      return s;
    if (absl::Status s = MpiState::checkBuffer(OpKind::AllGather, device, recv,
                                               bytesPerRank * n, "recv");
        !s.ok())
      return s;
    char *out = static_cast<char *>(recv);
    if (bytesPerRank > 0 && out + *rank * bytesPerRank != send)
      std::memmove(out + *rank * bytesPerRank, send,
                   static_cast<size_t>(bytesPerRank));
    for (int64_t r = 0; r < n; ++r) {
      if (r == *rank)
        continue;
      if (absl::Status s = state->postPieces(
              pending, true, MpiState::Collective, device, members[r],
              out + *rank * bytesPerRank, bytesPerRank);
          !s.ok())
        return s;
      if (absl::Status s = state->postPieces(
              pending, false, MpiState::Collective, device, members[r],
              out + r * bytesPerRank, bytesPerRank);
          !s.ok())
        return s;
    }
    return absl::OkStatus();
  });
}

absl::Status MpiBackend::allToAll(int64_t device,
                                  absl::Span<const int64_t> members,
                                  const void *send, void *recv,
                                  int64_t bytesPerPeer) {
  return state->call(device, [&](Pending &pending) -> absl::Status {
    pending.what = absl::StrCat("all_to_all on group ", formatGroup(members));
    absl::StatusOr<int64_t> rank =
        state->rankIn(OpKind::AllToAll, device, members);
    if (!rank.ok())
      return rank.status();
    int64_t n = static_cast<int64_t>(members.size());
    int64_t total = bytesPerPeer * n;
    for (auto [buf, what] :
         {std::pair<const void *, const char *>{send, "send"}, {recv, "recv"}})
      if (absl::Status s =
              MpiState::checkBuffer(OpKind::AllToAll, device, buf, total, what);
          !s.ok())
        return s;
    // The blocks to send are copied first when they share memory with the
    // blocks being received.
    const char *in = static_cast<const char *>(send);
    char *out = static_cast<char *>(recv);
    if (total > 0 && in < out + total && out < in + total) {
      pending.temp.assign(in, in + total);
      in = pending.temp.data();
    }
    if (bytesPerPeer > 0)
      std::memmove(out + *rank * bytesPerPeer, in + *rank * bytesPerPeer,
                   static_cast<size_t>(bytesPerPeer));
    for (int64_t r = 0; r < n; ++r) {
      if (r == *rank)
        continue;
      if (absl::Status s = state->postPieces(
              pending, true, MpiState::Collective, device, members[r],
              in + r * bytesPerPeer, bytesPerPeer);
          !s.ok())
        return s;
      if (absl::Status s = state->postPieces(
              pending, false, MpiState::Collective, device, members[r],
              out + r * bytesPerPeer, bytesPerPeer);
          !s.ok())
        return s;
    }
    return absl::OkStatus();
  });
}

namespace {

/// Posts the messages of a reduction: block `sendBlock(r)` of this device
/// to member r, and member r's block for this device into temp slot r; the
/// finisher combines the n slots in rank order into `out`.
absl::Status
postReduction(MpiState &state, Pending &pending, int64_t device,
              absl::Span<const int64_t> members, int64_t self,
              const std::function<const char *(int64_t)> &sendBlock,
              int64_t count, DataType type, ReduceOp op, void *out) {
  int64_t n = static_cast<int64_t>(members.size());
  int64_t bytes = count * dataTypeSize(type);
  pending.temp.resize(static_cast<size_t>(bytes * n));
  char *slots = pending.temp.data();
  if (bytes > 0)
    std::memcpy(slots + self * bytes, sendBlock(self),
                static_cast<size_t>(bytes));
  for (int64_t r = 0; r < n; ++r) {
    if (r == self)
      continue;
    if (absl::Status s =
            state.postPieces(pending, true, MpiState::Collective, device,
                             members[r], sendBlock(r), bytes);
        !s.ok())
      return s;
    if (absl::Status s =
            state.postPieces(pending, false, MpiState::Collective, device,
                             members[r], slots + r * bytes, bytes);
        !s.ok())
      return s;
  }
  Pending *owner = &pending;
  pending.finish = [owner, n, bytes, count, type, op, out] {
    std::vector<const void *> inputs;
    for (int64_t r = 0; r < n; ++r)
      inputs.push_back(owner->temp.data() + r * bytes);
    reduceArrays(type, op, inputs.data(), n, count, out);
  };
  return absl::OkStatus();
}

} // namespace

absl::Status MpiBackend::allReduce(int64_t device,
                                   absl::Span<const int64_t> members,
                                   const void *send, void *recv, int64_t count,
                                   DataType type, ReduceOp op) {
  return state->call(device, [&](Pending &pending) -> absl::Status {
    pending.what = absl::StrCat("all_reduce on group ", formatGroup(members));
    absl::StatusOr<int64_t> rank =
        state->rankIn(OpKind::AllReduce, device, members);
    if (!rank.ok())
      return rank.status();
    int64_t bytes = count * dataTypeSize(type);
    for (auto [buf, what] :
         {std::pair<const void *, const char *>{send, "send"}, {recv, "recv"}})
      if (absl::Status s = MpiState::checkBuffer(OpKind::AllReduce, device, buf,
                                                 bytes, what);
          !s.ok())
        return s;
    const char *in = static_cast<const char *>(send);
    return postReduction(
        *state, pending, device, members, *rank, [in](int64_t) { return in; },
        count, type, op, recv);
  });
}

absl::Status MpiBackend::reduceScatter(int64_t device,
                                       absl::Span<const int64_t> members,
                                       const void *send, void *recv,
                                       int64_t recvCount, DataType type,
                                       ReduceOp op) {
  return state->call(device, [&](Pending &pending) -> absl::Status {
    pending.what =
        absl::StrCat("reduce_scatter on group ", formatGroup(members));
    absl::StatusOr<int64_t> rank =
        state->rankIn(OpKind::ReduceScatter, device, members);
    if (!rank.ok())
      return rank.status();
    int64_t bytes = recvCount * dataTypeSize(type);
    int64_t n = static_cast<int64_t>(members.size());
    if (absl::Status s = MpiState::checkBuffer(OpKind::ReduceScatter, device,
                                               send, bytes * n, "send");
        !s.ok())
      return s;
    if (absl::Status s = MpiState::checkBuffer(OpKind::ReduceScatter, device,
                                               recv, bytes, "recv");
        !s.ok())
      return s;
    const char *in = static_cast<const char *>(send);
    return postReduction(
        *state, pending, device, members, *rank,
        [in, bytes](int64_t r) { return in + r * bytes; }, recvCount, type, op,
        recv);
  });
}

absl::Status MpiBackend::firstError() const { return state->firstError(); }

void MpiBackend::abort(const absl::Status &error) {
  state->fail(error, /*local=*/true);
}

} // namespace polymesh::runtime

//===----------------------------------------------------------------------===//
// Generated code's MPI calls
//===----------------------------------------------------------------------===//

std::vector<std::pair<std::string, void *>>
polymesh::runtime::mpiCodegenSymbols() {
  std::vector<std::pair<std::string, void *>> symbols = {
      {"MPI_Send", reinterpret_cast<void *>(&generatedSend)},
      {"MPI_Recv", reinterpret_cast<void *>(&generatedRecv)},
  };
#ifdef OPEN_MPI
  // Open MPI's handles are addresses of these objects (MPICH's are
  // integer constants the lowering writes into the code).
  symbols.push_back({"ompi_mpi_comm_world", &ompi_mpi_comm_world});
  symbols.push_back({"ompi_mpi_int8_t", &ompi_mpi_int8_t});
#endif
  return symbols;
}

const char *polymesh::runtime::mpiImplementationName() {
#ifdef OPEN_MPI
  return "OpenMPI";
#else
  return "MPICH";
#endif
}
