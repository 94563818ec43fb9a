//===- ShardingRules.h - Factor-based sharding rules of ops -----*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// An op's sharding rule describes its iteration space as *factors*: each
// tensor dimension of each operand and result maps to a list of factors,
// major to minor. A factor that appears in several values must be sharded
// the same way in all of them; a reduction factor that only the operands
// have makes the results partial sums when it is sharded. The model follows
// Shardy's OpShardingRule; the factors come from upstream's ShardingInterface
// (indexing maps and iterator types) wherever an op implements it.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_TRANSFORMS_SHARDINGRULES_H
#define POLYMESH_TRANSFORMS_SHARDINGRULES_H

#include "polymesh/Dialect/Polymesh/PolymeshAttrs.h"

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace polymesh {

struct FactorRule {
  enum class Kind { Parallel, SumReduction, OtherReduction };

  /// Size of each factor; 0 when unknown (only single-factor dims may have
  /// unknown sizes, where the tile rule matches on both sides anyway).
  llvm::SmallVector<int64_t> factorSizes;
  llvm::SmallVector<Kind> factorKinds;
  /// For each tensor operand, then each aligned capture (a linalg.generic
  /// body's reads from above, getAlignedCaptures), then each tensor result,
  /// in order: for each
  /// dimension, its factors major to minor. A dimension with no factor can
  /// only be replicated.
  llvm::SmallVector<llvm::SmallVector<llvm::SmallVector<unsigned>>> values;
  /// The op's tensor operands and aligned captures followed by its tensor
  /// results.
  llvm::SmallVector<mlir::Value> tensorValues;
  unsigned numOperands = 0;
  /// Every factor is parallel and every tensor value either maps dimension
  /// i to factor i or has no factor at all (elementwise ops and their
  /// scalar-like operands): the former share one sharding, the latter are
  /// replicated.
  bool isIdentity = false;
  /// With isIdentity: whether each value is of the replicated kind.
  llvm::SmallVector<bool> isUnshardable;

  unsigned numFactors() const { return factorSizes.size(); }
};

/// The rule of `op`, or nullopt when no rule describes it.
std::optional<FactorRule> getFactorRule(mlir::Operation *op);

/// A tensor that a `linalg.generic` body reads from above (only with
/// `tensor.extract`), and for each of its dimensions the parallel loop whose
/// `linalg.index` indexes it in every read, the loop's extent equal to the
/// dimension's, or -1. Such a dimension may be split as the loop is: each
/// device reads its own tile at the local index (a gather's feature
/// dimension, an embedding table split by columns).
struct AlignedCapture {
  mlir::Value value;
  llvm::SmallVector<int64_t> loopOfDim;
};

/// The captures of `op` with at least one aligned dimension, in the order
/// of their first read.
llvm::SmallVector<AlignedCapture> getAlignedCaptures(mlir::Operation *op);

/// The sharding of an aligned capture of `op` (a linalg.generic) whose
/// first result is placed as `placed`: each aligned dimension takes the
/// axes of the result dimension its loop indexes, the others none.
ShardingAttr alignedSharding(mlir::Operation *op, ShardingAttr placed,
                             llvm::ArrayRef<int64_t> loopOfDim);

/// Factor axes of one placement of an op on one mesh.
using FactorAxes = llvm::SmallVector<llvm::SmallVector<AxisRefAttr>>;

/// Spreads a value's dimension shardings over the rule's factors (splitting
/// axes into sub-axes where a factor is smaller than an axis). Returns the
/// axes proposed for each factor; axes that cannot be placed are dropped.
FactorAxes proposeFactorAxes(const FactorRule &rule, unsigned valueIndex,
                             ShardingAttr sharding, MeshAttr mesh);

/// Removes factor assignments that cannot be expressed: an axis used by two
/// factors, sharded non-sum reductions, and minor factors of a dimension
/// whose more-major factors are not fully sharded.
void legalizeFactorAxes(const FactorRule &rule, FactorAxes &axes,
                        MeshAttr mesh);

/// The sharding of value `valueIndex` implied by a placement.
ShardingAttr deriveSharding(const FactorRule &rule, unsigned valueIndex,
                            const FactorAxes &axes,
                            mlir::FlatSymbolRefAttr meshName, MeshAttr mesh);

/// True when two shardings place data identically by construction: same
/// mesh, same dimension axes, same unreduced axes (open flags and
/// `replicated` do not move data).
bool isSameLayout(ShardingAttr a, ShardingAttr b);

} // namespace polymesh

#endif // POLYMESH_TRANSFORMS_SHARDINGRULES_H
