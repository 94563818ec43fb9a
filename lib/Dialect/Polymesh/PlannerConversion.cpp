//===- PlannerConversion.cpp - Attributes to planner types ----------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Planner/Batch.h"
#include "polymesh/Planner/Planner.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

using namespace mlir;
using namespace polymesh;

std::optional<std::vector<int64_t>>
polymesh::partitionedFunctionDevices(SymbolTableCollection &symbols,
                                     Operation *function) {
  auto meshes =
      function->getAttrOfType<ArrayAttr>(PolymeshDialect::kMeshesAttrName);
  if (!meshes)
    return std::nullopt;
  std::vector<int64_t> ids;
  for (auto name : meshes.getAsRange<FlatSymbolRefAttr>()) {
    MeshAttr mesh = lookupMesh(symbols, function, name);
    if (!mesh)
      return std::nullopt;
    planner::Mesh planned = toPlannerMesh(mesh);
    for (int64_t p = 0, e = planned.numDevices(); p < e; ++p)
      ids.push_back(planned.deviceAt(p));
  }
  llvm::sort(ids);
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

planner::Mesh polymesh::toPlannerMesh(MeshAttr mesh) {
  planner::Mesh result;
  for (MeshAxisAttr axis : mesh.getAxes())
    result.axes.push_back({axis.getName().str(), axis.getSize()});
  result.deviceIds.assign(mesh.getDeviceIds().begin(),
                          mesh.getDeviceIds().end());
  return result;
}

namespace {
planner::AxisRef toPlannerAxisRef(AxisRefAttr ref, MeshAttr mesh) {
  int index = 0;
  for (auto [i, axis] : llvm::enumerate(mesh.getAxes()))
    if (axis.getName() == ref.getName())
      index = static_cast<int>(i);
  if (ref.isSubAxis())
    return {index, ref.getPreSize(), ref.getSize()};
  return {index, 1, mesh.getAxes()[index].getSize()};
}
} // namespace

planner::Sharding polymesh::toPlannerSharding(ShardingAttr sharding,
                                              MeshAttr mesh, int64_t rank) {
  planner::Sharding result;
  for (DimShardingAttr dim : sharding.withRank(rank).getDims()) {
    planner::DimSharding plannerDim;
    plannerDim.open = !dim.getIsClosed();
    for (AxisRefAttr ref : dim.getAxes())
      plannerDim.axes.push_back(toPlannerAxisRef(ref, mesh));
    result.dims.push_back(std::move(plannerDim));
  }
  for (AxisRefAttr ref : sharding.getReplicated())
    result.replicated.push_back(toPlannerAxisRef(ref, mesh));
  for (AxisRefAttr ref : sharding.getUnreduced())
    result.unreduced.push_back(toPlannerAxisRef(ref, mesh));
  return result;
}

FailureOr<planner::TensorLayout>
polymesh::toTensorLayout(function_ref<InFlightDiagnostic()> emitError,
                         ShardingAttr sharding, MeshAttr mesh,
                         RankedTensorType type) {
  if (!type.hasStaticShape())
    return emitError() << "tensor type " << type
                       << " has a dynamic shape; a static shape is needed to "
                          "compute device tiles";
  absl::StatusOr<planner::TensorLayout> layout = planner::TensorLayout::create(
      toPlannerMesh(mesh), toPlannerSharding(sharding, mesh, type.getRank()),
      std::vector<int64_t>(type.getShape().begin(), type.getShape().end()));
  if (!layout.ok())
    return emitError() << std::string(layout.status().message());
  return std::move(*layout);
}

//===----------------------------------------------------------------------===//
// Transfer ops to planner plans
//===----------------------------------------------------------------------===//

planner::StepKind polymesh::toPlannerStepKind(TransferStepKind kind) {
  switch (kind) {
  case TransferStepKind::LocalCopy:
    return planner::StepKind::LocalCopy;
  case TransferStepKind::ZeroFill:
    return planner::StepKind::ZeroFill;
  case TransferStepKind::AllGather:
    return planner::StepKind::AllGather;
  case TransferStepKind::AllToAll:
    return planner::StepKind::AllToAll;
  case TransferStepKind::CollectivePermute:
    return planner::StepKind::CollectivePermute;
  case TransferStepKind::Broadcast:
    return planner::StepKind::Broadcast;
  case TransferStepKind::SendRecv:
    return planner::StepKind::SendRecv;
  case TransferStepKind::AllReduce:
    return planner::StepKind::AllReduce;
  case TransferStepKind::ReduceScatter:
    return planner::StepKind::ReduceScatter;
  }
  llvm_unreachable("unknown transfer step kind");
}

int64_t polymesh::elementByteSize(Type element) {
  if (!element.isIntOrFloat())
    return 0;
  int64_t bytes = std::max<int64_t>(
      1, llvm::divideCeil(element.getIntOrFloatBitWidth(), 8));
  return llvm::isPowerOf2_64(bytes) ? bytes : 0;
}

std::string polymesh::unmovableElementReason(Type element) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "element type '" << element << "' cannot be moved: ";
  if (!element.isIntOrFloat()) {
    os << "it has no fixed size in bytes";
    return text;
  }
  // LLVM's x86-64 layout: store size rounded up to its alignment, which is
  // the next power of two, at most 16 bytes.
  uint64_t bytes = llvm::divideCeil(element.getIntOrFloatBitWidth(), 8);
  uint64_t padded =
      llvm::alignTo(bytes, std::min<uint64_t>(llvm::PowerOf2Ceil(bytes), 16));
  os << "LLVM stores its " << element.getIntOrFloatBitWidth() << " bits in "
     << padded << " bytes with undefined padding; use a width whose whole "
     << "bytes are a power of two (i1, i8, i16, i32, i64, f16, bf16, f32, "
     << "f64, ...)";
  return text;
}

