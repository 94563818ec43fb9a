//===- ShardedRunner.cpp - Sharded runs of partitioned programs -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// See ShardedRunner.h for the contract; the comments here say why each step
// is there.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/ShardedRunner.h"

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Execution/SumBounds.h"
#include "polymesh/Runtime/PolymeshRuntime.h"
#include "polymesh/Transforms/InlineCalls.h"
#include "polymesh/Transforms/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

using namespace mlir;
using namespace polymesh;
using namespace polymesh::execution;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Records the first error diagnostic while it is in scope, as one line
/// ("file:line:col: message"). With `forward`, every diagnostic also goes
/// on to the handler installed before (polymesh-run prints it with the
/// source line); without, they are swallowed (a first attempt whose
/// failures are reported again, function by function).
class DiagnosticCapture {
public:
  DiagnosticCapture(MLIRContext *context, bool forward)
      : handler(context, [this, forward](Diagnostic &diagnostic) {
          if (diagnostic.getSeverity() == DiagnosticSeverity::Error &&
              first.empty())
            first = format(diagnostic);
          return forward ? failure() : success();
        }) {}

  /// The first error, or `fallback` when none was emitted.
  std::string firstError(llvm::StringRef fallback) const {
    return first.empty() ? fallback.str() : first;
  }

private:
  static std::string format(Diagnostic &diagnostic) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << formatLocationPrefix(diagnostic.getLocation()) << diagnostic.str();
    return text;
  }

  std::string first;
  ScopedDiagnosticHandler handler;
};

/// The layout of a tensor of `type` under `sharding`, or an error.
llvm::Expected<planner::TensorLayout> layoutOf(SymbolTableCollection &symbols,
                                               Operation *anchor,
                                               ShardingAttr sharding, Type type,
                                               const llvm::Twine &what) {
  if (!sharding)
    return error(what + " has no sharding after propagation");
  MeshAttr mesh = lookupMesh(symbols, anchor, sharding.getMeshName());
  if (!mesh)
    return error(what + " names unknown mesh " +
                 sharding.getMeshName().getValue());
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return error(what + " is not a ranked tensor");
  DiagnosticCapture capture(anchor->getContext(), /*forward=*/false);
  FailureOr<planner::TensorLayout> layout = toTensorLayout(
      [&] { return anchor->emitError(); }, sharding, mesh, tensor);
  if (failed(layout))
    return error(what + ": " + capture.firstError("invalid layout"));
  return std::move(*layout);
}

/// What the planned global function `func` says of its own sharded run:
/// argument and result layouts, bytes moved.
llvm::Expected<ShardedFunction> recordGlobal(func::FuncOp func,
                                             size_t numProgramResults) {
  ShardedFunction function;
  function.name = func.getSymName().str();
  auto signature = getFunctionSignature(func);
  if (!signature)
    return signature.takeError();
  function.signature = std::move(*signature);
  SymbolTableCollection symbols;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    auto layout =
        layoutOf(symbols, func,
                 func.getArgAttrOfType<ShardingAttr>(
                     i, PolymeshDialect::kShardingAttrName),
                 func.getArgument(i).getType(), "argument #" + llvm::Twine(i));
    if (!layout)
      return layout.takeError();
    function.argumentLayouts.push_back(std::move(*layout));
  }
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
    auto layout =
        layoutOf(symbols, func,
                 func.getResultAttrOfType<ShardingAttr>(
                     i, PolymeshDialect::kShardingAttrName),
                 func.getResultTypes()[i], "result #" + llvm::Twine(i));
    if (!layout)
      return layout.takeError();
    function.resultLayouts.push_back(std::move(*layout));
  }
  function.numProgramResults = numProgramResults;
  // Transfers that only feed the returned partial sums are the check's,
  // not the program's.
  Operation *terminator = func.getBody().back().getTerminator();
  auto onlyChecks = [&](TransferOp transfer) {
    return llvm::all_of(transfer->getUses(), [&](OpOperand &use) {
      return use.getOwner() == terminator &&
             use.getOperandNumber() >= numProgramResults;
    });
  };
  llvm::Error failure = llvm::Error::success();
  func.walk([&](TransferOp transfer) {
    if (failure || onlyChecks(transfer))
      return;
    Type type = transfer.getResult().getType();
    auto source =
        layoutOf(symbols, transfer, transfer.getSource(), type, "a transfer");
    if (!source) {
      failure = source.takeError();
      return;
    }
    auto destination = layoutOf(symbols, transfer, transfer.getDestination(),
                                type, "a transfer");
    if (!destination) {
      failure = destination.takeError();
      return;
    }
    absl::StatusOr<planner::TransferPlan> plan =
        toPlannerPlan(transfer, *source, *destination);
    if (!plan.ok()) {
      failure = llvm::createStringError(llvm::inconvertibleErrorCode(),
                                        std::string(plan.status().message()));
      return;
    }
    function.bytesMoved += plan->bytesMoved;
  });
  if (failure)
    return std::move(failure);
  // Until the classes name their meshes: the meshes of what the function
  // takes, returns and moves.
  std::set<int64_t> devices;
  auto addMesh = [&](const planner::TensorLayout &layout) {
    for (int64_t p = 0, e = layout.mesh().numDevices(); p < e; ++p)
      devices.insert(layout.mesh().deviceAt(p));
  };
  llvm::for_each(function.argumentLayouts, addMesh);
  llvm::for_each(function.resultLayouts, addMesh);
  func.walk([&](TransferOp transfer) {
    for (ShardingAttr sharding :
         {transfer.getSource(), transfer.getDestination()})
      if (MeshAttr mesh =
              lookupMesh(symbols, transfer, sharding.getMeshName())) {
        planner::Mesh planned = toPlannerMesh(mesh);
        for (int64_t p = 0, e = planned.numDevices(); p < e; ++p)
          devices.insert(planned.deviceAt(p));
      }
  });
  function.devices.assign(devices.begin(), devices.end());
  return std::move(function);
}

