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
#include "polymesh/Support/Saturating.h"

#include "DeviceIndex.h"

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
    while (d > 0 && ++outer[d - 1] >= box.hi[d - 1]) {
      outer[d - 1] = box.lo[d - 1];
      --d;
    }
    if (d == 0)
      break;
  }
  return parts;
}

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// Counts the transfers and (transfer, receiver) pairs of a plan while it
/// is built, so that a plan over kMaxPlanTransfers or kMaxPlanReceivers is
/// refused as soon as it is known to be, not after it filled the memory.
class PlanBudget {
public:
  /// Adds entries; false once either total is over its limit.
  bool add(int64_t transfers, int64_t receivers) {
    transfers_ = saturatingAdd(transfers_, transfers);
    receivers_ = saturatingAdd(receivers_, receivers);
    return transfers_ <= kMaxPlanTransfers && receivers_ <= kMaxPlanReceivers;
  }

  absl::Status error() const {
    if (transfers_ > kMaxPlanTransfers)
      return absl::ResourceExhaustedError(absl::StrCat(
          "the plan would hold more than ", kMaxPlanTransfers,
          " transfers (the limit, docs/limits.md); a larger memory limit "
          "or fewer devices make fewer"));
    return absl::ResourceExhaustedError(
        absl::StrCat("the plan would deliver to more than ", kMaxPlanReceivers,
                     " receivers in all (the limit, docs/limits.md); fewer "
                     "devices make fewer"));
  }

private:
  int64_t transfers_ = 0;
  int64_t receivers_ = 0;
};

/// How many sub-boxes splitBox(box, maxElements) returns, without making
/// them; saturates at INT64_MAX.
int64_t splitBoxCount(const Box &box, int64_t maxElements) {
  int64_t total = box.numElements();
  if (total == 0)
    return 0;
  if (total <= maxElements)
    return 1;
  size_t rank = box.lo.size();
  std::vector<int64_t> inner(rank, 1);
  for (size_t i = rank - 1; i-- > 0;)
    inner[i] = inner[i + 1] * (box.hi[i + 1] - box.lo[i + 1]);
  size_t cut = 0;
  while (inner[cut] > maxElements)
    ++cut;
  int64_t rowsPerPart = maxElements / inner[cut];
  int64_t rows = box.hi[cut] - box.lo[cut];
  int64_t count = rows / rowsPerPart + (rows % rowsPerPart != 0);
  for (size_t d = 0; d < cut; ++d)
    count = saturatingMul(count, box.hi[d] - box.lo[d]);
  return count;
}

bool containsRef(const std::vector<AxisRef> &refs, const AxisRef &ref) {
  return std::find(refs.begin(), refs.end(), ref) != refs.end();
}

bool boxContains(const Box &outer, const Box &inner) {
  for (size_t d = 0; d < outer.lo.size(); ++d)
    if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d])
      return false;
  return true;
}

