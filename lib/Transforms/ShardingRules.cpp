//===- ShardingRules.cpp - Factor-based sharding rules of ops -------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Transforms/ShardingRules.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/SmallBitVector.h"

#include <numeric>

using namespace mlir;
using namespace polymesh;

namespace {

/// An axis reference with explicit pre-size and size.
struct Ref {
  StringRef name;
  int64_t preSize;
  int64_t size;
};

Ref toRef(AxisRefAttr attr, MeshAttr mesh) {
  if (attr.isSubAxis())
    return {attr.getName(), attr.getPreSize(), attr.getSize()};
  return {attr.getName(), 1, attr.getSizeIn(mesh)};
}

AxisRefAttr toAttr(MLIRContext *context, Ref ref, MeshAttr mesh) {
  MeshAxisAttr axis = mesh.getAxis(ref.name);
  if (ref.preSize == 1 && axis && ref.size == axis.getSize())
    return AxisRefAttr::get(context, ref.name, 0, 0);
  return AxisRefAttr::get(context, ref.name, ref.preSize, ref.size);
}

int64_t productOf(ArrayRef<AxisRefAttr> axes, MeshAttr mesh) {
  int64_t product = 1;
  for (AxisRefAttr axis : axes)
    product *= axis.getSizeIn(mesh);
  return product;
}

bool overlaps(Ref a, Ref b) {
  // A size-1 reference has an empty factor range, so the range test alone
  // would let propagation list a size-1 axis on two dimensions, which the
  // planner refuses (as Layout.cpp's AxisRef::overlaps does).
  if (a.name == b.name && a.preSize == b.preSize && a.size == b.size)
    return true;
  return a.name == b.name && a.preSize < b.preSize * b.size &&
         b.preSize < a.preSize * a.size;
}

/// Identity factors: one per dimension of `shape`, shared by every value of
/// that rank.
void addIdentityFactors(FactorRule &rule, ArrayRef<int64_t> shape) {
  for (int64_t extent : shape) {
    rule.factorSizes.push_back(ShapedType::isDynamic(extent) ? 0 : extent);
    rule.factorKinds.push_back(FactorRule::Kind::Parallel);
  }
}

SmallVector<SmallVector<unsigned>> identityDims(unsigned rank) {
  SmallVector<SmallVector<unsigned>> dims;
  for (unsigned d = 0; d < rank; ++d)
    dims.push_back({d});
  return dims;
}

std::optional<FactorRule> fromShardingInterface(Operation *op,
                                                FactorRule rule) {
  auto iface = dyn_cast<shard::ShardingInterface>(op);
  if (!iface)
    return std::nullopt;
  SmallVector<AffineMap> maps = iface.getIndexingMaps();
  SmallVector<utils::IteratorType> iterators = iface.getLoopIteratorTypes();
  if (maps.empty() ||
      maps.size() != op->getNumOperands() + op->getNumResults() ||
      maps.front().getNumDims() != iterators.size())
    return std::nullopt;
  SmallVector<shard::ReductionKind> reductionKinds =
      iface.getReductionLoopIteratorKinds();
  unsigned reductionIndex = 0;
  for (utils::IteratorType iterator : iterators) {
    rule.factorSizes.push_back(0);
    if (iterator == utils::IteratorType::parallel) {
      rule.factorKinds.push_back(FactorRule::Kind::Parallel);
      continue;
    }
    bool isSum = reductionIndex < reductionKinds.size() &&
                 reductionKinds[reductionIndex] == shard::ReductionKind::Sum;
    ++reductionIndex;
    rule.factorKinds.push_back(isSum ? FactorRule::Kind::SumReduction
                                     : FactorRule::Kind::OtherReduction);
  }
  SmallVector<unsigned> blocked;
  auto addValue = [&](Value value, AffineMap map) -> bool {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type)
      return true;
    if (map.getNumDims() != rule.numFactors())
      return false;
    SmallVector<SmallVector<unsigned>> dims;
    // A map that does not index this value's dimensions (tosa's elementwise
    // model gives its scalar-like operands, such as mul's shift, the result
    // map) leaves the value unshardable: it must be replicated.
    if (map.getNumResults() != type.getRank()) {
      dims.resize(type.getRank());
      rule.values.push_back(std::move(dims));
      rule.tensorValues.push_back(value);
      return true;
    }
    for (auto [index, expr] : llvm::enumerate(map.getResults())) {
      auto dimExpr = dyn_cast<AffineDimExpr>(expr);
      if (!dimExpr) {
        // A compound index (a window's o * stride + w) is whole, and so are
        // its loops: a tile's loop counts from its own zero, so reading a
        // whole value at o + w from a split o would read the wrong place.
        expr.walk([&](AffineExpr part) {
          if (auto loop = dyn_cast<AffineDimExpr>(part))
            blocked.push_back(loop.getPosition());
        });
        dims.push_back({});
        continue;
      }
      unsigned factor = dimExpr.getPosition();
      int64_t extent = type.getDimSize(index);
      if (!ShapedType::isDynamic(extent))
        rule.factorSizes[factor] = extent;
      dims.push_back({factor});
    }
    rule.values.push_back(std::move(dims));
    rule.tensorValues.push_back(value);
    return true;
  };
  for (auto [index, operand] : llvm::enumerate(op->getOperands()))
    if (!addValue(operand, maps[index]))
      return std::nullopt;
  rule.numOperands = rule.values.size();
  for (auto [index, result] : llvm::enumerate(op->getResults()))
    if (!addValue(result, maps[op->getNumOperands() + index]))
      return std::nullopt;
  // legalizeFactorAxes keeps OtherReduction factors whole, and so these.
  for (unsigned factor : blocked)
    rule.factorKinds[factor] = FactorRule::Kind::OtherReduction;
  return rule;
}

