//===- ExchangeTables.cpp - Plan tables shared by the lowerings ----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "ExchangeTables.h"

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Planner/MixedRadix.h"
#include "polymesh/Runtime/NcclAbi.h"
#include "polymesh/Runtime/PolymeshRuntime.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <array>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

using namespace mlir;
using namespace polymesh;
using namespace polymesh::conversion;

PlanTableBuilder::PlanTableBuilder(ModuleOp module,
                                   planner::ScheduleOptions scheduling)
    : module(module), scheduling(std::move(scheduling)) {
  auto sortUnique = [](std::vector<int64_t> &ids) {
    llvm::sort(ids);
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  };
  for (auto function : module.getOps<func::FuncOp>()) {
    auto partitionOf = function->getAttrOfType<StringAttr>(
        PolymeshDialect::kPartitionOfAttrName);
    auto ids = function->getAttrOfType<DenseI64ArrayAttr>(
        PolymeshDialect::kDevicesAttrName);
    if (!partitionOf || !ids)
      continue;
    std::vector<int64_t> &run = runners[partitionOf.getValue()];
    run.insert(run.end(), ids.asArrayRef().begin(), ids.asArrayRef().end());
    // The positions count the devices of the function's meshes, which a
    // module partitioned for some devices only does not list in full.
    std::vector<int64_t> &all = devices[partitionOf.getValue()];
    if (std::optional<std::vector<int64_t>> meshIds =
            partitionedFunctionDevices(symbols, function))
      all = std::move(*meshIds);
    else
      all.insert(all.end(), ids.asArrayRef().begin(), ids.asArrayRef().end());
  }
  for (auto &entry : devices)
    sortUnique(entry.second);
  for (auto &entry : runners)
    sortUnique(entry.second);
}

const std::vector<int64_t> &PlanTableBuilder::devicesOf(Operation *op) {
  auto function = op->getParentOfType<func::FuncOp>();
  auto partitionOf = function->getAttrOfType<StringAttr>(
      PolymeshDialect::kPartitionOfAttrName);
  return devices[partitionOf.getValue()];
}

MemRefType PlanTableBuilder::globalType(const std::string &name) {
  return cast<MemRefType>(
      module.lookupSymbol<memref::GlobalOp>(name).getType());
}

Value PlanTableBuilder::groupBuffer(OpBuilder &builder, int64_t size) {
  // Found again by its mark (finishPartitionedModule drops it): the
  // function's entry block is the one place that knows it.
  constexpr llvm::StringLiteral kMark = PolymeshDialect::kGroupBufferAttrName;
  auto function = builder.getInsertionBlock()
                      ->getParent()
                      ->getParentOfType<FunctionOpInterface>();
  Block &entry = function.getFunctionBody().front();
  for (auto buffer : entry.getOps<LLVM::AllocaOp>()) {
    if (!buffer->hasAttr(kMark))
      continue;
    auto count = buffer.getArraySize().getDefiningOp<arith::ConstantIntOp>();
    if (cast<IntegerAttr>(count.getValue()).getInt() < size)
      count.setValueAttr(IntegerAttr::get(count.getType(), size));
    return buffer;
  }
  Location loc = function.getLoc();
  OpBuilder atEntry = OpBuilder::atBlockBegin(&entry);
  Value count = arith::ConstantIntOp::create(atEntry, loc, size, 64);
  auto buffer = LLVM::AllocaOp::create(
      atEntry, loc, LLVM::LLVMPointerType::get(builder.getContext()),
      builder.getI64Type(), count, alignof(int64_t));
  buffer->setAttr(kMark, UnitAttr::get(builder.getContext()));
  return buffer;
}

std::string PlanTableBuilder::addGlobal(StringRef name, ArrayRef<int64_t> shape,
                                        ArrayRef<int64_t> values) {
  OpBuilder builder(module.getContext());
  return addGlobal(builder, name, shape, values);
}

std::string PlanTableBuilder::addGlobal(OpBuilder &builder, StringRef name,
                                        ArrayRef<int64_t> shape,
                                        ArrayRef<int64_t> values) {
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(module.getBody());
  auto type = MemRefType::get(shape, builder.getI64Type());
  auto tensorType = RankedTensorType::get(shape, builder.getI64Type());
  auto global = memref::GlobalOp::create(
      builder, module.getLoc(), name, builder.getStringAttr("private"), type,
      DenseElementsAttr::get(tensorType, values), /*constant=*/true,
      /*alignment=*/IntegerAttr());
  symbols.getSymbolTable(module).insert(global);
  return global.getSymName().str();
}

std::optional<int32_t> polymesh::conversion::runtimeSumDtype(Type element) {
  if (element.isF32())
    return POLYMESH_RT_F32;
  if (element.isF64())
    return POLYMESH_RT_F64;
  if (element.isF16())
    return POLYMESH_RT_F16;
  if (element.isBF16())
    return POLYMESH_RT_BF16;
  if (element.isInteger(32))
    return POLYMESH_RT_I32;
  if (element.isInteger(64))
    return POLYMESH_RT_I64;
  if (element.isInteger(8))
    return POLYMESH_RT_I8;
  return std::nullopt;
}

