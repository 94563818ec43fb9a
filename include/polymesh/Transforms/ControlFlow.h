//===- ControlFlow.h - Tensors carried by scf control flow ------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// scf.for, scf.while, scf.if and scf.index_switch may carry and compute
// tensors. Each value they carry has *owners* (the region arguments and op
// results it becomes), which share one sharding because the local program has
// one type per carried value, and *feeders* (the operands and yields that flow
// into it), which propagation moves to the owners' sharding where they differ,
// as Shardy's data-flow edges. Propagation, planning and partitioning read the
// same correspondence from here.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_TRANSFORMS_CONTROLFLOW_H
#define POLYMESH_TRANSFORMS_CONTROLFLOW_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

namespace polymesh {

/// scf.for, scf.while, scf.if or scf.index_switch: control flow whose regions
/// may carry and compute tensors.
bool isTensorControlFlow(mlir::Operation *op);

/// Emits an error at the first op of `function` that yields a tensor inside
/// a region other than those of tensor control flow nested in each other
/// (linalg bodies hold scalars; upstream's bufferization analysis is
/// exponential in nested scf.execute_region), and fails.
mlir::LogicalResult checkTensorRegions(mlir::Operation *function);

/// One carried value of tensor control flow (of any type: callers skip
/// those that are not tensors).
struct CarriedValue {
  llvm::SmallVector<mlir::Value, 2> owners;
  llvm::SmallVector<mlir::OpOperand *, 2> feeders;
};

/// The values `op` carries: a for loop's iteration arguments (owners: the
/// region argument and the result; feeders: the init and the yield), a
/// while loop's before arguments (fed by the inits and the after region's
/// yields) and after arguments (with the results, fed by the condition's
/// operands), an if's results (fed by both yields), a switch's results (fed by
/// the yield of every case and of the default).
llvm::SmallVector<CarriedValue> getCarriedValues(mlir::Operation *op);

/// For a region argument of tensor control flow, the value outside the
/// region whose sharding it has: the op result it shares a sharding with,
/// or for a while loop's before arguments, the init (moved there by
/// propagation). Null for any other block argument.
mlir::Value getShardingSource(mlir::BlockArgument arg);

} // namespace polymesh

#endif // POLYMESH_TRANSFORMS_CONTROLFLOW_H
