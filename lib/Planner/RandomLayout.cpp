//===- RandomLayout.cpp - Random meshes, shardings and reshards -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/RandomLayout.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>

namespace polymesh::planner {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int64_t SplitMix64::uniform(int64_t lo, int64_t hi) {
  uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(next() % span);
}

namespace {

std::vector<int64_t> primeFactors(int64_t n) {
  std::vector<int64_t> factors;
  for (int64_t p = 2; p * p <= n; ++p)
    while (n % p == 0) {
      factors.push_back(p);
      n /= p;
    }
  if (n > 1)
    factors.push_back(n);
  return factors;
}

/// Groups the prime factors of n into `parts` random products (some may be
/// 1), in random order.
std::vector<int64_t> randomFactorization(SplitMix64 &rng, int64_t n,
                                         int parts) {
  std::vector<int64_t> sizes(parts, 1);
  for (int64_t p : primeFactors(n))
    sizes[rng.uniform(0, parts - 1)] *= p;
  return sizes;
}

/// A device count in [1, max] that factors into small axes.
int64_t randomDeviceCount(SplitMix64 &rng, int64_t max) {
  static const int64_t kSizes[] = {1, 2, 2, 2, 3, 4, 4, 5, 8};
  int64_t count = 1;
  // Single devices are legal meshes, but a few percent of them suffice.
  int axes = rng.chance(8) ? 0 : static_cast<int>(rng.uniform(1, 3));
  for (int i = 0; i < axes; ++i) {
    int64_t size = kSizes[rng.uniform(0, 8)];
    if (count * size <= max)
      count *= size;
  }
  return count;
}

/// `count` distinct ids: identity order, a permutation of 0..count-1, or
/// drawn from a larger range.
std::vector<int64_t> randomIds(SplitMix64 &rng, int64_t count,
                               int64_t rangeEnd) {
  std::vector<int64_t> ids(count);
  std::iota(ids.begin(), ids.end(), 0);
  switch (rng.uniform(0, 2)) {
  case 0:
    return {};
  case 1:
    rng.shuffle(ids);
    return ids;
  default: {
    std::vector<int64_t> pool(std::max(rangeEnd, count));
    std::iota(pool.begin(), pool.end(), 0);
    rng.shuffle(pool);
    pool.resize(count);
    return pool;
  }
  }
}

std::vector<int64_t> idsOf(const Mesh &mesh) {
  std::vector<int64_t> ids;
  for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p)
    ids.push_back(mesh.deviceAt(p));
  return ids;
}

} // namespace

Mesh randomMesh(SplitMix64 &rng, int64_t numDevices,
                std::vector<int64_t> deviceIds) {
  static const char *kNames[] = {"a", "b", "c", "d"};
  Mesh mesh;
  int parts = static_cast<int>(rng.uniform(1, 3));
  std::vector<int64_t> sizes = randomFactorization(rng, numDevices, parts);
  // Drop most size-1 axes, but keep one now and then: they are legal.
  std::vector<int64_t> kept;
  for (int64_t size : sizes)
    if (size > 1 || rng.chance(15))
      kept.push_back(size);
  if (numDevices == 1 && rng.chance(50))
    kept.clear();
  for (size_t i = 0; i < kept.size(); ++i)
    mesh.axes.push_back({kNames[i], kept[i]});
  mesh.deviceIds = std::move(deviceIds);
  return mesh;
}

