//===- polymesh-nccl-check.cpp - Smoke test of the NCCL backend -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Runs every call of the NCCL backend on this machine's GPUs and checks the
// bytes that arrive:
//
//   polymesh-nccl-check                 one process, every local GPU
//   polymesh-nccl-check --devices=N     one process, the first N GPUs
//   polymesh-nccl-check --launch=N      N processes on this host, one per
//                                       GPU, started the way a launcher
//                                       would (RANK, WORLD_SIZE, LOCAL_RANK,
//                                       MASTER_ADDR, MASTER_PORT)
//   RANK=.. WORLD_SIZE=.. ... polymesh-nccl-check
//                                       one rank of a job (torchrun, srun)
//   polymesh-nccl-check --count-devices prints the number of GPUs
//   polymesh-nccl-check --simulate=N    the simulated CUDA and NCCL of the
//                                       unit tests, N devices, no GPU: checks
//                                       this tool itself
//
// --buffers=device|host|both (default both) picks device pointers, host
// memory staged by the backend, or one run of each; --timeout=SECONDS
// (default 120) bounds every wait.
//
// Exit codes: 0 every check passed; 1 a check or the backend failed; 2 bad
// usage or launcher variables; 77 skipped: no CUDA device (the reason is
// printed as "no CUDA device: ..."), or fewer GPUs than asked for.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/GpuSimulator.h"
#include "polymesh/Runtime/NcclBackend.h"
#include "polymesh/Runtime/Store.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace polymesh::runtime;

namespace {

constexpr int kExitPass = 0;
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;
constexpr int kExitSkip = 77;

struct Arguments {
  int devices = 0; // 0: all
  int launch = 0;  // 0: no
  int simulate = 0;
  bool countDevices = false;
  std::string buffers = "both";
  int timeoutSeconds = 120;
};

void usage() {
  std::fprintf(stderr,
               "usage: polymesh-nccl-check [--devices=N | --launch=N | "
               "--count-devices | --simulate=N]\n"
               "                           [--buffers=device|host|both] "
               "[--timeout=SECONDS]\n");
}

bool parseArguments(int argc, char **argv, Arguments &args) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char *flag, int &out) {
      std::string prefix = std::string(flag) + "=";
      if (arg.rfind(prefix, 0) != 0)
        return false;
      if (!absl::SimpleAtoi(arg.substr(prefix.size()), &out) || out < 1) {
        std::fprintf(stderr,
                     "polymesh-nccl-check: %s needs a positive "
                     "number\n",
                     flag);
        std::exit(kExitUsage);
      }
      return true;
    };
    if (value("--devices", args.devices) || value("--launch", args.launch) ||
        value("--simulate", args.simulate) ||
        value("--timeout", args.timeoutSeconds))
      continue;
    if (arg == "--count-devices") {
      args.countDevices = true;
    } else if (arg.rfind("--buffers=", 0) == 0) {
      args.buffers = arg.substr(10);
      if (args.buffers != "device" && args.buffers != "host" &&
          args.buffers != "both")
        return false;
    } else {
      return false;
    }
  }
  if (args.launch && args.simulate) {
    std::fprintf(stderr, "polymesh-nccl-check: --launch starts processes, "
                         "and the simulation lives in one process\n");
    return false;
  }
  return true;
}

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

//===----------------------------------------------------------------------===//
// Checks
//===----------------------------------------------------------------------===//

/// Buffers of the calls: device memory, or host memory that the backend
/// stages.
class Memory {
public:
  Memory(NcclBackend &backend) : backend(backend) {}

  bool host() const { return backend.buffers() == NcclBuffers::Host; }

