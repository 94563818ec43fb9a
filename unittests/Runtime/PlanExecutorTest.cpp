//===- PlanExecutorTest.cpp - Plans executed on the loopback backend ------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Every plan here is executed for real: each device of the loopback backend
// is a thread with its own source and destination tiles, the bytes move
// through the backend's collectives and grouped send/recv, and afterwards
// every destination tile is compared, element by element and padding
// included, with the simulator's (the reference semantics), and checked to
// hold its box of the tensor. Source elements hold their global linear index
// (split into partials over reduction groups, as makeSourceBuffers does), so
// a misplaced, missing or doubled element shows. Each case runs twice: with
// collectives, and as grouped send/recv only.
//
// One test per step kind and pattern, then a randomized property test over
// the planner's random reshards (fixed seed).
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/PlanExecutor.h"

#include "polymesh/Planner/Planner.h"
#include "polymesh/Planner/RandomLayout.h"
#include "polymesh/Planner/Simulate.h"

#include "absl/strings/str_cat.h"

#include "Support/LayoutBuilders.h"
#include <gmock/gmock.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <numeric>

using namespace polymesh::planner;
using namespace polymesh::runtime;
using ::testing::HasSubstr;

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kUnderTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kUnderTsan = true;
#else
constexpr bool kUnderTsan = false;
#endif
#else
constexpr bool kUnderTsan = false;
#endif

//===----------------------------------------------------------------------===//
// Layouts
//===----------------------------------------------------------------------===//

using namespace polymesh::planner::testing;

