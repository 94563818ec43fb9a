//===- LowerToCpu.cpp - Partitioned programs to loops and runtime calls ---===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Each polymesh.exchange becomes its device's share of the plan: generated
// copy loops driven by per-device tables, and calls into the runtime's C ABI.
// The tables come from planner::scheduleForDevices, so the code is the same
// for every device and does not grow with the device count. Steps of a
// collective's shape call that collective (broadcast, all_gather,
// all_reduce, reduce_scatter); the rest are grouped send/recv.
//
//===----------------------------------------------------------------------===//

#include "ExchangeTables.h"
#include "RuntimeFunctions.h"

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Planner/DeviceSchedule.h"
#include "polymesh/Runtime/PolymeshRuntime.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/DLTI/DLTI.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MPI/IR/MPI.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/DialectConversion.h"

#include <map>
#include <tuple>

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHEXCHANGETOCPU
#define GEN_PASS_DEF_POLYMESHEXCHANGETOMPI
#define GEN_PASS_DEF_POLYMESHLOWERTOCPU
#include "polymesh/Conversion/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;
using namespace polymesh::conversion;

namespace {

/// What the pattern needs of an exchange, prepared before the conversion
/// (building tables can fail with a diagnostic; a pattern should not).
struct PreparedExchange {
  const PlanTables *tables = nullptr;
  /// The function's buffer for collective groups (null without members).
  Value groupBuffer;
};

/// How send/recv rows between processes move: through the runtime
/// (polymesh_rt_send/recv), or as upstream mpi.send/mpi.recv in the code.
enum class Transport { Runtime, Mpi };

/// MPI messages carry at most this many bytes (MPI counts are ints), as
/// the runtime's own do.
constexpr int64_t kMpiPieceBytes = int64_t(1) << 30;

/// Emits one exchange's code for the CPU: copy rows as loops of memcpy
/// runs, calls into the loopback runtime.
class CpuExchangeEmitter : public ScheduleEmitter {
public:
  CpuExchangeEmitter(ExchangeOp op, const PreparedExchange &prepared,
                     ModuleOp module, OpBuilder &builder, Transport transport)
      : ScheduleEmitter(builder, op.getLoc(), module, *prepared.tables), op(op),
        transport(transport) {
    groupBuffer = prepared.groupBuffer;
  }

  /// The exchange's result as a tensor.
  Value emit();

private:
  /// Declared by convertExchangesToCpu before the conversion.
  LLVM::LLVMFuncOp declare(RuntimeFunction function) {
    return module.lookupSymbol<LLVM::LLVMFuncOp>(
        runtimeSignature(function).name);
  }
  void accumulate(Value from, Value to, Value runBytes);
  void copyRun(Value kind, Value src, Value dst, Value runBytes);
  void copyNest(Value row, int64_t dim, Value src, Value dst);
  void runCopies(Value begin, Value end) final;
  void emitSendRecv(Value rangeRow) final;
  void emitCollective(planner::SegmentMethod method, Value rangeRow) final;
  bool packsWithCalls() const final { return true; }
  void emitBroadcast(Value rangeRow);
  void emitRuntimeSendRecv(Value isSend, Value peer, Value at, Value bytes);
  Value mpiView(Value address, Value bytes);
  void emitMpiSendRecv(Value isSend, Value route, Value address, Value bytes);

