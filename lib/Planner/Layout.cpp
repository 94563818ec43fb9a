//===- Layout.cpp - Mesh, sharding and tile math --------------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Layout.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <map>

namespace polymesh::planner {

std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  if (a < 0 || b < 0)
    return std::nullopt;
  int64_t result;
  if (__builtin_mul_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

absl::Status Mesh::validate() const {
  int64_t product = 1;
  absl::flat_hash_set<std::string> names;
  for (const MeshAxis &axis : axes) {
    if (axis.size <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("axis \"", axis.name, "\" has size ", axis.size,
                       "; expected a positive size"));
    if (!names.insert(axis.name).second)
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate axis name \"", axis.name, "\""));
    std::optional<int64_t> next = checkedMul(product, axis.size);
    if (!next)
      return absl::InvalidArgumentError(
          "the product of the axis sizes overflows int64");
    product = *next;
  }
  if (deviceIds.empty())
    return absl::OkStatus();
  if (static_cast<int64_t>(deviceIds.size()) != product)
    return absl::InvalidArgumentError(absl::StrCat("mesh has ",
                                                   deviceIds.size(),
                                                   " device ids but its axes "
                                                   "hold ",
                                                   product, " devices"));
  absl::flat_hash_set<int64_t> seen;
  for (int64_t id : deviceIds) {
    if (id < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("device id ", id, " is negative"));
    if (!seen.insert(id).second)
      return absl::InvalidArgumentError(
          absl::StrCat("device id ", id, " appears more than once"));
  }
  return absl::OkStatus();
}

int64_t Mesh::numDevices() const {
  int64_t product = 1;
  for (const MeshAxis &axis : axes)
    product *= axis.size;
  return product;
}

int64_t Mesh::deviceAt(int64_t position) const {
  return deviceIds.empty() ? position : deviceIds[position];
}

std::optional<int64_t> Mesh::positionOf(int64_t deviceId) const {
  if (deviceIds.empty()) {
    if (deviceId >= 0 && deviceId < numDevices())
      return deviceId;
    return std::nullopt;
  }
  auto it = std::find(deviceIds.begin(), deviceIds.end(), deviceId);
  if (it == deviceIds.end())
    return std::nullopt;
  return it - deviceIds.begin();
}

std::optional<int> Mesh::axisIndex(const std::string &name) const {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].name == name)
      return static_cast<int>(i);
  return std::nullopt;
}

std::vector<int64_t> Mesh::coordinates(int64_t position) const {
  std::vector<int64_t> coords(axes.size());
  for (size_t i = axes.size(); i-- > 0;) {
    coords[i] = position % axes[i].size;
    position /= axes[i].size;
  }
  return coords;
}

bool Mesh::operator==(const Mesh &other) const {
  if (axes != other.axes)
    return false;
  int64_t n = numDevices();
  if (deviceIds.empty() && other.deviceIds.empty())
    return true;
  for (int64_t p = 0; p < n; ++p)
    if (deviceAt(p) != other.deviceAt(p))
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// AxisRef
//===----------------------------------------------------------------------===//

AxisRef AxisRef::whole(const Mesh &mesh, int axis) {
  return AxisRef{axis, 1, mesh.axes[axis].size};
}

bool AxisRef::isWhole(const Mesh &mesh) const {
  return preSize == 1 && size == mesh.axes[axis].size;
}

int64_t AxisRef::coordinate(const Mesh &mesh,
                            const std::vector<int64_t> &coords) const {
  int64_t axisSize = mesh.axes[axis].size;
  int64_t minor = axisSize / (preSize * size);
  return (coords[axis] / minor) % size;
}

bool AxisRef::overlaps(const AxisRef &other) const {
  if (axis != other.axis)
    return false;
  // A size-1 reference has an empty factor range, so the range test below
  // would let a size-1 axis be listed twice; the same reference twice is
  // always a reuse.
  if (*this == other)
    return true;
  // Factor ranges in "pre-size" space: [preSize, preSize*size).
  int64_t lo1 = preSize, hi1 = preSize * size;
  int64_t lo2 = other.preSize, hi2 = other.preSize * other.size;
  return lo1 < hi2 && lo2 < hi1;
}

//===----------------------------------------------------------------------===//
// Sharding
//===----------------------------------------------------------------------===//

Sharding Sharding::replicatedOfRank(size_t rank) {
  Sharding sharding;
  sharding.dims.resize(rank);
  return sharding;
}

namespace {
absl::Status validateRef(const Mesh &mesh, const AxisRef &ref) {
  if (ref.axis < 0 || ref.axis >= static_cast<int>(mesh.axes.size()))
    return absl::InvalidArgumentError(
        absl::StrCat("axis index ", ref.axis, " is not an axis of the mesh"));
  const MeshAxis &axis = mesh.axes[ref.axis];
  if (ref.preSize <= 0 || ref.size <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "sub-axis of \"", axis.name, "\" has a non-positive pre-size or size"));
  std::optional<int64_t> span = checkedMul(ref.preSize, ref.size);
  if (!span || axis.size % *span != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "sub-axis \"", axis.name, "\":(", ref.preSize, ")", ref.size,
        " does not divide axis \"", axis.name, "\" of size ", axis.size));
  return absl::OkStatus();
}

