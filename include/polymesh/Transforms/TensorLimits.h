//===- TensorLimits.h - Types too large to count in int64 -------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Tensor types may have any int64 extents, so a type's element count or its
// size in bytes can overflow int64 (`tensor<4294967296x4294967296xf32>`).
// Code that allocates or lowers such a type computes sizes that wrap around
// (an empty allocation, a crash in upstream's constant lowering), so
// whatever needs sizes refuses them first: --polymesh-partition and
// polymesh-run (docs/limits.md).
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_TRANSFORMS_TENSORLIMITS_H
#define POLYMESH_TRANSFORMS_TENSORLIMITS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

#include <optional>

namespace polymesh {

/// The element count of a static `type`, or nullopt when it overflows int64
/// (or an extent is negative).
std::optional<int64_t> checkedElementCount(mlir::ShapedType type);

/// The bytes of a static `type` (sub-byte elements take a byte each, as
/// LLVM stores them), or nullopt when they overflow int64.
std::optional<int64_t> checkedByteSize(mlir::ShapedType type);

/// Emits an error at the first op of `root` (itself included) whose result,
/// block argument or function signature has a static shaped type whose
/// element count or byte size overflows int64, and fails. Only the first is
/// reported: the others are almost always the same type again.
mlir::LogicalResult checkTensorSizes(mlir::Operation *root);

} // namespace polymesh

#endif // POLYMESH_TRANSFORMS_TENSORLIMITS_H
