//===- PolymeshAttrs.h - Mesh and sharding attributes -----------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_DIALECT_POLYMESH_POLYMESHATTRS_H
#define POLYMESH_DIALECT_POLYMESH_POLYMESHATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectImplementation.h"

#include "polymesh/Dialect/Polymesh/PolymeshEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "polymesh/Dialect/Polymesh/PolymeshAttrs.h.inc"

#endif // POLYMESH_DIALECT_POLYMESH_POLYMESHATTRS_H
