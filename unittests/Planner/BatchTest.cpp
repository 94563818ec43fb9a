//===- BatchTest.cpp - Batched plans: one cell stands for all -------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// A batched plan is the plan of cell 0 expanded over the batch axes. These
// tests expand it and check the whole plan as the planner's own plans are
// checked: with the host simulator, and against the bytes lower bound of the
// whole reshard (planReshard on it).
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Batch.h"
#include "polymesh/Planner/RandomLayout.h"
#include "polymesh/Planner/Simulate.h"

#include "Support/LayoutBuilders.h"
#include "Support/PlanChecks.h"

#include <gtest/gtest.h>

#include <iostream>

using namespace polymesh::planner;
using namespace polymesh::planner::testing;

namespace {

TensorLayout withSharding(const Mesh &mesh, const Sharding &sharding,
                          std::vector<int64_t> shape) {
  absl::StatusOr<TensorLayout> result =
      TensorLayout::create(mesh, sharding, std::move(shape));
  EXPECT_TRUE(result.ok()) << result.status();
  return *std::move(result);
}

/// Plans the cell, expands, and checks the whole plan; returns it.
TransferPlan checkBatched(const TensorLayout &source,
                          const TensorLayout &destination,
                          const std::vector<BatchAxis> &axes,
                          int64_t elementBytes = 4,
                          const PlanOptions &options = {}) {
  absl::StatusOr<ReshardBatch> batch =
      makeReshardBatch(source, destination, axes);
  EXPECT_TRUE(batch.ok()) << batch.status();
  if (!batch.ok())
    return {};
  absl::StatusOr<TransferPlan> cell =
      planCellReshard(*batch, elementBytes, options);
  // Cells that share devices get half the limit each, which may hold less
  // than one element: the caller plans the whole reshard instead.
  if (!cell.ok() && batch->cellsShareDevices && options.memoryLimitBytes > 0)
    return {};
  EXPECT_TRUE(cell.ok()) << cell.status();
  if (!cell.ok())
    return {};
  absl::StatusOr<TransferPlan> plan =
      expandBatchedPlan(*cell, *batch, source, destination);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok())
    return {};
  EXPECT_TRUE(runsCorrectly(*plan, source, destination));
  absl::StatusOr<TransferPlan> whole =
      planReshard(source, destination, elementBytes, options);
  EXPECT_TRUE(whole.ok()) << whole.status();
  if (whole.ok()) {
    EXPECT_EQ(plan->lowerBoundBytes, whole->lowerBoundBytes);
    EXPECT_EQ(plan->bytesMoved, whole->bytesMoved);
    EXPECT_EQ(plan->identity, whole->identity);
    EXPECT_EQ(plan->reducesInPlace, whole->reducesInPlace);
    EXPECT_EQ(plan->reducedLayout.has_value(),
              whole->reducedLayout.has_value());
    if (plan->reducedLayout && whole->reducedLayout) {
      EXPECT_EQ(plan->reducedLayout->sharding(),
                whole->reducedLayout->sharding());
    }
    if (options.memoryLimitBytes > 0) {
      EXPECT_LE(plan->peakTempBytes, options.memoryLimitBytes);
    }
  }
  return std::move(*plan);
}

Mesh pod(int64_t dp, int64_t fsdp, int64_t tp, std::vector<int64_t> ids = {}) {
  return Mesh{{{"dp", dp}, {"fsdp", fsdp}, {"tp", tp}}, std::move(ids)};
}

