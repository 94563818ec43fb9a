//===- PolymeshOps.cpp - Polymesh operations ------------------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Dialect/Polymesh/PlannerConversion.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace polymesh;

MeshAttr polymesh::lookupMesh(Operation *from, FlatSymbolRefAttr meshName) {
  // Meshes live directly in a module: scanning its meshes is much cheaper
  // than a generic symbol lookup, and verifiers call this for every
  // sharding of every op.
  Operation *table = SymbolTable::getNearestSymbolTable(from);
  if (auto module = dyn_cast_or_null<ModuleOp>(table)) {
    StringAttr name = meshName.getAttr();
    for (MeshOp mesh : module.getOps<MeshOp>())
      if (mesh.getSymNameAttr() == name)
        return mesh.getMesh();
    return {};
  }
  auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(from, meshName);
  return mesh ? mesh.getMesh() : MeshAttr();
}

MeshAttr polymesh::lookupMesh(SymbolTableCollection &symbolTable,
                              Operation *from, FlatSymbolRefAttr meshName) {
  auto mesh = symbolTable.lookupNearestSymbolFrom<MeshOp>(from, meshName);
  return mesh ? mesh.getMesh() : MeshAttr();
}

namespace {
LogicalResult verifyShardingSymbolUse(Operation *op, ShardingAttr sharding,
                                      Type type,
                                      SymbolTableCollection &symbolTable) {
  MeshAttr mesh = lookupMesh(symbolTable, op, sharding.getMeshName());
  if (!mesh)
    return op->emitOpError()
           << "refers to unknown mesh " << sharding.getMeshName()
           << "; expected a polymesh.mesh symbol";
  return sharding.verifyFor([&]() { return op->emitOpError(); }, mesh, type);
}

LogicalResult verifyShardingRank(Operation *op, ShardingAttr sharding,
                                 RankedTensorType type) {
  // A maximal sharding fits any rank; whether its mesh has no axes is checked
  // with the symbol uses.
  if (!sharding.isMaximal() &&
      static_cast<int64_t>(sharding.getDims().size()) != type.getRank())
    return op->emitOpError() << "sharding has " << sharding.getDims().size()
                             << " dimension shardings but the tensor type "
                             << type << " has rank " << type.getRank();
  return success();
}
} // namespace

LogicalResult ShardingConstraintOp::verify() {
  return verifyShardingRank(*this, getSharding(), getResult().getType());
}

LogicalResult
ShardingConstraintOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyShardingSymbolUse(*this, getSharding(), getResult().getType(),
                                 symbolTable);
}

LogicalResult ShardingGroupOp::verify() {
  // (The I64Attr getter reads the value unsigned.)
  int64_t id = getGroupIdAttr().getInt();
  if (id < 0)
    return emitOpError() << "group_id must be non-negative, got " << id;
  return success();
}

LogicalResult ReshardOp::verify() {
  return verifyShardingRank(*this, getSharding(), getResult().getType());
}

LogicalResult ReshardOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyShardingSymbolUse(*this, getSharding(), getResult().getType(),
                                 symbolTable);
}

//===----------------------------------------------------------------------===//
// TransferOp
//===----------------------------------------------------------------------===//

/// `[step, step, ...]`, one step per line.
static ParseResult parseTransferSteps(OpAsmParser &parser, ArrayAttr &steps) {
  SmallVector<Attribute> parsed;
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            TransferStepAttr step = TransferStepAttr::parseBody(parser);
            if (!step)
              return failure();
            parsed.push_back(step);
            return success();
          }))
    return failure();
  steps = parser.getBuilder().getArrayAttr(parsed);
  return success();
}

static void printTransferSteps(OpAsmPrinter &printer, Operation *,
                               ArrayAttr steps) {
  printer << "[";
  printer.increaseIndent();
  for (auto [index, step] : llvm::enumerate(steps)) {
    printer.printNewline();
    cast<TransferStepAttr>(step).printBody(printer.getStream());
    if (index + 1 != steps.size())
      printer << ",";
  }
  printer.decreaseIndent();
  if (!steps.empty())
    printer.printNewline();
  printer << "]";
}

