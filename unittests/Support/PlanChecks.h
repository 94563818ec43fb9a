//===- PlanChecks.h - Running plans in unit tests ---------------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The check every planner test applies to a plan: run it on the host
// simulator, the planner's independent oracle, and compare what it did with
// what the plan says it does.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_UNITTESTS_SUPPORT_PLANCHECKS_H
#define POLYMESH_UNITTESTS_SUPPORT_PLANCHECKS_H

#include "polymesh/Planner/Simulate.h"
#include "polymesh/Planner/TransferPlan.h"

#include <gtest/gtest.h>

namespace polymesh::planner::testing {

/// Simulates `plan` from fresh source buffers: every destination device
/// must hold exactly its tile, no element may be written twice, and the
/// bytes crossing devices and each device's peak staging must be those the
/// plan reports.
inline ::testing::AssertionResult
runsCorrectly(const TransferPlan &plan, const TensorLayout &source,
              const TensorLayout &destination) {
  absl::StatusOr<SimulationResult> result =
      simulatePlan(plan, source, destination);
  if (!result.ok())
    return ::testing::AssertionFailure() << result.status() << "\n"
                                         << formatPlan(plan);
  if (absl::Status check = checkDestinationBuffers(*result, destination);
      !check.ok())
    return ::testing::AssertionFailure() << check << "\n" << formatPlan(plan);
  if (result->duplicateWrites != 0)
    return ::testing::AssertionFailure()
           << result->duplicateWrites << " elements written twice\n"
           << formatPlan(plan);
  if (result->bytesCrossed != plan.bytesMoved)
    return ::testing::AssertionFailure()
           << result->bytesCrossed << " bytes crossed, the plan says "
           << plan.bytesMoved << "\n"
           << formatPlan(plan);
  for (const DeviceStats &stats : plan.perDevice)
    if (result->peakStagingBytes[stats.device] != stats.peakTempBytes)
      return ::testing::AssertionFailure()
             << "device " << stats.device << " staged "
             << result->peakStagingBytes[stats.device]
             << " bytes at once, the plan says " << stats.peakTempBytes;
  return ::testing::AssertionSuccess();
}

} // namespace polymesh::planner::testing

#endif // POLYMESH_UNITTESTS_SUPPORT_PLANCHECKS_H
