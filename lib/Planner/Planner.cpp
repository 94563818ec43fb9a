//===- Planner.cpp - Bytes-optimal reshard planning -----------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// How a plan is made (docs/planner.md has the long version):
//
//  1. Device-equivalent layouts: empty identity plan.
//  2. Reduction phase: the source's unreduced axes that the destination does
//     not keep are summed in place, over each reduction group: a
//     ReduceScatter when the destination shards over exactly those axes (same
//     mesh) and the pieces tile the group's box, else an AllReduce.
//  3. Reshard phase, from the (reduced) source layout: distinct source tiles
//     and destination tiles are intersected per tile, never per element or
//     per device pair. A destination device that holds a piece itself gets a
//     LocalCopy; every other piece is received exactly once, from one of the
//     source replicas holding it, chosen for load balance. One piece sent by
//     one sender to many receivers is one multi-destination transfer.
//  4. The transfers are grouped into steps by connected components of the
//     communication graph and classified by their exact pattern.
//  5. Under a memory limit, steps are split into parts (boxes cut along
//     their outermost non-unit dimension) and parts are packed into chunks.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Planner.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>
#include <utility>

namespace polymesh::planner {

//===----------------------------------------------------------------------===//
// Box splitting
//===----------------------------------------------------------------------===//

std::vector<Box> splitBox(const Box &box, int64_t maxElements) {
  int64_t total = box.numElements();
  if (total == 0)
    return {};
  if (total <= maxElements)
    return {box};
  size_t rank = box.lo.size();
  // inner[i]: elements of a slab that is one index thick in dims 0..i.
  std::vector<int64_t> inner(rank, 1);
  for (size_t i = rank - 1; i-- > 0;)
    inner[i] = inner[i + 1] * (box.hi[i + 1] - box.lo[i + 1]);
  size_t cut = 0;
  while (inner[cut] > maxElements)
    ++cut;
  int64_t rowsPerPart = maxElements / inner[cut];

  std::vector<Box> parts;
  Box part = box;
  // Odometer over the dims outside `cut`, each split into single indices.
  std::vector<int64_t> outer(box.lo.begin(), box.lo.begin() + cut);
  while (true) {
    for (size_t d = 0; d < cut; ++d) {
      part.lo[d] = outer[d];
      part.hi[d] = outer[d] + 1;
    }
    for (int64_t lo = box.lo[cut]; lo < box.hi[cut]; lo += rowsPerPart) {
      part.lo[cut] = lo;
      part.hi[cut] = std::min(lo + rowsPerPart, box.hi[cut]);
      parts.push_back(part);
    }
    size_t d = cut;
    while (d > 0) {
      --d;
      if (++outer[d] < box.hi[d])
        break;
      outer[d] = box.lo[d];
      if (d == 0) {
        d = SIZE_MAX;
        break;
      }
    }
    if (cut == 0 || d == SIZE_MAX)
      break;
  }
  return parts;
}

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

bool containsRef(const std::vector<AxisRef> &refs, const AxisRef &ref) {
  return std::find(refs.begin(), refs.end(), ref) != refs.end();
}

bool boxContains(const Box &outer, const Box &inner) {
  for (size_t d = 0; d < outer.lo.size(); ++d)
    if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d])
      return false;
  return true;
}

