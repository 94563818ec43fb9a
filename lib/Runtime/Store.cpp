//===- Store.cpp - Rendezvous stores and the launch environment -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The TCP store's protocol, all integers little-endian:
//
//   handshake   client -> server  "PMSTORE1"; server -> client "PMSTORE1"
//   set         'S' u32 keyLength key u64 valueLength value
//   get         'G' u32 keyLength key u64 timeoutMilliseconds
//   response    u8 code u64 length payload
//
// with codes OK (payload: the value, empty for a set), ALREADY_EXISTS,
// TIMEOUT and BAD_REQUEST (payload: a message). The server answers a get
// whose key is not set yet when some process sets it, or with TIMEOUT at its
// deadline, so one connection carries one request at a time and a client
// that waits for a key holds only its own connection.
//
// The server is one thread around poll(): the listening socket, a pipe that
// wakes it when a set arrives from its own process or the store shuts down,
// and every client connection, with non-blocking reads and writes.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/Store.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace polymesh::runtime {

namespace {

using Clock = std::chrono::steady_clock;

/// A point in time after which a wait gives up. Infinite and huge durations
/// become "never", negative ones "now".
struct Deadline {
  Clock::time_point at;

  static Deadline after(absl::Duration timeout) {
    if (timeout >= absl::Hours(24 * 365))
      return {Clock::time_point::max()};
    if (timeout < absl::ZeroDuration())
      timeout = absl::ZeroDuration();
    return {Clock::now() + absl::ToChronoNanoseconds(timeout)};
  }
  static Deadline earliest(Deadline a, Deadline b) {
    return a.at < b.at ? a : b;
  }
  bool expired() const { return Clock::now() >= at; }
  /// Milliseconds left, rounded up, for poll(); -1 when never.
  int pollMillis() const {
    if (at == Clock::time_point::max())
      return -1;
    auto left = at - Clock::now();
    if (left <= Clock::duration::zero())
      return 0;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
  }
};

std::string errnoText(int error) { return std::strerror(error); }

/// "'abc'", with non-printable bytes escaped, for keys in messages.
std::string quoteKey(absl::string_view key) {
  std::string text = "'";
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
      text.push_back(static_cast<char>(c));
    else
      absl::StrAppend(&text, "\\x", absl::Hex(c, absl::kZeroPad2));
  }
  text.push_back('\'');
  return text;
}

std::string formatSeconds(absl::Duration d) { return absl::FormatDuration(d); }

void appendU32(std::string &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void appendU64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t readLE(const char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

constexpr char kMagic[] = "PMSTORE1"; // 8 bytes, no terminator on the wire
constexpr size_t kMagicBytes = 8;
constexpr uint64_t kMaxKeyBytes = 1 << 20;
constexpr uint64_t kMaxValueBytes = uint64_t(256) << 20;

absl::Status checkSizes(absl::string_view key, absl::string_view value) {
  if (key.empty())
    return absl::InvalidArgumentError("store keys must not be empty");
  if (key.size() > kMaxKeyBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("store key of ", key.size(), " bytes; at most ",
                     kMaxKeyBytes, " are allowed"));
  if (value.size() > kMaxValueBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "store value of ", value.size(), " bytes for key ", quoteKey(key),
        "; at most ", kMaxValueBytes, " are allowed"));
  return absl::OkStatus();
}

} // namespace

Store::~Store() = default;

//===----------------------------------------------------------------------===//
// MemoryStore
//===----------------------------------------------------------------------===//

struct MemoryStore::State {
  std::mutex mu;
  std::condition_variable cv;
  absl::flat_hash_map<std::string, std::string> values;
};

MemoryStore::MemoryStore() : state(std::make_unique<State>()) {}
MemoryStore::~MemoryStore() = default;

