//===- TransferPlannerPropertyTest.cpp - Randomized planner checks --------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Plans thousands of random reshards (fixed seed; meshes up to 64 devices
// with permuted, overlapping and disjoint device ids, sub-axes, uneven and
// empty dims, unreduced axes, random memory limits) and checks each plan
// with the host simulator and with bounds computed here from the layouts.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Planner.h"
#include "polymesh/Planner/RandomLayout.h"
#include "polymesh/Planner/Simulate.h"

#include "absl/container/flat_hash_map.h"

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

using namespace polymesh::planner;

namespace {

std::string describeCase(const ReshardCase &c) {
  return absl::StrCat(describe(c.source), "  ->  ", describe(c.destination),
                      "  elementBytes=", c.elementBytes,
                      " limit=", c.options.memoryLimitBytes);
}

/// Reshard lower bound for layouts without unreduced axes, from the layouts
/// alone: every destination device lacks what its source box does not hold.
int64_t plainLowerBound(const TensorLayout &source,
                        const TensorLayout &destination, int64_t elementBytes) {
  int64_t elements = 0;
  for (int64_t p = 0, e = destination.numDevices(); p < e; ++p) {
    Box want = destination.boxAtPosition(p);
    std::optional<Box> held =
        source.boxOfDevice(destination.mesh().deviceAt(p));
    elements +=
        want.numElements() - (held ? want.intersect(*held).numElements() : 0);
  }
  return elements * elementBytes;
}

/// The busiest sender of every replica group of `from` sends at most one
/// item (all a receiver gets from that group) above the group's mean.
::testing::AssertionResult balanced(const TransferPlan &plan,
                                    const TensorLayout &from) {
  absl::flat_hash_map<int64_t, int64_t> sent;
  absl::flat_hash_map<std::pair<int64_t, int64_t>, int64_t> pairBytes;
  for (const Step &step : plan.steps) {
    for (const Transfer &transfer : step.transfers) {
      // Reduction transfers (into source buffers) have no choice of sender.
      if (transfer.isLocal() || transfer.dstBuffer == BufferKind::Source)
        continue;
      sent[transfer.srcDevice] += transfer.bytesMoved();
      for (int64_t dst : transfer.dstDevices)
        pairBytes[{transfer.srcDevice, dst}] += transfer.bytes;
    }
  }
  absl::flat_hash_map<int64_t, int64_t> largestItem;
  for (const auto &[pair, bytes] : pairBytes)
    largestItem[pair.first] = std::max(largestItem[pair.first], bytes);
  for (const std::vector<int64_t> &group : from.replicaGroups()) {
    int64_t total = 0, busiest = 0, item = 0;
    for (int64_t device : group) {
      total += sent[device];
      busiest = std::max(busiest, sent[device]);
      item = std::max(item, largestItem[device]);
    }
    int64_t n = static_cast<int64_t>(group.size());
    if (busiest * n > total + item * n)
      return ::testing::AssertionFailure()
             << "replica group of device " << group.front() << " (" << n
             << " devices) sends " << total << " bytes, busiest " << busiest
             << ", largest item " << item;
  }
  return ::testing::AssertionSuccess();
}

TEST(TransferPlannerProperty, RandomReshards) {
  constexpr int kCases = 12000;
  SplitMix64 rng(0x9013e5);
  int limited = 0, chunked = 0, reductions = 0, identities = 0, symbolic = 0,
      unlimitedReductions = 0, keptSymbolic = 0;
  std::array<int64_t, kNumStepKinds> kinds{};
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCases; ++i) {
    ReshardCase c = randomReshard(rng);
    SCOPED_TRACE(absl::StrCat("case ", i, ": ", describeCase(c)));
    absl::StatusOr<TransferPlan> plan =
        planReshard(c.source, c.destination, c.elementBytes, c.options);
    // Every generated limit holds at least one element, so planning must
    // succeed, however many chunks it takes.
    ASSERT_TRUE(plan.ok()) << plan.status();
    limited += c.options.memoryLimitBytes > 0;
    chunked += plan->numChunks > 2;
    reductions += plan->reducesInPlace;
    identities += plan->identity;
    for (int k = 0; k < kNumStepKinds; ++k)
      kinds[k] += plan->stepCounts[k];

    absl::StatusOr<SimulationResult> result =
        simulatePlan(*plan, c.source, c.destination);
    ASSERT_TRUE(result.ok()) << result.status() << "\n" << formatPlan(*plan);
    absl::Status check = checkDestinationBuffers(*result, c.destination);
    ASSERT_TRUE(check.ok()) << check << "\n" << formatPlan(*plan);
    ASSERT_EQ(result->duplicateWrites, 0) << formatPlan(*plan);
    ASSERT_EQ(result->bytesCrossed, plan->bytesMoved);

    ASSERT_EQ(plan->bytesMoved, plan->lowerBoundBytes) << formatPlan(*plan);
    if (c.source.sharding().unreduced.empty() &&
        c.destination.sharding().unreduced.empty()) {
      ASSERT_EQ(plan->lowerBoundBytes,
                plainLowerBound(c.source, c.destination, c.elementBytes));
    }
    ASSERT_TRUE(
        balanced(*plan, plan->reducedLayout ? *plan->reducedLayout : c.source))
        << formatPlan(*plan);

    if (c.options.memoryLimitBytes > 0) {
      ASSERT_LE(plan->peakTempBytes, c.options.memoryLimitBytes);
    }
    for (const DeviceStats &stats : plan->perDevice)
      ASSERT_EQ(result->peakStagingBytes[stats.device], stats.peakTempBytes);
    if (c.source.isDeviceEquivalent(c.destination)) {
      ASSERT_TRUE(plan->steps.empty());
    }
    // Without a memory limit every reduction step has a symbolic form (its
    // pieces), which is what --polymesh-plan writes; a limit may split the
    // pieces across chunks, and such steps stay written out. Either way a
    // symbolic form found expands to exactly the step's transfers
    // (findReductionPieces compares them).
    for (const Step &step : plan->steps) {
      if (step.kind != StepKind::AllReduce &&
          step.kind != StepKind::ReduceScatter)
        continue;
      std::optional<ReductionPieces> pieces =
          findReductionPieces(step, c.elementBytes);
      if (c.options.memoryLimitBytes == 0) {
        ASSERT_TRUE(pieces.has_value()) << formatPlan(*plan);
        ++unlimitedReductions;
      }
      symbolic += pieces.has_value();
    }

    // Planned symbolically, the same plan: the same totals, and the same
    // steps once the pieces are expanded.
    PlanOptions symbolicOptions = c.options;
    symbolicOptions.symbolicReductions = true;
    absl::StatusOr<TransferPlan> kept =
        planReshard(c.source, c.destination, c.elementBytes, symbolicOptions);
    ASSERT_TRUE(kept.ok()) << kept.status();
    ASSERT_EQ(kept->bytesMoved, plan->bytesMoved);
    ASSERT_EQ(kept->maxSendBytes, plan->maxSendBytes);
    ASSERT_EQ(kept->maxRecvBytes, plan->maxRecvBytes);
    ASSERT_EQ(kept->peakTempBytes, plan->peakTempBytes);
    ASSERT_EQ(kept->perDevice.size(), plan->perDevice.size());
    for (size_t d = 0; d < plan->perDevice.size(); ++d) {
      ASSERT_EQ(kept->perDevice[d].device, plan->perDevice[d].device);
      ASSERT_EQ(kept->perDevice[d].sendBytes, plan->perDevice[d].sendBytes);
      ASSERT_EQ(kept->perDevice[d].recvBytes, plan->perDevice[d].recvBytes);
      ASSERT_EQ(kept->perDevice[d].peakTempBytes,
                plan->perDevice[d].peakTempBytes);
    }
    bool anySymbolic = false;
    for (const Step &step : kept->steps)
      anySymbolic |= step.isSymbolic();
    ASSERT_EQ(anySymbolic,
              c.options.memoryLimitBytes == 0 && plan->reducesInPlace)
        << formatPlan(*kept);
    keptSymbolic += anySymbolic;
    expandSymbolicSteps(*kept);
    ASSERT_EQ(kept->steps.size(), plan->steps.size());
    for (size_t s = 0; s < plan->steps.size(); ++s) {
      const Step &a = kept->steps[s], &b = plan->steps[s];
      ASSERT_TRUE(a.kind == b.kind && a.chunk == b.chunk &&
                  a.devices == b.devices &&
                  a.transfers.size() == b.transfers.size())
          << "step " << s;
      for (size_t t = 0; t < a.transfers.size(); ++t) {
        const Transfer &x = a.transfers[t], &y = b.transfers[t];
        ASSERT_TRUE(x.srcDevice == y.srcDevice &&
                    x.dstDevices == y.dstDevices && x.box == y.box &&
                    x.bytes == y.bytes && x.srcBuffer == y.srcBuffer &&
                    x.dstBuffer == y.dstBuffer &&
                    x.accumulate == y.accumulate && x.phase == y.phase)
            << "step " << s << " transfer " << t;
      }
    }
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::cout << "[property] " << kCases << " reshards in " << seconds
            << " s: " << limited << " under a memory limit, " << chunked
            << " in more than two chunks, " << reductions << " reducing, "
            << identities << " identity, " << symbolic
            << " symbolic reductions, " << keptSymbolic
            << " plans kept symbolic;";
  for (int k = 0; k < kNumStepKinds; ++k)
    std::cout << " " << stepKindName(static_cast<StepKind>(k)) << "="
              << kinds[k];
  std::cout << "\n";
  // The generator must exercise what the checks are for.
  EXPECT_GT(limited, kCases / 5);
  EXPECT_GT(reductions, kCases / 20);
  EXPECT_GT(chunked, kCases / 20);
  EXPECT_GT(unlimitedReductions, kCases / 20);
  EXPECT_GE(symbolic, unlimitedReductions);
  EXPECT_GT(keptSymbolic, kCases / 20);
  for (int k = 0; k < kNumStepKinds; ++k)
    EXPECT_GT(kinds[k], 0) << stepKindName(static_cast<StepKind>(k));
}

/// Larger meshes, fewer cases: plans stay exact, balanced and correct at 256
/// and 1,024 devices.
TEST(TransferPlannerProperty, LargeMeshes) {
  SplitMix64 rng(0xb16);
  for (int64_t devices : {256, 1024}) {
    RandomReshardOptions options;
    options.numDevices = devices;
    options.maxExtent = 16;
    options.memoryLimitPercent = 20;
    for (int i = 0; i < 30; ++i) {
      ReshardCase c = randomReshard(rng, options);
      SCOPED_TRACE(describeCase(c));
      absl::StatusOr<TransferPlan> plan =
          planReshard(c.source, c.destination, c.elementBytes, c.options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      ASSERT_EQ(plan->bytesMoved, plan->lowerBoundBytes);
      ASSERT_TRUE(balanced(*plan, plan->reducedLayout ? *plan->reducedLayout
                                                      : c.source));
      if (c.options.memoryLimitBytes > 0) {
        ASSERT_LE(plan->peakTempBytes, c.options.memoryLimitBytes);
      }
      absl::StatusOr<SimulationResult> result =
          simulatePlan(*plan, c.source, c.destination);
      ASSERT_TRUE(result.ok()) << result.status();
      ASSERT_TRUE(checkDestinationBuffers(*result, c.destination).ok());
      ASSERT_EQ(result->duplicateWrites, 0);
    }
  }
}

} // namespace
