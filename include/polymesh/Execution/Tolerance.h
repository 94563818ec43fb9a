//===- Tolerance.h - Comparing results with a derived float bound -*- C++
//-*-===//
//
// Part of Polymesh. No MLIR types in this API: the comparison and its bound
// are tested on hand-made tensors.
//
//===----------------------------------------------------------------------===//
//
// How `polymesh-run --verify` compares a sharded result with the reference
// (docs/execution.md, "How --verify compares floats"). Data movement and
// order-independent ops must match bit for bit. A float result that is a sum
// the sharded run adds in another order (a reduction over a sharded
// dimension whose partials a transfer, or the comparison, adds up) may
// differ by rounding; it passes when every element is within
//
//   bound = 2 * gamma_{n-1} * S + (f16/bf16: half an ulp of the value)
//
// where n is the number of terms, S = sum |term_i|, u the type's unit
// roundoff and gamma_k = k u / (1 - k u): the recursive-summation bound
// |fl(sum) - sum| <= gamma_{n-1} * S (any order, any tree: no term passes
// through more than n - 1 additions), once for the reference's order and
// once for the sharded one. The terms themselves are the same in both runs
// (they are computed before the reordered sum, bit for bit alike), so only
// the additions differ. S is computed by the reference itself, rounded: see
// SumBound.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_TOLERANCE_H
#define POLYMESH_EXECUTION_TOLERANCE_H

#include "polymesh/Execution/HostTensor.h"
#include "polymesh/Execution/MovementRunner.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace polymesh::execution {

/// The unit roundoff of a float type, half the distance from 1 to the next
/// value: f32 2^-24, f64 2^-53, f16 2^-11, bf16 2^-8. 0 for integers.
double unitRoundoff(ElementType type);

/// gamma_k = k u / (1 - k u); infinity when k u >= 1, where the standard
/// bound says nothing.
double gammaBound(int64_t k, double u);

/// Half the spacing of `type`'s values at |value| (subnormal spacing below
/// the smallest normal): the error of rounding a wider value once.
double halfUlp(ElementType type, double value);

/// The bound on |reference - sharded| for one element of a reordered sum
/// of `terms` terms whose magnitudes the reference summed to
/// `computedMagnitude` (in `type`, rounded: the exact S is at most
/// computedMagnitude / (1 - gamma_{n-1}), since every addition of positive
/// values loses at most a factor 1 - u), at the element's `value`
/// (the larger of both sides). Infinity when no bound follows (n u >= 1,
/// or a magnitude that is not finite).
double sumErrorBound(ElementType type, int64_t terms, double computedMagnitude,
                     double value);

/// The number of representable values of `type` from `a` to `b` (float
/// bits read as sign-magnitude integers); 0 for equal values and for +0 and
/// -0. Both must be finite.
uint64_t ulpDistance(ElementType type, const uint8_t *a, const uint8_t *b);

/// The element at `linear` of `tensor` as a double (exact for every type
/// but i64 beyond 2^53).
double elementAsDouble(const HostTensor &tensor, int64_t linear);

/// A result whose value is a sum over a sharded dimension that the sharded
/// run adds in another order than the reference.
struct SumBound {
  /// n: the number of terms of each element's sum (the product of the
  /// reduced dimensions' sizes).
  int64_t terms = 0;
  /// Per element of the result (its global shape and element type): the
  /// sum of |term_i| that the reference computes when it adds absolute
  /// values in place of the terms.
  HostTensor magnitudes{ElementType::F32, {}};
};

/// One tile (a device's box, or a reduction group's sum of partials).
struct TileComparison {
  int64_t device = 0;
  int64_t elements = 0;
  /// Elements whose bits differ from the reference.
  int64_t differing = 0;
  /// Elements beyond the bound (with exact comparison: every differing one).
  int64_t failing = 0;
};

/// Every tile of one result compared with the reference.
struct LeafComparison {
  /// Whether a SumBound was applied; otherwise the comparison is bit-exact.
  bool bounded = false;
  std::vector<TileComparison> tiles;
  int64_t elements = 0;
  int64_t differing = 0;
  int64_t failing = 0;
  /// Over the differing finite elements: the largest ulp distance, the
  /// largest |got - expected| / |expected| (infinity where expected is 0),
  /// and the largest |got - expected| / bound (bounded only).
  uint64_t maxUlps = 0;
  double maxRelativeError = 0;
  double maxBoundFraction = 0;
  /// The first failing element (tile order, then row-major), as before:
  /// "device 1: value at [0, 3]: expected ..., got ..."; bounded
  /// comparisons add "|diff| D > bound B". Also set when element types or
  /// shapes differ.
  std::optional<TileMismatch> firstFailure;
  std::string firstFailureDetail;

  bool passed() const { return !firstFailure; }
  /// "max 43 ulp, rel 3.9e-06, 8 of 8 elements differ, largest error 0.8%
  /// of its bound".
  std::string summary() const;
  /// The first failure, then how many elements fail in how many tiles, the
  /// tiles listed (at most 4), e.g. "device 1: value at [0, 3]: expected 1.5
  /// (0x3fc00000), got 1.75 (0x3fe00000) (3 of 64 elements differ, in 2 of
  /// 4 tiles: device 1 2 of 16, device 3 1 of 16)".
  std::string failureMessage() const;
};

/// Compares every tile of `actual` with the reference's box (partials of
/// unreduced axes summed first, as compareWithReference does): bit for bit
/// without `bound`, within the bound of each element with it. NaN matches
/// NaN under a bound (payloads may differ), infinities must be equal.
LeafComparison compareLeaf(const HostTensor &reference,
                           const ShardedTensor &actual,
                           const SumBound *bound = nullptr);

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_TOLERANCE_H