/// The extents of `device`'s box of `layout`; zeros outside its mesh.
std::vector<int64_t> tileExtents(const planner::TensorLayout &layout,
                                 int64_t device) {
  std::vector<int64_t> extents(layout.shape().size(), 0);
  if (std::optional<planner::Box> box = layout.boxOfDevice(device))
    for (size_t d = 0; d < extents.size(); ++d)
      extents[d] = box->hi[d] - box->lo[d];
  return extents;
}

/// The class function `func` of `function`: its devices and local types.
llvm::Expected<PartitionClass> recordClass(func::FuncOp func,
                                           const ShardedFunction &function) {
  auto devices =
      func->getAttrOfType<DenseI64ArrayAttr>(PolymeshDialect::kDevicesAttrName);
  if (!devices)
    return error("no polymesh.devices");
  FunctionType type = func.getFunctionType();
  if (type.getNumInputs() != 3 + function.signature.arguments.size() ||
      type.getNumResults() != function.signature.results.size())
    return error(
        llvm::formatv(
            "takes {0} arguments and returns {1} results; the global function "
            "has {2} and {3} (plus the runtime, device and position first)",
            type.getNumInputs(), type.getNumResults(),
            function.signature.arguments.size(),
            function.signature.results.size())
            .str());
  PartitionClass partition;
  partition.name = func.getSymName().str();
  partition.devices.assign(devices.asArrayRef().begin(),
                           devices.asArrayRef().end());
  auto record = [&](TypeRange types,
                    std::vector<TensorSignature> &out) -> llvm::Error {
    for (Type local : types) {
      auto signature = getTensorSignature(local);
      if (!signature)
        return signature.takeError();
      out.push_back(std::move(*signature));
    }
    return llvm::Error::success();
  };
  if (llvm::Error err =
          record(type.getInputs().drop_front(3), partition.inputs))
    return std::move(err);
  if (llvm::Error err = record(type.getResults(), partition.results))
    return std::move(err);
  return std::move(partition);
}

/// Every device of `layout` that this process runs has a class, whose
/// local type is the device's box; else why not.
std::string checkTiles(const ShardedFunction &function,
                       const std::map<int64_t, const PartitionClass *> &classOf,
                       const planner::TensorLayout &layout,
                       const TensorSignature &global, const char *what,
                       size_t index,
                       const std::vector<TensorSignature> PartitionClass::*list,
                       const std::function<bool(int64_t)> &runsDevice) {
  for (int64_t p = 0, e = layout.numDevices(); p < e; ++p) {
    int64_t device = layout.mesh().deviceAt(p);
    // A process partitions for the devices it runs only.
    if (!classOf.count(device) && (!runsDevice || runsDevice(device)))
      return llvm::formatv("device {0} holds a tile of {1} #{2} but runs no "
                           "class of @{3}",
                           device, what, index, function.name)
          .str();
  }
  for (const auto &[device, partition] : classOf) {
    const TensorSignature &local = (partition->*list)[index];
    std::vector<int64_t> expected = tileExtents(layout, device);
    if (local.elementType != global.elementType || local.shape != expected)
      return llvm::formatv("@{0} gives device {1} a {2} tile of {3} #{4}, but "
                           "its box in {5} is {6}",
                           partition->name, device,
                           formatTensorType(local.elementType, local.shape),
                           what, index, planner::describe(layout),
                           formatTensorType(global.elementType, expected))
          .str();
  }
  return "";
}