std::vector<int64_t> devicesOf(const TensorLayout &source,
                               const TensorLayout &destination) {
  std::vector<int64_t> ids;
  for (const TensorLayout *layout : {&source, &destination})
    for (int64_t p = 0, e = layout->numDevices(); p < e; ++p)
      ids.push_back(layout->mesh().deviceAt(p));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

//===----------------------------------------------------------------------===//
// Element encoding: the simulator's int64 values in the element type
//===----------------------------------------------------------------------===//

/// Writes `value` as one element of `type`. kUnsetValue (never written)
/// becomes a sentinel that no test value takes, so decoding restores it.
void encode(DataType type, int64_t value, char *out) {
  bool unset = value == kUnsetValue;
  switch (type) {
  case DataType::I64:
    std::memcpy(out, &value, 8);
    return;
  case DataType::I32: {
    int32_t v = unset ? INT32_MIN : static_cast<int32_t>(value);
    std::memcpy(out, &v, 4);
    return;
  }
  case DataType::F32: {
    float v = unset ? -1e30f : static_cast<float>(value);
    std::memcpy(out, &v, 4);
    return;
  }
  case DataType::F16: {
    uint16_t v = unset ? uint16_t(0xfc00) // -infinity
                       : floatToF16(static_cast<float>(value));
    std::memcpy(out, &v, 2);
    return;
  }
  default:
    FAIL() << "no test encoding for " << dataTypeName(type);
  }
}

int64_t decode(DataType type, const char *in) {
  switch (type) {
  case DataType::I64: {
    int64_t v;
    std::memcpy(&v, in, 8);
    return v;
  }
  case DataType::I32: {
    int32_t v;
    std::memcpy(&v, in, 4);
    return v == INT32_MIN ? kUnsetValue : v;
  }
  case DataType::F32: {
    float v;
    std::memcpy(&v, in, 4);
    return v == -1e30f ? kUnsetValue : static_cast<int64_t>(v);
  }
  case DataType::F16: {
    uint16_t v;
    std::memcpy(&v, in, 2);
    return v == 0xfc00 ? kUnsetValue : static_cast<int64_t>(f16ToFloat(v));
  }
  default:
    ADD_FAILURE() << "no test encoding for " << dataTypeName(type);
    return 0;
  }
}

//===----------------------------------------------------------------------===//
// Running a plan on the loopback backend
//===----------------------------------------------------------------------===//

std::unique_ptr<LoopbackBackend> makeBackend(std::vector<int64_t> devices) {
  // Success paths get a generous deadline: TSan and a loaded machine start
  // a hundred threads slowly.
  LoopbackOptions options;
  options.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<LoopbackBackend>> backend =
      LoopbackBackend::create(std::move(devices), options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

struct Execution {
  /// Destination tiles, decoded to the simulator's int64 values.
  std::map<int64_t, HostBuffer> destination;
  std::map<int64_t, ExecutionStats> stats;
};

/// Fills every source tile as the simulator does, runs `executor` with one
/// thread per device and decodes the destination tiles.
absl::StatusOr<Execution> execute(const PlanExecutor &executor, DataType type) {
  const TensorLayout &source = executor.source();
  const TensorLayout &destination = executor.destination();
  int64_t elementBytes = dataTypeSize(type);
  std::map<int64_t, std::vector<char>> sourceTiles, destinationTiles;
  for (const auto &[device, buffer] : makeSourceBuffers(source)) {
    std::vector<char> &tile = sourceTiles[device];
    tile.resize(buffer.data.size() * elementBytes);
    for (size_t i = 0; i < buffer.data.size(); ++i)
      encode(type, buffer.data[i], tile.data() + i * elementBytes);
  }
  Execution result;
  int64_t tileElements = 1;
  for (int64_t extent : destination.localShape())
    tileElements *= extent;
  for (int64_t p = 0, e = destination.numDevices(); p < e; ++p) {
    int64_t device = destination.mesh().deviceAt(p);
    std::vector<char> &tile = destinationTiles[device];
    tile.resize(tileElements * elementBytes);
    for (int64_t i = 0; i < tileElements; ++i)
      encode(type, kUnsetValue, tile.data() + i * elementBytes);
    HostBuffer &buffer = result.destination[device];
    buffer.box = destination.boxAtPosition(p);
    buffer.localShape = destination.localShape();
  }

  std::unique_ptr<LoopbackBackend> backend =
      makeBackend(devicesOf(source, destination));
  if (!backend)
    return absl::InternalError("no backend");
  // The maps are only read while the device threads run.
  auto buffersOf = [&](int64_t device) {
    DeviceBuffers buffers;
    if (auto it = sourceTiles.find(device); it != sourceTiles.end())
      buffers.source = it->second.data();
    if (auto it = destinationTiles.find(device); it != destinationTiles.end())
      buffers.destination = it->second.data();
    buffers.elementBytes = elementBytes;
    buffers.dtype = type;
    return buffers;
  };
  absl::StatusOr<std::map<int64_t, ExecutionStats>> stats =
      executePlan(*backend, executor, buffersOf);
  if (!stats.ok())
    return stats.status();
  result.stats = *std::move(stats);
  for (auto &[device, buffer] : result.destination) {
    const std::vector<char> &tile = destinationTiles[device];
    buffer.data.resize(tileElements);
    for (int64_t i = 0; i < tileElements; ++i)
      buffer.data[i] = decode(type, tile.data() + i * elementBytes);
  }
  return result;
}

/// The executed tiles equal the simulator's (padding included), hold their
/// boxes, and no device staged more than the plan accounts for.
::testing::AssertionResult matchesSimulator(const TransferPlan &plan,
                                            const TensorLayout &source,
                                            const TensorLayout &destination,
                                            const Execution &execution) {
  absl::StatusOr<SimulationResult> simulated =
      simulatePlan(plan, source, destination);
  if (!simulated.ok())
    return ::testing::AssertionFailure() << "simulator: " << simulated.status();
  for (const auto &[device, expected] : simulated->destination) {
    auto it = execution.destination.find(device);
    if (it == execution.destination.end())
      return ::testing::AssertionFailure()
             << "no executed tile for device " << device;
    const std::vector<int64_t> &got = it->second.data;
    for (size_t i = 0; i < expected.data.size(); ++i)
      if (got[i] != expected.data[i])
        return ::testing::AssertionFailure()
               << "device " << device << " element " << i << " of its "
               << describe(expected.box) << " tile holds " << got[i]
               << ", the simulator " << expected.data[i];
  }
  SimulationResult executed;
  executed.destination = execution.destination;
  if (absl::Status check = checkDestinationBuffers(executed, destination);
      !check.ok())
    return ::testing::AssertionFailure() << check;
  std::map<int64_t, int64_t> accounted;
  for (const DeviceStats &stats : plan.perDevice)
    accounted[stats.device] = stats.peakTempBytes;
  for (const auto &[device, stats] : execution.stats) {
    if (stats.peakStagingBytes > accounted[device])
      return ::testing::AssertionFailure()
             << "device " << device << " staged " << stats.peakStagingBytes
             << " bytes, the plan accounts for " << accounted[device];
    if (plan.memoryLimitBytes > 0 &&
        stats.peakStagingBytes > plan.memoryLimitBytes)
      return ::testing::AssertionFailure()
             << "device " << device << " staged " << stats.peakStagingBytes
             << " bytes over the limit of " << plan.memoryLimitBytes;
  }
  return ::testing::AssertionSuccess();
}

struct Checked {
  TransferPlan plan;
  /// Prepared with collectives.
  std::optional<PlanExecutor> executor;
  std::map<int64_t, ExecutionStats> stats;

  int count(StepMethod method) const {
    int n = 0;
    for (size_t s = 0; s < plan.steps.size(); ++s)
      n += executor->method(s) == method;
    return n;
  }
  int64_t total(int64_t ExecutionStats::*field) const {
    int64_t sum = 0;
    for (const auto &[device, stats] : stats)
      sum += stats.*field;
    return sum;
  }
};

/// Plans, then executes with collectives and again as send/recv only; both
/// must match the simulator. Every unit test goes through here.
Checked planAndExecute(const TensorLayout &source,
                       const TensorLayout &destination,
                       DataType type = DataType::I64,
                       PlanOptions options = {}) {
  Checked checked;
  absl::StatusOr<TransferPlan> plan =
      planReshard(source, destination, dataTypeSize(type), options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok())
    return checked;
  checked.plan = *std::move(plan);
  for (bool collectives : {true, false}) {
    SCOPED_TRACE(collectives ? "with collectives" : "send/recv only");
    ExecuteOptions execute;
    execute.useCollectives = collectives;
    absl::StatusOr<PlanExecutor> executor =
        PlanExecutor::create(checked.plan, source, destination, execute);
    EXPECT_TRUE(executor.ok()) << executor.status();
    if (!executor.ok())
      return checked;
    absl::StatusOr<Execution> execution = ::execute(*executor, type);
    EXPECT_TRUE(execution.ok()) << execution.status();
    if (!execution.ok())
      return checked;
    EXPECT_TRUE(matchesSimulator(checked.plan, source, destination, *execution))
        << formatPlan(checked.plan);
    if (collectives) {
      checked.executor = *executor;
      checked.stats = execution->stats;
    } else {
      for (size_t s = 0; s < checked.plan.steps.size(); ++s)
        EXPECT_THAT(executor->method(s),
                    ::testing::AnyOf(StepMethod::Local, StepMethod::SendRecv));
    }
  }
  return checked;
}

std::vector<const Step *> stepsOf(const TransferPlan &plan, StepKind kind) {
  std::vector<const Step *> result;
  for (const Step &step : plan.steps)
    if (step.kind == kind)
      result.push_back(&step);
  return result;
}

//===----------------------------------------------------------------------===//
// Step kinds
//===----------------------------------------------------------------------===//

TEST(PlanExecutor, OrbaxRestoreIsTwoBroadcasts) {
  // One replica (devices 0 and 1) read the checkpoint; the 32-device
  // training mesh receives it as two broadcasts of 16 devices each.
  Mesh replica0 = makeMesh({{"tp", 2}}, {0, 1});
  Mesh train = makeMesh({{"dp", 16}, {"tp", 2}});
  for (DataType type : {DataType::F32, DataType::I32}) {
    SCOPED_TRACE(dataTypeName(type));
    Checked checked =
        planAndExecute(layout(replica0, {{}, {"tp"}}, {64, 32}),
                       layout(train, {{}, {"tp"}}, {64, 32}), type);
    ASSERT_TRUE(checked.executor);
    EXPECT_EQ(checked.count(StepMethod::Broadcast), 2);
    EXPECT_EQ(checked.count(StepMethod::Local), 1);
    // One broadcast call per device, no point-to-point traffic. Each
    // 64x16 box is its whole tile on the root and on every member, so the
    // broadcast runs from tile to tile without staging, as generated code.
    for (const auto &[device, stats] : checked.stats) {
      EXPECT_EQ(stats.collectiveCalls, 1) << "device " << device;
      EXPECT_EQ(stats.sendCalls + stats.recvCalls, 0);
      EXPECT_EQ(stats.peakStagingBytes, 0);
    }
  }
}

TEST(PlanExecutor, ShardedToReplicatedIsAllGather) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  Checked checked = planAndExecute(layout(mesh, {{"a"}, {"b"}}, {8, 8}),
                                   layout(mesh, {{}, {"b"}}, {8, 8}));
  ASSERT_TRUE(checked.executor);
  EXPECT_EQ(checked.count(StepMethod::AllGather), 4);
  EXPECT_EQ(checked.total(&ExecutionStats::collectiveCalls), 8);
  EXPECT_EQ(checked.total(&ExecutionStats::sendCalls), 0);

  // A full gather over both axes: one all-gather of all eight devices.
  Checked full = planAndExecute(layout(mesh, {{"a"}, {"b"}}, {8, 8}),
                                layout(mesh, {{}, {}}, {8, 8}), DataType::I32);
  ASSERT_TRUE(full.executor);
  EXPECT_EQ(full.count(StepMethod::AllGather), 1);
}

TEST(PlanExecutor, UnevenGatherFallsBackToSendRecv) {
  // Rows 7 over 4 devices: 2, 2, 2, 1. An all-gather needs one size per
  // rank, and padding would stage more than the plan allows.
  Mesh mesh = makeMesh({{"a", 4}});
  Checked checked = planAndExecute(layout(mesh, {{"a"}, {}}, {7, 3}),
                                   layout(mesh, {{}, {}}, {7, 3}));
  ASSERT_TRUE(checked.executor);
  ASSERT_EQ(checked.plan.count(StepKind::AllGather), 1)
      << formatPlan(checked.plan);
  EXPECT_EQ(checked.count(StepMethod::AllGather), 0);
  EXPECT_EQ(checked.count(StepMethod::SendRecv), 1);
  EXPECT_EQ(checked.total(&ExecutionStats::sendCalls), 4 * 3);
  EXPECT_EQ(checked.total(&ExecutionStats::groups), 4);
}

TEST(PlanExecutor, UnevenDims) {
  Mesh mesh = makeMesh({{"a", 4}, {"b", 3}});
  std::vector<std::vector<std::vector<std::string>>> shardings = {
      {{"a"}, {"b"}},
      {{"b"}, {"a"}},
      {{"a", "b"}, {}},
      {{}, {"b", "a"}},
      {{}, {}}};
  for (const auto &from : shardings)
    for (const auto &to : shardings)
      planAndExecute(layout(mesh, from, {7, 5}), layout(mesh, to, {7, 5}),
                     DataType::I32);
}

TEST(PlanExecutor, MovingAnAxisIsOneGroupOfSendRecv) {
  // An all-to-all runs as the schedule has it, as in generated code: one
  // group per device, a send to and a receive from every other member.
  for (int64_t n : {2, 4}) {
    Mesh mesh = makeMesh({{"a", n}});
    Checked checked = planAndExecute(layout(mesh, {{"a"}, {}}, {8, 8}),
                                     layout(mesh, {{}, {"a"}}, {8, 8}));
    ASSERT_TRUE(checked.executor);
    EXPECT_EQ(checked.count(StepMethod::SendRecv), 1) << "n = " << n;
    EXPECT_EQ(checked.total(&ExecutionStats::sendCalls), n * (n - 1));
    EXPECT_EQ(checked.total(&ExecutionStats::recvCalls), n * (n - 1));
    EXPECT_EQ(checked.total(&ExecutionStats::groups), n);
    EXPECT_EQ(checked.total(&ExecutionStats::collectiveCalls), 0);
  }
}

TEST(PlanExecutor, DisjointMeshesPermute) {
  // A pipeline stage: devices 0..3 to devices 4..7, same sharding.
  Mesh stage0 = makeMesh({{"dp", 2}, {"tp", 2}}, range(0, 4));
  Mesh stage1 = makeMesh({{"dp", 2}, {"tp", 2}}, range(4, 8));
  Checked checked = planAndExecute(layout(stage0, {{"dp"}, {"tp"}}, {8, 8}),
                                   layout(stage1, {{"dp"}, {"tp"}}, {8, 8}));
  ASSERT_TRUE(checked.executor);
  ASSERT_EQ(checked.plan.count(StepKind::CollectivePermute), 1);
  EXPECT_EQ(checked.count(StepMethod::SendRecv), 1);
  for (int64_t device = 0; device < 8; ++device) {
    const ExecutionStats &stats = checked.stats.at(device);
    EXPECT_EQ(stats.sendCalls, device < 4 ? 1 : 0);
    EXPECT_EQ(stats.recvCalls, device < 4 ? 0 : 1);
    EXPECT_EQ(stats.groups, 1);
  }
  // From a replicated stage: replicas share the sending.
  planAndExecute(layout(stage0, {{"dp"}, {}}, {8, 8}),
                 layout(stage1, {{"dp"}, {"tp"}}, {8, 8}));
}

TEST(PlanExecutor, ReversedIdsPermute) {
  Mesh mesh = makeMesh({{"a", 8}});
  Mesh reversed = makeMesh({{"a", 8}}, {7, 6, 5, 4, 3, 2, 1, 0});
  Checked checked = planAndExecute(layout(mesh, {{"a"}, {}}, {16, 3}),
                                   layout(reversed, {{"a"}, {}}, {16, 3}));
  ASSERT_TRUE(checked.executor);
  EXPECT_EQ(checked.count(StepMethod::SendRecv), 1);
  for (const auto &[device, stats] : checked.stats) {
    EXPECT_EQ(stats.sendCalls, 1);
    EXPECT_EQ(stats.recvCalls, 1);
  }
  // The diagonal keeps its tiles, the rest swap.
  Mesh square = makeMesh({{"a", 2}, {"b", 2}});
  planAndExecute(layout(square, {{"a"}, {"b"}}, {4, 4}),
                 layout(square, {{"b"}, {"a"}}, {4, 4}));
}

TEST(PlanExecutor, SubAxes) {
  Mesh mesh = makeMesh({{"x", 8}, {"y", 2}});
  TensorLayout src = layout(mesh, {{"x:(1)2"}, {"x:(2)4", "y"}}, {8, 16});
  planAndExecute(src, layout(mesh, {{"x:(1)2"}, {}}, {8, 16}));
  planAndExecute(src, layout(mesh, {{"x"}, {"y"}}, {8, 16}));
  planAndExecute(src, layout(mesh, {{"y", "x:(2)4"}, {"x:(1)2"}}, {8, 16}),
                 DataType::I32);
}

TEST(PlanExecutor, CrossMeshPatterns) {
  // A single device to a mesh, overlapping meshes, sparse ids.
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  Checked broadcast =
      planAndExecute(layout(makeMesh({}, {3}), {{}, {}}, {5, 7}),
                     layout(mesh, {{}, {}}, {5, 7}));
  ASSERT_TRUE(broadcast.executor);
  EXPECT_EQ(broadcast.count(StepMethod::Broadcast), 1);
  planAndExecute(layout(makeMesh({{"a", 4}}), {{"a"}, {}}, {8, 4}),
                 layout(makeMesh({{"b", 2}, {"c", 2}}, {2, 3, 4, 5}),
                        {{"c"}, {"b"}}, {8, 4}));
  planAndExecute(layout(makeMesh({{"r", 4}}), {{}}, {64}),
                 layout(makeMesh({{"x", 16}}, range(4, 20)), {{}}, {64}),
                 DataType::I32);
}

TEST(PlanExecutor, ReplicatedToShardedIsLocalOnly) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  Checked checked = planAndExecute(layout(mesh, {{}, {}}, {8, 8}),
                                   layout(mesh, {{"a"}, {"b"}}, {8, 8}));
  ASSERT_TRUE(checked.executor);
  EXPECT_EQ(checked.count(StepMethod::Local), 1);
  EXPECT_EQ(checked.total(&ExecutionStats::collectiveCalls) +
                checked.total(&ExecutionStats::groups),
            0);
  EXPECT_EQ(checked.total(&ExecutionStats::peakStagingBytes), 0);
}

//===----------------------------------------------------------------------===//
// Unreduced sources and destinations
//===----------------------------------------------------------------------===//

TEST(PlanExecutor, UnreducedToShardedIsReduceScatter) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  for (DataType type : {DataType::F32, DataType::I32}) {
    SCOPED_TRACE(dataTypeName(type));
    Checked checked =
        planAndExecute(layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}),
                       layout(mesh, {{"a"}, {"b"}}, {8, 8}), type);
    ASSERT_TRUE(checked.executor);
    EXPECT_EQ(checked.count(StepMethod::ReduceScatter), 2);
    EXPECT_EQ(checked.total(&ExecutionStats::sendCalls), 0);
  }
}

