//===- DeviceSchedule.cpp - A plan as per-device rows for codegen ---------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/DeviceSchedule.h"
#include "polymesh/Planner/MixedRadix.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <unordered_map>

using namespace polymesh::planner;

namespace {

/// A device's exact tile of one layout: its box, row-major, no padding.
struct Tile {
  Box box;
  std::vector<int64_t> strides; // bytes
  bool present = false;
};

/// `device`'s tile in `layout`: its box, laid out row-major over the box
/// itself, or with `padded` over the layout's localShape() (every device's
/// tile the same shape, the box at its start).
Tile tileOf(const TensorLayout &layout, int64_t device, int64_t elementBytes,
            bool padded) {
  Tile tile;
  size_t rank = layout.shape().size();
  std::optional<Box> box = layout.boxOfDevice(device);
  if (!box) {
    tile.box =
        Box{std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 0)};
  } else {
    tile.box = *box;
    tile.present = true;
  }
  std::vector<int64_t> extents(rank);
  for (size_t d = 0; d < rank; ++d)
    extents[d] = padded && tile.present ? layout.localShape()[d]
                                        : tile.box.hi[d] - tile.box.lo[d];
  tile.strides.assign(rank, elementBytes);
  for (size_t d = rank; d-- > 1;)
    tile.strides[d - 1] = tile.strides[d] * extents[d];
  return tile;
}

/// Where a box lies in a buffer: its first byte and per-dim byte strides.
struct Placement {
  BufferSpace space;
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

Placement inTile(BufferSpace space, const Tile &tile, const Box &box) {
  Placement placement{space, 0, tile.strides};
  for (size_t d = 0; d < box.lo.size(); ++d)
    placement.offset += (box.lo[d] - tile.box.lo[d]) * tile.strides[d];
  return placement;
}

Placement inStaging(int64_t offset, const Box &box, int64_t elementBytes) {
  size_t rank = box.lo.size();
  Placement placement{BufferSpace::Staging, offset,
                      std::vector<int64_t>(rank, elementBytes)};
  for (size_t d = rank; d-- > 1;)
    placement.strides[d - 1] = placement.strides[d] * (box.hi[d] - box.lo[d]);
  return placement;
}

/// A loop around a box copy: `count` copies, each `src` and `dst` bytes
/// after the last.
struct CopyLoop {
  int64_t count, src, dst;
};

/// A row copying `box` from `from` to `to` (inside `loops`, outermost
/// first: each that many times, moved by its strides), with dimensions
/// merged wherever both sides are contiguous across them. The loops and
/// the box's outer dimensions must fit in `outerDims`.
CopyRow makeRow(CopyKind kind, const Placement &from, const Placement &to,
                const Box &box, int64_t elementBytes, int outerDims,
                const std::vector<CopyLoop> &loops = {}) {
  using Dim = CopyLoop;
  std::vector<Dim> dims = loops;
  for (size_t d = 0; d < box.lo.size(); ++d)
    dims.push_back({box.hi[d] - box.lo[d], from.strides[d], to.strides[d]});
  if (dims.size() == loops.size())
    dims.push_back({1, elementBytes, elementBytes});
  // Merge an outer dimension into the next inner one when both buffers are
  // contiguous across the pair.
  for (size_t d = dims.size() - 1; d-- > 0;) {
    Dim &outer = dims[d];
    Dim &inner = dims[d + 1];
    bool srcContiguous =
        kind == CopyKind::Zero || outer.src == inner.count * inner.src;
    if (srcContiguous && outer.dst == inner.count * inner.dst) {
      inner.count *= outer.count;
      dims.erase(dims.begin() + d);
    }
  }
  CopyRow row;
  row.kind = kind;
  row.srcSpace = from.space;
  row.srcOffset = from.offset;
  row.dstSpace = to.space;
  row.dstOffset = to.offset;
  row.runBytes = dims.back().count * elementBytes;
  dims.pop_back();
  assert(dims.size() <= static_cast<size_t>(outerDims) &&
         "more loops than the schedule's outer dimensions");
  size_t pad = outerDims - dims.size();
  row.counts.assign(pad, 1);
  row.srcStrides.assign(pad, 0);
  row.dstStrides.assign(pad, 0);
  for (const Dim &dim : dims) {
    row.counts.push_back(dim.count);
    row.srcStrides.push_back(kind == CopyKind::Zero ? 0 : dim.src);
    row.dstStrides.push_back(dim.dst);
  }
  return row;
}

/// Whether `box` is one contiguous run of `tile` (row-major): every
/// dimension after the first one the box does not cover with extent 1 is
/// whole.
bool contiguousIn(const Tile &tile, const Box &box) {
  size_t rank = box.lo.size();
  size_t d = 0;
  while (d < rank && box.hi[d] - box.lo[d] == 1)
    ++d;
  // Every inner dimension spans a whole row of the one outside it (in the
  // tile's strides: a padded tile's rows are longer than its box).
  for (size_t e = d + 1; e < rank; ++e)
    if (tile.strides[e - 1] != tile.strides[e] * (box.hi[e] - box.lo[e]))
      return false;
  return true;
}

/// Broadcast when one root sends every box of the phase to the same other
/// devices, without sums: the root's staging then is the message.
bool isBroadcast(const Step &step, int phase, std::vector<int64_t> &members) {
  if (step.kind != StepKind::Broadcast)
    return false;
  int64_t root = -1;
  std::set<int64_t> receivers;
  bool first = true;
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != phase)
      continue;
    if (transfer.accumulate)
      return false;
    std::set<int64_t> dsts(transfer.dstDevices.begin(),
                           transfer.dstDevices.end());
    if (dsts.count(transfer.srcDevice))
      return false;
    if (first) {
      root = transfer.srcDevice;
      receivers = dsts;
      first = false;
    } else if (transfer.srcDevice != root || dsts != receivers) {
      return false;
    }
  }
  if (first || receivers.empty())
    return false;
  members.assign(receivers.begin(), receivers.end());
  members.push_back(root);
  std::sort(members.begin(), members.end());
  return true;
}

/// What the collective matchers need to know about the program's tiles.
struct TileSet {
  const std::map<int64_t, size_t> &positionOf;
  const std::vector<Tile> &source, &destination;
  int64_t eb;
  int outerDims;
  /// Collectives may go straight between tiles: asked for
  /// (ScheduleOptions::directCollectives), and every destination element is
  /// written once, by a copy (no zero fills, no sums into the destination),
  /// so a collective may write a member's whole destination tile early.
  bool direct = false;

  const Tile &of(BufferKind kind, size_t position) const {
    return kind == BufferKind::Source ? source[position]
                                      : destination[position];
  }
  std::optional<size_t> position(int64_t device) const {
    auto it = positionOf.find(device);
    if (it == positionOf.end())
      return std::nullopt;
    return it->second;
  }
  /// Whether `device` has a tile of `kind` that contains `box`.
  bool holds(BufferKind kind, int64_t device, const Box &box) const {
    std::optional<size_t> p = position(device);
    if (!p)
      return false;
    const Tile &tile = of(kind, *p);
    return tile.present && tile.box.encloses(box);
  }
};

BufferSpace spaceFor(BufferKind kind) {
  return kind == BufferKind::Source ? BufferSpace::Source
                                    : BufferSpace::Destination;
}

/// `dsts` is every member but `src` (both sorted, `src` a member).
bool isEveryOtherMember(const std::vector<int64_t> &dsts, int64_t src,
                        const std::vector<int64_t> &members) {
  if (dsts.size() + 1 != members.size())
    return false;
  size_t d = 0;
  for (int64_t member : members) {
    if (member == src)
      continue;
    if (d == dsts.size() || dsts[d++] != member)
      return false;
  }
  return true;
}

/// Whether no two of `boxes` overlap. Cheap when some dimension separates
/// them all (the planner splits along one); otherwise pairwise, for a few.
bool pairwiseDisjoint(const std::vector<Box> &boxes) {
  if (boxes.empty())
    return true;
  std::vector<size_t> order(boxes.size());
  for (size_t d = 0; d < boxes.front().lo.size(); ++d) {
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return boxes[a].lo[d] < boxes[b].lo[d];
    });
    bool separated = true;
    for (size_t i = 1; separated && i < order.size(); ++i)
      separated = boxes[order[i - 1]].hi[d] <= boxes[order[i]].lo[d];
    if (separated)
      return true;
  }
  if (boxes.size() > 64)
    return false;
  for (size_t i = 0; i < boxes.size(); ++i)
    for (size_t j = i + 1; j < boxes.size(); ++j)
      if (!boxes[i].intersect(boxes[j]).empty())
        return false;
  return true;
}

