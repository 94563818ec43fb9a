//===- PlanExecutor.cpp - Runs transfer plans through a Backend -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// create() checks the plan as the simulator does and decides, per step, which
// backend call carries it. The decision reads nothing but the plan, so every
// device thread, and every process of a multi-host run, makes the same one:
// that is what keeps the collective calls of all members of a communicator
// in the same order.
//
// A step uses its kind's collective only when its transfers are exactly that
// collective (same sizes, every member, the pieces of a reduction covering
// one region each) and when the collective's staging fits in what the plan
// accounts for each member; anything else runs as grouped send/recv, which
// reproduces the simulator step for step.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/PlanExecutor.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <type_traits>

namespace polymesh::runtime {

using planner::Box;
using planner::BufferKind;
using planner::Step;
using planner::StepKind;
using planner::TensorLayout;
using planner::Transfer;
using planner::TransferPlan;

const char *stepMethodName(StepMethod method) {
  switch (method) {
  case StepMethod::Local:
    return "local";
  case StepMethod::Broadcast:
    return "broadcast";
  case StepMethod::AllGather:
    return "all_gather";
  case StepMethod::AllToAll:
    return "all_to_all";
  case StepMethod::AllReduce:
    return "all_reduce";
  case StepMethod::ReduceScatter:
    return "reduce_scatter";
  case StepMethod::SendRecv:
    return "send_recv";
  }
  return "unknown";
}

namespace {

bool boxWithin(const Box &outer, const Box &inner) {
  for (size_t d = 0; d < outer.lo.size(); ++d)
    if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d])
      return false;
  return true;
}

bool contains(const std::vector<int64_t> &sorted, int64_t value) {
  return std::binary_search(sorted.begin(), sorted.end(), value);
}

std::string describeTransfer(const Step &step, const Transfer &transfer) {
  return absl::StrCat(planner::stepKindName(step.kind), " transfer ",
                      transfer.srcDevice, " -> [",
                      absl::StrJoin(transfer.dstDevices, ", "), "]");
}

int64_t product(const std::vector<int64_t> &values) {
  int64_t result = 1;
  for (int64_t value : values)
    result *= value;
  return result;
}

/// A region of a reduction group, summed over the group and written back to
/// its owner (reduce-scatter) or to every member (all-reduce).
struct Piece {
  const Box *box = nullptr;
  int64_t owner = -1;
  /// Byte offset in the staging buffer.
  int64_t offset = 0;
};

/// Orders boxes for the map that finds a reduction's pieces by box.
struct BoxLess {
  bool operator()(const Box *a, const Box *b) const {
    return std::tie(a->lo, a->hi) < std::tie(b->lo, b->hi);
  }
};

/// How one step runs on every device.
struct StepSchedule {
  StepMethod method = StepMethod::SendRecv;
  int maxPhase = 0;
  /// Per transfer: a local transfer that reads a region some other transfer
  /// of its phase writes on the same device. It is read through staging at
  /// pack time, like a remote box, so it still sees the data from before
  /// the phase. (The planner emits no such transfer; the simulator allows
  /// it, so the executor does too.)
  std::vector<char> stagedLocal;

  // Collectives only.
  /// The communicator: the step's devices, sorted; rank = index.
  std::vector<int64_t> members;
  /// Broadcast: the root.
  int64_t root = -1;
  /// Bytes of the collective's unit: the whole buffer for broadcast and
  /// all_reduce, per rank for all_gather and reduce_scatter, per peer for
  /// all_to_all.
  int64_t unitBytes = 0;
  /// Broadcast: offset of each transfer's box in the staging buffer.
  /// AllGather: offset of each transfer's rank block. AllToAll: offset of
  /// each (transfer, destination) box inside its (sender, receiver) block,
  /// from offsetStart[transfer] on.
  std::vector<int64_t> offsets;
  std::vector<int64_t> offsetStart;
  /// AllReduce: pieces in staging order; ReduceScatter: one per rank.
  std::vector<Piece> pieces;
  /// Reductions: the buffer kind the sums are made in.
  BufferKind reduceBuffer = BufferKind::Source;

  int64_t rankOf(int64_t device) const {
    return std::lower_bound(members.begin(), members.end(), device) -
           members.begin();
  }
};

} // namespace

struct PlanExecutor::Prepared {
  Prepared(const TransferPlan &plan, const TensorLayout &source,
           const TensorLayout &destination, const ExecuteOptions &options)
      : plan(plan), source(source), destination(destination), options(options) {
  }

  TransferPlan plan;
  TensorLayout source;
  TensorLayout destination;
  ExecuteOptions options;
  std::vector<StepSchedule> schedules;
  /// Device -> indices of the steps it has transfers in, in order.
  absl::flat_hash_map<int64_t, std::vector<int32_t>> stepsOf;
  std::vector<int64_t> devices;
  bool needsDataType = false;
};