std::vector<int64_t> sortedUnique(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int64_t> devicesOf(const std::vector<Transfer> &transfers) {
  std::vector<int64_t> ids;
  for (const Transfer &transfer : transfers) {
    ids.push_back(transfer.srcDevice);
    ids.insert(ids.end(), transfer.dstDevices.begin(),
               transfer.dstDevices.end());
  }
  return sortedUnique(std::move(ids));
}

/// Which unreduced axes the plan reduces, keeps, or creates.
struct UnreducedSplit {
  /// Source axes summed before resharding.
  std::vector<AxisRef> reduce;
  /// Source axes that stay partial in the destination (same mesh only).
  std::vector<AxisRef> kept;
  /// Destination axes whose partials the plan creates (zeros on every
  /// member but the one at coordinate 0).
  std::vector<AxisRef> fresh;
};

UnreducedSplit splitUnreduced(const TensorLayout &source,
                              const TensorLayout &destination) {
  // Partials can only be matched across layouts when the axes are the same
  // axes of the same devices; otherwise everything is reduced first.
  bool sameMesh = source.mesh() == destination.mesh();
  UnreducedSplit split;
  for (const AxisRef &ref : source.sharding().unreduced) {
    if (sameMesh && containsRef(destination.sharding().unreduced, ref))
      split.kept.push_back(ref);
    else
      split.reduce.push_back(ref);
  }
  for (const AxisRef &ref : destination.sharding().unreduced)
    if (!containsRef(split.kept, ref))
      split.fresh.push_back(ref);
  return split;
}

/// Dense tile numbering of a layout: tile = key * totalShards + shard, where
/// shard linearizes the per-dim shard index and key the coordinates on the
/// kept unreduced axes (which partial sum a device holds).
struct TileGrid {
  const TensorLayout *layout = nullptr;
  std::vector<int64_t> numShards;
  std::vector<int64_t> tileExtent;
  int64_t totalShards = 1;
  std::vector<AxisRef> keyRefs;
  int64_t numKeys = 1;

  TileGrid(const TensorLayout &layout, std::vector<AxisRef> keys)
      : layout(&layout), keyRefs(std::move(keys)) {
    for (size_t d = 0; d < layout.shape().size(); ++d) {
      numShards.push_back(layout.numShards(d));
      tileExtent.push_back(layout.tileExtent(d));
      totalShards *= numShards.back();
    }
    for (const AxisRef &ref : keyRefs)
      numKeys *= ref.size;
  }

  int64_t numTiles() const { return numKeys * totalShards; }

  int64_t tileOfPosition(int64_t position) const {
    std::vector<int64_t> index = layout->shardIndex(position);
    int64_t shard = 0;
    for (size_t d = 0; d < index.size(); ++d)
      shard = shard * numShards[d] + index[d];
    int64_t key = 0;
    if (!keyRefs.empty()) {
      std::vector<int64_t> coords = layout->mesh().coordinates(position);
      for (const AxisRef &ref : keyRefs)
        key = key * ref.size + ref.coordinate(layout->mesh(), coords);
    }
    return key * totalShards + shard;
  }

  /// Per-dim shard index of a tile.
  std::vector<int64_t> shardIndexOf(int64_t tile) const {
    int64_t shard = tile % totalShards;
    std::vector<int64_t> index(numShards.size());
    for (size_t d = numShards.size(); d-- > 0;) {
      index[d] = shard % numShards[d];
      shard /= numShards[d];
    }
    return index;
  }

  Box boxOfShardIndex(const std::vector<int64_t> &index) const {
    const std::vector<int64_t> &shape = layout->shape();
    Box box;
    box.lo.resize(shape.size());
    box.hi.resize(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      box.lo[d] = std::min(index[d] * tileExtent[d], shape[d]);
      box.hi[d] = std::min((index[d] + 1) * tileExtent[d], shape[d]);
    }
    return box;
  }

  Box boxOfTile(int64_t tile) const {
    return boxOfShardIndex(shardIndexOf(tile));
  }
};

//===----------------------------------------------------------------------===//
// Classification of transfers into collectives
//===----------------------------------------------------------------------===//

/// What the classifier may know about devices beyond the transfers.
struct ClassifyContext {
  /// Destination box of each destination device.
  const absl::flat_hash_map<int64_t, Box> *destinationBox = nullptr;
  /// Devices that keep part of their data with a local copy.
  const absl::flat_hash_set<int64_t> *keepsLocal = nullptr;
};

/// Union-find over device ids.
class DeviceUnion {
public:
  int32_t indexOf(int64_t device) {
    auto [it, inserted] = index_.try_emplace(device, parent_.size());
    if (inserted)
      parent_.push_back(static_cast<int32_t>(parent_.size()));
    return it->second;
  }
  int32_t find(int32_t x) {
    while (parent_[x] != x) {
      parent_[x] = parent_[parent_[x]];
      x = parent_[x];
    }
    return x;
  }
  void unite(int64_t a, int64_t b) {
    int32_t ra = find(indexOf(a)), rb = find(indexOf(b));
    if (ra != rb)
      parent_[std::max(ra, rb)] = std::min(ra, rb);
  }
  int32_t componentOf(int64_t device) { return find(indexOf(device)); }

private:
  absl::flat_hash_map<int64_t, int32_t> index_;
  std::vector<int32_t> parent_;
};

/// Splits transfers into connected components (by shared devices), keeping
/// the order of first appearance.
std::vector<std::vector<Transfer>>
connectedComponents(std::vector<Transfer> transfers) {
  DeviceUnion uf;
  for (const Transfer &transfer : transfers)
    for (int64_t dst : transfer.dstDevices)
      uf.unite(transfer.srcDevice, dst);
  absl::flat_hash_map<int32_t, size_t> componentIndex;
  std::vector<std::vector<Transfer>> components;
  for (Transfer &transfer : transfers) {
    int32_t root = uf.componentOf(transfer.srcDevice);
    auto [it, inserted] = componentIndex.try_emplace(root, components.size());
    if (inserted)
      components.emplace_back();
    components[it->second].push_back(std::move(transfer));
  }
  return components;
}

/// AllGather: at least two senders; every transfer goes from its sender to
/// every other member; every member's destination box contains every
/// transferred box (so after the step each member holds the union).
bool isAllGather(const std::vector<Transfer> &transfers,
                 const std::vector<int64_t> &members,
                 const ClassifyContext &context) {
  size_t n = members.size();
  if (n < 2)
    return false;
  absl::flat_hash_set<int64_t> senders;
  Box bound;
  for (const Transfer &transfer : transfers) {
    if (transfer.dstDevices.size() != n - 1)
      return false;
    senders.insert(transfer.srcDevice);
    if (bound.lo.empty() && bound.hi.empty()) {
      bound = transfer.box;
    } else {
      for (size_t d = 0; d < bound.lo.size(); ++d) {
        bound.lo[d] = std::min(bound.lo[d], transfer.box.lo[d]);
        bound.hi[d] = std::max(bound.hi[d], transfer.box.hi[d]);
      }
    }
  }
  if (senders.size() < 2)
    return false;
  for (int64_t member : members) {
    auto it = context.destinationBox->find(member);
    if (it == context.destinationBox->end() || !boxContains(it->second, bound))
      return false;
  }
  return true;
}

/// Classifies reshard transfers (all non-local, phase 0, overwrite) into
/// steps. Components that are exactly an AllGather stay whole; otherwise
/// every multi-destination transfer is a Broadcast and the point-to-point
/// rest is classified per connected component. All CollectivePermute
/// components become one step.
std::vector<Step> classify(std::vector<Transfer> transfers,
                           const ClassifyContext &context) {
  std::vector<Step> steps;
  Step permute;
  permute.kind = StepKind::CollectivePermute;
  size_t permuteSlot = SIZE_MAX;

  for (std::vector<Transfer> &component :
       connectedComponents(std::move(transfers))) {
    std::vector<int64_t> members = devicesOf(component);
    if (isAllGather(component, members, context)) {
      steps.push_back(
          {StepKind::AllGather, 0, std::move(members), std::move(component)});
      continue;
    }
    std::vector<Transfer> pointToPoint;
    for (Transfer &transfer : component) {
      if (transfer.dstDevices.size() > 1) {
        Step broadcast{StepKind::Broadcast, 0, {}, {}};
        broadcast.transfers.push_back(std::move(transfer));
        broadcast.devices = devicesOf(broadcast.transfers);
        steps.push_back(std::move(broadcast));
      } else {
        pointToPoint.push_back(std::move(transfer));
      }
    }
    for (std::vector<Transfer> &part :
         connectedComponents(std::move(pointToPoint))) {
      std::vector<int64_t> partMembers = devicesOf(part);
      size_t n = partMembers.size();
      absl::flat_hash_set<std::pair<int64_t, int64_t>> pairs;
      absl::flat_hash_map<int64_t, absl::flat_hash_set<int64_t>> sendsTo,
          receivesFrom;
      for (const Transfer &transfer : part) {
        int64_t dst = transfer.dstDevices.front();
        pairs.insert({transfer.srcDevice, dst});
        sendsTo[transfer.srcDevice].insert(dst);
        receivesFrom[dst].insert(transfer.srcDevice);
      }
      bool allPairs = pairs.size() == n * (n - 1);
      bool allKeep = true;
      for (int64_t member : partMembers)
        allKeep &= context.keepsLocal->contains(member);
      bool isPermutation = true;
      for (const auto &entry : sendsTo)
        isPermutation &= entry.second.size() <= 1;
      for (const auto &entry : receivesFrom)
        isPermutation &= entry.second.size() <= 1;
      // Two devices swapping data are an all-to-all when each keeps part of
      // its own data (an axis moved between dims), a permute otherwise.
      if (n >= 2 && allPairs && (n >= 3 || allKeep)) {
        steps.push_back(
            {StepKind::AllToAll, 0, std::move(partMembers), std::move(part)});
      } else if (isPermutation) {
        if (permuteSlot == SIZE_MAX) {
          permuteSlot = steps.size();
          steps.emplace_back();
        }
        for (Transfer &transfer : part)
          permute.transfers.push_back(std::move(transfer));
      } else {
        steps.push_back(
            {StepKind::SendRecv, 0, std::move(partMembers), std::move(part)});
      }
    }
  }
  if (permuteSlot != SIZE_MAX) {
    permute.devices = devicesOf(permute.transfers);
    steps[permuteSlot] = std::move(permute);
  }
  return steps;
}

//===----------------------------------------------------------------------===//
// Reduction phase
//===----------------------------------------------------------------------===//

struct ReductionPhase {
  StepKind kind = StepKind::AllReduce;
  std::optional<TensorLayout> reduced;
  /// One step per reduction group with at least two members.
  std::vector<Step> steps;
  int64_t lowerBoundElements = 0;
};

/// Splits `box` into at most `parts` near-equal pieces along its outermost
/// non-unit dimension; returns the non-empty pieces, first to last.
std::vector<Box> splitEvenly(const Box &box, int64_t parts) {
  size_t dim = 0;
  while (dim < box.lo.size() && box.hi[dim] - box.lo[dim] <= 1)
    ++dim;
  if (dim == box.lo.size())
    return {box};
  int64_t extent = box.hi[dim] - box.lo[dim];
  std::vector<Box> pieces;
  for (int64_t j = 0; j < parts; ++j) {
    Box piece = box;
    piece.lo[dim] = box.lo[dim] + extent * j / parts;
    piece.hi[dim] = box.lo[dim] + extent * (j + 1) / parts;
    if (!piece.empty())
      pieces.push_back(piece);
  }
  return pieces;
}

/// The sharding a ReduceScatter would leave: the source with every reduced
/// axis appended to the dim where the destination shards over it. Nullopt
/// when the meshes differ or the destination does not shard over all of
/// them.
std::optional<Sharding> reduceScatterSharding(const TensorLayout &source,
                                              const TensorLayout &destination,
                                              const UnreducedSplit &split) {
  if (!(source.mesh() == destination.mesh()))
    return std::nullopt;
  Sharding sharding = source.sharding();
  sharding.unreduced = split.kept;
  size_t placed = 0;
  const std::vector<DimSharding> &dims = destination.sharding().dims;
  for (size_t d = 0; d < dims.size(); ++d)
    for (const AxisRef &ref : dims[d].axes)
      if (containsRef(split.reduce, ref)) {
        sharding.dims[d].axes.push_back(ref);
        ++placed;
      }
  if (placed != split.reduce.size())
    return std::nullopt;
  return sharding;
}

absl::StatusOr<ReductionPhase> planReduction(const TensorLayout &source,
                                             const TensorLayout &destination,
                                             const UnreducedSplit &split,
                                             int64_t elementBytes) {
  ReductionPhase phase;
  Sharding groupSharding = source.sharding();
  groupSharding.unreduced = split.reduce;
  absl::StatusOr<TensorLayout> groupLayout =
      TensorLayout::create(source.mesh(), groupSharding, source.shape());
  if (!groupLayout.ok())
    return groupLayout.status();
  std::vector<std::vector<int64_t>> groups = groupLayout->reductionGroups();

  const Mesh &mesh = source.mesh();
  absl::flat_hash_map<int64_t, int64_t> positionOf;
  for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p)
    positionOf[mesh.deviceAt(p)] = p;

  // Prefer a ReduceScatter whose pieces tile every group's box exactly.
  if (std::optional<Sharding> scattered =
          reduceScatterSharding(source, destination, split)) {
    absl::StatusOr<TensorLayout> layout =
        TensorLayout::create(mesh, *scattered, source.shape());
    bool tiles = layout.ok();
    for (size_t g = 0; tiles && g < groups.size(); ++g) {
      Box box = source.boxAtPosition(positionOf[groups[g].front()]);
      int64_t covered = 0;
      for (int64_t member : groups[g]) {
        Box piece = layout->boxAtPosition(positionOf[member]);
        tiles &= piece.empty() || boxContains(box, piece);
        covered += piece.numElements();
      }
      tiles &= covered == box.numElements();
    }
    if (tiles) {
      phase.kind = StepKind::ReduceScatter;
      phase.reduced = *layout;
    }
  }
  if (!phase.reduced) {
    Sharding reducedSharding = source.sharding();
    reducedSharding.unreduced = split.kept;
    absl::StatusOr<TensorLayout> layout =
        TensorLayout::create(mesh, reducedSharding, source.shape());
    if (!layout.ok())
      return layout.status();
    phase.kind = StepKind::AllReduce;
    phase.reduced = *layout;
  }

  for (const std::vector<int64_t> &members : groups) {
    int64_t n = static_cast<int64_t>(members.size());
    Box box = source.boxAtPosition(positionOf[members.front()]);
    if (n < 2 || box.empty())
      continue;
    // pieces[i] is reduced onto owners[i].
    std::vector<Box> pieces;
    std::vector<int64_t> owners;
    if (phase.kind == StepKind::ReduceScatter) {
      for (int64_t member : members) {
        Box piece = phase.reduced->boxAtPosition(positionOf[member]);
        if (!piece.empty()) {
          pieces.push_back(piece);
          owners.push_back(member);
        }
      }
    } else {
      pieces = splitEvenly(box, n);
      owners.assign(members.begin(), members.begin() + pieces.size());
    }
    Step step{phase.kind, 0, members, {}};
    for (int64_t member : members)
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (owners[i] == member)
          continue;
        step.transfers.push_back({member,
                                  {owners[i]},
                                  pieces[i],
                                  pieces[i].numElements() * elementBytes,
                                  BufferKind::Source,
                                  BufferKind::Source,
                                  /*accumulate=*/true,
                                  /*phase=*/0});
      }
    phase.lowerBoundElements += (n - 1) * box.numElements();
    if (phase.kind == StepKind::AllReduce) {
      for (size_t i = 0; i < pieces.size(); ++i) {
        std::vector<int64_t> others;
        for (int64_t member : members)
          if (member != owners[i])
            others.push_back(member);
        step.transfers.push_back({owners[i], std::move(others), pieces[i],
                                  pieces[i].numElements() * elementBytes,
                                  BufferKind::Source, BufferKind::Source,
                                  /*accumulate=*/false, /*phase=*/1});
      }
      phase.lowerBoundElements += (n - 1) * box.numElements();
    }
    phase.steps.push_back(std::move(step));
  }
  return phase;
}

