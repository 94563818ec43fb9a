//===- TransferPlannerTest.cpp - Unit tests of the transfer planner -------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// One test per reshard pattern: each plan is executed by the host simulator
// and checked element by element, and its traffic is compared with the lower
// bound, before the test looks at the collectives it chose.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Planner.h"
#include "polymesh/Planner/Simulate.h"

#include "Support/LayoutBuilders.h"
#include "Support/PlanChecks.h"

#include <gtest/gtest.h>

#include <numeric>
#include <thread>

using namespace polymesh::planner;

namespace {

using namespace polymesh::planner::testing;

/// Plans, simulates and checks; every test goes through here.
TransferPlan planAndCheck(const TensorLayout &source,
                          const TensorLayout &destination,
                          int64_t elementBytes = 4, PlanOptions options = {}) {
  absl::StatusOr<TransferPlan> plan =
      planReshard(source, destination, elementBytes, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok())
    return {};
  EXPECT_TRUE(runsCorrectly(*plan, source, destination));
  EXPECT_EQ(plan->bytesMoved, plan->lowerBoundBytes) << formatPlan(*plan);
  if (options.memoryLimitBytes > 0) {
    EXPECT_LE(plan->peakTempBytes, options.memoryLimitBytes);
  }
  return *std::move(plan);
}

int64_t totalBytes(const TensorLayout &layout, int64_t elementBytes) {
  int64_t elements = 1;
  for (int64_t extent : layout.shape())
    elements *= extent;
  return elements * elementBytes;
}

/// Kinds of all steps, in order.
std::vector<StepKind> kindsOf(const TransferPlan &plan) {
  std::vector<StepKind> kinds;
  for (const Step &step : plan.steps)
    kinds.push_back(step.kind);
  return kinds;
}

std::vector<const Step *> stepsOf(const TransferPlan &plan, StepKind kind) {
  std::vector<const Step *> result;
  for (const Step &step : plan.steps)
    if (step.kind == kind)
      result.push_back(&step);
  return result;
}

//===----------------------------------------------------------------------===//
// Same-mesh patterns
//===----------------------------------------------------------------------===//

TEST(TransferPlanner, ShardedToReplicatedIsAllGatherAlongRemovedAxis) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {"b"}}, {8, 8});
  TensorLayout dst = layout(mesh, {{}, {"b"}}, {8, 8});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(plan.count(StepKind::AllGather), 4);
  EXPECT_EQ(plan.count(StepKind::LocalCopy), 1);
  EXPECT_EQ(plan.steps.size(), 5u);
  // The groups vary on "a" only: device (a, b) has id 4a + b.
  for (const Step *step : stepsOf(plan, StepKind::AllGather)) {
    ASSERT_EQ(step->devices.size(), 2u);
    EXPECT_EQ(step->devices[1] - step->devices[0], 4);
  }
  // Each device receives the half of its column block it lacks.
  EXPECT_EQ(plan.bytesMoved, 8 * (8 * 8 / 4 / 2) * 4);
}

TEST(TransferPlanner, GatherWithReplicasFollowsMeshAxes) {
  // Tiles are replicated over "b": device (a, b) must pick the holder with
  // the same b, so the gather runs over "a" groups.
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 6});
  TensorLayout dst = layout(mesh, {{}, {}}, {8, 6});
  TransferPlan plan = planAndCheck(src, dst);
  auto gathers = stepsOf(plan, StepKind::AllGather);
  ASSERT_EQ(gathers.size(), 4u);
  for (const Step *step : gathers)
    EXPECT_EQ(step->devices[1] - step->devices[0], 4);
  EXPECT_EQ(plan.maxSendBytes, 4 * 6 * 4);
}

TEST(TransferPlanner, FullGatherOverTwoAxesIsOneAllGather) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  TensorLayout src = layout(mesh, {{"a"}, {"b"}}, {4, 4});
  TensorLayout dst = layout(mesh, {{}, {}}, {4, 4});
  TransferPlan plan = planAndCheck(src, dst);
  auto gathers = stepsOf(plan, StepKind::AllGather);
  ASSERT_EQ(gathers.size(), 1u);
  EXPECT_EQ(gathers[0]->devices, range(0, 4));
  EXPECT_EQ(gathers[0]->transfers.size(), 4u);
  for (const Transfer &transfer : gathers[0]->transfers)
    EXPECT_EQ(transfer.dstDevices.size(), 3u);
}

