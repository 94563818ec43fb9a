//===- PipelineFuzzer.cpp - libFuzzer target: the CPU pipeline ------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// polymesh-fuzz-pipeline: every input that parses and verifies goes through
// the CPU pipeline: --polymesh-propagate, --polymesh-plan (whose output must
// print and parse back), --polymesh-partition and --polymesh-lower-to-cpu
// (every other input with transport=mpi; every third planned with
// batch-min-devices=1, so that batched plans are lowered too). A
// pass may fail with a diagnostic; it must not crash, abort or trip a
// sanitizer. Each pass that succeeds must leave IR that verifies: a pass
// that reports success over invalid IR is a bug too, which the PassManager's
// own verifier would turn into a mere failure.
//
//===----------------------------------------------------------------------===//

#include "FuzzContext.h"

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Transforms/Passes.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace {

/// Runs one pass. Returns false when it fails (with a diagnostic: fine);
/// traps when it succeeds over IR that no longer verifies.
bool runPass(mlir::ModuleOp module, std::unique_ptr<mlir::Pass> pass) {
  llvm::StringRef name = pass->getArgument();
  mlir::PassManager pm(module->getContext());
  // Verified here instead, where a verifier failure after a successful pass
  // can be told apart from the pass's own errors.
  pm.enableVerifier(false);
  pm.addPass(std::move(pass));
  if (mlir::failed(pm.run(module)))
    return false;
  if (mlir::succeeded(mlir::verify(module)))
    return true;
  llvm::errs() << "polymesh-fuzz-pipeline: --" << name
               << " succeeded but its output does not verify\n";
  module->print(llvm::errs(), mlir::OpPrintingFlags().printGenericOpForm());
  llvm::errs().flush();
  __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  polymesh::fuzz::ParsedInput input(data, size);
  if (input.skip)
    return -1;
  if (!input.module)
    return 0;
  mlir::MLIRContext *context = input.context.get();
  mlir::OwningOpRef<mlir::ModuleOp> &module = input.module;
  // Every third input plans batched wherever a reshard repeats (the
  // default threshold of 1,024 devices leaves fuzzed meshes unbatched).
  polymesh::PolymeshPlanOptions plan;
  if (size % 3 == 0)
    plan.batchMinDevices = 1;
  if (!runPass(*module, polymesh::createPolymeshPropagate()) ||
      !runPass(*module, polymesh::createPolymeshPlan(plan)))
    return 0;
  // What the passes build (plans with many steps, arrays of shardings) must
  // print and read back: polymesh-opt's output is the next tool's input.
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  if (!polymesh::fuzz::parseModule(
          *context, reinterpret_cast<const uint8_t *>(text.data()),
          text.size())) {
    llvm::errs() << "polymesh-fuzz-pipeline: the output does not parse back\n"
                 << text << "\n";
    llvm::errs().flush();
    __builtin_trap();
  }
  // Then the per-device programs and their CPU code: either may refuse an
  // input with a diagnostic, but not crash, and partitioned IR must verify.
  if (!runPass(*module, polymesh::createPolymeshPartition()))
    return 0;
  // Every other input lowers its messages between processes to mpi ops.
  polymesh::PolymeshLowerToCpuOptions cpu;
  if (size % 2)
    cpu.transportName = "mpi";
  runPass(*module, polymesh::createPolymeshLowerToCpu(cpu));
  return 0;
}