namespace {

/// Devices' tiles of one layout by device id, through maps built once:
/// Mesh::positionOf scans the explicit ids, and once per sender and
/// receiver that made verifying a plan over 2^20 devices take hours. Each
/// device's tile is computed once: a pod's all-gather names every receiver
/// of every sender, 240 times per device at 16 devices per group.
class TileLookup {
public:
  explicit TileLookup(const planner::TensorLayout &layout) : layout(layout) {
    if (!layout.mesh().deviceIds.empty())
      for (int64_t p = 0, e = layout.numDevices(); p < e; ++p)
        positions[layout.mesh().deviceAt(p)] = p;
  }
  /// Whether `device` has a tile that contains `box`.
  bool holds(int64_t device, const planner::Box &box) {
    const std::optional<planner::Box> &tile = tileOf(device);
    return tile && tile->encloses(box);
  }
  /// `device`'s tile, or nullopt when the layout's mesh does not hold it.
  const std::optional<planner::Box> &tileOf(int64_t device) {
    auto [it, inserted] = tiles.try_emplace(device);
    std::optional<planner::Box> &tile = it->second;
    if (inserted && layout.mesh().deviceIds.empty()) {
      if (device >= 0 && device < layout.numDevices())
        tile = layout.boxAtPosition(device);
    } else if (inserted) {
      if (auto position = positions.find(device); position != positions.end())
        tile = layout.boxAtPosition(position->second);
    }
    return tile;
  }

private:
  const planner::TensorLayout &layout;
  llvm::DenseMap<int64_t, int64_t> positions;
  llvm::DenseMap<int64_t, std::optional<planner::Box>> tiles;
};

std::string printBox(const planner::Box &box) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleaveComma(box.lo, os);
  os << "] : [";
  llvm::interleaveComma(box.hi, os);
  os << "]";
  return text;
}

/// One box transfer as the verifier reads it, from the IR or from a
/// symbolic reduction's expansion.
struct TransferFields {
  int64_t src;
  ArrayRef<int64_t> dsts, lo, hi;
  bool fromDestination, intoSource, accumulate;
  int64_t phase;

  static TransferFields of(BoxTransferAttr transfer) {
    return {transfer.getSrcDevice(),
            transfer.getDstDevices(),
            transfer.getLo(),
            transfer.getHi(),
            transfer.getFromDestination(),
            transfer.getIntoSource(),
            transfer.getAccumulate(),
            transfer.getPhase()};
  }
  static TransferFields of(const planner::Transfer &transfer) {
    return {transfer.srcDevice,
            transfer.dstDevices,
            transfer.box.lo,
            transfer.box.hi,
            transfer.srcBuffer == planner::BufferKind::Destination,
            transfer.dstBuffer == planner::BufferKind::Source,
            transfer.accumulate,
            transfer.phase};
  }
};

/// Checks a transfer's steps against its layouts: ordered chunks, sorted
/// participants, boxes inside the tensor, senders that hold their boxes,
/// receivers with room for them, and (without partial sums) every
/// destination element received exactly once.
class TransferVerifier {
public:
  /// With a batch, `source` and `destination` are cell 0's layouts.
  TransferVerifier(TransferOp op, const planner::TensorLayout &source,
                   const planner::TensorLayout &destination)
      : op(op), shape(source.shape()), source(source), destination(destination),
        sourceTiles(source), destinationTiles(destination) {}

  LogicalResult verify();

private:
  LogicalResult verifyStep(size_t index, TransferStepAttr step);
  LogicalResult verifyPieces(TransferStepAttr step,
                             llvm::function_ref<InFlightDiagnostic()> where);
  LogicalResult verifyExchange(TransferStepAttr step,
                               llvm::function_ref<InFlightDiagnostic()> where);
  LogicalResult verifyTransfer(TransferStepAttr step, size_t transferIndex,
                               const TransferFields &transfer,
                               llvm::function_ref<InFlightDiagnostic()> where);
  LogicalResult verifyCoverage();