TEST(PlanExecutor, UnreducedToReplicatedIsAllReduce) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  for (DataType type : {DataType::F32, DataType::I32}) {
    SCOPED_TRACE(dataTypeName(type));
    Checked checked = planAndExecute(layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}),
                                     layout(mesh, {{"a"}, {}}, {8, 8}), type);
    ASSERT_TRUE(checked.executor);
    EXPECT_EQ(checked.count(StepMethod::AllReduce), 2);
    EXPECT_EQ(checked.total(&ExecutionStats::collectiveCalls), 8);
  }
  // Half floats sum in their own type on the send/recv path.
  planAndExecute(layout(mesh, {{"a"}, {}}, {4, 4}, {"b"}),
                 layout(mesh, {{}, {}}, {4, 4}), DataType::F16);
}

TEST(PlanExecutor, UnreducedAcrossMeshes) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  Mesh other = makeMesh({{"x", 4}}, range(4, 8));
  Checked checked =
      planAndExecute(layout(mesh, {{"a"}, {}}, {8, 4}, {"b"}),
                     layout(other, {{}, {"x"}}, {8, 4}), DataType::I32);
  ASSERT_TRUE(checked.executor);
  EXPECT_EQ(checked.count(StepMethod::AllReduce), 2);
  // A kept unreduced axis travels as partials.
  planAndExecute(layout(mesh, {{"a"}, {}}, {4, 4}, {"b"}),
                 layout(mesh, {{}, {}}, {4, 4}, {"b"}), DataType::F32);
}

