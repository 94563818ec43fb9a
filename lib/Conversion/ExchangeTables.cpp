//===- ExchangeTables.cpp - Plan tables shared by the lowerings ----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "ExchangeTables.h"

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Runtime/PolymeshRuntime.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace polymesh;
using namespace polymesh::conversion;

PlanTableBuilder::PlanTableBuilder(ModuleOp module) : module(module) {
  for (auto function : module.getOps<func::FuncOp>()) {
    auto partitionOf = function->getAttrOfType<StringAttr>(
        PolymeshDialect::kPartitionOfAttrName);
    auto ids = function->getAttrOfType<DenseI64ArrayAttr>(
        PolymeshDialect::kDevicesAttrName);
    if (!partitionOf || !ids)
      continue;
    std::vector<int64_t> &all = devices[partitionOf.getValue()];
    all.insert(all.end(), ids.asArrayRef().begin(), ids.asArrayRef().end());
  }
  for (auto &entry : devices) {
    llvm::sort(entry.second);
    entry.second.erase(std::unique(entry.second.begin(), entry.second.end()),
                       entry.second.end());
  }
}

const std::vector<int64_t> &PlanTableBuilder::devicesOf(Operation *op) {
  auto function = op->getParentOfType<func::FuncOp>();
  auto partitionOf = function->getAttrOfType<StringAttr>(
      PolymeshDialect::kPartitionOfAttrName);
  return devices[partitionOf.getValue()];
}

MemRefType PlanTableBuilder::globalType(const std::string &name) {
  return cast<MemRefType>(
      module.lookupSymbol<memref::GlobalOp>(name).getType());
}

std::string PlanTableBuilder::addGlobal(StringRef name, ArrayRef<int64_t> shape,
                                        ArrayRef<int64_t> values) {
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  auto type = MemRefType::get(shape, builder.getI64Type());
  auto tensorType = RankedTensorType::get(shape, builder.getI64Type());
  auto global = memref::GlobalOp::create(
      builder, module.getLoc(), name, builder.getStringAttr("private"), type,
      DenseElementsAttr::get(tensorType, values), /*constant=*/true,
      /*alignment=*/IntegerAttr());
  symbols.getSymbolTable(module).insert(global);
  return global.getSymName().str();
}

std::optional<int32_t> polymesh::conversion::runtimeSumDtype(Type element) {
  if (element.isF32())
    return POLYMESH_RT_F32;
  if (element.isF64())
    return POLYMESH_RT_F64;
  if (element.isF16())
    return POLYMESH_RT_F16;
  if (element.isBF16())
    return POLYMESH_RT_BF16;
  if (element.isInteger(32))
    return POLYMESH_RT_I32;
  if (element.isInteger(64))
    return POLYMESH_RT_I64;
  if (element.isInteger(8))
    return POLYMESH_RT_I8;
  return std::nullopt;
}

std::optional<int32_t> polymesh::conversion::ncclSumDtype(Type element) {
  // ncclDataType_t (nccl.h); two's complement sums are the same for signed
  // and unsigned integers.
  if (element.isF32())
    return 7; // ncclFloat32
  if (element.isF64())
    return 8; // ncclFloat64
  if (element.isF16())
    return 6; // ncclFloat16
  if (element.isBF16())
    return 9; // ncclBfloat16
  if (element.isInteger(32))
    return 2; // ncclInt32
  if (element.isInteger(64))
    return 4; // ncclInt64
  if (element.isInteger(8))
    return 0; // ncclInt8
  return std::nullopt;
}

LLVM::LLVMFuncOp polymesh::conversion::declareFunction(ModuleOp module,
                                                       StringRef name,
                                                       Type result,
                                                       ArrayRef<Type> args) {
  if (auto existing = module.lookupSymbol<LLVM::LLVMFuncOp>(name))
    return existing;
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  auto function =
      LLVM::LLVMFuncOp::create(builder, module.getLoc(), name,
                               LLVM::LLVMFunctionType::get(result, args));
  return function;
}

