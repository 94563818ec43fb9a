//===- Pipelines.cpp - --polymesh-pipeline --------------------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace {
struct PipelineOptions : public PassPipelineOptions<PipelineOptions> {
  Option<std::string> target{*this, "target",
                             llvm::cl::desc("Code generation target: cpu "
                                            "(loopback runtime), mpi (cpu, "
                                            "with mpi.send/mpi.recv between "
                                            "processes) or cuda (PTX "
                                            "kernels and NCCL)"),
                             llvm::cl::init("cpu")};
  Option<int64_t> memoryLimitBytes{
      *this, "memory-limit-bytes",
      llvm::cl::desc("Per-device staging limit of the planner (0: none)"),
      llvm::cl::init(0)};
  Option<int64_t> batchMinDevices{
      *this, "batch-min-devices",
      llvm::cl::desc("Plan one cell of reshards over at least this many "
                     "devices that repeat over mesh axes (0: never)"),
      llvm::cl::init(1024)};
  Option<bool> reductionPieces{
      *this, "reduction-pieces",
      llvm::cl::desc("Write reductions as their pieces where those determine "
                     "their transfers (false: every transfer)"),
      llvm::cl::init(true)};
  Option<bool> exchangeTiles{
      *this, "exchange-tiles",
      llvm::cl::desc("Plan all-to-alls of whole tiles as one symbolic step "
                     "(false: every transfer)"),
      llvm::cl::init(true)};
  Option<bool> directCollectives{
      *this, "direct-collectives",
      llvm::cl::desc("Let collectives go straight from source to destination "
                     "tiles (NCCL's out-of-place forms) where the tiles "
                     "allow; false: every collective in place"),
      llvm::cl::init(true)};
  ListOption<int64_t> devices{
      *this, "devices",
      llvm::cl::desc("Partition and lower for these devices only (one "
                     "process's); default: every device")};
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("target=cuda: NVVM chip, an NVPTX "
                                          "processor (sm_NN, sm_NNa, sm_NNf)"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("target=cuda: one PTX version, "
                                              "+ptxNN, that the chip accepts"),
                               llvm::cl::init("+ptx80")};
};
/// Reports an unsupported target on the module and fails: a pipeline builder
/// that returns failure is not turned into a failing exit by every driver.
struct UnsupportedTargetPass
    : public PassWrapper<UnsupportedTargetPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(UnsupportedTargetPass)
  explicit UnsupportedTargetPass(std::string target)
      : target(std::move(target)) {}
  StringRef getArgument() const final { return "polymesh-unsupported-target"; }
  void runOnOperation() final {
    getOperation().emitError()
        << "polymesh-pipeline: target '" << target
        << "' is not supported; use target=cpu, target=mpi or "
           "target=cuda";
    signalPassFailure();
  }
  std::string target;
};
} // namespace

void polymesh::registerPolymeshPipelines() {
  PassPipelineRegistration<PipelineOptions>(
      "polymesh-pipeline",
      "Propagate, plan, partition and lower to a target "
      "(target=cpu|mpi|cuda)",
      [](OpPassManager &pm, const PipelineOptions &options) -> LogicalResult {
        if (options.target != "cpu" && options.target != "mpi" &&
            options.target != "cuda") {
          pm.addPass(std::make_unique<UnsupportedTargetPass>(options.target));
          return success();
        }
        pm.addPass(createPolymeshPropagate());
        PolymeshPlanOptions plan;
        plan.memoryLimitBytes = options.memoryLimitBytes;
        plan.batchMinDevices = options.batchMinDevices;
        plan.reductionPieces = options.reductionPieces;
        plan.exchangeTiles = options.exchangeTiles;
        pm.addPass(createPolymeshPlan(plan));
        PolymeshPartitionOptions partition;
        partition.devices.assign(options.devices.begin(),
                                 options.devices.end());
        pm.addPass(createPolymeshPartition(partition));
        if (options.target == "cuda") {
          PolymeshLowerToCudaOptions cuda;
          cuda.chip = options.chip;
          cuda.features = options.features;
          cuda.directCollectives = options.directCollectives;
          pm.addPass(createPolymeshLowerToCuda(cuda));
        } else {
          PolymeshLowerToCpuOptions cpu;
          if (options.target == "mpi")
            cpu.transportName = "mpi";
          cpu.directCollectives = options.directCollectives;
          pm.addPass(createPolymeshLowerToCpu(cpu));
        }
        return success();
      });
}
