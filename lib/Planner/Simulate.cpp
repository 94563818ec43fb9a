//===- Simulate.cpp - Host-buffer execution of transfer plans -------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The simulator trusts nothing in the plan but its steps: it allocates the
// buffers from the layouts, executes every transfer by packing the box out
// of the sender's buffer and unpacking it into each receiver's buffer, and
// measures staging and traffic itself, so tests can compare the plan's own
// totals against what actually happened.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Simulate.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>

namespace polymesh::planner {

namespace {

int64_t linearIndex(const std::vector<int64_t> &index,
                    const std::vector<int64_t> &shape) {
  int64_t linear = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    linear = linear * shape[d] + index[d];
  return linear;
}

HostBuffer emptyBuffer(const TensorLayout &layout, int64_t position) {
  HostBuffer buffer;
  buffer.box = layout.boxAtPosition(position);
  buffer.localShape = layout.localShape();
  int64_t size = 1;
  for (int64_t extent : buffer.localShape)
    size *= extent;
  buffer.data.assign(size, kUnsetValue);
  return buffer;
}

/// Nonzero filler for partial number j >= 1 of the element with index g.
int64_t partialSalt(int64_t g, int64_t j) {
  return (g * 31 + j * 17) % 997 + 1;
}

bool boxWithin(const Box &outer, const Box &inner) {
  for (size_t d = 0; d < outer.lo.size(); ++d)
    if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d])
      return false;
  return true;
}

} // namespace

int64_t HostBuffer::offsetOf(const std::vector<int64_t> &index) const {
  int64_t offset = 0;
  for (size_t d = 0; d < localShape.size(); ++d)
    offset = offset * localShape[d] + (index[d] - box.lo[d]);
  return offset;
}

std::map<int64_t, HostBuffer> makeSourceBuffers(const TensorLayout &source) {
  // Each device's index in its reduction group (by its coordinates on the
  // unreduced axes, so that replicas hold the same partial) and the
  // group's size.
  std::map<int64_t, std::pair<int64_t, int64_t>> partial;
  int64_t groupSize = 1;
  for (const AxisRef &ref : source.sharding().unreduced)
    groupSize *= ref.size;
  for (int64_t p = 0, e = source.numDevices(); p < e; ++p)
    partial[source.mesh().deviceAt(p)] = {source.unreducedRank(p), groupSize};
  std::map<int64_t, HostBuffer> buffers;
  for (int64_t p = 0, e = source.numDevices(); p < e; ++p) {
    int64_t device = source.mesh().deviceAt(p);
    HostBuffer buffer = emptyBuffer(source, p);
    auto [rank, size] = partial[device];
    forEachIndex(buffer.box, [&](const std::vector<int64_t> &index) {
      int64_t g = linearIndex(index, source.shape());
      int64_t value = g;
      if (rank > 0) {
        value = partialSalt(g, rank);
      } else {
        for (int64_t j = 1; j < size; ++j)
          value -= partialSalt(g, j);
      }
      buffer.data[buffer.offsetOf(index)] = value;
    });
    buffers.emplace(device, std::move(buffer));
  }
  return buffers;
}

