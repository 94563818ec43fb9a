//===- ShardedRunner.h - Sharded runs of partitioned programs ---*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The sharded side of `polymesh-run --verify`: a program compiled the way the
// CPU pipeline compiles it, run on the loopback runtime with one thread per
// device, every device computing on its own tiles.
//
// ShardedRunner::create clones the module and runs `--polymesh-propagate`
// and `--polymesh-plan` on the clone. From the planned global functions it
// records what the local programs do not say: the layout of every argument
// and result (their `polymesh.sharding` after propagation) and the bytes the
// plans move. `--polymesh-partition` then replaces each function `@f` by the
// class functions `@f__part<k>` (`polymesh.partition_of = "f"`,
// `polymesh.devices`), whose signature is
//
//   (%rt: !llvm.ptr, %device: i64, %position: index, <local inputs>)
//       -> (<local results>)
//
// with the device's exact tiles as local types (box extents; 0 in every
// dimension outside a value's mesh). Their devices, names and local types
// are recorded and checked against the layouts: every device of every
// argument's and result's mesh must run exactly one class, and every local
// type must be that device's box. Then `--polymesh-lower-to-cpu` lowers the
// module to the LLVM dialect (class functions get `llvm.emit_c_interface`
// first) and JitModule compiles it.
//
// ShardedRunner::run creates a loopback runtime over the function's devices
// (the sorted union of its classes' devices; a device's position is its
// index there), gives each device its input tiles filled like the
// reference's inputs (makeShardedInput with exact tiles: with unreduced
// axes the first device of each reduction group holds the values, the
// others zeros) and zero-filled result tiles, and runs
// `_mlir_ciface_f__part<k>(rt, device, position, inputs..., results...)` on
// one thread per device (`polymesh_rt_run_devices`). Generated code does
// not check the runtime's status codes; the run checks `polymesh_rt_status`
// afterwards and fails with `polymesh_rt_last_error`. It also fails when a
// device wrote into one of its input tiles (inputs are read-only). The
// results come back as ShardedTensors (exact tiles) in the declared result
// layouts, ready for compareWithReference.
//
// With ShardedTarget::Cuda the module is lowered by `--polymesh-lower-to-cuda`
// instead: class functions take device pointers (inputs, then one
// out-pointer per result) after the three scalars, kernels are PTX in a
// gpu.binary that the JIT's constructors hand to mgpuModuleLoadJIT, and
// NCCL is called directly. run() then creates the runtime through
// CudaRunHooks, uploads every device's input tiles into device memory,
// calls `_mlir_ciface_f__part<k>(rt, device, position, pointers...)` on one
// thread per device, and downloads the results (and the inputs, to check
// that they are unchanged). Only data movement lowers to CUDA: a function
// that computes is recorded as unavailable with the lowering's diagnostic.
//
// Failures are per function: a function that does not partition, lower or
// compile is recorded with the first diagnostic's message, and the others
// still run. All functions are compiled as one module when that works; when
// it does not, each function is compiled alone to tell which ones fail.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_SHARDEDRUNNER_H
#define POLYMESH_EXECUTION_SHARDEDRUNNER_H

#include "polymesh/Execution/HostTensor.h"
#include "polymesh/Execution/JitModule.h"
#include "polymesh/Execution/MovementRunner.h"
#include "polymesh/Execution/ReferenceRunner.h"
#include "polymesh/Execution/SumBounds.h"
#include "polymesh/Planner/Layout.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct PolymeshRuntime;