std::optional<int32_t> polymesh::conversion::ncclSumDtype(Type element) {
  // Two's complement sums are the same for signed and unsigned integers.
  if (element.isF32())
    return nccl_abi::kFloat32;
  if (element.isF64())
    return nccl_abi::kFloat64;
  if (element.isF16())
    return nccl_abi::kFloat16;
  if (element.isBF16())
    return nccl_abi::kBfloat16;
  if (element.isInteger(32))
    return nccl_abi::kInt32;
  if (element.isInteger(64))
    return nccl_abi::kInt64;
  if (element.isInteger(8))
    return nccl_abi::kInt8;
  return std::nullopt;
}

namespace {
/// A plan's tables with every device's rows as a block, stored once per
/// distinct block: peers and ranks relative to the device, groups by their
/// shape (ids relative to the first member), so that the devices of a
/// regular mesh that do the same thing at the same offsets share one block
/// whatever their ids.
struct BlockTables {
  std::vector<int64_t> copies, comms, members, ranks;
  /// kRangeColumns per (segment, block), segment-major.
  std::vector<int64_t> ranges;
  /// Per position: its block. Per block: its staging bytes.
  std::vector<int64_t> blockOf, staging;
  int64_t maxGroupSize = 0;
  bool hasAccumulate = false, hasZero = false, hasResults = false;
};

/// One device's rows, row indices counted from the block's own start
/// (member rows are absolute: groups are shared by every block).
struct Block {
  std::vector<int64_t> copies, comms;
  std::vector<std::array<int64_t, kRangeColumns>> ranges; // per segment
  int64_t staging = 0;

  bool operator==(const Block &other) const {
    return copies == other.copies && comms == other.comms &&
           ranges == other.ranges && staging == other.staging;
  }
  struct Hash {
    size_t operator()(const Block &block) const {
      llvm::hash_code code = llvm::hash_combine(
          llvm::hash_combine_range(block.copies.begin(), block.copies.end()),
          llvm::hash_combine_range(block.comms.begin(), block.comms.end()),
          block.staging);
      for (const auto &range : block.ranges)
        code = llvm::hash_combine(
            code, llvm::hash_combine_range(range.begin(), range.end()));
      return code;
    }
  };
};

void appendCopies(std::vector<int64_t> &copies,
                  const std::vector<planner::CopyRow> &rows) {
  for (const planner::CopyRow &row : rows) {
    copies.insert(copies.end(),
                  {static_cast<int64_t>(row.kind),
                   static_cast<int64_t>(row.srcSpace), row.srcOffset,
                   static_cast<int64_t>(row.dstSpace), row.dstOffset,
                   row.runBytes});
    copies.insert(copies.end(), row.counts.begin(), row.counts.end());
    copies.insert(copies.end(), row.srcStrides.begin(), row.srcStrides.end());
    copies.insert(copies.end(), row.dstStrides.begin(), row.dstStrides.end());
  }
}

/// The index of member `id` in a sorted `group` (GroupTables::rank for any).
int64_t rankIn(llvm::ArrayRef<int64_t> group, int64_t id) {
  const int64_t *at = llvm::lower_bound(group, id);
  assert(at != group.end() && *at == id && "not a member of the group");
  return at - group.begin();
}

/// One digit of a rank read off a position (RankColumn).
struct RankDigit {
  int64_t stride, size, weight;
  bool operator<(const RankDigit &other) const {
    return std::tie(stride, size, weight) <
           std::tie(other.stride, other.size, other.weight);
  }
};

int64_t rankAt(llvm::ArrayRef<RankDigit> digits, int64_t position) {
  int64_t rank = 0;
  for (const RankDigit &digit : digits)
    rank += (position / digit.stride) % digit.size * digit.weight;
  return rank;
}

/// The digits of sorted `positions` as an iota pattern, minor first
/// (planner::mixedRadixDigits; positions {1, 3, 5, 7}: one digit of stride
/// 2, size 4). Each member's rank must also be what the digits read off
/// its position, which the caller checks.
std::optional<std::vector<RankDigit>>
iotaDigits(llvm::ArrayRef<int64_t> positions) {
  auto digits = planner::mixedRadixDigits(
      static_cast<int64_t>(positions.size()),
      [&](int64_t k) { return std::vector<int64_t>{positions[k]}; });
  if (!digits)
    return std::nullopt;
  std::vector<RankDigit> result;
  for (const planner::MixedRadixDigit &digit : *digits) {
    if (digit.delta.front() <= 0)
      return std::nullopt;
    result.push_back({digit.delta.front(), digit.count, digit.weight});
  }
  return result;
}

/// A flat table of rows stored once each: an equal row gets the first
/// one's place.
struct InternedRows {
  std::vector<int64_t> table;
  std::map<std::vector<int64_t>, int64_t> known;