//===----------------------------------------------------------------------===//
// Reshard phase
//===----------------------------------------------------------------------===//

struct ReshardPhase {
  std::vector<Transfer> localCopies;
  std::vector<Transfer> zeroFills;
  std::vector<Transfer> transfers;
  int64_t lowerBoundElements = 0;
  absl::flat_hash_map<int64_t, Box> destinationBox;
  absl::flat_hash_set<int64_t> keepsLocal;
};

/// One (destination device, piece) need served by some holder of a tile.
struct Item {
  int32_t piece;
  int32_t holder;
  int64_t receiver;
  int64_t elements;
};

/// Assigns each item of one source tile to a holder. First the natural
/// pairing: a receiver that is a source device takes the holder of the same
/// replica rank (same coordinates on the replicating axes, so same-mesh
/// gathers follow mesh axes); other receivers take holders round-robin. If
/// that leaves the busiest holder more than one item above the mean, fall
/// back to greedy least-loaded assignment of the largest items first, which
/// bounds the busiest holder by mean + largest item.
void assignHolders(std::vector<Item> &items, int64_t numHolders,
                   const absl::flat_hash_map<int64_t, int32_t> &replicaRank) {
  if (numHolders == 1) {
    for (Item &item : items)
      item.holder = 0;
    return;
  }
  std::vector<int64_t> load(numHolders, 0);
  int64_t total = 0, largest = 0, roundRobin = 0;
  for (Item &item : items) {
    auto it = replicaRank.find(item.receiver);
    int64_t rank = it != replicaRank.end() ? it->second : roundRobin++;
    item.holder = static_cast<int32_t>(rank % numHolders);
    load[item.holder] += item.elements;
    total += item.elements;
    largest = std::max(largest, item.elements);
  }
  int64_t busiest = *std::max_element(load.begin(), load.end());
  if (static_cast<__int128>(busiest) * numHolders <=
      static_cast<__int128>(total) +
          static_cast<__int128>(largest) * numHolders)
    return;

  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return items[a].elements > items[b].elements;
  });
  using Entry = std::pair<int64_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int32_t h = 0; h < numHolders; ++h)
    heap.push({0, h});
  for (size_t index : order) {
    auto [holderLoad, holder] = heap.top();
    heap.pop();
    items[index].holder = holder;
    heap.push({holderLoad + items[index].elements, holder});
  }
}

