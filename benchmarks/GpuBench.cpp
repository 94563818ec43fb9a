//===- GpuBench.cpp - Generated copy kernels and NCCL on GPUs -------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The GPU figures of docs/benchmarks.md ("GPU check"), measured on the
// kernels the compiler really generates:
//
// * The PTX comes from compiling a bundled program (the Orbax restore
//   pattern, whose CUDA lowering has copy_outer1_u16 and copy_outer1_u1)
//   in process through --polymesh-pipeline=target=cuda, taken from the
//   gpu.binary as polymesh-translate --polymesh-to-ptx takes it, and loaded
//   and launched through the runtime's mgpu* wrappers on a stream of our
//   own: the launch path of generated code, with its grid (min(ceil(units /
//   256), 4096) blocks of 256 threads).
// * pack (runs of a column block of a row-major matrix into a contiguous
//   buffer), unpack (the reverse) and a contiguous copy, each next to
//   cudaMemcpyAsync device-to-device of the same bytes on the same stream,
//   timed with CUDA events. Bandwidth is bytes copied / time for both (not
//   bytes read + written). Target: kernel >= 80% of memcpy.
// * A single-node broadcast-type reshard compiled by Polymesh (GPU 0's
//   vector replicated over every local GPU, at least 2) next to
//   ncclBroadcast of the same bytes over the same GPUs, algbw and busbw as
//   nccl-tests defines them (broadcast: busbw = algbw). Target: reshard >=
//   85% of NCCL's busbw. --simulate-reshard=N runs the reshard's path on
//   simulated GPUs, where there is none.
//
// Every measurement is checked (sampled rows against the source pattern)
// before it is timed. Exit codes: 0 measured (targets are reported, not
// enforced), 1 a CUDA/NCCL error or a wrong result, 2 bad usage, 77 skipped
// (no CUDA device; "polymesh-gpu-bench: skipped: <reason>"). --print-ptx
// needs no GPU.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Execution/CudaTarget.h"
#include "polymesh/Execution/InputFill.h"
#include "polymesh/InitAllDialects.h"
#include "polymesh/Runtime/NcclBackend.h"
#include "polymesh/Runtime/PolymeshCudaRuntime.h"
#include "polymesh/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "llvm/Support/raw_ostream.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

constexpr int kExitPass = 0;
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;
constexpr int kExitSkip = 77;

/// The launch geometry of generated code (lib/Conversion/LowerToCuda.cpp).
constexpr int64_t kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 4096;

constexpr double kKernelTarget = 0.80;
constexpr double kReshardTarget = 0.85;

/// The Orbax restore pattern (test/Conversion/lower-to-cuda.mlir): each
/// receiver copies its column half out of the replica's tile, 16-byte units
/// when aligned and bytes otherwise, so the module holds both copy kernels.
constexpr const char *kProgram = R"mlir(
polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=4, "tp"=2]>
func.func @restore(%a: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
    -> (tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>}) {
  return %a : tensor<16x32xf32>
}
)mlir";

struct Arguments {
  std::vector<int64_t> sizes = {int64_t(64) << 20, int64_t(1) << 30};
  std::vector<int64_t> runs = {int64_t(4) << 10, int64_t(64) << 10};
  int64_t strideFactor = 4;
  int iterations = 20;
  int warmup = 3;
  int repetitions = 5;
  std::string jsonPath;
  bool printPtx = false;
  bool nccl = true;
  /// --simulate-reshard=N: only the generated reshard, on N simulated GPUs.
  int simulateGpus = 0;
};

void usage(std::FILE *out) {
  std::fprintf(
      out,
      "usage: polymesh-gpu-bench [options]\n"
      "  --sizes=64M,1G      bytes copied per measurement (K, M, G: binary)\n"
      "  --runs=4K,64K       run lengths of pack/unpack (multiples of 16)\n"
      "  --stride-factor=4   pack/unpack source/destination row = factor * "
      "run\n"
      "  --iterations=20     timed launches per repetition\n"
      "  --warmup=3          untimed launches first\n"
      "  --repetitions=5     repetitions; the median is reported\n"
      "  --json=FILE         JSON lines to FILE (default: stdout, after the "
      "table)\n"
      "  --no-nccl           skip the ncclBroadcast baseline\n"
      "  --print-ptx         print the PTX of the generated kernels and exit "
      "(no GPU needed)\n"
      "  --simulate-reshard=N  run and check only the generated broadcast "
      "reshard,\n"
      "                      on N simulated GPUs (no GPU needed; its times "
      "are not GPU times)\n"
      "Exit codes: 0 measured, 1 error or wrong result, 2 usage, 77 no GPU "
      "(skipped).\n");
}

bool parseBytes(const std::string &text, int64_t &out) {
  if (text.empty())
    return false;
  int64_t scale = 1;
  std::string digits = text;
  switch (text.back()) {
  case 'K':
  case 'k':
    scale = int64_t(1) << 10;
    break;
  case 'M':
  case 'm':
    scale = int64_t(1) << 20;
    break;
  case 'G':
  case 'g':
    scale = int64_t(1) << 30;
    break;
  default:
    break;
  }
  if (scale != 1)
    digits.pop_back();
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value <= 0 ||
      value > (int64_t(1) << 40) / scale)
    return false;
  out = value * scale;
  return true;
}