absl::Status MemoryStore::set(absl::string_view key, absl::string_view value) {
  if (absl::Status ok = checkSizes(key, value); !ok.ok())
    return ok;
  std::lock_guard<std::mutex> lock(state->mu);
  if (!state->values.emplace(std::string(key), std::string(value)).second)
    return absl::AlreadyExistsError(
        absl::StrCat("key ", quoteKey(key), " is already set in ", describe()));
  state->cv.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryStore::get(absl::string_view key,
                                             absl::Duration timeout) {
  if (absl::Status ok = checkSizes(key, ""); !ok.ok())
    return ok;
  Deadline deadline = Deadline::after(timeout);
  std::unique_lock<std::mutex> lock(state->mu);
  while (true) {
    auto it = state->values.find(key);
    if (it != state->values.end())
      return it->second;
    if (deadline.expired())
      return absl::DeadlineExceededError(
          absl::StrCat("key ", quoteKey(key), " was not set in ", describe(),
                       " within ", formatSeconds(timeout)));
    if (deadline.at == Clock::time_point::max())
      state->cv.wait(lock);
    else
      state->cv.wait_until(lock, deadline.at);
  }
}

std::string MemoryStore::describe() const { return "the in-process store"; }

//===----------------------------------------------------------------------===//
// FileStore
//===----------------------------------------------------------------------===//

namespace {

/// 64-bit FNV-1a from `basis`, then a final avalanche so that two bases give
/// independent halves of a 128-bit file name hash.
uint64_t hashKey(absl::string_view key, uint64_t basis) {
  uint64_t h = basis;
  for (unsigned char c : key) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

absl::Status makeDirectories(const std::string &path) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode))
      return absl::FailedPreconditionError(
          absl::StrCat("file store: ", path, " exists but is not a directory"));
    return absl::OkStatus();
  }
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0)
    if (absl::Status parent = makeDirectories(path.substr(0, slash));
        !parent.ok())
      return parent;
  if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
    return absl::FailedPreconditionError(absl::StrCat(
        "file store: cannot create directory ", path, ": ", errnoText(errno)));
  return absl::OkStatus();
}

absl::Status writeAll(int fd, const std::string &data,
                      const std::string &path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return absl::InternalError(
          absl::StrCat("file store: writing ", path, ": ", errnoText(errno)));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

} // namespace

FileStore::FileStore(std::string directory) : directory(std::move(directory)) {}
FileStore::~FileStore() = default;

absl::StatusOr<std::unique_ptr<FileStore>>
FileStore::create(std::string directory) {
  if (directory.empty())
    return absl::InvalidArgumentError("file store: empty directory name");
  while (directory.size() > 1 && directory.back() == '/')
    directory.pop_back();
  if (absl::Status made = makeDirectories(directory); !made.ok())
    return made;
  if (::access(directory.c_str(), W_OK | X_OK) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat("file store: directory ", directory,
                     " is not writable: ", errnoText(errno)));
  return std::unique_ptr<FileStore>(new FileStore(std::move(directory)));
}

std::string FileStore::pathOf(absl::string_view key) const {
  std::string name;
  for (unsigned char c : key) {
    if (absl::ascii_isalnum(c) || c == '_' || c == '-')
      name.push_back(static_cast<char>(c));
    else
      absl::StrAppend(&name, "%", absl::Hex(c, absl::kZeroPad2));
  }
  // File names are limited to 255 bytes; long keys (a large group's member
  // list) keep a readable prefix and get a hash of the whole key.
  if (name.size() > 180) {
    name.resize(100);
    if (size_t percent = name.find_last_of('%');
        percent != std::string::npos && percent + 3 > name.size())
      name.resize(percent);
    absl::StrAppend(
        &name, "~",
        absl::Hex(hashKey(key, 0xcbf29ce484222325ull), absl::kZeroPad16),
        absl::Hex(hashKey(key, 0x84222325cbf29ce4ull), absl::kZeroPad16));
  }
  return absl::StrCat(directory, "/", name);
}

absl::Status FileStore::set(absl::string_view key, absl::string_view value) {
  if (absl::Status ok = checkSizes(key, value); !ok.ok())
    return ok;
  std::string path = pathOf(key);
  if (::access(path.c_str(), F_OK) == 0)
    return absl::AlreadyExistsError(absl::StrCat(
        "key ", quoteKey(key), " is already set in ", describe(), " (", path,
        " exists; a file of an earlier job? use a fresh directory per job)"));
  // A temporary name no other writer uses: "." never starts a key's file.
  static std::atomic<uint64_t> counter{0};
  std::string temporary = absl::StrCat(
      directory, "/.tmp-", ::getpid(), "-",
      absl::Hex(std::hash<std::thread::id>()(std::this_thread::get_id())), "-",
      counter.fetch_add(1));
  std::string contents(kMagic, kMagicBytes);
  appendU64(contents, key.size());
  absl::StrAppend(&contents, key, value);
  int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("file store: cannot create ",
                                            temporary, ": ", errnoText(errno)));
  absl::Status written = writeAll(fd, contents, temporary);
  // Flushed before the rename, so that a reader on another host of a shared
  // file system never sees the name before the bytes.
  if (written.ok() && ::fsync(fd) != 0)
    written = absl::InternalError(absl::StrCat(
        "file store: fsync of ", temporary, ": ", errnoText(errno)));
  ::close(fd);
  if (written.ok() && ::rename(temporary.c_str(), path.c_str()) != 0)
    written = absl::InternalError(absl::StrCat("file store: cannot rename ",
                                               temporary, " to ", path, ": ",
                                               errnoText(errno)));
  if (!written.ok())
    ::unlink(temporary.c_str());
  return written;
}

