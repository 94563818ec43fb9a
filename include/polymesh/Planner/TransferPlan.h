//===- TransferPlan.h - Device-level transfer plans -------------*- C++ -*-===//
//
// Part of Polymesh. Pure C++17: no MLIR types, so a JIT or a Python binding
// can read plans directly.
//
//===----------------------------------------------------------------------===//
//
// A TransferPlan says how the data of one tensor moves from a source layout to
// a destination layout. It is an ordered list of steps; each step names the
// collective a backend should use (the kind), its participant devices, and
// the explicit elementary transfers that make it up, so that a backend without
// that collective can always run the step as grouped send/recv of packed
// boxes.
//
// Buffer model. Every device of the source mesh owns a source buffer shaped
// like the source layout's local tile (origin: the device's source box lo),
// and every device of the destination mesh owns a destination buffer shaped
// like the destination layout's local tile. Boxes in transfers are in GLOBAL
// tensor coordinates; a backend subtracts the box origin of the buffer it
// reads or writes. Reductions of unreduced source axes happen in place in the
// source buffers (TransferPlan::reducesInPlace), before any step reads them.
//
// Execution model. Steps run in order. Within a step, the transfers of phase 0
// run before those of phase 1 (only AllReduce has two phases); within a phase
// every sender packs its boxes into staging buffers, the packed boxes cross
// devices, and every receiver unpacks (overwrites, or adds when `accumulate`)
// into its buffer. Staging buffers live for one chunk: the steps of a chunk
// may run concurrently and together fit the plan's memory limit.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_PLANNER_TRANSFERPLAN_H
#define POLYMESH_PLANNER_TRANSFERPLAN_H

#include "polymesh/Planner/Layout.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace polymesh::planner {

/// The collective (or local operation) that carries a step.
enum class StepKind : uint8_t {
  /// One device copies a box from its source buffer to its destination
  /// buffer (includes local slicing). No communication.
  LocalCopy,
  /// One device writes zeros over a box of its destination buffer: partial
  /// sums that the destination's new unreduced axes need. No communication.
  ZeroFill,
  /// Every sender sends the same box(es) to every other member and every
  /// member's destination box contains all of them.
  AllGather,
  /// Every ordered pair of distinct members exchanges part of its data.
  AllToAll,
  /// Every device sends to at most one device and receives from at most one.
  CollectivePermute,
  /// One root sends one box to all other members.
  Broadcast,
  /// Grouped point-to-point: any pattern the collectives above do not fit.
  SendRecv,
  /// Sum of partials over a reduction group, result on every member. Phase 0
  /// reduces each member's piece onto it (accumulate), phase 1 gathers the
  /// reduced pieces (overwrite).
  AllReduce,
  /// Sum of partials over a reduction group, each member keeping its piece.
  ReduceScatter,
};
constexpr int kNumStepKinds = 9;

/// snake_case name of a step kind, e.g. "all_gather" (also its op name).
const char *stepKindName(StepKind kind);

/// Which buffer of a device a transfer reads or writes.
enum class BufferKind : uint8_t { Source, Destination };

/// One elementary transfer: `srcDevice` packs `box` from its `srcBuffer` and
/// every device of `dstDevices` unpacks it into its `dstBuffer`. When
/// dstDevices is exactly {srcDevice} the transfer is local (no bytes cross
/// devices; a LocalCopy or ZeroFill step).
struct Transfer {
  int64_t srcDevice = 0;
  /// Sorted, distinct.
  std::vector<int64_t> dstDevices;
  /// Global tensor coordinates.
  Box box;
  /// Bytes of `box` (per destination device).
  int64_t bytes = 0;
  BufferKind srcBuffer = BufferKind::Source;
  BufferKind dstBuffer = BufferKind::Destination;
  /// Add into the destination instead of overwriting (reductions).
  bool accumulate = false;
  /// Phase within the step; phase 0 completes before phase 1 starts.
  int phase = 0;

