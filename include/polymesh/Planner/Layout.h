//===- Layout.h - Mesh, sharding and tile math ------------------*- C++ -*-===//
//
// Part of Polymesh. Pure C++17: no MLIR types, so a JIT or a Python binding
// can use the layout math (and the transfer planner built on it) directly.
//
//===----------------------------------------------------------------------===//
//
// A Mesh is a row-major grid of named axes whose linear positions map to
// arbitrary distinct device ids. A Sharding assigns to each tensor dimension
// a list of (sub-)axes, major to minor. A TensorLayout binds both to a static
// shape and answers: which box does each device hold, which devices hold the
// same data (replica groups), and which devices hold a given element.
//
// Tile rule (DESIGN.md): a dimension of size d split over axes of total size
// k gives the device at linear coordinate i the half-open range
// [min(i*t, d), min((i+1)*t, d)) with t = ceil(d / k).
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_PLANNER_LAYOUT_H
#define POLYMESH_PLANNER_LAYOUT_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace polymesh::planner {

/// One named mesh axis.
struct MeshAxis {
  std::string name;
  int64_t size = 1;

  bool operator==(const MeshAxis &other) const {
    return name == other.name && size == other.size;
  }
};

/// The most devices one mesh may have: 2^20. Plans and the passes do work
/// (and plans hold entries) per device, so planReshard and the polymesh.mesh
/// verifier refuse a larger mesh up front instead of running for hours or
/// out of memory (docs/limits.md).
inline constexpr int64_t kMaxMeshDevices = int64_t(1) << 20;

/// A device mesh. `deviceIds[p]` is the device at row-major position `p`;
/// an empty `deviceIds` means the identity 0..N-1.
struct Mesh {
  std::vector<MeshAxis> axes;
  std::vector<int64_t> deviceIds;

  /// Checks sizes > 0, no int64 overflow in the product, unique axis names,
  /// and that explicit device ids are distinct, non-negative and as many as
  /// the product of the axis sizes.
  absl::Status validate() const;

  /// Product of the axis sizes (1 for a mesh with no axes).
  int64_t numDevices() const;
  /// Device id at row-major position `position`.
  int64_t deviceAt(int64_t position) const;
  /// Position of `deviceId`, or nullopt if the mesh does not hold it.
  std::optional<int64_t> positionOf(int64_t deviceId) const;
  /// Index of the axis called `name`, or nullopt.
  std::optional<int> axisIndex(const std::string &name) const;
  /// Per-axis coordinates of row-major position `position`.
  std::vector<int64_t> coordinates(int64_t position) const;

  bool operator==(const Mesh &other) const;
};

/// A reference to a whole axis or to a sub-axis `"x":(preSize)size`: the
/// axis of size n is viewed as major preSize x size x n/(preSize*size) minor
/// and this reference names the middle factor. A whole axis has preSize 1
/// and size n.
struct AxisRef {
  int axis = 0;
  int64_t preSize = 1;
  int64_t size = 1;

  /// Reference to the whole axis `axis` of `mesh`.
  static AxisRef whole(const Mesh &mesh, int axis);
  bool isWhole(const Mesh &mesh) const;
  /// Coordinate of this (sub-)axis for a device at per-axis `coords`.
  int64_t coordinate(const Mesh &mesh,
                     const std::vector<int64_t> &coords) const;
  /// True when the two references share any factor of the same axis.
  bool overlaps(const AxisRef &other) const;

  bool operator==(const AxisRef &other) const {
    return axis == other.axis && preSize == other.preSize && size == other.size;
  }
};

/// How one tensor dimension is split: axes major to minor. `open` marks a
/// dimension that propagation may still extend.
struct DimSharding {
  std::vector<AxisRef> axes;
  bool open = false;

  bool operator==(const DimSharding &other) const {
    return axes == other.axes && open == other.open;
  }
};

/// A tensor sharding over one mesh.
struct Sharding {
  std::vector<DimSharding> dims;
  /// Axes that propagation must not use (the data is replicated over them).
  std::vector<AxisRef> replicated;
  /// Axes over which the data is a partial sum still to be reduced.
  std::vector<AxisRef> unreduced;

  /// Fully replicated sharding of the given rank.
  static Sharding replicatedOfRank(size_t rank);
  /// Checks that every reference is a valid (sub-)axis of `mesh` (the
  /// sub-axis divides its axis), that no factor of any axis is used twice
  /// across dims, replicated and unreduced, and that the sub-axes of one axis
  /// belong to one factorization of it (as Shardy's "can coexist" rule).
  absl::Status validate(const Mesh &mesh) const;

  bool operator==(const Sharding &other) const {
    return dims == other.dims && replicated == other.replicated &&
           unreduced == other.unreduced;
  }
};

/// A half-open box [lo, hi) in a tensor's index space.
struct Box {
  std::vector<int64_t> lo;
  std::vector<int64_t> hi;