ReshardPhase planReshardPhase(const TensorLayout &from, const TensorLayout &to,
                              const UnreducedSplit &split,
                              int64_t elementBytes) {
  ReshardPhase phase;
  TileGrid src(from, split.kept), dst(to, split.kept);

  // Source tiles: holders in mesh-position order, so the rank of a device
  // among its tile's holders is the same for every tile (it is the device's
  // coordinate over the replicating axes).
  std::vector<std::vector<int64_t>> holders(src.numTiles());
  absl::flat_hash_map<int64_t, int64_t> sourceTile;
  absl::flat_hash_map<int64_t, int32_t> replicaRank;
  for (int64_t p = 0, e = from.numDevices(); p < e; ++p) {
    int64_t device = from.mesh().deviceAt(p);
    int64_t tile = src.tileOfPosition(p);
    sourceTile[device] = tile;
    replicaRank[device] = static_cast<int32_t>(holders[tile].size());
    holders[tile].push_back(device);
  }

  // Destination tiles, and the devices that get zeros instead of data.
  std::vector<std::vector<int64_t>> needers(dst.numTiles());
  for (int64_t p = 0, e = to.numDevices(); p < e; ++p) {
    int64_t device = to.mesh().deviceAt(p);
    Box box = to.boxAtPosition(p);
    bool zero = false;
    if (!split.fresh.empty()) {
      std::vector<int64_t> coords = to.mesh().coordinates(p);
      for (const AxisRef &ref : split.fresh)
        zero |= ref.coordinate(to.mesh(), coords) != 0;
    }
    if (zero) {
      if (!box.empty())
        phase.zeroFills.push_back(
            {device, {device}, box, box.numElements() * elementBytes});
    } else {
      needers[dst.tileOfPosition(p)].push_back(device);
    }
    phase.destinationBox.emplace(device, std::move(box));
  }

  // Lower bound, from the layouts alone: every device must receive the part
  // of its box it does not hold (with the same partial key).
  for (int64_t tile = 0; tile < dst.numTiles(); ++tile) {
    if (needers[tile].empty())
      continue;
    Box box = dst.boxOfTile(tile);
    int64_t key = tile / dst.totalShards;
    for (int64_t device : needers[tile]) {
      int64_t held = 0;
      auto it = sourceTile.find(device);
      if (it != sourceTile.end() && it->second / src.totalShards == key)
        held = box.intersect(src.boxOfTile(it->second)).numElements();
      phase.lowerBoundElements += box.numElements() - held;
    }
  }

  // Intersect each destination tile with the source tiles of the same key
  // that overlap it: per dim a contiguous range of source shard indices.
  std::vector<Box> pieces;
  std::vector<std::vector<Item>> itemsOfTile(src.numTiles());
  size_t rank = to.shape().size();
  for (int64_t tile = 0; tile < dst.numTiles(); ++tile) {
    if (needers[tile].empty())
      continue;
    Box box = dst.boxOfTile(tile);
    if (box.empty())
      continue;
    int64_t key = tile / dst.totalShards;
    std::vector<int64_t> first(rank), last(rank);
    for (size_t d = 0; d < rank; ++d) {
      first[d] = box.lo[d] / src.tileExtent[d];
      last[d] =
          std::min((box.hi[d] - 1) / src.tileExtent[d], src.numShards[d] - 1);
    }
    std::vector<int64_t> index = first;
    while (true) {
      int64_t shard = 0;
      for (size_t d = 0; d < rank; ++d)
        shard = shard * src.numShards[d] + index[d];
      int64_t srcTile = key * src.totalShards + shard;
      Box piece = box.intersect(src.boxOfShardIndex(index));
      if (!piece.empty()) {
        int32_t pieceId = static_cast<int32_t>(pieces.size());
        int64_t elements = piece.numElements();
        for (int64_t device : needers[tile]) {
          auto it = sourceTile.find(device);
          if (it != sourceTile.end() && it->second == srcTile) {
            phase.localCopies.push_back(
                {device, {device}, piece, elements * elementBytes});
            phase.keepsLocal.insert(device);
          } else {
            itemsOfTile[srcTile].push_back({pieceId, 0, device, elements});
          }
        }
        pieces.push_back(std::move(piece));
      }
      size_t d = rank;
      while (d > 0) {
        --d;
        if (++index[d] <= last[d])
          break;
        index[d] = first[d];
        if (d == 0) {
          d = SIZE_MAX;
          break;
        }
      }
      if (rank == 0 || d == SIZE_MAX)
        break;
    }
  }

  // Choose senders, then merge the receivers of one piece from one sender
  // into one (multi-destination) transfer.
  for (int64_t tile = 0; tile < src.numTiles(); ++tile) {
    std::vector<Item> &items = itemsOfTile[tile];
    if (items.empty())
      continue;
    const std::vector<int64_t> &tileHolders = holders[tile];
    assignHolders(items, static_cast<int64_t>(tileHolders.size()), replicaRank);
    std::sort(items.begin(), items.end(), [](const Item &a, const Item &b) {
      return std::tie(a.piece, a.holder, a.receiver) <
             std::tie(b.piece, b.holder, b.receiver);
    });
    for (size_t i = 0; i < items.size();) {
      size_t j = i;
      Transfer transfer;
      transfer.srcDevice = tileHolders[items[i].holder];
      transfer.box = pieces[items[i].piece];
      transfer.bytes = items[i].elements * elementBytes;
      while (j < items.size() && items[j].piece == items[i].piece &&
             items[j].holder == items[i].holder)
        transfer.dstDevices.push_back(items[j++].receiver);
      phase.transfers.push_back(std::move(transfer));
      i = j;
    }
  }
  return phase;
}

