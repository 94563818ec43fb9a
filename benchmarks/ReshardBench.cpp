//===- ReshardBench.cpp - Generated reshard code against memcpy -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Google Benchmark, two pairs measured in the same run:
//
// * A 256 MiB cross-mesh reshard on 8 loopback devices (rows of a 8192x8192
//   f32 tensor on devices 0-3, columns on devices 7-4): the program is
//   partitioned and lowered to the CPU (--polymesh-pipeline=target=cpu),
//   JIT-compiled, and run with one thread per device; every byte crosses
//   meshes. Its peer is one plain memcpy of the bytes the plan moves.
// * Gradient sums over a flat mesh of 8 loopback devices (32 MiB of f32
//   partials per device, summed to replicated: an all-reduce; to row
//   blocks: a reduce-scatter), with the collective straight from the
//   source tile into the result tile (direct-collectives, the default)
//   and, its peer, in place on a copy of the source tile.
// * JIT compile time of the two seeds' programs (propagate, plan,
//   partition, lower, ORC at -O2), next to compiling their unsharded
//   reference (ReferenceRunner).
//
// The reshard's time is the runtime's wall time (thread start to join) of a
// run after an untimed warm-up run on the same runtime; filling input tiles
// happens before both and is not counted (manual time).
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/ReferenceRunner.h"
#include "polymesh/Execution/ShardedRunner.h"
#include "polymesh/InitAllDialects.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"

#include "llvm/Support/raw_ostream.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

using namespace mlir;
using namespace polymesh::execution;

namespace {

constexpr const char *kReshard = R"mlir(
polymesh.mesh @rows = <["x"=4], device_ids=[0, 1, 2, 3]>
polymesh.mesh @cols = <["y"=4], device_ids=[7, 6, 5, 4]>
func.func @reshard(%a: tensor<8192x8192xf32> {polymesh.sharding = #polymesh.sharding<@rows, [{"x"}, {}]>})
    -> (tensor<8192x8192xf32> {polymesh.sharding = #polymesh.sharding<@cols, [{}, {"y"}]>}) {
  return %a : tensor<8192x8192xf32>
}
)mlir";

MLIRContext &context() {
  static MLIRContext *ctx = [] {
    DialectRegistry registry;
    polymesh::registerPolymeshInputDialects(registry);
    registerReferenceDialects(registry);
    auto *result = new MLIRContext(registry);
    result->loadAllAvailableDialects();
    return result;
  }();
  return *ctx;
}

OwningOpRef<ModuleOp> parse(llvm::StringRef text) {
  return parseSourceString<ModuleOp>(text, &context());
}

OwningOpRef<ModuleOp> parseFile(llvm::StringRef path) {
  return parseSourceFile<ModuleOp>(path, &context());
}

std::vector<std::string> publicFunctions(ModuleOp module) {
  std::vector<std::string> names;
  for (auto function : module.getOps<func::FuncOp>())
    if (function.isPublic() && !function.isExternal())
      names.push_back(function.getSymName().str());
  return names;
}

constexpr const char *kGradients = R"mlir(
polymesh.mesh @data = <["x"=8]>
func.func @grad_sum(%g: tensor<2048x4096xf32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}], unreduced={"x"}>})
    -> (tensor<2048x4096xf32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}]>}) {
  return %g : tensor<2048x4096xf32>
}
func.func @grad_scatter(%g: tensor<2048x4096xf32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}], unreduced={"x"}>})
    -> (tensor<2048x4096xf32> {polymesh.sharding = #polymesh.sharding<@data, [{"x"}, {}]>}) {
  return %g : tensor<2048x4096xf32>
}
)mlir";