/// Sorted, distinct members with at least two of them.
bool validMembers(const std::vector<int64_t> &members) {
  return members.size() >= 2 &&
         std::is_sorted(members.begin(), members.end()) &&
         std::adjacent_find(members.begin(), members.end()) == members.end();
}

/// One step phase's rows, for the devices it touches only (a pod's step
/// touches a few of its devices); addPiece places it in a segment.
struct Piece {
  SegmentMethod method = SegmentMethod::Local;
  StepPhase phase;
  /// The communicator of a collective.
  std::vector<int64_t> members;
  /// By position in the program's devices.
  std::map<size_t, DeviceSegment> rows;
};

Piece collectivePiece(SegmentMethod method, size_t step, int phase,
                      const std::vector<int64_t> &members) {
  Piece piece;
  piece.method = method;
  piece.phase = {step, phase};
  piece.members = members;
  return piece;
}

/// Whether `pieces`, in order, are `tile`'s bytes in order: a collective
/// over the pieces can run on the tile itself. Members of one group mostly
/// share their tile's box, so answers are kept by box.
class TileInOrder {
public:
  TileInOrder(const std::vector<Box> &pieces, const TileSet &tiles)
      : pieces(pieces), tiles(tiles) {}

  bool operator()(const Tile &tile) {
    auto [it, inserted] = known.try_emplace({tile.box.lo, tile.box.hi}, false);
    if (inserted)
      it->second = compute(tile);
    return it->second;
  }

private:
  bool compute(const Tile &tile) const {
    int64_t at = 0;
    for (const Box &piece : pieces) {
      if (!tile.box.encloses(piece) || !contiguousIn(tile, piece) ||
          inTile(BufferSpace::Source, tile, piece).offset != at)
        return false;
      at += piece.numElements() * tiles.eb;
    }
    return at == tile.box.numElements() * tiles.eb;
  }

  const std::vector<Box> &pieces;
  const TileSet &tiles;
  std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, bool> known;
};

/// An all-gather phase in which every member sends one box that is one run
/// of its source tile and the boxes in rank order are every member's whole
/// destination tile: one out-of-place all-gather from tile to tile, no
/// staging. It also writes each member's own box into its destination (a
/// copy the plan makes in another step, of the same bytes), so it needs a
/// plain destination.
std::optional<Piece>
directAllGather(const std::vector<int64_t> &members,
                const std::vector<const Transfer *> &transfers, int64_t chunk,
                size_t s, int phase, const TileSet &tiles) {
  size_t n = members.size();
  if (!tiles.direct || transfers.size() != n)
    return std::nullopt;
  std::vector<const Transfer *> byRank(n, nullptr);
  for (const Transfer *transfer : transfers) {
    size_t rank =
        std::lower_bound(members.begin(), members.end(), transfer->srcDevice) -
        members.begin();
    if (byRank[rank] || transfer->srcBuffer != BufferKind::Source ||
        transfer->dstBuffer != BufferKind::Destination)
      return std::nullopt;
    byRank[rank] = transfer;
  }
  std::vector<Box> boxes;
  for (const Transfer *transfer : byRank)
    boxes.push_back(transfer->box);
  TileInOrder gathered(boxes, tiles);
  Piece piece = collectivePiece(SegmentMethod::AllGather, s, phase, members);
  for (size_t rank = 0; rank < n; ++rank) {
    size_t p = *tiles.position(members[rank]);
    const Tile &from = tiles.source[p];
    const Tile &to = tiles.destination[p];
    if (!contiguousIn(from, boxes[rank]) || !to.present || !gathered(to))
      return std::nullopt;
    CommRow row{CommKind::AllGather, members[rank],
                inTile(BufferSpace::Source, from, boxes[rank]).offset, chunk,
                BufferSpace::Source};
    row.result = BufferPlace{BufferSpace::Destination, 0};
    piece.rows[p].comm.push_back(row);
  }
  return piece;
}

/// One in-place all-gather, when every member of an all-gather phase sends
/// the same number of bytes, unsummed, to every other member. Each member
/// packs its boxes at rank * chunk (in transfer order); receivers unpack in
/// transfer order, as the simulator writes.
std::optional<Piece> matchAllGather(const Step &step, size_t s, int phase,
                                    const TileSet &tiles) {
  if (step.kind != StepKind::AllGather)
    return std::nullopt;
  const std::vector<int64_t> &members = step.devices;
  if (!validMembers(members))
    return std::nullopt;
  size_t n = members.size();
  std::vector<const Transfer *> transfers;
  std::vector<int64_t> contributed(n, 0);
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != phase || transfer.box.empty())
      continue;
    auto rank =
        std::lower_bound(members.begin(), members.end(), transfer.srcDevice);
    if (transfer.accumulate || rank == members.end() ||
        *rank != transfer.srcDevice ||
        !isEveryOtherMember(transfer.dstDevices, transfer.srcDevice, members) ||
        !tiles.holds(transfer.srcBuffer, transfer.srcDevice, transfer.box))
      return std::nullopt;
    for (int64_t dst : transfer.dstDevices)
      if (!tiles.holds(transfer.dstBuffer, dst, transfer.box))
        return std::nullopt;
    contributed[rank - members.begin()] +=
        transfer.box.numElements() * tiles.eb;
    transfers.push_back(&transfer);
  }
  int64_t chunk = contributed[0];
  if (chunk == 0 || std::any_of(contributed.begin(), contributed.end(),
                                [&](int64_t bytes) { return bytes != chunk; }))
    return std::nullopt;
  if (std::optional<Piece> direct =
          directAllGather(members, transfers, chunk, s, phase, tiles))
    return direct;

  Piece piece = collectivePiece(SegmentMethod::AllGather, s, phase, members);
  std::vector<int64_t> packed(n, 0);
  for (const Transfer *transfer : transfers) {
    const Box &box = transfer->box;
    size_t rank =
        std::lower_bound(members.begin(), members.end(), transfer->srcDevice) -
        members.begin();
    int64_t at = rank * chunk + packed[rank];
    packed[rank] += box.numElements() * tiles.eb;
    size_t srcPos = *tiles.position(transfer->srcDevice);
    piece.rows[srcPos].before.push_back(
        makeRow(CopyKind::Copy,
                inTile(spaceFor(transfer->srcBuffer),
                       tiles.of(transfer->srcBuffer, srcPos), box),
                inStaging(at, box, tiles.eb), box, tiles.eb, tiles.outerDims));
    for (int64_t dst : transfer->dstDevices) {
      size_t dstPos = *tiles.position(dst);
      piece.rows[dstPos].after.push_back(
          makeRow(CopyKind::Copy, inStaging(at, box, tiles.eb),
                  inTile(spaceFor(transfer->dstBuffer),
                         tiles.of(transfer->dstBuffer, dstPos), box),
                  box, tiles.eb, tiles.outerDims));
    }
  }
  for (int64_t member : members) {
    DeviceSegment &rows = piece.rows[*tiles.position(member)];
    rows.comm.push_back({CommKind::AllGather, member, 0, chunk});
    rows.stagingBytes = static_cast<int64_t>(n) * chunk;
  }
  return piece;
}

/// Whether every member's source tile (a box) holds every piece.
bool everyMemberHolds(const std::vector<int64_t> &members,
                      const std::vector<Box> &pieces, const TileSet &tiles) {
  Box bounds = boundingBox(pieces);
  return std::all_of(members.begin(), members.end(), [&](int64_t member) {
    return tiles.holds(BufferKind::Source, member, bounds);
  });
}

/// One in-place sum over `members` of `pieces`: afterwards every member
/// holds the sum over all members of every piece, which is what an
/// all-reduce step leaves (each piece reduced onto its owner, then copied
/// to every other member). The pieces must be disjoint (an overlap would
/// be summed twice) and held by every member. Pieces that are the whole
/// source tile, in order, are reduced in the tile itself.
std::optional<Piece> allReduceOf(const std::vector<int64_t> &members,
                                 const std::vector<Box> &pieces, size_t s,
                                 const TileSet &tiles) {
  if (!validMembers(members) || pieces.empty() || !pairwiseDisjoint(pieces) ||
      !everyMemberHolds(members, pieces, tiles))
    return std::nullopt;
  Piece result = collectivePiece(SegmentMethod::AllReduce, s, 0, members);
  int64_t total = 0;
  for (const Box &piece : pieces)
    total += piece.numElements() * tiles.eb;
  TileInOrder inPlace(pieces, tiles);
  for (int64_t member : members) {
    size_t p = *tiles.position(member);
    const Tile &tile = tiles.source[p];
    DeviceSegment &rows = result.rows[p];
    if (inPlace(tile)) {
      rows.comm.push_back(
          {CommKind::AllReduce, member, 0, total, BufferSpace::Source});
      continue;
    }
    int64_t at = 0;
    for (const Box &piece : pieces) {
      Placement inSource = inTile(BufferSpace::Source, tile, piece);
      Placement staged = inStaging(at, piece, tiles.eb);
      rows.before.push_back(makeRow(CopyKind::Copy, inSource, staged, piece,
                                    tiles.eb, tiles.outerDims));
      rows.after.push_back(makeRow(CopyKind::Copy, staged, inSource, piece,
                                   tiles.eb, tiles.outerDims));
      at += piece.numElements() * tiles.eb;
    }
    rows.comm.push_back({CommKind::AllReduce, member, 0, total});
    rows.stagingBytes = total;
  }
  return result;
}