namespace {

//===----------------------------------------------------------------------===//
// Choosing a method
//===----------------------------------------------------------------------===//

/// Staging bytes the plan accounts for each device in `step`, as the
/// simulator measures it: a sender's box once, a receiver's box once per
/// receiver; local transfers none.
absl::flat_hash_map<int64_t, int64_t> accountedStaging(const Step &step) {
  absl::flat_hash_map<int64_t, int64_t> staging;
  for (const Transfer &transfer : step.transfers) {
    if (transfer.isLocal())
      continue;
    staging[transfer.srcDevice] += transfer.bytes;
    for (int64_t dst : transfer.dstDevices)
      staging[dst] += transfer.bytes;
  }
  return staging;
}

/// The collective needs `bytes` of staging on every member: no more than
/// the plan accounts for any of them.
bool fits(const Step &step, const std::vector<int64_t> &members,
          int64_t bytes) {
  absl::flat_hash_map<int64_t, int64_t> accounted = accountedStaging(step);
  for (int64_t member : members)
    if (accounted[member] < bytes)
      return false;
  return true;
}

/// Members of a collective: the step's devices, which must be exactly the
/// devices its transfers name (so that no member is a bystander) and at
/// least two.
bool collectiveMembers(const Step &step, std::vector<int64_t> &members) {
  std::vector<int64_t> named;
  for (const Transfer &transfer : step.transfers) {
    named.push_back(transfer.srcDevice);
    named.insert(named.end(), transfer.dstDevices.begin(),
                 transfer.dstDevices.end());
  }
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  if (named.size() < 2 || named != step.devices)
    return false;
  members = std::move(named);
  return true;
}

/// `dsts` is every member but `sender`.
bool isEveryOther(const std::vector<int64_t> &dsts,
                  const std::vector<int64_t> &members, int64_t sender) {
  if (dsts.size() + 1 != members.size())
    return false;
  size_t i = 0;
  for (int64_t member : members) {
    if (member == sender)
      continue;
    if (dsts[i++] != member)
      return false;
  }
  return true;
}

/// One root sends every box to the same receivers.
bool tryBroadcast(const Step &step, StepSchedule &schedule) {
  if (step.transfers.empty() || !collectiveMembers(step, schedule.members))
    return false;
  const Transfer &first = step.transfers.front();
  int64_t offset = 0;
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != 0 || transfer.srcDevice != first.srcDevice ||
        transfer.dstDevices != first.dstDevices)
      return false;
    schedule.offsets.push_back(offset);
    offset += transfer.bytes;
  }
  if (contains(first.dstDevices, first.srcDevice))
    return false;
  schedule.root = first.srcDevice;
  schedule.unitBytes = offset;
  return true;
}

/// Every member sends one box of one size to every other member.
bool tryAllGather(const Step &step, StepSchedule &schedule) {
  if (!collectiveMembers(step, schedule.members))
    return false;
  const std::vector<int64_t> &members = schedule.members;
  if (step.transfers.size() != members.size())
    return false;
  int64_t bytes = step.transfers.front().bytes;
  std::vector<char> seen(members.size(), 0);
  for (const Transfer &transfer : step.transfers) {
    int64_t rank = schedule.rankOf(transfer.srcDevice);
    if (transfer.phase != 0 || transfer.bytes != bytes || seen[rank] ||
        !isEveryOther(transfer.dstDevices, members, transfer.srcDevice))
      return false;
    seen[rank] = 1;
    schedule.offsets.push_back(rank * bytes);
  }
  schedule.unitBytes = bytes;
  return true;
}

/// Every ordered pair of distinct members carries the same number of bytes.
bool tryAllToAll(const Step &step, StepSchedule &schedule) {
  if (!collectiveMembers(step, schedule.members))
    return false;
  const std::vector<int64_t> &members = schedule.members;
  size_t n = members.size();
  std::vector<int64_t> pairBytes(n * n, 0);
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != 0)
      return false;
    int64_t src = schedule.rankOf(transfer.srcDevice);
    schedule.offsetStart.push_back(
        static_cast<int64_t>(schedule.offsets.size()));
    for (int64_t dst : transfer.dstDevices) {
      if (dst == transfer.srcDevice)
        return false;
      int64_t &block = pairBytes[src * n + schedule.rankOf(dst)];
      schedule.offsets.push_back(block);
      block += transfer.bytes;
    }
  }
  int64_t bytes = pairBytes[1];
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j && pairBytes[i * n + j] != bytes)
        return false;
  schedule.unitBytes = bytes;
  // In place, the send buffer keeps an (unused) block for the member itself.
  return fits(step, members, static_cast<int64_t>(n) * bytes);
}

