//===- TransferPlan.cpp - Plan statistics and printing --------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/TransferPlan.h"

#include "DeviceIndex.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>

namespace polymesh::planner {

const char *stepKindName(StepKind kind) {
  switch (kind) {
  case StepKind::LocalCopy:
    return "local_copy";
  case StepKind::ZeroFill:
    return "zero_fill";
  case StepKind::AllGather:
    return "all_gather";
  case StepKind::AllToAll:
    return "all_to_all";
  case StepKind::CollectivePermute:
    return "collective_permute";
  case StepKind::Broadcast:
    return "broadcast";
  case StepKind::SendRecv:
    return "send_recv";
  case StepKind::AllReduce:
    return "all_reduce";
  case StepKind::ReduceScatter:
    return "reduce_scatter";
  }
  return "unknown";
}

namespace {
bool recomputeWithIndex(TransferPlan &plan, const DeviceIndex &index);
} // namespace

std::vector<Transfer> expandReductionPieces(StepKind kind,
                                            const std::vector<int64_t> &devices,
                                            const ReductionPieces &pieces,
                                            int64_t elementBytes) {
  std::vector<Transfer> transfers;
  size_t count = pieces.owners.size();
  for (int64_t member : devices)
    for (size_t i = 0; i < count; ++i) {
      if (pieces.owners[i] == member)
        continue;
      const Box &piece = pieces.pieces[i];
      transfers.push_back({member,
                           {pieces.owners[i]},
                           piece,
                           piece.numElements() * elementBytes,
                           BufferKind::Source,
                           BufferKind::Source,
                           /*accumulate=*/true,
                           /*phase=*/0});
    }
  if (kind != StepKind::AllReduce)
    return transfers;
  for (size_t i = 0; i < count; ++i) {
    std::vector<int64_t> others;
    for (int64_t member : devices)
      if (member != pieces.owners[i])
        others.push_back(member);
    const Box &piece = pieces.pieces[i];
    transfers.push_back({pieces.owners[i], std::move(others), piece,
                         piece.numElements() * elementBytes, BufferKind::Source,
                         BufferKind::Source,
                         /*accumulate=*/false, /*phase=*/1});
  }
  return transfers;
}

namespace {
bool sameTransfer(const Transfer &a, const Transfer &b) {
  return a.srcDevice == b.srcDevice && a.dstDevices == b.dstDevices &&
         a.box.lo == b.box.lo && a.box.hi == b.box.hi && a.bytes == b.bytes &&
         a.srcBuffer == b.srcBuffer && a.dstBuffer == b.dstBuffer &&
         a.accumulate == b.accumulate && a.phase == b.phase;
}
} // namespace

std::optional<ReductionPieces> findReductionPieces(const Step &step,
                                                   int64_t elementBytes) {
  if (step.kind != StepKind::AllReduce && step.kind != StepKind::ReduceScatter)
    return std::nullopt;
  // Every member sends every piece it does not own, so the pieces are what
  // the first member sends plus what it owns, in the owners' order: read
  // them off the phase-0 transfers of the first two senders.
  ReductionPieces found;
  if (step.devices.size() < 2 || step.transfers.empty())
    return std::nullopt;
  int64_t first = step.devices[0], second = step.devices[1];
  for (const Transfer &transfer : step.transfers) {
    if (transfer.phase != 0 || transfer.dstDevices.size() != 1)
      break;
    int64_t owner = transfer.dstDevices.front();
    if (transfer.srcDevice == first) {
      found.owners.push_back(owner);
      found.pieces.push_back(transfer.box);
    } else if (transfer.srcDevice == second && owner == first) {
      // The piece the first member owns, in its place among the owners.
      auto at = std::find_if(found.owners.begin(), found.owners.end(),
                             [&](int64_t other) { return other > first; });
      size_t index = at - found.owners.begin();
      found.owners.insert(at, owner);
      found.pieces.insert(found.pieces.begin() + index, transfer.box);
    } else if (transfer.srcDevice != second) {
      break;
    }
  }
  std::vector<Transfer> expected =
      expandReductionPieces(step.kind, step.devices, found, elementBytes);
  if (expected.size() != step.transfers.size())
    return std::nullopt;
  for (size_t i = 0; i < expected.size(); ++i)
    if (!sameTransfer(expected[i], step.transfers[i]))
      return std::nullopt;
  return found;
}

std::vector<Transfer> expandExchangeTiles(const std::vector<int64_t> &devices,
                                          const ExchangeTiles &exchange,
                                          int64_t elementBytes) {
  std::vector<Transfer> transfers;
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < devices.size(); ++j) {
      if (i == j)
        continue;
      Box box = exchange.sources[i].intersect(exchange.destinations[j]);
      if (box.empty())
        continue;
      int64_t bytes = box.numElements() * elementBytes;
      transfers.push_back({devices[i], {devices[j]}, std::move(box), bytes});
    }
  return transfers;
}