/// Sorted distinct device ids of some transfers' endpoints.
std::vector<int64_t> devicesOf(const std::vector<Transfer> &transfers) {
  std::vector<int64_t> ids;
  for (const Transfer &transfer : transfers) {
    ids.push_back(transfer.srcDevice);
    ids.insert(ids.end(), transfer.dstDevices.begin(),
               transfer.dstDevices.end());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
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

/// A (sub-)axis coordinate as a digit of the mesh position:
/// (position / stride) % size, with no per-position allocation.
struct Digit {
  int64_t stride = 1;
  int64_t size = 1;
  int64_t of(int64_t position) const { return (position / stride) % size; }
};

Digit digitOf(const Mesh &mesh, const AxisRef &ref) {
  int64_t after = 1;
  for (size_t a = ref.axis + 1; a < mesh.axes.size(); ++a)
    after *= mesh.axes[a].size;
  int64_t minor = mesh.axes[ref.axis].size / (ref.preSize * ref.size);
  return {after * minor, ref.size};
}

/// Dense tile numbering of a layout: tile = key * totalShards + shard, where
/// shard linearizes the per-dim shard index (row-major) and key the
/// coordinates on the kept unreduced axes (which partial sum a device holds).
/// Distinct tiles of one key are disjoint boxes that cover the tensor.
struct TileGrid {
  std::vector<int64_t> shape;
  std::vector<int64_t> numShards;
  std::vector<int64_t> tileExtent;
  std::vector<std::vector<Digit>> dimDigits;
  std::vector<Digit> keyDigits;
  int64_t totalShards = 1;
  int64_t numKeys = 1;

  TileGrid(const TensorLayout &layout, const std::vector<AxisRef> &keys)
      : shape(layout.shape()) {
    const Mesh &mesh = layout.mesh();
    for (size_t d = 0; d < shape.size(); ++d) {
      numShards.push_back(layout.numShards(d));
      tileExtent.push_back(layout.tileExtent(d));
      totalShards *= numShards.back();
      dimDigits.emplace_back();
      for (const AxisRef &ref : layout.sharding().dims[d].axes)
        dimDigits.back().push_back(digitOf(mesh, ref));
    }
    for (const AxisRef &ref : keys) {
      keyDigits.push_back(digitOf(mesh, ref));
      numKeys *= ref.size;
    }
  }

  int64_t numTiles() const { return numKeys * totalShards; }

  int64_t shardOf(int64_t position) const {
    int64_t shard = 0;
    for (size_t d = 0; d < dimDigits.size(); ++d) {
      int64_t index = 0;
      for (const Digit &digit : dimDigits[d])
        index = index * digit.size + digit.of(position);
      shard = shard * numShards[d] + index;
    }
    return shard;
  }

  int64_t tileOf(int64_t position) const {
    int64_t key = 0;
    for (const Digit &digit : keyDigits)
      key = key * digit.size + digit.of(position);
    return key * totalShards + shardOf(position);
  }

  /// [lo, hi) of shard `index` along dim `d`.
  int64_t lo(size_t d, int64_t index) const {
    return std::min(index * tileExtent[d], shape[d]);
  }
  int64_t hi(size_t d, int64_t index) const {
    return std::min((index + 1) * tileExtent[d], shape[d]);
  }

  Box boxOfShard(int64_t shard) const {
    Box box;
    box.lo.resize(shape.size());
    box.hi.resize(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
      int64_t index = shard % numShards[d];
      shard /= numShards[d];
      box.lo[d] = lo(d, index);
      box.hi[d] = hi(d, index);
    }
    return box;
  }

  /// Elements of `box` inside shard `shard`, without building the shard box.
  int64_t overlap(const Box &box, int64_t shard) const {
    int64_t elements = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      int64_t index = shard % numShards[d];
      shard /= numShards[d];
      int64_t extent =
          std::min(box.hi[d], hi(d, index)) - std::max(box.lo[d], lo(d, index));
      if (extent <= 0)
        return 0;
      elements *= extent;
    }
    return elements;
  }
};

/// Per-device integer counters over dense device numbers that can be
/// cleared in time proportional to the entries touched.
class DenseCounter {
public:
  explicit DenseCounter(int32_t size) : value_(size, 0), seen_(size, 0) {}
  int64_t &operator[](int32_t dense) {
    if (!seen_[dense]) {
      seen_[dense] = 1;
      touched_.push_back(dense);
    }
    return value_[dense];
  }
  /// Dense numbers touched since the last clear, in first-touch order.
  const std::vector<int32_t> &entries() const { return touched_; }
  void clear() {
    for (int32_t dense : touched_) {
      value_[dense] = 0;
      seen_[dense] = 0;
    }
    touched_.clear();
  }

private:
  std::vector<int64_t> value_;
  std::vector<char> seen_;
  std::vector<int32_t> touched_;
};

//===----------------------------------------------------------------------===//
// Classification of transfers into collectives
//===----------------------------------------------------------------------===//

/// What the classifier may know about devices beyond the transfers.
struct ClassifyContext {
  const DeviceIndex *index = nullptr;
  /// Destination box by dense device number; null for devices that are not
  /// in the destination mesh.
  std::vector<const Box *> destinationBox;
  /// By dense device number: the device keeps part of its own data.
  std::vector<char> keepsLocal;
};

/// Groups transfers into steps. Components of the communication graph that
/// are exactly an AllGather stay whole; otherwise every multi-destination
/// transfer is a Broadcast and the point-to-point rest is classified per
/// connected component (AllToAll, CollectivePermute, else SendRecv). All
/// permute components of one call become one CollectivePermute step.
///
/// Reused across calls: its per-device arrays are reset by generation
/// stamps, so a call costs time in its transfers, not in the device count.
class Classifier {
public:
  explicit Classifier(const ClassifyContext &context)
      : context_(context), parent_(context.index->size()),
        ufStamp_(context.index->size(), 0),
        componentStamp_(context.index->size(), 0),
        componentIndex_(context.index->size()), mark_(context.index->size(), 0),
        firstOut_(context.index->size()), firstIn_(context.index->size()) {}

  /// `mayRepeatPairs`: one (sender, receiver) pair may carry several
  /// transfers (sub-boxes of a split transfer in one chunk).
  std::vector<Step> run(std::vector<Transfer> transfers, bool mayRepeatPairs) {
    std::vector<Step> steps;
    Step permute{StepKind::CollectivePermute, 0, {}, {}};
    size_t permuteSlot = SIZE_MAX;
    std::vector<int32_t> all(transfers.size());
    std::iota(all.begin(), all.end(), 0);

    for (const std::vector<int32_t> &component : components(transfers, all)) {
      std::vector<int32_t> members = membersOf(transfers, component);
      if (isAllGather(transfers, component, members)) {
        steps.push_back(
            makeStep(StepKind::AllGather, members, transfers, component));
        continue;
      }
      std::vector<int32_t> pointToPoint;
      for (int32_t t : component) {
        if (transfers[t].dstDevices.size() == 1) {
          pointToPoint.push_back(t);
          continue;
        }
        Step broadcast{StepKind::Broadcast, 0, transfers[t].dstDevices, {}};
        broadcast.devices.insert(std::lower_bound(broadcast.devices.begin(),
                                                  broadcast.devices.end(),
                                                  transfers[t].srcDevice),
                                 transfers[t].srcDevice);
        broadcast.transfers.push_back(std::move(transfers[t]));
        steps.push_back(std::move(broadcast));
      }
      // Without broadcasts the component is its own only part.
      bool whole = pointToPoint.size() == component.size();
      std::vector<std::vector<int32_t>> parts;
      if (whole)
        parts.push_back(std::move(pointToPoint));
      else
        parts = components(transfers, pointToPoint);
      for (const std::vector<int32_t> &part : parts) {
        std::vector<int32_t> partMembers =
            whole ? members : membersOf(transfers, part);
        StepKind kind =
            classifyPointToPoint(transfers, part, partMembers, mayRepeatPairs);
        if (kind != StepKind::CollectivePermute) {
          steps.push_back(makeStep(kind, partMembers, transfers, part));
          continue;
        }
        if (permuteSlot == SIZE_MAX) {
          permuteSlot = steps.size();
          steps.emplace_back();
        }
        for (int32_t t : part)
          permute.transfers.push_back(std::move(transfers[t]));
      }
    }
    if (permuteSlot != SIZE_MAX) {
      permute.devices = devicesOf(permute.transfers);
      steps[permuteSlot] = std::move(permute);
    }
    return steps;
  }

private:
  int32_t dense(int64_t id) const { return context_.index->at(id); }

  int32_t find(int32_t x) {
    if (ufStamp_[x] != generation_) {
      ufStamp_[x] = generation_;
      parent_[x] = x;
      return x;
    }
    while (parent_[x] != x) {
      parent_[x] = parent_[parent_[x]];
      x = parent_[x];
    }
    return x;
  }

  /// Connected components of the transfers `subset`, as lists of transfer
  /// indices in order of first appearance.
  std::vector<std::vector<int32_t>>
  components(const std::vector<Transfer> &transfers,
             const std::vector<int32_t> &subset) {
    ++generation_;
    for (int32_t t : subset) {
      int32_t src = find(dense(transfers[t].srcDevice));
      for (int64_t id : transfers[t].dstDevices) {
        int32_t dst = find(dense(id));
        if (src != dst) {
          parent_[std::max(src, dst)] = std::min(src, dst);
          src = std::min(src, dst);
        }
      }
    }
    std::vector<std::vector<int32_t>> result;
    for (int32_t t : subset) {
      int32_t root = find(dense(transfers[t].srcDevice));
      if (componentStamp_[root] != generation_) {
        componentStamp_[root] = generation_;
        componentIndex_[root] = static_cast<int32_t>(result.size());
        result.emplace_back();
      }
      result[componentIndex_[root]].push_back(t);
    }
    return result;
  }

  /// Distinct dense endpoints of the transfers `subset`.
  std::vector<int32_t> membersOf(const std::vector<Transfer> &transfers,
                                 const std::vector<int32_t> &subset) {
    ++markGeneration_;
    std::vector<int32_t> members;
    auto visit = [&](int64_t id) {
      int32_t d = dense(id);
      if (mark_[d] != markGeneration_) {
        mark_[d] = markGeneration_;
        members.push_back(d);
      }
    };
    for (int32_t t : subset) {
      visit(transfers[t].srcDevice);
      for (int64_t id : transfers[t].dstDevices)
        visit(id);
    }
    return members;
  }

  Step makeStep(StepKind kind, const std::vector<int32_t> &members,
                std::vector<Transfer> &transfers,
                const std::vector<int32_t> &subset) {
    Step step{kind, 0, {}, {}};
    step.devices.reserve(members.size());
    for (int32_t d : members)
      step.devices.push_back(context_.index->idAt(d));
    std::sort(step.devices.begin(), step.devices.end());
    // One step often takes every transfer, in order: take the vector.
    if (subset.size() == transfers.size() && !transfers.empty() &&
        subset.front() == 0 &&
        static_cast<size_t>(subset.back()) + 1 == subset.size()) {
      step.transfers = std::move(transfers);
      transfers.clear();
      return step;
    }
    step.transfers.reserve(subset.size());
    for (int32_t t : subset)
      step.transfers.push_back(std::move(transfers[t]));
    return step;
  }

  /// At least two senders; every transfer goes from its sender to every
  /// other member; every member's destination box contains every box sent
  /// (so after the step each member holds the union).
  bool isAllGather(const std::vector<Transfer> &transfers,
                   const std::vector<int32_t> &subset,
                   const std::vector<int32_t> &members) {
    size_t n = members.size();
    if (n < 2)
      return false;
    ++markGeneration_;
    int senders = 0;
    Box bound = transfers[subset.front()].box;
    for (int32_t t : subset) {
      const Transfer &transfer = transfers[t];
      if (transfer.dstDevices.size() != n - 1)
        return false;
      int32_t src = dense(transfer.srcDevice);
      if (mark_[src] != markGeneration_) {
        mark_[src] = markGeneration_;
        ++senders;
      }
      for (size_t d = 0; d < bound.lo.size(); ++d) {
        bound.lo[d] = std::min(bound.lo[d], transfer.box.lo[d]);
        bound.hi[d] = std::max(bound.hi[d], transfer.box.hi[d]);
      }
    }
    if (senders < 2)
      return false;
    for (int32_t member : members) {
      const Box *box = context_.destinationBox[member];
      if (!box || !boxContains(*box, bound))
        return false;
    }
    return true;
  }

  StepKind classifyPointToPoint(const std::vector<Transfer> &transfers,
                                const std::vector<int32_t> &part,
                                const std::vector<int32_t> &members,
                                bool mayRepeatPairs) {
    size_t n = members.size();
    size_t pairs = part.size();
    if (mayRepeatPairs) {
      absl::flat_hash_set<std::pair<int64_t, int64_t>> distinct;
      for (int32_t t : part)
        distinct.insert(
            {transfers[t].srcDevice, transfers[t].dstDevices.front()});
      pairs = distinct.size();
    }
    bool allKeep = true;
    for (int32_t member : members) {
      firstOut_[member] = firstIn_[member] = -1;
      allKeep &= context_.keepsLocal[member] != 0;
    }
    bool isPermutation = true;
    for (int32_t t : part) {
      int32_t src = dense(transfers[t].srcDevice);
      int32_t dst = dense(transfers[t].dstDevices.front());
      if (firstOut_[src] < 0)
        firstOut_[src] = dst;
      if (firstIn_[dst] < 0)
        firstIn_[dst] = src;
      isPermutation &= firstOut_[src] == dst && firstIn_[dst] == src;
    }
    // Two devices swapping data are an all-to-all when each keeps part of
    // its own data (an axis moved between dims), a permute otherwise.
    if (n >= 2 && pairs == n * (n - 1) && (n >= 3 || allKeep))
      return StepKind::AllToAll;
    if (isPermutation)
      return StepKind::CollectivePermute;
    return StepKind::SendRecv;
  }

  const ClassifyContext &context_;
  uint32_t generation_ = 0;
  uint32_t markGeneration_ = 0;
  std::vector<int32_t> parent_;
  std::vector<uint32_t> ufStamp_;
  std::vector<uint32_t> componentStamp_;
  std::vector<int32_t> componentIndex_;
  std::vector<uint32_t> mark_;
  std::vector<int32_t> firstOut_;
  std::vector<int32_t> firstIn_;
};

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

/// The layout of a ReduceScatter whose pieces tile every group's box
/// exactly, if there is one.
std::optional<TensorLayout>
reduceScatterLayout(const TensorLayout &source, const TensorLayout &destination,
                    const UnreducedSplit &split,
                    const std::vector<std::vector<int64_t>> &groups,
                    const absl::flat_hash_map<int64_t, int64_t> &positionOf) {
  std::optional<Sharding> scattered =
      reduceScatterSharding(source, destination, split);
  if (!scattered)
    return std::nullopt;
  absl::StatusOr<TensorLayout> layout =
      TensorLayout::create(source.mesh(), *scattered, source.shape());
  if (!layout.ok())
    return std::nullopt;
  for (const std::vector<int64_t> &members : groups) {
    Box box = source.boxAtPosition(positionOf.at(members.front()));
    int64_t covered = 0;
    for (int64_t member : members) {
      Box piece = layout->boxAtPosition(positionOf.at(member));
      if (!piece.empty() && !boxContains(box, piece))
        return std::nullopt;
      covered += piece.numElements();
    }
    if (covered != box.numElements())
      return std::nullopt;
  }
  return std::move(*layout);
}

/// Which reduction a plan makes and the layout it reduces into, with the
/// groups and positions its steps are cut from.
struct ReductionChoice {
  StepKind kind = StepKind::AllReduce;
  std::optional<TensorLayout> reduced;
  std::vector<std::vector<int64_t>> groups;
  absl::flat_hash_map<int64_t, int64_t> positionOf;
};

absl::StatusOr<ReductionChoice> chooseReduction(const TensorLayout &source,
                                                const TensorLayout &destination,
                                                const UnreducedSplit &split) {
  ReductionChoice choice;
  Sharding groupSharding = source.sharding();
  groupSharding.unreduced = split.reduce;
  absl::StatusOr<TensorLayout> groupLayout =
      TensorLayout::create(source.mesh(), groupSharding, source.shape());
  if (!groupLayout.ok())
    return groupLayout.status();
  choice.groups = groupLayout->reductionGroups();

  const Mesh &mesh = source.mesh();
  for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p)
    choice.positionOf[mesh.deviceAt(p)] = p;

  // Prefer a ReduceScatter whose pieces tile every group's box exactly.
  if (std::optional<TensorLayout> layout = reduceScatterLayout(
          source, destination, split, choice.groups, choice.positionOf)) {
    choice.kind = StepKind::ReduceScatter;
    choice.reduced = std::move(*layout);
    return choice;
  }
  Sharding reducedSharding = source.sharding();
  reducedSharding.unreduced = split.kept;
  absl::StatusOr<TensorLayout> layout =
      TensorLayout::create(mesh, reducedSharding, source.shape());
  if (!layout.ok())
    return layout.status();
  choice.kind = StepKind::AllReduce;
  choice.reduced = std::move(*layout);
  return choice;
}

