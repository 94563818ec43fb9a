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

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Planner/DeviceSchedule.h"
#include "polymesh/Runtime/PolymeshRuntime.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/PassManager.h"

#include <map>
#include <tuple>

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHLOWERTOCPU
#include "polymesh/Conversion/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;
using namespace polymesh::conversion;

namespace {

class CpuExchangeLowering {
public:
  explicit CpuExchangeLowering(ModuleOp module)
      : module(module), tables_(module) {}
  LogicalResult run();

private:
  LogicalResult lower(ExchangeOp op);

  ModuleOp module;
  PlanTableBuilder tables_;
};

LogicalResult CpuExchangeLowering::lower(ExchangeOp op) {
  FailureOr<PlanTables *> maybeTables = tables_.tablesFor(op);
  if (failed(maybeTables))
    return failure();
  const PlanTables &tables = **maybeTables;
  const ScheduleShape &schedule = tables.schedule;
  MLIRContext *context = op.getContext();
  Type i64Type = IntegerType::get(context, 64);
  Type i32Type = IntegerType::get(context, 32);
  Type ptrType = LLVM::LLVMPointerType::get(context);
  Type voidType = LLVM::LLVMVoidType::get(context);

  LLVM::LLVMFuncOp mallocFn =
      declareFunction(module, "malloc", ptrType, {i64Type});
  LLVM::LLVMFuncOp freeFn =
      declareFunction(module, "free", voidType, {ptrType});
  LLVM::LLVMFuncOp stagingFn = declareFunction(
      module, "polymesh_rt_staging", ptrType, {ptrType, i64Type, i64Type});
  LLVM::LLVMFuncOp groupStart = declareFunction(
      module, "polymesh_rt_group_start", i32Type, {ptrType, i64Type});
  LLVM::LLVMFuncOp groupEnd = declareFunction(module, "polymesh_rt_group_end",
                                              i32Type, {ptrType, i64Type});
  LLVM::LLVMFuncOp sendFn =
      declareFunction(module, "polymesh_rt_send", i32Type,
                      {ptrType, i64Type, i64Type, ptrType, i64Type});
  LLVM::LLVMFuncOp recvFn =
      declareFunction(module, "polymesh_rt_recv", i32Type,
                      {ptrType, i64Type, i64Type, ptrType, i64Type});
  LLVM::LLVMFuncOp broadcastFn = declareFunction(
      module, "polymesh_rt_broadcast", i32Type,
      {ptrType, i64Type, ptrType, i64Type, i64Type, ptrType, ptrType, i64Type});

  LLVM::LLVMFuncOp allGatherFn = declareFunction(
      module, "polymesh_rt_all_gather", i32Type,
      {ptrType, i64Type, ptrType, i64Type, ptrType, ptrType, i64Type});
  LLVM::LLVMFuncOp allReduceFn =
      declareFunction(module, "polymesh_rt_all_reduce", i32Type,
                      {ptrType, i64Type, ptrType, i64Type, ptrType, ptrType,
                       i64Type, i32Type, i32Type});
  LLVM::LLVMFuncOp reduceScatterFn =
      declareFunction(module, "polymesh_rt_reduce_scatter", i32Type,
                      {ptrType, i64Type, ptrType, i64Type, ptrType, ptrType,
                       i64Type, i32Type, i32Type});

  OpBuilder builder(op);
  Emitter e(builder, op.getLoc());
  Location loc = op.getLoc();
  auto sourceType = cast<RankedTensorType>(op.getInput().getType());
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  Type elementType = sourceType.getElementType();
  int64_t elementBytes = schedule.elementBytes;
  auto sourceMemref =
      MemRefType::get(sourceType.getShape(), sourceType.getElementType());
  auto resultMemref =
      MemRefType::get(resultType.getShape(), resultType.getElementType());
  Value source = bufferization::ToBufferOp::create(
      builder, loc, sourceMemref, op.getInput(), /*read_only=*/true);
  Value result = memref::AllocOp::create(builder, loc, resultMemref);
  Value runtime = op.getRuntime();
  Value device = op.getDevice();
  Value position = op.getPosition();
  int64_t numDevices = schedule.numDevices;

  Value sourceAddress = e.address(source);
  Value resultAddress = e.address(result);
  int64_t sourceBytes = sourceType.getNumElements() * elementBytes;
  int64_t resultBytes = resultType.getNumElements() * elementBytes;
  Value scratch;
  if (schedule.writesSource && sourceBytes > 0) {
    // The plan sums into its source buffer: give it a copy, so that other
    // uses of the value keep their partials.
    scratch = LLVM::CallOp::create(builder, loc, mallocFn,
                                   ValueRange{e.i64(sourceBytes)})
                  .getResult();
    LLVM::MemcpyOp::create(builder, loc, scratch, e.pointer(sourceAddress),
                           e.i64(sourceBytes), /*isVolatile=*/false);
    sourceAddress = LLVM::PtrToIntOp::create(builder, loc, i64Type, scratch);
  }
  if (schedule.accumulatesIntoDestination && resultBytes > 0)
    LLVM::MemsetOp::create(builder, loc, e.pointer(resultAddress),
                           arith::ConstantIntOp::create(builder, loc, 0, 8),
                           e.i64(resultBytes), /*isVolatile=*/false);

  // The device's block of rows (ExchangeTables.h): every table below but
  // this one is indexed by block.
  Value block =
      e.toIndex(e.load(e.global(tables.blocks, {numDevices}), {position}));
  Value stagingTable = e.global(tables.staging, {tables.numBlocks});
  Value stagingBytes = e.load(stagingTable, {block});
  // The runtime keeps one staging buffer per device for the whole run:
  // no allocation (or page faults on fresh pages) per exchange.
  Value staging =
      LLVM::CallOp::create(builder, loc, stagingFn,
                           ValueRange{runtime, device, stagingBytes})
          .getResult();
  Value stagingAddress =
      LLVM::PtrToIntOp::create(builder, loc, i64Type, staging);

  int64_t outer = schedule.outerDims;
  Value copies, comms;
  // The globals' static row counts: read them back from the symbols.
  auto globalType = [&](const std::string &name) {
    return tables_.globalType(name);
  };
  if (!tables.copies.empty())
    copies = memref::GetGlobalOp::create(
        builder, loc, globalType(tables.copies), tables.copies);
  if (!tables.comms.empty())
    comms = memref::GetGlobalOp::create(builder, loc, globalType(tables.comms),
                                        tables.comms);
  Value ranges = memref::GetGlobalOp::create(
      builder, loc, globalType(tables.ranges), tables.ranges);
  // Every collective group of every block, relative to the device; a
  // segment's range row says where the device's own group is, and the
  // group is written out as device ids before each collective call.
  Value members, groupBuffer;
  if (!tables.members.empty()) {
    members = memref::GetGlobalOp::create(
        builder, loc, globalType(tables.members), tables.members);
    groupBuffer = tables_.groupBuffer(builder, tables.maxGroupSize);
  }

  auto baseOf = [&](Value space) {
    Value isSource = e.eq(space, 0);
    Value isResult = e.eq(space, 1);
    Value other = arith::SelectOp::create(builder, loc, isResult, resultAddress,
                                          stagingAddress);
    return arith::SelectOp::create(builder, loc, isSource, sourceAddress, other)
        .getResult();
  };

  // Only schedules of element types the runtime sums have sum segments.
  auto sumDtype = [&]() {
    return arith::ConstantIntOp::create(
        builder, loc, runtimeSumDtype(elementType).value_or(-1), 32);
  };

  auto accumulate = [&](Value from, Value to, Value runBytes) {
    Value count = e.toIndex(
        arith::DivSIOp::create(builder, loc, runBytes, e.i64(elementBytes)));
    e.loop(e.index(0), count, [&](Value j) {
      Value offset = e.mul(e.toI64(j), e.i64(elementBytes));
      Value src = e.pointer(e.add(from, offset));
      Value dst = e.pointer(e.add(to, offset));
      Value a = LLVM::LoadOp::create(builder, loc, elementType, dst);
      Value c = LLVM::LoadOp::create(builder, loc, elementType, src);
      Value sum;
      if (auto floatType = dyn_cast<FloatType>(elementType)) {
        if (floatType.getWidth() < 32) {
          Type f32 = builder.getF32Type();
          Value wide = arith::AddFOp::create(
              builder, loc, arith::ExtFOp::create(builder, loc, f32, a),
              arith::ExtFOp::create(builder, loc, f32, c));
          sum = arith::TruncFOp::create(builder, loc, elementType, wide);
        } else {
          sum = arith::AddFOp::create(builder, loc, a, c);
        }
      } else if (elementType.isInteger(1)) {
        sum = arith::OrIOp::create(builder, loc, a, c);
      } else {
        sum = arith::AddIOp::create(builder, loc, a, c);
      }
      LLVM::StoreOp::create(builder, loc, sum, dst);
    });
  };

  auto runCopies = [&](Value begin, Value end) {
    if (!copies)
      return;
    e.loop(begin, end, [&](Value row) {
      auto column = [&](int64_t c) {
        return e.load(copies, {row, e.index(c)});
      };
      Value kind = column(kKind);
      Value from = e.add(baseOf(column(kSrcSpace)), column(kSrcOffset));
      Value to = e.add(baseOf(column(kDstSpace)), column(kDstOffset));
      Value runBytes = column(kRunBytes);
      std::function<void(int64_t, Value, Value)> nest =
          [&](int64_t dim, Value src, Value dst) {
            if (dim == outer) {
              auto copy = [&]() {
                LLVM::MemcpyOp::create(builder, loc, e.pointer(dst),
                                       e.pointer(src), runBytes,
                                       /*isVolatile=*/false);
              };
              auto zero = [&]() {
                LLVM::MemsetOp::create(
                    builder, loc, e.pointer(dst),
                    arith::ConstantIntOp::create(builder, loc, 0, 8), runBytes,
                    /*isVolatile=*/false);
              };
              if (!tables.hasAccumulate && !tables.hasZero)
                return copy();
              e.ifThenElse(e.eq(kind, 0), copy, [&]() {
                if (!tables.hasAccumulate)
                  return zero();
                if (!tables.hasZero)
                  return accumulate(src, dst, runBytes);
                e.ifThenElse(e.eq(kind, 2), zero,
                             [&]() { accumulate(src, dst, runBytes); });
              });
              return;
            }
            Value count = e.toIndex(column(kFixedCopyColumns + dim));
            Value srcStride = column(kFixedCopyColumns + outer + dim);
            Value dstStride = column(kFixedCopyColumns + 2 * outer + dim);
            e.loop(e.index(0), count, [&](Value i) {
              Value step = e.toI64(i);
              nest(dim + 1, e.add(src, e.mul(step, srcStride)),
                   e.add(dst, e.mul(step, dstStride)));
            });
          };
      nest(0, from, to);
    });
  };

  for (auto [index, method] : llvm::enumerate(schedule.segments)) {
    Value rangeRow = arith::AddIOp::create(
        builder, loc, e.index(index * tables.numBlocks), block);
    auto range = [&](int64_t c) {
      return e.toIndex(e.load(ranges, {rangeRow, e.index(c)}));
    };
    auto callerGroup = [&]() {
      return e.group(ranges, rangeRow, members, device, groupBuffer);
    };
    bool sendRecv = method == planner::SegmentMethod::SendRecv;
    // Send/recv segments pack each box right before its send, inside the
    // group, so that it leaves while the next one is packed; the copies no
    // call waits for run once every call is posted.
    if (!sendRecv || !comms)
      runCopies(range(kBeforeBegin), range(kBeforeEnd));
    if (comms) {
      Value begin = range(kCommBegin), end = range(kCommEnd);
      auto commColumn = [&](Value row, int64_t c) {
        return e.load(comms, {row, e.index(c)});
      };
      if (sendRecv) {
        Value any = arith::CmpIOp::create(
            builder, loc, arith::CmpIPredicate::slt, begin, end);
        e.ifThenElse(
            any,
            [&]() {
              e.call(groupStart, {runtime, device});
              Value packs = range(kBeforeBegin);
              e.loop(begin, end, [&](Value row) {
                runCopies(arith::AddIOp::create(
                              builder, loc, packs,
                              e.toIndex(commColumn(row, kPacksBegin))),
                          arith::AddIOp::create(
                              builder, loc, packs,
                              e.toIndex(commColumn(row, kPacksEnd))));
                Value peer = e.add(device, commColumn(row, kPeer));
                Value at = e.pointer(e.add(baseOf(commColumn(row, kSpace)),
                                           commColumn(row, kStagingOffset)));
                Value bytes = commColumn(row, kBytes);
                e.ifThenElse(
                    e.eq(commColumn(row, kCommKind), 0),
                    [&]() {
                      e.call(sendFn, {runtime, device, peer, at, bytes});
                    },
                    [&]() {
                      e.call(recvFn, {runtime, device, peer, at, bytes});
                    });
              });
              runCopies(range(kPackedEnd), range(kBeforeEnd));
              e.call(groupEnd, {runtime, device});
            },
            [&]() { runCopies(range(kBeforeBegin), range(kBeforeEnd)); });
      } else if (method == planner::SegmentMethod::Broadcast) {
        Value group, numMembers;
        std::tie(group, numMembers) = callerGroup();
        e.loop(begin, end, [&](Value row) {
          Value at = e.pointer(e.add(baseOf(commColumn(row, kSpace)),
                                     commColumn(row, kStagingOffset)));
          Value root = e.add(device, commColumn(row, kPeer));
          e.call(broadcastFn, {runtime, device, group, numMembers, root, at, at,
                               commColumn(row, kBytes)});
        });
      } else if (isCollective(method)) {
        // In place in staging (or the source tile), as the row says; the
        // rank column is the caller's index among the members.
        Value group, numMembers;
        std::tie(group, numMembers) = callerGroup();
        Value sum =
            arith::ConstantIntOp::create(builder, loc, POLYMESH_RT_SUM, 32);
        e.loop(begin, end, [&](Value row) {
          Value at = e.add(baseOf(commColumn(row, kSpace)),
                           commColumn(row, kStagingOffset));
          Value bytes = commColumn(row, kBytes);
          Value own = e.add(at, e.mul(commColumn(row, kPeerRank), bytes));
          Value count =
              arith::DivSIOp::create(builder, loc, bytes, e.i64(elementBytes));
          switch (method) {
          case planner::SegmentMethod::AllGather:
            e.call(allGatherFn, {runtime, device, group, numMembers,
                                 e.pointer(own), e.pointer(at), bytes});
            break;
          case planner::SegmentMethod::AllReduce:
            e.call(allReduceFn,
                   {runtime, device, group, numMembers, e.pointer(at),
                    e.pointer(at), count, sumDtype(), sum});
            break;
          default:
            e.call(reduceScatterFn,
                   {runtime, device, group, numMembers, e.pointer(at),
                    e.pointer(own), count, sumDtype(), sum});
            break;
          }
        });
      }
    }
    runCopies(range(kAfterBegin), range(kAfterEnd));
  }

  if (scratch)
    e.call(freeFn, {scratch});
  // Not writable: one-shot bufferization folds a later exchange's
  // to_buffer of this tensor back into `result`, so the runtime calls that
  // read it are invisible to its analysis, and an op allowed to write in
  // place here would clobber data still to be sent.
  Value tensor = bufferization::ToTensorOp::create(
      builder, loc, resultType, result, /*restrict=*/true, /*writable=*/false);
  op.getResult().replaceAllUsesWith(tensor);
  op.erase();
  return success();
}

LogicalResult CpuExchangeLowering::run() {
  SmallVector<ExchangeOp> exchanges;
  module.walk([&](ExchangeOp op) { exchanges.push_back(op); });
  for (ExchangeOp op : exchanges)
    if (failed(lower(op)))
      return failure();
  return finishPartitionedModule(module, "the CPU",
                                 /*readOnlyArguments=*/true);
}

struct PolymeshLowerToCpuPass
    : public polymesh::impl::PolymeshLowerToCpuBase<PolymeshLowerToCpuPass> {
  using Base::Base;

  void getDependentDialects(DialectRegistry &registry) const final {
    registerHostLoweringDialects(registry);
    registry.insert<memref::MemRefDialect, scf::SCFDialect,
                    bufferization::BufferizationDialect, LLVM::LLVMDialect,
                    arith::ArithDialect>();
    OpPassManager pm(ModuleOp::getOperationName());
    buildHostLoweringPipeline(pm);
    pm.getDependentDialects(registry);
  }

  void runOnOperation() final {
    ModuleOp module = getOperation();
    CpuExchangeLowering lowering(module);
    if (failed(lowering.run()))
      return signalPassFailure();
    OpPassManager pm(ModuleOp::getOperationName());
    buildHostLoweringPipeline(pm);
    if (failed(runPipeline(pm, module)))
      return signalPassFailure();
  }
};

} // namespace