  /// Where `row` starts in `table`.
  int64_t add(std::vector<int64_t> row) {
    auto [it, inserted] =
        known.try_emplace(std::move(row), static_cast<int64_t>(table.size()));
    if (inserted)
      table.insert(table.end(), it->first.begin(), it->first.end());
    return it->second;
  }
};

/// Every collective group of a schedule as the tables store it: its shape
/// (member ids relative to the first member) in `members` and, where its
/// members' positions follow an iota pattern that gives every device
/// running a member's rows (`runsRowsOf`: cell 0's rows for a shifted
/// cell) that member's rank, its rank digits in `ranks`. Each distinct
/// shape and pattern is stored once.
struct GroupTables {
  struct Group {
    /// Where its shape starts in `members`.
    int64_t shape = 0;
    /// Its rows [begin, end) of `ranks`, if its ranks are read off
    /// positions.
    std::optional<std::pair<int64_t, int64_t>> digits;
  };
  std::vector<int64_t> members, ranks;
  /// Per segment, per group.
  std::vector<std::vector<Group>> of;

  GroupTables(const planner::DeviceSchedule &schedule,
              const std::vector<int64_t> &runsRowsOf) {
    // Groups are in rank order, which is id order but for an all-to-all's
    // (DeviceSchedule's matchExchange).
    for (auto [s, segment] : llvm::enumerate(schedule.segments))
      for (auto [g, members] : llvm::enumerate(segment.groups))
        if (!llvm::is_sorted(members)) {
          llvm::DenseMap<int64_t, int64_t> &ranks = unsortedRanks[{s, g}];
          for (auto [r, member] : llvm::enumerate(members))
            ranks[member] = r;
        }
    std::vector<std::vector<std::optional<std::vector<RankDigit>>>> digitsOf =
        findDigits(schedule, runsRowsOf);
    InternedRows shapes, patterns;
    for (auto [s, segment] : llvm::enumerate(schedule.segments)) {
      std::vector<Group> &groups = of.emplace_back();
      for (auto [g, members] : llvm::enumerate(segment.groups)) {
        Group &group = groups.emplace_back();
        // Groups no kept device joins are dropped by the schedule.
        if (members.empty())
          continue;
        std::vector<int64_t> shape;
        shape.reserve(members.size());
        for (int64_t member : members)
          shape.push_back(member - members.front());
        group.shape = shapes.add(std::move(shape));
        if (const auto &digits = digitsOf[s][g]) {
          std::vector<int64_t> rows;
          for (const RankDigit &digit : *digits)
            rows.insert(rows.end(), {digit.stride, digit.size, digit.weight});
          int64_t begin = patterns.add(std::move(rows)) / kRankColumns;
          group.digits = {begin, begin + static_cast<int64_t>(digits->size())};
        }
      }
    }
    members = std::move(shapes.table);
    ranks = std::move(patterns.table);
  }

  /// The rank of member `id` in group g of segment s.
  int64_t rank(size_t s, size_t g, llvm::ArrayRef<int64_t> group,
               int64_t id) const {
    auto unsorted = unsortedRanks.find({s, g});
    if (unsorted == unsortedRanks.end())
      return rankIn(group, id);
    auto it = unsorted->second.find(id);
    assert(it != unsorted->second.end() && "not a member of the group");
    return it->second;
  }

private:
  std::map<std::pair<size_t, size_t>, llvm::DenseMap<int64_t, int64_t>>
      unsortedRanks;

