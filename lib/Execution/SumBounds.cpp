//===- SumBounds.cpp - Which results are reordered float sums -------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// See SumBounds.h for the contract; docs/execution.md, "How --verify
// compares floats", for why the magnitudes are computed this way.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/SumBounds.h"
#include "polymesh/Transforms/InlineCalls.h"

#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Execution/ReferenceRunner.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace polymesh;
using namespace polymesh::execution;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The term that result `r` of `op` adds to its accumulator: the other
/// operand of an `arith.addf` of the output's block argument, yielded.
Value addedTerm(linalg::LinalgOp op, unsigned r) {
  Block *body = op.getBlock();
  if (!body || r >= op.getNumDpsInits())
    return {};
  Operation *yield = body->getTerminator();
  if (r >= yield->getNumOperands())
    return {};
  auto add = yield->getOperand(r).getDefiningOp<arith::AddFOp>();
  if (!add)
    return {};
  BlockArgument accumulator =
      op.getMatchingBlockArgument(op.getDpsInitOperand(r));
  if (add.getLhs() == accumulator)
    return add.getRhs();
  if (add.getRhs() == accumulator)
    return add.getLhs();
  return {};
}

/// The value `value` is a moved copy of, through ops that only move
/// elements: each element of the result is one element of the input.
Value movedFrom(Value value) {
  Operation *op = value.getDefiningOp();
  if (!op)
    return {};
  if (auto transfer = dyn_cast<TransferOp>(op))
    return transfer.getInput();
  if (auto constraint = dyn_cast<ShardingConstraintOp>(op))
    return constraint.getInput();
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op))
    return expand.getSrc();
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op))
    return collapse.getSrc();
  if (auto cast = dyn_cast<tensor::CastOp>(op))
    return cast.getSource();
  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op))
    return slice.getSource();
  if (auto transpose = dyn_cast<linalg::TransposeOp>(op))
    return transpose.getInput();
  return {};
}

/// Whether result `r` of `op` holds partial sums after planning.
bool holdsPartials(Operation *op, unsigned r) {
  Attribute attr = op->getAttr(PolymeshDialect::kShardingAttrName);
  if (auto array = dyn_cast_or_null<ArrayAttr>(attr))
    attr = r < array.size() ? array[r] : Attribute();
  auto sharding = dyn_cast_or_null<ShardingAttr>(attr);
  return sharding && !sharding.getUnreduced().empty();
}

} // namespace

void execution::tagReductions(ModuleOp module) {
  Builder builder(module.getContext());
  for (auto func : module.getOps<func::FuncOp>()) {
    int64_t index = 0;
    func.walk([&](linalg::LinalgOp op) {
      op->setAttr(kReductionIndexAttrName, builder.getI64IntegerAttr(index++));
    });
  }
}

void execution::untagReductions(ModuleOp module) {
  module.walk(
      [](linalg::LinalgOp op) { op->removeAttr(kReductionIndexAttrName); });
}

namespace {
/// Result `r` of the tagged linalg `op` as a reordered sum, if it is one.
std::optional<ReorderedSum> asReorderedSum(linalg::LinalgOp op, unsigned r) {
  auto tag = op->getAttrOfType<IntegerAttr>(kReductionIndexAttrName);
  if (!tag || r >= op->getNumResults() ||
      !isa<FloatType>(getElementTypeOrSelf(op->getResult(r).getType())) ||
      op.getNumReductionLoops() == 0 || !addedTerm(op, r) ||
      !holdsPartials(op, r))
    return std::nullopt;
  int64_t terms = 1;
  for (auto [range, iterator] :
       llvm::zip(op.getStaticLoopRanges(), op.getIteratorTypesArray())) {
    if (iterator != utils::IteratorType::reduction)
      continue;
    if (ShapedType::isDynamic(range))
      return std::nullopt;
    terms *= range;
  }
  std::string location = formatLocationPrefix(op->getLoc());
  return ReorderedSum{terms, tag.getInt(), r,
                      llvm::StringRef(location).rtrim(": ").str()};
}

/// A copy of `module` with its calls specialized, as ShardedRunner does
/// before it numbers reductions, and its function `name`.
llvm::Expected<std::pair<OwningOpRef<ModuleOp>, func::FuncOp>>
specializedCopy(ModuleOp module, llvm::StringRef name) {
  OwningOpRef<ModuleOp> copy(module.clone());
  if (failed(inlineCallsForPropagation(*copy, kDefaultMaxSpecializedOps)))
    return error("the calls of @" + name + " cannot be specialized");
  auto func = copy->lookupSymbol<func::FuncOp>(name);
  if (!func || func.isExternal())
    return error("no function named @" + name + " with a body");
  return std::pair{std::move(copy), func};
}

/// The linalg ops of `func` in tagReductions' numbering (walk order).
std::vector<linalg::LinalgOp> numberedOps(func::FuncOp func) {
  std::vector<linalg::LinalgOp> ops;
  func.walk([&](linalg::LinalgOp op) { ops.push_back(op); });
  return ops;
}
} // namespace