/// The sums of an all-reduce or reduce-scatter step: phase 0 accumulates
/// every piece from every other member onto its owner, in one buffer kind;
/// for an all-reduce, phase 1 copies each reduced piece from its owner to
/// every other member. Pieces must be disjoint, so that summing their
/// concatenation is summing each of them once.
bool tryReduction(const Step &step, bool scatter, int64_t elementBytes,
                  StepSchedule &schedule) {
  if (step.transfers.empty() || !collectiveMembers(step, schedule.members))
    return false;
  const std::vector<int64_t> &members = schedule.members;
  int64_t n = static_cast<int64_t>(members.size());
  BufferKind kind = step.transfers.front().srcBuffer;
  schedule.reduceBuffer = kind;
  std::map<const Box *, size_t, BoxLess> pieceOf;
  std::vector<Piece> &pieces = schedule.pieces;
  for (const Transfer &transfer : step.transfers) {
    if (transfer.srcBuffer != kind || transfer.dstBuffer != kind)
      return false;
    if (transfer.phase == 1 && !scatter) {
      if (transfer.accumulate ||
          !isEveryOther(transfer.dstDevices, members, transfer.srcDevice) ||
          !pieceOf.emplace(&transfer.box, pieces.size()).second)
        return false;
      pieces.push_back({&transfer.box, transfer.srcDevice, 0});
    } else if (transfer.phase != 0) {
      return false;
    }
  }
  std::vector<char> seen;
  if (!scatter)
    seen.assign(pieces.size() * n, 0);
  int64_t contributions = 0;
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != 0)
      continue;
    if (!transfer.accumulate || transfer.dstDevices.size() != 1 ||
        transfer.isLocal())
      return false;
    int64_t owner = transfer.dstDevices.front();
    auto [it, added] = pieceOf.emplace(&transfer.box, pieces.size());
    if (added) {
      // Only a reduce-scatter's phase 0 names its pieces.
      if (!scatter)
        return false;
      pieces.push_back({&transfer.box, owner, 0});
      seen.resize(pieces.size() * n, 0);
    }
    if (pieces[it->second].owner != owner)
      return false;
    char &from = seen[it->second * n + schedule.rankOf(transfer.srcDevice)];
    if (from)
      return false;
    from = 1;
    ++contributions;
  }
  if (contributions != static_cast<int64_t>(pieces.size()) * (n - 1))
    return false;
  for (size_t i = 0; i < pieces.size(); ++i)
    for (size_t j = i + 1; j < pieces.size(); ++j)
      if (!pieces[i].box->intersect(*pieces[j].box).empty())
        return false;

  if (scatter) {
    // One piece per member, all of one size, in rank order.
    if (static_cast<int64_t>(pieces.size()) != n)
      return false;
    std::vector<Piece> byRank(n);
    for (const Piece &piece : pieces) {
      Piece &slot = byRank[schedule.rankOf(piece.owner)];
      if (slot.box ||
          piece.box->numElements() != pieces.front().box->numElements())
        return false;
      slot = piece;
    }
    pieces = std::move(byRank);
    schedule.unitBytes = pieces.front().box->numElements() * elementBytes;
    for (int64_t r = 0; r < n; ++r)
      pieces[r].offset = r * schedule.unitBytes;
    return fits(step, members, n * schedule.unitBytes);
  }
  int64_t offset = 0;
  for (Piece &piece : pieces) {
    piece.offset = offset;
    offset += piece.box->numElements() * elementBytes;
  }
  schedule.unitBytes = offset;
  return fits(step, members, offset);
}

/// Marks the local transfers that must be read through staging: those whose
/// box some other transfer of the same phase writes in the same buffer of
/// the same device.
void markStagedLocals(const Step &step, StepSchedule &schedule) {
  schedule.stagedLocal.assign(step.transfers.size(), 0);
  if (step.kind == StepKind::ZeroFill)
    return; // Zero fills read nothing.
  // (phase, device, buffer kind) -> transfers writing there.
  std::map<std::tuple<int, int64_t, BufferKind>, std::vector<size_t>> writers;
  bool anyLocal = false;
  for (size_t t = 0; t < step.transfers.size(); ++t) {
    const Transfer &transfer = step.transfers[t];
    anyLocal |= transfer.isLocal();
    for (int64_t dst : transfer.dstDevices)
      writers[{transfer.phase, dst, transfer.dstBuffer}].push_back(t);
  }
  if (!anyLocal)
    return;
  for (size_t t = 0; t < step.transfers.size(); ++t) {
    const Transfer &transfer = step.transfers[t];
    if (!transfer.isLocal())
      continue;
    auto it =
        writers.find({transfer.phase, transfer.srcDevice, transfer.srcBuffer});
    if (it == writers.end())
      continue;
    for (size_t u : it->second)
      // A transfer that writes its own read box (same buffer) reads and
      // writes each element at one offset: safe in place.
      if (u != t && !step.transfers[u].box.intersect(transfer.box).empty()) {
        schedule.stagedLocal[t] = 1;
        break;
      }
  }
}

StepSchedule schedule(const Step &step, int64_t elementBytes,
                      const ExecuteOptions &options) {
  StepSchedule schedule;
  for (const Transfer &transfer : step.transfers)
    schedule.maxPhase = std::max(schedule.maxPhase, transfer.phase);
  markStagedLocals(step, schedule);
  bool local = std::all_of(step.transfers.begin(), step.transfers.end(),
                           [](const Transfer &t) { return t.isLocal(); });
  if (local) {
    schedule.method = StepMethod::Local;
    return schedule;
  }
  if (options.useCollectives) {
    StepSchedule candidate = schedule;
    bool matched = false;
    StepMethod method = StepMethod::SendRecv;
    switch (step.kind) {
    case StepKind::Broadcast:
      matched = tryBroadcast(step, candidate);
      method = StepMethod::Broadcast;
      break;
    case StepKind::AllGather:
      matched = tryAllGather(step, candidate);
      method = StepMethod::AllGather;
      break;
    case StepKind::AllToAll:
      matched = tryAllToAll(step, candidate);
      method = StepMethod::AllToAll;
      break;
    case StepKind::AllReduce:
      matched = tryReduction(step, /*scatter=*/false, elementBytes, candidate);
      method = StepMethod::AllReduce;
      break;
    case StepKind::ReduceScatter:
      matched = tryReduction(step, /*scatter=*/true, elementBytes, candidate);
      method = StepMethod::ReduceScatter;
      break;
    default:
      // A permute is grouped send/recv in NCCL too; SendRecv is by
      // definition; local kinds with remote transfers take the fallback.
      break;
    }
    if (matched) {
      candidate.method = method;
      return candidate;
    }
  }
  schedule.method = StepMethod::SendRecv;
  return schedule;
}

