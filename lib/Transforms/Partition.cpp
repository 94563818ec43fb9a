//===- Partition.cpp - Global program to per-device programs --------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// --polymesh-partition rewrites every propagated, planned function into the
// local programs its devices run. Each device computes on exact tiles (the
// extents of its box of every value, 0 where it holds nothing), so devices
// whose tiles have the same extents for every value run the same code: they
// form a class, and each class gets one function with static local types.
// What differs between the devices of a class (tile offsets, transfer
// peers) lives in tables indexed by the device's position, so the code does
// not grow with the number of devices.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Transforms/ControlFlow.h"
#include "polymesh/Transforms/Passes.h"
#include "polymesh/Transforms/ShardingRules.h"
#include "polymesh/Transforms/TensorLimits.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallBitVector.h"

#include <functional>
#include <map>
#include <optional>

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHPARTITION
#include "polymesh/Transforms/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;

namespace {

/// A tensor value of the global function with its layout and, per device
/// position, its box (empty boxes for devices outside its mesh), flattened:
/// `lo[p * rank + d]` and `extent[p * rank + d]`, so that a mesh of 2^20
/// devices costs two arrays, not two vectors per device.
struct ValueInfo {
  Value value;
  std::optional<planner::TensorLayout> layout;
  size_t rank = 0;
  std::vector<int64_t> lo, extent;
  /// The mesh's symbol: devices are collected once per mesh.
  mlir::StringAttr meshName;
  ShardingAttr sharding;
};

/// The static sizes of a slice (or insert) whose slice shape is now `local`
/// (the tile's): each static size of a dimension the slice keeps becomes
/// the local extent; dropped (unit) dimensions and dynamic sizes stay.
SmallVector<int64_t> localSliceSizes(ArrayRef<int64_t> sizes,
                                     const llvm::SmallBitVector &dropped,
                                     ArrayRef<int64_t> local) {
  SmallVector<int64_t> result(sizes);
  for (int64_t d = 0, r = 0, e = result.size(); d < e; ++d) {
    if (dropped.test(d))
      continue;
    if (!ShapedType::isDynamic(result[d]))
      result[d] = local[r];
    ++r;
  }
  return result;
}

bool isZero(Value value) {
  if (matchPattern(value, m_AnyZeroFloat()) || matchPattern(value, m_Zero()))
    return true;
  if (auto fill = value.getDefiningOp<linalg::FillOp>())
    return isZero(fill.getInputs().front());
  // Moving zeros elsewhere leaves zeros (propagation may place a zero init
  // differently and reshard it).
  if (auto transfer = value.getDefiningOp<TransferOp>())
    return isZero(transfer.getInput());
  if (auto constraint = value.getDefiningOp<ShardingConstraintOp>())
    return isZero(constraint.getInput());
  return false;
}

bool isControlFlow(Operation &op) { return isTensorControlFlow(&op); }

class FunctionPartitioner {
public:
  /// `stepCopies` counts device classes x plan steps over the module's
  /// functions, up to `maxStepCopies`: the lowered code grows with them
  /// (37 MB for one reshard over 1,024 classes).
  /// With `wanted`, only the classes one of whose devices it holds are
  /// built, each run by those of its devices (a process's own).
  FunctionPartitioner(func::FuncOp function, SymbolTableCollection &symbols,
                      int64_t &stepCopies, int64_t maxStepCopies,
                      const llvm::DenseSet<int64_t> *wanted)
      : function(function), symbols(symbols), stepCopies(stepCopies),
        maxStepCopies(maxStepCopies), wanted(wanted) {}

  /// Builds the class functions next to `function`; the caller erases it.
  LogicalResult run();

private:
  ShardingAttr shardingOf(Operation *op, unsigned index);
  LogicalResult collect();
  LogicalResult collectBlock(Block &block);
  LogicalResult buildClass(unsigned classIndex, int64_t representative,
                           ArrayRef<int64_t> classDevices);
  LogicalResult partitionBlock(Block &block, OpBuilder &builder,
                               IRMapping &mapping);
  Value partitionConstant(arith::ConstantOp constant, OpBuilder &builder);
  bool skipsEmptyOp(Operation &op, OpBuilder &builder, IRMapping &mapping);
  LogicalResult checkPartialSumInits(Operation &op);
  void localizeShapes(Operation &op, Operation *copy, OpBuilder &builder);
  LogicalResult partitionControlFlow(Operation &op, OpBuilder &builder,
                                     IRMapping &mapping);
  LogicalResult checkDecisions(Operation &op);
  LogicalResult checkCaptured(Operation &op);
  void localizeAlignedReads(Operation &op, Operation *copy, OpBuilder &builder,
                            IRMapping &mapping);
  bool isWholeOn(const ValueInfo &info, const planner::TensorLayout *on) const;
  RankedTensorType localType(Value value, int64_t position) const;
  FlatSymbolRefAttr planFunction(TransferOp transfer);
  Value tableLookup(OpBuilder &builder, Location loc, Value table,
                    Value position, int64_t column);
  Value positionTable(OpBuilder &builder, Location loc, ArrayRef<int64_t> rows,
                      int64_t columns);
  LogicalResult checkTransferSource(TransferOp transfer);
  LogicalResult globalizeIndices(Operation &op, Operation *copy,
                                 OpBuilder &builder, Value position);