TEST(TransferPlanner, ReplicatedToShardedIsLocalSlicing) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  TensorLayout src = layout(mesh, {{}, {}}, {6, 9});
  TensorLayout dst = layout(mesh, {{"a"}, {"b"}}, {6, 9});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(kindsOf(plan), std::vector<StepKind>{StepKind::LocalCopy});
  EXPECT_EQ(plan.bytesMoved, 0);
  EXPECT_EQ(plan.peakTempBytes, 0);
  // Columns split 3/3/3/0: devices 3 and 7 (b = 3) hold empty boxes, so
  // only six devices copy.
  EXPECT_EQ(plan.steps[0].transfers.size(), 6u);
}

TEST(TransferPlanner, MovingAnAxisBetweenDimsIsAllToAll) {
  for (int64_t n : {2, 4}) {
    Mesh mesh = makeMesh({{"a", n}});
    TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 8});
    TensorLayout dst = layout(mesh, {{}, {"a"}}, {8, 8});
    TransferPlan plan = planAndCheck(src, dst);
    auto exchanges = stepsOf(plan, StepKind::AllToAll);
    ASSERT_EQ(exchanges.size(), 1u) << formatPlan(plan);
    EXPECT_EQ(exchanges[0]->devices, range(0, n));
    EXPECT_EQ(exchanges[0]->transfers.size(), static_cast<size_t>(n * (n - 1)));
    EXPECT_EQ(plan.count(StepKind::LocalCopy), 1);
  }
}

TEST(TransferPlanner, ReversedDeviceIdsIsCollectivePermute) {
  Mesh mesh = makeMesh({{"a", 8}});
  Mesh reversed = makeMesh({{"a", 8}}, {7, 6, 5, 4, 3, 2, 1, 0});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {16, 3});
  TensorLayout dst = layout(reversed, {{"a"}, {}}, {16, 3});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(kindsOf(plan), std::vector<StepKind>{StepKind::CollectivePermute});
  ASSERT_EQ(plan.steps[0].transfers.size(), 8u);
  for (const Transfer &transfer : plan.steps[0].transfers)
    EXPECT_EQ(transfer.dstDevices,
              std::vector<int64_t>{7 - transfer.srcDevice});
  EXPECT_EQ(plan.bytesMoved, totalBytes(src, 4));
}

TEST(TransferPlanner, TransposedAxesSwapAsPermute) {
  // [{"a"}, {"b"}] -> [{"b"}, {"a"}] on 2x2: the off-diagonal devices swap
  // whole tiles, the diagonal ones keep theirs.
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  TensorLayout src = layout(mesh, {{"a"}, {"b"}}, {4, 4});
  TensorLayout dst = layout(mesh, {{"b"}, {"a"}}, {4, 4});
  TransferPlan plan = planAndCheck(src, dst);
  auto permutes = stepsOf(plan, StepKind::CollectivePermute);
  ASSERT_EQ(permutes.size(), 1u);
  EXPECT_EQ(permutes[0]->devices, (std::vector<int64_t>{1, 2}));
}

//===----------------------------------------------------------------------===//
// Several axes, sub-axes, uneven dims
//===----------------------------------------------------------------------===//

TEST(TransferPlanner, CombinationsOverSeveralAxes) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}, {"c", 2}});
  TensorLayout src = layout(mesh, {{"a", "b"}, {"c"}}, {8, 8});
  for (auto dims : std::vector<std::vector<std::vector<std::string>>>{
           {{"c"}, {"a", "b"}},
           {{"b", "a"}, {}},
           {{}, {"c", "b", "a"}},
           {{"a"}, {"b"}},
           {{"c", "a"}, {"b"}}}) {
    TensorLayout dst = layout(mesh, dims, {8, 8});
    planAndCheck(src, dst);
  }
}