  TransferOp op;
  /// The tensor's (or the cell's) shape.
  std::vector<int64_t> shape;
  const planner::TensorLayout &source, &destination;
  TileLookup sourceTiles, destinationTiles;
  int64_t lastChunk = 0;
  /// Boxes written (not accumulated) into each destination device's
  /// buffer: without partial sums they must tile its box exactly, each
  /// element once.
  llvm::DenseMap<int64_t, std::vector<planner::Box>> received;
  /// A step exchanges whole tiles: every destination device receives all
  /// of its tile but what its own source tile holds.
  bool exchanged = false;
};

LogicalResult TransferVerifier::verify() {
  for (auto [index, step] : llvm::enumerate(op.getSteps()))
    if (failed(verifyStep(index, cast<TransferStepAttr>(step))))
      return failure();
  bool reduces = !op.getSource().getUnreduced().empty() ||
                 !op.getDestination().getUnreduced().empty();
  if (reduces)
    return success();
  // Without partial sums every destination element arrives exactly once.
  if (!op.getSteps().empty())
    return verifyCoverage();
  // A tensor without elements has nothing to move, whatever its shardings.
  if (llvm::is_contained(shape, 0) || source.isDeviceEquivalent(destination))
    return success();
  return op.emitOpError() << "has no steps, but its source and destination "
                             "shardings place different tiles";
}

LogicalResult TransferVerifier::verifyStep(size_t index,
                                           TransferStepAttr step) {
  auto where = [&]() {
    InFlightDiagnostic diag = op.emitOpError();
    diag << "step #" << index << " ("
         << stringifyTransferStepKind(step.getKind()) << "): ";
    return diag;
  };
  if (step.getChunk() < 0)
    return where() << "chunk " << step.getChunk() << " is negative";
  if (step.getChunk() < lastChunk)
    return where() << "chunk " << step.getChunk() << " comes after chunk "
                   << lastChunk << "; steps must be ordered by chunk";
  lastChunk = step.getChunk();
  ArrayRef<int64_t> devices = step.getDevices();
  for (size_t i = 1; i < devices.size(); ++i)
    if (devices[i - 1] >= devices[i])
      return where() << "participant devices must be sorted and distinct";
  if (step.getTiles())
    return verifyExchange(step, where);
  if (step.hasPieces())
    return verifyPieces(step, where);
  for (auto [transferIndex, transfer] : llvm::enumerate(step.getTransfers()))
    if (failed(verifyTransfer(step, transferIndex, TransferFields::of(transfer),
                              where)))
      return failure();
  return success();
}

