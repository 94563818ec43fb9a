//===- JitModule.cpp - JIT-compiled LLVM-dialect modules ------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/JitModule.h"
#include "polymesh/Runtime/PolymeshRuntime.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
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

/// Every function of the runtime's C ABI by its C name, so that generated
/// code that declares them (`llvm.func @polymesh_rt_send(...)`) links
/// against this process's copy.
llvm::orc::SymbolMap runtimeSymbols(llvm::orc::MangleAndInterner interner) {
  llvm::orc::SymbolMap symbols;
  auto add = [&](const char *name, auto *function) {
    symbols[interner(name)] = llvm::orc::ExecutorSymbolDef(
        llvm::orc::ExecutorAddr::fromPtr(reinterpret_cast<void *>(function)),
        llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
  };
#define POLYMESH_RT_SYMBOL(name) add(#name, &name)
  POLYMESH_RT_SYMBOL(polymesh_rt_create_loopback);
  POLYMESH_RT_SYMBOL(polymesh_rt_destroy);
  POLYMESH_RT_SYMBOL(polymesh_rt_last_error);
  POLYMESH_RT_SYMBOL(polymesh_rt_status);
  POLYMESH_RT_SYMBOL(polymesh_rt_num_devices);
  POLYMESH_RT_SYMBOL(polymesh_rt_device_id);
  POLYMESH_RT_SYMBOL(polymesh_rt_dtype_size);
  POLYMESH_RT_SYMBOL(polymesh_rt_group_start);
  POLYMESH_RT_SYMBOL(polymesh_rt_group_end);
  POLYMESH_RT_SYMBOL(polymesh_rt_send);
  POLYMESH_RT_SYMBOL(polymesh_rt_recv);
  POLYMESH_RT_SYMBOL(polymesh_rt_mpi_route);
  POLYMESH_RT_SYMBOL(polymesh_rt_broadcast);
  POLYMESH_RT_SYMBOL(polymesh_rt_all_gather);
  POLYMESH_RT_SYMBOL(polymesh_rt_all_to_all);
  POLYMESH_RT_SYMBOL(polymesh_rt_all_reduce);
  POLYMESH_RT_SYMBOL(polymesh_rt_reduce_scatter);
  POLYMESH_RT_SYMBOL(polymesh_rt_copy);
  POLYMESH_RT_SYMBOL(polymesh_rt_staging);
  POLYMESH_RT_SYMBOL(polymesh_rt_run_devices);
#undef POLYMESH_RT_SYMBOL
  return symbols;
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
  engineOptions.jitCodeGenOptLevel =
      llvm::CodeGenOpt::getLevel(static_cast<int>(options.optLevel))
          .value_or(llvm::CodeGenOptLevel::Default);
  llvm::StringRef libs[] = {kCRunnerUtils};
  engineOptions.sharedLibPaths = libs;
  engineOptions.enableGDBNotificationListener = false;
  engineOptions.enablePerfNotificationListener = false;
  auto engine = ExecutionEngine::create(module, engineOptions);
  if (!engine)
    return engine.takeError();
  // Before any lookup: the first one links the module.
  (*engine)->registerSymbols(runtimeSymbols);
  if (!options.symbols.empty()) {
    std::vector<std::pair<std::string, void *>> extra = options.symbols;
    (*engine)->registerSymbols([&](llvm::orc::MangleAndInterner interner) {
      llvm::orc::SymbolMap symbols;
      for (const auto &[name, address] : extra)
        symbols[interner(name)] = llvm::orc::ExecutorSymbolDef(
            llvm::orc::ExecutorAddr::fromPtr(address),
            llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
      return symbols;
    });
  }
  return std::unique_ptr<JitModule>(new JitModule(std::move(*engine)));
}

llvm::Error JitModule::prepare(llvm::StringRef name) {
  if (entryPoints.contains(name))
    return llvm::Error::success();
  auto packed = engine->lookupPacked(("_mlir_ciface_" + name).str());
  if (!packed)
    return packed.takeError();
  entryPoints[name] = *packed;
  // The lookup linked the module, so every symbol its constructors call is
  // resolved: they can run now.
  engine->initialize();
  return llvm::Error::success();
}

llvm::Error JitModule::call(llvm::StringRef name,
                            llvm::ArrayRef<const HostTensor *> inputs,
                            llvm::ArrayRef<HostTensor *> outputs) {
  return call(name, /*scalars=*/{}, inputs, outputs);
}

llvm::Error JitModule::call(llvm::StringRef name,
                            llvm::ArrayRef<uint64_t> scalars,
                            llvm::ArrayRef<const HostTensor *> inputs,
                            llvm::ArrayRef<HostTensor *> outputs) {
  // A prepared entry point is only read, so concurrent calls from device
  // threads share the map safely.
  auto entry = entryPoints.find(name);
  if (entry == entryPoints.end()) {
    if (llvm::Error err = prepare(name))
      return err;
    entry = entryPoints.find(name);
  }
  // Descriptors first, then the pointers to them that the C interface takes,
  // then the addresses of those pointers (and of the scalars) that the
  // packed wrapper reads.
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
  std::vector<uint64_t> scalarValues(scalars.begin(), scalars.end());
  llvm::SmallVector<void *> packed;
  for (uint64_t &scalar : scalarValues)
    packed.push_back(&scalar);
  for (void *&pointer : descriptorPointers)
    packed.push_back(&pointer);
  entry->second(packed.data());
  return llvm::Error::success();
}
