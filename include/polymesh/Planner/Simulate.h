//===- Simulate.h - Host-buffer execution of transfer plans -----*- C++ -*-===//
//
// Part of Polymesh. Pure C++17: no MLIR types.
//
//===----------------------------------------------------------------------===//
//
// Runs a TransferPlan on host buffers exactly as a backend would (staging
// buffers per chunk, pack -> send -> unpack, phases in order) and checks the
// result. Source elements hold their global row-major linear index, so every
// misplaced, missing or doubled element shows. It is the oracle of the
// planner's tests and of fuzzing.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_PLANNER_SIMULATE_H
#define POLYMESH_PLANNER_SIMULATE_H

#include "polymesh/Planner/Layout.h"
#include "polymesh/Planner/TransferPlan.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <vector>

namespace polymesh::planner {

/// One device's local buffer: a tile of `localShape` (row-major) whose
/// element 0 is the global index `box.lo`. Elements past `box` are padding.
struct HostBuffer {
  Box box;
  std::vector<int64_t> localShape;
  std::vector<int64_t> data;

  /// Offset in `data` of the global index `index` (which must lie in the
  /// tile that starts at box.lo).
  int64_t offsetOf(const std::vector<int64_t> &index) const;
};

/// Value of never-written elements (and of padding).
constexpr int64_t kUnsetValue = -(int64_t(1) << 40);

/// Source buffers of `source`, one per device: element e holds the global
/// linear index of e. For unreduced sources every reduction group splits the
/// index into nonzero partials that sum to it (member 0 holds the rest).
std::map<int64_t, HostBuffer> makeSourceBuffers(const TensorLayout &source);

struct SimulationResult {
  /// Destination buffers by device id.
  std::map<int64_t, HostBuffer> destination;
  /// Measured staging peak per device (max over chunks).
  std::map<int64_t, int64_t> peakStagingBytes;
  /// Bytes that crossed devices.
  int64_t bytesCrossed = 0;
  /// Destination elements overwritten after they were already written: each
  /// one is traffic or copying a bytes-optimal plan would not do.
  int64_t duplicateWrites = 0;
};

/// Executes `plan` from fresh source buffers. Fails when a step reads or
/// writes outside a buffer or names a device without one.
absl::StatusOr<SimulationResult> simulatePlan(const TransferPlan &plan,
                                              const TensorLayout &source,
                                              const TensorLayout &destination);

/// Checks that every destination device holds exactly its tile: each element
/// of its box equals the element's global linear index; for unreduced
/// destinations, the sum over each reduction group does.
absl::Status checkDestinationBuffers(const SimulationResult &result,
                                     const TensorLayout &destination);

} // namespace polymesh::planner

#endif // POLYMESH_PLANNER_SIMULATE_H
