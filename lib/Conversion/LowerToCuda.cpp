//===- LowerToCuda.cpp - Partitioned programs to PTX kernels and NCCL -----===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The CUDA target runs the same per-device schedule as the CPU target, from
// the same tables (ExchangeTables.h): the host loops over the calling
// device's rows and launches one strided-copy kernel per row on the device's
// stream; communication calls NCCL directly on communicators and the stream
// that the runtime hands out (ncclSend/ncclRecv in a group, or one
// ncclBroadcast, ncclAllGather, ncclAllReduce or ncclReduceScatter where
// the schedule has that collective). Kernels are generated here as
// gpu.func and compiled to PTX in-process (gpu -> NVVM -> NVPTX); the
// driver JIT-compiles the PTX when the module is loaded.
//
// Tensors live in GPU memory, so a partitioned function becomes a host
// function over device pointers: inputs, then one out-pointer per result.
// Only data movement is lowered for now: an op that computes would need its
// own kernels, and is refused with a diagnostic.
//
//===----------------------------------------------------------------------===//

#include "ExchangeTables.h"

#include "polymesh/Conversion/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/GPUCommon/GPUCommonPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHLOWERTOCUDA
#include "polymesh/Conversion/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;
using namespace polymesh::conversion;

namespace {

constexpr const char *kKernelModule = "polymesh_kernels";
/// NCCL's ncclUint8: every transfer but a sum is bytes.
constexpr int64_t kNcclUint8 = 1;
/// NCCL's ncclSum.
constexpr int64_t kNcclSum = 0;
constexpr int64_t kThreadsPerBlock = 256;
/// Grid-stride loops cover the rest; enough blocks to fill an H200.
constexpr int64_t kMaxBlocks = 4096;

enum class KernelKind { Copy, Zero, Accumulate };

/// The kernels of one module, created on first use.
class KernelBuilder {
public:
  KernelBuilder(ModuleOp module, StringRef chip, StringRef features)
      : module(module), chip(chip.str()), features(features.str()) {}

  /// A kernel over `outer` loops around runs of `unitBytes`-byte units (for
  /// Accumulate: elements of `element`). Arguments: src, dst (pointers),
  /// units per run, then per loop its count, src stride and dst stride
  /// (bytes), then the total number of units.
  gpu::GPUFuncOp get(KernelKind kind, int64_t outer, int64_t unitBytes,
                     Type element);

private:
  gpu::GPUModuleOp kernelModule();

  ModuleOp module;
  std::string chip, features;
  gpu::GPUModuleOp gpuModule;
  llvm::StringMap<gpu::GPUFuncOp> kernels;
};

gpu::GPUModuleOp KernelBuilder::kernelModule() {
  if (gpuModule)
    return gpuModule;
  MLIRContext *context = module.getContext();
  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  auto target = NVVM::NVVMTargetAttr::get(
      context, /*optLevel=*/2, "nvptx64-nvidia-cuda", chip, features);
  gpuModule = gpu::GPUModuleOp::create(builder, module.getLoc(), kKernelModule,
                                       builder.getArrayAttr({target}));
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  builder.getUnitAttr());
  return gpuModule;
}

