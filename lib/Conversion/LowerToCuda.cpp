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
#include "RuntimeFunctions.h"

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Runtime/NcclAbi.h"

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
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"

#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"

#include <tuple>

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHLOWERTOCUDA
#include "polymesh/Conversion/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;
using namespace polymesh::conversion;

namespace {

constexpr const char *kKernelModule = "polymesh_kernels";
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
  /// (bytes), then the total number of units, which must be the product of
  /// the counts and the units per run.
  gpu::GPUFuncOp get(KernelKind kind, int64_t outer, int64_t unitBytes,
                     Type element);
  /// `fill_u<elementBytes>`: writes the low `elementBytes` bytes of a
  /// pattern into `count` consecutive elements. Arguments: dst, pattern
  /// (i64), count.
  gpu::GPUFuncOp getFill(int64_t elementBytes);

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
    Value unitSize = e.i64(unitBytes);
    // Integer division is the costly part of a memory-bound kernel: none
    // without loops (one run: total == units per run), and none for the
    // outermost loop, whose index is what is left of the run number.
    Value inRun =
        outer == 0
            ? unit
            : arith::RemUIOp::create(builder, loc, unit, runUnits).getResult();
    Value run;
    if (outer > 0)
      run = arith::DivUIOp::create(builder, loc, unit, runUnits);
    Value srcOffset = e.mul(inRun, unitSize);
    Value dstOffset = srcOffset;
    // Innermost loop first: peel each loop's index off the run number.
    for (int64_t d = outer - 1; d >= 0; --d) {
      Value count = entry.getArgument(3 + d);
      Value index = run;
      if (d > 0) {
        index = arith::RemUIOp::create(builder, loc, run, count);
        run = arith::DivUIOp::create(builder, loc, run, count);
      }
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

gpu::GPUFuncOp KernelBuilder::getFill(int64_t elementBytes) {
  std::string name = "fill_u" + std::to_string(elementBytes);
  if (gpu::GPUFuncOp existing = kernels.lookup(name))
    return existing;
  OpBuilder builder = OpBuilder::atBlockEnd(kernelModule().getBody());
  Location loc = module.getLoc();
  Type ptr = LLVM::LLVMPointerType::get(module.getContext());
  Type i64 = builder.getI64Type();
  auto kernel = gpu::GPUFuncOp::create(
      builder, loc, name, builder.getFunctionType({ptr, i64, i64}, {}));
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                  builder.getUnitAttr());
  Block &entry = kernel.getBody().front();
  builder.setInsertionPointToStart(&entry);
  Emitter e(builder, loc);
  Value dst = entry.getArgument(0), pattern = entry.getArgument(1);
  Value count = entry.getArgument(2);
  auto dim = [&](auto op) { return e.toI64(op); };
  Value first = e.add(
      e.mul(dim(gpu::BlockIdOp::create(builder, loc, gpu::Dimension::x)),
            dim(gpu::BlockDimOp::create(builder, loc, gpu::Dimension::x))),
      dim(gpu::ThreadIdOp::create(builder, loc, gpu::Dimension::x)));
  Value stride =
      e.mul(dim(gpu::GridDimOp::create(builder, loc, gpu::Dimension::x)),
            dim(gpu::BlockDimOp::create(builder, loc, gpu::Dimension::x)));
  Type unit = builder.getIntegerType(8 * elementBytes);
  Value value =
      elementBytes == 8
          ? pattern
          : arith::TruncIOp::create(builder, loc, unit, pattern).getResult();
  auto forOp = scf::ForOp::create(builder, loc, first, count, stride);
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(forOp.getBody()->getTerminator());
    Value at = LLVM::GEPOp::create(
        builder, loc, ptr, builder.getI8Type(), dst,
        ValueRange{e.mul(forOp.getInductionVar(), e.i64(elementBytes))});
    LLVM::StoreOp::create(builder, loc, value, at, elementBytes);
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
  LLVM::LLVMFuncOp fn(RuntimeFunction function) {
    return getOrDeclare(module, function);
  }
  /// The address of a NUL-terminated constant string, one global per text.
  Value cString(OpBuilder &builder, Location loc, StringRef text);
  /// Passes an NCCL call's result to polymesh_rt_nccl_check: the runtime's
  /// communicators are non-blocking, so ncclInProgress must be waited out
  /// before the next call, and errors must reach the runtime.
  void checkNccl(OpBuilder &builder, Location loc, Value result, Value comm,
                 StringRef call);
  /// Launches `kernel` with `args` on the device's stream, enough 256-thread
  /// blocks (at most kMaxBlocks) for `units` (i64) work items: the kernels
  /// loop over the rest with a grid stride.
  void launch(OpBuilder &builder, Location loc, gpu::GPUFuncOp kernel,
              Value units, ValueRange args);
  /// Fills `bytes / elementBytes` elements at `dst` with `pattern`.
  void fill(OpBuilder &builder, Location loc, Value dst, int64_t bytes,
            int64_t elementBytes, uint64_t pattern);

  ModuleOp module;
  PlanTableBuilder tables;
  KernelBuilder kernels;
  // Per function being lowered.
  Value runtime, device, position, stream, streamToken, worldComm;
  /// Host images of non-splat constants, numbered per module.
  int64_t constantCount = 0;
};

int64_t byteSize(RankedTensorType type, int64_t elementBytes) {
  return type.getNumElements() * elementBytes;
}

Value CudaLowering::cString(OpBuilder &builder, Location loc, StringRef text) {
  std::string name = ("__polymesh_text_" + text).str();
  auto global = module.lookupSymbol<LLVM::GlobalOp>(name);
  if (!global) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(module.getBody());
    std::string value = text.str();
    value.push_back('\0');
    auto type = LLVM::LLVMArrayType::get(builder.getI8Type(), value.size());
    global = LLVM::GlobalOp::create(builder, loc, type, /*isConstant=*/true,
                                    LLVM::Linkage::Private, name,
                                    builder.getStringAttr(value));
  }
  return LLVM::AddressOfOp::create(builder, loc, global);
}

