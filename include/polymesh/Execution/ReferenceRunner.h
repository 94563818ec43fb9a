//===- ReferenceRunner.h - Unsharded reference execution --------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The reference a sharded run is verified against: the same functions with
// every sharding removed, lowered by upstream passes only, JIT-compiled and
// run on one device (this process). Nothing of Polymesh's own lowering is
// involved, so a bug there cannot hide in the reference.
//
// Stripping sharding: `polymesh.sharding_constraint`, `polymesh.reshard` and
// `polymesh.transfer` are identities on values and are replaced by their
// operand; `polymesh.mesh` ops and every `polymesh.*` attribute (on ops,
// function arguments and results, and the module) are dropped. Any other
// polymesh op is an error.
//
// Lowering (buildReferenceLoweringPipeline): tosa to linalg/arith/tensor/scf,
// elementwise tensor ops to linalg, one-shot bufferization across function
// boundaries with identity layouts (arguments read-only), results turned
// into out-parameters, ownership-based buffer deallocation, linalg to loops,
// f16/bf16 arithmetic emulated in f32 (bf16 conversions expanded to integer
// code, so no runtime library is needed), then arith, math, memref, func, cf
// and index to LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_REFERENCERUNNER_H
#define POLYMESH_EXECUTION_REFERENCERUNNER_H

#include "polymesh/Execution/HostTensor.h"
#include "polymesh/Execution/JitModule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir {
class DialectRegistry;
class OpPassManager;
} // namespace mlir

namespace polymesh::execution {

struct TensorSignature {
  ElementType elementType;
  std::vector<int64_t> shape;
};

struct FunctionSignature {
  std::vector<TensorSignature> arguments;
  std::vector<TensorSignature> results;
};

/// "file:line:col: " of the first file location in `loc` (the file's name
/// without its directory, as FileCheck tests match it), or "" for none.
std::string formatLocationPrefix(mlir::Location loc);

/// The signature entry of `type` when it is a static-shaped ranked tensor
/// (without encoding) of a supported element type; otherwise why not.
llvm::Expected<TensorSignature> getTensorSignature(mlir::Type type);

/// The signature of `func` when every argument and result is a static-shaped
/// ranked tensor (without encoding) of a supported element type; otherwise
/// an error naming the first argument or result that is not.
llvm::Expected<FunctionSignature> getFunctionSignature(mlir::func::FuncOp func);

/// Registers the dialects, bufferization and deallocation models and LLVM IR
/// translations that stripping, lowering and JIT compilation need.
/// ReferenceRunner::create appends them to the module's context itself.
void registerReferenceDialects(mlir::DialectRegistry &registry);

/// Removes sharding from `module` in place (see the file comment). Fails,
/// with an error on the op, on a polymesh op that is not an identity.
mlir::LogicalResult stripSharding(mlir::ModuleOp module);

/// Refuses, before anything is lowered, what the reference cannot run or
/// whose lowering does not end (docs/limits.md): a static type whose
/// element count or byte size overflows int64, a recursive call graph, a
/// call of a function without a body, and tensors inside regions (upstream
/// bufferization is exponential in nested `scf.execute_region`s; the CPU
/// pipeline's partitioning refuses them too). Checks `functions` (all
/// public functions with a body when empty) and every function they call;
/// each error goes to the context's handler at the op's location.
mlir::LogicalResult checkReferenceLimits(mlir::ModuleOp module,
                                         llvm::ArrayRef<std::string> functions);

/// Upstream passes from a stripped tensor program to the LLVM dialect.
void buildReferenceLoweringPipeline(mlir::OpPassManager &pm);

class ReferenceRunner {
public:
  /// Clones `module`, strips sharding, lowers and JIT-compiles the clone.
  /// `module` is not modified. With `functions` empty, all public functions
  /// with a body are selected; otherwise those named (each must exist and
  /// have a body). Functions that are not selected, or whose signature is
  /// not supported, are dropped before lowering unless a selected function
  /// calls them, so an op they contain cannot fail the compilation.
  /// Diagnostics (stripping, lowering, unlowered ops) go to the context's
  /// diagnostic handler at the ops' locations; the error says which step
  /// failed.
  static llvm::Expected<std::unique_ptr<ReferenceRunner>>
  create(mlir::ModuleOp module, llvm::ArrayRef<std::string> functions = {},
         const JitOptions &options = {});

  /// Names of the selected functions: all public ones in module order, or
  /// those asked for in that order. getSignature says whether each can run.
  const std::vector<std::string> &getFunctionNames() const { return names; }

  /// The signature of `name`, or why it cannot be run (unknown name, or an
  /// unsupported argument or result type).
  llvm::Expected<FunctionSignature> getSignature(llvm::StringRef name) const;

  /// Runs `name` on `inputs` (one per argument, element types and shapes as
  /// in the signature, checked) and returns one tensor per result.
  llvm::Expected<std::vector<HostTensor>>
  run(llvm::StringRef name, llvm::ArrayRef<HostTensor> inputs);

private:
  ReferenceRunner() = default;

  std::unique_ptr<JitModule> jit;
  std::vector<std::string> names;
  /// Per name: the signature, or the reason the function cannot be run.
  llvm::StringMap<FunctionSignature> signatures;
  llvm::StringMap<std::string> unsupported;
};

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_REFERENCERUNNER_H
