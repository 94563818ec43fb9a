//===- Saturating.h - int64 arithmetic that saturates -----------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Byte and element counts add up over devices and values; they saturate at
// INT64_MAX instead of wrapping around, so that a limit check on the sum
// still refuses (a tensor of 2^61 f32 replicated on a few devices already
// needs more than 2^63 bytes). Pure C++: the planner uses it too.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_SUPPORT_SATURATING_H
#define POLYMESH_SUPPORT_SATURATING_H

#include <cstdint>
#include <limits>

namespace polymesh {

/// a + b, or INT64_MAX when that overflows.
inline int64_t saturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  return __builtin_add_overflow(a, b, &sum)
             ? std::numeric_limits<int64_t>::max()
             : sum;
}

/// a * b, or INT64_MAX when that overflows.
inline int64_t saturatingMul(int64_t a, int64_t b) {
  int64_t product;
  return __builtin_mul_overflow(a, b, &product)
             ? std::numeric_limits<int64_t>::max()
             : product;
}

} // namespace polymesh

#endif // POLYMESH_SUPPORT_SATURATING_H
