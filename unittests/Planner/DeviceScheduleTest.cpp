//===- DeviceScheduleTest.cpp - Per-device schedules vs the simulator -----===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// A DeviceSchedule is what generated code executes, so these tests execute
// it: a small host interpreter gives every device exact source and
// destination tiles (box extents, row-major, no padding) and a staging
// buffer, runs each segment as the code would (every device's `before`
// rows, the communication, every device's `after` rows; in send/recv
// segments a call's pack rows just before it, and the bytes of a send
// taken when it is made, the rest of the `before` rows after every message
// landed), and the resulting
// destination tiles must equal the simulator's for the same plan, element
// by element. The interpreter works on bytes: an element of `elementBytes`
// bytes holds the low bytes of the simulator's int64 value, and accumulation
// is integer addition modulo 2^(8 * elementBytes), which commutes with that
// truncation.
//
// Along the way it fails on every row that reads or writes outside its
// buffer, on staging read before this segment wrote it, on send/recv rows
// that do not pair up, on overlapping receive ranges, and on broadcast rows
// that disagree; the traffic it counts must equal the plan's bytesMoved.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/DeviceSchedule.h"
#include "polymesh/Planner/MixedRadix.h"
#include "polymesh/Planner/Planner.h"
#include "polymesh/Planner/RandomLayout.h"
#include "polymesh/Planner/Simulate.h"

#include "Support/LayoutBuilders.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace polymesh::planner;

namespace {

using namespace polymesh::planner::testing;
using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

//===----------------------------------------------------------------------===//
// Element and index helpers
//===----------------------------------------------------------------------===//

/// Offset in elements of `index` in the exact row-major tile of `box`.
int64_t exactOffset(const Box &box, const std::vector<int64_t> &index) {
  int64_t offset = 0;
  for (size_t d = 0; d < box.lo.size(); ++d)
    offset = offset * (box.hi[d] - box.lo[d]) + (index[d] - box.lo[d]);
  return offset;
}

/// Little-endian element of `bytes` bytes.
uint64_t load(const uint8_t *at, int64_t bytes) {
  uint64_t value = 0;
  for (int64_t b = bytes; b-- > 0;)
    value = (value << 8) | at[b];
  return value;
}

void store(uint8_t *at, int64_t bytes, uint64_t value) {
  for (int64_t b = 0; b < bytes; ++b, value >>= 8)
    at[b] = static_cast<uint8_t>(value & 0xff);
}

uint64_t truncated(int64_t value, int64_t bytes) {
  uint64_t v = static_cast<uint64_t>(value);
  return bytes >= 8 ? v : v & ((uint64_t(1) << (8 * bytes)) - 1);
}

std::string describeRow(const CopyRow &row) {
  static const char *kinds[] = {"copy", "accumulate", "zero"};
  static const char *spaces[] = {"source", "destination", "staging"};
  return absl::StrCat(
      kinds[static_cast<int>(row.kind)], " ",
      spaces[static_cast<int>(row.srcSpace)], "+", row.srcOffset, " -> ",
      spaces[static_cast<int>(row.dstSpace)], "+", row.dstOffset, " run ",
      row.runBytes, " counts [", absl::StrJoin(row.counts, ", "),
      "] src strides [", absl::StrJoin(row.srcStrides, ", "), "] dst strides [",
      absl::StrJoin(row.dstStrides, ", "), "]");
}

/// Calls fn(srcOffset, dstOffset) for each contiguous run of `row`, major
/// loop first, until fn returns false. Counts must be positive.
template <typename Fn> void forEachRun(const CopyRow &row, Fn fn) {
  size_t n = row.counts.size();
  std::vector<int64_t> i(n, 0);
  while (true) {
    int64_t src = row.srcOffset, dst = row.dstOffset;
    for (size_t k = 0; k < n; ++k) {
      src += i[k] * row.srcStrides[k];
      dst += i[k] * row.dstStrides[k];
    }
    if (!fn(src, dst))
      return;
    size_t k = n;
    while (k > 0) {
      --k;
      if (++i[k] < row.counts[k])
        break;
      i[k] = 0;
      if (k == 0)
        return;
    }
    if (n == 0)
      return;
  }
}

//===----------------------------------------------------------------------===//
// The interpreter
//===----------------------------------------------------------------------===//

/// What the interpreter counted while it ran.
struct RunStats {
  int64_t sendBytes = 0;
  int64_t recvBytes = 0;
  /// Bytes times (members - 1) over broadcast segments.
  int64_t broadcastBytes = 0;
  int64_t copyRows = 0;
  int64_t stridedRows = 0;
  int64_t zeroRows = 0;
  int64_t accumulateRows = 0;
  int64_t broadcastSegments = 0;
  /// Broadcast receivers that received in place in their tile.
  int64_t directBroadcastRows = 0;
  int64_t sendRecvSegments = 0;
  /// What the other collectives would move by ring (the plan's send/recv
  /// bytes for the same step): (n-1) * n * chunk for an all-gather or a
  /// reduce-scatter, 2 * (n-1) * bytes for an all-reduce.
  int64_t collectiveBytes = 0;
  int64_t allGatherSegments = 0;
  int64_t allReduceSegments = 0;
  int64_t reduceScatterSegments = 0;
  int64_t allToAllSegments = 0;
  /// All-to-all members that packed their chunks, and that unpacked them
  /// (the others sent from or received into their tiles directly).
  int64_t allToAllPacks = 0, allToAllUnpacks = 0;
  /// Collective rows that wrote their result out of place.
  int64_t outOfPlaceRows = 0;
};

class Interpreter {
public:
  Interpreter(const DeviceSchedule &schedule, const TensorLayout &source,
              const TensorLayout &destination)
      : schedule_(schedule), eb_(schedule.elementBytes) {
    std::map<int64_t, HostBuffer> sources = makeSourceBuffers(source);
    for (size_t p = 0; p < schedule.devices.size(); ++p) {
      int64_t id = schedule.devices[p];
      positionOf_[id] = p;
      Device device;
      device.id = id;
      device.srcBox = source.boxOfDevice(id);
      device.dstBox = destination.boxOfDevice(id);
      if (device.srcBox) {
        const HostBuffer &padded = sources.at(id);
        device.source.assign(device.srcBox->numElements() * eb_, 0);
        forEachIndex(*device.srcBox, [&](const std::vector<int64_t> &index) {
          store(&device.source[exactOffset(*device.srcBox, index) * eb_], eb_,
                truncated(padded.data[padded.offsetOf(index)], eb_));
        });
      }
      if (device.dstBox)
        device.destination.assign(device.dstBox->numElements() * eb_,
                                  schedule.accumulatesIntoDestination ? 0
                                                                      : 0xee);
      int64_t staging =
          p < schedule.stagingBytes.size() ? schedule.stagingBytes[p] : 0;
      device.staging.assign(staging, 0xdd);
      devices_.push_back(std::move(device));
    }
  }

  AssertionResult run() {
    if (schedule_.stagingBytes.size() != devices_.size())
      return AssertionFailure()
             << "stagingBytes has " << schedule_.stagingBytes.size()
             << " entries for " << devices_.size() << " devices";
    for (size_t s = 0; s < schedule_.segments.size(); ++s) {
      AssertionResult result = runSegment(s);
      if (!result)
        return result;
    }
    return AssertionSuccess();
  }

  /// Compares every destination tile with the simulator's padded one.
  AssertionResult compare(const SimulationResult &simulated) const {
    for (const Device &device : devices_) {
      if (!device.dstBox)
        continue;
      auto it = simulated.destination.find(device.id);
      if (it == simulated.destination.end())
        return AssertionFailure()
               << "the simulator has no destination for " << device.id;
      const HostBuffer &padded = it->second;
      if (padded.box != *device.dstBox)
        return AssertionFailure() << "boxes differ on " << device.id;
      AssertionResult result = AssertionSuccess();
      forEachIndex(*device.dstBox, [&](const std::vector<int64_t> &index) {
        if (!result)
          return;
        uint64_t want = truncated(padded.data[padded.offsetOf(index)], eb_);
        uint64_t have = load(
            &device.destination[exactOffset(*device.dstBox, index) * eb_], eb_);
        if (want != have)
          result = AssertionFailure()
                   << "device " << device.id << " holds " << have << " at ["
                   << absl::StrJoin(index, ", ") << "], the simulator " << want;
      });
      if (!result)
        return result;
    }
    return AssertionSuccess();
  }

  const RunStats &stats() const { return stats_; }

private:
  struct Device {
    int64_t id = 0;
    std::optional<Box> srcBox, dstBox;
    std::vector<uint8_t> source, destination, staging;
    /// Staging bytes written in the current segment.
    std::vector<char> valid;
  };

  std::vector<uint8_t> &buffer(Device &device, BufferSpace space) {
    switch (space) {
    case BufferSpace::Source:
      return device.source;
    case BufferSpace::Destination:
      return device.destination;
    default:
      return device.staging;
    }
  }

  /// How far a row may reach into `space` in the current segment.
  int64_t limit(size_t p, BufferSpace space) {
    if (space == BufferSpace::Staging)
      return segmentStaging_[p];
    return static_cast<int64_t>(buffer(devices_[p], space).size());
  }

  bool allValid(const Device &device, int64_t offset, int64_t bytes) const {
    for (int64_t b = offset; b < offset + bytes; ++b)
      if (!device.valid[b])
        return false;
    return true;
  }

  AssertionResult checkShape(const CopyRow &row) const {
    size_t outer = static_cast<size_t>(schedule_.outerDims);
    if (row.counts.size() != outer || row.srcStrides.size() != outer ||
        row.dstStrides.size() != outer)
      return AssertionFailure() << "row has not " << outer << " outer loops";
    if (row.runBytes <= 0 || row.runBytes % eb_ != 0)
      return AssertionFailure() << "run of " << row.runBytes << " bytes";
    for (int64_t count : row.counts)
      if (count <= 0)
        return AssertionFailure() << "non-positive count";
    // Every access is element-aligned, so typed loads and adds work.
    if (row.dstOffset % eb_ != 0 ||
        (row.kind != CopyKind::Zero && row.srcOffset % eb_ != 0))
      return AssertionFailure() << "unaligned offset";
    for (size_t k = 0; k < outer; ++k)
      if (row.srcStrides[k] % eb_ != 0 || row.dstStrides[k] % eb_ != 0)
        return AssertionFailure() << "unaligned stride";
    return AssertionSuccess();
  }

  AssertionResult runCopy(size_t p, const CopyRow &row) {
    AssertionResult shape = checkShape(row);
    if (!shape)
      return shape << ": " << describeRow(row);
    Device &device = devices_[p];
    bool zero = row.kind == CopyKind::Zero;
    std::vector<uint8_t> &dst = buffer(device, row.dstSpace);
    int64_t dstLimit = limit(p, row.dstSpace);
    std::vector<uint8_t> *src = zero ? nullptr : &buffer(device, row.srcSpace);
    int64_t srcLimit = zero ? 0 : limit(p, row.srcSpace);
    bool fromStaging = !zero && row.srcSpace == BufferSpace::Staging;
    bool toStaging = row.dstSpace == BufferSpace::Staging;
    int64_t run = row.runBytes;
    AssertionResult result = AssertionSuccess();
    std::vector<uint8_t> temp;
    forEachRun(row, [&](int64_t s, int64_t d) {
      if (d < 0 || d + run > dstLimit) {
        result = AssertionFailure() << "writes [" << d << ", " << d + run
                                    << ") of " << dstLimit << " bytes";
        return false;
      }
      if (src && (s < 0 || s + run > srcLimit)) {
        result = AssertionFailure() << "reads [" << s << ", " << s + run
                                    << ") of " << srcLimit << " bytes";
        return false;
      }
      if (fromStaging && !allValid(device, s, run)) {
        result = AssertionFailure() << "reads staging [" << s << ", " << s + run
                                    << ") that this segment did not write";
        return false;
      }
      switch (row.kind) {
      case CopyKind::Copy:
        temp.assign(src->begin() + s, src->begin() + s + run);
        std::memcpy(&dst[d], temp.data(), run);
        break;
      case CopyKind::Accumulate:
        for (int64_t e = 0; e < run; e += eb_)
          store(&dst[d + e], eb_,
                load(&dst[d + e], eb_) + load(&(*src)[s + e], eb_));
        break;
      case CopyKind::Zero:
        std::memset(&dst[d], 0, run);
        break;
      }
      if (toStaging)
        std::fill(device.valid.begin() + d, device.valid.begin() + d + run, 1);
      return true;
    });
    if (!result)
      return result << ": " << describeRow(row);
    ++stats_.copyRows;
    int64_t runs = 1;
    for (int64_t count : row.counts)
      runs *= count;
    stats_.stridedRows += runs > 1;
    stats_.zeroRows += zero;
    stats_.accumulateRows += row.kind == CopyKind::Accumulate;
    return AssertionSuccess();
  }

  AssertionResult checkCommRange(size_t p, const CommRow &row) {
    int64_t available = limit(p, row.space);
    if (row.bytes <= 0 || row.stagingOffset < 0 ||
        row.stagingOffset + row.bytes > available)
      return AssertionFailure()
             << "device " << devices_[p].id << " communicates ["
             << row.stagingOffset << ", " << row.stagingOffset + row.bytes
             << ") of " << available << " bytes of space "
             << static_cast<int>(row.space);
    if (row.bytes % eb_ != 0 || row.stagingOffset % eb_ != 0)
      return AssertionFailure() << "unaligned communication";
    return AssertionSuccess();
  }

  /// Runs device p's `before` rows up to `upto`, from where it stopped.
  AssertionResult runBeforeRows(size_t p, int64_t upto,
                                std::vector<size_t> &ran) {
    const std::vector<CopyRow> &rows = segment_->perDevice[p].before;
    if (upto < static_cast<int64_t>(ran[p]) ||
        upto > static_cast<int64_t>(rows.size()))
      return AssertionFailure()
             << "device " << devices_[p].id << " has a call that needs " << upto
             << " before rows, after " << ran[p] << " of " << rows.size();
    for (; ran[p] < static_cast<size_t>(upto); ++ran[p]) {
      AssertionResult result = runCopy(p, rows[ran[p]]);
      if (!result)
        return result << " (before rows of device " << devices_[p].id << ")";
    }
    return AssertionSuccess();
  }

