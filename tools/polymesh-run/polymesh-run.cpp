//===- polymesh-run.cpp - JIT-compile and run Polymesh programs -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Parses a Polymesh program, validates its placements with
// --polymesh-propagate, plans its reshards with --polymesh-plan, and runs
// each selected public function on deterministic inputs (docs/execution.md)
// on the unsharded reference.
//
// With --verify, every function also runs sharded as the CPU pipeline
// compiles it: --polymesh-propagate, --polymesh-plan, --polymesh-partition
// and --polymesh-lower-to-cpu, JIT-compiled, one thread per device on the
// loopback runtime (ShardedRunner). Every device's tile of every result is
// compared with the reference bit for bit. --sharded-path=executor runs
// functions that only move data through the plan executor instead (the
// oracle for the generated transfer code); it cannot run functions that
// compute.
//
// Output: one line per function, then a summary; diagnostics on stderr.
//
//   @init_model_nnx_jit: 3 leaves, reference 0.021 ms
//   1 ran, 0 failed
//
// With --verify (one line per function; wrapped here):
//
//   @restore: 1 leaf, 251658240 bytes moved, reference 9.793 ms,
//       sharded 144.843 ms on 32 devices, PASS
//   1 passed, 0 failed
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Execution/InputFill.h"
#include "polymesh/Execution/MovementRunner.h"
#include "polymesh/Execution/ReferenceRunner.h"
#include "polymesh/Execution/ShardedRunner.h"
#include "polymesh/Execution/SumBounds.h"
#include "polymesh/Execution/Tolerance.h"
#include "polymesh/InitAllDialects.h"
#include "polymesh/Runtime/Runtime.h"
#include "polymesh/Support/LargeStack.h"
#include "polymesh/Support/Saturating.h"
#include "polymesh/Transforms/Passes.h"
#if POLYMESH_HAVE_MPI
#include "polymesh/Execution/MpiTarget.h"
#endif
#if POLYMESH_HAVE_NCCL
#include "polymesh/Execution/CudaTarget.h"
#include "polymesh/Runtime/GpuSimulator.h"
#include "polymesh/Runtime/NcclBackend.h"
#endif

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <chrono>
#include <limits>
#include <map>

#include <sys/resource.h>
#include <unistd.h>

using namespace mlir;
using namespace polymesh::execution;
using polymesh::saturatingAdd;
using polymesh::saturatingMul;
namespace runtime = polymesh::runtime;