TEST(PlanExecutor, NewUnreducedAxisFillsZeros) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  Checked checked =
      planAndExecute(layout(mesh, {{"a"}, {}}, {4, 4}),
                     layout(mesh, {{"a"}, {}}, {4, 4}, {"b"}), DataType::F32);
  ASSERT_TRUE(checked.executor);
  auto fills = stepsOf(checked.plan, StepKind::ZeroFill);
  ASSERT_EQ(fills.size(), 1u);
  EXPECT_EQ(checked.count(StepMethod::Local), 2);
  EXPECT_EQ(checked.total(&ExecutionStats::collectiveCalls) +
                checked.total(&ExecutionStats::groups),
            0);
}

//===----------------------------------------------------------------------===//
// Memory limit
//===----------------------------------------------------------------------===//

TEST(PlanExecutor, MemoryLimitChunksOrbaxBroadcast) {
  Mesh replica0 = makeMesh({{"tp", 2}}, {0, 1});
  Mesh train = makeMesh({{"dp", 16}, {"tp", 2}});
  int64_t half = 256 * 32 * 4;
  Checked checked = planAndExecute(layout(replica0, {{}, {"tp"}}, {256, 64}),
                                   layout(train, {{}, {"tp"}}, {256, 64}),
                                   DataType::F32, PlanOptions{half / 8});
  ASSERT_TRUE(checked.executor);
  EXPECT_GE(checked.plan.numChunks, 8);
  EXPECT_EQ(checked.count(StepMethod::Broadcast), 2 * checked.plan.numChunks);
  // Each chunk is a run of rows, contiguous in the root's tile and in
  // every member's: broadcast from tile to tile, no staging at all.
  for (const auto &[device, stats] : checked.stats) {
    EXPECT_EQ(stats.peakStagingBytes, 0);
    EXPECT_EQ(stats.collectiveCalls, checked.plan.numChunks);
  }
}

