//===- InputFill.h - Deterministic inputs per global element ----*- C++ -*-===//
//
// Part of Polymesh. No MLIR types in this API.
//
//===----------------------------------------------------------------------===//
//
// polymesh-run fills every function argument with values that depend only
// on the argument's position (its *stream* s) and each element's global
// row-major linear index g. The unsharded reference fills whole tensors; a
// device of a sharded run fills just its local tile from the same global
// indices, so both see the same inputs without ever materializing the
// global tensor on a device.
//
// The pattern (docs/execution.md has the same table):
//
//   h = ((g + 1000003 * s) * 2654435761) mod 2^32      (unsigned arithmetic)
//
//   f32, f64   (h >> 22) / 64 - 8      1024 multiples of 1/64 in [-8, 8)
//   f16, bf16  (h >> 24) / 32 - 4      256 multiples of 1/32 in [-4, 4)
//   i8         (h >> 28) - 8           [-8, 8)
//   i32        (h >> 16) - 32768       [-2^15, 2^15)
//   i64        h - 2^31                [-2^31, 2^31)
//   i1         h >> 31                 0 or 1 (false or true)
//
// Why this pattern:
// - Multiplicative hashing (Knuth's 2654435761, odd, close to 2^32 / phi)
//   takes the top bits of g * K, so neighbouring elements differ and no two
//   rows or tiles of a realistic tensor repeat: a tile delivered to the
//   wrong device, transposed or shifted shows up as a mismatch. A periodic
//   pattern such as (g * 37) % 1024 would repeat every 1024 elements, so
//   every row of a 4096x1024 tensor would be equal and misplaced rows would
//   pass unnoticed.
// - The stream offset keeps arguments of the same shape different, so a
//   swapped pair of operands (a - b against b - a) is caught.
// - Every float value is exact in its type (at most 9 significant bits for
//   f32/f64, 7 for f16/bf16), and so are the products of two of them in
//   f32 and f64. Sums of such products are exact as long as they stay below
//   2^24 / 4096 = 4096 in magnitude in f32, so a sharded reduction that adds
//   in another order still matches the reference bit for bit for moderate
//   sizes. In f16 and bf16 products and sums round; keeping reduction order
//   is then the sharded path's job.
// - Integers are centred on zero and small enough that the product of two
//   does not overflow their type.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_INPUTFILL_H
#define POLYMESH_EXECUTION_INPUTFILL_H

#include "polymesh/Execution/HostTensor.h"

#include <cstdint>
#include <vector>

namespace polymesh::execution {

/// h of the pattern above.
uint32_t fillHash(uint64_t globalIndex, uint32_t stream);

/// The value of element `globalIndex` of stream `stream` as a double (i1
/// gives 0 or 1). Every value of the pattern is exact in a double.
double fillValue(ElementType type, uint64_t globalIndex, uint32_t stream);

/// Writes that element in its in-memory encoding (elementSize(type) bytes).
void fillElement(ElementType type, uint64_t globalIndex, uint32_t stream,
                 void *dst);

/// The whole argument `stream` of the given type and shape.
HostTensor makeInput(ElementType type, const std::vector<int64_t> &shape,
                     uint32_t stream);

/// Fills `tile` as the part of a global tensor of shape `globalShape` whose
/// first element is the global index `lo` (a device's local tile). Elements
/// past the global tensor's bounds, the padding of a short trailing tile,
/// are zero. `lo` has the global rank and 0 <= lo <= globalShape in every
/// dimension (an empty trailing tile starts at the end).
void fillTile(HostTensor &tile, const std::vector<int64_t> &globalShape,
              const std::vector<int64_t> &lo, uint32_t stream);

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_INPUTFILL_H