  /// Per segment, per group: its rank digits, where they give every device
  /// that runs a member's rows that member's rank.
  std::vector<std::vector<std::optional<std::vector<RankDigit>>>>
  findDigits(const planner::DeviceSchedule &schedule,
             const std::vector<int64_t> &runsRowsOf) const {
    const std::vector<int64_t> &devices = schedule.devices;
    std::vector<std::vector<std::optional<std::vector<RankDigit>>>> digitsOf;
    for (const planner::Segment &segment : schedule.segments) {
      auto &digits = digitsOf.emplace_back();
      for (const std::vector<int64_t> &group : segment.groups) {
        std::vector<int64_t> positions;
        for (int64_t member : group)
          positions.push_back(llvm::lower_bound(devices, member) -
                              devices.begin());
        std::optional<std::vector<RankDigit>> found =
            positions.empty() ? std::nullopt : iotaDigits(positions);
        for (size_t r = 0; found && r < positions.size(); ++r)
          if (rankAt(*found, positions[r]) != static_cast<int64_t>(r))
            found.reset();
        digits.push_back(std::move(found));
      }
    }
    // A device running another position's rows needs that one's rank.
    for (size_t p = 0; p < runsRowsOf.size(); ++p) {
      int64_t q = runsRowsOf[p];
      if (q < 0 || q == static_cast<int64_t>(p))
        continue;
      for (auto [s, segment] : llvm::enumerate(schedule.segments)) {
        int64_t group = segment.perDevice[q].group;
        if (group < 0 || !digitsOf[s][group])
          continue;
        if (rankAt(*digitsOf[s][group], p) !=
            rank(s, group, segment.groups[group], devices[q]))
          digitsOf[s][group].reset();
      }
    }
    return digitsOf;
  }
};

/// Position p's block of `schedule` (see CommColumn for what is relative).
Block blockOf(const planner::DeviceSchedule &schedule, size_t p,
              int64_t copyColumns, const GroupTables &groups) {
  const std::vector<int64_t> &devices = schedule.devices;
  int64_t device = devices[p];
  Block block;
  block.staging = schedule.stagingBytes[p];
  for (auto [s, segment] : llvm::enumerate(schedule.segments)) {
    const planner::DeviceSegment &mine = segment.perDevice[p];
    bool sendRecv = segment.method == planner::SegmentMethod::SendRecv;
    std::array<int64_t, kRangeColumns> range{};
    llvm::ArrayRef<int64_t> group;
    if (mine.group >= 0) {
      group = segment.groups[mine.group];
      const GroupTables::Group &stored = groups.of[s][mine.group];
      range[kMembersBegin] = stored.shape;
      range[kMembersEnd] = range[kMembersBegin] + group.size();
      if (const auto &digits = stored.digits) {
        range[kRankBegin] = digits->first;
        range[kRankEnd] = digits->second;
      } else {
        range[kMembersRank] = groups.rank(s, mine.group, group, device);
      }
    }
    range[kBeforeBegin] = block.copies.size() / copyColumns;
    appendCopies(block.copies, mine.before);
    range[kBeforeEnd] = block.copies.size() / copyColumns;
    range[kCommBegin] = block.comms.size() / kCommColumns;
    int64_t packed = 0; // before rows some call needs first
    for (const planner::CommRow &row : mine.comm) {
      // Nothing of a collective's row depends on the caller (CommColumn).
      int64_t peer = 0, rank = 0;
      if (segment.method == planner::SegmentMethod::Broadcast) {
        rank = rankIn(group, row.peer);
      } else if (!isCollective(segment.method)) {
        peer = row.peer - device;
        rank = (llvm::lower_bound(devices, row.peer) - devices.begin()) -
               static_cast<int64_t>(p);
      }
      // The last two columns: the packs a send/recv waits for, or where a
      // collective's result goes.
      std::array<int64_t, 2> last = {-1, 0};
      if (sendRecv) {
        last[0] = packed;
        packed = std::max(packed, row.packsBefore);
        last[1] = packed;
      } else if (row.result) {
        last = {static_cast<int64_t>(row.result->space), row.result->offset};
      }
      block.comms.insert(block.comms.end(),
                         {static_cast<int64_t>(row.kind), peer,
                          row.stagingOffset, row.bytes, rank,
                          static_cast<int64_t>(row.space), last[0], last[1]});
    }
    range[kCommEnd] = block.comms.size() / kCommColumns;
    range[kPackedEnd] = range[kBeforeBegin] + packed;
    range[kAfterBegin] = block.copies.size() / copyColumns;
    appendCopies(block.copies, mine.after);
    range[kAfterEnd] = block.copies.size() / copyColumns;
    block.ranges.push_back(range);
  }
  return block;
}

/// A position -> block table as runs of equal blocks that repeat
/// (PlanTables::blockRun, blockPeriod): `run` is the gcd of the positions
/// where the block changes (every change falls on a run boundary), and
/// the runs' blocks are `blocks` repeated (its smallest period). A splat
/// is one run; a pod's batched plan, whose cells repeat cell 0's blocks,
/// is one cell's blocks; a table with no pattern is itself (run 1).
struct BlockRuns {
  int64_t run = 1;
  std::vector<int64_t> blocks;