bool parseByteList(const std::string &text, std::vector<int64_t> &out) {
  out.clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t bytes = 0;
    if (!parseBytes(std::string(part), bytes) || bytes % 16 != 0)
      return false;
    out.push_back(bytes);
  }
  return !out.empty();
}

/// Returns false after printing why on bad usage; exits 0 on --help.
bool parseArguments(int argc, char **argv, Arguments &args) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto valueOf = [&](const char *flag, std::string &value) {
      std::string prefix = std::string(flag) + "=";
      if (arg.rfind(prefix, 0) != 0)
        return false;
      value = arg.substr(prefix.size());
      return true;
    };
    auto positive = [&](const std::string &value, auto &out) {
      int64_t parsed = 0;
      if (!absl::SimpleAtoi(value, &parsed) || parsed < 1 || parsed > 1000000)
        return false;
      out = static_cast<std::remove_reference_t<decltype(out)>>(parsed);
      return true;
    };
    std::string value;
    bool ok = true;
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      std::exit(kExitPass);
    } else if (arg == "--print-ptx") {
      args.printPtx = true;
    } else if (arg.rfind("--simulate-reshard=", 0) == 0) {
      int64_t gpus = 0;
      if (!absl::SimpleAtoi(arg.substr(19), &gpus) || gpus < 2 || gpus > 64)
        return false;
      args.simulateGpus = static_cast<int>(gpus);
    } else if (arg == "--no-nccl") {
      args.nccl = false;
    } else if (valueOf("--sizes", value)) {
      ok = parseByteList(value, args.sizes);
    } else if (valueOf("--runs", value)) {
      ok = parseByteList(value, args.runs);
    } else if (valueOf("--stride-factor", value)) {
      ok = positive(value, args.strideFactor);
    } else if (valueOf("--iterations", value)) {
      ok = positive(value, args.iterations);
    } else if (valueOf("--warmup", value)) {
      ok = absl::SimpleAtoi(value, &args.warmup) && args.warmup >= 0;
    } else if (valueOf("--repetitions", value)) {
      ok = positive(value, args.repetitions);
    } else if (valueOf("--json", value)) {
      args.jsonPath = value;
      ok = !value.empty();
    } else {
      std::fprintf(stderr, "polymesh-gpu-bench: unknown option '%s'\n",
                   arg.c_str());
      return false;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "polymesh-gpu-bench: bad value in '%s' (sizes and runs: "
                   "positive multiples of 16 bytes, e.g. 64M,1G)\n",
                   arg.c_str());
      return false;
    }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// The generated kernels
//===----------------------------------------------------------------------===//

struct PtxModule {
  std::string binary; // the gpu.binary's symbol
  std::string target; // its #nvvm.target, printed
  std::string ptx;
};

/// What the bundled programs use, with the sharding rules propagation needs.
mlir::DialectRegistry programRegistry() {
  mlir::DialectRegistry registry;
  polymesh::registerPolymeshInputDialects(registry);
  return registry;
}

/// The context's diagnostics as text, for error messages.
class DiagnosticText {
public:
  explicit DiagnosticText(mlir::MLIRContext &context)
      : stream(text), handler(&context, [this](mlir::Diagnostic &diagnostic) {
          stream << diagnostic.getLocation() << ": " << diagnostic << "\n";
          return mlir::success();
        }) {}
  const std::string &str() const { return text; }

private:
  std::string text;
  llvm::raw_string_ostream stream;
  mlir::ScopedDiagnosticHandler handler;
};

/// Compiles kProgram through --polymesh-pipeline=target=cuda and returns the
/// PTX of every gpu.binary (as polymesh-translate --polymesh-to-ptx).
absl::StatusOr<std::vector<PtxModule>> compileKernels() {
  mlir::DialectRegistry registry = programRegistry();
  polymesh::registerCudaLoweringDialects(registry);
  mlir::MLIRContext context(registry);
  DiagnosticText diagnostics(context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kProgram, &context,
                                              "gpu-bench.mlir");
  if (!module)
    return absl::InternalError(absl::StrCat(
        "parsing the bundled program failed:\n", diagnostics.str()));

  polymesh::registerPolymeshPipelines();
  mlir::PassManager pm(&context);
  std::string pipelineErrors;
  llvm::raw_string_ostream pipelineStream(pipelineErrors);
  if (mlir::failed(mlir::parsePassPipeline("polymesh-pipeline{target=cuda}", pm,
                                           pipelineStream)))
    return absl::InternalError(
        absl::StrCat("--polymesh-pipeline=target=cuda: ", pipelineErrors));
  if (mlir::failed(pm.run(*module)))
    return absl::InternalError(absl::StrCat(
        "--polymesh-pipeline=target=cuda failed:\n", diagnostics.str()));

  std::vector<PtxModule> modules;
  for (auto binary : module->getOps<mlir::gpu::BinaryOp>())
    for (mlir::Attribute attr : binary.getObjects()) {
      auto object = mlir::dyn_cast<mlir::gpu::ObjectAttr>(attr);
      if (!object ||
          object.getFormat() != mlir::gpu::CompilationTarget::Assembly)
        continue;
      std::string target;
      llvm::raw_string_ostream targetStream(target);
      targetStream << object.getTarget();
      modules.push_back({binary.getSymName().str(), target,
                         object.getObject().getValue().str()});
    }
  if (modules.empty())
    return absl::InternalError(
        "the compiled program has no PTX (no gpu.binary with assembly)");
  return modules;
}