namespace polymesh::execution {

/// Where the partitioned program runs.
enum class ShardedTarget {
  /// --polymesh-lower-to-cpu on the loopback runtime, host memory.
  Cpu,
  /// --polymesh-lower-to-cuda on a CUDA runtime (CudaRunHooks), tiles in
  /// device memory.
  Cuda,
};

/// What a CUDA run needs from a CUDA runtime, which this library does not
/// link: PolymeshRuntimeNccl's functions (PolymeshCudaRuntime.h) on GPUs,
/// or the same over the simulated CUDA and NCCL.
struct CudaRunHooks {
  /// Creates the runtime over `devices`; never null (a failed runtime says
  /// why in polymesh_rt_last_error).
  PolymeshRuntime *(*createRuntime)(const int64_t *devices, int64_t numDevices,
                                    int64_t timeoutMs) = nullptr;
  void *(*alloc)(PolymeshRuntime *rt, int64_t device, int64_t bytes) = nullptr;
  void (*free)(PolymeshRuntime *rt, int64_t device, void *pointer) = nullptr;
  int32_t (*upload)(PolymeshRuntime *rt, int64_t device, void *dst,
                    const void *src, int64_t bytes) = nullptr;
  int32_t (*download)(PolymeshRuntime *rt, int64_t device, void *dst,
                      const void *src, int64_t bytes) = nullptr;
};

struct ShardedRunnerOptions {
  ShardedTarget target = ShardedTarget::Cpu;
  /// Required for ShardedTarget::Cuda; jit.symbols must then bind what the
  /// generated code calls (cudaCodegenSymbols()).
  CudaRunHooks cuda;
  /// ShardedTarget::Cpu: empty, messages between processes go through the
  /// runtime; else the MPI implementation ("OpenMPI", "MPICH") whose
  /// MPI_Send and MPI_Recv the generated code calls for them
  /// (`--polymesh-lower-to-cpu=transport=mpi`): jit.symbols must then
  /// bind them (runtime::mpiCodegenSymbols()).
  std::string mpiImplementation;
  JitOptions jit;
  /// How long a blocking runtime call may wait, in milliseconds; <= 0 takes
  /// the runtime's default (10 s).
  int64_t timeoutMs = 0;
  /// Run every device's program once on the same runtime before the timed
  /// run (benchmarks): the timed run then finds staging allocated and the
  /// pages of every buffer touched, as later steps of a real job do.
  bool warmup = false;
  /// Return every function's top-level float sums over a sharded dimension
  /// after its own results, reduced (ShardedFunction::partialSums): what a
  /// lock-step --verify compares and continues the reference from. Their
  /// all-reduces are not counted in bytesMoved.
  bool returnPartialSums = false;
  /// --polymesh-plan's batch-min-devices: reshards over at least this many
  /// devices that repeat over mesh axes are planned for one cell (0: never).
  int64_t batchMinDevices = 1024;
  /// The lowering's direct-collectives: collectives straight between tiles
  /// where the tiles allow (false: every collective in place).
  bool directCollectives = true;
  /// --polymesh-plan's exchange-tiles: all-to-alls of whole tiles planned
  /// as one symbolic step, run as one all-to-all call per device (false:
  /// every transfer listed, run as send/recv).
  bool exchangeTiles = true;

