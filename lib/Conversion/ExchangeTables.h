//===- ExchangeTables.h - Plan tables shared by the lowerings ---*- C++ -*-===//
//
// Part of Polymesh. Internal to lib/Conversion.
//
//===----------------------------------------------------------------------===//
//
// Both lowerings of polymesh.exchange (CPU and CUDA) run the same per-device
// schedule (planner::scheduleForDevices) from the same tables: memref.global
// constants of copy rows, communication rows, per (segment, block) row
// ranges, staging sizes and collective groups, built once per plan
// (PlanTableBuilder). Both emit it through one ScheduleEmitter, which walks
// the segments; the targets say what a copy row and each call become.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_CONVERSION_EXCHANGETABLES_H
#define POLYMESH_LIB_CONVERSION_EXCHANGETABLES_H

#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Planner/DeviceSchedule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace polymesh::conversion {

// Internal to lib/Conversion, whose files all use MLIR's names unqualified.
using namespace mlir;

enum CopyColumn : int64_t {
  kKind,
  kSrcSpace,
  kSrcOffset,
  kDstSpace,
  kDstOffset,
  kRunBytes,
  kFixedCopyColumns
};
/// Columns of a segment's row ranges per device.
enum RangeColumn : int64_t {
  kBeforeBegin,
  kBeforeEnd,
  kCommBegin,
  kCommEnd,
  kAfterBegin,
  kAfterEnd,
  /// SendRecv segments: the end of the `before` rows that some call needs
  /// first (kPacksBegin/kPacksEnd); the rows from here to kBeforeEnd may
  /// run after the calls are posted.
  kPackedEnd,
  /// Collective segments: the device's group as rows [begin, end) of the
  /// plan's members table, each member id minus the group's first (empty
  /// when the device joins none), and the device's index in it: member i
  /// is device - members[begin + rank] + members[begin + i]. Groups of one
  /// shape share their rows, so a group of n members costs n numbers, not
  /// n per member.
  kMembersBegin,
  kMembersEnd,
  /// The rank is kMembersRank plus, over the rows [kRankBegin, kRankEnd)
  /// of the plan's ranks table (RankColumn), a digit of the device's
  /// position each: XLA's iota groups. Where a group's positions follow
  /// such a pattern (the groups along mesh axes of a mesh with iota ids)
  /// its members' ranges rows are the same and they share one block;
  /// elsewhere (arbitrary ids) the rank is the constant alone.
  kMembersRank,
  kRankBegin,
  kRankEnd,
  kRangeColumns
};
/// Columns of the ranks table: a rank digit is
/// ((position / kDigitStride) % kDigitSize) * kDigitWeight.
enum RankColumn : int64_t {
  kDigitStride,
  kDigitSize,
  kDigitWeight,
  kRankColumns
};
/// Columns of a communication row, relative to the calling device so that
/// devices doing the same thing share rows: the peer of a send/recv as a
/// device id minus the caller's and as the peer's position in the
/// program's devices minus the caller's (for runtimes that address
/// ranks); a broadcast's root as its index in the group. Other collectives
/// name neither (their peer is the caller, whose rank the range row
/// gives).
enum CommColumn : int64_t {
  kCommKind,
  kPeer,
  kStagingOffset,
  kBytes,
  kPeerRank,
  /// Where the bytes are (planner::BufferSpace): staging, or the source or
  /// destination tile for boxes sent or received in place.
  kSpace,
  /// SendRecv segments: the copy rows to run right before this call
  /// (CommRow::packsBefore, counted from the segment's kBeforeBegin), so
  /// that each box leaves as soon as it is packed.
  kPacksBegin,
  kPacksEnd,
  kCommColumns,
  /// Collective segments, whose calls wait for no pack (the same columns):
  /// where the result goes out of place (planner::CommRow::result), as a
  /// space and an offset; space -1: in place.
  kResultSpace = kPacksBegin,
  kResultOffset = kPacksEnd,
};

/// The POLYMESH_RT_* dtype of an element type that both the runtime and
/// NCCL can sum (f32, f64, f16, bf16, i32, i64, i8), or nullopt: sums of
/// other types stay send/recv plus generated additions.
std::optional<int32_t> runtimeSumDtype(mlir::Type element);
/// NCCL's ncclDataType_t for the same types.
std::optional<int32_t> ncclSumDtype(mlir::Type element);

