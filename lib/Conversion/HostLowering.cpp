//===- HostLowering.cpp - Upstream lowering of host code to LLVM ----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MPIToLLVM/MPIToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/TosaToArith/TosaToArith.h"
#include "mlir/Conversion/TosaToLinalg/TosaToLinalg.h"
#include "mlir/Conversion/TosaToSCF/TosaToSCF.h"
#include "mlir/Conversion/TosaToTensor/TosaToTensor.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/BufferUtils.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/DLTI/DLTI.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/MPI/IR/MPI.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/AllocationOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/Dialect/Tosa/Transforms/Passes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace {
/// Returns each value at most once per return: upstream's
/// The mpi dialect's ops (the MPI lowering's mpi.send and mpi.recv) to
/// calls of the MPI implementation the module's DLTI names, by upstream's
/// MPI-to-LLVM patterns, after the other conversions to LLVM: their memref
/// operands are descriptors by then, which the casts left around them fold
/// back into.
struct MpiToLlvmPass
    : public PassWrapper<MpiToLlvmPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MpiToLlvmPass)
  StringRef getArgument() const final { return "polymesh-mpi-to-llvm"; }
  void getDependentDialects(DialectRegistry &registry) const final {
    registry.insert<LLVM::LLVMDialect>();
  }
  void runOnOperation() final {
    ModuleOp module = getOperation();
    LLVMTypeConverter converter(&getContext());
    RewritePatternSet patterns(&getContext());
    mpi::populateMPIToLLVMConversionPatterns(converter, patterns);
    ConversionTarget target(getContext());
    target.addLegalDialect<LLVM::LLVMDialect>();
    target.addIllegalDialect<mpi::MPIDialect>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      return signalPassFailure();
  }
};

/// buffer-results-to-out-params crashes on a function that returns the same
/// buffer twice (LLVM 22), so a repeated value is returned as a copy.
struct DistinctResultsPass
    : public PassWrapper<DistinctResultsPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(DistinctResultsPass)
  StringRef getArgument() const final { return "polymesh-distinct-results"; }
  void getDependentDialects(DialectRegistry &registry) const final {
    registry.insert<bufferization::BufferizationDialect>();
  }
  void runOnOperation() final {
    getOperation().walk([](func::ReturnOp ret) {
      llvm::SmallPtrSet<Value, 8> seen;
      OpBuilder builder(ret);
      for (OpOperand &operand : ret->getOpOperands()) {
        Value value = operand.get();
        auto type = dyn_cast<RankedTensorType>(value.getType());
        if (!type || seen.insert(value).second)
          continue;
        operand.set(bufferization::AllocTensorOp::create(
            builder, ret.getLoc(), type, ValueRange{}, /*copy=*/value));
      }
    });
  }
};

