//===- HostTensor.h - Tensors in host memory --------------------*- C++ -*-===//
//
// Part of Polymesh. No MLIR types in this API: the sharded runner and the
// tests build and compare these without an MLIR context.
//
//===----------------------------------------------------------------------===//
//
// A HostTensor is a dense row-major tensor in host memory: an element type,
// a static shape and the raw bytes, laid out exactly as a memref with the
// identity layout that JIT-compiled code reads and writes. Comparisons are
// bit-exact: a sharded program is checked against its unsharded reference
// element by element, bits and all, so a NaN payload, a signed zero or a
// rounding difference is a mismatch.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_HOSTTENSOR_H
#define POLYMESH_EXECUTION_HOSTTENSOR_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace polymesh::execution {

/// Element types that host tensors (and so polymesh-run's function
/// arguments and results) support. i1 takes one byte per element holding 0
/// or 1, as LLVM stores an i1 in memory.
enum class ElementType { F32, F64, F16, BF16, I1, I8, I32, I64 };

/// Bytes of one element in memory.
int64_t elementSize(ElementType type);
/// "f32", "f64", "f16", "bf16", "i1", "i8", "i32", "i64": the MLIR spelling.
const char *elementTypeName(ElementType type);
/// The element type of an MLIR spelling, if it is one of the above.
std::optional<ElementType> parseElementType(const std::string &name);

/// "4x8xf32"; "f32" for rank 0.
std::string formatTensorType(ElementType type,
                             const std::vector<int64_t> &shape);

class HostTensor {
public:
  /// A zero-filled tensor. Dimensions must be non-negative.
  HostTensor(ElementType type, std::vector<int64_t> shape);

  ElementType getElementType() const { return type; }
  const std::vector<int64_t> &getShape() const { return shape; }
  int64_t getRank() const { return static_cast<int64_t>(shape.size()); }
  int64_t getNumElements() const;
  int64_t getSizeInBytes() const { return static_cast<int64_t>(bytes.size()); }

  /// The elements, row-major. Storage comes from operator new, so it is
  /// aligned for every element type above.
  uint8_t *getData() { return bytes.data(); }
  const uint8_t *getData() const { return bytes.data(); }

  /// Row-major linear offset of `index` (one entry per dimension, in
  /// bounds), in elements.
  int64_t linearize(const std::vector<int64_t> &index) const;
  /// The inverse of linearize.
  std::vector<int64_t> delinearize(int64_t linear) const;

  /// The box [lo, hi) (half-open per dimension, as the planner's boxes) as
  /// a tensor of its own with shape hi - lo. The bounds must lie in the
  /// tensor and satisfy lo <= hi.
  HostTensor extractBox(const std::vector<int64_t> &lo,
                        const std::vector<int64_t> &hi) const;

  /// The element at `linear` as text: the value, then its bits in hex
  /// (floats) so that values that print alike still differ visibly, e.g.
  /// "1.5 (0x3fc00000)", "-0 (0x8000)", "7", "true".
  std::string formatElement(int64_t linear) const;

  /// "4x8xf32 [0, 1.5, ...]" with at most `maxElements` elements: for test
  /// failures and debugging.
  std::string toString(int64_t maxElements = 16) const;

private:
  ElementType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

/// The first difference between two tensors.
struct Mismatch {
  /// Why they differ: "element type", "shape" or "value".
  std::string kind;
  /// For values: the first differing element, row-major.
  std::vector<int64_t> index;
  int64_t linearIndex = -1;
  /// For values: both elements as HostTensor::formatElement prints them;
  /// otherwise both element types or both shapes.
  std::string expected;
  std::string actual;

  /// One line, e.g. "value at [2, 3] (linear 11): expected 1.5 (0x3fc00000),
  /// got 1.75 (0x3fe00000)".
  std::string message() const;
};

/// Compares element type, shape and every element's bits. Returns the first
/// difference (row-major order), or nothing when the tensors are identical.
std::optional<Mismatch> compareBitExact(const HostTensor &expected,
                                        const HostTensor &actual);

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_HOSTTENSOR_H