namespace {

llvm::cl::OptionCategory runCategory("polymesh-run options");

llvm::cl::opt<std::string> inputFilename(llvm::cl::Positional,
                                         llvm::cl::desc("<input file>"),
                                         llvm::cl::init("-"),
                                         llvm::cl::cat(runCategory));

llvm::cl::opt<std::string>
    entry("entry",
          llvm::cl::desc("Run only this public function (default: all)"),
          llvm::cl::value_desc("name"), llvm::cl::cat(runCategory));

llvm::cl::opt<std::string>
    backend("backend",
            llvm::cl::desc("Communication backend of sharded runs: "
                           "'loopback' (devices as threads of this process), "
                           "'mpi' (devices spread over the ranks of an MPI "
                           "job: run under mpirun -np P) "
                           "or 'nccl' (one local GPU per device; exits with "
                           "77 when there is none)"),
            llvm::cl::init("loopback"), llvm::cl::cat(runCategory));

llvm::cl::opt<int64_t> devicesPerProcess(
    "devices-per-process",
    llvm::cl::desc("With --backend=mpi: device id d runs in rank d / K for "
                   "K devices per process (default 0: ceil((largest device "
                   "id of the program's meshes + 1) / ranks))"),
    llvm::cl::init(0), llvm::cl::cat(runCategory));

llvm::cl::opt<int> mpiTimeoutSeconds(
    "mpi-timeout",
    llvm::cl::desc("With --backend=mpi: seconds any wait for another rank "
                   "may last before the run fails, naming what it waited "
                   "for (default 30)"),
    llvm::cl::init(30), llvm::cl::cat(runCategory));

llvm::cl::opt<std::string> mpiMessages(
    "mpi-messages",
    llvm::cl::desc("With --backend=mpi: who moves the messages between "
                   "processes: 'code' (the generated code's mpi.send and "
                   "mpi.recv, --polymesh-lower-to-cpu=transport=mpi) or "
                   "'runtime' (the runtime's send and recv)"),
    llvm::cl::init("code"), llvm::cl::cat(runCategory));

llvm::cl::opt<bool> simulateGpus(
    "simulate-gpus",
    llvm::cl::desc("With --backend=nccl: simulated GPUs, CUDA and NCCL in "
                   "this process (no GPU needed). The generated host code, "
                   "its tables and NCCL calls run for real; kernels are "
                   "interpreted on the host"),
    llvm::cl::cat(runCategory));

llvm::cl::opt<int> simulatedGpuCount(
    "simulated-gpu-count",
    llvm::cl::desc("With --simulate-gpus: the GPUs of the simulated machine "
                   "(default 0: as many as each function has devices); a "
                   "function with more devices is skipped, as on a real "
                   "machine"),
    llvm::cl::init(0), llvm::cl::cat(runCategory));

/// How --verify compares (docs/execution.md, "How --verify compares
/// floats"). Unscoped, so that `verifyResults` still reads as a bool.
enum VerifyMode { VerifyOff = 0, VerifyBounded, VerifyExact };

llvm::cl::opt<VerifyMode> verifyResults(
    "verify", llvm::cl::ValueOptional,
    llvm::cl::desc("Compare every device's tile of every result with the "
                   "unsharded reference: bit for bit, except a float sum "
                   "over a sharded dimension, which the sharded run adds in "
                   "another order and which must lie within the rounding "
                   "bound of both orders (2 gamma_{n-1} sum|terms|)"),
    llvm::cl::values(
        clEnumValN(VerifyBounded, "", "(no value) as =bounded"),
        clEnumValN(VerifyBounded, "bounded",
                   "reordered float sums within their bound, the rest bit "
                   "for bit (default)"),
        clEnumValN(VerifyExact, "exact", "every result bit for bit")),
    llvm::cl::init(VerifyOff), llvm::cl::cat(runCategory));

llvm::cl::opt<bool> printResults(
    "print-results",
    llvm::cl::desc("Print the leading elements of every reference result"),
    llvm::cl::cat(runCategory));

llvm::cl::opt<int64_t> batchMinDevices(
    "batch-min-devices",
    llvm::cl::desc("--polymesh-plan's batch-min-devices: plan one cell of "
                   "reshards over at least this many devices that repeat "
                   "over mesh axes (0: never; default 1024)"),
    llvm::cl::init(1024));

llvm::cl::opt<bool> directCollectives(
    "direct-collectives",
    llvm::cl::desc("The lowering's direct-collectives: collectives straight "
                   "from source to destination tiles where the tiles allow "
                   "(default); false: every collective in place"),
    llvm::cl::init(true));

llvm::cl::opt<unsigned> jitOptLevel(
    "opt-level",
    llvm::cl::desc("LLVM optimization level (0-3) of the JIT-compiled "
                   "reference and sharded programs; results do not depend "
                   "on it, 0 compiles fastest (default 2)"),
    llvm::cl::init(2), llvm::cl::cat(runCategory));

enum class ShardedPath { Partition, Executor };

llvm::cl::opt<ShardedPath> shardedPath(
    "sharded-path", llvm::cl::desc("How --verify runs functions sharded"),
    llvm::cl::values(
        clEnumValN(ShardedPath::Partition, "partition",
                   "the partitioned program lowered to the CPU (default)"),
        clEnumValN(ShardedPath::Executor, "executor",
                   "the plan executor; functions that only move data")),
    llvm::cl::init(ShardedPath::Partition), llvm::cl::cat(runCategory));

constexpr const char *kNotMovementOnly =
    "not verified: --sharded-path=executor runs only functions that move data";

//===----------------------------------------------------------------------===//
// Multi-process runs (--backend=mpi, docs/multi-process.md)
//===----------------------------------------------------------------------===//

/// Where a function's line goes: stdout, or under --backend=mpi a buffer
/// that rank 0 prints once every rank's verdict is in.
llvm::raw_ostream *lineStream = &llvm::outs();
llvm::raw_ostream &out() { return *lineStream; }

/// Whether an MPI launcher (mpirun, srun with PMI/PMIx) started this
/// process as one rank of a job.
bool launchedAsRank() {
  for (const char *variable :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
    if (std::getenv(variable))
      return true;
  return false;
}

/// A run over several processes: --backend=mpi, or --backend=nccl started
/// by an MPI launcher (one process per host or per GPU).
bool multiProcess() {
  return backend == "mpi" || (backend == "nccl" && launchedAsRank());
}

#if POLYMESH_HAVE_MPI
/// The job's processes; set by main() before anything runs.
std::unique_ptr<runtime::MpiWorld> mpiWorld;
/// Which rank runs which device, the same for every function.
runtime::DeviceOwnership ownership;

#if POLYMESH_HAVE_NCCL
/// --backend=nccl over several processes: NCCL's unique ids go through an
/// MPI store; simulated GPUs of all processes are connected by an MPI
/// channel of their own.
std::shared_ptr<runtime::MpiStore> ncclStore;

class MpiSimulatedGpuTransport final : public runtime::SimulatedGpuTransport {
public:
  explicit MpiSimulatedGpuTransport(
      std::unique_ptr<runtime::MpiChannel> channel)
      : channel(std::move(channel)) {}
  int process() const override { return channel->rank(); }
  int numProcesses() const override { return channel->size(); }
  absl::Status send(int to, std::string message) override {
    return channel->send(to, std::move(message));
  }
  absl::StatusOr<std::optional<std::string>> poll() override {
    auto received = channel->poll();
    if (!received.ok())
      return received.status();
    if (!*received)
      return std::optional<std::string>();
    return std::optional<std::string>(std::move((*received)->message));
  }

private:
  std::unique_ptr<runtime::MpiChannel> channel;
};

/// Opens what a multi-process NCCL run needs (collective over the ranks).
LogicalResult connectNcclProcesses() {
  absl::StatusOr<std::unique_ptr<runtime::MpiChannel>> storeChannel =
      runtime::MpiChannel::create(*mpiWorld);
  absl::StatusOr<std::unique_ptr<runtime::MpiChannel>> fakeChannel =
      runtime::MpiChannel::create(*mpiWorld);
  for (const absl::Status &status :
       {storeChannel.status(), fakeChannel.status()})
    if (!status.ok()) {
      llvm::errs() << "error: --backend=nccl: " << std::string(status.message())
                   << "\n";
      return failure();
    }
  ncclStore = std::make_shared<runtime::MpiStore>(std::move(*storeChannel));
  if (simulateGpus)
    runtime::connectSimulatedGpus(
        std::make_shared<MpiSimulatedGpuTransport>(std::move(*fakeChannel)));
  return success();
}

/// This process's first CUDA device: ranks on one host take consecutive
/// blocks of its GPUs (one rank per GPU, or one rank for all of them).
int firstCudaDevice() {
  for (const char *variable :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char *value = std::getenv(variable))
      return std::atoi(value) * static_cast<int>(ownership.perRank);
  return 0;
}

/// Runs CUDA-lowered code with this process's share of the devices.
void useNcclProcesses(ShardedRunnerOptions &options) {
  int rank = mpiWorld->rank();
  options.runsDevice = [rank](int64_t device) {
    return ownership.ownerOf(device) == rank;
  };
  options.createRuntime = [rank](const std::vector<int64_t> &devices,
                                 int64_t timeoutMs, int64_t runIndex) {
    runtime::CodegenRuntimeOptions run;
    run.worldDevices = devices;
    for (int64_t device : devices)
      if (ownership.ownerOf(device) == rank)
        run.localDevices.push_back(device);
    run.store = ncclStore;
    run.storePrefix = "polymesh/nccl/run" + std::to_string(runIndex);
    run.timeoutMs = timeoutMs;
    if (simulateGpus)
      return runtime::createSimulatedCodegenRuntime(run);
    run.firstCudaDevice = firstCudaDevice();
    return runtime::createCodegenRuntime(run);
  };
}
#endif

/// Every rank must run the same program with the same options, or their
/// runs would wait on each other for transfers that never come.
LogicalResult checkSameProgram(llvm::StringRef text) {
  std::string options;
  llvm::raw_string_ostream os(options);
  os << entry << '\0' << static_cast<int>(verifyResults.getValue()) << '\0'
     << devicesPerProcess << '\0' << static_cast<int>(shardedPath.getValue())
     << '\0' << mpiTimeoutSeconds << '\0' << mpiMessages;
  uint64_t fingerprint =
      llvm::xxh3_64bits(text) ^ (llvm::xxh3_64bits(options) * 31);
  absl::StatusOr<std::vector<uint64_t>> all = mpiWorld->allGather(fingerprint);
  if (!all.ok()) {
    llvm::errs() << "error: " << std::string(all.status().message()) << "\n";
    return failure();
  }
  for (size_t r = 1; r < all->size(); ++r) {
    if ((*all)[r] == (*all)[0])
      continue;
    if (mpiWorld->rank() == 0)
      llvm::errs() << "error: rank " << r
                   << " runs another program or other options than rank 0 "
                      "(every rank of --backend=mpi must be given the same "
                      "file and flags)\n";
    return failure();
  }
  return success();
}

/// The ownership of every mesh device of `module`: a device no rank owns
/// is refused at its mesh.
LogicalResult computeOwnership(ModuleOp module) {
  std::vector<int64_t> devices;
  std::vector<std::pair<int64_t, polymesh::MeshOp>> where;
  module.walk([&](polymesh::MeshOp mesh) {
    polymesh::planner::Mesh planned = polymesh::toPlannerMesh(mesh.getMesh());
    for (int64_t p = 0, e = planned.numDevices(); p < e; ++p) {
      devices.push_back(planned.deviceAt(p));
      where.emplace_back(devices.back(), mesh);
    }
  });
  ownership = runtime::DeviceOwnership::over(devices, mpiWorld->size(),
                                             devicesPerProcess);
  for (auto [device, mesh] : where) {
    if (ownership.ownerOf(device) >= 0)
      continue;
    if (mpiWorld->rank() == 0)
      mesh.emitError() << "device " << device << " of mesh @"
                       << mesh.getSymName()
                       << " is owned by no process: " << ownership.numRanks
                       << " processes x " << ownership.perRank
                       << " devices per process own the ids 0.."
                       << ownership.numRanks * ownership.perRank - 1
                       << " (--devices-per-process)";
    return failure();
  }
  return success();
}

/// With unreduced axes a result's value is the sum of a group's partials;
/// the rank that owns a group's first device checks it and receives the
/// partials of the group's devices that other ranks own.
llvm::Error fetchGroupPartials(std::vector<ShardedTensor> &results) {
  std::vector<runtime::MpiWorld::Block> sends, recvs;
  int rank = mpiWorld->rank();
  for (ShardedTensor &result : results) {
    const polymesh::planner::TensorLayout &layout = result.layout;
    for (const std::vector<int64_t> &group : layout.reductionGroups()) {
      if (group.size() < 2)
        continue;
      int checker = ownership.ownerOf(group.front());
      for (int64_t device : llvm::drop_begin(group)) {
        int owner = ownership.ownerOf(device);
        if (owner == checker || (owner != rank && checker != rank))
          continue;
        std::optional<polymesh::planner::Box> box = layout.boxOfDevice(device);
        if (!box || box->empty())
          continue;
        if (owner == rank) {
          HostTensor &tile = result.tiles.at(device);
          sends.push_back({checker, tile.getData(), tile.getSizeInBytes()});
          continue;
        }
        std::vector<int64_t> extents;
        for (size_t d = 0; d < box->lo.size(); ++d)
          extents.push_back(box->hi[d] - box->lo[d]);
        HostTensor &tile =
            result.tiles
                .emplace(device, HostTensor(result.elementType, extents))
                .first->second;
        recvs.push_back({owner, tile.getData(), tile.getSizeInBytes()});
      }
    }
  }
  absl::Status status = mpiWorld->exchange(sends, recvs);
  if (!status.ok())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   std::string(status.message()));
  return llvm::Error::success();
}
#endif

void registerDialects(DialectRegistry &registry) {
  // What polymesh-opt parses, with the same ShardingInterface models so
  // that propagation decides here exactly as it does there.
  polymesh::registerPolymeshInputDialects(registry);
  registerReferenceDialects(registry);
}

/// The first type or attribute of a dialect that is not registered that
/// `op` carries (`!foo.t`, `#foo.a` parse as opaque ones), as text; "" for
/// none. Operand types are their producers' results.
std::string firstOpaqueEntity(Operation *op) {
  std::string text;
  auto note = [&](auto entity) {
    if (text.empty())
      llvm::raw_string_ostream(text) << "'" << entity << "'";
  };
  op->getAttrDictionary().walk([&](OpaqueAttr a) { note(a); },
                               [&](OpaqueType t) { note(t); });
  auto checkType = [&](Type type) {
    type.walk([&](OpaqueType t) { note(t); });
  };
  for (Type type : op->getResultTypes())
    checkType(type);
  for (Region &region : op->getRegions())
    for (Block &block : region)
      for (BlockArgument argument : block.getArguments())
        checkType(argument.getType());
  return text;
}

/// Ops, types and attributes of dialects polymesh-run does not register.
/// The parser accepts them (so that the message can name them) and this
/// refuses them, at their location; polymesh-run has no flag that would
/// run them.
LogicalResult rejectUnregisteredOps(ModuleOp module) {
  WalkResult walk = module.walk([&](Operation *op) {
    if (!op->isRegistered()) {
      std::vector<llvm::StringRef> known;
      for (llvm::StringRef name : module.getContext()->getAvailableDialects())
        if (!name.empty())
          known.push_back(name);
      llvm::sort(known);
      op->emitError() << "polymesh-run cannot run '" << op->getName()
                      << "': no dialect it registers defines this op (it "
                         "registers "
                      << llvm::join(known, ", ") << ")";
      return WalkResult::interrupt();
    }
    std::string opaque = firstOpaqueEntity(op);
    if (opaque.empty())
      return WalkResult::advance();
    op->emitError() << "polymesh-run cannot run '" << op->getName()
                    << "': it uses " << opaque
                    << " of a dialect that polymesh-run does not register";
    return WalkResult::interrupt();
  });
  return failure(walk.wasInterrupted());
}

/// The public functions with a body, in module order, or just --entry.
FailureOr<std::vector<std::string>> selectFunctions(ModuleOp module) {
  std::vector<std::string> names;
  if (!entry.empty()) {
    auto func = module.lookupSymbol<func::FuncOp>(entry);
    if (!func || func.isExternal() || !func.isPublic()) {
      llvm::errs() << "error: --entry: no public function named @" << entry
                   << " with a body\n";
      return failure();
    }
    names.push_back(entry);
    return names;
  }
  for (auto func : module.getOps<func::FuncOp>())
    if (func.isPublic() && !func.isExternal())
      names.push_back(func.getSymName().str());
  if (names.empty()) {
    llvm::errs() << "error: no public function with a body to run\n";
    return failure();
  }
  return names;
}

//===----------------------------------------------------------------------===//
// Movement-only functions
//===----------------------------------------------------------------------===//

/// Whether `func` (planned) only moves data: one block of planned transfers
/// and sharding constraints. Every value is then an argument's data in
/// another layout, so the plan executor alone runs it sharded; any other op
/// computes and needs partitioned code.
bool isMovementOnly(func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return false;
  return llvm::all_of(func.getBody().front(), [](Operation &op) {
    return isa<polymesh::TransferOp, polymesh::ShardingConstraintOp,
               func::ReturnOp>(op);
  });
}

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The planner layout of a tensor of `type` under `sharding`. The verifier
/// has checked every sharding against its mesh and type after each pass,
/// so a failure here is an internal error, reported rather than asserted.
llvm::Expected<polymesh::planner::TensorLayout>
layoutOf(SymbolTableCollection &symbols, Operation *anchor,
         polymesh::ShardingAttr sharding, Type type) {
  polymesh::MeshAttr mesh =
      polymesh::lookupMesh(symbols, anchor, sharding.getMeshName());
  if (!mesh)
    return makeError("unknown mesh " + sharding.getMeshName().getValue());
  auto tensor = cast<RankedTensorType>(type);
  absl::StatusOr<polymesh::planner::TensorLayout> layout =
      polymesh::planner::TensorLayout::create(
          polymesh::toPlannerMesh(mesh),
          polymesh::toPlannerSharding(sharding, mesh, tensor.getRank()),
          std::vector<int64_t>(tensor.getShape().begin(),
                               tensor.getShape().end()));
  if (!layout.ok())
    return makeError(std::string(layout.status().message()));
  return std::move(*layout);
}

/// The movement program of a planned, movement-only `func`: its arguments
/// in their `polymesh.sharding`, each transfer with the plan it carries, each
/// constraint as an alias, and each result in its declared (or propagated)
/// sharding.
llvm::Expected<MovementProgram>
buildMovementProgram(func::FuncOp func, const FunctionSignature &signature) {
  SymbolTableCollection symbols;
  MovementProgram program;
  llvm::DenseMap<Value, int64_t> indexOf;
  auto add = [&](Value value, MovementValue movement) {
    indexOf[value] = static_cast<int64_t>(program.values.size());
    program.values.push_back(std::move(movement));
  };
  Block &body = func.getBody().front();
  for (BlockArgument argument : body.getArguments()) {
    unsigned i = argument.getArgNumber();
    auto sharding = func.getArgAttrOfType<polymesh::ShardingAttr>(
        i, polymesh::PolymeshDialect::kShardingAttrName);
    if (!sharding)
      return makeError("argument #" + llvm::Twine(i) +
                       " has no sharding after propagation");
    auto layout = layoutOf(symbols, func, sharding, argument.getType());
    if (!layout)
      return layout.takeError();
    add(argument,
        MovementValue::makeArgument(signature.arguments[i].elementType,
                                    std::move(*layout), i));
  }
  for (Operation &op : body) {
    if (auto transfer = dyn_cast<polymesh::TransferOp>(op)) {
      Type type = transfer.getResult().getType();
      auto source = layoutOf(symbols, &op, transfer.getSource(), type);
      if (!source)
        return source.takeError();
      auto destination =
          layoutOf(symbols, &op, transfer.getDestination(), type);
      if (!destination)
        return destination.takeError();
      int64_t input = indexOf.at(transfer.getInput());
      absl::StatusOr<polymesh::planner::TransferPlan> plan =
          polymesh::toPlannerPlan(transfer, *source, *destination);
      if (!plan.ok())
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       std::string(plan.status().message()));
      add(transfer.getResult(),
          MovementValue::makeTransfer(program.values[input].elementType, input,
                                      std::move(*plan), std::move(*source),
                                      std::move(*destination)));
    } else if (auto constraint = dyn_cast<polymesh::ShardingConstraintOp>(op)) {
      auto layout = layoutOf(symbols, &op, constraint.getSharding(),
                             constraint.getResult().getType());
      if (!layout)
        return layout.takeError();
      int64_t input = indexOf.at(constraint.getInput());
      add(constraint.getResult(),
          MovementValue::makeAlias(program.values[input].elementType, input,
                                   std::move(*layout)));
    } else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, operand] : llvm::enumerate(ret.getOperands())) {
        int64_t value = indexOf.at(operand);
        program.results.push_back(value);
        // Propagation gives every result a sharding; the value's own
        // layout stands in should one be missing.
        auto sharding = func.getResultAttrOfType<polymesh::ShardingAttr>(
            i, polymesh::PolymeshDialect::kShardingAttrName);
        if (!sharding) {
          program.resultLayouts.push_back(program.values[value].layout);
          continue;
        }
        auto layout = layoutOf(symbols, func, sharding, operand.getType());
        if (!layout)
          return layout.takeError();
        program.resultLayouts.push_back(std::move(*layout));
      }
    }
  }
  return program;
}