TEST(TransferPlanner, SubAxes) {
  Mesh mesh = makeMesh({{"x", 8}, {"y", 2}});
  TensorLayout src = layout(mesh, {{"x:(1)2"}, {"x:(2)4", "y"}}, {8, 16});
  TransferPlan gather =
      planAndCheck(src, layout(mesh, {{"x:(1)2"}, {}}, {8, 16}));
  // Only the columns move, within groups that share "x":(1)2.
  for (const Step &step : gather.steps)
    for (const Transfer &transfer : step.transfers)
      for (int64_t dst : transfer.dstDevices)
        EXPECT_EQ(dst / 8, transfer.srcDevice / 8);
  planAndCheck(src, layout(mesh, {{"x"}, {"y"}}, {8, 16}));
  planAndCheck(src, layout(mesh, {{"y", "x:(2)4"}, {"x:(1)2"}}, {8, 16}));
}

TEST(TransferPlanner, UnevenDims) {
  Mesh mesh = makeMesh({{"a", 4}, {"b", 3}});
  std::vector<std::vector<std::vector<std::string>>> shardings = {
      {{"a"}, {"b"}},
      {{"b"}, {"a"}},
      {{"a", "b"}, {}},
      {{}, {"b", "a"}},
      {{}, {}}};
  for (const auto &from : shardings)
    for (const auto &to : shardings)
      planAndCheck(layout(mesh, from, {7, 5}), layout(mesh, to, {7, 5}), 2);
}

//===----------------------------------------------------------------------===//
// Cross-mesh transfers
//===----------------------------------------------------------------------===//

TEST(TransferPlanner, DisjointPipelineStage) {
  Mesh stage0 = makeMesh({{"dp", 2}, {"tp", 2}}, range(0, 4));
  Mesh stage1 = makeMesh({{"dp", 2}, {"tp", 2}}, range(4, 8));
  TensorLayout src = layout(stage0, {{"dp"}, {"tp"}}, {8, 8});
  TensorLayout dst = layout(stage1, {{"dp"}, {"tp"}}, {8, 8});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(kindsOf(plan), std::vector<StepKind>{StepKind::CollectivePermute});
  for (const Transfer &transfer : plan.steps[0].transfers)
    EXPECT_EQ(transfer.dstDevices,
              std::vector<int64_t>{transfer.srcDevice + 4});
  EXPECT_EQ(plan.bytesMoved, totalBytes(src, 4));

  // Replicated source: each stage-1 device receives its tile once, and the
  // two replicas share the sending.
  TensorLayout replicated = layout(stage0, {{"dp"}, {}}, {8, 8});
  TransferPlan fromReplicas = planAndCheck(replicated, dst);
  EXPECT_EQ(fromReplicas.maxSendBytes, 8 * 8 / 4 * 4);
}

TEST(TransferPlanner, LargeAndSparseDeviceIds) {
  // Ids far apart take the hashed path of the dense device numbering.
  int64_t base = int64_t(1) << 40;
  Mesh first = makeMesh({{"a", 2}, {"b", 2}}, {base, 7, base * 3, 12});
  Mesh second = makeMesh({{"c", 4}}, {12, base * 5, 7, base});
  TensorLayout src = layout(first, {{"a"}, {"b"}}, {6, 5});
  TransferPlan plan = planAndCheck(src, layout(second, {{}, {"c"}}, {6, 5}));
  EXPECT_GT(plan.count(StepKind::LocalCopy), 0);
  ASSERT_FALSE(plan.perDevice.empty());
  EXPECT_EQ(plan.perDevice.back().device, base * 5);
}

TEST(TransferPlanner, SingleDeviceToMeshIsOneBroadcast) {
  Mesh one = makeMesh({}, {3});
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  TensorLayout src = layout(one, {{}, {}}, {5, 7});
  TensorLayout dst = layout(mesh, {{}, {}}, {5, 7});
  TransferPlan plan = planAndCheck(src, dst);
  auto broadcasts = stepsOf(plan, StepKind::Broadcast);
  ASSERT_EQ(broadcasts.size(), 1u);
  EXPECT_EQ(broadcasts[0]->root(), 3);
  EXPECT_EQ(broadcasts[0]->devices, range(0, 8));
  EXPECT_EQ(plan.count(StepKind::LocalCopy), 1);
  EXPECT_EQ(plan.bytesMoved, 7 * totalBytes(src, 4));
}