gpu::GPUFuncOp KernelBuilder::get(KernelKind kind, int64_t outer,
                                  int64_t unitBytes, Type element) {
  std::string name;
  llvm::raw_string_ostream os(name);
  os << (kind == KernelKind::Copy   ? "copy"
         : kind == KernelKind::Zero ? "zero"
                                    : "accumulate")
     << "_outer" << outer << "_";
  if (kind == KernelKind::Accumulate)
    os << element;
  else
    os << "u" << unitBytes;
  if (gpu::GPUFuncOp existing = kernels.lookup(name))
    return existing;

  MLIRContext *context = module.getContext();
  OpBuilder builder = OpBuilder::atBlockEnd(kernelModule().getBody());
  Location loc = module.getLoc();
  Type ptr = LLVM::LLVMPointerType::get(context);
  Type i64 = builder.getI64Type();
  SmallVector<Type> args = {ptr, ptr, i64};
  for (int64_t i = 0; i < 3 * outer; ++i)
    args.push_back(i64);
  args.push_back(i64);
  auto kernel = gpu::GPUFuncOp::create(builder, loc, name,
                                       builder.getFunctionType(args, {}));
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                  builder.getUnitAttr());
  Block &entry = kernel.getBody().front();
  builder.setInsertionPointToStart(&entry);
  Emitter e(builder, loc);
  Value src = entry.getArgument(0), dst = entry.getArgument(1);
  Value runUnits = entry.getArgument(2);
  Value total = entry.getArgument(3 + 3 * outer);

  auto dim = [&](auto op) { return e.toI64(op); };
  Value blockId = dim(gpu::BlockIdOp::create(builder, loc, gpu::Dimension::x));
  Value blockDim =
      dim(gpu::BlockDimOp::create(builder, loc, gpu::Dimension::x));
  Value threadId =
      dim(gpu::ThreadIdOp::create(builder, loc, gpu::Dimension::x));
  Value gridDim = dim(gpu::GridDimOp::create(builder, loc, gpu::Dimension::x));
  Value first = e.add(e.mul(blockId, blockDim), threadId);
  Value stride = e.mul(gridDim, blockDim);
  auto forOp = scf::ForOp::create(builder, loc, first, total, stride);
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(forOp.getBody()->getTerminator());
    Value unit = forOp.getInductionVar();
    Value inRun = arith::RemUIOp::create(builder, loc, unit, runUnits);
    Value run = arith::DivUIOp::create(builder, loc, unit, runUnits);
    Value unitSize = e.i64(unitBytes);
    Value srcOffset = e.mul(inRun, unitSize);
    Value dstOffset = srcOffset;
    // Innermost loop first: peel each loop's index off the run number.
    for (int64_t d = outer - 1; d >= 0; --d) {
      Value count = entry.getArgument(3 + d);
      Value index = arith::RemUIOp::create(builder, loc, run, count);
      run = arith::DivUIOp::create(builder, loc, run, count);
      srcOffset =
          e.add(srcOffset, e.mul(index, entry.getArgument(3 + outer + d)));
      dstOffset =
          e.add(dstOffset, e.mul(index, entry.getArgument(3 + 2 * outer + d)));
    }
    auto at = [&](Value base, Value offset) {
      return LLVM::GEPOp::create(builder, loc, ptr, builder.getI8Type(), base,
                                 ValueRange{offset});
    };
    Value to = at(dst, dstOffset);
    switch (kind) {
    case KernelKind::Copy: {
      // 16-byte units move as one vector load and store.
      Type unitType = unitBytes == 16
                          ? Type(VectorType::get({4}, builder.getI32Type()))
                          : Type(builder.getIntegerType(8 * unitBytes));
      Value value = LLVM::LoadOp::create(builder, loc, unitType,
                                         at(src, srcOffset), unitBytes);
      LLVM::StoreOp::create(builder, loc, value, to, unitBytes);
      break;
    }
    case KernelKind::Zero: {
      Value zero = arith::ConstantIntOp::create(builder, loc, 0, 8);
      LLVM::StoreOp::create(builder, loc, zero, to);
      break;
    }
    case KernelKind::Accumulate: {
      Value a = LLVM::LoadOp::create(builder, loc, element, to);
      Value b = LLVM::LoadOp::create(builder, loc, element, at(src, srcOffset));
      Value sum;
      if (auto floatType = dyn_cast<FloatType>(element)) {
        if (floatType.getWidth() < 32) {
          Type f32 = builder.getF32Type();
          sum = arith::TruncFOp::create(
              builder, loc, element,
              arith::AddFOp::create(
                  builder, loc, arith::ExtFOp::create(builder, loc, f32, a),
                  arith::ExtFOp::create(builder, loc, f32, b)));
        } else {
          sum = arith::AddFOp::create(builder, loc, a, b);
        }
      } else if (element.isInteger(1)) {
        sum = arith::OrIOp::create(builder, loc, a, b);
      } else {
        sum = arith::AddIOp::create(builder, loc, a, b);
      }
      LLVM::StoreOp::create(builder, loc, sum, to);
      break;
    }
    }
  }
  gpu::ReturnOp::create(builder, loc);
  kernels[name] = kernel;
  return kernel;
}

