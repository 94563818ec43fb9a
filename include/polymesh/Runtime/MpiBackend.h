//===- MpiBackend.h - Devices over the processes of an MPI job -*- C++ -*-===//
//
// Part of Polymesh. Plain C++17, Abseil and MPI's C API (only in the .cpp):
// no MLIR or LLVM types.
//
//===----------------------------------------------------------------------===//
//
// A run whose devices live in several processes, one MPI rank each. Every
// process creates the same runtime (the same device list, in the same order
// of runtimes) and drives only the devices it owns, one thread each; a
// device owned elsewhere is reached through MPI.
//
// Ownership (docs/multi-process.md): device id d lives in rank d / K, where K
// is the devices per process (default: ceil((max id + 1) / P) over P ranks,
// so ids 0..n-1 split into P equal blocks). A device whose d / K is not a
// rank is owned by no process and the runtime refuses the run, naming it.
//
// Every call of the C ABI (PolymeshRuntime.h) keeps its meaning. Transfers
// between devices of two processes become MPI point-to-point messages;
// those between two devices of one process are copied in memory, where the
// receiving device's mailbox matches each send with its receive:
//  - send/recv: one message per call (split into 1 GiB pieces), matched in
//    call order per (sender, receiver) pair, as MPI matches by source and
//    tag; the tag names the pair by the devices' indices within their
//    processes.
//  - collectives: decomposed into messages between members (a broadcast is
//    the root sending to each member, an all-gather every member sending
//    its block to every other, reductions every member receiving the
//    blocks it reduces and combining them in rank order with the same
//    reduceArrays as the loopback backend, so results are bit-identical).
//    Collectives use their own tags: between two devices they match in call
//    order over all communicators, which generated code satisfies (every
//    device walks the same plan steps in order).
//  - groups: calls are posted at once (MPI's sends and receives do not
//    block) and group_end waits for all of them, so a permutation of
//    send/recv pairs never deadlocks.
// Every wait polls with a deadline (the runtime's timeout). The first error
// of a process is sent to every other process of the run, which fails at
// once with "rank R: <error>" instead of waiting for its timeout.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_RUNTIME_MPIBACKEND_H
#define POLYMESH_RUNTIME_MPIBACKEND_H

#include "polymesh/Runtime/Runtime.h"
#include "polymesh/Runtime/Store.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace polymesh::runtime {

/// The processes of the MPI job this process belongs to (MPI_COMM_WORLD,
/// with MPI_THREAD_MULTIPLE). One per process; MPI is finalized when it is
/// destroyed. Its collectives are for the tools around a run (agreeing on
/// the program, gathering verdicts); each waits at most `timeout`.
class MpiWorld {
public:
  /// Initializes MPI. Fails when MPI was initialized already or does not
  /// provide MPI_THREAD_MULTIPLE (one thread per device calls MPI).
  static absl::StatusOr<std::unique_ptr<MpiWorld>>
  init(int *argc, char ***argv, absl::Duration timeout = absl::Seconds(60));
  ~MpiWorld();

  int rank() const { return rankId; }
  int size() const { return numRanks; }
  absl::Duration timeout() const { return waitLimit; }

  /// Every rank's `value`, by rank, on every rank.
  absl::StatusOr<std::vector<uint64_t>> allGather(uint64_t value);
  /// Returns once every rank called it, within `limit` (not the world's
  /// timeout: ranks reach it after work of their own, like compiling, whose
  /// length differs between ranks); `what` names the meeting in an error.
  absl::Status barrier(absl::Duration limit, const char *what);
  /// Every rank's `text` on rank 0 (by rank); other ranks get an empty list.
  absl::StatusOr<std::vector<std::string>>
  gatherToRoot(const std::string &text);
  /// Moves byte blocks between ranks: every rank passes the blocks it sends
  /// (to rank, bytes) and the buffers it receives into (from rank, size), in
  /// one agreed order; block i from rank r to rank s matches the i-th
  /// receive on s from r.
  struct Block {
    int peer = 0;
    void *data = nullptr;
    int64_t bytes = 0;
  };
  absl::Status exchange(const std::vector<Block> &sends,
                        const std::vector<Block> &recvs);
  /// Ends the whole job at once (MPI_Abort) with `code`.
  [[noreturn]] void abortJob(int code);