/// What a sharded run gives back, from either path.
struct ShardedOutcome {
  std::vector<ShardedTensor> results;
  int64_t bytesMoved = 0;
  int64_t numDevices = 0;
  double wallMs = 0;
};

/// Exit code of a run that cannot happen here (no GPU, no NCCL in this
/// build): automake's "skipped", which ctest and lit can be told about.
constexpr int kSkippedExitCode = 77;

/// The backend of sharded runs other than the default loopback backend.
BackendFactory backendFactory() {
#if POLYMESH_HAVE_NCCL
  if (backend == "nccl")
    return [](const std::vector<int64_t> &devices)
               -> absl::StatusOr<std::unique_ptr<runtime::Backend>> {
      runtime::NcclOptions options;
      // Tiles are host memory: the backend stages them through the GPU.
      options.buffers = runtime::NcclBuffers::Host;
      options.timeout = absl::Seconds(60);
      if (simulateGpus) {
        runtime::resetSimulatedGpus(static_cast<int>(devices.size()));
        options.api = &runtime::simulatedNcclApi();
      }
      absl::StatusOr<std::unique_ptr<runtime::NcclBackend>> created =
          runtime::NcclBackend::createSingleProcess(devices, options);
      if (!created.ok())
        return created.status();
      return std::unique_ptr<runtime::Backend>(std::move(*created));
    };
#endif
  return {};
}