planner::ReductionPieces polymesh::toPlannerPieces(TransferStepAttr step) {
  planner::ReductionPieces pieces;
  pieces.owners.assign(step.getPieceOwners().begin(),
                       step.getPieceOwners().end());
  for (size_t i = 0; i < pieces.owners.size(); ++i) {
    auto [lo, hi] = step.getPiece(i);
    planner::Box box;
    box.lo.assign(lo.begin(), lo.end());
    box.hi.assign(hi.begin(), hi.end());
    pieces.pieces.push_back(std::move(box));
  }
  return pieces;
}

namespace {
/// The whole tiles an exchange step's members trade (an empty box for a
/// device a layout does not hold: the verifier refuses that step).
planner::ExchangeTiles
exchangedTiles(const std::vector<int64_t> &members,
               const planner::TensorLayout &source,
               const planner::TensorLayout &destination) {
  planner::ExchangeTiles tiles;
  size_t rank = source.shape().size();
  planner::Box none{std::vector<int64_t>(rank, 0),
                    std::vector<int64_t>(rank, 0)};
  // Positions by id, once: Mesh::positionOf searches explicit ids.
  auto boxes = [&](const planner::TensorLayout &layout) {
    llvm::DenseMap<int64_t, int64_t> positions;
    for (int64_t p = 0, e = layout.numDevices(); p < e; ++p)
      positions[layout.mesh().deviceAt(p)] = p;
    std::vector<planner::Box> result;
    for (int64_t member : members) {
      auto it = positions.find(member);
      result.push_back(
          it == positions.end() ? none : layout.boxAtPosition(it->second));
    }
    return result;
  };
  tiles.sources = boxes(source);
  tiles.destinations = boxes(destination);
  return tiles;
}
} // namespace

