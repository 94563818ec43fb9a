//===- PlannerFuzzer.cpp - libFuzzer target: the planner API --------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// polymesh-fuzz-planner: bytes -> one reshard (two meshes with any device
// ids, shardings with sub-axes, replicated and unreduced axes, a shape, an
// element size and a memory limit) -> planReshard -> the host-buffer
// simulation (Simulate.h). Any wrong destination element, any byte moved
// beyond the lower bound, a staging peak over the limit, or a plan refused
// for an input that Planner.h says it accepts, traps with the case printed.
//
// Most inputs are decoded field by field, mirroring RandomLayout.cpp's
// generator but with every choice read from the bytes: a small mutation then
// makes a small change to the case, which lets libFuzzer's coverage feedback
// steer (a hash of the bytes fed to the generator would make every mutation
// a new random case). The decoder also builds what the generator never does
// (raw sub-axes and device ids, which TensorLayout::create must reject
// cleanly; odd element sizes and limits). Inputs starting with 0xff instead
// seed RandomLayout.h's own generator, so its whole distribution is reached.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Layout.h"
#include "polymesh/Planner/Planner.h"
#include "polymesh/Planner/RandomLayout.h"
#include "polymesh/Planner/Simulate.h"
#include "polymesh/Planner/TransferPlan.h"

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

using namespace polymesh::planner;

namespace {

// Bounds that keep one run in the milliseconds: the simulation touches every
// element of every device's tile.
constexpr int64_t kMaxDevices = 64;
constexpr int64_t kMaxElements = 4096;

/// Draws every choice from the fuzzer's bytes; once they run out, every
/// choice is its smallest value, so short inputs are small cases.
class Decoder {
public:
  Decoder(const uint8_t *data, size_t size) : fdp_(data, size) {}

  int64_t range(int64_t lo, int64_t hi) {
    return fdp_.ConsumeIntegralInRange<int64_t>(lo, hi);
  }
  bool flag() { return fdp_.ConsumeBool(); }
  template <typename T> const T &pick(const std::vector<T> &values) {
    return values[range(0, static_cast<int64_t>(values.size()) - 1)];
  }
  template <typename T> void shuffle(std::vector<T> &values) {
    for (size_t i = values.size(); i > 1; --i)
      std::swap(values[i - 1], values[range(0, i - 1)]);
  }
  uint64_t u64() { return fdp_.ConsumeIntegral<uint64_t>(); }

private:
  FuzzedDataProvider fdp_;
};

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

std::vector<int64_t> idsOf(const Mesh &mesh) {
  std::vector<int64_t> ids;
  for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p)
    ids.push_back(mesh.deviceAt(p));
  return ids;
}

/// Axes whose sizes multiply to at most kMaxDevices.
std::vector<MeshAxis> decodeAxes(Decoder &d) {
  static const char *kNames[] = {"a", "b", "c", "d"};
  static const std::vector<int64_t> kSizes = {1, 2, 2, 3, 4, 4, 5, 6, 8, 16};
  std::vector<MeshAxis> axes;
  int64_t devices = 1;
  for (int64_t i = 0, n = d.range(0, 4); i < n; ++i) {
    int64_t size = d.flag() ? d.pick(kSizes) : d.range(1, 12);
    if (devices * size > kMaxDevices)
      size = 1;
    devices *= size;
    axes.push_back({kNames[i], size});
  }
  return axes;
}

/// Device ids for `count` devices: the identity, a permutation, distinct ids
/// from a wider range, or raw ids (possibly invalid, which the layout must
/// reject).
std::vector<int64_t> decodeIds(Decoder &d, int64_t count) {
  std::vector<int64_t> ids(count);
  std::iota(ids.begin(), ids.end(), 0);
  switch (d.range(0, 3)) {
  case 0:
    return {};
  case 1:
    d.shuffle(ids);
    return ids;
  case 2: {
    std::vector<int64_t> pool(count + d.range(0, count + 8));
    std::iota(pool.begin(), pool.end(), 0);
    d.shuffle(pool);
    pool.resize(count);
    return pool;
  }
  default:
    for (int64_t &id : ids)
      id = d.range(-1, 2 * kMaxDevices);
    return ids;
  }
}