/// How the partitioned program runs: lowered to the CPU on the loopback
/// runtime, or with --backend=nccl lowered to CUDA on the local GPUs (or
/// the simulated ones).
ShardedRunnerOptions shardedOptions() {
  ShardedRunnerOptions options;
  options.batchMinDevices = batchMinDevices;
  options.directCollectives = directCollectives;
  options.jit.optLevel = jitOptLevel;
  // Lock-step comparison of reordered sums (checkPartialSums); one process
  // holds every tile of them only when it runs every device.
  options.returnPartialSums = verifyResults == VerifyBounded && !multiProcess();
#if POLYMESH_HAVE_MPI
  if (backend == "mpi")
    useMpiBackend(options, *mpiWorld, ownership,
                  absl::Seconds(std::max(1, mpiTimeoutSeconds.getValue())),
                  mpiMessages == "code");
#endif
#if POLYMESH_HAVE_NCCL
  if (backend == "nccl") {
    useCudaTarget(options, simulateGpus);
    options.timeoutMs = 60000;
#if POLYMESH_HAVE_MPI
    if (multiProcess()) {
      useNcclProcesses(options);
      options.timeoutMs = 1000 * std::max(1, mpiTimeoutSeconds.getValue());
    }
#endif
  }
#endif
  return options;
}

/// Runs planned, movement-only `planned` through the plan executor.
llvm::Expected<ShardedOutcome>
runMovementOnly(func::FuncOp planned, const FunctionSignature &signature) {
  if (!isMovementOnly(planned))
    return makeError(kNotMovementOnly);
  llvm::Expected<MovementProgram> program =
      buildMovementProgram(planned, signature);
  if (!program)
    return program.takeError();
  // Runtime errors (a plan the executor rejects, a timeout, mismatched
  // calls) come back as errors with the runtime's message.
  llvm::Expected<MovementRun> run = runMovement(*program, backendFactory());
  if (!run)
    return run.takeError();
  return ShardedOutcome{std::move(run->results), run->bytesMoved,
                        run->numDevices, run->wallMs};
}

/// Runs `name` through the partitioned program lowered to the CPU.
llvm::Expected<ShardedOutcome> runPartitioned(ShardedRunner &sharded,
                                              llvm::StringRef name) {
  llvm::Expected<ShardedRun> run = sharded.run(name);
#if POLYMESH_HAVE_MPI
  // The job's time is its slowest rank's; every rank takes part, failed or
  // not, so that none waits for another.
  if (multiProcess()) {
    double mine = run ? run->wallMs : 0.0;
    absl::StatusOr<std::vector<uint64_t>> all =
        mpiWorld->allGather(llvm::bit_cast<uint64_t>(mine));
    if (!all.ok()) {
      if (!run)
        return run.takeError();
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     std::string(all.status().message()));
    }
    if (run)
      for (uint64_t bits : *all)
        run->wallMs = std::max(run->wallMs, llvm::bit_cast<double>(bits));
  }