  int64_t numElements() const;
  bool empty() const { return numElements() == 0; }
  bool contains(const std::vector<int64_t> &index) const;
  /// Whether every element of `inner` (same rank) lies in this box.
  bool encloses(const Box &inner) const;
  /// Intersection (possibly empty) with a box of the same rank.
  Box intersect(const Box &other) const;

  bool operator==(const Box &other) const {
    return lo == other.lo && hi == other.hi;
  }
  bool operator!=(const Box &other) const { return !(*this == other); }
};

/// Two boxes of `boxes` (all of one rank) that share an element, by index,
/// or nullopt when they are pairwise disjoint. Empty boxes share nothing.
/// A sweep along the dimension whose lower corners differ most, so that
/// the boxes of a regular split are compared only with their neighbours.
std::optional<std::pair<size_t, size_t>>
findOverlap(const std::vector<Box> &boxes);

/// The smallest box enclosing every one of `boxes` (non-empty, one rank): a
/// box holds them all exactly when it holds this one.
Box boundingBox(const std::vector<Box> &boxes);

/// Calls fn(index) for every index of `box`, row-major (once for rank 0).
template <typename Fn> void forEachIndex(const Box &box, Fn fn) {
  if (box.empty())
    return;
  std::vector<int64_t> index = box.lo;
  size_t rank = index.size();
  while (true) {
    fn(index);
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++index[d] < box.hi[d])
        break;
      index[d] = box.lo[d];
      if (d == 0)
        return;
    }
    if (rank == 0)
      return;
  }
}

/// A mesh, a sharding and a static shape bound together and validated.
class TensorLayout {
public:
  /// Validates the mesh, the sharding against the mesh, the rank match and
  /// the shape (non-negative extents whose product fits int64).
  static absl::StatusOr<TensorLayout> create(Mesh mesh, Sharding sharding,
                                             std::vector<int64_t> shape);

  const Mesh &mesh() const { return mesh_; }
  const Sharding &sharding() const { return sharding_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t numDevices() const { return mesh_.numDevices(); }

  /// Number of shards along dimension `dim` (product of its axis sizes).
  int64_t numShards(size_t dim) const;
  /// Distinct tiles of one partial sum: the product of numShards over the
  /// dims. Equal to numDevices() exactly when every device holds a tile
  /// of its own (no axis replicates, none is unreduced).
  int64_t numTiles() const;
  /// The largest tile extent along `dim`: ceil(shape[dim] / numShards(dim)).
  int64_t tileExtent(size_t dim) const;
  /// The local tile shape every device allocates: tileExtent per dim.
  std::vector<int64_t> localShape() const;

  /// Shard index along each dim for the device at mesh position `position`.
  std::vector<int64_t> shardIndex(int64_t position) const;
  /// Box held by the device at mesh position `position` (may be empty).
  Box boxAtPosition(int64_t position) const;
  /// Index of the device at mesh position `position` within its reduction
  /// group: its coordinates on the unreduced axes, in their listed order,
  /// as a mixed-radix number (0 when nothing is unreduced). Replicas (same
  /// shard, other coordinates on replicating axes) have the same index, so
  /// the partial a device holds is the same on every replica.
  int64_t unreducedRank(int64_t position) const;
  /// Every position's box, flattened position-major: `lo[p * rank + d]` and
  /// `extent[p * rank + d]` (hi - lo). One pass, no allocation per position,
  /// for meshes of up to 2^20 devices.
  void allBoxes(std::vector<int64_t> &lo, std::vector<int64_t> &extent) const;
  /// Box held by `deviceId`, or nullopt when the mesh does not hold it.
  std::optional<Box> boxOfDevice(int64_t deviceId) const;

  /// Groups of device ids holding identical data: same shard on every dim
  /// and the same coordinate on every unreduced axis. Each group is sorted;
  /// groups are ordered by their first device id.
  std::vector<std::vector<int64_t>> replicaGroups() const;
  /// Groups of device ids whose partial sums add up to the value: same shard
  /// on every dim and same coordinate on every replicating (non-dim,
  /// non-unreduced) axis. Singletons when nothing is unreduced.
  std::vector<std::vector<int64_t>> reductionGroups() const;
  /// Sorted device ids whose box contains `index`; empty when `index` has
  /// the wrong rank or lies outside the tensor.
  std::vector<int64_t> devicesHolding(const std::vector<int64_t> &index) const;

  /// True when both layouts place the same box on the same device ids, with
  /// the same unreduced structure, whatever their meshes are called.
  bool isDeviceEquivalent(const TensorLayout &other) const;

private:
  TensorLayout(Mesh mesh, Sharding sharding, std::vector<int64_t> shape)
      : mesh_(std::move(mesh)), sharding_(std::move(sharding)),
        shape_(std::move(shape)) {}

  Mesh mesh_;
  Sharding sharding_;
  std::vector<int64_t> shape_;
};

/// Multiplies with an overflow check; nullopt on overflow or negative input.
std::optional<int64_t> checkedMul(int64_t a, int64_t b);

} // namespace polymesh::planner

#endif // POLYMESH_PLANNER_LAYOUT_H
