//===- MovementRunner.cpp - Sharded runs of data movement -----------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/MovementRunner.h"

#include "polymesh/Execution/InputFill.h"
#include "polymesh/Runtime/PlanExecutor.h"
#include "polymesh/Runtime/Runtime.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <set>

using namespace polymesh;
using namespace polymesh::execution;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Whether buffers of `a` can stand for buffers of `b`: every device holds
/// the same box (and partial) in a tile of the same shape.
bool sameTiles(const planner::TensorLayout &a, const planner::TensorLayout &b) {
  return a.isDeviceEquivalent(b) && a.localShape() == b.localShape();
}

std::string formatIndex(const std::vector<int64_t> &index) {
  std::string text = "[";
  for (size_t i = 0; i < index.size(); ++i)
    text += (i ? ", " : "") + std::to_string(index[i]);
  return text + "]";
}

/// The box of a tile that holds data: [0, hi - lo) of the tile.
HostTensor validRegion(const HostTensor &tile, const planner::Box &box) {
  std::vector<int64_t> extent(box.lo.size());
  for (size_t d = 0; d < extent.size(); ++d)
    extent[d] = box.hi[d] - box.lo[d];
  return tile.extractBox(std::vector<int64_t>(extent.size(), 0), extent);
}

/// Tiles of one value, shared by the aliases of that value.
using Tiles = std::map<int64_t, HostTensor>;

Tiles zeroTiles(ElementType type, const planner::TensorLayout &layout,
                TileShape shape = TileShape::Padded) {
  Tiles tiles;
  for (int64_t p = 0, e = layout.numDevices(); p < e; ++p) {
    std::vector<int64_t> extents = layout.localShape();
    if (shape == TileShape::Exact) {
      planner::Box box = layout.boxAtPosition(p);
      for (size_t d = 0; d < extents.size(); ++d)
        extents[d] = box.hi[d] - box.lo[d];
    }
    tiles.emplace(layout.mesh().deviceAt(p), HostTensor(type, extents));
  }
  return tiles;
}

/// The tile's storage for the executor: null where the device has no tile
/// or the tile has no bytes (DeviceBuffers' convention).
void *dataOf(Tiles &tiles, int64_t device) {
  auto it = tiles.find(device);
  if (it == tiles.end() || it->second.getSizeInBytes() == 0)
    return nullptr;
  return it->second.getData();
}

} // namespace

HostTensor polymesh::execution::groupTile(const ShardedTensor &actual,
                                          const std::vector<int64_t> &group,
                                          const planner::Box &box) {
  HostTensor got = validRegion(actual.tiles.at(group.front()), box);
  if (group.size() < 2)
    return got;
  std::vector<HostTensor> partials;
  std::vector<const void *> inputs;
  partials.reserve(group.size());
  for (int64_t device : group) {
    partials.push_back(validRegion(actual.tiles.at(device), box));
    inputs.push_back(partials.back().getData());
  }
  runtime::reduceArrays(toDataType(actual.elementType), runtime::ReduceOp::Sum,
                        inputs.data(), static_cast<int64_t>(inputs.size()),
                        got.getNumElements(), got.getData());
  return got;
}

llvm::Expected<HostTensor>
polymesh::execution::assembleReplicas(const ShardedTensor &tensor) {
  const planner::TensorLayout &layout = tensor.layout;
  HostTensor whole(tensor.elementType, layout.shape());
  std::vector<bool> written(whole.getNumElements(), false);
  const int64_t size = elementSize(tensor.elementType);
  auto describe = [](const std::vector<int64_t> &index) {
    std::string text = "[";
    for (size_t d = 0; d < index.size(); ++d)
      text += (d ? ", " : "") + std::to_string(index[d]);
    return text + "]";
  };
  for (const auto &[device, tile] : tensor.tiles) {
    std::optional<planner::Box> box = layout.boxOfDevice(device);
    if (!box)
      continue;
    HostTensor values = validRegion(tile, *box);
    for (int64_t linear = 0, e = values.getNumElements(); linear < e;
         ++linear) {
      std::vector<int64_t> index = values.delinearize(linear);
      for (size_t d = 0; d < index.size(); ++d)
        index[d] += box->lo[d];
      int64_t at = whole.linearize(index);
      const uint8_t *from = values.getData() + linear * size;
      uint8_t *to = whole.getData() + at * size;
      if (written[at] && std::memcmp(from, to, size) != 0)
        return error("devices hold different copies of the element at " +
                     describe(index) + ": " + whole.formatElement(at) +
                     " and, on device " + std::to_string(device) + ", " +
                     values.formatElement(linear));
      std::memcpy(to, from, size);
      written[at] = true;
    }
  }
  for (int64_t at = 0, e = whole.getNumElements(); at < e; ++at)
    if (!written[at])
      return error("no device holds the element at " +
                   describe(whole.delinearize(at)));
  return std::move(whole);
}