std::vector<Transfer> stepTransfers(const Step &step, int64_t elementBytes) {
  if (step.exchange)
    return expandExchangeTiles(step.devices, *step.exchange, elementBytes);
  if (!step.pieces)
    return step.transfers;
  return expandReductionPieces(step.kind, step.devices, *step.pieces,
                               elementBytes);
}

void expandSymbolicStep(Step &step, int64_t elementBytes) {
  if (!step.isSymbolic())
    return;
  step.transfers = stepTransfers(step, elementBytes);
  step.pieces.reset();
  step.exchange.reset();
}

bool hasSymbolicSteps(const TransferPlan &plan) {
  return std::any_of(plan.steps.begin(), plan.steps.end(),
                     [](const Step &step) { return step.isSymbolic(); });
}

void expandSymbolicSteps(TransferPlan &plan) {
  for (Step &step : plan.steps)
    expandSymbolicStep(step, plan.elementBytes);
}

PlanSize planSize(const TransferPlan &plan) {
  PlanSize size;
  for (const Step &step : plan.steps) {
    if (step.pieces) {
      size.transfers += static_cast<int64_t>(step.pieces->owners.size());
      size.receivers += static_cast<int64_t>(step.pieces->owners.size());
    }
    if (step.exchange) {
      size.transfers += static_cast<int64_t>(step.devices.size());
      size.receivers += static_cast<int64_t>(step.devices.size());
    }
    for (const Transfer &transfer : step.transfers) {
      ++size.transfers;
      size.receivers += static_cast<int64_t>(transfer.dstDevices.size());
    }
  }
  return size;
}

void recomputePlanStats(TransferPlan &plan) {
  // Number the devices from the steps' participant lists, which are much
  // shorter than the transfers' endpoint lists; a hand-made step whose list
  // misses an endpoint makes us number the endpoints too.
  std::vector<int64_t> ids;
  for (const Step &step : plan.steps)
    ids.insert(ids.end(), step.devices.begin(), step.devices.end());
  if (recomputeWithIndex(plan, DeviceIndex(ids)))
    return;
  for (const Step &step : plan.steps)
    for (const Transfer &transfer : step.transfers) {
      ids.push_back(transfer.srcDevice);
      ids.insert(ids.end(), transfer.dstDevices.begin(),
                 transfer.dstDevices.end());
    }
  recomputeWithIndex(plan, DeviceIndex(std::move(ids)));
}