using planner::isCollective;

/// What an exchange's code needs of its schedule once the per-device rows
/// are in the tables: the segments' methods and the schedule's scalars.
struct ScheduleShape {
  std::vector<planner::SegmentMethod> segments;
  int64_t numDevices = 0;
  int64_t elementBytes = 0;
  int outerDims = 0;
  bool writesSource = false;
  bool accumulatesIntoDestination = false;
};

/// The globals holding one plan's schedule.
struct PlanTables {
  ScheduleShape schedule;
  /// Tables over distinct blocks (a device's rows, relative to the device):
  /// `blocks` maps positions to blocks (-1: a device another process
  /// runs), compressed (BlockRuns); `ranges` is per (segment, block),
  /// `staging` per block; `members` holds every distinct group shape, as
  /// member id - the group's first id (empty when the plan has none).
  std::string copies, ranges, comms, staging, members, blocks;
  /// Rank digits (RankColumn; empty when every rank is a constant).
  std::string ranks;
  /// The device at position p runs block
  /// blocks[(p / blockRun) % blockPeriod]: positions come in runs of
  /// blockRun that run one block, and the runs' blocks repeat every
  /// blockPeriod runs (BlockRuns). A regular mesh's table is then as
  /// large as one cell's blocks, not as the device count.
  int64_t blockRun = 1, blockPeriod = 1;
  int64_t numBlocks = 0;
  /// The largest collective group (members materialized per call).
  int64_t maxGroupSize = 0;
  bool hasAccumulate = false;
  bool hasZero = false;
  /// Some collective writes out of place.
  bool hasResults = false;
};

/// Builds (once per plan) and finds the tables of exchanges in `module`.
class PlanTableBuilder {
public:
  /// Collects every partitioned function's devices and the devices that
  /// run its classes in this module.
  /// Schedules start from `scheduling` (blockingRounds for the MPI
  /// lowering, directCollectives as the pass asks); the builder sets what
  /// depends on the plan (reductions, keepRows).
  explicit PlanTableBuilder(mlir::ModuleOp module,
                            planner::ScheduleOptions scheduling = {});
  /// The tables of `op`'s plan, with rows for the devices that run this
  /// module's classes of its function (`blocks` is -1 for the others).
  mlir::FailureOr<PlanTables *> tablesFor(ExchangeOp op);
  /// The sorted devices of the global function `op` belongs to: those of
  /// its meshes (`polymesh.meshes`), else of its classes.
  const std::vector<int64_t> &devicesOf(mlir::Operation *op);
  /// The schedule of `op`'s plan `transfer` over `devices`, with rows for
  /// the positions `rowsOf` names (updated to the position whose rows each
  /// one runs).
  mlir::FailureOr<planner::DeviceSchedule> scheduleTransfer(
      ExchangeOp op, TransferOp transfer, const planner::TensorLayout &source,
      const planner::TensorLayout &destination,
      const std::vector<int64_t> &devices, std::vector<int64_t> &rowsOf);
  /// A private constant memref.global of i64; returns its name.
  std::string addGlobal(llvm::StringRef name, llvm::ArrayRef<int64_t> shape,
                        llvm::ArrayRef<int64_t> values);
  /// The same, created through `builder` (a conversion pattern's
  /// rewriter).
  std::string addGlobal(mlir::OpBuilder &builder, llvm::StringRef name,
                        llvm::ArrayRef<int64_t> shape,
                        llvm::ArrayRef<int64_t> values);
  mlir::MemRefType globalType(const std::string &name);
  /// An i64 array of at least `size` entries on the stack of the function
  /// `builder` inserts into, for the device ids of a collective's group. One
  /// per function, in its entry block (once, even where exchanges sit in
  /// loops), grown to the largest group any of its exchanges asks for:
  /// the calls use it one at a time.
  mlir::Value groupBuffer(mlir::OpBuilder &builder, int64_t size);

private:
  mlir::ModuleOp module;
  planner::ScheduleOptions scheduling;
  mlir::SymbolTableCollection symbols;
  std::map<std::string, PlanTables> plans;
  llvm::StringMap<std::vector<int64_t>> devices;
  /// Per global function: the sorted devices its classes here run on.
  llvm::StringMap<std::vector<int64_t>> runners;
};

