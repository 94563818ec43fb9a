//===- PlannerConversion.h - Attributes to planner types --------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Converts the dialect's mesh and sharding attributes into the planner's
// MLIR-free types, and a planned `polymesh.transfer` back into the planner's
// TransferPlan, so that the runtime's plan executor can run the plan the IR
// holds. The dependency is one-way: IR knows the planner, the planner knows
// nothing of MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_DIALECT_POLYMESH_PLANNERCONVERSION_H
#define POLYMESH_DIALECT_POLYMESH_PLANNERCONVERSION_H

#include "polymesh/Dialect/Polymesh/PolymeshAttrs.h"
#include "polymesh/Planner/Batch.h"
#include "polymesh/Planner/Layout.h"
#include "polymesh/Planner/TransferPlan.h"

#include "mlir/IR/BuiltinTypes.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir {
class SymbolTableCollection;
} // namespace mlir

namespace polymesh {

// PolymeshOps.h is not included: users of the attribute conversions below
// (the op verifiers among them) need no op classes.
class TransferOp;

/// Bytes one element of `element` takes in a buffer, as LLVM lays out a
/// memref of it; 0 when Polymesh cannot move it. Widths whose whole bytes
/// are a power of two (i1, i4, i8, bf16, f32, i128, ...) take exactly those
/// bytes. Others are padded by LLVM (i17 takes 4 bytes, i48 8, f80 16) with
/// undefined padding bits, and are refused rather than moved as 3, 6 or 10.
int64_t elementByteSize(mlir::Type element);

/// The diagnostic text for an element type that elementByteSize refuses.
std::string unmovableElementReason(mlir::Type element);

/// The planner's view of a verified mesh attribute.
planner::Mesh toPlannerMesh(MeshAttr mesh);

/// The sorted device ids of a partitioned function's meshes (its
/// `polymesh.meshes`, looked up from `function`), or nullopt when it names
/// none or one of them is unknown. Positions index this list.
std::optional<std::vector<int64_t>>
partitionedFunctionDevices(mlir::SymbolTableCollection &symbols,
                           mlir::Operation *function);

/// The planner's view of a sharding verified against `mesh`, for a tensor
/// of rank `rank` (a maximal sharding gets one unsharded dimension each).
planner::Sharding toPlannerSharding(ShardingAttr sharding, MeshAttr mesh,
                                    int64_t rank);

/// Binds a sharding to a static tensor type. Fails with a diagnostic from
/// `emitError` for dynamic shapes or anything the planner rejects.
mlir::FailureOr<planner::TensorLayout>
toTensorLayout(llvm::function_ref<mlir::InFlightDiagnostic()> emitError,
               ShardingAttr sharding, MeshAttr mesh,
               mlir::RankedTensorType type);

/// The plan `op` carries, as a planner TransferPlan over `source` and
/// `destination` (the op's shardings bound to its type, as toTensorLayout
/// makes them): the inverse of what --polymesh-plan writes. Steps keep their
/// kind, chunk, devices and transfers (box, buffers, accumulate, phase; bytes
/// from the element size, which is rounded up to whole bytes as the planner
/// does). Totals are recomputed from the steps (recomputePlanStats).
///
/// What the IR does not record is derived the way planReshard decides it:
/// `identity` when there are no steps and the layouts are device-equivalent
/// (a tensor without elements between other layouts gets an empty plan that
/// is not an identity, as from the planner); `reducesInPlace` when a transfer
/// writes source buffers (only the reduction of unreduced source axes does);
/// `reducedLayout`, when the planner would reduce (the source has unreduced
/// axes that the destination does not keep on the same mesh), from
/// planner::reducedLayoutOf, since it depends on the layouts alone.
/// Symbolic reduction steps stay symbolic (planner::Step::pieces), as the
/// planner makes them; whatever interprets transfers expands them
/// (planner::expandSymbolicSteps).
/// The memory limit and the lower bounds are not in the IR and stay 0.
///
/// A batched op's steps are cell 0's: they are read against the cell's
/// layouts and expanded over every cell (planner::expandBatchedPlan), so
/// the result is the whole plan. Fails when the batch axes do not fit the
/// layouts (the verifier refuses such ops) or the whole plan would exceed
/// the planner's transfer budget.
absl::StatusOr<planner::TransferPlan>
toPlannerPlan(TransferOp op, const planner::TensorLayout &source,
              const planner::TensorLayout &destination);

/// The steps of `op` alone as a plan over `source` and `destination`: for a
/// batched op, given the batch's cell layouts, the plan of cell 0.
planner::TransferPlan
toPlannerStepsPlan(TransferOp op, const planner::TensorLayout &source,
                   const planner::TensorLayout &destination);

/// The planner's kind of a step.
planner::StepKind toPlannerStepKind(TransferStepKind kind);

/// The pieces of a symbolic reduction step (TransferStepAttr::isSymbolic).
planner::ReductionPieces toPlannerPieces(TransferStepAttr step);

/// The batch axes of a batched op, as the planner names them.
std::vector<planner::BatchAxis> toPlannerBatchAxes(mlir::ArrayAttr batch);

} // namespace polymesh

#endif // POLYMESH_DIALECT_POLYMESH_PLANNERCONVERSION_H
