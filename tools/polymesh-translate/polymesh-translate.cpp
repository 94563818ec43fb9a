//===- polymesh-translate.cpp - Lowered Polymesh modules to LLVM IR / PTX -===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// --mlir-to-llvmir: a module in the LLVM dialect (the output of
// --polymesh-lower-to-cpu or --polymesh-lower-to-cuda) to LLVM IR; for CUDA,
// the kernels' PTX is embedded and launches call the mgpu* wrappers.
// --polymesh-to-ptx: the PTX of every gpu.binary that --polymesh-lower-to-cuda
// made, ready for `ptxas -arch=sm_90`.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Support/LargeStack.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace {

LogicalResult printPtx(ModuleOp module, llvm::raw_ostream &os) {
  int printed = 0;
  for (auto binary : module.getOps<gpu::BinaryOp>()) {
    for (Attribute attr : binary.getObjects()) {
      auto object = dyn_cast<gpu::ObjectAttr>(attr);
      if (!object || object.getFormat() != gpu::CompilationTarget::Assembly)
        continue;
      os << "// gpu.binary @" << binary.getSymName() << ", target "
         << object.getTarget() << "\n"
         << object.getObject().getValue();
      ++printed;
    }
  }
  if (printed == 0 && !module.getOps<gpu::GPUModuleOp>().empty())
    return module.emitError()
           << "the module's kernels are not compiled; run "
              "--polymesh-lower-to-cuda (or --polymesh-pipeline=target=cuda)";
  if (printed == 0)
    os << "// no kernels: the module launches none\n";
  return success();
}

LogicalResult toLLVMIR(Operation *op, llvm::raw_ostream &os) {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module = translateModuleToLLVMIR(op, context);
  if (!module)
    return op->emitError() << "cannot translate to LLVM IR (is the module "
                              "lowered to the LLVM dialect?)";
  module->print(os, nullptr);
  return success();
}

void registerDialects(DialectRegistry &registry) {
  polymesh::registerCudaLoweringDialects(registry);
}

} // namespace

int main(int argc, char **argv) {
  TranslateFromMLIRRegistration ptx(
      "polymesh-to-ptx", "Print the PTX of a CUDA-lowered module's kernels",
      [](ModuleOp module, llvm::raw_ostream &os) {
        return printPtx(module, os);
      },
      registerDialects);
  TranslateFromMLIRRegistration llvmIR(
      "mlir-to-llvmir", "Translate a module in the LLVM dialect to LLVM IR",
      [](Operation *op, llvm::raw_ostream &os) { return toLLVMIR(op, os); },
      registerDialects);
  // Deeply nested input recurses in MLIR's parser: a large stack.
  return polymesh::runWithLargeStack([&] {
    return failed(mlirTranslateMain(argc, argv, "Polymesh translation driver"))
               ? 1
               : 0;
  });
}