  ExchangeOp op;
  Transport transport;
  Type elementType;
  Value runtime, device;
};

/// dst += src element by element, in the element type (f16 and bf16
/// through f32, rounded per addition; i1 sums are ors).
void CpuExchangeEmitter::accumulate(Value from, Value to, Value runBytes) {
  int64_t elementBytes = schedule.elementBytes;
  Value count =
      e.toIndex(arith::DivSIOp::create(b, loc, runBytes, e.i64(elementBytes)));
  e.loop(e.index(0), count, [&](Value j) {
    Value offset = e.mul(e.toI64(j), e.i64(elementBytes));
    Value src = e.pointer(e.add(from, offset));
    Value dst = e.pointer(e.add(to, offset));
    Value a = LLVM::LoadOp::create(b, loc, elementType, dst);
    Value c = LLVM::LoadOp::create(b, loc, elementType, src);
    Value sum = addElements(b, loc, elementType, a, c);
    LLVM::StoreOp::create(b, loc, sum, dst);
  });
}

/// One contiguous run of a copy row: a copy, a zero fill or a sum, as the
/// row's kind says (tested only for the kinds the plan has).
void CpuExchangeEmitter::copyRun(Value kind, Value src, Value dst,
                                 Value runBytes) {
  auto copy = [&]() {
    LLVM::MemcpyOp::create(b, loc, e.pointer(dst), e.pointer(src), runBytes,
                           /*isVolatile=*/false);
  };
  auto zero = [&]() {
    LLVM::MemsetOp::create(b, loc, e.pointer(dst),
                           arith::ConstantIntOp::create(b, loc, 0, 8), runBytes,
                           /*isVolatile=*/false);
  };
  auto sum = [&]() { accumulate(src, dst, runBytes); };
  byCopyKind(kind, copy, zero, sum);
}

/// The loops of copy row `row` from dimension `dim` inward.
void CpuExchangeEmitter::copyNest(Value row, int64_t dim, Value src,
                                  Value dst) {
  int64_t outer = schedule.outerDims;
  auto column = [&](int64_t c) { return e.load(copies, {row, e.index(c)}); };
  if (dim == outer)
    return copyRun(column(kKind), src, dst, column(kRunBytes));
  Value count = e.toIndex(column(kFixedCopyColumns + dim));
  Value srcStride = column(kFixedCopyColumns + outer + dim);
  Value dstStride = column(kFixedCopyColumns + 2 * outer + dim);
  e.loop(e.index(0), count, [&](Value i) {
    Value step = e.toI64(i);
    Value from = e.add(src, e.mul(step, srcStride));
    Value to = e.add(dst, e.mul(step, dstStride));
    copyNest(row, dim + 1, from, to);
  });
}

void CpuExchangeEmitter::runCopies(Value begin, Value end) {
  if (!copies)
    return;
  e.loop(begin, end, [&](Value row) {
    auto column = [&](int64_t c) { return e.load(copies, {row, e.index(c)}); };
    Value from = e.add(baseOf(column(kSrcSpace)), column(kSrcOffset));
    Value to = e.add(baseOf(column(kDstSpace)), column(kDstOffset));
    copyNest(row, 0, from, to);
  });
}

/// Send/recv segments pack each box right before its send, inside the
/// group, so that it leaves while the next one is packed; the copies no
/// call waits for run once every call is posted.
void CpuExchangeEmitter::emitSendRecv(Value rangeRow) {
  Value begin = rangeColumn(rangeRow, kCommBegin);
  Value end = rangeColumn(rangeRow, kCommEnd);
  Value any =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, begin, end);
  auto beforeRows = [&]() {
    runRangeCopies(rangeRow, kBeforeBegin, kBeforeEnd);
  };
  e.ifThenElse(
      any,
      [&]() {
        e.call(declare(RuntimeFunction::GroupStart), {runtime, device});
        Value packs = rangeColumn(rangeRow, kBeforeBegin);
        e.loop(begin, end, [&](Value row) {
          Value packsBegin = arith::AddIOp::create(
              b, loc, packs, e.toIndex(commColumn(row, kPacksBegin)));
          Value packsEnd = arith::AddIOp::create(
              b, loc, packs, e.toIndex(commColumn(row, kPacksEnd)));
          runCopies(packsBegin, packsEnd);
          Value peer = e.add(device, commColumn(row, kPeer));
          Value at = commAddress(row);
          Value bytes = commColumn(row, kBytes);
          Value isSend = e.eq(commColumn(row, kCommKind),
                              static_cast<int64_t>(planner::CommKind::Send));
          if (transport == Transport::Runtime)
            return emitRuntimeSendRecv(isSend, peer, at, bytes);
          // Rows run in the schedule's shared order, so blocking calls
          // cannot deadlock (planner::SegmentMethod::SendRecv).
          Value route = LLVM::CallOp::create(
                            b, loc, declare(RuntimeFunction::MpiRoute),
                            ValueRange{runtime, device, peer,
                                       arith::ExtUIOp::create(
                                           b, loc, b.getI32Type(), isSend)})
                            .getResult();
          Value viaRuntime = arith::CmpIOp::create(
              b, loc, arith::CmpIPredicate::slt, route, e.i64(0));
          e.ifThenElse(
              viaRuntime,
              [&]() { emitRuntimeSendRecv(isSend, peer, at, bytes); },
              [&]() { emitMpiSendRecv(isSend, route, at, bytes); });
        });
        runRangeCopies(rangeRow, kPackedEnd, kBeforeEnd);
        e.call(declare(RuntimeFunction::GroupEnd), {runtime, device});
      },
      beforeRows);
}

