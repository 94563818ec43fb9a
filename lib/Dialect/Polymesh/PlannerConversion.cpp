//===- PlannerConversion.cpp - Attributes to planner types ----------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"

using namespace mlir;
using namespace polymesh;

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
                                              MeshAttr mesh) {
  planner::Sharding result;
  for (DimShardingAttr dim : sharding.getDims()) {
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
      toPlannerMesh(mesh), toPlannerSharding(sharding, mesh),
      std::vector<int64_t>(type.getShape().begin(), type.getShape().end()));
  if (!layout.ok())
    return emitError() << std::string(layout.status().message());
  return std::move(*layout);
}