/// The reduction phase of a plan: one step per group, symbolic when
/// `symbolic` (pieces, no transfers).
absl::StatusOr<ReductionPhase>
planReduction(const TensorLayout &source, const TensorLayout &destination,
              const UnreducedSplit &split, int64_t elementBytes, bool symbolic,
              PlanBudget &budget) {
  absl::StatusOr<ReductionChoice> choice =
      chooseReduction(source, destination, split);
  if (!choice.ok())
    return choice.status();
  const std::vector<std::vector<int64_t>> &groups = choice->groups;
  absl::flat_hash_map<int64_t, int64_t> &positionOf = choice->positionOf;
  ReductionPhase phase;
  phase.kind = choice->kind;
  phase.reduced = std::move(choice->reduced);

  // pieces[i] is reduced onto owners[i].
  auto piecesOf = [&](const std::vector<int64_t> &members, const Box &box,
                      std::vector<Box> &pieces, std::vector<int64_t> &owners) {
    pieces.clear();
    owners.clear();
    if (phase.kind == StepKind::ReduceScatter) {
      for (int64_t member : members) {
        Box piece = phase.reduced->boxAtPosition(positionOf[member]);
        if (!piece.empty()) {
          pieces.push_back(piece);
          owners.push_back(member);
        }
      }
    } else {
      pieces = splitEvenly(box, static_cast<int64_t>(members.size()));
      owners.assign(members.begin(), members.begin() + pieces.size());
    }
  };
  // Count the steps' transfers before making any: phase 0, every member
  // sends each piece it does not own; phase 1 (an all-reduce), each owner
  // sends its piece to the n - 1 others. A symbolic step holds its pieces
  // alone.
  std::vector<Box> pieces;
  std::vector<int64_t> owners;
  for (const std::vector<int64_t> &members : groups) {
    int64_t n = static_cast<int64_t>(members.size());
    Box box = source.boxAtPosition(positionOf[members.front()]);
    if (n < 2 || box.empty())
      continue;
    piecesOf(members, box, pieces, owners);
    int64_t p = static_cast<int64_t>(pieces.size());
    bool gathers = phase.kind == StepKind::AllReduce;
    if (!(symbolic ? budget.add(p, p)
                   : budget.add(n * p - p + (gathers ? p : 0),
                                n * p - p + (gathers ? p * (n - 1) : 0))))
      return budget.error();
  }

  for (const std::vector<int64_t> &members : groups) {
    int64_t n = static_cast<int64_t>(members.size());
    Box box = source.boxAtPosition(positionOf[members.front()]);
    if (n < 2 || box.empty())
      continue;
    piecesOf(members, box, pieces, owners);
    Step step{phase.kind, 0, members, {}};
    if (symbolic)
      step.pieces = ReductionPieces{owners, pieces};
    else
      step.transfers = expandReductionPieces(phase.kind, members,
                                             {owners, pieces}, elementBytes);
    phase.lowerBoundElements += (n - 1) * box.numElements();
    if (phase.kind == StepKind::AllReduce)
      phase.lowerBoundElements += (n - 1) * box.numElements();
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
  /// Destination boxes by destination shard, for the classifier.
  std::vector<Box> destinationShardBox;
  /// By dense device number: destination shard, or -1.
  std::vector<int64_t> destinationShard;
  /// By dense device number: keeps part of its own data.
  std::vector<char> keepsLocal;
};

/// One (receiver, piece) need, served by one holder of the piece's tile.
struct Item {
  int32_t piece;
  int32_t holder;
  int32_t receiverDense;
  int64_t receiver;
};

/// A needing device of a destination tile.
struct Needer {
  int64_t id;
  int32_t dense;
};

/// Assigns each item of one source tile to a holder. First the natural
/// pairing: a receiver that is a source device takes the holder of its own
/// replica rank (same coordinates on the replicating axes, so same-mesh
/// gathers follow mesh axes); other receivers take holders round-robin. If
/// that leaves the busiest holder more than one item above the mean, fall
/// back to greedy least-loaded assignment, largest items first, which bounds
/// the busiest holder by the mean plus the largest item.
void assignHolders(std::vector<Item> &items, int64_t numHolders,
                   const std::vector<int64_t> &pieceElements,
                   const std::vector<int32_t> &replicaRank) {
  if (numHolders == 1) {
    for (Item &item : items)
      item.holder = 0;
    return;
  }
  std::vector<int64_t> load(numHolders, 0);
  int64_t total = 0, largest = 0, roundRobin = 0;
  for (Item &item : items) {
    int64_t rank = replicaRank[item.receiverDense];
    if (rank < 0)
      rank = roundRobin++;
    item.holder = static_cast<int32_t>(rank % numHolders);
    int64_t elements = pieceElements[item.piece];
    load[item.holder] += elements;
    total += elements;
    largest = std::max(largest, elements);
  }
  int64_t busiest = *std::max_element(load.begin(), load.end());
  if (static_cast<__int128>(busiest) * numHolders <=
      static_cast<__int128>(total) +
          static_cast<__int128>(largest) * numHolders)
    return;

  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return pieceElements[items[a].piece] > pieceElements[items[b].piece];
  });
  using Entry = std::pair<int64_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int32_t h = 0; h < numHolders; ++h)
    heap.push({0, h});
  for (size_t index : order) {
    auto [holderLoad, holder] = heap.top();
    heap.pop();
    items[index].holder = holder;
    heap.push({holderLoad + pieceElements[items[index].piece], holder});
  }
}

