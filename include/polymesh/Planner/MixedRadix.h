//===- MixedRadix.h - Sequences as mixed-radix patterns ---------*- C++ -*-===//
//
// Part of Polymesh. Pure C++17: no MLIR types.
//
//===----------------------------------------------------------------------===//
//
// A sequence v(0..n-1) of integer vectors is a mixed-radix (iota) pattern
// when v(k) = v(0) + sum over digits of ((k / weight) % count) * delta: the
// pattern of XLA's iota replica groups, and of where the chunks of an
// all-to-all lie when a mesh's axes are listed out of order. The schedule
// reads an exchange's chunk offsets this way (DeviceSchedule.cpp), and the
// conversion reads a group's ranks off its members' positions
// (ExchangeTables.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_PLANNER_MIXEDRADIX_H
#define POLYMESH_PLANNER_MIXEDRADIX_H

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace polymesh::planner {

/// One digit of k: (k / weight) % count steps of `delta` each.
struct MixedRadixDigit {
  int64_t count = 1, weight = 1;
  std::vector<int64_t> delta;
};

/// The digits of `valueAt(0..n-1)` (each a vector of one length), least
/// significant first: the first `weight` values repeat `count` times, each
/// block `delta` past the last, and so on outwards ({1, 3, 5, 7}: one digit
/// of count 4, delta 2). Nullopt where the values are no such pattern or a
/// digit does not move (two k with one value). O(n x rank).
template <typename ValueAt>
std::optional<std::vector<MixedRadixDigit>> mixedRadixDigits(int64_t n,
                                                             ValueAt valueAt) {
  std::vector<std::vector<int64_t>> values;
  values.reserve(n);
  for (int64_t k = 0; k < n; ++k)
    values.push_back(valueAt(k));
  size_t rank = values.empty() ? 0 : values.front().size();
  std::vector<MixedRadixDigit> digits;
  int64_t inner = 1;
  while (inner < n) {
    MixedRadixDigit digit{1, inner, std::vector<int64_t>(rank)};
    for (size_t d = 0; d < rank; ++d)
      digit.delta[d] = values[inner][d] - values[0][d];
    if (std::all_of(digit.delta.begin(), digit.delta.end(),
                    [](int64_t x) { return x == 0; }))
      return std::nullopt;
    // Block t (values t*inner .. (t+1)*inner - 1) is block 0 moved t times.
    auto repeats = [&](int64_t t) {
      for (int64_t i = 0; i < inner; ++i)
        for (size_t d = 0; d < rank; ++d)
          if (values[t * inner + i][d] != values[i][d] + t * digit.delta[d])
            return false;
      return true;
    };
    while ((digit.count + 1) * inner <= n && repeats(digit.count))
      ++digit.count;
    if (digit.count == 1)
      return std::nullopt;
    inner *= digit.count;
    digits.push_back(std::move(digit));
  }
  if (inner != n)
    return std::nullopt;
  return digits;
}

} // namespace polymesh::planner

#endif // POLYMESH_PLANNER_MIXEDRADIX_H