/// Every device's box in `layout`, by device id.
using TileMap = absl::flat_hash_map<int64_t, Box>;
TileMap tilesOf(const TensorLayout &layout) {
  TileMap tiles;
  for (int64_t p = 0, e = layout.numDevices(); p < e; ++p)
    tiles.emplace(layout.mesh().deviceAt(p), layout.boxAtPosition(p));
  return tiles;
}

/// The simulator's checks, made once: every transfer has receivers and the
/// right byte count, reads and writes boxes inside buffers that exist.
absl::Status validateStep(const Step &step, const TransferPlan &plan,
                          const TileMap &sourceTiles,
                          const TileMap &destinationTiles) {
  auto boxOf = [&](BufferKind kind, int64_t device) -> const Box * {
    const TileMap &tiles =
        kind == BufferKind::Source ? sourceTiles : destinationTiles;
    auto it = tiles.find(device);
    return it == tiles.end() ? nullptr : &it->second;
  };
  for (const Transfer &transfer : step.transfers) {
    if (transfer.dstDevices.empty())
      return absl::InternalError(absl::StrCat(describeTransfer(step, transfer),
                                              " has no destination"));
    if (!std::is_sorted(transfer.dstDevices.begin(),
                        transfer.dstDevices.end()) ||
        std::adjacent_find(transfer.dstDevices.begin(),
                           transfer.dstDevices.end()) !=
            transfer.dstDevices.end())
      return absl::InternalError(
          absl::StrCat(describeTransfer(step, transfer),
                       ": destinations are not sorted and distinct"));
    if (transfer.phase < 0)
      return absl::InternalError(absl::StrCat(describeTransfer(step, transfer),
                                              " has a negative phase"));
    if (transfer.box.lo.size() != plan.shape.size() ||
        transfer.box.hi.size() != plan.shape.size())
      return absl::InternalError(absl::StrCat(describeTransfer(step, transfer),
                                              " has a box of the wrong rank"));
    if (step.kind != StepKind::ZeroFill) {
      const Box *from = boxOf(transfer.srcBuffer, transfer.srcDevice);
      if (!from || !boxWithin(*from, transfer.box))
        return absl::InternalError(absl::StrCat(
            describeTransfer(step, transfer), " reads ",
            planner::describe(transfer.box), " outside its buffer"));
    }
    if (transfer.bytes != transfer.box.numElements() * plan.elementBytes)
      return absl::InternalError(absl::StrCat(describeTransfer(step, transfer),
                                              " has a wrong byte count"));
    for (int64_t dst : transfer.dstDevices) {
      const Box *to = boxOf(transfer.dstBuffer, dst);
      if (!to || !boxWithin(*to, transfer.box))
        return absl::InternalError(absl::StrCat(
            describeTransfer(step, transfer), " writes ",
            planner::describe(transfer.box), " outside the buffer of ", dst));
    }
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Boxes in buffers
//===----------------------------------------------------------------------===//

/// One of a device's buffers: a row-major tile whose element 0 is the
/// global index `origin`.
struct View {
  char *base = nullptr;
  std::vector<int64_t> origin;
  std::vector<int64_t> shape;
  /// Row-major strides in elements.
  std::vector<int64_t> strides;
};

View makeView(void *base, const Box &tile, const std::vector<int64_t> &shape) {
  View view;
  view.base = static_cast<char *>(base);
  view.origin = tile.lo;
  view.shape = shape;
  view.strides.assign(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    view.strides[d - 1] = view.strides[d] * shape[d];
  return view;
}

/// Calls fn(offsetInA, offsetInB, bytes) for every run of `box` that is
/// contiguous in view `a` and (when given) in view `b`, in row-major order;
/// offsets are bytes from each view's base. Inner dimensions that the box
/// covers entirely merge into one run.
template <typename Fn>
void forEachRun(const View &a, const View *b, const Box &box,
                int64_t elementBytes, Fn fn) {
  if (box.empty())
    return;
  size_t rank = box.lo.size();
  size_t outer = rank;
  int64_t runElements = 1;
  while (outer > 0) {
    size_t d = outer - 1;
    int64_t extent = box.hi[d] - box.lo[d];
    runElements *= extent;
    outer = d;
    if (extent != a.shape[d] || (b && extent != b->shape[d]))
      break;
  }
  int64_t runBytes = runElements * elementBytes;
  std::vector<int64_t> index(box.lo.begin(), box.lo.begin() + outer);
  while (true) {
    int64_t offsetA = 0, offsetB = 0;
    for (size_t d = 0; d < rank; ++d) {
      int64_t i = d < outer ? index[d] : box.lo[d];
      offsetA += (i - a.origin[d]) * a.strides[d];
      if (b)
        offsetB += (i - b->origin[d]) * b->strides[d];
    }
    fn(offsetA * elementBytes, offsetB * elementBytes, runBytes);
    size_t d = outer;
    while (d > 0) {
      --d;
      if (++index[d] < box.hi[d])
        break;
      index[d] = box.lo[d];
      if (d == 0)
        return;
    }
    if (outer == 0)
      return;
  }
}

template <typename T> void addNative(char *dst, const char *src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, dst + i * sizeof(T), sizeof(T));
    std::memcpy(&b, src + i * sizeof(T), sizeof(T));
    if constexpr (std::is_integral_v<T>) {
      // Wrap-around in the unsigned type, as the runtime's reductions do:
      // signed overflow is undefined.
      using U = std::make_unsigned_t<T>;
      a = static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      a = a + b;
    }
    std::memcpy(dst + i * sizeof(T), &a, sizeof(T));
  }
}

void addHalf(char *dst, const char *src, int64_t n, bool isBf16) {
  auto widen = isBf16 ? bf16ToFloat : f16ToFloat;
  auto narrow = isBf16 ? floatToBf16 : floatToF16;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t a, b;
    std::memcpy(&a, dst + 2 * i, 2);
    std::memcpy(&b, src + 2 * i, 2);
    a = narrow(widen(a) + widen(b));
    std::memcpy(dst + 2 * i, &a, 2);
  }
}