// The four reshards of benchmarks/scale on a 4 x 4 x 2 pod.
TEST(BatchTest, PodReshards) {
  Mesh mesh = pod(4, 4, 2);
  std::vector<int64_t> shape = {64, 48};
  TensorLayout fsdp = layout(mesh, {{"dp", "fsdp"}, {"tp"}}, shape);

  TensorLayout toTp = layout(mesh, {{"dp"}, {"fsdp", "tp"}}, shape);
  std::vector<BatchAxis> axes = findBatchAxes(fsdp, toTp);
  EXPECT_EQ(axes, (std::vector<BatchAxis>{{"dp", "dp", 0}}));
  TransferPlan plan = checkBatched(fsdp, toTp, axes);
  EXPECT_GT(plan.bytesMoved, 0);

  TensorLayout gathered = layout(mesh, {{"dp"}, {"tp"}}, shape);
  axes = findBatchAxes(fsdp, gathered);
  EXPECT_EQ(axes, (std::vector<BatchAxis>{{"dp", "dp", 0}, {"tp", "tp", 1}}));
  plan = checkBatched(fsdp, gathered, axes);
  // One all-gather of "fsdp" per (dp, tp) cell.
  EXPECT_EQ(plan.count(StepKind::AllGather), 8);

  TensorLayout partial = layout(mesh, {{"fsdp"}, {"tp"}}, shape, {"dp"});
  TensorLayout reduced = layout(mesh, {{"fsdp"}, {"tp"}}, shape);
  axes = findBatchAxes(partial, reduced);
  EXPECT_EQ(axes,
            (std::vector<BatchAxis>{{"fsdp", "fsdp", 0}, {"tp", "tp", 1}}));
  plan = checkBatched(partial, reduced, axes);
  EXPECT_EQ(plan.count(StepKind::AllReduce), 8);

  Mesh stage0 = pod(2, 4, 2, range(0, 16)),
       stage1 = pod(2, 4, 2, range(16, 32));
  TensorLayout from = layout(stage0, {{"dp", "fsdp"}, {"tp"}}, shape);
  TensorLayout to = layout(stage1, {{"dp", "fsdp"}, {"tp"}}, shape);
  axes = findBatchAxes(from, to);
  EXPECT_EQ(axes.size(), 3u);
  plan = checkBatched(from, to, axes);
  EXPECT_EQ(plan.bytesMoved, 64 * 48 * 4);
}

// A symbolic cell plan (pieces, no transfers) moves to every cell as
// pieces: owners by the cell's device table, boxes by its shift. The whole
// plan runs as the planner's own and stays symbolic.
TEST(BatchTest, SymbolicReductionsMoveAsPieces) {
  Mesh mesh{{{"r", 3}, {"x", 2}, {"y", 2}},
            {7, 3, 11, 0, 5, 9, 1, 4, 10, 2, 8, 6}};
  std::vector<int64_t> shape = {10, 6};
  PlanOptions symbolic;
  symbolic.symbolicReductions = true;
  TensorLayout partial = layout(mesh, {{"y"}, {}}, shape, {"x"});
  for (const TensorLayout &to : {layout(mesh, {{"y"}, {}}, shape),
                                 layout(mesh, {{"y", "x"}, {}}, shape)}) {
    std::vector<BatchAxis> axes = findBatchAxes(partial, to);
    ASSERT_FALSE(axes.empty()) << describe(to);
    TransferPlan plan = checkBatched(partial, to, axes, 4, symbolic);
    int64_t reductions = 0;
    for (const Step &step : plan.steps)
      if (step.kind == StepKind::AllReduce ||
          step.kind == StepKind::ReduceScatter) {
        EXPECT_TRUE(step.isSymbolic()) << formatPlan(plan);
        ++reductions;
      }
    // One group of "x" per ("r", "y") cell.
    EXPECT_EQ(reductions, 6) << formatPlan(plan);
  }
}

TEST(BatchTest, ReplicatedAxesAndOddIds) {
  // "r" replicates both layouts; ids are a permutation.
  Mesh mesh{{{"r", 3}, {"x", 2}, {"y", 2}},
            {7, 3, 11, 0, 5, 9, 1, 4, 10, 2, 8, 6}};
  std::vector<int64_t> shape = {10, 6};
  TensorLayout source = layout(mesh, {{"x"}, {"y"}}, shape);
  TensorLayout destination = layout(mesh, {{"y", "x"}, {}}, shape);
  std::vector<BatchAxis> axes = findBatchAxes(source, destination);
  EXPECT_EQ(axes, (std::vector<BatchAxis>{{"r", "r", -1}}));
  checkBatched(source, destination, axes, 2, PlanOptions{24});
}

