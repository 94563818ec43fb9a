//===- Plan.cpp - Reshards to planned transfers ---------------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Replaces every polymesh.reshard with a polymesh.transfer planned by the
// MLIR-free planner library, and reports what each plan moves.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Planner/Batch.h"
#include "polymesh/Planner/Planner.h"
#include "polymesh/Transforms/ControlFlow.h"
#include "polymesh/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <map>

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHPLAN
#include "polymesh/Transforms/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;

namespace {

TransferStepKind toStepKind(planner::StepKind kind) {
  switch (kind) {
  case planner::StepKind::LocalCopy:
    return TransferStepKind::LocalCopy;
  case planner::StepKind::ZeroFill:
    return TransferStepKind::ZeroFill;
  case planner::StepKind::AllGather:
    return TransferStepKind::AllGather;
  case planner::StepKind::AllToAll:
    return TransferStepKind::AllToAll;
  case planner::StepKind::CollectivePermute:
    return TransferStepKind::CollectivePermute;
  case planner::StepKind::Broadcast:
    return TransferStepKind::Broadcast;
  case planner::StepKind::SendRecv:
    return TransferStepKind::SendRecv;
  case planner::StepKind::AllReduce:
    return TransferStepKind::AllReduce;
  case planner::StepKind::ReduceScatter:
    return TransferStepKind::ReduceScatter;
  }
  llvm_unreachable("unknown step kind");
}

/// The plan's steps as attributes; with `reductionPieces`, reductions as
/// their pieces where those determine them.
ArrayAttr toStepsAttr(MLIRContext *context, const planner::TransferPlan &plan,
                      bool reductionPieces) {
  SmallVector<Attribute> steps;
  steps.reserve(plan.steps.size());
  for (const planner::Step &step : plan.steps) {
    SmallVector<BoxTransferAttr> transfers;
    SmallVector<int64_t> owners, corners;
    // A reduction is written as its pieces where they determine its
    // transfers: n pieces for a group of n instead of about n^2 transfers.
    if (step.exchange) {
      steps.push_back(TransferStepAttr::get(context, toStepKind(step.kind),
                                            step.chunk, step.devices, transfers,
                                            owners, corners, /*tiles=*/true));
      continue;
    }
    std::optional<planner::ReductionPieces> pieces = step.pieces;
    if (reductionPieces && !pieces)
      pieces = planner::findReductionPieces(step, plan.elementBytes);
    if (pieces) {
      owners.assign(pieces->owners.begin(), pieces->owners.end());
      for (const planner::Box &piece : pieces->pieces) {
        corners.append(piece.lo.begin(), piece.lo.end());
        corners.append(piece.hi.begin(), piece.hi.end());
      }
      steps.push_back(TransferStepAttr::get(context, toStepKind(step.kind),
                                            step.chunk, step.devices, transfers,
                                            owners, corners, /*tiles=*/false));
      continue;
    }
    transfers.reserve(step.transfers.size());
    for (const planner::Transfer &transfer : step.transfers)
      transfers.push_back(BoxTransferAttr::get(
          context, transfer.srcDevice, transfer.dstDevices, transfer.box.lo,
          transfer.box.hi,
          transfer.srcBuffer == planner::BufferKind::Destination,
          transfer.dstBuffer == planner::BufferKind::Source,
          transfer.accumulate, transfer.phase));
    steps.push_back(TransferStepAttr::get(context, toStepKind(step.kind),
                                          step.chunk, step.devices, transfers,
                                          owners, corners, /*tiles=*/false));
  }
  return ArrayAttr::get(context, steps);
}

ArrayAttr toBatchAttr(MLIRContext *context,
                      const std::vector<planner::BatchAxis> &axes) {
  SmallVector<Attribute> attrs;
  for (const planner::BatchAxis &axis : axes)
    attrs.push_back(
        BatchAxisAttr::get(context, axis.source, axis.destination, axis.dim));
  return ArrayAttr::get(context, attrs);
}

std::string printed(Attribute attr) {
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return text;
}

std::string printed(Location loc) {
  std::string text;
  llvm::raw_string_ostream os(text);
  loc.print(os);
  return text;
}

std::string jsonString(StringRef text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += llvm::formatv("\\u{0:x4}", static_cast<int>(c)).str();
      continue;
    }
    out += c;
  }
  return out + "\"";
}