TEST(TransferPlanner, OrbaxSingleReplicaRestore) {
  Mesh replica0 = makeMesh({{"tp", 2}}, {0, 1});
  Mesh train = makeMesh({{"dp", 16}, {"tp", 2}});
  TensorLayout src = layout(replica0, {{}, {"tp"}}, {1024, 512});
  TensorLayout dst = layout(train, {{}, {"tp"}}, {1024, 512});
  TransferPlan plan = planAndCheck(src, dst);
  auto broadcasts = stepsOf(plan, StepKind::Broadcast);
  ASSERT_EQ(broadcasts.size(), 2u) << formatPlan(plan);
  for (int64_t tp : {0, 1}) {
    const Step &step = *broadcasts[tp];
    EXPECT_EQ(step.root(), tp);
    ASSERT_EQ(step.devices.size(), 16u);
    for (int64_t device : step.devices)
      EXPECT_EQ(device % 2, tp);
  }
  // Devices 0 and 1 keep their halves.
  auto copies = stepsOf(plan, StepKind::LocalCopy);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0]->devices, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(plan.steps.size(), 3u);
  int64_t half = totalBytes(src, 4) / 2;
  EXPECT_EQ(plan.bytesMoved, 30 * half);
  EXPECT_EQ(plan.maxRecvBytes, half);
}

TEST(TransferPlanner, ReplicasShareTheSending) {
  // Four replicas feed sixteen other devices: each sends to four.
  Mesh sources = makeMesh({{"r", 4}});
  Mesh sinks = makeMesh({{"x", 16}}, range(4, 20));
  TensorLayout src = layout(sources, {{}}, {64});
  TensorLayout dst = layout(sinks, {{}}, {64});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(plan.count(StepKind::Broadcast), 4);
  EXPECT_EQ(plan.maxSendBytes, 4 * 64 * 4);
}

TEST(TransferPlanner, DeviceEquivalentLayoutsGiveEmptyPlan) {
  Mesh ab = makeMesh({{"a", 2}, {"b", 4}});
  Mesh c = makeMesh({{"c", 8}});
  TensorLayout src = layout(ab, {{"a", "b"}, {}}, {16, 4});
  TensorLayout dst = layout(c, {{"c"}, {}}, {16, 4});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_TRUE(plan.identity);
  EXPECT_TRUE(plan.steps.empty());
  EXPECT_EQ(plan.bytesMoved, 0);
}

TEST(TransferPlanner, OverlappingMeshes) {
  Mesh first = makeMesh({{"a", 4}}, {0, 1, 2, 3});
  Mesh second = makeMesh({{"b", 2}, {"c", 2}}, {2, 3, 4, 5});
  TensorLayout src = layout(first, {{"a"}, {}}, {8, 4});
  TensorLayout dst = layout(second, {{"c"}, {"b"}}, {8, 4});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_GT(plan.count(StepKind::LocalCopy), 0);
}

//===----------------------------------------------------------------------===//
// Unreduced sources and destinations
//===----------------------------------------------------------------------===//

TEST(TransferPlanner, UnreducedToShardedIsReduceScatter) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 8}, {"b"});
  TensorLayout dst = layout(mesh, {{"a"}, {"b"}}, {8, 8});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(plan.count(StepKind::ReduceScatter), 2);
  EXPECT_EQ(plan.count(StepKind::AllReduce), 0);
  // After the reduce-scatter every device already holds its tile.
  EXPECT_EQ(plan.reshardLowerBoundBytes, 0);
  EXPECT_EQ(plan.count(StepKind::LocalCopy), 1);
  // (n - 1) * |B| per group: 3 * 32 elements, two groups.
  EXPECT_EQ(plan.reductionLowerBoundBytes, 2 * 3 * 32 * 4);
  EXPECT_TRUE(plan.reducesInPlace);
  for (const Step *step : stepsOf(plan, StepKind::ReduceScatter))
    EXPECT_EQ(step->devices.size(), 4u);
}

