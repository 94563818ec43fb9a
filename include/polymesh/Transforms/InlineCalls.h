//===- InlineCalls.h - Call sites specialized for propagation ---*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// --polymesh-propagate's first step, public so that polymesh-run's --verify
// can give the reference the same op structure as the sharded program: the
// two must number their reductions alike (Execution/SumBounds.h).
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_TRANSFORMS_INLINECALLS_H
#define POLYMESH_TRANSFORMS_INLINECALLS_H

#include "mlir/IR/BuiltinOps.h"

namespace polymesh {

/// The default of --polymesh-propagate's `max-specialized-ops`.
inline constexpr int64_t kDefaultMaxSpecializedOps = int64_t(1) << 20;

/// Replaces every `func.call` of a function with a body by a copy of that
/// body at the call site, callees first, so that each site is propagated
/// (and later partitioned) with the shardings of its own operands and uses:
/// a specialised clone per call site, with no reshard at the call boundary.
/// The callee's argument and result shardings become
/// `polymesh.sharding_constraint`s on the site's operands and results.
/// Private callees left without calls are erased; public ones stay, as
/// entry points of their own. Fails, with a diagnostic at the call, on a
/// recursive call graph, on callees of more than one block, and on a
/// function into which more than `maxCopiedOps` ops would be copied. Calls
/// of declarations stay.
mlir::LogicalResult inlineCallsForPropagation(mlir::ModuleOp module,
                                              int64_t maxCopiedOps);

} // namespace polymesh

#endif // POLYMESH_TRANSFORMS_INLINECALLS_H
