//===- PlanExecutor.cpp - Runs transfer plans through a Backend -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// create() checks the plan as the simulator does, then schedules it with
// planner::scheduleForDevices: the same DeviceSchedule, with the same
// segments and methods, that the CPU and CUDA lowerings turn into code. The
// executor interprets it: per segment a device runs its `before` copy rows,
// its calls (grouped send/recv, or the segment's collective over its
// group), then its `after` rows. No step is classified here; which
// collective carries a phase is the schedule's decision, made from the plan
// alone, so every device thread (and every process) makes the same calls
// on every communicator in the same order.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/PlanExecutor.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

namespace polymesh::runtime {

using planner::Box;
using planner::BufferKind;
using planner::BufferSpace;
using planner::CommKind;
using planner::CommRow;
using planner::CopyKind;
using planner::CopyRow;
using planner::DeviceSchedule;
using planner::DeviceSegment;
using planner::Segment;
using planner::SegmentMethod;
using planner::Step;
using planner::StepKind;
using planner::TensorLayout;
using planner::Transfer;
using planner::TransferPlan;

namespace {

bool boxWithin(const Box &outer, const Box &inner) {
  for (size_t d = 0; d < outer.lo.size(); ++d)
    if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d])
      return false;
  return true;
}

std::string describeTransfer(const Step &step, const Transfer &transfer) {
  return absl::StrCat(planner::stepKindName(step.kind), " transfer ",
                      transfer.srcDevice, " -> [",
                      absl::StrJoin(transfer.dstDevices, ", "), "]");
}

int64_t product(const std::vector<int64_t> &values) {
  int64_t result = 1;
  for (int64_t value : values)
    result *= value;
  return result;
}

/// Every device's box in `layout`, by device id.
using TileMap = absl::flat_hash_map<int64_t, Box>;
TileMap tilesOf(const TensorLayout &layout) {
  TileMap tiles;
  for (int64_t p = 0, e = layout.numDevices(); p < e; ++p)
    tiles.emplace(layout.mesh().deviceAt(p), layout.boxAtPosition(p));
  return tiles;
}

/// The simulator's checks, made once: every transfer has receivers and the
/// right byte count, reads and writes boxes inside buffers that exist.
absl::Status validateStep(const Step &step, const TransferPlan &plan,
                          const TileMap &sourceTiles,
                          const TileMap &destinationTiles) {
  auto boxOf = [&](BufferKind kind, int64_t device) -> const Box * {
    const TileMap &tiles =
        kind == BufferKind::Source ? sourceTiles : destinationTiles;
    auto it = tiles.find(device);
    return it == tiles.end() ? nullptr : &it->second;
  };
  for (const Transfer &transfer : step.transfers) {
    if (transfer.dstDevices.empty())
      return absl::InternalError(absl::StrCat(describeTransfer(step, transfer),
                                              " has no destination"));
    if (!std::is_sorted(transfer.dstDevices.begin(),
                        transfer.dstDevices.end()) ||
        std::adjacent_find(transfer.dstDevices.begin(),
                           transfer.dstDevices.end()) !=
            transfer.dstDevices.end())
      return absl::InternalError(
          absl::StrCat(describeTransfer(step, transfer),
                       ": destinations are not sorted and distinct"));
    if (transfer.phase < 0)
      return absl::InternalError(absl::StrCat(describeTransfer(step, transfer),
                                              " has a negative phase"));
    if (transfer.box.lo.size() != plan.shape.size() ||
        transfer.box.hi.size() != plan.shape.size())
      return absl::InternalError(absl::StrCat(describeTransfer(step, transfer),
                                              " has a box of the wrong rank"));
    if (step.kind != StepKind::ZeroFill) {
      const Box *from = boxOf(transfer.srcBuffer, transfer.srcDevice);
      if (!from || !boxWithin(*from, transfer.box))
        return absl::InternalError(absl::StrCat(
            describeTransfer(step, transfer), " reads ",
            planner::describe(transfer.box), " outside its buffer"));
    }
    if (transfer.bytes != transfer.box.numElements() * plan.elementBytes)
      return absl::InternalError(absl::StrCat(describeTransfer(step, transfer),
                                              " has a wrong byte count"));
    for (int64_t dst : transfer.dstDevices) {
      const Box *to = boxOf(transfer.dstBuffer, dst);
      if (!to || !boxWithin(*to, transfer.box))
        return absl::InternalError(absl::StrCat(
            describeTransfer(step, transfer), " writes ",
            planner::describe(transfer.box), " outside the buffer of ", dst));
    }
  }
  return absl::OkStatus();
}

} // namespace