/// Two disjoint (sub-)axes of one axis can coexist only if they belong to one
/// factorization of it: the gap between them, [min next pre-size, max
/// pre-size), must itself be a factor. "x":(1)2 and "x":(3)2 of "x"=12 do not
/// (2 does not divide 3): no mesh factor would be left for the remaining
/// coordinates, and the tiles would not cover the tensor uniformly.
bool canCoexist(const AxisRef &a, const AxisRef &b) {
  if (a.axis != b.axis)
    return true;
  int64_t maxPreSize = std::max(a.preSize, b.preSize);
  int64_t minNextPreSize = std::min(a.preSize * a.size, b.preSize * b.size);
  return maxPreSize % minNextPreSize == 0;
}
} // namespace

absl::Status Sharding::validate(const Mesh &mesh) const {
  std::vector<const AxisRef *> all;
  for (const DimSharding &dim : dims)
    for (const AxisRef &ref : dim.axes)
      all.push_back(&ref);
  for (const AxisRef &ref : replicated)
    all.push_back(&ref);
  for (const AxisRef &ref : unreduced)
    all.push_back(&ref);
  for (const AxisRef *ref : all)
    if (absl::Status status = validateRef(mesh, *ref); !status.ok())
      return status;
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j) {
      if (all[i]->overlaps(*all[j]))
        return absl::InvalidArgumentError(
            absl::StrCat("axis \"", mesh.axes[all[i]->axis].name,
                         "\" is used more than once in the sharding"));
      if (!canCoexist(*all[i], *all[j]))
        return absl::InvalidArgumentError(
            absl::StrCat("sub-axes of axis \"", mesh.axes[all[i]->axis].name,
                         "\" do not belong to one factorization of it"));
    }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Box
//===----------------------------------------------------------------------===//

int64_t Box::numElements() const {
  int64_t product = 1;
  for (size_t i = 0; i < lo.size(); ++i)
    product *= std::max<int64_t>(0, hi[i] - lo[i]);
  return product;
}

bool Box::contains(const std::vector<int64_t> &index) const {
  for (size_t i = 0; i < lo.size(); ++i)
    if (index[i] < lo[i] || index[i] >= hi[i])
      return false;
  return true;
}

bool Box::encloses(const Box &inner) const {
  for (size_t i = 0; i < lo.size(); ++i)
    if (inner.lo[i] < lo[i] || inner.hi[i] > hi[i])
      return false;
  return true;
}

Box Box::intersect(const Box &other) const {
  Box result;
  result.lo.resize(lo.size());
  result.hi.resize(lo.size());
  for (size_t i = 0; i < lo.size(); ++i) {
    result.lo[i] = std::max(lo[i], other.lo[i]);
    result.hi[i] = std::max(result.lo[i], std::min(hi[i], other.hi[i]));
  }
  return result;
}

