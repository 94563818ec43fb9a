//===- Planner.h - Bytes-optimal reshard planning ---------------*- C++ -*-===//
//
// Part of Polymesh. Pure C++17: no MLIR types.
//
//===----------------------------------------------------------------------===//
//
// planReshard turns a (source layout, destination layout) pair into a
// TransferPlan. The meshes may differ completely: other axes, overlapping or
// disjoint device ids. See docs/planner.md for how the planner chooses.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_PLANNER_PLANNER_H
#define POLYMESH_PLANNER_PLANNER_H

#include "polymesh/Planner/Layout.h"
#include "polymesh/Planner/TransferPlan.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace polymesh::planner {

struct PlanOptions {
  /// Most staging (pack + unpack) bytes any device may hold at once;
  /// 0 means unlimited. Transfers larger than this are split into chunks.
  int64_t memoryLimitBytes = 0;
  /// Reduction steps stay symbolic (Step::pieces, no transfers) when no
  /// memory limit splits them into chunks: a sum over n devices costs O(n),
  /// not O(n^2), in the plan and in everything that reads it.
  bool symbolicReductions = false;
  /// An all-to-all of whole tiles (every source tile to every destination
  /// tile, each layout's tiles distinct and partitioning the tensor, both
  /// on one set of devices) stays symbolic (Step::exchange, no transfers)
  /// when no memory limit splits it: a transpose of a sharding over n
  /// devices costs O(n), not O(n^2), in the plan and the schedule.
  bool symbolicExchanges = false;

  bool operator==(const PlanOptions &other) const {
    return memoryLimitBytes == other.memoryLimitBytes &&
           symbolicReductions == other.symbolicReductions &&
           symbolicExchanges == other.symbolicExchanges;
  }
};

/// The most transfers (boxes), and the most (transfer, receiver) pairs, one
/// plan may hold. A plan's memory and time grow with them (about 550 bytes
/// per transfer and 90 per receiver in polymesh-opt, IR included), so a
/// reshard that needs more is refused, before its plan is built, instead of
/// running out of memory (docs/limits.md).
inline constexpr int64_t kMaxPlanTransfers = int64_t(1) << 22;
inline constexpr int64_t kMaxPlanReceivers = int64_t(1) << 25;

/// Plans the transfer of a tensor of `elementBytes`-byte elements from
/// `source` to `destination`. Errors (InvalidArgument): different shapes,
/// a non-positive element size, a byte count that overflows int64, a
/// negative memory limit, a memory limit too small for one element, or a
/// mesh of more than kMaxMeshDevices devices. ResourceExhausted: a plan that
/// would exceed kMaxPlanTransfers or kMaxPlanReceivers.
absl::StatusOr<TransferPlan> planReshard(const TensorLayout &source,
                                         const TensorLayout &destination,
                                         int64_t elementBytes,
                                         const PlanOptions &options = {});

/// The layout a plan from `source` to `destination` reduces into
/// (TransferPlan::reducedLayout) without planning it: nullopt when nothing
/// is reduced. Errors as planReshard's for layouts it cannot reduce.
absl::StatusOr<std::optional<TensorLayout>>
reducedLayoutOf(const TensorLayout &source, const TensorLayout &destination);

/// Splits `box` into sub-boxes of at most `maxElements` elements each,
/// cutting along its outermost non-unit dimension first (so sub-boxes are
/// contiguous row-major slabs where possible). Returns {box} when it fits;
/// an empty vector for an empty box. `maxElements` must be >= 1.
std::vector<Box> splitBox(const Box &box, int64_t maxElements);

/// A thread-safe cache of plans keyed by the full planner input: both
/// layouts (axes, device ids, shardings), the shape, the element size and
/// the options. Failed plans are not cached.
class PlanCache {
public:
  absl::StatusOr<std::shared_ptr<const TransferPlan>>
  getOrPlan(const TensorLayout &source, const TensorLayout &destination,
            int64_t elementBytes, const PlanOptions &options = {});

  int64_t hits() const;
  int64_t misses() const;
  size_t size() const;
  void clear();

  /// The cache key of a planner input (exposed for tests).
  static std::string key(const TensorLayout &source,
                         const TensorLayout &destination, int64_t elementBytes,
                         const PlanOptions &options);

private:
  // A std::mutex rather than absl::Mutex: ThreadSanitizer understands it
  // even when Abseil is a prebuilt, uninstrumented library.
  mutable std::mutex mutex_;
  // Guarded by mutex_.
  absl::flat_hash_map<std::string, std::shared_ptr<const TransferPlan>> plans_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

} // namespace polymesh::planner

#endif // POLYMESH_PLANNER_PLANNER_H