TEST(TransferPlanner, UnreducedToReplicatedIsAllReduce) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 8}, {"b"});
  TensorLayout dst = layout(mesh, {{"a"}, {}}, {8, 8});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(plan.count(StepKind::AllReduce), 2);
  EXPECT_EQ(plan.reductionLowerBoundBytes, 2 * 2 * 3 * 32 * 4);
  EXPECT_EQ(plan.reshardLowerBoundBytes, 0);
}

TEST(TransferPlanner, ReductionStepsAreTheirPiecesExpanded) {
  // An all-reduce over 4 members: 4 pieces (rows 2 each) instead of 12
  // phase-0 and 4 phase-1 transfers.
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 8}, {"b"});
  TensorLayout dst = layout(mesh, {{"a"}, {}}, {8, 8});
  TransferPlan plan = planAndCheck(src, dst);
  const Step &step = *stepsOf(plan, StepKind::AllReduce).front();
  ASSERT_EQ(step.transfers.size(), 16u);
  std::optional<ReductionPieces> pieces = findReductionPieces(step, 4);
  ASSERT_TRUE(pieces.has_value());
  EXPECT_EQ(pieces->owners, step.devices);
  ASSERT_EQ(pieces->pieces.size(), 4u);
  EXPECT_EQ(pieces->pieces[1].lo, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(pieces->pieces[1].hi, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(expandReductionPieces(step.kind, step.devices, *pieces, 4).size(),
            16u);

  // A reduce-scatter's pieces are the reduced layout's tiles.
  TensorLayout scattered = layout(mesh, {{"a", "b"}, {}}, {8, 8});
  TransferPlan scatter = planAndCheck(src, scattered);
  for (const Step *reduce : stepsOf(scatter, StepKind::ReduceScatter))
    EXPECT_TRUE(findReductionPieces(*reduce, 4).has_value());

  // Transfers of another shape or order have no symbolic form.
  Step reordered = step;
  std::swap(reordered.transfers[0], reordered.transfers[1]);
  EXPECT_FALSE(findReductionPieces(reordered, 4).has_value());
  Step partial = step;
  partial.transfers.pop_back();
  EXPECT_FALSE(findReductionPieces(partial, 4).has_value());
  Step wrongBytes = step;
  EXPECT_FALSE(findReductionPieces(wrongBytes, 2).has_value());
  Step notReduction = step;
  notReduction.kind = StepKind::AllToAll;
  EXPECT_FALSE(findReductionPieces(notReduction, 4).has_value());
}

TEST(TransferPlanner, UnreducedAcrossMeshesReducesThenMoves) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  Mesh other = makeMesh({{"x", 4}}, range(4, 8));
  TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 4}, {"b"});
  TensorLayout dst = layout(other, {{}, {"x"}}, {8, 4});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(plan.count(StepKind::AllReduce), 2);
  ASSERT_TRUE(plan.reducedLayout.has_value());
  EXPECT_TRUE(plan.reducedLayout->sharding().unreduced.empty());
  // Reductions come first, in their own chunk.
  EXPECT_EQ(plan.steps.front().kind, StepKind::AllReduce);
  EXPECT_EQ(plan.steps.back().chunk, 1);
}

TEST(TransferPlanner, KeptUnreducedAxisStaysPartial) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {4, 4}, {"b"});
  TensorLayout dst = layout(mesh, {{}, {}}, {4, 4}, {"b"});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(plan.count(StepKind::AllReduce), 0);
  EXPECT_EQ(plan.count(StepKind::ReduceScatter), 0);
  EXPECT_EQ(plan.count(StepKind::AllGather), 2);
}