  /// The MPI lowering does each send and receive of a segment as a
  /// blocking call, in row order, on every device (all in different
  /// processes at worst): a call completes only when its peer's next call
  /// is the matching one. The rows' order must let every call complete.
  AssertionResult completesBlocking() const {
    std::vector<size_t> next(devices_.size(), 0);
    auto head = [&](size_t p) -> const CommRow * {
      const std::vector<CommRow> &rows = segment_->perDevice[p].comm;
      return next[p] < rows.size() ? &rows[next[p]] : nullptr;
    };
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t p = 0; p < devices_.size(); ++p) {
        const CommRow *mine = head(p);
        if (!mine || mine->kind != CommKind::Send)
          continue;
        size_t q = positionOf_.at(mine->peer);
        const CommRow *theirs = head(q);
        if (theirs && theirs->kind == CommKind::Recv &&
            theirs->peer == devices_[p].id) {
          ++next[p];
          ++next[q];
          progress = true;
        }
      }
    }
    for (size_t p = 0; p < devices_.size(); ++p)
      if (const CommRow *stuck = head(p))
        return AssertionFailure()
               << "blocking calls deadlock: device " << devices_[p].id
               << " waits in its "
               << (stuck->kind == CommKind::Send ? "send to " : "recv from ")
               << stuck->peer << " (row " << next[p] << ")";
    return AssertionSuccess();
  }

  /// Send/recv segments run in the order the generated code may take,
  /// made as adversarial as it allows: each device runs its `before` rows
  /// only up to a call's packsBefore before the call, a send's bytes are
  /// taken when it is made, every message lands before any device runs the
  /// rest of its `before` rows. A schedule whose sends need later rows, or
  /// whose later rows read what is received, fails the comparison.
  AssertionResult runSendRecv() {
    using Pair = std::pair<size_t, size_t>; // sender, receiver positions
    std::map<Pair, std::vector<const CommRow *>> sends, recvs;
    std::map<const CommRow *, std::vector<uint8_t>> sentBytes;
    std::vector<size_t> ran(devices_.size(), 0);
    for (size_t p = 0; p < devices_.size(); ++p) {
      // Ranges a grouped call reads or writes on this device: receives must
      // not overlap anything else in the group.
      using Span = std::tuple<BufferSpace, int64_t, int64_t>;
      std::vector<Span> sent, received;
      for (const CommRow &row : segment_->perDevice[p].comm) {
        auto peer = positionOf_.find(row.peer);
        if (row.kind == CommKind::Broadcast || peer == positionOf_.end() ||
            peer->second == p)
          return AssertionFailure()
                 << "device " << devices_[p].id
                 << " has a bad send/recv row (kind "
                 << static_cast<int>(row.kind) << ", peer " << row.peer << ")";
        AssertionResult range = checkCommRange(p, row);
        if (!range)
          return range;
        if (AssertionResult packed = runBeforeRows(p, row.packsBefore, ran);
            !packed)
          return packed;
        Span span{row.space, row.stagingOffset, row.stagingOffset + row.bytes};
        if (row.kind == CommKind::Send) {
          if (row.space == BufferSpace::Staging &&
              !allValid(devices_[p], row.stagingOffset, row.bytes))
            return AssertionFailure()
                   << devices_[p].id << " sends staging it did not pack";
          std::vector<uint8_t> &from = buffer(devices_[p], row.space);
          sentBytes[&row].assign(from.begin() + row.stagingOffset,
                                 from.begin() + row.stagingOffset + row.bytes);
          sends[{p, peer->second}].push_back(&row);
          sent.push_back(span);
        } else {
          recvs[{peer->second, p}].push_back(&row);
          received.push_back(span);
        }
      }
      auto overlap = [](const Span &a, const Span &b) {
        return std::get<0>(a) == std::get<0>(b) &&
               std::get<1>(a) < std::get<2>(b) &&
               std::get<1>(b) < std::get<2>(a);
      };
      for (size_t i = 0; i < received.size(); ++i) {
        for (size_t j = i + 1; j < received.size(); ++j)
          if (overlap(received[i], received[j]))
            return AssertionFailure()
                   << "device " << devices_[p].id << " receives twice into ["
                   << std::get<1>(received[j]) << ", "
                   << std::get<2>(received[j]) << ")";
        for (const auto &span : sent)
          if (overlap(received[i], span))
            return AssertionFailure() << "device " << devices_[p].id
                                      << " receives into bytes it sends from";
      }
    }
    if (sends.size() != recvs.size())
      return AssertionFailure() << sends.size() << " sending pairs but "
                                << recvs.size() << " receiving pairs";
    // Pair the rows in order; read every message before writing any.
    struct Message {
      size_t receiver;
      const CommRow *recv;
      std::vector<uint8_t> bytes;
    };
    std::vector<Message> messages;
    for (const auto &[pair, rows] : sends) {
      auto it = recvs.find(pair);
      if (it == recvs.end() || it->second.size() != rows.size())
        return AssertionFailure()
               << devices_[pair.first].id << " sends " << rows.size()
               << " messages to " << devices_[pair.second].id
               << ", which receives "
               << (it == recvs.end() ? 0 : it->second.size());
      const Device &sender = devices_[pair.first];
      for (size_t m = 0; m < rows.size(); ++m) {
        const CommRow &send = *rows[m];
        const CommRow &recv = *it->second[m];
        if (send.bytes != recv.bytes)
          return AssertionFailure()
                 << "message " << m << " from " << sender.id << " to "
                 << devices_[pair.second].id << ": " << send.bytes
                 << " bytes sent, " << recv.bytes << " received";
        messages.push_back({pair.second, &recv, sentBytes.at(&send)});
        stats_.sendBytes += send.bytes;
      }
    }
    if (AssertionResult blocking = completesBlocking(); !blocking)
      return blocking;
    for (const Message &message : messages) {
      const CommRow *recv = message.recv;
      Device &receiver = devices_[message.receiver];
      std::copy(message.bytes.begin(), message.bytes.end(),
                buffer(receiver, recv->space).begin() + recv->stagingOffset);
      if (recv->space == BufferSpace::Staging)
        std::fill(receiver.valid.begin() + recv->stagingOffset,
                  receiver.valid.begin() + recv->stagingOffset + recv->bytes,
                  1);
      stats_.recvBytes += recv->bytes;
    }
    for (size_t p = 0; p < devices_.size(); ++p)
      if (AssertionResult rest = runBeforeRows(
              p, static_cast<int64_t>(segment_->perDevice[p].before.size()),
              ran);
          !rest)
        return rest;
    return AssertionSuccess();
  }

  /// Whether device p joins collective `group` of the segment; a member
  /// must name its group, a device outside every group must not talk.
  AssertionResult joins(size_t p, size_t group, bool &member) {
    const DeviceSegment &rows = segment_->perDevice[p];
    member = rows.group == static_cast<int64_t>(group);
    if (rows.group < -1 ||
        rows.group >= static_cast<int64_t>(segment_->groups.size()) ||
        (rows.group == -1 && !rows.comm.empty()))
      return AssertionFailure()
             << "device " << devices_[p].id << " names group " << rows.group;
    return AssertionSuccess();
  }

  AssertionResult runBroadcast(size_t group) {
    const std::vector<int64_t> &members = segment_->groups[group];
    if (members.size() < 2 || !std::is_sorted(members.begin(), members.end()) ||
        std::adjacent_find(members.begin(), members.end()) != members.end())
      return AssertionFailure() << "broadcast over members ["
                                << absl::StrJoin(members, ", ") << "]";
    std::set<size_t> memberPositions;
    for (int64_t member : members) {
      auto it = positionOf_.find(member);
      if (it == positionOf_.end())
        return AssertionFailure() << "broadcast member " << member
                                  << " is not a device of the schedule";
      memberPositions.insert(it->second);
    }
    // Members agree on the root and the byte count; each names where its
    // bytes are (staging, or in place in a tile), so places may differ.
    std::optional<CommRow> agreed;
    std::map<size_t, const CommRow *> rowOf;
    for (size_t p = 0; p < devices_.size(); ++p) {
      const std::vector<CommRow> &comm = segment_->perDevice[p].comm;
      bool member = false;
      if (AssertionResult named = joins(p, group, member); !named)
        return named;
      if (member != static_cast<bool>(memberPositions.count(p)))
        return AssertionFailure()
               << "device " << devices_[p].id << " names group "
               << segment_->perDevice[p].group << " but is "
               << (member ? "no member of it"
                          : "a member of " + std::to_string(group));
      if (!member)
        continue;
      if (comm.size() != 1 || comm[0].kind != CommKind::Broadcast)
        return AssertionFailure() << "member " << devices_[p].id
                                  << " has not exactly one broadcast row";
      AssertionResult range = checkCommRange(p, comm[0]);
      if (!range)
        return range;
      if (!agreed) {
        agreed = comm[0];
      } else if (comm[0].peer != agreed->peer ||
                 comm[0].bytes != agreed->bytes) {
        return AssertionFailure() << "members disagree on the broadcast";
      }
      rowOf[p] = &comm[0];
    }
    auto root = positionOf_.find(agreed->peer);
    if (root == positionOf_.end() || !memberPositions.count(root->second))
      return AssertionFailure()
             << "broadcast root " << agreed->peer << " is not a member";
    Device &from = devices_[root->second];
    const CommRow &sent = *rowOf[root->second];
    if (sent.space == BufferSpace::Staging &&
        !allValid(from, sent.stagingOffset, sent.bytes))
      return AssertionFailure()
             << "root " << from.id << " broadcasts staging it did not pack";
    if (sent.space == BufferSpace::Destination)
      return AssertionFailure()
             << "root " << from.id << " broadcasts from its destination";
    std::vector<uint8_t> bytes(
        buffer(from, sent.space).begin() + sent.stagingOffset,
        buffer(from, sent.space).begin() + sent.stagingOffset + sent.bytes);
    for (size_t p : memberPositions) {
      if (p == root->second)
        continue;
      Device &to = devices_[p];
      const CommRow &received = *rowOf[p];
      if (received.space == BufferSpace::Source)
        return AssertionFailure()
               << "member " << to.id << " receives into its source";
      std::copy(bytes.begin(), bytes.end(),
                buffer(to, received.space).begin() + received.stagingOffset);
      if (received.space == BufferSpace::Staging)
        std::fill(to.valid.begin() + received.stagingOffset,
                  to.valid.begin() + received.stagingOffset + received.bytes,
                  1);
      else
        ++stats_.directBroadcastRows;
    }
    stats_.broadcastBytes +=
        agreed->bytes * static_cast<int64_t>(members.size() - 1);
    ++stats_.broadcastSegments;
    return AssertionSuccess();
  }

  /// AllGather, AllReduce, ReduceScatter and AllToAll as the runtime
  /// defines them: rank r is the member's index in the members, which are
  /// sorted but for an all-to-all's; sums are integer additions in rank
  /// order.
  AssertionResult runCollective(CommKind kind, size_t group) {
    const std::vector<int64_t> &members = segment_->groups[group];
    std::vector<int64_t> sorted = members;
    std::sort(sorted.begin(), sorted.end());
    if (members.size() < 2 ||
        (kind != CommKind::AllToAll && sorted != members) ||
        std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return AssertionFailure() << "collective over members ["
                                << absl::StrJoin(members, ", ") << "]";
    int64_t n = static_cast<int64_t>(members.size());
    std::vector<size_t> positions;
    for (int64_t member : members) {
      auto it = positionOf_.find(member);
      if (it == positionOf_.end())
        return AssertionFailure() << "collective member " << member
                                  << " is not a device of the schedule";
      positions.push_back(it->second);
    }
    std::vector<const CommRow *> rows(n);
    for (size_t p = 0; p < devices_.size(); ++p) {
      const std::vector<CommRow> &comm = segment_->perDevice[p].comm;
      auto member = std::find(positions.begin(), positions.end(), p);
      bool joined = false;
      if (AssertionResult named = joins(p, group, joined); !named)
        return named;
      if (joined != (member != positions.end()))
        return AssertionFailure()
               << "device " << devices_[p].id << " names group "
               << segment_->perDevice[p].group
               << " but its membership of group " << group << " differs";
      if (!joined)
        continue;
      if (comm.size() != 1 || comm[0].kind != kind ||
          comm[0].peer != devices_[p].id)
        return AssertionFailure()
               << "member " << devices_[p].id
               << " has not exactly one collective row naming itself";
      const CommRow &row = comm[0];
      // In place the buffer holds every member's chunk (but an
      // all-reduce's); out of place an all-gather reads one chunk and
      // writes all, a reduce-scatter reads all and writes one, an
      // all-to-all reads all and writes all.
      int64_t all = kind == CommKind::AllReduce ? row.bytes : n * row.bytes;
      int64_t read = !row.result || kind == CommKind::ReduceScatter ||
                             kind == CommKind::AllToAll
                         ? all
                         : row.bytes;
      std::vector<std::pair<BufferPlace, int64_t>> spans = {
          {BufferPlace{row.space, row.stagingOffset}, read}};
      if (row.result) {
        // An all-to-all may stage both halves, apart.
        bool apart = kind == CommKind::AllToAll &&
                     (row.result->offset >= row.stagingOffset + all ||
                      row.stagingOffset >= row.result->offset + all);
        if (row.result->space == row.space && !apart)
          return AssertionFailure() << "member " << devices_[p].id
                                    << " writes out of place in the buffer"
                                       " it reads";
        spans.push_back({*row.result, kind == CommKind::AllGather ||
                                              kind == CommKind::AllToAll
                                          ? all
                                          : row.bytes});
      }
      for (const auto &[place, extent] : spans) {
        if (row.bytes <= 0 || place.offset < 0 ||
            place.offset + extent > limit(p, place.space))
          return AssertionFailure()
                 << "member " << devices_[p].id << " communicates ["
                 << place.offset << ", " << place.offset + extent << ") of "
                 << limit(p, place.space) << " bytes";
        if (row.bytes % eb_ != 0 || place.offset % eb_ != 0)
          return AssertionFailure() << "unaligned communication";
      }
      size_t rank = member - positions.begin();
      if (rows[0] && row.bytes != rows[0]->bytes)
        return AssertionFailure() << "members disagree on the byte count";
      rows[rank] = &row;
    }
    int64_t bytes = rows[0]->bytes;
    // What each member contributes, read before anything is written, and
    // where its result goes: in place, the same buffer.
    auto place = [&](size_t rank, bool written) {
      const CommRow &row = *rows[rank];
      return written && row.result ? *row.result
                                   : BufferPlace{row.space, row.stagingOffset};
    };
    auto bufferAt = [&](size_t rank, int64_t offset, bool written) {
      BufferPlace where = place(rank, written);
      Device &device = devices_[positions[rank]];
      return buffer(device, where.space).begin() + where.offset + offset;
    };
    auto at = [&](size_t rank, int64_t offset) {
      return bufferAt(rank, offset, false);
    };
    auto out = [&](size_t rank, int64_t offset) {
      return bufferAt(rank, offset, true);
    };
    // The caller's own chunk: at rank * bytes in place, at 0 out of place
    // (all-gather: of what it sends; reduce-scatter: of what it receives).
    auto own = [&](size_t rank) {
      return rows[rank]->result ? 0 : static_cast<int64_t>(rank) * bytes;
    };
    auto packed = [&](size_t rank, int64_t offset, int64_t length) {
      BufferPlace where = place(rank, false);
      return where.space != BufferSpace::Staging ||
             allValid(devices_[positions[rank]], where.offset + offset, length);
    };
    auto markValid = [&](size_t rank, int64_t offset, int64_t length) {
      BufferPlace where = place(rank, true);
      if (where.space != BufferSpace::Staging)
        return;
      std::vector<char> &valid = devices_[positions[rank]].valid;
      int64_t from = where.offset + offset;
      std::fill(valid.begin() + from, valid.begin() + from + length, 1);
    };
    for (const CommRow *row : rows)
      stats_.outOfPlaceRows += row->result.has_value();
    auto sum = [&](int64_t offset, int64_t length) {
      std::vector<uint8_t> total(length, 0);
      for (size_t rank = 0; rank < members.size(); ++rank)
        for (int64_t e = 0; e < length; e += eb_)
          store(&total[e], eb_,
                load(&total[e], eb_) + load(&*at(rank, offset + e), eb_));
      return total;
    };
    switch (kind) {
    case CommKind::AllGather: {
      std::vector<std::vector<uint8_t>> chunks;
      for (size_t rank = 0; rank < members.size(); ++rank) {
        if (!packed(rank, own(rank), bytes))
          return AssertionFailure() << "member " << members[rank]
                                    << " gathers a chunk it did not pack";
        chunks.emplace_back(at(rank, own(rank)), at(rank, own(rank)) + bytes);
      }
      for (size_t rank = 0; rank < members.size(); ++rank) {
        for (size_t from = 0; from < members.size(); ++from)
          std::copy(chunks[from].begin(), chunks[from].end(),
                    out(rank, from * bytes));
        markValid(rank, 0, n * bytes);
      }
      stats_.collectiveBytes += (n - 1) * n * bytes;
      ++stats_.allGatherSegments;
      break;
    }
    case CommKind::AllToAll: {
      // Chunk j of rank i's buffer becomes chunk i of rank j's result.
      std::vector<std::vector<uint8_t>> sent;
      for (size_t rank = 0; rank < members.size(); ++rank) {
        if (!packed(rank, 0, n * bytes))
          return AssertionFailure() << "member " << members[rank]
                                    << " sends chunks it did not pack";
        sent.emplace_back(at(rank, 0), at(rank, 0) + n * bytes);
        stats_.allToAllPacks += rows[rank]->space == BufferSpace::Staging;
        stats_.allToAllUnpacks +=
            rows[rank]->result &&
            rows[rank]->result->space == BufferSpace::Staging;
      }
      for (size_t to = 0; to < members.size(); ++to) {
        for (size_t from = 0; from < members.size(); ++from)
          std::copy(sent[from].begin() + to * bytes,
                    sent[from].begin() + (to + 1) * bytes,
                    out(to, from * bytes));
        markValid(to, 0, n * bytes);
      }
      stats_.collectiveBytes += (n - 1) * n * bytes;
      ++stats_.allToAllSegments;
      break;
    }
    case CommKind::AllReduce: {
      for (size_t rank = 0; rank < members.size(); ++rank)
        if (!packed(rank, 0, bytes))
          return AssertionFailure() << "member " << members[rank]
                                    << " reduces bytes it did not pack";
      std::vector<uint8_t> total = sum(0, bytes);
      for (size_t rank = 0; rank < members.size(); ++rank) {
        std::copy(total.begin(), total.end(), out(rank, 0));
        markValid(rank, 0, bytes);
      }
      stats_.collectiveBytes += 2 * (n - 1) * bytes;
      ++stats_.allReduceSegments;
      break;
    }
    default: {
      for (size_t rank = 0; rank < members.size(); ++rank)
        if (!packed(rank, 0, n * bytes))
          return AssertionFailure() << "member " << members[rank]
                                    << " scatters bytes it did not pack";
      std::vector<std::vector<uint8_t>> totals;
      for (size_t rank = 0; rank < members.size(); ++rank)
        totals.push_back(sum(rank * bytes, bytes));
      for (size_t rank = 0; rank < members.size(); ++rank) {
        std::copy(totals[rank].begin(), totals[rank].end(),
                  out(rank, own(rank)));
        markValid(rank, own(rank), bytes);
      }
      stats_.collectiveBytes += (n - 1) * n * bytes;
      ++stats_.reduceScatterSegments;
      break;
    }
    }
    return AssertionSuccess();
  }

  AssertionResult runSegment(size_t s) {
    segment_ = &schedule_.segments[s];
    std::string where = absl::StrCat("segment ", s, " (",
                                     segment_->phases.size(), " step phases)");
    if (segment_->perDevice.size() != devices_.size())
      return AssertionFailure()
             << where << " has " << segment_->perDevice.size()
             << " device entries";
    segmentStaging_.assign(devices_.size(), 0);
    for (size_t p = 0; p < devices_.size(); ++p) {
      int64_t bytes = segment_->perDevice[p].stagingBytes;
      if (bytes < 0 || bytes > schedule_.stagingBytes[p])
        return AssertionFailure()
               << where << ": device " << devices_[p].id << " stages " << bytes
               << " bytes, more than its buffer of "
               << schedule_.stagingBytes[p];
      segmentStaging_[p] = bytes;
      devices_[p].valid.assign(devices_[p].staging.size(), 0);
    }
    // Send/recv segments interleave their `before` rows with their calls
    // (runSendRecv).
    if (segment_->method != SegmentMethod::SendRecv)
      for (size_t p = 0; p < devices_.size(); ++p)
        for (const CopyRow &row : segment_->perDevice[p].before) {
          AssertionResult result = runCopy(p, row);
          if (!result)
            return result << " (" << where << ", before rows of device "
                          << devices_[p].id << ")";
        }
    AssertionResult comm = AssertionSuccess();
    switch (segment_->method) {
    case SegmentMethod::Local:
      for (size_t p = 0; p < devices_.size(); ++p)
        if (!segment_->perDevice[p].comm.empty())
          return AssertionFailure() << where << " is local, but device "
                                    << devices_[p].id << " communicates";
      break;
    case SegmentMethod::SendRecv:
      comm = runSendRecv();
      ++stats_.sendRecvSegments;
      break;
    case SegmentMethod::Broadcast:
      for (size_t g = 0; comm && g < segment_->groups.size(); ++g)
        comm = runBroadcast(g);
      break;
    case SegmentMethod::AllGather:
      for (size_t g = 0; comm && g < segment_->groups.size(); ++g)
        comm = runCollective(CommKind::AllGather, g);
      break;
    case SegmentMethod::AllReduce:
      for (size_t g = 0; comm && g < segment_->groups.size(); ++g)
        comm = runCollective(CommKind::AllReduce, g);
      break;
    case SegmentMethod::ReduceScatter:
      for (size_t g = 0; comm && g < segment_->groups.size(); ++g)
        comm = runCollective(CommKind::ReduceScatter, g);
      break;
    case SegmentMethod::AllToAll:
      for (size_t g = 0; comm && g < segment_->groups.size(); ++g)
        comm = runCollective(CommKind::AllToAll, g);
      break;
    }
    if (!comm)
      return comm << " (" << where << ")";
    for (size_t p = 0; p < devices_.size(); ++p)
      for (const CopyRow &row : segment_->perDevice[p].after) {
        AssertionResult result = runCopy(p, row);
        if (!result)
          return result << " (" << where << ", after rows of device "
                        << devices_[p].id << ")";
      }
    return AssertionSuccess();
  }

  const DeviceSchedule &schedule_;
  int64_t eb_;
  std::vector<Device> devices_;
  std::map<int64_t, size_t> positionOf_;
  const Segment *segment_ = nullptr;
  std::vector<int64_t> segmentStaging_;
  RunStats stats_;
};