//===----------------------------------------------------------------------===//
// Chunking under a memory limit
//===----------------------------------------------------------------------===//

/// Staging bytes each device needs for `transfers`: the sender packs each
/// box once, every receiver unpacks it once.
absl::flat_hash_map<int64_t, int64_t>
stagingOf(const std::vector<Transfer> &transfers) {
  absl::flat_hash_map<int64_t, int64_t> usage;
  for (const Transfer &transfer : transfers) {
    if (transfer.isLocal())
      continue;
    usage[transfer.srcDevice] += transfer.bytes;
    for (int64_t dst : transfer.dstDevices)
      usage[dst] += transfer.bytes;
  }
  return usage;
}

Transfer withBox(const Transfer &transfer, Box box, int64_t elementBytes) {
  Transfer part = transfer;
  part.bytes = box.numElements() * elementBytes;
  part.box = std::move(box);
  return part;
}

/// Assigns the steps of one phase to chunks so that no device stages more
/// than `limit` bytes in any chunk, splitting steps as needed; returns the
/// chunked steps (chunk indices from `firstChunk`) and advances `nextChunk`
/// past the last chunk used.
absl::StatusOr<std::vector<Step>>
chunkSteps(std::vector<Step> steps, int64_t limit, int64_t elementBytes,
           const ClassifyContext &context, int64_t firstChunk,
           int64_t &nextChunk) {
  if (steps.empty()) {
    nextChunk = firstChunk;
    return steps;
  }
  if (limit == 0) {
    for (Step &step : steps)
      step.chunk = firstChunk;
    nextChunk = firstChunk + 1;
    return steps;
  }

  // Next-fit per device: each device's cursor is the last chunk it uses and
  // the staging bytes it has there. A unit goes to the earliest chunk at or
  // after all its devices' cursors where it fits for every device.
  absl::flat_hash_map<int64_t, std::pair<int64_t, int64_t>> cursor;
  // (chunk, step) -> portion of the step's transfers; whole when unsplit.
  std::map<std::pair<int64_t, size_t>, std::vector<Transfer>> portions;
  std::vector<bool> split(steps.size(), false);
  std::vector<bool> fallback(steps.size(), false);
  int64_t lastChunk = 0;

  auto place = [&](size_t stepIndex, std::vector<Transfer> transfers) {
    absl::flat_hash_map<int64_t, int64_t> usage = stagingOf(transfers);
    int64_t chunk = 0;
    for (const auto &[device, bytes] : usage) {
      auto it = cursor.find(device);
      if (it != cursor.end())
        chunk = std::max(chunk, it->second.first);
    }
    for (const auto &[device, bytes] : usage) {
      auto it = cursor.find(device);
      if (it != cursor.end() && it->second.first == chunk &&
          it->second.second + bytes > limit) {
        ++chunk;
        break;
      }
    }
    for (const auto &[device, bytes] : usage) {
      auto &entry = cursor[device];
      if (entry.first == chunk)
        entry.second += bytes;
      else
        entry = {chunk, bytes};
    }
    lastChunk = std::max(lastChunk, chunk);
    std::vector<Transfer> &portion = portions[{chunk, stepIndex}];
    for (Transfer &transfer : transfers)
      portion.push_back(std::move(transfer));
  };

  for (size_t s = 0; s < steps.size(); ++s) {
    Step &step = steps[s];
    absl::flat_hash_map<int64_t, int64_t> usage = stagingOf(step.transfers);
    int64_t peak = 0;
    for (const auto &entry : usage)
      peak = std::max(peak, entry.second);
    if (peak <= limit) {
      place(s, std::move(step.transfers));
      continue;
    }
    split[s] = true;
    // Uniform split: part j takes sub-box j of every transfer, so each part
    // keeps the step's pattern. A device with r roles (one per box it packs
    // or unpacks) stages at most r * maxElements elements per part.
    absl::flat_hash_map<int64_t, int64_t> roles;
    int64_t maxRoles = 0;
    for (const Transfer &transfer : step.transfers) {
      maxRoles = std::max(maxRoles, ++roles[transfer.srcDevice]);
      for (int64_t dst : transfer.dstDevices)
        maxRoles = std::max(maxRoles, ++roles[dst]);
    }
    int64_t maxElements = limit / (elementBytes * maxRoles);
    if (maxElements >= 1) {
      std::vector<std::vector<Box>> subBoxes;
      size_t numParts = 0;
      for (const Transfer &transfer : step.transfers) {
        subBoxes.push_back(splitBox(transfer.box, maxElements));
        numParts = std::max(numParts, subBoxes.back().size());
      }
      for (size_t j = 0; j < numParts; ++j) {
        std::vector<Transfer> part;
        for (size_t t = 0; t < step.transfers.size(); ++t)
          if (j < subBoxes[t].size())
            part.push_back(
                withBox(step.transfers[t], subBoxes[t][j], elementBytes));
        place(s, std::move(part));
      }
      continue;
    }
    // Too many peers for a uniform split: move transfer by transfer. For a
    // reduction this stays correct because units are placed in step order
    // (phase 0 before phase 1) and a unit never goes to an earlier chunk
    // than a unit placed before it on a shared device; the pieces of the
    // collective become grouped send/recv with accumulation.
    fallback[s] = true;
    for (const Transfer &transfer : step.transfers)
      for (Box &box : splitBox(transfer.box, limit / elementBytes))
        place(s, {withBox(transfer, std::move(box), elementBytes)});
  }

  std::vector<Step> chunked;
  for (auto &[key, transfers] : portions) {
    auto [chunk, stepIndex] = key;
    const Step &original = steps[stepIndex];
    bool reduction = original.kind == StepKind::AllReduce ||
                     original.kind == StepKind::ReduceScatter;
    if (!split[stepIndex] || reduction) {
      // Phase 1 of an all-reduce must follow phase 0 of the same boxes.
      std::stable_sort(transfers.begin(), transfers.end(),
                       [](const Transfer &a, const Transfer &b) {
                         return a.phase < b.phase;
                       });
      // Uniform parts of a reduction are the same collective over sub-boxes;
      // transfer-by-transfer pieces of one are not.
      StepKind kind = fallback[stepIndex] ? StepKind::SendRecv : original.kind;
      Step step{kind, firstChunk + chunk, {}, std::move(transfers)};
      step.devices =
          split[stepIndex] ? devicesOf(step.transfers) : original.devices;
      chunked.push_back(std::move(step));
      continue;
    }
    for (Step &step : classify(std::move(transfers), context)) {
      step.chunk = firstChunk + chunk;
      chunked.push_back(std::move(step));
    }
  }
  nextChunk = firstChunk + lastChunk + 1;
  return chunked;
}