/// Reshapes: one factor per dimension of the expanded type; each collapsed
/// dimension maps to the factors of its reassociation group.
FactorRule reshapeRule(Value collapsedValue, Value expandedValue,
                       ArrayRef<ReassociationIndices> groups,
                       bool collapsedIsOperand) {
  FactorRule rule;
  auto expandedType = cast<RankedTensorType>(expandedValue.getType());
  addIdentityFactors(rule, expandedType.getShape());
  SmallVector<SmallVector<unsigned>> collapsedDims;
  for (const ReassociationIndices &group : groups) {
    SmallVector<unsigned> factors;
    for (int64_t index : group)
      factors.push_back(static_cast<unsigned>(index));
    collapsedDims.push_back(std::move(factors));
  }
  SmallVector<SmallVector<unsigned>> expandedDims =
      identityDims(expandedType.getRank());
  if (collapsedIsOperand) {
    rule.values = {collapsedDims, expandedDims};
    rule.tensorValues = {collapsedValue, expandedValue};
  } else {
    rule.values = {expandedDims, collapsedDims};
    rule.tensorValues = {expandedValue, collapsedValue};
  }
  rule.numOperands = 1;
  return rule;
}

/// Ops that keep some dimensions whole and change the others (slices,
/// inserts, pads, concatenation): one factor per dimension of `shape` (the
/// source's, the destination's or the result's), shared by every value
/// where the dimension is kept; a changed dimension has no factor, so it is
/// replicated. `values` lists each tensor value with the dimension of
/// `shape` that each of its dimensions is (a rank-reducing slice drops
/// some); the first `numOperands` are operands.
FactorRule keptDimsRule(ArrayRef<int64_t> shape, ArrayRef<bool> kept,
                        ArrayRef<std::pair<Value, SmallVector<int64_t>>> values,
                        unsigned numOperands) {
  FactorRule rule;
  addIdentityFactors(rule, shape);
  for (const auto &[value, dims] : values) {
    SmallVector<SmallVector<unsigned>> factors;
    for (int64_t d : dims)
      factors.push_back(kept[d]
                            ? SmallVector<unsigned>{static_cast<unsigned>(d)}
                            : SmallVector<unsigned>{});
    rule.values.push_back(std::move(factors));
    rule.tensorValues.push_back(value);
  }
  rule.numOperands = numOperands;
  return rule;
}

SmallVector<int64_t> allDims(int64_t rank) {
  return llvm::to_vector(llvm::seq<int64_t>(0, rank));
}

/// The dimensions of a slice's full-rank side that its rank-reduced side
/// keeps.
SmallVector<int64_t> undroppedDims(const llvm::SmallBitVector &dropped) {
  SmallVector<int64_t> dims;
  for (int64_t d = 0, e = dropped.size(); d < e; ++d)
    if (!dropped.test(d))
      dims.push_back(d);
  return dims;
}