/// Plans one reshard phase: which boxes each destination device needs,
/// which holder sends each, merged into multi-destination transfers.
class ReshardPhasePlanner {
public:
  ReshardPhasePlanner(const TensorLayout &from, const TensorLayout &to,
                      const UnreducedSplit &split, int64_t elementBytes,
                      const DeviceIndex &index, PlanBudget &budget)
      : from(from), to(to), split(split), elementBytes(elementBytes),
        index(index), budget(budget), src(from, split.kept),
        dst(to, split.kept), rank(to.shape().size()) {}

  absl::StatusOr<ReshardPhase> plan();

private:
  void indexSources();
  absl::Status indexDestinations();
  void computeLowerBound();
  absl::Status countReceivers();
  /// The source shards that overlap `box` in dimension d: [first, last].
  std::pair<int64_t, int64_t> shardRange(const Box &box, size_t d) const {
    return {
        box.lo[d] / src.tileExtent[d],
        std::min((box.hi[d] - 1) / src.tileExtent[d], src.numShards[d] - 1)};
  }
  absl::Status cutPieces();
  absl::Status cutPiece(const std::vector<Needer> &need, int64_t srcTile,
                        Box piece);
  absl::Status mergeTransfers();

  const TensorLayout &from, &to;
  const UnreducedSplit &split;
  int64_t elementBytes;
  const DeviceIndex &index;
  PlanBudget &budget;
  TileGrid src, dst;
  size_t rank;
  ReshardPhase phase;
  /// Per source tile: its holders in mesh-position order, so the rank of a
  /// device among its tile's holders is the same for every tile (it is the
  /// device's coordinate over the replicating axes).
  std::vector<std::vector<int64_t>> holders;
  /// By dense device number: its source tile and its rank among the
  /// tile's holders (-1: none).
  std::vector<int64_t> sourceTile;
  std::vector<int32_t> replicaRank;
  /// Per destination tile: the devices that need it (not zero-filled).
  std::vector<std::vector<Needer>> needers;
  /// Received pieces, and per source tile the needs they serve.
  std::vector<Box> pieces;
  std::vector<int64_t> pieceElements;
  std::vector<std::vector<Item>> itemsOfTile;
};

