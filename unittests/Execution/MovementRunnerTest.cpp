//===- MovementRunnerTest.cpp - Sharded runs of data movement -------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// runMovement and compareWithReference are what `polymesh-run --verify`
// reports for movement-only functions. The IR verifier rejects broken plans,
// so polymesh-run cannot be fed one; these tests hand the same helpers
// deliberately wrong tiles, plans and layouts and require every one to be
// caught, besides checking that correct plans pass.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/MovementRunner.h"
#include "polymesh/Execution/InputFill.h"
#include "polymesh/Planner/Planner.h"

#include "gtest/gtest.h"

#include <cstring>

using namespace polymesh;
using namespace polymesh::execution;

namespace {

planner::Mesh meshOf(std::vector<planner::MeshAxis> axes,
                     std::vector<int64_t> deviceIds = {}) {
  return planner::Mesh{std::move(axes), std::move(deviceIds)};
}

/// Whole axes per dimension, by index; `unreduced` likewise.
planner::TensorLayout layoutOf(const planner::Mesh &mesh,
                               std::vector<std::vector<int>> dims,
                               std::vector<int64_t> shape,
                               std::vector<int> unreduced = {}) {
  planner::Sharding sharding;
  for (const std::vector<int> &axes : dims) {
    planner::DimSharding dim;
    for (int axis : axes)
      dim.axes.push_back(planner::AxisRef::whole(mesh, axis));
    sharding.dims.push_back(dim);
  }
  for (int axis : unreduced)
    sharding.unreduced.push_back(planner::AxisRef::whole(mesh, axis));
  absl::StatusOr<planner::TensorLayout> layout =
      planner::TensorLayout::create(mesh, sharding, std::move(shape));
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

planner::TransferPlan planOf(const planner::TensorLayout &source,
                             const planner::TensorLayout &destination,
                             ElementType type) {
  absl::StatusOr<planner::TransferPlan> plan =
      planner::planReshard(source, destination, elementSize(type));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

/// Argument 0 in `source`, moved to `destination` and returned there.
MovementProgram reshardProgram(const planner::TensorLayout &source,
                               const planner::TensorLayout &destination,
                               ElementType type = ElementType::F32) {
  MovementProgram program;
  program.values.push_back(MovementValue::makeArgument(type, source, 0));
  program.values.push_back(MovementValue::makeTransfer(
      type, 0, planOf(source, destination, type), source, destination));
  program.results = {1};
  program.resultLayouts = {destination};
  return program;
}

MovementRun runOrFail(const MovementProgram &program) {
  llvm::Expected<MovementRun> run = runMovement(program);
  if (!run) {
    ADD_FAILURE() << llvm::toString(run.takeError());
    return {};
  }
  return std::move(*run);
}

std::string errorOf(const MovementProgram &program) {
  llvm::Expected<MovementRun> run = runMovement(program);
  if (run) {
    ADD_FAILURE() << "runMovement succeeded";
    return "";
  }
  return llvm::toString(run.takeError());
}

/// Overwrites every byte of element `linear` of `tile` with `byte`.
void setElement(HostTensor &tile, int64_t linear, uint8_t byte) {
  int64_t size = elementSize(tile.getElementType());
  std::memset(tile.getData() + linear * size, byte, size);
}

const planner::Mesh kMesh4 = meshOf({{"x", 4}});
const planner::Mesh kStage1 = meshOf({{"x", 4}}, {4, 5, 6, 7});
const planner::Mesh kMesh22 = meshOf({{"x", 2}, {"y", 2}});

TEST(MovementRunnerTest, AllGatherMatchesTheReference) {
  auto source = layoutOf(kMesh4, {{0}, {}}, {16, 8});
  auto destination = layoutOf(kMesh4, {{}, {}}, {16, 8});
  MovementProgram program = reshardProgram(source, destination);
  MovementRun run = runOrFail(program);
  ASSERT_EQ(run.results.size(), 1u);
  EXPECT_EQ(run.numDevices, 4);
  // Every device receives the three quarters it lacks.
  EXPECT_EQ(run.bytesMoved, 4 * 12 * 8 * 4);
  EXPECT_EQ(run.bytesMoved, program.values[1].plan->bytesMoved);
  HostTensor reference = makeInput(ElementType::F32, {16, 8}, 0);
  EXPECT_FALSE(compareWithReference(reference, run.results[0]));
  for (const auto &[device, tile] : run.results[0].tiles)
    EXPECT_FALSE(compareBitExact(reference, tile)) << "device " << device;
}

TEST(MovementRunnerTest, InputTilesHoldTheReferenceInput) {
  auto layout = layoutOf(kStage1, {{}, {0}}, {6, 10});
  ShardedTensor input = makeShardedInput(ElementType::BF16, layout, 3);
  HostTensor reference = makeInput(ElementType::BF16, {6, 10}, 3);
  EXPECT_FALSE(compareWithReference(reference, input));
  // 10 over 4: tiles of 3, the last one holds one column and two of zeros.
  const HostTensor &last = input.tiles.at(7);
  EXPECT_EQ(last.getShape(), (std::vector<int64_t>{6, 3}));
  for (int64_t row = 0; row < 6; ++row)
    for (int64_t col = 1; col < 3; ++col)
      EXPECT_EQ(last.formatElement(last.linearize({row, col})), "0 (0x0000)");
}

// A wrong element in one device's tile is reported with the device, the
// global index and both values.
TEST(MovementRunnerTest, CorruptedTileIsReported) {
  auto source = layoutOf(kMesh4, {{}, {0}}, {16, 8});
  auto destination = layoutOf(kStage1, {{0}, {}}, {16, 8});
  MovementRun run = runOrFail(reshardProgram(source, destination));
  ASSERT_EQ(run.results.size(), 1u);
  HostTensor reference = makeInput(ElementType::F32, {16, 8}, 0);
  ASSERT_FALSE(compareWithReference(reference, run.results[0]));

  // Device 6 holds rows 8..11: local [1, 2] is global [9, 2].
  HostTensor &tile = run.results[0].tiles.at(6);
  std::string expected = tile.formatElement(tile.linearize({1, 2}));
  setElement(tile, tile.linearize({1, 2}), 0x7f);
  std::optional<TileMismatch> mismatch =
      compareWithReference(reference, run.results[0]);
  ASSERT_TRUE(mismatch);
  EXPECT_EQ(mismatch->device, 6);
  EXPECT_EQ(mismatch->globalIndex, (std::vector<int64_t>{9, 2}));
  EXPECT_EQ(mismatch->message(), "device 6: value at [9, 2]: expected " +
                                     expected +
                                     ", got 3.3961514e+38 (0x7f7f7f7f)");
}

// Padding past a short tile's box is not data; it is not compared.
TEST(MovementRunnerTest, PaddingIsNotCompared) {
  auto source = layoutOf(kMesh4, {{}, {0}}, {10, 4});
  auto destination = layoutOf(kMesh4, {{0}, {}}, {10, 4});
  MovementRun run = runOrFail(reshardProgram(source, destination));
  ASSERT_EQ(run.results.size(), 1u);
  // Rows 9..11 of device 3: row 9 is data, rows 10 and 11 padding.
  HostTensor &tile = run.results[0].tiles.at(3);
  setElement(tile, tile.linearize({1, 0}), 0x55);
  setElement(tile, tile.linearize({2, 3}), 0x55);
  HostTensor reference = makeInput(ElementType::F32, {10, 4}, 0);
  EXPECT_FALSE(compareWithReference(reference, run.results[0]));
  setElement(tile, tile.linearize({0, 3}), 0x55);
  std::optional<TileMismatch> mismatch =
      compareWithReference(reference, run.results[0]);
  ASSERT_TRUE(mismatch);
  EXPECT_EQ(mismatch->globalIndex, (std::vector<int64_t>{9, 3}));
}

// A plan that passes the executor's checks but leaves out a transfer: the
// box never arrives, and the comparison says where.
TEST(MovementRunnerTest, PlanMissingATransferIsCaught) {
  auto source = layoutOf(kMesh4, {{0}, {}}, {16, 8});
  auto destination = layoutOf(kStage1, {{}, {0}}, {16, 8});
  MovementProgram program = reshardProgram(source, destination);
  planner::TransferPlan &plan = *program.values[1].plan;
  // Drop the last box of the last step that crosses devices.
  for (auto step = plan.steps.rbegin(); step != plan.steps.rend(); ++step) {
    if (step->kind == planner::StepKind::LocalCopy)
      continue;
    step->transfers.pop_back();
    break;
  }
  planner::recomputePlanStats(plan);
  MovementRun run = runOrFail(program);
  ASSERT_EQ(run.results.size(), 1u);
  std::optional<TileMismatch> mismatch = compareWithReference(
      makeInput(ElementType::F32, {16, 8}, 0), run.results[0]);
  ASSERT_TRUE(mismatch);
  EXPECT_EQ(mismatch->mismatch.actual, "0 (0x00000000)");
}

// A plan whose transfer writes outside a receiver's tile is refused before
// anything runs; the error carries the executor's message.
TEST(MovementRunnerTest, PlanTheExecutorRejectsIsAnError) {
  auto source = layoutOf(kMesh4, {{0}, {}}, {16, 8});
  auto destination = layoutOf(kStage1, {{0}, {}}, {16, 8});
  MovementProgram program = reshardProgram(source, destination);
  planner::TransferPlan &plan = *program.values[1].plan;
  ASSERT_FALSE(plan.steps.empty());
  // Rows 0..3 go to device 4; device 5 holds rows 4..7.
  planner::Transfer &transfer = plan.steps.back().transfers.front();
  ASSERT_EQ(transfer.dstDevices, (std::vector<int64_t>{4}));
  transfer.dstDevices = {5};
  std::string error = errorOf(program);
  EXPECT_NE(error.find("outside the buffer of 5"), std::string::npos) << error;
}

// Layouts that do not line up are errors, not silent comparisons of the
// wrong bytes.
TEST(MovementRunnerTest, LayoutsThatDoNotLineUpAreErrors) {
  auto rows = layoutOf(kMesh4, {{0}, {}}, {16, 8});
  auto columns = layoutOf(kMesh4, {{}, {0}}, {16, 8});

  MovementProgram alias;
  alias.values.push_back(
      MovementValue::makeArgument(ElementType::F32, rows, 0));
  alias.values.push_back(
      MovementValue::makeAlias(ElementType::F32, 0, columns));
  alias.results = {1};
  alias.resultLayouts = {columns};
  EXPECT_NE(errorOf(alias).find("places other tiles"), std::string::npos);

  MovementProgram result = reshardProgram(rows, columns);
  result.resultLayouts = {rows};
  EXPECT_NE(errorOf(result).find("result #0 is declared as"),
            std::string::npos);

  MovementProgram transfer = reshardProgram(rows, columns);
  transfer.values[1].source = columns;
  EXPECT_NE(errorOf(transfer).find("but its input is"), std::string::npos);
}

// Partial sums: the argument's partials add up to the input (one member
// holds it, the others zeros), the all-reduce sums them in the element type,
// and every device ends with the reference's values. Also through bf16,
// whose sums run in f32 and round.
TEST(MovementRunnerTest, PartialSumsAreReducedExactly) {
  for (ElementType type :
       {ElementType::F32, ElementType::BF16, ElementType::I32}) {
    SCOPED_TRACE(elementTypeName(type));
    auto source = layoutOf(kMesh22, {{0}, {}}, {8, 8}, /*unreduced=*/{1});
    auto destination = layoutOf(kMesh22, {{0}, {}}, {8, 8});
    ShardedTensor input = makeShardedInput(type, source, 0);
    // Devices 1 and 3 are the second members of their groups.
    for (int64_t device : {1, 3})
      for (int64_t e = 0; e < input.tiles.at(device).getNumElements(); ++e)
        ASSERT_EQ(input.tiles.at(device).formatElement(e).substr(0, 1), "0");
    MovementRun run = runOrFail(reshardProgram(source, destination, type));
    ASSERT_EQ(run.results.size(), 1u);
    EXPECT_FALSE(
        compareWithReference(makeInput(type, {8, 8}, 0), run.results[0]));
  }
}

// Partials kept on the result are compared as their group's sum; a wrong
// partial shows up at the group's first device.
TEST(MovementRunnerTest, PartialResultsAreComparedAsSums) {
  auto source = layoutOf(kMesh22, {{0}, {}}, {8, 8}, /*unreduced=*/{1});
  auto destination = layoutOf(kMesh22, {{}, {}}, {8, 8}, /*unreduced=*/{1});
  MovementRun run = runOrFail(reshardProgram(source, destination));
  ASSERT_EQ(run.results.size(), 1u);
  HostTensor reference = makeInput(ElementType::F32, {8, 8}, 0);
  EXPECT_FALSE(compareWithReference(reference, run.results[0]));
  // Device 3 is the second member of {2, 3}: a nonzero partial there
  // changes the sum.
  HostTensor &tile = run.results[0].tiles.at(3);
  setElement(tile, tile.linearize({5, 1}), 0x3f);
  std::optional<TileMismatch> mismatch =
      compareWithReference(reference, run.results[0]);
  ASSERT_TRUE(mismatch);
  EXPECT_EQ(mismatch->device, 2);
  EXPECT_EQ(mismatch->globalIndex, (std::vector<int64_t>{5, 1}));
}

// Chains, constraints, fan-out and repeated results: argument -> transfer ->
// alias -> transfer, returning the last value, the argument and the alias;
// and an unreduced argument read by two transfers that both reduce in place,
// so the second must not see the first one's sums.
TEST(MovementRunnerTest, ChainsAndFanOut) {
  auto rows = layoutOf(kMesh4, {{0}, {}}, {16, 8});
  auto columns = layoutOf(kMesh4, {{}, {0}}, {16, 8});
  auto moved = layoutOf(kStage1, {{0}, {}}, {16, 8});
  MovementProgram program;
  program.values.push_back(
      MovementValue::makeArgument(ElementType::I64, rows, 0));
  program.values.push_back(MovementValue::makeTransfer(
      ElementType::I64, 0, planOf(rows, columns, ElementType::I64), rows,
      columns));
  program.values.push_back(
      MovementValue::makeAlias(ElementType::I64, 1, columns));
  program.values.push_back(MovementValue::makeTransfer(
      ElementType::I64, 2, planOf(columns, moved, ElementType::I64), columns,
      moved));
  program.results = {3, 0, 2, 3};
  program.resultLayouts = {moved, rows, columns, moved};
  MovementRun run = runOrFail(program);
  ASSERT_EQ(run.results.size(), 4u);
  EXPECT_EQ(run.numDevices, 8);
  HostTensor reference = makeInput(ElementType::I64, {16, 8}, 0);
  for (const ShardedTensor &result : run.results)
    EXPECT_FALSE(compareWithReference(reference, result));

  auto partial = layoutOf(kMesh22, {{0}, {}}, {8, 8}, /*unreduced=*/{1});
  auto replicated = layoutOf(kMesh22, {{}, {}}, {8, 8});
  auto scattered = layoutOf(kMesh22, {{0}, {1}}, {8, 8});
  MovementProgram fanOut;
  fanOut.values.push_back(
      MovementValue::makeArgument(ElementType::F32, partial, 1));
  for (const planner::TensorLayout *to : {&replicated, &scattered}) {
    planner::TransferPlan plan = planOf(partial, *to, ElementType::F32);
    ASSERT_TRUE(plan.reducesInPlace);
    fanOut.values.push_back(MovementValue::makeTransfer(
        ElementType::F32, 0, std::move(plan), partial, *to));
  }
  fanOut.results = {1, 2, 0};
  fanOut.resultLayouts = {replicated, scattered, partial};
  MovementRun fanOutRun = runOrFail(fanOut);
  ASSERT_EQ(fanOutRun.results.size(), 3u);
  HostTensor input = makeInput(ElementType::F32, {8, 8}, 1);
  for (const ShardedTensor &result : fanOutRun.results)
    EXPECT_FALSE(compareWithReference(input, result));
}

TEST(MovementRunnerTest, ReferenceOfAnotherShapeIsAMismatch) {
  auto layout = layoutOf(kMesh4, {{0}, {}}, {16, 8});
  ShardedTensor input = makeShardedInput(ElementType::F32, layout, 0);
  std::optional<TileMismatch> mismatch =
      compareWithReference(makeInput(ElementType::F32, {8, 16}, 0), input);
  ASSERT_TRUE(mismatch);
  EXPECT_EQ(mismatch->mismatch.kind, "shape");
  mismatch =
      compareWithReference(makeInput(ElementType::I32, {16, 8}, 0), input);
  ASSERT_TRUE(mismatch);
  EXPECT_EQ(mismatch->mismatch.kind, "element type");
}

} // namespace
