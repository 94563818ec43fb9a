//===- PlannerBench.cpp - Planning time and plan quality ------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// BM_PlanRandomReshards/N: planning time per reshard over 1,000 random
//   reshards between meshes of exactly N devices (same mesh, same devices on
//   other axes, reversed ids, or a disjoint mesh), with plan quality as
//   counters: bytes moved over the lower bound, and the busiest sender of a
//   source replica group over the group's ideal (mean) share.
// BM_PlanAllGather1024: the largest plan shape, a 1,024-way all-gather.
// BM_OrbaxRestore: the single-replica restore of the Orbax report at 32
//   devices, our plan next to Orbax's zeros-plus-all-reduce, same run.
// BM_PlanCacheHit: a cache hit for a 256-device plan.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Planner.h"
#include "polymesh/Planner/RandomLayout.h"

#include "absl/container/flat_hash_map.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

using namespace polymesh::planner;

namespace {

constexpr int kCases = 1000;

std::vector<ReshardCase> makeCases(int64_t devices) {
  SplitMix64 rng(0xbe7c4 + devices);
  RandomReshardOptions options;
  options.numDevices = devices;
  options.maxExtent = 4096;
  options.memoryLimitPercent = 0;
  std::vector<ReshardCase> cases;
  cases.reserve(kCases);
  for (int i = 0; i < kCases; ++i)
    cases.push_back(randomReshard(rng, options));
  return cases;
}

TransferPlan planOrDie(const ReshardCase &c) {
  absl::StatusOr<TransferPlan> plan =
      planReshard(c.source, c.destination, c.elementBytes, c.options);
  if (!plan.ok()) {
    std::fprintf(stderr, "planning failed: %s\n",
                 plan.status().ToString().c_str());
    std::abort();
  }
  return *std::move(plan);
}

/// Sender balance over the replica groups of the layout the resharding reads
/// from: the busiest sender over the ideal (mean) share, and its excess over
/// that share in units of the largest item (all one receiver gets from the
/// group), which the planner keeps at most 1.
struct Balance {
  double worstRatio = 1, ratioSum = 0, worstExcessItems = 0;
  int64_t groups = 0;
};

void senderBalance(const TransferPlan &plan, const TensorLayout &source,
                   Balance &balance) {
  const TensorLayout &from = plan.reducedLayout ? *plan.reducedLayout : source;
  absl::flat_hash_map<int64_t, int64_t> sent, largest;
  absl::flat_hash_map<std::pair<int64_t, int64_t>, int64_t> pairBytes;
  for (const Step &step : plan.steps)
    for (const Transfer &transfer : step.transfers)
      if (!transfer.isLocal() &&
          transfer.dstBuffer == BufferKind::Destination) {
        sent[transfer.srcDevice] += transfer.bytesMoved();
        for (int64_t dst : transfer.dstDevices)
          pairBytes[{transfer.srcDevice, dst}] += transfer.bytes;
      }
  for (const auto &[pair, bytes] : pairBytes)
    largest[pair.first] = std::max(largest[pair.first], bytes);
  for (const std::vector<int64_t> &group : from.replicaGroups()) {
    int64_t total = 0, busiest = 0, item = 0;
    for (int64_t device : group) {
      total += sent[device];
      busiest = std::max(busiest, sent[device]);
      item = std::max(item, largest[device]);
    }
    if (total == 0)
      continue;
    double ideal = static_cast<double>(total) / group.size();
    balance.worstRatio = std::max(balance.worstRatio, busiest / ideal);
    balance.ratioSum += busiest / ideal;
    balance.worstExcessItems =
        std::max(balance.worstExcessItems, (busiest - ideal) / item);
    ++balance.groups;
  }
}

void BM_PlanRandomReshards(benchmark::State &state) {
  std::vector<ReshardCase> cases = makeCases(state.range(0));
  for (auto _ : state)
    for (const ReshardCase &c : cases) {
      absl::StatusOr<TransferPlan> plan =
          planReshard(c.source, c.destination, c.elementBytes, c.options);
      benchmark::DoNotOptimize(plan);
    }
  // Quality, outside the timed loop.
  double bytesRatioSum = 0;
  int64_t moving = 0, steps = 0, transfers = 0;
  Balance balance;
  std::vector<double> seconds;
  for (const ReshardCase &c : cases) {
    auto start = std::chrono::steady_clock::now();
    TransferPlan plan = planOrDie(c);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
    steps += plan.steps.size();
    for (const Step &step : plan.steps)
      transfers += step.transfers.size();
    if (plan.lowerBoundBytes > 0) {
      bytesRatioSum +=
          static_cast<double>(plan.bytesMoved) / plan.lowerBoundBytes;
      ++moving;
    }
    senderBalance(plan, c.source, balance);
  }
  // Seconds per reshard in the timed loop, freeing the plan included
  // (printed with an SI prefix, e.g. 120u = 120 us).
  state.counters["time_per_reshard"] =
      benchmark::Counter(kCases, benchmark::Counter::kIsIterationInvariantRate |
                                     benchmark::Counter::kInvert);
  // The mean is dominated by the few reshards with huge explicit plans (a
  // 1,024-way all-to-all has a million transfers); show the distribution.
  // Planning alone: this loop stops the clock before the plan is freed.
  double total = 0;
  for (double t : seconds)
    total += t;
  state.counters["mean_us"] = total / seconds.size() * 1e6;
  std::sort(seconds.begin(), seconds.end());
  state.counters["p50_us"] = seconds[seconds.size() / 2] * 1e6;
  state.counters["p90_us"] = seconds[seconds.size() * 9 / 10] * 1e6;
  state.counters["bytes_over_lb"] = moving ? bytesRatioSum / moving : 1.0;
  state.counters["busiest_over_ideal_mean"] =
      balance.groups ? balance.ratioSum / balance.groups : 1.0;
  state.counters["busiest_excess_items_max"] = balance.worstExcessItems;
  state.counters["steps_per_plan"] = static_cast<double>(steps) / kCases;
  state.counters["transfers_per_plan"] =
      static_cast<double>(transfers) / kCases;
}
BENCHMARK(BM_PlanRandomReshards)
    ->Arg(8)
    ->Arg(64)
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond);