Mesh decodeMesh(Decoder &d) {
  Mesh mesh;
  mesh.axes = decodeAxes(d);
  mesh.deviceIds = decodeIds(d, mesh.numDevices());
  return mesh;
}

/// A mesh of `source`'s devices or others, the way reshards relate meshes
/// in practice (RandomLayout.cpp's modes, plus an unrelated mesh).
Mesh decodeDestinationMesh(Decoder &d, const Mesh &source) {
  switch (d.range(0, 6)) {
  case 0: // The same mesh.
    return source;
  case 1: { // The same devices on other axes (when the count allows).
    Mesh mesh;
    mesh.axes = decodeAxes(d);
    std::vector<int64_t> ids = idsOf(source);
    if (mesh.numDevices() != source.numDevices())
      return source;
    if (d.flag())
      d.shuffle(ids);
    mesh.deviceIds = ids;
    return mesh;
  }
  case 2: { // The same axes, devices in reverse order.
    Mesh mesh = source;
    mesh.deviceIds = idsOf(source);
    std::reverse(mesh.deviceIds.begin(), mesh.deviceIds.end());
    return mesh;
  }
  case 3: { // Disjoint devices: the next pipeline stage.
    Mesh mesh;
    mesh.axes = decodeAxes(d);
    std::vector<int64_t> sourceIds = idsOf(source);
    int64_t offset = 1 + *std::max_element(sourceIds.begin(), sourceIds.end());
    mesh.deviceIds.resize(mesh.numDevices());
    std::iota(mesh.deviceIds.begin(), mesh.deviceIds.end(),
              std::max<int64_t>(offset, 0));
    d.shuffle(mesh.deviceIds);
    return mesh;
  }
  case 4: { // A single device, of the source mesh or not.
    Mesh mesh;
    if (d.flag())
      mesh.axes.push_back({"a", 1});
    std::vector<int64_t> ids = idsOf(source);
    mesh.deviceIds = {d.flag() ? d.pick(ids) : d.range(0, 2 * kMaxDevices)};
    return mesh;
  }
  default: // Anything: overlapping, permuted, other counts.
    return decodeMesh(d);
  }
}

/// A sharding of a rank-`rank` tensor on `mesh`: each axis whole or split
/// into consecutive sub-axes, each (sub-)axis on a dim (at any position),
/// unreduced, replicated or unused; now and then a raw sub-axis.
Sharding decodeSharding(Decoder &d, const Mesh &mesh, size_t rank) {
  Sharding sharding = Sharding::replicatedOfRank(rank);
  for (int a = 0; a < static_cast<int>(mesh.axes.size()); ++a) {
    int64_t size = mesh.axes[a].size;
    std::vector<AxisRef> refs;
    switch (d.range(0, 7)) {
    case 0: { // Sub-axes: the prime factors grouped into up to 3 factors.
      std::vector<int64_t> parts(d.range(1, 3), 1);
      for (int64_t p : primeFactors(size))
        parts[d.range(0, parts.size() - 1)] *= p;
      int64_t pre = 1;
      for (int64_t part : parts) {
        if (part > 1 || d.flag())
          refs.push_back({a, pre, part});
        pre *= part;
      }
      break;
    }
    case 1: // Raw, possibly invalid: validation must reject it cleanly.
      refs.push_back({a, d.range(0, size + 1), d.range(0, size + 1)});
      break;
    default:
      refs.push_back(AxisRef::whole(mesh, a));
      break;
    }
    for (const AxisRef &ref : refs) {
      int64_t where = d.range(0, static_cast<int64_t>(rank) + 2);
      if (where < static_cast<int64_t>(rank)) {
        std::vector<AxisRef> &axes = sharding.dims[where].axes;
        axes.insert(axes.begin() + d.range(0, axes.size()), ref);
      } else if (where == static_cast<int64_t>(rank)) {
        sharding.unreduced.push_back(ref);
      } else if (where == static_cast<int64_t>(rank) + 1) {
        sharding.replicated.push_back(ref);
      }
    }
  }
  for (DimSharding &dim : sharding.dims)
    dim.open = d.range(0, 7) == 0;
  return sharding;
}

