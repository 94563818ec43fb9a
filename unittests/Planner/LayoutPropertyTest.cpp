//===- LayoutPropertyTest.cpp - Randomized tests for the layout math ------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Random meshes (0-4 axes, up to 64 devices, permuted and non-contiguous
// device ids), random valid shardings built from a random factorization of
// every axis, and uneven shapes (0, smaller than the shard count, off by one).
// Each case is checked against an independent model of DESIGN.md's tile rule
// and against structural properties:
//
//  - within every replica (devices that agree on all non-dim factors) the
//    boxes tile the tensor exactly once;
//  - replica and reduction groups partition the devices as the model says;
//  - devicesHolding agrees with the boxes;
//  - isDeviceEquivalent is reflexive and symmetric, holds for the layout
//    rewritten onto a mesh with a run of axes flattened into one, and fails
//    once two devices with different tiles swap ids.
//
// A second test corrupts valid cases (axis reuse, overlapping or
// non-dividing sub-axes, incompatible factorizations, wrong rank, invalid
// meshes) and checks that TensorLayout::create rejects them.
//
// Every case has its own generator seeded from (base seed, case number). A
// failure prints both and the case in textual syntax; to rerun one case:
//   POLYMESH_LAYOUT_SEED=<seed> POLYMESH_LAYOUT_CASE=<case> PolymeshLayoutTests
//       --gtest_filter='LayoutProperty*'
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace polymesh::planner;