runtime::DataType polymesh::execution::toDataType(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return runtime::DataType::F32;
  case ElementType::F64:
    return runtime::DataType::F64;
  case ElementType::F16:
    return runtime::DataType::F16;
  case ElementType::BF16:
    return runtime::DataType::BF16;
  case ElementType::I1:
    return runtime::DataType::U8;
  case ElementType::I8:
    return runtime::DataType::I8;
  case ElementType::I32:
    return runtime::DataType::I32;
  case ElementType::I64:
    return runtime::DataType::I64;
  }
  return runtime::DataType::U8;
}

//===----------------------------------------------------------------------===//
// Inputs and values
//===----------------------------------------------------------------------===//

ShardedTensor execution::makeShardedInput(ElementType type,
                                          const planner::TensorLayout &layout,
                                          uint32_t stream, TileShape shape) {
  // One member of each reduction group carries the value, the others start
  // from zeros, so the partials add up to it with no rounding. The carrier
  // is the member at coordinate 0 of every unreduced axis, so that replicas
  // of a partial hold the same data whatever the device ids' order.
  ShardedTensor tensor{type, layout, zeroTiles(type, layout, shape)};
  for (int64_t p = 0, e = layout.numDevices(); p < e; ++p) {
    int64_t device = layout.mesh().deviceAt(p);
    if (layout.unreducedRank(p) != 0)
      continue;
    fillTile(tensor.tiles.at(device), layout.shape(),
             layout.boxAtPosition(p).lo, stream);
  }
  return tensor;
}

MovementValue MovementValue::makeArgument(ElementType type,
                                          planner::TensorLayout layout,
                                          int64_t argument) {
  return {Kind::Argument, type, std::move(layout), argument, -1, {}, {}};
}

MovementValue MovementValue::makeTransfer(ElementType type, int64_t input,
                                          planner::TransferPlan plan,
                                          planner::TensorLayout source,
                                          planner::TensorLayout destination) {
  return {Kind::Transfer,
          type,
          std::move(destination),
          -1,
          input,
          std::move(plan),
          std::move(source)};
}

MovementValue MovementValue::makeAlias(ElementType type, int64_t input,
                                       planner::TensorLayout layout) {
  return {Kind::Alias, type, std::move(layout), -1, input, {}, {}};
}

//===----------------------------------------------------------------------===//
// runMovement
//===----------------------------------------------------------------------===//

