//===- PlanExecutor.h - Runs transfer plans through a Backend ---*- C++ -*-===//
//
// Part of Polymesh. Plain C++17 and Abseil: no MLIR or LLVM types. The
// runtime depends on the planner (which has no MLIR types either), never the
// other way round.
//
//===----------------------------------------------------------------------===//
//
// A PlanExecutor runs a planner::TransferPlan for real: every device calls
// runOnDevice from its own thread with its own buffers, and the bytes move
// through a runtime Backend (the loopback backend here, NCCL later). The
// result is the one lib/Planner/Simulate.cpp defines: steps in order, phase 0
// of a step before phase 1, every box read before any box of the same phase
// is written, `accumulate` adds in the element type, ZeroFill writes zeros.
//
// It runs the plan's DeviceSchedule (planner::scheduleForDevices), the one
// the CPU and CUDA lowerings turn into code: per segment a device runs its
// `before` copy rows (packing into staging), its calls (grouped send/recv,
// or the segment's broadcast, all-gather, all-reduce or reduce-scatter over
// its group, in place or out of place as the row says), then its `after`
// rows. Which collective carries a step phase is the schedule's decision,
// made from the plan alone, so every device makes the same collective calls
// on every communicator in the same order (NCCL's matching rule);
// ExecuteOptions::useCollectives false runs every phase with communication as
// grouped send/recv. An all-to-all runs as grouped send/recv, as in generated
// code.
//
// A device holds the schedule's staging for it (the most any one segment
// needs) for the whole run: ExecutionStats::peakStagingBytes.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_RUNTIME_PLANEXECUTOR_H
#define POLYMESH_RUNTIME_PLANEXECUTOR_H

#include "polymesh/Planner/DeviceSchedule.h"
#include "polymesh/Planner/Layout.h"
#include "polymesh/Planner/TransferPlan.h"
#include "polymesh/Runtime/Runtime.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace polymesh::runtime {

/// One device's buffers for one plan. Both are row-major tiles of the
/// layout's localShape() whose element 0 is the global index of the device's
/// box lo in that layout (TransferPlan.h's buffer model).
struct DeviceBuffers {
  /// The source tile; null when the device is not in the source mesh or
  /// its tile has no elements. Reduction steps overwrite it
  /// (TransferPlan::reducesInPlace).
  void *source = nullptr;
  /// The destination tile; null when the device is not in the destination
  /// mesh or its tile has no elements. Must not overlap `source`, except
  /// that both may be the same buffer for an identity plan.
  void *destination = nullptr;
  /// Bytes of one element: must equal the plan's elementBytes.
  int64_t elementBytes = 0;
  /// The element type, which sums use (accumulating transfers, all-reduce,
  /// reduce-scatter). Required only when the plan accumulates; its size must
  /// then be elementBytes.
  std::optional<DataType> dtype;
};

/// How the executor carries a step: the schedule's method (one enum for
/// the schedule, the lowerings and the executor).
using StepMethod = planner::SegmentMethod;
constexpr int kNumStepMethods = planner::kNumSegmentMethods;

/// snake_case name of a method, e.g. "all_gather", "send_recv".
inline const char *stepMethodName(StepMethod method) {
  return planner::segmentMethodName(method);
}

struct ExecuteOptions {
  /// Carry steps on the collectives their kinds name where the pattern
  /// allows. False runs every step with communication as grouped
  /// send/recv, the fallback every backend has (and a bit-exact match of the
  /// simulator's summation order for floats).
  bool useCollectives = true;
};

/// What one device did.
struct ExecutionStats {
  /// Most staging bytes the device held at once.
  int64_t peakStagingBytes = 0;
  /// Steps the device took part in.
  int64_t steps = 0;
  /// Collective calls (broadcast, all_gather, ...) it made.
  int64_t collectiveCalls = 0;
  /// send and recv calls, and the groups that carried them.
  int64_t sendCalls = 0;
  int64_t recvCalls = 0;
  int64_t groups = 0;
};

/// A plan checked against its layouts and prepared for execution. Copies
/// share the prepared plan; all methods are const and may be called from
/// every device thread at once.
class PlanExecutor {
public:
  /// Validates the plan against the layouts as the simulator does (shapes,
  /// chunk order, byte counts, every box inside the buffer it reads or
  /// writes; InternalError otherwise) and chooses a method per step.
  static absl::StatusOr<PlanExecutor>
  create(const planner::TransferPlan &plan, const planner::TensorLayout &source,
         const planner::TensorLayout &destination,
         const ExecuteOptions &options = {});

  /// Runs the plan's part of `device` with its `buffers`; every device of
  /// the plan must call it (a device without work returns at once). On a
  /// backend error the device stops and returns it; the caller (runOnDevices)
  /// aborts the backend so that no other device waits.
  absl::StatusOr<ExecutionStats>
  runOnDevice(Backend &backend, int64_t device,
              const DeviceBuffers &buffers) const;

  const planner::TransferPlan &plan() const;
  const planner::TensorLayout &source() const;
  const planner::TensorLayout &destination() const;
  /// The method of step `step` of plan().
  StepMethod method(size_t step) const;
  /// Every device the plan gives work to, sorted.
  const std::vector<int64_t> &devices() const;
  /// True when the plan accumulates, so DeviceBuffers::dtype is required.
  bool needsDataType() const;

  /// The checked plan and its schedule (defined in PlanExecutor.cpp; named
  /// here so that the implementation's helpers can refer to it).
  struct Prepared;

private:
  explicit PlanExecutor(std::shared_ptr<const Prepared> prepared)
      : prepared_(std::move(prepared)) {}
  std::shared_ptr<const Prepared> prepared_;
};

/// One device's share of running `plan`: PlanExecutor::create followed by
/// runOnDevice. Every device prepares the plan itself; use a shared
/// PlanExecutor to prepare it once.
absl::StatusOr<ExecutionStats> executePlanOnDevice(
    Backend &backend, int64_t device, const planner::TransferPlan &plan,
    const planner::TensorLayout &source,
    const planner::TensorLayout &destination, const DeviceBuffers &buffers,
    const ExecuteOptions &options = {});

/// Runs `executor` on every device of `backend` (runOnDevices: one thread
/// per device), with the buffers `buffersOf(device)` returns (called on the
/// device's thread). Returns every device's stats, or the backend's first
/// error.
absl::StatusOr<std::map<int64_t, ExecutionStats>>
executePlan(Backend &backend, const PlanExecutor &executor,
            const std::function<DeviceBuffers(int64_t)> &buffersOf);

} // namespace polymesh::runtime

#endif // POLYMESH_RUNTIME_PLANEXECUTOR_H
