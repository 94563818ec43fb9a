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
// the schedule has that collective). Kernels are generated as gpu.func
// (CudaKernels.h) and compiled to PTX in-process (gpu -> NVVM -> NVPTX);
// the driver JIT-compiles the PTX when the module is loaded.
//
// Tensors live in GPU memory, so a partitioned function becomes a host
// function over device pointers: inputs, then one out-pointer per result.
// The rewrite is a dialect conversion: a type converter maps tiles to
// `!llvm.ptr` (and partition's offset tables to i64 memrefs), and one
// OpConversionPattern per op kind rewrites the function's signature, its
// exchanges, constants, fills, slices, reshapes and return. Only data
// movement is lowered for now: an op that computes would need its own
// kernels, and is refused with a diagnostic before the conversion starts.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
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
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Transforms/DialectConversion.h"

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHEXCHANGETOCUDA
#define GEN_PASS_DEF_POLYMESHLOWERTOCUDA
#include "polymesh/Conversion/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;
using namespace polymesh::conversion;

namespace {

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

int64_t bytesOf(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.getNumElements() * elementBytesOf(tensor.getElementType());
}

bool isPartitioned(Operation *function) {
  return function && function->hasAttr(PolymeshDialect::kPartitionOfAttrName);
}

/// Whether `op` sits in a partitioned function (not in a plan function or
/// in host code that is already lowered).
bool inPartitionedFunction(Operation *op) {
  return isPartitioned(op->getParentOfType<func::FuncOp>());
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

/// What the patterns of one host function share: FuncToHost creates it
/// with the function's prologue, the patterns of its ops add temporaries,
/// and ReturnToHost frees them.
struct HostFrame {
  Block *entry = nullptr;
  unsigned numInputs = 0;
  Value runtime, device, position;
  /// The device's stream, and the async token standing for it that kernel
  /// launches wait on.
  Value stream, streamToken;
  /// The communicator of the program's devices: ranks are positions.
  Value worldComm;
  /// Room for the device ids of the largest collective group of the
  /// function's exchanges (null without collectives).
  Value groupBuffer;
  /// Device memory the function allocates for values that are not
  /// returned; freed before it returns.
  SmallVector<Value> temporaries;
  bool returned = false;

  Value outPointer(unsigned result) const {
    return entry->getArgument(3 + numInputs + result);
  }
};

/// One module's CUDA lowering: what is prepared before the conversion (its
/// checks and the exchanges' tables can fail with a diagnostic; a pattern
/// should not), and what the patterns share while it runs.
class CudaLowering {
public:
  CudaLowering(ModuleOp module, StringRef chip, StringRef features,
               bool directCollectives)
      : module(module), tables(module, scheduleOptions(directCollectives)),
        kernels(module, chip, features) {}

  /// Checks every partitioned function and builds its exchanges' tables.
  LogicalResult prepare();
  static planner::ScheduleOptions scheduleOptions(bool directCollectives) {
    planner::ScheduleOptions options;
    options.directCollectives = directCollectives;
    return options;
  }
  /// Rewrites every partitioned function into its host function.
  LogicalResult convert();

  /// The frame of the host function `op` is in (null before its function
  /// is converted).
  HostFrame *frameOf(Operation *op) {
    auto it = frames.find(op->getParentOfType<func::FuncOp>());
    return it == frames.end() ? nullptr : &it->second;
  }
  Value call(OpBuilder &builder, Location loc, RuntimeFunction function,
             ValueRange args) {
    auto op = LLVM::CallOp::create(
        builder, loc, getOrDeclare(builder, module, function), args);
    return op.getNumResults() ? op.getResult() : Value();
  }
  /// The address of a NUL-terminated constant string, one global per text.
  Value cString(OpBuilder &builder, Location loc, StringRef text);
  /// Passes an NCCL call's result to polymesh_rt_nccl_check: the runtime's
  /// communicators are non-blocking, so ncclInProgress must be waited out
  /// before the next call, and errors must reach the runtime.
  void checkNccl(OpBuilder &builder, Location loc, const HostFrame &frame,
                 Value result, Value comm, StringRef call);
  void launch(OpBuilder &builder, Location loc, const HostFrame &frame,
              gpu::GPUFuncOp kernel, Value units, ValueRange args) {
    launchKernel(builder, loc, kernel, units, args, frame.streamToken);
  }
  /// Fills `bytes / elementBytes` elements at `dst` with `pattern`.
  void fill(OpBuilder &builder, Location loc, const HostFrame &frame, Value dst,
            int64_t bytes, int64_t elementBytes, uint64_t pattern);
  /// Where `result` is made: straight in the caller's buffer when it is
  /// returned once and used nowhere else, else in a temporary.
  Value destinationOf(OpBuilder &builder, Value result, HostFrame &frame);
  /// A unique name for a global of `function`'s (constant images, offset
  /// tables).
  std::string globalName(func::FuncOp function, StringRef kind) {
    return (function.getSymName() + kind + std::to_string(constantCount++))
        .str();
  }

  ModuleOp module;
  PlanTableBuilder tables;
  KernelBuilder kernels;
  llvm::DenseMap<Operation *, PlanTables *> exchangeTables;
  /// Per partitioned function: its largest collective group.
  llvm::DenseMap<Operation *, int64_t> maxGroupSize;
  /// Per host function.
  llvm::DenseMap<Operation *, HostFrame> frames;

private:
  /// Globals of constants, numbered per module.
  int64_t constantCount = 0;
};

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

void CudaLowering::checkNccl(OpBuilder &builder, Location loc,
                             const HostFrame &frame, Value result, Value comm,
                             StringRef call) {
  LLVM::CallOp::create(
      builder, loc, getOrDeclare(builder, module, RuntimeFunction::NcclCheck),
      ValueRange{frame.runtime, frame.device, comm, result,
                 cString(builder, loc, call)});
}

void CudaLowering::fill(OpBuilder &builder, Location loc,
                        const HostFrame &frame, Value dst, int64_t bytes,
                        int64_t elementBytes, uint64_t pattern) {
  int64_t count = bytes / elementBytes;
  if (count <= 0)
    return;
  Emitter e(builder, loc);
  launch(builder, loc, frame, kernels.getFill(builder, elementBytes),
         e.i64(count),
         {dst, e.i64(static_cast<int64_t>(pattern)), e.i64(count)});
}

Value CudaLowering::destinationOf(OpBuilder &builder, Value result,
                                  HostFrame &frame) {
  if (result.hasOneUse()) {
    OpOperand &use = *result.getUses().begin();
    if (isa<func::ReturnOp>(use.getOwner()))
      return frame.outPointer(use.getOperandNumber());
  }
  Emitter e(builder, result.getLoc());
  Value dst =
      call(builder, result.getLoc(), RuntimeFunction::DeviceAlloc,
           {frame.runtime, frame.device, e.i64(bytesOf(result.getType()))});
  frame.temporaries.push_back(dst);
  return dst;
}

/// Emits one exchange's code for CUDA: copy rows as kernels and calls to
/// NCCL, all on the device's stream.
class CudaExchangeEmitter : public ScheduleEmitter {
public:
  CudaExchangeEmitter(CudaLowering &lowering, const HostFrame &frame,
                      ExchangeOp op, const PlanTables &tables,
                      OpBuilder &builder)
      : ScheduleEmitter(builder, op.getLoc(), lowering.module, tables),
        lowering(lowering), frame(frame), op(op),
        element(op.getInput().getType().getElementType()) {}

  /// Runs the exchange from the device tile `src` into `dst`.
  void emit(Value src, Value dst);

private:
  Value call(RuntimeFunction function, ValueRange args) {
    return lowering.call(b, loc, function, args);
  }
  /// An NCCL call, its result checked.
  void callNccl(RuntimeFunction function, ValueRange args, Value comm) {
    lowering.checkNccl(b, loc, frame, call(function, args), comm,
                       runtimeSignature(function).name);
  }
  Value toPtrInt(Value pointer) {
    return LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), pointer);
  }
  Value uint8() {
    return arith::ConstantIntOp::create(b, loc, nccl_abi::kUint8, 32);
  }
  gpu::GPUFuncOp kernel(KernelKind kind, int64_t outer, int64_t unitBytes,
                        Type type) {
    return lowering.kernels.get(b, kind, outer, unitBytes, type);
  }
  void launchRow(gpu::GPUFuncOp kernel, Value from, Value to, Value runUnits,
                 ArrayRef<Value> loops, Value total);
  void copyRow(Value row);
  void runCopies(Value begin, Value end) final;
  void emitSendRecv(Value rangeRow) final;
  void emitCollective(planner::SegmentMethod method, Value rangeRow) final;
  void emitBroadcast(Value rangeRow);
  void emitAllToAll(Value send, Value recv, Value bytes, Value numMembers,
                    Value comm);

