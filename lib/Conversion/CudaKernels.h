//===- CudaKernels.h - Generated kernels of the CUDA lowering ---*- C++ -*-===//
//
// Part of Polymesh. Internal to lib/Conversion.
//
//===----------------------------------------------------------------------===//
//
// The kernels the CUDA lowering launches are generated, not written: one
// grid-stride gpu.func per (kind, loop depth, unit) in a gpu.module with an
// NVVM target, compiled to PTX in-process. KernelBuilder creates each on
// first use through the builder it is given (a conversion pattern's
// rewriter), and launchKernel launches one on the device's stream.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_CONVERSION_CUDAKERNELS_H
#define POLYMESH_LIB_CONVERSION_CUDAKERNELS_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace polymesh::conversion {

inline constexpr llvm::StringLiteral kKernelModule = "polymesh_kernels";
inline constexpr int64_t kThreadsPerBlock = 256;
/// Grid-stride loops cover the rest; enough blocks to fill an H200.
inline constexpr int64_t kMaxBlocks = 4096;

enum class KernelKind { Copy, Zero, Accumulate };

/// The kernels of one module, created on first use.
class KernelBuilder {
public:
  KernelBuilder(mlir::ModuleOp module, llvm::StringRef chip,
                llvm::StringRef features)
      : module(module), chip(chip.str()), features(features.str()) {}

  /// A kernel over `outer` loops around runs of `unitBytes`-byte units (for
  /// Accumulate: elements of `element`). Arguments: src, dst (pointers),
  /// units per run, then per loop its count, src stride and dst stride
  /// (bytes), then the total number of units, which must be the product of
  /// the counts and the units per run.
  mlir::gpu::GPUFuncOp get(mlir::OpBuilder &builder, KernelKind kind,
                           int64_t outer, int64_t unitBytes,
                           mlir::Type element);
  /// `fill_u<elementBytes>`: writes the low `elementBytes` bytes of a
  /// pattern into `count` consecutive elements. Arguments: dst, pattern
  /// (i64), count.
  mlir::gpu::GPUFuncOp getFill(mlir::OpBuilder &builder, int64_t elementBytes);

  /// Whether any kernel was created (the module then holds them, and must
  /// be marked a GPU container module).
  bool hasKernels() const { return static_cast<bool>(gpuModule); }

private:
  /// Kernel `name` with `arguments`: created on first use, in the kernel
  /// module (created at the end of the module on first use), its body
  /// emitted by `body` at the start of its entry block; later calls return
  /// it. The builder's insertion point is kept.
  mlir::gpu::GPUFuncOp define(mlir::OpBuilder &builder, llvm::StringRef name,
                              llvm::ArrayRef<mlir::Type> arguments,
                              llvm::function_ref<void(mlir::Block &)> body);
  /// The grid-stride loop of a copy, zero or accumulate kernel (get's
  /// argument layout).
  void emitStridedBody(mlir::OpBuilder &builder, mlir::Block &entry,
                       KernelKind kind, int64_t outer, int64_t unitBytes,
                       mlir::Type element);

  mlir::ModuleOp module;
  std::string chip, features;
  mlir::gpu::GPUModuleOp gpuModule;
  llvm::StringMap<mlir::gpu::GPUFuncOp> kernels;
};

/// Launches `kernel` with `args` on the stream `streamToken` stands for,
/// with enough 256-thread blocks (at most kMaxBlocks) for `units` (i64)
/// work items: the kernels loop over the rest with a grid stride.
void launchKernel(mlir::OpBuilder &builder, mlir::Location loc,
                  mlir::gpu::GPUFuncOp kernel, mlir::Value units,
                  mlir::ValueRange args, mlir::Value streamToken);

/// Checks `chip` and `features` before anything is compiled: the chip must
/// be a processor of LLVM's NVPTX backend (sm_NN, sm_NNa, sm_NNf) and the
/// features exactly one of its PTX versions (+ptxNN), at least the oldest
/// that supports the chip (sm_90: PTX 7.8).
mlir::LogicalResult verifyCudaTarget(mlir::MLIRContext *context,
                                     llvm::StringRef chip,
                                     llvm::StringRef features);

} // namespace polymesh::conversion

#endif // POLYMESH_LIB_CONVERSION_CUDAKERNELS_H
