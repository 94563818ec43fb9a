//===- JitModule.cpp - JIT-compiled LLVM-dialect modules ------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/JitModule.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/Support/TargetSelect.h"

#include <cstdint>
#include <mutex>

using namespace mlir;
using namespace polymesh::execution;

namespace {

/// Where MLIR's C runner utilities live. Generated code calls `memrefCopy`
/// from them for copies that are not contiguous (a strided view returned
/// from a function, for example); contiguous copies become memcpy.
#ifndef POLYMESH_MLIR_C_RUNNER_UTILS
#error "POLYMESH_MLIR_C_RUNNER_UTILS must name libmlir_c_runner_utils.so"
#endif
constexpr const char *kCRunnerUtils = POLYMESH_MLIR_C_RUNNER_UTILS;

void initializeNativeTargetOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

/// A memref descriptor as the LLVM lowering lays it out for rank r:
/// { T *allocated, T *aligned, i64 offset, i64 sizes[r], i64 strides[r] }.
/// Every field is 8 bytes on the 64-bit hosts polymesh-run targets, so an
/// array of words holds it without padding.
std::vector<int64_t> makeDescriptor(const HostTensor &tensor) {
  static_assert(sizeof(void *) == sizeof(int64_t),
                "memref descriptors are built for 64-bit hosts");
  const std::vector<int64_t> &shape = tensor.getShape();
  const size_t rank = shape.size();
  std::vector<int64_t> words(3 + 2 * rank);
  auto data = reinterpret_cast<intptr_t>(tensor.getData());
  words[0] = data;
  words[1] = data;
  words[2] = 0;
  int64_t stride = 1;
  for (size_t i = rank; i-- > 0;) {
    words[3 + i] = shape[i];
    words[3 + rank + i] = stride;
    stride *= shape[i];
  }
  return words;
}

} // namespace

void polymesh::execution::registerJitTranslations(DialectRegistry &registry) {
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
}

JitModule::JitModule(std::unique_ptr<ExecutionEngine> engine)
    : engine(std::move(engine)) {}

JitModule::~JitModule() = default;

llvm::Expected<std::unique_ptr<JitModule>>
JitModule::create(ModuleOp module, const JitOptions &options) {
  initializeNativeTargetOnce();
  DialectRegistry registry;
  registerJitTranslations(registry);
  module->getContext()->appendDialectRegistry(registry);

  // The optimizer runs on the LLVM IR inside ExecutionEngine::create, so
  // the transformer need not outlive this call.
  auto transformer = makeOptimizingTransformer(options.optLevel,
                                               /*sizeLevel=*/0,
                                               /*targetMachine=*/nullptr);
  ExecutionEngineOptions engineOptions;
  engineOptions.transformer = transformer;
  llvm::StringRef libs[] = {kCRunnerUtils};
  engineOptions.sharedLibPaths = libs;
  engineOptions.enableGDBNotificationListener = false;
  engineOptions.enablePerfNotificationListener = false;
  auto engine = ExecutionEngine::create(module, engineOptions);
  if (!engine)
    return engine.takeError();
  return std::unique_ptr<JitModule>(new JitModule(std::move(*engine)));
}

llvm::Error JitModule::prepare(llvm::StringRef name) {
  if (entryPoints.contains(name))
    return llvm::Error::success();
  auto packed = engine->lookupPacked(("_mlir_ciface_" + name).str());
  if (!packed)
    return packed.takeError();
  entryPoints[name] = *packed;
  return llvm::Error::success();
}

llvm::Error JitModule::call(llvm::StringRef name,
                            llvm::ArrayRef<const HostTensor *> inputs,
                            llvm::ArrayRef<HostTensor *> outputs) {
  // Descriptors first, then the pointers to them that the C interface takes,
  // then the addresses of those pointers that the packed wrapper reads.
  std::vector<std::vector<int64_t>> descriptors;
  descriptors.reserve(inputs.size() + outputs.size());
  for (const HostTensor *tensor : inputs)
    descriptors.push_back(makeDescriptor(*tensor));
  for (HostTensor *tensor : outputs)
    descriptors.push_back(makeDescriptor(*tensor));
  std::vector<void *> descriptorPointers;
  descriptorPointers.reserve(descriptors.size());
  for (std::vector<int64_t> &descriptor : descriptors)
    descriptorPointers.push_back(descriptor.data());
  llvm::SmallVector<void *> packed;
  for (void *&pointer : descriptorPointers)
    packed.push_back(&pointer);
  if (llvm::Error err = prepare(name))
    return err;
  entryPoints[name](packed.data());
  return llvm::Error::success();
}