//===----------------------------------------------------------------------===//
// CUDA helpers
//===----------------------------------------------------------------------===//

absl::Status cudaCheck(cudaError_t error, const char *call,
                       const std::string &what) {
  if (error == cudaSuccess)
    return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " (", what,
                                          ") failed: ", cudaGetErrorName(error),
                                          ": ", cudaGetErrorString(error)));
}

#define CUDA_OK(call, what)                                                    \
  do {                                                                         \
    absl::Status status_ = cudaCheck((call), #call, (what));                   \
    if (!status_.ok())                                                         \
      return status_;                                                          \
  } while (0)

#define RETURN_IF_ERROR(expr)                                                  \
  do {                                                                         \
    absl::Status status_ = (expr);                                             \
    if (!status_.ok())                                                         \
      return status_;                                                          \
  } while (0)

class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (pointer)
      cudaFree(pointer);
  }
  absl::Status allocate(int64_t size) {
    bytes = size;
    return cudaCheck(cudaMalloc(&pointer, static_cast<size_t>(size)),
                     "cudaMalloc", absl::StrCat(size, " bytes"));
  }
  char *data() const { return static_cast<char *>(pointer); }
  int64_t size() const { return bytes; }

private:
  void *pointer = nullptr;
  int64_t bytes = 0;
};

/// The source pattern: byte o of a filled buffer is patternByte(o). The
/// period is not a power of two, so rows of a strided matrix differ.
constexpr int64_t kPatternBytes = (int64_t(1) << 20) + 48;

uint8_t patternByte(int64_t offset) {
  uint64_t x = static_cast<uint64_t>(offset % kPatternBytes);
  x = (x + 1) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint8_t>(x >> 56);
}

/// Fills `bytes` of `buffer` with the pattern: one period from the host,
/// then device copies that double the filled prefix.
absl::Status fillPattern(char *buffer, int64_t bytes, cudaStream_t stream) {
  int64_t first = std::min(bytes, kPatternBytes);
  std::vector<uint8_t> host(static_cast<size_t>(first));
  for (int64_t i = 0; i < first; ++i)
    host[i] = patternByte(i);
  CUDA_OK(cudaMemcpyAsync(buffer, host.data(), first, cudaMemcpyHostToDevice,
                          stream),
          "pattern");
  // `filled` stays a multiple of the period until the last copy, so every
  // copy keeps offsets congruent modulo the period.
  int64_t filled = first;
  while (filled < bytes) {
    int64_t chunk = std::min(filled, bytes - filled);
    CUDA_OK(cudaMemcpyAsync(buffer + filled, buffer, chunk,
                            cudaMemcpyDeviceToDevice, stream),
            "pattern");
    filled += chunk;
  }
  return cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize",
                   "pattern");
}

/// Checks that `bytes` at device address `at` equal the pattern from
/// `patternOffset` on.
absl::Status expectPattern(const char *at, int64_t bytes, int64_t patternOffset,
                           const std::string &what) {
  std::vector<uint8_t> host(static_cast<size_t>(bytes));
  CUDA_OK(cudaMemcpy(host.data(), at, bytes, cudaMemcpyDeviceToHost), what);
  for (int64_t i = 0; i < bytes; ++i)
    if (host[i] != patternByte(patternOffset + i))
      return absl::DataLossError(
          absl::StrCat(what, ": byte ", i, " is ", int(host[i]), ", expected ",
                       int(patternByte(patternOffset + i))));
  return absl::OkStatus();
}

/// A generated copy kernel, launched as generated host code launches it.
struct CopyKernel {
  std::string name;
  int64_t unitBytes = 0;
  void *function = nullptr;