/// Both phases of an all-reduce step in transfers: phase 1 names the
/// pieces and their owners (each copied from its owner to every other
/// member), phase 0 reduces each piece onto its owner from every other
/// member, once.
std::optional<Piece> matchAllReduce(const Step &step, size_t s,
                                    const TileSet &tiles) {
  if (step.kind != StepKind::AllReduce)
    return std::nullopt;
  const std::vector<int64_t> &members = step.devices;
  if (!validMembers(members))
    return std::nullopt;
  size_t n = members.size();
  std::vector<Box> pieces;
  std::vector<int64_t> owners;
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != 1)
      continue;
    if (transfer.accumulate || transfer.box.empty() ||
        transfer.srcBuffer != BufferKind::Source ||
        transfer.dstBuffer != BufferKind::Source ||
        !std::binary_search(members.begin(), members.end(),
                            transfer.srcDevice) ||
        !isEveryOtherMember(transfer.dstDevices, transfer.srcDevice, members))
      return std::nullopt;
    pieces.push_back(transfer.box);
    owners.push_back(transfer.srcDevice);
  }
  std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, size_t>
      pieceOf;
  for (size_t i = 0; i < pieces.size(); ++i)
    pieceOf[{pieces[i].lo, pieces[i].hi}] = i;
  std::vector<std::set<int64_t>> senders(pieces.size());
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase == 1)
      continue;
    auto it = pieceOf.find({transfer.box.lo, transfer.box.hi});
    if (transfer.phase != 0 || !transfer.accumulate || it == pieceOf.end() ||
        transfer.srcBuffer != BufferKind::Source ||
        transfer.dstBuffer != BufferKind::Source ||
        transfer.dstDevices.size() != 1 ||
        transfer.dstDevices.front() != owners[it->second] ||
        transfer.srcDevice == owners[it->second] ||
        !std::binary_search(members.begin(), members.end(),
                            transfer.srcDevice) ||
        !senders[it->second].insert(transfer.srcDevice).second)
      return std::nullopt;
  }
  for (const std::set<int64_t> &from : senders)
    if (from.size() != n - 1)
      return std::nullopt;
  return allReduceOf(members, pieces, s, tiles);
}

/// One in-place reduce-scatter over `members`, rank r's sum being
/// `byRank[r]`, all of one size and held by every member: each member packs
/// every piece (its own too) in rank order; the sum over all members of its
/// own piece is what the step leaves in the owner's tile (its own partial
/// plus every other's), so it is copied back, not added. When the pieces
/// in rank order are a member's whole tile, the tile is the buffer.
std::optional<Piece> reduceScatterOf(const std::vector<int64_t> &members,
                                     const std::vector<Box> &byRank, size_t s,
                                     int phase, const TileSet &tiles) {
  size_t n = members.size();
  if (!validMembers(members) || byRank.size() != n)
    return std::nullopt;
  int64_t chunk = byRank[0].numElements() * tiles.eb;
  for (const Box &piece : byRank)
    if (piece.empty() || piece.numElements() * tiles.eb != chunk)
      return std::nullopt;
  if (!everyMemberHolds(members, byRank, tiles))
    return std::nullopt;

  Piece piece =
      collectivePiece(SegmentMethod::ReduceScatter, s, phase, members);
  TileInOrder inPlace(byRank, tiles);
  for (size_t rank = 0; rank < n; ++rank) {
    size_t p = *tiles.position(members[rank]);
    const Tile &tile = tiles.source[p];
    DeviceSegment &rows = piece.rows[p];
    if (inPlace(tile)) {
      rows.comm.push_back({CommKind::ReduceScatter, members[rank], 0, chunk,
                           BufferSpace::Source});
      continue;
    }
    for (size_t r = 0; r < n; ++r)
      rows.before.push_back(
          makeRow(CopyKind::Copy, inTile(BufferSpace::Source, tile, byRank[r]),
                  inStaging(r * chunk, byRank[r], tiles.eb), byRank[r],
                  tiles.eb, tiles.outerDims));
    rows.comm.push_back({CommKind::ReduceScatter, members[rank], 0, chunk});
    rows.after.push_back(
        makeRow(CopyKind::Copy, inStaging(rank * chunk, byRank[rank], tiles.eb),
                inTile(BufferSpace::Source, tile, byRank[rank]), byRank[rank],
                tiles.eb, tiles.outerDims));
    rows.stagingBytes = static_cast<int64_t>(n) * chunk;
  }
  return piece;
}

/// A reduce-scatter step phase in transfers: every member owns one piece
/// and receives it, to be added into its source tile, from every other
/// member.
std::optional<Piece> matchReduceScatter(const Step &step, size_t s, int phase,
                                        const TileSet &tiles) {
  if (step.kind != StepKind::ReduceScatter)
    return std::nullopt;
  const std::vector<int64_t> &members = step.devices;
  if (!validMembers(members))
    return std::nullopt;
  size_t n = members.size();
  std::vector<std::optional<Box>> pieces(n);
  std::vector<std::set<int64_t>> senders(n);
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != phase)
      continue;
    if (!transfer.accumulate || transfer.box.empty() ||
        transfer.srcBuffer != BufferKind::Source ||
        transfer.dstBuffer != BufferKind::Source ||
        transfer.dstDevices.size() != 1 ||
        transfer.dstDevices.front() == transfer.srcDevice ||
        !std::binary_search(members.begin(), members.end(), transfer.srcDevice))
      return std::nullopt;
    auto owner = std::lower_bound(members.begin(), members.end(),
                                  transfer.dstDevices.front());
    if (owner == members.end() || *owner != transfer.dstDevices.front())
      return std::nullopt;
    size_t rank = owner - members.begin();
    if (pieces[rank] && *pieces[rank] != transfer.box)
      return std::nullopt;
    pieces[rank] = transfer.box;
    if (!senders[rank].insert(transfer.srcDevice).second)
      return std::nullopt;
  }
  std::vector<Box> byRank;
  for (size_t r = 0; r < n; ++r) {
    if (!pieces[r] || senders[r].size() != n - 1)
      return std::nullopt;
    byRank.push_back(*pieces[r]);
  }
  return reduceScatterOf(members, byRank, s, phase, tiles);
}

/// A symbolic reduction step (Step::pieces) as one collective, read off its
/// pieces without expanding them: an all-reduce of the pieces, or a
/// reduce-scatter when every member owns one piece of one size.
std::optional<Piece> matchSymbolicReduction(const Step &step, size_t s,
                                            const TileSet &tiles) {
  if (!step.pieces)
    return std::nullopt;
  const ReductionPieces &pieces = *step.pieces;
  const std::vector<int64_t> &members = step.devices;
  if (!validMembers(members) || pieces.owners.size() != pieces.pieces.size() ||
      pieces.owners.empty())
    return std::nullopt;
  for (int64_t owner : pieces.owners)
    if (!std::binary_search(members.begin(), members.end(), owner))
      return std::nullopt;
  if (step.kind == StepKind::AllReduce)
    return allReduceOf(members, pieces.pieces, s, tiles);
  if (step.kind != StepKind::ReduceScatter ||
      pieces.owners.size() != members.size())
    return std::nullopt;
  std::vector<std::optional<Box>> byOwner(members.size());
  for (size_t i = 0; i < pieces.owners.size(); ++i) {
    size_t rank =
        std::lower_bound(members.begin(), members.end(), pieces.owners[i]) -
        members.begin();
    if (byOwner[rank])
      return std::nullopt;
    byOwner[rank] = pieces.pieces[i];
  }
  std::vector<Box> byRank;
  for (std::optional<Box> &piece : byOwner)
    byRank.push_back(std::move(*piece));
  return reduceScatterOf(members, byRank, s, /*phase=*/0, tiles);
}