void CpuExchangeEmitter::emitRuntimeSendRecv(Value isSend, Value peer, Value at,
                                             Value bytes) {
  Value pointer = e.pointer(at);
  e.ifThenElse(
      isSend,
      [&]() {
        e.call(declare(RuntimeFunction::Send),
               {runtime, device, peer, pointer, bytes});
      },
      [&]() {
        e.call(declare(RuntimeFunction::Recv),
               {runtime, device, peer, pointer, bytes});
      });
}

/// `bytes` at `address` as the memref<?xi8> an mpi op takes: the
/// descriptor the LLVM lowering will see, cast to the memref type (the
/// cast folds away when the mpi op is lowered to a call).
Value CpuExchangeEmitter::mpiView(Value address, Value bytes) {
  MLIRContext *context = b.getContext();
  Type i64Type = b.getI64Type();
  auto array = LLVM::LLVMArrayType::get(i64Type, 1);
  auto pointerType = LLVM::LLVMPointerType::get(context);
  auto descriptorType = LLVM::LLVMStructType::getLiteral(
      context, {pointerType, pointerType, i64Type, array, array});
  Value pointer = e.pointer(address);
  Value descriptor = LLVM::PoisonOp::create(b, loc, descriptorType);
  auto insert = [&](Value value, ArrayRef<int64_t> position) {
    descriptor =
        LLVM::InsertValueOp::create(b, loc, descriptor, value, position);
  };
  insert(pointer, {0});
  insert(pointer, {1});
  insert(e.i64(0), {2});
  insert(bytes, {3, 0});
  insert(e.i64(1), {4, 0});
  auto viewType = MemRefType::get({ShapedType::kDynamic}, b.getI8Type());
  return UnrealizedConversionCastOp::create(b, loc, viewType, descriptor)
      .getResult(0);
}

/// A message to or from another process as blocking mpi.send / mpi.recv
/// on MPI_COMM_WORLD, in pieces MPI's int counts can carry; `route` is
/// polymesh_rt_mpi_route's rank * 2^32 + tag.
void CpuExchangeEmitter::emitMpiSendRecv(Value isSend, Value route,
                                         Value address, Value bytes) {
  Type i32Type = b.getI32Type();
  Value rank = arith::TruncIOp::create(
      b, loc, i32Type, arith::ShRUIOp::create(b, loc, route, e.i64(32)));
  Value tag = arith::TruncIOp::create(b, loc, i32Type, route);
  Value comm =
      mpi::CommWorldOp::create(b, loc, mpi::CommType::get(b.getContext()));
  Value piece = e.i64(kMpiPieceBytes);
  Value pieces = arith::CeilDivSIOp::create(b, loc, bytes, piece);
  e.loop(e.index(0), e.toIndex(pieces), [&](Value i) {
    Value offset = e.mul(e.toI64(i), piece);
    Value left = arith::SubIOp::create(b, loc, bytes, offset);
    Value length = arith::MinSIOp::create(b, loc, left, piece);
    Value view = mpiView(e.add(address, offset), length);
    e.ifThenElse(
        isSend,
        [&]() {
          mpi::SendOp::create(b, loc, TypeRange{}, view, tag, rank, comm);
        },
        [&]() {
          mpi::RecvOp::create(b, loc, TypeRange{}, view, tag, rank, comm);
        });
  });
}