  /// Multi-process runs (docs/multi-process.md). The devices this process
  /// runs; null: every device. Class functions that none of them runs are
  /// not compiled to machine code, a run gives back only their tiles, and a
  /// run of a function none of whose devices runs here makes no runtime.
  std::function<bool(int64_t)> runsDevice;
  /// Creates the runtime of a run over all of a function's devices
  /// instead of the target's own (a loopback one for the CPU,
  /// cuda.createRuntime for CUDA); never null. Its Backend::devices() must
  /// be the devices of the list that runsDevice accepts: those are the
  /// threads of this process. `runIndex` counts the runner's run() calls
  /// before this one: processes that make the same runs agree on it, so it
  /// can name the run (MPI tags, NCCL's store keys).
  std::function<PolymeshRuntime *(const std::vector<int64_t> &devices,
                                  int64_t timeoutMs, int64_t runIndex)>
      createRuntime;
};

/// One local program of a partitioned function: the devices that run it and
/// its local types (without the three leading scalars).
struct PartitionClass {
  /// `f__part<k>`; the JIT calls `_mlir_ciface_f__part<k>`.
  std::string name;
  std::vector<int64_t> devices;
  std::vector<TensorSignature> inputs;
  std::vector<TensorSignature> results;
};

/// What the runner knows of one global function.
struct ShardedFunction {
  std::string name;
  /// The global signature, as the reference sees it.
  FunctionSignature signature;
  /// Per argument and per result: its layout after propagation.
  std::vector<planner::TensorLayout> argumentLayouts;
  std::vector<planner::TensorLayout> resultLayouts;
  /// Sum of the planned transfers' bytesMoved (before partitioning).
  int64_t bytesMoved = 0;
  /// Per result: the float sum over a sharded dimension it is (moved, at
  /// most), which the sharded run adds in another order than the reference
  /// (SumBounds.h); --verify then compares it within a bound.
  std::vector<std::optional<ReorderedSum>> reorderedSums;
  /// With ShardedRunnerOptions::returnPartialSums: the float sums over a
  /// sharded dimension at the function's top level (findPartialSums),
  /// returned after its own results, one each, reduced.
  std::vector<ReorderedSum> partialSums;
  /// The function's own results; those after them are partialSums.
  size_t numProgramResults = 0;
  /// The class functions, in the order partitioning numbered them.
  std::vector<PartitionClass> classes;
  /// The function's devices, sorted: those of the meshes its classes name
  /// (`polymesh.meshes`); a device's position is its index here. A process
  /// of a multi-process run that runs no class of the function counts the
  /// devices of its arguments', results' and transfers' meshes.
  std::vector<int64_t> devices;
};

struct ShardedRun {
  /// Per function result, every device's exact tile in the result's
  /// declared layout (devices of the layout's mesh; with
  /// ShardedRunnerOptions::runsDevice, only the devices it accepts).
  std::vector<ShardedTensor> results;
  int64_t bytesMoved = 0;
  /// Devices of the run: one thread each.
  int64_t numDevices = 0;
  /// Wall time of polymesh_rt_run_devices: thread start to join, every
  /// device's local program. Allocating and filling tiles come before.
  double wallMs = 0;
};

class ShardedRunner {
public:
  /// Compiles `functions` (each must exist with a body) of `module` for
  /// sharded runs; `module` is not modified. Fails as a whole only when
  /// propagation or planning fails (their errors go to the context's
  /// handler at the ops' locations; their warnings are dropped, as the
  /// caller has usually propagated the module itself); a function that
  /// fails later is recorded, and run() reports why. Diagnostics of
  /// partitioning and lowering are forwarded to the context's handler when
  /// a function is compiled alone.
  static llvm::Expected<std::unique_ptr<ShardedRunner>>
  create(mlir::ModuleOp module, llvm::ArrayRef<std::string> functions,
         const ShardedRunnerOptions &options = {});

  ~ShardedRunner();

  /// What was recorded for `name`, or why it cannot run sharded.
  llvm::Expected<const ShardedFunction &>
  getFunction(llvm::StringRef name) const;

  /// Runs `name` sharded on the deterministic inputs (argument i is stream
  /// i). Errors: the function could not be compiled (with the first
  /// diagnostic), or the runtime failed (its first error: a timeout,
  /// mismatched calls, a deadlock).
  llvm::Expected<ShardedRun> run(llvm::StringRef name);

private:
  ShardedRunner() = default;

  ShardedRunnerOptions options;
  std::vector<std::unique_ptr<JitModule>> jits;
  llvm::StringMap<ShardedFunction> functions;
  /// Per function: the JIT module that holds its class functions.
  llvm::StringMap<JitModule *> jitOf;
  /// run() calls so far (ShardedRunnerOptions::createRuntime's runIndex).
  int64_t runsMade = 0;
  /// Per function that cannot run: why.
  llvm::StringMap<std::string> unavailable;
};

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_SHARDEDRUNNER_H
