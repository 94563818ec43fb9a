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

#include "polymesh/InitAllDialects.h"
#include "polymesh/Support/LargeStack.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  polymesh::registerAllPolymeshDialects(registry);
  polymesh::registerAllPolymeshPasses();

  // Deeply nested input recurses in MLIR's parser: a large stack.
  return polymesh::runWithLargeStack([&] {
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, "Polymesh optimizer driver\n", registry));
  });
}
