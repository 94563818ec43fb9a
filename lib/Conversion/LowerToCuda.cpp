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
      Value sum = addElements(builder, loc, element, a, b);
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

/// The host function of one partitioned function while it is lowered.
struct HostFunction {
  func::FuncOp function;
  func::FuncOp host;
  Block *entry = nullptr;
  func::ReturnOp ret;
  unsigned numInputs = 0;
  /// Device pointers of tensor values.
  llvm::DenseMap<Value, Value> pointerOf;
  /// Table reads (i64 on the host), and each table's global and shape.
  llvm::DenseMap<Value, Value> scalarOf;
  llvm::DenseMap<Value, std::pair<std::string, SmallVector<int64_t>>> tableOf;
  /// Device memory freed at the end, and results made in place.
  SmallVector<Value> temporaries;
  llvm::DenseSet<unsigned> written;

  Value outPointer(unsigned result) const {
    return entry->getArgument(3 + numInputs + result);
  }
};

class CudaLowering {
public:
  CudaLowering(ModuleOp module, StringRef chip, StringRef features)
      : module(module), tables(module), kernels(module, chip, features) {}
  LogicalResult run();

private:
  friend class CudaExchangeEmitter;

  LogicalResult lowerFunction(func::FuncOp function);
  /// Creates the host function and gets the device's stream and world
  /// communicator.
  void beginHost(HostFunction &host, OpBuilder &builder);
  LogicalResult lowerOp(Operation &op, HostFunction &host, OpBuilder &builder);
  void lowerOffsetTable(arith::ConstantOp constant, HostFunction &host);
  void lowerTableRead(tensor::ExtractOp extract, HostFunction &host,
                      OpBuilder &builder);
  void lowerSlice(tensor::ExtractSliceOp slice, HostFunction &host,
                  OpBuilder &builder);
  void lowerDenseConstant(arith::ConstantOp constant, HostFunction &host,
                          OpBuilder &builder);
  /// Copies what is not yet in the caller's buffers there, waits for the
  /// stream, frees the temporaries and returns.
  void finishHost(HostFunction &host, OpBuilder &builder);
  /// Where `result` is made: straight in the caller's buffer when it is
  /// returned once and used nowhere else, else in a temporary.
  Value destinationOf(Value result, int64_t bytes, HostFunction &host,
                      OpBuilder &builder);
  LLVM::LLVMFuncOp fn(RuntimeFunction function) {
    return getOrDeclare(module, function);
  }
  Value call(OpBuilder &builder, Location loc, RuntimeFunction function,
             ValueRange args) {
    auto op = LLVM::CallOp::create(builder, loc, fn(function), args);
    return op.getNumResults() ? op.getResult() : Value();
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
  LLVM::CallOp::create(
      builder, loc, fn(RuntimeFunction::NcclCheck),
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

/// Emits one exchange's code for CUDA: copy rows as kernels and calls to
/// NCCL, all on the device's stream.
class CudaExchangeEmitter : public ScheduleEmitter {
public:
  CudaExchangeEmitter(CudaLowering &lowering, ExchangeOp op,
                      const PlanTables &tables, OpBuilder &builder)
      : ScheduleEmitter(builder, op.getLoc(), lowering.module, tables),
        lowering(lowering), op(op),
        element(op.getInput().getType().getElementType()) {}

  /// Runs the exchange from the device tile `src` into `dst`.
  void emit(Value src, Value dst);

private:
  Value call(RuntimeFunction function, ValueRange args) {
    return lowering.call(b, loc, function, args);
  }
  /// An NCCL call, its result checked.
  void callNccl(RuntimeFunction function, ValueRange args, Value comm) {
    lowering.checkNccl(b, loc, call(function, args), comm,
                       runtimeSignature(function).name);
  }
  Value toPtrInt(Value pointer) {
    return LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), pointer);
  }
  Value uint8() {
    return arith::ConstantIntOp::create(b, loc, nccl_abi::kUint8, 32);
  }
  void launchRow(gpu::GPUFuncOp kernel, Value from, Value to, Value runUnits,
                 ArrayRef<Value> loops, Value total);
  void copyRow(Value row);
  void runCopies(Value begin, Value end) final;
  void emitSendRecv(Value rangeRow) final;
  void emitCollective(planner::SegmentMethod method, Value rangeRow) final;
  void emitBroadcast(Value rangeRow);

  CudaLowering &lowering;
  ExchangeOp op;
  Type element;
};

void CudaExchangeEmitter::launchRow(gpu::GPUFuncOp kernel, Value from, Value to,
                                    Value runUnits, ArrayRef<Value> loops,
                                    Value total) {
  SmallVector<Value> args = {e.pointer(from), e.pointer(to), runUnits};
  args.append(loops.begin(), loops.end());
  args.push_back(total);
  lowering.launch(b, loc, kernel, total, args);
}

/// One copy row as one kernel launch: a copy (in 16-byte units where every
/// offset, stride and the run allow it), a zero fill or a sum.
void CudaExchangeEmitter::copyRow(Value row) {
  int64_t outer = schedule.outerDims;
  auto column = [&](int64_t c) { return e.load(copies, {row, e.index(c)}); };
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
  auto launchUnits = [&](KernelKind kernelKind, int64_t unitBytes, Type type) {
    Value runUnits = arith::DivSIOp::create(b, loc, runBytes, e.i64(unitBytes));
    launchRow(lowering.kernels.get(kernelKind, outer, unitBytes, type), from,
              to, runUnits, loops, e.mul(runs, runUnits));
  };
  auto copy = [&]() {
    Value bits = arith::OrIOp::create(b, loc, from, to);
    bits = arith::OrIOp::create(b, loc, bits, runBytes);
    for (int64_t c = outer; c < 3 * outer; ++c)
      bits = arith::OrIOp::create(b, loc, bits, loops[c]);
    Value aligned = e.eq(arith::AndIOp::create(b, loc, bits, e.i64(15)), 0);
    e.ifThenElse(
        aligned, [&]() { launchUnits(KernelKind::Copy, 16, Type()); },
        [&]() { launchUnits(KernelKind::Copy, 1, Type()); });
  };
  auto zero = [&]() { launchUnits(KernelKind::Zero, 1, Type()); };
  auto add = [&]() {
    launchUnits(KernelKind::Accumulate, elementBytesOf(element), element);
  };
  byCopyKind(kind, copy, zero, add);
}

void CudaExchangeEmitter::runCopies(Value begin, Value end) {
  if (copies)
    e.loop(begin, end, [&](Value row) { copyRow(row); });
}

/// Send/recv rows inside one NCCL group on the world communicator, whose
/// ranks are positions: the rank column is relative to the caller's.
void CudaExchangeEmitter::emitSendRecv(Value rangeRow) {
  Value begin = rangeColumn(rangeRow, kCommBegin);
  Value end = rangeColumn(rangeRow, kCommEnd);
  Value any =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, begin, end);
  Value comm = lowering.worldComm, stream = lowering.stream;
  e.ifThenElse(any, [&]() {
    call(RuntimeFunction::NcclGroupStart, {});
    Value type = uint8();
    e.loop(begin, end, [&](Value row) {
      Value at = e.pointer(commAddress(row));
      Value bytes = commColumn(row, kBytes);
      Value rank = arith::TruncIOp::create(
          b, loc, b.getI32Type(),
          e.add(e.toI64(lowering.position), commColumn(row, kPeerRank)));
      e.ifThenElse(
          e.eq(commColumn(row, kCommKind),
               static_cast<int64_t>(planner::CommKind::Send)),
          [&]() {
            callNccl(RuntimeFunction::NcclSend,
                     {at, bytes, type, rank, comm, stream}, comm);
          },
          [&]() {
            callNccl(RuntimeFunction::NcclRecv,
                     {at, bytes, type, rank, comm, stream}, comm);
          });
    });
    callNccl(RuntimeFunction::NcclGroupEnd, {}, comm);
  });
}