/// How the members of an exchange step (Step::exchange) run one
/// all-to-all: in which rank order, and where each member's chunks lie.
/// Found from the step's boxes alone, before any tile is laid out.
struct ExchangeRanks {
  /// order[k]: the index in Step::devices of rank k.
  std::vector<size_t> order;
  /// Per dimension of the sent (received) chunks: whether the chunk
  /// follows the peer's destination (source) tile there; elsewhere it is
  /// the member's whole range.
  std::vector<bool> sentCut, receivedCut;
  /// Where the chunk of rank k starts in a member's source (destination)
  /// tile, as digits of k (mixedRadixDigits).
  std::vector<MixedRadixDigit> sent, received;
};

/// Per dimension: whether the chunks cut by `others` follow them there
/// (every `own` box has one range, enclosing theirs) or are the member's
/// whole range (every `others` box has one range, enclosing the member's).
/// Nullopt when a dimension is neither.
std::optional<std::vector<bool>> chunkCuts(const std::vector<Box> &own,
                                           const std::vector<Box> &others) {
  auto sameRange = [](const std::vector<Box> &boxes, size_t d) {
    return std::all_of(boxes.begin(), boxes.end(), [&](const Box &box) {
      return box.lo[d] == boxes.front().lo[d] &&
             box.hi[d] == boxes.front().hi[d];
    });
  };
  auto encloses = [](const Box &outer, const std::vector<Box> &inner,
                     size_t d) {
    return std::all_of(inner.begin(), inner.end(), [&](const Box &box) {
      return outer.lo[d] <= box.lo[d] && box.hi[d] <= outer.hi[d];
    });
  };
  size_t rank = own.front().lo.size();
  std::vector<bool> cut(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (sameRange(own, d) && encloses(own.front(), others, d))
      cut[d] = true;
    else if (!sameRange(others, d) || !encloses(others.front(), own, d))
      return std::nullopt;
  }
  return cut;
}

/// The rank order and digits of exchange `step`, trying the members in id
/// order (the communicator other collectives of the set share), then in
/// the order of their source tiles, then of their destination tiles: an
/// axis order or device ids that differ between the two layouts put the
/// chunks out of id order but keep them a mixed-radix pattern of one of
/// those orders. Nullopt where none gives one: the chunks differ in shape,
/// or ids are shuffled between the two layouts.
std::optional<ExchangeRanks> findExchangeRanks(const Step &step) {
  const ExchangeTiles &exchange = *step.exchange;
  size_t n = step.devices.size();
  if (n < 2 || exchange.sources.size() != n ||
      exchange.destinations.size() != n)
    return std::nullopt;
  ExchangeRanks ranks;
  std::optional<std::vector<bool>> sentCut =
      chunkCuts(exchange.sources, exchange.destinations);
  std::optional<std::vector<bool>> receivedCut =
      chunkCuts(exchange.destinations, exchange.sources);
  if (!sentCut || !receivedCut)
    return std::nullopt;
  ranks.sentCut = std::move(*sentCut);
  ranks.receivedCut = std::move(*receivedCut);
  // The chunk of rank k starts where the peer's tile does along cut
  // dimensions, where the member's own tile does elsewhere (the same
  // offset, 0, for every member).
  auto chunkStarts = [&](const std::vector<Box> &peers,
                         const std::vector<bool> &cut) {
    return [&peers, &cut, &ranks](int64_t k) {
      const Box &peer = peers[ranks.order[k]];
      std::vector<int64_t> lo(cut.size(), 0);
      for (size_t d = 0; d < cut.size(); ++d)
        if (cut[d])
          lo[d] = peer.lo[d];
      return lo;
    };
  };
  auto byTiles = [&](const std::vector<Box> &tiles) {
    std::stable_sort(
        ranks.order.begin(), ranks.order.end(),
        [&](size_t a, size_t b) { return tiles[a].lo < tiles[b].lo; });
  };
  for (int attempt = 0; attempt < 3; ++attempt) {
    ranks.order.resize(n);
    std::iota(ranks.order.begin(), ranks.order.end(), size_t(0));
    if (attempt == 1)
      byTiles(exchange.sources);
    if (attempt == 2)
      byTiles(exchange.destinations);
    std::optional<std::vector<MixedRadixDigit>> sent =
        mixedRadixDigits(static_cast<int64_t>(n),
                         chunkStarts(exchange.destinations, ranks.sentCut));
    if (!sent)
      continue;
    std::optional<std::vector<MixedRadixDigit>> received =
        mixedRadixDigits(static_cast<int64_t>(n),
                         chunkStarts(exchange.sources, ranks.receivedCut));
    if (!received)
      continue;
    ranks.sent = std::move(*sent);
    ranks.received = std::move(*received);
    return ranks;
  }
  return std::nullopt;
}

/// Where the chunks of a member's all-to-all lie in one of its tiles: the
/// chunk of rank k at `first` plus, per digit of k, the digit times its
/// byte stride (most significant digit first); all of `box`'s shape.
struct ChunkRun {
  Box box;
  int64_t first = 0;
  std::vector<std::pair<const MixedRadixDigit *, int64_t>> strides;
};

/// The chunks of an exchange of whole tiles in the tiles of kind `kind`
/// (Source: what a member sends, cut by the others' destination tiles;
/// Destination: what it receives, cut by the others' source tiles), given
/// the ranks' digits there. Every member's `kind` tile must be `own`'s box
/// with one shape and strides, and the chunks one shape. O(members).
std::optional<ChunkRun>
exchangeChunks(const std::vector<size_t> &positions,
               const std::vector<Box> &own, const std::vector<Box> &others,
               const std::vector<bool> &cut,
               const std::vector<MixedRadixDigit> &digits, BufferKind kind,
               const TileSet &tiles) {
  const Tile &first = tiles.of(kind, positions.front());
  size_t rank = first.box.lo.size();
  for (size_t i = 0; i < positions.size(); ++i) {
    const Tile &tile = tiles.of(kind, positions[i]);
    if (!tile.present || tile.box != own[i] || tile.strides != first.strides)
      return std::nullopt;
    for (size_t d = 0; d < rank; ++d)
      if (tile.box.hi[d] - tile.box.lo[d] !=
              first.box.hi[d] - first.box.lo[d] ||
          (cut[d] && others[i].hi[d] - others[i].lo[d] !=
                         others.front().hi[d] - others.front().lo[d]))
        return std::nullopt;
  }
  ChunkRun run;
  run.box = first.box;
  for (size_t d = 0; d < rank; ++d)
    if (cut[d])
      run.box.lo[d] = others.front().lo[d],
      run.box.hi[d] = others.front().hi[d];
  run.first = inTile(BufferSpace::Source, first, run.box).offset;
  for (auto digit = digits.rbegin(); digit != digits.rend(); ++digit) {
    int64_t stride = 0;
    for (size_t d = 0; d < rank; ++d)
      stride += digit->delta[d] * first.strides[d];
    run.strides.push_back({&*digit, stride});
  }
  return run;
}