/// Checks `function`'s recorded classes and sets its devices: those of the
/// classes' meshes (`meshDevices`, when they name them), else of the
/// classes. Every device runs at most one class and only devices of the
/// function; every device with a tile runs one, with its exact tiles.
std::string checkClasses(ShardedFunction &function,
                         const std::vector<int64_t> *meshDevices,
                         const std::function<bool(int64_t)> &runsDevice) {
  std::map<int64_t, const PartitionClass *> classOf;
  for (const PartitionClass &partition : function.classes)
    for (int64_t device : partition.devices)
      if (!classOf.emplace(device, &partition).second)
        return llvm::formatv("device {0} runs two classes of @{1}", device,
                             function.name)
            .str();
  if (meshDevices) {
    function.devices = *meshDevices;
  } else if (!function.classes.empty()) {
    function.devices.clear();
    for (const auto &[device, partition] : classOf)
      function.devices.push_back(device);
  }
  for (const auto &[device, partition] : classOf)
    if (!std::binary_search(function.devices.begin(), function.devices.end(),
                            device))
      return llvm::formatv("@{0} runs device {1}, which is not a device of "
                           "@{2}'s meshes",
                           partition->name, device, function.name)
          .str();
  struct Side {
    const std::vector<planner::TensorLayout> &layouts;
    const std::vector<TensorSignature> &signatures;
    const char *what;
    const std::vector<TensorSignature> PartitionClass::*local;
  };
  for (const Side &side :
       {Side{function.argumentLayouts, function.signature.arguments, "argument",
             &PartitionClass::inputs},
        Side{function.resultLayouts, function.signature.results, "result",
             &PartitionClass::results}})
    for (size_t i = 0; i < side.layouts.size(); ++i)
      if (std::string why =
              checkTiles(function, classOf, side.layouts[i], side.signatures[i],
                         side.what, i, side.local, runsDevice);
          !why.empty())
        return why;
  return "";
}

/// Records the class functions of every function in `functions` from the
/// partitioned `module`, and checks them against the global layouts
/// (checkClasses). Errors per function.
void recordClasses(ModuleOp module, llvm::StringMap<ShardedFunction> &functions,
                   llvm::StringMap<std::string> &failures,
                   const std::function<bool(int64_t)> &runsDevice) {
  SymbolTableCollection symbols;
  // Per function: the devices of the meshes its classes name, which must
  // be the same for every class.
  llvm::StringMap<std::vector<int64_t>> meshDevices;
  for (auto func : module.getOps<func::FuncOp>()) {
    auto of =
        func->getAttrOfType<StringAttr>(PolymeshDialect::kPartitionOfAttrName);
    if (!of || !functions.contains(of.getValue()) ||
        failures.contains(of.getValue()))
      continue;
    llvm::StringRef global = of.getValue();
    auto fail = [&](const llvm::Twine &why) {
      failures[global] = ("@" + func.getSymName() + ": " + why).str();
    };
    ShardedFunction &function = functions.find(global)->second;
    llvm::Expected<PartitionClass> partition = recordClass(func, function);
    if (!partition) {
      fail(llvm::toString(partition.takeError()));
      continue;
    }
    if (std::optional<std::vector<int64_t>> ids =
            partitionedFunctionDevices(symbols, func)) {
      auto [it, first] = meshDevices.try_emplace(global, *ids);
      if (!first && it->second != *ids) {
        fail("names other meshes than the function's other classes");
        continue;
      }
    }
    function.classes.push_back(std::move(*partition));
  }
  for (auto &entry : functions) {
    ShardedFunction &function = entry.second;
    if (failures.contains(function.name))
      continue;
    auto ids = meshDevices.find(function.name);
    std::string why = checkClasses(
        function, ids == meshDevices.end() ? nullptr : &ids->second,
        runsDevice);
    if (!why.empty())
      failures[function.name] = why;
  }
}