/// A symbolic reduction: well-formed pieces with distinct owners among the
/// participants, held by every member: what the verifier would check of
/// the transfers they stand for, in O(members + pieces).
LogicalResult
TransferVerifier::verifyPieces(TransferStepAttr step,
                               llvm::function_ref<InFlightDiagnostic()> where) {
  if (step.getKind() != TransferStepKind::AllReduce &&
      step.getKind() != TransferStepKind::ReduceScatter)
    return where() << "only all_reduce and reduce_scatter steps are written "
                      "as pieces";
  if (!step.getTransfers().empty())
    return where() << "has both pieces and transfers";
  size_t count = step.getPieceOwners().size();
  if (step.getPieceCorners().size() != 2 * count * shape.size())
    return where() << "pieces have rank "
                   << step.getPieceCorners().size() / (2 * count)
                   << " but the tensor has rank " << shape.size();
  ArrayRef<int64_t> owners = step.getPieceOwners();
  ArrayRef<int64_t> participants = step.getDevices();
  if (participants.size() < 2)
    return where() << "a reduction needs at least two participants";
  for (size_t i = 0; i < count; ++i)
    if (!std::binary_search(participants.begin(), participants.end(),
                            owners[i]))
      return where() << "piece owner " << owners[i]
                     << " is not a participant of the step";
  // Sorted, so that a group of 65,536 members is not checked pairwise.
  SmallVector<int64_t> sortedOwners(owners.begin(), owners.end());
  llvm::sort(sortedOwners);
  if (const int64_t *twice =
          std::adjacent_find(sortedOwners.begin(), sortedOwners.end());
      twice != sortedOwners.end())
    return where() << "device " << *twice << " owns two pieces";
  // Every member sends each piece it does not own from its source buffer
  // and receives its own into it (phase 1 too): each member's source tile,
  // a box, must hold every piece, that is the pieces' bounding box.
  planner::ReductionPieces pieces = toPlannerPieces(step);
  for (auto [index, piece] : llvm::enumerate(pieces.pieces))
    for (size_t d = 0; d < piece.lo.size(); ++d)
      if (piece.lo[d] < 0 || piece.lo[d] >= piece.hi[d] ||
          piece.hi[d] > shape[d])
        return where() << "piece #" << index << ": box [" << piece.lo[d] << ", "
                       << piece.hi[d] << ") of dimension " << d
                       << " is empty or outside [0, " << shape[d] << ")";
  planner::Box bounds = planner::boundingBox(pieces.pieces);
  for (int64_t member : participants) {
    if (sourceTiles.holds(member, bounds))
      continue;
    for (auto [index, piece] : llvm::enumerate(pieces.pieces))
      if (!sourceTiles.holds(member, piece))
        return where() << "member " << member << " does not hold piece #"
                       << index << " " << printBox(piece)
                       << " in its source buffer";
    llvm_unreachable("a box that holds every piece holds their bounds");
  }
  return success();
}

/// An exchange of whole tiles stands for a reshard's communication only
/// where each sharding's tiles are distinct and partition the tensor (no
/// partial sums, no replication) and the members are every device of both:
/// then member j receives, from the others' source tiles, all of its
/// destination tile but what its own source tile holds. O(members).
LogicalResult TransferVerifier::verifyExchange(
    TransferStepAttr step, llvm::function_ref<InFlightDiagnostic()> where) {
  if (step.getKind() != TransferStepKind::AllToAll)
    return where() << "only all_to_all steps exchange tiles";
  if (!step.getTransfers().empty() || step.hasPieces())
    return where() << "exchanges tiles but also lists transfers or pieces";
  if (!op.getSource().getUnreduced().empty() ||
      !op.getDestination().getUnreduced().empty())
    return where() << "exchanges tiles of partial sums";
  if (exchanged)
    return where() << "exchanges tiles a second time";
  exchanged = true;
  ArrayRef<int64_t> members = step.getDevices();
  for (auto [layout, lookup, which] :
       {std::make_tuple(&source, &sourceTiles, "source"),
        std::make_tuple(&destination, &destinationTiles, "destination")}) {
    int64_t tiles = layout->numTiles();
    if (tiles != layout->numDevices())
      return where() << "the " << which << " sharding places " << tiles
                     << " distinct tiles on " << layout->numDevices()
                     << " devices; tiles are exchanged only where each "
                        "device holds its own";
    if (static_cast<int64_t>(members.size()) != layout->numDevices())
      return where() << "exchanges the tiles of " << members.size()
                     << " devices, but the " << which << " sharding has "
                     << layout->numDevices();
    for (int64_t member : members)
      if (!lookup->tileOf(member))
        return where() << "member " << member << " has no " << which << " tile";
  }
  return success();
}