Box boundingBox(const std::vector<Box> &boxes) {
  Box bounds = boxes.front();
  for (const Box &box : boxes)
    for (size_t d = 0; d < bounds.lo.size(); ++d) {
      bounds.lo[d] = std::min(bounds.lo[d], box.lo[d]);
      bounds.hi[d] = std::max(bounds.hi[d], box.hi[d]);
    }
  return bounds;
}

std::optional<std::pair<size_t, size_t>>
findOverlap(const std::vector<Box> &boxes) {
  std::vector<size_t> order;
  for (size_t i = 0; i < boxes.size(); ++i)
    if (!boxes[i].empty())
      order.push_back(i);
  if (order.size() < 2)
    return std::nullopt;
  size_t rank = boxes[order.front()].lo.size();
  if (rank == 0)
    return std::make_pair(order[0], order[1]);
  size_t sweep = 0, mostDistinct = 0;
  for (size_t d = 0; d < rank; ++d) {
    std::vector<int64_t> los;
    for (size_t i : order)
      los.push_back(boxes[i].lo[d]);
    std::sort(los.begin(), los.end());
    size_t distinct = std::unique(los.begin(), los.end()) - los.begin();
    if (distinct > mostDistinct) {
      mostDistinct = distinct;
      sweep = d;
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return boxes[a].lo[sweep] < boxes[b].lo[sweep];
  });
  // Boxes whose extent along the sweep dimension still covers the current
  // lower corner; only they can overlap the next box.
  std::vector<size_t> active;
  for (size_t i : order) {
    const Box &box = boxes[i];
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](size_t j) {
                                  return boxes[j].hi[sweep] <= box.lo[sweep];
                                }),
                 active.end());
    for (size_t j : active)
      if (!box.intersect(boxes[j]).empty())
        return std::make_pair(std::min(i, j), std::max(i, j));
    active.push_back(i);
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// TensorLayout
//===----------------------------------------------------------------------===//

absl::StatusOr<TensorLayout> TensorLayout::create(Mesh mesh, Sharding sharding,
                                                  std::vector<int64_t> shape) {
  if (absl::Status status = mesh.validate(); !status.ok())
    return status;
  if (absl::Status status = sharding.validate(mesh); !status.ok())
    return status;
  if (sharding.dims.size() != shape.size())
    return absl::InvalidArgumentError(
        absl::StrCat("sharding has ", sharding.dims.size(),
                     " dimensions but the tensor has rank ", shape.size()));
  int64_t elements = 1;
  for (int64_t extent : shape) {
    std::optional<int64_t> next = checkedMul(elements, extent);
    if (!next)
      return absl::InvalidArgumentError(
          "tensor shape has a negative extent or its element count "
          "overflows int64");
    elements = *next;
  }
  return TensorLayout(std::move(mesh), std::move(sharding), std::move(shape));
}

int64_t TensorLayout::numShards(size_t dim) const {
  int64_t product = 1;
  for (const AxisRef &ref : sharding_.dims[dim].axes)
    product *= ref.size;
  return product;
}

int64_t TensorLayout::numTiles() const {
  int64_t product = 1;
  for (size_t d = 0; d < shape_.size(); ++d)
    product *= numShards(d);
  return product;
}

int64_t TensorLayout::tileExtent(size_t dim) const {
  // Not (d + k - 1) / k, which overflows for extents near INT64_MAX.
  int64_t d = shape_[dim], k = numShards(dim);
  return d / k + (d % k != 0);
}

std::vector<int64_t> TensorLayout::localShape() const {
  std::vector<int64_t> result(shape_.size());
  for (size_t d = 0; d < shape_.size(); ++d)
    result[d] = tileExtent(d);
  return result;
}