  /// `count` runs of `runBytes`, run i at src + i * srcStride and
  /// dst + i * dstStride.
  void launch(cudaStream_t stream, const void *src, void *dst, int64_t runBytes,
              int64_t count, int64_t srcStride, int64_t dstStride) const {
    const void *from = src;
    void *to = dst;
    int64_t runUnits = runBytes / unitBytes;
    int64_t total = runUnits * count;
    void *params[] = {&from,      &to,        &runUnits, &count,
                      &srcStride, &dstStride, &total};
    int64_t blocks =
        std::min((total + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks);
    mgpuLaunchKernel(function, blocks, 1, 1, kThreadsPerBlock, 1, 1,
                     /*sharedMemoryBytes=*/0, stream, params,
                     /*extra=*/nullptr, /*paramsCount=*/7);
  }
};

/// Milliseconds per call of `op`, one batch of `iterations` between two
/// events on `stream`.
absl::StatusOr<double> timeBatch(cudaStream_t stream, int iterations,
                                 const std::function<void()> &op) {
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_OK(cudaEventCreate(&start), "timing");
  if (absl::Status s =
          cudaCheck(cudaEventCreate(&stop), "cudaEventCreate", "timing");
      !s.ok()) {
    cudaEventDestroy(start);
    return s;
  }
  absl::Status status =
      cudaCheck(cudaEventRecord(start, stream), "cudaEventRecord", "timing");
  for (int i = 0; status.ok() && i < iterations; ++i)
    op();
  if (status.ok())
    status =
        cudaCheck(cudaEventRecord(stop, stream), "cudaEventRecord", "timing");
  if (status.ok())
    status = cudaCheck(cudaEventSynchronize(stop), "cudaEventSynchronize",
                       "a timed batch");
  float ms = 0;
  if (status.ok())
    status = cudaCheck(cudaEventElapsedTime(&ms, start, stop),
                       "cudaEventElapsedTime", "timing");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!status.ok())
    return status;
  return static_cast<double>(ms) / iterations;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string formatBytes(int64_t bytes) {
  if (bytes >= (int64_t(1) << 30) && bytes % (int64_t(1) << 30) == 0)
    return absl::StrCat(bytes >> 30, " GiB");
  if (bytes >= (int64_t(1) << 20) && bytes % (int64_t(1) << 20) == 0)
    return absl::StrCat(bytes >> 20, " MiB");
  if (bytes >= (int64_t(1) << 10) && bytes % (int64_t(1) << 10) == 0)
    return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}

std::string jsonString(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      continue;
    out += c;
  }
  return out + "\"";
}

std::string jsonNumber(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.6g", value);
  return buffer;
}

/// Where the JSON lines go: a file, or stdout after the tables.
class JsonSink {
public:
  bool open(const std::string &path) {
    if (path.empty())
      return true;
    file = std::fopen(path.c_str(), "w");
    return file != nullptr;
  }
  ~JsonSink() {
    if (file)
      std::fclose(file);
  }
  void add(const std::string &line) {
    if (file) {
      std::fprintf(file, "%s\n", line.c_str());
      std::fflush(file);
    } else {
      pending.push_back(line);
    }
  }
  void flushToStdout() {
    for (const std::string &line : pending)
      std::printf("%s\n", line.c_str());
    pending.clear();
  }

private:
  std::FILE *file = nullptr;
  std::vector<std::string> pending;
};

//===----------------------------------------------------------------------===//
// Kernel against memcpy
//===----------------------------------------------------------------------===//

struct KernelCase {
  std::string kind; // pack, unpack, contiguous
  const CopyKernel *kernel;
  int64_t bytes, runBytes, count, srcStride, dstStride;
  const char *src;
  char *dst;
  /// Fills the source and checks the destination after one launch.
  std::function<absl::Status()> prepare, check;
  bool hasTarget = false;
  /// Bytes from dst that the kernel writes into (with the gaps between
  /// runs): cleared before the checked launch, so that a launch that did
  /// not happen cannot pass for one that did.
  int64_t dstSpan = 0;
};