/// Erases plan functions and meshes, drops polymesh attributes, and fails
/// with a diagnostic naming `target` ("the CPU", "CUDA") on any polymesh op
/// left. With `readOnlyArguments`, the tensor arguments of partitioned
/// functions are marked not writable for bufferization.
mlir::LogicalResult finishPartitionedModule(mlir::ModuleOp module,
                                            llvm::StringRef target,
                                            bool readOnlyArguments);

/// a + c in `element`, as partial sums add on every backend: f16 and bf16
/// through f32, rounded per addition; i1 as or.
mlir::Value addElements(mlir::OpBuilder &builder, mlir::Location loc,
                        mlir::Type element, mlir::Value a, mlir::Value c);

/// Emits code with a builder positioned inside one exchange's lowering.
class Emitter {
public:
  Emitter(OpBuilder &builder, Location loc) : b(builder), loc(loc) {}

  Value i64(int64_t value) {
    return arith::ConstantIntOp::create(b, loc, value, 64);
  }
  Value index(int64_t value) {
    return arith::ConstantIndexOp::create(b, loc, value);
  }
  Value toIndex(Value value) {
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), value);
  }
  Value toI64(Value value) {
    return arith::IndexCastOp::create(b, loc, b.getI64Type(), value);
  }
  Value address(Value memref) {
    Value pointer =
        memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
    return toI64(pointer);
  }
  Value pointer(Value address) {
    return LLVM::IntToPtrOp::create(
        b, loc, LLVM::LLVMPointerType::get(b.getContext()), address);
  }
  Value global(StringRef name, ArrayRef<int64_t> shape) {
    auto type = MemRefType::get(shape, b.getI64Type());
    return memref::GetGlobalOp::create(b, loc, type, name);
  }
  Value load(Value table, ValueRange indices) {
    return memref::LoadOp::create(b, loc, table, indices);
  }
  Value add(Value a, Value c) { return arith::AddIOp::create(b, loc, a, c); }
  Value mul(Value a, Value c) { return arith::MulIOp::create(b, loc, a, c); }
  Value eq(Value a, int64_t value) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, a,
                                 i64(value));
  }
  /// The address of i64 entry `i` of `buffer` (an !llvm.ptr).
  Value slot(Value buffer, Value i) {
    return LLVM::GEPOp::create(b, loc,
                               LLVM::LLVMPointerType::get(b.getContext()),
                               b.getI64Type(), buffer, ValueRange{i});
  }
  void call(LLVM::LLVMFuncOp function, ValueRange args) {
    LLVM::CallOp::create(b, loc, function, args);
  }
  /// Runs `body` with the builder inside a loop over [lower, upper).
  void loop(Value lower, Value upper,
            llvm::function_ref<void(mlir::Value)> body) {
    auto forOp = scf::ForOp::create(b, loc, lower, upper, index(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(forOp.getBody()->getTerminator());
    body(forOp.getInductionVar());
  }
  void ifThenElse(Value condition, llvm::function_ref<void()> thenBody,
                  llvm::function_ref<void()> elseBody = nullptr) {
    auto ifOp =
        scf::IfOp::create(b, loc, condition,
                          /*withElseRegion=*/static_cast<bool>(elseBody));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    thenBody();
    if (elseBody) {
      b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
      elseBody();
    }
  }

  /// The caller's group in a collective segment, from the range row
  /// `rangeRow`, the relative `members` table and the caller's `rank`: its
  /// absolute ids written to `buffer`, returned with their count.
  std::pair<Value, Value> group(Value ranges, Value rangeRow, Value members,
                                Value device, Value rank, Value buffer) {
    Value begin = load(ranges, {rangeRow, index(kMembersBegin)});
    Value end = load(ranges, {rangeRow, index(kMembersEnd)});
    Value first = arith::SubIOp::create(
        b, loc, device, load(members, {toIndex(add(begin, rank))}));
    loop(toIndex(begin), toIndex(end), [&](Value i) {
      Value at = slot(buffer, arith::SubIOp::create(b, loc, toI64(i), begin));
      LLVM::StoreOp::create(b, loc, add(first, load(members, {i})), at);
    });
    return {buffer, arith::SubIOp::create(b, loc, end, begin)};
  }

  OpBuilder &b;
  Location loc;
};

/// Emits one exchange's code from its plan's tables: the calling device's
/// block, then every segment in order (its before copies, its calls, its
/// after copies). What a copy row and each kind of call become is the
/// target's (CPU: loops and loopback runtime calls; CUDA: kernels and NCCL).
class ScheduleEmitter {
public:
  ScheduleEmitter(OpBuilder &builder, Location loc, ModuleOp module,
                  const PlanTables &tables)
      : b(builder), e(builder, loc), loc(loc), module(module), tables(tables),
        schedule(tables.schedule) {}
  virtual ~ScheduleEmitter() = default;

protected:
  /// Loads the device's block (at `position`) and the tables' globals.
  void loadTables(Value position);
  /// Every segment of the schedule, in order.
  void emitSegments();

  /// Runs the copy rows [begin, end).
  virtual void runCopies(Value begin, Value end) = 0;
  /// A send/recv segment's calls; with packsWithCalls(), also its before
  /// copies.
  virtual void emitSendRecv(Value rangeRow) = 0;
  /// A broadcast's or another collective's calls over the caller's group.
  virtual void emitCollective(planner::SegmentMethod method,
                              Value rangeRow) = 0;
  /// Whether send/recv segments run their before copies with their calls
  /// (packing each box right before its send).
  virtual bool packsWithCalls() const { return false; }

  /// A memref.global table by name, with its static type.
  Value table(const std::string &name);
  /// The address a row's space (planner::BufferSpace) starts at.
  Value baseOf(Value space);
  Value rangeColumn(Value rangeRow, int64_t column) {
    return e.toIndex(e.load(ranges, {rangeRow, e.index(column)}));
  }
  /// The copy rows [begin, end) named by two columns of a range row.
  void runRangeCopies(Value rangeRow, int64_t beginColumn, int64_t endColumn) {
    Value begin = rangeColumn(rangeRow, beginColumn);
    Value end = rangeColumn(rangeRow, endColumn);
    runCopies(begin, end);
  }
  Value commColumn(Value row, int64_t column) {
    return e.load(comms, {row, e.index(column)});
  }
  /// Where a communication row's bytes are (an i64 address).
  Value commAddress(Value row) {
    Value base = baseOf(commColumn(row, kSpace));
    Value offset = commColumn(row, kStagingOffset);
    return e.add(base, offset);
  }
  /// What a collective's communication row names, as NCCL's calls take
  /// it: the send and receive addresses (in place the one buffer, the
  /// caller's own chunk at + rank * bytes for all-gather and
  /// reduce-scatter; out of place the buffer and the result), the bytes of
  /// one chunk and its element count.
  struct CollectiveRow {
    Value send, recv, bytes, count;
  };
  CollectiveRow collectiveRow(planner::SegmentMethod method, Value row,
                              Value rank);
  /// The caller's group of a collective segment: its device ids (written
  /// to `groupBuffer`), their count and the caller's index among them.
  struct CallerGroup {
    Value ids, count, rank;
  };
  CallerGroup callerGroup(Value rangeRow, Value device);
  /// Runs the branch of a copy row's kind (planner::CopyKind), testing only
  /// for the kinds the plan has.
  void byCopyKind(Value kind, llvm::function_ref<void()> copy,
                  llvm::function_ref<void()> zero,
                  llvm::function_ref<void()> accumulate);
  /// The caller's rank in its group of a collective segment (RangeColumn).
  Value callerRank(Value rangeRow);

  OpBuilder &b;
  Emitter e;
  Location loc;
  ModuleOp module;
  const PlanTables &tables;
  const ScheduleShape &schedule;
  /// Set by the target before emitSegments: the i64 addresses of the
  /// source tile, the result tile and the staging buffer, and the
  /// function's buffer for collective groups (when the plan has members).
  Value sourceAddress, resultAddress, stagingAddress, groupBuffer;
  /// Set by loadTables: the device's position and block, and the tables
  /// (copies, comms and ranks null when the plan has none).
  Value position, block, copies, comms, ranges, members, ranks;
};

} // namespace polymesh::conversion

#endif // POLYMESH_LIB_CONVERSION_EXCHANGETABLES_H