/// A symbolic all-to-all (Step::exchange) as one all-to-all call per
/// member whose rows are the same on every member, so that its size does
/// not grow with members x peers: a looped copy packs the chunks for ranks
/// 0..n-1 (the caller's own included) into staging, unless they are the
/// source tile in order; the call; a looped copy unpacks the chunks from
/// ranks 0..n-1 into the destination tile, unless they are that tile in
/// order and collectives may write it directly. The loops run over the
/// ranks' digits (ExchangeRanks), and the group lists the members in rank
/// order. Nullopt when the tiles are not as the digits say.
std::optional<Piece> matchExchange(const Step &step, size_t s,
                                   const ExchangeRanks &ranks,
                                   const TileSet &tiles) {
  const ExchangeTiles &exchange = *step.exchange;
  size_t n = ranks.order.size();
  std::vector<int64_t> group;
  std::vector<size_t> positions;
  std::vector<Box> sources, destinations;
  for (size_t i : ranks.order) {
    std::optional<size_t> p = tiles.position(step.devices[i]);
    if (!p)
      return std::nullopt;
    group.push_back(step.devices[i]);
    positions.push_back(*p);
    sources.push_back(exchange.sources[i]);
    destinations.push_back(exchange.destinations[i]);
  }
  std::optional<ChunkRun> sent =
      exchangeChunks(positions, sources, destinations, ranks.sentCut,
                     ranks.sent, BufferKind::Source, tiles);
  std::optional<ChunkRun> received =
      exchangeChunks(positions, destinations, sources, ranks.receivedCut,
                     ranks.received, BufferKind::Destination, tiles);
  if (!sent || !received || sent->box.numElements() == 0 ||
      sent->box.numElements() != received->box.numElements())
    return std::nullopt;
  int64_t chunk = sent->box.numElements() * tiles.eb;
  int64_t all = static_cast<int64_t>(n) * chunk;
  auto loops = [&](const ChunkRun &run, bool intoStaging) {
    std::vector<CopyLoop> result;
    for (auto [digit, stride] : run.strides) {
      int64_t staged = digit->weight * chunk;
      result.push_back({digit->count, intoStaging ? stride : staged,
                        intoStaging ? staged : stride});
    }
    return result;
  };
  const Tile &source = tiles.source[positions.front()];
  const Tile &destination = tiles.destination[positions.front()];
  CopyRow pack =
      makeRow(CopyKind::Copy,
              Placement{BufferSpace::Source, sent->first, source.strides},
              inStaging(0, sent->box, tiles.eb), sent->box, tiles.eb,
              tiles.outerDims, loops(*sent, /*intoStaging=*/true));
  bool packs = !(pack.srcOffset == 0 && pack.runBytes == all &&
                 source.box.numElements() * tiles.eb == all);
  int64_t recvAt = packs ? all : 0;
  CopyRow unpack = makeRow(
      CopyKind::Copy, inStaging(recvAt, received->box, tiles.eb),
      Placement{BufferSpace::Destination, received->first, destination.strides},
      received->box, tiles.eb, tiles.outerDims,
      loops(*received, /*intoStaging=*/false));
  bool unpacks =
      !(tiles.direct && unpack.dstOffset == 0 && unpack.runBytes == all &&
        destination.box.numElements() * tiles.eb == all);

  Piece piece = collectivePiece(SegmentMethod::AllToAll, s, 0, group);
  for (size_t k = 0; k < n; ++k) {
    DeviceSegment &rows = piece.rows[positions[k]];
    CommRow call{CommKind::AllToAll, group[k], 0, chunk};
    call.space = packs ? BufferSpace::Staging : BufferSpace::Source;
    call.result = unpacks ? BufferPlace{BufferSpace::Staging, recvAt}
                          : BufferPlace{BufferSpace::Destination, 0};
    rows.comm.push_back(call);
    if (packs)
      rows.before.push_back(pack);
    if (unpacks)
      rows.after.push_back(unpack);
    rows.stagingBytes = (packs ? all : 0) + (unpacks ? all : 0);
  }
  return piece;
}

} // namespace

namespace {

/// Schedules one phase of a step that no collective matched: local copies
/// and zero fills, send/recv rows, or one broadcast from a root.
/// The phase's transfers (with a box) in the order their rows take. Send
/// and receive rows keep one order that every device shares, whatever it
/// is (a transfer adds both at once), so blocking calls in row order
/// cannot deadlock (SegmentMethod::SendRecv). Which order decides how many
/// of them run at once: with `rounds`, transfers go in rounds, each to the
/// first round in which none of its devices has one yet, so that a round's
/// messages are between distinct devices and run side by side. Messages of
/// one pair keep their order (a later one finds the earlier one's round
/// taken). Local transfers and broadcasts keep the plan's order.
std::vector<const Transfer *> inRounds(const Step &step, int phase,
                                       bool broadcast, bool rounds) {
  std::vector<std::pair<int64_t, const Transfer *>> ordered;
  std::unordered_map<int64_t, std::vector<char>> busy;
  auto taken = [&](int64_t device, int64_t round) {
    auto it = busy.find(device);
    return it != busy.end() &&
           round < static_cast<int64_t>(it->second.size()) && it->second[round];
  };
  auto take = [&](int64_t device, int64_t round) {
    std::vector<char> &rounds = busy[device];
    if (static_cast<int64_t>(rounds.size()) <= round)
      rounds.resize(round + 1, 0);
    rounds[round] = 1;
  };
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != phase || transfer.box.empty())
      continue;
    if (!rounds || broadcast || transfer.isLocal()) {
      ordered.push_back({0, &transfer});
      continue;
    }
    int64_t round = 0;
    auto free = [&](int64_t r) {
      if (taken(transfer.srcDevice, r))
        return false;
      return std::none_of(transfer.dstDevices.begin(),
                          transfer.dstDevices.end(),
                          [&](int64_t d) { return taken(d, r); });
    };
    while (!free(round))
      ++round;
    take(transfer.srcDevice, round);
    for (int64_t d : transfer.dstDevices)
      take(d, round);
    ordered.push_back({round, &transfer});
  }
  std::stable_sort(
      ordered.begin(), ordered.end(),
      [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<const Transfer *> transfers;
  transfers.reserve(ordered.size());
  for (const auto &entry : ordered)
    transfers.push_back(entry.second);
  return transfers;
}

class PhaseScheduler {
public:
  PhaseScheduler(const Step &step, size_t stepIndex, int phase,
                 const TileSet &tiles, const ScheduleOptions &options)
      : step(step), phase(phase), tiles(tiles), options(options) {
    piece.phase = {stepIndex, phase};
  }

  /// The phase's rows, or why the plan's boxes do not fit its tiles.
  absl::StatusOr<Piece> run();

private:
  absl::StatusOr<size_t> positionFor(int64_t device) const {
    if (std::optional<size_t> p = tiles.position(device))
      return *p;
    return absl::InvalidArgumentError(absl::StrCat(
        "plan names device ", device, " outside the program's devices"));
  }
  CopyRow row(CopyKind kind, const Placement &from, const Placement &to,
              const Box &box) const {
    return makeRow(kind, from, to, box, tiles.eb, tiles.outerDims);
  }
  Placement inBuffer(BufferKind kind, size_t position, const Box &box) const {
    return inTile(spaceFor(kind), tiles.of(kind, position), box);
  }
  /// Room for `bytes` in position p's staging.
  int64_t stage(size_t p, int64_t bytes) {
    int64_t offset = used[p];
    used[p] += bytes;
    return offset;
  }
  absl::Status collectBuffers();
  absl::Status findDirectBroadcast();
  absl::Status scheduleTransfer(const Transfer &transfer);
  absl::Status deliver(const Transfer &transfer, size_t srcPos, int64_t dst,
                       const std::function<int64_t()> &pack,
                       const BufferSpace &sentFrom);
  absl::Status finishBroadcast();

  const Step &step;
  int phase;
  const TileSet &tiles;
  const ScheduleOptions &options;
  Piece piece;
  bool broadcast = false;
  bool remote = false;
  /// Some transfer of the phase adds into its destination.
  bool sums = false;
  /// Buffers written and read in this phase, per device: a local copy
  /// that reads a written one must go through staging, and so must a send
  /// from a written buffer or a receive into a read one.
  std::set<std::pair<size_t, BufferKind>> written, read;
  /// Staging bytes used so far, per position.
  std::map<size_t, int64_t> used;
  int64_t broadcastOffset = 0;
  /// A broadcast that goes straight from the root's tile to the others':
  /// where each member's bytes are.
  std::map<size_t, Placement> direct;
};

absl::Status PhaseScheduler::collectBuffers() {
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != phase)
      continue;
    sums |= transfer.accumulate;
    for (int64_t dst : transfer.dstDevices) {
      absl::StatusOr<size_t> p = positionFor(dst);
      if (!p.ok())
        return p.status();
      written.insert({*p, transfer.dstBuffer});
    }
    if (step.kind != StepKind::ZeroFill) {
      absl::StatusOr<size_t> p = positionFor(transfer.srcDevice);
      if (!p.ok())
        return p.status();
      read.insert({*p, transfer.srcBuffer});
    }
  }
  return absl::OkStatus();
}

/// A broadcast of one box that is one run of the root's tile and of every
/// receiver's tile goes straight from the one to the others: no pack, no
/// unpack, no staging (the common whole-tile replication).
absl::Status PhaseScheduler::findDirectBroadcast() {
  const Transfer *only = nullptr;
  int count = 0;
  for (const Transfer &transfer : step.transfers)
    if (transfer.phase == phase && !transfer.box.empty()) {
      only = &transfer;
      ++count;
    }
  if (count != 1 || only->accumulate)
    return absl::OkStatus();
  absl::StatusOr<size_t> root = positionFor(only->srcDevice);
  if (!root.ok())
    return root.status();
  auto fits = [&](BufferKind kind, size_t position) {
    const Tile &tile = tiles.of(kind, position);
    return tile.present && tile.box.encloses(only->box) &&
           contiguousIn(tile, only->box);
  };
  bool ok = fits(only->srcBuffer, *root);
  if (ok)
    direct.emplace(*root, inBuffer(only->srcBuffer, *root, only->box));
  for (int64_t dst : only->dstDevices) {
    absl::StatusOr<size_t> p = positionFor(dst);
    if (!ok || !p.ok() || dst == only->srcDevice)
      continue;
    ok = fits(only->dstBuffer, *p);
    if (ok)
      direct.emplace(*p, inBuffer(only->dstBuffer, *p, only->box));
  }
  // Every member must have its place (the root sends to all).
  for (int64_t member : piece.members) {
    absl::StatusOr<size_t> p = positionFor(member);
    ok = ok && p.ok() && direct.count(*p);
  }
  if (!ok)
    direct.clear();
  return absl::OkStatus();
}