TEST(TransferPlanner, NewUnreducedAxisFillsZeros) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {4, 4});
  TensorLayout dst = layout(mesh, {{"a"}, {}}, {4, 4}, {"b"});
  TransferPlan plan = planAndCheck(src, dst);
  EXPECT_EQ(plan.bytesMoved, 0);
  auto fills = stepsOf(plan, StepKind::ZeroFill);
  ASSERT_EQ(fills.size(), 1u);
  EXPECT_EQ(fills[0]->devices, (std::vector<int64_t>{1, 3}));
}

//===----------------------------------------------------------------------===//
// Memory limit
//===----------------------------------------------------------------------===//

TEST(TransferPlanner, MemoryLimitChunksOrbaxBroadcast) {
  Mesh replica0 = makeMesh({{"tp", 2}}, {0, 1});
  Mesh train = makeMesh({{"dp", 16}, {"tp", 2}});
  TensorLayout src = layout(replica0, {{}, {"tp"}}, {256, 64});
  TensorLayout dst = layout(train, {{}, {"tp"}}, {256, 64});
  int64_t half = 256 * 32 * 4;
  PlanOptions options{half / 8};
  TransferPlan plan = planAndCheck(src, dst, 4, options);
  EXPECT_LE(plan.peakTempBytes, options.memoryLimitBytes);
  EXPECT_GE(plan.numChunks, 8);
  // Every chunk is still a pair of broadcasts.
  EXPECT_EQ(plan.count(StepKind::Broadcast), 2 * plan.numChunks);
  EXPECT_EQ(plan.count(StepKind::SendRecv), 0);
  // A chunk carries whole rows: the split is along the outermost dim.
  for (const Step *step : stepsOf(plan, StepKind::Broadcast))
    for (const Transfer &transfer : step->transfers)
      EXPECT_EQ(transfer.box.hi[1] - transfer.box.lo[1], 32);
}

TEST(TransferPlanner, MemoryLimitKeepsGatherPattern) {
  Mesh mesh = makeMesh({{"a", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {64, 16});
  TensorLayout dst = layout(mesh, {{}, {}}, {64, 16});
  PlanOptions options{4 * 16 * 4 * 4}; // four rows per role
  TransferPlan plan = planAndCheck(src, dst, 4, options);
  EXPECT_GT(plan.numChunks, 1);
  EXPECT_EQ(plan.count(StepKind::AllGather), plan.numChunks);
}

TEST(TransferPlanner, MemoryLimitReduction) {
  Mesh mesh = makeMesh({{"a", 4}});
  TensorLayout src = layout(mesh, {{}, {}}, {32, 8}, {"a"});
  TensorLayout dst = layout(mesh, {{}, {}}, {32, 8});
  TransferPlan plan = planAndCheck(src, dst, 4, PlanOptions{256});
  EXPECT_GT(plan.count(StepKind::AllReduce), 1);
  EXPECT_LE(plan.peakTempBytes, 256);
}

TEST(TransferPlanner, MemoryLimitTooSmallIsAnError) {
  Mesh mesh = makeMesh({{"a", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 8});
  TensorLayout dst = layout(mesh, {{}, {}}, {8, 8});
  absl::StatusOr<TransferPlan> plan = planReshard(src, dst, 8, PlanOptions{4});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  // One element is enough without reductions: transfers go one by one.
  planAndCheck(src, dst, 8, PlanOptions{8});
  // A reduction too: its pieces then run as grouped send/recv that
  // accumulate, one element at a time.
  TensorLayout partial = layout(mesh, {{}, {}}, {8, 8}, {"a"});
  TransferPlan reduced = planAndCheck(partial, dst, 8, PlanOptions{8});
  EXPECT_EQ(reduced.count(StepKind::AllReduce), 0);
  EXPECT_GT(reduced.count(StepKind::SendRecv), 0);
}

//===----------------------------------------------------------------------===//
// Errors, helpers, printing, cache
//===----------------------------------------------------------------------===//

TEST(TransferPlanner, ShapeMismatchIsAnError) {
  Mesh mesh = makeMesh({{"a", 2}});
  absl::StatusOr<TransferPlan> plan =
      planReshard(layout(mesh, {{"a"}}, {4}), layout(mesh, {{}}, {6}), 4);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  plan = planReshard(layout(mesh, {{"a"}}, {4}), layout(mesh, {{}}, {4}), 0);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TransferPlanner, SplitBoxCutsOutermostDimFirst) {
  Box box{{0, 0, 0}, {3, 4, 5}};
  std::vector<Box> parts = splitBox(box, 40);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0], (Box{{0, 0, 0}, {2, 4, 5}}));
  EXPECT_EQ(parts[1], (Box{{2, 0, 0}, {3, 4, 5}}));
  // Smaller than a slab: slices of dim 0, rows of dim 1.
  parts = splitBox(box, 10);
  ASSERT_EQ(parts.size(), 6u);
  EXPECT_EQ(parts[1], (Box{{0, 2, 0}, {1, 4, 5}}));
  int64_t covered = 0;
  for (const Box &part : splitBox(box, 3)) {
    EXPECT_LE(part.numElements(), 3);
    covered += part.numElements();
  }
  EXPECT_EQ(covered, 60);
  EXPECT_TRUE(splitBox(Box{{2}, {2}}, 5).empty());
}

TEST(TransferPlanner, Describe) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  EXPECT_EQ(describe(mesh), "<[\"a\"=2, \"b\"=4]>");
  EXPECT_EQ(describe(makeMesh({{"tp", 2}}, {4, 5})),
            "<[\"tp\"=2], device_ids=[4, 5]>");
  Mesh x = makeMesh({{"x", 4}, {"y", 2}});
  Sharding sharding = Sharding::replicatedOfRank(2);
  sharding.dims[0].axes = refs(x, {"x:(1)2"});
  sharding.dims[1].open = true;
  sharding.unreduced = refs(x, {"y"});
  EXPECT_EQ(describe(sharding, x), "[{\"x\":(1)2}, {?}], unreduced={\"y\"}");
  TensorLayout l = layout(mesh, {{"a"}, {"b"}}, {4, 4});
  EXPECT_EQ(describe(l), "<[\"a\"=2, \"b\"=4]> [{\"a\"}, {\"b\"}] : 4x4");
}