struct PlanExecutor::Prepared {
  Prepared(const TransferPlan &plan, const TensorLayout &source,
           const TensorLayout &destination, const ExecuteOptions &options)
      : plan(plan), source(source), destination(destination), options(options) {
  }

  TransferPlan plan;
  TensorLayout source;
  TensorLayout destination;
  ExecuteOptions options;
  DeviceSchedule schedule;
  /// Per step: how its communicating phases run (Local when none does).
  std::vector<StepMethod> methods;
  /// Device -> position in schedule.devices.
  absl::flat_hash_map<int64_t, size_t> positionOf;
  /// Device -> how many steps it has transfers in.
  absl::flat_hash_map<int64_t, int64_t> stepsOf;
  std::vector<int64_t> devices;
  bool needsDataType = false;
};

namespace {

//===----------------------------------------------------------------------===//
// Running one device's share of the schedule
//===----------------------------------------------------------------------===//

/// One device's run: its buffers, its staging, and what it did.
class ScheduleRun {
public:
  ScheduleRun(const PlanExecutor::Prepared &prepared, Backend &backend,
              int64_t device, size_t position, const DeviceBuffers &buffers)
      : prepared(prepared), schedule(prepared.schedule), backend(backend),
        device(device), position(position), buffers(buffers),
        staging(static_cast<size_t>(schedule.stagingBytes[position])) {
    stats.peakStagingBytes = schedule.stagingBytes[position];
  }

  absl::Status run();

  ExecutionStats stats;

private:
  char *base(BufferSpace space) {
    switch (space) {
    case BufferSpace::Source:
      return static_cast<char *>(buffers.source);
    case BufferSpace::Destination:
      return static_cast<char *>(buffers.destination);
    case BufferSpace::Staging:
      break;
    }
    return staging.data();
  }
  void copyRun(const CopyRow &row, char *from, char *to);
  void runCopies(const std::vector<CopyRow> &rows, size_t begin, size_t end);
  absl::Status runSendRecv(const DeviceSegment &mine);
  absl::Status runCollective(const Segment &segment, const DeviceSegment &mine);