absl::Status PhaseScheduler::scheduleTransfer(const Transfer &transfer) {
  const Box &box = transfer.box;
  int64_t bytes = box.numElements() * tiles.eb;
  absl::StatusOr<size_t> srcPos = positionFor(transfer.srcDevice);
  if (!srcPos.ok())
    return srcPos.status();
  const Tile &from = tiles.of(transfer.srcBuffer, *srcPos);
  if (step.kind != StepKind::ZeroFill &&
      (!from.present || !from.box.encloses(box)))
    return absl::InvalidArgumentError(
        absl::StrCat("a transfer of ", describe(box), " from device ",
                     transfer.srcDevice, " reads outside its tile"));
  // The sender packs once, whatever the number of receivers; a box that is
  // one run of its tile is sent from the tile itself.
  int64_t packedAt = -1;
  BufferSpace sentFrom = BufferSpace::Staging;
  bool sendDirect = !broadcast && contiguousIn(from, box) &&
                    !written.count({*srcPos, transfer.srcBuffer});
  std::function<int64_t()> pack = [&]() {
    if (packedAt >= 0)
      return packedAt;
    if (sendDirect) {
      Placement at = inBuffer(transfer.srcBuffer, *srcPos, box);
      sentFrom = at.space;
      packedAt = at.offset;
      return packedAt;
    }
    packedAt = broadcast ? broadcastOffset : stage(*srcPos, bytes);
    piece.rows[*srcPos].before.push_back(
        row(CopyKind::Copy, inBuffer(transfer.srcBuffer, *srcPos, box),
            inStaging(packedAt, box, tiles.eb), box));
    return packedAt;
  };
  for (int64_t dst : transfer.dstDevices) {
    // `sentFrom` is set by the first `pack`, which deliver calls first.
    if (absl::Status status = deliver(transfer, *srcPos, dst, pack, sentFrom);
        !status.ok())
      return status;
  }
  if (broadcast)
    broadcastOffset += bytes;
  return absl::OkStatus();
}

/// The rows that bring `transfer`'s box to `dst`: a local copy or fill, a
/// staged copy, an unpack after a broadcast, or a send and a receive.
absl::Status PhaseScheduler::deliver(const Transfer &transfer, size_t srcPos,
                                     int64_t dst,
                                     const std::function<int64_t()> &pack,
                                     const BufferSpace &sentFrom) {
  const Box &box = transfer.box;
  int64_t bytes = box.numElements() * tiles.eb;
  size_t dstPos = *positionFor(dst);
  const Tile &to = tiles.of(transfer.dstBuffer, dstPos);
  if (!to.present || !to.box.encloses(box))
    return absl::InvalidArgumentError(
        absl::StrCat("a transfer of ", describe(box), " to device ", dst,
                     " writes outside its tile"));
  bool zero = step.kind == StepKind::ZeroFill;
  CopyKind writeKind = zero                  ? CopyKind::Zero
                       : transfer.accumulate ? CopyKind::Accumulate
                                             : CopyKind::Copy;
  Placement target = inBuffer(transfer.dstBuffer, dstPos, box);
  Placement source = inBuffer(transfer.srcBuffer, srcPos, box);
  DeviceSegment &receiver = piece.rows[dstPos];
  if (dst == transfer.srcDevice) {
    if (zero) {
      receiver.after.push_back(row(CopyKind::Zero, target, target, box));
    } else if (written.count({dstPos, transfer.srcBuffer})) {
      int64_t at = stage(dstPos, bytes);
      receiver.before.push_back(
          row(CopyKind::Copy, source, inStaging(at, box, tiles.eb), box));
      receiver.after.push_back(
          row(writeKind, inStaging(at, box, tiles.eb), target, box));
    } else {
      receiver.after.push_back(row(writeKind, source, target, box));
    }
    return absl::OkStatus();
  }
  remote = true;
  if (!direct.empty())
    return absl::OkStatus();
  int64_t sentAt = pack();
  if (broadcast) {
    receiver.after.push_back(
        row(writeKind, inStaging(sentAt, box, tiles.eb), target, box));
    return absl::OkStatus();
  }
  DeviceSegment &sender = piece.rows[srcPos];
  sender.comm.push_back({CommKind::Send, dst, sentAt, bytes, sentFrom,
                         static_cast<int64_t>(sender.before.size())});
  // A plain copy of a box that is one run of the destination tile is
  // received in place, when nothing in the phase reads that buffer or adds
  // into it.
  if (writeKind == CopyKind::Copy && !sums && contiguousIn(to, box) &&
      !read.count({dstPos, transfer.dstBuffer})) {
    receiver.comm.push_back({CommKind::Recv, transfer.srcDevice, target.offset,
                             bytes, target.space,
                             static_cast<int64_t>(receiver.before.size())});
    return absl::OkStatus();
  }
  int64_t at = stage(dstPos, bytes);
  receiver.comm.push_back({CommKind::Recv, transfer.srcDevice, at, bytes,
                           BufferSpace::Staging,
                           static_cast<int64_t>(receiver.before.size())});
  receiver.after.push_back(
      row(writeKind, inStaging(at, box, tiles.eb), target, box));
  return absl::OkStatus();
}

/// Every member of a broadcast calls it once, on the staging the phase
/// packed (or in place, for a direct one).
absl::Status PhaseScheduler::finishBroadcast() {
  piece.method = SegmentMethod::Broadcast;
  int64_t root = -1;
  for (const Transfer &transfer : step.transfers)
    if (transfer.phase == phase)
      root = transfer.srcDevice;
  for (int64_t member : piece.members) {
    absl::StatusOr<size_t> p = positionFor(member);
    if (!p.ok())
      return p.status();
    if (auto at = direct.find(*p); at != direct.end()) {
      piece.rows[*p].comm.push_back({CommKind::Broadcast, root,
                                     at->second.offset, broadcastOffset,
                                     at->second.space});
      continue;
    }
    used[*p] = broadcastOffset;
    piece.rows[*p].comm.push_back(
        {CommKind::Broadcast, root, 0, broadcastOffset});
  }
  return absl::OkStatus();
}

absl::StatusOr<Piece> PhaseScheduler::run() {
  broadcast = options.collectives && isBroadcast(step, phase, piece.members);
  if (absl::Status status = collectBuffers(); !status.ok())
    return status;
  if (broadcast)
    if (absl::Status status = findDirectBroadcast(); !status.ok())
      return status;
  for (const Transfer *transfer :
       inRounds(step, phase, broadcast, options.blockingRounds)) {
    if (absl::Status status = scheduleTransfer(*transfer); !status.ok())
      return status;
  }
  if (broadcast) {
    if (absl::Status status = finishBroadcast(); !status.ok())
      return status;
  } else {
    piece.method = remote ? SegmentMethod::SendRecv : SegmentMethod::Local;
  }
  for (auto [p, bytes] : used)
    piece.rows[p].stagingBytes = bytes;
  return std::move(piece);
}

/// Appends pieces to a schedule: a piece joins the last segment when it
/// communicates the same way and none of its devices is busy there.
class SegmentBuilder {
public:
  SegmentBuilder(DeviceSchedule &schedule, const ScheduleOptions &options)
      : schedule(schedule), options(options),
        busyIn(schedule.devices.size(), kNone) {}

  bool keeps(size_t position) const {
    return options.keepRows.empty() || options.keepRows[position];
  }
  void add(Piece piece);

private:
  static constexpr size_t kNone = ~size_t(0);
  DeviceSchedule &schedule;
  const ScheduleOptions &options;
  /// The segment each device last had rows in.
  std::vector<size_t> busyIn;
};

void SegmentBuilder::add(Piece piece) {
  size_t last = schedule.segments.size() - 1;
  bool join = !schedule.segments.empty() &&
              schedule.segments.back().method == piece.method;
  for (auto it = piece.rows.begin(); join && it != piece.rows.end(); ++it)
    join = busyIn[it->first] != last;
  if (!join) {
    Segment segment;
    segment.method = piece.method;
    segment.perDevice.resize(schedule.devices.size());
    schedule.segments.push_back(std::move(segment));
  }
  size_t index = schedule.segments.size() - 1;
  Segment &segment = schedule.segments.back();
  int64_t group = -1;
  if (isCollective(piece.method)) {
    group = static_cast<int64_t>(segment.groups.size());
    bool kept = false;
    for (const auto &entry : piece.rows)
      kept |= keeps(entry.first);
    segment.groups.push_back(kept ? std::move(piece.members)
                                  : std::vector<int64_t>{});
  }
  for (auto &[p, rows] : piece.rows) {
    busyIn[p] = index;
    if (!keeps(p))
      continue;
    rows.group = rows.comm.empty() ? -1 : group;
    schedule.stagingBytes[p] =
        std::max(schedule.stagingBytes[p], rows.stagingBytes);
    segment.perDevice[p] = std::move(rows);
  }
  segment.phases.push_back(piece.phase);
}