  func::FuncOp function;
  SymbolTableCollection &symbols;
  /// Step copies of the module's functions partitioned so far.
  int64_t &stepCopies;
  int64_t maxStepCopies;
  const llvm::DenseSet<int64_t> *wanted;
  llvm::DenseMap<Value, unsigned> infoOf;
  std::vector<ValueInfo> infos;
  /// Sorted ids of every device of every mesh the function names.
  std::vector<int64_t> devices;
  /// Those meshes, in order of first use.
  SmallVector<Attribute> meshes;
  llvm::DenseMap<Operation *, FlatSymbolRefAttr> plans;
  /// While a class is built: its representative's position, and the class
  /// function's runtime, device and position arguments.
  int64_t representative = 0;
  Value runtime, device, position;
  /// Adds a tensor value with its sharding to `infos`.
  std::function<LogicalResult(Value, ShardingAttr, Operation *)> addValue;
};

ShardingAttr FunctionPartitioner::shardingOf(Operation *op, unsigned index) {
  Attribute attr = op->getAttr(PolymeshDialect::kShardingAttrName);
  if (auto sharding = dyn_cast_or_null<ShardingAttr>(attr))
    return index == 0 ? sharding : ShardingAttr();
  if (auto list = dyn_cast_or_null<ArrayAttr>(attr))
    return index < list.size() ? dyn_cast<ShardingAttr>(list[index])
                               : ShardingAttr();
  return {};
}

LogicalResult FunctionPartitioner::collect() {
  auto add = [&](Value value, ShardingAttr sharding,
                 Operation *where) -> LogicalResult {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type)
      return success();
    if (!sharding)
      return where->emitError()
             << "has a tensor value without a sharding; run "
                "--polymesh-propagate (and --polymesh-plan) before "
                "--polymesh-partition";
    MeshAttr mesh = lookupMesh(symbols, where, sharding.getMeshName());
    if (!mesh)
      return where->emitError()
             << "refers to unknown mesh " << sharding.getMeshName();
    auto emit = [&]() { return where->emitError(); };
    FailureOr<planner::TensorLayout> layout =
        toTensorLayout(emit, sharding, mesh, type);
    if (failed(layout))
      return failure();
    infoOf[value] = infos.size();
    infos.push_back({value,
                     std::move(*layout),
                     0,
                     {},
                     {},
                     sharding.getMeshName().getAttr(),
                     sharding});
    return success();
  };

  for (auto [index, arg] : llvm::enumerate(function.getArguments()))
    if (failed(add(arg,
                   function.getArgAttrOfType<ShardingAttr>(
                       index, PolymeshDialect::kShardingAttrName),
                   function)))
      return failure();
  addValue = add;
  if (failed(checkTensorRegions(function)) ||
      failed(collectBlock(function.getBody().front())))
    return failure();

  std::vector<int64_t> ids;
  llvm::SmallPtrSet<Attribute, 8> meshesSeen;
  for (const ValueInfo &info : infos) {
    if (!meshesSeen.insert(info.meshName).second)
      continue;
    meshes.push_back(FlatSymbolRefAttr::get(info.meshName));
    const planner::Mesh &mesh = info.layout->mesh();
    for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p)
      ids.push_back(mesh.deviceAt(p));
  }
  llvm::sort(ids);
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  devices = std::move(ids);
  if (devices.empty() && !infos.empty())
    return function.emitError() << "names no device";

  llvm::DenseMap<int64_t, int64_t> positionOf;
  for (auto [position, id] : llvm::enumerate(devices))
    positionOf[id] = position;
  for (ValueInfo &info : infos) {
    size_t rank = info.layout->shape().size();
    info.rank = rank;
    info.lo.assign(devices.size() * rank, 0);
    info.extent.assign(devices.size() * rank, 0);
    const planner::Mesh &mesh = info.layout->mesh();
    std::vector<int64_t> lo, extent;
    info.layout->allBoxes(lo, extent);
    for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p) {
      size_t at = positionOf[mesh.deviceAt(p)] * rank;
      std::copy_n(lo.begin() + p * rank, rank, info.lo.begin() + at);
      std::copy_n(extent.begin() + p * rank, rank, info.extent.begin() + at);
    }
  }
  return success();
}

LogicalResult FunctionPartitioner::collectBlock(Block &block) {
  for (Operation &op : block) {
    if (isa<ReshardOp>(op))
      return op.emitError() << "is not planned; run --polymesh-plan before "
                               "--polymesh-partition";
    if (isa<func::CallOp, ExchangeOp>(op))
      return op.emitError() << "cannot be partitioned: partitioning is "
                               "per function and does not follow calls";
    for (OpResult result : op.getResults()) {
      ShardingAttr sharding = shardingOf(&op, result.getResultNumber());
      if (auto constraint = dyn_cast<ShardingConstraintOp>(op))
        sharding = constraint.getSharding();
      if (auto transfer = dyn_cast<TransferOp>(op))
        sharding = transfer.getDestination();
      if (failed(addValue(result, sharding, &op)))
        return failure();
    }
    if (isControlFlow(op)) {
      for (Region &region : op.getRegions())
        for (Block &inner : region) {
          for (BlockArgument arg : inner.getArguments()) {
            auto it = infoOf.find(getShardingSource(arg));
            if (it != infoOf.end())
              infoOf[arg] = it->second;
          }
          if (failed(collectBlock(inner)))
            return failure();
        }
      continue;
    }
  }
  return success();
}