//===----------------------------------------------------------------------===//
// The check every test goes through
//===----------------------------------------------------------------------===//

/// The sorted union of both meshes' devices and `extra`.
std::vector<int64_t> programDevices(const TensorLayout &source,
                                    const TensorLayout &destination,
                                    const std::vector<int64_t> &extra = {}) {
  std::set<int64_t> ids(extra.begin(), extra.end());
  for (const TensorLayout *layout : {&source, &destination})
    for (int64_t p = 0; p < layout->numDevices(); ++p)
      ids.insert(layout->mesh().deviceAt(p));
  return {ids.begin(), ids.end()};
}

/// Checks what the schedule says about itself against the plan.
AssertionResult checkStructure(const DeviceSchedule &schedule,
                               const TransferPlan &plan,
                               const TensorLayout &source,
                               const TensorLayout &destination,
                               const std::vector<int64_t> &devices) {
  if (schedule.devices != devices)
    return AssertionFailure() << "the schedule's devices differ";
  if (schedule.elementBytes != plan.elementBytes)
    return AssertionFailure() << "element size differs";
  int rank = static_cast<int>(plan.shape.size());
  // Loops more, over the digits of the peers' ranks (each at least 2), for
  // an all-to-all of whole tiles.
  int digits = 0;
  for (const Step &step : plan.steps)
    if (step.exchange)
      digits = std::max(digits, static_cast<int>(std::log2(
                                    std::max<size_t>(step.devices.size(), 1))));
  if (schedule.outerDims < std::max(rank - 1, 0) ||
      schedule.outerDims > std::max(rank - 1 + digits, 0))
    return AssertionFailure() << "outerDims " << schedule.outerDims;
  // Segments run the step phases in order, several side by side where
  // their devices are disjoint (an all-reduce covers every phase of its
  // step); one segment for an identity.
  std::vector<StepPhase> phases;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    int maxPhase = 0;
    for (const Transfer &transfer :
         stepTransfers(plan.steps[s], plan.elementBytes))
      maxPhase = std::max(maxPhase, transfer.phase);
    for (int phase = 0; phase <= maxPhase; ++phase)
      phases.push_back({s, phase});
  }
  if (plan.identity) {
    if (schedule.segments.size() != 1 ||
        schedule.segments[0].method != SegmentMethod::Local)
      return AssertionFailure() << "an identity is not one local segment";
  } else {
    size_t next = 0;
    for (size_t s = 0; s < schedule.segments.size(); ++s) {
      const Segment &segment = schedule.segments[s];
      if (segment.phases.empty())
        return AssertionFailure() << "segment " << s << " runs nothing";
      if (isCollective(segment.method) &&
          segment.groups.size() != segment.phases.size())
        return AssertionFailure()
               << "segment " << s << " has " << segment.groups.size()
               << " groups for " << segment.phases.size() << " step phases";
      // Side by side means on disjoint devices.
      if (segment.phases.size() > 1 && isCollective(segment.method)) {
        std::set<int64_t> seen;
        for (const std::vector<int64_t> &group : segment.groups)
          for (int64_t member : group)
            if (!seen.insert(member).second)
              return AssertionFailure() << "segment " << s << ": device "
                                        << member << " is in two groups";
      }
      for (const StepPhase &phase : segment.phases) {
        if (next >= phases.size() || !(phase == phases[next]))
          return AssertionFailure() << "segment " << s << " is out of order";
        ++next;
        if (segment.method != SegmentMethod::AllReduce)
          continue;
        if (plan.steps[phase.step].kind != StepKind::AllReduce ||
            phase.phase != 0)
          return AssertionFailure()
                 << "segment " << s << " all-reduces a step that is not one";
        while (next < phases.size() && phases[next].step == phase.step)
          ++next;
      }
    }
    if (next != phases.size())
      return AssertionFailure() << schedule.segments.size() << " segments for "
                                << phases.size() << " step phases";
  }
  // The staging buffer is the most any segment needs.
  for (size_t p = 0; p < devices.size(); ++p) {
    int64_t most = 0;
    for (const Segment &segment : schedule.segments)
      most = std::max(most, segment.perDevice.at(p).stagingBytes);
    if (schedule.stagingBytes.at(p) != most)
      return AssertionFailure()
             << "device " << devices[p] << " has " << schedule.stagingBytes[p]
             << " staging bytes, its segments need " << most;
  }
  // Devices that hold nothing do nothing.
  for (size_t p = 0; p < devices.size(); ++p) {
    if (source.mesh().positionOf(devices[p]) ||
        destination.mesh().positionOf(devices[p]))
      continue;
    for (const Segment &segment : schedule.segments) {
      const DeviceSegment &rows = segment.perDevice[p];
      if (!rows.before.empty() || !rows.comm.empty() || !rows.after.empty() ||
          rows.stagingBytes != 0)
        return AssertionFailure()
               << "device " << devices[p] << " holds nothing but has rows";
    }
    if (schedule.stagingBytes[p] != 0)
      return AssertionFailure()
             << "device " << devices[p] << " holds nothing but has staging";
  }
  // The flags follow from the plan's transfers.
  bool writesSource = false, accumulates = false;
  for (const Step &step : plan.steps)
    for (const Transfer &transfer : stepTransfers(step, plan.elementBytes)) {
      writesSource |= transfer.dstBuffer == BufferKind::Source;
      accumulates |=
          transfer.accumulate && transfer.dstBuffer == BufferKind::Destination;
    }
  // A schedule may write less than the plan (sums out of place), never
  // more; the flag says whether its rows do.
  bool rowsWriteSource = false;
  for (const Segment &segment : schedule.segments)
    for (size_t p = 0; p < segment.perDevice.size(); ++p) {
      const DeviceSegment &rows = segment.perDevice[p];
      for (const std::vector<CopyRow> *copies : {&rows.before, &rows.after})
        for (const CopyRow &row : *copies)
          rowsWriteSource |= row.dstSpace == BufferSpace::Source;
      for (const CommRow &row : rows.comm) {
        bool sends =
            row.kind == CommKind::Send ||
            (row.kind == CommKind::Broadcast && row.peer == devices[p]);
        rowsWriteSource |=
            !sends &&
            (row.result ? row.result->space : row.space) == BufferSpace::Source;
      }
    }
  if (schedule.writesSource != rowsWriteSource)
    return AssertionFailure() << "writesSource is " << schedule.writesSource;
  if (schedule.writesSource && !writesSource)
    return AssertionFailure() << "the schedule writes the source, the plan "
                                 "does not";
  if (writesSource != plan.reducesInPlace)
    return AssertionFailure() << "the plan writes its source: " << writesSource
                              << ", reducesInPlace " << plan.reducesInPlace;
  if (schedule.accumulatesIntoDestination != accumulates)
    return AssertionFailure() << "accumulatesIntoDestination is "
                              << schedule.accumulatesIntoDestination;
  return AssertionSuccess();
}