std::vector<int64_t> TensorLayout::shardIndex(int64_t position) const {
  std::vector<int64_t> coords = mesh_.coordinates(position);
  std::vector<int64_t> index(shape_.size(), 0);
  for (size_t d = 0; d < shape_.size(); ++d) {
    int64_t linear = 0;
    for (const AxisRef &ref : sharding_.dims[d].axes)
      linear = linear * ref.size + ref.coordinate(mesh_, coords);
    index[d] = linear;
  }
  return index;
}

namespace {
/// min(i * t, extent) without overflow: i * t can exceed INT64_MAX when the
/// extent is close to it (i <= numShards, t = ceil(extent / numShards)).
int64_t tileStart(int64_t i, int64_t t, int64_t extent) {
  if (t == 0 || i > extent / t)
    return extent;
  return std::min(i * t, extent);
}
} // namespace

int64_t TensorLayout::unreducedRank(int64_t position) const {
  std::vector<int64_t> coords = mesh_.coordinates(position);
  int64_t rank = 0;
  for (const AxisRef &ref : sharding_.unreduced)
    rank = rank * ref.size + ref.coordinate(mesh_, coords);
  return rank;
}

Box TensorLayout::boxAtPosition(int64_t position) const {
  std::vector<int64_t> index = shardIndex(position);
  Box box;
  box.lo.resize(shape_.size());
  box.hi.resize(shape_.size());
  for (size_t d = 0; d < shape_.size(); ++d) {
    box.lo[d] = tileStart(index[d], tileExtent(d), shape_[d]);
    box.hi[d] = tileStart(index[d] + 1, tileExtent(d), shape_[d]);
  }
  return box;
}

void TensorLayout::allBoxes(std::vector<int64_t> &lo,
                            std::vector<int64_t> &extent) const {
  size_t rank = shape_.size();
  int64_t n = mesh_.numDevices();
  lo.assign(static_cast<size_t>(n) * rank, 0);
  extent.assign(static_cast<size_t>(n) * rank, 0);
  std::vector<int64_t> tiles(rank);
  for (size_t d = 0; d < rank; ++d)
    tiles[d] = tileExtent(d);
  // The mesh coordinates of position p, advanced like an odometer: no
  // allocation per position.
  std::vector<int64_t> coords(mesh_.axes.size(), 0);
  for (int64_t p = 0; p < n; ++p) {
    for (size_t d = 0; d < rank; ++d) {
      int64_t index = 0;
      for (const AxisRef &ref : sharding_.dims[d].axes)
        index = index * ref.size + ref.coordinate(mesh_, coords);
      int64_t start = tileStart(index, tiles[d], shape_[d]);
      lo[p * rank + d] = start;
      extent[p * rank + d] = tileStart(index + 1, tiles[d], shape_[d]) - start;
    }
    for (size_t i = coords.size(); i-- > 0;) {
      if (++coords[i] < mesh_.axes[i].size)
        break;
      coords[i] = 0;
    }
  }
}

std::optional<Box> TensorLayout::boxOfDevice(int64_t deviceId) const {
  std::optional<int64_t> position = mesh_.positionOf(deviceId);
  if (!position)
    return std::nullopt;
  return boxAtPosition(*position);
}

namespace {
/// Groups device ids by a key computed per mesh position; each group sorted,
/// groups ordered by first id.
template <typename KeyFn>
std::vector<std::vector<int64_t>> groupDevices(const Mesh &mesh, KeyFn keyFn) {
  std::map<std::vector<int64_t>, std::vector<int64_t>> groups;
  for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p)
    groups[keyFn(p)].push_back(mesh.deviceAt(p));
  std::vector<std::vector<int64_t>> result;
  result.reserve(groups.size());
  for (auto &entry : groups) {
    std::sort(entry.second.begin(), entry.second.end());
    result.push_back(std::move(entry.second));
  }
  std::sort(result.begin(), result.end(),
            [](const auto &a, const auto &b) { return a.front() < b.front(); });
  return result;
}
} // namespace

std::vector<std::vector<int64_t>> TensorLayout::replicaGroups() const {
  return groupDevices(mesh_, [&](int64_t p) {
    std::vector<int64_t> key = shardIndex(p);
    std::vector<int64_t> coords = mesh_.coordinates(p);
    for (const AxisRef &ref : sharding_.unreduced)
      key.push_back(ref.coordinate(mesh_, coords));
    return key;
  });
}