TEST(TransferPlanner, FormatPlanAndStats) {
  Mesh one = makeMesh({}, {3});
  Mesh pair = makeMesh({{"a", 2}});
  TransferPlan plan =
      planAndCheck(layout(one, {{}}, {4}), layout(pair, {{"a"}}, {4}));
  std::string text = formatPlan(plan);
  EXPECT_NE(text.find("bytes moved 16 (lower bound 16)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("send_recv"), std::string::npos) << text;
  std::string json = planStatsJson(plan);
  EXPECT_NE(json.find("\"bytes_moved\": 16"), std::string::npos) << json;
}

TEST(Simulator, CatchesBrokenPlans) {
  Mesh mesh = makeMesh({{"a", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 4});
  TensorLayout dst = layout(mesh, {{}, {}}, {8, 4});
  TransferPlan plan = planAndCheck(src, dst);
  auto gathers = stepsOf(plan, StepKind::AllGather);
  ASSERT_EQ(gathers.size(), 1u);
  size_t index = gathers[0] - plan.steps.data();

  // A receiver left out keeps unset elements.
  TransferPlan missing = plan;
  missing.steps[index].transfers[0].dstDevices.pop_back();
  absl::StatusOr<SimulationResult> result = simulatePlan(missing, src, dst);
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(checkDestinationBuffers(*result, dst).ok());

  // A transfer sent twice writes elements twice.
  TransferPlan doubled = plan;
  doubled.steps[index].transfers.push_back(doubled.steps[index].transfers[0]);
  result = simulatePlan(doubled, src, dst);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(checkDestinationBuffers(*result, dst).ok());
  EXPECT_GT(result->duplicateWrites, 0);

  // Boxes swapped between senders: each reads outside its buffer.
  TransferPlan swapped = plan;
  std::swap(swapped.steps[index].transfers[0].box,
            swapped.steps[index].transfers[1].box);
  EXPECT_FALSE(simulatePlan(swapped, src, dst).ok());

  // A box cut short leaves the rest of the tile unset.
  TransferPlan shifted = plan;
  Transfer &transfer = shifted.steps[index].transfers[0];
  transfer.box = Box{{0, 0}, {2, 2}};
  transfer.bytes = 4 * 4;
  result = simulatePlan(shifted, src, dst);
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(checkDestinationBuffers(*result, dst).ok());
}

TEST(TransferPlanner, StatsOfHandMadeSteps) {
  TransferPlan plan;
  plan.elementBytes = 4;
  Step step{StepKind::SendRecv, 0, {}, {}};
  step.transfers.push_back({5, {7, 9}, Box{{0}, {3}}, 12});
  step.transfers.push_back({7, {5}, Box{{3}, {4}}, 4});
  plan.steps.push_back(step);
  step.chunk = 1;
  step.transfers.pop_back();
  plan.steps.push_back(step);
  recomputePlanStats(plan);
  EXPECT_EQ(plan.bytesMoved, 24 + 4 + 24);
  EXPECT_EQ(plan.numChunks, 2);
  ASSERT_EQ(plan.perDevice.size(), 3u);
  EXPECT_EQ(plan.perDevice[0].device, 5);
  EXPECT_EQ(plan.perDevice[0].sendBytes, 48);
  EXPECT_EQ(plan.perDevice[0].recvBytes, 4);
  // Chunk 0: packs 12, unpacks 4.
  EXPECT_EQ(plan.perDevice[0].peakTempBytes, 16);
  EXPECT_EQ(plan.maxRecvBytes, 24);
  EXPECT_EQ(plan.count(StepKind::SendRecv), 2);
}

TEST(PlanCache, HitsMissesAndSharing) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  TensorLayout src = layout(mesh, {{"a"}, {"b"}}, {8, 8});
  TensorLayout dst = layout(mesh, {{}, {}}, {8, 8});
  PlanCache cache;
  auto first = cache.getOrPlan(src, dst, 4);
  ASSERT_TRUE(first.ok());
  auto second = cache.getOrPlan(src, dst, 4);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
  // Every part of the input is in the key.
  ASSERT_TRUE(cache.getOrPlan(src, dst, 2).ok());
  ASSERT_TRUE(cache.getOrPlan(src, dst, 4, PlanOptions{64}).ok());
  Mesh renumbered = makeMesh({{"a", 2}, {"b", 2}}, {3, 2, 1, 0});
  ASSERT_TRUE(
      cache.getOrPlan(src, layout(renumbered, {{}, {}}, {8, 8}), 4).ok());
  EXPECT_EQ(cache.size(), 4u);
  // The explicit identity is the implicit one.
  Mesh explicitIds = makeMesh({{"a", 2}, {"b", 2}}, {0, 1, 2, 3});
  ASSERT_TRUE(
      cache.getOrPlan(src, layout(explicitIds, {{}, {}}, {8, 8}), 4).ok());
  EXPECT_EQ(cache.hits(), 2);
  // Errors are returned, not cached.
  EXPECT_FALSE(cache.getOrPlan(src, dst, -1).ok());
  EXPECT_EQ(cache.size(), 4u);
}

TEST(PlanCache, ConcurrentLookups) {
  Mesh mesh = makeMesh({{"a", 4}});
  std::vector<TensorLayout> layouts = {layout(mesh, {{"a"}, {}}, {16, 16}),
                                       layout(mesh, {{}, {"a"}}, {16, 16}),
                                       layout(mesh, {{}, {}}, {16, 16})};
  PlanCache cache;
  constexpr int kThreads = 8, kLookups = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLookups; ++i) {
        const TensorLayout &src = layouts[(t + i) % 3];
        const TensorLayout &dst = layouts[(t + 2 * i + 1) % 3];
        auto plan = cache.getOrPlan(src, dst, 4);
        if (!plan.ok() || (*plan)->shape != src.shape())
          ++failures;
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(cache.hits() + cache.misses(), kThreads * kLookups);
  EXPECT_EQ(cache.size(), 9u);
  EXPECT_GE(cache.misses(), 9);
}

} // namespace