absl::StatusOr<std::string> FileStore::get(absl::string_view key,
                                           absl::Duration timeout) {
  if (absl::Status ok = checkSizes(key, ""); !ok.ok())
    return ok;
  std::string path = pathOf(key);
  Deadline deadline = Deadline::after(timeout);
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string contents;
      char buffer[4096];
      while (true) {
        ssize_t n = ::read(fd, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR)
          continue;
        if (n < 0) {
          int error = errno;
          ::close(fd);
          return absl::InternalError(absl::StrCat("file store: reading ", path,
                                                  ": ", errnoText(error)));
        }
        if (n == 0)
          break;
        contents.append(buffer, static_cast<size_t>(n));
      }
      ::close(fd);
      if (contents.size() < kMagicBytes + 8 ||
          contents.compare(0, kMagicBytes, kMagic, kMagicBytes) != 0)
        return absl::DataLossError(absl::StrCat(
            "file store: ", path, " is not a store file (bad header)"));
      uint64_t keyBytes = readLE(contents.data() + kMagicBytes, 8);
      if (keyBytes > contents.size() - kMagicBytes - 8 ||
          absl::string_view(contents).substr(kMagicBytes + 8, keyBytes) != key)
        return absl::DataLossError(absl::StrCat(
            "file store: ", path, " holds another key than ", quoteKey(key)));
      return contents.substr(kMagicBytes + 8 + keyBytes);
    }
    if (errno != ENOENT)
      return absl::InternalError(absl::StrCat("file store: cannot open ", path,
                                              ": ", errnoText(errno)));
    if (deadline.expired())
      return absl::DeadlineExceededError(absl::StrCat(
          "key ", quoteKey(key), " was not set in ", describe(), " within ",
          formatSeconds(timeout), " (no file ", path, ")"));
    auto left = deadline.at - Clock::now();
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, left));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::string FileStore::describe() const {
  return absl::StrCat("file store ", directory);
}

//===----------------------------------------------------------------------===//
// TcpStore: sockets
//===----------------------------------------------------------------------===//

namespace {

enum ResponseCode : uint8_t {
  kOk = 0,
  kAlreadyExists = 1,
  kTimeout = 2,
  kBadRequest = 3,
};

std::string hostPort(const std::string &host, int port) {
  if (host.find(':') != std::string::npos)
    return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

void closeFd(int &fd) {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

bool setNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

/// Waits until `fd` is ready for `events` or the deadline passes.
/// Returns false on timeout.
bool waitFd(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, deadline.pollMillis());
    if (n > 0)
      return true;
    if (n == 0)
      return false;
    if (errno != EINTR)
      return true; // Let the read or write report the error.
  }
}

/// Sends all of `data` on a non-blocking socket before the deadline.
absl::Status sendAll(int fd, absl::string_view data, Deadline deadline,
                     absl::string_view where) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n =
        ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFd(fd, POLLOUT, deadline))
        return absl::DeadlineExceededError(
            absl::StrCat(where, ": timed out sending a request"));
      continue;
    }
    return absl::UnavailableError(absl::StrCat(
        where, ": lost the connection while sending: ", errnoText(errno)));
  }
  return absl::OkStatus();
}

/// Receives exactly `bytes` bytes before the deadline.
absl::Status recvExact(int fd, char *out, size_t bytes, Deadline deadline,
                       absl::string_view where) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::recv(fd, out + done, bytes - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0)
      return absl::UnavailableError(
          absl::StrCat(where, ": the server closed the connection (did rank "
                              "0 exit or fail?)"));
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!waitFd(fd, POLLIN, deadline))
        return absl::DeadlineExceededError(
            absl::StrCat(where, ": no answer from the server in time"));
      continue;
    }
    return absl::UnavailableError(absl::StrCat(
        where, ": lost the connection while receiving: ", errnoText(errno)));
  }
  return absl::OkStatus();
}