FailureOr<PlanTables *> PlanTableBuilder::tablesFor(ExchangeOp op) {
  std::string planName = op.getPlan().str();
  if (auto it = plans.find(planName); it != plans.end())
    return &it->second;
  TransferOp transfer = lookupExchangePlan(symbols, op);
  if (!transfer)
    return op.emitError() << "plan " << op.getPlanAttr()
                          << " is not a planned transfer";
  auto function = op->getParentOfType<func::FuncOp>();
  if (!function || !function->hasAttr(PolymeshDialect::kPartitionOfAttrName))
    return op.emitError() << "is not inside a function made by "
                             "--polymesh-partition";
  const std::vector<int64_t> &devices = devicesOf(op);

  auto type = transfer.getResult().getType();
  auto emit = [&]() { return transfer.emitError(); };
  MeshAttr sourceMesh =
      lookupMesh(symbols, transfer, transfer.getSource().getMeshName());
  MeshAttr destinationMesh =
      lookupMesh(symbols, transfer, transfer.getDestination().getMeshName());
  if (!sourceMesh || !destinationMesh)
    return transfer.emitError() << "refers to an unknown mesh";
  FailureOr<planner::TensorLayout> source =
      toTensorLayout(emit, transfer.getSource(), sourceMesh, type);
  FailureOr<planner::TensorLayout> destination =
      toTensorLayout(emit, transfer.getDestination(), destinationMesh, type);
  if (failed(source) || failed(destination))
    return failure();
  planner::TransferPlan plan = toPlannerPlan(transfer, *source, *destination);
  // Collective sums need an element type both backends add (i1, i16 and
  // the rest keep send/recv with generated additions).
  planner::ScheduleOptions options;
  options.reductions = runtimeSumDtype(type.getElementType()).has_value() &&
                       ncclSumDtype(type.getElementType()).has_value();
  absl::StatusOr<planner::DeviceSchedule> schedule =
      planner::scheduleForDevices(plan, *source, *destination, devices,
                                  options);
  if (!schedule.ok())
    return op.emitError() << "cannot schedule plan " << op.getPlanAttr() << ": "
                          << std::string(schedule.status().message());

  PlanTables &tables = plans[planName];
  tables.schedule = std::move(*schedule);
  const planner::DeviceSchedule &s = tables.schedule;
  int64_t numDevices = devices.size();
  int64_t outer = s.outerDims;
  int64_t copyColumns = kFixedCopyColumns + 3 * outer;

  std::vector<int64_t> copies, comms, ranges, members;
  auto addCopies = [&](const std::vector<planner::CopyRow> &rows) {
    for (const planner::CopyRow &row : rows) {
      tables.hasAccumulate |= row.kind == planner::CopyKind::Accumulate;
      tables.hasZero |= row.kind == planner::CopyKind::Zero;
      copies.insert(copies.end(),
                    {static_cast<int64_t>(row.kind),
                     static_cast<int64_t>(row.srcSpace), row.srcOffset,
                     static_cast<int64_t>(row.dstSpace), row.dstOffset,
                     row.runBytes});
      copies.insert(copies.end(), row.counts.begin(), row.counts.end());
      copies.insert(copies.end(), row.srcStrides.begin(), row.srcStrides.end());
      copies.insert(copies.end(), row.dstStrides.begin(), row.dstStrides.end());
    }
  };
  for (const planner::Segment &segment : s.segments) {
    bool sendRecv = segment.method == planner::SegmentMethod::SendRecv;
    std::vector<int64_t> groupBegin;
    for (const std::vector<int64_t> &group : segment.groups) {
      groupBegin.push_back(members.size());
      members.insert(members.end(), group.begin(), group.end());
    }
    for (int64_t p = 0; p < numDevices; ++p) {
      const planner::DeviceSegment &mine = segment.perDevice[p];
      int64_t range[kRangeColumns];
      llvm::ArrayRef<int64_t> group;
      range[kMembersBegin] = range[kMembersEnd] = 0;
      if (mine.group >= 0) {
        group = segment.groups[mine.group];
        range[kMembersBegin] = groupBegin[mine.group];
        range[kMembersEnd] = range[kMembersBegin] + group.size();
      }
      range[kBeforeBegin] = copies.size() / copyColumns;
      addCopies(mine.before);
      range[kBeforeEnd] = copies.size() / copyColumns;
      range[kCommBegin] = comms.size() / kCommColumns;
      int64_t packed = range[kBeforeBegin];
      for (const planner::CommRow &row : mine.comm) {
        int64_t rank;
        if (isCollective(segment.method))
          rank = llvm::find(group, row.peer) - group.begin();
        else
          rank = llvm::lower_bound(devices, row.peer) - devices.begin();
        // Pack ranges mean something in send/recv segments only (0, 0
        // elsewhere).
        int64_t packsBegin = sendRecv ? packed : 0;
        if (sendRecv)
          packed = std::max(packed, range[kBeforeBegin] + row.packsBefore);
        comms.insert(comms.end(), {static_cast<int64_t>(row.kind), row.peer,
                                   row.stagingOffset, row.bytes, rank,
                                   static_cast<int64_t>(row.space), packsBegin,
                                   sendRecv ? packed : 0});
      }
      range[kCommEnd] = comms.size() / kCommColumns;
      range[kPackedEnd] = packed;
      range[kAfterBegin] = copies.size() / copyColumns;
      addCopies(mine.after);
      range[kAfterEnd] = copies.size() / copyColumns;
      ranges.insert(ranges.end(), range, range + kRangeColumns);
    }
  }
  std::string prefix = "__polymesh_" + planName;
  int64_t numCopyRows = copies.size() / copyColumns;
  int64_t numCommRows = comms.size() / kCommColumns;
  if (numCopyRows)
    tables.copies =
        addGlobal(prefix + "_copies", {numCopyRows, copyColumns}, copies);
  if (numCommRows)
    tables.comms =
        addGlobal(prefix + "_comms", {numCommRows, kCommColumns}, comms);
  tables.ranges = addGlobal(
      prefix + "_ranges",
      {static_cast<int64_t>(s.segments.size()) * numDevices, kRangeColumns},
      ranges);
  tables.staging = addGlobal(prefix + "_staging", {numDevices}, s.stagingBytes);
  if (!members.empty())
    tables.members = addGlobal(prefix + "_members",
                               {static_cast<int64_t>(members.size())}, members);
  return &tables;
}