namespace {
/// What the transfers of a symbolic reduction step add to the totals, in
/// O(members + pieces): in phase 0 every member sends each piece it does
/// not own to its owner; in an all-reduce's phase 1 each owner sends its
/// piece to the n - 1 others.
template <typename Stage>
bool addSymbolicStats(const Step &step, TransferPlan &plan,
                      const DeviceIndex &index, std::vector<DeviceStats> &stats,
                      Stage &stage) {
  const ReductionPieces &pieces = *step.pieces;
  int64_t n = static_cast<int64_t>(step.devices.size());
  int64_t total = 0;
  // By device id: a map, not a vector over the index, so that a plan of
  // many small groups stays linear.
  absl::flat_hash_map<int64_t, int64_t> ownedBy;
  for (size_t i = 0; i < pieces.owners.size(); ++i) {
    int64_t bytes = pieces.pieces[i].numElements() * plan.elementBytes;
    if (index.at(pieces.owners[i]) < 0)
      return false;
    total += bytes;
    ownedBy[pieces.owners[i]] += bytes;
  }
  bool gathers = step.kind == StepKind::AllReduce;
  int phases = gathers ? 2 : 1;
  plan.bytesMoved += phases * (n - 1) * total;
  for (int64_t member : step.devices) {
    int32_t d = index.at(member);
    if (d < 0)
      return false;
    auto it = ownedBy.find(member);
    int64_t owned = it == ownedBy.end() ? 0 : it->second;
    // Sent in phase 0 and, for an all-reduce, received in phase 1.
    int64_t others = total - owned;
    stats[d].sendBytes += others;
    if (gathers)
      stats[d].recvBytes += others;
    if (others > 0)
      stage(d, phases * others);
    // Received in phase 0 and sent in phase 1: its own pieces.
    if (owned > 0) {
      stats[d].recvBytes += (n - 1) * owned;
      if (gathers)
        stats[d].sendBytes += (n - 1) * owned;
      stage(d, (n - 1) * owned + (gathers ? owned : 0));
    }
  }
  return true;
}

/// What the transfers of a symbolic all-to-all add to the totals, in
/// O(members): the members' destination tiles partition the tensor, so
/// member i sends all of its source tile but what its own destination tile
/// holds, and receives all of its destination tile but that.
template <typename Stage>
bool addExchangeStats(const Step &step, TransferPlan &plan,
                      const DeviceIndex &index, std::vector<DeviceStats> &stats,
                      Stage &stage) {
  const ExchangeTiles &tiles = *step.exchange;
  for (size_t i = 0; i < step.devices.size(); ++i) {
    int32_t d = index.at(step.devices[i]);
    if (d < 0)
      return false;
    int64_t kept =
        tiles.sources[i].intersect(tiles.destinations[i]).numElements();
    int64_t sent = (tiles.sources[i].numElements() - kept) * plan.elementBytes;
    int64_t received =
        (tiles.destinations[i].numElements() - kept) * plan.elementBytes;
    plan.bytesMoved += sent;
    stats[d].sendBytes += sent;
    stats[d].recvBytes += received;
    // One all-to-all call packs the whole source tile and receives the whole
    // destination tile, the member's own chunk included (DeviceSchedule's
    // matchExchange); run as its transfers, the step stages less.
    if (sent + received > 0)
      stage(d, (tiles.sources[i].numElements() +
                tiles.destinations[i].numElements()) *
                   plan.elementBytes);
  }
  return true;
}

/// Fills the totals; false when a transfer endpoint is not in `index`.
bool recomputeWithIndex(TransferPlan &plan, const DeviceIndex &index) {
  plan.bytesMoved = 0;
  plan.maxSendBytes = plan.maxRecvBytes = plan.peakTempBytes = 0;
  plan.stepCounts.fill(0);
  plan.numChunks = 0;
  plan.perDevice.clear();
  std::vector<DeviceStats> stats(index.size());
  for (int32_t d = 0; d < index.size(); ++d)
    stats[d].device = index.idAt(d);

  // Staging of the current chunk; the planner emits steps in chunk order,
  // and a chunk that reappears later is accounted as a separate one.
  std::vector<int64_t> staging(index.size(), 0);
  std::vector<int32_t> touched;
  auto flush = [&]() {
    for (int32_t d : touched) {
      stats[d].peakTempBytes = std::max(stats[d].peakTempBytes, staging[d]);
      staging[d] = 0;
    }
    touched.clear();
  };
  auto stage = [&](int32_t d, int64_t bytes) {
    if (staging[d] == 0)
      touched.push_back(d);
    staging[d] += bytes;
  };
  int64_t chunk = plan.steps.empty() ? 0 : plan.steps.front().chunk;
  for (const Step &step : plan.steps) {
    if (step.chunk != chunk) {
      flush();
      chunk = step.chunk;
    }
    ++plan.stepCounts[static_cast<int>(step.kind)];
    plan.numChunks = std::max(plan.numChunks, step.chunk + 1);
    if (step.pieces) {
      if (!addSymbolicStats(step, plan, index, stats, stage))
        return false;
      continue;
    }
    if (step.exchange) {
      if (!addExchangeStats(step, plan, index, stats, stage))
        return false;
      continue;
    }
    for (const Transfer &transfer : step.transfers) {
      if (transfer.isLocal() || transfer.bytes == 0)
        continue;
      int64_t moved = transfer.bytesMoved();
      plan.bytesMoved += moved;
      int32_t src = index.at(transfer.srcDevice);
      if (src < 0)
        return false;
      stats[src].sendBytes += moved;
      // The sender packs the box once, whatever the number of receivers.
      stage(src, transfer.bytes);
      for (int64_t id : transfer.dstDevices) {
        int32_t dst = index.at(id);
        if (dst < 0)
          return false;
        stats[dst].recvBytes += transfer.bytes;
        stage(dst, transfer.bytes);
      }
    }
  }
  flush();
  for (const DeviceStats &entry : stats) {
    plan.maxSendBytes = std::max(plan.maxSendBytes, entry.sendBytes);
    plan.maxRecvBytes = std::max(plan.maxRecvBytes, entry.recvBytes);
    plan.peakTempBytes = std::max(plan.peakTempBytes, entry.peakTempBytes);
  }
  // Ids were numbered in sorted order, so the stats are sorted by device.
  plan.perDevice = std::move(stats);
  return true;
}
} // namespace

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