void ReshardPhasePlanner::indexSources() {
  int32_t numDense = index.size();
  holders.assign(src.numTiles(), {});
  sourceTile.assign(numDense, -1);
  replicaRank.assign(numDense, -1);
  for (int64_t p = 0, e = from.numDevices(); p < e; ++p) {
    int64_t id = from.mesh().deviceAt(p);
    int32_t d = index.at(id);
    int64_t tile = src.tileOf(p);
    sourceTile[d] = tile;
    replicaRank[d] = static_cast<int32_t>(holders[tile].size());
    holders[tile].push_back(id);
  }
}

/// Destination tiles, and the devices that get zeros instead of data.
absl::Status ReshardPhasePlanner::indexDestinations() {
  int32_t numDense = index.size();
  std::vector<Digit> freshDigits;
  for (const AxisRef &ref : split.fresh)
    freshDigits.push_back(digitOf(to.mesh(), ref));
  phase.destinationShardBox.reserve(dst.totalShards);
  for (int64_t shard = 0; shard < dst.totalShards; ++shard)
    phase.destinationShardBox.push_back(dst.boxOfShard(shard));
  phase.destinationShard.assign(numDense, -1);
  phase.keepsLocal.assign(numDense, 0);
  needers.assign(dst.numTiles(), {});
  for (int64_t p = 0, e = to.numDevices(); p < e; ++p) {
    int64_t id = to.mesh().deviceAt(p);
    int32_t d = index.at(id);
    int64_t tile = dst.tileOf(p);
    int64_t shard = tile % dst.totalShards;
    phase.destinationShard[d] = shard;
    bool zero = false;
    for (const Digit &digit : freshDigits)
      zero |= digit.of(p) != 0;
    if (!zero) {
      needers[tile].push_back({id, d});
      continue;
    }
    const Box &box = phase.destinationShardBox[shard];
    if (box.empty())
      continue;
    if (!budget.add(1, 1))
      return budget.error();
    phase.zeroFills.push_back(
        {id, {id}, box, box.numElements() * elementBytes});
  }
  return absl::OkStatus();
}

/// Lower bound, from the layouts alone: every device must receive the part
/// of its box it does not hold (holding the same partial).
void ReshardPhasePlanner::computeLowerBound() {
  for (int64_t tile = 0; tile < dst.numTiles(); ++tile) {
    const Box &box = phase.destinationShardBox[tile % dst.totalShards];
    int64_t key = tile / dst.totalShards;
    for (const Needer &needer : needers[tile]) {
      int64_t held = 0, own = sourceTile[needer.dense];
      if (own >= 0 && own / src.totalShards == key)
        held = src.overlap(box, own % src.totalShards);
      phase.lowerBoundElements += box.numElements() - held;
    }
  }
}

/// Each needer of a destination tile receives (or copies) every piece of
/// it: counted before any is made. The transfers that carry received
/// pieces are counted once they are merged.
absl::Status ReshardPhasePlanner::countReceivers() {
  int64_t receivers = 0;
  for (int64_t tile = 0; tile < dst.numTiles(); ++tile) {
    const Box &box = phase.destinationShardBox[tile % dst.totalShards];
    if (needers[tile].empty() || box.empty())
      continue;
    int64_t numPieces = 1;
    for (size_t d = 0; d < rank; ++d) {
      auto [lo, hi] = shardRange(box, d);
      numPieces = saturatingMul(numPieces, hi - lo + 1);
    }
    receivers = saturatingAdd(
        receivers,
        saturatingMul(numPieces, static_cast<int64_t>(needers[tile].size())));
  }
  if (!budget.add(0, receivers))
    return budget.error();
  return absl::OkStatus();
}

/// One piece of a destination tile, in source tile `srcTile`: a local copy
/// for a needer that holds it, an item (a need to be served) for the rest.
absl::Status ReshardPhasePlanner::cutPiece(const std::vector<Needer> &need,
                                           int64_t srcTile, Box piece) {
  int64_t elements = piece.numElements();
  if (elements <= 0)
    return absl::OkStatus();
  int32_t pieceId = static_cast<int32_t>(pieces.size());
  std::vector<Item> &items = itemsOfTile[srcTile];
  for (const Needer &needer : need) {
    if (sourceTile[needer.dense] != srcTile) {
      items.push_back({pieceId, 0, needer.dense, needer.id});
      continue;
    }
    if (!budget.add(1, 0))
      return budget.error();
    phase.localCopies.push_back(
        {needer.id, {needer.id}, piece, elements * elementBytes});
    phase.keepsLocal[needer.dense] = 1;
  }
  pieces.push_back(std::move(piece));
  pieceElements.push_back(elements);
  return absl::OkStatus();
}

/// Intersects each destination tile with the source tiles of the same key
/// that overlap it: per dim a contiguous range of source shard indices.
/// Items of one source tile come out grouped by piece, receivers in id
/// order.
absl::Status ReshardPhasePlanner::cutPieces() {
  itemsOfTile.assign(src.numTiles(), {});
  std::vector<int64_t> first(rank), last(rank), at(rank);
  for (int64_t tile = 0; tile < dst.numTiles(); ++tile) {
    std::vector<Needer> &need = needers[tile];
    const Box &box = phase.destinationShardBox[tile % dst.totalShards];
    if (need.empty() || box.empty())
      continue;
    std::sort(need.begin(), need.end(),
              [](const Needer &a, const Needer &b) { return a.id < b.id; });
    int64_t key = tile / dst.totalShards;
    for (size_t d = 0; d < rank; ++d)
      std::tie(first[d], last[d]) = shardRange(box, d);
    at = first;
    while (true) {
      int64_t shard = 0;
      Box piece{std::vector<int64_t>(rank), std::vector<int64_t>(rank)};
      for (size_t d = 0; d < rank; ++d) {
        shard = shard * src.numShards[d] + at[d];
        piece.lo[d] = std::max(box.lo[d], src.lo(d, at[d]));
        piece.hi[d] = std::min(box.hi[d], src.hi(d, at[d]));
      }
      if (absl::Status status =
              cutPiece(need, key * src.totalShards + shard, std::move(piece));
          !status.ok())
        return status;
      size_t d = rank;
      while (d > 0 && ++at[d - 1] > last[d - 1]) {
        at[d - 1] = first[d - 1];
        --d;
      }
      if (d == 0)
        break;
    }
  }
  return absl::OkStatus();
}