/// The rank column is the root's index in the group, whose id the group
/// holds.
void CpuExchangeEmitter::emitBroadcast(Value rangeRow) {
  auto [group, numMembers, rank] = callerGroup(rangeRow, device);
  Value begin = rangeColumn(rangeRow, kCommBegin);
  Value end = rangeColumn(rangeRow, kCommEnd);
  e.loop(begin, end, [&](Value row) {
    Value at = e.pointer(commAddress(row));
    Value root = LLVM::LoadOp::create(
        b, loc, b.getI64Type(), e.slot(group, commColumn(row, kPeerRank)));
    e.call(declare(RuntimeFunction::Broadcast),
           {runtime, device, group, numMembers, root, at, at,
            commColumn(row, kBytes)});
  });
}

/// In place in staging (or the source tile), or out of place from one
/// tile to another, as the row says.
void CpuExchangeEmitter::emitCollective(planner::SegmentMethod method,
                                        Value rangeRow) {
  if (method == planner::SegmentMethod::Broadcast)
    return emitBroadcast(rangeRow);
  auto [group, numMembers, rank] = callerGroup(rangeRow, device);
  Value sum = arith::ConstantIntOp::create(b, loc, POLYMESH_RT_SUM, 32);
  // Only schedules of element types the runtime sums have sum segments.
  Value dtype = arith::ConstantIntOp::create(
      b, loc, runtimeSumDtype(elementType).value_or(-1), 32);
  Value begin = rangeColumn(rangeRow, kCommBegin);
  Value end = rangeColumn(rangeRow, kCommEnd);
  e.loop(begin, end, [&](Value row) {
    auto [send, recv, bytes, count] = collectiveRow(method, row, rank);
    switch (method) {
    case planner::SegmentMethod::AllGather:
      e.call(declare(RuntimeFunction::AllGather),
             {runtime, device, group, numMembers, e.pointer(send),
              e.pointer(recv), bytes});
      break;
    case planner::SegmentMethod::AllReduce:
      e.call(declare(RuntimeFunction::AllReduce),
             {runtime, device, group, numMembers, e.pointer(send),
              e.pointer(recv), count, dtype, sum});
      break;
    case planner::SegmentMethod::AllToAll:
      e.call(declare(RuntimeFunction::AllToAll),
             {runtime, device, group, numMembers, e.pointer(send),
              e.pointer(recv), bytes});
      break;
    default:
      e.call(declare(RuntimeFunction::ReduceScatter),
             {runtime, device, group, numMembers, e.pointer(send),
              e.pointer(recv), count, dtype, sum});
      break;
    }
  });
}

