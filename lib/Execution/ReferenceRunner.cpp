//===- ReferenceRunner.cpp - Unsharded reference execution ----------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Strips sharding from a module, lowers it with upstream passes only and
// runs its functions through JitModule. See ReferenceRunner.h for the
// contract; the comments here say why each step is there.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/ReferenceRunner.h"
#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Transforms/CallGraph.h"
#include "polymesh/Transforms/ControlFlow.h"
#include "polymesh/Transforms/TensorLimits.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
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
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
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
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace polymesh::execution;

namespace {

constexpr llvm::StringLiteral kPolymeshPrefix = "polymesh.";

std::optional<ElementType> toElementType(Type type) {
  if (type.isF32())
    return ElementType::F32;
  if (type.isF64())
    return ElementType::F64;
  if (type.isF16())
    return ElementType::F16;
  if (type.isBF16())
    return ElementType::BF16;
  // Signless integers only: signed and unsigned integer types do not
  // survive the lowering (arith works on signless integers).
  if (type.isSignlessInteger(1))
    return ElementType::I1;
  if (type.isSignlessInteger(8))
    return ElementType::I8;
  if (type.isSignlessInteger(32))
    return ElementType::I32;
  if (type.isSignlessInteger(64))
    return ElementType::I64;
  return std::nullopt;
}

} // namespace

std::string polymesh::execution::formatLocationPrefix(Location loc) {
  auto fileLoc = loc->findInstanceOf<FileLineColLoc>();
  if (!fileLoc)
    return "";
  return llvm::formatv(
             "{0}:{1}:{2}: ", llvm::sys::path::filename(fileLoc.getFilename()),
             fileLoc.getLine(), fileLoc.getColumn())
      .str();
}

llvm::Expected<TensorSignature>
polymesh::execution::getTensorSignature(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  auto fail = [&](llvm::StringRef why) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "type '" << type << "' is not supported: " << why;
    return llvm::createStringError(text);
  };
  if (!tensor)
    return fail("only ranked tensors are");
  if (!tensor.hasStaticShape())
    return fail("only static shapes are");
  if (tensor.getEncoding())
    return fail("tensors with an encoding are not");
  std::optional<ElementType> element = toElementType(tensor.getElementType());
  if (!element)
    return fail("element types are f32, f64, f16, bf16, i1, i8, i32, i64");
  return TensorSignature{
      *element,
      std::vector<int64_t>(tensor.getShape().begin(), tensor.getShape().end())};
}

namespace {

/// Calls `remove` with the name of every `polymesh.*` attribute in `attrs`
/// (a copy: removing changes the list it came from).
template <typename RemoveFn>
void removePolymeshAttrs(llvm::ArrayRef<NamedAttribute> attrs,
                         RemoveFn remove) {
  llvm::SmallVector<StringAttr> names;
  for (NamedAttribute attr : attrs)
    if (attr.getName().getValue().starts_with(kPolymeshPrefix))
      names.push_back(attr.getName());
  for (StringAttr name : names)
    remove(name);
}

llvm::ArrayRef<NamedAttribute> attrsOf(DictionaryAttr dict) {
  return dict ? dict.getValue() : llvm::ArrayRef<NamedAttribute>();
}

} // namespace

llvm::Expected<FunctionSignature>
polymesh::execution::getFunctionSignature(func::FuncOp func) {
  FunctionSignature signature;
  FunctionType type = func.getFunctionType();
  // An argument is located where the function declares it; a result where
  // the function is (its type is in the signature there too).
  auto collect = [&](TypeRange types, llvm::StringRef what,
                     std::vector<TensorSignature> &out) -> llvm::Error {
    for (auto [i, t] : llvm::enumerate(types)) {
      auto entry = getTensorSignature(t);
      if (!entry) {
        Location loc = what == "argument" && !func.isExternal()
                           ? func.getArgument(i).getLoc()
                           : func.getLoc();
        return llvm::createStringError(
            llvm::formatv("{0}{1} #{2} of @{3}: {4}", formatLocationPrefix(loc),
                          what, i, func.getSymName(),
                          llvm::toString(entry.takeError()))
                .str());
      }
      out.push_back(std::move(*entry));
    }
    return llvm::Error::success();
  };
  if (llvm::Error err =
          collect(type.getInputs(), "argument", signature.arguments))
    return std::move(err);
  if (llvm::Error err = collect(type.getResults(), "result", signature.results))
    return std::move(err);
  return signature;
}

void polymesh::execution::registerReferenceDialects(DialectRegistry &registry) {
  polymesh::registerHostLoweringDialects(registry);
  registerJitTranslations(registry);
}