  CudaLowering &lowering;
  const HostFrame &frame;
  ExchangeOp op;
  Type element;
};

void CudaExchangeEmitter::launchRow(gpu::GPUFuncOp kernel, Value from, Value to,
                                    Value runUnits, ArrayRef<Value> loops,
                                    Value total) {
  SmallVector<Value> args = {e.pointer(from), e.pointer(to), runUnits};
  args.append(loops.begin(), loops.end());
  args.push_back(total);
  lowering.launch(b, loc, frame, kernel, total, args);
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
    launchRow(kernel(kernelKind, outer, unitBytes, type), from, to, runUnits,
              loops, e.mul(runs, runUnits));
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
  Value comm = frame.worldComm, stream = frame.stream;
  e.ifThenElse(any, [&]() {
    call(RuntimeFunction::NcclGroupStart, {});
    Value type = uint8();
    e.loop(begin, end, [&](Value row) {
      Value at = e.pointer(commAddress(row));
      Value bytes = commColumn(row, kBytes);
      Value rank = arith::TruncIOp::create(
          b, loc, b.getI32Type(),
          e.add(e.toI64(frame.position), commColumn(row, kPeerRank)));
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

/// NCCL's all-to-all as its documented composition, one send and one
/// receive per rank (the caller's own chunk too) inside one group: it runs
/// on every NCCL that has send/recv, not only on those with ncclAlltoAll.
void CudaExchangeEmitter::emitAllToAll(Value send, Value recv, Value bytes,
                                       Value numMembers, Value comm) {
  Value type = uint8();
  call(RuntimeFunction::NcclGroupStart, {});
  e.loop(e.index(0), e.toIndex(numMembers), [&](Value peer) {
    Value offset = e.mul(e.toI64(peer), bytes);
    Value rank = arith::IndexCastOp::create(b, loc, b.getI32Type(), peer);
    callNccl(
        RuntimeFunction::NcclSend,
        {e.pointer(e.add(send, offset)), bytes, type, rank, comm, frame.stream},
        comm);
    callNccl(
        RuntimeFunction::NcclRecv,
        {e.pointer(e.add(recv, offset)), bytes, type, rank, comm, frame.stream},
        comm);
  });
  callNccl(RuntimeFunction::NcclGroupEnd, {}, comm);
}

void CudaExchangeEmitter::emitBroadcast(Value rangeRow) {
  auto [group, numMembers, rank] = callerGroup(rangeRow, frame.device);
  Value type = uint8();
  Value begin = rangeColumn(rangeRow, kCommBegin);
  Value end = rangeColumn(rangeRow, kCommEnd);
  e.loop(begin, end, [&](Value row) {
    Value comm = call(RuntimeFunction::NcclComm,
                      {frame.runtime, frame.device, group, numMembers});
    Value at = e.pointer(commAddress(row));
    // The rank column is the root's index in the group.
    Value root = arith::TruncIOp::create(b, loc, b.getI32Type(),
                                         commColumn(row, kPeerRank));
    callNccl(RuntimeFunction::NcclBroadcast,
             {at, at, commColumn(row, kBytes), type, root, comm, frame.stream},
             comm);
  });
}

/// NCCL's in-place or out-of-place forms, as the row says, on the
/// members' communicator. All-gather moves bytes; sums use the element
/// type.
void CudaExchangeEmitter::emitCollective(planner::SegmentMethod method,
                                         Value rangeRow) {
  if (method == planner::SegmentMethod::Broadcast)
    return emitBroadcast(rangeRow);
  auto [group, numMembers, rank] = callerGroup(rangeRow, frame.device);
  Value type = uint8();
  Value dtype = arith::ConstantIntOp::create(
      b, loc, ncclSumDtype(element).value_or(-1), 32);
  Value sum = arith::ConstantIntOp::create(b, loc, nccl_abi::kSum, 32);
  Value stream = frame.stream;
  Value begin = rangeColumn(rangeRow, kCommBegin);
  Value end = rangeColumn(rangeRow, kCommEnd);
  e.loop(begin, end, [&](Value row) {
    Value comm = call(RuntimeFunction::NcclComm,
                      {frame.runtime, frame.device, group, numMembers});
    auto [send, recv, bytes, count] = collectiveRow(method, row, rank);
    Value from = e.pointer(send), to = e.pointer(recv);
    switch (method) {
    case planner::SegmentMethod::AllGather:
      callNccl(RuntimeFunction::NcclAllGather,
               {from, to, bytes, type, comm, stream}, comm);
      break;
    case planner::SegmentMethod::AllReduce:
      callNccl(RuntimeFunction::NcclAllReduce,
               {from, to, count, dtype, sum, comm, stream}, comm);
      break;
    case planner::SegmentMethod::AllToAll:
      emitAllToAll(send, recv, bytes, numMembers, comm);
      break;
    default:
      callNccl(RuntimeFunction::NcclReduceScatter,
               {from, to, count, dtype, sum, comm, stream}, comm);
      break;
    }
  });
}

void CudaExchangeEmitter::emit(Value src, Value dst) {
  Value runtime = frame.runtime, device = frame.device;
  auto sourceType = cast<RankedTensorType>(op.getInput().getType());
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  sourceAddress = toPtrInt(src);
  resultAddress = toPtrInt(dst);
  int64_t sourceBytes = bytesOf(sourceType);
  int64_t resultBytes = bytesOf(resultType);
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
  loadTables(frame.position);
  Value stagingBytes = e.load(table(tables.staging), {block});
  Value staging =
      call(RuntimeFunction::DeviceAlloc,
           {runtime, device,
            arith::MaxSIOp::create(b, loc, stagingBytes, e.i64(1))});
  stagingAddress = toPtrInt(staging);
  groupBuffer = frame.groupBuffer;
  if (schedule.accumulatesIntoDestination && resultBytes > 0) {
    // The plan adds into its destination: start from zeros (one run).
    Value bytes = e.i64(resultBytes);
    launchRow(kernel(KernelKind::Zero, /*outer=*/0, 1, Type()), resultAddress,
              resultAddress, bytes, {}, bytes);
  }
  emitSegments();
  call(RuntimeFunction::DeviceFree, {runtime, device, staging});
  if (scratch)
    call(RuntimeFunction::DeviceFree, {runtime, device, scratch});
}

/// Tiles become device pointers, and partition's offset tables i64 memrefs
/// (the globals their reads load from); everything else is unchanged.
class CudaTypeConverter : public TypeConverter {
public:
  CudaTypeConverter() {
    addConversion([](Type type) { return type; });
    addConversion([](RankedTensorType type) -> Type {
      MLIRContext *context = type.getContext();
      if (type.getElementType().isIndex())
        return MemRefType::get(type.getShape(), IntegerType::get(context, 64));
      return LLVM::LLVMPointerType::get(context);
    });
    // Values of a converted function whose users are not converted yet.
    auto cast = [](OpBuilder &builder, Type type, ValueRange inputs,
                   Location loc) -> Value {
      return UnrealizedConversionCastOp::create(builder, loc, type, inputs)
          .getResult(0);
    };
    addSourceMaterialization(cast);
    addTargetMaterialization(cast);
  }
};

/// A base for the patterns: the lowering they share.
template <typename Op> struct CudaPattern : public OpConversionPattern<Op> {
  CudaPattern(const TypeConverter &converter, MLIRContext *context,
              CudaLowering &lowering)
      : OpConversionPattern<Op>(converter, context), lowering(lowering) {}
  CudaLowering &lowering;
};

/// A partitioned function `(runtime, device, position, tiles...) ->
/// tiles...` becomes the host function `(runtime, device, position, input
/// pointers..., result pointers...)`, with a prologue that gets the
/// device's stream and the world communicator.
struct FuncToHost : public CudaPattern<func::FuncOp> {
  using CudaPattern::CudaPattern;

  LogicalResult
  matchAndRewrite(func::FuncOp function, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    if (!isPartitioned(function))
      return rewriter.notifyMatchFailure(function, "not partitioned");
    const TypeConverter &converter = *getTypeConverter();
    MLIRContext *context = function.getContext();
    Type ptrType = LLVM::LLVMPointerType::get(context);
    TypeConverter::SignatureConversion signature(function.getNumArguments());
    for (auto [index, type] : llvm::enumerate(function.getArgumentTypes()))
      signature.addInputs(index, converter.convertType(type));
    SmallVector<Type> outPointers(function.getNumResults(), ptrType);
    signature.addInputs(outPointers);
    // The world communicator's devices, read before the body moves.
    const std::vector<int64_t> &devices =
        lowering.tables.devicesOf(&function.getBody().front().front());
    int64_t groupSize = lowering.maxGroupSize.lookup(function);

    auto host = func::FuncOp::create(
        rewriter, function.getLoc(), function.getSymName(),
        rewriter.getFunctionType(signature.getConvertedTypes(), {}));
    host.setVisibility(function.getVisibility());
    for (NamedAttribute attr : function->getDiscardableAttrs())
      host->setAttr(attr.getName(), attr.getValue());
    host->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                  rewriter.getUnitAttr());
    rewriter.inlineRegionBefore(function.getBody(), host.getBody(), host.end());
    Block *entry = rewriter.applySignatureConversion(&host.getBody().front(),
                                                     signature, &converter);
    HostFrame &frame = lowering.frames[host];
    frame.entry = entry;
    frame.numInputs = function.getNumArguments() - 3;
    frame.runtime = entry->getArgument(0);
    frame.device = entry->getArgument(1);
    frame.position = entry->getArgument(2);
    rewriter.setInsertionPointToStart(entry);
    emitPrologue(rewriter, function, frame, devices, groupSize);
    rewriter.eraseOp(function);
    return success();
  }

  void emitPrologue(OpBuilder &builder, func::FuncOp function, HostFrame &frame,
                    const std::vector<int64_t> &devices,
                    int64_t groupSize) const {
    Location loc = function.getLoc();
    MLIRContext *context = function.getContext();
    Emitter e(builder, loc);
    if (groupSize > 0) {
      auto buffer = LLVM::AllocaOp::create(
          builder, loc, LLVM::LLVMPointerType::get(context),
          builder.getI64Type(), e.i64(groupSize), alignof(int64_t));
      buffer->setAttr(PolymeshDialect::kGroupBufferAttrName,
                      builder.getUnitAttr());
      frame.groupBuffer = buffer;
    }
    frame.stream = lowering.call(builder, loc, RuntimeFunction::CudaStream,
                                 {frame.runtime, frame.device});
    // Launches depend on the device's stream: gpu-to-llvm turns an async
    // token into the stream it stands for, so kernels run in order with
    // the NCCL calls on that stream.
    frame.streamToken =
        UnrealizedConversionCastOp::create(
            builder, loc, gpu::AsyncTokenType::get(context), frame.stream)
            .getResult(0);
    auto count = static_cast<int64_t>(devices.size());
    std::string devicesTable = lowering.tables.addGlobal(
        builder, ("__polymesh_" + function.getSymName() + "_devices").str(),
        {count}, devices);
    Value devicesPointer =
        e.pointer(e.address(e.global(devicesTable, {count})));
    frame.worldComm = lowering.call(
        builder, loc, RuntimeFunction::NcclComm,
        {frame.runtime, frame.device, devicesPointer, e.i64(count)});
  }
};

/// The return copies what is not yet in the caller's buffers there, waits
/// for the device's stream (results are complete when the function
/// returns) and frees the function's temporaries.
struct ReturnToHost : public CudaPattern<func::ReturnOp> {
  using CudaPattern::CudaPattern;

  LogicalResult
  matchAndRewrite(func::ReturnOp ret, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    HostFrame *frame = lowering.frameOf(ret);
    if (!frame || frame->returned)
      return rewriter.notifyMatchFailure(ret, "not in a host function");
    Location loc = ret.getLoc();
    Emitter e(rewriter, loc);
    for (auto [index, value] : llvm::enumerate(adaptor.getOperands())) {
      Value out = frame->outPointer(index);
      int64_t bytes = bytesOf(ret.getOperand(index).getType());
      if (value != out && bytes > 0)
        lowering.call(
            rewriter, loc, RuntimeFunction::DeviceCopy,
            {frame->runtime, frame->device, out, value, e.i64(bytes)});
    }
    lowering.call(rewriter, loc, RuntimeFunction::DeviceSynchronize,
                  {frame->runtime, frame->device});
    for (Value temporary : frame->temporaries)
      lowering.call(rewriter, loc, RuntimeFunction::DeviceFree,
                    {frame->runtime, frame->device, temporary});
    frame->returned = true;
    rewriter.replaceOpWithNewOp<func::ReturnOp>(ret);
    return success();
  }
};

/// polymesh.exchange -> the device's share of its plan, into the caller's
/// buffer where the result is returned as is.
struct ExchangeToCuda : public CudaPattern<ExchangeOp> {
  using CudaPattern::CudaPattern;

  LogicalResult
  matchAndRewrite(ExchangeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    HostFrame *frame = lowering.frameOf(op);
    PlanTables *tables = lowering.exchangeTables.lookup(op);
    if (!frame || !tables)
      return rewriter.notifyMatchFailure(op, "no host function or tables");
    Value dst = lowering.destinationOf(rewriter, op.getResult(), *frame);
    CudaExchangeEmitter(lowering, *frame, op, *tables, rewriter)
        .emit(adaptor.getInput(), dst);
    rewriter.replaceOp(op, dst);
    return success();
  }
};

/// A dense tensor constant: a fill kernel for a splat, else its elements in
/// memory order, uploaded from a host constant.
struct TensorConstantToCuda : public CudaPattern<arith::ConstantOp> {
  using CudaPattern::CudaPattern;

  LogicalResult
  matchAndRewrite(arith::ConstantOp constant, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    auto dense = dyn_cast<DenseIntOrFPElementsAttr>(constant.getValue());
    HostFrame *frame = lowering.frameOf(constant);
    if (!dense || isOffsetTable(constant.getResult()) || !frame)
      return rewriter.notifyMatchFailure(constant, "not a tile constant");
    Location loc = constant.getLoc();
    int64_t elementBytes = elementBytesOf(dense.getElementType());
    int64_t bytes = bytesOf(constant.getType());
    Value dst = lowering.destinationOf(rewriter, constant.getResult(), *frame);
    rewriter.replaceOp(constant, dst);
    if (bytes == 0)
      return success();
    if (dense.isSplat()) {
      lowering.fill(rewriter, loc, *frame, dst, bytes, elementBytes,
                    bitsOf(dense.getSplatValue<Attribute>()));
      return success();
    }
    std::string image;
    image.reserve(bytes);
    for (Attribute element : dense.getValues<Attribute>()) {
      uint64_t bits = bitsOf(element);
      for (int64_t i = 0; i < elementBytes; ++i)
        image.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
    }
    auto function = cast<func::FuncOp>(frame->entry->getParentOp());
    std::string name = lowering.globalName(function, "__constant");
    {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPointToStart(lowering.module.getBody());
      LLVM::GlobalOp::create(
          rewriter, loc, LLVM::LLVMArrayType::get(rewriter.getI8Type(), bytes),
          /*isConstant=*/true, LLVM::Linkage::Private, name,
          rewriter.getStringAttr(image));
    }
    Value source = LLVM::AddressOfOp::create(
        rewriter, loc, LLVM::LLVMPointerType::get(rewriter.getContext()), name);
    Emitter e(rewriter, loc);
    lowering.call(rewriter, loc, RuntimeFunction::DeviceUpload,
                  {frame->runtime, frame->device, dst, source, e.i64(bytes)});
    return success();
  }
};

/// Partition's table of tile offsets per position: an i64 memref.global.
struct OffsetTableToCuda : public CudaPattern<arith::ConstantOp> {
  using CudaPattern::CudaPattern;

  LogicalResult
  matchAndRewrite(arith::ConstantOp constant, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    HostFrame *frame = lowering.frameOf(constant);
    if (!isOffsetTable(constant.getResult()) || !frame)
      return rewriter.notifyMatchFailure(constant, "not an offset table");
    auto type = cast<RankedTensorType>(constant.getType());
    SmallVector<int64_t> values;
    for (const APInt &value :
         cast<DenseIntElementsAttr>(constant.getValue()).getValues<APInt>())
      values.push_back(value.getSExtValue());
    auto function = cast<func::FuncOp>(frame->entry->getParentOp());
    std::string name = lowering.tables.addGlobal(
        rewriter, lowering.globalName(function, "__offsets"), type.getShape(),
        values);
    rewriter.replaceOp(
        constant,
        Emitter(rewriter, constant.getLoc()).global(name, type.getShape()));
    return success();
  }
};

/// A read of an offset table at the device's position.
struct TableReadToCuda : public CudaPattern<tensor::ExtractOp> {
  using CudaPattern::CudaPattern;

  LogicalResult
  matchAndRewrite(tensor::ExtractOp extract, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    if (!isa<MemRefType>(adaptor.getTensor().getType()))
      return rewriter.notifyMatchFailure(extract, "not a table read");
    Emitter e(rewriter, extract.getLoc());
    rewriter.replaceOp(
        extract, e.toIndex(e.load(adaptor.getTensor(), adaptor.getIndices())));
    return success();
  }
};

/// A slice of a constant at partition's offsets: a strided copy of the box
/// out of the constant's device copy.
struct SliceToCuda : public CudaPattern<tensor::ExtractSliceOp> {
  using CudaPattern::CudaPattern;

  LogicalResult
  matchAndRewrite(tensor::ExtractSliceOp slice, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    HostFrame *frame = lowering.frameOf(slice);
    if (!frame)
      return rewriter.notifyMatchFailure(slice, "not in a host function");
    Location loc = slice.getLoc();
    Emitter e(rewriter, loc);
    Value dst = lowering.destinationOf(rewriter, slice.getResult(), *frame);
    rewriter.replaceOp(slice, dst);
    int64_t bytes = bytesOf(slice.getType());
    if (bytes == 0)
      return success();
    RankedTensorType sourceType = slice.getSourceType();
    int64_t elementBytes = elementBytesOf(sourceType.getElementType());
    int64_t rank = sourceType.getRank();
    SmallVector<int64_t> srcStrides(rank, elementBytes),
        dstStrides(rank, elementBytes);
    for (int64_t d = rank - 2; d >= 0; --d) {
      srcStrides[d] = srcStrides[d + 1] * sourceType.getDimSize(d + 1);
      dstStrides[d] = dstStrides[d + 1] * slice.getType().getDimSize(d + 1);
    }
    Value from = LLVM::PtrToIntOp::create(rewriter, loc, rewriter.getI64Type(),
                                          adaptor.getSource())
                     .getResult();
    SmallVector<OpFoldResult> offsets = getMixedValues(
        slice.getStaticOffsets(), adaptor.getOffsets(), rewriter);
    for (auto [d, offset] : llvm::enumerate(offsets)) {
      Value at = isa<Value>(offset) ? e.toI64(cast<Value>(offset))
                                    : e.i64(*getConstantIntValue(offset));
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
    lowering.launch(rewriter, loc, *frame,
                    lowering.kernels.get(rewriter, KernelKind::Copy, outer,
                                         /*unitBytes=*/1, Type()),
                    e.i64(bytes), args);
    return success();
  }
};

/// Tiles are row-major: a reshape is the same bytes.
template <typename Reshape> struct ReshapeToCuda : public CudaPattern<Reshape> {
  using CudaPattern<Reshape>::CudaPattern;
  using OpAdaptor = typename CudaPattern<Reshape>::OpAdaptor;

  LogicalResult
  matchAndRewrite(Reshape op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    rewriter.replaceOp(op, adaptor.getSrc());
    return success();
  }
};

/// A tile without elements (partition's stand-in for an op the device does
/// not run) still needs a pointer for the exchanges and returns that name
/// it. Any other tensor.empty is the destination of fills, which make
/// their own buffers: it needs no memory, and stands for a null pointer.
struct EmptyToCuda : public CudaPattern<tensor::EmptyOp> {
  using CudaPattern::CudaPattern;

  LogicalResult
  matchAndRewrite(tensor::EmptyOp empty, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    HostFrame *frame = lowering.frameOf(empty);
    if (!frame)
      return rewriter.notifyMatchFailure(empty, "not in a host function");
    if (bytesOf(empty.getType()) == 0)
      rewriter.replaceOp(
          empty, lowering.destinationOf(rewriter, empty.getResult(), *frame));
    else
      rewriter.replaceOpWithNewOp<LLVM::ZeroOp>(
          empty, LLVM::LLVMPointerType::get(rewriter.getContext()));
    return success();
  }
};

/// linalg.fill of a constant: a fill kernel of its bit pattern.
struct FillToCuda : public CudaPattern<linalg::FillOp> {
  using CudaPattern::CudaPattern;

  LogicalResult
  matchAndRewrite(linalg::FillOp fillOp, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    HostFrame *frame = lowering.frameOf(fillOp);
    if (!frame)
      return rewriter.notifyMatchFailure(fillOp, "not in a host function");
    Value result = fillOp.getResult(0);
    auto type = cast<RankedTensorType>(result.getType());
    Attribute value =
        fillOp.getInputs()[0].getDefiningOp<arith::ConstantOp>().getValue();
    Value dst = lowering.destinationOf(rewriter, result, *frame);
    lowering.fill(rewriter, fillOp.getLoc(), *frame, dst, bytesOf(type),
                  elementBytesOf(type.getElementType()), bitsOf(value));
    rewriter.replaceOp(fillOp, dst);
    return success();
  }
};

LogicalResult CudaLowering::prepare() {
  SmallVector<func::FuncOp> functions;
  for (auto function : module.getOps<func::FuncOp>())
    if (isPartitioned(function))
      functions.push_back(function);
  for (func::FuncOp function : functions) {
    if (failed(checkLowerable(function)))
      return failure();
    int64_t &groupSize = maxGroupSize[function];
    WalkResult walk = function.walk([&](ExchangeOp op) {
      FailureOr<PlanTables *> plan = tables.tablesFor(op);
      if (failed(plan))
        return WalkResult::interrupt();
      exchangeTables[op] = *plan;
      if (!(*plan)->members.empty())
        groupSize = std::max(groupSize, (*plan)->maxGroupSize);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  return success();
}

LogicalResult CudaLowering::convert() {
  MLIRContext *context = module.getContext();
  CudaTypeConverter converter;
  ConversionTarget target(*context);
  // What a partitioned function holds on tensors is lowered; plans,
  // meshes and host code are left alone.
  target.markUnknownOpDynamicallyLegal([](Operation *op) {
    auto isTensor = [](Type type) { return isa<TensorType>(type); };
    return !inPartitionedFunction(op) ||
           !(llvm::any_of(op->getOperandTypes(), isTensor) ||
             llvm::any_of(op->getResultTypes(), isTensor));
  });
  target.addIllegalOp<ExchangeOp>();
  target.addDynamicallyLegalOp<func::FuncOp>([&](func::FuncOp function) {
    return !isPartitioned(function) || frames.count(function);
  });
  target.addDynamicallyLegalOp<func::ReturnOp>([&](func::ReturnOp ret) {
    if (!inPartitionedFunction(ret))
      return true;
    HostFrame *frame = frameOf(ret);
    return frame && frame->returned;
  });
  RewritePatternSet patterns(context);
  patterns.add<FuncToHost, ReturnToHost, ExchangeToCuda, TensorConstantToCuda,
               OffsetTableToCuda, TableReadToCuda, SliceToCuda,
               ReshapeToCuda<tensor::ExpandShapeOp>,
               ReshapeToCuda<tensor::CollapseShapeOp>, EmptyToCuda, FillToCuda>(
      converter, context, *this);
  // No folding: a tensor constant folds to a new constant, which the
  // patterns would lower (and upload) a second time before the fold is
  // dropped.
  ConversionConfig config;
  config.foldingMode = DialectConversionFoldingMode::Never;
  if (failed(
          applyPartialConversion(module, target, std::move(patterns), config)))
    return failure();
  if (kernels.hasKernels())
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(context));
  return success();
}

struct PolymeshExchangeToCudaPass
    : public polymesh::impl::PolymeshExchangeToCudaBase<
          PolymeshExchangeToCudaPass> {
  using Base::Base;

  LogicalResult initialize(MLIRContext *context) final {
    return verifyCudaTarget(context, chip, features);
  }

  void getDependentDialects(DialectRegistry &registry) const final {
    registerCudaLoweringDialects(registry);
  }

  void runOnOperation() final {
    CudaLowering lowering(getOperation(), chip, features, directCollectives);
    if (failed(lowering.prepare()) || failed(lowering.convert()))
      return signalPassFailure();
  }
};

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
    CudaLowering lowering(module, chip, features, directCollectives);
    if (failed(lowering.prepare()) || failed(lowering.convert()) ||
        failed(finishPartitionedModule(module, "CUDA",
                                       /*readOnlyArguments=*/false)) ||
        failed(mlir::verify(module)))
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