Sharding randomSharding(SplitMix64 &rng, const Mesh &mesh, size_t rank,
                        bool allowUnreduced) {
  Sharding sharding = Sharding::replicatedOfRank(rank);
  for (size_t a = 0; a < mesh.axes.size(); ++a) {
    int64_t size = mesh.axes[a].size;
    // Split the axis into consecutive factors (sub-axes) now and then.
    std::vector<int64_t> factors = {size};
    if (rng.chance(30) && primeFactors(size).size() > 1)
      factors = randomFactorization(rng, size, 2);
    std::vector<AxisRef> refs;
    int64_t pre = 1;
    for (int64_t factor : factors) {
      if (factor > 1)
        refs.push_back({static_cast<int>(a), pre, factor});
      pre *= factor;
    }
    if (refs.empty())
      refs.push_back(AxisRef::whole(mesh, static_cast<int>(a)));
    for (const AxisRef &ref : refs) {
      int roll = static_cast<int>(rng.uniform(0, 99));
      if (rank > 0 && roll < 55)
        sharding.dims[rng.uniform(0, rank - 1)].axes.push_back(ref);
      else if (allowUnreduced && roll < 70)
        sharding.unreduced.push_back(ref);
      else if (roll < 75)
        sharding.replicated.push_back(ref);
    }
  }
  for (DimSharding &dim : sharding.dims)
    rng.shuffle(dim.axes);
  return sharding;
}

namespace {
/// The case of layouts the generators built. They build only valid ones; a
/// failure is a bug in them or in the layout math, and no caller could make
/// sense of the case.
ReshardCase validCase(const char *generator, const Mesh &source,
                      const Sharding &sourceSharding, const Mesh &destination,
                      const Sharding &destinationSharding,
                      const std::vector<int64_t> &shape, int64_t elementBytes) {
  absl::StatusOr<TensorLayout> src =
      TensorLayout::create(source, sourceSharding, shape);
  absl::StatusOr<TensorLayout> dst =
      TensorLayout::create(destination, destinationSharding, shape);
  if (!src.ok() || !dst.ok()) {
    std::fprintf(stderr, "%s built an invalid layout: %s\n", generator,
                 (src.ok() ? dst.status() : src.status()).ToString().c_str());
    std::abort();
  }
  return ReshardCase{*std::move(src), *std::move(dst), elementBytes, {}};
}
} // namespace

ReshardCase randomReshard(SplitMix64 &rng,
                          const RandomReshardOptions &options) {
  int64_t exact = options.numDevices;
  int64_t maxDevices = exact > 0 ? exact : options.maxDevices;
  int64_t srcCount = exact > 0 ? exact : randomDeviceCount(rng, maxDevices);
  Mesh source =
      randomMesh(rng, srcCount, randomIds(rng, srcCount, 2 * maxDevices));

  Mesh destination;
  int mode = static_cast<int>(rng.uniform(0, exact > 0 ? 3 : 5));
  switch (mode) {
  case 0: // Same mesh.
    destination = source;
    break;
  case 1: { // Same devices, other axes and order.
    std::vector<int64_t> ids = idsOf(source);
    if (rng.chance(50))
      rng.shuffle(ids);
    destination = randomMesh(rng, srcCount, ids);
    break;
  }
  case 2: { // Same axes, reversed device order.
    std::vector<int64_t> ids = idsOf(source);
    std::reverse(ids.begin(), ids.end());
    destination = source;
    destination.deviceIds = ids;
    break;
  }
  case 3: { // Disjoint devices (a pipeline stage further on).
    int64_t count = exact > 0 ? exact : randomDeviceCount(rng, maxDevices);
    int64_t offset = 0;
    for (int64_t id : idsOf(source))
      offset = std::max(offset, id + 1);
    std::vector<int64_t> ids(count);
    std::iota(ids.begin(), ids.end(), offset);
    rng.shuffle(ids);
    destination = randomMesh(rng, count, ids);
    break;
  }
  case 4: { // Overlapping device sets.
    int64_t count = randomDeviceCount(rng, maxDevices);
    destination =
        randomMesh(rng, count, randomIds(rng, count, srcCount + count));
    if (destination.deviceIds.empty())
      destination.deviceIds = idsOf(destination);
    break;
  }
  default: { // A single device, inside the source mesh or not.
    int64_t id = rng.chance(50) ? idsOf(source)[rng.uniform(0, srcCount - 1)]
                                : 2 * maxDevices + 1;
    destination = randomMesh(rng, 1, {id});
    break;
  }
  }

  // Scalars are device-equivalent on any two meshes with the same devices;
  // keep them rare so the cases exercise tiles.
  size_t rank = options.maxRank == 0 || rng.chance(5)
                    ? 0
                    : static_cast<size_t>(rng.uniform(1, options.maxRank));
  std::vector<int64_t> shape(rank);
  for (int64_t &extent : shape)
    extent = rng.chance(3) ? 0 : rng.uniform(1, options.maxExtent);
  Sharding srcSharding =
      randomSharding(rng, source, rank, options.allowUnreduced);
  Sharding dstSharding =
      mode == 0 && rng.chance(15)
          ? srcSharding
          : randomSharding(rng, destination, rank, options.allowUnreduced);
  static const int64_t kElementBytes[] = {1, 2, 4, 8};
  int64_t elementBytes = kElementBytes[rng.uniform(0, 3)];

  ReshardCase result = validCase("randomReshard", source, srcSharding,
                                 destination, dstSharding, shape, elementBytes);
  if (rng.chance(options.memoryLimitPercent)) {
    int64_t elements = 1;
    for (int64_t extent : shape)
      elements *= extent;
    int64_t limitElements =
        rng.chance(20) ? rng.uniform(1, 4)
                       : rng.uniform(1, std::max<int64_t>(2, elements));
    result.options.memoryLimitBytes = limitElements * elementBytes;
  }
  return result;
}