/// One JSON object per reshard, in the field order of the pass docs.
std::string statsJson(StringRef function, Location loc, RankedTensorType type,
                      ShardingAttr source, ShardingAttr destination,
                      const planner::TransferPlan &plan) {
  std::string shape;
  llvm::raw_string_ostream shapeOs(shape);
  shapeOs << "[";
  llvm::interleaveComma(type.getShape(), shapeOs);
  shapeOs << "]";
  std::string dtype;
  llvm::raw_string_ostream dtypeOs(dtype);
  type.getElementType().print(dtypeOs);
  std::string steps = "{";
  bool first = true;
  for (int k = 0; k < planner::kNumStepKinds; ++k) {
    if (plan.stepCounts[k] == 0)
      continue;
    if (!first)
      steps += ", ";
    first = false;
    steps += jsonString(stringifyTransferStepKind(
                 toStepKind(static_cast<planner::StepKind>(k)))) +
             ": " + std::to_string(plan.stepCounts[k]);
  }
  steps += "}";
  return llvm::formatv(
             "{{\"function\": {0}, \"location\": {1}, \"shape\": {2}, "
             "\"dtype\": {3}, \"source\": {4}, \"destination\": {5}, "
             "\"bytes_moved\": {6}, \"lower_bound_bytes\": {7}, "
             "\"max_device_recv_bytes\": {8}, \"max_device_send_bytes\": {9}, "
             "\"peak_temp_bytes\": {10}, \"steps\": {11}}",
             jsonString(function), jsonString(printed(loc)), shape,
             jsonString(dtype), jsonString(printed(source)),
             jsonString(printed(destination)), plan.bytesMoved,
             plan.lowerBoundBytes, plan.maxRecvBytes, plan.maxSendBytes,
             plan.peakTempBytes, steps)
      .str();
}

/// An SVG heat map of bytes sent from each device (rows) to each device
/// (columns), on a log scale so that small transfers stay visible.
std::string
commMatrixSvg(const std::map<std::pair<int64_t, int64_t>, int64_t> &bytes) {
  std::vector<int64_t> devices;
  for (const auto &[pair, count] : bytes) {
    devices.push_back(pair.first);
    devices.push_back(pair.second);
  }
  llvm::sort(devices);
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  std::map<int64_t, size_t> index;
  for (auto [i, device] : llvm::enumerate(devices))
    index[device] = i;
  int64_t maxBytes = 1;
  for (const auto &[pair, count] : bytes)
    maxBytes = std::max(maxBytes, count);
  const int cell = devices.size() > 64 ? 6 : 14, margin = 60;
  const int size = margin + cell * static_cast<int>(devices.size()) + 20;
  std::string svg = llvm::formatv(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" "
      "height=\"{1}\" font-family=\"monospace\" font-size=\"10\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"4\" y=\"12\">bytes sent: rows = sender, columns = "
      "receiver; max {2} B</text>\n",
      size, size + 10, maxBytes);
  if (devices.size() <= 64) {
    for (auto [i, device] : llvm::enumerate(devices)) {
      int offset = margin + static_cast<int>(i) * cell;
      svg += llvm::formatv("<text x=\"{0}\" y=\"{1}\">{2}</text>\n", 20,
                           offset + cell - 3, device);
      svg += llvm::formatv("<text x=\"{0}\" y=\"{1}\" transform=\"rotate(-90 "
                           "{0} {1})\">{2}</text>\n",
                           offset + cell - 3, margin - 4, device);
    }
  }
  for (auto [i, device] : llvm::enumerate(devices))
    for (auto [j, other] : llvm::enumerate(devices)) {
      auto it = bytes.find({device, other});
      int64_t count = it == bytes.end() ? 0 : it->second;
      // Log scale: white for nothing, deep blue for the busiest pair.
      double level = count == 0 ? 0.0
                                : 0.15 + 0.85 * std::log1p(double(count)) /
                                             std::log1p(double(maxBytes));
      int shade = static_cast<int>(255 * (1.0 - level));
      svg += llvm::formatv(
          "<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{2}\" "
          "fill=\"rgb({3},{3},255)\" stroke=\"#ddd\"><title>{4} -> {5}: {6} "
          "B</title></rect>\n",
          margin + static_cast<int>(j) * cell,
          margin + static_cast<int>(i) * cell, cell, shade, device, other,
          count);
    }
  svg += "</svg>\n";
  return svg;
}

class PolymeshPlanPass final
    : public polymesh::impl::PolymeshPlanBase<PolymeshPlanPass> {
public:
  using Base::Base;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    if (memoryLimitBytes < 0) {
      module.emitError() << "memory-limit-bytes must not be negative, got "
                         << static_cast<int64_t>(memoryLimitBytes);
      return signalPassFailure();
    }
    SymbolTableCollection symbols;
    planner::PlanOptions options;
    options.memoryLimitBytes = memoryLimitBytes;
    options.symbolicReductions = reductionPieces;
    options.symbolicExchanges = exchangeTiles;
    std::string stats, plans;
    std::map<std::pair<int64_t, int64_t>, int64_t> traffic;
    bool failedAny = false;
    moduleTransfers = moduleReceivers = 0;

    SmallVector<ReshardOp> reshards;
    module.walk([&](ReshardOp op) { reshards.push_back(op); });
    for (ReshardOp reshard : reshards) {
      if (failed(planOne(reshard, symbols, options, stats, plans, traffic)))
        failedAny = true;
    }
    if (failedAny)
      return signalPassFailure();

    if (!statsFile.empty() && failed(writeOut(statsFile, stats)))
      return signalPassFailure();
    if (printPlan)
      llvm::outs() << (reshards.empty()
                           ? std::string("no reshards: nothing moves\n")
                           : plans);
    if (!commMatrix.empty() &&
        failed(writeOut(commMatrix, commMatrixSvg(traffic))))
      return signalPassFailure();
  }