/// Chooses senders, then merges the receivers of one piece from one sender
/// into one (multi-destination) transfer.
absl::Status ReshardPhasePlanner::mergeTransfers() {
  size_t numTransfers = 0;
  for (int64_t tile = 0; tile < src.numTiles(); ++tile) {
    std::vector<Item> &items = itemsOfTile[tile];
    if (items.empty())
      continue;
    int64_t numHolders = static_cast<int64_t>(holders[tile].size());
    assignHolders(items, numHolders, pieceElements, replicaRank);
    for (size_t begin = 0; begin < items.size();) {
      size_t end = begin;
      while (end < items.size() && items[end].piece == items[begin].piece)
        ++end;
      // Group the run by holder, keeping receivers in id order.
      if (numHolders > 1)
        std::stable_sort(
            items.begin() + begin, items.begin() + end,
            [](const Item &a, const Item &b) { return a.holder < b.holder; });
      for (size_t i = begin; i < end; ++i)
        numTransfers += i == begin || items[i].holder != items[i - 1].holder;
      begin = end;
    }
  }
  if (!budget.add(static_cast<int64_t>(numTransfers), 0))
    return budget.error();
  phase.transfers.reserve(numTransfers);
  for (int64_t tile = 0; tile < src.numTiles(); ++tile) {
    const std::vector<Item> &items = itemsOfTile[tile];
    const std::vector<int64_t> &tileHolders = holders[tile];
    for (size_t begin = 0; begin < items.size();) {
      size_t end = begin;
      while (end < items.size() && items[end].piece == items[begin].piece)
        ++end;
      int32_t pieceId = items[begin].piece;
      for (size_t i = begin; i < end;) {
        size_t j = i;
        while (j < end && items[j].holder == items[i].holder)
          ++j;
        Transfer transfer;
        transfer.srcDevice = tileHolders[items[i].holder];
        transfer.dstDevices.reserve(j - i);
        for (size_t k = i; k < j; ++k)
          transfer.dstDevices.push_back(items[k].receiver);
        transfer.bytes = pieceElements[pieceId] * elementBytes;
        // A piece is used by this run only: its last transfer takes it.
        if (j == end)
          transfer.box = std::move(pieces[pieceId]);
        else
          transfer.box = pieces[pieceId];
        phase.transfers.push_back(std::move(transfer));
        i = j;
      }
      begin = end;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ReshardPhase> ReshardPhasePlanner::plan() {
  indexSources();
  if (absl::Status status = indexDestinations(); !status.ok())
    return status;
  computeLowerBound();
  if (absl::Status status = countReceivers(); !status.ok())
    return status;
  if (absl::Status status = cutPieces(); !status.ok())
    return status;
  if (absl::Status status = mergeTransfers(); !status.ok())
    return status;
  return std::move(phase);
}

absl::StatusOr<ReshardPhase>
planReshardPhase(const TensorLayout &from, const TensorLayout &to,
                 const UnreducedSplit &split, int64_t elementBytes,
                 const DeviceIndex &index, PlanBudget &budget) {
  return ReshardPhasePlanner(from, to, split, elementBytes, index, budget)
      .plan();
}

//===----------------------------------------------------------------------===//
// Chunking under a memory limit
//===----------------------------------------------------------------------===//

Transfer withBox(const Transfer &transfer, Box box, int64_t elementBytes) {
  Transfer part;
  part.srcDevice = transfer.srcDevice;
  part.dstDevices = transfer.dstDevices;
  part.bytes = box.numElements() * elementBytes;
  part.box = std::move(box);
  part.srcBuffer = transfer.srcBuffer;
  part.dstBuffer = transfer.dstBuffer;
  part.accumulate = transfer.accumulate;
  part.phase = transfer.phase;
  return part;
}

bool isReduction(StepKind kind) {
  return kind == StepKind::AllReduce || kind == StepKind::ReduceScatter;
}

/// Assigns the steps of one phase to chunks by next-fit per device: each
/// device's cursor is the last chunk it uses and the staging bytes it has
/// there. A unit goes to the earliest chunk at or after its devices'
/// cursors where it fits for every device, so a unit never runs before a
/// unit placed earlier on a shared device.
class StepChunker {
public:
  StepChunker(std::vector<Step> steps, int64_t limit, int64_t elementBytes,
              const DeviceIndex &index, PlanBudget &budget)
      : steps(std::move(steps)), limit(limit), elementBytes(elementBytes),
        index(index), budget(budget), cursorChunk(index.size(), 0),
        cursorBytes(index.size(), 0), usage(index.size()),
        split(this->steps.size(), 0), fallback(this->steps.size(), 0) {}

  /// Places every step (splitting those over the limit).
  absl::Status place();
  /// The chunked steps, chunk indices from `firstChunk`; sets `nextChunk`
  /// past the last chunk used.
  std::vector<Step> collect(Classifier &classifier, int64_t firstChunk,
                            int64_t &nextChunk);

private:
  /// Adds `transfer`'s staging to its devices' usage.
  void stage(const Transfer &transfer) {
    if (transfer.isLocal())
      return;
    usage[index.at(transfer.srcDevice)] += transfer.bytes;
    for (int64_t id : transfer.dstDevices)
      usage[index.at(id)] += transfer.bytes;
  }
  /// Places one unit (some transfers of step `stepIndex`) at the earliest
  /// chunk it fits.
  void placeUnit(size_t stepIndex, std::vector<Transfer> transfers);
  /// A step over the limit, split into units.
  absl::Status placeSplit(size_t stepIndex);

  std::vector<Step> steps;
  int64_t limit, elementBytes;
  const DeviceIndex &index;
  PlanBudget &budget;
  std::vector<int64_t> cursorChunk, cursorBytes;
  DenseCounter usage;
  /// (chunk, step) -> that step's transfers in that chunk.
  std::map<std::pair<int64_t, size_t>, std::vector<Transfer>> portions;
  std::vector<char> split, fallback;
  int64_t lastChunk = 0;
};

void StepChunker::placeUnit(size_t stepIndex, std::vector<Transfer> transfers) {
  usage.clear();
  for (const Transfer &transfer : transfers)
    stage(transfer);
  int64_t chunk = 0;
  for (int32_t d : usage.entries())
    chunk = std::max(chunk, cursorChunk[d]);
  for (int32_t d : usage.entries())
    if (cursorChunk[d] == chunk && cursorBytes[d] + usage[d] > limit) {
      ++chunk;
      break;
    }
  for (int32_t d : usage.entries()) {
    if (cursorChunk[d] != chunk)
      cursorBytes[d] = 0;
    cursorChunk[d] = chunk;
    cursorBytes[d] += usage[d];
  }
  lastChunk = std::max(lastChunk, chunk);
  std::vector<Transfer> &portion = portions[{chunk, stepIndex}];
  for (Transfer &transfer : transfers)
    portion.push_back(std::move(transfer));
}

absl::Status StepChunker::placeSplit(size_t s) {
  Step &step = steps[s];
  split[s] = 1;
  // Uniform split: part j takes sub-box j of every transfer, so each part
  // keeps the step's pattern (and a reduction stays self-contained: both
  // phases of the same sub-boxes). A device with r roles (one per box it
  // packs or unpacks) stages at most r * maxElements elements per part.
  usage.clear();
  int64_t maxRoles = 0;
  for (const Transfer &transfer : step.transfers) {
    maxRoles = std::max(maxRoles, ++usage[index.at(transfer.srcDevice)]);
    for (int64_t id : transfer.dstDevices)
      maxRoles = std::max(maxRoles, ++usage[index.at(id)]);
  }
  int64_t maxElements = limit / (elementBytes * maxRoles);
  // Each transfer becomes as many as its box has parts: count them before
  // making them.
  int64_t partSize = maxElements >= 1 ? maxElements : limit / elementBytes;
  for (const Transfer &transfer : step.transfers) {
    int64_t extra = splitBoxCount(transfer.box, partSize) - 1;
    if (extra > 0 &&
        !budget.add(extra,
                    saturatingMul(extra, static_cast<int64_t>(
                                             transfer.dstDevices.size()))))
      return budget.error();
  }
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
          part.push_back(withBox(step.transfers[t], std::move(subBoxes[t][j]),
                                 elementBytes));
      placeUnit(s, std::move(part));
    }
    return absl::OkStatus();
  }
  // Too many peers for a uniform split: move transfer by transfer. A
  // reduction stays correct because units are placed in step order (phase
  // 0 before phase 1) and never before an earlier unit on a shared device;
  // its pieces are then grouped send/recv that accumulate.
  fallback[s] = 1;
  for (const Transfer &transfer : step.transfers)
    for (Box &box : splitBox(transfer.box, limit / elementBytes))
      placeUnit(s, {withBox(transfer, std::move(box), elementBytes)});
  return absl::OkStatus();
}

absl::Status StepChunker::place() {
  for (size_t s = 0; s < steps.size(); ++s) {
    usage.clear();
    for (const Transfer &transfer : steps[s].transfers)
      stage(transfer);
    int64_t peak = 0;
    for (int32_t d : usage.entries())
      peak = std::max(peak, usage[d]);
    if (peak <= limit) {
      placeUnit(s, std::move(steps[s].transfers));
      continue;
    }
    if (absl::Status status = placeSplit(s); !status.ok())
      return status;
  }
  return absl::OkStatus();
}

std::vector<Step> StepChunker::collect(Classifier &classifier,
                                       int64_t firstChunk, int64_t &nextChunk) {
  std::vector<Step> chunked;
  for (auto &[key, transfers] : portions) {
    auto [chunk, stepIndex] = key;
    const Step &original = steps[stepIndex];
    if (!split[stepIndex] || isReduction(original.kind)) {
      // Phase 1 of an all-reduce must follow phase 0 of the same boxes.
      std::stable_sort(transfers.begin(), transfers.end(),
                       [](const Transfer &a, const Transfer &b) {
                         return a.phase < b.phase;
                       });
      StepKind kind = fallback[stepIndex] ? StepKind::SendRecv : original.kind;
      Step step{kind, firstChunk + chunk, {}, std::move(transfers)};
      step.devices =
          split[stepIndex] ? devicesOf(step.transfers) : original.devices;
      chunked.push_back(std::move(step));
      continue;
    }
    for (Step &step : classifier.run(std::move(transfers), true)) {
      step.chunk = firstChunk + chunk;
      chunked.push_back(std::move(step));
    }
  }
  nextChunk = firstChunk + lastChunk + 1;
  return chunked;
}

/// Assigns the steps of one phase to chunks so that no device stages more
/// than `limit` bytes in any chunk, splitting steps as needed. Returns the
/// chunked steps (chunk indices from `firstChunk`) and sets `nextChunk` past
/// the last chunk used.
absl::StatusOr<std::vector<Step>>
chunkSteps(std::vector<Step> steps, int64_t limit, int64_t elementBytes,
           const DeviceIndex &index, Classifier &classifier, int64_t firstChunk,
           int64_t &nextChunk, PlanBudget &budget) {
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
  StepChunker chunker(std::move(steps), limit, elementBytes, index, budget);
  if (absl::Status status = chunker.place(); !status.ok())
    return status;
  return chunker.collect(classifier, firstChunk, nextChunk);
}

/// A cheap necessary condition for TensorLayout::isDeviceEquivalent: the two
/// layouts hold the same boxes on the same device ids. It spares most plans
/// the exhaustive check (which also compares reduction groups).
bool sameBoxesOnSameDevices(const TensorLayout &a, const TensorLayout &b,
                            const DeviceIndex &index) {
  if (a.numDevices() != b.numDevices())
    return false;
  TileGrid gridA(a, {}), gridB(b, {});
  std::vector<int64_t> positionInA(index.size(), -1);
  for (int64_t p = 0, e = a.numDevices(); p < e; ++p)
    positionInA[index.at(a.mesh().deviceAt(p))] = p;
  for (int64_t p = 0, e = b.numDevices(); p < e; ++p) {
    int64_t q = positionInA[index.at(b.mesh().deviceAt(p))];
    if (q < 0)
      return false;
    int64_t shardA = gridA.shardOf(q), shardB = gridB.shardOf(p);
    for (size_t d = gridA.shape.size(); d-- > 0;) {
      int64_t i = shardA % gridA.numShards[d], j = shardB % gridB.numShards[d];
      shardA /= gridA.numShards[d];
      shardB /= gridB.numShards[d];
      if (gridA.lo(d, i) != gridB.lo(d, j) || gridA.hi(d, i) != gridB.hi(d, j))
        return false;
    }
  }
  return true;
}

Step localStep(StepKind kind, std::vector<Transfer> transfers, int64_t chunk) {
  Step step{kind, chunk, {}, std::move(transfers)};
  for (const Transfer &transfer : step.transfers)
    step.devices.push_back(transfer.srcDevice);
  std::sort(step.devices.begin(), step.devices.end());
  step.devices.erase(std::unique(step.devices.begin(), step.devices.end()),
                     step.devices.end());
  return step;
}

/// Whether the reshard is an all-to-all of whole tiles: both layouts on one
/// set of devices, no partial sums, each layout's tiles distinct (every
/// mesh axis splits a dimension) and none empty, and no dimension split by
/// both. Then every source tile meets every destination tile, so the
/// explicit plan would be each device's local part plus n(n-1) transfers
/// of one all-to-all step, which the symbolic step states in O(n).
bool exchangesWholeTiles(const TensorLayout &source,
                         const TensorLayout &destination,
                         const DeviceIndex &index) {
  int64_t n = source.numDevices();
  if (n < 2 || destination.numDevices() != n || index.size() != n ||
      !source.sharding().unreduced.empty() ||
      !destination.sharding().unreduced.empty() || source.numTiles() != n ||
      destination.numTiles() != n)
    return false;
  for (size_t d = 0; d < source.shape().size(); ++d) {
    int64_t extent = source.shape()[d];
    int64_t splitBySource = source.numShards(d);
    int64_t splitByDestination = destination.numShards(d);
    // Tiles split along the same dimension meet only their neighbours.
    if (splitBySource > 1 && splitByDestination > 1)
      return false;
    // The last of uneven tiles may be empty: then some pair has nothing
    // to exchange.
    if ((splitBySource - 1) * source.tileExtent(d) >= extent ||
        (splitByDestination - 1) * destination.tileExtent(d) >= extent)
      return false;
  }
  return true;
}

/// The plan of a reshard that exchangesWholeTiles: the local parts, then
/// one symbolic all-to-all over every device.
void planExchange(TransferPlan &plan, const TensorLayout &source,
                  const TensorLayout &destination, const DeviceIndex &index) {
  Step exchange{StepKind::AllToAll, /*chunk=*/0, {}, {}};
  exchange.exchange.emplace();
  std::vector<Transfer> localCopies;
  int64_t missing = 0;
  // Positions by dense id: Mesh::positionOf searches explicit ids.
  std::vector<int64_t> sourceAt(index.size()), destinationAt(index.size());
  for (int64_t p = 0, e = source.numDevices(); p < e; ++p) {
    sourceAt[index.at(source.mesh().deviceAt(p))] = p;
    destinationAt[index.at(destination.mesh().deviceAt(p))] = p;
  }
  for (int32_t i = 0; i < index.size(); ++i) {
    int64_t id = index.idAt(i);
    Box held = source.boxAtPosition(sourceAt[i]);
    Box needed = destination.boxAtPosition(destinationAt[i]);
    Box kept = held.intersect(needed);
    missing += needed.numElements() - kept.numElements();
    if (!kept.empty()) {
      int64_t bytes = kept.numElements() * plan.elementBytes;
      localCopies.push_back({id, {id}, std::move(kept), bytes});
    }
    exchange.devices.push_back(id);
    exchange.exchange->sources.push_back(std::move(held));
    exchange.exchange->destinations.push_back(std::move(needed));
  }
  plan.reshardLowerBoundBytes = missing * plan.elementBytes;
  plan.lowerBoundBytes = plan.reshardLowerBoundBytes;
  if (!localCopies.empty())
    plan.steps.push_back(
        localStep(StepKind::LocalCopy, std::move(localCopies), /*chunk=*/0));
  plan.steps.push_back(std::move(exchange));
  recomputePlanStats(plan);
}

} // namespace