/// dst[i] += src[i] for `n` elements of `type` (dst may equal src).
void addInto(DataType type, char *dst, const char *src, int64_t n) {
  switch (type) {
  case DataType::F32:
    return addNative<float>(dst, src, n);
  case DataType::F64:
    return addNative<double>(dst, src, n);
  case DataType::F16:
    return addHalf(dst, src, n, /*isBf16=*/false);
  case DataType::BF16:
    return addHalf(dst, src, n, /*isBf16=*/true);
  case DataType::I32:
    return addNative<int32_t>(dst, src, n);
  case DataType::I64:
    return addNative<int64_t>(dst, src, n);
  case DataType::I8:
    return addNative<int8_t>(dst, src, n);
  case DataType::U8:
    return addNative<uint8_t>(dst, src, n);
  }
}

//===----------------------------------------------------------------------===//
// One device
//===----------------------------------------------------------------------===//

/// A device's run of one plan.
class DeviceRun {
public:
  DeviceRun(const PlanExecutor::Prepared &prepared, Backend &backend,
            int64_t device, const DeviceBuffers &buffers)
      : prepared(prepared), plan(prepared.plan), backend(backend),
        device(device), elementBytes(prepared.plan.elementBytes),
        dtype(buffers.dtype.value_or(DataType::U8)) {
    if (std::optional<Box> tile = prepared.source.boxOfDevice(device))
      views[0] = makeView(buffers.source, *tile, prepared.source.localShape());
    if (std::optional<Box> tile = prepared.destination.boxOfDevice(device))
      views[1] = makeView(buffers.destination, *tile,
                          prepared.destination.localShape());
  }

  absl::Status run(const std::vector<int32_t> &steps) {
    for (int32_t s : steps) {
      ++stats.steps;
      if (absl::Status status = runStep(plan.steps[s], prepared.schedules[s]);
          !status.ok())
        return status;
    }
    return absl::OkStatus();
  }

  ExecutionStats stats;

private:
  const View &view(BufferKind kind) const {
    return views[kind == BufferKind::Source ? 0 : 1];
  }

  /// A staging buffer for one step phase; the device holds one at a time.
  std::unique_ptr<char[]> allocate(int64_t bytes) {
    stats.peakStagingBytes = std::max(stats.peakStagingBytes, bytes);
    return std::unique_ptr<char[]>(new char[std::max<int64_t>(bytes, 1)]);
  }

  void pack(const Transfer &transfer, bool zero, char *out) const {
    if (zero) {
      std::memset(out, 0, static_cast<size_t>(transfer.bytes));
      return;
    }
    const View &from = view(transfer.srcBuffer);
    forEachRun(from, nullptr, transfer.box, elementBytes,
               [&](int64_t offset, int64_t, int64_t bytes) {
                 std::memcpy(out, from.base + offset, bytes);
                 out += bytes;
               });
  }

  void unpack(BufferKind kind, const Box &box, bool accumulate,
              const char *in) const {
    const View &to = view(kind);
    forEachRun(to, nullptr, box, elementBytes,
               [&](int64_t offset, int64_t, int64_t bytes) {
                 if (accumulate)
                   addInto(dtype, to.base + offset, in, bytes / elementBytes);
                 else
                   std::memcpy(to.base + offset, in, bytes);
                 in += bytes;
               });
  }

  /// A local transfer straight from one buffer to the other (or the same:
  /// then every element maps onto itself, hence memmove).
  void copyLocal(const Transfer &transfer, bool zero) const {
    const View &to = view(transfer.dstBuffer);
    if (zero) {
      forEachRun(to, nullptr, transfer.box, elementBytes,
                 [&](int64_t offset, int64_t, int64_t bytes) {
                   if (!transfer.accumulate) {
                     std::memset(to.base + offset, 0, bytes);
                     return;
                   }
                   std::vector<char> zeros(bytes, 0);
                   addInto(dtype, to.base + offset, zeros.data(),
                           bytes / elementBytes);
                 });
      return;
    }
    const View &from = view(transfer.srcBuffer);
    forEachRun(from, &to, transfer.box, elementBytes,
               [&](int64_t offsetFrom, int64_t offsetTo, int64_t bytes) {
                 if (transfer.accumulate)
                   addInto(dtype, to.base + offsetTo, from.base + offsetFrom,
                           bytes / elementBytes);
                 else
                   std::memmove(to.base + offsetTo, from.base + offsetFrom,
                                bytes);
               });
  }

  absl::Status runStep(const Step &step, const StepSchedule &schedule) {
    switch (schedule.method) {
    case StepMethod::Broadcast:
      return runBroadcast(step, schedule);
    case StepMethod::AllGather:
      return runAllGather(step, schedule);
    case StepMethod::AllToAll:
      return runAllToAll(step, schedule);
    case StepMethod::AllReduce:
    case StepMethod::ReduceScatter:
      return runReduction(schedule);
    case StepMethod::Local:
    case StepMethod::SendRecv:
      break;
    }
    for (int phase = 0; phase <= schedule.maxPhase; ++phase)
      if (absl::Status status = runGroupedPhase(step, schedule, phase);
          !status.ok())
        return status;
    return absl::OkStatus();
  }