/// One attempt to connect to any address of host:port before `deadline`.
/// Returns the socket, or the error of the last address tried.
absl::StatusOr<int> connectOnce(const std::string &host, int port,
                                Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *addresses = nullptr;
  std::string service = absl::StrCat(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &addresses);
  if (rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  std::string lastError = "no address";
  int result = -1;
  for (addrinfo *a = addresses; a && result < 0; a = a->ai_next) {
    int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      lastError = errnoText(errno);
      continue;
    }
    setNonBlocking(fd);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        lastError = errnoText(errno);
        closeFd(fd);
        continue;
      }
      if (!waitFd(fd, POLLOUT, deadline)) {
        lastError = "connection attempt timed out";
        closeFd(fd);
        continue;
      }
      int error = 0;
      socklen_t length = sizeof(error);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      if (error != 0) {
        lastError = errnoText(error);
        closeFd(fd);
        continue;
      }
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    result = fd;
  }
  ::freeaddrinfo(addresses);
  if (result < 0)
    return absl::UnavailableError(lastError);
  return result;
}

} // namespace

//===----------------------------------------------------------------------===//
// TcpStore: the server
//===----------------------------------------------------------------------===//

struct TcpStore::Impl {
  TcpStoreOptions options;
  int boundPort = 0;

  // Values: on the server the authoritative map; unused on clients.
  std::mutex mu;
  std::condition_variable cv;
  absl::flat_hash_map<std::string, std::string> values;

  // Server.
  int listenFd = -1;
  int wakeRead = -1, wakeWrite = -1;
  std::thread serverThread;
  std::atomic<bool> stopping{false};

  // Clients: idle connections to the server.
  std::mutex poolMu;
  std::vector<int> idle;

  std::string describe() const {
    return absl::StrCat("TCP store ", hostPort(options.host, boundPort),
                        options.isServer ? " (served here)" : "");
  }

  ~Impl() {
    if (serverThread.joinable()) {
      stopping = true;
      wake();
      serverThread.join();
    }
    closeFd(listenFd);
    closeFd(wakeRead);
    closeFd(wakeWrite);
    for (int &fd : idle)
      closeFd(fd);
  }

  void wake() {
    char byte = 1;
    while (::write(wakeWrite, &byte, 1) < 0 && errno == EINTR) {
    }
  }