struct Checked {
  TransferPlan plan;
  DeviceSchedule schedule;
  RunStats stats;
};

/// Schedules `plan`, runs the schedule and compares it with the simulator.
AssertionResult checkSchedule(const TransferPlan &plan,
                              const TensorLayout &source,
                              const TensorLayout &destination,
                              const std::vector<int64_t> &devices,
                              Checked *out = nullptr,
                              const ScheduleOptions &scheduleOptions = {}) {
  absl::StatusOr<SimulationResult> simulated =
      simulatePlan(plan, source, destination);
  if (!simulated.ok())
    return AssertionFailure() << "simulator: " << simulated.status();
  // The reference itself must be right.
  absl::Status reference = checkDestinationBuffers(*simulated, destination);
  if (!reference.ok())
    return AssertionFailure() << "simulator result: " << reference;

  absl::StatusOr<DeviceSchedule> schedule =
      scheduleForDevices(plan, source, destination, devices, scheduleOptions);
  if (!schedule.ok())
    return AssertionFailure() << "scheduleForDevices: " << schedule.status();
  AssertionResult structure =
      checkStructure(*schedule, plan, source, destination, devices);
  if (!structure)
    return structure;

  Interpreter interpreter(*schedule, source, destination);
  AssertionResult ran = interpreter.run();
  if (!ran)
    return ran;
  AssertionResult same = interpreter.compare(*simulated);
  if (!same)
    return same;
  const RunStats &stats = interpreter.stats();
  if (stats.sendBytes != stats.recvBytes)
    return AssertionFailure() << stats.sendBytes << " bytes sent, "
                              << stats.recvBytes << " received";
  if (stats.sendBytes + stats.broadcastBytes + stats.collectiveBytes !=
      plan.bytesMoved)
    return AssertionFailure()
           << "the schedule moves " << stats.sendBytes << " bytes by send, "
           << stats.broadcastBytes << " by broadcast and "
           << stats.collectiveBytes << " by other collectives; the plan moves "
           << plan.bytesMoved;
  if (plan.memoryLimitBytes > 0)
    for (size_t p = 0; p < devices.size(); ++p)
      if (schedule->stagingBytes[p] > plan.memoryLimitBytes)
        return AssertionFailure()
               << "device " << devices[p] << " stages "
               << schedule->stagingBytes[p] << " bytes, over the limit of "
               << plan.memoryLimitBytes;
  if (out) {
    out->plan = plan;
    out->schedule = *std::move(schedule);
    out->stats = stats;
  }
  return AssertionSuccess();
}

/// Plans, schedules, runs and compares; the hand-picked tests' entry point.
Checked planAndRun(const TensorLayout &source, const TensorLayout &destination,
                   int64_t elementBytes = 8, PlanOptions options = {},
                   const std::vector<int64_t> &extra = {},
                   const ScheduleOptions &scheduleOptions = {}) {
  Checked checked;
  absl::StatusOr<TransferPlan> plan =
      planReshard(source, destination, elementBytes, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok())
    return checked;
  EXPECT_TRUE(checkSchedule(*plan, source, destination,
                            programDevices(source, destination, extra),
                            &checked, scheduleOptions))
      << describe(source) << "  ->  " << describe(destination) << "\n"
      << formatPlan(*plan);
  return checked;
}

/// The step phases that run as `method` (side by side or not).
int64_t countPhases(const DeviceSchedule &schedule, SegmentMethod method) {
  int64_t count = 0;
  for (const Segment &segment : schedule.segments)
    if (segment.method == method)
      count += segment.phases.size();
  return count;
}

/// The segments that run as `method`.
size_t countSegments(const DeviceSchedule &schedule, SegmentMethod method) {
  size_t count = 0;
  for (const Segment &segment : schedule.segments)
    count += segment.method == method;
  return count;
}

const Segment *findSegment(const DeviceSchedule &schedule,
                           SegmentMethod method) {
  for (const Segment &segment : schedule.segments)
    if (segment.method == method)
      return &segment;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Hand-picked patterns
//===----------------------------------------------------------------------===//

TEST(DeviceSchedule, IdentityPlanCopiesWholeTiles) {
  Mesh ab = makeMesh({{"a", 2}, {"b", 4}});
  Mesh c = makeMesh({{"c", 8}});
  TensorLayout src = layout(ab, {{"a", "b"}, {}}, {16, 4});
  TensorLayout dst = layout(c, {{"c"}, {}}, {16, 4});
  Checked checked = planAndRun(src, dst);
  ASSERT_TRUE(checked.plan.identity);
  const DeviceSchedule &schedule = checked.schedule;
  ASSERT_EQ(schedule.segments.size(), 1u);
  EXPECT_EQ(schedule.outerDims, 1);
  for (const DeviceSegment &rows : schedule.segments[0].perDevice) {
    ASSERT_EQ(rows.after.size(), 1u);
    EXPECT_TRUE(rows.before.empty());
    // A whole tile is one contiguous run.
    EXPECT_EQ(rows.after[0].runBytes, 2 * 4 * 8);
    EXPECT_EQ(rows.after[0].counts, std::vector<int64_t>{1});
  }
  EXPECT_EQ(checked.stats.copyRows, 8);
}

TEST(DeviceSchedule, AllGatherPacksWholeTiles) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {"b"}}, {8, 8});
  TensorLayout dst = layout(mesh, {{}, {"b"}}, {8, 8});
  Checked checked = planAndRun(src, dst);
  EXPECT_EQ(checked.plan.count(StepKind::AllGather), 4);
  EXPECT_EQ(countPhases(checked.schedule, SegmentMethod::AllGather), 4);
  // Source tiles 4x2 into destination tiles 8x2: every box is whole rows,
  // so nothing is strided.
  EXPECT_EQ(checked.stats.stridedRows, 0);
  EXPECT_EQ(checked.stats.sendBytes, 0);
  EXPECT_EQ(checked.stats.collectiveBytes, 8 * 4 * 2 * 8);

  Mesh square = makeMesh({{"a", 2}, {"b", 2}});
  planAndRun(layout(square, {{"a"}, {"b"}}, {4, 6}),
             layout(square, {{}, {}}, {4, 6}));
}

TEST(DeviceSchedule, AllToAllPacksStridedBoxes) {
  for (int64_t n : {2, 4}) {
    Mesh mesh = makeMesh({{"a", n}});
    TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 8});
    TensorLayout dst = layout(mesh, {{}, {"a"}}, {8, 8});
    Checked checked = planAndRun(src, dst);
    EXPECT_EQ(checked.plan.count(StepKind::AllToAll), 1);
    // Column blocks of row-major source tiles are strided.
    EXPECT_GT(checked.stats.stridedRows, 0);
    bool found = false;
    for (const Segment &segment : checked.schedule.segments)
      for (const DeviceSegment &rows : segment.perDevice)
        for (const CopyRow &row : rows.before)
          if (row.srcSpace == BufferSpace::Source && row.counts[0] == 8 / n) {
            found = true;
            EXPECT_EQ(row.runBytes, 8 / n * 8);
            EXPECT_EQ(row.srcStrides[0], 8 * 8);
            EXPECT_EQ(row.dstStrides[0], 8 / n * 8);
          }
    EXPECT_TRUE(found);
  }
}

TEST(DeviceSchedule, OrbaxRestoreIsTwoBroadcasts) {
  Mesh replica0 = makeMesh({{"tp", 2}}, {0, 1});
  Mesh train = makeMesh({{"dp", 16}, {"tp", 2}});
  TensorLayout src = layout(replica0, {{}, {"tp"}}, {64, 32});
  TensorLayout dst = layout(train, {{}, {"tp"}}, {64, 32});
  Checked checked = planAndRun(src, dst);
  const DeviceSchedule &schedule = checked.schedule;
  ASSERT_EQ(countPhases(schedule, SegmentMethod::Broadcast), 2);
  int64_t half = 64 * 16 * 8;
  // The two roots' receivers are disjoint: one segment, side by side.
  ASSERT_EQ(countSegments(schedule, SegmentMethod::Broadcast), 1u);
  for (const Segment &segment : schedule.segments) {
    if (segment.method != SegmentMethod::Broadcast)
      continue;
    ASSERT_EQ(segment.groups.size(), 2u);
    for (const std::vector<int64_t> &members : segment.groups) {
      ASSERT_EQ(members.size(), 16u);
      int64_t tp = members[0] % 2;
      for (int64_t member : members)
        EXPECT_EQ(member % 2, tp);
      const CommRow &row = segment.perDevice[members[3]].comm.at(0);
      EXPECT_EQ(row.peer, tp);
      EXPECT_EQ(row.bytes, half);
    }
  }
  EXPECT_EQ(checked.stats.broadcastBytes, 30 * half);
  EXPECT_EQ(checked.stats.sendBytes, 0);
  // Each half is a whole tile on the root and on every receiver: it goes
  // from the root's source tile straight into the receivers' destination
  // tiles, with no pack, unpack or staging.
  EXPECT_EQ(checked.stats.directBroadcastRows, 30);
  for (int64_t staging : schedule.stagingBytes)
    EXPECT_EQ(staging, 0);
  for (const Segment &segment : schedule.segments) {
    if (segment.method != SegmentMethod::Broadcast)
      continue;
    for (const std::vector<int64_t> &members : segment.groups)
      for (int64_t member : members) {
        const DeviceSegment &rows = segment.perDevice[member];
        EXPECT_TRUE(rows.before.empty());
        EXPECT_TRUE(rows.after.empty());
        EXPECT_EQ(rows.comm.at(0).space, member == members[0]
                                             ? BufferSpace::Source
                                             : BufferSpace::Destination);
      }
  }
}

TEST(DeviceSchedule, BroadcastOfAStridedBoxIsStaged) {
  // Column halves into replicated tiles: each half is strided in the
  // receivers' tiles, so the root packs and the receivers unpack.
  Mesh halves = makeMesh({{"x", 2}}, {0, 1});
  Mesh others = makeMesh({{"y", 2}}, {2, 3});
  Checked checked = planAndRun(layout(halves, {{}, {"x"}}, {8, 8}),
                               layout(others, {{}, {}}, {8, 8}));
  ASSERT_GT(countPhases(checked.schedule, SegmentMethod::Broadcast), 0);
  EXPECT_EQ(checked.stats.directBroadcastRows, 0);
  EXPECT_GT(checked.stats.stridedRows, 0);
  EXPECT_GT(*std::max_element(checked.schedule.stagingBytes.begin(),
                              checked.schedule.stagingBytes.end()),
            0);
}

TEST(DeviceSchedule, SingleDeviceBroadcastsToMesh) {
  Mesh one = makeMesh({}, {3});
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  Checked checked =
      planAndRun(layout(one, {{}, {}}, {5, 7}), layout(mesh, {{}, {}}, {5, 7}));
  EXPECT_EQ(countPhases(checked.schedule, SegmentMethod::Broadcast), 1);
  EXPECT_EQ(checked.stats.broadcastBytes, 7 * 5 * 7 * 8);
}

TEST(DeviceSchedule, UnevenDims) {
  Mesh mesh = makeMesh({{"a", 4}, {"b", 3}});
  std::vector<std::vector<std::vector<std::string>>> shardings = {
      {{"a"}, {"b"}},
      {{"b"}, {"a"}},
      {{"a", "b"}, {}},
      {{}, {"b", "a"}},
      {{}, {}}};
  for (const auto &from : shardings)
    for (const auto &to : shardings)
      for (int64_t eb : {2, 8})
        planAndRun(layout(mesh, from, {7, 5}), layout(mesh, to, {7, 5}), eb);
}

TEST(DeviceSchedule, ReversedDeviceIdsSwapTiles) {
  Mesh mesh = makeMesh({{"a", 8}});
  Mesh reversed = makeMesh({{"a", 8}}, {7, 6, 5, 4, 3, 2, 1, 0});
  Checked checked = planAndRun(layout(mesh, {{"a"}, {}}, {16, 3}),
                               layout(reversed, {{"a"}, {}}, {16, 3}));
  ASSERT_EQ(checked.schedule.segments.size(), 1u);
  const Segment &segment = checked.schedule.segments[0];
  EXPECT_EQ(segment.method, SegmentMethod::SendRecv);
  for (size_t p = 0; p < 8; ++p) {
    const std::vector<CommRow> &comm = segment.perDevice[p].comm;
    ASSERT_EQ(comm.size(), 2u);
    for (const CommRow &row : comm)
      EXPECT_EQ(row.peer, 7 - static_cast<int64_t>(p));
  }
}