  /// The fallback: pack every box this device sends, post all sends and
  /// receives in one group, then unpack and copy in transfer order.
  absl::Status runGroupedPhase(const Step &step, const StepSchedule &schedule,
                               int phase) {
    const std::vector<Transfer> &transfers = step.transfers;
    bool zero = step.kind == StepKind::ZeroFill;
    std::vector<int64_t> packAt(transfers.size(), -1),
        recvAt(transfers.size(), -1);
    int64_t total = 0;
    bool involved = false, remote = false;
    for (size_t t = 0; t < transfers.size(); ++t) {
      const Transfer &transfer = transfers[t];
      if (transfer.phase != phase)
        continue;
      bool sends = transfer.srcDevice == device;
      bool receives = contains(transfer.dstDevices, device);
      involved |= sends || receives;
      if (sends && (!transfer.isLocal() || schedule.stagedLocal[t])) {
        packAt[t] = total;
        total += transfer.bytes;
        remote |= !transfer.isLocal();
      }
      if (receives && !sends) {
        recvAt[t] = total;
        total += transfer.bytes;
        remote = true;
      }
    }
    if (!involved)
      return absl::OkStatus();
    std::unique_ptr<char[]> staging = allocate(total);
    for (size_t t = 0; t < transfers.size(); ++t)
      if (packAt[t] >= 0)
        pack(transfers[t], zero, staging.get() + packAt[t]);

    if (remote) {
      if (absl::Status status = backend.groupStart(device); !status.ok())
        return status;
      ++stats.groups;
      for (size_t t = 0; t < transfers.size(); ++t) {
        const Transfer &transfer = transfers[t];
        if (packAt[t] >= 0 && !transfer.isLocal())
          for (int64_t dst : transfer.dstDevices) {
            if (dst == device)
              continue;
            ++stats.sendCalls;
            if (absl::Status status = backend.send(
                    device, dst, staging.get() + packAt[t], transfer.bytes);
                !status.ok())
              return status;
          }
        if (recvAt[t] >= 0) {
          ++stats.recvCalls;
          if (absl::Status status =
                  backend.recv(device, transfer.srcDevice,
                               staging.get() + recvAt[t], transfer.bytes);
              !status.ok())
            return status;
        }
      }
      if (absl::Status status = backend.groupEnd(device); !status.ok())
        return status;
    }

    for (size_t t = 0; t < transfers.size(); ++t) {
      const Transfer &transfer = transfers[t];
      if (transfer.phase != phase || !contains(transfer.dstDevices, device))
        continue;
      if (recvAt[t] >= 0)
        unpack(transfer.dstBuffer, transfer.box, transfer.accumulate,
               staging.get() + recvAt[t]);
      else if (packAt[t] >= 0)
        unpack(transfer.dstBuffer, transfer.box, transfer.accumulate,
               staging.get() + packAt[t]);
      else
        copyLocal(transfer, zero);
    }
    return absl::OkStatus();
  }

  absl::Status runBroadcast(const Step &step, const StepSchedule &schedule) {
    std::unique_ptr<char[]> staging = allocate(schedule.unitBytes);
    bool root = device == schedule.root;
    if (root)
      for (size_t t = 0; t < step.transfers.size(); ++t)
        pack(step.transfers[t], /*zero=*/false,
             staging.get() + schedule.offsets[t]);
    ++stats.collectiveCalls;
    if (absl::Status status =
            backend.broadcast(device, schedule.members, schedule.root,
                              staging.get(), staging.get(), schedule.unitBytes);
        !status.ok())
      return status;
    if (!root)
      for (size_t t = 0; t < step.transfers.size(); ++t) {
        const Transfer &transfer = step.transfers[t];
        unpack(transfer.dstBuffer, transfer.box, transfer.accumulate,
               staging.get() + schedule.offsets[t]);
      }
    return absl::OkStatus();
  }

  absl::Status runAllGather(const Step &step, const StepSchedule &schedule) {
    int64_t n = static_cast<int64_t>(schedule.members.size());
    int64_t rank = schedule.rankOf(device);
    std::unique_ptr<char[]> staging = allocate(n * schedule.unitBytes);
    char *own = staging.get() + rank * schedule.unitBytes;
    for (const Transfer &transfer : step.transfers)
      if (transfer.srcDevice == device)
        pack(transfer, /*zero=*/false, own);
    ++stats.collectiveCalls;
    if (absl::Status status = backend.allGather(
            device, schedule.members, own, staging.get(), schedule.unitBytes);
        !status.ok())
      return status;
    for (size_t t = 0; t < step.transfers.size(); ++t) {
      const Transfer &transfer = step.transfers[t];
      if (transfer.srcDevice != device)
        unpack(transfer.dstBuffer, transfer.box, transfer.accumulate,
               staging.get() + schedule.offsets[t]);
    }
    return absl::OkStatus();
  }