  absl::StatusOr<void *> allocate(int64_t device, int64_t bytes) {
    if (host()) {
      void *p = std::malloc(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
      if (!p)
        return absl::ResourceExhaustedError("malloc");
      return p;
    }
    return backend.allocate(device, std::max<int64_t>(bytes, 1));
  }
  void release(int64_t device, void *p) {
    if (host())
      std::free(p);
    else
      backend.deallocate(device, p).IgnoreError();
  }
  template <typename T>
  absl::Status put(int64_t device, void *dst, const std::vector<T> &src) {
    size_t bytes = src.size() * sizeof(T);
    if (host()) {
      std::memcpy(dst, src.data(), bytes);
      return absl::OkStatus();
    }
    return backend.copyToDevice(device, dst, src.data(),
                                static_cast<int64_t>(bytes));
  }
  template <typename T>
  absl::StatusOr<std::vector<T>> get(int64_t device, const void *src,
                                     size_t count) {
    std::vector<T> out(count);
    if (host()) {
      std::memcpy(out.data(), src, count * sizeof(T));
      return out;
    }
    absl::Status ok = backend.copyToHost(
        device, out.data(), src, static_cast<int64_t>(count * sizeof(T)));
    if (!ok.ok())
      return ok;
    return out;
  }

private:
  NcclBackend &backend;
};

/// A buffer of `count` elements of T holding `values`, released at the end.
template <typename T> class Buffer {
public:
  Buffer(Memory &memory, int64_t device) : memory(memory), device(device) {}
  ~Buffer() {
    if (pointer)
      memory.release(device, pointer);
  }
  absl::Status init(const std::vector<T> &values) {
    count = values.size();
    absl::StatusOr<void *> p =
        memory.allocate(device, static_cast<int64_t>(count * sizeof(T)));
    if (!p.ok())
      return p.status();
    pointer = *p;
    return memory.put(device, pointer, values);
  }
  absl::StatusOr<std::vector<T>> read() const {
    return memory.get<T>(device, pointer, count);
  }
  char *data() const { return static_cast<char *>(pointer); }

private:
  Memory &memory;
  int64_t device;
  void *pointer = nullptr;
  size_t count = 0;
};

template <typename T>
absl::Status compare(const absl::StatusOr<std::vector<T>> &actual,
                     const std::vector<T> &expected) {
  if (!actual.ok())
    return actual.status();
  for (size_t i = 0; i < expected.size(); ++i)
    if (std::memcmp(&(*actual)[i], &expected[i], sizeof(T)) != 0)
      return absl::DataLossError(
          absl::StrCat("element ", i, " is ", static_cast<double>((*actual)[i]),
                       ", expected ", static_cast<double>(expected[i])));
  return absl::OkStatus();
}

#define CHECK_OK(expr)                                                         \
  do {                                                                         \
    absl::Status status_ = (expr);                                             \
    if (!status_.ok())                                                         \
      return status_;                                                          \
  } while (0)

struct Context {
  NcclBackend &backend;
  Memory &memory;
  int64_t device;
  int64_t rank;
  std::vector<int64_t> world;
  int64_t n() const { return static_cast<int64_t>(world.size()); }
};

struct Check {
  std::string name;
  /// Needs at least this many devices.
  int64_t minDevices;
  std::function<absl::Status(Context &)> run;
};

std::vector<Check> checks() {
  std::vector<Check> all;
  all.push_back({"all_reduce f32 sum, 1048576 elements", 1, [](Context &c) {
                   constexpr size_t kCount = 1 << 20;
                   std::vector<float> mine(kCount), expected(kCount);
                   float ranks = static_cast<float>(c.n() * (c.n() + 1) / 2);
                   for (size_t i = 0; i < kCount; ++i) {
                     mine[i] = static_cast<float>((c.rank + 1) * (i % 97));
                     expected[i] = ranks * static_cast<float>(i % 97);
                   }
                   Buffer<float> send(c.memory, c.device),
                       recv(c.memory, c.device);
                   CHECK_OK(send.init(mine));
                   CHECK_OK(recv.init(std::vector<float>(kCount, -1.0f)));
                   CHECK_OK(c.backend.allReduce(c.device, c.world, send.data(),
                                                recv.data(), kCount,
                                                DataType::F32, ReduceOp::Sum));
                   return compare(recv.read(), expected);
                 }});
  all.push_back(
      {"all_reduce bf16 max and i64 prod, in place", 1, [](Context &c) {
         Buffer<uint16_t> half(c.memory, c.device);
         CHECK_OK(half.init(std::vector<uint16_t>(
             512, floatToBf16(static_cast<float>(c.rank)))));
         CHECK_OK(c.backend.allReduce(c.device, c.world, half.data(),
                                      half.data(), 512, DataType::BF16,
                                      ReduceOp::Max));
         CHECK_OK(
             compare(half.read(),
                     std::vector<uint16_t>(
                         512, floatToBf16(static_cast<float>(c.n() - 1)))));
         Buffer<int64_t> wide(c.memory, c.device);
         CHECK_OK(wide.init(std::vector<int64_t>(64, 2)));
         CHECK_OK(c.backend.allReduce(c.device, c.world, wide.data(),
                                      wide.data(), 64, DataType::I64,
                                      ReduceOp::Prod));
         return compare(wide.read(),
                        std::vector<int64_t>(64, int64_t(1) << c.n()));
       }});
  all.push_back(
      {"broadcast of 1 MiB from the last device", 1, [](Context &c) {
         constexpr size_t kBytes = 1 << 20;
         std::vector<uint8_t> payload(kBytes);
         for (size_t i = 0; i < kBytes; ++i)
           payload[i] = static_cast<uint8_t>(i * 131 + 7);
         int64_t root = c.world.back();
         Buffer<uint8_t> buffer(c.memory, c.device);
         CHECK_OK(buffer.init(
             c.device == root ? payload : std::vector<uint8_t>(kBytes, 0)));
         CHECK_OK(c.backend.broadcast(c.device, c.world, root, buffer.data(),
                                      buffer.data(), kBytes));
         return compare(buffer.read(), payload);
       }});
  all.push_back(
      {"all_gather of 64 KiB per device", 1, [](Context &c) {
         constexpr size_t kCount = 16384;
         std::vector<int32_t> mine(kCount), expected;
         for (size_t i = 0; i < kCount; ++i)
           mine[i] = static_cast<int32_t>(c.rank * 1000003 + i);
         for (int64_t r = 0; r < c.n(); ++r)
           for (size_t i = 0; i < kCount; ++i)
             expected.push_back(static_cast<int32_t>(r * 1000003 + i));
         Buffer<int32_t> send(c.memory, c.device), recv(c.memory, c.device);
         CHECK_OK(send.init(mine));
         CHECK_OK(recv.init(std::vector<int32_t>(expected.size(), -1)));
         CHECK_OK(c.backend.allGather(c.device, c.world, send.data(),
                                      recv.data(), kCount * 4));
         return compare(recv.read(), expected);
       }});
  all.push_back(
      {"reduce_scatter i32 sum", 1, [](Context &c) {
         constexpr size_t kCount = 4096;
         std::vector<int32_t> mine(kCount * c.n()), expected(kCount, 0);
         for (size_t i = 0; i < mine.size(); ++i)
           mine[i] = static_cast<int32_t>(c.rank + i);
         for (int64_t r = 0; r < c.n(); ++r)
           for (size_t i = 0; i < kCount; ++i)
             expected[i] += static_cast<int32_t>(r + c.rank * kCount + i);
         Buffer<int32_t> send(c.memory, c.device), recv(c.memory, c.device);
         CHECK_OK(send.init(mine));
         CHECK_OK(recv.init(std::vector<int32_t>(kCount, -1)));
         CHECK_OK(c.backend.reduceScatter(c.device, c.world, send.data(),
                                          recv.data(), kCount, DataType::I32,
                                          ReduceOp::Sum));
         return compare(recv.read(), expected);
       }});
  all.push_back(
      {"all_to_all of 4 KiB per pair, and in place", 1, [](Context &c) {
         constexpr size_t kCount = 1024;
         std::vector<int32_t> mine(kCount * c.n()), expected(kCount * c.n());
         for (int64_t j = 0; j < c.n(); ++j)
           for (size_t i = 0; i < kCount; ++i) {
             mine[j * kCount + i] = static_cast<int32_t>(c.rank * 100 + j);
             expected[j * kCount + i] = static_cast<int32_t>(j * 100 + c.rank);
           }
         Buffer<int32_t> send(c.memory, c.device), recv(c.memory, c.device);
         CHECK_OK(send.init(mine));
         CHECK_OK(recv.init(std::vector<int32_t>(mine.size(), -1)));
         CHECK_OK(c.backend.allToAll(c.device, c.world, send.data(),
                                     recv.data(), kCount * 4));
         CHECK_OK(compare(recv.read(), expected));
         CHECK_OK(c.backend.allToAll(c.device, c.world, send.data(),
                                     send.data(), kCount * 4));
         return compare(send.read(), expected);
       }});
  all.push_back(
      {"send/recv ring of 1 MiB in a group", 2, [](Context &c) {
         constexpr size_t kCount = 1 << 18;
         int64_t next = c.world[(c.rank + 1) % c.n()];
         int64_t previous = c.world[(c.rank + c.n() - 1) % c.n()];
         Buffer<float> out(c.memory, c.device), in(c.memory, c.device);
         CHECK_OK(out.init(
             std::vector<float>(kCount, static_cast<float>(c.device))));
         CHECK_OK(in.init(std::vector<float>(kCount, -1.0f)));
         CHECK_OK(c.backend.groupStart(c.device));
         CHECK_OK(c.backend.send(c.device, next, out.data(), kCount * 4));
         CHECK_OK(c.backend.recv(c.device, previous, in.data(), kCount * 4));
         CHECK_OK(c.backend.groupEnd(c.device));
         return compare(in.read(), std::vector<float>(
                                       kCount, static_cast<float>(previous)));
       }});
  all.push_back(
      {"all_gather on the reversed world (a second communicator)", 2,
       [](Context &c) {
         std::vector<int64_t> reversed(c.world.rbegin(), c.world.rend());
         std::vector<int64_t> expected(reversed.begin(), reversed.end());
         Buffer<int64_t> send(c.memory, c.device), recv(c.memory, c.device);
         CHECK_OK(send.init(std::vector<int64_t>{c.device}));
         CHECK_OK(recv.init(std::vector<int64_t>(c.n(), -1)));
         CHECK_OK(c.backend.allGather(c.device, reversed, send.data(),
                                      recv.data(), 8));
         return compare(recv.read(), expected);
       }});
  return all;
}

/// Runs every check on every local device of `backend`; prints one line per
/// check and device. Returns true when all passed.
bool runChecks(NcclBackend &backend, const std::string &prefix) {
  std::vector<Check> all = checks();
  std::vector<int64_t> world(backend.worldDevices().begin(),
                             backend.worldDevices().end());
  std::mutex mu;
  std::map<int64_t, std::vector<std::string>> lines;
  bool passed = true;
  Memory memory(backend);
  absl::Status status = runOnDevices(backend, [&](int64_t device) {
    Context c{backend, memory, device,
              std::find(world.begin(), world.end(), device) - world.begin(),
              world};
    std::vector<std::string> mine;
    absl::Status first;
    for (const Check &check : all) {
      if (c.n() < check.minDevices) {
        mine.push_back(absl::StrCat(check.name, ": skipped (needs ",
                                    check.minDevices, " devices)"));
        continue;
      }
      auto start = std::chrono::steady_clock::now();
      absl::Status ok = check.run(c);
      double ms = millisecondsSince(start);
      char time[32];
      std::snprintf(time, sizeof(time), "%.3f", ms);
      mine.push_back(absl::StrCat(check.name, " over ", c.n(), " devices: ",
                                  ok.ok()
                                      ? absl::StrCat("PASS (", time, " ms)")
                                      : absl::StrCat("FAIL: ", ok.message())));
      if (!ok.ok()) {
        first = ok;
        break; // The backend is aborted after an error.
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    lines[device] = std::move(mine);
    if (!first.ok())
      passed = false;
    return first;
  });
  for (const auto &[device, text] : lines)
    for (const std::string &line : text)
      std::printf("%sdevice %lld (CUDA device %d): %s\n", prefix.c_str(),
                  static_cast<long long>(device), backend.cudaDevice(device),
                  line.c_str());
  if (!status.ok()) {
    std::printf("%sFAIL: %s\n", prefix.c_str(),
                std::string(status.message()).c_str());
    passed = false;
  }
  return passed;
}

//===----------------------------------------------------------------------===//
// Modes
//===----------------------------------------------------------------------===//

std::vector<NcclBuffers> bufferModes(const Arguments &args) {
  if (args.buffers == "device")
    return {NcclBuffers::Device};
  if (args.buffers == "host")
    return {NcclBuffers::Host};
  return {NcclBuffers::Device, NcclBuffers::Host};
}

const char *modeName(NcclBuffers buffers) {
  return buffers == NcclBuffers::Device ? "device buffers"
                                        : "host buffers staged by the backend";
}

/// "no CUDA device: ..." and 77, or the error and 1.
int reportCreationFailure(const absl::Status &status) {
  if (absl::IsUnavailable(status) &&
      absl::StartsWith(status.message(), "no CUDA device: ")) {
    std::printf("%s\n", std::string(status.message()).c_str());
    std::printf("polymesh-nccl-check: SKIPPED (exit code 77)\n");
    return kExitSkip;
  }
  std::printf("polymesh-nccl-check: FAIL: %s\n",
              std::string(status.message()).c_str());
  return kExitFail;
}

int runSingleProcess(const Arguments &args) {
  const NcclApi *api = nullptr;
  if (args.simulate) {
    resetSimulatedGpus(args.simulate);
    api = &simulatedNcclApi();
    std::printf("polymesh-nccl-check: simulated CUDA and NCCL with %d "
                "devices: no GPU is used\n",
                args.simulate);
  }
  absl::StatusOr<int> count = cudaDeviceCount(api);
  if (!count.ok())
    return reportCreationFailure(count.status());
  int devices = args.devices ? args.devices : *count;
  if (devices > *count) {
    std::printf("polymesh-nccl-check: --devices=%d, but this machine has %d "
                "CUDA device%s\n",
                devices, *count, *count == 1 ? "" : "s");
    std::printf("polymesh-nccl-check: SKIPPED (exit code 77)\n");
    return kExitSkip;
  }
  bool passed = true;
  for (NcclBuffers buffers : bufferModes(args)) {
    NcclOptions options;
    options.api = api;
    options.buffers = buffers;
    options.timeout = absl::Seconds(args.timeoutSeconds);
    std::vector<int64_t> ids(devices);
    for (int i = 0; i < devices; ++i)
      ids[i] = i;
    absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
        NcclBackend::createSingleProcess(ids, options);
    if (!backend.ok())
      return reportCreationFailure(backend.status());
    std::printf("polymesh-nccl-check: one process, %d device%s, %s\n", devices,
                devices == 1 ? "" : "s", modeName(buffers));
    passed &= runChecks(**backend, "");
  }
  std::printf("polymesh-nccl-check: %s\n", passed ? "PASS" : "FAIL");
  return passed ? kExitPass : kExitFail;
}

int runLaunchedRank(const Arguments &args) {
  absl::StatusOr<LaunchEnvironment> env = parseLaunchEnvironment();
  if (!env.ok()) {
    std::printf("polymesh-nccl-check: %s\n",
                std::string(env.status().message()).c_str());
    return kExitUsage;
  }
  std::string prefix =
      absl::StrCat("rank ", env->rank, "/", env->worldSize, ": ");
  // Without a GPU every rank says so at once, before any rendezvous.
  if (absl::StatusOr<int> count = cudaDeviceCount(); !count.ok()) {
    std::printf("%s", prefix.c_str());
    return reportCreationFailure(count.status());
  }
  NcclOptions options;
  options.timeout = absl::Seconds(args.timeoutSeconds);
  // One store for every run of this job, each backend under its own prefix.
  if (env->worldSize > 1) {
    absl::StatusOr<std::unique_ptr<Store>> store =
        createStoreFromEnvironment(*env, options.timeout);
    if (!store.ok()) {
      std::printf("%sFAIL: %s\n", prefix.c_str(),
                  std::string(store.status().message()).c_str());
      return kExitFail;
    }
    options.store = std::shared_ptr<Store>(std::move(*store));
  }
  bool passed = true;
  std::vector<NcclBuffers> modes = bufferModes(args);
  for (size_t m = 0; m < modes.size(); ++m) {
    options.buffers = modes[m];
    options.storePrefix = absl::StrCat("polymesh/nccl-check/", m);
    absl::StatusOr<std::unique_ptr<NcclBackend>> backend =
        NcclBackend::createFromLaunchEnvironment(*env, options);
    if (!backend.ok()) {
      std::printf("%s", prefix.c_str());
      return reportCreationFailure(backend.status());
    }
    std::printf("%sone process per GPU, %lld processes, %s\n", prefix.c_str(),
                static_cast<long long>(env->worldSize), modeName(modes[m]));
    passed &= runChecks(**backend, prefix);
  }
  std::printf("%s%s\n", prefix.c_str(), passed ? "PASS" : "FAIL");
  return passed ? kExitPass : kExitFail;
}

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

/// --launch=N: counts the GPUs in a child (CUDA must not be initialized in
/// a process that forks the ranks), then starts N ranks of this program.
int launch(const Arguments &args, char **argv) {
  int pipeFds[2];
  if (::pipe(pipeFds) != 0)
    return kExitFail;
  pid_t counter = ::fork();
  if (counter == 0) {
    ::close(pipeFds[0]);
    absl::StatusOr<int> count = cudaDeviceCount();
    std::string text = count.ok() ? absl::StrCat(*count)
                                  : std::string(count.status().message());
    ssize_t written = ::write(pipeFds[1], text.data(), text.size());
    (void)written;
    ::_exit(0);
  }
  ::close(pipeFds[1]);
  std::string text;
  char buffer[512];
  ssize_t got;
  while ((got = ::read(pipeFds[0], buffer, sizeof(buffer))) > 0)
    text.append(buffer, static_cast<size_t>(got));
  ::close(pipeFds[0]);
  ::waitpid(counter, nullptr, 0);
  int count = 0;
  if (!absl::SimpleAtoi(text, &count)) {
    std::printf("%s\npolymesh-nccl-check: SKIPPED (exit code 77)\n",
                text.c_str());
    return kExitSkip;
  }
  if (count < args.launch) {
    std::printf("polymesh-nccl-check: --launch=%d needs %d CUDA devices, "
                "this machine has %d\npolymesh-nccl-check: SKIPPED (exit "
                "code 77)\n",
                args.launch, args.launch, count);
    return kExitSkip;
  }
  std::fflush(stdout);
  int port = freePort();
  std::vector<std::string> forwarded = {
      absl::StrCat("--buffers=", args.buffers),
      absl::StrCat("--timeout=", args.timeoutSeconds)};
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < args.launch; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", absl::StrCat(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", absl::StrCat(args.launch).c_str(), 1);
      ::setenv("LOCAL_RANK", absl::StrCat(rank).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", absl::StrCat(port).c_str(), 1);
      std::vector<char *> childArgv = {argv[0]};
      for (std::string &arg : forwarded)
        childArgv.push_back(arg.data());
      childArgv.push_back(nullptr);
      ::execv("/proc/self/exe", childArgv.data());
      std::perror("polymesh-nccl-check: execv");
      ::_exit(kExitFail);
    }
    ranks.push_back(pid);
  }
  int result = kExitPass;
  for (int rank = 0; rank < args.launch; ++rank) {
    int status = 0;
    ::waitpid(ranks[rank], &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitFail;
    if (code == kExitSkip && result == kExitPass)
      result = kExitSkip;
    else if (code != kExitPass && code != kExitSkip)
      result = kExitFail;
  }
  std::printf("polymesh-nccl-check: %d processes: %s\n", args.launch,
              result == kExitPass   ? "PASS"
              : result == kExitSkip ? "SKIPPED (exit code 77)"
                                    : "FAIL");
  return result;
}

} // namespace

int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Arguments args;
  if (!parseArguments(argc, argv, args)) {
    usage();
    return kExitUsage;
  }
  if (args.countDevices) {
    absl::StatusOr<int> count =
        cudaDeviceCount(args.simulate ? &simulatedNcclApi() : nullptr);
    if (!count.ok()) {
      std::printf("%s\n", std::string(count.status().message()).c_str());
      return kExitSkip;
    }
    std::printf("%d\n", *count);
    return kExitPass;
  }
  if (args.launch)
    return launch(args, argv);
  if (!args.simulate && isLaunchedJob())
    return runLaunchedRank(args);
  return runSingleProcess(args);
}