/// Creates the memref.global of every tensor constant, in program order,
/// before one-shot bufferization does. Module bufferization visits
/// functions in an order it takes from a DenseMap keyed by FuncOp (LLVM 22,
/// getFuncOpsOrderedByCalls), that is by address, and each constant's
/// global is created, named (`__constant_8xf32_3`) and placed as its
/// function is reached: the globals' order and suffixes changed from run to
/// run. Bufferization reuses an existing global with the same value and
/// alignment, so creating them here fixes both.
struct ConstantGlobalsPass
    : public PassWrapper<ConstantGlobalsPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ConstantGlobalsPass)
  explicit ConstantGlobalsPass(uint64_t alignment) : alignment(alignment) {}
  StringRef getArgument() const final { return "polymesh-constant-globals"; }
  void getDependentDialects(DialectRegistry &registry) const final {
    registry.insert<memref::MemRefDialect>();
  }
  void runOnOperation() final {
    SymbolTableCollection symbolTables;
    WalkResult result = getOperation().walk([&](arith::ConstantOp constant) {
      // The constants that arith's bufferization turns into globals, with
      // its default (absent) memory space.
      if (!isa<RankedTensorType>(constant.getType()))
        return WalkResult::advance();
      if (failed(
              bufferization::getGlobalFor(constant, symbolTables, alignment))) {
        constant.emitError() << "cannot create a global for this constant";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
  uint64_t alignment;
};

/// Drops the operands of `tensor.concat` with no extent along the
/// concatenated dimension. Upstream's bufferization of concat writes each
/// operand into a subview at its running offset, and a zero-size operand
/// after the last element gets the offset of the dimension's end, which
/// memref.subview refuses ("offset 0 is out-of-bounds: 4 >= 4", LLVM 22).
/// A concat of nothing but empty operands is an empty tensor.
struct DropEmptyConcatOperandsPass
    : public PassWrapper<DropEmptyConcatOperandsPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(DropEmptyConcatOperandsPass)
  StringRef getArgument() const final {
    return "polymesh-drop-empty-concat-operands";
  }
  void runOnOperation() final {
    llvm::SmallVector<tensor::ConcatOp> concats;
    getOperation().walk([&](tensor::ConcatOp op) { concats.push_back(op); });
    for (tensor::ConcatOp op : concats) {
      int64_t dim = op.getDim();
      llvm::SmallVector<Value> kept;
      for (Value input : op.getInputs())
        if (cast<RankedTensorType>(input.getType()).getDimSize(dim) != 0)
          kept.push_back(input);
      RankedTensorType type = op.getResultType();
      // A dynamically shaped empty result: one empty operand at offset 0
      // is fine, and tensor.empty would need its sizes.
      if (kept.empty() && !type.hasStaticShape())
        kept.push_back(op.getInputs().front());
      if (kept.size() == op.getInputs().size())
        continue;
      OpBuilder builder(op);
      Value replacement;
      if (kept.empty())
        replacement = tensor::EmptyOp::create(
            builder, op.getLoc(), type.getShape(), type.getElementType());
      else if (kept.size() == 1 && kept.front().getType() == type)
        replacement = kept.front();
      else
        replacement = tensor::ConcatOp::create(
            builder, op.getLoc(), type, static_cast<uint64_t>(dim), kept);
      op.replaceAllUsesWith(replacement);
      op.erase();
    }
  }
};
} // namespace

namespace {
/// What mpi.send and mpi.recv do to memory, which upstream's ops do not
/// declare (LLVM 22) and ownership-based deallocation must know for an op
/// with a memref operand: the send reads its buffer, the receive writes
/// it, and both write the default resource (the messages), so that no
/// pass drops or reorders them.
template <typename Op, bool writesBuffer>
struct MpiBufferEffects : public MemoryEffectOpInterface::ExternalModel<
                              MpiBufferEffects<Op, writesBuffer>, Op> {
  void
  getEffects(Operation *op,
             SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
                 &effects) const {
    OpOperand &buffer = op->getOpOperand(0);
    if (writesBuffer)
      effects.emplace_back(MemoryEffects::Write::get(), &buffer);
    else
      effects.emplace_back(MemoryEffects::Read::get(), &buffer);
    effects.emplace_back(MemoryEffects::Write::get());
  }
};
} // namespace

void polymesh::registerHostLoweringDialects(DialectRegistry &registry) {
  // The MPI lowering's ops and the #dlti.map naming the MPI, so that its
  // output reads back in.
  registry.insert<mpi::MPIDialect, DLTIDialect>();
  registry.addExtension(+[](MLIRContext *context, mpi::MPIDialect *) {
    mpi::SendOp::attachInterface<MpiBufferEffects<mpi::SendOp, false>>(
        *context);
    mpi::RecvOp::attachInterface<MpiBufferEffects<mpi::RecvOp, true>>(*context);
  });
  registry.insert<polymesh::PolymeshDialect, arith::ArithDialect,
                  bufferization::BufferizationDialect, func::FuncDialect,
                  linalg::LinalgDialect, LLVM::LLVMDialect, math::MathDialect,
                  scf::SCFDialect, tensor::TensorDialect, tosa::TosaDialect>();
  // One-shot bufferization asks every op on tensors for its bufferization
  // model, and ownership-based deallocation asks ops that forward or select
  // buffers for theirs; an op whose dialect promised a model that is not
  // registered aborts the process instead of failing the pass.
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(
      registry);
  cf::registerBufferizableOpInterfaceExternalModels(registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  arith::registerBufferDeallocationOpInterfaceExternalModels(registry);
  cf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  scf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  memref::registerAllocationOpInterfaceExternalModels(registry);
}

void polymesh::buildHostLoweringPipeline(OpPassManager &pm) {
  // TOSA first, in the order upstream's tosa-to-linalg pipeline uses: named
  // ops, then elementwise ops, then what tosa-to-linalg leaves legal
  // (constants, reshapes and slices, control flow).
  OpPassManager &tosaPm = pm.nest<func::FuncOp>();
  tosaPm.addPass(tosa::createTosaOptionalDecompositionsPass());
  tosaPm.addPass(tosa::createTosaToLinalgNamed({}));
  tosaPm.addPass(tosa::createTosaToLinalg());
  tosaPm.addPass(createTosaToArithPass());
  tosaPm.addPass(createTosaToTensorPass());
  tosaPm.addPass(createTosaToSCFPass());
  // Elementwise arith and math ops on whole tensors have no bufferization
  // of their own; as linalg.generic they do.
  tosaPm.addPass(createConvertElementwiseToLinalgPass());

  // Identity layouts at function boundaries, so a host tensor is passed as
  // a plain dense descriptor. ReferenceRunner::create marks arguments
  // `bufferization.writable = false`, so bufferization copies rather than
  // writes into them and inputs survive a run.
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  // A loop body computes a carried tensor into a new buffer (tanh of a
  // matmul); the deallocation pipeline below frees the old one.
  bufferize.allowReturnAllocsFromLoops = true;
  pm.addPass(std::make_unique<DropEmptyConcatOperandsPass>());
  // Right before bufferization: the TOSA and elementwise passes above fold
  // `x op x` into `x` (max, min, and, or), which can make a value returned
  // twice only now.
  pm.addPass(std::make_unique<DistinctResultsPass>());
  pm.addPass(std::make_unique<ConstantGlobalsPass>(bufferize.bufferAlignment));
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  // Results become out-parameters that the caller allocates: no memref is
  // returned across the C interface, so nothing allocated by generated code
  // has to be freed by the host, and any number of results of any rank is
  // passed the same way.
  bufferization::BufferResultsToOutParamsPassOptions outParams;
  outParams.hoistStaticAllocs = true;
  outParams.modifyPublicFunctions = true;
  pm.addPass(bufferization::createBufferResultsToOutParamsPass(outParams));
  bufferization::buildBufferDeallocationPipeline(pm);

  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());

  // f16 and bf16: compute in f32 and round once, which equals the correctly
  // rounded narrow result for +, -, *, / and sqrt (f32 has more than twice
  // their precision). bf16 conversions are then expanded to integer code,
  // because LLVM lowers them to a libgcc call that Debian 12's GCC lacks.
  math::MathExtendToSupportedTypesOptions mathExtend;
  pm.addPass(math::createMathExtendToSupportedTypes(mathExtend));
  arith::ArithEmulateUnsupportedFloatsOptions emulate;
  emulate.sourceTypeStrs = {"f16", "bf16"};
  emulate.targetTypeStr = "f32";
  pm.addPass(arith::createArithEmulateUnsupportedFloats(emulate));
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));

  pm.addPass(createConvertMathToLLVMPass());
  // What has no LLVM intrinsic (erf, tan, ...) becomes a libm call.
  pm.addPass(createConvertMathToLibmPass());
  // expand_shape, collapse_shape and subviews become plain descriptor
  // arithmetic, which may create affine.apply again.
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(std::make_unique<MpiToLlvmPass>());
  pm.addPass(createReconcileUnrealizedCastsPass());
}