TEST(PlanExecutor, MemoryLimitGatherAndReduction) {
  Mesh mesh = makeMesh({{"a", 4}});
  Checked gather = planAndExecute(layout(mesh, {{"a"}, {}}, {64, 16}),
                                  layout(mesh, {{}, {}}, {64, 16}),
                                  DataType::I32, PlanOptions{4 * 16 * 4 * 4});
  ASSERT_TRUE(gather.executor);
  EXPECT_GT(gather.plan.numChunks, 1);
  EXPECT_EQ(gather.count(StepMethod::AllGather), gather.plan.numChunks);

  Checked reduced = planAndExecute(layout(mesh, {{}, {}}, {32, 8}, {"a"}),
                                   layout(mesh, {{}, {}}, {32, 8}),
                                   DataType::I32, PlanOptions{256});
  ASSERT_TRUE(reduced.executor);
  EXPECT_GT(reduced.count(StepMethod::AllReduce), 1);
  for (const auto &[device, stats] : reduced.stats)
    EXPECT_LE(stats.peakStagingBytes, 256);

  // One element per chunk: the reduction's pieces become send/recv steps
  // that accumulate, and phase 1 must follow phase 0.
  Checked tiny = planAndExecute(layout(mesh, {{}, {}}, {8, 8}, {"a"}),
                                layout(mesh, {{}, {}}, {8, 8}), DataType::I64,
                                PlanOptions{8});
  ASSERT_TRUE(tiny.executor);
  EXPECT_EQ(tiny.count(StepMethod::AllReduce), 0);
  EXPECT_GT(tiny.count(StepMethod::SendRecv), 0);
  for (const auto &[device, stats] : tiny.stats)
    EXPECT_LE(stats.peakStagingBytes, 8);
}