  bool isLocal() const {
    return dstDevices.size() == 1 && dstDevices.front() == srcDevice;
  }
  /// Bytes crossing devices: bytes per destination, local transfers excluded.
  int64_t bytesMoved() const {
    return isLocal() ? 0 : bytes * static_cast<int64_t>(dstDevices.size());
  }
};

/// A reduction step (AllReduce or ReduceScatter) in its symbolic form: the
/// pieces of the group's box and the member each is summed onto, in the
/// order of `owners`. Its transfers follow from them
/// (expandReductionPieces), so a plan stores O(members) numbers per group
/// instead of O(members^2) transfers.
struct ReductionPieces {
  std::vector<int64_t> owners;
  std::vector<Box> pieces;
};

/// An AllToAll step in its symbolic form: the whole tiles of the members,
/// `sources[i]` and `destinations[i]` those of member i of Step::devices.
/// Every member sends each other member the part of its source tile that
/// the other's destination tile holds (expandExchangeTiles). The planner
/// writes this form only where the members' source tiles are all the
/// source tiles and partition the tensor, and so do their destination
/// tiles, so a group of n members is 2n boxes instead of n(n-1) transfers.
struct ExchangeTiles {
  std::vector<Box> sources, destinations;
};

/// One step of a plan: a collective over `devices`, made of `transfers`, or
/// of `pieces` (a symbolic reduction), or of `exchange` (a symbolic
/// all-to-all).
struct Step {
  StepKind kind = StepKind::SendRecv;
  /// Chunk index: steps of one chunk share the staging memory budget.
  int64_t chunk = 0;
  /// Participant device ids, sorted.
  std::vector<int64_t> devices;
  std::vector<Transfer> transfers;
  /// A symbolic AllReduce or ReduceScatter (PlanOptions::symbolicReductions):
  /// `transfers` is empty and stands for
  /// expandReductionPieces(kind, devices, *pieces). A group of n members
  /// costs O(n) numbers instead of O(n^2) transfers.
  std::optional<ReductionPieces> pieces;
  /// A symbolic AllToAll (PlanOptions::symbolicExchanges): `transfers` is
  /// empty and stands for expandExchangeTiles(devices, *exchange).
  std::optional<ExchangeTiles> exchange;

  bool isSymbolic() const { return pieces.has_value() || exchange.has_value(); }

  /// Root of a Broadcast step (the sender of its transfers).
  int64_t root() const {
    return transfers.empty() ? -1 : transfers.front().srcDevice;
  }
};

/// Per-device totals of a plan.
struct DeviceStats {
  int64_t device = 0;
  /// Bytes the device sends to other devices (per destination).
  int64_t sendBytes = 0;
  /// Bytes the device receives from other devices.
  int64_t recvBytes = 0;
  /// Max over chunks of the pack plus unpack staging bytes it holds at once.
  int64_t peakTempBytes = 0;
};

/// A plan and its totals. Totals are filled by recomputePlanStats from the
/// steps, except the lower bounds, which the planner derives from the
/// layouts alone.
struct TransferPlan {
  std::vector<int64_t> shape;
  int64_t elementBytes = 0;
  /// Memory limit the plan was made under (0: unlimited).
  int64_t memoryLimitBytes = 0;
  /// The layouts are device-equivalent: every destination buffer is the
  /// source buffer of the same device. The plan has no steps.
  bool identity = false;
  /// Reduction steps overwrite the source buffers with (partially) reduced
  /// data; a caller that still needs the unreduced value must copy it first.
  bool reducesInPlace = false;
  /// The layout the resharding steps read from: the source layout with the
  /// reduced axes removed from `unreduced` (AllReduce: they replicate;
  /// ReduceScatter: they shard dims as in the destination). Set only when
  /// the plan reduces.
  std::optional<TensorLayout> reducedLayout;

  std::vector<Step> steps;
  int64_t numChunks = 0;