Value CpuExchangeEmitter::emit() {
  auto sourceType = cast<RankedTensorType>(op.getInput().getType());
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  elementType = sourceType.getElementType();
  int64_t elementBytes = schedule.elementBytes;
  Value source = bufferization::ToBufferOp::create(
      b, loc, MemRefType::get(sourceType.getShape(), elementType),
      op.getInput(), /*read_only=*/true);
  Value result = memref::AllocOp::create(
      b, loc, MemRefType::get(resultType.getShape(), elementType));
  runtime = op.getRuntime();
  device = op.getDevice();
  sourceAddress = e.address(source);
  resultAddress = e.address(result);
  int64_t sourceBytes = sourceType.getNumElements() * elementBytes;
  int64_t resultBytes = resultType.getNumElements() * elementBytes;
  Type i64Type = b.getI64Type();
  Value scratch;
  if (schedule.writesSource && sourceBytes > 0) {
    // The plan sums into its source buffer: give it a copy, so that other
    // uses of the value keep their partials.
    scratch = LLVM::CallOp::create(b, loc, declare(RuntimeFunction::Malloc),
                                   ValueRange{e.i64(sourceBytes)})
                  .getResult();
    LLVM::MemcpyOp::create(b, loc, scratch, e.pointer(sourceAddress),
                           e.i64(sourceBytes), /*isVolatile=*/false);
    sourceAddress = LLVM::PtrToIntOp::create(b, loc, i64Type, scratch);
  }
  if (schedule.accumulatesIntoDestination && resultBytes > 0)
    LLVM::MemsetOp::create(b, loc, e.pointer(resultAddress),
                           arith::ConstantIntOp::create(b, loc, 0, 8),
                           e.i64(resultBytes), /*isVolatile=*/false);

  loadTables(op.getPosition());
  Value stagingBytes = e.load(table(tables.staging), {block});
  // The runtime keeps one staging buffer per device for the whole run:
  // no allocation (or page faults on fresh pages) per exchange.
  Value staging =
      LLVM::CallOp::create(b, loc, declare(RuntimeFunction::Staging),
                           ValueRange{runtime, device, stagingBytes})
          .getResult();
  stagingAddress = LLVM::PtrToIntOp::create(b, loc, i64Type, staging);
  emitSegments();

  if (scratch)
    e.call(declare(RuntimeFunction::Free), {scratch});
  // Not writable: one-shot bufferization folds a later exchange's
  // to_buffer of this tensor back into `result`, so the runtime calls that
  // read it are invisible to its analysis, and an op allowed to write in
  // place here would clobber data still to be sent.
  return bufferization::ToTensorOp::create(b, loc, resultType, result,
                                           /*restrict=*/true,
                                           /*writable=*/false);
}

/// polymesh.exchange -> the device's share of its plan.
struct ExchangeToCpuPattern : public OpConversionPattern<ExchangeOp> {
  ExchangeToCpuPattern(
      MLIRContext *context,
      const llvm::DenseMap<Operation *, PreparedExchange> &prepared,
      Transport transport)
      : OpConversionPattern<ExchangeOp>(context), prepared(prepared),
        transport(transport) {}

  LogicalResult
  matchAndRewrite(ExchangeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    auto it = prepared.find(op);
    if (it == prepared.end())
      return rewriter.notifyMatchFailure(op, "no tables prepared");
    CpuExchangeEmitter emitter(op, it->second, op->getParentOfType<ModuleOp>(),
                               rewriter, transport);
    rewriter.replaceOp(op, emitter.emit());
    return success();
  }

  const llvm::DenseMap<Operation *, PreparedExchange> &prepared;
  Transport transport;
};

/// Names the MPI implementation whose ABI the mpi ops lower to, where
/// upstream's MPI-to-LLVM patterns look for it.
LogicalResult setMpiImplementation(ModuleOp module, StringRef name) {
  if (name != "OpenMPI" && name != "MPICH")
    return module.emitError() << "unknown MPI implementation '" << name
                              << "': the MPI lowering knows OpenMPI and MPICH";
  MLIRContext *context = module.getContext();
  auto key = StringAttr::get(context, "MPI:Implementation");
  // Keep the other entries of a map the module has.
  SmallVector<DataLayoutEntryInterface> entries;
  if (Attribute existing = module->getAttr(DLTIDialect::kMapAttrName)) {
    auto map = dyn_cast<MapAttr>(existing);
    if (!map)
      return module.emitError()
             << "'" << DLTIDialect::kMapAttrName
             << "' is not a #dlti.map; the MPI lowering adds its "
                "\"MPI:Implementation\" entry there";
    for (DataLayoutEntryInterface entry : map.getEntries())
      if (entry.getKey() != DataLayoutEntryKey(key))
        entries.push_back(entry);
  }
  entries.push_back(
      DataLayoutEntryAttr::get(key, StringAttr::get(context, name)));
  module->setAttr(DLTIDialect::kMapAttrName, MapAttr::get(context, entries));
  return success();
}