/// Every op left outside the LLVM dialect after lowering, once per name.
std::string unloweredOps(ModuleOp module) {
  llvm::SmallVector<std::string> names;
  llvm::StringSet<> seen;
  module.walk([&](Operation *op) {
    // gpu.binary holds the CUDA kernels and gpu.launch_func launches them:
    // LLVM IR translation embeds the one and calls mgpu* for the other.
    if (op == module.getOperation() ||
        isa_and_nonnull<LLVM::LLVMDialect>(op->getDialect()) ||
        isa<gpu::BinaryOp, gpu::LaunchFuncOp>(op))
      return;
    if (seen.insert(op->getName().getStringRef()).second)
      names.push_back("'" + op->getName().getStringRef().str() + "'");
  });
  return llvm::join(names, ", ");
}

} // namespace

//===----------------------------------------------------------------------===//
// Compilation
//===----------------------------------------------------------------------===//

namespace {

/// One attempt at compiling `names` of the planned module: partition,
/// record, lower, JIT. On success the classes are in `functions` and the JIT
/// module is returned; per-function problems found while recording go to
/// `failures` (the module still compiles without them being run). A failing
/// pass fails the attempt with the first diagnostic.
llvm::Expected<std::unique_ptr<JitModule>>
compile(ModuleOp planned, llvm::ArrayRef<std::string> names,
        llvm::StringMap<ShardedFunction> &functions,
        llvm::StringMap<std::string> &failures, bool forwardDiagnostics,
        const ShardedRunnerOptions &runnerOptions) {
  ShardedTarget target = runnerOptions.target;
  const JitOptions &options = runnerOptions.jit;
  MLIRContext *context = planned.getContext();
  OwningOpRef<ModuleOp> module(planned.clone());
  llvm::StringSet<> selected;
  for (const std::string &name : names)
    selected.insert(name);
  // Only the selected functions are partitioned and compiled: anything else
  // becomes private, and symbol-dce drops it unless a selected function
  // calls it (partitioning then says that calls are not followed).
  for (auto func : module->getOps<func::FuncOp>())
    if (!selected.contains(func.getSymName()))
      func.setPrivate();

  // A process of a multi-process run partitions and lowers for its own
  // devices only: the other processes build the other classes and rows.
  PolymeshPartitionOptions partitionOptions;
  if (runnerOptions.runsDevice) {
    std::set<int64_t> own;
    for (MeshOp mesh : module->getOps<MeshOp>()) {
      planner::Mesh devices = toPlannerMesh(mesh.getMesh());
      for (int64_t p = 0, e = devices.numDevices(); p < e; ++p)
        if (runnerOptions.runsDevice(devices.deviceAt(p)))
          own.insert(devices.deviceAt(p));
    }
    partitionOptions.devices.assign(own.begin(), own.end());
    // An empty list means every device: a process that owns none of the
    // program's devices names one no mesh has.
    if (own.empty())
      partitionOptions.devices.push_back(-1);
  }

  DiagnosticCapture capture(context, forwardDiagnostics);
  {
    PassManager pm(context);
    pm.addPass(createSymbolDCEPass());
    pm.addPass(createPolymeshPartition(partitionOptions));
    if (failed(pm.run(*module)))
      return error("--polymesh-partition failed: " +
                   capture.firstError("no diagnostic"));
  }

  llvm::StringMap<ShardedFunction> subset;
  for (const std::string &name : names) {
    subset[name] = functions.find(name)->second;
    subset[name].classes.clear();
  }
  recordClasses(*module, subset, failures, runnerOptions.runsDevice);
  for (auto &entry : subset)
    functions[entry.getKey()] = std::move(entry.second);

  // Partitioned for this process's devices, every class runs one of them.
  auto runsAny = [&](const PartitionClass &partition) {
    return !runnerOptions.runsDevice ||
           llvm::any_of(partition.devices, runnerOptions.runsDevice);
  };

  // The class functions are the entry points: each gets a C interface
  // (the lowering marks their tensor arguments read-only itself; run()
  // checks that the input tiles come back unchanged).
  Builder builder(context);
  for (auto func : module->getOps<func::FuncOp>())
    if (func->hasAttr(PolymeshDialect::kPartitionOfAttrName) &&
        !func.isExternal())
      func->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                    builder.getUnitAttr());
  const char *lowering = target == ShardedTarget::Cuda
                             ? "--polymesh-lower-to-cuda"
                             : "--polymesh-lower-to-cpu";
  {
    PassManager pm(context);
    if (target == ShardedTarget::Cuda) {
      PolymeshLowerToCudaOptions cuda;
      cuda.directCollectives = runnerOptions.directCollectives;
      pm.addPass(createPolymeshLowerToCuda(cuda));
    } else {
      PolymeshLowerToCpuOptions cpu;
      cpu.directCollectives = runnerOptions.directCollectives;
      if (!runnerOptions.mpiImplementation.empty()) {
        cpu.transportName = "mpi";
        cpu.mpiImplementation = runnerOptions.mpiImplementation;
      }
      pm.addPass(createPolymeshLowerToCpu(cpu));
    }
    if (failed(pm.run(*module)))
      return error(llvm::Twine(lowering) +
                   " failed: " + capture.firstError("no diagnostic"));
  }
  std::string left = unloweredOps(*module);
  if (!left.empty())
    return error(llvm::Twine(lowering) +
                 " left ops outside the LLVM "
                 "dialect: " +
                 left);