  /// Bytes crossing devices over all steps.
  int64_t bytesMoved = 0;
  /// reductionLowerBoundBytes + reshardLowerBoundBytes.
  int64_t lowerBoundBytes = 0;
  /// Lower bound of the reduction phase for the chosen collectives:
  /// (n-1)*|B| per reduction group of n members holding box B for a
  /// reduce-scatter, 2(n-1)*|B| for an all-reduce (reduce, then copy).
  int64_t reductionLowerBoundBytes = 0;
  /// Sum over destination devices of the bytes of their destination box they
  /// do not already hold (after the reduction phase).
  int64_t reshardLowerBoundBytes = 0;
  int64_t maxSendBytes = 0;
  int64_t maxRecvBytes = 0;
  /// Max over devices of DeviceStats::peakTempBytes.
  int64_t peakTempBytes = 0;
  std::array<int64_t, kNumStepKinds> stepCounts{};
  /// Every device that appears in a step, sorted by id.
  std::vector<DeviceStats> perDevice;

  int64_t count(StepKind kind) const {
    return stepCounts[static_cast<int>(kind)];
  }
};

/// The transfers of a reduction step over `devices` (sorted): phase 0, every
/// member (in `devices` order) sends each piece it does not own to its
/// owner, which adds it into its source buffer; an AllReduce then (phase 1)
/// sends each reduced piece from its owner to every other member.
std::vector<Transfer> expandReductionPieces(StepKind kind,
                                            const std::vector<int64_t> &devices,
                                            const ReductionPieces &pieces,
                                            int64_t elementBytes);
/// The symbolic form of `step`: the pieces whose expansion is exactly its
/// transfers, in order, or nullopt (another kind, or transfers of another
/// shape).
std::optional<ReductionPieces> findReductionPieces(const Step &step,
                                                   int64_t elementBytes);

/// The transfers of an all-to-all step over `devices` (sorted) that
/// exchanges whole tiles: for each member i (in `devices` order), to each
/// other member j (same order), the intersection of i's source tile and
/// j's destination tile where it is not empty, from source to destination
/// buffer.
std::vector<Transfer> expandExchangeTiles(const std::vector<int64_t> &devices,
                                          const ExchangeTiles &exchange,
                                          int64_t elementBytes);

/// The step's transfers, the symbolic ones expanded.
std::vector<Transfer> stepTransfers(const Step &step, int64_t elementBytes);
/// Replaces a symbolic step's pieces or tiles by its transfers (no-op
/// otherwise).
void expandSymbolicStep(Step &step, int64_t elementBytes);
/// Whether some step of `plan` is symbolic.
bool hasSymbolicSteps(const TransferPlan &plan);
/// Replaces every symbolic step of `plan` by its transfers, for consumers
/// that walk transfers (the simulator, the plan executor).
void expandSymbolicSteps(TransferPlan &plan);

/// What a plan holds, as the transfer budget counts it (kMaxPlanTransfers,
/// kMaxPlanReceivers): its transfers and (transfer, receiver) pairs, a
/// symbolic step's pieces (or exchanged tiles) counting once each.
struct PlanSize {
  int64_t transfers = 0, receivers = 0;
};
PlanSize planSize(const TransferPlan &plan);

/// Recomputes bytesMoved, send/recv/peak totals, per-device stats, step
/// counts and numChunks from `plan.steps`.
void recomputePlanStats(TransferPlan &plan);

/// Multi-line human-readable rendering of a plan: totals, then each step
/// with its transfers.
std::string formatPlan(const TransferPlan &plan);
/// One-line JSON object with the plan totals (no steps).
std::string planStatsJson(const TransferPlan &plan);

/// Shardy-like text: `<["a"=2, "b"=4], device_ids=[4, 5, 6, 7, ...]>`;
/// device_ids are printed only when they are not the identity.
std::string describe(const Mesh &mesh);
/// Shardy-like text: `[{"a"}, {"b", ?}], replicated={"c"},
/// unreduced={"x":(1)2}`.
std::string describe(const Sharding &sharding, const Mesh &mesh);
/// `<mesh> [dims...] : 16x16`.
std::string describe(const TensorLayout &layout);
/// `[0:4, 2:8]`.
std::string describe(const Box &box);

} // namespace polymesh::planner

#endif // POLYMESH_PLANNER_TRANSFERPLAN_H
