//===- StoreTest.cpp - Unit tests for the rendezvous stores ---------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The stores that carry NCCL's unique ids, tested for real: threads of this
// process, and processes forked from it that play the ranks of a job (a
// rank-0 process serving the TCP store on the loopback interface, the other
// ranks connecting to it), exchanging 128-byte ids with every byte value.
// The failure modes: a key nobody sets, a server that never comes or goes
// away, a port that belongs to another service, a key set twice, a stale
// or corrupt file, and bad launcher variables.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/Store.h"

#include "absl/strings/str_cat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace polymesh::runtime;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

/// A 128-byte id (NCCL_UNIQUE_ID_BYTES) for `rank`: every byte value
/// appears, zeros and 0xff included, and ids of different ranks differ.
std::string idFor(int rank) {
  std::string id(128, '\0');
  for (int i = 0; i < 128; ++i)
    id[i] = static_cast<char>((i * 2 + rank * 37) & 0xff);
  return id;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// A fresh directory under the test's temporary directory.
std::string freshDirectory(const std::string &name) {
  const char *base = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(base && *base ? base : "/tmp",
                                     "/polymesh-", name, "-XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  const char *made = ::mkdtemp(buffer.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
  return made ? std::string(made) : pattern;
}

/// A port on the loopback interface that was free a moment ago.
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

/// Runs `body(rank)` in `n` forked processes and waits for all of them, at
/// most `limit`; a process that is still running then is killed. Returns
/// one line per process that failed. The children leave with _exit, so
/// nothing of the parent (GoogleTest included) runs twice.
std::vector<std::string>
runProcesses(int n, const std::function<int(int)> &body,
             absl::Duration limit = absl::Seconds(60)) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = body(rank);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<std::string> failures;
  auto start = std::chrono::steady_clock::now();
  std::vector<bool> done(n, false);
  int remaining = n;
  while (remaining > 0) {
    for (int rank = 0; rank < n; ++rank) {
      if (done[rank])
        continue;
      int status = 0;
      if (::waitpid(pids[rank], &status, WNOHANG) != pids[rank])
        continue;
      done[rank] = true;
      --remaining;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        failures.push_back(absl::StrCat(
            "rank ", rank, ": ",
            WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                              : absl::StrCat("signal ", WTERMSIG(status))));
    }
    if (remaining > 0 && secondsSince(start) > absl::ToDoubleSeconds(limit)) {
      for (int rank = 0; rank < n; ++rank)
        if (!done[rank]) {
          ::kill(pids[rank], SIGKILL);
          ::waitpid(pids[rank], nullptr, 0);
          failures.push_back(absl::StrCat("rank ", rank, ": still running"));
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return failures;
}

/// The exchange every rank of a job does: set its own id, read every other
/// rank's, check the bytes. Returns 0 or prints why and returns 1.
int exchangeIds(Store &store, int rank, int n, const std::string &prefix) {
  if (absl::Status set =
          store.set(absl::StrCat(prefix, "/", rank), idFor(rank));
      !set.ok()) {
    std::fprintf(stderr, "rank %d: set: %s\n", rank,
                 std::string(set.message()).c_str());
    return 1;
  }
  for (int peer = 0; peer < n; ++peer) {
    absl::StatusOr<std::string> id =
        store.get(absl::StrCat(prefix, "/", peer), absl::Seconds(30));
    if (!id.ok()) {
      std::fprintf(stderr, "rank %d: get %d: %s\n", rank, peer,
                   std::string(id.status().message()).c_str());
      return 1;
    }
    if (*id != idFor(peer)) {
      std::fprintf(stderr, "rank %d: id of rank %d has wrong bytes\n", rank,
                   peer);
      return 1;
    }
  }
  return 0;
}

/// Several threads of one process, one store each or one shared store.
void exchangeOnThreads(const std::vector<Store *> &stores, int n) {
  std::vector<int> results(n, -1);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank)
    threads.emplace_back([&, rank] {
      results[rank] =
          exchangeIds(*stores[rank % stores.size()], rank, n, "threads");
    });
  for (std::thread &t : threads)
    t.join();
  for (int rank = 0; rank < n; ++rank)
    EXPECT_EQ(results[rank], 0) << "rank " << rank;
}

std::unique_ptr<TcpStore>
makeServer(absl::Duration shutdown = absl::Seconds(5)) {
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.listenAddress = "127.0.0.1";
  options.port = 0;
  options.isServer = true;
  options.shutdownTimeout = shutdown;
  absl::StatusOr<std::unique_ptr<TcpStore>> server = TcpStore::create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::unique_ptr<TcpStore>
makeClient(int port, absl::Duration connectTimeout = absl::Seconds(30)) {
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.connectTimeout = connectTimeout;
  absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

//===----------------------------------------------------------------------===//
// MemoryStore
//===----------------------------------------------------------------------===//

TEST(MemoryStoreTest, ExchangesIdsBetweenThreads) {
  MemoryStore store;
  exchangeOnThreads({&store}, 8);
}

TEST(MemoryStoreTest, GetWaitsForTheSet) {
  MemoryStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(store.set("late", idFor(1)).ok());
  });
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> value = store.get("late", absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, idFor(1));
  EXPECT_GE(secondsSince(start), 0.09);
}

TEST(MemoryStoreTest, KeysAreSetOnce) {
  MemoryStore store;
  ASSERT_TRUE(store.set("k", "a").ok());
  absl::Status again = store.set("k", "b");
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_THAT(again.message(), HasSubstr("'k' is already set"));
  EXPECT_EQ(*store.get("k", absl::ZeroDuration()), "a");
}

TEST(MemoryStoreTest, TimesOutWhenNobodySets) {
  MemoryStore store;
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> value =
      store.get("never", absl::Milliseconds(200));
  double elapsed = secondsSince(start);
  EXPECT_TRUE(absl::IsDeadlineExceeded(value.status())) << value.status();
  EXPECT_THAT(value.status().message(),
              AllOf(HasSubstr("'never' was not set"), HasSubstr("200ms")));
  EXPECT_GE(elapsed, 0.19);
  EXPECT_LT(elapsed, 5.0);
}

TEST(MemoryStoreTest, RejectsEmptyKeys) {
  MemoryStore store;
  EXPECT_TRUE(absl::IsInvalidArgument(store.set("", "x")));
  EXPECT_TRUE(
      absl::IsInvalidArgument(store.get("", absl::ZeroDuration()).status()));
}

//===----------------------------------------------------------------------===//
// FileStore
//===----------------------------------------------------------------------===//

std::unique_ptr<FileStore> makeFileStore(const std::string &dir) {
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::create(dir);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

TEST(FileStoreTest, RoundTripsBinaryIds) {
  std::unique_ptr<FileStore> store = makeFileStore(freshDirectory("file"));
  ASSERT_TRUE(store);
  std::string all(256, '\0');
  for (int i = 0; i < 256; ++i)
    all[i] = static_cast<char>(i);
  ASSERT_TRUE(store->set("polymesh/nccl/world", idFor(3)).ok());
  ASSERT_TRUE(store->set("every byte", all).ok());
  ASSERT_TRUE(store->set("empty value", "").ok());
  EXPECT_EQ(*store->get("polymesh/nccl/world", absl::Seconds(1)), idFor(3));
  EXPECT_EQ(*store->get("every byte", absl::Seconds(1)), all);
  EXPECT_EQ(*store->get("empty value", absl::Seconds(1)), "");
}

TEST(FileStoreTest, CreatesMissingDirectories) {
  std::string dir = freshDirectory("file") + "/a/b/c";
  std::unique_ptr<FileStore> store = makeFileStore(dir);
  ASSERT_TRUE(store);
  struct stat info;
  EXPECT_EQ(::stat(dir.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(store->describe(), "file store " + dir);
}

TEST(FileStoreTest, RefusesAFileAsDirectory) {
  std::string file = freshDirectory("file") + "/plain";
  int fd = ::open(file.c_str(), O_CREAT | O_WRONLY, 0644);
  ::close(fd);
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::create(file);
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("is not a directory"));
  EXPECT_TRUE(absl::IsInvalidArgument(FileStore::create("").status()));
}

TEST(FileStoreTest, ExchangesIdsBetweenThreads) {
  std::string dir = freshDirectory("file");
  // One store object per rank, as separate processes would have.
  std::vector<std::unique_ptr<FileStore>> owned;
  std::vector<Store *> stores;
  for (int rank = 0; rank < 6; ++rank) {
    owned.push_back(makeFileStore(dir));
    ASSERT_TRUE(owned.back());
    stores.push_back(owned.back().get());
  }
  exchangeOnThreads(stores, 6);
}

TEST(FileStoreTest, ExchangesIdsBetweenProcesses) {
  std::string dir = freshDirectory("file");
  std::vector<std::string> failures = runProcesses(4, [&](int rank) {
    // Rank 0 comes late: the others must wait for its id.
    if (rank == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::create(dir);
    if (!store.ok())
      return 2;
    return exchangeIds(**store, rank, 4, "procs");
  });
  EXPECT_THAT(failures, ::testing::IsEmpty());
  // Nothing but the four values is left: no temporary file.
  int files = 0;
  for (int rank = 0; rank < 4; ++rank) {
    std::string path = makeFileStore(dir)->pathOf(absl::StrCat("procs/", rank));
    files += ::access(path.c_str(), F_OK) == 0;
  }
  EXPECT_EQ(files, 4);
}

TEST(FileStoreTest, TimesOutWhenNobodySets) {
  std::string dir = freshDirectory("file");
  std::unique_ptr<FileStore> store = makeFileStore(dir);
  ASSERT_TRUE(store);
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> value =
      store->get("polymesh/nccl/world", absl::Milliseconds(300));
  double elapsed = secondsSince(start);
  EXPECT_TRUE(absl::IsDeadlineExceeded(value.status())) << value.status();
  EXPECT_THAT(value.status().message(),
              AllOf(HasSubstr("'polymesh/nccl/world' was not set"),
                    HasSubstr(dir), HasSubstr("300ms")));
  EXPECT_GE(elapsed, 0.29);
  EXPECT_LT(elapsed, 5.0);
}

TEST(FileStoreTest, AStaleFileIsReportedOnSet) {
  std::string dir = freshDirectory("file");
  ASSERT_TRUE(makeFileStore(dir)->set("world", idFor(0)).ok());
  // A second job in the same directory.
  absl::Status again = makeFileStore(dir)->set("world", idFor(1));
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_THAT(again.message(), AllOf(HasSubstr("'world' is already set"),
                                     HasSubstr("fresh directory")));
}

TEST(FileStoreTest, FileNamesStayInsideTheDirectory) {
  std::string dir = freshDirectory("file");
  std::unique_ptr<FileStore> store = makeFileStore(dir);
  ASSERT_TRUE(store);
  for (const char *key : {"../escape", "/abs", ".hidden", "a/b", "%41"}) {
    std::string path = store->pathOf(key);
    EXPECT_EQ(path.rfind(dir + "/", 0), 0u) << path;
    EXPECT_EQ(path.find('/', dir.size() + 1), std::string::npos) << path;
    EXPECT_NE(path[dir.size() + 1], '.') << path;
  }
  // Distinct keys, distinct files ("%41" is not "A").
  EXPECT_NE(store->pathOf("%41"), store->pathOf("A"));
  ASSERT_TRUE(store->set("../escape", "x").ok());
  EXPECT_EQ(*store->get("../escape", absl::Seconds(1)), "x");
}

TEST(FileStoreTest, LongKeysAreHashed) {
  std::unique_ptr<FileStore> store = makeFileStore(freshDirectory("file"));
  ASSERT_TRUE(store);
  // A communicator key for a 512-device group, and one that differs only
  // at the end.
  std::string key = "polymesh/nccl/comm/";
  for (int i = 0; i < 512; ++i)
    absl::StrAppend(&key, i, ",");
  std::string other = key + "512";
  std::string path = store->pathOf(key);
  std::string name = path.substr(path.find_last_of('/') + 1);
  EXPECT_LE(name.size(), 140u);
  EXPECT_NE(path, store->pathOf(other));
  ASSERT_TRUE(store->set(key, idFor(1)).ok());
  ASSERT_TRUE(store->set(other, idFor(2)).ok());
  EXPECT_EQ(*store->get(key, absl::Seconds(1)), idFor(1));
  EXPECT_EQ(*store->get(other, absl::Seconds(1)), idFor(2));
}

TEST(FileStoreTest, ACorruptFileIsAnError) {
  std::string dir = freshDirectory("file");
  std::unique_ptr<FileStore> store = makeFileStore(dir);
  ASSERT_TRUE(store);
  std::string path = store->pathOf("world");
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_EQ(::write(fd, "garbage", 7), 7);
  ::close(fd);
  absl::StatusOr<std::string> value = store->get("world", absl::Seconds(1));
  EXPECT_TRUE(absl::IsDataLoss(value.status())) << value.status();
  EXPECT_THAT(value.status().message(), HasSubstr("not a store file"));
}

//===----------------------------------------------------------------------===//
// TcpStore
//===----------------------------------------------------------------------===//

TEST(TcpStoreTest, ServerAndClientsExchangeIdsOnThreads) {
  std::unique_ptr<TcpStore> server = makeServer();
  ASSERT_TRUE(server);
  EXPECT_GT(server->port(), 0);
  EXPECT_THAT(server->describe(), HasSubstr("(served here)"));
  std::vector<std::unique_ptr<TcpStore>> clients;
  std::vector<Store *> stores{server.get()};
  for (int rank = 1; rank < 6; ++rank) {
    clients.push_back(makeClient(server->port()));
    ASSERT_TRUE(clients.back());
    stores.push_back(clients.back().get());
  }
  exchangeOnThreads(stores, 6);
}

TEST(TcpStoreTest, ProcessesExchangeIdsThroughRankZero) {
  // Rank 0 serves on a free port and tells the others which one through a
  // pipe, as a launcher would through MASTER_PORT.
  constexpr int kRanks = 4;
  int portPipe[2];
  ASSERT_EQ(::pipe(portPipe), 0);
  std::vector<std::string> failures = runProcesses(kRanks, [&](int rank) {
    if (rank == 0) {
      ::close(portPipe[0]);
      std::unique_ptr<TcpStore> server = makeServer(absl::Seconds(20));
      if (!server)
        return 2;
      int port = server->port();
      for (int i = 1; i < kRanks; ++i)
        if (::write(portPipe[1], &port, sizeof(port)) != sizeof(port))
          return 3;
      ::close(portPipe[1]);
      // The destructor waits for the clients to disconnect.
      return exchangeIds(*server, rank, kRanks, "procs");
    }
    ::close(portPipe[1]);
    int port = 0;
    if (::read(portPipe[0], &port, sizeof(port)) != sizeof(port))
      return 4;
    std::unique_ptr<TcpStore> client = makeClient(port);
    if (!client)
      return 5;
    return exchangeIds(*client, rank, kRanks, "procs");
  });
  ::close(portPipe[0]);
  ::close(portPipe[1]);
  EXPECT_THAT(failures, ::testing::IsEmpty());
}

TEST(TcpStoreTest, ClientsWaitForALateServer) {
  int port = freePort();
  absl::StatusOr<std::string> value;
  std::unique_ptr<TcpStore> client = makeClient(port, absl::Seconds(20));
  ASSERT_TRUE(client);
  std::thread reader([&] { value = client->get("world", absl::Seconds(20)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.listenAddress = "127.0.0.1";
  options.port = port;
  options.isServer = true;
  absl::StatusOr<std::unique_ptr<TcpStore>> server = TcpStore::create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->port(), port);
  ASSERT_TRUE((*server)->set("world", idFor(0)).ok());
  reader.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, idFor(0));
  client.reset();
}

TEST(TcpStoreTest, AGetDoesNotHoldUpASetOfAnotherThread) {
  // Two device threads of one client process: one waits for a key that the
  // other sets; each request has its own connection.
  std::unique_ptr<TcpStore> server = makeServer();
  ASSERT_TRUE(server);
  std::unique_ptr<TcpStore> client = makeClient(server->port());
  ASSERT_TRUE(client);
  absl::StatusOr<std::string> value;
  std::thread reader([&] { value = client->get("group", absl::Seconds(20)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(client->set("group", idFor(7)).ok());
  reader.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, idFor(7));
}

TEST(TcpStoreTest, KeysAreSetOnce) {
  std::unique_ptr<TcpStore> server = makeServer();
  ASSERT_TRUE(server);
  std::unique_ptr<TcpStore> client = makeClient(server->port());
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->set("k", "a").ok());
  absl::Status fromClient = client->set("k", "b");
  EXPECT_TRUE(absl::IsAlreadyExists(fromClient)) << fromClient;
  EXPECT_THAT(fromClient.message(), HasSubstr("'k' is already set"));
  absl::Status fromServer = server->set("k", "c");
  EXPECT_TRUE(absl::IsAlreadyExists(fromServer)) << fromServer;
  EXPECT_EQ(*server->get("k", absl::ZeroDuration()), "a");
  EXPECT_EQ(*client->get("k", absl::ZeroDuration()), "a");
}

TEST(TcpStoreTest, LargeValues) {
  std::unique_ptr<TcpStore> server = makeServer();
  ASSERT_TRUE(server);
  std::unique_ptr<TcpStore> client = makeClient(server->port());
  ASSERT_TRUE(client);
  std::string big(4 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<char>(i * 7 + (i >> 12));
  ASSERT_TRUE(client->set("big", big).ok());
  EXPECT_EQ(*client->get("big", absl::Seconds(10)), big);
  EXPECT_EQ(*server->get("big", absl::Seconds(10)), big);
}

TEST(TcpStoreTest, TimesOutWhenNobodySets) {
  std::unique_ptr<TcpStore> server = makeServer();
  ASSERT_TRUE(server);
  std::unique_ptr<TcpStore> client = makeClient(server->port());
  ASSERT_TRUE(client);
  for (Store *store : {static_cast<Store *>(client.get()),
                       static_cast<Store *>(server.get())}) {
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> value =
        store->get("never", absl::Milliseconds(300));
    double elapsed = secondsSince(start);
    EXPECT_TRUE(absl::IsDeadlineExceeded(value.status())) << value.status();
    EXPECT_THAT(value.status().message(),
                AllOf(HasSubstr("'never' was not set"),
                      HasSubstr(absl::StrCat("127.0.0.1:", server->port()))));
    EXPECT_GE(elapsed, 0.29);
    EXPECT_LT(elapsed, 5.0);
  }
  // The connection is still good after a timeout.
  ASSERT_TRUE(server->set("later", "v").ok());
  EXPECT_EQ(*client->get("later", absl::Seconds(5)), "v");
}

TEST(TcpStoreTest, TimesOutWhenTheServerNeverComes) {
  int port = freePort();
  std::unique_ptr<TcpStore> client = makeClient(port, absl::Milliseconds(300));
  ASSERT_TRUE(client);
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> value = client->get("world", absl::Seconds(30));
  double elapsed = secondsSince(start);
  EXPECT_TRUE(absl::IsDeadlineExceeded(value.status())) << value.status();
  EXPECT_THAT(value.status().message(),
              AllOf(HasSubstr("could not connect"),
                    HasSubstr(absl::StrCat("127.0.0.1:", port)),
                    HasSubstr("is rank 0 running")));
  EXPECT_LT(elapsed, 5.0);
  absl::Status set = client->set("world", "x");
  EXPECT_TRUE(absl::IsDeadlineExceeded(set)) << set;
  EXPECT_THAT(set.message(), HasSubstr("setting key 'world'"));
}

TEST(TcpStoreTest, AServerThatGoesAwayFailsTheWaitingClient) {
  std::unique_ptr<TcpStore> server = makeServer(absl::Milliseconds(200));
  ASSERT_TRUE(server);
  std::unique_ptr<TcpStore> client = makeClient(server->port());
  ASSERT_TRUE(client);
  absl::StatusOr<std::string> value;
  std::thread reader([&] { value = client->get("never", absl::Seconds(30)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto start = std::chrono::steady_clock::now();
  server.reset(); // Waits 200 ms for the client, then closes its connection.
  reader.join();
  EXPECT_LT(secondsSince(start), 10.0);
  EXPECT_TRUE(absl::IsUnavailable(value.status())) << value.status();
  EXPECT_THAT(value.status().message(),
              HasSubstr("the server closed the connection"));
}

TEST(TcpStoreTest, AnotherServiceOnThePortIsRecognized) {
  // A listener that answers like an HTTP server.
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(
      ::bind(listener, reinterpret_cast<sockaddr *>(&address), sizeof(address)),
      0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t length = sizeof(address);
  ::getsockname(listener, reinterpret_cast<sockaddr *>(&address), &length);
  std::thread other([&] {
    int fd = ::accept(listener, nullptr, nullptr);
    char buffer[8];
    ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
    (void)got;
    const char reply[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
    ssize_t sent = ::send(fd, reply, sizeof(reply) - 1, MSG_NOSIGNAL);
    (void)sent;
    ::close(fd);
  });
  std::unique_ptr<TcpStore> client =
      makeClient(ntohs(address.sin_port), absl::Seconds(5));
  ASSERT_TRUE(client);
  absl::StatusOr<std::string> value = client->get("world", absl::Seconds(5));
  other.join();
  ::close(listener);
  EXPECT_TRUE(absl::IsFailedPrecondition(value.status())) << value.status();
  EXPECT_THAT(value.status().message(), HasSubstr("not a Polymesh store"));
}

TEST(TcpStoreTest, ServerRejectsGarbage) {
  std::unique_ptr<TcpStore> server = makeServer();
  ASSERT_TRUE(server);
  // A client that skips the handshake is dropped; the server keeps serving.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(server->port()));
  ASSERT_EQ(
      ::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)),
      0);
  const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_GT(::send(fd, junk, sizeof(junk) - 1, MSG_NOSIGNAL), 0);
  char buffer[16];
  EXPECT_EQ(::recv(fd, buffer, sizeof(buffer), 0), 0); // Closed, no reply.
  ::close(fd);
  std::unique_ptr<TcpStore> client = makeClient(server->port());
  ASSERT_TRUE(client->set("k", "v").ok());
  EXPECT_EQ(*server->get("k", absl::Seconds(1)), "v");
}

TEST(TcpStoreTest, BadOptions) {
  TcpStoreOptions options;
  options.port = 0;
  absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::create(options);
  EXPECT_TRUE(absl::IsInvalidArgument(client.status())) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("invalid port 0"));
  options.port = 70000;
  options.isServer = true;
  EXPECT_TRUE(absl::IsInvalidArgument(TcpStore::create(options).status()));
  // A name that cannot resolve fails at once, not at the connect timeout.
  options.isServer = false;
  options.port = 29500;
  options.host = "no-such-host.invalid";
  options.connectTimeout = absl::Seconds(30);
  client = TcpStore::create(options);
  ASSERT_TRUE(client.ok());
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> value = (*client)->get("k", absl::Seconds(30));
  EXPECT_LT(secondsSince(start), 20.0);
  EXPECT_TRUE(absl::IsInvalidArgument(value.status())) << value.status();
  EXPECT_THAT(value.status().message(),
              HasSubstr("cannot resolve 'no-such-host.invalid'"));
}

TEST(TcpStoreTest, APortInUseIsReported) {
  std::unique_ptr<TcpStore> first = makeServer();
  ASSERT_TRUE(first);
  TcpStoreOptions options;
  options.listenAddress = "127.0.0.1";
  options.port = first->port();
  options.isServer = true;
  absl::StatusOr<std::unique_ptr<TcpStore>> second = TcpStore::create(options);
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_THAT(second.status().message(),
              AllOf(HasSubstr("cannot listen"), HasSubstr("MASTER_PORT")));
}

//===----------------------------------------------------------------------===//
// Launch environment
//===----------------------------------------------------------------------===//

EnvironmentLookup lookupIn(std::map<std::string, std::string> vars) {
  return [vars](const char *name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end())
      return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> torchrunVars() {
  return {{"RANK", "5"},
          {"WORLD_SIZE", "16"},
          {"LOCAL_RANK", "1"},
          {"MASTER_ADDR", "node0.cluster"},
          {"MASTER_PORT", "29500"}};
}

TEST(LaunchEnvironmentTest, ReadsTheLauncherVariables) {
  absl::StatusOr<LaunchEnvironment> env =
      parseLaunchEnvironment(lookupIn(torchrunVars()));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->worldSize, 16);
  EXPECT_EQ(env->localRank, 1);
  EXPECT_EQ(env->masterAddr, "node0.cluster");
  EXPECT_EQ(env->masterPort, 29500);
  EXPECT_EQ(env->storeDir, "");
  EXPECT_TRUE(isLaunchedJob(lookupIn(torchrunVars())));
  EXPECT_FALSE(isLaunchedJob(lookupIn({{"LOCAL_RANK", "0"}})));
}

TEST(LaunchEnvironmentTest, MasterAndStoreDirAreOptional) {
  absl::StatusOr<LaunchEnvironment> env = parseLaunchEnvironment(
      lookupIn({{"RANK", "0"},
                {"WORLD_SIZE", "1"},
                {"LOCAL_RANK", "0"},
                {"POLYMESH_STORE_DIR", "/shared/job7"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->masterAddr, "");
  EXPECT_EQ(env->masterPort, 0);
  EXPECT_EQ(env->storeDir, "/shared/job7");
}

TEST(LaunchEnvironmentTest, BadValuesAreNamed) {
  struct Case {
    const char *name;
    const char *value; // nullptr: unset
    const char *message;
  };
  for (const Case &c : std::vector<Case>{
           {"RANK", nullptr, "RANK is not set"},
           {"WORLD_SIZE", nullptr, "WORLD_SIZE is not set"},
           {"LOCAL_RANK", nullptr, "LOCAL_RANK is not set"},
           {"RANK", "abc", "RANK='abc' is not a non-negative decimal integer"},
           {"RANK", "-1", "RANK='-1' is not a non-negative decimal integer"},
           {"RANK", "", "RANK='' is not a non-negative decimal integer"},
           {"RANK", "3 ", "RANK='3 ' is not a non-negative decimal integer"},
           {"RANK", "99999999999999999999", "is not a non-negative decimal"},
           {"RANK", "16",
            "RANK=16 is out of range: expected 0..15 (below "
            "WORLD_SIZE=16)"},
           {"LOCAL_RANK", "16", "LOCAL_RANK=16 is out of range"},
           {"WORLD_SIZE", "0",
            "WORLD_SIZE=0 is out of range: expected at "
            "least 1"},
           {"MASTER_PORT", "0",
            "MASTER_PORT=0 is out of range: expected "
            "1..65535"},
           {"MASTER_PORT", "65536", "MASTER_PORT=65536 is out of range"},
           {"MASTER_PORT", "http", "MASTER_PORT='http' is not"},
           {"MASTER_ADDR", "", "MASTER_ADDR is set but empty"},
           {"POLYMESH_STORE_DIR", "", "POLYMESH_STORE_DIR is set but empty"},
       }) {
    std::map<std::string, std::string> vars = torchrunVars();
    if (c.value)
      vars[c.name] = c.value;
    else
      vars.erase(c.name);
    absl::StatusOr<LaunchEnvironment> env =
        parseLaunchEnvironment(lookupIn(vars));
    EXPECT_TRUE(absl::IsInvalidArgument(env.status()))
        << c.name << ": " << env.status();
    EXPECT_THAT(env.status().message(), HasSubstr(c.message)) << c.name;
  }
}

TEST(LaunchEnvironmentTest, ReadsTheProcessEnvironment) {
  ::setenv("POLYMESH_STORE_TEST_VAR", "value", 1);
  EXPECT_EQ(processEnvironment()("POLYMESH_STORE_TEST_VAR"),
            std::optional<std::string>("value"));
  ::unsetenv("POLYMESH_STORE_TEST_VAR");
  EXPECT_EQ(processEnvironment()("POLYMESH_STORE_TEST_VAR"), std::nullopt);
}

TEST(LaunchEnvironmentTest, StoreFromEnvironment) {
  LaunchEnvironment env;
  env.rank = 1;
  env.worldSize = 2;
  absl::StatusOr<std::unique_ptr<Store>> none = createStoreFromEnvironment(env);
  EXPECT_TRUE(absl::IsInvalidArgument(none.status())) << none.status();
  EXPECT_THAT(none.status().message(),
              AllOf(HasSubstr("MASTER_ADDR and MASTER_PORT"),
                    HasSubstr("POLYMESH_STORE_DIR")));

  env.storeDir = freshDirectory("env");
  absl::StatusOr<std::unique_ptr<Store>> file = createStoreFromEnvironment(env);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->describe(), "file store " + env.storeDir);

  // Rank 0 serves on MASTER_PORT, rank 1 connects to it.
  env.storeDir.clear();
  env.masterAddr = "127.0.0.1";
  env.masterPort = freePort();
  env.rank = 0;
  absl::StatusOr<std::unique_ptr<Store>> server =
      createStoreFromEnvironment(env);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->describe(), HasSubstr("(served here)"));
  env.rank = 1;
  absl::StatusOr<std::unique_ptr<Store>> client =
      createStoreFromEnvironment(env, absl::Seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*server)->set("id", idFor(0)).ok());
  EXPECT_EQ(*(*client)->get("id", absl::Seconds(10)), idFor(0));
  client->reset();
}

} // namespace