void CudaLowering::checkNccl(OpBuilder &builder, Location loc, Value result,
                             Value comm, StringRef call) {
  LLVM::LLVMFuncOp check = fn(RuntimeFunction::NcclCheck);
  LLVM::CallOp::create(
      builder, loc, check,
      ValueRange{runtime, device, comm, result, cString(builder, loc, call)});
}

void CudaLowering::launch(OpBuilder &builder, Location loc,
                          gpu::GPUFuncOp kernel, Value units, ValueRange args) {
  Emitter e(builder, loc);
  Value blocks = builder.createOrFold<arith::MinSIOp>(
      loc,
      builder.createOrFold<arith::DivSIOp>(
          loc,
          builder.createOrFold<arith::AddIOp>(loc, units,
                                              e.i64(kThreadsPerBlock - 1)),
          e.i64(kThreadsPerBlock)),
      e.i64(kMaxBlocks));
  Value one = e.index(1);
  gpu::LaunchFuncOp::create(
      builder, loc,
      SymbolRefAttr::get(builder.getStringAttr(kKernelModule),
                         {FlatSymbolRefAttr::get(kernel.getNameAttr())}),
      gpu::KernelDim3{e.toIndex(blocks), one, one},
      gpu::KernelDim3{e.index(kThreadsPerBlock), one, one},
      /*dynamicSharedMemorySize=*/Value(), args,
      gpu::AsyncTokenType::get(builder.getContext()), ValueRange{streamToken});
}

void CudaLowering::fill(OpBuilder &builder, Location loc, Value dst,
                        int64_t bytes, int64_t elementBytes, uint64_t pattern) {
  int64_t count = bytes / elementBytes;
  if (count <= 0)
    return;
  Emitter e(builder, loc);
  launch(builder, loc, kernels.getFill(elementBytes), e.i64(count),
         {dst, e.i64(static_cast<int64_t>(pattern)), e.i64(count)});
}