  absl::Status listen() {
    int fd = -1;
    std::string lastError;
    auto tryBind = [&](int family, const sockaddr *address, socklen_t length) {
      int s = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (s < 0) {
        lastError = errnoText(errno);
        return false;
      }
      int one = 1;
      ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (family == AF_INET6) {
        int zero = 0; // Dual stack: IPv4 clients too.
        ::setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      }
      if (::bind(s, address, length) != 0 || ::listen(s, 1024) != 0) {
        lastError = errnoText(errno);
        ::close(s);
        return false;
      }
      fd = s;
      return true;
    };
    if (options.listenAddress.empty()) {
      sockaddr_in6 any6{};
      any6.sin6_family = AF_INET6;
      any6.sin6_addr = in6addr_any;
      any6.sin6_port = htons(static_cast<uint16_t>(options.port));
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      any4.sin_port = htons(static_cast<uint16_t>(options.port));
      if (!tryBind(AF_INET6, reinterpret_cast<sockaddr *>(&any6), sizeof(any6)))
        tryBind(AF_INET, reinterpret_cast<sockaddr *>(&any4), sizeof(any4));
    } else {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      hints.ai_flags = AI_PASSIVE;
      addrinfo *addresses = nullptr;
      std::string service = absl::StrCat(options.port);
      int rc = ::getaddrinfo(options.listenAddress.c_str(), service.c_str(),
                             &hints, &addresses);
      if (rc != 0)
        return absl::InvalidArgumentError(
            absl::StrCat("TCP store: cannot resolve listen address '",
                         options.listenAddress, "': ", ::gai_strerror(rc)));
      for (addrinfo *a = addresses; a && fd < 0; a = a->ai_next)
        tryBind(a->ai_family, a->ai_addr, a->ai_addrlen);
      ::freeaddrinfo(addresses);
    }
    if (fd < 0)
      return absl::UnavailableError(absl::StrCat(
          "TCP store: cannot listen on ",
          hostPort(options.listenAddress.empty() ? "*" : options.listenAddress,
                   options.port),
          ": ", lastError,
          options.port != 0 ? " (is MASTER_PORT in use by another job?)" : ""));
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    ::getsockname(fd, reinterpret_cast<sockaddr *>(&bound), &length);
    boundPort = bound.ss_family == AF_INET6
                    ? ntohs(reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port)
                    : ntohs(reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
    setNonBlocking(fd);
    listenFd = fd;
    int pipeFds[2];
    if (::pipe2(pipeFds, O_CLOEXEC | O_NONBLOCK) != 0)
      return absl::InternalError(
          absl::StrCat("TCP store: pipe: ", errnoText(errno)));
    wakeRead = pipeFds[0];
    wakeWrite = pipeFds[1];
    serverThread = std::thread([this] { serve(); });
    return absl::OkStatus();
  }

  struct Connection {
    int fd = -1;
    std::string in, out;
    bool handshaken = false;
    bool closeAfterWrite = false;
    /// A get waiting for its key.
    bool waiting = false;
    std::string waitKey;
    Deadline waitDeadline;
  };

  static void respond(Connection &c, ResponseCode code,
                      absl::string_view payload) {
    c.out.push_back(static_cast<char>(code));
    appendU64(c.out, payload.size());
    c.out.append(payload.data(), payload.size());
  }

  /// Parses and answers complete requests of `c` (one at a time: a waiting
  /// get holds the rest back). Returns false when the connection must close.
  bool process(Connection &c) {
    if (!c.handshaken) {
      if (c.in.size() < kMagicBytes)
        return true;
      if (c.in.compare(0, kMagicBytes, kMagic, kMagicBytes) != 0)
        return false;
      c.in.erase(0, kMagicBytes);
      c.out.append(kMagic, kMagicBytes);
      c.handshaken = true;
    }
    while (!c.waiting && !c.closeAfterWrite && !c.in.empty()) {
      char op = c.in[0];
      if (op != 'S' && op != 'G') {
        respond(c, kBadRequest, "unknown request");
        c.closeAfterWrite = true;
        return true;
      }
      if (c.in.size() < 5)
        return true;
      uint64_t keyBytes = readLE(c.in.data() + 1, 4);
      if (keyBytes == 0 || keyBytes > kMaxKeyBytes) {
        respond(c, kBadRequest, "bad key length");
        c.closeAfterWrite = true;
        return true;
      }
      size_t header = 5 + keyBytes + 8;
      if (c.in.size() < header)
        return true;
      std::string key = c.in.substr(5, keyBytes);
      uint64_t word = readLE(c.in.data() + 5 + keyBytes, 8);
      if (op == 'S') {
        if (word > kMaxValueBytes) {
          respond(c, kBadRequest, "bad value length");
          c.closeAfterWrite = true;
          return true;
        }
        if (c.in.size() < header + word)
          return true;
        std::string value = c.in.substr(header, word);
        c.in.erase(0, header + word);
        if (insert(key, std::move(value)))
          respond(c, kOk, "");
        else
          respond(c, kAlreadyExists, "already set");
        continue;
      }
      c.in.erase(0, header);
      c.waiting = true;
      c.waitKey = std::move(key);
      c.waitDeadline = Deadline::after(absl::Milliseconds(
          static_cast<int64_t>(std::min<uint64_t>(word, uint64_t(1) << 52))));
      answerIfSet(c);
    }
    return true;
  }

  bool insert(const std::string &key, std::string value) {
    std::lock_guard<std::mutex> lock(mu);
    bool inserted = values.emplace(key, std::move(value)).second;
    cv.notify_all();
    return inserted;
  }

  void answerIfSet(Connection &c) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = values.find(c.waitKey);
    if (it != values.end()) {
      respond(c, kOk, it->second);
      c.waiting = false;
      c.waitKey.clear();
    }
  }