/// Emits code with a builder positioned inside one exchange's lowering.
LogicalResult
polymesh::conversion::finishPartitionedModule(ModuleOp module, StringRef target,
                                              bool readOnlyArguments) {
  // Plans, meshes and sharding attributes have served their purpose; what
  // remains is ordinary host code.
  SmallVector<Operation *> erase;
  for (Operation &op : *module.getBody()) {
    if (isa<MeshOp>(op))
      erase.push_back(&op);
    if (auto function = dyn_cast<func::FuncOp>(op)) {
      if (function->hasAttr(PolymeshDialect::kPlanAttrName)) {
        erase.push_back(function);
        continue;
      }
      if (readOnlyArguments &&
          function->hasAttr(PolymeshDialect::kPartitionOfAttrName)) {
        // Inputs are the caller's tiles: bufferization must not write them.
        for (unsigned i = 0, e = function.getNumArguments(); i < e; ++i)
          if (isa<TensorType>(function.getArgument(i).getType()))
            function.setArgAttr(i, "bufferization.writable",
                                BoolAttr::get(module.getContext(), false));
      }
    }
  }
  for (Operation *op : erase)
    op->erase();
  WalkResult leftover = module.walk([&](Operation *op) {
    if (isa_and_nonnull<PolymeshDialect>(op->getDialect())) {
      op->emitError() << "cannot be lowered to " << target
                      << "; run --polymesh-partition first";
      return WalkResult::interrupt();
    }
    SmallVector<StringAttr> names;
    for (NamedAttribute attr : op->getDiscardableAttrs())
      if (attr.getName().getValue().starts_with("polymesh."))
        names.push_back(attr.getName());
    for (StringAttr name : names)
      op->removeDiscardableAttr(name);
    if (auto function = dyn_cast<FunctionOpInterface>(op)) {
      for (unsigned i = 0, e = function.getNumResults(); i < e; ++i)
        function.removeResultAttr(
            i,
            StringAttr::get(op->getContext(), PolymeshDialect::kLeafAttrName));
      for (unsigned i = 0, e = function.getNumArguments(); i < e; ++i)
        function.removeArgAttr(
            i, StringAttr::get(op->getContext(),
                               PolymeshDialect::kShardingAttrName));
    }
    return WalkResult::advance();
  });
  return failure(leftover.wasInterrupted());
}