class CudaLowering {
public:
  CudaLowering(ModuleOp module, StringRef chip, StringRef features)
      : module(module), tables(module), kernels(module, chip, features) {}
  LogicalResult run();

private:
  LogicalResult lowerFunction(func::FuncOp function);
  LogicalResult lowerExchange(ExchangeOp op, OpBuilder &builder, Value src,
                              Value dst);
  LLVM::LLVMFuncOp fn(StringRef name, Type result, ArrayRef<Type> args) {
    return declareFunction(module, name, result, args);
  }

  ModuleOp module;
  PlanTableBuilder tables;
  KernelBuilder kernels;
  // Per function being lowered.
  Value runtime, device, position, stream, streamToken, worldComm;
};

int64_t byteSize(RankedTensorType type, int64_t elementBytes) {
  return type.getNumElements() * elementBytes;
}

int64_t elementBytesOf(Type element) {
  return std::max<int64_t>(1, (element.getIntOrFloatBitWidth() + 7) / 8);
}

LogicalResult CudaLowering::lowerExchange(ExchangeOp op, OpBuilder &builder,
                                          Value src, Value dst) {
  FailureOr<PlanTables *> maybeTables = tables.tablesFor(op);
  if (failed(maybeTables))
    return failure();
  const PlanTables &plan = **maybeTables;
  const planner::DeviceSchedule &schedule = plan.schedule;
  MLIRContext *context = op.getContext();
  Location loc = op.getLoc();
  Emitter e(builder, loc);
  Type ptrType = LLVM::LLVMPointerType::get(context);
  Type i64Type = builder.getI64Type();
  Type i32Type = builder.getI32Type();
  Type voidType = LLVM::LLVMVoidType::get(context);
  auto sourceType = cast<RankedTensorType>(op.getInput().getType());
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  Type element = sourceType.getElementType();
  int64_t numDevices = schedule.devices.size();
  int64_t outer = schedule.outerDims;

  LLVM::LLVMFuncOp alloc =
      fn("polymesh_rt_device_alloc", ptrType, {ptrType, i64Type, i64Type});
  LLVM::LLVMFuncOp release =
      fn("polymesh_rt_device_free", voidType, {ptrType, i64Type, ptrType});
  LLVM::LLVMFuncOp copy = fn("polymesh_rt_device_copy", i32Type,
                             {ptrType, i64Type, ptrType, ptrType, i64Type});
  LLVM::LLVMFuncOp commFn = fn("polymesh_rt_nccl_comm", ptrType,
                               {ptrType, i64Type, ptrType, i64Type});
  LLVM::LLVMFuncOp groupStart = fn("ncclGroupStart", i32Type, {});
  LLVM::LLVMFuncOp groupEnd = fn("ncclGroupEnd", i32Type, {});
  LLVM::LLVMFuncOp sendFn =
      fn("ncclSend", i32Type,
         {ptrType, i64Type, i32Type, i32Type, ptrType, ptrType});
  LLVM::LLVMFuncOp recvFn =
      fn("ncclRecv", i32Type,
         {ptrType, i64Type, i32Type, i32Type, ptrType, ptrType});
  LLVM::LLVMFuncOp broadcastFn =
      fn("ncclBroadcast", i32Type,
         {ptrType, ptrType, i64Type, i32Type, i32Type, ptrType, ptrType});
  LLVM::LLVMFuncOp allGatherFn =
      fn("ncclAllGather", i32Type,
         {ptrType, ptrType, i64Type, i32Type, ptrType, ptrType});
  LLVM::LLVMFuncOp allReduceFn =
      fn("ncclAllReduce", i32Type,
         {ptrType, ptrType, i64Type, i32Type, i32Type, ptrType, ptrType});
  LLVM::LLVMFuncOp reduceScatterFn =
      fn("ncclReduceScatter", i32Type,
         {ptrType, ptrType, i64Type, i32Type, i32Type, ptrType, ptrType});

  auto call = [&](LLVM::LLVMFuncOp function, ValueRange args) {
    return LLVM::CallOp::create(builder, loc, function, args);
  };
  auto toPtrInt = [&](Value pointer) {
    return LLVM::PtrToIntOp::create(builder, loc, i64Type, pointer).getResult();
  };
  Value sourceAddress = toPtrInt(src);
  Value resultAddress = toPtrInt(dst);
  int64_t sourceBytes = byteSize(sourceType, schedule.elementBytes);
  int64_t resultBytes = byteSize(resultType, schedule.elementBytes);
  Value scratch;
  if (schedule.writesSource && sourceBytes > 0) {
    scratch = call(alloc, {runtime, device, e.i64(sourceBytes)}).getResult();
    call(copy, {runtime, device, scratch, src, e.i64(sourceBytes)});
    sourceAddress = toPtrInt(scratch);
  }

  Value stagingBytes = e.load(e.global(plan.staging, {numDevices}), {position});
  Value staging =
      call(alloc,
           {runtime, device,
            arith::MaxSIOp::create(builder, loc, stagingBytes, e.i64(1))})
          .getResult();
  Value stagingAddress = toPtrInt(staging);

  Value copies, comms;
  if (!plan.copies.empty())
    copies = memref::GetGlobalOp::create(
        builder, loc, tables.globalType(plan.copies), plan.copies);
  if (!plan.comms.empty())
    comms = memref::GetGlobalOp::create(
        builder, loc, tables.globalType(plan.comms), plan.comms);
  Value ranges = memref::GetGlobalOp::create(
      builder, loc, tables.globalType(plan.ranges), plan.ranges);

  auto baseOf = [&](Value space) {
    Value other = arith::SelectOp::create(builder, loc, e.eq(space, 1),
                                          resultAddress, stagingAddress);
    return arith::SelectOp::create(builder, loc, e.eq(space, 0), sourceAddress,
                                   other)
        .getResult();
  };
  auto launch = [&](gpu::GPUFuncOp kernel, Value from, Value to, Value runUnits,
                    ArrayRef<Value> loops, Value total) {
    SmallVector<Value> args = {e.pointer(from), e.pointer(to), runUnits};
    args.append(loops.begin(), loops.end());
    args.push_back(total);
    Value perBlock = e.i64(kThreadsPerBlock);
    Value blocks = arith::MinSIOp::create(
        builder, loc,
        arith::DivSIOp::create(
            builder, loc, e.add(total, e.i64(kThreadsPerBlock - 1)), perBlock),
        e.i64(kMaxBlocks));
    Value one = e.index(1);
    gpu::LaunchFuncOp::create(
        builder, loc,
        SymbolRefAttr::get(builder.getStringAttr(kKernelModule),
                           {FlatSymbolRefAttr::get(kernel.getNameAttr())}),
        gpu::KernelDim3{e.toIndex(blocks), one, one},
        gpu::KernelDim3{e.index(kThreadsPerBlock), one, one},
        /*dynamicSharedMemorySize=*/Value(), args,
        gpu::AsyncTokenType::get(builder.getContext()),
        ValueRange{streamToken});
  };

  if (schedule.accumulatesIntoDestination && resultBytes > 0) {
    // The plan adds into its destination: start from zeros (one run).
    Value bytes = e.i64(resultBytes);
    launch(kernels.get(KernelKind::Zero, /*outer=*/0, 1, Type()), resultAddress,
           resultAddress, bytes, {}, bytes);
  }

  auto runCopies = [&](Value begin, Value end) {
    if (!copies)
      return;
    e.loop(begin, end, [&](Value row) {
      auto column = [&](int64_t c) {
        return e.load(copies, {row, e.index(c)});
      };
      Value kind = column(kKind);
      Value srcOffset = column(kSrcOffset), dstOffset = column(kDstOffset);
      Value from = e.add(baseOf(column(kSrcSpace)), srcOffset);
      Value to = e.add(baseOf(column(kDstSpace)), dstOffset);
      Value runBytes = column(kRunBytes);
      SmallVector<Value> loops;
      Value runs = e.i64(1);
      for (int64_t c = 0; c < 3 * outer; ++c)
        loops.push_back(column(kFixedCopyColumns + c));
      for (int64_t d = 0; d < outer; ++d)
        runs = e.mul(runs, loops[d]);
      auto launchUnits = [&](KernelKind kernelKind, int64_t unitBytes,
                             Type type) {
        Value runUnits =
            arith::DivSIOp::create(builder, loc, runBytes, e.i64(unitBytes));
        launch(kernels.get(kernelKind, outer, unitBytes, type), from, to,
               runUnits, loops, e.mul(runs, runUnits));
      };
      auto copyRow = [&]() {
        // 16-byte units where every offset, stride and the run allow it.
        Value bits = arith::OrIOp::create(builder, loc, from, to);
        bits = arith::OrIOp::create(builder, loc, bits, runBytes);
        for (int64_t c = outer; c < 3 * outer; ++c)
          bits = arith::OrIOp::create(builder, loc, bits, loops[c]);
        Value aligned =
            e.eq(arith::AndIOp::create(builder, loc, bits, e.i64(15)), 0);
        e.ifThenElse(
            aligned, [&]() { launchUnits(KernelKind::Copy, 16, Type()); },
            [&]() { launchUnits(KernelKind::Copy, 1, Type()); });
      };
      if (!plan.hasAccumulate && !plan.hasZero)
        return copyRow();
      e.ifThenElse(e.eq(kind, 0), copyRow, [&]() {
        auto zero = [&]() { launchUnits(KernelKind::Zero, 1, Type()); };
        auto add = [&]() {
          launchUnits(KernelKind::Accumulate, elementBytesOf(element), element);
        };
        if (!plan.hasAccumulate)
          return zero();
        if (!plan.hasZero)
          return add();
        e.ifThenElse(e.eq(kind, 2), zero, add);
      });
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
      auto rankOf = [&](Value row) {
        return arith::TruncIOp::create(builder, loc, i32Type,
                                       commColumn(row, kPeerRank))
            .getResult();
      };
      Value uint8 = arith::ConstantIntOp::create(builder, loc, kNcclUint8, 32);
      if (segment.method == planner::SegmentMethod::SendRecv) {
        Value any = arith::CmpIOp::create(
            builder, loc, arith::CmpIPredicate::slt, begin, end);
        e.ifThenElse(any, [&]() {
          call(groupStart, {});
          e.loop(begin, end, [&](Value row) {
            Value at = e.pointer(e.add(baseOf(commColumn(row, kSpace)),
                                       commColumn(row, kStagingOffset)));
            Value bytes = commColumn(row, kBytes);
            Value rank = rankOf(row);
            e.ifThenElse(
                e.eq(commColumn(row, kCommKind), 0),
                [&]() {
                  call(sendFn, {at, bytes, uint8, rank, worldComm, stream});
                },
                [&]() {
                  call(recvFn, {at, bytes, uint8, rank, worldComm, stream});
                });
          });
          call(groupEnd, {});
        });
      } else if (segment.method == planner::SegmentMethod::Broadcast) {
        int64_t numMembers = segment.members.size();
        Value members =
            e.pointer(e.address(e.global(plan.members[index], {numMembers})));
        e.loop(begin, end, [&](Value row) {
          Value comm =
              call(commFn, {runtime, device, members, e.i64(numMembers)})
                  .getResult();
          Value at = e.pointer(e.add(baseOf(commColumn(row, kSpace)),
                                     commColumn(row, kStagingOffset)));
          call(broadcastFn, {at, at, commColumn(row, kBytes), uint8,
                             rankOf(row), comm, stream});
        });
      } else if (isCollective(segment.method)) {
        // NCCL's in-place forms on the members' communicator: the rank
        // column is the caller's index among the members. All-gather moves
        // bytes; sums use the element type.
        int64_t numMembers = segment.members.size();
        Value members =
            e.pointer(e.address(e.global(plan.members[index], {numMembers})));
        Value dtype = arith::ConstantIntOp::create(
            builder, loc, ncclSumDtype(element).value_or(-1), 32);
        Value sum = arith::ConstantIntOp::create(builder, loc, kNcclSum, 32);
        e.loop(begin, end, [&](Value row) {
          Value comm =
              call(commFn, {runtime, device, members, e.i64(numMembers)})
                  .getResult();
          Value at = e.add(baseOf(commColumn(row, kSpace)),
                           commColumn(row, kStagingOffset));
          Value bytes = commColumn(row, kBytes);
          Value own = e.add(at, e.mul(commColumn(row, kPeerRank), bytes));
          Value count = arith::DivSIOp::create(builder, loc, bytes,
                                               e.i64(schedule.elementBytes));
          switch (segment.method) {
          case planner::SegmentMethod::AllGather:
            call(allGatherFn,
                 {e.pointer(own), e.pointer(at), bytes, uint8, comm, stream});
            break;
          case planner::SegmentMethod::AllReduce:
            call(allReduceFn, {e.pointer(at), e.pointer(at), count, dtype, sum,
                               comm, stream});
            break;
          default:
            call(reduceScatterFn, {e.pointer(at), e.pointer(own), count, dtype,
                                   sum, comm, stream});
            break;
          }
        });
      }
    }
    runCopies(range(kAfterBegin), range(kAfterEnd));
  }
  call(release, {runtime, device, staging});
  if (scratch)
    call(release, {runtime, device, scratch});
  return success();
}

LogicalResult CudaLowering::lowerFunction(func::FuncOp function) {
  MLIRContext *context = function.getContext();
  Type ptrType = LLVM::LLVMPointerType::get(context);
  Type i64Type = IntegerType::get(context, 64);
  Type i32Type = IntegerType::get(context, 32);
  Type voidType = LLVM::LLVMVoidType::get(context);
  Block &body = function.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (Operation &op : body) {
    if (isa<ExchangeOp, func::ReturnOp>(op))
      continue;
    return op.emitError()
           << "cannot be lowered to CUDA: the cuda target lowers data "
              "movement only for now (computation would need its own "
              "kernels)";
  }
  if (function.getNumArguments() < 3)
    return function.emitError() << "is not a partitioned function";

  // (runtime, device, position, input pointers..., result pointers...).
  SmallVector<Type> args = {ptrType, i64Type, IndexType::get(context)};
  unsigned numInputs = function.getNumArguments() - 3;
  unsigned numResults = function.getNumResults();
  for (unsigned i = 0; i < numInputs + numResults; ++i)
    args.push_back(ptrType);
  OpBuilder builder(function);
  auto host =
      func::FuncOp::create(builder, function.getLoc(), function.getSymName(),
                           builder.getFunctionType(args, {}));
  host.setVisibility(function.getVisibility());
  for (NamedAttribute attr : function->getDiscardableAttrs())
    host->setAttr(attr.getName(), attr.getValue());
  Block *entry = host.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  Location loc = function.getLoc();
  Emitter e(builder, loc);
  runtime = entry->getArgument(0);
  device = entry->getArgument(1);
  position = entry->getArgument(2);

  LLVM::LLVMFuncOp streamFn =
      fn("polymesh_rt_cuda_stream", ptrType, {ptrType, i64Type});
  LLVM::LLVMFuncOp commFn = fn("polymesh_rt_nccl_comm", ptrType,
                               {ptrType, i64Type, ptrType, i64Type});
  LLVM::LLVMFuncOp alloc =
      fn("polymesh_rt_device_alloc", ptrType, {ptrType, i64Type, i64Type});
  LLVM::LLVMFuncOp release =
      fn("polymesh_rt_device_free", voidType, {ptrType, i64Type, ptrType});
  LLVM::LLVMFuncOp copy = fn("polymesh_rt_device_copy", i32Type,
                             {ptrType, i64Type, ptrType, ptrType, i64Type});
  LLVM::LLVMFuncOp synchronize =
      fn("polymesh_rt_device_synchronize", i32Type, {ptrType, i64Type});
  stream =
      LLVM::CallOp::create(builder, loc, streamFn, ValueRange{runtime, device})
          .getResult();
  // Launches depend on the device's stream: gpu-to-llvm turns an async
  // token into the stream it stands for, so kernels run in order with the
  // NCCL calls on that stream.
  streamToken = UnrealizedConversionCastOp::create(
                    builder, loc, gpu::AsyncTokenType::get(context), stream)
                    .getResult(0);
  // The world communicator: ranks are positions in the program's devices.
  const std::vector<int64_t> &devices = tables.devicesOf(&body.front());
  std::string devicesTable = tables.addGlobal(
      ("__polymesh_" + function.getSymName() + "_devices").str(),
      {static_cast<int64_t>(devices.size())}, devices);
  Value devicesPointer = e.pointer(e.address(
      e.global(devicesTable, {static_cast<int64_t>(devices.size())})));
  worldComm = LLVM::CallOp::create(builder, loc, commFn,
                                   ValueRange{runtime, device, devicesPointer,
                                              e.i64(devices.size())})
                  .getResult();

  llvm::DenseMap<Value, Value> pointerOf;
  for (unsigned i = 0; i < numInputs; ++i)
    pointerOf[function.getArgument(3 + i)] = entry->getArgument(3 + i);
  auto outPointer = [&](unsigned result) {
    return entry->getArgument(3 + numInputs + result);
  };
  SmallVector<Value> temporaries;
  llvm::DenseSet<unsigned> written;
  for (Operation &op : body) {
    auto exchange = dyn_cast<ExchangeOp>(op);
    if (!exchange)
      continue;
    auto resultType = cast<RankedTensorType>(exchange.getType());
    int64_t bytes =
        byteSize(resultType, elementBytesOf(resultType.getElementType()));
    // Write straight into the caller's buffer when the value is returned
    // once and used nowhere else.
    Value dst;
    Value result = exchange.getResult();
    if (result.hasOneUse() && result.getUses().begin()->getOwner() == ret) {
      unsigned index = result.getUses().begin()->getOperandNumber();
      dst = outPointer(index);
      written.insert(index);
    } else {
      dst = LLVM::CallOp::create(builder, loc, alloc,
                                 ValueRange{runtime, device, e.i64(bytes)})
                .getResult();
      temporaries.push_back(dst);
    }
    if (failed(lowerExchange(exchange, builder,
                             pointerOf.lookup(exchange.getInput()), dst)))
      return failure();
    pointerOf[result] = dst;
  }
  for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
    if (written.count(index))
      continue;
    auto type = cast<RankedTensorType>(value.getType());
    int64_t bytes = byteSize(type, elementBytesOf(type.getElementType()));
    if (bytes > 0)
      LLVM::CallOp::create(builder, loc, copy,
                           ValueRange{runtime, device, outPointer(index),
                                      pointerOf.lookup(value), e.i64(bytes)});
  }
  // Results are complete when the function returns.
  LLVM::CallOp::create(builder, loc, synchronize, ValueRange{runtime, device});
  for (Value temporary : temporaries)
    LLVM::CallOp::create(builder, loc, release,
                         ValueRange{runtime, device, temporary});
  func::ReturnOp::create(builder, loc);
  host->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                builder.getUnitAttr());
  function.erase();
  return success();
}