TEST(DeviceSchedule, DisjointMeshes) {
  Mesh stage0 = makeMesh({{"dp", 2}, {"tp", 2}}, range(0, 4));
  Mesh stage1 = makeMesh({{"dp", 2}, {"tp", 2}}, range(4, 8));
  TensorLayout dst = layout(stage1, {{"dp"}, {"tp"}}, {8, 8});
  Checked checked = planAndRun(layout(stage0, {{"dp"}, {"tp"}}, {8, 8}), dst);
  // Stage-0 devices have no destination tile, stage-1 ones no source tile.
  // Each box is a whole tile, one contiguous run on both sides: it is sent
  // from the source tile and received into the destination tile, with no
  // staging, pack or unpack.
  for (size_t p = 0; p < 8; ++p) {
    const DeviceSegment &rows = checked.schedule.segments[0].perDevice[p];
    EXPECT_TRUE(rows.before.empty());
    EXPECT_TRUE(rows.after.empty());
    EXPECT_EQ(rows.stagingBytes, 0);
    ASSERT_EQ(rows.comm.size(), 1u);
    EXPECT_EQ(rows.comm[0].space,
              p < 4 ? BufferSpace::Source : BufferSpace::Destination);
  }
  planAndRun(layout(stage0, {{"dp"}, {}}, {8, 8}), dst);
  planAndRun(layout(stage0, {{}, {"dp", "tp"}}, {6, 9}),
             layout(stage1, {{"tp"}, {"dp"}}, {6, 9}));
  // Overlapping meshes and sparse ids.
  Mesh first = makeMesh({{"a", 4}}, {0, 1, 2, 3});
  Mesh second = makeMesh({{"b", 2}, {"c", 2}}, {2, 3, 4, 5});
  planAndRun(layout(first, {{"a"}, {}}, {8, 4}),
             layout(second, {{"c"}, {"b"}}, {8, 4}));
  int64_t base = int64_t(1) << 40;
  Mesh sparse = makeMesh({{"a", 2}, {"b", 2}}, {base, 7, base * 3, 12});
  Mesh other = makeMesh({{"c", 4}}, {12, base * 5, 7, base});
  planAndRun(layout(sparse, {{"a"}, {"b"}}, {6, 5}),
             layout(other, {{}, {"c"}}, {6, 5}));
}

TEST(DeviceSchedule, SubAxes) {
  Mesh mesh = makeMesh({{"x", 8}, {"y", 2}});
  TensorLayout src = layout(mesh, {{"x:(1)2"}, {"x:(2)4", "y"}}, {8, 16});
  planAndRun(src, layout(mesh, {{"x:(1)2"}, {}}, {8, 16}));
  planAndRun(src, layout(mesh, {{"x"}, {"y"}}, {8, 16}));
  planAndRun(src, layout(mesh, {{"y", "x:(2)4"}, {"x:(1)2"}}, {8, 16}));
}

TEST(DeviceSchedule, ZeroFillForNewUnreducedAxis) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  Checked checked = planAndRun(layout(mesh, {{"a"}, {}}, {4, 4}),
                               layout(mesh, {{"a"}, {}}, {4, 4}, {"b"}));
  EXPECT_GT(checked.stats.zeroRows, 0);
  EXPECT_EQ(checked.stats.sendBytes, 0);
  for (const Segment &segment : checked.schedule.segments)
    for (const DeviceSegment &rows : segment.perDevice)
      for (const CopyRow &row : rows.after)
        if (row.kind == CopyKind::Zero) {
          EXPECT_EQ(row.dstSpace, BufferSpace::Destination);
          for (int64_t stride : row.srcStrides)
            EXPECT_EQ(stride, 0);
        }
  // Zeros and a gather together.
  planAndRun(layout(mesh, {{"a"}, {"b"}}, {5, 3}),
             layout(mesh, {{}, {}}, {5, 3}, {"a", "b"}));
}

TEST(DeviceSchedule, UnreducedAllReduceAndReduceScatter) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  // Without collective sums (an element type the backend cannot add): the
  // all-reduce's phase 0 accumulates in the source buffers by send/recv,
  // phase 1 copies.
  ScheduleOptions noSums;
  noSums.reductions = false;
  Checked allReduce =
      planAndRun(layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}),
                 layout(mesh, {{"a"}, {}}, {8, 8}), 8, {}, {}, noSums);
  EXPECT_EQ(allReduce.plan.count(StepKind::AllReduce), 2);
  EXPECT_TRUE(allReduce.schedule.writesSource);
  EXPECT_GT(allReduce.stats.accumulateRows, 0);
  EXPECT_EQ(countPhases(allReduce.schedule, SegmentMethod::AllReduce), 0);
  bool twoPhases = false;
  for (const Segment &segment : allReduce.schedule.segments)
    for (const StepPhase &phase : segment.phases)
      twoPhases |= phase.phase == 1;
  EXPECT_TRUE(twoPhases);

  Checked scatter =
      planAndRun(layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}),
                 layout(mesh, {{"a"}, {"b"}}, {8, 8}), 8, {}, {}, noSums);
  EXPECT_EQ(scatter.plan.count(StepKind::ReduceScatter), 2);
  EXPECT_GT(scatter.stats.accumulateRows, 0);
  EXPECT_EQ(countPhases(scatter.schedule, SegmentMethod::ReduceScatter), 0);

  // Odd extents, partials kept, and a reduction across meshes.
  for (const ScheduleOptions &options : {ScheduleOptions{}, noSums}) {
    planAndRun(layout(mesh, {{}, {"a"}}, {7, 5}, {"b"}),
               layout(mesh, {{"b"}, {}}, {7, 5}), 8, {}, {}, options);
    planAndRun(layout(mesh, {{"a"}, {}}, {4, 4}, {"b"}),
               layout(mesh, {{}, {}}, {4, 4}, {"b"}), 8, {}, {}, options);
    Mesh other = makeMesh({{"x", 4}}, range(8, 12));
    planAndRun(layout(mesh, {{"a"}, {}}, {8, 4}, {"b"}),
               layout(other, {{}, {"x"}}, {8, 4}), 8, {}, {}, options);
    // Every element size: sums wrap the same way in 1, 2 and 4 bytes.
    for (int64_t eb : {1, 2, 4})
      planAndRun(layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}),
                 layout(mesh, {{"a"}, {}}, {8, 8}), eb, {}, {}, options);
  }
}

TEST(DeviceSchedule, AllReduceIsOneCollectiveInPlace) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  Checked checked = planAndRun(layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}),
                               layout(mesh, {{"a"}, {}}, {8, 8}));
  ASSERT_EQ(checked.plan.count(StepKind::AllReduce), 2);
  // One segment for both phases of each step; the local copies after it.
  EXPECT_EQ(countPhases(checked.schedule, SegmentMethod::AllReduce), 2);
  EXPECT_EQ(checked.stats.sendBytes, 0);
  EXPECT_EQ(checked.stats.accumulateRows, 0);
  EXPECT_EQ(checked.stats.collectiveBytes, 2 * 2 * 3 * 4 * 8 * 8);
  for (const Segment &segment : checked.schedule.segments) {
    if (segment.method != SegmentMethod::AllReduce)
      continue;
    ASSERT_EQ(segment.groups.size(), segment.phases.size());
    for (const StepPhase &phase : segment.phases)
      EXPECT_EQ(phase.phase, 0);
    for (const std::vector<int64_t> &members : segment.groups)
      for (int64_t member : members) {
        // The pieces are the whole 4x8 source tile in order, and the step
        // after copies it to the destination tile: summed from the one
        // into the other (out of place).
        const DeviceSegment &rows = segment.perDevice[member];
        EXPECT_TRUE(rows.before.empty());
        EXPECT_TRUE(rows.after.empty());
        ASSERT_EQ(rows.comm.size(), 1u);
        EXPECT_EQ(rows.comm[0].kind, CommKind::AllReduce);
        EXPECT_EQ(rows.comm[0].space, BufferSpace::Source);
        EXPECT_EQ(rows.comm[0].bytes, 4 * 8 * 8);
        EXPECT_EQ(rows.comm[0].result,
                  (BufferPlace{BufferSpace::Destination, 0}));
      }
  }
  // So the source is never written (no copy of it first), and the local
  // copies are gone: their segment has no rows.
  EXPECT_TRUE(checked.plan.reducesInPlace);
  EXPECT_FALSE(checked.schedule.writesSource);
  EXPECT_EQ(checked.stats.copyRows, 0);
  EXPECT_EQ(checked.stats.outOfPlaceRows, 8);
  // Asked to keep collectives in place, the schedule sums in the source
  // tile and copies the result: the source is written.
  ScheduleOptions inPlace;
  inPlace.directCollectives = false;
  Checked kept0 =
      planAndRun(layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}),
                 layout(mesh, {{"a"}, {}}, {8, 8}), 8, {}, {}, inPlace);
  EXPECT_EQ(kept0.stats.outOfPlaceRows, 0);
  EXPECT_TRUE(kept0.schedule.writesSource);
  EXPECT_EQ(kept0.stats.copyRows, 8);
  // Kept partials (the destination unreduced too) stay in place.
  Checked kept = planAndRun(layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}),
                            layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}));
  EXPECT_EQ(kept.stats.outOfPlaceRows, 0);
  // In chunks, each step's pieces are part of the tile: packed, summed in
  // staging, unpacked.
  Mesh four = makeMesh({{"a", 4}});
  Checked chunked =
      planAndRun(layout(four, {{}, {}}, {16, 8}, {"a"}),
                 layout(four, {{}, {}}, {16, 8}), 8, PlanOptions{512});
  EXPECT_GT(chunked.plan.numChunks, 1);
  EXPECT_GT(countPhases(chunked.schedule, SegmentMethod::AllReduce), 1);
  EXPECT_GT(chunked.stats.allReduceSegments, 1);
  bool staged = false;
  for (const Segment &segment : chunked.schedule.segments)
    for (const DeviceSegment &rows : segment.perDevice)
      staged |= segment.method == SegmentMethod::AllReduce &&
                !rows.before.empty() &&
                rows.comm.at(0).space == BufferSpace::Staging;
  EXPECT_TRUE(staged);
}

TEST(DeviceSchedule, ReduceScatterOfEqualPieces) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 4}});
  Checked checked = planAndRun(layout(mesh, {{"a"}, {}}, {8, 8}, {"b"}),
                               layout(mesh, {{"a"}, {"b"}}, {8, 8}), 4);
  ASSERT_EQ(checked.plan.count(StepKind::ReduceScatter), 2);
  EXPECT_EQ(countPhases(checked.schedule, SegmentMethod::ReduceScatter), 2);
  EXPECT_EQ(checked.stats.accumulateRows, 0);
  EXPECT_EQ(checked.stats.sendBytes, 0);
  for (const Segment &segment : checked.schedule.segments) {
    if (segment.method != SegmentMethod::ReduceScatter)
      continue;
    for (const std::vector<int64_t> &members : segment.groups)
      for (size_t rank = 0; rank < members.size(); ++rank) {
        const DeviceSegment &rows = segment.perDevice[members[rank]];
        // Four 4x2 pieces packed in rank order, the own sum copied back.
        EXPECT_EQ(rows.before.size(), 4u);
        ASSERT_EQ(rows.after.size(), 1u);
        EXPECT_EQ(rows.after[0].kind, CopyKind::Copy);
        EXPECT_EQ(rows.after[0].srcOffset,
                  static_cast<int64_t>(rank) * 4 * 2 * 4);
        EXPECT_EQ(rows.comm.at(0).bytes, 4 * 2 * 4);
        EXPECT_EQ(rows.stagingBytes, 4 * 4 * 2 * 4);
      }
  }
  // Column pieces (strided boxes), two reduced axes, every element size.
  Mesh cube = makeMesh({{"a", 2}, {"b", 2}, {"c", 2}});
  for (int64_t eb : {1, 2, 4, 8}) {
    Checked columns = planAndRun(layout(mesh, {{}, {}}, {6, 8}, {"b"}),
                                 layout(mesh, {{}, {"b"}}, {6, 8}), eb);
    EXPECT_EQ(countPhases(columns.schedule, SegmentMethod::ReduceScatter), 2);
    EXPECT_GT(columns.stats.stridedRows, 0);
    Checked two = planAndRun(layout(cube, {{"a"}, {}}, {4, 8}, {"b", "c"}),
                             layout(cube, {{"a"}, {"b", "c"}}, {4, 8}), eb);
    EXPECT_EQ(countPhases(two.schedule, SegmentMethod::ReduceScatter), 2);
  }
  // Unequal pieces (7 columns over 4 devices) stay send/recv.
  Checked uneven = planAndRun(layout(mesh, {{"a"}, {}}, {8, 7}, {"b"}),
                              layout(mesh, {{"a"}, {"b"}}, {8, 7}));
  EXPECT_EQ(uneven.plan.count(StepKind::ReduceScatter), 2);
  EXPECT_EQ(countPhases(uneven.schedule, SegmentMethod::ReduceScatter), 0);
  EXPECT_GT(uneven.stats.accumulateRows, 0);
}

