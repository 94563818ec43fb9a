//===- LowerToCpu.cpp - Partitioned programs to loops and runtime calls ---===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Each polymesh.exchange becomes its device's share of the plan: generated
// copy loops driven by per-device tables, and calls into the runtime's C ABI.
// The tables come from planner::scheduleForDevices, so the code is the same
// for every device and does not grow with the device count.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Planner/DeviceSchedule.h"

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

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHLOWERTOCPU
#include "polymesh/Conversion/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;

namespace {

/// Columns of a copy row before the per-loop counts and strides.
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
  kRangeColumns
};
/// Columns of a communication row.
enum CommColumn : int64_t { kCommKind, kPeer, kStagingOffset, kBytes,
                            kCommColumns };

/// The globals holding one plan's schedule.
struct PlanTables {
  planner::DeviceSchedule schedule;
  std::string copies, ranges, comms, staging;
  std::vector<std::string> members; // per segment; empty when unused
  bool hasAccumulate = false;
  bool hasZero = false;
};

class ExchangeLowering {
public:
  explicit ExchangeLowering(ModuleOp module) : module(module) {}
  LogicalResult run();

private:
  LogicalResult lower(ExchangeOp op);
  FailureOr<PlanTables *> tablesFor(ExchangeOp op);
  std::string addGlobal(StringRef name, ArrayRef<int64_t> shape,
                        ArrayRef<int64_t> values);
  LLVM::LLVMFuncOp declare(StringRef name, Type result, ArrayRef<Type> args);

  ModuleOp module;
  SymbolTableCollection symbols;
  std::map<std::string, PlanTables> plans;
  llvm::StringMap<std::vector<int64_t>> devicesOf;
};

std::string ExchangeLowering::addGlobal(StringRef name, ArrayRef<int64_t> shape,
                                        ArrayRef<int64_t> values) {
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  auto type = MemRefType::get(shape, builder.getI64Type());
  auto tensorType = RankedTensorType::get(shape, builder.getI64Type());
  auto global = memref::GlobalOp::create(
      builder, module.getLoc(), name, builder.getStringAttr("private"), type,
      DenseElementsAttr::get(tensorType, values), /*constant=*/true,
      /*alignment=*/IntegerAttr());
  symbols.getSymbolTable(module).insert(global);
  return global.getSymName().str();
}

LLVM::LLVMFuncOp ExchangeLowering::declare(StringRef name, Type result,
                                           ArrayRef<Type> args) {
  if (auto existing = module.lookupSymbol<LLVM::LLVMFuncOp>(name))
    return existing;
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  auto function = LLVM::LLVMFuncOp::create(
      builder, module.getLoc(), name,
      LLVM::LLVMFunctionType::get(result, args));
  return function;
}

