//===- RandomLayout.h - Random meshes, shardings and reshards ---*- C++ -*-===//
//
// Part of Polymesh. Pure C++17: no MLIR types.
//
//===----------------------------------------------------------------------===//
//
// Deterministic generators of random planner inputs, shared by the property
// tests, the benchmarks and fuzzers. The generator is a self-contained
// SplitMix64 so a seed gives the same cases on every standard library.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_PLANNER_RANDOMLAYOUT_H
#define POLYMESH_PLANNER_RANDOMLAYOUT_H

#include "polymesh/Planner/Layout.h"
#include "polymesh/Planner/Planner.h"

#include <cstdint>
#include <vector>

namespace polymesh::planner {

/// SplitMix64: tiny, fast, and identical everywhere.
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  /// Uniform in [lo, hi] (inclusive); requires lo <= hi.
  int64_t uniform(int64_t lo, int64_t hi);
  /// True with probability `percent` / 100.
  bool chance(int percent) { return uniform(0, 99) < percent; }
  template <typename T> void shuffle(std::vector<T> &values) {
    for (size_t i = values.size(); i > 1; --i)
      std::swap(values[i - 1], values[uniform(0, i - 1)]);
  }

private:
  uint64_t state_;
};

struct RandomReshardOptions {
  /// Upper bound on devices per mesh (used when numDevices is 0).
  int64_t maxDevices = 64;
  /// When positive, both meshes have exactly this many devices.
  int64_t numDevices = 0;
  int maxRank = 3;
  int64_t maxExtent = 12;
  bool allowUnreduced = true;
  /// Percent of cases with a memory limit.
  int memoryLimitPercent = 30;
};

/// One random planner input.
struct ReshardCase {
  TensorLayout source;
  TensorLayout destination;
  int64_t elementBytes = 4;
  PlanOptions options;
};

/// A mesh of exactly `numDevices` devices over 1-3 random axes (sizes
/// multiply to numDevices; an occasional size-1 axis), with `deviceIds`
/// (empty: identity).
Mesh randomMesh(SplitMix64 &rng, int64_t numDevices,
                std::vector<int64_t> deviceIds = {});

/// A random valid sharding of a rank-`rank` tensor on `mesh`: axes split into
/// sub-axes, placed on random dims in random order, some left replicated,
/// some unreduced when allowed.
Sharding randomSharding(SplitMix64 &rng, const Mesh &mesh, size_t rank,
                        bool allowUnreduced);

/// A random source and destination (same mesh, same devices on other axes,
/// permuted, disjoint, overlapping, or a single device), shape, element size
/// and (sometimes) memory limit.
ReshardCase randomReshard(SplitMix64 &rng,
                          const RandomReshardOptions &options = {});

/// A random reshard that exchanges whole tiles, or nearly: one set of
/// devices (ids in order, shifted or shuffled; the destination mesh the
/// same axes or one axis over all devices, its ids sometimes shuffled),
/// every axis of each mesh on some dimension, the two shardings' dimensions
/// disjoint; a few cases split a dimension by both (no exchange) or leave
/// tiles empty. options.symbolicExchanges is set.
ReshardCase randomExchange(SplitMix64 &rng);

} // namespace polymesh::planner

#endif // POLYMESH_PLANNER_RANDOMLAYOUT_H
