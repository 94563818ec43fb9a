//===- ControlFlow.cpp - Tensors carried by scf control flow --------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Transforms/ControlFlow.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

bool polymesh::isTensorControlFlow(Operation *op) {
  return isa<scf::ForOp, scf::WhileOp, scf::IfOp, scf::IndexSwitchOp>(op);
}

LogicalResult polymesh::checkTensorRegions(Operation *function) {
  WalkResult nested = function->walk([&](Operation *op) {
    // Ops directly in the function, or in tensor control flow all the way
    // up, may compute tensors.
    Operation *parent = op->getParentOp();
    while (parent && parent != function && isTensorControlFlow(parent))
      parent = parent->getParentOp();
    if (op == function || parent == function)
      return WalkResult::advance();
    for (Type type : op->getResultTypes())
      if (isa<TensorType>(type)) {
        op->emitError() << "cannot be partitioned: tensors inside regions "
                           "are not supported (except in scf.for, scf.while, "
                           "scf.if and scf.index_switch)";
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  return failure(nested.wasInterrupted());
}

SmallVector<polymesh::CarriedValue> polymesh::getCarriedValues(Operation *op) {
  SmallVector<CarriedValue> carried;
  auto add = [&](ArrayRef<Value> owners, ArrayRef<OpOperand *> feeders) {
    carried.push_back(
        {SmallVector<Value, 2>(owners), SmallVector<OpOperand *, 2>(feeders)});
  };
  if (auto loop = dyn_cast<scf::ForOp>(op)) {
    Operation *yield = loop.getBody()->getTerminator();
    for (unsigned i = 0, e = loop.getNumResults(); i < e; ++i)
      add({loop.getRegionIterArgs()[i], loop.getResult(i)},
          {&loop.getInitArgsMutable()[i], &yield->getOpOperand(i)});
  } else if (auto loop = dyn_cast<scf::WhileOp>(op)) {
    Operation *yield = loop.getYieldOp();
    Operation *condition = loop.getConditionOp();
    for (unsigned i = 0, e = loop.getInits().size(); i < e; ++i)
      add({loop.getBeforeArguments()[i]},
          {&loop->getOpOperand(i), &yield->getOpOperand(i)});
    // The condition's operand 0 is the condition itself.
    for (unsigned i = 0, e = loop.getNumResults(); i < e; ++i)
      add({loop.getAfterArguments()[i], loop.getResult(i)},
          {&condition->getOpOperand(i + 1)});
  } else if (auto branch = dyn_cast<scf::IfOp>(op)) {
    if (branch.getNumResults() == 0)
      return carried;
    Operation *thenYield = branch.thenYield();
    Operation *elseYield = branch.elseYield();
    for (unsigned i = 0, e = branch.getNumResults(); i < e; ++i)
      add({branch.getResult(i)},
          {&thenYield->getOpOperand(i), &elseYield->getOpOperand(i)});
  } else if (auto switchOp = dyn_cast<scf::IndexSwitchOp>(op)) {
    for (unsigned i = 0, e = switchOp.getNumResults(); i < e; ++i) {
      SmallVector<OpOperand *, 2> yields;
      for (Region &region : switchOp->getRegions())
        yields.push_back(&region.front().getTerminator()->getOpOperand(i));
      add({switchOp.getResult(i)}, yields);
    }
  }
  return carried;
}

Value polymesh::getShardingSource(BlockArgument arg) {
  Operation *op = arg.getOwner()->getParentOp();
  if (!op || !isTensorControlFlow(op))
    return {};
  if (auto loop = dyn_cast<scf::WhileOp>(op);
      loop && arg.getOwner() == loop.getBeforeBody())
    return loop.getInits()[arg.getArgNumber()];
  for (CarriedValue &value : getCarriedValues(op))
    if (llvm::is_contained(value.owners, Value(arg)))
      for (Value owner : value.owners)
        if (isa<OpResult>(owner))
          return owner;
  return {};
}