LogicalResult polymesh::execution::stripSharding(ModuleOp module) {
  // Collect first: erasing while walking would invalidate the walk.
  llvm::SmallVector<Operation *> identities;
  llvm::SmallVector<Operation *> erased;
  Operation *unsupported = nullptr;
  module.walk([&](Operation *op) {
    if (isa<polymesh::ShardingConstraintOp, polymesh::ReshardOp,
            polymesh::TransferOp, polymesh::PropagationBarrierOp>(op)) {
      identities.push_back(op);
    } else if (isa<polymesh::MeshOp, polymesh::ShardingGroupOp>(op)) {
      // (A group only says how members are placed; like a mesh it has no
      // meaning without sharding.)
      erased.push_back(op);
    } else if (isa_and_nonnull<polymesh::PolymeshDialect>(op->getDialect())) {
      unsupported = op;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (unsupported)
    return unsupported->emitOpError(
        "has no unsharded meaning: the reference cannot run it");

  // Each of these ops returns its operand's value under another sharding,
  // so without sharding it is its operand.
  for (Operation *op : identities) {
    op->getResult(0).replaceAllUsesWith(op->getOperand(0));
    op->erase();
  }
  for (Operation *op : erased)
    op->erase();

  module.walk([](Operation *op) {
    removePolymeshAttrs(
        llvm::to_vector(op->getDiscardableAttrs()),
        [&](StringAttr name) { op->removeDiscardableAttr(name); });
    auto func = dyn_cast<func::FuncOp>(op);
    if (!func)
      return;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      removePolymeshAttrs(
          attrsOf(func.getArgAttrDict(i)),
          [&](StringAttr name) { func.removeArgAttr(i, name); });
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
      removePolymeshAttrs(
          attrsOf(func.getResultAttrDict(i)),
          [&](StringAttr name) { func.removeResultAttr(i, name); });
  });
  return success();
}

LogicalResult polymesh::execution::checkReferenceLimits(
    ModuleOp module, llvm::ArrayRef<std::string> functions) {
  llvm::SmallVector<func::FuncOp> roots;
  if (functions.empty()) {
    for (auto func : module.getOps<func::FuncOp>())
      if (func.isPublic() && !func.isExternal())
        roots.push_back(func);
  } else {
    for (const std::string &name : functions)
      if (auto func = module.lookupSymbol<func::FuncOp>(name))
        roots.push_back(func);
  }

  // A cycle would run until the reference's stack overflows; a declaration
  // has no code to run.
  SymbolTableCollection symbols;
  FailureOr<llvm::SmallVector<func::FuncOp>> reachable =
      polymesh::orderCalleesFirst(
          roots, symbols, [](func::CallOp call, func::FuncOp callee) {
            return call.emitOpError()
                   << "calls @" << callee.getSymName()
                   << ", a declaration without a body: the reference has no "
                      "code to run for it";
          });
  if (failed(reachable))
    return failure();

  for (func::FuncOp func : llvm::reverse(*reachable)) {
    if (failed(polymesh::checkTensorSizes(func)))
      return failure();
    // As --polymesh-partition, and before upstream's bufferization, whose
    // analysis is exponential in nested scf.execute_region.
    if (failed(polymesh::checkTensorRegions(func)))
      return failure();
  }
  return success();
}

void polymesh::execution::buildReferenceLoweringPipeline(OpPassManager &pm) {
  polymesh::buildHostLoweringPipeline(pm);
}

llvm::Expected<std::unique_ptr<ReferenceRunner>>
ReferenceRunner::create(ModuleOp module, llvm::ArrayRef<std::string> functions,
                        const JitOptions &options) {
  MLIRContext *context = module.getContext();
  DialectRegistry registry;
  registerReferenceDialects(registry);
  context->appendDialectRegistry(registry);
  context->loadDialect<bufferization::BufferizationDialect>();

  // Before cloning: a type too large to count must not reach any lowering.
  if (failed(checkReferenceLimits(module, functions)))
    return llvm::createStringError(
        "the reference cannot run this program (docs/limits.md)");

  OwningOpRef<ModuleOp> clone(module.clone());
  if (failed(stripSharding(*clone)))
    return llvm::createStringError("the module has ops the reference "
                                   "cannot run without sharding");

  std::unique_ptr<ReferenceRunner> runner(new ReferenceRunner());
  // Which functions to run, in the order asked for (module order when all).
  if (functions.empty()) {
    for (auto func : clone->getOps<func::FuncOp>())
      if (func.isPublic() && !func.isExternal())
        runner->names.push_back(func.getSymName().str());
  } else {
    llvm::StringSet<> seen;
    for (const std::string &name : functions) {
      auto func = clone->lookupSymbol<func::FuncOp>(name);
      if (!func)
        return llvm::createStringError("no function named @" + name);
      if (func.isExternal())
        return llvm::createStringError("@" + name +
                                       " is a declaration without a body");
      if (seen.insert(name).second)
        runner->names.push_back(name);
    }
  }

  OpBuilder builder(context);
  for (const std::string &name : runner->names) {
    auto func = clone->lookupSymbol<func::FuncOp>(name);
    auto signature = getFunctionSignature(func);
    if (!signature) {
      runner->unsupported[name] = llvm::toString(signature.takeError());
      continue;
    }
    runner->signatures[name] = std::move(*signature);
  }
  // Only functions that can be run stay public; symbol-dce then drops every
  // other function that none of them calls, so an op or a signature in a
  // function that is not run cannot fail the compilation.
  for (auto func : clone->getOps<func::FuncOp>())
    if (!runner->signatures.contains(func.getSymName()))
      func.setPrivate();
  // Every function with a body is compiled with a C interface; arguments are
  // marked read-only so bufferization copies instead of writing into them.
  for (auto func : clone->getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    func->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                  builder.getUnitAttr());
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (isa<TensorType>(func.getArgument(i).getType()))
        func.setArgAttr(i,
                        bufferization::BufferizationDialect::kWritableAttrName,
                        builder.getBoolAttr(false));
  }
  if (failed(verify(*clone)))
    return llvm::createStringError(
        "the module does not verify after removing its sharding");

  PassManager pm(context);
  pm.addPass(createSymbolDCEPass());
  buildReferenceLoweringPipeline(pm);
  if (failed(pm.run(*clone)))
    return llvm::createStringError(
        "lowering the unsharded reference to LLVM failed");
  // Most conversions to LLVM are partial: an op that no pass knows survives
  // them silently. Name each such op (once per op name) at its source
  // location rather than leave it to the LLVM IR translation. The casts
  // that conversions leave around such an op are only its consequence, so
  // they are named only when nothing else is left.
  llvm::SmallVector<Operation *> casts, others;
  clone->walk([&](Operation *op) {
    if (op == clone->getOperation() ||
        isa_and_nonnull<LLVM::LLVMDialect>(op->getDialect()))
      return;
    (isa<UnrealizedConversionCastOp>(op) ? casts : others).push_back(op);
  });
  llvm::StringSet<> named;
  for (Operation *op : others.empty() ? casts : others)
    if (named.insert(op->getName().getStringRef()).second)
      op->emitError() << "'" << op->getName()
                      << "' is not supported by the reference lowering: "
                         "upstream passes left it unlowered";
  if (!named.empty())
    return llvm::createStringError(
        "the unsharded reference has ops that cannot be lowered to LLVM");

  auto jit = JitModule::create(*clone, options);
  if (!jit)
    return llvm::createStringError("JIT compilation of the reference failed: " +
                                   llvm::toString(jit.takeError()));
  runner->jit = std::move(*jit);
  // Compile to machine code now, not inside the first (timed) run.
  for (const auto &entry : runner->signatures)
    if (llvm::Error err = runner->jit->prepare(entry.getKey()))
      return llvm::createStringError("JIT compilation of the reference "
                                     "failed: " +
                                     llvm::toString(std::move(err)));
  return std::move(runner);
}

llvm::Expected<FunctionSignature>
ReferenceRunner::getSignature(llvm::StringRef name) const {
  auto it = signatures.find(name);
  if (it != signatures.end())
    return it->second;
  auto why = unsupported.find(name);
  if (why != unsupported.end())
    return llvm::createStringError(why->second);
  return llvm::createStringError("@" + name.str() +
                                 " is not a function the reference compiled");
}

llvm::Expected<std::vector<HostTensor>>
ReferenceRunner::run(llvm::StringRef name, llvm::ArrayRef<HostTensor> inputs) {
  auto signature = getSignature(name);
  if (!signature)
    return signature.takeError();
  if (inputs.size() != signature->arguments.size())
    return llvm::createStringError(
        llvm::formatv("@{0} takes {1} arguments, got {2}", name,
                      signature->arguments.size(), inputs.size())
            .str());
  llvm::SmallVector<const HostTensor *> inputPointers;
  for (auto [i, input] : llvm::enumerate(inputs)) {
    const TensorSignature &expected = signature->arguments[i];
    if (input.getElementType() != expected.elementType ||
        input.getShape() != expected.shape)
      return llvm::createStringError(
          llvm::formatv(
              "argument #{0} of @{1} must be {2}, got {3}", i, name,
              formatTensorType(expected.elementType, expected.shape),
              formatTensorType(input.getElementType(), input.getShape()))
              .str());
    inputPointers.push_back(&input);
  }
  std::vector<HostTensor> results;
  results.reserve(signature->results.size());
  for (const TensorSignature &result : signature->results)
    results.emplace_back(result.elementType, result.shape);
  llvm::SmallVector<HostTensor *> outputPointers;
  for (HostTensor &result : results)
    outputPointers.push_back(&result);
  if (llvm::Error err = jit->call(name, inputPointers, outputPointers))
    return std::move(err);
  return std::move(results);
}