TEST(DeviceSchedule, AllGatherOfUnequalTilesFallsBack) {
  Mesh mesh = makeMesh({{"a", 4}});
  // Rows 3, 3, 3 and 1: members contribute different byte counts.
  Checked uneven = planAndRun(layout(mesh, {{"a"}, {}}, {10, 4}),
                              layout(mesh, {{}, {}}, {10, 4}));
  EXPECT_GT(uneven.plan.count(StepKind::AllGather), 0);
  EXPECT_EQ(countPhases(uneven.schedule, SegmentMethod::AllGather), 0);
  EXPECT_GT(countPhases(uneven.schedule, SegmentMethod::SendRecv), 0);
  // Even row tiles: one all-gather straight from each source tile into the
  // destination tiles (the rows in rank order are the whole tile): no
  // staging, and every member's rows the same.
  Checked even = planAndRun(layout(mesh, {{"a"}, {}}, {8, 3}),
                            layout(mesh, {{}, {}}, {8, 3}), 2);
  ASSERT_EQ(countPhases(even.schedule, SegmentMethod::AllGather), 1);
  const Segment &segment =
      *findSegment(even.schedule, SegmentMethod::AllGather);
  ASSERT_EQ(segment.groups.size(), 1u);
  EXPECT_EQ(segment.groups[0], range(0, 4));
  EXPECT_EQ(even.stats.outOfPlaceRows, 4);
  for (size_t rank = 0; rank < 4; ++rank) {
    const DeviceSegment &rows = segment.perDevice[rank];
    EXPECT_TRUE(rows.before.empty());
    EXPECT_TRUE(rows.after.empty());
    EXPECT_EQ(rows.stagingBytes, 0);
    ASSERT_EQ(rows.comm.size(), 1u);
    EXPECT_EQ(rows.comm[0].bytes, 2 * 3 * 2);
    EXPECT_EQ(rows.comm[0].space, BufferSpace::Source);
    EXPECT_EQ(rows.comm[0].stagingOffset, 0);
    EXPECT_EQ(rows.comm[0].result, (BufferPlace{BufferSpace::Destination, 0}));
  }
  // Column tiles are strided in the gathered tile: each member packs its
  // columns at rank * chunk, gathers in place, and unpacks.
  Checked columns = planAndRun(layout(mesh, {{}, {"a"}}, {3, 8}),
                               layout(mesh, {{}, {}}, {3, 8}), 2);
  ASSERT_EQ(countPhases(columns.schedule, SegmentMethod::AllGather), 1);
  EXPECT_EQ(columns.stats.outOfPlaceRows, 0);
  const Segment &staged =
      *findSegment(columns.schedule, SegmentMethod::AllGather);
  for (size_t rank = 0; rank < 4; ++rank) {
    const DeviceSegment &rows = staged.perDevice[rank];
    ASSERT_EQ(rows.before.size(), 1u);
    EXPECT_EQ(rows.before[0].dstOffset, static_cast<int64_t>(rank) * 2 * 3 * 2);
    EXPECT_EQ(rows.after.size(), 3u);
    EXPECT_EQ(rows.comm.at(0).bytes, 2 * 3 * 2);
    EXPECT_FALSE(rows.comm[0].result);
  }
  // Without collectives every step is send/recv.
  ScheduleOptions none;
  none.collectives = false;
  Checked plain = planAndRun(layout(mesh, {{"a"}, {}}, {8, 3}),
                             layout(mesh, {{}, {}}, {8, 3}), 2, {}, {}, none);
  EXPECT_EQ(countPhases(plain.schedule, SegmentMethod::AllGather), 0);
  EXPECT_GT(plain.stats.sendBytes, 0);
}

/// Splits the first transfer of `step` (of `phase`) in two along its last
/// dimension: the same bytes move, but no longer in the collective's shape.
void splitFirstTransfer(TransferPlan &plan, StepKind kind, int phase) {
  for (Step &step : plan.steps) {
    if (step.kind != kind)
      continue;
    for (size_t t = 0; t < step.transfers.size(); ++t) {
      Transfer &transfer = step.transfers[t];
      size_t last = transfer.box.lo.size() - 1;
      if (transfer.phase != phase ||
          transfer.box.hi[last] - transfer.box.lo[last] < 2)
        continue;
      Transfer second = transfer;
      int64_t middle = (transfer.box.lo[last] + transfer.box.hi[last]) / 2;
      transfer.box.hi[last] = middle;
      second.box.lo[last] = middle;
      transfer.bytes = transfer.box.numElements() * plan.elementBytes;
      second.bytes = second.box.numElements() * plan.elementBytes;
      step.transfers.insert(step.transfers.begin() + t + 1, second);
      recomputePlanStats(plan);
      return;
    }
  }
}

TEST(DeviceSchedule, ReductionsNotInTheCollectivesShapeFallBack) {
  Mesh mesh = makeMesh({{"a", 4}});
  TensorLayout partial = layout(mesh, {{}, {}}, {4, 8}, {"a"});
  for (auto [destination, kind] :
       {std::pair{layout(mesh, {{}, {}}, {4, 8}), StepKind::AllReduce},
        std::pair{layout(mesh, {{}, {"a"}}, {4, 8}),
                  StepKind::ReduceScatter}}) {
    absl::StatusOr<TransferPlan> plan = planReshard(partial, destination, 8);
    ASSERT_TRUE(plan.ok());
    ASSERT_EQ(plan->count(kind), 1);
    // A member reduces one piece in two halves: the sums are the same, but
    // not one collective's.
    splitFirstTransfer(*plan, kind, 0);
    Checked checked;
    ASSERT_TRUE(
        checkSchedule(*plan, partial, destination, range(0, 4), &checked))
        << formatPlan(*plan);
    EXPECT_EQ(countPhases(checked.schedule, SegmentMethod::AllReduce), 0);
    EXPECT_EQ(countPhases(checked.schedule, SegmentMethod::ReduceScatter), 0);
    EXPECT_GT(checked.stats.accumulateRows, 0);
  }
  // The same for an all-gather: one member sends its tile in two boxes to
  // the others; it still contributes the same bytes, so this is still one
  // all-gather, packed in two rows.
  TensorLayout rows = layout(mesh, {{"a"}, {}}, {8, 4});
  TensorLayout whole = layout(mesh, {{}, {}}, {8, 4});
  absl::StatusOr<TransferPlan> gather = planReshard(rows, whole, 8);
  ASSERT_TRUE(gather.ok());
  splitFirstTransfer(*gather, StepKind::AllGather, 0);
  Checked checked;
  ASSERT_TRUE(checkSchedule(*gather, rows, whole, range(0, 4), &checked))
      << formatPlan(*gather);
  ASSERT_EQ(countPhases(checked.schedule, SegmentMethod::AllGather), 1);
  EXPECT_EQ(findSegment(checked.schedule, SegmentMethod::AllGather)
                ->perDevice[0]
                .before.size(),
            2u);
}

TEST(DeviceSchedule, Rank0Rank1AndRank4) {
  Mesh one = makeMesh({}, {3});
  Mesh mesh = makeMesh({{"a", 4}});
  // Scalars: a broadcast, and an all-reduce of partials.
  planAndRun(layout(one, {}, {}), layout(mesh, {}, {}));
  Checked scalar =
      planAndRun(layout(mesh, {}, {}, {"a"}), layout(mesh, {}, {}));
  EXPECT_EQ(scalar.schedule.outerDims, 0);
  for (const Segment &segment : scalar.schedule.segments)
    for (const DeviceSegment &rows : segment.perDevice)
      for (const CopyRow &row : rows.after) {
        EXPECT_TRUE(row.counts.empty());
        EXPECT_EQ(row.runBytes, 8);
      }

  Mesh three = makeMesh({{"a", 3}});
  planAndRun(layout(three, {{"a"}}, {7}), layout(three, {{}}, {7}));
  planAndRun(layout(three, {{}}, {7}), layout(three, {{"a"}}, {7}));
  planAndRun(layout(three, {{"a"}}, {7}),
             layout(makeMesh({{"a", 3}}, {2, 0, 1}), {{"a"}}, {7}));

  Mesh cube = makeMesh({{"a", 2}, {"b", 2}, {"c", 2}});
  TensorLayout src = layout(cube, {{"a"}, {}, {"b"}, {"c"}}, {3, 4, 5, 6});
  Checked rank4 =
      planAndRun(src, layout(cube, {{}, {"c"}, {}, {"a", "b"}}, {3, 4, 5, 6}));
  EXPECT_EQ(rank4.schedule.outerDims, 3);
  EXPECT_GT(rank4.stats.stridedRows, 0);
  planAndRun(src, layout(cube, {{}, {}, {}, {}}, {3, 4, 5, 6}));
  planAndRun(src, layout(cube, {{"c"}, {"b"}, {"a"}, {}}, {3, 4, 5, 6}), 2);
}

TEST(DeviceSchedule, MemoryLimitedChunks) {
  // The Orbax broadcast in chunks stays a pair of broadcasts per chunk.
  Mesh replica0 = makeMesh({{"tp", 2}}, {0, 1});
  Mesh train = makeMesh({{"dp", 16}, {"tp", 2}});
  int64_t half = 32 * 16 * 8;
  Checked orbax = planAndRun(layout(replica0, {{}, {"tp"}}, {32, 32}),
                             layout(train, {{}, {"tp"}}, {32, 32}), 8,
                             PlanOptions{half / 8});
  EXPECT_GE(orbax.plan.numChunks, 8);
  EXPECT_EQ(countPhases(orbax.schedule, SegmentMethod::Broadcast),
            2 * orbax.plan.numChunks);
  for (int64_t staging : orbax.schedule.stagingBytes)
    EXPECT_LE(staging, half / 8);

  Mesh mesh = makeMesh({{"a", 4}});
  Checked gather = planAndRun(layout(mesh, {{"a"}, {}}, {64, 16}),
                              layout(mesh, {{}, {}}, {64, 16}), 8,
                              PlanOptions{4 * 16 * 4 * 8});
  EXPECT_GT(gather.plan.numChunks, 1);

  // Reductions in pieces, down to one element at a time as accumulating
  // send/recv.
  TensorLayout partial = layout(mesh, {{}, {}}, {16, 8}, {"a"});
  TensorLayout replicated = layout(mesh, {{}, {}}, {16, 8});
  planAndRun(partial, replicated, 8, PlanOptions{512});
  Checked single = planAndRun(partial, replicated, 8, PlanOptions{8});
  EXPECT_GT(single.plan.count(StepKind::SendRecv), 0);
  EXPECT_GT(single.stats.accumulateRows, 0);
  planAndRun(layout(mesh, {{"a"}, {}}, {8, 8}), layout(mesh, {{}, {}}, {8, 8}),
             8, PlanOptions{8});
}

TEST(DeviceSchedule, ExtraDevicesHoldNothing) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}}, {1, 3, 5, 7});
  Checked checked =
      planAndRun(layout(mesh, {{"a"}, {"b"}}, {6, 6}),
                 layout(mesh, {{"b"}, {}}, {6, 6}), 4, {}, {0, 2, 4, 100});
  ASSERT_EQ(checked.schedule.devices,
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 7, 100}));
  for (int64_t position : {0, 2, 4, 7})
    EXPECT_EQ(checked.schedule.stagingBytes[position], 0);
  // An identity plan on a program with more devices.
  planAndRun(layout(mesh, {{"a"}, {}}, {4, 4}),
             layout(mesh, {{"a"}, {}}, {4, 4}), 8, {}, {9});
}

TEST(DeviceSchedule, LocalCopyReadsBeforeThePhaseWrites) {
  // A hand-made phase in which device 1 both receives a sum into its source
  // buffer and copies that buffer locally: the copy must see the old value,
  // so the schedule stages it before the communication.
  Mesh mesh = makeMesh({{"a", 2}});
  TensorLayout src = layout(mesh, {{}}, {4});
  TensorLayout dst = layout(mesh, {{}}, {4});
  TransferPlan plan;
  plan.shape = {4};
  plan.elementBytes = 8;
  plan.reducesInPlace = true;
  Step step{StepKind::SendRecv, 0, {0, 1}, {}};
  Transfer sum{0, {1}, Box{{0}, {2}}, 16};
  sum.dstBuffer = BufferKind::Source;
  sum.accumulate = true;
  step.transfers.push_back(sum);
  step.transfers.push_back({1, {1}, Box{{0}, {4}}, 32});
  step.transfers.push_back({1, {0}, Box{{0}, {4}}, 32});
  plan.steps.push_back(step);
  recomputePlanStats(plan);
  Checked checked;
  ASSERT_TRUE(checkSchedule(plan, src, dst, {0, 1}, &checked))
      << formatPlan(plan);
  const DeviceSegment &rows = checked.schedule.segments.at(0).perDevice[1];
  // Device 1 packs its whole source twice (for itself and for device 0)
  // and receives two elements.
  EXPECT_EQ(rows.before.size(), 2u);
  EXPECT_EQ(rows.stagingBytes, 32 + 32 + 16);
  EXPECT_TRUE(checked.schedule.writesSource);

  // Without the sum, the local copy reads the source buffer directly, and
  // the whole-tile send to device 0 reads it in place: nothing is staged.
  plan.steps[0].transfers.erase(plan.steps[0].transfers.begin());
  plan.reducesInPlace = false;
  recomputePlanStats(plan);
  ASSERT_TRUE(checkSchedule(plan, src, dst, {0, 1}, &checked));
  const DeviceSegment &direct = checked.schedule.segments.at(0).perDevice[1];
  EXPECT_TRUE(direct.before.empty());
  EXPECT_EQ(direct.after.size(), 1u);
  ASSERT_EQ(direct.comm.size(), 1u);
  EXPECT_EQ(direct.comm[0].space, BufferSpace::Source);
}

