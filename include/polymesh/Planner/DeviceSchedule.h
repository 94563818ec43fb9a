//===- DeviceSchedule.h - A plan as per-device rows for codegen -*- C++ -*-===//
//
// Part of Polymesh. Pure C++17: no MLIR types.
//
//===----------------------------------------------------------------------===//
//
// Generated code cannot interpret a TransferPlan: it runs one fixed sequence
// of segments (step phases, side by side where their devices are disjoint)
// on every device, and reads what its own
// device does in each segment from tables. A DeviceSchedule is those tables
// before they become IR: per segment and per device, the copies to run
// before communication (packing boxes into staging, or copying locally), the
// communication calls, and the copies after it (unpacking, possibly adding).
// Buffers are the device's exact tiles (box extents, row-major, no padding)
// and one staging buffer per device; every row is in bytes, with strided
// boxes collapsed to as few contiguous runs as the tiles allow.
//
// Semantics are the simulator's: within a phase every box is read before any
// box is written; receivers write in the step's transfer order.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_PLANNER_DEVICESCHEDULE_H
#define POLYMESH_PLANNER_DEVICESCHEDULE_H

#include "polymesh/Planner/Layout.h"
#include "polymesh/Planner/TransferPlan.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace polymesh::planner {

/// Where a copy reads or writes.
enum class BufferSpace : int64_t { Source = 0, Destination = 1, Staging = 2 };

enum class CopyKind : int64_t {
  /// dst = src, run by run.
  Copy = 0,
  /// dst += src, element by element in the element type.
  Accumulate = 1,
  /// dst = 0 (src unused).
  Zero = 2,
};

/// A strided box copy: `outer` loops (major first) over contiguous runs of
/// `runBytes`. Offsets and strides are in bytes from the buffer's start.
struct CopyRow {
  CopyKind kind = CopyKind::Copy;
  BufferSpace srcSpace = BufferSpace::Source;
  int64_t srcOffset = 0;
  BufferSpace dstSpace = BufferSpace::Destination;
  int64_t dstOffset = 0;
  int64_t runBytes = 0;
  /// Exactly DeviceSchedule::outerDims entries each; unused leading loops
  /// have count 1 and stride 0.
  std::vector<int64_t> counts, srcStrides, dstStrides;
};

enum class CommKind : int64_t {
  Send = 0,
  Recv = 1,
  Broadcast = 2,
  AllGather = 3,
  AllReduce = 4,
  ReduceScatter = 5,
  AllToAll = 6,
};

/// A place in one of a device's buffers.
struct BufferPlace {
  BufferSpace space = BufferSpace::Staging;
  int64_t offset = 0;
  bool operator==(const BufferPlace &other) const {
    return space == other.space && offset == other.offset;
  }
};

/// One runtime call. `peer` is the other device of a send or recv, the root
/// of a broadcast, or the calling device itself for the other collectives;
/// the bytes are at `stagingOffset` in `space`. Calls go through staging,
/// except that a send/recv of a box that is contiguous in its tile reads or
/// writes the tile directly (no pack or unpack), when nothing else in the
/// phase writes what is sent or reads what is received.
///
/// The collectives run over the caller's group of Segment::groups, with
/// rank r = the caller's index in the group, in place in staging or a tile
/// (NCCL's in-place forms):
///  - AllGather: `bytes` per member; the caller's chunk is at
///    stagingOffset + r * bytes, the gathered chunks at stagingOffset.
///  - AllReduce: sum of `bytes` at stagingOffset, on every member.
///  - ReduceScatter: members * `bytes` at stagingOffset, chunk j meant for
///    rank j; rank r's sum lands at stagingOffset + r * bytes.
/// or out of place (`result` set; NCCL's out-of-place forms, straight from
/// the source tile to the destination tile, with no staging): the call
/// reads at stagingOffset in `space` (all-gather: the caller's `bytes`;
/// all-reduce: `bytes`; reduce-scatter: members * `bytes`) and writes
/// `result` (all-gather: members * `bytes` in rank order; all-reduce and
/// reduce-scatter: the caller's `bytes` of sums). AllToAll is always out
/// of place: it reads members * `bytes` at stagingOffset in `space`, chunk j
/// meant for rank j, and writes members * `bytes` at `result`, chunk i from
/// rank i (the caller's own chunk included). Either way a member's
/// rows do not depend on its rank but through the in-place offsets, so the
/// out-of-place forms let every member of a group run the same rows.
struct CommRow {
  CommKind kind = CommKind::Send;
  int64_t peer = 0;
  int64_t stagingOffset = 0;
  int64_t bytes = 0;
  BufferSpace space = BufferSpace::Staging;
  /// SendRecv segments: the device's `before` rows [0, packsBefore) have to
  /// run before this call; the others may run after it, so that a send
  /// leaves while the next box is packed. Non-decreasing over a device's
  /// rows. (Nothing a call receives is read by a `before` row.)
  int64_t packsBefore = 0;
  /// Collectives: where the result goes when not in place.
  std::optional<BufferPlace> result;
};

