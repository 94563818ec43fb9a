//===- CudaKernels.cpp - Generated kernels of the CUDA lowering -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "ExchangeTables.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"

using namespace mlir;
using namespace polymesh::conversion;

namespace {

/// A grid-stride loop over [0, total): each thread starts at its global
/// index and steps by the grid's thread count. The builder is left before
/// the loop's terminator.
Value gridStrideLoop(OpBuilder &builder, Location loc, Value total) {
  Emitter e(builder, loc);
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
  builder.setInsertionPoint(forOp.getBody()->getTerminator());
  return forOp.getInductionVar();
}

} // namespace

gpu::GPUFuncOp KernelBuilder::define(OpBuilder &builder, StringRef name,
                                     ArrayRef<Type> arguments,
                                     llvm::function_ref<void(Block &)> body) {
  if (gpu::GPUFuncOp existing = kernels.lookup(name))
    return existing;
  OpBuilder::InsertionGuard guard(builder);
  if (!gpuModule) {
    builder.setInsertionPointToEnd(module.getBody());
    auto target =
        NVVM::NVVMTargetAttr::get(module.getContext(), /*optLevel=*/2,
                                  "nvptx64-nvidia-cuda", chip, features);
    gpuModule =
        gpu::GPUModuleOp::create(builder, module.getLoc(), kKernelModule,
                                 builder.getArrayAttr({target}));
  }
  builder.setInsertionPointToEnd(gpuModule.getBody());
  auto kernel = gpu::GPUFuncOp::create(builder, module.getLoc(), name,
                                       builder.getFunctionType(arguments, {}));
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                  builder.getUnitAttr());
  Block &entry = kernel.getBody().front();
  builder.setInsertionPointToStart(&entry);
  body(entry);
  gpu::ReturnOp::create(builder, module.getLoc());
  kernels[name] = kernel;
  return kernel;
}

gpu::GPUFuncOp KernelBuilder::get(OpBuilder &builder, KernelKind kind,
                                  int64_t outer, int64_t unitBytes,
                                  Type element) {
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
  Type ptr = LLVM::LLVMPointerType::get(module.getContext());
  Type i64 = builder.getI64Type();
  SmallVector<Type> args = {ptr, ptr, i64};
  for (int64_t i = 0; i < 3 * outer; ++i)
    args.push_back(i64);
  args.push_back(i64);
  return define(builder, name, args, [&](Block &entry) {
    emitStridedBody(builder, entry, kind, outer, unitBytes, element);
  });
}

void KernelBuilder::emitStridedBody(OpBuilder &builder, Block &entry,
                                    KernelKind kind, int64_t outer,
                                    int64_t unitBytes, Type element) {
  Location loc = module.getLoc();
  Type ptr = LLVM::LLVMPointerType::get(module.getContext());
  Emitter e(builder, loc);
  Value src = entry.getArgument(0), dst = entry.getArgument(1);
  Value runUnits = entry.getArgument(2);
  Value total = entry.getArgument(3 + 3 * outer);
  {
    OpBuilder::InsertionGuard loopGuard(builder);
    Value unit = gridStrideLoop(builder, loc, total);
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
}

gpu::GPUFuncOp KernelBuilder::getFill(OpBuilder &builder,
                                      int64_t elementBytes) {
  Type ptr = LLVM::LLVMPointerType::get(module.getContext());
  Type i64 = builder.getI64Type();
  auto body = [&](Block &entry) {
    Location loc = module.getLoc();
    Emitter e(builder, loc);
    Value dst = entry.getArgument(0), pattern = entry.getArgument(1);
    Value count = entry.getArgument(2);
    Type unit = builder.getIntegerType(8 * elementBytes);
    Value value =
        elementBytes == 8
            ? pattern
            : arith::TruncIOp::create(builder, loc, unit, pattern).getResult();
    OpBuilder::InsertionGuard loopGuard(builder);
    Value index = gridStrideLoop(builder, loc, count);
    Value at =
        LLVM::GEPOp::create(builder, loc, ptr, builder.getI8Type(), dst,
                            ValueRange{e.mul(index, e.i64(elementBytes))});
    LLVM::StoreOp::create(builder, loc, value, at, elementBytes);
  };
  return define(builder, "fill_u" + std::to_string(elementBytes),
                {ptr, i64, i64}, body);
}

void polymesh::conversion::launchKernel(OpBuilder &builder, Location loc,
                                        gpu::GPUFuncOp kernel, Value units,
                                        ValueRange args, Value streamToken) {
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

namespace {
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

} // namespace

/// Checks `chip` and `features` before anything is compiled: the chip must
/// be a processor of LLVM's NVPTX backend (sm_NN, sm_NNa, sm_NNf) and the
/// features exactly one of its PTX versions (+ptxNN), at least the oldest
/// that supports the chip (sm_90: PTX 7.8). Unchecked, a bad chip reached
/// upstream's SM version parser (NVVMCheckSMVersion::
/// getTargetSMVersionFromStr), which reads an uninitialized int when the
/// name has no digits after "sm_": chip=foo failed or passed at random, and
/// NVPTX then wrote `.target foo` PTX that ptxas refuses.
LogicalResult polymesh::conversion::verifyCudaTarget(MLIRContext *context,
                                                     StringRef chip,
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