  void serve() {
    std::list<Connection> connections;
    Deadline shutdownDeadline{Clock::time_point::max()};
    bool shuttingDown = false;
    while (true) {
      if (stopping && !shuttingDown) {
        shuttingDown = true;
        shutdownDeadline = Deadline::after(options.shutdownTimeout);
        closeFd(listenFd);
      }
      if (shuttingDown && (connections.empty() || shutdownDeadline.expired()))
        break;
      // Answer gets whose key a set of this loop (or of this process) set,
      // and those whose time is up.
      Deadline next = shutdownDeadline;
      for (Connection &c : connections) {
        if (!c.waiting)
          continue;
        answerIfSet(c);
        if (c.waiting && c.waitDeadline.expired()) {
          respond(c, kTimeout, "key not set in time");
          c.waiting = false;
          // The client may send its next request now.
          process(c);
        }
        if (c.waiting)
          next = Deadline::earliest(next, c.waitDeadline);
      }
      std::vector<pollfd> fds;
      fds.push_back({wakeRead, POLLIN, 0});
      if (listenFd >= 0)
        fds.push_back({listenFd, POLLIN, 0});
      size_t firstConnection = fds.size();
      for (Connection &c : connections)
        fds.push_back(
            {c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)),
             0});
      int n = ::poll(fds.data(), fds.size(), next.pollMillis());
      if (n < 0 && errno != EINTR)
        break;
      if (n <= 0)
        continue;
      if (fds[0].revents) {
        char buffer[64];
        while (::read(wakeRead, buffer, sizeof(buffer)) > 0) {
        }
      }
      if (listenFd >= 0 && fds[1].revents) {
        while (true) {
          int fd = ::accept4(listenFd, nullptr, nullptr,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0)
            break;
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          Connection c;
          c.fd = fd;
          connections.push_back(std::move(c));
        }
      }
      size_t index = firstConnection;
      for (auto it = connections.begin(); it != connections.end(); ++index) {
        Connection &c = *it;
        bool keep = true;
        // Connections accepted in this round have no pollfd yet.
        short revents = index < fds.size() ? fds[index].revents : 0;
        if (revents & (POLLIN | POLLHUP | POLLERR)) {
          char buffer[65536];
          while (keep) {
            ssize_t got = ::recv(c.fd, buffer, sizeof(buffer), 0);
            if (got > 0) {
              c.in.append(buffer, static_cast<size_t>(got));
              continue;
            }
            if (got < 0 && errno == EINTR)
              continue;
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
              break;
            keep = false; // EOF or error: the client is gone.
          }
          if (keep)
            keep = process(c);
        }
        if (keep && !c.out.empty()) {
          while (!c.out.empty()) {
            ssize_t sent =
                ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
            if (sent > 0) {
              c.out.erase(0, static_cast<size_t>(sent));
              continue;
            }
            if (sent < 0 && errno == EINTR)
              continue;
            if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
              break;
            keep = false;
            break;
          }
        }
        if (keep && c.closeAfterWrite && c.out.empty())
          keep = false;
        if (!keep) {
          closeFd(c.fd);
          it = connections.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Connection &c : connections)
      closeFd(c.fd);
  }

  //===--------------------------------------------------------------------===//
  // Clients
  //===--------------------------------------------------------------------===//

  /// An idle connection, or a new one (retrying until the server is up).
  absl::StatusOr<int> acquire(Deadline deadline) {
    {
      std::lock_guard<std::mutex> lock(poolMu);
      if (!idle.empty()) {
        int fd = idle.back();
        idle.pop_back();
        return fd;
      }
    }
    std::string where = describe();
    auto pause = std::chrono::milliseconds(10);
    std::string lastError;
    while (true) {
      absl::StatusOr<int> fd =
          connectOnce(options.host, options.port, deadline);
      if (fd.ok()) {
        absl::Status handshake = sendAll(
            *fd, absl::string_view(kMagic, kMagicBytes), deadline, where);
        char reply[kMagicBytes];
        if (handshake.ok())
          handshake = recvExact(*fd, reply, kMagicBytes, deadline, where);
        if (handshake.ok() && std::memcmp(reply, kMagic, kMagicBytes) != 0)
          handshake = absl::FailedPreconditionError(absl::StrCat(
              where, ": the server there is not a Polymesh store (wrong "
                     "handshake; does MASTER_PORT belong to another "
                     "service?)"));
        if (handshake.ok())
          return *fd;
        int closing = *fd;
        closeFd(closing);
        if (!absl::IsUnavailable(handshake))
          return handshake;
        lastError = std::string(handshake.message());
      } else {
        if (absl::IsInvalidArgument(fd.status()))
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": ", fd.status().message()));
        lastError = std::string(fd.status().message());
      }
      if (deadline.expired())
        return absl::DeadlineExceededError(absl::StrCat(
            where, ": could not connect within ",
            formatSeconds(options.connectTimeout), ": ", lastError,
            " (is rank 0 running, and do MASTER_ADDR and MASTER_PORT name "
            "it?)"));
      auto left = deadline.at - Clock::now();
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, left));
      pause = std::min(pause * 2, std::chrono::milliseconds(500));
    }
  }

  void release(int fd) {
    std::lock_guard<std::mutex> lock(poolMu);
    idle.push_back(fd);
  }

  /// Sends `request` and reads the response; returns its code and payload.
  absl::StatusOr<std::pair<uint8_t, std::string>>
  roundTrip(const std::string &request, Deadline connectBy, Deadline answerBy) {
    absl::StatusOr<int> fd = acquire(connectBy);
    if (!fd.ok())
      return fd.status();
    std::string where = describe();
    absl::Status ok = sendAll(*fd, request, answerBy, where);
    char header[9];
    if (ok.ok())
      ok = recvExact(*fd, header, sizeof(header), answerBy, where);
    std::string payload;
    if (ok.ok()) {
      uint64_t length = readLE(header + 1, 8);
      if (length > kMaxValueBytes) {
        ok = absl::DataLossError(
            absl::StrCat(where, ": malformed response from the server"));
      } else {
        payload.resize(length);
        ok = recvExact(*fd, payload.data(), length, answerBy, where);
      }
    }
    if (!ok.ok()) {
      int closing = *fd;
      closeFd(closing);
      return ok;
    }
    release(*fd);
    return std::make_pair(static_cast<uint8_t>(header[0]), std::move(payload));
  }
};