void CudaExchangeEmitter::emitBroadcast(Value rangeRow) {
  auto [group, numMembers] = callerGroup(rangeRow, lowering.device);
  Value type = uint8();
  Value begin = rangeColumn(rangeRow, kCommBegin);
  Value end = rangeColumn(rangeRow, kCommEnd);
  e.loop(begin, end, [&](Value row) {
    Value comm = call(RuntimeFunction::NcclComm,
                      {lowering.runtime, lowering.device, group, numMembers});
    Value at = e.pointer(commAddress(row));
    // The rank column is the root's index in the group.
    Value root = arith::TruncIOp::create(b, loc, b.getI32Type(),
                                         commColumn(row, kPeerRank));
    callNccl(
        RuntimeFunction::NcclBroadcast,
        {at, at, commColumn(row, kBytes), type, root, comm, lowering.stream},
        comm);
  });
}

/// NCCL's in-place forms on the members' communicator: the rank column is
/// the caller's index among the members. All-gather moves bytes; sums use
/// the element type.
void CudaExchangeEmitter::emitCollective(planner::SegmentMethod method,
                                         Value rangeRow) {
  if (method == planner::SegmentMethod::Broadcast)
    return emitBroadcast(rangeRow);
  auto [group, numMembers] = callerGroup(rangeRow, lowering.device);
  Value type = uint8();
  Value dtype = arith::ConstantIntOp::create(
      b, loc, ncclSumDtype(element).value_or(-1), 32);
  Value sum = arith::ConstantIntOp::create(b, loc, nccl_abi::kSum, 32);
  Value stream = lowering.stream;
  Value begin = rangeColumn(rangeRow, kCommBegin);
  Value end = rangeColumn(rangeRow, kCommEnd);
  e.loop(begin, end, [&](Value row) {
    Value comm = call(RuntimeFunction::NcclComm,
                      {lowering.runtime, lowering.device, group, numMembers});
    auto [at, bytes, own, count] = collectiveRow(row);
    switch (method) {
    case planner::SegmentMethod::AllGather:
      callNccl(RuntimeFunction::NcclAllGather,
               {e.pointer(own), e.pointer(at), bytes, type, comm, stream},
               comm);
      break;
    case planner::SegmentMethod::AllReduce:
      callNccl(RuntimeFunction::NcclAllReduce,
               {e.pointer(at), e.pointer(at), count, dtype, sum, comm, stream},
               comm);
      break;
    default:
      callNccl(RuntimeFunction::NcclReduceScatter,
               {e.pointer(at), e.pointer(own), count, dtype, sum, comm, stream},
               comm);
      break;
    }
  });
}