  /// The next run's number: every rank numbers its runtimes in creation
  /// order, which keeps a late message of one run out of the next.
  int64_t nextEpoch() { return epochs++; }

private:
  MpiWorld() = default;
  int rankId = 0;
  int numRanks = 1;
  absl::Duration waitLimit;
  int64_t epochs = 0;
};

/// Messages of any size between the processes of the world, on a
/// communicator of their own: sends do not block, receives are polled. All
/// methods may be called from several threads at once. Creating a channel
/// is collective: every rank creates its channels in the same order.
class MpiChannel {
public:
  static absl::StatusOr<std::unique_ptr<MpiChannel>> create(MpiWorld &world);
  /// Waits a moment for sends still in flight, then frees the communicator.
  ~MpiChannel();

  int rank() const { return rankId; }
  int size() const { return numRanks; }

  /// Sends `message` to rank `to` (not this one); the channel keeps it
  /// until MPI is done with it. Messages from one rank to another arrive in
  /// order.
  absl::Status send(int to, std::string message);
  /// A message that arrived, from any rank: (sender, message).
  struct Received {
    int from = 0;
    std::string message;
  };
  absl::StatusOr<std::optional<Received>> poll();

  struct State;

private:
  explicit MpiChannel(std::unique_ptr<State> state);
  std::unique_ptr<State> state;
  int rankId = 0;
  int numRanks = 1;
};

/// A Store (Store.h) over an MpiChannel: a set is sent to every other rank
/// of the world, a get polls the channel until the key came. For NCCL's
/// unique ids when the processes of a run are the ranks of an MPI job: no
/// server, no address, any number of hosts.
class MpiStore final : public Store {
public:
  explicit MpiStore(std::unique_ptr<MpiChannel> channel);
  ~MpiStore() override;
  absl::Status set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> get(absl::string_view key,
                                  absl::Duration timeout) override;
  std::string describe() const override;

  struct State;

private:
  std::unique_ptr<State> state;
};

/// Which process owns which device.
struct DeviceOwnership {
  int numRanks = 1;
  /// Devices per process.
  int64_t perRank = 1;

  /// The default over `devices` (see the file comment) when `perRank` <= 0,
  /// else `perRank` as given.
  static DeviceOwnership over(const std::vector<int64_t> &devices, int numRanks,
                              int64_t perRank);
  /// The owning rank, or -1 when none.
  int ownerOf(int64_t device) const;
};

struct MpiOptions {
  /// The longest any call blocks before it fails with a diagnostic.
  absl::Duration timeout = absl::Seconds(10);
  DeviceOwnership ownership;
  /// From MpiWorld::nextEpoch: the same on every rank for the same run.
  int64_t epoch = 0;
};

class MpiState;

/// What code of the MPI lowering (mpi.send and mpi.recv, lowered by
/// upstream's MPI-to-LLVM patterns) links against in this process: MPI_Send
/// and MPI_Recv bound to calls whose waits end at the running MpiBackend's
/// timeout or at the run's first error, on this rank or a notice from
/// another (a peer that died or never comes must not hang a blocking MPI
/// call), and the handles the implementation's ABI names (Open MPI:
/// ompi_mpi_comm_world, ompi_mpi_int8_t). Outside a run they are plain
/// MPI_Send and MPI_Recv.
std::vector<std::pair<std::string, void *>> mpiCodegenSymbols();
/// The "MPI:Implementation" of the mpi.h this was built against, as the
/// MPI-to-LLVM lowering names it: "OpenMPI" or "MPICH".
const char *mpiImplementationName();

class MpiBackend final : public Backend {
public:
  /// `devices`: distinct non-negative ids, the same list on every rank.
  /// Fails when a device is owned by no rank.
  static absl::StatusOr<std::unique_ptr<MpiBackend>>
  create(MpiWorld &world, std::vector<int64_t> devices, MpiOptions options);
  ~MpiBackend() override;

  /// The devices this process owns: the ones its launcher runs.
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
  /// A peer in another process: its rank and the tag of the pair's
  /// messages in this run. Fails (and fails the run) on a device this
  /// process does not own or a peer outside the run.
  absl::StatusOr<std::optional<MpiRoute>> mpiRoute(int64_t device, int64_t peer,
                                                   bool isSend) override;

private:
  explicit MpiBackend(std::unique_ptr<MpiState> state);
  std::unique_ptr<MpiState> state;
};

} // namespace polymesh::runtime

#endif // POLYMESH_RUNTIME_MPIBACKEND_H