/// Times `function` of `program` per iteration: the runtime's wall time of
/// one run, after an untimed one on the same runtime (staging allocated,
/// pages touched), as every step after the first of a job. Returns the
/// bytes the plan moves (0 after an error, reported on `state`).
int64_t runTimed(benchmark::State &state, const char *program,
                 const char *function, ShardedRunnerOptions options) {
  OwningOpRef<ModuleOp> module = parse(program);
  options.warmup = true;
  auto runner = ShardedRunner::create(*module, {function}, options);
  if (!runner) {
    state.SkipWithError(llvm::toString(runner.takeError()).c_str());
    return 0;
  }
  int64_t bytes = 0;
  for (auto _ : state) {
    auto run = (*runner)->run(function);
    if (!run) {
      state.SkipWithError(llvm::toString(run.takeError()).c_str());
      return 0;
    }
    bytes = run->bytesMoved;
    state.SetIterationTime(run->wallMs / 1000.0);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["bytes_moved"] = static_cast<double>(bytes);
  return bytes;
}

int64_t reshardBytes = 0;

void BM_Reshard256MiB(benchmark::State &state) {
  reshardBytes = runTimed(state, kReshard, "reshard", {});
}
BENCHMARK(BM_Reshard256MiB)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

void BM_Memcpy256MiB(benchmark::State &state) {
  // The bytes the reshard moves; 256 MiB when run alone.
  size_t bytes = reshardBytes ? reshardBytes : size_t(256) << 20;
  std::vector<char> from(bytes, 1), to(bytes, 0);
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    state.SetIterationTime(elapsed.count());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Memcpy256MiB)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

/// Arguments: the function (0: grad_sum, 1: grad_scatter) and whether
/// collectives go straight between tiles (1) or in place (0).
void BM_GradientSum(benchmark::State &state) {
  ShardedRunnerOptions options;
  options.directCollectives = state.range(1) != 0;
  runTimed(state, kGradients, state.range(0) ? "grad_scatter" : "grad_sum",
           options);
}
BENCHMARK(BM_GradientSum)
    ->ArgNames({"scatter", "direct"})
    ->ArgsProduct({{0, 1}, {1, 0}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

constexpr const char *kTranspose = R"mlir(
polymesh.mesh @seq = <["x"=8]>
func.func @transpose(%a: tensor<4096x4096xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{"x"}, {}]>})
    -> (tensor<4096x4096xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{}, {"x"}]>}) {
  return %a : tensor<4096x4096xf32>
}
)mlir";

/// The all-to-all of sequence parallelism on 8 loopback devices, 8 MiB a
/// device: as one symbolic exchange of whole tiles, one all-to-all call a
/// device (1), or as its 56 listed transfers, send/recv (0).
void BM_Transpose(benchmark::State &state) {
  ShardedRunnerOptions options;
  options.exchangeTiles = state.range(0) != 0;
  runTimed(state, kTranspose, "transpose", options);
}
BENCHMARK(BM_Transpose)
    ->ArgName("tiles")
    ->Arg(1)
    ->Arg(0)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

void compileSharded(benchmark::State &state, const char *path) {
  OwningOpRef<ModuleOp> module = parseFile(path);
  if (!module) {
    state.SkipWithError("cannot parse the example");
    return;
  }
  std::vector<std::string> functions = publicFunctions(*module);
  for (auto _ : state) {
    auto runner = ShardedRunner::create(*module, functions);
    if (!runner) {
      state.SkipWithError(llvm::toString(runner.takeError()).c_str());
      return;
    }
  }
}

void compileReference(benchmark::State &state, const char *path) {
  OwningOpRef<ModuleOp> module = parseFile(path);
  if (!module) {
    state.SkipWithError("cannot parse the example");
    return;
  }
  std::vector<std::string> functions = publicFunctions(*module);
  for (auto _ : state) {
    auto runner = ReferenceRunner::create(*module, functions);
    if (!runner) {
      state.SkipWithError(llvm::toString(runner.takeError()).c_str());
      return;
    }
  }
}

BENCHMARK_CAPTURE(compileSharded, flax,
                  POLYMESH_EXAMPLES_DIR "/flax-multi-mesh-init.mlir")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(compileReference, flax,
                  POLYMESH_EXAMPLES_DIR "/flax-multi-mesh-init.mlir")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(compileSharded, orbax,
                  POLYMESH_EXAMPLES_DIR "/orbax-single-replica-restore.mlir")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(compileReference, orbax,
                  POLYMESH_EXAMPLES_DIR "/orbax-single-replica-restore.mlir")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

} // namespace

BENCHMARK_MAIN();