#endif
  if (!run)
    return run.takeError();
#if POLYMESH_HAVE_MPI
  if (multiProcess())
    if (llvm::Error err = fetchGroupPartials(run->results))
      return std::move(err);
#endif
  return ShardedOutcome{std::move(run->results), run->bytesMoved,
                        run->numDevices, run->wallMs};
}

/// Per result of `func`, the bound of a float sum that its partitioned run
/// adds in another order; none under --verify=exact or on the executor path
/// (data movement adds nothing but zeros).
llvm::Expected<std::vector<std::optional<SumBound>>>
sumBoundsOf(ShardedRunner *sharded, func::FuncOp func,
            llvm::ArrayRef<HostTensor> inputs) {
  if (!sharded || verifyResults != VerifyBounded)
    return std::vector<std::optional<SumBound>>();
  auto function = sharded->getFunction(func.getSymName());
  if (!function) {
    llvm::consumeError(function.takeError());
    return std::vector<std::optional<SumBound>>();
  }
  auto bounds =
      computeSumBounds(func->getParentOfType<ModuleOp>(), func.getSymName(),
                       function->reorderedSums, inputs);
  if (!bounds)
    return makeError("no bound for its reordered sums: " +
                     llvm::toString(bounds.takeError()));
  return bounds;
}

/// What a lock-step comparison compares (checkPartialSums): the program's
/// results against a reference that continued from the sharded run's
/// reordered sums, bit for bit, then each sum against the reference's own
/// from the same inputs, within its bound.
struct LockStep {
  std::vector<HostTensor> reference;
  std::vector<std::optional<SumBound>> bounds;
  /// Per sum: how a line names it ("result #2", or "the sum at f.mlir:4:8").
  std::vector<std::string> sumLabels;
};

/// The lock-step comparison of a function with reordered sums at its top
/// level: the sharded run returns each sum after its results
/// (ShardedRunnerOptions::returnPartialSums); the reference runs again with
/// those sums in place of its own (injectPartialSums), so that everything
/// after a sum computes from the same bits on both sides and must match
/// exactly, and returns its own sums, computed from the same inputs as the
/// sharded run's, which must match within the rounding bound of both
/// orders. A float sum that feeds more arithmetic is so checked where it is
/// made; before, its rounding difference reached every later result, which
/// then failed bit for bit.
llvm::Expected<LockStep>
checkPartialSums(const ShardedFunction &function, func::FuncOp func,
                 const ShardedOutcome &outcome,
                 llvm::ArrayRef<HostTensor> inputs,
                 llvm::ArrayRef<HostTensor> original,
                 llvm::ArrayRef<std::optional<SumBound>> originalBounds) {
  LockStep step;
  std::vector<HostTensor> sums;
  for (size_t k = 0; k < function.partialSums.size(); ++k) {
    auto sum =
        assembleReplicas(outcome.results[function.numProgramResults + k]);
    if (!sum)
      return makeError("reordered sum #" + std::to_string(k) + ": " +
                       llvm::toString(sum.takeError()));
    sums.push_back(std::move(*sum));
  }
  JitOptions jit;
  jit.optLevel = jitOptLevel;
  auto continued = continueFromPartialSums(
      func->getParentOfType<ModuleOp>(), func.getSymName(),
      function.partialSums, function.numProgramResults, sums, inputs, jit);
  if (!continued)
    return continued.takeError();
  step.reference = std::move(continued->results);
  step.bounds = std::move(continued->bounds);
  // A result that is a sum, moved, is compared as before: with the
  // reference from the inputs, within its bound. The sharded run reduced it
  // with the program's own transfer, whose order may differ from the
  // reduction that returned the sum.
  for (size_t i = 0; i < function.numProgramResults; ++i)
    if (function.reorderedSums[i]) {
      step.reference[i] = original[i];
      step.bounds[i] =
          i < originalBounds.size() ? originalBounds[i] : std::nullopt;
    }
  // A sum that a result only moves is named as that result.
  for (const ReorderedSum &sum : function.partialSums) {
    std::string label;
    for (auto [i, result] : llvm::enumerate(function.reorderedSums))
      if (result && result->opIndex == sum.opIndex &&
          result->resultNumber == sum.resultNumber && label.empty())
        label = "result #" + std::to_string(i);
    if (label.empty())
      label = "the sum at " +
              (sum.location.empty() ? "an unknown location" : sum.location);
    step.sumLabels.push_back(std::move(label));
  }
  return step;
}

/// Prints the sharded part of a function's line: the run's figures and
/// PASS (with the bounded results' ulps and relative errors), or the first
/// result element that fails and how many do per tile, or why the run
/// failed. Returns whether every tile passed. With `sumLabels`, the
/// results after the program's own are its reordered sums (LockStep).
bool reportSharded(func::FuncOp func, llvm::Expected<ShardedOutcome> outcome,
                   llvm::ArrayRef<HostTensor> reference, double referenceMs,
                   llvm::ArrayRef<std::optional<SumBound>> bounds,
                   llvm::ArrayRef<std::string> sumLabels = {}) {
  if (!outcome) {
    out() << ", reference " << llvm::format("%.3f", referenceMs)
          << " ms, FAIL: " << llvm::toString(outcome.takeError()) << "\n";
    return false;
  }
  out() << ", " << outcome->bytesMoved << " bytes moved, reference "
        << llvm::format("%.3f", referenceMs) << " ms, sharded "
        << llvm::format("%.3f", outcome->wallMs) << " ms on "
        << outcome->numDevices
        << (outcome->numDevices == 1 ? " device" : " devices");
  std::vector<std::string> withinBound;
  size_t numProgramResults = outcome->results.size() - sumLabels.size();
  auto label = [&](size_t i) {
    return i < numProgramResults ? "result #" + std::to_string(i)
                                 : sumLabels[i - numProgramResults];
  };
  for (auto [i, result] : llvm::enumerate(outcome->results)) {
    const SumBound *bound =
        i < bounds.size() && bounds[i] ? &*bounds[i] : nullptr;
    LeafComparison comparison = compareLeaf(reference[i], result, bound);
    if (comparison.passed()) {
      // A sum that is a result is listed once, as the result.
      bool listed = i >= numProgramResults &&
                    llvm::StringRef(label(i)).starts_with("result #");
      if (comparison.bounded && !listed)
        withinBound.push_back(label(i) + ": " + comparison.summary());
      continue;
    }
    out() << ", FAIL: " << label(i);
    if (auto leaf =
            i < numProgramResults
                ? func.getResultAttrOfType<StringAttr>(i, "polymesh.leaf")
                : StringAttr())
      out() << " (leaf \"" << leaf.getValue() << "\")";
    out() << ": " << comparison.failureMessage() << "\n";
    return false;
  }
  out() << ", PASS";
  if (!withinBound.empty())
    out() << " (within bound: " << llvm::join(withinBound, "; ") << ")";
  out() << "\n";
  return true;
}

//===----------------------------------------------------------------------===//
// Host memory
//===----------------------------------------------------------------------===//