namespace {

/// Checks that the layouts line up before anything runs: a buffer handed
/// on to a transfer, a constraint or a result must be the tile each device
/// is expected to hold there, or the run would compare the wrong bytes.
/// Returns every device the program names, sorted.
llvm::Expected<std::vector<int64_t>>
checkProgram(const MovementProgram &program) {
  const std::vector<MovementValue> &values = program.values;
  if (program.results.size() != program.resultLayouts.size())
    return error("one declared layout per result is needed");
  std::set<int64_t> deviceSet;
  auto addDevices = [&](const planner::TensorLayout &layout) {
    for (int64_t p = 0, e = layout.numDevices(); p < e; ++p)
      deviceSet.insert(layout.mesh().deviceAt(p));
  };
  for (size_t v = 0; v < values.size(); ++v) {
    const MovementValue &value = values[v];
    addDevices(value.layout);
    auto fail = [&](const llvm::Twine &what) {
      return error("value #" + llvm::Twine(v) + what);
    };
    if (value.kind == MovementValue::Kind::Argument) {
      if (value.argument < 0)
        return fail(" has no argument number");
      continue;
    }
    if (value.input < 0 || value.input >= static_cast<int64_t>(v))
      return fail(" reads a value that does not come before it");
    const MovementValue &input = values[value.input];
    if (input.elementType != value.elementType)
      return fail(" changes the element type of its input");
    if (value.kind == MovementValue::Kind::Alias) {
      if (!sameTiles(input.layout, value.layout))
        return fail(" constrains " + planner::describe(input.layout) + " to " +
                    planner::describe(value.layout) +
                    ", which places other tiles, without a transfer");
      continue;
    }
    if (!value.plan || !value.source)
      return error("transfer value #" + llvm::Twine(v) +
                   " has no plan or no source layout");
    addDevices(*value.source);
    if (!sameTiles(input.layout, *value.source))
      return error("transfer value #" + llvm::Twine(v) + " reads " +
                   planner::describe(*value.source) + " but its input is " +
                   planner::describe(input.layout));
  }
  for (size_t r = 0; r < program.results.size(); ++r) {
    int64_t v = program.results[r];
    if (v < 0 || v >= static_cast<int64_t>(values.size()))
      return error("result #" + llvm::Twine(r) + " names no value");
    addDevices(program.resultLayouts[r]);
    if (!sameTiles(values[v].layout, program.resultLayouts[r]))
      return error("result #" + llvm::Twine(r) + " is declared as " +
                   planner::describe(program.resultLayouts[r]) +
                   " but its value is " + planner::describe(values[v].layout));
  }
  return std::vector<int64_t>(deviceSet.begin(), deviceSet.end());
}

/// Every plan prepared once (device threads share the executors), with
/// the bytes they move added to `bytesMoved`.
llvm::Expected<std::vector<std::optional<runtime::PlanExecutor>>>
prepareExecutors(const std::vector<MovementValue> &values,
                 int64_t &bytesMoved) {
  std::vector<std::optional<runtime::PlanExecutor>> executors(values.size());
  for (size_t v = 0; v < values.size(); ++v) {
    const MovementValue &value = values[v];
    if (value.kind != MovementValue::Kind::Transfer)
      continue;
    bytesMoved += value.plan->bytesMoved;
    // A tensor without elements has nothing to move. Its plan is empty,
    // and may be marked identity across meshes whose devices differ (every
    // box is empty, so every layout is equivalent), which the executor
    // would refuse: no device has the other's tile to copy in place.
    if (llvm::is_contained(value.layout.shape(), 0))
      continue;
    absl::StatusOr<runtime::PlanExecutor> executor =
        runtime::PlanExecutor::create(*value.plan, *value.source, value.layout);
    if (!executor.ok())
      return error("transfer value #" + llvm::Twine(v) + ": " +
                   std::string(executor.status().message()));
    executors[v] = std::move(*executor);
  }
  return std::move(executors);
}

/// Every value's tiles, allocated (and inputs filled) before the run, so
/// device threads only read and write their own tiles. Aliases share their
/// input's tiles; a plan that reduces in place gets a scratch copy of its
/// input, so the partials stay intact for the input's other uses.
struct ProgramTiles {
  std::vector<std::shared_ptr<Tiles>> of;
  std::vector<std::unique_ptr<Tiles>> scratch;

  explicit ProgramTiles(const std::vector<MovementValue> &values)
      : of(values.size()), scratch(values.size()) {
    for (size_t v = 0; v < values.size(); ++v) {
      const MovementValue &value = values[v];
      switch (value.kind) {
      case MovementValue::Kind::Argument:
        of[v] = std::make_shared<Tiles>(
            makeShardedInput(value.elementType, value.layout,
                             static_cast<uint32_t>(value.argument))
                .tiles);
        break;
      case MovementValue::Kind::Alias:
        of[v] = of[value.input];
        break;
      case MovementValue::Kind::Transfer:
        of[v] =
            std::make_shared<Tiles>(zeroTiles(value.elementType, value.layout));
        if (value.plan->reducesInPlace)
          scratch[v] = std::make_unique<Tiles>(
              zeroTiles(value.elementType, *value.source));
        break;
      }
    }
  }
};

llvm::Expected<std::unique_ptr<runtime::Backend>>
createBackend(const BackendFactory &makeBackend,
              const std::vector<int64_t> &devices) {
  if (makeBackend) {
    absl::StatusOr<std::unique_ptr<runtime::Backend>> created =
        makeBackend(devices);
    if (!created.ok())
      return error(std::string(created.status().message()));
    return std::move(*created);
  }
  absl::StatusOr<std::unique_ptr<runtime::LoopbackBackend>> created =
      runtime::LoopbackBackend::create(devices);
  if (!created.ok())
    return error(std::string(created.status().message()));
  return std::unique_ptr<runtime::Backend>(std::move(*created));
}

/// Device `device`'s share of every transfer, in program order, so that
/// every device makes its collective calls in the same order (the plans
/// name the peers).
absl::Status
runOnDevice(int64_t device, const std::vector<MovementValue> &values,
            std::vector<std::optional<runtime::PlanExecutor>> &executors,
            ProgramTiles &tiles, runtime::Backend &backend) {
  for (size_t v = 0; v < values.size(); ++v) {
    if (!executors[v])
      continue;
    const MovementValue &value = values[v];
    void *source = dataOf(*tiles.of[value.input], device);
    if (tiles.scratch[v]) {
      void *scratch = dataOf(*tiles.scratch[v], device);
      if (scratch)
        std::memcpy(scratch, source,
                    tiles.scratch[v]->at(device).getSizeInBytes());
      source = scratch;
    }
    runtime::DeviceBuffers buffers;
    buffers.source = source;
    buffers.destination = dataOf(*tiles.of[v], device);
    buffers.elementBytes = elementSize(value.elementType);
    buffers.dtype = toDataType(value.elementType);
    absl::StatusOr<runtime::ExecutionStats> stats =
        executors[v]->runOnDevice(backend, device, buffers);
    if (!stats.ok())
      return absl::Status(stats.status().code(),
                          "transfer value #" + std::to_string(v) + ": " +
                              std::string(stats.status().message()));
  }
  return absl::OkStatus();
}

/// The tiles of the returned values under the declared layouts. The last
/// result that reads a value's tiles takes them; earlier ones (a value
/// returned twice, or an argument's tiles) copy.
std::vector<ShardedTensor> takeResults(const MovementProgram &program,
                                       ProgramTiles &tiles) {
  std::vector<ShardedTensor> results;
  for (size_t r = 0; r < program.results.size(); ++r) {
    const MovementValue &value = program.values[program.results[r]];
    std::shared_ptr<Tiles> &taken = tiles.of[program.results[r]];
    bool readLater = false;
    for (size_t later = r + 1; later < program.results.size(); ++later)
      readLater |= tiles.of[program.results[later]] == taken;
    results.push_back(
        ShardedTensor{value.elementType, program.resultLayouts[r],
                      readLater ? Tiles(*taken) : std::move(*taken)});
  }
  return results;
}

} // namespace