planner::TransferPlan
polymesh::toPlannerStepsPlan(TransferOp op, const planner::TensorLayout &source,
                             const planner::TensorLayout &destination) {
  auto type = cast<RankedTensorType>(op.getResult().getType());
  // As --polymesh-plan sizes elements (the verifier refuses the others).
  int64_t elementBytes = elementByteSize(type.getElementType());

  planner::TransferPlan plan;
  plan.shape = source.shape();
  plan.elementBytes = elementBytes;
  plan.steps.reserve(op.getSteps().size());
  for (Attribute attr : op.getSteps()) {
    auto stepAttr = cast<TransferStepAttr>(attr);
    planner::Step step;
    step.kind = toPlannerStepKind(stepAttr.getKind());
    step.chunk = stepAttr.getChunk();
    step.devices.assign(stepAttr.getDevices().begin(),
                        stepAttr.getDevices().end());
    if (stepAttr.hasPieces()) {
      step.pieces = toPlannerPieces(stepAttr);
      plan.reducesInPlace = true;
    }
    if (stepAttr.getTiles())
      step.exchange = exchangedTiles(step.devices, source, destination);
    step.transfers.reserve(stepAttr.getTransfers().size());
    for (BoxTransferAttr transferAttr : stepAttr.getTransfers()) {
      planner::Transfer transfer;
      transfer.srcDevice = transferAttr.getSrcDevice();
      transfer.dstDevices.assign(transferAttr.getDstDevices().begin(),
                                 transferAttr.getDstDevices().end());
      transfer.box.lo.assign(transferAttr.getLo().begin(),
                             transferAttr.getLo().end());
      transfer.box.hi.assign(transferAttr.getHi().begin(),
                             transferAttr.getHi().end());
      transfer.bytes = transfer.box.numElements() * elementBytes;
      transfer.srcBuffer = transferAttr.getFromDestination()
                               ? planner::BufferKind::Destination
                               : planner::BufferKind::Source;
      transfer.dstBuffer = transferAttr.getIntoSource()
                               ? planner::BufferKind::Source
                               : planner::BufferKind::Destination;
      transfer.accumulate = transferAttr.getAccumulate();
      transfer.phase = static_cast<int>(transferAttr.getPhase());
      // Only the reduction phase writes source buffers, and it overwrites
      // the partials there: a caller that needs them must copy them first.
      plan.reducesInPlace |= transfer.dstBuffer == planner::BufferKind::Source;
      step.transfers.push_back(std::move(transfer));
    }
    plan.steps.push_back(std::move(step));
  }
  plan.identity = plan.steps.empty() && source.isDeviceEquivalent(destination);
  // The reduced layout is a function of the two layouts (which axes are
  // reduced, and whether they replicate or shard afterwards), not of the
  // memory limit, so the planner's answer is the plan's.
  absl::StatusOr<std::optional<planner::TensorLayout>> reduced =
      planner::reducedLayoutOf(source, destination);
  if (reduced.ok())
    plan.reducedLayout = std::move(*reduced);
  planner::recomputePlanStats(plan);
  return plan;
}

std::vector<planner::BatchAxis> polymesh::toPlannerBatchAxes(ArrayAttr batch) {
  std::vector<planner::BatchAxis> axes;
  for (auto axis : batch.getAsRange<BatchAxisAttr>())
    axes.push_back(
        {axis.getSource().str(), axis.getDestination().str(), axis.getDim()});
  return axes;
}

absl::StatusOr<planner::TransferPlan>
polymesh::toPlannerPlan(TransferOp op, const planner::TensorLayout &source,
                        const planner::TensorLayout &destination) {
  if (!op.getBatchAttr())
    return toPlannerStepsPlan(op, source, destination);
  absl::StatusOr<planner::ReshardBatch> batch = planner::makeReshardBatch(
      source, destination, toPlannerBatchAxes(op.getBatchAttr()));
  if (!batch.ok())
    return batch.status();
  return planner::expandBatchedPlan(
      toPlannerStepsPlan(op, batch->cellSource, batch->cellDestination), *batch,
      source, destination);
}