/// Builds every exchange's tables (and its function's group buffer) in
/// `module`, then rewrites the exchanges by ExchangeToCpuPattern.
LogicalResult convertExchangesToCpu(ModuleOp module, Transport transport,
                                    bool directCollectives) {
  planner::ScheduleOptions scheduling;
  // Blocking MPI calls run best in rounds of distinct devices.
  scheduling.blockingRounds = transport == Transport::Mpi;
  scheduling.directCollectives = directCollectives;
  PlanTableBuilder builder(module, scheduling);
  llvm::DenseMap<Operation *, PreparedExchange> prepared;
  WalkResult walk = module.walk([&](ExchangeOp op) {
    FailureOr<PlanTables *> tables = builder.tablesFor(op);
    if (failed(tables))
      return WalkResult::interrupt();
    PreparedExchange &entry = prepared[op];
    entry.tables = *tables;
    if (!(*tables)->members.empty()) {
      OpBuilder at(op);
      entry.groupBuffer = builder.groupBuffer(at, (*tables)->maxGroupSize);
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // Declared before the conversion, whose patterns only create ops through
  // the rewriter.
  if (!prepared.empty())
    for (RuntimeFunction function :
         {RuntimeFunction::Malloc, RuntimeFunction::Free,
          RuntimeFunction::Staging, RuntimeFunction::GroupStart,
          RuntimeFunction::GroupEnd, RuntimeFunction::Send,
          RuntimeFunction::Recv, RuntimeFunction::MpiRoute,
          RuntimeFunction::Broadcast, RuntimeFunction::AllGather,
          RuntimeFunction::AllReduce, RuntimeFunction::ReduceScatter,
          RuntimeFunction::AllToAll})
      getOrDeclare(module, function);
  MLIRContext *context = module.getContext();
  ConversionTarget target(*context);
  target.addIllegalOp<ExchangeOp>();
  target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
  RewritePatternSet patterns(context);
  patterns.add<ExchangeToCpuPattern>(context, prepared, transport);
  return applyPartialConversion(module, target, std::move(patterns));
}

struct PolymeshExchangeToCpuPass
    : public polymesh::impl::PolymeshExchangeToCpuBase<
          PolymeshExchangeToCpuPass> {
  using Base::Base;

  void runOnOperation() final {
    if (failed(convertExchangesToCpu(getOperation(), Transport::Runtime,
                                     directCollectives)))
      return signalPassFailure();
  }
};

struct PolymeshExchangeToMpiPass
    : public polymesh::impl::PolymeshExchangeToMpiBase<
          PolymeshExchangeToMpiPass> {
  using Base::Base;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    if (failed(setMpiImplementation(module, mpiImplementation)) ||
        failed(
            convertExchangesToCpu(module, Transport::Mpi, directCollectives)))
      return signalPassFailure();
  }
};

struct PolymeshLowerToCpuPass
    : public polymesh::impl::PolymeshLowerToCpuBase<PolymeshLowerToCpuPass> {
  using Base::Base;

  void getDependentDialects(DialectRegistry &registry) const final {
    registerHostLoweringDialects(registry);
    registry.insert<memref::MemRefDialect, scf::SCFDialect,
                    bufferization::BufferizationDialect, LLVM::LLVMDialect,
                    arith::ArithDialect, mpi::MPIDialect, DLTIDialect>();
    OpPassManager pm(ModuleOp::getOperationName());
    buildHostLoweringPipeline(pm);
    pm.getDependentDialects(registry);
  }

  void runOnOperation() final {
    ModuleOp module = getOperation();
    Transport transport = Transport::Runtime;
    if (transportName == "mpi") {
      transport = Transport::Mpi;
      if (failed(setMpiImplementation(module, mpiImplementation)))
        return signalPassFailure();
    } else if (transportName != "runtime") {
      module.emitError() << "unknown transport '" << transportName
                         << "': use runtime or mpi";
      return signalPassFailure();
    }
    if (failed(convertExchangesToCpu(module, transport, directCollectives)) ||
        failed(finishPartitionedModule(module, "the CPU",
                                       /*readOnlyArguments=*/true)))
      return signalPassFailure();
    OpPassManager pm(ModuleOp::getOperationName());
    buildHostLoweringPipeline(pm);
    if (failed(runPipeline(pm, module)))
      return signalPassFailure();
  }
};

} // namespace
