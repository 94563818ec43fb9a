//===- Batch.h - Reshards that repeat over mesh axes ------------*- C++ -*-===//
//
// Part of Polymesh. Pure C++17: no MLIR types.
//
//===----------------------------------------------------------------------===//
//
// Most reshards of a large mesh leave some axes alone: the all-gather of
// "fsdp" on a ["dp", "fsdp", "tp"] pod is the same 16-device all-gather in
// each of the 1,024 (dp, tp) cells, moved to other device ids and, along a
// dimension that "dp" splits, to another slab of the tensor. A ReshardBatch
// names such axes (batch axes) and the reshard of one cell, cell 0 (every
// batch coordinate 0); the plan of that cell, with the cell's device ids and
// global coordinates, stands for the whole plan: cell c runs the same steps
// with every device moved by the batch coordinates of c and every box moved
// by the slabs of c. Planning, storing and verifying a plan then cost what
// one cell costs, whatever the number of cells (docs/planner.md,
// "Batched plans").
//
// A pair of axes (one of each mesh, the same size) is a batch axis when
//  - both layouts split dimension `dim` first over it, as a whole axis, into
//    slabs that every tile of both layouts lies in (the slab extent is a
//    multiple of the other axes' shard count, so no tile straddles slabs), or
//  - neither layout uses it (`dim` = -1): every cell holds the whole value;
// and moving a cell's devices along it keeps their roles: a device that is
// in both meshes in a cell is moved to the same device by both meshes, and
// the cells' meshes are equal exactly when the whole meshes are (partial
// sums are kept only between equal meshes).
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_PLANNER_BATCH_H
#define POLYMESH_PLANNER_BATCH_H

#include "polymesh/Planner/Layout.h"
#include "polymesh/Planner/Planner.h"
#include "polymesh/Planner/TransferPlan.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace polymesh::planner {

/// One batch axis: an axis of the source mesh paired with one of the
/// destination mesh.
struct BatchAxis {
  std::string source;
  std::string destination;
  /// The tensor dimension both layouts split first over the axis, or -1
  /// when neither layout uses it.
  int64_t dim = -1;

  bool operator==(const BatchAxis &other) const {
    return source == other.source && destination == other.destination &&
           dim == other.dim;
  }
};

/// A reshard seen as cells that repeat over batch axes.
struct ReshardBatch {
  /// Major to minor: cell numbers are mixed-radix over these.
  std::vector<BatchAxis> axes;
  /// Per axis: its size, and the strides of its coordinate in the positions
  /// of the whole source and destination meshes.
  std::vector<int64_t> sizes, sourceStrides, destinationStrides;
  /// Per axis: elements of `dim` a coordinate step moves a box (0 when the
  /// axis splits no dimension).
  std::vector<int64_t> slabs;
  int64_t numCells = 1;
  /// Some device is a sender in one cell and a receiver in another, so its
  /// staging is the sum of two cells'.
  bool cellsShareDevices = false;
  /// The reshard of cell 0: the whole meshes without the batch axes, the
  /// device ids of batch coordinate 0, the dims cut to one slab.
  TensorLayout cellSource, cellDestination;
};

/// Checks that `axes`, in order, are batch axes of the reshard and builds
/// the batch. InvalidArgument, saying why, when one is not.
absl::StatusOr<ReshardBatch>
makeReshardBatch(const TensorLayout &source, const TensorLayout &destination,
                 const std::vector<BatchAxis> &axes);

/// The batch axes of the reshard, as many as there are (greedily, major
/// first): whole axes of size > 1 that split the same dimension first in
/// both layouts, then axes neither layout uses (paired by name, else by
/// size). Empty when the reshard does not repeat.
std::vector<BatchAxis> findBatchAxes(const TensorLayout &source,
                                     const TensorLayout &destination);
/// The batch of findBatchAxes' axes, or nullopt when there are none.
std::optional<ReshardBatch> findReshardBatch(const TensorLayout &source,
                                             const TensorLayout &destination);

/// The options to plan cell 0 with so that the expanded plan keeps
/// `options`: when cells share devices, each cell gets half the memory
/// limit. Nullopt when that leaves nothing of a limit.
std::optional<PlanOptions> cellPlanOptions(const ReshardBatch &batch,
                                           const PlanOptions &options);

/// Plans cell 0 (planReshard from batch.cellSource to batch.cellDestination)
/// under cellPlanOptions.
absl::StatusOr<TransferPlan> planCellReshard(const ReshardBatch &batch,
                                             int64_t elementBytes,
                                             const PlanOptions &options = {});

/// Every cell's devices: row 0 holds cell 0's devices (both meshes', each
/// once, sorted), row c their counterparts in cell c, in the same order.
std::vector<std::vector<int64_t>>
cellDeviceTable(const ReshardBatch &batch, const TensorLayout &source,
                const TensorLayout &destination);

/// The plan of the whole reshard from the plan of cell 0 (made from
/// batch.cellSource to batch.cellDestination): each step once per cell, in
/// cell order, moved to the cell's devices and slabs; local, send/recv and
/// permutation steps of all cells merge into one step. ResourceExhausted when
/// the result would exceed kMaxPlanTransfers or kMaxPlanReceivers.
absl::StatusOr<TransferPlan> expandBatchedPlan(const TransferPlan &cellPlan,
                                               const ReshardBatch &batch,
                                               const TensorLayout &source,
                                               const TensorLayout &destination);

} // namespace polymesh::planner

#endif // POLYMESH_PLANNER_BATCH_H
