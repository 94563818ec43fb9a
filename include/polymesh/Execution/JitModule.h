//===- JitModule.h - JIT-compiled LLVM-dialect modules ----------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// A thin layer over MLIR's ExecutionEngine (ORC): it compiles a module that
// is already in the LLVM dialect and calls its functions on host tensors.
// The reference runner calls whole functions; the sharded runner calls the
// per-device functions of a partitioned, lowered program, which take three
// scalars first (the runtime handle, the device id and its position).
//
// Calling convention. Every function that is called must have been given
// `llvm.emit_c_interface` before its lowering to LLVM (the caller's job:
// the reference and sharded runners set it) and take, after any leading
// 64-bit scalars, only memrefs with the identity layout: its inputs, then
// one out-parameter per result, as upstream's `buffer-results-to-out-params`
// leaves a bufferized function. The call passes each HostTensor as a memref
// descriptor (allocated and aligned pointer, offset 0, sizes, row-major
// strides) to the `_mlir_ciface_` wrapper, through the packed wrapper that
// ExecutionEngine generates for it (what ExecutionEngine::invokePacked
// calls).
//
// Runtime symbols. Generated code for sharded runs calls the runtime's C ABI
// (`polymesh_rt_*`, PolymeshRuntime.h). The tools link it statically and do
// not export it, so the JIT could not find it in the process: create()
// registers every `polymesh_rt_*` function's address with the engine.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_JITMODULE_H
#define POLYMESH_EXECUTION_JITMODULE_H

#include "polymesh/Execution/HostTensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mlir {
class DialectRegistry;
class ExecutionEngine;
} // namespace mlir

namespace polymesh::execution {

/// Registers the translations from the builtin and LLVM dialects to LLVM IR,
/// which JIT compilation needs. JitModule::create also appends them to the
/// module's context, so calling this is only needed up front.
void registerJitTranslations(mlir::DialectRegistry &registry);

struct JitOptions {
  /// LLVM optimization level (0-3) of the IR optimizer and of code
  /// generation. Optimization keeps IEEE semantics (no fast-math, no FMA
  /// contraction), so results do not depend on it; 0 compiles fastest.
  unsigned optLevel = 2;
  /// Functions the module calls that this process provides besides the
  /// loopback runtime's C ABI (CUDA-lowered code: the CUDA runtime's
  /// functions, the mgpu* wrappers and NCCL), by C name.
  std::vector<std::pair<std::string, void *>> symbols;
};

class JitModule {
public:
  /// Initializes the native target once per process, then translates
  /// `module` (LLVM dialect only) to LLVM IR and compiles it. Errors carry
  /// the translation's or the JIT's message.
  static llvm::Expected<std::unique_ptr<JitModule>>
  create(mlir::ModuleOp module, const JitOptions &options = {});

  ~JitModule();

  /// Looks up `name`'s C interface. The first lookup makes ORC compile the
  /// module to machine code, so calling this before timing a call keeps the
  /// compilation out of the measurement, and then runs the module's global
  /// constructors (a CUDA-lowered module registers its PTX there). Fails
  /// when the function or its C interface is missing, or a symbol the
  /// module calls is unknown.
  llvm::Error prepare(llvm::StringRef name);

  /// Calls `name` with `inputs` then `outputs` as its memref arguments. The
  /// caller guarantees that element types and shapes match the function's
  /// memref types; the compiled code trusts the descriptors. Fails only when
  /// the function or its C interface is missing. Once `name` is prepared,
  /// calls may come from several threads at once.
  llvm::Error call(llvm::StringRef name,
                   llvm::ArrayRef<const HostTensor *> inputs,
                   llvm::ArrayRef<HostTensor *> outputs);

  /// The same with `scalars` passed first, each as one 64-bit argument (a
  /// pointer, an i64 or an index): a partitioned function's runtime handle,
  /// device id and position.
  llvm::Error call(llvm::StringRef name, llvm::ArrayRef<uint64_t> scalars,
                   llvm::ArrayRef<const HostTensor *> inputs,
                   llvm::ArrayRef<HostTensor *> outputs);

private:
  explicit JitModule(std::unique_ptr<mlir::ExecutionEngine> engine);

  std::unique_ptr<mlir::ExecutionEngine> engine;
  /// Packed wrappers of the `_mlir_ciface_` functions looked up so far.
  llvm::StringMap<void (*)(void **)> entryPoints;
};

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_JITMODULE_H