TEST(BatchTest, RefusesWhatDoesNotRepeat) {
  Mesh mesh = pod(2, 2, 2);
  // Tiles of 3 rows (10 over 4) straddle the slabs of 5 rows of "dp".
  TensorLayout source = layout(mesh, {{"dp", "fsdp"}, {}}, {10, 4});
  TensorLayout destination = layout(mesh, {{"dp"}, {}}, {10, 4});
  absl::StatusOr<ReshardBatch> batch =
      makeReshardBatch(source, destination, {{"dp", "dp", 0}});
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find("straddles"), std::string::npos)
      << batch.status();
  EXPECT_TRUE(findBatchAxes(source, destination).empty() ||
              findBatchAxes(source, destination).front().source != "dp");
  // The axis splits a dimension in one layout only.
  TensorLayout other = layout(mesh, {{"fsdp"}, {"dp"}}, {8, 4});
  TensorLayout again = layout(mesh, {{"fsdp"}, {}}, {8, 4});
  EXPECT_FALSE(makeReshardBatch(other, again, {{"dp", "dp", -1}}).ok());
  EXPECT_FALSE(makeReshardBatch(other, again, {{"dp", "dp", 1}}).ok());
  // Pairing two different axes of one mesh moves shared devices apart.
  TensorLayout a = layout(mesh, {{"tp"}, {}}, {8, 4});
  absl::StatusOr<ReshardBatch> crossed =
      makeReshardBatch(a, a, {{"dp", "fsdp", -1}});
  ASSERT_FALSE(crossed.ok());
  EXPECT_NE(crossed.status().message().find("two devices"), std::string::npos)
      << crossed.status();
  EXPECT_FALSE(makeReshardBatch(a, a, {{"dp", "nope", -1}}).ok());
}

/// A random cell reshard repeated over one or two new axes, each leading a
/// random dimension or replicating, inserted at random places in both
/// meshes; cell k's device ids are cell 0's plus k times (largest id + 1).
struct BatchedCase {
  ReshardCase whole;
  std::vector<BatchAxis> axes;
};

Mesh repeatMesh(const Mesh &cell, const std::vector<int64_t> &sizes,
                const std::vector<size_t> &at, int64_t offset) {
  Mesh mesh;
  std::vector<int> cellAxis; // -1 - i: batch axis i
  size_t next = 0;
  for (size_t a = 0; a <= cell.axes.size(); ++a) {
    for (size_t i = 0; i < at.size(); ++i)
      if (at[i] == a) {
        mesh.axes.push_back({"B" + std::to_string(i), sizes[i]});
        cellAxis.push_back(-1 - static_cast<int>(i));
      }
    if (a < cell.axes.size()) {
      mesh.axes.push_back(cell.axes[a]);
      cellAxis.push_back(static_cast<int>(next++));
    }
  }
  for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p) {
    std::vector<int64_t> coords = mesh.coordinates(p);
    int64_t cellPosition = 0, cellNumber = 0;
    std::vector<int64_t> batchCoords(sizes.size());
    for (size_t a = 0; a < coords.size(); ++a) {
      if (cellAxis[a] >= 0)
        cellPosition = cellPosition * mesh.axes[a].size + coords[a];
      else
        batchCoords[-1 - cellAxis[a]] = coords[a];
    }
    for (size_t i = 0; i < sizes.size(); ++i)
      cellNumber = cellNumber * sizes[i] + batchCoords[i];
    mesh.deviceIds.push_back(cell.deviceAt(cellPosition) + cellNumber * offset);
  }
  return mesh;
}

Sharding repeatSharding(const Sharding &cell, const Mesh &cellMesh,
                        const Mesh &mesh, const std::vector<int64_t> &dimOf) {
  Sharding sharding = cell;
  auto rename = [&](std::vector<AxisRef> &refs) {
    for (AxisRef &ref : refs)
      ref.axis = *mesh.axisIndex(cellMesh.axes[ref.axis].name);
  };
  for (DimSharding &dim : sharding.dims)
    rename(dim.axes);
  rename(sharding.replicated);
  rename(sharding.unreduced);
  for (size_t i = dimOf.size(); i-- > 0;)
    if (dimOf[i] >= 0) {
      std::vector<AxisRef> &axes = sharding.dims[dimOf[i]].axes;
      axes.insert(
          axes.begin(),
          AxisRef::whole(mesh, *mesh.axisIndex("B" + std::to_string(i))));
    }
  return sharding;
}