RankedTensorType FunctionPartitioner::localType(Value value,
                                                int64_t position) const {
  auto type = cast<RankedTensorType>(value.getType());
  const ValueInfo &info = infos[infoOf.lookup(value)];
  SmallVector<int64_t> extents(info.extent.begin() + position * info.rank,
                               info.extent.begin() +
                                   (position + 1) * info.rank);
  return RankedTensorType::get(extents, type.getElementType());
}

FlatSymbolRefAttr FunctionPartitioner::planFunction(TransferOp transfer) {
  if (FlatSymbolRefAttr existing = plans.lookup(transfer))
    return existing;
  auto module = function->getParentOfType<ModuleOp>();
  SymbolTable &table = symbols.getSymbolTable(module);
  OpBuilder builder(function);
  auto type = transfer.getResult().getType();
  auto plan = func::FuncOp::create(
      builder, transfer.getLoc(),
      (function.getSymName() + "__plan" + Twine(plans.size())).str(),
      builder.getFunctionType({type}, {type}));
  plan.setPrivate();
  plan->setAttr(PolymeshDialect::kPlanAttrName, builder.getUnitAttr());
  Block *block = plan.addEntryBlock();
  builder.setInsertionPointToStart(block);
  IRMapping mapping;
  mapping.map(transfer.getInput(), block->getArgument(0));
  Operation *copy = builder.clone(*transfer, mapping);
  func::ReturnOp::create(builder, transfer.getLoc(), copy->getResults());
  table.insert(plan);
  auto symbol = FlatSymbolRefAttr::get(plan.getSymNameAttr());
  plans[transfer] = symbol;
  return symbol;
}

Value FunctionPartitioner::tableLookup(OpBuilder &builder, Location loc,
                                       Value table, Value position,
                                       int64_t column) {
  Value columnIndex = arith::ConstantIndexOp::create(builder, loc, column);
  return tensor::ExtractOp::create(builder, loc, table,
                                   ValueRange{position, columnIndex});
}

/// A plan reads the tiles of its source sharding on every device; an
/// operand placed otherwise (a transfer written by hand, or fed back into
/// the pipeline) would have it read the wrong elements.
LogicalResult FunctionPartitioner::checkTransferSource(TransferOp transfer) {
  auto it = infoOf.find(transfer.getInput());
  if (it == infoOf.end())
    return success();
  const ValueInfo &info = infos[it->second];
  const planner::TensorLayout &operand = *info.layout;
  MeshAttr mesh =
      lookupMesh(symbols, transfer, transfer.getSource().getMeshName());
  auto emit = [&]() { return transfer.emitError(); };
  FailureOr<planner::TensorLayout> source =
      toTensorLayout(emit, transfer.getSource(), mesh, transfer.getType());
  if (failed(source))
    return failure();
  if (!operand.isDeviceEquivalent(*source))
    return transfer.emitError()
           << "cannot be partitioned: its operand is placed as "
           << info.sharding << " but the plan reads the tiles of "
           << transfer.getSource()
           << " (run --polymesh-propagate, which moves the operand)";
  return success();
}

/// A constant table with one row of `columns` entries per device position,
/// read at run time by the device's position: what differs between the
/// devices of a class lives here, not in the code.
Value FunctionPartitioner::positionTable(OpBuilder &builder, Location loc,
                                         ArrayRef<int64_t> rows,
                                         int64_t columns) {
  auto tableType = RankedTensorType::get(
      {static_cast<int64_t>(devices.size()), columns}, builder.getIndexType());
  SmallVector<APInt> values;
  for (int64_t value : rows)
    values.push_back(APInt(64, value));
  return arith::ConstantOp::create(builder, loc, tableType,
                                   DenseElementsAttr::get(tableType, values));
}