/// An identity plan: every device copies its source tile to its
/// destination tile.
absl::Status scheduleIdentity(DeviceSchedule &schedule, const TileSet &tiles,
                              const SegmentBuilder &builder) {
  Segment segment;
  size_t numDevices = schedule.devices.size();
  segment.perDevice.resize(numDevices);
  for (size_t p = 0; p < numDevices; ++p) {
    if (!builder.keeps(p))
      continue;
    const Tile &from = tiles.source[p];
    const Tile &to = tiles.destination[p];
    if (!from.present || from.box.empty())
      continue;
    if (!to.present || from.box != to.box)
      return absl::InvalidArgumentError(
          absl::StrCat("identity plan, but device ", schedule.devices[p],
                       " has different source and destination tiles"));
    segment.perDevice[p].after.push_back(
        makeRow(CopyKind::Copy, inTile(BufferSpace::Source, from, from.box),
                inTile(BufferSpace::Destination, to, to.box), from.box,
                tiles.eb, tiles.outerDims));
  }
  schedule.segments.push_back(std::move(segment));
  return absl::OkStatus();
}

/// Per position, the steps that involve the device (send from it, write to
/// it, or sum over it), in order.
std::vector<std::vector<size_t>> stepsInvolving(const TransferPlan &plan,
                                                const TileSet &tiles) {
  std::vector<std::vector<size_t>> steps(tiles.source.size());
  auto involves = [&](int64_t device, size_t s) {
    if (std::optional<size_t> p = tiles.position(device))
      if (steps[*p].empty() || steps[*p].back() != s)
        steps[*p].push_back(s);
  };
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const Step &step = plan.steps[s];
    if (step.isSymbolic())
      for (int64_t member : step.devices)
        involves(member, s);
    for (const Transfer &transfer : step.transfers) {
      involves(transfer.srcDevice, s);
      for (int64_t dst : transfer.dstDevices)
        involves(dst, s);
    }
  }
  return steps;
}

/// Whether some row of `schedule` writes a source tile.
bool writesSourceBuffer(const DeviceSchedule &schedule) {
  for (const Segment &segment : schedule.segments)
    for (size_t p = 0; p < segment.perDevice.size(); ++p) {
      const DeviceSegment &rows = segment.perDevice[p];
      for (const std::vector<CopyRow> *copies : {&rows.before, &rows.after})
        for (const CopyRow &row : *copies)
          if (row.dstSpace == BufferSpace::Source)
            return true;
      for (const CommRow &row : rows.comm) {
        // A broadcast's root sends.
        if (row.kind == CommKind::Send || (row.kind == CommKind::Broadcast &&
                                           row.peer == schedule.devices[p]))
          continue;
        BufferSpace written = row.result ? row.result->space : row.space;
        if (written == BufferSpace::Source)
          return true;
      }
    }
  return false;
}

/// A local copy of a box from `device`'s source tile to its own
/// destination tile.
bool isOwnCopy(const Transfer &copy, int64_t device) {
  return !copy.accumulate && copy.srcBuffer == BufferKind::Source &&
         copy.dstBuffer == BufferKind::Destination &&
         copy.dstDevices == std::vector<int64_t>{device};
}

/// Schedules a plan's steps in order, each one as a collective where one
/// carries it, else phase by phase.
class StepScheduler {
public:
  StepScheduler(const TransferPlan &plan, const TileSet &tiles,
                const std::map<size_t, ExchangeRanks> &exchangeRanks,
                const ScheduleOptions &options, SegmentBuilder &builder)
      : plan(plan), tiles(tiles), exchangeRanks(exchangeRanks),
        options(options), builder(builder),
        stepsOf(stepsInvolving(plan, tiles)) {}

  absl::Status run() {
    matchGathers();
    matchExchanges();
    for (size_t s = 0; s < plan.steps.size(); ++s)
      if (absl::Status status = scheduleStep(s); !status.ok())
        return status;
    return absl::OkStatus();
  }

private:
  absl::Status scheduleStep(size_t s);
  /// Adds the sum `piece` of step s, first taking the copies of its result
  /// that later steps make where it can (fuseResultCopy).
  void addSum(Piece piece, size_t s, bool lastPhase = true) {
    if (lastPhase && tiles.direct)
      for (auto &[p, rows] : piece.rows)
        fuseResultCopy(piece.members, p, rows, s);
    builder.add(std::move(piece));
  }
  void fuseResultCopy(const std::vector<int64_t> &members, size_t p,
                      DeviceSegment &rows, size_t s);
  void matchGathers();
  void matchExchanges();
  void takeOwnCopy(size_t p, size_t s, const Transfer &sent);
  /// The transfers of local-copy step t from each device.
  const std::unordered_map<int64_t, std::vector<size_t>> &copiesIn(size_t t);

  const TransferPlan &plan;
  const TileSet &tiles;
  /// The exchange steps whose members run one all-to-all, by step.
  const std::map<size_t, ExchangeRanks> &exchangeRanks;
  const ScheduleOptions &options;
  SegmentBuilder &builder;
  std::vector<std::vector<size_t>> stepsOf;
  std::map<size_t, std::unordered_map<int64_t, std::vector<size_t>>> copies;
  /// Per step, the transfers that a sum or an all-gather of another step
  /// does.
  std::map<size_t, std::set<size_t>> taken;
  /// The all-gather step phases that run as one, by step phase.
  std::map<std::pair<size_t, int>, Piece> gathers;
  /// The exchange steps that run as one all-to-all, by step.
  std::map<size_t, Piece> exchanges;
};

/// Matches every exchange step before scheduling any: its all-to-all also
/// writes each member's own chunk to its destination (the member's part of
/// the all-to-all is its whole source tile), so the local copy of that box,
/// in the step before it, goes.
void StepScheduler::matchExchanges() {
  for (const auto &[s, ranks] : exchangeRanks) {
    const Step &step = plan.steps[s];
    std::optional<Piece> piece = matchExchange(step, s, ranks, tiles);
    if (!piece)
      continue;
    for (size_t i = 0; i < step.devices.size(); ++i) {
      Transfer own{
          step.devices[i],
          {step.devices[i]},
          step.exchange->sources[i].intersect(step.exchange->destinations[i])};
      if (!own.box.empty())
        takeOwnCopy(*tiles.position(own.srcDevice), s, own);
    }
    exchanges.emplace(s, std::move(*piece));
  }
}

/// Matches every all-gather step phase before scheduling any step: one that
/// goes straight between tiles also writes each member's own box to its
/// destination, so the local copy of that box (in the step next to it for
/// the member, before or after) goes.
void StepScheduler::matchGathers() {
  if (!options.collectives)
    return;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const Step &step = plan.steps[s];
    if (step.kind != StepKind::AllGather || step.isSymbolic())
      continue;
    int maxPhase = 0;
    for (const Transfer &transfer : step.transfers)
      maxPhase = std::max(maxPhase, transfer.phase);
    for (int phase = 0; phase <= maxPhase; ++phase) {
      std::optional<Piece> piece = matchAllGather(step, s, phase, tiles);
      if (!piece)
        continue;
      if (!piece->rows.empty() && piece->rows.begin()->second.comm.at(0).result)
        for (const Transfer &transfer : step.transfers)
          if (transfer.phase == phase && !transfer.box.empty())
            takeOwnCopy(*tiles.position(transfer.srcDevice), s, transfer);
      gathers.emplace(std::make_pair(s, phase), std::move(*piece));
    }
  }
}

/// Takes, from the step next to step s for position p, the local copy of
/// the box p sends in s from its source to its own destination.
void StepScheduler::takeOwnCopy(size_t p, size_t s, const Transfer &sent) {
  const std::vector<size_t> &involved = stepsOf[p];
  auto at = std::lower_bound(involved.begin(), involved.end(), s);
  std::vector<size_t> neighbours;
  if (at != involved.begin())
    neighbours.push_back(*(at - 1));
  if (at != involved.end() && at + 1 != involved.end())
    neighbours.push_back(*(at + 1));
  for (size_t t : neighbours) {
    if (plan.steps[t].kind != StepKind::LocalCopy || plan.steps[t].isSymbolic())
      continue;
    auto from = copiesIn(t).find(sent.srcDevice);
    if (from == copiesIn(t).end())
      continue;
    for (size_t i : from->second) {
      const Transfer &copy = plan.steps[t].transfers[i];
      if (copy.box == sent.box && isOwnCopy(copy, sent.srcDevice)) {
        taken[t].insert(i);
        return;
      }
    }
  }
}