//===----------------------------------------------------------------------===//
// Identity plans and errors
//===----------------------------------------------------------------------===//

TEST(PlanExecutor, IdentityPlanCopiesOrRunsInPlace) {
  Mesh ab = makeMesh({{"a", 2}, {"b", 4}});
  Mesh c = makeMesh({{"c", 8}});
  TensorLayout src = layout(ab, {{"a", "b"}, {}}, {16, 4});
  TensorLayout dst = layout(c, {{"c"}, {}}, {16, 4});
  Checked checked = planAndExecute(src, dst);
  ASSERT_TRUE(checked.executor);
  EXPECT_TRUE(checked.plan.identity);

  // In place: the destination buffer is the source buffer.
  std::vector<int64_t> tile(2 * 4, 7);
  std::unique_ptr<LoopbackBackend> backend = makeBackend({0});
  DeviceBuffers buffers{tile.data(), tile.data(), 8, DataType::I64};
  absl::StatusOr<ExecutionStats> stats = executePlanOnDevice(
      *backend, 0, checked.plan, src, dst, buffers, ExecuteOptions{});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(tile, std::vector<int64_t>(8, 7));
}

TEST(PlanExecutor, Errors) {
  Mesh mesh = makeMesh({{"a", 2}});
  TensorLayout sharded = layout(mesh, {{"a"}, {}}, {4, 2});
  TensorLayout replicated = layout(mesh, {{}, {}}, {4, 2});
  TensorLayout partial = layout(mesh, {{}, {}}, {4, 2}, {"a"});
  absl::StatusOr<TransferPlan> gather = planReshard(sharded, replicated, 4);
  absl::StatusOr<TransferPlan> reduce = planReshard(partial, replicated, 4);
  ASSERT_TRUE(gather.ok() && reduce.ok());
  absl::StatusOr<PlanExecutor> executor =
      PlanExecutor::create(*gather, sharded, replicated);
  ASSERT_TRUE(executor.ok()) << executor.status();
  std::unique_ptr<LoopbackBackend> backend = makeBackend({0, 1});
  std::vector<int32_t> a(4), b(8);

  auto run = [&](const PlanExecutor &e, DeviceBuffers buffers) {
    return e.runOnDevice(*backend, 0, buffers).status();
  };
  EXPECT_THAT(run(*executor, {a.data(), b.data(), 8, std::nullopt}).message(),
              HasSubstr("8-byte elements for a plan of 4-byte elements"));
  EXPECT_THAT(run(*executor, {nullptr, b.data(), 4, std::nullopt}).message(),
              HasSubstr("has no source buffer"));
  EXPECT_THAT(run(*executor, {a.data(), nullptr, 4, std::nullopt}).message(),
              HasSubstr("has no destination buffer"));
  EXPECT_THAT(
      run(*executor, {b.data(), b.data() + 2, 4, std::nullopt}).message(),
      HasSubstr("overlap"));
  EXPECT_THAT(run(*executor, {a.data(), b.data(), 4, DataType::I64}).message(),
              HasSubstr("dtype i64 has 8-byte elements"));

  absl::StatusOr<PlanExecutor> reducer =
      PlanExecutor::create(*reduce, partial, replicated);
  ASSERT_TRUE(reducer.ok());
  EXPECT_TRUE(reducer->needsDataType());
  EXPECT_THAT(run(*reducer, {b.data(), a.data(), 4, std::nullopt}).message(),
              HasSubstr("needs the element type"));

  // A backend without one of the plan's devices is refused up front.
  std::unique_ptr<LoopbackBackend> small = makeBackend({0});
  absl::StatusOr<std::map<int64_t, ExecutionStats>> stats =
      executePlan(*small, *executor, [&](int64_t) {
        return DeviceBuffers{a.data(), b.data(), 4, std::nullopt};
      });
  EXPECT_THAT(stats.status().message(),
              HasSubstr("needs device 1, which the backend does not have"));

  // Broken plans fail as in the simulator.
  TransferPlan broken = *gather;
  broken.steps.back().transfers.front().box.hi[0] = 4;
  broken.steps.back().transfers.front().bytes = 4 * 2 * 4;
  EXPECT_THAT(
      PlanExecutor::create(broken, sharded, replicated).status().message(),
      HasSubstr("outside its buffer"));
  EXPECT_EQ(
      PlanExecutor::create(*gather, sharded, layout(mesh, {{}, {}}, {4, 3}))
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(PlanExecutor, DeviceFailureReleasesPeers) {
  // Device 1 fails before its first call; device 0, blocked in the
  // all-gather, is released instead of waiting for the deadline.
  Mesh mesh = makeMesh({{"a", 2}});
  TensorLayout sharded = layout(mesh, {{"a"}, {}}, {4, 2});
  TensorLayout replicated = layout(mesh, {{}, {}}, {4, 2});
  absl::StatusOr<TransferPlan> plan = planReshard(sharded, replicated, 4);
  ASSERT_TRUE(plan.ok());
  absl::StatusOr<PlanExecutor> executor =
      PlanExecutor::create(*plan, sharded, replicated);
  ASSERT_TRUE(executor.ok());
  std::vector<int32_t> source0(4), destination0(8), destination1(8);
  std::unique_ptr<LoopbackBackend> backend = makeBackend({0, 1});
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::map<int64_t, ExecutionStats>> stats =
      executePlan(*backend, *executor, [&](int64_t device) {
        if (device == 0)
          return DeviceBuffers{source0.data(), destination0.data(), 4,
                               std::nullopt};
        // No source buffer: device 1 refuses to run.
        return DeviceBuffers{nullptr, destination1.data(), 4, std::nullopt};
      });
  EXPECT_THAT(stats.status().message(),
              HasSubstr("device 1 is in the source mesh but has no source"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

//===----------------------------------------------------------------------===//
// Random reshards
//===----------------------------------------------------------------------===//

std::string describeCase(const ReshardCase &c) {
  return absl::StrCat(describe(c.source), "  ->  ", describe(c.destination),
                      "  limit=", c.options.memoryLimitBytes);
}

TEST(PlanExecutorProperty, RandomReshards) {
  constexpr uint64_t kSeed = 0xe8ec07;
  // ThreadSanitizer slows every thread start and lock down about sixfold;
  // the first 300 cases already reach every method.
  constexpr int kCases = kUnderTsan ? 300 : 1000;
  SplitMix64 rng(kSeed);
  // Exchanges of whole tiles come from a stream of their own, so that adding
  // them left the cases above (and the methods they reach) as they were.
  SplitMix64 exchangeRng(kSeed ^ 0xa11707a11);
  RandomReshardOptions generator;
  std::array<int64_t, kNumStepMethods> methods{};
  int limited = 0, reductions = 0, sendRecvOnly = 0, exchanges = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCases; ++i) {
    // Every tenth case is followed by (nearly) an exchange of whole tiles,
    // kept symbolic as --polymesh-plan does.
    for (bool exchange : {false, true}) {
      if (exchange && i % 10 != 7)
        continue;
      // Every fifth case may use up to 64 devices per mesh.
      generator.maxDevices = i % 5 == 4 ? 64 : 32;
      ReshardCase c = exchange ? randomExchange(exchangeRng)
                               : randomReshard(rng, generator);
      // Elements are the global indices (int64, int32 or f32: all exact), so
      // the generator's element size becomes one of those; the memory limit
      // keeps its element count.
      DataType type = c.elementBytes == 8   ? DataType::I64
                      : c.elementBytes == 4 ? DataType::F32
                                            : DataType::I32;
      PlanOptions options = c.options;
      options.memoryLimitBytes =
          c.options.memoryLimitBytes / c.elementBytes * dataTypeSize(type);
      // Exchanges alternate: every other one runs as send/recv only.
      ExecuteOptions execute;
      execute.useCollectives = exchange ? i % 20 != 17 : i % 4 != 3;
      SCOPED_TRACE(
          absl::StrCat("seed 0x", absl::Hex(kSeed), " case ", i,
                       exchange ? " exchange" : "", " (", dataTypeName(type),
                       execute.useCollectives ? "" : ", send/recv only",
                       "): ", describeCase(c)));

      absl::StatusOr<TransferPlan> plan =
          planReshard(c.source, c.destination, dataTypeSize(type), options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      absl::StatusOr<PlanExecutor> executor =
          PlanExecutor::create(*plan, c.source, c.destination, execute);
      ASSERT_TRUE(executor.ok()) << executor.status();
      absl::StatusOr<Execution> execution = ::execute(*executor, type);
      ASSERT_TRUE(execution.ok()) << execution.status() << "\n"
                                  << formatPlan(*plan);
      ASSERT_TRUE(matchesSimulator(*plan, c.source, c.destination, *execution))
          << formatPlan(*plan);

      limited += options.memoryLimitBytes > 0;
      reductions += plan->reducesInPlace;
      sendRecvOnly += !execute.useCollectives;
      exchanges += exchange;
      for (size_t s = 0; s < plan->steps.size(); ++s)
        ++methods[static_cast<int>(executor->method(s))];
    }
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::cout << "[executor] " << kCases << " reshards and " << exchanges
            << " exchanges in " << seconds << " s: " << limited
            << " under a memory limit, " << reductions << " reducing, "
            << sendRecvOnly << " send/recv only; steps by method:";
  for (int m = 0; m < kNumStepMethods; ++m)
    std::cout << " " << stepMethodName(static_cast<StepMethod>(m)) << "="
              << methods[m];
  std::cout << "\n";
  // The cases must reach every way of carrying a step.
  for (int m = 0; m < kNumStepMethods; ++m)
    EXPECT_GT(methods[m], 0) << stepMethodName(static_cast<StepMethod>(m));
  EXPECT_GT(reductions, kCases / 20);
  EXPECT_GT(limited, kCases / 5);
}

} // namespace