/// Ops that read their iteration indices (`linalg.index` in a linalg op's
/// body, the block arguments of `tensor.generate`) see local indices in the
/// partitioned program; the global index is the local one plus the tile's
/// offset along that dimension, read from a table by the device's position.
/// `op` is the global op, `copy` its local clone.
LogicalResult FunctionPartitioner::globalizeIndices(Operation &op,
                                                    Operation *copy,
                                                    OpBuilder &builder,
                                                    Value position) {
  // Offsets of the iteration dimensions, per device position (row-major
  // [position][dimension]); unknown stays -1 until a value names it.
  auto offsetsFrom = [&](ArrayRef<std::pair<Value, AffineMap>> accesses,
                         unsigned numDims,
                         std::vector<int64_t> &offsets) -> LogicalResult {
    offsets.assign(devices.size() * numDims, -1);
    for (auto [value, map] : accesses) {
      auto it = infoOf.find(value);
      if (it == infoOf.end())
        continue;
      const ValueInfo &info = infos[it->second];
      for (auto [dim, expr] : llvm::enumerate(map.getResults())) {
        auto loopDim = dyn_cast<AffineDimExpr>(expr);
        if (!loopDim)
          continue;
        for (size_t p = 0; p < devices.size(); ++p) {
          // Devices without a tile of the value do not constrain it.
          if (info.extent[p * info.rank + dim] == 0)
            continue;
          int64_t &slot = offsets[p * numDims + loopDim.getPosition()];
          int64_t lo = info.lo[p * info.rank + dim];
          if (slot >= 0 && slot != lo)
            return op.emitError()
                   << "cannot be partitioned: it reads its iteration indices "
                      "but its operands' tiles disagree on the offset of "
                      "dimension "
                   << loopDim.getPosition() << " on device " << devices[p];
          slot = lo;
        }
      }
    }
    for (int64_t &offset : offsets)
      offset = std::max<int64_t>(offset, 0);
    return success();
  };
  // Adds the offsets to `indices` (values of index type) right where they
  // are defined (first in the body for block arguments); the table is read
  // before the op, whose region may use values from above.
  auto shift = [&](ArrayRef<std::pair<Value, unsigned>> indices,
                   ArrayRef<int64_t> offsets, unsigned numDims) {
    if (llvm::all_of(offsets, [](int64_t offset) { return offset == 0; }))
      return;
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(copy);
    Location loc = copy->getLoc();
    Value table = positionTable(builder, loc, offsets, numDims);
    SmallVector<Value> perDim(numDims);
    for (unsigned d = 0; d < numDims; ++d)
      perDim[d] = tableLookup(builder, loc, table, position, d);
    for (auto [index, dim] : indices) {
      bool moves = false;
      for (size_t p = 0; p < devices.size(); ++p)
        moves |= offsets[p * numDims + dim] != 0;
      if (!moves)
        continue;
      builder.setInsertionPointAfterValue(index);
      Value global = arith::AddIOp::create(builder, loc, index, perDim[dim]);
      index.replaceAllUsesExcept(global, global.getDefiningOp());
    }
  };

  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(copy)) {
    SmallVector<std::pair<Value, unsigned>> indices;
    copy->walk([&](linalg::IndexOp index) {
      indices.push_back({index.getResult(), index.getDim()});
    });
    if (indices.empty())
      return success();
    auto globalOp = cast<linalg::LinalgOp>(op);
    SmallVector<std::pair<Value, AffineMap>> accesses;
    // Results first: an init's tiles may differ from its result's (a
    // partial sum), and the result is what the op computes.
    for (OpResult result : op.getResults())
      accesses.push_back(
          {result, globalOp.getIndexingMapMatchingResult(result)});
    for (OpOperand *input : globalOp.getDpsInputOperands())
      accesses.push_back(
          {input->get(), globalOp.getMatchingIndexingMap(input)});
    std::vector<int64_t> offsets;
    unsigned numDims = globalOp.getNumLoops();
    if (failed(offsetsFrom(accesses, numDims, offsets)))
      return failure();
    shift(indices, offsets, numDims);
    return success();
  }
  if (auto generate = dyn_cast<tensor::GenerateOp>(copy)) {
    Block &body = generate.getBody().front();
    SmallVector<std::pair<Value, unsigned>> indices;
    for (BlockArgument arg : body.getArguments())
      indices.push_back({arg, arg.getArgNumber()});
    unsigned rank = generate.getType().getRank();
    std::vector<int64_t> offsets;
    if (failed(offsetsFrom({{op.getResult(0), AffineMap::getMultiDimIdentityMap(
                                                  rank, op.getContext())}},
                           rank, offsets)))
      return failure();
    shift(indices, offsets, rank);
    return success();
  }
  return success();
}

/// A tensor constant's local form: a copy where the tile is the whole
/// tensor, a smaller splat, else a slice at the device's offsets (read
/// from a table indexed by its position).
Value FunctionPartitioner::partitionConstant(arith::ConstantOp constant,
                                             OpBuilder &builder) {
  Location loc = constant.getLoc();
  auto global = cast<RankedTensorType>(constant.getType());
  RankedTensorType type = localType(constant.getResult(), representative);
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (type != global && dense && dense.isSplat())
    return arith::ConstantOp::create(builder, loc, type,
                                     dense.resizeSplat(type));
  Value table;
  if (type != global) {
    const ValueInfo &info = infos[infoOf.lookup(constant.getResult())];
    table = positionTable(builder, loc, info.lo, global.getRank());
  }
  Operation *copy = builder.clone(*constant);
  copy->removeAttr(PolymeshDialect::kShardingAttrName);
  Value full = copy->getResult(0);
  if (type == global)
    return full;
  SmallVector<OpFoldResult> offsets, sizes, strides;
  for (int64_t d = 0; d < global.getRank(); ++d) {
    offsets.push_back(tableLookup(builder, loc, table, position, d));
    sizes.push_back(builder.getIndexAttr(type.getDimSize(d)));
    strides.push_back(builder.getIndexAttr(1));
  }
  return tensor::ExtractSliceOp::create(builder, loc, type, full, offsets,
                                        sizes, strides);
}