const std::unordered_map<int64_t, std::vector<size_t>> &
StepScheduler::copiesIn(size_t t) {
  auto [it, inserted] = copies.try_emplace(t);
  if (inserted)
    for (size_t i = 0; i < plan.steps[t].transfers.size(); ++i)
      it->second[plan.steps[t].transfers[i].srcDevice].push_back(i);
  return it->second;
}

/// A sum left in place in member p's source tile (`rows`: an all-reduce or
/// a reduce-scatter of step s) that the next step involving p only copies
/// to p's destination tile, where it is that whole tile laid out alike and
/// nothing later reads p's source: the collective writes the destination
/// instead (out of place). The source tile is then not written, so the
/// lowering need not copy it first, and the local copy goes. Moving the
/// write earlier is safe: no step in between involves p, and the
/// destination is plain (written once, by this copy).
void StepScheduler::fuseResultCopy(const std::vector<int64_t> &members,
                                   size_t p, DeviceSegment &rows, size_t s) {
  if (rows.comm.size() != 1 || rows.comm[0].space != BufferSpace::Source ||
      rows.comm[0].result)
    return;
  CommRow &row = rows.comm[0];
  const std::vector<size_t> &involved = stepsOf[p];
  auto next = std::upper_bound(involved.begin(), involved.end(), s);
  // The copy is p's last use of its source.
  if (next == involved.end() || next + 1 != involved.end())
    return;
  size_t t = *next;
  if (plan.steps[t].kind != StepKind::LocalCopy || plan.steps[t].isSymbolic())
    return;
  auto from = copiesIn(t).find(row.peer);
  if (from == copiesIn(t).end() || from->second.size() != 1)
    return;
  const Transfer &copy = plan.steps[t].transfers[from->second.front()];
  const Box &box = copy.box;
  int64_t at = row.stagingOffset;
  if (row.kind == CommKind::ReduceScatter)
    at += row.bytes *
          (std::lower_bound(members.begin(), members.end(), row.peer) -
           members.begin());
  const Tile &source = tiles.source[p];
  const Tile &destination = tiles.destination[p];
  if (!isOwnCopy(copy, row.peer) || box.numElements() * tiles.eb != row.bytes ||
      !source.box.encloses(box) || !contiguousIn(source, box) ||
      inTile(BufferSpace::Source, source, box).offset != at ||
      !destination.present || destination.box != box ||
      !contiguousIn(destination, box))
    return;
  row.result = BufferPlace{BufferSpace::Destination, 0};
  taken[t].insert(from->second.front());
}

absl::Status StepScheduler::scheduleStep(size_t s) {
  if (auto exchange = exchanges.find(s); exchange != exchanges.end()) {
    builder.add(std::move(exchange->second));
    return absl::OkStatus();
  }
  bool sums = options.collectives && options.reductions;
  // A symbolic reduction is one collective, or its transfers where it
  // cannot be (sums the runtime does not add, overlapping pieces); so is an
  // exchange that matchExchanges did not take.
  std::optional<Step> rewritten;
  if (plan.steps[s].isSymbolic()) {
    if (sums)
      if (std::optional<Piece> piece =
              matchSymbolicReduction(plan.steps[s], s, tiles)) {
        addSum(std::move(*piece), s);
        return absl::OkStatus();
      }
    rewritten = plan.steps[s];
    expandSymbolicStep(*rewritten, plan.elementBytes);
  } else if (auto done = taken.find(s); done != taken.end()) {
    rewritten = plan.steps[s];
    rewritten->transfers.clear();
    for (size_t t = 0; t < plan.steps[s].transfers.size(); ++t)
      if (!done->second.count(t))
        rewritten->transfers.push_back(plan.steps[s].transfers[t]);
  }
  const Step &step = rewritten ? *rewritten : plan.steps[s];
  // Phases the previous sum took every transfer of still get a segment.
  int maxPhase = 0;
  const Step &phases = plan.steps[s].isSymbolic() ? step : plan.steps[s];
  for (const Transfer &transfer : phases.transfers)
    maxPhase = std::max(maxPhase, transfer.phase);
  if (sums)
    if (std::optional<Piece> piece = matchAllReduce(step, s, tiles)) {
      addSum(std::move(*piece), s);
      return absl::OkStatus();
    }
  for (int phase = 0; phase <= maxPhase; ++phase) {
    // All-gather steps are never rewritten: matchGathers saw this one.
    if (auto gather = gathers.find({s, phase}); gather != gathers.end()) {
      builder.add(std::move(gather->second));
      continue;
    }
    if (sums)
      if (std::optional<Piece> piece =
              matchReduceScatter(step, s, phase, tiles)) {
        addSum(std::move(*piece), s, phase == maxPhase);
        continue;
      }
    absl::StatusOr<Piece> piece =
        PhaseScheduler(step, s, phase, tiles, options).run();
    if (!piece.ok())
      return piece.status();
    builder.add(std::move(*piece));
  }
  return absl::OkStatus();
}

} // namespace

const char *polymesh::planner::segmentMethodName(SegmentMethod method) {
  switch (method) {
  case SegmentMethod::Local:
    return "local";
  case SegmentMethod::SendRecv:
    return "send_recv";
  case SegmentMethod::Broadcast:
    return "broadcast";
  case SegmentMethod::AllGather:
    return "all_gather";
  case SegmentMethod::AllReduce:
    return "all_reduce";
  case SegmentMethod::ReduceScatter:
    return "reduce_scatter";
  case SegmentMethod::AllToAll:
    return "all_to_all";
  }
  return "unknown";
}

absl::StatusOr<DeviceSchedule> polymesh::planner::scheduleForDevices(
    const TransferPlan &plan, const TensorLayout &source,
    const TensorLayout &destination, const std::vector<int64_t> &devices,
    const ScheduleOptions &options) {
  DeviceSchedule schedule;
  schedule.devices = devices;
  schedule.elementBytes = plan.elementBytes;
  int rank = static_cast<int>(source.shape().size());
  // An exchange's looped copies need one outer dimension per rank digit.
  std::map<size_t, ExchangeRanks> exchangeRanks;
  size_t digits = 0;
  for (size_t s = 0; options.collectives && s < plan.steps.size(); ++s) {
    if (!plan.steps[s].exchange || !validMembers(plan.steps[s].devices))
      continue;
    if (std::optional<ExchangeRanks> ranks = findExchangeRanks(plan.steps[s])) {
      digits = std::max({digits, ranks->sent.size(), ranks->received.size()});
      exchangeRanks.emplace(s, std::move(*ranks));
    }
  }
  schedule.outerDims = std::max(rank - 1 + static_cast<int>(digits), 0);
  size_t numDevices = devices.size();
  if (!options.keepRows.empty() && options.keepRows.size() != numDevices)
    return absl::InvalidArgumentError(
        absl::StrCat("keepRows names ", options.keepRows.size(),
                     " positions for ", numDevices, " devices"));
  std::map<int64_t, size_t> positionOf;
  for (size_t p = 0; p < numDevices; ++p)
    positionOf[devices[p]] = p;
  std::vector<Tile> sourceTiles, destinationTiles;
  for (int64_t device : devices) {
    sourceTiles.push_back(
        tileOf(source, device, plan.elementBytes, options.paddedTiles));
    destinationTiles.push_back(
        tileOf(destination, device, plan.elementBytes, options.paddedTiles));
  }
  TileSet tiles{positionOf, sourceTiles, destinationTiles, plan.elementBytes,
                schedule.outerDims};
  schedule.stagingBytes.assign(numDevices, 0);
  SegmentBuilder builder(schedule, options);
  if (plan.identity) {
    if (absl::Status status = scheduleIdentity(schedule, tiles, builder);
        !status.ok())
      return status;
    return schedule;
  }

  for (const Step &step : plan.steps)
    for (const Transfer &transfer : step.transfers)
      if (transfer.accumulate && transfer.dstBuffer == BufferKind::Destination)
        schedule.accumulatesIntoDestination = true;
  tiles.direct =
      options.directCollectives && !schedule.accumulatesIntoDestination &&
      std::none_of(plan.steps.begin(), plan.steps.end(), [](const Step &step) {
        return step.kind == StepKind::ZeroFill;
      });
  if (absl::Status status =
          StepScheduler(plan, tiles, exchangeRanks, options, builder).run();
      !status.ok())
    return status;
  schedule.writesSource = writesSourceBuffer(schedule);
  return schedule;
}