std::vector<ReorderedSum> execution::findPartialSums(func::FuncOp func) {
  std::vector<ReorderedSum> sums;
  if (func.isExternal())
    return sums;
  for (Operation &op : func.getBody().front())
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(&op))
      for (unsigned r = 0, e = op.getNumResults(); r < e; ++r)
        if (std::optional<ReorderedSum> sum = asReorderedSum(linalgOp, r))
          sums.push_back(*sum);
  return sums;
}

LogicalResult execution::returnPartialSums(func::FuncOp func,
                                           llvm::ArrayRef<ReorderedSum> sums) {
  if (sums.empty())
    return success();
  std::vector<linalg::LinalgOp> ops = numberedOps(func);
  Operation *terminator = func.getBody().back().getTerminator();
  OpBuilder builder(terminator);
  MLIRContext *context = func.getContext();
  for (const ReorderedSum &sum : sums) {
    Operation *op = ops[sum.opIndex];
    Attribute attr = op->getAttr(PolymeshDialect::kShardingAttrName);
    if (auto array = dyn_cast<ArrayAttr>(attr))
      attr = array[sum.resultNumber];
    auto partial = cast<ShardingAttr>(attr);
    auto reduced =
        ShardingAttr::get(context, partial.getMeshName(), partial.getDims(),
                          partial.getReplicated(), {});
    Value value = op->getResult(sum.resultNumber);
    Value moved = ReshardOp::create(builder, op->getLoc(), value.getType(),
                                    value, reduced);
    unsigned index = func.getNumResults();
    if (failed(func.insertResult(
            index, value.getType(),
            builder.getDictionaryAttr(builder.getNamedAttr(
                PolymeshDialect::kShardingAttrName, reduced)))))
      return failure();
    terminator->insertOperands(terminator->getNumOperands(), moved);
  }
  return success();
}

llvm::Expected<OwningOpRef<ModuleOp>>
execution::injectPartialSums(ModuleOp module, llvm::StringRef name,
                             llvm::ArrayRef<ReorderedSum> sums) {
  auto specialized = specializedCopy(module, name);
  if (!specialized)
    return specialized.takeError();
  auto &[copy, func] = *specialized;
  std::vector<linalg::LinalgOp> ops = numberedOps(func);
  Operation *terminator = func.getBody().back().getTerminator();
  for (const ReorderedSum &sum : sums) {
    if (sum.opIndex < 0 || sum.opIndex >= static_cast<int64_t>(ops.size()) ||
        sum.resultNumber >= ops[sum.opIndex]->getNumResults())
      return error("reordered sum #" + llvm::Twine(sum.opIndex) +
                   " is not a linalg op of @" + name);
    Value value = ops[sum.opIndex]->getResult(sum.resultNumber);
    unsigned argIndex = func.getNumArguments();
    if (failed(
            func.insertArgument(argIndex, value.getType(), {}, value.getLoc())))
      return error("@" + name + " takes no more arguments");
    value.replaceAllUsesWith(func.getArgument(argIndex));
    if (failed(func.insertResult(func.getNumResults(), value.getType(), {})))
      return error("@" + name + " takes no more results");
    terminator->insertOperands(terminator->getNumOperands(), value);
  }
  return std::move(copy);
}

llvm::Expected<LockStepReference> execution::continueFromPartialSums(
    ModuleOp module, llvm::StringRef name, llvm::ArrayRef<ReorderedSum> sums,
    size_t numProgramResults, llvm::ArrayRef<HostTensor> shardedSums,
    llvm::ArrayRef<HostTensor> inputs, const JitOptions &jit) {
  if (shardedSums.size() != sums.size())
    return error("expected " + llvm::Twine(sums.size()) +
                 " reordered sums, got " + llvm::Twine(shardedSums.size()));
  auto injected = injectPartialSums(module, name, sums);
  if (!injected)
    return injected.takeError();
  std::vector<HostTensor> continued(inputs.begin(), inputs.end());
  continued.insert(continued.end(), shardedSums.begin(), shardedSums.end());
  auto runner = ReferenceRunner::create(**injected, {name.str()}, jit);
  if (!runner)
    return runner.takeError();
  auto results = (*runner)->run(name, continued);
  if (!results)
    return results.takeError();
  if (results->size() != numProgramResults + sums.size())
    return error("the continued reference of @" + name + " returns " +
                 llvm::Twine(results->size()) + " results, expected " +
                 llvm::Twine(numProgramResults + sums.size()));
  std::vector<std::optional<ReorderedSum>> bounded(numProgramResults);
  bounded.insert(bounded.end(), sums.begin(), sums.end());
  auto bounds = computeSumBounds(**injected, name, bounded, continued);
  if (!bounds)
    return bounds.takeError();
  return LockStepReference{std::move(*results), std::move(*bounds)};
}