absl::Status measureKernelCase(const Arguments &args, const KernelCase &c,
                               cudaStream_t stream, const std::string &device,
                               JsonSink &json) {
  RETURN_IF_ERROR(c.prepare());
  CUDA_OK(cudaMemsetAsync(c.dst, 0, c.dstSpan, stream),
          "clearing the destination");
  c.kernel->launch(stream, c.src, c.dst, c.runBytes, c.count, c.srcStride,
                   c.dstStride);
  CUDA_OK(cudaStreamSynchronize(stream),
          absl::StrCat(c.kind, " with ", c.kernel->name));
  // mgpuLaunchKernel reports a failed launch only on stderr: a launch that
  // did not happen shows up here as a wrong result.
  if (absl::Status checked = c.check(); !checked.ok())
    return absl::DataLossError(absl::StrCat(
        c.kind, " with ", c.kernel->name, " ", formatBytes(c.bytes),
        ": wrong result: ", checked.message(),
        " (a failed launch is reported on stderr above)"));

  auto kernel = [&] {
    c.kernel->launch(stream, c.src, c.dst, c.runBytes, c.count, c.srcStride,
                     c.dstStride);
  };
  // The peer: the same bytes, contiguous, on the same stream.
  auto memcpy = [&] {
    cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, stream);
  };
  for (int i = 0; i < args.warmup; ++i) {
    kernel();
    memcpy();
  }
  CUDA_OK(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> kernelMs, memcpyMs;
  // Alternating batches, so that both see the same clocks and neighbours.
  for (int r = 0; r < args.repetitions; ++r) {
    absl::StatusOr<double> k = timeBatch(stream, args.iterations, kernel);
    if (!k.ok())
      return k.status();
    absl::StatusOr<double> m = timeBatch(stream, args.iterations, memcpy);
    if (!m.ok())
      return m.status();
    kernelMs.push_back(*k);
    memcpyMs.push_back(*m);
  }
  CUDA_OK(cudaGetLastError(), "the timed launches");
  double kMs = median(kernelMs), mMs = median(memcpyMs);
  double kGbps = c.bytes / (kMs * 1e-3) / 1e9;
  double mGbps = c.bytes / (mMs * 1e-3) / 1e9;
  double ratio = mMs / kMs;
  std::string verdict =
      c.hasTarget ? (ratio >= kKernelTarget ? "met" : "MISSED") : "(info)";
  std::printf("%-8s %-10s %-16s %-8s %10.3f %10.1f %10.3f %10.1f %6.2f  %s\n",
              formatBytes(c.bytes).c_str(), c.kind.c_str(),
              c.kernel->name.c_str(), formatBytes(c.runBytes).c_str(), kMs,
              kGbps, mMs, mGbps, ratio, verdict.c_str());
  json.add(absl::StrCat(
      "{\"bench\":\"polymesh-gpu-bench\",\"measurement\":", jsonString(c.kind),
      ",\"kernel\":", jsonString(c.kernel->name), ",\"device\":",
      jsonString(device), ",\"bytes\":", c.bytes, ",\"run_bytes\":", c.runBytes,
      ",\"runs\":", c.count, ",\"src_stride\":", c.srcStride,
      ",\"dst_stride\":", c.dstStride, ",\"iterations\":", args.iterations,
      ",\"repetitions\":", args.repetitions, ",\"kernel_ms\":", jsonNumber(kMs),
      ",\"memcpy_ms\":", jsonNumber(mMs), ",\"kernel_gbps\":",
      jsonNumber(kGbps), ",\"memcpy_gbps\":", jsonNumber(mGbps),
      ",\"ratio\":", jsonNumber(ratio), ",\"target\":",
      c.hasTarget ? jsonNumber(kKernelTarget) : std::string("null"),
      ",\"met\":",
      c.hasTarget ? (ratio >= kKernelTarget ? "true" : "false") : "null",
      ",\"bandwidth\":\"bytes copied / time\"}"));
  return absl::OkStatus();
}