std::vector<std::vector<int64_t>> TensorLayout::reductionGroups() const {
  // Devices in one reduction group agree on every shard index and on every
  // mesh factor that is not unreduced; only unreduced coordinates vary.
  return groupDevices(mesh_, [&](int64_t p) {
    std::vector<int64_t> key = shardIndex(p);
    std::vector<int64_t> coords = mesh_.coordinates(p);
    // Remove the unreduced factors from each axis coordinate.
    for (size_t a = 0; a < mesh_.axes.size(); ++a) {
      int64_t c = coords[a];
      int64_t axisSize = mesh_.axes[a].size;
      int64_t residual = 0, radix = 1;
      // Walk the axis from its minor end: factor boundaries come from the
      // unreduced refs on this axis.
      std::vector<const AxisRef *> refs;
      for (const AxisRef &ref : sharding_.unreduced)
        if (ref.axis == static_cast<int>(a))
          refs.push_back(&ref);
      if (refs.empty()) {
        key.push_back(c);
        continue;
      }
      // Express c in mixed radix split at every unreduced boundary, and
      // keep only the digits not covered by an unreduced ref.
      std::vector<int64_t> bounds = {1, axisSize};
      for (const AxisRef *ref : refs) {
        bounds.push_back(ref->preSize);
        bounds.push_back(ref->preSize * ref->size);
      }
      std::sort(bounds.begin(), bounds.end());
      bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
      for (size_t i = bounds.size() - 1; i-- > 0;) {
        // Factor [bounds[i], bounds[i+1]) in pre-size space, of size
        // bounds[i+1]/bounds[i]; its digit has stride axisSize/bounds[i+1].
        int64_t factorSize = bounds[i + 1] / bounds[i];
        int64_t stride = axisSize / bounds[i + 1];
        int64_t digit = (c / stride) % factorSize;
        bool isUnreduced = false;
        for (const AxisRef *ref : refs)
          if (ref->preSize <= bounds[i] &&
              bounds[i + 1] <= ref->preSize * ref->size)
            isUnreduced = true;
        if (!isUnreduced) {
          residual += digit * radix;
          radix *= factorSize;
        }
      }
      key.push_back(residual);
    }
    return key;
  });
}

std::vector<int64_t>
TensorLayout::devicesHolding(const std::vector<int64_t> &index) const {
  std::vector<int64_t> result;
  if (index.size() != shape_.size())
    return result;
  for (size_t d = 0; d < shape_.size(); ++d)
    if (index[d] < 0 || index[d] >= shape_[d])
      return result;
  for (int64_t p = 0, e = mesh_.numDevices(); p < e; ++p)
    if (boxAtPosition(p).contains(index))
      result.push_back(mesh_.deviceAt(p));
  std::sort(result.begin(), result.end());
  return result;
}

bool TensorLayout::isDeviceEquivalent(const TensorLayout &other) const {
  if (shape_ != other.shape_ || numDevices() != other.numDevices())
    return false;
  // The common case, and linear work saved on a pod: the same layout.
  if (sharding_ == other.sharding_ && mesh_ == other.mesh_)
    return true;
  // Same box on every device id.
  absl::flat_hash_map<int64_t, int64_t> otherPosition;
  otherPosition.reserve(other.numDevices());
  for (int64_t p = 0, e = other.numDevices(); p < e; ++p)
    otherPosition[other.mesh_.deviceAt(p)] = p;
  for (int64_t p = 0, e = numDevices(); p < e; ++p) {
    auto it = otherPosition.find(mesh_.deviceAt(p));
    if (it == otherPosition.end())
      return false;
    if (boxAtPosition(p) != other.boxAtPosition(it->second))
      return false;
  }
  // Same partial-sum structure: identical reduction groups.
  return reductionGroups() == other.reductionGroups();
}

} // namespace polymesh::planner
