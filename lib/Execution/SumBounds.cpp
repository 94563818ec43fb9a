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
    auto op = dyn_cast<linalg::LinalgOp>(result.getOwner());
    auto tag = op ? op->getAttrOfType<IntegerAttr>(kReductionIndexAttrName)
                  : IntegerAttr();
    unsigned r = result.getResultNumber();
    if (!tag || !isa<FloatType>(getElementTypeOrSelf(result.getType())) ||
        op.getNumReductionLoops() == 0 || !addedTerm(op, r) ||
        !holdsPartials(op, r))
      continue;
    int64_t terms = 1;
    bool known = true;
    for (auto [range, iterator] :
         llvm::zip(op.getStaticLoopRanges(), op.getIteratorTypesArray())) {
      if (iterator != utils::IteratorType::reduction)
        continue;
      if (ShapedType::isDynamic(range))
        known = false;
      else
        terms *= range;
    }
    if (known)
      sums[i] = ReorderedSum{terms, tag.getInt(), r};
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
  OwningOpRef<ModuleOp> magnitudes(module.clone());
  // The same op structure as the sharded program's (ShardedRunner
  // specializes calls before it numbers reductions).
  if (failed(inlineCallsForPropagation(*magnitudes, kDefaultMaxSpecializedOps)))
    return error("the calls of @" + name + " cannot be specialized");
  auto func = magnitudes->lookupSymbol<func::FuncOp>(name);
  if (!func || func.isExternal())
    return error("no function named @" + name + " with a body");

  // The ops to rewrite, found by the same numbering as tagReductions'.
  std::vector<linalg::LinalgOp> ops;
  func.walk([&](linalg::LinalgOp op) { ops.push_back(op); });
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