absl::Status runKernelBench(const Arguments &args,
                            const std::vector<PtxModule> &modules,
                            JsonSink &json) {
  CUDA_OK(cudaSetDevice(0), "CUDA device 0");
  // The mgpu* wrappers use the driver API on the calling thread's current
  // context: make the runtime's primary context of device 0 current.
  CUDA_OK(cudaFree(nullptr), "creating the primary context");
  cudaDeviceProp properties{};
  CUDA_OK(cudaGetDeviceProperties(&properties, 0), "CUDA device 0");
  std::string device = properties.name;
  std::printf("polymesh-gpu-bench: CUDA device 0: %s, sm_%d%d, %.1f GiB\n",
              device.c_str(), properties.major, properties.minor,
              properties.totalGlobalMem / double(int64_t(1) << 30));

  std::string ptx;
  for (const PtxModule &m : modules)
    if (m.ptx.find(".entry copy_outer1_u16") != std::string::npos)
      ptx = m.ptx;
  if (ptx.empty())
    return absl::InternalError(
        "the compiled program has no kernel copy_outer1_u16");
  void *module = mgpuModuleLoadJIT(ptx.data(), /*optLevel=*/2);
  if (!module)
    return absl::InternalError(
        "mgpuModuleLoadJIT failed (the runtime printed why on stderr)");
  CopyKernel u16{"copy_outer1_u16", 16,
                 mgpuModuleGetFunction(module, "copy_outer1_u16")};
  CopyKernel u1{"copy_outer1_u1", 1,
                ptx.find(".entry copy_outer1_u1(") != std::string::npos
                    ? mgpuModuleGetFunction(module, "copy_outer1_u1")
                    : nullptr};
  if (!u16.function)
    return absl::InternalError("mgpuModuleGetFunction(copy_outer1_u16) failed");

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
          "the bench's stream");
  absl::Status status = absl::OkStatus();
  std::printf("%-8s %-10s %-16s %-8s %10s %10s %10s %10s %6s  %s\n", "bytes",
              "kind", "kernel", "run", "kernel ms", "GB/s", "memcpy ms", "GB/s",
              "ratio", "target >= 0.80 of memcpy");
  for (int64_t bytes : args.sizes) {
    int64_t maxRun = 0;
    for (int64_t run : args.runs)
      if (run <= bytes && bytes % run == 0)
        maxRun = std::max(maxRun, run);
    // a: the strided matrix (rows of factor * run), b: contiguous.
    DeviceBuffer a, b;
    status = a.allocate(std::max(bytes, bytes / std::max<int64_t>(maxRun, 1) *
                                            maxRun * args.strideFactor));
    if (status.ok())
      status = b.allocate(bytes);
    if (!status.ok())
      break;
    std::vector<KernelCase> cases;
    for (int64_t run : args.runs) {
      if (run > bytes || bytes % run != 0) {
        std::printf("%-8s pack/unpack with %s runs: skipped (the size is not "
                    "a multiple of the run)\n",
                    formatBytes(bytes).c_str(), formatBytes(run).c_str());
        continue;
      }
      int64_t rows = bytes / run, row = run * args.strideFactor;
      std::vector<int64_t> sampled = {0};
      for (int64_t r : {int64_t(1), rows / 2, rows - 1})
        if (r < rows && r != sampled.back())
          sampled.push_back(r);
      KernelCase pack{"pack", &u16, bytes,    run,     rows,
                      row,    run,  a.data(), b.data()};
      pack.prepare = [&, row, rows] {
        return fillPattern(a.data(), rows * row, stream);
      };
      pack.check = [&, run, row, sampled] {
        for (int64_t r : sampled)
          RETURN_IF_ERROR(expectPattern(b.data() + r * run, run, r * row,
                                        absl::StrCat("pack, run ", r)));
        return absl::OkStatus();
      };
      pack.hasTarget = true;
      pack.dstSpan = bytes;
      cases.push_back(pack);
      KernelCase unpack{"unpack", &u16, bytes,    run,     rows,
                        run,      row,  b.data(), a.data()};
      unpack.prepare = [&, bytes] {
        return fillPattern(b.data(), bytes, stream);
      };
      unpack.check = [&, run, row, sampled] {
        for (int64_t r : sampled)
          RETURN_IF_ERROR(expectPattern(a.data() + r * row, run, r * run,
                                        absl::StrCat("unpack, run ", r)));
        return absl::OkStatus();
      };
      unpack.hasTarget = true;
      unpack.dstSpan = rows * row;
      cases.push_back(unpack);
    }
    // A contiguous copy is one run (no outer repetition).
    auto contiguous = [&](const CopyKernel &kernel, bool hasTarget) {
      KernelCase c{"contiguous", &kernel, bytes,    bytes,   1,
                   bytes,        bytes,   a.data(), b.data()};
      c.prepare = [&, bytes] { return fillPattern(a.data(), bytes, stream); };
      c.check = [&, bytes] {
        int64_t probe = std::min<int64_t>(bytes, 4096);
        for (int64_t at :
             {int64_t(0), std::min(bytes / 2 / 16 * 16, bytes - probe),
              bytes - probe})
          RETURN_IF_ERROR(expectPattern(b.data() + at, probe, at,
                                        absl::StrCat("contiguous, at ", at)));
        return absl::OkStatus();
      };
      c.hasTarget = hasTarget;
      c.dstSpan = bytes;
      cases.push_back(c);
    };
    contiguous(u16, true);
    // Byte units: what unaligned rows get. Reported, no target.
    if (u1.function)
      contiguous(u1, false);
    for (const KernelCase &c : cases) {
      status = measureKernelCase(args, c, stream, device, json);
      if (!status.ok())
        break;
    }
    if (!status.ok())
      break;
  }
  if (status.ok())
    status = cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize",
                       "the bench's stream");
  cudaStreamDestroy(stream);
  mgpuModuleUnload(module);
  return status;
}

//===----------------------------------------------------------------------===//
// The NCCL baseline of a broadcast-type reshard
//===----------------------------------------------------------------------===//

/// The reshard side: a single-node broadcast-type reshard compiled by
/// Polymesh (an f32 vector on GPU 0, replicated over a mesh of every GPU),
/// lowered by --polymesh-lower-to-cuda and run by the sharded runner, as
/// `polymesh-run --backend=nccl` runs it. Milliseconds per reshard: the
/// median over `repetitions` runs (each after a warm-up run) of every
/// device's call, thread start to join, synchronized at the end. Every
/// device's result is checked against the input first.
absl::StatusOr<double> measureGeneratedBroadcastReshard(int gpus, int64_t bytes,
                                                        int repetitions,
                                                        bool simulate) {
  int64_t elements = std::max<int64_t>(bytes / 4, 1);
  std::string program = absl::StrCat(
      "polymesh.mesh @root = <[], device_ids=[0]>\n"
      "polymesh.mesh @all = <[\"x\"=",
      gpus,
      "]>\n"
      "func.func @broadcast(%a: tensor<",
      elements,
      "xf32> {polymesh.sharding = #polymesh.sharding<@root, [{}]>})\n"
      "    -> (tensor<",
      elements,
      "xf32> {polymesh.sharding = #polymesh.sharding<@all, [{}]>}) {\n"
      "  return %a : tensor<",
      elements, "xf32>\n}\n");
  mlir::MLIRContext context(programRegistry());
  DiagnosticText diagnostics(context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(program, &context,
                                              "broadcast-reshard.mlir");
  if (!module)
    return absl::InternalError(absl::StrCat(
        "parsing the reshard program failed:\n", diagnostics.str()));

  namespace execution = polymesh::execution;
  execution::ShardedRunnerOptions options;
  execution::useCudaTarget(options, simulate);
  options.warmup = true;
  options.timeoutMs = 120000;
  auto runner =
      execution::ShardedRunner::create(*module, {"broadcast"}, options);
  if (!runner)
    return absl::InternalError(absl::StrCat(
        "compiling the reshard: ", llvm::toString(runner.takeError()), "\n",
        diagnostics.str()));

  execution::HostTensor expected = execution::makeInput(
      execution::ElementType::F32, {elements}, /*stream=*/0);
  std::vector<double> times;
  for (int rep = 0; rep < std::max(repetitions, 1); ++rep) {
    auto run = (*runner)->run("broadcast");
    if (!run)
      return absl::InternalError(absl::StrCat("the generated reshard failed: ",
                                              llvm::toString(run.takeError())));
    if (rep == 0) {
      if (run->results.size() != 1 ||
          static_cast<int>(run->results[0].tiles.size()) != gpus)
        return absl::InternalError("the generated reshard returned no tiles");
      for (const auto &[device, tile] : run->results[0].tiles)
        if (tile.getSizeInBytes() != expected.getSizeInBytes() ||
            std::memcmp(tile.getData(), expected.getData(),
                        static_cast<size_t>(expected.getSizeInBytes())) != 0)
          return absl::InternalError(absl::StrCat(
              "the generated reshard is wrong on device ", device));
    }
    times.push_back(run->wallMs);
  }
  return median(times);
}

absl::Status ncclCheck(ncclResult_t result, const char *call) {
  if (result == ncclSuccess)
    return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(call, " failed: ", ncclGetErrorString(result), " ",
                   ncclGetLastError(nullptr)));
}