/// How a segment communicates; the same on every device.
enum class SegmentMethod : int64_t {
  /// No communication.
  Local = 0,
  /// send/recv rows inside one group_start/group_end. Every device's rows
  /// follow one order that all devices share (the plan's transfer order:
  /// a transfer adds its send and its receive at once), so the rows may
  /// also run as blocking calls in row order (the MPI lowering does):
  /// the first pending message is the next call of both its ends.
  SendRecv = 1,
  /// One broadcast from a root over each group, in place in staging.
  Broadcast = 2,
  /// An all-gather step phase whose members each contribute the same bytes
  /// to all the others: one all-gather over each group, in staging or
  /// straight from source to destination tiles.
  AllGather = 3,
  /// Both phases of an all-reduce step whose members all hold the same
  /// pieces: pack them, one sum over each group, unpack (or the sum on the
  /// source tile itself, in place or into the destination tile).
  AllReduce = 4,
  /// A reduce-scatter step whose members each receive one equal-sized sum:
  /// one reduce-scatter over each group, the same ways.
  ReduceScatter = 5,
  /// A symbolic all-to-all step (Step::exchange) whose members' rows are
  /// all the same: every member packs its chunks for the others in rank
  /// order with one looped copy (none when they are its source tile in
  /// order), one all-to-all over the group, one looped copy into its
  /// destination tile (none when the chunks are that tile in order).
  AllToAll = 6,
};
constexpr int kNumSegmentMethods = 7;

/// snake_case name of a method, e.g. "all_gather", "send_recv".
const char *segmentMethodName(SegmentMethod method);

/// Whether a segment calls one collective per group of Segment::groups.
inline bool isCollective(SegmentMethod method) {
  return method != SegmentMethod::Local && method != SegmentMethod::SendRecv;
}

struct DeviceSegment {
  std::vector<CopyRow> before;
  std::vector<CommRow> comm;
  std::vector<CopyRow> after;
  int64_t stagingBytes = 0;
  /// The index in Segment::groups of the collective this device joins, or
  /// -1 (no collective, or not a member of any).
  int64_t group = -1;
};

/// One step phase of the plan: an all-reduce segment runs every phase of
/// its step and names phase 0.
struct StepPhase {
  size_t step = 0;
  int phase = 0;
  bool operator==(const StepPhase &other) const {
    return step == other.step && phase == other.phase;
  }
};

/// What every device runs at one point of the schedule. Step phases that
/// communicate the same way on disjoint sets of devices (the all-gathers
/// of the 1,024 "fsdp" groups of a pod, say) run side by side in one
/// segment: no device sees more than one of them, so their order does not
/// matter, and the schedule's size grows with the devices, not with
/// devices x groups.
struct Segment {
  SegmentMethod method = SegmentMethod::Local;
  /// The step phases this segment runs side by side, in plan order.
  std::vector<StepPhase> phases;
  /// Communicator members of each collective side by side (every method
  /// but Local and SendRecv), in rank order: sorted, but for an all-to-all
  /// whose chunks lie in the order of the members' tiles rather than of
  /// their ids; DeviceSegment::group indexes them.
  std::vector<std::vector<int64_t>> groups;
  /// Indexed by the device's position in DeviceSchedule::devices (empty
  /// for a device whose rows ScheduleOptions::keepRows drops).
  std::vector<DeviceSegment> perDevice;
};

struct DeviceSchedule {
  /// The devices of the program, sorted; positions index perDevice.
  std::vector<int64_t> devices;
  int64_t elementBytes = 0;
  /// Loops around the contiguous run of every copy: max(rank - 1, 0), one
  /// more (over the peers) when the plan has an all-to-all of whole tiles.
  int outerDims = 0;
  std::vector<Segment> segments;
  /// Most staging a device needs in any segment, per position (0 for a
  /// device whose rows are dropped).
  std::vector<int64_t> stagingBytes;
  /// Some row writes a source buffer (a sum left in place): run on a copy,
  /// so that the value's other uses keep their partials. A plan that
  /// reduces in place need not: its sums may go out of place.
  bool writesSource = false;
  /// The plan adds into its destination buffer: start it at zero.
  bool accumulatesIntoDestination = false;
};

/// Which methods the code that runs a schedule can use.
struct ScheduleOptions {
  /// Emit Broadcast, AllGather, AllReduce, ReduceScatter and AllToAll
  /// segments where the plan's steps have their shape (else they run as
  /// send/recv).
  bool collectives = true;
  /// The backend sums the element type in a collective (AllReduce,
  /// ReduceScatter); without it sums stay send/recv plus accumulate rows.
  bool reductions = true;
  /// Let collectives go straight from source to destination tiles (NCCL's
  /// out-of-place forms, CommRow::result) where the tiles allow, taking
  /// over the plan's local copies around them. Off: every collective in
  /// place, as the plan's steps are.
  bool directCollectives = true;
  /// Per position of `devices`: whether to keep that device's rows (a
  /// process schedules only the devices it runs). Empty: every device's.
  /// Segments, phases and group numbering are the same whatever is kept,
  /// so that processes scheduling different devices agree on them; a group
  /// none of whose members is kept is left empty.
  std::vector<bool> keepRows;
  /// Order each send/recv phase's transfers in rounds of distinct devices
  /// (each to the first round in which none of its devices has one yet),
  /// so that rows run as blocking calls in row order (the MPI lowering)
  /// overlap. Off: the plan's order, which suits backends that post a
  /// whole group at once.
  bool blockingRounds = false;
  /// Tiles are row-major over the layout's localShape(), the same for every
  /// device, the device's box at the start (uneven last shards padded): the
  /// buffers of runtime::PlanExecutor. Off: over the box itself, as
  /// partitioned programs hold them.
  bool paddedTiles = false;
};

/// Schedules `plan` (from `source` to `destination`) for the devices
/// `devices` (sorted, a superset of both meshes' devices). Fails on a plan
/// whose boxes do not lie in the tiles they name.
absl::StatusOr<DeviceSchedule>
scheduleForDevices(const TransferPlan &plan, const TensorLayout &source,
                   const TensorLayout &destination,
                   const std::vector<int64_t> &devices,
                   const ScheduleOptions &options = {});

} // namespace polymesh::planner

#endif // POLYMESH_PLANNER_DEVICESCHEDULE_H
