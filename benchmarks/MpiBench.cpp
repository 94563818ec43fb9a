//===- MpiBench.cpp - A reshard across processes against plain MPI --------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Google Benchmark under `mpiexec -np 2` (docs/benchmarks.md, "Several
// processes"). Three runs of the same 256 MiB cross-mesh reshard as
// ReshardBench (an 8192x8192 f32 tensor from rows on devices 0-3 to columns
// on devices 7-4), measured in one job:
//
// * BM_ReshardMpi: the generated program (--polymesh-pipeline=target=mpi,
//   ORC at -O2) as 2 processes x 4 devices on the MPI backend. Devices 0-3
//   live in rank 0 and 4-7 in rank 1, so every byte crosses processes, in
//   the code's own blocking mpi.send/mpi.recv (polymesh-run's default).
// * BM_ReshardMpiRuntimeMessages: the same with the messages in the
//   runtime's send/recv (target=cpu, --mpi-messages=runtime): posted for
//   the whole group at once with MPI_Isend/MPI_Irecv.
// * BM_ReshardLoopback: the same program on 8 loopback devices in rank 0
//   alone (rank 1 waits), the single-process run it replaces.
// * BM_PlainMpi: the peer, a plain MPI program moving the same bytes: rank
//   0 posts the plan's 16 boxes of 2048x2048 floats (16 MiB each, already
//   contiguous) with MPI_Isend, rank 1 posts 16 MPI_Irecv, both MPI_Waitall.
//
// Every iteration starts with a barrier; its time is the slowest rank's
// wall time (manual time). The reshard runs are timed after an untimed
// warm-up run on the same runtime, as every step after the first of a job.
// Only rank 0 reports.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Execution/MpiTarget.h"
#include "polymesh/Execution/ReferenceRunner.h"
#include "polymesh/Execution/ShardedRunner.h"
#include "polymesh/InitAllDialects.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

using namespace mlir;
using namespace polymesh;
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

constexpr int64_t kBoxes = 16;
constexpr int64_t kBoxBytes = int64_t(2048) * 2048 * 4;

runtime::MpiWorld *world = nullptr;

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

/// Waits for every rank.
void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

/// The slowest rank's `seconds`.
double slowest(double seconds) {
  double result = 0;
  MPI_Allreduce(&seconds, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return result;
}

/// Runs the reshard's iterations with `options`; `runs` says whether this
/// rank takes part (the others only keep the barriers).
void runReshard(benchmark::State &state, ShardedRunnerOptions options,
                bool runs) {
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kReshard, &context());
  options.warmup = true;
  std::unique_ptr<ShardedRunner> runner;
  if (runs) {
    auto created = ShardedRunner::create(*module, {"reshard"}, options);
    if (!created) {
      state.SkipWithError(llvm::toString(created.takeError()).c_str());
      world->abortJob(1);
    }
    runner = std::move(*created);
  }
  int64_t bytes = 0;
  for (auto _ : state) {
    barrier();
    double seconds = 0;
    if (runner) {
      auto run = runner->run("reshard");
      if (!run) {
        std::fprintf(stderr, "rank %d: %s\n", world->rank(),
                     llvm::toString(run.takeError()).c_str());
        world->abortJob(1);
      }
      seconds = run->wallMs / 1000.0;
      bytes = std::max(bytes, run->bytesMoved);
    }
    state.SetIterationTime(slowest(seconds));
  }
  state.SetBytesProcessed(state.iterations() * kBoxes * kBoxBytes);
  state.counters["bytes_moved"] = static_cast<double>(bytes);
}

void BM_ReshardMpi(benchmark::State &state) {
  ShardedRunnerOptions options;
  useMpiBackend(options, *world,
                runtime::DeviceOwnership::over({}, world->size(), 4),
                absl::Seconds(60));
  runReshard(state, options, /*runs=*/true);
}
BENCHMARK(BM_ReshardMpi)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

void BM_ReshardMpiRuntimeMessages(benchmark::State &state) {
  ShardedRunnerOptions options;
  useMpiBackend(options, *world,
                runtime::DeviceOwnership::over({}, world->size(), 4),
                absl::Seconds(60), /*messagesInCode=*/false);
  runReshard(state, options, /*runs=*/true);
}
BENCHMARK(BM_ReshardMpiRuntimeMessages)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

void BM_ReshardLoopback(benchmark::State &state) {
  runReshard(state, ShardedRunnerOptions(), /*runs=*/world->rank() == 0);
}
BENCHMARK(BM_ReshardLoopback)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

void BM_PlainMpi(benchmark::State &state) {
  int rank = world->rank();
  // Rank 0 sends, rank 1 receives; pre-touched buffers, as the reshard's
  // tiles and staging are after its warm-up.
  std::vector<std::vector<char>> boxes;
  if (rank < 2)
    for (int64_t b = 0; b < kBoxes; ++b)
      boxes.emplace_back(static_cast<size_t>(kBoxBytes), rank == 0 ? 1 : 0);
  std::vector<MPI_Request> requests(kBoxes, MPI_REQUEST_NULL);
  for (auto _ : state) {
    barrier();
    auto start = std::chrono::steady_clock::now();
    if (rank < 2) {
      for (int64_t b = 0; b < kBoxes; ++b) {
        if (rank == 0)
          MPI_Isend(boxes[b].data(), static_cast<int>(kBoxBytes), MPI_BYTE, 1,
                    static_cast<int>(b), MPI_COMM_WORLD, &requests[b]);
        else
          MPI_Irecv(boxes[b].data(), static_cast<int>(kBoxBytes), MPI_BYTE, 0,
                    static_cast<int>(b), MPI_COMM_WORLD, &requests[b]);
      }
      MPI_Waitall(static_cast<int>(kBoxes), requests.data(),
                  MPI_STATUSES_IGNORE);
    }
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    state.SetIterationTime(slowest(elapsed.count()));
  }
  state.SetBytesProcessed(state.iterations() * kBoxes * kBoxBytes);
}
BENCHMARK(BM_PlainMpi)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

/// Rank 0's reporter; the other ranks say nothing.
class SilentReporter : public benchmark::BenchmarkReporter {
public:
  bool ReportContext(const Context &) override { return true; }
  void ReportRuns(const std::vector<Run> &) override {}
};

} // namespace

int main(int argc, char **argv) {
  auto initialized = runtime::MpiWorld::init(&argc, &argv, absl::Seconds(120));
  if (!initialized.ok()) {
    std::fprintf(stderr, "polymesh-mpi-bench: %s\n",
                 std::string(initialized.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<runtime::MpiWorld> owner = *std::move(initialized);
  world = owner.get();
  if (world->size() != 2) {
    if (world->rank() == 0)
      std::fprintf(stderr,
                   "polymesh-mpi-bench: run it as 2 processes "
                   "(mpiexec -np 2), not %d\n",
                   world->size());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (world->rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  return 0;
}