/// Whether a slice or insert takes dimension d of an `extent` whole:
/// offset 0, stride 1, every element.
bool takesWhole(OffsetSizeAndStrideOpInterface op, unsigned d, int64_t extent) {
  return getConstantIntValue(op.getMixedOffsets()[d]) == 0 &&
         getConstantIntValue(op.getMixedStrides()[d]) == 1 &&
         getConstantIntValue(op.getMixedSizes()[d]) == extent;
}

/// A slice keeps the source dimensions it takes whole; the others are
/// sliced on one device, whole.
std::optional<FactorRule> extractSliceRule(tensor::ExtractSliceOp slice) {
  RankedTensorType source = slice.getSourceType();
  if (!source.hasStaticShape())
    return std::nullopt;
  SmallVector<bool> kept;
  for (int64_t d = 0; d < source.getRank(); ++d)
    kept.push_back(takesWhole(slice, d, source.getDimSize(d)));
  return keptDimsRule(
      source.getShape(), kept,
      {{slice.getSource(), allDims(source.getRank())},
       {slice.getResult(), undroppedDims(slice.getDroppedDims())}},
      /*numOperands=*/1);
}

/// An insert keeps the destination dimensions it writes whole, in the
/// inserted slice too; the others are replicated, since the slice lands at
/// a global offset there.
std::optional<FactorRule> insertSliceRule(tensor::InsertSliceOp insert) {
  RankedTensorType dest = insert.getDestType();
  if (!dest.hasStaticShape())
    return std::nullopt;
  SmallVector<bool> kept;
  for (int64_t d = 0; d < dest.getRank(); ++d)
    kept.push_back(takesWhole(insert, d, dest.getDimSize(d)));
  return keptDimsRule(
      dest.getShape(), kept,
      {{insert.getSource(), undroppedDims(insert.getDroppedDims())},
       {insert.getDest(), allDims(dest.getRank())},
       {insert.getResult(), allDims(dest.getRank())}},
      /*numOperands=*/2);
}

/// A pad keeps the dimensions it pads by nothing. Only a pad by a value
/// that does not depend on the position: a tile's local indices are not
/// the global ones.
std::optional<FactorRule> padRule(tensor::PadOp pad) {
  RankedTensorType source = pad.getSourceType();
  if (!source.hasStaticShape() ||
      llvm::any_of(pad.getRegion().getArguments(),
                   [](BlockArgument index) { return !index.use_empty(); }))
    return std::nullopt;
  SmallVector<bool> kept;
  for (int64_t d = 0; d < source.getRank(); ++d)
    kept.push_back(getConstantIntValue(pad.getMixedLowPad()[d]) == 0 &&
                   getConstantIntValue(pad.getMixedHighPad()[d]) == 0);
  return keptDimsRule(source.getShape(), kept,
                      {{pad.getSource(), allDims(source.getRank())},
                       {pad.getResult(), allDims(source.getRank())}},
                      /*numOperands=*/1);
}

/// A concatenation keeps every dimension but the one it concatenates
/// along, which is replicated.
std::optional<FactorRule> concatRule(tensor::ConcatOp concat) {
  RankedTensorType result = concat.getResultType();
  if (!result.hasStaticShape())
    return std::nullopt;
  SmallVector<bool> kept(result.getRank(), true);
  kept[concat.getDim()] = false;
  SmallVector<std::pair<Value, SmallVector<int64_t>>> values;
  for (Value input : concat.getInputs())
    values.push_back({input, allDims(result.getRank())});
  values.push_back({concat.getResult(), allDims(result.getRank())});
  return keptDimsRule(result.getShape(), kept, values,
                      concat.getInputs().size());
}

} // namespace

namespace {
bool computeIsIdentity(FactorRule &rule) {
  for (FactorRule::Kind kind : rule.factorKinds)
    if (kind != FactorRule::Kind::Parallel)
      return false;
  bool anyIdentity = false;
  rule.isUnshardable.clear();
  for (const auto &dims : rule.values) {
    if (llvm::all_of(dims, [](const auto &f) { return f.empty(); })) {
      rule.isUnshardable.push_back(true);
      continue;
    }
    if (dims.size() != rule.numFactors())
      return false;
    for (auto [index, factors] : llvm::enumerate(dims))
      if (factors.size() != 1 || factors.front() != index)
        return false;
    rule.isUnshardable.push_back(false);
    anyIdentity = true;
  }
  return anyIdentity;
}

std::optional<FactorRule> computeFactorRule(Operation *op);
} // namespace