struct Case {
  Mesh sourceMesh, destinationMesh;
  Sharding sourceSharding, destinationSharding;
  std::vector<int64_t> shape;
  int64_t elementBytes = 4;
  PlanOptions options;
};

Case decodeCase(Decoder &d) {
  Case c;
  c.sourceMesh = decodeMesh(d);
  c.destinationMesh = decodeDestinationMesh(d, c.sourceMesh);
  size_t rank = d.range(0, 4);
  int64_t elements = 1;
  for (size_t i = 0; i < rank; ++i) {
    int64_t extent = d.range(0, 3) == 0 ? d.range(0, 100) : d.range(0, 12);
    if (elements * std::max<int64_t>(extent, 1) > kMaxElements)
      extent = 1;
    elements *= extent;
    c.shape.push_back(extent);
  }
  c.sourceSharding = decodeSharding(d, c.sourceMesh, rank);
  c.destinationSharding =
      d.range(0, 7) == 0 && c.sourceMesh == c.destinationMesh
          ? c.sourceSharding
          : decodeSharding(d, c.destinationMesh, rank);
  c.elementBytes =
      d.flag() ? d.pick(std::vector<int64_t>{1, 2, 4, 8}) : d.range(1, 16);
  int64_t totalBytes = elements * c.elementBytes;
  switch (d.range(0, 5)) {
  case 0: // Tight: a few elements, the most chunks.
    c.options.memoryLimitBytes = d.range(1, 4) * c.elementBytes;
    break;
  case 1: // Up to the whole tensor, in whole elements.
    c.options.memoryLimitBytes =
        d.range(1, std::max<int64_t>(2, elements)) * c.elementBytes;
    break;
  case 2: // Any byte count, including less than one element (an error).
    c.options.memoryLimitBytes = d.range(1, totalBytes + 16);
    break;
  default:
    c.options.memoryLimitBytes = 0;
    break;
  }
  return c;
}

/// The reshard lower bound of layouts without unreduced axes, from the
/// layouts alone: each destination device lacks what its source box does
/// not hold (as the planner's property test computes it).
int64_t plainLowerBound(const TensorLayout &source,
                        const TensorLayout &destination, int64_t elementBytes) {
  int64_t elements = 0;
  for (int64_t p = 0, e = destination.numDevices(); p < e; ++p) {
    Box want = destination.boxAtPosition(p);
    std::optional<Box> held =
        source.boxOfDevice(destination.mesh().deviceAt(p));
    elements +=
        want.numElements() - (held ? want.intersect(*held).numElements() : 0);
  }
  return elements * elementBytes;
}

[[noreturn]] void fail(const std::string &why, const TensorLayout &source,
                       const TensorLayout &destination, int64_t elementBytes,
                       const PlanOptions &options, const TransferPlan *plan) {
  std::fprintf(stderr,
               "polymesh-fuzz-planner: %s\n  source:      %s\n  destination: "
               "%s\n  elementBytes=%lld memoryLimitBytes=%lld\n",
               why.c_str(), describe(source).c_str(),
               describe(destination).c_str(),
               static_cast<long long>(elementBytes),
               static_cast<long long>(options.memoryLimitBytes));
  if (plan)
    std::fprintf(stderr, "%s\n", formatPlan(*plan).c_str());
  std::fflush(stderr);
  __builtin_trap();
}