FailureOr<PlanTables *> ExchangeLowering::tablesFor(ExchangeOp op) {
  std::string planName = op.getPlan().str();
  if (auto it = plans.find(planName); it != plans.end())
    return &it->second;
  TransferOp transfer = lookupExchangePlan(symbols, op);
  if (!transfer)
    return op.emitError() << "plan " << op.getPlanAttr()
                          << " is not a planned transfer";
  auto function = op->getParentOfType<func::FuncOp>();
  auto partitionOf = function->getAttrOfType<StringAttr>(
      PolymeshDialect::kPartitionOfAttrName);
  if (!partitionOf)
    return op.emitError() << "is not inside a function made by "
                             "--polymesh-partition";
  const std::vector<int64_t> &devices = devicesOf[partitionOf.getValue()];

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
  planner::TransferPlan plan = toPlannerPlan(transfer, *source, *destination);
  absl::StatusOr<planner::DeviceSchedule> schedule =
      planner::scheduleForDevices(plan, *source, *destination, devices);
  if (!schedule.ok())
    return op.emitError() << "cannot schedule plan " << op.getPlanAttr()
                          << ": " << std::string(schedule.status().message());

  PlanTables &tables = plans[planName];
  tables.schedule = std::move(*schedule);
  const planner::DeviceSchedule &s = tables.schedule;
  int64_t numDevices = devices.size();
  int64_t outer = s.outerDims;
  int64_t copyColumns = kFixedCopyColumns + 3 * outer;

  std::vector<int64_t> copies, comms, ranges;
  auto addCopies = [&](const std::vector<planner::CopyRow> &rows) {
    for (const planner::CopyRow &row : rows) {
      tables.hasAccumulate |= row.kind == planner::CopyKind::Accumulate;
      tables.hasZero |= row.kind == planner::CopyKind::Zero;
      copies.insert(copies.end(),
                    {static_cast<int64_t>(row.kind),
                     static_cast<int64_t>(row.srcSpace), row.srcOffset,
                     static_cast<int64_t>(row.dstSpace), row.dstOffset,
                     row.runBytes});
      copies.insert(copies.end(), row.counts.begin(), row.counts.end());
      copies.insert(copies.end(), row.srcStrides.begin(), row.srcStrides.end());
      copies.insert(copies.end(), row.dstStrides.begin(), row.dstStrides.end());
    }
  };
  for (const planner::Segment &segment : s.segments) {
    for (int64_t p = 0; p < numDevices; ++p) {
      const planner::DeviceSegment &mine = segment.perDevice[p];
      int64_t numCopies = copies.size() / copyColumns;
      ranges.push_back(numCopies);
      addCopies(mine.before);
      ranges.push_back(copies.size() / copyColumns);
      ranges.push_back(comms.size() / kCommColumns);
      for (const planner::CommRow &row : mine.comm)
        comms.insert(comms.end(), {static_cast<int64_t>(row.kind), row.peer,
                                   row.stagingOffset, row.bytes});
      ranges.push_back(comms.size() / kCommColumns);
      ranges.push_back(copies.size() / copyColumns);
      addCopies(mine.after);
      ranges.push_back(copies.size() / copyColumns);
    }
  }
  std::string prefix = "__polymesh_" + planName;
  int64_t numCopyRows = copies.size() / copyColumns;
  int64_t numCommRows = comms.size() / kCommColumns;
  if (numCopyRows)
    tables.copies =
        addGlobal(prefix + "_copies", {numCopyRows, copyColumns}, copies);
  if (numCommRows)
    tables.comms =
        addGlobal(prefix + "_comms", {numCommRows, kCommColumns}, comms);
  tables.ranges = addGlobal(
      prefix + "_ranges",
      {static_cast<int64_t>(s.segments.size()) * numDevices, kRangeColumns},
      ranges);
  tables.staging = addGlobal(prefix + "_staging", {numDevices}, s.stagingBytes);
  for (auto [index, segment] : llvm::enumerate(s.segments)) {
    tables.members.emplace_back();
    if (segment.method == planner::SegmentMethod::Broadcast)
      tables.members.back() = addGlobal(
          prefix + "_members" + std::to_string(index),
          {static_cast<int64_t>(segment.members.size())}, segment.members);
  }
  return &tables;
}

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
    return LLVM::IntToPtrOp::create(b, loc,
                                    LLVM::LLVMPointerType::get(b.getContext()),
                                    address);
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
  void call(LLVM::LLVMFuncOp function, ValueRange args) {
    LLVM::CallOp::create(b, loc, function, args);
  }
  /// Runs `body` with the builder inside a loop over [lower, upper).
  void loop(Value lower, Value upper, function_ref<void(Value)> body) {
    auto forOp = scf::ForOp::create(b, loc, lower, upper, index(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(forOp.getBody()->getTerminator());
    body(forOp.getInductionVar());
  }
  void ifThenElse(Value condition, function_ref<void()> thenBody,
                  function_ref<void()> elseBody = nullptr) {
    auto ifOp = scf::IfOp::create(b, loc, condition,
                                  /*withElseRegion=*/static_cast<bool>(elseBody));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    thenBody();
    if (elseBody) {
      b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
      elseBody();
    }
  }

  OpBuilder &b;
  Location loc;
};

LogicalResult ExchangeLowering::lower(ExchangeOp op) {
  FailureOr<PlanTables *> maybeTables = tablesFor(op);
  if (failed(maybeTables))
    return failure();
  const PlanTables &tables = **maybeTables;
  const planner::DeviceSchedule &schedule = tables.schedule;
  MLIRContext *context = op.getContext();
  Type i64Type = IntegerType::get(context, 64);
  Type i32Type = IntegerType::get(context, 32);
  Type ptrType = LLVM::LLVMPointerType::get(context);
  Type voidType = LLVM::LLVMVoidType::get(context);

  LLVM::LLVMFuncOp mallocFn = declare("malloc", ptrType, {i64Type});
  LLVM::LLVMFuncOp freeFn = declare("free", voidType, {ptrType});
  LLVM::LLVMFuncOp groupStart =
      declare("polymesh_rt_group_start", i32Type, {ptrType, i64Type});
  LLVM::LLVMFuncOp groupEnd =
      declare("polymesh_rt_group_end", i32Type, {ptrType, i64Type});
  LLVM::LLVMFuncOp sendFn =
      declare("polymesh_rt_send", i32Type,
              {ptrType, i64Type, i64Type, ptrType, i64Type});
  LLVM::LLVMFuncOp recvFn =
      declare("polymesh_rt_recv", i32Type,
              {ptrType, i64Type, i64Type, ptrType, i64Type});
  LLVM::LLVMFuncOp broadcastFn = declare(
      "polymesh_rt_broadcast", i32Type,
      {ptrType, i64Type, ptrType, i64Type, i64Type, ptrType, ptrType, i64Type});

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
  int64_t numDevices = schedule.devices.size();

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

  Value stagingTable = e.global(tables.staging, {numDevices});
  Value stagingBytes = e.load(stagingTable, {position});
  // malloc(0) may return null; one byte keeps the pointer valid.
  Value stagingSize = arith::MaxSIOp::create(builder, loc, stagingBytes,
                                             e.i64(1));
  Value staging =
      LLVM::CallOp::create(builder, loc, mallocFn, ValueRange{stagingSize})
          .getResult();
  Value stagingAddress = LLVM::PtrToIntOp::create(builder, loc, i64Type, staging);

  int64_t outer = schedule.outerDims;
  int64_t copyColumns = kFixedCopyColumns + 3 * outer;
  Value copies, comms;
  // The globals' static row counts: read them back from the symbols.
  auto globalType = [&](const std::string &name) {
    return cast<MemRefType>(
        module.lookupSymbol<memref::GlobalOp>(name).getType());
  };
  if (!tables.copies.empty())
    copies = memref::GetGlobalOp::create(builder, loc,
                                         globalType(tables.copies),
                                         tables.copies);
  if (!tables.comms.empty())
    comms = memref::GetGlobalOp::create(builder, loc, globalType(tables.comms),
                                        tables.comms);
  Value ranges = memref::GetGlobalOp::create(
      builder, loc, globalType(tables.ranges), tables.ranges);

  auto baseOf = [&](Value space) {
    Value isSource = e.eq(space, 0);
    Value isResult = e.eq(space, 1);
    Value other =
        arith::SelectOp::create(builder, loc, isResult, resultAddress,
                                stagingAddress);
    return arith::SelectOp::create(builder, loc, isSource, sourceAddress,
                                   other)
        .getResult();
  };

  auto accumulate = [&](Value from, Value to, Value runBytes) {
    Value count = e.toIndex(arith::DivSIOp::create(builder, loc, runBytes,
                                                   e.i64(elementBytes)));
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

  for (auto [index, segment] : llvm::enumerate(schedule.segments)) {
    Value rangeRow = arith::AddIOp::create(
        builder, loc, e.index(index * numDevices), position);
    auto range = [&](int64_t c) {
      return e.toIndex(e.load(ranges, {rangeRow, e.index(c)}));
    };
    runCopies(range(kBeforeBegin), range(kBeforeEnd));
    if (comms) {
      Value begin = range(kCommBegin), end = range(kCommEnd);
      auto commColumn = [&](Value row, int64_t c) {
        return e.load(comms, {row, e.index(c)});
      };
      if (segment.method == planner::SegmentMethod::SendRecv) {
        Value any = arith::CmpIOp::create(builder, loc,
                                          arith::CmpIPredicate::slt, begin,
                                          end);
        e.ifThenElse(any, [&]() {
          e.call(groupStart, {runtime, device});
          e.loop(begin, end, [&](Value row) {
            Value peer = commColumn(row, kPeer);
            Value at = e.pointer(
                e.add(stagingAddress, commColumn(row, kStagingOffset)));
            Value bytes = commColumn(row, kBytes);
            e.ifThenElse(
                e.eq(commColumn(row, kCommKind), 0),
                [&]() { e.call(sendFn, {runtime, device, peer, at, bytes}); },
                [&]() { e.call(recvFn, {runtime, device, peer, at, bytes}); });
          });
          e.call(groupEnd, {runtime, device});
        });
      } else if (segment.method == planner::SegmentMethod::Broadcast) {
        int64_t numMembers = segment.members.size();
        Value members = e.pointer(
            e.address(e.global(tables.members[index], {numMembers})));
        e.loop(begin, end, [&](Value row) {
          Value at = e.pointer(
              e.add(stagingAddress, commColumn(row, kStagingOffset)));
          e.call(broadcastFn,
                 {runtime, device, members, e.i64(numMembers),
                  commColumn(row, kPeer), at, at, commColumn(row, kBytes)});
        });
      }
    }
    runCopies(range(kAfterBegin), range(kAfterEnd));
  }

  e.call(freeFn, {staging});
  if (scratch)
    e.call(freeFn, {scratch});
  Value tensor = bufferization::ToTensorOp::create(
      builder, loc, resultType, result, /*restrict=*/true, /*writable=*/true);
  op.getResult().replaceAllUsesWith(tensor);
  op.erase();
  return success();
}

LogicalResult ExchangeLowering::run() {
  for (auto function : module.getOps<func::FuncOp>()) {
    auto partitionOf = function->getAttrOfType<StringAttr>(
        PolymeshDialect::kPartitionOfAttrName);
    auto devices = function->getAttrOfType<DenseI64ArrayAttr>(
        PolymeshDialect::kDevicesAttrName);
    if (!partitionOf || !devices)
      continue;
    std::vector<int64_t> &all = devicesOf[partitionOf.getValue()];
    all.insert(all.end(), devices.asArrayRef().begin(),
               devices.asArrayRef().end());
  }
  for (auto &entry : devicesOf) {
    llvm::sort(entry.second);
    entry.second.erase(std::unique(entry.second.begin(), entry.second.end()),
                       entry.second.end());
  }

  SmallVector<ExchangeOp> exchanges;
  module.walk([&](ExchangeOp op) { exchanges.push_back(op); });
  for (ExchangeOp op : exchanges)
    if (failed(lower(op)))
      return failure();

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
      if (function->hasAttr(PolymeshDialect::kPartitionOfAttrName)) {
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
      op->emitError() << "cannot be lowered to the CPU; run "
                         "--polymesh-partition first";
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
            i, StringAttr::get(op->getContext(), PolymeshDialect::kLeafAttrName));
      for (unsigned i = 0, e = function.getNumArguments(); i < e; ++i)
        function.removeArgAttr(
            i,
            StringAttr::get(op->getContext(), PolymeshDialect::kShardingAttrName));
    }
    return WalkResult::advance();
  });
  return failure(leftover.wasInterrupted());
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
    ExchangeLowering lowering(module);
    if (failed(lowering.run()))
      return signalPassFailure();
    OpPassManager pm(ModuleOp::getOperationName());
    buildHostLoweringPipeline(pm);
    if (failed(runPipeline(pm, module)))
      return signalPassFailure();
  }
};

} // namespace
