//===- PlannerConversion.h - Attributes to planner types --------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Converts the dialect's mesh and sharding attributes into the planner's
// MLIR-free types. The dependency is one-way: IR knows the planner, the
// planner knows nothing of MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_DIALECT_POLYMESH_PLANNERCONVERSION_H
#define POLYMESH_DIALECT_POLYMESH_PLANNERCONVERSION_H

#include "polymesh/Dialect/Polymesh/PolymeshAttrs.h"
#include "polymesh/Planner/Layout.h"

#include "mlir/IR/BuiltinTypes.h"

namespace polymesh {

/// The planner's view of a verified mesh attribute.
planner::Mesh toPlannerMesh(MeshAttr mesh);

/// The planner's view of a sharding verified against `mesh`.
planner::Sharding toPlannerSharding(ShardingAttr sharding, MeshAttr mesh);

/// Binds a sharding to a static tensor type. Fails with a diagnostic from
/// `emitError` for dynamic shapes or anything the planner rejects.
mlir::FailureOr<planner::TensorLayout>
toTensorLayout(llvm::function_ref<mlir::InFlightDiagnostic()> emitError,
               ShardingAttr sharding, MeshAttr mesh,
               mlir::RankedTensorType type);

} // namespace polymesh

#endif // POLYMESH_DIALECT_POLYMESH_PLANNERCONVERSION_H