std::optional<FactorRule> polymesh::getFactorRule(Operation *op) {
  std::optional<FactorRule> rule = computeFactorRule(op);
  if (rule)
    rule->isIdentity = computeIsIdentity(*rule);
  return rule;
}

SmallVector<AlignedCapture> polymesh::getAlignedCaptures(Operation *op) {
  SmallVector<AlignedCapture> captures;
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic)
    return captures;
  SmallVector<int64_t> ranges = generic.getStaticLoopRanges();
  SmallVector<utils::IteratorType> iterators = generic.getIteratorTypesArray();
  llvm::SetVector<Value> captured;
  visitUsedValuesDefinedAbove(op->getRegions(), [&](OpOperand *use) {
    if (isa<RankedTensorType>(use->get().getType()))
      captured.insert(use->get());
  });
  constexpr int64_t kUnseen = -2;
  for (Value value : captured) {
    auto type = cast<RankedTensorType>(value.getType());
    SmallVector<int64_t> loopOfDim(type.getRank(), kUnseen);
    bool onlyReads = true;
    for (OpOperand &use : value.getUses()) {
      if (!op->isProperAncestor(use.getOwner()))
        continue;
      auto extract = dyn_cast<tensor::ExtractOp>(use.getOwner());
      if (!extract || use.getOperandNumber() != 0) {
        onlyReads = false;
        break;
      }
      for (auto [dim, index] : llvm::enumerate(extract.getIndices())) {
        auto loopIndex = index.getDefiningOp<linalg::IndexOp>();
        int64_t loop = -1;
        if (loopIndex && loopIndex->getParentOfType<linalg::LinalgOp>() ==
                             cast<linalg::LinalgOp>(op))
          loop = loopIndex.getDim();
        int64_t &slot = loopOfDim[dim];
        slot = (slot == kUnseen || slot == loop) ? loop : -1;
      }
    }
    if (!onlyReads)
      continue;
    SmallVector<int64_t> seen(loopOfDim);
    bool any = false;
    for (auto [dim, loop] : llvm::enumerate(loopOfDim)) {
      // One loop indexing two dimensions (a diagonal) cannot split both.
      bool repeated = llvm::count(seen, loop) > 1;
      if (loop < 0 || repeated ||
          iterators[loop] != utils::IteratorType::parallel ||
          ShapedType::isDynamic(ranges[loop]) ||
          ranges[loop] != type.getDimSize(dim)) {
        loop = -1;
        continue;
      }
      any = true;
    }
    if (any)
      captures.push_back({value, std::move(loopOfDim)});
  }
  return captures;
}

ShardingAttr polymesh::alignedSharding(Operation *op, ShardingAttr placed,
                                       ArrayRef<int64_t> loopOfDim) {
  MLIRContext *context = op->getContext();
  AffineMap map =
      cast<linalg::LinalgOp>(op).getIndexingMapMatchingResult(op->getResult(0));
  SmallVector<DimShardingAttr> dims;
  for (int64_t loop : loopOfDim) {
    ArrayRef<AxisRefAttr> axes;
    if (loop >= 0)
      for (auto [index, expr] : llvm::enumerate(map.getResults()))
        if (auto dim = dyn_cast<AffineDimExpr>(expr);
            dim && dim.getPosition() == loop && index < placed.getDims().size())
          axes = placed.getDims()[index].getAxes();
    dims.push_back(DimShardingAttr::get(context, axes, /*isClosed=*/true));
  }
  return ShardingAttr::get(context, placed.getMeshName(), dims, {}, {});
}