BatchedCase randomBatchedCase(SplitMix64 &rng) {
  RandomReshardOptions options;
  options.maxDevices = 12;
  ReshardCase cell = randomReshard(rng, options);
  size_t rank = cell.source.shape().size();
  int count = static_cast<int>(rng.uniform(1, 2));
  std::vector<int64_t> sizes, dimOf;
  for (int i = 0; i < count; ++i) {
    sizes.push_back(rng.uniform(2, 3));
    dimOf.push_back(rank > 0 && rng.chance(60)
                        ? rng.uniform(0, static_cast<int64_t>(rank) - 1)
                        : -1);
  }
  int64_t offset = 1;
  for (const TensorLayout *l : {&cell.source, &cell.destination})
    for (int64_t p = 0; p < l->numDevices(); ++p)
      offset = std::max(offset, l->mesh().deviceAt(p) + 1);
  std::vector<int64_t> shape = cell.source.shape();
  for (int i = 0; i < count; ++i)
    if (dimOf[i] >= 0)
      shape[dimOf[i]] *= sizes[i];
  bool sameMesh = cell.source.mesh() == cell.destination.mesh();
  std::vector<size_t> sourceAt, destinationAt;
  for (int i = 0; i < count; ++i) {
    sourceAt.push_back(rng.uniform(0, cell.source.mesh().axes.size()));
    destinationAt.push_back(
        sameMesh ? sourceAt.back()
                 : rng.uniform(0, cell.destination.mesh().axes.size()));
  }
  Mesh source = repeatMesh(cell.source.mesh(), sizes, sourceAt, offset);
  Mesh destination =
      repeatMesh(cell.destination.mesh(), sizes, destinationAt, offset);
  BatchedCase result{
      {withSharding(source,
                    repeatSharding(cell.source.sharding(), cell.source.mesh(),
                                   source, dimOf),
                    shape),
       withSharding(destination,
                    repeatSharding(cell.destination.sharding(),
                                   cell.destination.mesh(), destination, dimOf),
                    shape),
       cell.elementBytes, cell.options},
      {}};
  for (int i = 0; i < count; ++i) {
    std::string name = "B" + std::to_string(i);
    result.axes.push_back({name, name, dimOf[i]});
  }
  return result;
}

TEST(BatchTest, RandomBatchedReshards) {
  constexpr int kCases = 3000;
  SplitMix64 rng(0xba7c4);
  int batched = 0, found = 0, cells = 0;
  for (int i = 0; i < kCases; ++i) {
    BatchedCase c = randomBatchedCase(rng);
    SCOPED_TRACE(absl::StrCat("case ", i, ": ", describe(c.whole.source),
                              "  ->  ", describe(c.whole.destination)));
    std::vector<BatchAxis> axes =
        findBatchAxes(c.whole.source, c.whole.destination);
    found += !axes.empty();
    if (!axes.empty()) {
      absl::StatusOr<ReshardBatch> batch =
          makeReshardBatch(c.whole.source, c.whole.destination, axes);
      ASSERT_TRUE(batch.ok()) << batch.status();
      cells += batch->numCells;
      checkBatched(c.whole.source, c.whole.destination, axes,
                   c.whole.elementBytes, c.whole.options);
      if (HasFailure())
        return;
    }
    // The axes the case was built with repeat, unless a tile straddles a
    // slab (uneven cell tiles) - then they must be refused.
    absl::StatusOr<ReshardBatch> built =
        makeReshardBatch(c.whole.source, c.whole.destination, c.axes);
    if (built.ok()) {
      ++batched;
      checkBatched(c.whole.source, c.whole.destination, c.axes,
                   c.whole.elementBytes, c.whole.options);
      if (HasFailure())
        return;
    } else {
      EXPECT_NE(built.status().message().find("straddle"), std::string::npos)
          << built.status();
    }
  }
  std::cout << "[batch] " << kCases << " cases: " << batched
            << " batched as built, " << found << " with batch axes found, "
            << cells << " cells\n";
  EXPECT_GT(batched, kCases / 2);
  EXPECT_GT(found, kCases / 2);
}

} // namespace