namespace {

using Rng = std::mt19937_64;

constexpr uint64_t kDefaultSeed = 0x5eed'1a70'0c0f'fee5ULL;
constexpr int kValidCases = 10000;
constexpr int kInvalidCases = 10000;
constexpr int64_t kMaxDevices = 64;
/// Tensors up to this many elements are checked element by element.
constexpr int64_t kCountElementsLimit = 512;

//===----------------------------------------------------------------------===//
// Seeds and random helpers
//===----------------------------------------------------------------------===//

uint64_t envOr(const char *name, uint64_t fallback) {
  const char *value = std::getenv(name);
  return value ? std::strtoull(value, nullptr, 0) : fallback;
}

uint64_t baseSeed() { return envOr("POLYMESH_LAYOUT_SEED", kDefaultSeed); }

/// The range of case numbers to run: all of them, or the one named by
/// POLYMESH_LAYOUT_CASE.
std::pair<int, int> caseRange(int numCases) {
  if (const char *only = std::getenv("POLYMESH_LAYOUT_CASE")) {
    int c = std::atoi(only);
    return {c, c + 1};
  }
  return {0, numCases};
}

/// Independent, well-mixed seeds per case (splitmix64 of seed and case).
Rng caseRng(uint64_t seed, int caseNumber) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (uint64_t(caseNumber) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return Rng(z ^ (z >> 31));
}

/// Uniform in [lo, hi].
int64_t uniform(Rng &rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

bool chance(Rng &rng, double p) { return std::bernoulli_distribution(p)(rng); }

template <typename T> const T &pick(Rng &rng, const std::vector<T> &values) {
  return values[uniform(rng, 0, int64_t(values.size()) - 1)];
}

//===----------------------------------------------------------------------===//
// Cases and their textual form
//===----------------------------------------------------------------------===//

enum class Role { Dim, Replicated, Unreduced, Unused };

struct Factor {
  AxisRef ref;
  Role role;
};

/// A random layout plus the factorization it was built from, which the model
/// uses to tell dim factors from the others.
struct Case {
  Mesh mesh;
  Sharding sharding;
  std::vector<int64_t> shape;
  std::vector<Factor> factors;
};

std::string refToString(const Mesh &mesh, const AxisRef &ref) {
  std::ostringstream os;
  if (ref.axis < 0 || ref.axis >= int(mesh.axes.size())) {
    os << "<axis #" << ref.axis << ">:(" << ref.preSize << ")" << ref.size;
    return os.str();
  }
  os << '"' << mesh.axes[ref.axis].name << '"';
  if (!(ref.preSize == 1 && ref.size == mesh.axes[ref.axis].size))
    os << ":(" << ref.preSize << ")" << ref.size;
  return os.str();
}

std::string refsToString(const Mesh &mesh, const std::vector<AxisRef> &refs) {
  std::string result;
  for (size_t i = 0; i < refs.size(); ++i)
    result += (i ? ", " : "") + refToString(mesh, refs[i]);
  return result;
}

std::string describe(const Mesh &mesh, const Sharding &sharding,
                     const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "mesh <[";
  for (size_t i = 0; i < mesh.axes.size(); ++i)
    os << (i ? ", " : "") << '"' << mesh.axes[i].name
       << "\"=" << mesh.axes[i].size;
  os << "]";
  if (!mesh.deviceIds.empty()) {
    os << ", device_ids=[";
    for (size_t i = 0; i < mesh.deviceIds.size(); ++i)
      os << (i ? ", " : "") << mesh.deviceIds[i];
    os << "]";
  }
  os << ">\n  sharding [";
  for (size_t d = 0; d < sharding.dims.size(); ++d) {
    const DimSharding &dim = sharding.dims[d];
    os << (d ? ", " : "") << "{" << refsToString(mesh, dim.axes);
    if (dim.open)
      os << (dim.axes.empty() ? "?" : ", ?");
    os << "}";
  }
  os << "]";
  if (!sharding.replicated.empty())
    os << ", replicated={" << refsToString(mesh, sharding.replicated) << "}";
  if (!sharding.unreduced.empty())
    os << ", unreduced={" << refsToString(mesh, sharding.unreduced) << "}";
  os << "\n  shape [";
  for (size_t d = 0; d < shape.size(); ++d)
    os << (d ? ", " : "") << shape[d];
  os << "]";
  return os.str();
}

std::string describe(const Case &c) {
  return describe(c.mesh, c.sharding, c.shape);
}

//===----------------------------------------------------------------------===//
// Generators
//===----------------------------------------------------------------------===//

Mesh randomMesh(Rng &rng) {
  static const std::vector<int64_t> sizes = {1, 2, 2, 3, 4, 4, 6, 8, 8, 12, 16};
  Mesh mesh;
  int numAxes = chance(rng, 0.03) ? 0 : int(uniform(rng, 1, 4));
  int64_t product = 1;
  for (int i = 0; i < numAxes; ++i) {
    std::vector<int64_t> fitting;
    for (int64_t s : sizes)
      if (product * s <= kMaxDevices)
        fitting.push_back(s);
    int64_t size = pick(rng, fitting);
    product *= size;
    mesh.axes.push_back(MeshAxis{"a" + std::to_string(i), size});
  }
  switch (uniform(rng, 0, 3)) {
  case 0: // Implicit 0..N-1.
    break;
  case 1: // A permutation of 0..N-1.
    for (int64_t i = 0; i < product; ++i)
      mesh.deviceIds.push_back(i);
    std::shuffle(mesh.deviceIds.begin(), mesh.deviceIds.end(), rng);
    break;
  case 2: { // Distinct, non-contiguous, in random order.
    std::vector<int64_t> pool(3 * product + 5);
    for (size_t i = 0; i < pool.size(); ++i)
      pool[i] = int64_t(i);
    std::shuffle(pool.begin(), pool.end(), rng);
    mesh.deviceIds.assign(pool.begin(), pool.begin() + product);
    break;
  }
  default: { // A contiguous sub-range, as for a pipeline stage.
    int64_t offset = uniform(rng, 0, 64);
    for (int64_t i = 0; i < product; ++i)
      mesh.deviceIds.push_back(offset + i);
    break;
  }
  }
  return mesh;
}

/// Splits an axis of size n into a random chain of factors, major first;
/// each factor > 1 except for an axis of size 1.
std::vector<AxisRef> randomFactorization(Rng &rng, int axis, int64_t n) {
  if (n == 1)
    return {AxisRef{axis, 1, 1}};
  std::vector<AxisRef> result;
  int64_t preSize = 1, rest = n;
  while (rest > 1) {
    std::vector<int64_t> divisors;
    for (int64_t d = 2; d <= rest; ++d)
      if (rest % d == 0)
        divisors.push_back(d);
    int64_t size = pick(rng, divisors);
    result.push_back(AxisRef{axis, preSize, size});
    preSize *= size;
    rest /= size;
  }
  return result;
}

int64_t randomExtent(Rng &rng, int64_t shards) {
  switch (uniform(rng, 0, 9)) {
  case 0:
    return 0;
  case 1:
  case 2: // Fewer elements than shards: trailing empty tiles.
    return shards > 1 ? uniform(rng, 1, shards - 1) : uniform(rng, 1, 3);
  case 3:
    return shards * uniform(rng, 1, 3);
  case 4:
    return shards * uniform(rng, 1, 3) + 1;
  case 5:
    return shards * uniform(rng, 1, 3) - 1;
  default:
    return uniform(rng, 1, 2 * shards + 3);
  }
}

/// A random valid sharding of `rank` dims over `mesh`, built from a random
/// factorization of each axis (so every factor is used at most once).
Sharding randomSharding(Rng &rng, const Mesh &mesh, size_t rank,
                        std::vector<Factor> *factorsOut = nullptr) {
  Sharding sharding = Sharding::replicatedOfRank(rank);
  std::vector<Factor> factors;
  for (size_t a = 0; a < mesh.axes.size(); ++a) {
    for (const AxisRef &ref :
         randomFactorization(rng, int(a), mesh.axes[a].size)) {
      int64_t r = uniform(rng, 0, 19);
      Role role = r < 10   ? Role::Dim
                  : r < 13 ? Role::Replicated
                  : r < 16 ? Role::Unreduced
                           : Role::Unused;
      if (role == Role::Dim && rank == 0)
        role = Role::Unused;
      factors.push_back(Factor{ref, role});
      if (role == Role::Dim)
        sharding.dims[uniform(rng, 0, int64_t(rank) - 1)].axes.push_back(ref);
      else if (role == Role::Replicated)
        sharding.replicated.push_back(ref);
      else if (role == Role::Unreduced)
        sharding.unreduced.push_back(ref);
    }
  }
  // Any major-to-minor order is a valid (and different) sharding.
  for (DimSharding &dim : sharding.dims) {
    std::shuffle(dim.axes.begin(), dim.axes.end(), rng);
    dim.open = chance(rng, 0.3);
  }
  std::shuffle(sharding.replicated.begin(), sharding.replicated.end(), rng);
  std::shuffle(sharding.unreduced.begin(), sharding.unreduced.end(), rng);
  if (factorsOut)
    *factorsOut = std::move(factors);
  return sharding;
}

std::vector<int64_t> randomShape(Rng &rng, const Sharding &sharding) {
  std::vector<int64_t> shape;
  for (const DimSharding &dim : sharding.dims) {
    int64_t shards = 1;
    for (const AxisRef &ref : dim.axes)
      shards *= ref.size;
    shape.push_back(randomExtent(rng, shards));
  }
  // Keep tensors small enough to check quickly.
  auto elements = [&] {
    int64_t n = 1;
    for (int64_t e : shape)
      n *= e;
    return n;
  };
  while (elements() > 4096)
    *std::max_element(shape.begin(), shape.end()) /= 2;
  return shape;
}

Case randomCase(Rng &rng) {
  Case c;
  c.mesh = randomMesh(rng);
  static const std::vector<size_t> ranks = {0, 1, 1, 1, 2, 2, 2, 2, 3, 3};
  size_t rank = pick(rng, ranks);
  c.sharding = randomSharding(rng, c.mesh, rank, &c.factors);
  c.shape = randomShape(rng, c.sharding);
  return c;
}

//===----------------------------------------------------------------------===//
// The model: DESIGN.md's tile rule, written out independently
//===----------------------------------------------------------------------===//

struct Model {
  std::vector<int64_t> shards;                    // per dim
  std::vector<Box> boxes;                         // per position
  std::vector<std::vector<int64_t>> replicaKey;   // non-dim factor coords
  std::vector<std::vector<int64_t>> sameDataKey;  // shards + unreduced
  std::vector<std::vector<int64_t>> reductionKey; // shards + non-unreduced
};

int64_t refCoordinate(const Mesh &mesh, const AxisRef &ref,
                      const std::vector<int64_t> &coords) {
  int64_t minor = mesh.axes[ref.axis].size / (ref.preSize * ref.size);
  return coords[ref.axis] / minor % ref.size;
}

Model buildModel(const Case &c) {
  Model m;
  int64_t n = 1;
  for (const MeshAxis &axis : c.mesh.axes)
    n *= axis.size;
  for (const DimSharding &dim : c.sharding.dims) {
    int64_t k = 1;
    for (const AxisRef &ref : dim.axes)
      k *= ref.size;
    m.shards.push_back(k);
  }
  for (int64_t p = 0; p < n; ++p) {
    std::vector<int64_t> coords(c.mesh.axes.size());
    for (int64_t a = int64_t(coords.size()) - 1, rest = p; a >= 0; --a) {
      coords[a] = rest % c.mesh.axes[a].size;
      rest /= c.mesh.axes[a].size;
    }
    Box box;
    std::vector<int64_t> shardIndex;
    for (size_t d = 0; d < c.shape.size(); ++d) {
      int64_t i = 0;
      for (const AxisRef &ref : c.sharding.dims[d].axes)
        i = i * ref.size + refCoordinate(c.mesh, ref, coords);
      shardIndex.push_back(i);
      int64_t extent = c.shape[d], k = m.shards[d];
      int64_t t = (extent + k - 1) / k; // Small extents: no overflow here.
      box.lo.push_back(std::min(i * t, extent));
      box.hi.push_back(std::min((i + 1) * t, extent));
    }
    std::vector<int64_t> replica, sameData = shardIndex, reduction = shardIndex;
    for (const Factor &f : c.factors) {
      int64_t coordinate = refCoordinate(c.mesh, f.ref, coords);
      if (f.role != Role::Dim)
        replica.push_back(coordinate);
      if (f.role == Role::Replicated || f.role == Role::Unused)
        reduction.push_back(coordinate);
    }
    for (const AxisRef &ref : c.sharding.unreduced)
      sameData.push_back(refCoordinate(c.mesh, ref, coords));
    m.boxes.push_back(std::move(box));
    m.replicaKey.push_back(std::move(replica));
    m.sameDataKey.push_back(std::move(sameData));
    m.reductionKey.push_back(std::move(reduction));
  }
  return m;
}

using Groups = std::vector<std::vector<int64_t>>;

/// Device ids grouped by equal keys, each group sorted, groups by first id.
Groups groupByKey(const Mesh &mesh,
                  const std::vector<std::vector<int64_t>> &keys) {
  std::map<std::vector<int64_t>, std::vector<int64_t>> byKey;
  for (size_t p = 0; p < keys.size(); ++p)
    byKey[keys[p]].push_back(mesh.deviceAt(int64_t(p)));
  Groups groups;
  for (auto &entry : byKey) {
    std::sort(entry.second.begin(), entry.second.end());
    groups.push_back(entry.second);
  }
  std::sort(groups.begin(), groups.end());
  return groups;
}

bool disjoint(const Box &a, const Box &b) {
  for (size_t d = 0; d < a.lo.size(); ++d)
    if (a.hi[d] <= a.lo[d] || b.hi[d] <= b.lo[d] || a.hi[d] <= b.lo[d] ||
        b.hi[d] <= a.lo[d])
      return true;
  return false;
}

bool inside(const Box &box, const std::vector<int64_t> &index) {
  for (size_t d = 0; d < index.size(); ++d)
    if (index[d] < box.lo[d] || index[d] >= box.hi[d])
      return false;
  return true;
}

int64_t volume(const Box &box) {
  int64_t v = 1;
  for (size_t d = 0; d < box.lo.size(); ++d)
    v *= std::max<int64_t>(0, box.hi[d] - box.lo[d]);
  return v;
}

/// Calls fn(index) for every index in `box`, row-major: the model's own
/// walk, independent of planner::forEachIndex.
template <typename Fn> void modelForEachIndex(const Box &box, Fn fn) {
  if (volume(box) == 0)
    return;
  std::vector<int64_t> index = box.lo;
  while (true) {
    fn(index);
    size_t d = index.size();
    while (d > 0 && ++index[d - 1] == box.hi[d - 1]) {
      index[d - 1] = box.lo[d - 1];
      --d;
    }
    if (d == 0)
      return;
  }
}

int64_t linearIndex(const std::vector<int64_t> &shape,
                    const std::vector<int64_t> &index) {
  int64_t linear = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    linear = linear * shape[d] + index[d];
  return linear;
}

/// Every id in exactly one group; groups sorted and ordered by first id.
void expectPartition(const Mesh &mesh, const Groups &groups, const char *what) {
  std::vector<int64_t> all;
  for (size_t g = 0; g < groups.size(); ++g) {
    ASSERT_FALSE(groups[g].empty()) << what;
    EXPECT_TRUE(std::is_sorted(groups[g].begin(), groups[g].end())) << what;
    if (g > 0) {
      EXPECT_LT(groups[g - 1].front(), groups[g].front()) << what;
    }
    all.insert(all.end(), groups[g].begin(), groups[g].end());
  }
  std::vector<int64_t> expected;
  for (int64_t p = 0; p < mesh.numDevices(); ++p)
    expected.push_back(mesh.deviceAt(p));
  std::sort(all.begin(), all.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected) << what << ": not a partition of the devices";
}

//===----------------------------------------------------------------------===//
// Rewrites for device equivalence
//===----------------------------------------------------------------------===//

/// Flattens mesh axes [first, last] into one axis "flat" (row-major, so every
/// position keeps its device) and rewrites each reference to them as a
/// sub-axis of "flat". With `merge`, adjacent references in a dim that are
/// consecutive factors of "flat" become one.
Case flattenAxes(const Case &c, int first, int last, bool merge) {
  Case out;
  int64_t flatSize = 1;
  for (int a = first; a <= last; ++a)
    flatSize *= c.mesh.axes[a].size;
  for (int a = 0; a < int(c.mesh.axes.size()); ++a) {
    if (a == first)
      out.mesh.axes.push_back(MeshAxis{"flat", flatSize});
    else if (a < first || a > last)
      out.mesh.axes.push_back(c.mesh.axes[a]);
  }
  out.mesh.deviceIds = c.mesh.deviceIds;
  auto remap = [&](AxisRef ref) {
    if (ref.axis < first)
      return ref;
    if (ref.axis > last)
      return AxisRef{ref.axis - (last - first), ref.preSize, ref.size};
    int64_t outer = 1;
    for (int a = first; a < ref.axis; ++a)
      outer *= c.mesh.axes[a].size;
    return AxisRef{first, outer * ref.preSize, ref.size};
  };
  auto remapAll = [&](const std::vector<AxisRef> &refs) {
    std::vector<AxisRef> result;
    for (const AxisRef &ref : refs) {
      // A size-1 axis adds no factor to "flat"; two of them would become
      // the same reference "flat":(m)1 twice.
      AxisRef flatRef = remap(ref);
      if (flatRef.axis == first && flatRef.size == 1 && first != last)
        continue;
      result.push_back(flatRef);
    }
    return result;
  };
  for (const DimSharding &dim : c.sharding.dims) {
    DimSharding newDim{remapAll(dim.axes), dim.open};
    for (size_t i = 0; merge && i + 1 < newDim.axes.size();) {
      AxisRef &major = newDim.axes[i];
      const AxisRef &minor = newDim.axes[i + 1];
      if (major.axis == minor.axis &&
          minor.preSize == major.preSize * major.size) {
        major.size *= minor.size;
        newDim.axes.erase(newDim.axes.begin() + i + 1);
      } else {
        ++i;
      }
    }
    out.sharding.dims.push_back(newDim);
  }
  out.sharding.replicated = remapAll(c.sharding.replicated);
  out.sharding.unreduced = remapAll(c.sharding.unreduced);
  out.shape = c.shape;
  for (const Factor &f : c.factors)
    out.factors.push_back(Factor{remap(f.ref), f.role});
  return out;
}

//===----------------------------------------------------------------------===//
// The valid-case property
//===----------------------------------------------------------------------===//

void checkValidCase(const Case &c, Rng &rng) {
  absl::StatusOr<TensorLayout> created =
      TensorLayout::create(c.mesh, c.sharding, c.shape);
  ASSERT_TRUE(created.ok()) << created.status();
  const TensorLayout &layout = *created;
  Model m = buildModel(c);
  const int64_t n = layout.numDevices();
  ASSERT_EQ(n, int64_t(m.boxes.size()));

  int64_t elements = 1, shardsTotal = 1;
  for (size_t d = 0; d < c.shape.size(); ++d) {
    elements *= c.shape[d];
    shardsTotal *= m.shards[d];
    EXPECT_EQ(layout.numShards(d), m.shards[d]) << "dim " << d;
    int64_t t = (c.shape[d] + m.shards[d] - 1) / m.shards[d];
    EXPECT_EQ(layout.tileExtent(d), t) << "dim " << d;
    EXPECT_EQ(layout.localShape()[d], t) << "dim " << d;
  }

  // Boxes by position, all at once and by device id match the model's tile
  // rule.
  std::vector<int64_t> allLo, allExtent;
  layout.allBoxes(allLo, allExtent);
  size_t rank = c.shape.size();
  ASSERT_EQ(allLo.size(), size_t(n) * rank);
  ASSERT_EQ(allExtent.size(), size_t(n) * rank);
  for (int64_t p = 0; p < n; ++p) {
    Box box = layout.boxAtPosition(p);
    ASSERT_EQ(box, m.boxes[p]) << "position " << p;
    for (size_t d = 0; d < rank; ++d) {
      ASSERT_EQ(allLo[p * rank + d], box.lo[d]) << "position " << p;
      ASSERT_EQ(allExtent[p * rank + d], box.hi[d] - box.lo[d])
          << "position " << p;
    }
    std::optional<Box> byId = layout.boxOfDevice(c.mesh.deviceAt(p));
    ASSERT_TRUE(byId.has_value()) << "device " << c.mesh.deviceAt(p);
    EXPECT_EQ(*byId, box) << "device " << c.mesh.deviceAt(p);
  }

  // Within each replica, the boxes tile the tensor exactly once.
  std::map<std::vector<int64_t>, std::vector<int64_t>> replicas;
  for (int64_t p = 0; p < n; ++p)
    replicas[m.replicaKey[p]].push_back(p);
  ASSERT_EQ(int64_t(replicas.size()) * shardsTotal, n);
  for (const auto &[key, positions] : replicas) {
    ASSERT_EQ(int64_t(positions.size()), shardsTotal);
    int64_t covered = 0;
    for (int64_t p : positions)
      covered += volume(m.boxes[p]);
    EXPECT_EQ(covered, elements) << "replica volumes do not add up";
    if (elements <= kCountElementsLimit) {
      std::vector<int> count(elements, 0);
      for (int64_t p : positions)
        modelForEachIndex(m.boxes[p], [&](const std::vector<int64_t> &index) {
          ++count[linearIndex(c.shape, index)];
        });
      for (int64_t e = 0; e < elements; ++e)
        ASSERT_EQ(count[e], 1) << "element " << e << " covered " << count[e]
                               << " times in one replica";
    } else {
      for (size_t i = 0; i < positions.size(); ++i)
        for (size_t j = i + 1; j < positions.size(); ++j)
          ASSERT_TRUE(disjoint(m.boxes[positions[i]], m.boxes[positions[j]]))
              << "positions " << positions[i] << " and " << positions[j];
    }
  }

  // Replica and reduction groups.
  Groups replicaGroups = layout.replicaGroups();
  Groups reductionGroups = layout.reductionGroups();
  expectPartition(c.mesh, replicaGroups, "replica groups");
  expectPartition(c.mesh, reductionGroups, "reduction groups");
  EXPECT_EQ(replicaGroups, groupByKey(c.mesh, m.sameDataKey));
  EXPECT_EQ(reductionGroups, groupByKey(c.mesh, m.reductionKey));
  if (c.sharding.unreduced.empty()) {
    EXPECT_EQ(int64_t(reductionGroups.size()), n);
  }

  // devicesHolding agrees with the boxes; each element lives once per
  // replica.
  for (int probe = 0; probe < 4 && elements > 0; ++probe) {
    std::vector<int64_t> index;
    for (int64_t extent : c.shape)
      index.push_back(uniform(rng, 0, extent - 1));
    std::vector<int64_t> expected;
    for (int64_t p = 0; p < n; ++p)
      if (inside(m.boxes[p], index))
        expected.push_back(c.mesh.deviceAt(p));
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(layout.devicesHolding(index), expected);
    EXPECT_EQ(int64_t(expected.size()), int64_t(replicas.size()));
  }
  if (!c.shape.empty()) {
    std::vector<int64_t> outside(c.shape.size(), 0);
    size_t d = uniform(rng, 0, int64_t(c.shape.size()) - 1);
    outside[d] = chance(rng, 0.5) ? c.shape[d] : -1;
    EXPECT_TRUE(layout.devicesHolding(outside).empty());
  }

  // Equivalence: reflexive, also against a separately created copy.
  EXPECT_TRUE(layout.isDeviceEquivalent(layout));
  absl::StatusOr<TensorLayout> copy =
      TensorLayout::create(c.mesh, c.sharding, c.shape);
  ASSERT_TRUE(copy.ok());
  EXPECT_TRUE(layout.isDeviceEquivalent(*copy));

  // Flattening a run of mesh axes is a valid rewrite onto another mesh that
  // places the same data on the same devices.
  if (!c.mesh.axes.empty()) {
    int first = int(uniform(rng, 0, int64_t(c.mesh.axes.size()) - 1));
    int last = int(uniform(rng, first, int64_t(c.mesh.axes.size()) - 1));
    Case flat = flattenAxes(c, first, last, chance(rng, 0.5));
    absl::StatusOr<TensorLayout> flatLayout =
        TensorLayout::create(flat.mesh, flat.sharding, flat.shape);
    ASSERT_TRUE(flatLayout.ok())
        << flatLayout.status() << "\nflattened: " << describe(flat);
    EXPECT_TRUE(layout.isDeviceEquivalent(*flatLayout))
        << "flattened: " << describe(flat);
    EXPECT_TRUE(flatLayout->isDeviceEquivalent(layout))
        << "flattened: " << describe(flat);
  }

  // Swapping the ids of two devices with different tiles breaks
  // equivalence.
  if (n > 1) {
    int64_t p = uniform(rng, 0, n - 1);
    for (int64_t step = 1; step < n; ++step) {
      int64_t q = (p + step) % n;
      if (m.boxes[q] == m.boxes[p])
        continue;
      Mesh swapped = c.mesh;
      if (swapped.deviceIds.empty())
        for (int64_t i = 0; i < n; ++i)
          swapped.deviceIds.push_back(i);
      std::swap(swapped.deviceIds[p], swapped.deviceIds[q]);
      absl::StatusOr<TensorLayout> other =
          TensorLayout::create(swapped, c.sharding, c.shape);
      ASSERT_TRUE(other.ok());
      EXPECT_FALSE(layout.isDeviceEquivalent(*other))
          << "swapped positions " << p << " and " << q;
      EXPECT_FALSE(other->isDeviceEquivalent(layout))
          << "swapped positions " << p << " and " << q;
      break;
    }
  }

  // Symmetry against another random sharding of the same mesh and shape;
  // equivalent layouts must agree on every device's box.
  Sharding otherSharding = randomSharding(rng, c.mesh, c.shape.size());
  absl::StatusOr<TensorLayout> other =
      TensorLayout::create(c.mesh, otherSharding, c.shape);
  ASSERT_TRUE(other.ok()) << other.status();
  bool forward = layout.isDeviceEquivalent(*other);
  EXPECT_EQ(forward, other->isDeviceEquivalent(layout))
      << "other: " << describe(c.mesh, otherSharding, c.shape);
  if (forward) {
    for (int64_t p = 0; p < n; ++p)
      EXPECT_EQ(layout.boxAtPosition(p), other->boxAtPosition(p));
  }
}

TEST(LayoutPropertyTest, RandomValidLayouts) {
  const uint64_t seed = baseSeed();
  auto [begin, end] = caseRange(kValidCases);
  for (int i = begin; i < end; ++i) {
    Rng rng = caseRng(seed, i);
    Case c = randomCase(rng);
    checkValidCase(c, rng);
    if (HasFailure()) {
      ADD_FAILURE() << "reproduce with POLYMESH_LAYOUT_SEED=" << seed
                    << " POLYMESH_LAYOUT_CASE=" << i << "\n  " << describe(c);
      return;
    }
  }
}

//===----------------------------------------------------------------------===//
// The invalid-input property
//===----------------------------------------------------------------------===//

enum class Corruption {
  ReuseRef,
  OverlappingSubAxis,
  NonDividingSubAxis,
  IncompatibleSubAxes,
  UnknownAxis,
  WrongRank,
  NegativeExtent,
  BadAxisSize,
  DuplicateAxisName,
  DeviceIdCount,
  DuplicateDeviceId,
  NegativeDeviceId,
  SizeOverflow,
  NumCorruptions
};

/// Appends `ref` to a random dim, to replicated or to unreduced.
void insertAnywhere(Rng &rng, Sharding &sharding, const AxisRef &ref) {
  int64_t where = uniform(rng, 0, int64_t(sharding.dims.size()) + 1);
  if (where < int64_t(sharding.dims.size())) {
    std::vector<AxisRef> &axes = sharding.dims[where].axes;
    axes.insert(axes.begin() + uniform(rng, 0, int64_t(axes.size())), ref);
  } else if (where == int64_t(sharding.dims.size())) {
    sharding.replicated.push_back(ref);
  } else {
    sharding.unreduced.push_back(ref);
  }
}

std::vector<AxisRef> usedRefs(const Sharding &sharding) {
  std::vector<AxisRef> refs = sharding.replicated;
  refs.insert(refs.end(), sharding.unreduced.begin(), sharding.unreduced.end());
  for (const DimSharding &dim : sharding.dims)
    refs.insert(refs.end(), dim.axes.begin(), dim.axes.end());
  return refs;
}

void removeRefsOfAxis(Sharding &sharding, int axis) {
  auto drop = [&](std::vector<AxisRef> &refs) {
    refs.erase(std::remove_if(refs.begin(), refs.end(),
                              [&](const AxisRef &r) { return r.axis == axis; }),
               refs.end());
  };
  for (DimSharding &dim : sharding.dims)
    drop(dim.axes);
  drop(sharding.replicated);
  drop(sharding.unreduced);
}

void makeIdsExplicit(Mesh &mesh) {
  if (mesh.deviceIds.empty())
    for (int64_t i = 0; i < mesh.numDevices(); ++i)
      mesh.deviceIds.push_back(i);
}

/// Makes `c` invalid in the way `kind` says, or falls back to a kind that
/// applies to this case. Returns a label for failure messages.
std::string corrupt(Rng &rng, Case &c, Corruption kind) {
  const int numAxes = int(c.mesh.axes.size());
  const int64_t numDevices = c.mesh.numDevices();
  switch (kind) {
  case Corruption::ReuseRef: {
    std::vector<AxisRef> used = usedRefs(c.sharding);
    if (used.empty()) {
      if (numAxes == 0)
        return corrupt(rng, c, Corruption::WrongRank);
      AxisRef whole = AxisRef::whole(c.mesh, int(uniform(rng, 0, numAxes - 1)));
      insertAnywhere(rng, c.sharding, whole);
      insertAnywhere(rng, c.sharding, whole);
    } else {
      insertAnywhere(rng, c.sharding, pick(rng, used));
    }
    return "reuse of a reference";
  }
  case Corruption::OverlappingSubAxis: {
    std::vector<AxisRef> candidates;
    for (const AxisRef &ref : usedRefs(c.sharding))
      if (ref.size > 1)
        candidates.push_back(ref);
    if (candidates.empty())
      return corrupt(rng, c, Corruption::ReuseRef);
    AxisRef ref = pick(rng, candidates);
    AxisRef overlapping = AxisRef::whole(c.mesh, ref.axis);
    if (chance(rng, 0.5)) {
      // The smallest prime factor of ref's size, at ref's pre-size: shares
      // that factor with ref.
      int64_t p = 2;
      while (ref.size % p != 0)
        ++p;
      overlapping = AxisRef{ref.axis, ref.preSize, p};
    }
    insertAnywhere(rng, c.sharding, overlapping);
    return "overlapping sub-axis";
  }
  case Corruption::NonDividingSubAxis: {
    if (numAxes == 0)
      return corrupt(rng, c, Corruption::WrongRank);
    int axis = int(uniform(rng, 0, numAxes - 1));
    int64_t n = c.mesh.axes[axis].size;
    AxisRef ref{axis, 1, n + 1};
    for (int tries = 0; tries < 20; ++tries) {
      AxisRef candidate{axis, uniform(rng, 1, n + 1), uniform(rng, 2, n + 2)};
      if (n % (candidate.preSize * candidate.size) != 0) {
        ref = candidate;
        break;
      }
    }
    if (chance(rng, 0.5))
      removeRefsOfAxis(c.sharding, axis);
    insertAnywhere(rng, c.sharding, ref);
    return "non-dividing sub-axis";
  }
  case Corruption::IncompatibleSubAxes: {
    // Two disjoint sub-axes of one axis whose gap is not a factor, e.g.
    // "x":(1)2 and "x":(3)2 of "x"=12.
    for (int tries = 0; tries < 40 && numAxes > 0; ++tries) {
      int axis = int(uniform(rng, 0, numAxes - 1));
      int64_t n = c.mesh.axes[axis].size;
      std::vector<AxisRef> subAxes;
      for (int64_t pre = 1; pre <= n; ++pre)
        for (int64_t size = 2; pre * size <= n; ++size)
          if (n % (pre * size) == 0)
            subAxes.push_back(AxisRef{axis, pre, size});
      if (subAxes.size() < 2)
        continue;
      AxisRef a = pick(rng, subAxes), b = pick(rng, subAxes);
      int64_t maxPre = std::max(a.preSize, b.preSize);
      int64_t minNext = std::min(a.preSize * a.size, b.preSize * b.size);
      if (a.overlaps(b) || maxPre % minNext == 0)
        continue;
      removeRefsOfAxis(c.sharding, axis);
      insertAnywhere(rng, c.sharding, a);
      insertAnywhere(rng, c.sharding, b);
      return "incompatible sub-axes";
    }
    return corrupt(rng, c, Corruption::NonDividingSubAxis);
  }
  case Corruption::UnknownAxis: {
    int axis = chance(rng, 0.5) ? numAxes + int(uniform(rng, 0, 2))
                                : -1 - int(uniform(rng, 0, 2));
    insertAnywhere(rng, c.sharding, AxisRef{axis, 1, 1});
    return "unknown axis";
  }
  case Corruption::WrongRank:
    if (!c.shape.empty() && chance(rng, 0.5))
      c.shape.pop_back();
    else
      c.shape.push_back(uniform(rng, 0, 5));
    return "wrong rank";
  case Corruption::NegativeExtent:
    if (c.shape.empty())
      return corrupt(rng, c, Corruption::WrongRank);
    c.shape[uniform(rng, 0, int64_t(c.shape.size()) - 1)] = -uniform(rng, 1, 5);
    return "negative extent";
  case Corruption::BadAxisSize:
    if (numAxes == 0)
      return corrupt(rng, c, Corruption::DeviceIdCount);
    c.mesh.axes[uniform(rng, 0, numAxes - 1)].size = -uniform(rng, 0, 3);
    return "non-positive axis size";
  case Corruption::DuplicateAxisName:
    if (numAxes < 2)
      return corrupt(rng, c, Corruption::BadAxisSize);
    c.mesh.axes[1].name = c.mesh.axes[0].name;
    return "duplicate axis name";
  case Corruption::DeviceIdCount:
    makeIdsExplicit(c.mesh);
    if (numDevices > 1 && chance(rng, 0.5))
      c.mesh.deviceIds.pop_back();
    else
      c.mesh.deviceIds.push_back(1000 + uniform(rng, 0, 100));
    return "device id count";
  case Corruption::DuplicateDeviceId: {
    if (numDevices < 2)
      return corrupt(rng, c, Corruption::NegativeDeviceId);
    makeIdsExplicit(c.mesh);
    int64_t i = uniform(rng, 0, numDevices - 1);
    int64_t j = (i + uniform(rng, 1, numDevices - 1)) % numDevices;
    c.mesh.deviceIds[i] = c.mesh.deviceIds[j];
    return "duplicate device id";
  }
  case Corruption::NegativeDeviceId:
    makeIdsExplicit(c.mesh);
    c.mesh.deviceIds[uniform(rng, 0, numDevices - 1)] = -uniform(rng, 1, 9);
    return "negative device id";
  case Corruption::SizeOverflow:
    c.mesh.axes.push_back(MeshAxis{"big1", int64_t(1) << 40});
    c.mesh.axes.push_back(MeshAxis{"big2", int64_t(1) << 40});
    return "axis size overflow";
  case Corruption::NumCorruptions:
    break;
  }
  return "none";
}

TEST(LayoutPropertyTest, RandomInvalidInputsAreRejected) {
  const uint64_t seed = baseSeed() ^ 0xbadULL;
  auto [begin, end] = caseRange(kInvalidCases);
  std::map<std::string, int> seen;
  for (int i = begin; i < end; ++i) {
    Rng rng = caseRng(seed, i);
    Case c = randomCase(rng);
    auto kind = Corruption(i % int(Corruption::NumCorruptions));
    std::string label = corrupt(rng, c, kind);
    ++seen[label];
    absl::StatusOr<TensorLayout> layout =
        TensorLayout::create(c.mesh, c.sharding, c.shape);
    EXPECT_FALSE(layout.ok()) << label << " was accepted";
    if (!layout.ok()) {
      EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument)
          << layout.status();
    }
    if (HasFailure()) {
      ADD_FAILURE() << "reproduce with POLYMESH_LAYOUT_SEED=" << baseSeed()
                    << " POLYMESH_LAYOUT_CASE=" << i << "\n  " << describe(c);
      return;
    }
  }
  // Fallbacks must not starve any kind of corruption.
  if (end - begin == kInvalidCases) {
    EXPECT_EQ(seen.size(), size_t(Corruption::NumCorruptions));
  }
}

} // namespace