namespace {
/// A linalg.generic's aligned captures join its rule as operands after its
/// own: an aligned dimension takes its loop's factor, the others none.
void addAlignedCaptures(Operation *op, FactorRule &rule) {
  SmallVector<AlignedCapture> captures = getAlignedCaptures(op);
  if (captures.empty())
    return;
  unsigned at = rule.numOperands;
  for (AlignedCapture &capture : captures) {
    SmallVector<SmallVector<unsigned>> dims;
    for (int64_t loop : capture.loopOfDim) {
      dims.emplace_back();
      if (loop >= 0)
        dims.back().push_back(static_cast<unsigned>(loop));
    }
    rule.values.insert(rule.values.begin() + at, std::move(dims));
    rule.tensorValues.insert(rule.tensorValues.begin() + at, capture.value);
    ++at;
  }
  rule.numOperands = at;
}

std::optional<FactorRule> computeFactorRule(Operation *op) {
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
    return reshapeRule(expand.getSrc(), expand.getResult(),
                       expand.getReassociationIndices(),
                       /*collapsedIsOperand=*/true);
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return reshapeRule(collapse.getResult(), collapse.getSrc(),
                       collapse.getReassociationIndices(),
                       /*collapsedIsOperand=*/false);

  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op))
    return extractSliceRule(slice);
  if (auto insert = dyn_cast<tensor::InsertSliceOp>(op))
    return insertSliceRule(insert);
  if (auto pad = dyn_cast<tensor::PadOp>(op))
    return padRule(pad);
  if (auto concat = dyn_cast<tensor::ConcatOp>(op))
    return concatRule(concat);

  if (std::optional<FactorRule> rule = fromShardingInterface(op, {})) {
    addAlignedCaptures(op, *rule);
    return rule;
  }

  // Elementwise ops and ops that only create tensors (constants, splats,
  // empty tensors): identity factors over the result shape, shared by every
  // tensor operand of the same shape.
  bool elementwise = OpTrait::hasElementwiseMappableTraits(op);
  bool creates = op->getNumResults() > 0 &&
                 llvm::none_of(op->getOperandTypes(),
                               [](Type type) { return isa<TensorType>(type); });
  if (!elementwise && !creates)
    return std::nullopt;
  if (op->getNumResults() == 0)
    return std::nullopt;
  auto resultType = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!resultType)
    return std::nullopt;
  FactorRule rule;
  addIdentityFactors(rule, resultType.getShape());
  for (Value operand : op->getOperands()) {
    auto type = dyn_cast<RankedTensorType>(operand.getType());
    if (!type)
      continue;
    if (type.getShape() != resultType.getShape())
      return std::nullopt;
    rule.values.push_back(identityDims(type.getRank()));
    rule.tensorValues.push_back(operand);
  }
  rule.numOperands = rule.values.size();
  for (Value result : op->getResults()) {
    auto type = dyn_cast<RankedTensorType>(result.getType());
    if (!type || type.getShape() != resultType.getShape())
      return std::nullopt;
    rule.values.push_back(identityDims(type.getRank()));
    rule.tensorValues.push_back(result);
  }
  return rule;
}
} // namespace

FactorAxes polymesh::proposeFactorAxes(const FactorRule &rule,
                                       unsigned valueIndex,
                                       ShardingAttr sharding, MeshAttr mesh) {
  MLIRContext *context = sharding.getContext();
  FactorAxes proposal(rule.numFactors());
  const auto &dims = rule.values[valueIndex];
  for (auto [dimIndex, dim] : llvm::enumerate(sharding.getDims())) {
    if (dimIndex >= dims.size())
      break;
    ArrayRef<unsigned> factors = dims[dimIndex];
    if (factors.empty())
      continue;
    if (factors.size() == 1) {
      llvm::append_range(proposal[factors[0]], dim.getAxes());
      continue;
    }
    // Fill factors major to minor; a factor must be full before the next
    // one may take axes, and each factor's shards must divide it exactly.
    size_t factorIndex = 0;
    int64_t capacity = rule.factorSizes[factors[0]];
    for (AxisRefAttr axisAttr : dim.getAxes()) {
      Ref ref = toRef(axisAttr, mesh);
      bool placed = false;
      while (!placed) {
        while (capacity == 1 && factorIndex + 1 < factors.size())
          capacity = rule.factorSizes[factors[++factorIndex]];
        if (capacity <= 1)
          break;
        if (capacity % ref.size == 0) {
          proposal[factors[factorIndex]].push_back(toAttr(context, ref, mesh));
          capacity /= ref.size;
          placed = true;
          break;
        }
        int64_t common = std::gcd(capacity, ref.size);
        if (common == 1)
          break;
        // The factor takes the major part of the axis; the rest goes on to
        // the next factor when this one is full. When it is not (sizes 4
        // and 6 share only 2, as Shardy's gcd split), the rest cannot shard
        // anything more minor and is dropped from the proposal: the
        // tensor's own sharding keeps it, the op's placement does not.
        proposal[factors[factorIndex]].push_back(
            toAttr(context, {ref.name, ref.preSize, common}, mesh));
        if (common != capacity)
          break;
        ref = {ref.name, ref.preSize * common, ref.size / common};
        capacity = 1;
      }
      if (!placed)
        break;
    }
  }
  return proposal;
}