absl::StatusOr<std::unique_ptr<TcpStore>>
TcpStore::create(TcpStoreOptions options) {
  if (options.port < 0 || options.port > 65535 ||
      (options.port == 0 && !options.isServer))
    return absl::InvalidArgumentError(absl::StrCat(
        "TCP store: invalid port ", options.port,
        options.isServer ? "; expected 0..65535" : "; expected 1..65535"));
  if (options.host.empty() && !options.isServer)
    return absl::InvalidArgumentError("TCP store: empty server host name");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->boundPort = impl->options.port;
  if (impl->options.isServer)
    if (absl::Status listening = impl->listen(); !listening.ok())
      return listening;
  return std::unique_ptr<TcpStore>(new TcpStore(std::move(impl)));
}

TcpStore::TcpStore(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}
TcpStore::~TcpStore() = default;

int TcpStore::port() const { return impl->boundPort; }

std::string TcpStore::describe() const { return impl->describe(); }

absl::Status TcpStore::set(absl::string_view key, absl::string_view value) {
  if (absl::Status ok = checkSizes(key, value); !ok.ok())
    return ok;
  if (impl->options.isServer) {
    if (!impl->insert(std::string(key), std::string(value)))
      return absl::AlreadyExistsError(absl::StrCat(
          "key ", quoteKey(key), " is already set in ", describe()));
    impl->wake();
    return absl::OkStatus();
  }
  std::string request = "S";
  appendU32(request, static_cast<uint32_t>(key.size()));
  absl::StrAppend(&request, key);
  appendU64(request, value.size());
  absl::StrAppend(&request, value);
  Deadline deadline = Deadline::after(impl->options.connectTimeout);
  absl::StatusOr<std::pair<uint8_t, std::string>> response =
      impl->roundTrip(request, deadline, deadline);
  if (!response.ok())
    return absl::Status(response.status().code(),
                        absl::StrCat("setting key ", quoteKey(key), ": ",
                                     response.status().message()));
  switch (response->first) {
  case kOk:
    return absl::OkStatus();
  case kAlreadyExists:
    return absl::AlreadyExistsError(
        absl::StrCat("key ", quoteKey(key), " is already set in ", describe()));
  default:
    return absl::InternalError(absl::StrCat("setting key ", quoteKey(key),
                                            " in ", describe(), ": ",
                                            response->second));
  }
}

absl::StatusOr<std::string> TcpStore::get(absl::string_view key,
                                          absl::Duration timeout) {
  if (absl::Status ok = checkSizes(key, ""); !ok.ok())
    return ok;
  Deadline deadline = Deadline::after(timeout);
  std::string notSet =
      absl::StrCat("key ", quoteKey(key), " was not set in ", describe(),
                   " within ", formatSeconds(timeout));
  if (impl->options.isServer) {
    std::unique_lock<std::mutex> lock(impl->mu);
    while (true) {
      auto it = impl->values.find(key);
      if (it != impl->values.end())
        return it->second;
      if (deadline.expired())
        return absl::DeadlineExceededError(notSet);
      if (deadline.at == Clock::time_point::max())
        impl->cv.wait(lock);
      else
        impl->cv.wait_until(lock, deadline.at);
    }
  }
  // The server answers at the deadline; a little slack for the answer to
  // arrive, so that its TIMEOUT (not a lost connection) is what we report.
  Deadline connectBy = Deadline::earliest(
      deadline, Deadline::after(impl->options.connectTimeout));
  Deadline answerBy = deadline.at == Clock::time_point::max()
                          ? deadline
                          : Deadline{deadline.at + std::chrono::seconds(5)};
  std::string request = "G";
  appendU32(request, static_cast<uint32_t>(key.size()));
  absl::StrAppend(&request, key);
  appendU64(request, static_cast<uint64_t>(std::max<int64_t>(
                         0, absl::ToInt64Milliseconds(
                                std::min(timeout, absl::Hours(24 * 365))))));
  absl::StatusOr<std::pair<uint8_t, std::string>> response =
      impl->roundTrip(request, connectBy, answerBy);
  if (!response.ok())
    return absl::Status(response.status().code(),
                        absl::StrCat("getting key ", quoteKey(key), ": ",
                                     response.status().message()));
  switch (response->first) {
  case kOk:
    return std::move(response->second);
  case kTimeout:
    return absl::DeadlineExceededError(notSet);
  default:
    return absl::InternalError(absl::StrCat("getting key ", quoteKey(key),
                                            " from ", describe(), ": ",
                                            response->second));
  }
}