  explicit BlockRuns(const std::vector<int64_t> &blockOf) {
    int64_t n = blockOf.size();
    run = n;
    for (int64_t p = 1; p < n; ++p)
      if (blockOf[p] != blockOf[p - 1])
        run = std::gcd(run, p);
    run = std::max<int64_t>(run, 1);
    std::vector<int64_t> runs;
    for (int64_t p = 0; p < n; p += run)
      runs.push_back(blockOf[p]);
    // The smallest period of `runs` (prefix function): runs[k] ==
    // runs[k % period] for every k.
    std::vector<int64_t> border(runs.size(), 0);
    for (size_t k = 1; k < runs.size(); ++k) {
      int64_t b = border[k - 1];
      while (b > 0 && runs[k] != runs[b])
        b = border[b - 1];
      border[k] = b + (runs[k] == runs[b]);
    }
    size_t period = runs.empty() ? 0 : runs.size() - border.back();
    blocks.assign(runs.begin(), runs.begin() + period);
  }
};

/// `rowsOf[p]`: the position whose rows position p runs (itself, or its
/// counterpart in cell 0 of a batched plan), or -1 for another process's
/// device, which gets no rows and whose entry no code reads.
BlockTables buildBlockTables(const planner::DeviceSchedule &schedule,
                             const std::vector<int64_t> &rowsOf) {
  int64_t copyColumns = kFixedCopyColumns + 3 * schedule.outerDims;
  BlockTables tables;
  GroupTables groups(schedule, rowsOf);
  tables.members = std::move(groups.members);
  tables.ranks = std::move(groups.ranks);
  for (const planner::Segment &segment : schedule.segments)
    for (const std::vector<int64_t> &group : segment.groups)
      tables.maxGroupSize =
          std::max(tables.maxGroupSize, static_cast<int64_t>(group.size()));
  // Distinct blocks, numbered in order of first use; `unique` points at
  // the map's keys, which stay put.
  std::unordered_map<Block, int64_t, Block::Hash> numberOf;
  std::vector<const Block *> unique;
  llvm::DenseMap<int64_t, int64_t> numberOfRows;
  for (int64_t rows : rowsOf) {
    if (rows < 0) {
      tables.blockOf.push_back(-1);
      continue;
    }
    auto [known, fresh] = numberOfRows.try_emplace(rows, 0);
    if (fresh) {
      auto [it, inserted] =
          numberOf.try_emplace(blockOf(schedule, rows, copyColumns, groups),
                               static_cast<int64_t>(unique.size()));
      if (inserted)
        unique.push_back(&it->first);
      known->second = it->second;
    }
    tables.blockOf.push_back(known->second);
  }
  // Segment-major ranges over the blocks, row indices made absolute.
  std::vector<int64_t> copyBase, commBase;
  for (const Block *block : unique) {
    copyBase.push_back(tables.copies.size() / copyColumns);
    commBase.push_back(tables.comms.size() / kCommColumns);
    tables.copies.insert(tables.copies.end(), block->copies.begin(),
                         block->copies.end());
    tables.comms.insert(tables.comms.end(), block->comms.begin(),
                        block->comms.end());
    tables.staging.push_back(block->staging);
  }
  for (size_t s = 0; s < schedule.segments.size(); ++s)
    for (size_t b = 0; b < unique.size(); ++b) {
      std::array<int64_t, kRangeColumns> range = unique[b]->ranges[s];
      for (int column :
           {kBeforeBegin, kBeforeEnd, kPackedEnd, kAfterBegin, kAfterEnd})
        range[column] += copyBase[b];
      range[kCommBegin] += commBase[b];
      range[kCommEnd] += commBase[b];
      tables.ranges.insert(tables.ranges.end(), range.begin(), range.end());
    }
  for (size_t c = 0; c < tables.comms.size(); c += kCommColumns) {
    auto kind = static_cast<planner::CommKind>(tables.comms[c + kCommKind]);
    tables.hasResults |= kind != planner::CommKind::Send &&
                         kind != planner::CommKind::Recv &&
                         tables.comms[c + kResultSpace] >= 0;
  }
  for (size_t c = 0; c < tables.copies.size(); c += copyColumns) {
    tables.hasAccumulate |= tables.copies[c + kKind] ==
                            static_cast<int64_t>(planner::CopyKind::Accumulate);
    tables.hasZero |= tables.copies[c + kKind] ==
                      static_cast<int64_t>(planner::CopyKind::Zero);
  }
  return tables;
}
} // namespace

namespace {
/// For a batched plan whose cells differ from cell 0 by one shift of device
/// ids and one shift of positions in `devices` each: for every device of a
/// cell, the position of its counterpart in cell 0, whose relative rows
/// (peers, ranks and members as differences, offsets within tiles) are its
/// own. Empty when some cell is not such a shift (arbitrary ids): then
/// every device is scheduled from the whole plan.
llvm::DenseMap<int64_t, int64_t>
cellZeroCounterparts(const planner::ReshardBatch &batch,
                     const planner::TensorLayout &source,
                     const planner::TensorLayout &destination,
                     const std::vector<int64_t> &devices) {
  std::vector<std::vector<int64_t>> table =
      planner::cellDeviceTable(batch, source, destination);
  auto positionOf = [&](int64_t id) {
    return llvm::lower_bound(devices, id) - devices.begin();
  };
  const std::vector<int64_t> &cellZero = table.front();
  llvm::DenseMap<int64_t, int64_t> counterpart;
  for (const std::vector<int64_t> &cell : table) {
    int64_t idShift = cell.front() - cellZero.front();
    int64_t positionShift =
        positionOf(cell.front()) - positionOf(cellZero.front());
    for (size_t i = 0; i < cell.size(); ++i) {
      if (cell[i] - cellZero[i] != idShift ||
          positionOf(cell[i]) - positionOf(cellZero[i]) != positionShift)
        return llvm::DenseMap<int64_t, int64_t>();
      counterpart[cell[i]] = positionOf(cellZero[i]);
    }
  }
  return counterpart;
}
} // namespace