LogicalResult TransferVerifier::verifyTransfer(
    TransferStepAttr step, size_t transferIndex, const TransferFields &transfer,
    llvm::function_ref<InFlightDiagnostic()> where) {
  auto at = [&]() {
    InFlightDiagnostic diag = where();
    diag << "transfer #" << transferIndex << ": ";
    return diag;
  };
  if (transfer.lo.size() != shape.size())
    return at() << "box has rank " << transfer.lo.size()
                << " but the tensor has rank " << shape.size();
  planner::Box box;
  box.lo.assign(transfer.lo.begin(), transfer.lo.end());
  box.hi.assign(transfer.hi.begin(), transfer.hi.end());
  for (size_t d = 0; d < box.lo.size(); ++d)
    if (box.lo[d] < 0 || box.lo[d] >= box.hi[d] || box.hi[d] > shape[d])
      return at() << "box [" << box.lo[d] << ", " << box.hi[d]
                  << ") of dimension " << d << " is empty or outside [0, "
                  << shape[d] << ")";
  ArrayRef<int64_t> devices = step.getDevices();
  auto participates = [&](int64_t device) {
    return std::binary_search(devices.begin(), devices.end(), device);
  };
  if (!participates(transfer.src))
    return at() << "sender " << transfer.src
                << " is not a participant of the step";
  // Phase 1 exists only in an all-reduce (gather the reduced pieces); code
  // generation runs phases 0 and 1 and nothing else.
  int64_t maxPhase = step.getKind() == TransferStepKind::AllReduce ? 1 : 0;
  if (transfer.phase < 0 || transfer.phase > maxPhase)
    return at() << "phase " << transfer.phase << " is out of range: a "
                << stringifyTransferStepKind(step.getKind())
                << " step has phase 0"
                << (maxPhase ? " (reduce) and phase 1 (gather)" : " only");
  // A zero fill writes zeros where it lands and reads nothing.
  bool fromDestination = transfer.fromDestination;
  if (step.getKind() != TransferStepKind::ZeroFill &&
      !(fromDestination ? destinationTiles : sourceTiles)
           .holds(transfer.src, box))
    return at() << "sender " << transfer.src << " does not hold the box in its "
                << (fromDestination ? "destination" : "source") << " buffer";
  ArrayRef<int64_t> dsts = transfer.dsts;
  if (dsts.empty())
    return at() << "has no receiver";
  bool intoSource = transfer.intoSource;
  for (size_t i = 0; i < dsts.size(); ++i) {
    if (i > 0 && dsts[i - 1] >= dsts[i])
      return at() << "receivers must be sorted and distinct";
    if (!participates(dsts[i]))
      return at() << "receiver " << dsts[i]
                  << " is not a participant of the step";
    if (!(intoSource ? sourceTiles : destinationTiles).holds(dsts[i], box))
      return at() << "receiver " << dsts[i]
                  << " has no room for the box in its "
                  << (intoSource ? "source" : "destination") << " buffer";
    if (!intoSource && !transfer.accumulate)
      received[dsts[i]].push_back(box);
  }
  return success();
}

/// Every box lies inside the receiver's tile (checked before), so boxes
/// that are pairwise disjoint and hold as many elements as the tile cover
/// it exactly. Counting alone would pass a box received four times next to
/// a hole that the generated code leaves uninitialised.
///
/// After an exchange of whole tiles, which brings a device all of its tile
/// but what its own source tile holds, the boxes it receives otherwise
/// must cover exactly that part.
LogicalResult TransferVerifier::verifyCoverage() {
  for (int64_t p = 0, e = destination.numDevices(); p < e; ++p) {
    int64_t device = destination.mesh().deviceAt(p);
    planner::Box tile = destination.boxAtPosition(p);
    int64_t expected = tile.numElements();
    auto it = received.find(device);
    const std::vector<planner::Box> none;
    const std::vector<planner::Box> &boxes =
        it == received.end() ? none : it->second;
    if (exchanged) {
      planner::Box kept = sourceTiles.tileOf(device)->intersect(tile);
      expected = kept.numElements();
      for (const planner::Box &box : boxes)
        if (!kept.encloses(box))
          return op.emitOpError()
                 << "destination device " << device << " receives "
                 << printBox(box) << ", which the exchange of tiles "
                 << "brings it too";
    }
    if (std::optional<std::pair<size_t, size_t>> overlap =
            planner::findOverlap(boxes))
      return op.emitOpError()
             << "destination device " << device << " receives the elements of "
             << printBox(
                    boxes[overlap->first].intersect(boxes[overlap->second]))
             << " more than once";
    int64_t count = 0;
    for (const planner::Box &box : boxes)
      count += box.numElements();
    if (count != expected)
      return op.emitOpError()
             << "destination device " << device << " receives " << count
             << " elements but its tile holds " << expected;
  }
  return success();
}

} // namespace

