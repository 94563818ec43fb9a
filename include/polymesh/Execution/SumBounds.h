//===- SumBounds.h - Which results are reordered float sums -----*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The MLIR side of `--verify`'s bounded comparison (Tolerance.h): which
// results of a planned function are float sums that the sharded run adds in
// another order than the reference, and the magnitudes S = sum |term_i| of
// their elements.
//
// A result is a *reordered sum* when, walking back from the return through
// ops that only move values (transfers, sharding constraints, reshapes,
// transposes, slices, copies), it reaches a linalg op whose combiner adds
// (`arith.addf` of the output and a term) over reduction loops, and whose
// planned result holds partial sums (`unreduced` axes): the reduced
// dimension is sharded, so each device adds its own terms and a transfer (or
// the comparison) adds the partials. Anything else (integers, max/min, a sum
// that feeds further arithmetic) is compared bit for bit.
//
// The magnitudes come from the reference itself, run a second time with
// every such op's combiner adding |term| instead of term: upstream values
// are computed exactly as in the reference, so |term_i| is exact and only
// the positive sum rounds (Tolerance.h accounts for that). Movement after
// the sum moves the magnitudes the same way.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_SUMBOUNDS_H
#define POLYMESH_EXECUTION_SUMBOUNDS_H

#include "polymesh/Execution/HostTensor.h"
#include "polymesh/Execution/JitModule.h"
#include "polymesh/Execution/Tolerance.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace polymesh::execution {

/// A result that is a reordered float sum.
struct ReorderedSum {
  /// n: the product of the reduction loops' sizes.
  int64_t terms = 0;
  /// The sum's op: its position among the linalg ops of the function, in
  /// walk order (tagReductions), and which of its results.
  int64_t opIndex = -1;
  unsigned resultNumber = 0;
  /// Where the op is, "file:line:col" (empty when unknown): for messages.
  std::string location;
};

/// The attribute that tagReductions sets.
constexpr const char *kReductionIndexAttrName = "polymesh_run.op_index";

/// Numbers every linalg op of every function of `module` (walk order,
/// per function) with kReductionIndexAttrName, so that an op can be found
/// again in the unplanned module after propagation has rewritten around it.
void tagReductions(mlir::ModuleOp module);
/// Removes those tags.
void untagReductions(mlir::ModuleOp module);

/// Per result of the planned, tagged `func`: the reordered sum it is, if
/// any.
std::vector<std::optional<ReorderedSum>>
findReorderedSums(mlir::func::FuncOp func);

/// Every float sum over a sharded dimension at the top level of the
/// propagated, tagged `func` (not inside control flow), in program order:
/// the sums a lock-step --verify checks where they are computed, then
/// continues from (docs/execution.md). A sum that is also a result is one
/// of them.
std::vector<ReorderedSum> findPartialSums(mlir::func::FuncOp func);

/// Appends to the propagated, tagged `func` one result per sum of `sums`:
/// the sum moved to its own sharding without unreduced axes (planning adds
/// the all-reduce), so that a sharded run yields the values that its
/// devices go on with. Fails where the function takes no more results.
mlir::LogicalResult returnPartialSums(mlir::func::FuncOp func,
                                      llvm::ArrayRef<ReorderedSum> sums);

/// A copy of the unplanned `module` in which function `name` takes one more
/// argument per sum of `sums`, after its own, that replaces every use of the
/// sum, and returns each sum after its own results: the reference that
/// continues from the sharded run's sums. Calls are specialized first, as
/// in the sharded program, so that the sums' numbers match.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
injectPartialSums(mlir::ModuleOp module, llvm::StringRef name,
                  llvm::ArrayRef<ReorderedSum> sums);

/// The reference of a lock-step comparison: per result of a sharded run
/// that returned `sums` after the function's `numProgramResults` own
/// results, what the reference computes when it continues from the sharded
/// sums (injectPartialSums), and for each sum the bound of its reordered
/// additions, from magnitudes computed in the same continued copy.
struct LockStepReference {
  std::vector<HostTensor> results;
  std::vector<std::optional<SumBound>> bounds;
};

/// Runs function `name` of the unplanned `module` continued from
/// `shardedSums` (the sharded run's returned sums, assembled), on
/// `inputs`. Errors: the sums or the module do not match, the reference
/// fails to build or run.
llvm::Expected<LockStepReference> continueFromPartialSums(
    mlir::ModuleOp module, llvm::StringRef name,
    llvm::ArrayRef<ReorderedSum> sums, size_t numProgramResults,
    llvm::ArrayRef<HostTensor> shardedSums, llvm::ArrayRef<HostTensor> inputs,
    const JitOptions &jit = {});

/// Runs function `name` of the unplanned `module` (not modified) on
/// `inputs` with every op named in `sums` adding |term|, and returns one
/// SumBound per result with a sum. Errors: an op that cannot be rewritten,
/// or the reference failing to build or run.
llvm::Expected<std::vector<std::optional<SumBound>>>
computeSumBounds(mlir::ModuleOp module, llvm::StringRef name,
                 llvm::ArrayRef<std::optional<ReorderedSum>> sums,
                 llvm::ArrayRef<HostTensor> inputs);

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_SUMBOUNDS_H
