//===- polymesh-opt.cpp - Polymesh optimizer driver -----------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// An opt-style driver with the polymesh dialect, the upstream dialects that
// programs from JIT compilers use, their ShardingInterface models, and the
// Polymesh passes. Nothing else is registered, to keep the tool small.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Support/LargeStack.h"
#include "polymesh/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Func/Extensions/ShardingExtensions.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<polymesh::PolymeshDialect, mlir::arith::ArithDialect,
                  mlir::func::FuncDialect, mlir::linalg::LinalgDialect,
                  mlir::math::MathDialect, mlir::shard::ShardDialect,
                  mlir::tensor::TensorDialect, mlir::tosa::TosaDialect>();
  // Propagation asks ops for their ShardingInterface (indexing maps and
  // iterator types) instead of hand-written rules.
  mlir::arith::registerShardingInterfaceExternalModels(registry);
  mlir::func::registerShardingInterfaceExternalModels(registry);
  mlir::linalg::registerShardingInterfaceExternalModels(registry);
  mlir::tensor::registerShardingInterfaceExternalModels(registry);
  mlir::tosa::registerShardingInterfaceExternalModels(registry);

  // --polymesh-lower-to-cpu bufferizes and lowers to LLVM in-process.
  polymesh::registerHostLoweringDialects(registry);
  polymesh::registerCudaLoweringDialects(registry);

  polymesh::registerPolymeshPasses();
  polymesh::registerPolymeshConversionPasses();
  polymesh::registerPolymeshPipelines();

  // Deeply nested input recurses in MLIR's parser: a large stack.
  return polymesh::runWithLargeStack([&] {
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, "Polymesh optimizer driver\n", registry));
  });
}