  absl::Status runAllToAll(const Step &step, const StepSchedule &schedule) {
    int64_t n = static_cast<int64_t>(schedule.members.size());
    int64_t block = schedule.unitBytes;
    std::unique_ptr<char[]> staging = allocate(n * block);
    // Send block j holds, in transfer order, every box for member j.
    for (size_t t = 0; t < step.transfers.size(); ++t) {
      const Transfer &transfer = step.transfers[t];
      if (transfer.srcDevice != device)
        continue;
      for (size_t k = 0; k < transfer.dstDevices.size(); ++k)
        pack(transfer, /*zero=*/false,
             staging.get() + schedule.rankOf(transfer.dstDevices[k]) * block +
                 schedule.offsets[schedule.offsetStart[t] + k]);
    }
    ++stats.collectiveCalls;
    if (absl::Status status = backend.allToAll(
            device, schedule.members, staging.get(), staging.get(), block);
        !status.ok())
      return status;
    // Receive block i holds what member i sent, in the same order.
    for (size_t t = 0; t < step.transfers.size(); ++t) {
      const Transfer &transfer = step.transfers[t];
      for (size_t k = 0; k < transfer.dstDevices.size(); ++k)
        if (transfer.dstDevices[k] == device)
          unpack(transfer.dstBuffer, transfer.box, transfer.accumulate,
                 staging.get() + schedule.rankOf(transfer.srcDevice) * block +
                     schedule.offsets[schedule.offsetStart[t] + k]);
    }
    return absl::OkStatus();
  }

  /// All-reduce: every member sums the concatenated pieces and writes all of
  /// them back. Reduce-scatter: rank r's block is piece r, and each member
  /// writes back its own piece only.
  absl::Status runReduction(const StepSchedule &schedule) {
    bool scatter = schedule.method == StepMethod::ReduceScatter;
    int64_t n = static_cast<int64_t>(schedule.members.size());
    int64_t bytes = scatter ? n * schedule.unitBytes : schedule.unitBytes;
    std::unique_ptr<char[]> staging = allocate(bytes);
    const View &buffer = view(schedule.reduceBuffer);
    for (const Piece &piece : schedule.pieces) {
      char *out = staging.get() + piece.offset;
      forEachRun(buffer, nullptr, *piece.box, elementBytes,
                 [&](int64_t offset, int64_t, int64_t runBytes) {
                   std::memcpy(out, buffer.base + offset, runBytes);
                   out += runBytes;
                 });
    }
    ++stats.collectiveCalls;
    if (scatter) {
      int64_t rank = schedule.rankOf(device);
      const Piece &own = schedule.pieces[rank];
      if (absl::Status status = backend.reduceScatter(
              device, schedule.members, staging.get(),
              staging.get() + own.offset, schedule.unitBytes / elementBytes,
              dtype, ReduceOp::Sum);
          !status.ok())
        return status;
      unpack(schedule.reduceBuffer, *own.box, /*accumulate=*/false,
             staging.get() + own.offset);
      return absl::OkStatus();
    }
    if (absl::Status status = backend.allReduce(
            device, schedule.members, staging.get(), staging.get(),
            schedule.unitBytes / elementBytes, dtype, ReduceOp::Sum);
        !status.ok())
      return status;
    for (const Piece &piece : schedule.pieces)
      unpack(schedule.reduceBuffer, *piece.box, /*accumulate=*/false,
             staging.get() + piece.offset);
    return absl::OkStatus();
  }

  const PlanExecutor::Prepared &prepared;
  const TransferPlan &plan;
  Backend &backend;
  int64_t device;
  int64_t elementBytes;
  DataType dtype;
  /// Source, destination.
  View views[2];
};

} // namespace

//===----------------------------------------------------------------------===//
// PlanExecutor
//===----------------------------------------------------------------------===//

absl::StatusOr<PlanExecutor>
PlanExecutor::create(const TransferPlan &plan, const TensorLayout &source,
                     const TensorLayout &destination,
                     const ExecuteOptions &options) {
  if (plan.shape != source.shape() || plan.shape != destination.shape())
    return absl::InvalidArgumentError("plan shape does not match the layouts");
  if (plan.elementBytes <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "plan element size must be positive, got ", plan.elementBytes));
  auto prepared =
      std::make_shared<Prepared>(plan, source, destination, options);

  if (plan.identity) {
    for (int64_t p = 0, e = destination.numDevices(); p < e; ++p) {
      int64_t device = destination.mesh().deviceAt(p);
      std::optional<Box> held = source.boxOfDevice(device);
      if (!held || *held != destination.boxAtPosition(p) ||
          source.localShape() != destination.localShape())
        return absl::InternalError(
            absl::StrCat("identity plan, but device ", device,
                         " has a different source and destination tile"));
      prepared->devices.push_back(device);
    }
    std::sort(prepared->devices.begin(), prepared->devices.end());
    return PlanExecutor(std::move(prepared));
  }

  TileMap sourceTiles = tilesOf(source);
  TileMap destinationTiles = tilesOf(destination);
  int64_t chunk = plan.steps.empty() ? 0 : plan.steps.front().chunk;
  prepared->schedules.reserve(plan.steps.size());
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const Step &step = plan.steps[s];
    if (step.chunk < chunk)
      return absl::InternalError("plan steps are not ordered by chunk");
    chunk = step.chunk;
    if (absl::Status valid =
            validateStep(step, plan, sourceTiles, destinationTiles);
        !valid.ok())
      return valid;
    prepared->schedules.push_back(schedule(step, plan.elementBytes, options));
    auto takesPart = [&](int64_t device) {
      std::vector<int32_t> &steps = prepared->stepsOf[device];
      if (steps.empty() || steps.back() != static_cast<int32_t>(s))
        steps.push_back(static_cast<int32_t>(s));
    };
    for (const Transfer &transfer : step.transfers) {
      prepared->needsDataType |= transfer.accumulate;
      takesPart(transfer.srcDevice);
      for (int64_t device : transfer.dstDevices)
        takesPart(device);
    }
  }
  for (const auto &[device, steps] : prepared->stepsOf)
    prepared->devices.push_back(device);
  std::sort(prepared->devices.begin(), prepared->devices.end());
  return PlanExecutor(std::move(prepared));
}