void CudaExchangeEmitter::emit(Value src, Value dst) {
  Value runtime = lowering.runtime, device = lowering.device;
  auto sourceType = cast<RankedTensorType>(op.getInput().getType());
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  sourceAddress = toPtrInt(src);
  resultAddress = toPtrInt(dst);
  int64_t sourceBytes = byteSize(sourceType, schedule.elementBytes);
  int64_t resultBytes = byteSize(resultType, schedule.elementBytes);
  Value scratch;
  if (schedule.writesSource && sourceBytes > 0) {
    // The plan sums into its source buffer: give it a copy, so that other
    // uses of the value keep their partials.
    scratch = call(RuntimeFunction::DeviceAlloc,
                   {runtime, device, e.i64(sourceBytes)});
    call(RuntimeFunction::DeviceCopy,
         {runtime, device, scratch, src, e.i64(sourceBytes)});
    sourceAddress = toPtrInt(scratch);
  }
  loadTables(lowering.position);
  Value stagingBytes = e.load(table(tables.staging), {block});
  Value staging =
      call(RuntimeFunction::DeviceAlloc,
           {runtime, device,
            arith::MaxSIOp::create(b, loc, stagingBytes, e.i64(1))});
  stagingAddress = toPtrInt(staging);
  if (!tables.members.empty())
    groupBuffer = lowering.tables.groupBuffer(b, tables.maxGroupSize);
  if (schedule.accumulatesIntoDestination && resultBytes > 0) {
    // The plan adds into its destination: start from zeros (one run).
    Value bytes = e.i64(resultBytes);
    launchRow(lowering.kernels.get(KernelKind::Zero, /*outer=*/0, 1, Type()),
              resultAddress, resultAddress, bytes, {}, bytes);
  }
  emitSegments();
  call(RuntimeFunction::DeviceFree, {runtime, device, staging});
  if (scratch)
    call(RuntimeFunction::DeviceFree, {runtime, device, scratch});
}

/// A constant table of index offsets (partition's tile offsets per
/// position).
bool isOffsetTable(Value value) {
  auto constant = value.getDefiningOp<arith::ConstantOp>();
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return constant && type && type.getElementType().isIndex() &&
         isa<DenseIntElementsAttr>(constant.getValue());
}

bool isTableRead(Operation *op) {
  auto extract = dyn_cast_or_null<tensor::ExtractOp>(op);
  return extract && isOffsetTable(extract.getTensor());
}

bool isPlaceableElement(Type type) {
  auto shaped = dyn_cast<RankedTensorType>(type);
  Type element = shaped ? shaped.getElementType() : type;
  return element.isIntOrFloat();
}