/// Devices that hold nothing of an op's results (they lie outside its
/// mesh) do not run it: its local form would have zero-size operands that
/// some ops refuse (tosa) or index out of bounds (extract_slice with static
/// offsets), and there is nothing to compute.
bool FunctionPartitioner::skipsEmptyOp(Operation &op, OpBuilder &builder,
                                       IRMapping &mapping) {
  if (op.getNumResults() == 0 || !isMemoryEffectFree(&op) ||
      !llvm::all_of(op.getResults(), [&](Value result) {
        return isa<RankedTensorType>(result.getType()) &&
               localType(result, representative).getNumElements() == 0;
      }))
    return false;
  for (Value result : op.getResults())
    mapping.map(result,
                tensor::EmptyOp::create(
                    builder, op.getLoc(),
                    localType(result, representative).getShape(),
                    cast<RankedTensorType>(result.getType()).getElementType()));
  return true;
}

/// A partial sum must start from zero everywhere but once per reduction
/// group; an init that is not zero would be counted once per member.
LogicalResult FunctionPartitioner::checkPartialSumInits(Operation &op) {
  auto dps = dyn_cast<DestinationStyleOpInterface>(op);
  if (!dps)
    return success();
  for (OpResult result : op.getResults()) {
    ShardingAttr sharding = shardingOf(&op, result.getResultNumber());
    if (!sharding || sharding.getUnreduced().empty())
      continue;
    if (!isZero(dps.getDpsInits()[result.getResultNumber()]))
      return op.emitError()
             << "cannot be partitioned: its result is a partial sum "
                "(unreduced) but its init is not zero; make the init a zero "
                "fill and add the init after the reduction";
  }
  return success();
}

/// Gives a cloned op's results their tiles' types, and the attributes and
/// operands that spell out shapes their local values.
void FunctionPartitioner::localizeShapes(Operation &op, Operation *copy,
                                         OpBuilder &builder) {
  for (OpResult result : copy->getResults()) {
    Value original = op.getResult(result.getResultNumber());
    if (isa<RankedTensorType>(original.getType()))
      result.setType(localType(original, representative));
  }
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(copy))
    expand.setStaticOutputShape(
        builder.getDenseI64ArrayAttr(expand.getResultType().getShape()));
  // A dimension a slice takes (or an insert writes) whole may be split: its
  // size is the tile's. The others are replicated and keep theirs.
  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(copy))
    slice.setStaticSizes(localSliceSizes(slice.getStaticSizes(),
                                         slice.getDroppedDims(),
                                         slice.getResultType().getShape()));
  if (auto insert = dyn_cast<tensor::InsertSliceOp>(copy))
    insert.setStaticSizes(localSliceSizes(
        insert.getStaticSizes(), insert.getDroppedDims(),
        cast<RankedTensorType>(insert.getSource().getType()).getShape()));
  if (auto reshape = dyn_cast<tosa::ReshapeOp>(copy)) {
    // The target shape is an operand: give the local one.
    ArrayRef<int64_t> shape =
        cast<RankedTensorType>(reshape.getType()).getShape();
    OpBuilder shapeBuilder(reshape);
    Value localShape = tosa::ConstShapeOp::create(
        shapeBuilder, reshape.getLoc(),
        tosa::shapeType::get(function.getContext(), shape.size()),
        shapeBuilder.getIndexTensorAttr(shape));
    reshape->setOperand(1, localShape);
  }
}

/// Partitions the ops of `source` into the builder's block for the class
/// being built: tensors take their tiles' types, transfers become
/// exchanges, control flow is partitioned region by region.
LogicalResult FunctionPartitioner::partitionBlock(Block &source,
                                                  OpBuilder &builder,
                                                  IRMapping &mapping) {
  for (Operation &op : source) {
    Location opLoc = op.getLoc();
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      SmallVector<Value> operands;
      for (Value operand : ret.getOperands())
        operands.push_back(mapping.lookup(operand));
      func::ReturnOp::create(builder, opLoc, operands);
      continue;
    }
    if (auto constraint = dyn_cast<ShardingConstraintOp>(op)) {
      Value input = mapping.lookup(constraint.getInput());
      if (input.getType() != localType(constraint.getResult(), representative))
        return constraint.emitError()
               << "cannot be partitioned: its operand's tiles differ from its "
                  "own (run --polymesh-propagate, which inserts the reshard)";
      mapping.map(constraint.getResult(), input);
      continue;
    }
    if (auto transfer = dyn_cast<TransferOp>(op)) {
      if (failed(checkTransferSource(transfer)))
        return failure();
      FlatSymbolRefAttr plan = planFunction(transfer);
      auto exchange = ExchangeOp::create(
          builder, opLoc, localType(transfer.getResult(), representative),
          mapping.lookup(transfer.getInput()), plan, runtime, device, position);
      mapping.map(transfer.getResult(), exchange.getResult());
      continue;
    }
    if (auto constant = dyn_cast<arith::ConstantOp>(op);
        constant && isa<RankedTensorType>(constant.getType())) {
      mapping.map(constant.getResult(), partitionConstant(constant, builder));
      continue;
    }
    if (skipsEmptyOp(op, builder, mapping))
      continue;
    if (isControlFlow(op)) {
      if (failed(partitionControlFlow(op, builder, mapping)))
        return failure();
      continue;
    }
    if (failed(checkPartialSumInits(op)) ||
        (op.getNumRegions() != 0 && failed(checkCaptured(op))))
      return failure();
    Operation *copy = builder.clone(op, mapping);
    copy->removeAttr(PolymeshDialect::kShardingAttrName);
    if (failed(globalizeIndices(op, copy, builder, position)))
      return failure();
    localizeAlignedReads(op, copy, builder, mapping);
    localizeShapes(op, copy, builder);
  }
  return success();
}