//===----------------------------------------------------------------------===//
// Launch environment
//===----------------------------------------------------------------------===//

EnvironmentLookup processEnvironment() {
  return [](const char *name) -> std::optional<std::string> {
    const char *value = std::getenv(name);
    if (!value)
      return std::nullopt;
    return std::string(value);
  };
}

bool isLaunchedJob(const EnvironmentLookup &lookup) {
  return lookup("RANK").has_value() || lookup("WORLD_SIZE").has_value();
}

namespace {

/// A required or optional decimal variable in [minimum, maximum].
absl::StatusOr<std::optional<int64_t>>
readInteger(const EnvironmentLookup &lookup, const char *name, bool required,
            int64_t minimum, int64_t maximum, absl::string_view bound) {
  std::optional<std::string> text = lookup(name);
  if (!text) {
    if (required)
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is not set; a launcher sets RANK, WORLD_SIZE "
                             "and LOCAL_RANK for every process"));
    return std::optional<int64_t>();
  }
  int64_t value = 0;
  bool digits = !text->empty() && text->size() <= 18 &&
                std::all_of(text->begin(), text->end(),
                            [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || !absl::SimpleAtoi(*text, &value))
    return absl::InvalidArgumentError(absl::StrCat(
        name, "='", *text, "' is not a non-negative decimal integer"));
  if (value < minimum || value > maximum)
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", value, " is out of range: expected ", bound));
  return std::optional<int64_t>(value);
}

} // namespace

absl::StatusOr<LaunchEnvironment>
parseLaunchEnvironment(const EnvironmentLookup &lookup) {
  LaunchEnvironment env;
  absl::StatusOr<std::optional<int64_t>> worldSize = readInteger(
      lookup, "WORLD_SIZE", true, 1, int64_t(1) << 31, "at least 1");
  if (!worldSize.ok())
    return worldSize.status();
  env.worldSize = **worldSize;
  std::string below = absl::StrCat("0..", env.worldSize - 1,
                                   " (below WORLD_SIZE=", env.worldSize, ")");
  absl::StatusOr<std::optional<int64_t>> rank =
      readInteger(lookup, "RANK", true, 0, env.worldSize - 1, below);
  if (!rank.ok())
    return rank.status();
  env.rank = **rank;
  absl::StatusOr<std::optional<int64_t>> localRank =
      readInteger(lookup, "LOCAL_RANK", true, 0, env.worldSize - 1, below);
  if (!localRank.ok())
    return localRank.status();
  env.localRank = **localRank;
  absl::StatusOr<std::optional<int64_t>> port =
      readInteger(lookup, "MASTER_PORT", false, 1, 65535, "1..65535");
  if (!port.ok())
    return port.status();
  env.masterPort = port->has_value() ? static_cast<int>(**port) : 0;
  if (std::optional<std::string> addr = lookup("MASTER_ADDR")) {
    if (addr->empty())
      return absl::InvalidArgumentError("MASTER_ADDR is set but empty");
    env.masterAddr = *addr;
  }
  if (std::optional<std::string> dir = lookup("POLYMESH_STORE_DIR")) {
    if (dir->empty())
      return absl::InvalidArgumentError("POLYMESH_STORE_DIR is set but empty");
    env.storeDir = *dir;
  }
  return env;
}

absl::StatusOr<std::unique_ptr<Store>>
createStoreFromEnvironment(const LaunchEnvironment &environment,
                           absl::Duration connectTimeout) {
  if (!environment.storeDir.empty()) {
    absl::StatusOr<std::unique_ptr<FileStore>> store =
        FileStore::create(environment.storeDir);
    if (!store.ok())
      return store.status();
    return std::unique_ptr<Store>(*std::move(store));
  }
  if (environment.masterAddr.empty() || environment.masterPort == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "no rendezvous store: set MASTER_ADDR and MASTER_PORT (rank 0 serves "
        "a TCP store there) or POLYMESH_STORE_DIR (a directory all ranks "
        "share); ",
        environment.masterAddr.empty() ? "MASTER_ADDR" : "MASTER_PORT",
        " is not set"));
  TcpStoreOptions options;
  options.host = environment.masterAddr;
  options.port = environment.masterPort;
  options.isServer = environment.rank == 0;
  options.connectTimeout = connectTimeout;
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::create(std::move(options));
  if (!store.ok())
    return store.status();
  return std::unique_ptr<Store>(*std::move(store));
}

} // namespace polymesh::runtime