absl::StatusOr<SimulationResult> simulatePlan(const TransferPlan &plan,
                                              const TensorLayout &source,
                                              const TensorLayout &destination) {
  if (plan.shape != source.shape() || plan.shape != destination.shape())
    return absl::InvalidArgumentError("plan shape does not match the layouts");
  // The oracle runs transfers, whatever form the plan keeps them in.
  if (hasSymbolicSteps(plan)) {
    TransferPlan expanded = plan;
    expandSymbolicSteps(expanded);
    return simulatePlan(expanded, source, destination);
  }
  std::map<int64_t, HostBuffer> sources = makeSourceBuffers(source);
  SimulationResult result;
  for (int64_t p = 0, e = destination.numDevices(); p < e; ++p)
    result.destination.emplace(destination.mesh().deviceAt(p),
                               emptyBuffer(destination, p));

  if (plan.identity) {
    for (auto &[device, buffer] : result.destination) {
      auto it = sources.find(device);
      if (it == sources.end() || it->second.box != buffer.box ||
          it->second.localShape != buffer.localShape)
        return absl::InternalError(
            absl::StrCat("identity plan, but device ", device,
                         " has a different source and destination tile"));
      buffer.data = it->second.data;
    }
    return result;
  }

  auto bufferOf = [&](BufferKind kind, int64_t device) -> HostBuffer * {
    std::map<int64_t, HostBuffer> &buffers =
        kind == BufferKind::Source ? sources : result.destination;
    auto it = buffers.find(device);
    return it == buffers.end() ? nullptr : &it->second;
  };
  auto describeTransfer = [](const Step &step, const Transfer &transfer) {
    return absl::StrCat(stepKindName(step.kind), " transfer ",
                        transfer.srcDevice, " -> [",
                        absl::StrJoin(transfer.dstDevices, ", "), "]");
  };

  std::map<int64_t, int64_t> staging;
  int64_t chunk = plan.steps.empty() ? 0 : plan.steps.front().chunk;
  auto closeChunk = [&]() {
    for (const auto &[device, bytes] : staging) {
      int64_t &peak = result.peakStagingBytes[device];
      peak = std::max(peak, bytes);
    }
    staging.clear();
  };

  for (const Step &step : plan.steps) {
    if (step.chunk < chunk)
      return absl::InternalError("plan steps are not ordered by chunk");
    if (step.chunk != chunk) {
      closeChunk();
      chunk = step.chunk;
    }
    int maxPhase = 0;
    for (const Transfer &transfer : step.transfers)
      maxPhase = std::max(maxPhase, transfer.phase);
    for (int phase = 0; phase <= maxPhase; ++phase) {
      // Pack every box of this phase before any receiver unpacks, as a
      // grouped send/recv would: in-place reductions must read the partials
      // before they are overwritten.
      std::vector<const Transfer *> active;
      std::vector<std::vector<int64_t>> packed;
      for (const Transfer &transfer : step.transfers) {
        if (transfer.phase != phase)
          continue;
        if (transfer.dstDevices.empty())
          return absl::InternalError(absl::StrCat(
              describeTransfer(step, transfer), " has no destination"));
        std::vector<int64_t> data;
        if (step.kind != StepKind::ZeroFill) {
          HostBuffer *from = bufferOf(transfer.srcBuffer, transfer.srcDevice);
          if (!from || !boxWithin(from->box, transfer.box))
            return absl::InternalError(
                absl::StrCat(describeTransfer(step, transfer), " reads ",
                             describe(transfer.box), " outside its buffer"));
          data.reserve(transfer.box.numElements());
          forEachIndex(transfer.box, [&](const std::vector<int64_t> &index) {
            data.push_back(from->data[from->offsetOf(index)]);
          });
        } else {
          data.assign(transfer.box.numElements(), 0);
        }
        if (transfer.bytes != transfer.box.numElements() * plan.elementBytes)
          return absl::InternalError(absl::StrCat(
              describeTransfer(step, transfer), " has a wrong byte count"));
        if (!transfer.isLocal()) {
          staging[transfer.srcDevice] += transfer.bytes;
          for (int64_t dst : transfer.dstDevices) {
            staging[dst] += transfer.bytes;
            result.bytesCrossed += transfer.bytes;
          }
        }
        active.push_back(&transfer);
        packed.push_back(std::move(data));
      }
      for (size_t t = 0; t < active.size(); ++t) {
        const Transfer &transfer = *active[t];
        for (int64_t dst : transfer.dstDevices) {
          HostBuffer *to = bufferOf(transfer.dstBuffer, dst);
          if (!to || !boxWithin(to->box, transfer.box))
            return absl::InternalError(absl::StrCat(
                describeTransfer(step, transfer), " writes ",
                describe(transfer.box), " outside the buffer of ", dst));
          size_t next = 0;
          bool tracked = transfer.dstBuffer == BufferKind::Destination &&
                         !transfer.accumulate;
          forEachIndex(transfer.box, [&](const std::vector<int64_t> &index) {
            int64_t &slot = to->data[to->offsetOf(index)];
            if (tracked && slot != kUnsetValue)
              ++result.duplicateWrites;
            slot =
                transfer.accumulate ? slot + packed[t][next] : packed[t][next];
            ++next;
          });
        }
      }
    }
  }
  closeChunk();
  return result;
}

absl::Status checkDestinationBuffers(const SimulationResult &result,
                                     const TensorLayout &destination) {
  for (const std::vector<int64_t> &group : destination.reductionGroups()) {
    std::vector<const HostBuffer *> buffers;
    for (int64_t device : group) {
      auto it = result.destination.find(device);
      if (it == result.destination.end())
        return absl::InternalError(
            absl::StrCat("no destination buffer for device ", device));
      buffers.push_back(&it->second);
    }
    std::optional<Box> expected = destination.boxOfDevice(group.front());
    absl::Status status = absl::OkStatus();
    for (const HostBuffer *buffer : buffers)
      if (buffer->box != *expected)
        return absl::InternalError("destination buffer has the wrong box");
    forEachIndex(*expected, [&](const std::vector<int64_t> &index) {
      if (!status.ok())
        return;
      int64_t sum = 0;
      for (const HostBuffer *buffer : buffers)
        sum += buffer->data[buffer->offsetOf(index)];
      int64_t want = linearIndex(index, destination.shape());
      if (sum != want)
        status = absl::InternalError(absl::StrCat(
            group.size() == 1 ? "device " : "reduction group of device ",
            group.front(), " holds ", sum, " at [", absl::StrJoin(index, ", "),
            "], expected ", want));
    });
    if (!status.ok())
      return status;
  }
  return absl::OkStatus();
}

} // namespace polymesh::planner
