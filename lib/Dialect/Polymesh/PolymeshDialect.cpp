//===- PolymeshDialect.cpp - Polymesh dialect and its attributes ----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace polymesh;

#include "polymesh/Dialect/Polymesh/PolymeshDialect.cpp.inc"

void PolymeshDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "polymesh/Dialect/Polymesh/PolymeshOps.cpp.inc"
      >();
}

bool PolymeshDialect::isVerifiedSharding(Attribute sharding, Attribute mesh,
                                         Type type) {
  llvm::sys::SmartScopedReader<true> lock(verifiedMutex);
  return verifiedShardings.contains({sharding.getAsOpaquePointer(),
                                     mesh.getAsOpaquePointer(),
                                     type.getAsOpaquePointer()});
}

void PolymeshDialect::markVerifiedSharding(Attribute sharding, Attribute mesh,
                                           Type type) {
  llvm::sys::SmartScopedWriter<true> lock(verifiedMutex);
  verifiedShardings.insert({sharding.getAsOpaquePointer(),
                            mesh.getAsOpaquePointer(),
                            type.getAsOpaquePointer()});
}

namespace {
/// Verifies a `polymesh.sharding` value against the value's type; `what`
/// names the value in messages ("result #0", "argument #1").
LogicalResult verifyShardingFor(Operation *op, Attribute attr, Type type,
                                const Twine &what) {
  auto sharding = dyn_cast<ShardingAttr>(attr);
  if (!sharding)
    return op->emitError() << "'" << PolymeshDialect::kShardingAttrName
                           << "' of " << what
                           << " must be a #polymesh.sharding, got " << attr;
  MeshAttr mesh = lookupMesh(op, sharding.getMeshName());
  if (!mesh)
    return op->emitError() << "sharding of " << what
                           << " refers to unknown mesh "
                           << sharding.getMeshName()
                           << "; expected a polymesh.mesh symbol";
  auto *dialect = sharding.getContext()->getLoadedDialect<PolymeshDialect>();
  if (dialect->isVerifiedSharding(sharding, mesh, type))
    return success();
  if (failed(sharding.verifyFor(
          [&]() {
            InFlightDiagnostic diag = op->emitError();
            diag << what << ": ";
            return diag;
          },
          mesh, type)))
    return failure();
  dialect->markVerifiedSharding(sharding, mesh, type);
  return success();
}

/// Names a function result for messages, with its leaf path if it has one.
std::string describeResult(Operation *op, unsigned index) {
  std::string text = "result #" + std::to_string(index);
  if (auto function = dyn_cast<FunctionOpInterface>(op))
    if (auto leaf = function.getResultAttrOfType<StringAttr>(
            index, PolymeshDialect::kLeafAttrName))
      text += " (leaf \"" + leaf.getValue().str() + "\")";
  return text;
}

LogicalResult verifyLeafAttr(Operation *op, NamedAttribute attr,
                             const Twine &what) {
  if (!isa<StringAttr>(attr.getValue()))
    return op->emitError() << "'" << PolymeshDialect::kLeafAttrName << "' of "
                           << what << " must be a string, got "
                           << attr.getValue();
  return success();
}

/// Common checks for argument and result attributes of functions.
LogicalResult verifyValueAttr(Operation *op, NamedAttribute attr, Type type,
                              const Twine &what) {
  StringRef name = attr.getName().getValue();
  if (name == PolymeshDialect::kShardingAttrName)
    return verifyShardingFor(op, attr.getValue(), type, what);
  if (name == PolymeshDialect::kLeafAttrName)
    return verifyLeafAttr(op, attr, what);
  return op->emitError() << "unknown attribute '" << name << "' on " << what
                         << "; expected '" << PolymeshDialect::kShardingAttrName
                         << "' or '" << PolymeshDialect::kLeafAttrName << "'";
}
} // namespace