private:
  /// Transfers and receivers of every plan made so far in the module.
  int64_t moduleTransfers = 0, moduleReceivers = 0;

  LogicalResult
  planOne(ReshardOp reshard, SymbolTableCollection &symbols,
          const planner::PlanOptions &options, std::string &stats,
          std::string &plans,
          std::map<std::pair<int64_t, int64_t>, int64_t> &traffic) {
    Value input = reshard.getInput();
    auto type = cast<RankedTensorType>(input.getType());
    ShardingAttr source = sourceSharding(input);
    if (!source) {
      // Propagation places the values of a function's body and of its
      // tensor control flow; one defined in another region stays unplaced
      // however often it runs.
      Operation *owner =
          isa<BlockArgument>(input)
              ? cast<BlockArgument>(input).getOwner()->getParentOp()
              : input.getDefiningOp()->getParentOp();
      if (owner && !isa<FunctionOpInterface>(owner))
        return reshard.emitOpError()
               << "has an operand without a sharding: "
               << (isa<BlockArgument>(input) ? "an argument of a region of '"
                                             : "a value inside a region of '")
               << owner->getName()
               << "', and propagation places values inside the regions of "
                  "scf.for, scf.while, scf.if and scf.index_switch only "
                  "(docs/propagation.md); "
                  "reshard outside the region";
      return reshard.emitOpError()
             << "has an operand without a sharding; run --polymesh-propagate "
                "first";
    }
    ShardingAttr destination = reshard.getSharding();
    MeshAttr sourceMesh = lookupMesh(symbols, reshard, source.getMeshName());
    MeshAttr destinationMesh =
        lookupMesh(symbols, reshard, destination.getMeshName());
    if (!sourceMesh || !destinationMesh)
      return reshard.emitOpError() << "refers to an unknown mesh";
    auto emit = [&]() {
      InFlightDiagnostic diag = reshard.emitOpError();
      diag << "cannot be planned: ";
      return diag;
    };
    FailureOr<planner::TensorLayout> from =
        toTensorLayout(emit, source, sourceMesh, type);
    if (failed(from))
      return failure();
    FailureOr<planner::TensorLayout> to =
        toTensorLayout(emit, destination, destinationMesh, type);
    if (failed(to))
      return failure();
    Type element = type.getElementType();
    int64_t elementBytes = elementByteSize(element);
    if (elementBytes == 0)
      return emit() << unmovableElementReason(element);
    std::optional<planner::ReshardBatch> batch = findBatch(*from, *to, options);
    absl::StatusOr<std::shared_ptr<const planner::TransferPlan>> plan =
        batch ? cache->getOrPlan(batch->cellSource, batch->cellDestination,
                                 elementBytes,
                                 *planner::cellPlanOptions(*batch, options))
              : cache->getOrPlan(*from, *to, elementBytes, options);
    if (!plan.ok())
      return emit() << std::string(plan.status().message());

    // One budget for the whole module, not only per plan: every plan is
    // written into the IR and lowered, so many reshards below the per-plan
    // limits together exhaust memory just as one huge plan does. A batched
    // plan counts its cell: what the IR holds and the lowering schedules.
    auto [transfers, receivers] = planner::planSize(**plan);
    moduleTransfers += transfers;
    moduleReceivers += receivers;
    if (moduleTransfers > planner::kMaxPlanTransfers)
      return emit() << "the module's plans would hold more than "
                    << planner::kMaxPlanTransfers << " transfers in all ("
                    << moduleTransfers
                    << " with this one); the budget is shared by every "
                       "reshard of the module (docs/limits.md)";
    if (moduleReceivers > planner::kMaxPlanReceivers)
      return emit() << "the module's plans would deliver to more than "
                    << planner::kMaxPlanReceivers << " receivers in all ("
                    << moduleReceivers
                    << " with this one); the budget is shared by every "
                       "reshard of the module (docs/limits.md)";

    // Reports only when asked for: on a pod their text costs as much as
    // planning. They describe the whole plan, every cell of a batch.
    // print-plan and the stats show a symbolic reduction by its pieces: a
    // sum over 65,536 devices would be 8.6 billion (transfer, receiver)
    // pairs; only the device x device matrix walks its transfers.
    if (!statsFile.empty() || printPlan || !commMatrix.empty()) {
      std::optional<planner::TransferPlan> expanded;
      if (batch) {
        absl::StatusOr<planner::TransferPlan> whole =
            planner::expandBatchedPlan(**plan, *batch, *from, *to);
        if (!whole.ok())
          return emit() << std::string(whole.status().message());
        expanded = std::move(*whole);
      }
      report(reshard, type, source, destination, expanded ? *expanded : **plan,
             stats, plans, traffic);
    }

    OpBuilder builder(reshard);
    auto transfer = TransferOp::create(
        builder, reshard.getLoc(), type, input, source, destination,
        toStepsAttr(reshard.getContext(), **plan, reductionPieces),
        batch ? toBatchAttr(reshard.getContext(), batch->axes) : ArrayAttr());
    reshard.replaceAllUsesWith(transfer.getResult());
    reshard.erase();
    return success();
  }

  /// The batch to plan the reshard by, when batching is on, its meshes are
  /// large enough and it repeats over some mesh axes.
  std::optional<planner::ReshardBatch>
  findBatch(const planner::TensorLayout &from, const planner::TensorLayout &to,
            const planner::PlanOptions &options) const {
    if (batchMinDevices <= 0 ||
        std::max(from.numDevices(), to.numDevices()) < batchMinDevices)
      return std::nullopt;
    std::optional<planner::ReshardBatch> batch =
        planner::findReshardBatch(from, to);
    if (!batch || !planner::cellPlanOptions(*batch, options))
      return std::nullopt;
    return batch;
  }

  void report(ReshardOp reshard, RankedTensorType type, ShardingAttr source,
              ShardingAttr destination, const planner::TransferPlan &plan,
              std::string &stats, std::string &plans,
              std::map<std::pair<int64_t, int64_t>, int64_t> &traffic) {
    auto function = reshard->getParentOfType<FunctionOpInterface>();
    StringRef functionName = function ? function.getName() : StringRef();
    if (!statsFile.empty())
      stats += statsJson(functionName, reshard.getLoc(), type, source,
                         destination, plan) +
               "\n";
    if (printPlan) {
      plans += llvm::formatv("{0} {1}: {2} -> {3}\n", functionName,
                             printed(reshard.getLoc()), printed(source),
                             printed(destination))
                   .str();
      plans += planner::formatPlan(plan);
    }
    // The matrix is device x device: a symbolic step's transfers, one step
    // at a time, cost no more than its cells.
    if (!commMatrix.empty())
      for (const planner::Step &step : plan.steps)
        for (const planner::Transfer &transfer :
             planner::stepTransfers(step, plan.elementBytes))
          for (int64_t dst : transfer.dstDevices)
            if (dst != transfer.srcDevice)
              traffic[{transfer.srcDevice, dst}] += transfer.bytes;
  }

  /// The sharding the operand of a reshard is in: from its producer's
  /// `polymesh.sharding`, a constraint, a reshard or transfer, or the
  /// function argument's attribute.
  static ShardingAttr sourceSharding(Value value) {
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      if (Value source = getShardingSource(arg))
        return sourceSharding(source);
      auto function =
          dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
      if (!function || arg.getOwner() != &function.getFunctionBody().front())
        return {};
      return function.getArgAttrOfType<ShardingAttr>(
          arg.getArgNumber(), PolymeshDialect::kShardingAttrName);
    }
    Operation *producer = value.getDefiningOp();
    if (auto constraint = dyn_cast<ShardingConstraintOp>(producer))
      return constraint.getSharding();
    if (auto reshard = dyn_cast<ReshardOp>(producer))
      return reshard.getSharding();
    if (auto transfer = dyn_cast<TransferOp>(producer))
      return transfer.getDestination();
    Attribute attr = producer->getAttr(PolymeshDialect::kShardingAttrName);
    if (auto sharding = dyn_cast_or_null<ShardingAttr>(attr))
      return sharding;
    if (auto list = dyn_cast_or_null<ArrayAttr>(attr))
      return dyn_cast<ShardingAttr>(
          list[cast<OpResult>(value).getResultNumber()]);
    return {};
  }

  LogicalResult writeOut(StringRef path, StringRef text) {
    if (path == "-") {
      llvm::outs() << text;
      return success();
    }
    std::error_code error;
    llvm::raw_fd_ostream os(path, error, llvm::sys::fs::OF_Text);
    if (error)
      return getOperation().emitError()
             << "cannot open '" << path << "': " << error.message();
    os << text;
    return success();
  }

  /// Shared by clones of the pass: the cache is thread-safe, and repeated
  /// compilations of the same reshard plan it once.
  std::shared_ptr<planner::PlanCache> cache =
      std::make_shared<planner::PlanCache>();
};

} // namespace