FailureOr<planner::DeviceSchedule> PlanTableBuilder::scheduleTransfer(
    ExchangeOp op, TransferOp transfer, const planner::TensorLayout &source,
    const planner::TensorLayout &destination,
    const std::vector<int64_t> &devices, std::vector<int64_t> &rowsOf) {
  // Collective sums need an element type both backends add (i1, i16 and
  // the rest keep send/recv with generated additions).
  auto type = transfer.getResult().getType();
  planner::ScheduleOptions options = scheduling;
  options.reductions = runtimeSumDtype(type.getElementType()).has_value() &&
                       ncclSumDtype(type.getElementType()).has_value();
  auto schedule = [&](const planner::TransferPlan &plan,
                      const planner::TensorLayout &from,
                      const planner::TensorLayout &to)
      -> FailureOr<planner::DeviceSchedule> {
    options.keepRows.assign(devices.size(), false);
    for (int64_t rows : rowsOf)
      if (rows >= 0)
        options.keepRows[rows] = true;
    absl::StatusOr<planner::DeviceSchedule> scheduled =
        planner::scheduleForDevices(plan, from, to, devices, options);
    if (!scheduled.ok())
      return op.emitError()
             << "cannot schedule plan " << op.getPlanAttr() << ": "
             << std::string(scheduled.status().message());
    return std::move(*scheduled);
  };
  // A batched plan whose cells are shifts of cell 0 is scheduled for cell 0
  // alone: every other device runs its counterpart's rows.
  if (ArrayAttr axes = transfer.getBatchAttr()) {
    absl::StatusOr<planner::ReshardBatch> batch = planner::makeReshardBatch(
        source, destination, toPlannerBatchAxes(axes));
    if (!batch.ok())
      return transfer.emitError()
             << "cannot be lowered: " << std::string(batch.status().message());
    llvm::DenseMap<int64_t, int64_t> counterpart =
        cellZeroCounterparts(*batch, source, destination, devices);
    if (!counterpart.empty()) {
      for (int64_t &rows : rowsOf)
        if (rows >= 0)
          if (auto it = counterpart.find(devices[rows]);
              it != counterpart.end())
            rows = it->second;
      return schedule(toPlannerStepsPlan(transfer, batch->cellSource,
                                         batch->cellDestination),
                      batch->cellSource, batch->cellDestination);
    }
  }
  absl::StatusOr<planner::TransferPlan> plan =
      toPlannerPlan(transfer, source, destination);
  if (!plan.ok())
    return transfer.emitError()
           << "cannot be lowered: " << std::string(plan.status().message());
  return schedule(*plan, source, destination);
}

FailureOr<PlanTables *> PlanTableBuilder::tablesFor(ExchangeOp op) {
  std::string planName = op.getPlan().str();
  if (auto it = plans.find(planName); it != plans.end())
    return &it->second;
  TransferOp transfer = lookupExchangePlan(symbols, op);
  if (!transfer)
    return op.emitError() << "plan " << op.getPlanAttr()
                          << " is not a planned transfer";
  auto function = op->getParentOfType<func::FuncOp>();
  if (!function || !function->hasAttr(PolymeshDialect::kPartitionOfAttrName))
    return op.emitError() << "is not inside a function made by "
                             "--polymesh-partition";
  if (auto meshes =
          function->getAttrOfType<ArrayAttr>(PolymeshDialect::kMeshesAttrName))
    for (auto name : meshes.getAsRange<FlatSymbolRefAttr>())
      if (!lookupMesh(symbols, function, name))
        return function.emitError() << "'" << PolymeshDialect::kMeshesAttrName
                                    << "' names unknown mesh " << name;
  const std::vector<int64_t> &devices = devicesOf(op);

  auto type = transfer.getResult().getType();
  auto emit = [&]() { return transfer.emitError(); };
  MeshAttr sourceMesh =
      lookupMesh(symbols, transfer, transfer.getSource().getMeshName());
  MeshAttr destinationMesh =
      lookupMesh(symbols, transfer, transfer.getDestination().getMeshName());
  if (!sourceMesh || !destinationMesh)
    return transfer.emitError() << "refers to an unknown mesh";
  FailureOr<planner::TensorLayout> source =
      toTensorLayout(emit, transfer.getSource(), sourceMesh, type);
  FailureOr<planner::TensorLayout> destination =
      toTensorLayout(emit, transfer.getDestination(), destinationMesh, type);
  if (failed(source) || failed(destination))
    return failure();
  // Rows for the devices that run this module's classes only: the others
  // belong to other processes' modules.
  const std::vector<int64_t> &run =
      runners[function
                  ->getAttrOfType<StringAttr>(
                      PolymeshDialect::kPartitionOfAttrName)
                  .getValue()];
  std::vector<int64_t> rowsOf(devices.size(), -1);
  for (int64_t id : run) {
    auto it = llvm::lower_bound(devices, id);
    if (it == devices.end() || *it != id)
      return function.emitError()
             << "runs device " << id
             << ", which is not a device of its function's meshes";
    rowsOf[it - devices.begin()] = it - devices.begin();
  }
  FailureOr<planner::DeviceSchedule> schedule =
      scheduleTransfer(op, transfer, *source, *destination, devices, rowsOf);
  if (failed(schedule))
    return failure();

  PlanTables &tables = plans[planName];
  BlockTables built = buildBlockTables(*schedule, rowsOf);
  ScheduleShape &shape = tables.schedule;
  for (const planner::Segment &segment : schedule->segments)
    shape.segments.push_back(segment.method);
  shape.numDevices = schedule->devices.size();
  shape.elementBytes = schedule->elementBytes;
  shape.outerDims = schedule->outerDims;
  shape.writesSource = schedule->writesSource;
  shape.accumulatesIntoDestination = schedule->accumulatesIntoDestination;
  tables.hasAccumulate = built.hasAccumulate;
  tables.hasZero = built.hasZero;
  tables.hasResults = built.hasResults;
  tables.numBlocks = built.staging.size();
  tables.maxGroupSize = built.maxGroupSize;
  int64_t numBlocks = tables.numBlocks;
  int64_t copyColumns = kFixedCopyColumns + 3 * shape.outerDims;
  std::string prefix = "__polymesh_" + planName;
  int64_t numCopyRows = built.copies.size() / copyColumns;
  int64_t numCommRows = built.comms.size() / kCommColumns;
  if (numCopyRows)
    tables.copies =
        addGlobal(prefix + "_copies", {numCopyRows, copyColumns}, built.copies);
  if (numCommRows)
    tables.comms =
        addGlobal(prefix + "_comms", {numCommRows, kCommColumns}, built.comms);
  tables.ranges = addGlobal(
      prefix + "_ranges",
      {static_cast<int64_t>(shape.segments.size()) * numBlocks, kRangeColumns},
      built.ranges);
  BlockRuns runs(built.blockOf);
  tables.blockRun = runs.run;
  tables.blockPeriod = runs.blocks.size();
  tables.blocks =
      addGlobal(prefix + "_blocks", {tables.blockPeriod}, runs.blocks);
  tables.staging = addGlobal(prefix + "_staging", {numBlocks}, built.staging);
  if (!built.members.empty())
    tables.members =
        addGlobal(prefix + "_members",
                  {static_cast<int64_t>(built.members.size())}, built.members);
  if (!built.ranks.empty())
    tables.ranks = addGlobal(
        prefix + "_ranks",
        {static_cast<int64_t>(built.ranks.size()) / kRankColumns, kRankColumns},
        built.ranks);
  return &tables;
}