  const PlanExecutor::Prepared &prepared;
  const DeviceSchedule &schedule;
  Backend &backend;
  int64_t device;
  size_t position;
  const DeviceBuffers &buffers;
  std::vector<char> staging;
};

/// One contiguous run: a copy, a zero fill or a sum in the element type
/// (f16 and bf16 through f32, rounded per addition, as generated code).
void ScheduleRun::copyRun(const CopyRow &row, char *from, char *to) {
  switch (row.kind) {
  case CopyKind::Copy:
    std::memmove(to, from, static_cast<size_t>(row.runBytes));
    return;
  case CopyKind::Zero:
    std::memset(to, 0, static_cast<size_t>(row.runBytes));
    return;
  case CopyKind::Accumulate: {
    const void *inputs[] = {to, from};
    reduceArrays(*buffers.dtype, ReduceOp::Sum, inputs, 2,
                 row.runBytes / schedule.elementBytes, to);
    return;
  }
  }
}

/// Rows [begin, end): each is `outerDims` loops (major first) around one
/// contiguous run.
void ScheduleRun::runCopies(const std::vector<CopyRow> &rows, size_t begin,
                            size_t end) {
  int outer = schedule.outerDims;
  std::vector<int64_t> index(static_cast<size_t>(outer));
  for (size_t r = begin; r < end; ++r) {
    const CopyRow &row = rows[r];
    if (row.runBytes == 0 ||
        std::find(row.counts.begin(), row.counts.end(), 0) != row.counts.end())
      continue;
    std::fill(index.begin(), index.end(), 0);
    char *src = base(row.srcSpace) + row.srcOffset;
    char *dst = base(row.dstSpace) + row.dstOffset;
    while (true) {
      int64_t srcAt = 0, dstAt = 0;
      for (int d = 0; d < outer; ++d) {
        srcAt += index[d] * row.srcStrides[d];
        dstAt += index[d] * row.dstStrides[d];
      }
      copyRun(row, src + srcAt, dst + dstAt);
      int d = outer - 1;
      while (d >= 0 && ++index[d] == row.counts[d])
        index[d--] = 0;
      if (d < 0)
        break;
    }
  }
}

/// A send/recv segment: each call after the `before` rows it needs, all in
/// one group, then the rest of the `before` rows.
absl::Status ScheduleRun::runSendRecv(const DeviceSegment &mine) {
  if (mine.comm.empty()) {
    runCopies(mine.before, 0, mine.before.size());
    return absl::OkStatus();
  }
  if (absl::Status status = backend.groupStart(device); !status.ok())
    return status;
  ++stats.groups;
  size_t ran = 0;
  for (const CommRow &row : mine.comm) {
    size_t needed = static_cast<size_t>(row.packsBefore);
    if (needed > ran) {
      runCopies(mine.before, ran, needed);
      ran = needed;
    }
    char *at = base(row.space) + row.stagingOffset;
    absl::Status status;
    if (row.kind == CommKind::Send) {
      status = backend.send(device, row.peer, at, row.bytes);
      ++stats.sendCalls;
    } else {
      status = backend.recv(device, row.peer, at, row.bytes);
      ++stats.recvCalls;
    }
    if (!status.ok())
      return status;
  }
  runCopies(mine.before, ran, mine.before.size());
  return backend.groupEnd(device);
}

/// A collective segment: the device's calls over its group, in place or out
/// of place (DeviceSchedule.h says where each collective's bytes are).
absl::Status ScheduleRun::runCollective(const Segment &segment,
                                        const DeviceSegment &mine) {
  runCopies(mine.before, 0, mine.before.size());
  if (mine.comm.empty())
    return absl::OkStatus();
  const std::vector<int64_t> &group = segment.groups.at(mine.group);
  int64_t rank = std::find(group.begin(), group.end(), device) - group.begin();
  for (const CommRow &row : mine.comm) {
    char *at = base(row.space) + row.stagingOffset;
    // In place, the caller's own chunk is at + rank * bytes; out of place
    // the call reads `at` and writes `result`.
    char *own = at + rank * row.bytes;
    char *result =
        row.result ? base(row.result->space) + row.result->offset : nullptr;
    int64_t count = row.bytes / schedule.elementBytes;
    absl::Status status;
    switch (segment.method) {
    case SegmentMethod::Broadcast:
      status = backend.broadcast(device, group, row.peer, at, at, row.bytes);
      break;
    case SegmentMethod::AllGather:
      status = result ? backend.allGather(device, group, at, result, row.bytes)
                      : backend.allGather(device, group, own, at, row.bytes);
      break;
    case SegmentMethod::AllReduce:
      status = backend.allReduce(device, group, at, result ? result : at, count,
                                 *buffers.dtype, ReduceOp::Sum);
      break;
    case SegmentMethod::AllToAll:
      status =
          backend.allToAll(device, group, at, result ? result : at, row.bytes);
      break;
    default:
      status = backend.reduceScatter(device, group, at, result ? result : own,
                                     count, *buffers.dtype, ReduceOp::Sum);
      break;
    }
    ++stats.collectiveCalls;
    if (!status.ok())
      return status;
  }
  return absl::OkStatus();
}

absl::Status ScheduleRun::run() {
  auto steps = prepared.stepsOf.find(device);
  stats.steps = steps == prepared.stepsOf.end() ? 0 : steps->second;
  for (const Segment &segment : schedule.segments) {
    const DeviceSegment &mine = segment.perDevice[position];
    absl::Status status;
    switch (segment.method) {
    case SegmentMethod::Local:
      runCopies(mine.before, 0, mine.before.size());
      break;
    case SegmentMethod::SendRecv:
      status = runSendRecv(mine);
      break;
    default:
      status = runCollective(segment, mine);
      break;
    }
    if (!status.ok())
      return status;
    runCopies(mine.after, 0, mine.after.size());
  }
  return absl::OkStatus();
}

} // namespace

//===----------------------------------------------------------------------===//
// PlanExecutor
//===----------------------------------------------------------------------===//