/// A scalar constant used only as the value of a fill, or as an index into
/// a table.
bool placesScalar(arith::ConstantOp constant) {
  return llvm::all_of(constant->getUses(), [&](OpOperand &use) {
    if (isa<linalg::FillOp>(use.getOwner()))
      return use.getOperandNumber() == 0 &&
             isPlaceableElement(constant.getType());
    return constant.getType().isIndex() &&
           (isTableRead(use.getOwner()) ||
            isa<tensor::ExtractSliceOp>(use.getOwner()));
  });
}

/// Whether `op` only places data, which is what the CUDA target lowers:
/// exchanges, dense constants (a fill kernel for a splat, an upload
/// otherwise), a tensor.empty filled by linalg.fill of a constant scalar,
/// reshapes (row-major tiles, so the same bytes), and the slices of a
/// constant at offsets read from partition's tables by the position.
bool placesData(Operation &op, Value position) {
  if (isa<ExchangeOp, func::ReturnOp, tensor::ExpandShapeOp,
          tensor::CollapseShapeOp>(op))
    return true;
  if (auto extract = dyn_cast<tensor::ExtractOp>(op))
    return isTableRead(&op) &&
           llvm::all_of(extract.getIndices(), [&](Value index) {
             return index == position ||
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
             isPlaceableElement(constant.getType());
    return placesScalar(constant);
  }
  if (auto empty = dyn_cast<tensor::EmptyOp>(op)) {
    // A tile with no elements (the device holds nothing of the value) has
    // nothing to place, whoever uses it.
    if (empty.getType().hasStaticShape() &&
        empty.getType().getNumElements() == 0)
      return true;
    return llvm::all_of(empty->getUses(), [](OpOperand &use) {
      return isa<linalg::FillOp>(use.getOwner()) && use.getOperandNumber() == 1;
    });
  }
  if (auto fill = dyn_cast<linalg::FillOp>(op))
    return fill.getNumResults() == 1 &&
           fill.getInputs()[0].getDefiningOp<arith::ConstantOp>() &&
           fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() &&
           isPlaceableElement(fill.getResult(0).getType());
  return false;
}

/// Inputs and results cross the host function as device pointers to
/// row-major tiles, so each must be a tensor of a fixed size in bytes.
/// Anything else (a scalar, an index, a memref, a vector) has no place in
/// that signature; the caller would pass or receive the wrong thing.
LogicalResult checkLowerable(func::FuncOp function) {
  if (function.getNumArguments() < 3)
    return function.emitError() << "is not a partitioned function";
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
  for (Operation &op : function.getBody().front())
    if (!placesData(op, function.getArgument(2)))
      return op.emitError()
             << "cannot be lowered to CUDA: the cuda target moves and places "
                "data (exchanges, dense constants, fills of a constant, "
                "reshapes) but has no kernels for computation yet";
  return success();
}

Value CudaLowering::destinationOf(Value result, int64_t bytes,
                                  HostFunction &host, OpBuilder &builder) {
  Value dst;
  if (result.hasOneUse() && result.getUses().begin()->getOwner() == host.ret) {
    unsigned index = result.getUses().begin()->getOperandNumber();
    dst = host.outPointer(index);
    host.written.insert(index);
  } else {
    Emitter e(builder, result.getLoc());
    dst = call(builder, result.getLoc(), RuntimeFunction::DeviceAlloc,
               {runtime, device, e.i64(bytes)});
    host.temporaries.push_back(dst);
  }
  host.pointerOf[result] = dst;
  return dst;
}

int64_t bytesOf(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return byteSize(type, elementBytesOf(type.getElementType()));
}

void CudaLowering::beginHost(HostFunction &host, OpBuilder &builder) {
  func::FuncOp function = host.function;
  MLIRContext *context = function.getContext();
  Type ptrType = LLVM::LLVMPointerType::get(context);
  // (runtime, device, position, input pointers..., result pointers...).
  SmallVector<Type> args = {ptrType, IntegerType::get(context, 64),
                            IndexType::get(context)};
  host.numInputs = function.getNumArguments() - 3;
  for (unsigned i = 0; i < host.numInputs + function.getNumResults(); ++i)
    args.push_back(ptrType);
  builder.setInsertionPoint(function);
  host.host =
      func::FuncOp::create(builder, function.getLoc(), function.getSymName(),
                           builder.getFunctionType(args, {}));
  host.host.setVisibility(function.getVisibility());
  for (NamedAttribute attr : function->getDiscardableAttrs())
    host.host->setAttr(attr.getName(), attr.getValue());
  host.entry = host.host.addEntryBlock();
  builder.setInsertionPointToStart(host.entry);
  Location loc = function.getLoc();
  Emitter e(builder, loc);
  runtime = host.entry->getArgument(0);
  device = host.entry->getArgument(1);
  position = host.entry->getArgument(2);
  stream = call(builder, loc, RuntimeFunction::CudaStream, {runtime, device});
  // Launches depend on the device's stream: gpu-to-llvm turns an async
  // token into the stream it stands for, so kernels run in order with the
  // NCCL calls on that stream.
  streamToken = UnrealizedConversionCastOp::create(
                    builder, loc, gpu::AsyncTokenType::get(context), stream)
                    .getResult(0);
  // The world communicator: ranks are positions in the program's devices.
  const std::vector<int64_t> &devices =
      tables.devicesOf(&function.getBody().front().front());
  auto count = static_cast<int64_t>(devices.size());
  std::string devicesTable = tables.addGlobal(
      ("__polymesh_" + function.getSymName() + "_devices").str(), {count},
      devices);
  Value devicesPointer = e.pointer(e.address(e.global(devicesTable, {count})));
  worldComm = call(builder, loc, RuntimeFunction::NcclComm,
                   {runtime, device, devicesPointer, e.i64(count)});
  for (unsigned i = 0; i < host.numInputs; ++i)
    host.pointerOf[function.getArgument(3 + i)] =
        host.entry->getArgument(3 + i);
}

void CudaLowering::lowerOffsetTable(arith::ConstantOp constant,
                                    HostFunction &host) {
  auto type = cast<RankedTensorType>(constant.getType());
  SmallVector<int64_t> values;
  for (const APInt &value :
       cast<DenseIntElementsAttr>(constant.getValue()).getValues<APInt>())
    values.push_back(value.getSExtValue());
  std::string name =
      tables.addGlobal((host.function.getSymName() + "__offsets" +
                        std::to_string(constantCount++))
                           .str(),
                       type.getShape(), values);
  host.tableOf[constant.getResult()] = {name,
                                        SmallVector<int64_t>(type.getShape())};
}

void CudaLowering::lowerTableRead(tensor::ExtractOp extract, HostFunction &host,
                                  OpBuilder &builder) {
  Emitter e(builder, extract.getLoc());
  const auto &[name, shape] = host.tableOf.lookup(extract.getTensor());
  SmallVector<Value> indices;
  for (Value index : extract.getIndices())
    indices.push_back(
        index == host.function.getArgument(2)
            ? position
            : e.index(index.getDefiningOp<arith::ConstantIndexOp>().value()));
  host.scalarOf[extract.getResult()] = e.load(e.global(name, shape), indices);
}

/// A strided copy of the box out of the constant's device copy.
void CudaLowering::lowerSlice(tensor::ExtractSliceOp slice, HostFunction &host,
                              OpBuilder &builder) {
  Location loc = slice.getLoc();
  Emitter e(builder, loc);
  Value result = slice.getResult();
  int64_t bytes = bytesOf(result);
  Value dst = destinationOf(result, bytes, host, builder);
  if (bytes == 0)
    return;
  RankedTensorType sourceType = slice.getSourceType();
  int64_t elementBytes = elementBytesOf(sourceType.getElementType());
  int64_t rank = sourceType.getRank();
  SmallVector<int64_t> srcStrides(rank, elementBytes),
      dstStrides(rank, elementBytes);
  for (int64_t d = rank - 2; d >= 0; --d) {
    srcStrides[d] = srcStrides[d + 1] * sourceType.getDimSize(d + 1);
    dstStrides[d] = dstStrides[d + 1] * slice.getType().getDimSize(d + 1);
  }
  Value from =
      LLVM::PtrToIntOp::create(builder, loc, builder.getI64Type(),
                               host.pointerOf.lookup(slice.getSource()))
          .getResult();
  for (auto [d, offset] : llvm::enumerate(slice.getMixedOffsets())) {
    Value at;
    if (auto value = dyn_cast<Value>(offset))
      at = host.scalarOf.count(value)
               ? host.scalarOf.lookup(value)
               : e.i64(value.getDefiningOp<arith::ConstantIndexOp>().value());
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
}

/// A dense tensor constant: a fill kernel for a splat, else its elements in
/// memory order, uploaded from a host constant.
void CudaLowering::lowerDenseConstant(arith::ConstantOp constant,
                                      HostFunction &host, OpBuilder &builder) {
  Location loc = constant.getLoc();
  Emitter e(builder, loc);
  Value result = constant.getResult();
  auto dense = cast<DenseIntOrFPElementsAttr>(constant.getValue());
  int64_t elementBytes = elementBytesOf(dense.getElementType());
  int64_t bytes = bytesOf(result);
  Value dst = destinationOf(result, bytes, host, builder);
  if (bytes == 0)
    return;
  if (dense.isSplat())
    return fill(builder, loc, dst, bytes, elementBytes,
                bitsOf(dense.getSplatValue<Attribute>()));
  std::string image;
  image.reserve(bytes);
  for (Attribute element : dense.getValues<Attribute>()) {
    uint64_t bits = bitsOf(element);
    for (int64_t i = 0; i < elementBytes; ++i)
      image.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
  std::string name = (host.function.getSymName() + "__constant" +
                      std::to_string(constantCount++))
                         .str();
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(module.getBody());
    LLVM::GlobalOp::create(builder, loc,
                           LLVM::LLVMArrayType::get(builder.getI8Type(), bytes),
                           /*isConstant=*/true, LLVM::Linkage::Private, name,
                           builder.getStringAttr(image));
  }
  Value source = LLVM::AddressOfOp::create(
      builder, loc, LLVM::LLVMPointerType::get(builder.getContext()), name);
  call(builder, loc, RuntimeFunction::DeviceUpload,
       {runtime, device, dst, source, e.i64(bytes)});
}

LogicalResult CudaLowering::lowerOp(Operation &op, HostFunction &host,
                                    OpBuilder &builder) {
  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    if (isOffsetTable(constant.getResult()))
      lowerOffsetTable(constant, host);
    else if (isa<RankedTensorType>(constant.getType()))
      lowerDenseConstant(constant, host, builder);
    return success();
  }
  if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
    lowerTableRead(extract, host, builder);
    return success();
  }
  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
    lowerSlice(slice, host, builder);
    return success();
  }
  if (auto exchange = dyn_cast<ExchangeOp>(op)) {
    FailureOr<PlanTables *> plan = tables.tablesFor(exchange);
    if (failed(plan))
      return failure();
    Value result = exchange.getResult();
    Value dst = destinationOf(result, bytesOf(result), host, builder);
    CudaExchangeEmitter(*this, exchange, **plan, builder)
        .emit(host.pointerOf.lookup(exchange.getInput()), dst);
    return success();
  }
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op)) {
    host.pointerOf[op.getResult(0)] = host.pointerOf.lookup(op.getOperand(0));
    return success();
  }
  // A tile without elements (partition's stand-in for an op the device
  // does not run) still needs a pointer for the exchanges and returns
  // that name it.
  if (auto empty = dyn_cast<tensor::EmptyOp>(op);
      empty && bytesOf(empty.getResult()) == 0) {
    destinationOf(empty.getResult(), 0, host, builder);
    return success();
  }
  if (auto fillOp = dyn_cast<linalg::FillOp>(op)) {
    Value result = fillOp.getResult(0);
    auto type = cast<RankedTensorType>(result.getType());
    auto value =
        fillOp.getInputs()[0].getDefiningOp<arith::ConstantOp>().getValue();
    fill(builder, op.getLoc(),
         destinationOf(result, bytesOf(result), host, builder), bytesOf(result),
         elementBytesOf(type.getElementType()), bitsOf(value));
  }
  return success();
}