  auto jit = JitModule::create(*module, options);
  if (!jit)
    return error("JIT compilation failed: " + llvm::toString(jit.takeError()));
  // Compile to machine code now, not inside the first (timed) run.
  for (const std::string &name : names) {
    if (failures.contains(name))
      continue;
    for (const PartitionClass &partition : functions.find(name)->second.classes)
      if (!runsAny(partition))
        continue;
      else if (llvm::Error err = (*jit)->prepare(partition.name))
        return error("JIT compilation failed: " +
                     llvm::toString(std::move(err)));
  }
  return std::move(*jit);
}

} // namespace

ShardedRunner::~ShardedRunner() = default;

llvm::Expected<std::unique_ptr<ShardedRunner>>
ShardedRunner::create(ModuleOp module, llvm::ArrayRef<std::string> names,
                      const ShardedRunnerOptions &options) {
  MLIRContext *context = module.getContext();
  DialectRegistry registry;
  registerHostLoweringDialects(registry);
  registerReferenceDialects(registry);
  if (options.target == ShardedTarget::Cuda) {
    if (!options.cuda.createRuntime || !options.cuda.alloc ||
        !options.cuda.free || !options.cuda.upload || !options.cuda.download)
      return error("the CUDA target needs a CUDA runtime (CudaRunHooks)");
    // The lowering's dialects, and LLVM IR translation of gpu.binary.
    registerCudaLoweringDialects(registry);
  }
  context->appendDialectRegistry(registry);
  context->loadDialect<bufferization::BufferizationDialect, LLVM::LLVMDialect,
                       PolymeshDialect>();

  std::unique_ptr<ShardedRunner> runner(new ShardedRunner());
  runner->options = options;

  OwningOpRef<ModuleOp> planned(module.clone());
  // Numbered before propagation, so that --verify can find a reordered sum
  // again in the unplanned module it runs as the reference. Calls are
  // specialized first (propagation's own first step, then a no-op there),
  // as computeSumBounds does to the reference: a reduction in a callee is
  // numbered where its copy stands.
  if (failed(inlineCallsForPropagation(*planned, kDefaultMaxSpecializedOps)))
    return error("--polymesh-propagate failed: its calls cannot be "
                 "specialized");
  tagReductions(*planned);
  llvm::StringMap<std::vector<ReorderedSum>> partialSums;
  llvm::StringMap<size_t> numProgramResults;
  {
    // Errors go on to the caller's handler; warnings and remarks (an op
    // without a sharding rule, say) are the caller's own propagation's to
    // print, not to be repeated here.
    ScopedDiagnosticHandler quiet(context, [](Diagnostic &diagnostic) {
      return success(diagnostic.getSeverity() != DiagnosticSeverity::Error);
    });
    PassManager propagate(context);
    propagate.addPass(createPolymeshPropagate());
    if (failed(propagate.run(*planned)))
      return error("--polymesh-propagate and --polymesh-plan failed");
    for (const std::string &name : names) {
      auto func = planned->lookupSymbol<func::FuncOp>(name);
      if (!func || func.isExternal() || partialSums.count(name))
        continue;
      numProgramResults[name] = func.getNumResults();
      if (!options.returnPartialSums)
        continue;
      partialSums[name] = findPartialSums(func);
      if (failed(returnPartialSums(func, partialSums[name])))
        return error("@" + name + ": cannot return its partial sums");
    }
    PassManager plan(context);
    PolymeshPlanOptions planOptions;
    planOptions.batchMinDevices = options.batchMinDevices;
    planOptions.exchangeTiles = options.exchangeTiles;
    plan.addPass(createPolymeshPlan(planOptions));
    if (failed(plan.run(*planned)))
      return error("--polymesh-propagate and --polymesh-plan failed");
  }

  std::vector<std::string> candidates;
  llvm::StringSet<> seen;
  for (const std::string &name : names) {
    if (!seen.insert(name).second)
      continue;
    auto func = planned->lookupSymbol<func::FuncOp>(name);
    if (!func || func.isExternal())
      return error("no function named @" + name + " with a body");
    auto function = recordGlobal(func, numProgramResults.lookup(name));
    if (!function) {
      runner->unavailable[name] = llvm::toString(function.takeError());
      continue;
    }
    function->reorderedSums = findReorderedSums(func);
    function->reorderedSums.resize(function->numProgramResults);
    function->partialSums = partialSums.lookup(name);
    runner->functions[name] = std::move(*function);
    candidates.push_back(name);
  }
  untagReductions(*planned);
  if (candidates.empty())
    return std::move(runner);

  // One module for every function when that compiles; otherwise each
  // function alone, so that one that fails does not take the others along
  // and its own diagnostics are reported.
  llvm::StringMap<std::string> failures;
  auto together = compile(*planned, candidates, runner->functions, failures,
                          /*forwardDiagnostics=*/false, options);
  if (together) {
    runner->jits.push_back(std::move(*together));
    for (const std::string &name : candidates)
      runner->jitOf[name] = runner->jits.back().get();
  } else {
    llvm::consumeError(together.takeError());
    failures.clear();
    for (const std::string &name : candidates) {
      auto alone = compile(*planned, {name}, runner->functions, failures,
                           /*forwardDiagnostics=*/true, options);
      if (!alone) {
        failures[name] = llvm::toString(alone.takeError());
        continue;
      }
      runner->jits.push_back(std::move(*alone));
      runner->jitOf[name] = runner->jits.back().get();
    }
  }
  for (auto &entry : failures) {
    runner->unavailable[entry.getKey()] = entry.second;
    runner->functions.erase(entry.getKey());
    runner->jitOf.erase(entry.getKey());
  }
  return std::move(runner);
}