LogicalResult PolymeshDialect::verifyOperationAttribute(Operation *op,
                                                        NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kAmbientMeshAttrName) {
    if (!isa<ModuleOp>(op) && !isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << kAmbientMeshAttrName
                             << "' belongs on a function or a module";
    auto meshName = dyn_cast<FlatSymbolRefAttr>(attr.getValue());
    if (!meshName)
      return op->emitError()
             << "'" << kAmbientMeshAttrName
             << "' must be a flat symbol reference to a polymesh.mesh, got "
             << attr.getValue();
    if (!lookupMesh(op, meshName))
      return op->emitError()
             << "ambient mesh " << meshName << " does not name a polymesh.mesh";
    return success();
  }
  if (name == kShardingAttrName) {
    if (isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << kShardingAttrName
                             << "' on a function belongs on its arguments "
                                "and results";
    if (auto list = dyn_cast<ArrayAttr>(attr.getValue())) {
      if (list.size() != op->getNumResults())
        return op->emitError() << "'" << kShardingAttrName << "' lists "
                               << list.size() << " shardings but the op has "
                               << op->getNumResults() << " results";
      for (auto [index, element] : llvm::enumerate(list)) {
        // A unit entry stands for a result that is not a tensor (an index
        // carried by a loop beside tensors).
        if (isa<UnitAttr>(element) &&
            !isa<TensorType>(op->getResult(index).getType()))
          continue;
        if (failed(verifyShardingFor(op, element,
                                     op->getResult(index).getType(),
                                     "result #" + Twine(index))))
          return failure();
      }
      return success();
    }
    if (op->getNumResults() != 1)
      return op->emitError() << "a single '" << kShardingAttrName
                             << "' needs an op with one result; this op has "
                             << op->getNumResults()
                             << " (use an array, one sharding per result)";
    return verifyShardingFor(op, attr.getValue(), op->getResult(0).getType(),
                             "result #0");
  }
  if (name == kLeafAttrName)
    return op->emitError() << "'" << kLeafAttrName
                           << "' belongs on function results";
  if (name == kGroupBufferAttrName) {
    if (op->getName().getStringRef() != "llvm.alloca" ||
        !isa<UnitAttr>(attr.getValue()))
      return op->emitError()
             << "'" << name << "' is a unit attribute of an llvm.alloca";
    return success();
  }
  if (name == kMeshesAttrName) {
    if (!isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << name << "' belongs on a function";
    auto meshes = dyn_cast<ArrayAttr>(attr.getValue());
    if (!meshes || !llvm::all_of(meshes, llvm::IsaPred<FlatSymbolRefAttr>))
      return op->emitError()
             << "'" << name << "' must be an array of mesh symbols";
    return success();
  }
  if (name == kPartitionOfAttrName || name == kDevicesAttrName ||
      name == kPlanAttrName) {
    if (!isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << name << "' belongs on a function";
    bool wellTyped =
        name == kPartitionOfAttrName ? isa<StringAttr>(attr.getValue())
        : name == kDevicesAttrName   ? isa<DenseI64ArrayAttr>(attr.getValue())
                                     : isa<UnitAttr>(attr.getValue());
    if (!wellTyped)
      return op->emitError()
             << "'" << name << "' must be "
             << (name == kPartitionOfAttrName ? "a string"
                 : name == kDevicesAttrName ? "an array<i64: ...> of device ids"
                                            : "a unit attribute");
    return success();
  }
  return op->emitError() << "unknown polymesh attribute '" << name << "'";
}

LogicalResult PolymeshDialect::verifyRegionArgAttribute(Operation *op,
                                                        unsigned regionIndex,
                                                        unsigned argIndex,
                                                        NamedAttribute attr) {
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return op->emitError() << "polymesh argument attributes belong on "
                              "function arguments";
  return verifyValueAttr(op, attr, function.getArgumentTypes()[argIndex],
                         "argument #" + Twine(argIndex));
}

LogicalResult PolymeshDialect::verifyRegionResultAttribute(
    Operation *op, unsigned regionIndex, unsigned resultIndex,
    NamedAttribute attr) {
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return op->emitError() << "polymesh result attributes belong on "
                              "function results";
  return verifyValueAttr(op, attr, function.getResultTypes()[resultIndex],
                         describeResult(op, resultIndex));
}