/// Every device runs tensor control flow and takes the same decisions
/// (trip counts, branches), since the exchanges inside are collective. So
/// the scalars they are computed from may read only tensors that every
/// device of the function holds whole: replicated on a mesh of all of them.
/// A device outside the mesh would decide on memory it was never given.
/// The walk goes through scalars carried by enclosing or earlier control
/// flow to what feeds them (a counter whose init was read from a tile).
LogicalResult FunctionPartitioner::checkDecisions(Operation &op) {
  // Each value with the op that reads it, for the diagnostic.
  SmallVector<std::pair<Value, Operation *>> worklist;
  if (auto loop = dyn_cast<scf::ForOp>(op)) {
    for (Value bound :
         {loop.getLowerBound(), loop.getUpperBound(), loop.getStep()})
      worklist.push_back({bound, &op});
  } else if (auto branch = dyn_cast<scf::IfOp>(op)) {
    worklist.push_back({branch.getCondition(), &op});
  } else if (auto loop = dyn_cast<scf::WhileOp>(op)) {
    scf::ConditionOp condition = loop.getConditionOp();
    worklist.push_back({condition.getCondition(), condition});
  } else if (auto switchOp = dyn_cast<scf::IndexSwitchOp>(op)) {
    worklist.push_back({switchOp.getArg(), &op});
  }
  auto pushFeeders = [&](Value owner) {
    Operation *carrier =
        isa<OpResult>(owner)
            ? owner.getDefiningOp()
            : cast<BlockArgument>(owner).getOwner()->getParentOp();
    for (CarriedValue &carried : getCarriedValues(carrier))
      if (llvm::is_contained(carried.owners, owner))
        for (OpOperand *feeder : carried.feeders)
          worklist.push_back({feeder->get(), feeder->getOwner()});
  };
  DenseSet<Value> seen;
  while (!worklist.empty()) {
    auto [value, reader] = worklist.pop_back_val();
    if (!seen.insert(value).second)
      continue;
    if (auto it = infoOf.find(value); it != infoOf.end()) {
      const ValueInfo &info = infos[it->second];
      if (isWholeOn(info, nullptr) &&
          info.layout->numDevices() == static_cast<int64_t>(devices.size()))
        continue;
      return reader->emitError()
             << "cannot be partitioned: '" << op.getName()
             << "' decides on a value placed as " << info.sharding
             << ", which not every device of the function holds whole; "
                "every device runs the control flow and must take the same "
                "decisions (replicate the value on a mesh of all "
             << devices.size() << " devices)";
    }
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      // Function arguments that are not tensors are given to every device
      // alike; a loop's induction variable follows its bounds, checked
      // with the loop.
      if (isTensorControlFlow(arg.getOwner()->getParentOp()))
        pushFeeders(value);
      continue;
    }
    Operation *producer = value.getDefiningOp();
    if (isTensorControlFlow(producer)) {
      // Its own decisions are checked with it.
      pushFeeders(value);
      continue;
    }
    for (Value operand : producer->getOperands())
      worklist.push_back({operand, producer});
  }
  return success();
}

/// Reads of an aligned capture split along a dimension index it with the
/// loop's local index (a fresh `linalg.index`, which globalizeIndices has
/// not shifted): the device holds that dimension's tile of the loop's.
void FunctionPartitioner::localizeAlignedReads(Operation &op, Operation *copy,
                                               OpBuilder &builder,
                                               IRMapping &mapping) {
  for (const AlignedCapture &capture : getAlignedCaptures(&op)) {
    auto it = infoOf.find(capture.value);
    if (it == infoOf.end())
      continue;
    const ValueInfo &info = infos[it->second];
    Value local = mapping.lookupOrDefault(capture.value);
    copy->walk([&](tensor::ExtractOp extract) {
      if (extract.getTensor() != local)
        return;
      for (auto [dim, loop] : llvm::enumerate(capture.loopOfDim)) {
        if (loop < 0 || info.layout->numShards(dim) == 1)
          continue;
        OpBuilder::InsertionGuard guard(builder);
        builder.setInsertionPoint(extract);
        Value index = linalg::IndexOp::create(builder, extract.getLoc(), loop);
        extract.getIndicesMutable()[dim].assign(index);
      }
    });
  }
}

