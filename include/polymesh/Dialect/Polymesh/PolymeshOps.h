//===- PolymeshOps.h - Polymesh operations ----------------------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_DIALECT_POLYMESH_POLYMESHOPS_H
#define POLYMESH_DIALECT_POLYMESH_POLYMESHOPS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "polymesh/Dialect/Polymesh/PolymeshAttrs.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"

#define GET_OP_CLASSES
#include "polymesh/Dialect/Polymesh/PolymeshOps.h.inc"

namespace polymesh {
/// Resolves `meshName` from `from` to the mesh it declares, or null.
MeshAttr lookupMesh(mlir::Operation *from, mlir::FlatSymbolRefAttr meshName);
/// Same, through a symbol table collection (cached lookups).
MeshAttr lookupMesh(mlir::SymbolTableCollection &symbolTable,
                    mlir::Operation *from, mlir::FlatSymbolRefAttr meshName);
/// The global polymesh.transfer that `op`'s plan function holds, or null
/// when the symbol does not name such a function.
TransferOp lookupExchangePlan(mlir::SymbolTableCollection &symbols,
                              ExchangeOp op);
} // namespace polymesh

#endif // POLYMESH_DIALECT_POLYMESH_POLYMESHOPS_H