std::vector<std::optional<ReorderedSum>>
execution::findReorderedSums(func::FuncOp func) {
  std::vector<std::optional<ReorderedSum>> sums(func.getNumResults());
  if (func.isExternal())
    return sums;
  Operation *terminator = func.getBody().back().getTerminator();
  for (auto [i, operand] : llvm::enumerate(terminator->getOperands())) {
    if (i >= sums.size())
      break;
    Value value = operand;
    while (Value input = movedFrom(value))
      value = input;
    auto result = dyn_cast<OpResult>(value);
    if (!result)
      continue;
    if (auto op = dyn_cast<linalg::LinalgOp>(result.getOwner()))
      sums[i] = asReorderedSum(op, result.getResultNumber());
  }
  return sums;
}

llvm::Expected<std::vector<std::optional<SumBound>>>
execution::computeSumBounds(ModuleOp module, llvm::StringRef name,
                            llvm::ArrayRef<std::optional<ReorderedSum>> sums,
                            llvm::ArrayRef<HostTensor> inputs) {
  std::vector<std::optional<SumBound>> bounds(sums.size());
  if (llvm::none_of(sums, [](const auto &sum) { return sum.has_value(); }))
    return bounds;
  module.getContext()->getOrLoadDialect<math::MathDialect>();
  // The same op structure as the sharded program's.
  auto specialized = specializedCopy(module, name);
  if (!specialized)
    return specialized.takeError();
  auto &[magnitudes, func] = *specialized;

  // The ops to rewrite, found by the same numbering as tagReductions'.
  std::vector<linalg::LinalgOp> ops = numberedOps(func);
  llvm::DenseMap<int64_t, std::vector<unsigned>> resultsOf;
  for (const std::optional<ReorderedSum> &sum : sums)
    if (sum) {
      if (sum->opIndex < 0 || sum->opIndex >= static_cast<int64_t>(ops.size()))
        return error("reordered sum #" + llvm::Twine(sum->opIndex) +
                     " is not a linalg op of @" + name);
      resultsOf[sum->opIndex].push_back(sum->resultNumber);
    }

  IRRewriter rewriter(module.getContext());
  for (auto &[index, results] : resultsOf) {
    linalg::LinalgOp op = ops[index];
    // Named ops (matmul, reduce) keep their combiner in an implicit body;
    // as a generic the body is ours to change.
    if (!isa<linalg::GenericOp>(op)) {
      rewriter.setInsertionPoint(op);
      FailureOr<linalg::GenericOp> generic =
          linalg::generalizeNamedOp(rewriter, op);
      if (failed(generic))
        return error("cannot generalize '" + op->getName().getStringRef() +
                     "' to sum magnitudes");
      op = cast<linalg::LinalgOp>(generic->getOperation());
    }
    for (unsigned r : results) {
      Value term = addedTerm(op, r);
      if (!term)
        return error("'" + op->getName().getStringRef() +
                     "' does not add a term to result #" + llvm::Twine(r));
      auto add = cast<arith::AddFOp>(
          op.getBlock()->getTerminator()->getOperand(r).getDefiningOp());
      rewriter.setInsertionPoint(add);
      Value magnitude = math::AbsFOp::create(rewriter, add.getLoc(), term);
      rewriter.modifyOpInPlace(
          add, [&] { add->replaceUsesOfWith(term, magnitude); });
    }
  }

  auto runner = ReferenceRunner::create(*magnitudes, {name.str()});
  if (!runner)
    return runner.takeError();
  auto results = (*runner)->run(name, inputs);
  if (!results)
    return results.takeError();
  for (size_t i = 0; i < sums.size(); ++i)
    if (sums[i] && i < results->size())
      bounds[i] = SumBound{sums[i]->terms, std::move((*results)[i])};
  return bounds;
}