/// The most memory this process may hold: physical memory, or less under
/// an address-space or data limit (ulimit -v, ulimit -d). Not what is free
/// now, which other processes change from run to run.
struct MemoryLimit {
  int64_t bytes = std::numeric_limits<int64_t>::max();
  const char *what = "no limit known";
};

MemoryLimit hostMemoryLimit() {
  MemoryLimit limit;
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && pageSize > 0 &&
      pages <= std::numeric_limits<int64_t>::max() / pageSize)
    limit = {static_cast<int64_t>(pages) * pageSize, "physical memory"};
  for (auto [resource, what] :
       {std::pair{RLIMIT_AS, "the address-space limit (ulimit -v)"},
        std::pair{RLIMIT_DATA, "the data-segment limit (ulimit -d)"}}) {
    struct rlimit rl;
    if (getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < static_cast<rlim_t>(limit.bytes))
      limit = {static_cast<int64_t>(rl.rlim_cur), what};
  }
  return limit;
}

/// Bytes of a host tensor of `signature`, saturating.
int64_t bytesOf(const TensorSignature &signature) {
  int64_t bytes = elementSize(signature.elementType);
  for (int64_t extent : signature.shape)
    bytes = saturatingMul(bytes, extent);
  return bytes;
}

/// Refuses to run `func` when the host tensors its run allocates at once
/// cannot fit in memory: the reference's inputs and results, and under
/// --verify every device's input and result tiles (inputs twice: a fresh
/// copy checks that no device wrote into its inputs). An allocation that
/// large aborts the process ("LLVM ERROR: out of memory"); refused here, the
/// error names the largest value and the bytes. The estimate leaves out
/// staging buffers and the JIT's own memory, so a run just under the limit
/// may still fail.
llvm::Error checkHostMemory(func::FuncOp func,
                            const FunctionSignature &signature,
                            ShardedRunner *sharded) {
  int64_t total = 0, largest = -1;
  std::string largestName;
  auto count = [&](const std::string &what, int64_t bytes) {
    total = saturatingAdd(total, bytes);
    if (bytes > largest) {
      largest = bytes;
      largestName = what;
    }
  };
  auto typeText = [](const TensorSignature &t) {
    return "tensor<" + formatTensorType(t.elementType, t.shape) + ">";
  };
  for (auto [i, argument] : llvm::enumerate(signature.arguments))
    count("argument #" + std::to_string(i) + " (" + typeText(argument) + ")",
          bytesOf(argument));
  for (auto [i, result] : llvm::enumerate(signature.results))
    count("result #" + std::to_string(i) + " (" + typeText(result) + ")",
          bytesOf(result));
  if (verifyResults && sharded) {
    if (auto function = sharded->getFunction(func.getSymName())) {
      for (const PartitionClass &partition : function->classes) {
        int64_t devices = static_cast<int64_t>(partition.devices.size());
        for (auto [i, input] : llvm::enumerate(partition.inputs))
          count("the tiles of argument #" + std::to_string(i) + " on " +
                    std::to_string(devices) + " devices of " + partition.name,
                saturatingMul(saturatingMul(bytesOf(input), devices), 2));
        for (auto [i, result] : llvm::enumerate(partition.results))
          count("the tiles of result #" + std::to_string(i) + " on " +
                    std::to_string(devices) + " devices of " + partition.name,
                saturatingMul(bytesOf(result), devices));
      }
    } else {
      llvm::consumeError(function.takeError());
    }
  }
  MemoryLimit limit = hostMemoryLimit();
  if (total <= limit.bytes)
    return llvm::Error::success();
  std::string message =
      llvm::formatv("cannot run @{0}: {1} takes {2} bytes, and the run "
                    "{3} bytes in all, more than the {4} bytes of {5}",
                    func.getSymName(), largestName, largest,
                    total == std::numeric_limits<int64_t>::max()
                        ? std::string("more than 2^63")
                        : std::to_string(total),
                    limit.bytes, limit.what)
          .str();
  func.emitError() << message;
  return makeError(message);
}

//===----------------------------------------------------------------------===//
// Running functions
//===----------------------------------------------------------------------===//

/// Runs `func` on the deterministic inputs and prints its line (and its
/// results with --print-results). With --verify it also runs sharded:
/// through `sharded` (the partitioned program), or with
/// --sharded-path=executor through the plan executor on `planned` (its
/// planned copy), and is compared with the reference. Returns whether it
/// passed: it ran and, under --verify, every tile matched; or was skipped:
/// its sharded run needs more GPUs than this machine has.
enum class Outcome { Passed, Failed, Skipped };

/// GPUs of this machine under --backend=nccl (not simulated); -1 otherwise.
int localGpus = -1;

/// The GPUs a run over `devices` needs on one machine: one per device, or
/// with several processes one per device of the process that owns the
/// most (the same answer in every process, so that all skip together).
int64_t gpusNeeded(llvm::ArrayRef<int64_t> devices) {
#if POLYMESH_HAVE_MPI
  if (multiProcess()) {
    std::map<int, int64_t> perRank;
    int64_t most = 0;
    for (int64_t device : devices)
      most = std::max(most, ++perRank[ownership.ownerOf(device)]);
    return most;
  }
#endif
  return static_cast<int64_t>(devices.size());
}

/// --print-results: the reference's first elements of every result.
void printReferenceResults(func::FuncOp func,
                           llvm::ArrayRef<HostTensor> results) {
  for (auto [i, result] : llvm::enumerate(results)) {
    out() << "  result #" << i;
    if (auto leaf = func.getResultAttrOfType<StringAttr>(i, "polymesh.leaf"))
      out() << " (leaf \"" << leaf.getValue() << "\")";
    out() << ": " << result.toString(/*maxElements=*/8) << "\n";
  }
}