ReshardCase randomExchange(SplitMix64 &rng) {
  std::vector<int64_t> sizes;
  int64_t n = 1;
  for (int64_t axes = rng.uniform(1, 3); axes > 0; --axes) {
    sizes.push_back(rng.uniform(2, 4));
    n *= sizes.back();
  }
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t how = rng.uniform(0, 2);
  if (how == 1)
    for (int64_t &id : ids)
      id += 5;
  if (how == 2)
    rng.shuffle(ids);
  Mesh source;
  for (size_t a = 0; a < sizes.size(); ++a)
    source.axes.push_back(
        {std::string(1, static_cast<char>('a' + a)), sizes[a]});
  source.deviceIds = ids;
  // The destination mesh: the same axes, or all devices on one axis.
  Mesh destination;
  if (rng.chance(50))
    destination.axes = source.axes;
  else
    destination.axes = {{"p", n}};
  destination.deviceIds = ids;
  if (rng.chance(25))
    rng.shuffle(destination.deviceIds);
  int64_t rank = rng.uniform(2, 4);
  // Source axes on the front dims, destination axes on the back ones;
  // overlapping in a few cases (no exchange then).
  bool overlap = rng.chance(10);
  int64_t half = rank / 2;
  std::vector<int64_t> split(rank, 1);
  auto place = [&](const Mesh &mesh, int64_t lo, int64_t hi) {
    Sharding sharding = Sharding::replicatedOfRank(rank);
    std::vector<int> order(mesh.axes.size());
    std::iota(order.begin(), order.end(), 0);
    rng.shuffle(order);
    for (int a : order) {
      int64_t d = rng.uniform(lo, hi);
      sharding.dims[d].axes.push_back(AxisRef::whole(mesh, a));
      split[d] *= mesh.axes[a].size;
    }
    return sharding;
  };
  Sharding sourceSharding = place(source, 0, overlap ? rank - 1 : half - 1);
  std::vector<int64_t> sourceSplit = split;
  split.assign(rank, 1);
  Sharding destinationSharding =
      place(destination, overlap ? 0 : half, rank - 1);
  std::vector<int64_t> shape(rank);
  for (int64_t d = 0; d < rank; ++d) {
    int64_t most = std::max(sourceSplit[d], split[d]);
    shape[d] = most * rng.uniform(1, 3);
    if (rng.chance(15))
      shape[d] += rng.uniform(-most + 1, most - 1);
  }
  ReshardCase result = validCase("randomExchange", source, sourceSharding,
                                 destination, destinationSharding, shape,
                                 rng.chance(50) ? int64_t(4) : int64_t(2));
  result.options.symbolicExchanges = true;
  return result;
}

} // namespace polymesh::planner