void polymesh::legalizeFactorAxes(const FactorRule &rule, FactorAxes &axes,
                                  MeshAttr mesh) {
  for (unsigned factor = 0; factor < rule.numFactors(); ++factor)
    if (rule.factorKinds[factor] == FactorRule::Kind::OtherReduction)
      axes[factor].clear();
  // An axis may shard one factor only: the lower factor index keeps it.
  SmallVector<Ref> used;
  for (auto &factorAxes : axes) {
    bool clash = false;
    for (AxisRefAttr attr : factorAxes)
      for (Ref other : used)
        clash |= overlaps(toRef(attr, mesh), other);
    if (clash) {
      factorAxes.clear();
      continue;
    }
    for (AxisRefAttr attr : factorAxes)
      used.push_back(toRef(attr, mesh));
  }
  // Within a dimension of several factors, a factor may be sharded only if
  // every more-major factor is fully sharded, and only into exact shards.
  for (const auto &value : rule.values) {
    for (const auto &factors : value) {
      if (factors.size() < 2)
        continue;
      bool majorFull = true;
      for (unsigned factor : factors) {
        int64_t size = rule.factorSizes[factor];
        int64_t shards = productOf(axes[factor], mesh);
        if (!majorFull || size <= 0 || size % shards != 0) {
          axes[factor].clear();
          shards = 1;
        }
        majorFull = majorFull && size > 0 && shards == size;
      }
    }
  }
}

ShardingAttr polymesh::deriveSharding(const FactorRule &rule,
                                      unsigned valueIndex,
                                      const FactorAxes &axes,
                                      FlatSymbolRefAttr meshName,
                                      MeshAttr mesh) {
  MLIRContext *context = meshName.getContext();
  SmallVector<DimShardingAttr> dims;
  llvm::SmallDenseSet<unsigned> present;
  for (const auto &factors : rule.values[valueIndex]) {
    SmallVector<Ref> refs;
    for (unsigned factor : factors) {
      present.insert(factor);
      for (AxisRefAttr attr : axes[factor]) {
        Ref ref = toRef(attr, mesh);
        // Adjacent pieces of one axis merge back: (p)a then (p*a)b is (p)ab.
        if (!refs.empty() && refs.back().name == ref.name &&
            refs.back().preSize * refs.back().size == ref.preSize) {
          refs.back().size *= ref.size;
          continue;
        }
        refs.push_back(ref);
      }
    }
    SmallVector<AxisRefAttr> dimAxes;
    for (Ref ref : refs)
      dimAxes.push_back(toAttr(context, ref, mesh));
    dims.push_back(DimShardingAttr::get(context, dimAxes, /*isClosed=*/true));
  }
  SmallVector<AxisRefAttr> unreduced;
  if (valueIndex >= rule.numOperands)
    for (unsigned factor = 0; factor < rule.numFactors(); ++factor)
      if (rule.factorKinds[factor] == FactorRule::Kind::SumReduction &&
          !present.contains(factor))
        llvm::append_range(unreduced, axes[factor]);
  return ShardingAttr::get(context, meshName, dims, {}, unreduced);
}

bool polymesh::isSameLayout(ShardingAttr a, ShardingAttr b) {
  if (a == b)
    return true;
  if (a.getMeshName() != b.getMeshName() ||
      a.getDims().size() != b.getDims().size())
    return false;
  for (auto [dimA, dimB] : llvm::zip(a.getDims(), b.getDims()))
    if (dimA.getAxes() != dimB.getAxes())
      return false;
  if (a.getUnreduced().size() != b.getUnreduced().size())
    return false;
  for (AxisRefAttr ref : a.getUnreduced())
    if (!llvm::is_contained(b.getUnreduced(), ref))
      return false;
  return true;
}
