//===- InlineCalls.cpp - Call sites specialized for propagation -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Propagation is inter-procedural by specialization: a callee's body is
// copied into each call site before any function is propagated, so that a
// function called with different shardings from two sites moves nothing at
// either (docs/propagation.md, "Calls"). A plain copy of the body's one
// block, not MLIR's inliner: every op Polymesh propagates may be copied,
// and the callee's annotations must survive as constraints.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Transforms/InlineCalls.h"

#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Support/Saturating.h"
#include "polymesh/Transforms/CallGraph.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace polymesh;

namespace {

/// `value` constrained to `sharding` (when it is one) right before
/// `builder`'s insertion point.
Value constrain(OpBuilder &builder, Location loc, Value value,
                Attribute sharding) {
  auto typed = dyn_cast_or_null<ShardingAttr>(sharding);
  if (!typed || !isa<RankedTensorType>(value.getType()))
    return value;
  return ShardingConstraintOp::create(builder, loc, value.getType(), value,
                                      typed)
      .getResult();
}

/// The sharding a call op's own `polymesh.sharding` gives its result
/// `index`: the attribute itself for one result, its element for several.
Attribute siteSharding(func::CallOp call, unsigned index) {
  Attribute attr = call->getAttr(PolymeshDialect::kShardingAttrName);
  if (auto list = dyn_cast_or_null<ArrayAttr>(attr))
    return index < list.size() ? list[index] : Attribute();
  return index == 0 ? attr : Attribute();
}

/// Copies the body of `callee` in place of `call`.
LogicalResult inlineOne(func::CallOp call, func::FuncOp callee) {
  Region &body = callee.getBody();
  if (!body.hasOneBlock())
    return call.emitError()
           << "cannot specialize the call of @" << callee.getSymName()
           << " for propagation: its body has "
           << llvm::range_size(body.getBlocks())
           << " blocks, and only single-block callees are copied into "
              "their call sites";
  OpBuilder builder(call);
  IRMapping mapping;
  for (auto [index, arg] : llvm::enumerate(body.getArguments()))
    mapping.map(arg, constrain(builder, call.getLoc(), call.getOperand(index),
                               callee.getArgAttr(
                                   index, PolymeshDialect::kShardingAttrName)));
  Block &block = body.front();
  // As MLIR's inliner: a diagnostic in a copy names the callee's line and
  // the call it was copied to.
  for (Operation &op : block.without_terminator())
    builder.clone(op, mapping)->walk([&](Operation *copy) {
      copy->setLoc(CallSiteLoc::get(copy->getLoc(), call.getLoc()));
    });
  Operation *terminator = block.getTerminator();
  for (auto [index, result] : llvm::enumerate(call.getResults())) {
    Value returned = mapping.lookupOrDefault(terminator->getOperand(index));
    returned = constrain(
        builder, call.getLoc(), returned,
        callee.getResultAttr(index, PolymeshDialect::kShardingAttrName));
    returned =
        constrain(builder, call.getLoc(), returned, siteSharding(call, index));
    result.replaceAllUsesWith(returned);
  }
  call.erase();
  return success();
}

/// Fails, at the first function into which specialization would copy more
/// than `limit` ops (a call chain that doubles at every level grows
/// exponentially). A large function without calls is not limited here.
/// `order` lists callees first.
LogicalResult checkSpecializedSizes(ArrayRef<func::FuncOp> order,
                                    SymbolTableCollection &symbols,
                                    int64_t limit) {
  // Ops of each function once its calls are copied in.
  llvm::DenseMap<Operation *, int64_t> sizes;
  for (func::FuncOp function : order) {
    int64_t own = 0, copied = 0;
    function.walk([&](Operation *op) {
      auto call = dyn_cast<func::CallOp>(op);
      auto callee = call ? symbols.lookupNearestSymbolFrom<func::FuncOp>(
                               call, call.getCalleeAttr())
                         : func::FuncOp();
      auto it = callee ? sizes.find(callee) : sizes.end();
      if (it == sizes.end())
        own = saturatingAdd(own, 1);
      else
        copied = saturatingAdd(copied, it->second);
    });
    if (copied > limit)
      return function.emitError()
             << "specializing its calls for propagation would copy " << copied
             << " ops into @" << function.getSymName() << ", more than "
             << limit << " (docs/limits.md)";
    sizes[function] = saturatingAdd(own, copied);
  }
  return success();
}

} // namespace

LogicalResult polymesh::inlineCallsForPropagation(ModuleOp module,
                                                  int64_t maxCopiedOps) {
  SmallVector<func::FuncOp> roots(module.getOps<func::FuncOp>());
  SymbolTableCollection symbols;
  FailureOr<SmallVector<func::FuncOp>> order =
      orderCalleesFirst(roots, symbols);
  if (failed(order) ||
      failed(checkSpecializedSizes(*order, symbols, maxCopiedOps)))
    return failure();
  // Callees come first, so the body copied into a caller has no calls left
  // but those of declarations.
  llvm::SetVector<func::FuncOp> called;
  for (func::FuncOp function : *order) {
    SmallVector<func::CallOp> calls;
    function.walk([&](func::CallOp call) { calls.push_back(call); });
    for (func::CallOp call : calls) {
      auto callee = symbols.lookupNearestSymbolFrom<func::FuncOp>(
          call, call.getCalleeAttr());
      if (!callee || callee.isExternal())
        continue;
      called.insert(callee);
      if (failed(inlineOne(call, callee)))
        return failure();
    }
  }
  for (func::FuncOp callee : called)
    if (callee.isPrivate() && SymbolTable::symbolKnownUseEmpty(callee, module))
      callee.erase();
  return success();
}