absl::StatusOr<PlanExecutor>
PlanExecutor::create(const TransferPlan &given, const TensorLayout &source,
                     const TensorLayout &destination,
                     const ExecuteOptions &options) {
  if (given.shape != source.shape() || given.shape != destination.shape())
    return absl::InvalidArgumentError("plan shape does not match the layouts");
  if (given.elementBytes <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "plan element size must be positive, got ", given.elementBytes));
  // The executor checks and counts transfers, so symbolic steps are
  // expanded for it; the schedule runs the plan as given, as the lowerings
  // do (a symbolic reduction or exchange is one collective there).
  std::optional<TransferPlan> expanded;
  if (hasSymbolicSteps(given)) {
    expanded = given;
    expandSymbolicSteps(*expanded);
  }
  const TransferPlan &plan = expanded ? *expanded : given;
  auto prepared =
      std::make_shared<Prepared>(plan, source, destination, options);

  if (plan.identity) {
    for (int64_t p = 0, e = destination.numDevices(); p < e; ++p) {
      int64_t device = destination.mesh().deviceAt(p);
      std::optional<Box> held = source.boxOfDevice(device);
      if (!held || *held != destination.boxAtPosition(p) ||
          source.localShape() != destination.localShape())
        return absl::InternalError(
            absl::StrCat("identity plan, but device ", device,
                         " has a different source and destination tile"));
      prepared->devices.push_back(device);
    }
    std::sort(prepared->devices.begin(), prepared->devices.end());
    return PlanExecutor(std::move(prepared));
  }

  TileMap sourceTiles = tilesOf(source);
  TileMap destinationTiles = tilesOf(destination);
  int64_t chunk = plan.steps.empty() ? 0 : plan.steps.front().chunk;
  std::set<int64_t> working;
  for (const Step &step : plan.steps) {
    if (step.chunk < chunk)
      return absl::InternalError("plan steps are not ordered by chunk");
    chunk = step.chunk;
    if (absl::Status valid =
            validateStep(step, plan, sourceTiles, destinationTiles);
        !valid.ok())
      return valid;
    std::set<int64_t> inStep;
    for (const Transfer &transfer : step.transfers) {
      prepared->needsDataType |= transfer.accumulate;
      inStep.insert(transfer.srcDevice);
      inStep.insert(transfer.dstDevices.begin(), transfer.dstDevices.end());
    }
    for (int64_t device : inStep)
      ++prepared->stepsOf[device];
    working.insert(inStep.begin(), inStep.end());
  }
  prepared->devices.assign(working.begin(), working.end());

  // The schedule the lowerings emit, over every device of both meshes.
  std::set<int64_t> all;
  for (const TensorLayout *layout : {&source, &destination})
    for (int64_t p = 0, e = layout->numDevices(); p < e; ++p)
      all.insert(layout->mesh().deviceAt(p));
  std::vector<int64_t> devices(all.begin(), all.end());
  planner::ScheduleOptions scheduleOptions;
  scheduleOptions.collectives = options.useCollectives;
  scheduleOptions.paddedTiles = true;
  absl::StatusOr<DeviceSchedule> schedule = planner::scheduleForDevices(
      given, source, destination, devices, scheduleOptions);
  if (!schedule.ok())
    return absl::InternalError(schedule.status().message());
  prepared->schedule = *std::move(schedule);
  for (size_t p = 0; p < devices.size(); ++p)
    prepared->positionOf[devices[p]] = p;
  // A step's method: its collective when one of its phases runs as one,
  // else send/recv when one communicates, else local.
  prepared->methods.assign(plan.steps.size(), StepMethod::Local);
  for (const Segment &segment : prepared->schedule.segments) {
    if (segment.method == SegmentMethod::Local)
      continue;
    for (const planner::StepPhase &phase : segment.phases) {
      StepMethod &method = prepared->methods.at(phase.step);
      if (method == StepMethod::Local || method == StepMethod::SendRecv)
        method = segment.method;
    }
  }
  return PlanExecutor(std::move(prepared));
}

const TransferPlan &PlanExecutor::plan() const { return prepared_->plan; }
const TensorLayout &PlanExecutor::source() const { return prepared_->source; }
const TensorLayout &PlanExecutor::destination() const {
  return prepared_->destination;
}
StepMethod PlanExecutor::method(size_t step) const {
  return prepared_->methods.at(step);
}
const std::vector<int64_t> &PlanExecutor::devices() const {
  return prepared_->devices;
}
bool PlanExecutor::needsDataType() const { return prepared_->needsDataType; }