Outcome runFunction(ReferenceRunner &runner, ShardedRunner *sharded,
                    func::FuncOp func, func::FuncOp planned) {
  llvm::StringRef name = func.getSymName();
  out() << "@" << name << ": ";
  // Located at the function unless the error names a place of its own.
  auto fail = [&](llvm::Error error, bool located = false) {
    out() << "FAIL: " << (located ? "" : formatLocationPrefix(func.getLoc()))
          << llvm::toString(std::move(error)) << "\n";
    return Outcome::Failed;
  };
  auto signature = runner.getSignature(name);
  if (!signature)
    return fail(signature.takeError(), /*located=*/true);
  if (llvm::Error err = checkHostMemory(func, *signature, sharded))
    return fail(std::move(err));
  // Argument i is stream i of the fill (InputFill.h).
  std::vector<HostTensor> inputs;
  for (auto [i, argument] : llvm::enumerate(signature->arguments))
    inputs.push_back(makeInput(argument.elementType, argument.shape, i));

  auto start = std::chrono::steady_clock::now();
  auto results = runner.run(name, inputs);
  auto stop = std::chrono::steady_clock::now();
  if (!results)
    return fail(results.takeError());
  double ms = std::chrono::duration<double, std::milli>(stop - start).count();

  size_t leaves = signature->results.size();
  out() << leaves << (leaves == 1 ? " leaf" : " leaves");
  Outcome outcome = Outcome::Passed;
  // NCCL needs a GPU per device: a run that needs more is not a failure
  // of the program, and is not a pass either.
  if (verifyResults && sharded && localGpus >= 0) {
    if (auto function = sharded->getFunction(name);
        function && gpusNeeded(function->devices) > localGpus) {
      out() << ", reference " << llvm::format("%.3f", ms)
            << " ms, SKIPPED: needs " << gpusNeeded(function->devices)
            << " GPUs (one per device"
            << (multiProcess() ? " of the busiest process" : "")
            << "), this machine has " << localGpus << "\n";
      return Outcome::Skipped;
    } else if (!function) {
      llvm::consumeError(function.takeError());
    }
  }
  if (verifyResults) {
    llvm::Expected<ShardedOutcome> run =
        sharded ? runPartitioned(*sharded, name)
                : runMovementOnly(planned, *signature);
    const ShardedFunction *function = nullptr;
    if (sharded) {
      auto found = sharded->getFunction(name);
      if (found)
        function = &*found;
      else
        llvm::consumeError(found.takeError());
    }
    if (run && function && !function->partialSums.empty()) {
      auto bounds = sumBoundsOf(sharded, func, inputs);
      if (!bounds)
        run = bounds.takeError();
      auto step = run ? checkPartialSums(*function, func, *run, inputs,
                                         *results, *bounds)
                      : llvm::Expected<LockStep>(run.takeError());
      if (!step)
        run = step.takeError();
      outcome =
          reportSharded(
              func, std::move(run), step ? step->reference : *results, ms,
              step ? step->bounds : std::vector<std::optional<SumBound>>(),
              step ? step->sumLabels : std::vector<std::string>())
              ? Outcome::Passed
              : Outcome::Failed;
      if (printResults)
        printReferenceResults(func, *results);
      return outcome;
    }
    if (run && function)
      run->results.erase(run->results.begin() + function->numProgramResults,
                         run->results.end());
    auto bounds = sumBoundsOf(sharded, func, inputs);
    if (run && !bounds)
      run = bounds.takeError();
    else if (!bounds)
      llvm::consumeError(bounds.takeError());
    outcome =
        reportSharded(func, std::move(run), *results, ms,
                      bounds ? *bounds : std::vector<std::optional<SumBound>>())
            ? Outcome::Passed
            : Outcome::Failed;
  } else {
    out() << ", reference " << llvm::format("%.3f", ms) << " ms\n";
  }
  if (printResults)
    printReferenceResults(func, *results);
  return outcome;
}

/// The ranks of this job (1 without --backend=mpi).
int runtimeRanks() {
#if POLYMESH_HAVE_MPI
  if (multiProcess())
    return mpiWorld->size();
#endif
  return 1;
}

#if POLYMESH_HAVE_MPI
/// Every rank ran one function and wrote its line into `line`: the
/// function failed if it failed in any rank. Rank 0 prints its own line, or
/// the first failing rank's with that rank named after "FAIL: ".
Outcome agreeOnOutcome(Outcome mine, const std::string &line) {
  absl::StatusOr<std::vector<uint64_t>> outcomes =
      mpiWorld->allGather(static_cast<uint64_t>(mine));
  absl::StatusOr<std::vector<std::string>> lines =
      outcomes.ok()
          ? mpiWorld->gatherToRoot(line)
          : absl::StatusOr<std::vector<std::string>>(outcomes.status());
  if (!lines.ok()) {
    // A rank that never arrives leaves nothing to agree with: end the job
    // rather than wait on it.
    llvm::outs() << line;
    llvm::outs().flush();
    llvm::errs() << "error: " << std::string(lines.status().message()) << "\n";
    llvm::errs().flush();
    mpiWorld->abortJob(1);
  }
  int firstFailed = -1;
  bool allSkipped = true;
  for (size_t r = 0; r < outcomes->size(); ++r) {
    auto outcome = static_cast<Outcome>((*outcomes)[r]);
    if (outcome == Outcome::Failed && firstFailed < 0)
      firstFailed = static_cast<int>(r);
    if (outcome != Outcome::Skipped)
      allSkipped = false;
  }
  if (mpiWorld->rank() == 0) {
    std::string text = (*lines)[firstFailed < 0 ? 0 : firstFailed];
    size_t at = text.find("FAIL: ");
    if (firstFailed >= 0 && at != std::string::npos && mpiWorld->size() > 1)
      text.insert(at + 6, "rank " + std::to_string(firstFailed) + ": ");
    llvm::outs() << text;
    llvm::outs().flush();
  }
  if (firstFailed >= 0)
    return Outcome::Failed;
  return allSkipped ? Outcome::Skipped : Outcome::Passed;
}
#endif

int runMain() {
  if (backend != "loopback" && backend != "nccl" && backend != "mpi") {
    llvm::errs() << "error: unsupported --backend='" << backend
                 << "': use 'loopback', 'mpi' or 'nccl'\n";
    return 1;
  }
  if (devicesPerProcess != 0 && (!multiProcess() || devicesPerProcess < 0)) {
    llvm::errs() << "error: --devices-per-process needs several processes "
                    "(--backend=mpi, or --backend=nccl under mpirun) and a "
                    "positive count\n";
    return 1;
  }
  if (multiProcess() && shardedPath == ShardedPath::Executor) {
    llvm::errs() << "error: --sharded-path=executor runs in one process; "
                    "several processes run the partitioned program\n";
    return 1;
  }
  if (simulateGpus && backend != "nccl") {
    llvm::errs() << "error: --simulate-gpus needs --backend=nccl\n";
    return 1;
  }
  if (simulatedGpuCount != 0 && (!simulateGpus || simulatedGpuCount < 0)) {
    llvm::errs() << "error: --simulated-gpu-count needs --simulate-gpus and "
                    "a positive count\n";
    return 1;
  }
  if (backend == "nccl") {
#if POLYMESH_HAVE_NCCL
    absl::StatusOr<int> gpus =
        simulateGpus ? absl::StatusOr<int>(1) : runtime::cudaDeviceCount();
    if (gpus.ok() && !simulateGpus)
      localGpus = *gpus;
    if (simulateGpus && simulatedGpuCount > 0)
      localGpus = simulatedGpuCount;
    if (!gpus.ok() || *gpus == 0) {
      llvm::outs() << "polymesh-run: skipped: "
                   << (gpus.ok() ? std::string("no CUDA device")
                                 : std::string(gpus.status().message()))
                   << "\n";
      return kSkippedExitCode;
    }
#else
    llvm::outs() << "polymesh-run: skipped: this build has no NCCL backend "
                    "(configure with the CUDA toolkit and NCCL)\n";
    return kSkippedExitCode;
#endif
  }

  DialectRegistry registry;
  registerDialects(registry);
  MLIRContext context(registry);
  // Diagnostics point into the input file; the op as the failing pass saw
  // it (often half-lowered) would only bury them.
  context.printOpOnDiagnostic(false);

  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> file =
      openInputFile(inputFilename, &errorMessage);
  if (!file) {
    llvm::errs() << "error: " << errorMessage << "\n";
    return 1;
  }
#if POLYMESH_HAVE_MPI
  if (multiProcess() && failed(checkSameProgram(file->getBuffer())))
    return 1;
#endif
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  // Parsing verifies the module, so bad IR stops here. Unregistered ops
  // parse so that rejectUnregisteredOps can name them.
  context.allowUnregisteredDialects(true);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module || failed(rejectUnregisteredOps(*module)))
    return 1;
  context.allowUnregisteredDialects(false);

  FailureOr<std::vector<std::string>> names = selectFunctions(*module);
  if (failed(names))
    return 1;