llvm::Expected<MovementRun>
execution::runMovement(const MovementProgram &program,
                       const BackendFactory &makeBackend) {
  llvm::Expected<std::vector<int64_t>> devices = checkProgram(program);
  if (!devices)
    return devices.takeError();
  MovementRun run;
  run.numDevices = static_cast<int64_t>(devices->size());
  // Nothing to place (no arguments, no results): nothing runs, nothing
  // can differ.
  if (devices->empty())
    return run;
  auto executors = prepareExecutors(program.values, run.bytesMoved);
  if (!executors)
    return executors.takeError();
  ProgramTiles tiles(program.values);
  llvm::Expected<std::unique_ptr<runtime::Backend>> backend =
      createBackend(makeBackend, *devices);
  if (!backend)
    return backend.takeError();
  auto start = std::chrono::steady_clock::now();
  absl::Status status = runtime::runOnDevices(**backend, [&](int64_t device) {
    return runOnDevice(device, program.values, *executors, tiles, **backend);
  });
  auto stop = std::chrono::steady_clock::now();
  if (!status.ok())
    return error(std::string(status.message()));
  run.wallMs = std::chrono::duration<double, std::milli>(stop - start).count();
  run.results = takeResults(program, tiles);
  return run;
}

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

std::string TileMismatch::message() const {
  std::string text = "device " + std::to_string(device) + ": ";
  if (mismatch.kind != "value")
    return text + mismatch.kind + ": expected " + mismatch.expected + ", got " +
           mismatch.actual;
  return text + "value at " + formatIndex(globalIndex) + ": expected " +
         mismatch.expected + ", got " + mismatch.actual;
}

std::optional<TileMismatch>
execution::compareWithReference(const HostTensor &reference,
                                const ShardedTensor &actual) {
  const planner::TensorLayout &layout = actual.layout;
  int64_t firstDevice = layout.mesh().deviceAt(0);
  if (reference.getElementType() != actual.elementType)
    return TileMismatch{firstDevice,
                        {},
                        {"element type",
                         {},
                         -1,
                         elementTypeName(reference.getElementType()),
                         elementTypeName(actual.elementType)}};
  if (reference.getShape() != layout.shape())
    return TileMismatch{
        firstDevice,
        {},
        {"shape",
         {},
         -1,
         formatTensorType(reference.getElementType(), reference.getShape()),
         formatTensorType(actual.elementType, layout.shape())}};

  // Reduction groups are singletons without unreduced axes, so one loop
  // covers both: a device's tile, or the sum of a group's partials.
  for (const std::vector<int64_t> &group : layout.reductionGroups()) {
    std::optional<planner::Box> box = layout.boxOfDevice(group.front());
    if (!box || box->empty())
      continue;
    // A process of a multi-process run holds its own devices' tiles (and
    // the partials of the groups it checks): another process checks this.
    if (!actual.tiles.count(group.front()))
      continue;
    HostTensor got = groupTile(actual, group, *box);
    std::optional<Mismatch> mismatch =
        compareBitExact(reference.extractBox(box->lo, box->hi), got);
    if (!mismatch)
      continue;
    TileMismatch result{group.front(), {}, *mismatch};
    if (mismatch->kind == "value") {
      result.globalIndex = mismatch->index;
      for (size_t d = 0; d < result.globalIndex.size(); ++d)
        result.globalIndex[d] += box->lo[d];
    }
    return result;
  }
  return std::nullopt;
}