/// Whether every device of `info`'s mesh holds the whole value (axes of
/// size 1 split nothing), and, given `on`, whether `on`'s devices are all
/// among them.
bool FunctionPartitioner::isWholeOn(const ValueInfo &info,
                                    const planner::TensorLayout *on) const {
  const planner::TensorLayout &layout = *info.layout;
  for (size_t dim = 0; dim < info.rank; ++dim)
    if (layout.numShards(dim) != 1)
      return false;
  if (!info.sharding.getUnreduced().empty())
    for (int64_t p = 0, e = layout.numDevices(); p < e; ++p)
      if (layout.unreducedRank(p) != 0)
        return false;
  if (on)
    for (int64_t p = 0, e = on->numDevices(); p < e; ++p)
      if (!layout.boxOfDevice(on->mesh().deviceAt(p)))
        return false;
  return true;
}

/// A region (a linalg body) indexes the tensors it reads from above with
/// global indices on every device that runs the op: each must be whole on
/// the op's mesh, or the body would read outside its tile.
LogicalResult FunctionPartitioner::checkCaptured(Operation &op) {
  // The devices that run the op: those of its result's mesh.
  const planner::TensorLayout *runs = nullptr;
  for (Value value : op.getResults())
    if (auto it = infoOf.find(value); it != infoOf.end()) {
      runs = &*infos[it->second].layout;
      break;
    }
  SmallVector<AlignedCapture> aligned = getAlignedCaptures(&op);
  ShardingAttr placed =
      op.getNumResults() != 0 ? shardingOf(&op, 0) : ShardingAttr();
  LogicalResult result = success();
  visitUsedValuesDefinedAbove(op.getRegions(), [&](OpOperand *use) {
    auto it = infoOf.find(use->get());
    if (failed(result) || it == infoOf.end())
      return;
    const ValueInfo &info = infos[it->second];
    ShardingAttr sharding = info.sharding;
    if (isWholeOn(info, runs))
      return;
    // Split as the op's own loops, which read it at the local index
    // (localizeAlignedReads).
    for (const AlignedCapture &capture : aligned)
      if (capture.value == use->get() && placed &&
          isSameLayout(sharding,
                       alignedSharding(&op, placed, capture.loopOfDim)))
        return;
    result = use->getOwner()->emitError()
             << "cannot be partitioned: it reads a tensor from outside the "
                "region of '"
             << op.getName() << "', placed as " << sharding
             << ", which is not whole on every device that runs the op "
                "(run --polymesh-propagate, which replicates it on the op's "
                "mesh)";
  });
  return result;
}

/// Control flow keeps its form with local types: each region argument and
/// result takes its tile's type, and the ops of each region are partitioned
/// in place. Every device runs the loop (its exchanges are collective).
LogicalResult FunctionPartitioner::partitionControlFlow(Operation &op,
                                                        OpBuilder &builder,
                                                        IRMapping &mapping) {
  if (failed(checkDecisions(op)))
    return failure();
  Operation *copy = builder.cloneWithoutRegions(op, mapping);
  copy->removeAttr(PolymeshDialect::kShardingAttrName);
  for (OpResult result : copy->getResults()) {
    Value original = op.getResult(result.getResultNumber());
    if (isa<RankedTensorType>(original.getType()))
      result.setType(localType(original, representative));
  }
  for (auto [from, to] : llvm::zip(op.getRegions(), copy->getRegions())) {
    for (Block &block : from) {
      auto *local = new Block();
      to.push_back(local);
      for (BlockArgument arg : block.getArguments()) {
        Type type = isa<RankedTensorType>(arg.getType())
                        ? Type(localType(arg, representative))
                        : arg.getType();
        mapping.map(arg, local->addArgument(type, arg.getLoc()));
      }
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToEnd(local);
      if (failed(partitionBlock(block, builder, mapping)))
        return failure();
    }
  }
  mapping.map(op.getResults(), copy->getResults());
  return success();
}

