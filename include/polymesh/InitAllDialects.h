//===- InitAllDialects.h - What every Polymesh tool registers ---*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// One registration list for every tool, test, benchmark and fuzzer that
// parses the programs Polymesh reads (issue 17: it had been copied into each
// of them). Propagation asks ops for their ShardingInterface, so a tool that
// registered other models would place values differently: all of them use
// these functions. Header-only, like upstream's InitAllDialects.h; a user
// links the dialect libraries it names (PolymeshTransforms does).
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_INITALLDIALECTS_H
#define POLYMESH_INITALLDIALECTS_H

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Func/Extensions/ShardingExtensions.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/DialectRegistry.h"

namespace polymesh {

/// The dialects of the programs Polymesh reads: its own and the upstream
/// ones that JIT compilers emit, with the ShardingInterface models that
/// propagation's rules come from.
inline void registerPolymeshInputDialects(mlir::DialectRegistry &registry) {
  registry.insert<PolymeshDialect, mlir::arith::ArithDialect,
                  mlir::func::FuncDialect, mlir::linalg::LinalgDialect,
                  mlir::math::MathDialect, mlir::scf::SCFDialect,
                  mlir::shard::ShardDialect, mlir::tensor::TensorDialect,
                  mlir::tosa::TosaDialect>();
  mlir::arith::registerShardingInterfaceExternalModels(registry);
  mlir::func::registerShardingInterfaceExternalModels(registry);
  mlir::linalg::registerShardingInterfaceExternalModels(registry);
  mlir::tensor::registerShardingInterfaceExternalModels(registry);
  mlir::tosa::registerShardingInterfaceExternalModels(registry);
}

/// The input dialects and those the CPU and CUDA lowerings produce (they
/// bufferize and lower to LLVM in-process): what polymesh-opt parses.
inline void registerAllPolymeshDialects(mlir::DialectRegistry &registry) {
  registerPolymeshInputDialects(registry);
  registerHostLoweringDialects(registry);
  registerCudaLoweringDialects(registry);
}

/// Every Polymesh pass and pipeline, for opt-style drivers.
inline void registerAllPolymeshPasses() {
  registerPolymeshPasses();
  registerPolymeshConversionPasses();
  registerPolymeshPipelines();
}

} // namespace polymesh

#endif // POLYMESH_INITALLDIALECTS_H