llvm::Expected<const ShardedFunction &>
ShardedRunner::getFunction(llvm::StringRef name) const {
  auto it = functions.find(name);
  if (it != functions.end())
    return it->second;
  auto why = unavailable.find(name);
  if (why != unavailable.end())
    return error(why->second);
  return error("@" + name + " is not a function the sharded runner compiled");
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

namespace {

/// One device's share of a run: its class, position and tiles.
struct DeviceWork {
  const PartitionClass *partition = nullptr;
  int64_t position = 0;
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> results;
};

struct RunContext {
  JitModule *jit = nullptr;
  std::map<int64_t, DeviceWork> work;
  /// CUDA runs: per device, its inputs' then its results' device pointers,
  /// passed after the three scalars instead of memref descriptors.
  bool devicePointers = false;
  std::map<int64_t, std::vector<void *>> pointers;
};

/// polymesh_rt_run_devices' device function: one call of the device's
/// class function. The JIT call fails only for a missing entry point, which
/// create() has ruled out; a runtime error inside is seen afterwards in
/// polymesh_rt_status.
int32_t runDevice(PolymeshRuntime *rt, int64_t device, void *user) {
  auto *context = static_cast<RunContext *>(user);
  DeviceWork &work = context->work.at(device);
  llvm::SmallVector<const HostTensor *> inputs;
  for (const HostTensor &input : work.inputs)
    inputs.push_back(&input);
  llvm::SmallVector<HostTensor *> results;
  for (HostTensor &result : work.results)
    results.push_back(&result);
  llvm::SmallVector<uint64_t> scalars = {reinterpret_cast<uintptr_t>(rt),
                                         static_cast<uint64_t>(device),
                                         static_cast<uint64_t>(work.position)};
  if (context->devicePointers) {
    for (void *pointer : context->pointers.at(device))
      scalars.push_back(reinterpret_cast<uintptr_t>(pointer));
    inputs.clear();
    results.clear();
  }
  if (llvm::Error err =
          context->jit->call(work.partition->name, scalars, inputs, results)) {
    llvm::consumeError(std::move(err));
    return POLYMESH_RT_INTERNAL;
  }
  return POLYMESH_RT_OK;
}

struct RuntimeDeleter {
  void operator()(PolymeshRuntime *rt) const { polymesh_rt_destroy(rt); }
};

} // namespace

namespace {

/// Which devices this process runs, each with its class and position.
void assignWork(RunContext &context, const ShardedFunction &function,
                const std::function<bool(int64_t)> &runsDevice) {
  for (const PartitionClass &partition : function.classes)
    for (int64_t device : partition.devices) {
      if (!runsDevice(device))
        continue;
      DeviceWork &work = context.work[device];
      work.partition = &partition;
      work.position = std::lower_bound(function.devices.begin(),
                                       function.devices.end(), device) -
                      function.devices.begin();
    }
}

/// Inputs: every device fills its box of every argument, as the reference
/// holds it; devices outside an argument's mesh get an empty tile. Results
/// start zeroed.
void fillTiles(RunContext &context, const ShardedFunction &function) {
  for (size_t i = 0; i < function.argumentLayouts.size(); ++i) {
    const TensorSignature &argument = function.signature.arguments[i];
    ShardedTensor input =
        makeShardedInput(argument.elementType, function.argumentLayouts[i],
                         static_cast<uint32_t>(i), TileShape::Exact);
    for (auto &[device, work] : context.work) {
      auto tile = input.tiles.find(device);
      if (tile != input.tiles.end())
        work.inputs.push_back(std::move(tile->second));
      else
        work.inputs.emplace_back(argument.elementType,
                                 work.partition->inputs[i].shape);
    }
  }
  for (auto &[device, work] : context.work)
    for (const TensorSignature &result : work.partition->results)
      work.results.emplace_back(result.elementType, result.shape);
}

std::unique_ptr<PolymeshRuntime, RuntimeDeleter>
createRuntime(const ShardedRunnerOptions &options,
              const std::vector<int64_t> &devices, int64_t runIndex) {
  auto count = static_cast<int64_t>(devices.size());
  if (options.createRuntime)
    return std::unique_ptr<PolymeshRuntime, RuntimeDeleter>(
        options.createRuntime(devices, options.timeoutMs, runIndex));
  if (options.target == ShardedTarget::Cuda)
    return std::unique_ptr<PolymeshRuntime, RuntimeDeleter>(
        options.cuda.createRuntime(devices.data(), count, options.timeoutMs));
  return std::unique_ptr<PolymeshRuntime, RuntimeDeleter>(
      polymesh_rt_create_loopback(devices.data(), count, options.timeoutMs));
}

/// CUDA runs: every tile in its device's memory, moved there before the run
/// and back after it; freed before the runtime.
class DeviceTiles {
public:
  DeviceTiles(RunContext &context, PolymeshRuntime *rt,
              const CudaRunHooks &cuda)
      : context(context), rt(rt), cuda(cuda) {}
  ~DeviceTiles() { release(); }
  /// Copies every tile to (or back from) device memory; false on the
  /// runtime's first error.
  bool transfer(bool toDevice);
  void release() {
    for (auto &[device, pointers] : context.pointers)
      for (void *pointer : pointers)
        cuda.free(rt, device, pointer);
    context.pointers.clear();
  }

private:
  RunContext &context;
  PolymeshRuntime *rt;
  const CudaRunHooks &cuda;
};

bool DeviceTiles::transfer(bool toDevice) {
  for (auto &[device, work] : context.work) {
    std::vector<void *> &pointers = context.pointers[device];
    size_t index = 0;
    for (auto *tiles : {&work.inputs, &work.results})
      for (HostTensor &tile : *tiles) {
        int64_t bytes = tile.getSizeInBytes();
        if (toDevice) {
          pointers.push_back(
              cuda.alloc(rt, device, std::max<int64_t>(bytes, 1)));
          if (!pointers.back())
            return false;
        }
        void *memory = pointers[index++];
        if (bytes == 0)
          continue;
        int32_t code =
            toDevice ? cuda.upload(rt, device, memory, tile.getData(), bytes)
                     : cuda.download(rt, device, tile.getData(), memory, bytes);
        if (code != POLYMESH_RT_OK)
          return false;
      }
  }
  return true;
}

/// Inputs are read-only: a local program that wrote into an input tile
/// would corrupt a value that other ops (or the caller) still read.
llvm::Error checkInputsUnchanged(const RunContext &context,
                                 const ShardedFunction &function) {
  for (size_t i = 0; i < function.argumentLayouts.size(); ++i) {
    ShardedTensor fresh =
        makeShardedInput(function.signature.arguments[i].elementType,
                         function.argumentLayouts[i], static_cast<uint32_t>(i),
                         TileShape::Exact);
    for (auto &[device, tile] : fresh.tiles) {
      if (!context.work.count(device))
        continue;
      const HostTensor &used = context.work.at(device).inputs[i];
      if (tile.getSizeInBytes() == 0 && used.getSizeInBytes() == 0)
        continue;
      if (used.getSizeInBytes() != tile.getSizeInBytes() ||
          std::memcmp(used.getData(), tile.getData(),
                      static_cast<size_t>(tile.getSizeInBytes())) != 0)
        return error("device " + llvm::Twine(device) +
                     " wrote into its input tile of argument #" +
                     llvm::Twine(i));
    }
  }
  return llvm::Error::success();
}

/// Per result, the tiles of the devices this process runs (none when it
/// runs none of the function's devices).
std::vector<ShardedTensor>
collectResults(RunContext &context, const ShardedFunction &function,
               const std::function<bool(int64_t)> &runsDevice) {
  std::vector<ShardedTensor> results;
  for (size_t r = 0; r < function.resultLayouts.size(); ++r) {
    const planner::TensorLayout &layout = function.resultLayouts[r];
    ShardedTensor result{function.signature.results[r].elementType, layout, {}};
    for (int64_t p = 0, e = layout.numDevices(); p < e && !context.work.empty();
         ++p) {
      int64_t device = layout.mesh().deviceAt(p);
      if (runsDevice(device))
        result.tiles.emplace(device,
                             std::move(context.work.at(device).results[r]));
    }
    results.push_back(std::move(result));
  }
  return results;
}

} // namespace

llvm::Expected<ShardedRun> ShardedRunner::run(llvm::StringRef name) {
  int64_t runIndex = runsMade++;
  auto found = getFunction(name);
  if (!found)
    return found.takeError();
  const ShardedFunction &function = *found;
  ShardedRun run;
  run.bytesMoved = function.bytesMoved;
  run.numDevices = static_cast<int64_t>(function.devices.size());
  // No tensor anywhere: nothing runs, nothing can differ.
  if (function.devices.empty())
    return run;

  RunContext context;
  context.jit = jitOf.lookup(name);
  auto runsDevice = [&](int64_t device) {
    return !options.runsDevice || options.runsDevice(device);
  };
  assignWork(context, function, runsDevice);
  // A process of a multi-process run that runs none of the devices.
  if (context.work.empty()) {
    run.results = collectResults(context, function, runsDevice);
    return run;
  }
  fillTiles(context, function);

  std::unique_ptr<PolymeshRuntime, RuntimeDeleter> rt =
      createRuntime(options, function.devices, runIndex);
  if (polymesh_rt_status(rt.get()) != POLYMESH_RT_OK)
    return error(llvm::Twine("runtime: ") + polymesh_rt_last_error(rt.get()));
  bool cuda = options.target == ShardedTarget::Cuda;
  DeviceTiles deviceTiles(context, rt.get(), options.cuda);
  if (cuda) {
    context.devicePointers = true;
    if (!deviceTiles.transfer(/*toDevice=*/true))
      return error(llvm::Twine("runtime: ") + polymesh_rt_last_error(rt.get()));
  }

  if (options.warmup)
    polymesh_rt_run_devices(rt.get(), runDevice, &context);
  auto start = std::chrono::steady_clock::now();
  int32_t code = polymesh_rt_run_devices(rt.get(), runDevice, &context);
  auto stop = std::chrono::steady_clock::now();
  // Generated code does not check statuses: the runtime's first error is
  // the run's.
  if (cuda && polymesh_rt_status(rt.get()) == POLYMESH_RT_OK)
    deviceTiles.transfer(/*toDevice=*/false);
  deviceTiles.release();
  if (polymesh_rt_status(rt.get()) != POLYMESH_RT_OK)
    return error(llvm::Twine("runtime: ") + polymesh_rt_last_error(rt.get()));
  if (code != POLYMESH_RT_OK)
    return error("runtime: polymesh_rt_run_devices returned status " +
                 llvm::Twine(code));
  run.wallMs = std::chrono::duration<double, std::milli>(stop - start).count();
  if (llvm::Error err = checkInputsUnchanged(context, function))
    return std::move(err);
  run.results = collectResults(context, function, runsDevice);
  return run;
}
