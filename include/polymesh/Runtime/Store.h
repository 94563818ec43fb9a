//===- Store.h - Rendezvous stores and the launch environment ---*- C++ -*-===//
//
// Part of Polymesh. Plain C++17, POSIX and Abseil: no CUDA, so the stores
// are built and tested on every machine.
//
//===----------------------------------------------------------------------===//
//
// A Store is the small key-value rendezvous the processes of one job use to
// exchange NCCL's unique ids (128 opaque bytes per communicator) before any
// communicator exists. Every key is set exactly once, by one process, and
// read by any number of processes, which wait until it is set:
//
//  - MemoryStore: threads of one process (one process driving all local
//    GPUs needs no other).
//  - FileStore: a directory every process can see (a local or shared file
//    system). A value appears atomically: it is written to a temporary file
//    and renamed into place; readers poll for it.
//  - TcpStore: rank 0 serves the keys on MASTER_ADDR:MASTER_PORT, the other
//    ranks connect to it. POSIX sockets, one small binary protocol.
//
// Every wait has a deadline, and every failure says which key, file or
// address it concerns.
//
// parseLaunchEnvironment reads the variables that launchers (torchrun,
// Slurm wrappers, mpirun scripts) set for one process per GPU: RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_RUNTIME_STORE_H
#define POLYMESH_RUNTIME_STORE_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace polymesh::runtime {

/// A write-once key-value store shared by the processes of one job. All
/// methods may be called from several threads at once.
class Store {
public:
  virtual ~Store();

  /// Publishes `value` under `key`. A key is set once: setting a key that is
  /// already set fails with AlreadyExists (for a FileStore, a file left by an
  /// earlier job in the same directory is reported this way).
  virtual absl::Status set(absl::string_view key, absl::string_view value) = 0;

  /// The value of `key`, waiting until it is set, but no longer than
  /// `timeout`: DeadlineExceeded naming the key and the store otherwise.
  virtual absl::StatusOr<std::string> get(absl::string_view key,
                                          absl::Duration timeout) = 0;

  /// What the store is, for diagnostics: "file store /tmp/job",
  /// "TCP store 127.0.0.1:29500 (served here)".
  virtual std::string describe() const = 0;
};

/// Threads of one process.
class MemoryStore final : public Store {
public:
  MemoryStore();
  ~MemoryStore() override;
  absl::Status set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> get(absl::string_view key,
                                  absl::Duration timeout) override;
  std::string describe() const override;

private:
  struct State;
  std::unique_ptr<State> state;
};

/// A directory. Use a fresh directory per job: a file left by an earlier
/// job would be read as this job's value (a second set of the same key is
/// caught, a read that comes first is not).
class FileStore final : public Store {
public:
  /// Creates `directory` (and missing parents) when it does not exist.
  static absl::StatusOr<std::unique_ptr<FileStore>>
  create(std::string directory);
  ~FileStore() override;

  absl::Status set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> get(absl::string_view key,
                                  absl::Duration timeout) override;
  std::string describe() const override;

  /// The file that holds `key`: the key with every byte outside
  /// [A-Za-z0-9_-] written as %XX, or, when that is long, a prefix of it
  /// and a 128-bit hash of the key. The file holds the key too, and a read
  /// checks it.
  std::string pathOf(absl::string_view key) const;

private:
  explicit FileStore(std::string directory);
  std::string directory;
};

struct TcpStoreOptions {
  /// Where the server is: a host name or address (MASTER_ADDR). The server
  /// uses it only in describe().
  std::string host = "127.0.0.1";
  /// MASTER_PORT. The server may pass 0 for a free port (see port()).
  int port = 0;
  /// True on exactly one process of the job (rank 0): it serves the keys
  /// from a thread of its own and reads and writes them without a socket.
  bool isServer = false;
  /// The address the server listens on; empty: every interface (IPv6 and
  /// IPv4 where the system has both).
  std::string listenAddress;
  /// How long a client keeps trying to reach the server (rank 0 may start
  /// later than the others).
  absl::Duration connectTimeout = absl::Seconds(60);
  /// How long the server's destructor waits for clients that are still
  /// connected to disconnect before it closes their connections: rank 0
  /// may finish first while other ranks are still reading keys.
  absl::Duration shutdownTimeout = absl::Seconds(30);
};

/// Rank 0 serves, the other ranks connect. Clients open one connection per
/// concurrent request, so a thread waiting for a key never holds up another
/// thread that would set it.
class TcpStore final : public Store {
public:
  static absl::StatusOr<std::unique_ptr<TcpStore>>
  create(TcpStoreOptions options);
  ~TcpStore() override;

  absl::Status set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> get(absl::string_view key,
                                  absl::Duration timeout) override;
  std::string describe() const override;

  /// The port the server listens on (the one chosen when options.port was
  /// 0), or the port clients connect to.
  int port() const;

  struct Impl;

private:
  explicit TcpStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

/// What a launcher told this process (one process per GPU).
struct LaunchEnvironment {
  /// RANK: this process among all processes of the job, 0..worldSize-1.
  int64_t rank = 0;
  /// WORLD_SIZE: number of processes.
  int64_t worldSize = 1;
  /// LOCAL_RANK: this process among those on its host; the CUDA device it
  /// drives.
  int64_t localRank = 0;
  /// MASTER_ADDR and MASTER_PORT: where rank 0 serves its TcpStore; empty
  /// and 0 when not set.
  std::string masterAddr;
  int masterPort = 0;
  /// POLYMESH_STORE_DIR: a directory for a FileStore instead; empty when
  /// not set.
  std::string storeDir;
};

/// Looks up an environment variable; nullopt when it is not set.
using EnvironmentLookup =
    std::function<std::optional<std::string>(const char *name)>;

/// The process environment (getenv).
EnvironmentLookup processEnvironment();

/// True when the launcher variables say this is one process of a job:
/// RANK or WORLD_SIZE is set.
bool isLaunchedJob(const EnvironmentLookup &lookup = processEnvironment());

/// Reads RANK, WORLD_SIZE and LOCAL_RANK (all three required: decimal,
/// non-negative, RANK and LOCAL_RANK below WORLD_SIZE) and the optional
/// MASTER_ADDR, MASTER_PORT (1..65535) and POLYMESH_STORE_DIR. Errors name
/// the variable and its value.
absl::StatusOr<LaunchEnvironment>
parseLaunchEnvironment(const EnvironmentLookup &lookup = processEnvironment());

/// The store of a launched job: a FileStore on POLYMESH_STORE_DIR when it is
/// set, otherwise a TcpStore on MASTER_ADDR:MASTER_PORT served by rank 0
/// (an error when either is missing). `connectTimeout` bounds how long a
/// client waits for rank 0 to come up.
absl::StatusOr<std::unique_ptr<Store>>
createStoreFromEnvironment(const LaunchEnvironment &environment,
                           absl::Duration connectTimeout = absl::Seconds(60));

} // namespace polymesh::runtime

#endif // POLYMESH_RUNTIME_STORE_H