std::string describe(const Box &box) {
  std::vector<std::string> ranges;
  for (size_t d = 0; d < box.lo.size(); ++d)
    ranges.push_back(absl::StrCat(box.lo[d], ":", box.hi[d]));
  return absl::StrCat("[", absl::StrJoin(ranges, ", "), "]");
}

std::string describe(const Mesh &mesh) {
  std::vector<std::string> axes;
  for (const MeshAxis &axis : mesh.axes)
    axes.push_back(absl::StrCat("\"", axis.name, "\"=", axis.size));
  std::string result = absl::StrCat("<[", absl::StrJoin(axes, ", "), "]");
  bool identity = true;
  for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p)
    identity &= mesh.deviceAt(p) == p;
  if (!identity) {
    std::vector<int64_t> ids;
    for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p)
      ids.push_back(mesh.deviceAt(p));
    absl::StrAppend(&result, ", device_ids=[", absl::StrJoin(ids, ", "), "]");
  }
  return result + ">";
}

namespace {
std::string describeRef(const AxisRef &ref, const Mesh &mesh) {
  const std::string &name = mesh.axes[ref.axis].name;
  if (ref.isWhole(mesh))
    return absl::StrCat("\"", name, "\"");
  return absl::StrCat("\"", name, "\":(", ref.preSize, ")", ref.size);
}

std::string describeRefs(const std::vector<AxisRef> &refs, const Mesh &mesh) {
  std::vector<std::string> names;
  for (const AxisRef &ref : refs)
    names.push_back(describeRef(ref, mesh));
  return absl::StrJoin(names, ", ");
}
} // namespace

std::string describe(const Sharding &sharding, const Mesh &mesh) {
  std::vector<std::string> dims;
  for (const DimSharding &dim : sharding.dims) {
    std::string text = describeRefs(dim.axes, mesh);
    if (dim.open)
      text += dim.axes.empty() ? "?" : ", ?";
    dims.push_back(absl::StrCat("{", text, "}"));
  }
  std::string result = absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
  if (!sharding.replicated.empty())
    absl::StrAppend(&result, ", replicated={",
                    describeRefs(sharding.replicated, mesh), "}");
  if (!sharding.unreduced.empty())
    absl::StrAppend(&result, ", unreduced={",
                    describeRefs(sharding.unreduced, mesh), "}");
  return result;
}

std::string describe(const TensorLayout &layout) {
  return absl::StrCat(describe(layout.mesh()), " ",
                      describe(layout.sharding(), layout.mesh()), " : ",
                      absl::StrJoin(layout.shape(), "x"));
}