void check(const TensorLayout &source, const TensorLayout &destination,
           int64_t elementBytes, const PlanOptions &options) {
  auto failIf = [&](bool failed, const std::string &why,
                    const TransferPlan *plan) {
    if (failed)
      fail(why, source, destination, elementBytes, options, plan);
  };
  absl::StatusOr<TransferPlan> plan =
      planReshard(source, destination, elementBytes, options);
  if (!plan.ok()) {
    // Planner.h's only errors for layouts of one shape and no overflow
    // (both excluded by construction here): bad element sizes and limits.
    bool documented = elementBytes <= 0 || options.memoryLimitBytes < 0 ||
                      (options.memoryLimitBytes > 0 &&
                       options.memoryLimitBytes < elementBytes);
    failIf(!documented, "planReshard refused: " + plan.status().ToString(),
           nullptr);
    return;
  }
  const TransferPlan *p = &*plan;
  absl::StatusOr<SimulationResult> result =
      simulatePlan(*plan, source, destination);
  failIf(!result.ok(), "simulation failed: " + result.status().ToString(), p);
  absl::Status buffers = checkDestinationBuffers(*result, destination);
  failIf(!buffers.ok(), "wrong destination: " + buffers.ToString(), p);
  failIf(result->duplicateWrites != 0,
         std::to_string(result->duplicateWrites) + " duplicate writes", p);
  failIf(result->bytesCrossed != plan->bytesMoved,
         "simulated " + std::to_string(result->bytesCrossed) +
             " bytes crossing devices, plan says " +
             std::to_string(plan->bytesMoved),
         p);
  failIf(plan->bytesMoved != plan->lowerBoundBytes,
         "moves " + std::to_string(plan->bytesMoved) + " bytes, lower bound " +
             std::to_string(plan->lowerBoundBytes),
         p);
  if (source.sharding().unreduced.empty() &&
      destination.sharding().unreduced.empty()) {
    int64_t bound = plainLowerBound(source, destination, elementBytes);
    failIf(plan->lowerBoundBytes != bound,
           "lower bound " + std::to_string(plan->lowerBoundBytes) +
               ", the layouts give " + std::to_string(bound),
           p);
  }
  failIf(options.memoryLimitBytes > 0 &&
             plan->peakTempBytes > options.memoryLimitBytes,
         "staging peak " + std::to_string(plan->peakTempBytes) +
             " over the limit",
         p);
  for (const DeviceStats &stats : plan->perDevice)
    failIf(result->peakStagingBytes[stats.device] != stats.peakTempBytes,
           "device " + std::to_string(stats.device) + " stages " +
               std::to_string(result->peakStagingBytes[stats.device]) +
               " bytes, plan says " + std::to_string(stats.peakTempBytes),
           p);
  failIf(source.isDeviceEquivalent(destination) && !plan->steps.empty(),
         "device-equivalent layouts, but the plan has steps", p);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 0 && data[0] == 0xff) {
    // RandomLayout.h's generator, seeded from the bytes, with its bounds
    // also taken from them.
    Decoder d(data + 1, size - 1);
    RandomReshardOptions options;
    options.maxDevices = d.range(1, 64);
    options.maxRank = static_cast<int>(d.range(0, 3));
    options.maxExtent = d.range(1, 16);
    options.allowUnreduced = d.flag();
    options.memoryLimitPercent = static_cast<int>(d.range(0, 100));
    SplitMix64 rng(d.u64());
    ReshardCase c = randomReshard(rng, options);
    check(c.source, c.destination, c.elementBytes, c.options);
    return 0;
  }

  Decoder d(data, size);
  Case c = decodeCase(d);
  absl::StatusOr<TensorLayout> source =
      TensorLayout::create(c.sourceMesh, c.sourceSharding, c.shape);
  absl::StatusOr<TensorLayout> destination =
      TensorLayout::create(c.destinationMesh, c.destinationSharding, c.shape);
  // Invalid meshes and shardings (raw ids and sub-axes) are rejected here;
  // that they are rejected without a crash is part of the test.
  if (!source.ok() || !destination.ok())
    return 0;
  check(*source, *destination, c.elementBytes, c.options);
  return 0;
}