LogicalResult TransferOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto type = getResult().getType();
  MeshAttr sourceMesh = lookupMesh(symbols, *this, getSource().getMeshName());
  MeshAttr destinationMesh =
      lookupMesh(symbols, *this, getDestination().getMeshName());
  if (!sourceMesh || !destinationMesh)
    return emitOpError() << "refers to unknown mesh "
                         << (sourceMesh ? getDestination().getMeshName()
                                        : getSource().getMeshName());
  auto emit = [&]() { return emitOpError(); };
  if (!elementByteSize(type.getElementType()))
    return emitOpError() << unmovableElementReason(type.getElementType());
  if (failed(getSource().verifyFor(emit, sourceMesh, type)) ||
      failed(getDestination().verifyFor(emit, destinationMesh, type)))
    return failure();
  FailureOr<planner::TensorLayout> source =
      toTensorLayout(emit, getSource(), sourceMesh, type);
  if (failed(source))
    return failure();
  FailureOr<planner::TensorLayout> destination =
      toTensorLayout(emit, getDestination(), destinationMesh, type);
  if (failed(destination))
    return failure();
  if (!getBatchAttr())
    return TransferVerifier(*this, *source, *destination).verify();
  absl::StatusOr<planner::ReshardBatch> batch = planner::makeReshardBatch(
      *source, *destination, toPlannerBatchAxes(getBatchAttr()));
  if (!batch.ok())
    return emitOpError() << "has an invalid batch: "
                         << std::string(batch.status().message());
  return TransferVerifier(*this, batch->cellSource, batch->cellDestination)
      .verify();
}

//===----------------------------------------------------------------------===//
// ExchangeOp
//===----------------------------------------------------------------------===//

TransferOp polymesh::lookupExchangePlan(SymbolTableCollection &symbols,
                                        ExchangeOp op) {
  auto function = symbols.lookupNearestSymbolFrom<FunctionOpInterface>(
      op, op.getPlanAttr());
  if (!function || function.isExternal() ||
      !function->hasAttr(PolymeshDialect::kPlanAttrName))
    return {};
  Block &body = function.getFunctionBody().front();
  if (body.getOperations().size() != 2)
    return {};
  return dyn_cast<TransferOp>(&body.front());
}

LogicalResult ExchangeOp::verify() {
  if (getInput().getType().getElementType() !=
      getResult().getType().getElementType())
    return emitOpError("source and destination tiles must have one element "
                       "type");
  if (getInput().getType().getRank() != getResult().getType().getRank())
    return emitOpError("source and destination tiles must have one rank");
  return success();
}

LogicalResult ExchangeOp::verifySymbolUses(SymbolTableCollection &symbols) {
  TransferOp transfer = lookupExchangePlan(symbols, *this);
  if (!transfer)
    return emitOpError() << "plan " << getPlanAttr()
                         << " does not name a function marked '"
                         << PolymeshDialect::kPlanAttrName
                         << "' whose body is one polymesh.transfer";
  auto global = transfer.getResult().getType();
  if (global.getElementType() != getInput().getType().getElementType() ||
      global.getRank() != getInput().getType().getRank())
    return emitOpError() << "tiles of " << getInput().getType()
                         << " cannot belong to the plan's " << global;
  return success();
}

#define GET_OP_CLASSES
#include "polymesh/Dialect/Polymesh/PolymeshOps.cpp.inc"
