//===- RuntimeFunctions.h - What lowered code calls -------------*- C++ -*-===//
//
// Part of Polymesh. Internal to lib/Conversion and its tests.
//
//===----------------------------------------------------------------------===//
//
// Every external function that --polymesh-lower-to-cpu and
// --polymesh-lower-to-cuda call, with its C signature, in one table: the
// runtime's C ABI (PolymeshRuntime.h, PolymeshCudaRuntime.h), NCCL's
// (nccl.h) and libc's. A unit test checks each entry against the C
// prototype it stands for.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_CONVERSION_RUNTIMEFUNCTIONS_H
#define POLYMESH_LIB_CONVERSION_RUNTIMEFUNCTIONS_H

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

namespace polymesh::conversion {

enum class RuntimeFunction {
  // libc.
  Malloc,
  Free,
  // PolymeshRuntime.h.
  Staging,
  GroupStart,
  GroupEnd,
  Send,
  Recv,
  MpiRoute,
  Broadcast,
  AllGather,
  AllReduce,
  ReduceScatter,
  AllToAll,
  // PolymeshCudaRuntime.h.
  CudaStream,
  NcclComm,
  NcclCheck,
  DeviceAlloc,
  DeviceFree,
  DeviceCopy,
  DeviceUpload,
  DeviceSynchronize,
  // nccl.h.
  NcclGroupStart,
  NcclGroupEnd,
  NcclSend,
  NcclRecv,
  NcclBroadcast,
  NcclAllGather,
  NcclAllReduce,
  NcclReduceScatter,
};
constexpr int kNumRuntimeFunctions =
    static_cast<int>(RuntimeFunction::NcclReduceScatter) + 1;

/// A function's C name and signature: its result's code, then one per
/// argument; 'p' a pointer, 'l' a 64-bit integer (int64_t, size_t), 'i' a
/// 32-bit one (int32_t, int, the C enums), 'v' void.
struct RuntimeSignature {
  llvm::StringRef name;
  char result;
  llvm::StringRef arguments;
};
const RuntimeSignature &runtimeSignature(RuntimeFunction function);

/// `function`, declared in `module` on first use.
mlir::LLVM::LLVMFuncOp getOrDeclare(mlir::ModuleOp module,
                                    RuntimeFunction function);
/// The same, created through `builder` (a conversion pattern's rewriter).
mlir::LLVM::LLVMFuncOp getOrDeclare(mlir::OpBuilder &builder,
                                    mlir::ModuleOp module,
                                    RuntimeFunction function);

} // namespace polymesh::conversion

#endif // POLYMESH_LIB_CONVERSION_RUNTIMEFUNCTIONS_H