namespace {

/// Brute force: two boxes share an element when they intersect.
bool anyOverlapByPairs(const std::vector<Box> &boxes) {
  for (size_t i = 0; i < boxes.size(); ++i)
    for (size_t j = i + 1; j < boxes.size(); ++j)
      if (!boxes[i].intersect(boxes[j]).empty())
        return true;
  return false;
}

} // namespace

// findOverlap (the transfer verifier's exact-coverage check) against all
// pairs, on random boxes: regular splits of a grid (disjoint), the same
// with one box grown or duplicated, and boxes placed at random.
TEST(LayoutPropertyTest, FindOverlapMatchesAllPairs) {
  uint64_t seed = baseSeed();
  int overlapping = 0, disjoint = 0;
  for (int c = 0; c < 4000; ++c) {
    Rng rng = caseRng(seed ^ 0x0e71'a95bULL, c);
    int64_t rank = uniform(rng, 0, 3);
    std::vector<Box> boxes;
    if (chance(rng, 0.5)) {
      // A regular grid of cuts per dimension.
      std::vector<std::vector<int64_t>> cuts(rank);
      for (auto &dimCuts : cuts) {
        int64_t pieces = uniform(rng, 1, 5), at = 0;
        dimCuts.push_back(0);
        for (int64_t p = 0; p < pieces; ++p)
          dimCuts.push_back(at += uniform(rng, 0, 3));
      }
      std::vector<size_t> pos(rank, 0);
      while (true) {
        Box box;
        for (int64_t d = 0; d < rank; ++d) {
          box.lo.push_back(cuts[d][pos[d]]);
          box.hi.push_back(cuts[d][pos[d] + 1]);
        }
        boxes.push_back(box);
        int64_t d = rank - 1;
        while (d >= 0 && ++pos[d] + 1 == cuts[d].size())
          pos[d--] = 0;
        if (d < 0)
          break;
      }
      if (!boxes.empty() && chance(rng, 0.5)) {
        Box &grown = boxes[uniform(rng, 0, boxes.size() - 1)];
        for (int64_t d = 0; d < rank; ++d)
          grown.hi[d] += uniform(rng, 0, 2);
      }
      if (!boxes.empty() && chance(rng, 0.3))
        boxes.push_back(boxes[uniform(rng, 0, boxes.size() - 1)]);
    } else {
      int64_t count = uniform(rng, 0, 12);
      for (int64_t b = 0; b < count; ++b) {
        Box box;
        for (int64_t d = 0; d < rank; ++d) {
          int64_t lo = uniform(rng, 0, 10);
          box.lo.push_back(lo);
          box.hi.push_back(lo + uniform(rng, 0, 4));
        }
        boxes.push_back(box);
      }
    }
    std::optional<std::pair<size_t, size_t>> found = findOverlap(boxes);
    bool expected = anyOverlapByPairs(boxes);
    ASSERT_EQ(found.has_value(), expected) << "case " << c;
    if (found) {
      ASSERT_LT(found->first, found->second);
      ASSERT_FALSE(boxes[found->first].intersect(boxes[found->second]).empty());
      ++overlapping;
    } else {
      ++disjoint;
    }
  }
  // Both answers were exercised.
  EXPECT_GT(overlapping, 500);
  EXPECT_GT(disjoint, 500);
}
