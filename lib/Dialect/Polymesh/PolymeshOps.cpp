//===- PolymeshOps.cpp - Polymesh operations ------------------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PolymeshOps.h"

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
    return op->emitOpError() << "refers to unknown mesh "
                             << sharding.getMeshName()
                             << "; expected a polymesh.mesh symbol";
  return sharding.verifyFor([&]() { return op->emitOpError(); }, mesh, type);
}

LogicalResult verifyShardingRank(Operation *op, ShardingAttr sharding,
                                 RankedTensorType type) {
  if (static_cast<int64_t>(sharding.getDims().size()) != type.getRank())
    return op->emitOpError()
           << "sharding has " << sharding.getDims().size()
           << " dimension shardings but the tensor type " << type
           << " has rank " << type.getRank();
  return success();
}
} // namespace

LogicalResult ShardingConstraintOp::verify() {
  return verifyShardingRank(*this, getSharding(), getResult().getType());
}

LogicalResult ShardingConstraintOp::verifySymbolUses(
    SymbolTableCollection &symbolTable) {
  return verifyShardingSymbolUse(*this, getSharding(), getResult().getType(),
                                 symbolTable);
}

LogicalResult ReshardOp::verify() {
  return verifyShardingRank(*this, getSharding(), getResult().getType());
}

LogicalResult ReshardOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyShardingSymbolUse(*this, getSharding(), getResult().getType(),
                                 symbolTable);
}

#define GET_OP_CLASSES
#include "polymesh/Dialect/Polymesh/PolymeshOps.cpp.inc"