LogicalResult FunctionPartitioner::buildClass(unsigned classIndex,
                                              int64_t representative,
                                              ArrayRef<int64_t> classDevices) {
  MLIRContext *context = function.getContext();
  OpBuilder builder(context);
  builder.setInsertionPoint(function);
  Location loc = function.getLoc();

  SmallVector<Type> argTypes = {LLVM::LLVMPointerType::get(context),
                                builder.getI64Type(), builder.getIndexType()};
  for (BlockArgument arg : function.getArguments())
    argTypes.push_back(isa<RankedTensorType>(arg.getType())
                           ? localType(arg, representative)
                           : arg.getType());
  Operation *terminator = function.getBody().front().getTerminator();
  SmallVector<Type> resultTypes;
  for (Value operand : terminator->getOperands())
    resultTypes.push_back(isa<RankedTensorType>(operand.getType())
                              ? localType(operand, representative)
                              : operand.getType());

  auto local = func::FuncOp::create(
      builder, loc,
      (function.getSymName() + "__part" + Twine(classIndex)).str(),
      builder.getFunctionType(argTypes, resultTypes));
  local.setVisibility(function.getVisibility());
  local->setAttr(PolymeshDialect::kPartitionOfAttrName,
                 function.getSymNameAttr());
  local->setAttr(PolymeshDialect::kDevicesAttrName,
                 builder.getDenseI64ArrayAttr(classDevices));
  local->setAttr(PolymeshDialect::kMeshesAttrName,
                 builder.getArrayAttr(meshes));
  for (unsigned i = 0, e = function.getNumResults(); i < e; ++i)
    if (auto leaf = function.getResultAttr(i, PolymeshDialect::kLeafAttrName))
      local.setResultAttr(i, PolymeshDialect::kLeafAttrName, leaf);
  Block *block = local.addEntryBlock();
  builder.setInsertionPointToStart(block);
  this->representative = representative;
  runtime = block->getArgument(0);
  device = block->getArgument(1);
  position = block->getArgument(2);

  IRMapping mapping;
  for (auto [index, arg] : llvm::enumerate(function.getArguments()))
    mapping.map(arg, block->getArgument(index + 3));
  if (failed(partitionBlock(function.getBody().front(), builder, mapping)))
    return failure();

  // Ops whose local form is not valid (an attribute that spells out a
  // global extent, say) are caught here, with the original op named.
  if (failed(mlir::verify(local, /*verifyRecursively=*/true))) {
    local.erase();
    return function.emitError()
           << "cannot be partitioned: the local program of device "
           << devices[representative]
           << " does not verify (an op whose attributes spell out global "
              "extents?)";
  }
  return success();
}

LogicalResult FunctionPartitioner::run() {
  if (failed(collect()))
    return failure();
  // Devices with the same tile extents for every value share a program.
  // Every device's key (its extents of every value) in one flat array, so
  // that a mesh of 2^20 devices costs no allocation per device.
  size_t keySize = 0;
  for (const ValueInfo &info : infos)
    keySize += info.rank;
  std::vector<int64_t> keys(devices.size() * keySize);
  for (size_t position = 0; position < devices.size(); ++position) {
    int64_t *key = keys.data() + position * keySize;
    for (const ValueInfo &info : infos)
      key = std::copy(info.extent.begin() + position * info.rank,
                      info.extent.begin() + (position + 1) * info.rank, key);
  }
  // Classes are numbered over every device, so that a class has one name
  // in every process; a process keeps the devices it asked for.
  llvm::DenseMap<ArrayRef<int64_t>, unsigned> classOf;
  std::vector<std::vector<int64_t>> classDevices;
  std::vector<int64_t> representatives;
  for (size_t position = 0; position < devices.size(); ++position) {
    ArrayRef<int64_t> key(keys.data() + position * keySize, keySize);
    auto [it, inserted] = classOf.try_emplace(key, classDevices.size());
    if (inserted) {
      classDevices.emplace_back();
      representatives.push_back(position);
    }
    if (!wanted || wanted->contains(devices[position]))
      classDevices[it->second].push_back(devices[position]);
  }
  int64_t builtClasses = llvm::count_if(
      classDevices, [](const auto &ids) { return !ids.empty(); });
  // Every class runs every step of the function's plans, so code (and the
  // lowering's time and memory) grows with classes x steps; the budget is
  // the module's, shared by its functions.
  int64_t steps = 0;
  function.walk(
      [&](TransferOp transfer) { steps += transfer.getSteps().size(); });
  stepCopies += builtClasses * steps;
  if (stepCopies > maxStepCopies)
    return function.emitError()
           << "cannot be partitioned: its " << builtClasses
           << " device classes would each run the " << steps
           << " steps of its plans, " << stepCopies
           << " step copies in the module with the functions before it, "
              "more than the budget of "
           << maxStepCopies
           << " (docs/limits.md); fewer distinct tile shapes (even tiles) "
              "or fewer reshards keep it within";
  for (size_t k = 0; k < classDevices.size(); ++k)
    if (!classDevices[k].empty() &&
        failed(buildClass(k, representatives[k], classDevices[k])))
      return failure();
  return success();
}

struct PolymeshPartitionPass
    : public polymesh::impl::PolymeshPartitionBase<PolymeshPartitionPass> {
  using Base::Base;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    SymbolTableCollection symbols;
    SmallVector<func::FuncOp> functions;
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isExternal() &&
          !function->hasAttr(PolymeshDialect::kPlanAttrName) &&
          !function->hasAttr(PolymeshDialect::kPartitionOfAttrName))
        functions.push_back(function);
    llvm::DenseSet<int64_t> wanted(devices.begin(), devices.end());
    int64_t stepCopies = 0;
    for (func::FuncOp function : functions) {
      FunctionPartitioner partitioner(function, symbols, stepCopies,
                                      maxStepCopies,
                                      devices.empty() ? nullptr : &wanted);
      if (failed(partitioner.run()))
        return signalPassFailure();
    }
    for (func::FuncOp function : functions) {
      symbols.getSymbolTable(module).erase(function);
    }
    // The local code allocates its tiles and the lowering counts their
    // bytes: a tile whose bytes overflow int64 (a replicated 2^61-element
    // f32 tensor) is refused here. Global types may be larger, as long as
    // their element count fits (the layouts above check that).
    if (failed(checkTensorSizes(module)))
      return signalPassFailure();
  }
};

} // namespace