#define NCCL_OK(call)                                                          \
  do {                                                                         \
    absl::Status status_ = ncclCheck((call), #call);                           \
    if (!status_.ok())                                                         \
      return status_;                                                          \
  } while (0)

/// Everything the baseline allocates, released however it ends.
struct NcclResources {
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<void *> buffers;
  ~NcclResources() {
    for (size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i]) {
        cudaSetDevice(static_cast<int>(i));
        cudaFree(buffers[i]);
      }
    for (size_t i = 0; i < streams.size(); ++i)
      if (streams[i]) {
        cudaSetDevice(static_cast<int>(i));
        cudaStreamDestroy(streams[i]);
      }
    for (ncclComm_t comm : comms)
      if (comm)
        ncclCommDestroy(comm);
  }
};

absl::Status runNcclBaseline(const Arguments &args, int gpus, JsonSink &json) {
  if (gpus < 2) {
    std::printf("reshard: needs >= 2 GPUs, skipped (this machine has %d)\n",
                gpus);
    json.add(absl::StrCat("{\"bench\":\"polymesh-gpu-bench\",\"measurement\":"
                          "\"reshard\",\"skipped\":\"needs >= 2 GPUs\","
                          "\"gpus\":",
                          gpus, "}"));
    return absl::OkStatus();
  }
  int64_t largest = *std::max_element(args.sizes.begin(), args.sizes.end());
  NcclResources r;
  r.comms.assign(gpus, nullptr);
  r.streams.assign(gpus, nullptr);
  r.buffers.assign(gpus, nullptr);
  std::vector<int> devices(gpus);
  for (int i = 0; i < gpus; ++i)
    devices[i] = i;
  NCCL_OK(ncclCommInitAll(r.comms.data(), gpus, devices.data()));
  for (int i = 0; i < gpus; ++i) {
    CUDA_OK(cudaSetDevice(i), absl::StrCat("CUDA device ", i));
    CUDA_OK(cudaStreamCreateWithFlags(&r.streams[i], cudaStreamNonBlocking),
            absl::StrCat("CUDA device ", i));
    CUDA_OK(cudaMalloc(&r.buffers[i], largest),
            absl::StrCat(largest, " bytes on CUDA device ", i));
  }
  // As nccl-tests times it: host time from the first post to every
  // stream's completion, per iteration.
  auto batch = [&](int64_t bytes, int iterations) -> absl::StatusOr<double> {
    auto start = std::chrono::steady_clock::now();
    for (int it = 0; it < iterations; ++it) {
      NCCL_OK(ncclGroupStart());
      for (int i = 0; i < gpus; ++i)
        NCCL_OK(ncclBroadcast(r.buffers[i], r.buffers[i], bytes, ncclInt8,
                              /*root=*/0, r.comms[i], r.streams[i]));
      NCCL_OK(ncclGroupEnd());
    }
    for (int i = 0; i < gpus; ++i) {
      CUDA_OK(cudaSetDevice(i), "ncclBroadcast");
      CUDA_OK(cudaStreamSynchronize(r.streams[i]),
              absl::StrCat("ncclBroadcast on CUDA device ", i));
    }
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - start)
               .count() /
           iterations;
  };
  std::printf("\nreshard baseline: in-place ncclBroadcast from GPU 0 over %d "
              "GPUs (busbw = algbw)\n",
              gpus);
  std::printf("%-8s %10s %12s %12s  %s\n", "bytes", "nccl ms", "algbw GB/s",
              "busbw GB/s", "generated reshard (target >= 0.85 of busbw)");
  for (int64_t bytes : args.sizes) {
    if (args.warmup > 0) {
      absl::StatusOr<double> warm = batch(bytes, args.warmup);
      if (!warm.ok())
        return warm.status();
    }
    std::vector<double> times;
    for (int rep = 0; rep < args.repetitions; ++rep) {
      absl::StatusOr<double> ms = batch(bytes, args.iterations);
      if (!ms.ok())
        return ms.status();
      times.push_back(*ms);
    }
    double ms = median(times);
    double algbw = bytes / (ms * 1e-3) / 1e9;
    double busbw = algbw;
    absl::StatusOr<double> measured = measureGeneratedBroadcastReshard(
        gpus, bytes, args.repetitions, /*simulate=*/false);
    if (!measured.ok())
      return measured.status();
    std::optional<double> generated = *measured;
    std::string generatedText = "not measured by this tool";
    std::string generatedJson = ",\"generated_ms\":null,\"ratio\":null";
    if (generated) {
      double ratio = ms / *generated;
      generatedText =
          absl::StrCat(jsonNumber(*generated), " ms, ratio ", jsonNumber(ratio),
                       ratio >= kReshardTarget ? " met" : " MISSED");
      generatedJson = absl::StrCat(",\"generated_ms\":", jsonNumber(*generated),
                                   ",\"ratio\":", jsonNumber(ratio));
    }
    std::printf("%-8s %10.3f %12.1f %12.1f  %s\n", formatBytes(bytes).c_str(),
                ms, algbw, busbw, generatedText.c_str());
    json.add(absl::StrCat(
        "{\"bench\":\"polymesh-gpu-bench\",\"measurement\":\"reshard\","
        "\"baseline\":\"ncclBroadcast\",\"gpus\":",
        gpus, ",\"bytes\":", bytes, ",\"iterations\":", args.iterations,
        ",\"repetitions\":", args.repetitions, ",\"nccl_ms\":", jsonNumber(ms),
        ",\"algbw_gbps\":", jsonNumber(algbw),
        ",\"busbw_gbps\":", jsonNumber(busbw), generatedJson,
        ",\"target\":", jsonNumber(kReshardTarget), "}"));
  }
  return absl::OkStatus();
}

} // namespace