TensorLayout makeLayout(const Mesh &mesh,
                        const std::vector<std::vector<int>> &dims,
                        std::vector<int64_t> shape) {
  Sharding sharding = Sharding::replicatedOfRank(dims.size());
  for (size_t d = 0; d < dims.size(); ++d)
    for (int axis : dims[d])
      sharding.dims[d].axes.push_back(AxisRef::whole(mesh, axis));
  return *TensorLayout::create(mesh, sharding, std::move(shape));
}

void BM_PlanAllGather1024(benchmark::State &state) {
  Mesh mesh{{{"x", 1024}}, {}};
  TensorLayout src = makeLayout(mesh, {{0}, {}}, {8192, 1024});
  TensorLayout dst = makeLayout(mesh, {{}, {}}, {8192, 1024});
  for (auto _ : state) {
    absl::StatusOr<TransferPlan> plan = planReshard(src, dst, 4);
    benchmark::DoNotOptimize(plan);
  }
  TransferPlan plan = planOrDie({src, dst, 4, {}});
  state.counters["steps"] = plan.steps.size();
  state.counters["all_gathers"] = plan.count(StepKind::AllGather);
}
BENCHMARK(BM_PlanAllGather1024)->Unit(benchmark::kMillisecond);

void BM_OrbaxRestore(benchmark::State &state) {
  // @replica0 = <["tp"=2], device_ids=[0, 1]> read the checkpoint; @train =
  // <["dp"=16, "tp"=2]> wants [{}, {"tp"}]. A 4096x4096 f32 parameter.
  Mesh replica0{{{"tp", 2}}, {0, 1}};
  Mesh train{{{"dp", 16}, {"tp", 2}}, {}};
  std::vector<int64_t> shape = {4096, 4096};
  TensorLayout src = makeLayout(replica0, {{}, {0}}, shape);
  TensorLayout dst = makeLayout(train, {{}, {1}}, shape);
  int64_t limit = state.range(0) << 20;
  PlanOptions options{limit};
  for (auto _ : state) {
    absl::StatusOr<TransferPlan> plan = planReshard(src, dst, 4, options);
    benchmark::DoNotOptimize(plan);
  }
  TransferPlan plan = planOrDie({src, dst, 4, options});

  // Orbax: every device of @train allocates its tile (zeros off the
  // replica), then the tiles are summed over "dp" with a ring all-reduce:
  // 2(n-1)/n of the tile per device each way, three tile-sized buffers
  // (input, output, the zeros/expanded source) alive at once.
  int64_t tileBytes = 4;
  for (int64_t extent : dst.localShape())
    tileBytes *= extent;
  int64_t n = train.axes[0].size;
  double ringPerDevice = 2.0 * (n - 1) / n * tileBytes;
  double orbaxBytes = ringPerDevice * train.numDevices();
  double mib = 1 << 20;
  state.counters["ours_bytes_moved_MiB"] = plan.bytesMoved / mib;
  state.counters["orbax_bytes_moved_MiB"] = orbaxBytes / mib;
  state.counters["ours_max_recv_MiB"] = plan.maxRecvBytes / mib;
  state.counters["orbax_max_recv_MiB"] = ringPerDevice / mib;
  state.counters["ours_peak_temp_MiB"] = plan.peakTempBytes / mib;
  // Peak per device including the result buffer.
  state.counters["ours_peak_total_MiB"] =
      (tileBytes + plan.peakTempBytes) / mib;
  state.counters["orbax_peak_total_MiB"] = 3.0 * tileBytes / mib;
  state.counters["broadcasts"] = plan.count(StepKind::Broadcast);
  state.counters["chunks"] = plan.numChunks;
}
// Unlimited, then Orbax's own broadcast_memory_limit_bytes scaled down.
BENCHMARK(BM_OrbaxRestore)->Arg(0)->Arg(8)->Unit(benchmark::kMicrosecond);

void BM_PlanCacheHit(benchmark::State &state) {
  Mesh mesh{{{"a", 16}, {"b", 16}}, {}};
  TensorLayout src = makeLayout(mesh, {{0}, {1}}, {4096, 4096});
  TensorLayout dst = makeLayout(mesh, {{1}, {0}}, {4096, 4096});
  PlanCache cache;
  (void)cache.getOrPlan(src, dst, 4);
  for (auto _ : state) {
    auto plan = cache.getOrPlan(src, dst, 4);
    benchmark::DoNotOptimize(plan);
  }
  state.counters["hits"] = cache.hits();
}
BENCHMARK(BM_PlanCacheHit)->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