void CudaLowering::finishHost(HostFunction &host, OpBuilder &builder) {
  Location loc = host.function.getLoc();
  Emitter e(builder, loc);
  for (auto [index, value] : llvm::enumerate(host.ret.getOperands())) {
    int64_t bytes = bytesOf(value);
    if (!host.written.count(index) && bytes > 0)
      call(builder, loc, RuntimeFunction::DeviceCopy,
           {runtime, device, host.outPointer(index),
            host.pointerOf.lookup(value), e.i64(bytes)});
  }
  // Results are complete when the function returns.
  call(builder, loc, RuntimeFunction::DeviceSynchronize, {runtime, device});
  for (Value temporary : host.temporaries)
    call(builder, loc, RuntimeFunction::DeviceFree,
         {runtime, device, temporary});
  func::ReturnOp::create(builder, loc);
  host.host->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                     builder.getUnitAttr());
}

LogicalResult CudaLowering::lowerFunction(func::FuncOp function) {
  if (failed(checkLowerable(function)))
    return failure();
  HostFunction host;
  host.function = function;
  Block &body = function.getBody().front();
  host.ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder builder(function);
  beginHost(host, builder);
  for (Operation &op : body)
    if (failed(lowerOp(op, host, builder)))
      return failure();
  finishHost(host, builder);
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