LogicalResult CudaLowering::run() {
  SmallVector<func::FuncOp> functions;
  for (auto function : module.getOps<func::FuncOp>())
    if (function->hasAttr(PolymeshDialect::kPartitionOfAttrName))
      functions.push_back(function);
  for (func::FuncOp function : functions)
    if (failed(lowerFunction(function)))
      return failure();
  return finishPartitionedModule(module, /*readOnlyArguments=*/false);
}

struct PolymeshLowerToCudaPass
    : public polymesh::impl::PolymeshLowerToCudaBase<PolymeshLowerToCudaPass> {
  using Base::Base;

  /// Host code and kernels to the LLVM dialect, kernels to PTX.
  static void buildPipeline(OpPassManager &pm) {
    pm.addPass(createSCFToControlFlowPass());
    pm.addNestedPass<gpu::GPUModuleOp>(createConvertGpuOpsToNVVMOps());
    pm.addPass(createFinalizeMemRefToLLVMConversionPass());
    pm.addPass(createArithToLLVMConversionPass());
    pm.addPass(createConvertControlFlowToLLVMPass());
    pm.addPass(createConvertFuncToLLVMPass());
    pm.addPass(createConvertIndexToLLVMPass());
    pm.addPass(createGpuToLLVMConversionPass());
    pm.addPass(createReconcileUnrealizedCastsPass());
    GpuModuleToBinaryPassOptions binary;
    binary.compilationTarget = "isa";
    pm.addPass(createGpuModuleToBinaryPass(binary));
  }

  void getDependentDialects(DialectRegistry &registry) const final {
    registerCudaLoweringDialects(registry);
    // The nested pipeline's dialects must be loaded before it runs.
    OpPassManager pm(ModuleOp::getOperationName());
    buildPipeline(pm);
    pm.getDependentDialects(registry);
  }

  void runOnOperation() final {
    ModuleOp module = getOperation();
    CudaLowering lowering(module, chip, features);
    if (failed(lowering.run()))
      return signalPassFailure();
    if (failed(mlir::verify(module)))
      return signalPassFailure();
    OpPassManager pm(ModuleOp::getOperationName());
    buildPipeline(pm);
    if (failed(runPipeline(pm, module)))
      return signalPassFailure();
    dropTimings(module);
  }

  /// The serializer records how long it took in each object's properties;
  /// drop those, so that the same input always gives the same output.
  static void dropTimings(ModuleOp module) {
    for (auto binary : module.getOps<gpu::BinaryOp>()) {
      SmallVector<Attribute> objects;
      for (Attribute attr : binary.getObjects()) {
        auto object = dyn_cast<gpu::ObjectAttr>(attr);
        if (!object || !object.getProperties()) {
          objects.push_back(attr);
          continue;
        }
        NamedAttrList kept;
        for (NamedAttribute property : object.getProperties())
          if (!property.getName().getValue().ends_with("TimeInMs"))
            kept.push_back(property);
        objects.push_back(gpu::ObjectAttr::get(
            module.getContext(), object.getTarget(), object.getFormat(),
            object.getObject(), kept.getDictionary(module.getContext()),
            object.getKernels()));
      }
      binary.setObjectsAttr(ArrayAttr::get(module.getContext(), objects));
    }
  }
};

} // namespace

void polymesh::registerCudaLoweringDialects(DialectRegistry &registry) {
  registry.insert<arith::ArithDialect, func::FuncDialect, gpu::GPUDialect,
                  LLVM::LLVMDialect, memref::MemRefDialect, NVVM::NVVMDialect,
                  scf::SCFDialect>();
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  // Embeds a gpu.binary's PTX in the host LLVM IR and loads it at run time.
  gpu::registerOffloadingLLVMTranslationInterfaceExternalModels(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
}
