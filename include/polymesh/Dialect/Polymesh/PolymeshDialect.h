//===- PolymeshDialect.h - Polymesh dialect ---------------------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_DIALECT_POLYMESH_POLYMESHDIALECT_H
#define POLYMESH_DIALECT_POLYMESH_POLYMESHDIALECT_H

#include "mlir/IR/Dialect.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/RWMutex.h"

#include <tuple>

#include "polymesh/Dialect/Polymesh/PolymeshDialect.h.inc"

#endif // POLYMESH_DIALECT_POLYMESH_POLYMESHDIALECT_H