int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Arguments args;
  if (!parseArguments(argc, argv, args)) {
    usage(stderr);
    return kExitUsage;
  }

  if (args.simulateGpus > 0) {
    // The generated reshard's path on simulated GPUs: checks it, times
    // nothing that means anything.
    for (int64_t bytes : args.sizes) {
      absl::StatusOr<double> ms = measureGeneratedBroadcastReshard(
          args.simulateGpus, bytes, /*repetitions=*/1, /*simulate=*/true);
      if (!ms.ok()) {
        std::printf("polymesh-gpu-bench: FAIL: %s\n",
                    std::string(ms.status().message()).c_str());
        return kExitFail;
      }
      std::printf("simulated reshard: broadcast of %s from GPU 0 over %d "
                  "simulated GPUs: every device's result checked (%.3f ms, "
                  "not a GPU time)\n",
                  formatBytes(bytes).c_str(), args.simulateGpus, *ms);
    }
    return kExitPass;
  }

  // Before any CUDA call: --print-ptx must work without a driver.
  if (!args.printPtx) {
    absl::StatusOr<int> count = polymesh::runtime::cudaDeviceCount();
    if (!count.ok() || *count < 1) {
      std::printf("polymesh-gpu-bench: skipped: %s\n",
                  count.ok() ? "no CUDA device"
                             : std::string(count.status().message()).c_str());
      return kExitSkip;
    }
  }

  absl::StatusOr<std::vector<PtxModule>> modules = compileKernels();
  if (!modules.ok()) {
    std::fprintf(stderr, "polymesh-gpu-bench: %s\n",
                 std::string(modules.status().message()).c_str());
    return kExitFail;
  }
  if (args.printPtx) {
    for (const PtxModule &m : *modules)
      std::printf("// gpu.binary @%s, target %s\n%s", m.binary.c_str(),
                  m.target.c_str(), m.ptx.c_str());
    return kExitPass;
  }

  JsonSink json;
  if (!json.open(args.jsonPath)) {
    std::fprintf(stderr, "polymesh-gpu-bench: cannot write %s: %s\n",
                 args.jsonPath.c_str(), std::strerror(errno));
    return kExitFail;
  }
  int gpus = *polymesh::runtime::cudaDeviceCount();
  std::printf("polymesh-gpu-bench: %d iterations x %d repetitions (medians), "
              "%d warm-up; bandwidth = bytes copied / time\n",
              args.iterations, args.repetitions, args.warmup);
  absl::Status status = runKernelBench(args, *modules, json);
  if (status.ok() && args.nccl)
    status = runNcclBaseline(args, gpus, json);
  json.flushToStdout();
  if (!status.ok()) {
    std::printf("polymesh-gpu-bench: FAIL: %s\n",
                std::string(status.message()).c_str());
    return kExitFail;
  }
  std::printf("polymesh-gpu-bench: done\n");
  return kExitPass;
}