std::string planStatsJson(const TransferPlan &plan) {
  std::vector<std::string> counts;
  for (int k = 0; k < kNumStepKinds; ++k)
    if (plan.stepCounts[k] != 0)
      counts.push_back(absl::StrCat("\"",
                                    stepKindName(static_cast<StepKind>(k)),
                                    "\": ", plan.stepCounts[k]));
  return absl::StrCat(
      "{\"steps\": ", plan.steps.size(), ", \"chunks\": ", plan.numChunks,
      ", \"identity\": ", plan.identity ? "true" : "false",
      ", \"bytes_moved\": ", plan.bytesMoved,
      ", \"lower_bound_bytes\": ", plan.lowerBoundBytes,
      ", \"reduction_lower_bound_bytes\": ", plan.reductionLowerBoundBytes,
      ", \"reshard_lower_bound_bytes\": ", plan.reshardLowerBoundBytes,
      ", \"max_send_bytes\": ", plan.maxSendBytes,
      ", \"max_recv_bytes\": ", plan.maxRecvBytes,
      ", \"peak_temp_bytes\": ", plan.peakTempBytes,
      ", \"memory_limit_bytes\": ", plan.memoryLimitBytes,
      ", \"step_counts\": {", absl::StrJoin(counts, ", "), "}}");
}

std::string formatPlan(const TransferPlan &plan) {
  std::string out = absl::StrCat(
      "plan for ", absl::StrJoin(plan.shape, "x"), " x ", plan.elementBytes,
      "B: ", plan.steps.size(), " steps in ", plan.numChunks, " chunks",
      plan.identity ? " (identity: device-equivalent layouts)" : "", "\n");
  absl::StrAppend(&out, "  bytes moved ", plan.bytesMoved, " (lower bound ",
                  plan.lowerBoundBytes, "), max send ", plan.maxSendBytes,
                  ", max recv ", plan.maxRecvBytes, ", peak temp ",
                  plan.peakTempBytes);
  if (plan.memoryLimitBytes > 0)
    absl::StrAppend(&out, " (limit ", plan.memoryLimitBytes, ")");
  absl::StrAppend(&out, "\n");
  if (plan.reducedLayout)
    absl::StrAppend(&out, "  reduces in place to ",
                    describe(*plan.reducedLayout), "\n");
  for (const Step &step : plan.steps) {
    absl::StrAppend(&out, "  chunk ", step.chunk, " ", stepKindName(step.kind));
    if (step.kind == StepKind::Broadcast)
      absl::StrAppend(&out, " root=", step.root());
    absl::StrAppend(&out, " devices=[", absl::StrJoin(step.devices, ", "),
                    "]\n");
    if (step.pieces)
      for (size_t i = 0; i < step.pieces->owners.size(); ++i)
        absl::StrAppend(&out, "    piece ", describe(step.pieces->pieces[i]),
                        " summed onto ", step.pieces->owners[i], "\n");
    if (step.exchange)
      for (size_t i = 0; i < step.devices.size(); ++i)
        absl::StrAppend(&out, "    ", step.devices[i], " exchanges tile ",
                        describe(step.exchange->sources[i]), " for tile ",
                        describe(step.exchange->destinations[i]), "\n");
    for (const Transfer &transfer : step.transfers) {
      absl::StrAppend(&out, "    ");
      if (transfer.phase != 0)
        absl::StrAppend(&out, "phase ", transfer.phase, ": ");
      if (step.kind == StepKind::ZeroFill)
        absl::StrAppend(&out, "zero ", transfer.srcDevice, " ");
      else
        absl::StrAppend(&out, transfer.srcDevice,
                        transfer.srcBuffer == BufferKind::Source ? "" : "(dst)",
                        " -> [", absl::StrJoin(transfer.dstDevices, ", "), "]",
                        transfer.dstBuffer == BufferKind::Source ? "(src)" : "",
                        transfer.accumulate ? " +=" : "", " ");
      absl::StrAppend(&out, describe(transfer.box), " ", transfer.bytes, "B\n");
    }
  }
  return out;
}

} // namespace polymesh::planner
