//===- Passes.h - Polymesh lowering passes ----------------------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_CONVERSION_PASSES_H
#define POLYMESH_CONVERSION_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class DialectRegistry;
class OpPassManager;
} // namespace mlir

namespace polymesh {

#define GEN_PASS_DECL
#include "polymesh/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "polymesh/Conversion/Passes.h.inc"

/// The dialects and external models (bufferization, deallocation) that
/// lowering a module to the LLVM dialect on the host needs.
void registerHostLoweringDialects(mlir::DialectRegistry &registry);

/// Upstream passes only: TOSA to linalg, bufferization with identity layouts
/// at function boundaries and results as out-parameters, loops, f16/bf16
/// emulation, and the conversions to the LLVM dialect. Used by
/// --polymesh-lower-to-cpu after its own rewrites, and by the unsharded
/// reference of polymesh-run.
void buildHostLoweringPipeline(mlir::OpPassManager &pm);

/// The dialects, NVVM target model and LLVM IR translations that
/// --polymesh-lower-to-cuda (and translating its output) needs.
void registerCudaLoweringDialects(mlir::DialectRegistry &registry);

/// Registers `--polymesh-pipeline="target=cpu|cuda"`: propagate, plan,
/// partition, then --polymesh-lower-to-cpu or --polymesh-lower-to-cuda.
void registerPolymeshPipelines();

} // namespace polymesh

#endif // POLYMESH_CONVERSION_PASSES_H