absl::StatusOr<ExecutionStats>
PlanExecutor::runOnDevice(Backend &backend, int64_t device,
                          const DeviceBuffers &buffers) const {
  const Prepared &prepared = *prepared_;
  const TransferPlan &plan = prepared.plan;
  if (buffers.elementBytes != plan.elementBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, ": buffers of ", buffers.elementBytes,
        "-byte elements for a plan of ", plan.elementBytes, "-byte elements"));
  if (buffers.dtype && dataTypeSize(*buffers.dtype) != plan.elementBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, ": dtype ", dataTypeName(*buffers.dtype), " has ",
        dataTypeSize(*buffers.dtype), "-byte elements, the plan ",
        plan.elementBytes));
  if (prepared.needsDataType && !buffers.dtype)
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device,
        ": the plan sums partials, which needs the element type (dtype)"));

  // Which buffers the device must have, and how large they are.
  auto tileBytes = [&](const TensorLayout &layout) -> int64_t {
    if (!layout.mesh().positionOf(device))
      return 0;
    return product(layout.localShape()) * plan.elementBytes;
  };
  int64_t sourceBytes = tileBytes(prepared.source);
  int64_t destinationBytes = tileBytes(prepared.destination);
  if (sourceBytes > 0 && !buffers.source)
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, " is in the source mesh but has no source buffer"));
  if (destinationBytes > 0 && !buffers.destination)
    return absl::InvalidArgumentError(
        absl::StrCat("device ", device,
                     " is in the destination mesh but has no destination "
                     "buffer"));
  if (sourceBytes > 0 && destinationBytes > 0) {
    auto src = reinterpret_cast<uintptr_t>(buffers.source);
    auto dst = reinterpret_cast<uintptr_t>(buffers.destination);
    bool overlap = src < dst + static_cast<uintptr_t>(destinationBytes) &&
                   dst < src + static_cast<uintptr_t>(sourceBytes);
    // An identity plan may run in place: the destination *is* the source.
    if (overlap && !(plan.identity && src == dst))
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", device, ": the source and destination buffers overlap"));
  }

  ExecutionStats stats;
  if (plan.identity) {
    if (destinationBytes > 0 && buffers.source != buffers.destination)
      std::memcpy(buffers.destination, buffers.source,
                  static_cast<size_t>(destinationBytes));
    return stats;
  }
  auto position = prepared.positionOf.find(device);
  if (position == prepared.positionOf.end() ||
      !prepared.stepsOf.contains(device))
    return stats;
  // A plan that adds into its destination starts from zeros.
  if (prepared.schedule.accumulatesIntoDestination && destinationBytes > 0)
    std::memset(buffers.destination, 0, static_cast<size_t>(destinationBytes));
  ScheduleRun run(prepared, backend, device, position->second, buffers);
  if (absl::Status status = run.run(); !status.ok())
    return status;
  return run.stats;
}

absl::StatusOr<ExecutionStats>
executePlanOnDevice(Backend &backend, int64_t device, const TransferPlan &plan,
                    const TensorLayout &source, const TensorLayout &destination,
                    const DeviceBuffers &buffers,
                    const ExecuteOptions &options) {
  absl::StatusOr<PlanExecutor> executor =
      PlanExecutor::create(plan, source, destination, options);
  if (!executor.ok())
    return executor.status();
  return executor->runOnDevice(backend, device, buffers);
}

absl::StatusOr<std::map<int64_t, ExecutionStats>>
executePlan(Backend &backend, const PlanExecutor &executor,
            const std::function<DeviceBuffers(int64_t)> &buffersOf) {
  std::vector<int64_t> ids(backend.devices().begin(), backend.devices().end());
  absl::flat_hash_map<int64_t, size_t> indexOf;
  for (size_t i = 0; i < ids.size(); ++i)
    indexOf[ids[i]] = i;
  // A device of the plan without a thread would leave its peers waiting
  // until the backend's deadline: refuse at once.
  for (int64_t device : executor.devices())
    if (!indexOf.contains(device))
      return absl::InvalidArgumentError(
          absl::StrCat("the plan needs device ", device,
                       ", which the backend does not have"));
  std::vector<ExecutionStats> stats(ids.size());
  absl::Status status = runOnDevices(backend, [&](int64_t device) {
    absl::StatusOr<ExecutionStats> result =
        executor.runOnDevice(backend, device, buffersOf(device));
    if (!result.ok())
      return result.status();
    // Each thread writes its own slot; the join orders it before the read.
    stats[indexOf.at(device)] = *result;
    return absl::OkStatus();
  });
  if (!status.ok())
    return status;
  std::map<int64_t, ExecutionStats> result;
  for (size_t i = 0; i < ids.size(); ++i)
    result[ids[i]] = stats[i];
  return result;
}

} // namespace polymesh::runtime