/// The bit pattern of `value` in memory (little-endian, element-sized; i1
/// as one byte).
uint64_t bitsOf(Attribute value) {
  if (auto integer = dyn_cast<IntegerAttr>(value))
    return integer.getValue().getZExtValue() &
           (integer.getType().isInteger(1) ? 1 : ~uint64_t(0));
  if (auto floating = dyn_cast<FloatAttr>(value))
    return floating.getValue().bitcastToAPInt().getZExtValue();
  return 0;
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
  const ScheduleShape &schedule = plan.schedule;
  Location loc = op.getLoc();
  Emitter e(builder, loc);
  Type i64Type = builder.getI64Type();
  Type i32Type = builder.getI32Type();
  auto sourceType = cast<RankedTensorType>(op.getInput().getType());
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  Type element = sourceType.getElementType();
  int64_t numDevices = schedule.numDevices;
  int64_t outer = schedule.outerDims;

  LLVM::LLVMFuncOp alloc = fn(RuntimeFunction::DeviceAlloc);
  LLVM::LLVMFuncOp release = fn(RuntimeFunction::DeviceFree);
  LLVM::LLVMFuncOp copy = fn(RuntimeFunction::DeviceCopy);
  LLVM::LLVMFuncOp commFn = fn(RuntimeFunction::NcclComm);
  LLVM::LLVMFuncOp groupStart = fn(RuntimeFunction::NcclGroupStart);
  LLVM::LLVMFuncOp groupEnd = fn(RuntimeFunction::NcclGroupEnd);
  LLVM::LLVMFuncOp sendFn = fn(RuntimeFunction::NcclSend);
  LLVM::LLVMFuncOp recvFn = fn(RuntimeFunction::NcclRecv);
  LLVM::LLVMFuncOp broadcastFn = fn(RuntimeFunction::NcclBroadcast);
  LLVM::LLVMFuncOp allGatherFn = fn(RuntimeFunction::NcclAllGather);
  LLVM::LLVMFuncOp allReduceFn = fn(RuntimeFunction::NcclAllReduce);
  LLVM::LLVMFuncOp reduceScatterFn = fn(RuntimeFunction::NcclReduceScatter);

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

  // The device's block of rows (ExchangeTables.h): every table below but
  // this one is indexed by block.
  Value block =
      e.toIndex(e.load(e.global(plan.blocks, {numDevices}), {position}));
  Value stagingBytes =
      e.load(e.global(plan.staging, {plan.numBlocks}), {block});
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
  // Every collective group of every block, relative to the device; a
  // segment's range row says where the device's own group is, and the
  // group is written out as device ids before each communicator lookup.
  Value members, groupBuffer;
  if (!plan.members.empty()) {
    members = memref::GetGlobalOp::create(
        builder, loc, tables.globalType(plan.members), plan.members);
    groupBuffer = tables.groupBuffer(builder, plan.maxGroupSize);
  }

  auto baseOf = [&](Value space) {
    Value other = arith::SelectOp::create(builder, loc, e.eq(space, 1),
                                          resultAddress, stagingAddress);
    return arith::SelectOp::create(builder, loc, e.eq(space, 0), sourceAddress,
                                   other)
        .getResult();
  };
  auto launchRow = [&](gpu::GPUFuncOp kernel, Value from, Value to,
                       Value runUnits, ArrayRef<Value> loops, Value total) {
    SmallVector<Value> args = {e.pointer(from), e.pointer(to), runUnits};
    args.append(loops.begin(), loops.end());
    args.push_back(total);
    launch(builder, loc, kernel, total, args);
  };

  if (schedule.accumulatesIntoDestination && resultBytes > 0) {
    // The plan adds into its destination: start from zeros (one run).
    Value bytes = e.i64(resultBytes);
    launchRow(kernels.get(KernelKind::Zero, /*outer=*/0, 1, Type()),
              resultAddress, resultAddress, bytes, {}, bytes);
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
        launchRow(kernels.get(kernelKind, outer, unitBytes, type), from, to,
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

  for (auto [index, method] : llvm::enumerate(schedule.segments)) {
    Value rangeRow = arith::AddIOp::create(
        builder, loc, e.index(index * plan.numBlocks), block);
    auto range = [&](int64_t c) {
      return e.toIndex(e.load(ranges, {rangeRow, e.index(c)}));
    };
    auto callerGroup = [&]() {
      return e.group(ranges, rangeRow, members, device, groupBuffer);
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
      Value uint8 =
          arith::ConstantIntOp::create(builder, loc, nccl_abi::kUint8, 32);
      if (method == planner::SegmentMethod::SendRecv) {
        Value any = arith::CmpIOp::create(
            builder, loc, arith::CmpIPredicate::slt, begin, end);
        e.ifThenElse(any, [&]() {
          call(groupStart, {});
          e.loop(begin, end, [&](Value row) {
            Value at = e.pointer(e.add(baseOf(commColumn(row, kSpace)),
                                       commColumn(row, kStagingOffset)));
            Value bytes = commColumn(row, kBytes);
            // Send/recv ranks are relative to the caller's position.
            Value rank = arith::TruncIOp::create(
                builder, loc, i32Type,
                e.add(e.toI64(position), commColumn(row, kPeerRank)));
            e.ifThenElse(
                e.eq(commColumn(row, kCommKind), 0),
                [&]() {
                  checkNccl(
                      builder, loc,
                      call(sendFn, {at, bytes, uint8, rank, worldComm, stream})
                          .getResult(),
                      worldComm, "ncclSend");
                },
                [&]() {
                  checkNccl(
                      builder, loc,
                      call(recvFn, {at, bytes, uint8, rank, worldComm, stream})
                          .getResult(),
                      worldComm, "ncclRecv");
                });
          });
          checkNccl(builder, loc, call(groupEnd, {}).getResult(), worldComm,
                    "ncclGroupEnd");
        });
      } else if (method == planner::SegmentMethod::Broadcast) {
        Value group, numMembers;
        std::tie(group, numMembers) = callerGroup();
        e.loop(begin, end, [&](Value row) {
          Value comm =
              call(commFn, {runtime, device, group, numMembers}).getResult();
          Value at = e.pointer(e.add(baseOf(commColumn(row, kSpace)),
                                     commColumn(row, kStagingOffset)));
          checkNccl(builder, loc,
                    call(broadcastFn, {at, at, commColumn(row, kBytes), uint8,
                                       rankOf(row), comm, stream})
                        .getResult(),
                    comm, "ncclBroadcast");
        });
      } else if (isCollective(method)) {
        // NCCL's in-place forms on the members' communicator: the rank
        // column is the caller's index among the members. All-gather moves
        // bytes; sums use the element type.
        Value group, numMembers;
        std::tie(group, numMembers) = callerGroup();
        Value dtype = arith::ConstantIntOp::create(
            builder, loc, ncclSumDtype(element).value_or(-1), 32);
        Value sum =
            arith::ConstantIntOp::create(builder, loc, nccl_abi::kSum, 32);
        e.loop(begin, end, [&](Value row) {
          Value comm =
              call(commFn, {runtime, device, group, numMembers}).getResult();
          Value at = e.add(baseOf(commColumn(row, kSpace)),
                           commColumn(row, kStagingOffset));
          Value bytes = commColumn(row, kBytes);
          Value own = e.add(at, e.mul(commColumn(row, kPeerRank), bytes));
          Value count = arith::DivSIOp::create(builder, loc, bytes,
                                               e.i64(schedule.elementBytes));
          switch (method) {
          case planner::SegmentMethod::AllGather:
            checkNccl(builder, loc,
                      call(allGatherFn, {e.pointer(own), e.pointer(at), bytes,
                                         uint8, comm, stream})
                          .getResult(),
                      comm, "ncclAllGather");
            break;
          case planner::SegmentMethod::AllReduce:
            checkNccl(builder, loc,
                      call(allReduceFn, {e.pointer(at), e.pointer(at), count,
                                         dtype, sum, comm, stream})
                          .getResult(),
                      comm, "ncclAllReduce");
            break;
          default:
            checkNccl(builder, loc,
                      call(reduceScatterFn, {e.pointer(at), e.pointer(own),
                                             count, dtype, sum, comm, stream})
                          .getResult(),
                      comm, "ncclReduceScatter");
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
  Block &body = function.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  // Besides exchanges the CUDA target places data, it does not compute:
  // dense constants (a fill kernel for a splat, an upload otherwise), a
  // tensor.empty filled by linalg.fill of a constant scalar, and reshapes
  // (expand_shape, collapse_shape: row-major tiles, so the same bytes).
  // Partitioning slices a constant that is not a splat at offsets it reads
  // from a table of index constants, indexed by the device's position.
  auto isOffsetTable = [](Value value) {
    auto constant = value.getDefiningOp<arith::ConstantOp>();
    auto type = dyn_cast<RankedTensorType>(value.getType());
    return constant && type && type.getElementType().isIndex() &&
           isa<DenseIntElementsAttr>(constant.getValue());
  };
  auto isTableRead = [&](Operation *op) {
    auto extract = dyn_cast_or_null<tensor::ExtractOp>(op);
    return extract && isOffsetTable(extract.getTensor());
  };
  auto placesData = [&](Operation &op) -> bool {
    if (isa<ExchangeOp, func::ReturnOp, tensor::ExpandShapeOp,
            tensor::CollapseShapeOp>(op))
      return true;
    auto elementOk = [](Type type) {
      auto shaped = dyn_cast<RankedTensorType>(type);
      Type element = shaped ? shaped.getElementType() : type;
      return element.isIntOrFloat();
    };
    if (auto extract = dyn_cast<tensor::ExtractOp>(op))
      return isTableRead(&op) &&
             llvm::all_of(extract.getIndices(), [&](Value index) {
               return index == function.getArgument(2) ||
                      index.getDefiningOp<arith::ConstantIndexOp>();
             });
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
      auto constant = slice.getSource().getDefiningOp<arith::ConstantOp>();
      return constant && isa<DenseIntOrFPElementsAttr>(constant.getValue()) &&
             slice.hasUnitStride() && slice.getType().hasStaticShape() &&
             slice.getSourceType().getRank() == slice.getType().getRank() &&
             llvm::all_of(slice.getOffsets(), [&](Value offset) {
               return isTableRead(offset.getDefiningOp()) ||
                      offset.getDefiningOp<arith::ConstantIndexOp>();
             });
    }
    if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
      if (isOffsetTable(constant.getResult()))
        return llvm::all_of(constant->getUsers(), isTableRead);
      if (isa<RankedTensorType>(constant.getType()))
        return isa<DenseIntOrFPElementsAttr>(constant.getValue()) &&
               elementOk(constant.getType());
      // A scalar only as the value of a fill, or an index into a table.
      return llvm::all_of(constant->getUses(), [&](OpOperand &use) {
        auto fill = dyn_cast<linalg::FillOp>(use.getOwner());
        if (fill)
          return use.getOperandNumber() == 0 && elementOk(constant.getType());
        return constant.getType().isIndex() &&
               (isTableRead(use.getOwner()) ||
                isa<tensor::ExtractSliceOp>(use.getOwner()));
      });
    }
    // A tile with no elements (the device holds nothing of the value) has
    // nothing to place, whoever uses it.
    if (auto empty = dyn_cast<tensor::EmptyOp>(op);
        empty && empty.getType().hasStaticShape() &&
        empty.getType().getNumElements() == 0)
      return true;
    if (auto empty = dyn_cast<tensor::EmptyOp>(op))
      return llvm::all_of(empty->getUses(), [](OpOperand &use) {
        auto fill = dyn_cast<linalg::FillOp>(use.getOwner());
        return fill && use.getOperandNumber() == 1;
      });
    if (auto fill = dyn_cast<linalg::FillOp>(op))
      return fill.getNumResults() == 1 &&
             fill.getInputs()[0].getDefiningOp<arith::ConstantOp>() &&
             fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() &&
             elementOk(fill.getResult(0).getType());
    return false;
  };
  if (function.getNumArguments() < 3)
    return function.emitError() << "is not a partitioned function";
  // Inputs and results cross the host function as device pointers to
  // row-major tiles, so each must be a tensor of a fixed size in bytes.
  // Anything else (a scalar, an index, a memref, a vector) has no place in
  // that signature; the caller would pass or receive the wrong thing.
  auto isDeviceBuffer = [](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return tensor && tensor.hasStaticShape() &&
           tensor.getElementType().isIntOrFloat();
  };
  auto refuseBoundary = [&](StringRef kind, unsigned index, Type type) {
    return function.emitError()
           << kind << " #" << index << " has type " << type
           << ": the cuda target passes only statically shaped tensors of "
              "integers or floats (as device pointers)";
  };
  for (unsigned i = 3, e = function.getNumArguments(); i < e; ++i)
    if (!isDeviceBuffer(function.getArgument(i).getType()))
      return refuseBoundary("argument", i - 3,
                            function.getArgument(i).getType());
  for (auto [i, type] : llvm::enumerate(function.getResultTypes()))
    if (!isDeviceBuffer(type))
      return refuseBoundary("result", i, type);
  for (Operation &op : body)
    if (!placesData(op))
      return op.emitError()
             << "cannot be lowered to CUDA: the cuda target moves and places "
                "data (exchanges, dense constants, fills of a constant, "
                "reshapes) but has no kernels for computation yet";

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

  LLVM::LLVMFuncOp streamFn = fn(RuntimeFunction::CudaStream);
  LLVM::LLVMFuncOp commFn = fn(RuntimeFunction::NcclComm);
  LLVM::LLVMFuncOp alloc = fn(RuntimeFunction::DeviceAlloc);
  LLVM::LLVMFuncOp release = fn(RuntimeFunction::DeviceFree);
  LLVM::LLVMFuncOp copy = fn(RuntimeFunction::DeviceCopy);
  LLVM::LLVMFuncOp synchronize = fn(RuntimeFunction::DeviceSynchronize);
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
  // Where `result` is made: straight in the caller's buffer when it is
  // returned once and used nowhere else, else in a temporary.
  auto destinationOf = [&](Value result, int64_t bytes) {
    Value dst;
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
    pointerOf[result] = dst;
    return dst;
  };
  auto bytesOf = [](Value value) {
    auto type = cast<RankedTensorType>(value.getType());
    return byteSize(type, elementBytesOf(type.getElementType()));
  };
  // Table reads (i64 on the host) and the tables' globals.
  llvm::DenseMap<Value, Value> scalarOf;
  llvm::DenseMap<Value, std::pair<std::string, SmallVector<int64_t>>> tableOf;
  for (Operation &op : body) {
    if (auto constant = dyn_cast<arith::ConstantOp>(op);
        constant && isOffsetTable(constant.getResult())) {
      auto type = cast<RankedTensorType>(constant.getType());
      SmallVector<int64_t> values;
      for (const APInt &value :
           cast<DenseIntElementsAttr>(constant.getValue()).getValues<APInt>())
        values.push_back(value.getSExtValue());
      std::string name = tables.addGlobal((function.getSymName() + "__offsets" +
                                           std::to_string(constantCount++))
                                              .str(),
                                          type.getShape(), values);
      tableOf[constant.getResult()] = {name,
                                       SmallVector<int64_t>(type.getShape())};
      continue;
    }
    if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
      const auto &[name, shape] = tableOf.lookup(extract.getTensor());
      SmallVector<Value> indices;
      for (Value index : extract.getIndices())
        indices.push_back(
            index == function.getArgument(2)
                ? position
                : e.index(
                      index.getDefiningOp<arith::ConstantIndexOp>().value()));
      scalarOf[extract.getResult()] = e.load(e.global(name, shape), indices);
      continue;
    }
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
      // A strided copy of the box out of the constant's device copy.
      Value result = slice.getResult();
      int64_t bytes = bytesOf(result);
      Value dst = destinationOf(result, bytes);
      if (bytes == 0)
        continue;
      RankedTensorType sourceType = slice.getSourceType();
      int64_t elementBytes = elementBytesOf(sourceType.getElementType());
      int64_t rank = sourceType.getRank();
      SmallVector<int64_t> srcStrides(rank, elementBytes),
          dstStrides(rank, elementBytes);
      for (int64_t d = rank - 2; d >= 0; --d) {
        srcStrides[d] = srcStrides[d + 1] * sourceType.getDimSize(d + 1);
        dstStrides[d] = dstStrides[d + 1] * slice.getType().getDimSize(d + 1);
      }
      Value from = LLVM::PtrToIntOp::create(builder, loc, i64Type,
                                            pointerOf.lookup(slice.getSource()))
                       .getResult();
      for (auto [d, offset] : llvm::enumerate(slice.getMixedOffsets())) {
        Value at;
        if (auto value = dyn_cast<Value>(offset))
          at = scalarOf.count(value)
                   ? scalarOf.lookup(value)
                   : e.i64(
                         value.getDefiningOp<arith::ConstantIndexOp>().value());
        else
          at = e.i64(cast<IntegerAttr>(cast<Attribute>(offset)).getInt());
        from = e.add(from, e.mul(at, e.i64(srcStrides[d])));
      }
      int64_t outer = std::max<int64_t>(rank - 1, 0);
      int64_t runUnits =
          (rank == 0 ? 1 : slice.getType().getDimSize(rank - 1)) * elementBytes;
      SmallVector<Value> args = {e.pointer(from), dst, e.i64(runUnits)};
      for (int64_t d = 0; d < outer; ++d)
        args.push_back(e.i64(slice.getType().getDimSize(d)));
      for (int64_t d = 0; d < outer; ++d)
        args.push_back(e.i64(srcStrides[d]));
      for (int64_t d = 0; d < outer; ++d)
        args.push_back(e.i64(dstStrides[d]));
      args.push_back(e.i64(bytes));
      launch(builder, loc,
             kernels.get(KernelKind::Copy, outer, /*unitBytes=*/1, Type()),
             e.i64(bytes), args);
      continue;
    }
    if (auto exchange = dyn_cast<ExchangeOp>(op)) {
      Value result = exchange.getResult();
      Value dst = destinationOf(result, bytesOf(result));
      if (failed(lowerExchange(exchange, builder,
                               pointerOf.lookup(exchange.getInput()), dst)))
        return failure();
      continue;
    }
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op)) {
      pointerOf[op.getResult(0)] = pointerOf.lookup(op.getOperand(0));
      continue;
    }
    // A tile without elements (partition's stand-in for an op the device
    // does not run) still needs a pointer for the exchanges and returns
    // that name it.
    if (auto empty = dyn_cast<tensor::EmptyOp>(op);
        empty && bytesOf(empty.getResult()) == 0) {
      destinationOf(empty.getResult(), 0);
      continue;
    }
    if (auto fillOp = dyn_cast<linalg::FillOp>(op)) {
      Value result = fillOp.getResult(0);
      auto type = cast<RankedTensorType>(result.getType());
      auto value =
          fillOp.getInputs()[0].getDefiningOp<arith::ConstantOp>().getValue();
      fill(builder, loc, destinationOf(result, bytesOf(result)),
           bytesOf(result), elementBytesOf(type.getElementType()),
           bitsOf(value));
      continue;
    }
    auto constant = dyn_cast<arith::ConstantOp>(op);
    if (!constant || !isa<RankedTensorType>(constant.getType()))
      continue;
    Value result = constant.getResult();
    auto dense = cast<DenseIntOrFPElementsAttr>(constant.getValue());
    int64_t elementBytes = elementBytesOf(dense.getElementType());
    int64_t bytes = bytesOf(result);
    Value dst = destinationOf(result, bytes);
    if (bytes == 0)
      continue;
    if (dense.isSplat()) {
      fill(builder, loc, dst, bytes, elementBytes,
           bitsOf(dense.getSplatValue<Attribute>()));
      continue;
    }
    // The elements in memory order, uploaded from a host constant.
    std::string image;
    image.reserve(bytes);
    for (Attribute element : dense.getValues<Attribute>()) {
      uint64_t bits = bitsOf(element);
      for (int64_t b = 0; b < elementBytes; ++b)
        image.push_back(static_cast<char>((bits >> (8 * b)) & 0xff));
    }
    std::string name;
    {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToStart(module.getBody());
      name = (function.getSymName() + "__constant" +
              std::to_string(constantCount++))
                 .str();
      LLVM::GlobalOp::create(
          builder, loc, LLVM::LLVMArrayType::get(builder.getI8Type(), bytes),
          /*isConstant=*/true, LLVM::Linkage::Private, name,
          builder.getStringAttr(image));
    }
    LLVM::LLVMFuncOp upload = fn(RuntimeFunction::DeviceUpload);
    Value source = LLVM::AddressOfOp::create(builder, loc, ptrType, name);
    LLVM::CallOp::create(
        builder, loc, upload,
        ValueRange{runtime, device, dst, source, e.i64(bytes)});
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
  return finishPartitionedModule(module, "CUDA",
                                 /*readOnlyArguments=*/false);
}

/// The oldest PTX ISA version (times ten) that supports each processor.
/// LLVM 22's NVPTX backend knows it but keeps it in NVPTXSubtarget, where a
/// PTX version that is too old is a fatal error ("PTX version 6.0 does not
/// support target 'sm_90'"), not a diagnostic: the figures are the PTX ISA
/// release notes', checked against that error for every processor.
struct MinimumPtx {
  const char *chip;
  unsigned ptx;
};
constexpr MinimumPtx kMinimumPtx[] = {
    {"sm_20", 32},   {"sm_21", 32},   {"sm_30", 32},   {"sm_32", 40},
    {"sm_35", 32},   {"sm_37", 41},   {"sm_50", 40},   {"sm_52", 41},
    {"sm_53", 42},   {"sm_60", 50},   {"sm_61", 50},   {"sm_62", 50},
    {"sm_70", 60},   {"sm_72", 61},   {"sm_75", 63},   {"sm_80", 70},
    {"sm_86", 71},   {"sm_87", 74},   {"sm_88", 90},   {"sm_89", 78},
    {"sm_90", 78},   {"sm_90a", 80},  {"sm_100", 86},  {"sm_100a", 86},
    {"sm_100f", 88}, {"sm_101", 86},  {"sm_101a", 86}, {"sm_101f", 88},
    {"sm_103", 88},  {"sm_103a", 88}, {"sm_103f", 88}, {"sm_110", 90},
    {"sm_110a", 90}, {"sm_110f", 90}, {"sm_120", 87},  {"sm_120a", 87},
    {"sm_120f", 88}, {"sm_121", 88},  {"sm_121a", 88}, {"sm_121f", 88},
};

/// Checks `chip` and `features` before anything is compiled: the chip must
/// be a processor of LLVM's NVPTX backend (sm_NN, sm_NNa, sm_NNf) and the
/// features exactly one of its PTX versions (+ptxNN), at least the oldest
/// that supports the chip (sm_90: PTX 7.8). Unchecked, a bad chip reached
/// upstream's SM version parser (NVVMCheckSMVersion::
/// getTargetSMVersionFromStr), which reads an uninitialized int when the
/// name has no digits after "sm_": chip=foo failed or passed at random, and
/// NVPTX then wrote `.target foo` PTX that ptxas refuses.
LogicalResult verifyCudaTarget(MLIRContext *context, StringRef chip,
                               StringRef features) {
  auto fail = [&]() {
    return mlir::emitError(UnknownLoc::get(context))
           << "polymesh-lower-to-cuda: ";
  };
  const char *triple = "nvptx64-nvidia-cuda";
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTargetMC();
  std::string message;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(llvm::Triple(triple), message);
  if (!target)
    return fail() << "LLVM's NVPTX backend is not available: " << message;
  // The default processor's subtarget lists every processor and feature;
  // one for an unknown processor would print a warning of its own.
  std::unique_ptr<llvm::MCSubtargetInfo> info(
      target->createMCSubtargetInfo(llvm::Triple(triple), "", ""));
  if (!info)
    return fail() << "LLVM's NVPTX backend gave no subtarget information";
  auto number = [](StringRef name) {
    unsigned value = 0;
    (void)name.drop_while([](char c) { return !llvm::isDigit(c); })
        .take_while(llvm::isDigit)
        .getAsInteger(10, value);
    return value;
  };
  auto byNumber = [&](StringRef a, StringRef b) {
    return std::make_pair(number(a), a) < std::make_pair(number(b), b);
  };
  const MinimumPtx *minimum = llvm::find_if(
      kMinimumPtx, [&](const MinimumPtx &entry) { return chip == entry.chip; });
  if (!chip.starts_with("sm_") || !info->isCPUStringValid(chip) ||
      minimum == std::end(kMinimumPtx)) {
    SmallVector<StringRef> chips;
    for (const llvm::SubtargetSubTypeKV &processor :
         info->getAllProcessorDescriptions())
      if (llvm::any_of(kMinimumPtx, [&](const MinimumPtx &entry) {
            return StringRef(processor.Key) == entry.chip;
          }))
        chips.push_back(processor.Key);
    llvm::sort(chips, byNumber);
    return fail() << "unknown chip '" << chip
                  << "'; known: " << llvm::join(chips, ", ");
  }
  SmallVector<StringRef> versions;
  for (const llvm::SubtargetFeatureKV &feature :
       info->getAllProcessorFeatures()) {
    StringRef key = feature.Key;
    if (key.consume_front("ptx") && !key.empty() &&
        llvm::all_of(key, llvm::isDigit))
      versions.push_back(feature.Key);
  }
  llvm::sort(versions, byNumber);
  StringRef requested = features;
  if (!requested.consume_front("+") || !llvm::is_contained(versions, requested))
    return fail() << "features '" << features
                  << "' must be one PTX version, +ptxNN; known: +"
                  << llvm::join(versions, ", +");
  if (number(requested) < minimum->ptx)
    return fail() << "features '" << features << "' are too old for chip '"
                  << chip << "': it needs +ptx" << minimum->ptx << " or newer";
  return success();
}

struct PolymeshLowerToCudaPass
    : public polymesh::impl::PolymeshLowerToCudaBase<PolymeshLowerToCudaPass> {
  using Base::Base;

  /// Options are checked before any pass of the pipeline runs.
  LogicalResult initialize(MLIRContext *context) final {
    return verifyCudaTarget(context, chip, features);
  }

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