#if POLYMESH_HAVE_MPI
  if (multiProcess() && failed(computeOwnership(*module)))
    return 1;
#endif

  // Before any pass: types too large to count, recursion, calls of
  // declarations and tensors inside regions would crash, never end or go
  // exponential in the lowering (docs/limits.md).
  if (failed(checkReferenceLimits(*module, *names)))
    return 1;

  // The CPU pipeline starts with propagation: a program whose placements do
  // not resolve (an unplaced leaf, an unknown mesh) is rejected even though
  // the reference would not need them. Planning turns every reshard into the
  // transfer plan that sharded runs execute. Both run on a copy because the
  // reference is compiled from the program as written.
  OwningOpRef<ModuleOp> planned(module->clone());
  {
    PassManager pm(&context);
    pm.addPass(polymesh::createPolymeshPropagate());
    polymesh::PolymeshPlanOptions planOptions;
    planOptions.batchMinDevices = batchMinDevices;
    pm.addPass(polymesh::createPolymeshPlan(planOptions));
    if (failed(pm.run(*planned)))
      return 1;
  }

  JitOptions referenceJit;
  referenceJit.optLevel = jitOptLevel;
  auto runner = ReferenceRunner::create(*module, *names, referenceJit);
  if (!runner) {
    llvm::errs() << "error: " << llvm::toString(runner.takeError()) << "\n";
    return 1;
  }

  // The sharded programs of every function the reference can feed,
  // compiled before anything runs; a function that does not partition,
  // lower or compile fails on its own line.
  std::unique_ptr<ShardedRunner> sharded;
  if (verifyResults && shardedPath == ShardedPath::Partition) {
    std::vector<std::string> runnable;
    for (const std::string &name : *names) {
      if (auto signature = (*runner)->getSignature(name))
        runnable.push_back(name);
      else
        llvm::consumeError(signature.takeError());
    }
    auto created = ShardedRunner::create(*module, runnable, shardedOptions());
    if (!created) {
      llvm::errs() << "error: " << llvm::toString(created.takeError()) << "\n";
      return 1;
    }
    sharded = std::move(*created);
  }
#if POLYMESH_HAVE_MPI
  // Ranks compile different partitions at different speeds: the first
  // function's waits for a peer (each at most --mpi-timeout) must not count
  // a peer's compilation. The ranks meet once every one has compiled.
  if (multiProcess() && mpiWorld) {
    absl::Duration limit =
        std::max(absl::Minutes(30), 10 * mpiWorld->timeout());
    if (absl::Status met =
            mpiWorld->barrier(limit, "the meeting after compilation");
        !met.ok()) {
      llvm::errs() << "error: " << std::string(met.message()) << "\n";
      return 1;
    }
  }
#endif

  int passed = 0, failedCount = 0, skipped = 0;
  for (const std::string &name : *names) {
    std::string line;
    llvm::raw_string_ostream lineBuffer(line);
    if (multiProcess())
      lineStream = &lineBuffer;
    Outcome outcome = runFunction(**runner, sharded.get(),
                                  module->lookupSymbol<func::FuncOp>(name),
                                  planned->lookupSymbol<func::FuncOp>(name));
    lineStream = &llvm::outs();
#if POLYMESH_HAVE_MPI
    if (multiProcess())
      outcome = agreeOnOutcome(outcome, line);
#endif
    switch (outcome) {
    case Outcome::Passed:
      ++passed;
      break;
    case Outcome::Failed:
      ++failedCount;
      break;
    case Outcome::Skipped:
      ++skipped;
      break;
    }
  }
  bool printer = true;
#if POLYMESH_HAVE_MPI
  printer = !multiProcess() || mpiWorld->rank() == 0;
#endif
  if (printer) {
    llvm::outs() << passed << (verifyResults ? " passed, " : " ran, ")
                 << failedCount << " failed";
    if (skipped)
      llvm::outs() << ", " << skipped << " skipped";
    if (multiProcess())
      llvm::outs() << " (over " << runtimeRanks()
                   << (runtimeRanks() == 1 ? " process)" : " processes)");
    llvm::outs() << "\n";
  }
  if (failedCount)
    return 1;
  // Everything skipped: nothing was checked, which is no pass.
  return passed == 0 && skipped > 0 ? kSkippedExitCode : 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::cl::HideUnrelatedOptions(runCategory);
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "polymesh-run: runs Polymesh programs on deterministic inputs\n\n"
      "Functions run on the unsharded reference (lowered by upstream MLIR "
      "passes, JIT-compiled). With --verify, every function also runs "
      "sharded (propagated, planned, partitioned and lowered to the CPU, one "
      "thread per device on the loopback runtime) and every device's result "
      "tiles are compared with the reference: bit for bit, except float sums "
      "over a sharded dimension, which must lie within the rounding bound of "
      "their reordered additions (--verify=exact: bit for bit "
      "everywhere).\n");
  if (mpiMessages != "code" && mpiMessages != "runtime") {
    llvm::errs() << "error: --mpi-messages=" << mpiMessages
                 << ": use 'code' or 'runtime'\n";
    return 1;
  }
  if (jitOptLevel > 3) {
    llvm::errs() << "error: --opt-level=" << jitOptLevel
                 << ": the LLVM optimization level is 0, 1, 2 or 3\n";
    return 1;
  }
  if (multiProcess()) {
#if POLYMESH_HAVE_MPI
    absl::StatusOr<std::unique_ptr<runtime::MpiWorld>> world =
        runtime::MpiWorld::init(
            &argc, &argv,
            absl::Seconds(std::max(1, mpiTimeoutSeconds.getValue())));
    if (!world.ok()) {
      llvm::errs() << "error: --backend=mpi: "
                   << std::string(world.status().message()) << "\n";
      return 1;
    }
    mpiWorld = std::move(*world);
#if POLYMESH_HAVE_NCCL
    if (backend == "nccl" && failed(connectNcclProcesses()))
      return 1;
#endif
#else
    llvm::errs() << "error: --backend=" << backend
                 << ": several processes need the MPI backend, which this "
                    "build has not (install Open MPI, utils/install-deps.sh, "
                    "and reconfigure)\n";
    return 1;
#endif
  }
  // Deeply nested input recurses in MLIR's parser: a large stack.
  int code = polymesh::runWithLargeStack(runMain);
#if POLYMESH_HAVE_MPI
  llvm::outs().flush();
  // What talks over MPI goes before MPI is finalized.
#if POLYMESH_HAVE_NCCL
  ncclStore.reset();
  runtime::connectSimulatedGpus(nullptr);
#endif
  mpiWorld.reset();
#endif
  return code;
}