/// Emits code with a builder positioned inside one exchange's lowering.
LogicalResult
polymesh::conversion::finishPartitionedModule(ModuleOp module, StringRef target,
                                              bool readOnlyArguments) {
  // Plans, meshes and sharding attributes have served their purpose; what
  // remains is ordinary host code.
  SmallVector<Operation *> erase;
  for (Operation &op : *module.getBody()) {
    if (isa<MeshOp>(op))
      erase.push_back(&op);
    if (auto function = dyn_cast<func::FuncOp>(op)) {
      if (function->hasAttr(PolymeshDialect::kPlanAttrName)) {
        erase.push_back(function);
        continue;
      }
      if (readOnlyArguments &&
          function->hasAttr(PolymeshDialect::kPartitionOfAttrName)) {
        // Inputs are the caller's tiles: bufferization must not write them.
        for (unsigned i = 0, e = function.getNumArguments(); i < e; ++i)
          if (isa<TensorType>(function.getArgument(i).getType()))
            function.setArgAttr(i, "bufferization.writable",
                                BoolAttr::get(module.getContext(), false));
      }
    }
  }
  for (Operation *op : erase)
    op->erase();
  WalkResult leftover = module.walk([&](Operation *op) {
    if (isa_and_nonnull<PolymeshDialect>(op->getDialect())) {
      op->emitError() << "cannot be lowered to " << target
                      << "; run --polymesh-partition first";
      return WalkResult::interrupt();
    }
    SmallVector<StringAttr> names;
    for (NamedAttribute attr : op->getDiscardableAttrs())
      if (attr.getName().getValue().starts_with("polymesh."))
        names.push_back(attr.getName());
    for (StringAttr name : names)
      op->removeDiscardableAttr(name);
    if (auto function = dyn_cast<FunctionOpInterface>(op)) {
      for (unsigned i = 0, e = function.getNumResults(); i < e; ++i)
        function.removeResultAttr(
            i,
            StringAttr::get(op->getContext(), PolymeshDialect::kLeafAttrName));
      for (unsigned i = 0, e = function.getNumArguments(); i < e; ++i)
        function.removeArgAttr(
            i, StringAttr::get(op->getContext(),
                               PolymeshDialect::kShardingAttrName));
    }
    return WalkResult::advance();
  });
  return failure(leftover.wasInterrupted());
}

Value ScheduleEmitter::table(const std::string &name) {
  auto global = module.lookupSymbol<memref::GlobalOp>(name);
  return memref::GetGlobalOp::create(b, loc, global.getType(), name);
}

Value ScheduleEmitter::baseOf(Value space) {
  Value isSource =
      e.eq(space, static_cast<int64_t>(planner::BufferSpace::Source));
  Value isResult =
      e.eq(space, static_cast<int64_t>(planner::BufferSpace::Destination));
  Value other =
      arith::SelectOp::create(b, loc, isResult, resultAddress, stagingAddress);
  return arith::SelectOp::create(b, loc, isSource, sourceAddress, other)
      .getResult();
}

void ScheduleEmitter::loadTables(Value position) {
  // Every table but `blocks` is indexed by the device's block.
  this->position = position;
  // blocks[(position / blockRun) % blockPeriod] (BlockRuns).
  Value at = position;
  if (tables.blockPeriod == 1) {
    at = e.index(0);
  } else {
    if (tables.blockRun > 1)
      at = arith::DivUIOp::create(b, loc, at, e.index(tables.blockRun));
    if (tables.blockRun * tables.blockPeriod < schedule.numDevices)
      at = arith::RemUIOp::create(b, loc, at, e.index(tables.blockPeriod));
  }
  block = e.toIndex(e.load(table(tables.blocks), {at}));
  if (!tables.ranks.empty())
    ranks = table(tables.ranks);
  if (!tables.copies.empty())
    copies = table(tables.copies);
  if (!tables.comms.empty())
    comms = table(tables.comms);
  ranges = table(tables.ranges);
  // Every collective group of every block, relative to the device; a
  // segment's range row says where the device's own group is, and the
  // group is written out as device ids before each collective call.
  if (!tables.members.empty())
    members = table(tables.members);
}