//===----------------------------------------------------------------------===//
// planReshard
//===----------------------------------------------------------------------===//

absl::StatusOr<std::optional<TensorLayout>>
reducedLayoutOf(const TensorLayout &source, const TensorLayout &destination) {
  if (source.shape() != destination.shape())
    return absl::InvalidArgumentError("source and destination shapes differ");
  UnreducedSplit split = splitUnreduced(source, destination);
  if (split.reduce.empty())
    return std::optional<TensorLayout>();
  absl::StatusOr<ReductionChoice> choice =
      chooseReduction(source, destination, split);
  if (!choice.ok())
    return choice.status();
  return std::move(choice->reduced);
}

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
  for (const TensorLayout *layout : {&source, &destination})
    if (layout->numDevices() > kMaxMeshDevices)
      return absl::InvalidArgumentError(
          absl::StrCat("mesh has ", layout->numDevices(), " devices; at most ",
                       kMaxMeshDevices, " (2^20) are supported"));
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

  std::vector<int64_t> ids;
  ids.reserve(source.numDevices() + destination.numDevices());
  for (int64_t p = 0, e = source.numDevices(); p < e; ++p)
    ids.push_back(source.mesh().deviceAt(p));
  for (int64_t p = 0, e = destination.numDevices(); p < e; ++p)
    ids.push_back(destination.mesh().deviceAt(p));
  DeviceIndex index(std::move(ids));

  if (sameBoxesOnSameDevices(source, destination, index) &&
      source.isDeviceEquivalent(destination)) {
    plan.identity = true;
    recomputePlanStats(plan);
    return plan;
  }

  // The chunker splits transfers: under a memory limit they are explicit.
  if (options.symbolicExchanges && options.memoryLimitBytes == 0 &&
      exchangesWholeTiles(source, destination, index)) {
    planExchange(plan, source, destination, index);
    return plan;
  }

  UnreducedSplit split = splitUnreduced(source, destination);
  PlanBudget budget;
  std::vector<Step> reductionSteps;
  const TensorLayout *readLayout = &source;
  if (!split.reduce.empty()) {
    // The chunker splits transfers: under a memory limit they are explicit.
    bool symbolic = options.symbolicReductions && options.memoryLimitBytes == 0;
    absl::StatusOr<ReductionPhase> reduction = planReduction(
        source, destination, split, elementBytes, symbolic, budget);
    if (!reduction.ok())
      return reduction.status();
    plan.reducedLayout = std::move(reduction->reduced);
    plan.reducesInPlace = !reduction->steps.empty();
    plan.reductionLowerBoundBytes =
        reduction->lowerBoundElements * elementBytes;
    reductionSteps = std::move(reduction->steps);
    readLayout = &*plan.reducedLayout;
  }

  absl::StatusOr<ReshardPhase> reshardOr = planReshardPhase(
      *readLayout, destination, split, elementBytes, index, budget);
  if (!reshardOr.ok())
    return reshardOr.status();
  ReshardPhase &reshard = *reshardOr;
  plan.reshardLowerBoundBytes = reshard.lowerBoundElements * elementBytes;
  plan.lowerBoundBytes =
      plan.reductionLowerBoundBytes + plan.reshardLowerBoundBytes;

  ClassifyContext context;
  context.index = &index;
  context.destinationBox.assign(index.size(), nullptr);
  for (int32_t d = 0; d < index.size(); ++d)
    if (reshard.destinationShard[d] >= 0)
      context.destinationBox[d] =
          &reshard.destinationShardBox[reshard.destinationShard[d]];
  context.keepsLocal = std::move(reshard.keepsLocal);
  Classifier classifier(context);

  int64_t nextChunk = 0;
  absl::StatusOr<std::vector<Step>> reductionChunked =
      chunkSteps(std::move(reductionSteps), options.memoryLimitBytes,
                 elementBytes, index, classifier, 0, nextChunk, budget);
  if (!reductionChunked.ok())
    return reductionChunked.status();
  plan.steps = std::move(*reductionChunked);
  int64_t reshardChunk = nextChunk;
  if (!reshard.localCopies.empty())
    plan.steps.push_back(localStep(
        StepKind::LocalCopy, std::move(reshard.localCopies), reshardChunk));
  if (!reshard.zeroFills.empty())
    plan.steps.push_back(localStep(StepKind::ZeroFill,
                                   std::move(reshard.zeroFills), reshardChunk));
  absl::StatusOr<std::vector<Step>> moved =
      chunkSteps(classifier.run(std::move(reshard.transfers), false),
                 options.memoryLimitBytes, elementBytes, index, classifier,
                 reshardChunk, nextChunk, budget);
  if (!moved.ok())
    return moved.status();
  plan.steps.reserve(plan.steps.size() + moved->size());
  for (Step &step : *moved)
    plan.steps.push_back(std::move(step));
  recomputePlanStats(plan);
  return plan;
}

} // namespace polymesh::planner