TEST(DeviceSchedule, RejectsPlansOutsideTheirTiles) {
  Mesh mesh = makeMesh({{"a", 4}});
  TensorLayout src = layout(mesh, {{"a"}, {}}, {8, 4});
  TensorLayout dst = layout(mesh, {{}, {}}, {8, 4});
  absl::StatusOr<TransferPlan> plan = planReshard(src, dst, 8);
  ASSERT_TRUE(plan.ok());
  // A device the program does not have.
  EXPECT_EQ(scheduleForDevices(*plan, src, dst, {0, 1, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A box the sender does not hold.
  TransferPlan broken = *plan;
  for (Step &step : broken.steps)
    for (Transfer &transfer : step.transfers)
      if (!transfer.isLocal()) {
        transfer.box.hi[0] += 2;
        transfer.bytes = transfer.box.numElements() * 8;
      }
  EXPECT_EQ(scheduleForDevices(broken, src, dst, range(0, 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

//===----------------------------------------------------------------------===//
// Random reshards
//===----------------------------------------------------------------------===//

TEST(DeviceScheduleProperty, RandomReshardsMatchTheSimulator) {
  // POLYMESH_SCHEDULE_SEED and POLYMESH_SCHEDULE_CASES override the fixed
  // seed and count for longer local sweeps.
  uint64_t kSeed = 0x5c4ed01e;
  int kCases = 1000;
  if (const char *seed = std::getenv("POLYMESH_SCHEDULE_SEED"))
    kSeed = std::strtoull(seed, nullptr, 0);
  if (const char *cases = std::getenv("POLYMESH_SCHEDULE_CASES"))
    kCases = std::atoi(cases);
  SplitMix64 rng(kSeed);
  RunStats totals;
  int withExtras = 0, limited = 0, reductions = 0, rank4 = 0, symbolicSteps = 0;
  for (int i = 0; i < kCases; ++i) {
    RandomReshardOptions options;
    if (i % 5 == 4) {
      options.maxRank = 4;
      options.maxExtent = 6;
      options.maxDevices = 16;
    }
    ReshardCase c = randomReshard(rng, options);
    std::vector<int64_t> extra;
    if (rng.chance(30)) {
      std::vector<int64_t> held = programDevices(c.source, c.destination);
      std::set<int64_t> taken(held.begin(), held.end());
      for (int64_t k = rng.uniform(1, 3); k > 0; --k) {
        int64_t id = rng.uniform(0, 300);
        if (!taken.count(id))
          extra.push_back(id);
      }
      withExtras += !extra.empty();
    }
    std::string what = absl::StrCat(
        "seed ", kSeed, " case ", i, ": ", describe(c.source), "  ->  ",
        describe(c.destination), "  elementBytes=", c.elementBytes,
        " limit=", c.options.memoryLimitBytes, " extra devices [",
        absl::StrJoin(extra, ", "), "]");
    // Every other case keeps reductions symbolic (their pieces, no
    // transfers), as --polymesh-plan does: the schedule reads them off the
    // pieces, or expands them where no collective fits.
    PlanOptions planOptions = c.options;
    planOptions.symbolicReductions = i % 3 != 0;
    planOptions.symbolicExchanges = i % 3 != 0;
    what += absl::StrCat(" symbolic=", planOptions.symbolicReductions);
    absl::StatusOr<TransferPlan> plan =
        planReshard(c.source, c.destination, c.elementBytes, planOptions);
    ASSERT_TRUE(plan.ok()) << what << "\n" << plan.status();
    for (const Step &step : plan->steps)
      symbolicSteps += step.isSymbolic();
    // Most cases use every collective; some run as a backend without
    // collective sums would, or without collectives at all, and some keep
    // every collective in place (the forms the others fall back to).
    ScheduleOptions scheduleOptions;
    scheduleOptions.reductions = i % 4 != 1;
    scheduleOptions.collectives = i % 8 != 3;
    // Every other case orders send/recv rows for blocking calls (the MPI
    // lowering); both orders must run, as blocking calls too.
    scheduleOptions.blockingRounds = i % 2 == 0;
    scheduleOptions.directCollectives = i % 5 != 2;
    Checked checked;
    ASSERT_TRUE(checkSchedule(*plan, c.source, c.destination,
                              programDevices(c.source, c.destination, extra),
                              &checked, scheduleOptions))
        << what << " reductions=" << scheduleOptions.reductions
        << " collectives=" << scheduleOptions.collectives
        << " blockingRounds=" << scheduleOptions.blockingRounds
        << " directCollectives=" << scheduleOptions.directCollectives << "\n"
        << formatPlan(*plan);
    limited += c.options.memoryLimitBytes > 0;
    reductions += plan->reducesInPlace;
    rank4 += c.source.shape().size() == 4;
    totals.broadcastSegments += checked.stats.broadcastSegments;
    totals.directBroadcastRows += checked.stats.directBroadcastRows;
    totals.sendRecvSegments += checked.stats.sendRecvSegments;
    totals.stridedRows += checked.stats.stridedRows;
    totals.zeroRows += checked.stats.zeroRows;
    totals.accumulateRows += checked.stats.accumulateRows;
    totals.allGatherSegments += checked.stats.allGatherSegments;
    totals.allReduceSegments += checked.stats.allReduceSegments;
    totals.reduceScatterSegments += checked.stats.reduceScatterSegments;
    totals.outOfPlaceRows += checked.stats.outOfPlaceRows;
  }
  // The cases cover what they are meant to.
  if (kCases < 1000)
    return;
  EXPECT_GT(withExtras, 100);
  EXPECT_GT(limited, 100);
  EXPECT_GT(reductions, 50);
  EXPECT_GT(rank4, 25);
  EXPECT_GT(totals.broadcastSegments, 20);
  EXPECT_GT(totals.directBroadcastRows, 5);
  EXPECT_GT(totals.sendRecvSegments, 300);
  EXPECT_GT(totals.stridedRows, 100);
  EXPECT_GT(totals.zeroRows, 20);
  EXPECT_GT(totals.accumulateRows, 100);
  EXPECT_GT(totals.allGatherSegments, 50);
  EXPECT_GT(totals.allReduceSegments, 20);
  EXPECT_GT(totals.reduceScatterSegments, 2);
  EXPECT_GT(symbolicSteps, 20);
  EXPECT_GT(totals.outOfPlaceRows, 100);
  RecordProperty("with_extra_devices", withExtras);
  RecordProperty("symbolic_steps", symbolicSteps);
  RecordProperty("memory_limited", limited);
  RecordProperty("reductions", reductions);
  RecordProperty("rank4", rank4);
  RecordProperty("broadcast_segments", totals.broadcastSegments);
  RecordProperty("direct_broadcast_rows", totals.directBroadcastRows);
  RecordProperty("send_recv_segments", totals.sendRecvSegments);
  RecordProperty("strided_rows", totals.stridedRows);
  RecordProperty("zero_rows", totals.zeroRows);
  RecordProperty("accumulate_rows", totals.accumulateRows);
  RecordProperty("all_gather_segments", totals.allGatherSegments);
  RecordProperty("all_reduce_segments", totals.allReduceSegments);
  RecordProperty("reduce_scatter_segments", totals.reduceScatterSegments);
  RecordProperty("out_of_place_rows", totals.outOfPlaceRows);
}

//===----------------------------------------------------------------------===//
// Exchanges of whole tiles (symbolic all-to-all)
//===----------------------------------------------------------------------===//

TEST(DeviceSchedule, TransposeIsOneAllToAllPerDevice) {
  // Rows over "x" to columns over "x" on 8 devices: 56 chunks of 4x6 f32,
  // but one all-to-all step written as tiles, and one all-to-all call per
  // device whose rows are the same on every device.
  Mesh mesh = makeMesh({{"x", 8}});
  TensorLayout rows = layout(mesh, {{"x"}, {}}, {32, 48});
  TensorLayout columns = layout(mesh, {{}, {"x"}}, {32, 48});
  PlanOptions symbolic;
  symbolic.symbolicExchanges = true;
  Checked checked = planAndRun(rows, columns, 4, symbolic);
  ASSERT_EQ(checked.plan.steps.size(), 2u);
  EXPECT_EQ(checked.plan.steps[0].kind, StepKind::LocalCopy);
  const Step &exchange = checked.plan.steps[1];
  ASSERT_TRUE(exchange.exchange.has_value());
  EXPECT_TRUE(exchange.transfers.empty());
  EXPECT_EQ(planSize(checked.plan).transfers, 8 + 8);
  // The same totals as the 56 transfers it stands for.
  absl::StatusOr<TransferPlan> explicitPlan = planReshard(rows, columns, 4);
  ASSERT_TRUE(explicitPlan.ok());
  EXPECT_EQ(planSize(*explicitPlan).transfers, 8 + 56);
  EXPECT_EQ(checked.plan.bytesMoved, explicitPlan->bytesMoved);
  EXPECT_EQ(checked.plan.bytesMoved, 56 * 4 * 6 * 4);
  EXPECT_EQ(checked.plan.lowerBoundBytes, explicitPlan->lowerBoundBytes);
  EXPECT_EQ(checked.plan.maxSendBytes, explicitPlan->maxSendBytes);
  // One all-to-all call stages the whole source and destination tiles
  // (4x48 and 32x6, f32), each member's own chunk too; its transfers stage
  // all but that.
  EXPECT_EQ(checked.plan.peakTempBytes, 2 * 4 * 48 * 4);
  EXPECT_EQ(explicitPlan->peakTempBytes, 2 * 7 * 4 * 6 * 4);

  ASSERT_EQ(countSegments(checked.schedule, SegmentMethod::AllToAll), 1u);
  EXPECT_EQ(checked.stats.allToAllSegments, 1);
  // The chunks for ranks 0..7 are column blocks of the 4x48 source tile:
  // packed by one looped row. The chunks from ranks 0..7 are row blocks
  // of the 32x6 destination tile, in order: received into it directly.
  EXPECT_EQ(checked.schedule.outerDims, 2);
  EXPECT_EQ(checked.stats.allToAllPacks, 8);
  EXPECT_EQ(checked.stats.allToAllUnpacks, 0);
  for (const Segment &segment : checked.schedule.segments) {
    if (segment.method != SegmentMethod::AllToAll)
      continue;
    for (const DeviceSegment &rows : segment.perDevice) {
      ASSERT_EQ(rows.before.size(), 1u);
      EXPECT_EQ(rows.before[0].counts, (std::vector<int64_t>{8, 4}));
      EXPECT_EQ(rows.before[0].runBytes, 6 * 4);
      EXPECT_TRUE(rows.after.empty());
      ASSERT_EQ(rows.comm.size(), 1u);
      EXPECT_EQ(rows.comm[0].kind, CommKind::AllToAll);
      EXPECT_EQ(rows.comm[0].bytes, 4 * 6 * 4);
      EXPECT_EQ(rows.comm[0].result,
                (BufferPlace{BufferSpace::Destination, 0}));
    }
  }
  // The all-to-all brings each device its own chunk too: the local copies
  // are taken, so no row but the pack copies anything.
  EXPECT_EQ(checked.stats.copyRows, 8);

  // Back: the chunks are the source tile in order (sent from it directly)
  // and column blocks of the destination tile (unpacked by one row).
  Checked back = planAndRun(columns, rows, 4, symbolic);
  EXPECT_EQ(back.stats.allToAllSegments, 1);
  EXPECT_EQ(back.stats.allToAllPacks, 0);
  EXPECT_EQ(back.stats.allToAllUnpacks, 8);
  // Without collectives, the exchange runs as its transfers.
  ScheduleOptions plain;
  plain.collectives = false;
  Checked sendRecv = planAndRun(rows, columns, 4, symbolic, {}, plain);
  EXPECT_EQ(sendRecv.stats.allToAllSegments, 0);
  EXPECT_EQ(sendRecv.stats.sendBytes, 56 * 4 * 6 * 4);
}

/// The groups of the schedule's all-to-all segments.
std::vector<std::vector<int64_t>> allToAllGroups(const DeviceSchedule &s) {
  std::vector<std::vector<int64_t>> groups;
  for (const Segment &segment : s.segments)
    if (segment.method == SegmentMethod::AllToAll)
      groups.insert(groups.end(), segment.groups.begin(), segment.groups.end());
  return groups;
}

TEST(DeviceSchedule, ExchangesOutOfIdOrderLoopOverRankDigits) {
  // Rows over ("y", "x") to columns over ("x", "y"): in id order
  // (x * 2 + y) the chunk sent to rank k is column block k, but the chunk
  // received from rank k is row block (k % 2) * 4 + k / 2 of the
  // destination tile: one all-to-all over the ids in order, unpacked by a
  // copy with two loops, one per digit of k (x: 4, y: 2).
  Mesh mesh = makeMesh({{"x", 4}, {"y", 2}});
  PlanOptions symbolic;
  symbolic.symbolicExchanges = true;
  Checked permuted =
      planAndRun(layout(mesh, {{"y", "x"}, {}}, {16, 24}),
                 layout(mesh, {{}, {"x", "y"}}, {16, 24}), 4, symbolic);
  ASSERT_TRUE(permuted.plan.steps.back().exchange.has_value());
  EXPECT_EQ(permuted.stats.allToAllSegments, 1);
  EXPECT_EQ(permuted.stats.sendRecvSegments, 0);
  EXPECT_EQ(allToAllGroups(permuted.schedule),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(permuted.schedule.outerDims, 3);
  for (const Segment &segment : permuted.schedule.segments) {
    if (segment.method != SegmentMethod::AllToAll)
      continue;
    for (const DeviceSegment &rows : segment.perDevice) {
      // The chunk (2 rows x 3 columns) is contiguous on both sides.
      ASSERT_EQ(rows.after.size(), 1u);
      EXPECT_EQ(rows.after[0].counts, (std::vector<int64_t>{1, 4, 2}));
      EXPECT_EQ(rows.after[0].srcStrides,
                (std::vector<int64_t>{0, 2 * 24, 24}));
      EXPECT_EQ(rows.after[0].dstStrides,
                (std::vector<int64_t>{0, 24, 4 * 24}));
      EXPECT_EQ(rows.after[0].runBytes, 24);
    }
  }

  // Ids that do not follow positions: in id order the chunks are shuffled,
  // in the order of the tiles they are not. The communicator lists the
  // members in that order.
  Mesh shuffled = makeMesh({{"x", 4}}, {7, 3, 11, 0});
  Checked ids = planAndRun(layout(shuffled, {{"x"}, {}}, {8, 8}),
                           layout(shuffled, {{}, {"x"}}, {8, 8}), 4, symbolic);
  ASSERT_TRUE(ids.plan.steps.back().exchange.has_value());
  EXPECT_EQ(ids.stats.allToAllSegments, 1);
  EXPECT_EQ(allToAllGroups(ids.schedule),
            (std::vector<std::vector<int64_t>>{{7, 3, 11, 0}}));
}

TEST(DeviceSchedule, ExchangesShuffledBetweenLayoutsRunAsTransfers) {
  // The destination mesh swaps devices 0 and 1: in every order of the
  // members, one side's chunks are out of a mixed-radix pattern. The step
  // stays symbolic and runs as send/recv from its expansion.
  Mesh source = makeMesh({{"x", 8}});
  Mesh destination = makeMesh({{"p", 8}}, {1, 0, 2, 3, 4, 5, 6, 7});
  PlanOptions symbolic;
  symbolic.symbolicExchanges = true;
  Checked swapped =
      planAndRun(layout(source, {{"x"}, {}}, {16, 16}),
                 layout(destination, {{}, {"p"}}, {16, 16}), 4, symbolic);
  ASSERT_TRUE(swapped.plan.steps.back().exchange.has_value());
  EXPECT_EQ(swapped.stats.allToAllSegments, 0);
  EXPECT_GT(swapped.stats.sendRecvSegments, 0);
}

TEST(MixedRadix, RecoversRandomPatterns) {
  // Random digits (counts 2-4, deltas of either sign in 2 dimensions): the
  // values they give are read back as a pattern that gives the same values;
  // the last value moved breaks it.
  SplitMix64 rng(0x3a11ad1);
  for (int i = 0; i < 200; ++i) {
    std::vector<MixedRadixDigit> digits;
    int64_t n = 1;
    for (int64_t count = rng.uniform(1, 3); count > 0; --count) {
      MixedRadixDigit digit{
          rng.uniform(2, 4), n, {rng.uniform(-9, 9), rng.uniform(1, 9) * 10}};
      n *= digit.count;
      digits.push_back(digit);
    }
    std::vector<std::vector<int64_t>> values(n, std::vector<int64_t>{3, 5});
    for (int64_t k = 0; k < n; ++k)
      for (const MixedRadixDigit &digit : digits)
        for (size_t d = 0; d < 2; ++d)
          values[k][d] += (k / digit.weight) % digit.count * digit.delta[d];
    auto found = mixedRadixDigits(n, [&](int64_t k) { return values[k]; });
    ASSERT_TRUE(found.has_value()) << "case " << i;
    for (int64_t k = 0; k < n; ++k) {
      std::vector<int64_t> read = values[0];
      for (const MixedRadixDigit &digit : *found)
        for (size_t d = 0; d < 2; ++d)
          read[d] += (k / digit.weight) % digit.count * digit.delta[d];
      EXPECT_EQ(read, values[k]) << "case " << i << " k " << k;
    }
    // Two values are always a pattern.
    if (n == 2)
      continue;
    values[n - 1][1] += 1;
    EXPECT_FALSE(
        mixedRadixDigits(n, [&](int64_t k) { return values[k]; }).has_value())
        << "case " << i;
  }
}

TEST(DeviceScheduleProperty, RandomExchangesMatchTheSimulator) {
  SplitMix64 rng(0xe8c4a95e);
  constexpr int kCases = 400;
  int symbolic = 0;
  RunStats totals;
  for (int i = 0; i < kCases; ++i) {
    ReshardCase c = randomExchange(rng);
    std::string what = absl::StrCat("case ", i, ": ", describe(c.source),
                                    "  ->  ", describe(c.destination),
                                    "  elementBytes=", c.elementBytes);
    absl::StatusOr<TransferPlan> plan =
        planReshard(c.source, c.destination, c.elementBytes, c.options);
    ASSERT_TRUE(plan.ok()) << what << "\n" << plan.status();
    PlanOptions listed = c.options;
    listed.symbolicExchanges = false;
    absl::StatusOr<TransferPlan> explicitPlan =
        planReshard(c.source, c.destination, c.elementBytes, listed);
    ASSERT_TRUE(explicitPlan.ok()) << what;
    // The symbolic plan stands for exactly the transfers the planner lists
    // otherwise, with the same totals.
    std::multiset<std::tuple<int64_t, std::vector<int64_t>,
                             std::vector<int64_t>, std::vector<int64_t>>>
        stated, listedTransfers;
    for (const Step &step : plan->steps)
      for (const Transfer &t : stepTransfers(step, c.elementBytes))
        stated.insert({t.srcDevice, t.dstDevices, t.box.lo, t.box.hi});
    for (const Step &step : explicitPlan->steps)
      for (const Transfer &t : step.transfers)
        listedTransfers.insert({t.srcDevice, t.dstDevices, t.box.lo, t.box.hi});
    EXPECT_EQ(stated, listedTransfers) << what;
    EXPECT_EQ(plan->bytesMoved, explicitPlan->bytesMoved) << what;
    EXPECT_EQ(plan->lowerBoundBytes, explicitPlan->lowerBoundBytes) << what;
    EXPECT_EQ(plan->maxSendBytes, explicitPlan->maxSendBytes) << what;
    EXPECT_EQ(plan->maxRecvBytes, explicitPlan->maxRecvBytes) << what;
    bool exchanges =
        std::any_of(plan->steps.begin(), plan->steps.end(),
                    [](const Step &step) { return step.exchange.has_value(); });
    symbolic += exchanges;
    ScheduleOptions options;
    options.directCollectives = i % 3 != 1;
    Checked checked;
    ASSERT_TRUE(checkSchedule(*plan, c.source, c.destination,
                              programDevices(c.source, c.destination), &checked,
                              options))
        << what << " directCollectives=" << options.directCollectives << "\n"
        << formatPlan(*plan);
    totals.allToAllSegments += checked.stats.allToAllSegments;
    totals.allToAllPacks += checked.stats.allToAllPacks;
    totals.allToAllUnpacks += checked.stats.allToAllUnpacks;
  }
  EXPECT_GT(symbolic, kCases / 2);
  // Three in four of them (224 of 301 with this seed; 96 when only id
  // order was tried) run as one all-to-all.
  EXPECT_GT(totals.allToAllSegments, kCases / 2);
  EXPECT_GT(totals.allToAllPacks, 0);
  EXPECT_GT(totals.allToAllUnpacks, 0);
  RecordProperty("symbolic_exchanges", symbolic);
  RecordProperty("all_to_all_segments", totals.allToAllSegments);
}

TEST(DeviceSchedule, BlockingRoundsPairDistinctDevices) {
  // Rows on devices 0-3 to columns on devices 7-4: every source sends one
  // box to every destination. In rounds, the k-th calls of devices 0-3
  // have four different peers, so blocking calls in row order run four at
  // a time.
  Mesh rows = makeMesh({{"x", 4}}, {0, 1, 2, 3});
  Mesh cols = makeMesh({{"y", 4}}, {7, 6, 5, 4});
  ScheduleOptions options;
  options.blockingRounds = true;
  Checked checked =
      planAndRun(layout(rows, {{"x"}, {}}, {8, 8}),
                 layout(cols, {{}, {"y"}}, {8, 8}), 4, {}, {}, options);
  ASSERT_EQ(countSegments(checked.schedule, SegmentMethod::SendRecv), 1u);
  for (const Segment &segment : checked.schedule.segments) {
    if (segment.method != SegmentMethod::SendRecv)
      continue;
    for (size_t k = 0; k < 4; ++k) {
      std::set<int64_t> peers;
      for (size_t p = 0; p < 4; ++p) {
        ASSERT_EQ(segment.perDevice[p].comm.size(), 4u);
        peers.insert(segment.perDevice[p].comm[k].peer);
      }
      EXPECT_EQ(peers.size(), 4u) << "call " << k << " of devices 0-3";
    }
  }
}

TEST(DeviceSchedule, DisjointGroupsRunSideBySide) {
  // An all-gather of "b" is one step per "a" row: eight disjoint groups of
  // four, one segment, each device naming its own group.
  Mesh mesh = makeMesh({{"a", 8}, {"b", 4}});
  Checked checked = planAndRun(layout(mesh, {{"a"}, {"b"}}, {64, 32}),
                               layout(mesh, {{"a"}, {}}, {64, 32}), 4);
  ASSERT_EQ(countPhases(checked.schedule, SegmentMethod::AllGather), 8);
  ASSERT_EQ(countSegments(checked.schedule, SegmentMethod::AllGather), 1u);
  const Segment &segment =
      *findSegment(checked.schedule, SegmentMethod::AllGather);
  ASSERT_EQ(segment.groups.size(), 8u);
  for (int64_t device = 0; device < 32; ++device) {
    int64_t group = segment.perDevice[device].group;
    ASSERT_GE(group, 0);
    EXPECT_EQ(segment.groups[group], range(device / 4 * 4, device / 4 * 4 + 4));
  }
  EXPECT_EQ(checked.stats.allGatherSegments, 8);

  // A reduction over "b" in chunks: a group's chunks follow one another
  // (they share devices), the groups of one chunk run side by side.
  Checked chunked =
      planAndRun(layout(mesh, {{"a"}, {}}, {64, 32}, {"b"}),
                 layout(mesh, {{"a"}, {}}, {64, 32}), 4, PlanOptions{1024});
  int64_t reduced = countPhases(chunked.schedule, SegmentMethod::AllReduce);
  ASSERT_GT(reduced, 8);
  EXPECT_EQ(countSegments(chunked.schedule, SegmentMethod::AllReduce) * 8,
            static_cast<size_t>(reduced));
}

TEST(DeviceSchedule, SendRecvAcrossDisjointPairsRunsSideBySide) {
  // Stage to stage: every device of stage 0 sends its tile to its partner
  // in stage 1, one step each; all of them side by side in one segment.
  Mesh stage0 = makeMesh({{"x", 4}, {"y", 2}}, range(0, 8));
  Mesh stage1 = makeMesh({{"x", 4}, {"y", 2}}, range(8, 16));
  Checked checked = planAndRun(layout(stage0, {{"x"}, {"y"}}, {16, 8}),
                               layout(stage1, {{"x"}, {"y"}}, {16, 8}));
  EXPECT_EQ(checked.stats.sendBytes, 16 * 8 * 8);
  EXPECT_EQ(countSegments(checked.schedule, SegmentMethod::SendRecv), 1u);
}

/// Everything of a device's share of a segment, for comparisons.
std::string describeShare(const DeviceSegment &share) {
  std::string text = absl::StrCat("group ", share.group, " staging ",
                                  share.stagingBytes, "\n");
  for (const CopyRow &row : share.before)
    absl::StrAppend(&text, "before ", describeRow(row), "\n");
  for (const CommRow &row : share.comm)
    absl::StrAppend(&text, "comm ", static_cast<int>(row.kind), " peer ",
                    row.peer, " at ", static_cast<int>(row.space), "+",
                    row.stagingOffset, " bytes ", row.bytes, " packs ",
                    row.packsBefore, "\n");
  for (const CopyRow &row : share.after)
    absl::StrAppend(&text, "after ", describeRow(row), "\n");
  return text;
}

TEST(DeviceScheduleProperty, KeptRowsAreTheFullSchedulesRows) {
  // A process schedules only its own devices: what it keeps must be the
  // rows the full schedule gives those devices, in segments, phases and
  // groups numbered the same, or processes would disagree on who talks to
  // whom.
  SplitMix64 rng(0x6b657074);
  int checkedCases = 0, collectiveCases = 0;
  for (int i = 0; i < 300; ++i) {
    ReshardCase c = randomReshard(rng, RandomReshardOptions{});
    absl::StatusOr<TransferPlan> plan =
        planReshard(c.source, c.destination, c.elementBytes, c.options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::vector<int64_t> devices = programDevices(c.source, c.destination);
    ScheduleOptions all;
    absl::StatusOr<DeviceSchedule> full =
        scheduleForDevices(*plan, c.source, c.destination, devices, all);
    ASSERT_TRUE(full.ok()) << full.status();
    ScheduleOptions some;
    for (size_t p = 0; p < devices.size(); ++p)
      some.keepRows.push_back(rng.chance(40));
    absl::StatusOr<DeviceSchedule> part =
        scheduleForDevices(*plan, c.source, c.destination, devices, some);
    ASSERT_TRUE(part.ok()) << part.status();
    std::string what = absl::StrCat("case ", i, ": ", describe(c.source),
                                    "  ->  ", describe(c.destination));
    ASSERT_EQ(part->segments.size(), full->segments.size()) << what;
    for (size_t s = 0; s < full->segments.size(); ++s) {
      const Segment &want = full->segments[s];
      const Segment &got = part->segments[s];
      EXPECT_EQ(got.method, want.method) << what << " segment " << s;
      EXPECT_TRUE(got.phases == want.phases) << what << " segment " << s;
      ASSERT_EQ(got.groups.size(), want.groups.size()) << what;
      collectiveCases += !want.groups.empty();
      for (size_t p = 0; p < devices.size(); ++p) {
        const DeviceSegment &share = got.perDevice[p];
        if (!some.keepRows[p]) {
          EXPECT_TRUE(share.before.empty() && share.comm.empty() &&
                      share.after.empty() && share.group < 0)
              << what << " dropped device " << devices[p];
          continue;
        }
        EXPECT_EQ(describeShare(share), describeShare(want.perDevice[p]))
            << what << " segment " << s << " device " << devices[p];
        if (share.group >= 0) {
          EXPECT_EQ(got.groups[share.group], want.groups[share.group])
              << what << " segment " << s << " device " << devices[p];
        }
      }
    }
    for (size_t p = 0; p < devices.size(); ++p)
      EXPECT_EQ(part->stagingBytes[p],
                some.keepRows[p] ? full->stagingBytes[p] : 0)
          << what << " device " << devices[p];
    ++checkedCases;
  }
  EXPECT_EQ(checkedCases, 300);
  EXPECT_GT(collectiveCases, 20);

  // A keep mask that does not match the devices is refused.
  ReshardCase c = randomReshard(rng, RandomReshardOptions{});
  absl::StatusOr<TransferPlan> plan =
      planReshard(c.source, c.destination, c.elementBytes, c.options);
  ASSERT_TRUE(plan.ok());
  ScheduleOptions wrong;
  wrong.keepRows = {true};
  wrong.keepRows.resize(programDevices(c.source, c.destination).size() + 1);
  EXPECT_FALSE(scheduleForDevices(*plan, c.source, c.destination,
                                  programDevices(c.source, c.destination),
                                  wrong)
                   .ok());
}

} // namespace