Step localStep(StepKind kind, std::vector<Transfer> transfers, int64_t chunk) {
  Step step{kind, chunk, {}, std::move(transfers)};
  std::vector<int64_t> ids;
  for (const Transfer &transfer : step.transfers)
    ids.push_back(transfer.srcDevice);
  step.devices = sortedUnique(std::move(ids));
  return step;
}

} // namespace

//===----------------------------------------------------------------------===//
// planReshard
//===----------------------------------------------------------------------===//

absl::StatusOr<TransferPlan> planReshard(const TensorLayout &source,
                                         const TensorLayout &destination,
                                         int64_t elementBytes,
                                         const PlanOptions &options) {
  if (source.shape() != destination.shape())
    return absl::InvalidArgumentError("source and destination shapes differ");
  if (elementBytes <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("element size must be positive, got ", elementBytes));
  if (options.memoryLimitBytes < 0)
    return absl::InvalidArgumentError("memory limit must not be negative");
  if (options.memoryLimitBytes > 0 && options.memoryLimitBytes < elementBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "memory limit of ", options.memoryLimitBytes,
        " bytes cannot stage even one ", elementBytes, "-byte element"));
  int64_t elements = 1;
  for (int64_t extent : source.shape())
    elements *= extent;
  // Every byte count in the plan is at most this times the device count.
  std::optional<int64_t> totalBytes = checkedMul(elements, elementBytes);
  if (!totalBytes ||
      !checkedMul(*totalBytes,
                  2 * std::max(source.numDevices(), destination.numDevices())))
    return absl::InvalidArgumentError("tensor byte counts overflow int64");

  TransferPlan plan;
  plan.shape = source.shape();
  plan.elementBytes = elementBytes;
  plan.memoryLimitBytes = options.memoryLimitBytes;
  if (source.isDeviceEquivalent(destination)) {
    plan.identity = true;
    recomputePlanStats(plan);
    return plan;
  }

  UnreducedSplit split = splitUnreduced(source, destination);
  std::vector<Step> reductionSteps;
  const TensorLayout *readLayout = &source;
  if (!split.reduce.empty()) {
    absl::StatusOr<ReductionPhase> reduction =
        planReduction(source, destination, split, elementBytes);
    if (!reduction.ok())
      return reduction.status();
    plan.reducedLayout = std::move(reduction->reduced);
    plan.reducesInPlace = !reduction->steps.empty();
    plan.reductionLowerBoundBytes =
        reduction->lowerBoundElements * elementBytes;
    reductionSteps = std::move(reduction->steps);
    readLayout = &*plan.reducedLayout;
  }

  ReshardPhase reshard =
      planReshardPhase(*readLayout, destination, split, elementBytes);
  plan.reshardLowerBoundBytes = reshard.lowerBoundElements * elementBytes;
  plan.lowerBoundBytes =
      plan.reductionLowerBoundBytes + plan.reshardLowerBoundBytes;
  ClassifyContext context{&reshard.destinationBox, &reshard.keepsLocal};

  int64_t nextChunk = 0;
  absl::StatusOr<std::vector<Step>> reduced =
      chunkSteps(std::move(reductionSteps), options.memoryLimitBytes,
                 elementBytes, context, 0, nextChunk);
  if (!reduced.ok())
    return reduced.status();
  plan.steps = std::move(*reduced);

  int64_t reshardChunk = nextChunk;
  if (!reshard.localCopies.empty())
    plan.steps.push_back(localStep(
        StepKind::LocalCopy, std::move(reshard.localCopies), reshardChunk));
  if (!reshard.zeroFills.empty())
    plan.steps.push_back(localStep(StepKind::ZeroFill,
                                   std::move(reshard.zeroFills), reshardChunk));
  absl::StatusOr<std::vector<Step>> moved = chunkSteps(
      classify(std::move(reshard.transfers), context), options.memoryLimitBytes,
      elementBytes, context, reshardChunk, nextChunk);
  if (!moved.ok())
    return moved.status();
  for (Step &step : *moved)
    plan.steps.push_back(std::move(step));
  recomputePlanStats(plan);
  return plan;
}

} // namespace polymesh::planner