Value ScheduleEmitter::callerRank(Value rangeRow) {
  Value constant = e.load(ranges, {rangeRow, e.index(kMembersRank)});
  if (!ranks)
    return constant;
  Value at = e.toI64(position);
  auto digits = scf::ForOp::create(
      b, loc, rangeColumn(rangeRow, kRankBegin),
      rangeColumn(rangeRow, kRankEnd), e.index(1), ValueRange{constant},
      [&](OpBuilder &nested, Location loc, Value row, ValueRange rank) {
        Emitter in(nested, loc);
        auto column = [&](int64_t c) {
          return in.load(ranks, {row, in.index(c)});
        };
        Value digit = arith::RemSIOp::create(
            nested, loc,
            arith::DivSIOp::create(nested, loc, at, column(kDigitStride)),
            column(kDigitSize));
        Value sum = in.add(rank.front(), in.mul(digit, column(kDigitWeight)));
        scf::YieldOp::create(nested, loc, sum);
      });
  return digits.getResult(0);
}

ScheduleEmitter::CallerGroup ScheduleEmitter::callerGroup(Value rangeRow,
                                                          Value device) {
  CallerGroup group;
  group.rank = callerRank(rangeRow);
  std::tie(group.ids, group.count) =
      e.group(ranges, rangeRow, members, device, group.rank, groupBuffer);
  return group;
}

ScheduleEmitter::CollectiveRow
ScheduleEmitter::collectiveRow(planner::SegmentMethod method, Value row,
                               Value rank) {
  CollectiveRow fields;
  Value at = commAddress(row);
  fields.bytes = commColumn(row, kBytes);
  fields.count = arith::DivSIOp::create(b, loc, fields.bytes,
                                        e.i64(schedule.elementBytes));
  Value own = e.add(at, e.mul(rank, fields.bytes));
  // In place: one buffer, the caller's chunk in it.
  fields.send = method == planner::SegmentMethod::AllGather ? own : at;
  fields.recv = method == planner::SegmentMethod::ReduceScatter ? own : at;
  if (!tables.hasResults)
    return fields;
  Value space = commColumn(row, kResultSpace);
  Value inPlace = e.eq(space, -1);
  Value result = e.add(baseOf(space), commColumn(row, kResultOffset));
  auto select = [&](Value inPlaceValue, Value outOfPlaceValue) {
    return arith::SelectOp::create(b, loc, inPlace, inPlaceValue,
                                   outOfPlaceValue)
        .getResult();
  };
  if (method == planner::SegmentMethod::AllGather)
    fields.send = select(own, at);
  fields.recv = select(fields.recv, result);
  return fields;
}

void ScheduleEmitter::emitSegments() {
  for (auto [index, method] : llvm::enumerate(schedule.segments)) {
    Value rangeRow =
        arith::AddIOp::create(b, loc, e.index(index * tables.numBlocks), block);
    bool sendRecv = method == planner::SegmentMethod::SendRecv;
    if (!(sendRecv && comms && packsWithCalls()))
      runRangeCopies(rangeRow, kBeforeBegin, kBeforeEnd);
    if (comms && sendRecv)
      emitSendRecv(rangeRow);
    // Without members no device of this module joins a collective of the
    // plan (a process's module whose devices sit out every group).
    else if (comms && members && isCollective(method))
      emitCollective(method, rangeRow);
    runRangeCopies(rangeRow, kAfterBegin, kAfterEnd);
  }
}

void ScheduleEmitter::byCopyKind(Value kind, llvm::function_ref<void()> copy,
                                 llvm::function_ref<void()> zero,
                                 llvm::function_ref<void()> accumulate) {
  constexpr auto kCopy = static_cast<int64_t>(planner::CopyKind::Copy);
  constexpr auto kZero = static_cast<int64_t>(planner::CopyKind::Zero);
  if (!tables.hasAccumulate && !tables.hasZero)
    return copy();
  e.ifThenElse(e.eq(kind, kCopy), copy, [&]() {
    if (!tables.hasAccumulate)
      return zero();
    if (!tables.hasZero)
      return accumulate();
    e.ifThenElse(e.eq(kind, kZero), zero, accumulate);
  });
}

Value polymesh::conversion::addElements(OpBuilder &builder, Location loc,
                                        Type element, Value a, Value c) {
  if (auto floatType = dyn_cast<FloatType>(element)) {
    if (floatType.getWidth() >= 32)
      return arith::AddFOp::create(builder, loc, a, c);
    Type f32 = builder.getF32Type();
    Value wide = arith::AddFOp::create(
        builder, loc, arith::ExtFOp::create(builder, loc, f32, a),
        arith::ExtFOp::create(builder, loc, f32, c));
    return arith::TruncFOp::create(builder, loc, element, wide);
  }
  if (element.isInteger(1))
    return arith::OrIOp::create(builder, loc, a, c);
  return arith::AddIOp::create(builder, loc, a, c);
}