const TransferPlan &PlanExecutor::plan() const { return prepared_->plan; }
const TensorLayout &PlanExecutor::source() const { return prepared_->source; }
const TensorLayout &PlanExecutor::destination() const {
  return prepared_->destination;
}
StepMethod PlanExecutor::method(size_t step) const {
  return prepared_->schedules.at(step).method;
}
const std::vector<int64_t> &PlanExecutor::devices() const {
  return prepared_->devices;
}
bool PlanExecutor::needsDataType() const { return prepared_->needsDataType; }

absl::StatusOr<ExecutionStats>
PlanExecutor::runOnDevice(Backend &backend, int64_t device,
                          const DeviceBuffers &buffers) const {
  const Prepared &prepared = *prepared_;
  const TransferPlan &plan = prepared.plan;
  if (buffers.elementBytes != plan.elementBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, ": buffers of ", buffers.elementBytes,
        "-byte elements for a plan of ", plan.elementBytes, "-byte elements"));
  if (buffers.dtype && dataTypeSize(*buffers.dtype) != plan.elementBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, ": dtype ", dataTypeName(*buffers.dtype), " has ",
        dataTypeSize(*buffers.dtype), "-byte elements, the plan ",
        plan.elementBytes));
  if (prepared.needsDataType && !buffers.dtype)
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device,
        ": the plan sums partials, which needs the element type (dtype)"));

  // Which buffers the device must have, and how large they are.
  auto tileBytes = [&](const TensorLayout &layout) -> int64_t {
    if (!layout.mesh().positionOf(device))
      return 0;
    return product(layout.localShape()) * plan.elementBytes;
  };
  int64_t sourceBytes = tileBytes(prepared.source);
  int64_t destinationBytes = tileBytes(prepared.destination);
  if (sourceBytes > 0 && !buffers.source)
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, " is in the source mesh but has no source buffer"));
  if (destinationBytes > 0 && !buffers.destination)
    return absl::InvalidArgumentError(
        absl::StrCat("device ", device,
                     " is in the destination mesh but has no destination "
                     "buffer"));
  if (sourceBytes > 0 && destinationBytes > 0) {
    auto src = reinterpret_cast<uintptr_t>(buffers.source);
    auto dst = reinterpret_cast<uintptr_t>(buffers.destination);
    bool overlap = src < dst + static_cast<uintptr_t>(destinationBytes) &&
                   dst < src + static_cast<uintptr_t>(sourceBytes);
    // An identity plan may run in place: the destination *is* the source.
    if (overlap && !(plan.identity && src == dst))
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", device, ": the source and destination buffers overlap"));
  }

  ExecutionStats stats;
  if (plan.identity) {
    if (destinationBytes > 0 && buffers.source != buffers.destination)
      std::memcpy(buffers.destination, buffers.source,
                  static_cast<size_t>(destinationBytes));
    return stats;
  }
  auto it = prepared.stepsOf.find(device);
  if (it == prepared.stepsOf.end())
    return stats;
  DeviceRun run(prepared, backend, device, buffers);
  if (absl::Status status = run.run(it->second); !status.ok())
    return status;
  return run.stats;
}

absl::StatusOr<ExecutionStats>
executePlanOnDevice(Backend &backend, int64_t device, const TransferPlan &plan,
                    const TensorLayout &source, const TensorLayout &destination,
                    const DeviceBuffers &buffers,
                    const ExecuteOptions &options) {
  absl::StatusOr<PlanExecutor> executor =
      PlanExecutor::create(plan, source, destination, options);
  if (!executor.ok())
    return executor.status();
  return executor->runOnDevice(backend, device, buffers);
}

absl::StatusOr<std::map<int64_t, ExecutionStats>>
executePlan(Backend &backend, const PlanExecutor &executor,
            const std::function<DeviceBuffers(int64_t)> &buffersOf) {
  std::vector<int64_t> ids(backend.devices().begin(), backend.devices().end());
  absl::flat_hash_map<int64_t, size_t> indexOf;
  for (size_t i = 0; i < ids.size(); ++i)
    indexOf[ids[i]] = i;
  // A device of the plan without a thread would leave its peers waiting
  // until the backend's deadline: refuse at once.
  for (int64_t device : executor.devices())
    if (!indexOf.contains(device))
      return absl::InvalidArgumentError(
          absl::StrCat("the plan needs device ", device,
                       ", which the backend does not have"));
  std::vector<ExecutionStats> stats(ids.size());
  absl::Status status = runOnDevices(backend, [&](int64_t device) {
    absl::StatusOr<ExecutionStats> result =
        executor.runOnDevice(backend, device, buffersOf(device));
    if (!result.ok())
      return result.status();
    // Each thread writes its own slot; the join orders it before the read.
    stats[indexOf.at(device)] = *result;
    return absl::OkStatus();
  });
  if (!status.ok())
    return status;
  std::map<int64_t, ExecutionStats> result;
  for (size_t i = 0; i < ids.size(); ++i)
    result[ids[i]] = stats[i];
  return result;
}

} // namespace polymesh::runtime
