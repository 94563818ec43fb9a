//===- Passes.h - Polymesh passes -------------------------------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_TRANSFORMS_PASSES_H
#define POLYMESH_TRANSFORMS_PASSES_H

#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Transforms/InlineCalls.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace polymesh {

#define GEN_PASS_DECL
#include "polymesh/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "polymesh/Transforms/Passes.h.inc"

} // namespace polymesh

#endif // POLYMESH_TRANSFORMS_PASSES_H
