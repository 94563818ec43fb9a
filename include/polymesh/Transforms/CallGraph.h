//===- CallGraph.h - Functions ordered callees first ------------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Propagation specializes every call site and the reference runs callees
// before their callers; both need the functions a set of roots reaches,
// callees first, and both refuse recursion with the same words, at the call
// that closes the cycle.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_TRANSFORMS_CALLGRAPH_H
#define POLYMESH_TRANSFORMS_CALLGRAPH_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace polymesh {

/// The functions with a body that `roots` reach through `func.call` (the
/// roots included), each after every function it calls. A call back into a
/// function still on the path fails with "is a recursive call (@f -> @g ->
/// @f)" at that call. A call of a declaration is passed to `onDeclaration`,
/// when given, and fails the walk when it does; declarations are not listed.
/// Iterative, so a long call chain does not exhaust the stack.
mlir::FailureOr<llvm::SmallVector<mlir::func::FuncOp>>
orderCalleesFirst(llvm::ArrayRef<mlir::func::FuncOp> roots,
                  mlir::SymbolTableCollection &symbols,
                  llvm::function_ref<mlir::LogicalResult(mlir::func::CallOp,
                                                         mlir::func::FuncOp)>
                      onDeclaration = {});

} // namespace polymesh

#endif // POLYMESH_TRANSFORMS_CALLGRAPH_H
