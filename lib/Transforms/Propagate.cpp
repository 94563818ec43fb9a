//===- Propagate.cpp - Multi-mesh sharding propagation --------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Gives every tensor value and function result a sharding while keeping the
// mesh each value was placed on. See the pass description in Passes.td and
// docs/propagation.md for the rules; the comments here say why.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Support/Saturating.h"
#include "polymesh/Transforms/ControlFlow.h"
#include "polymesh/Transforms/InlineCalls.h"
#include "polymesh/Transforms/Passes.h"
#include "polymesh/Transforms/ShardingRules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

#include <deque>
#include <limits>
#include <map>
#include <set>

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHPROPAGATE
#include "polymesh/Transforms/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;

namespace {

ShardingAttr extendOpen(ShardingAttr known, ShardingAttr derived);

std::string toText(Attribute attr) {
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return text;
}

int64_t elementBytes(Type type) {
  // Unmovable types are refused by --polymesh-plan; for pricing, their
  // padded size is as good as any.
  Type element = cast<ShapedType>(type).getElementType();
  if (int64_t bytes = elementByteSize(element))
    return bytes;
  if (element.isIntOrFloat())
    return llvm::PowerOf2Ceil(
        llvm::divideCeil(element.getIntOrFloatBitWidth(), 8));
  return 8;
}

/// `current`, or the user's `written` sharding where it is the same one
/// spelled differently (a maximal `[]`), so annotations print as written.
/// `sharding` without user priorities: what propagation compares and
/// derives (priorities live beside it, per dimension).
ShardingAttr withoutPriorities(ShardingAttr sharding) {
  if (!sharding || llvm::none_of(sharding.getDims(), [](DimShardingAttr dim) {
        return dim.getPriority() >= 0;
      }))
    return sharding;
  SmallVector<DimShardingAttr> dims;
  for (DimShardingAttr dim : sharding.getDims())
    dims.push_back(dim.withoutPriority());
  return ShardingAttr::get(sharding.getContext(), sharding.getMeshName(), dims,
                           sharding.getReplicated(), sharding.getUnreduced());
}

ShardingAttr asWritten(ShardingAttr current, ShardingAttr written) {
  if (written && current && written != current &&
      withoutPriorities(written.withRank(current.getDims().size())) == current)
    return written;
  return current;
}

/// A sharding with its unreduced axes dropped: what a value becomes once
/// its partial sums are reduced.
ShardingAttr withoutUnreduced(ShardingAttr sharding) {
  return ShardingAttr::get(sharding.getContext(), sharding.getMeshName(),
                           sharding.getDims(), sharding.getReplicated(), {});
}

/// The priority of a dimension that no user priority reaches: below every
/// written one.
constexpr int64_t kUnprioritized = std::numeric_limits<int64_t>::max();

/// One way to place an op: a mesh and the axes of every factor.
struct Placement {
  FlatSymbolRefAttr meshName;
  MeshAttr mesh;
  FactorAxes axes;
  /// Per factor, the best user priority among the values it came from.
  SmallVector<int64_t> factorPriorities;
  SmallVector<ShardingAttr> derived;
  /// The best priority among the dimensions this placement moves (reshards);
  /// kUnprioritized when it moves none that a priority reached.
  int64_t movedPriority = kUnprioritized;
  int64_t cost = 0;
  int64_t shards = 1;
  std::string text;
};

/// What one value (or several that agree) proposes for an op's factors.
struct Proposal {
  FactorAxes axes;
  /// Per factor: the priority of its axes.
  SmallVector<int64_t> priorities;
};

bool isControlFlow(Operation *op) { return isTensorControlFlow(op); }

/// Hashes ops and values by address. Both are allocated in program order,
/// so program neighbours land in neighbouring buckets and a sweep walks the
/// tables nearly in order; the default hash scatters them, and at a million
/// leaves nearly every lookup missed the caches.
struct AddressOrderOpInfo : llvm::DenseMapInfo<Operation *> {
  static unsigned getHashValue(const Operation *op) {
    return static_cast<unsigned>(reinterpret_cast<uintptr_t>(op) >> 4);
  }
};
struct AddressOrderValueInfo : llvm::DenseMapInfo<Value> {
  static unsigned getHashValue(Value value) {
    return static_cast<unsigned>(
        reinterpret_cast<uintptr_t>(value.getAsOpaquePointer()) >> 4);
  }
};

class FunctionPropagator {
public:
  FunctionPropagator(FunctionOpInterface function, ModuleOp module,
                     SymbolTableCollection &symbols)
      : function(function), module(module), symbols(symbols) {}

  LogicalResult run();

private:
  MeshAttr getMesh(FlatSymbolRefAttr name) {
    auto it = meshes.find(name.getAttr());
    if (it != meshes.end())
      return it->second;
    MeshAttr mesh = lookupMesh(symbols, module, name);
    meshes[name.getAttr()] = mesh;
    return mesh;
  }

  bool isTracked(Value value) const {
    return isa<RankedTensorType>(value.getType());
  }
  ShardingAttr lookup(Value value) const { return known.lookup(value); }
  /// Places an unplaced `value` replicated on `meshName`.
  bool placeReplicated(Value value, FlatSymbolRefAttr meshName) {
    return assign(value,
                  ShardingAttr::getReplicated(
                      value.getContext(), meshName,
                      cast<RankedTensorType>(value.getType()).getRank()));
  }
  bool assign(Value value, ShardingAttr sharding) {
    // Rules read one dimension sharding per tensor dimension; priorities
    // are kept apart (dimPriorities).
    sharding = withoutPriorities(
        sharding.withRank(cast<RankedTensorType>(value.getType()).getRank()));
    auto [it, inserted] = known.try_emplace(value, sharding);
    return inserted;
  }
  /// Places `value` as the user wrote `written`, with its priorities.
  void seedAnnotation(Value value, ShardingAttr written);
  /// Places an unplaced `value` with per-dimension `priorities`.
  bool assignWithPriorities(Value value, ShardingAttr sharding,
                            ArrayRef<int64_t> priorities) {
    if (!assign(value, sharding))
      return false;
    if (usesPriorities &&
        llvm::any_of(priorities, [](int64_t p) { return p != kUnprioritized; }))
      dimPriorities[value].assign(priorities.begin(), priorities.end());
    return true;
  }
  /// The user priority that reached dimension `dim` of `value`.
  int64_t priorityOf(Value value, unsigned dim) const {
    auto it = dimPriorities.find(value);
    if (it == dimPriorities.end() || dim >= it->second.size())
      return kUnprioritized;
    return it->second[dim];
  }
  /// Whether all of `value`'s axes are on dimensions of a priority that
  /// the current stage has not reached: it is no source yet (nor is it
  /// placed again). A value with some visible axes is a source through
  /// those dimensions only (proposalOf).
  bool isHidden(Value value) const {
    if (!usesPriorities || stage == kUnprioritized)
      return false;
    ShardingAttr sharding = lookup(value);
    bool masked = false, visible = false;
    for (unsigned d = 0, e = sharding.getDims().size(); d < e; ++d) {
      if (sharding.getDims()[d].getAxes().empty())
        continue;
      int64_t priority = priorityOf(value, d);
      if (priority != kUnprioritized && priority > stage)
        masked = true;
      else
        visible = true;
    }
    return masked && !visible;
  }
  /// `value`'s proposal for `rule`'s factors at the current stage: its
  /// dimensions of a priority not yet reached propose nothing.
  Proposal proposalOf(const FactorRule &rule, unsigned index,
                      ShardingAttr sharding, MeshAttr mesh);
  /// Per dimension of value `index`, the best priority among the factors
  /// that shard it.
  SmallVector<int64_t> derivedPriorities(const FactorRule &rule, unsigned index,
                                         const FactorAxes &axes,
                                         ArrayRef<int64_t> factorPriorities);

  /// `op`'s rule as shared with ops of its signature: its tensorValues
  /// are another op's. Enough to ask what kind of rule it is.
  std::optional<FactorRule> &sharedRuleOf(Operation *op) {
    auto [it, inserted] = ruleIndex.try_emplace(op, 0);
    if (inserted)
      it->second = sharedRuleIndex(op);
    return rules[it->second];
  }
  /// The op's rule. Ops of one signature (name, operand and result types,
  /// properties) share one rule, computed once. Its values are refreshed on
  /// every call, so a caller must not hold the reference across another
  /// call: inserted reshards replace operands, and other ops share it.
  const std::optional<FactorRule> &ruleOf(Operation *op) {
    std::optional<FactorRule> &rule = sharedRuleOf(op);
    if (rule) {
      SmallVector<Value> &values = rule->tensorValues;
      values.clear();
      for (Value operand : op->getOperands())
        if (isTracked(operand))
          values.push_back(operand);
      if (isa<linalg::GenericOp>(op))
        for (AlignedCapture &capture : getAlignedCaptures(op))
          values.push_back(capture.value);
      for (Value result : op->getResults())
        if (isTracked(result))
          values.push_back(result);
    }
    return rule;
  }

  SmallVector<CarriedValue> carriedSlots(Operation *op);
  bool propagateSlots(Operation *op);
  bool resolveSlots(Operation *op);
  void reshardFeeders(Operation *op);
  void refineSlots();
  void hoistInvariantReshards();
  std::pair<ShardingAttr, int64_t>
  cheapestFor(ArrayRef<Value> members, ArrayRef<ShardingAttr> candidates);
  void reshardCaptured(Operation *op);
  bool isFunctionTerminator(Operation *op) {
    return op->hasTrait<OpTrait::IsTerminator>() &&
           op->getParentOp() == function.getOperation();
  }

  void cloneSharedConstants();
  void seed();
  void sweep(SmallVectorImpl<Operation *> &active);
  /// Ops of Shardy's first op priority: every value keeps its dimensions
  /// (elementwise ops, constraints, barriers, groups).
  bool isPassThrough(Operation *op);
  bool propagateOnce(Operation *op);
  bool propagateBarrier(PropagationBarrierOp barrier);
  bool propagateGroup(ShardingGroupOp group);
  bool placeBlockedBarriers();
  bool resolveGroups();
  bool propagateElementwise(Operation *op, const FactorRule &rule);
  bool resolve(Operation *op);
  std::optional<SmallVector<std::pair<FlatSymbolRefAttr, Proposal>>>
  candidatesFor(const FactorRule &rule);
  bool scorePlacement(Operation *op, const FactorRule &rule,
                      Placement &placement);
  bool resolveWithoutRule(Operation *op);
  bool applyAmbient(bool &failedOut);
  FlatSymbolRefAttr meshOfReshardUses(Value value);
  FlatSymbolRefAttr meshOfScalarReaders(Value value);
  void splitConcatLeaves();
  LogicalResult finalize();
  bool finalizePlacement(Operation *op);
  void placeOperand(OpOperand &operand, ShardingAttr required);
  LogicalResult recordShardings(Operation *op, StringAttr shardingName);
  void finalizeArguments();
  void finalizeResults(Operation *terminator);

  std::optional<Placement> makePlacement(const FactorRule &rule,
                                         FlatSymbolRefAttr meshName,
                                         FactorAxes axes);
  int64_t moveCost(ShardingAttr from, ShardingAttr to, Type type);
  bool isDeviceEquivalent(ShardingAttr a, ShardingAttr b, Type type);
  void extendValue(Value value, ShardingAttr extended);
  void applyPlacement(Operation *op, ArrayRef<Value> values,
                      unsigned numOperands, ArrayRef<ShardingAttr> targets,
                      bool allowExtension,
                      ArrayRef<SmallVector<int64_t>> priorities = {});
  Value insertReshardBefore(Operation *user, Value value,
                            ShardingAttr sharding);
  void insertReshardAfter(Value result, ShardingAttr sharding);

  /// Index into `rules` of the rule for `op`'s signature.
  unsigned sharedRuleIndex(Operation *op) {
    SmallVector<const void *, 8> key;
    key.push_back(op->getName().getAsOpaquePointer());
    for (Type type : op->getOperandTypes())
      key.push_back(type.getAsOpaquePointer());
    key.push_back(nullptr);
    for (Type type : op->getResultTypes())
      key.push_back(type.getAsOpaquePointer());
    // Properties (permutations, dimensions, indexing maps) shape the rule;
    // ops with regions are never shared, their bodies may differ too.
    if (op->getNumRegions() != 0)
      key.push_back(op);
    key.push_back(op->getPropertiesAsAttribute().getAsOpaquePointer());
    for (NamedAttribute attr : op->getAttrs())
      if (!attr.getName().getValue().starts_with("polymesh."))
        key.push_back(attr.getValue().getAsOpaquePointer());
    auto [it, inserted] = ruleBySignature.try_emplace(
        std::vector<const void *>(key.begin(), key.end()), rules.size());
    if (inserted)
      rules.push_back(getFactorRule(op));
    return it->second;
  }

  /// The function's ops in order, with the ops of control-flow regions
  /// after the op that holds them (other regions hold scalars only);
  /// rebuilt only after ops were inserted.
  ArrayRef<Operation *> bodyOps() {
    if (!opsDirty)
      return opsCache;
    opsCache.clear();
    for (Block &block : function.getFunctionBody())
      appendOps(block);
    opsDirty = false;
    return opsCache;
  }
  void appendOps(Block &block) {
    for (Operation &op : block) {
      opsCache.push_back(&op);
      if (isControlFlow(&op))
        for (Region &region : op.getRegions())
          for (Block &inner : region)
            appendOps(inner);
    }
  }

  FunctionOpInterface function;
  ModuleOp module;
  SymbolTableCollection &symbols;
  llvm::DenseMap<Attribute, MeshAttr> meshes;
  llvm::DenseMap<Value, ShardingAttr, AddressOrderValueInfo> known;
  /// Rules live in a deque (stable references); the maps hold indices.
  llvm::DenseMap<Operation *, unsigned, AddressOrderOpInfo> ruleIndex;
  std::map<std::vector<const void *>, unsigned> ruleBySignature;
  std::deque<std::optional<FactorRule>> rules;
  SmallVector<Operation *> opsCache;
  bool opsDirty = true;
  /// An extended value unsettled ops that the current sweep may not visit.
  bool reopened = false;
  llvm::SmallPtrSet<Operation *, 4> warned;
  /// Ops whose values are all placed and agree; nothing changes them again.
  llvm::DenseSet<Operation *, AddressOrderOpInfo> settled;
  /// The op being placed, for diagnostics raised while pricing it.
  Operation *currentOp = nullptr;
  llvm::SmallPtrSet<Operation *, 4> dynamicReported;
  bool hadError = false;
  /// Ops whose results the user annotated.
  llvm::DenseSet<Operation *, AddressOrderOpInfo> pinnedOps;
  static constexpr int64_t kPinnedPenalty = int64_t(1) << 50;

  /// User priorities, when some annotation of the function writes one: per
  /// placed value, the priority that reached each dimension
  /// (kUnprioritized: none). Propagation runs in stages, one per written
  /// priority, best first; at a stage, dimensions of a worse priority are
  /// not sources yet.
  bool usesPriorities = false;
  SmallVector<int64_t> stages;
  int64_t stage = kUnprioritized;
  llvm::DenseMap<Value, SmallVector<int64_t, 4>, AddressOrderValueInfo>
      dimPriorities;

  /// Members of each sharding group, in program order, and the group's
  /// first op (where its diagnostics point).
  llvm::MapVector<int64_t, SmallVector<Value>> groups;
  llvm::DenseMap<int64_t, Operation *> groupOps;
};

void FunctionPropagator::seedAnnotation(Value value, ShardingAttr written) {
  int64_t rank = cast<RankedTensorType>(value.getType()).getRank();
  ShardingAttr full = written.withRank(rank);
  SmallVector<int64_t> priorities;
  for (DimShardingAttr dim : full.getDims())
    priorities.push_back(usesPriorities ? dim.getEffectivePriority()
                                        : kUnprioritized);
  assignWithPriorities(value, full, priorities);
}

void FunctionPropagator::seed() {
  // Priorities count only where some annotation writes one; otherwise every
  // decision is as if there were none.
  std::set<int64_t> written;
  auto collect = [&](Attribute attr) {
    auto note = [&](ShardingAttr sharding) {
      for (DimShardingAttr dim : sharding.getDims()) {
        written.insert(dim.getEffectivePriority());
        usesPriorities |= dim.getPriority() >= 0;
      }
    };
    if (auto sharding = dyn_cast_or_null<ShardingAttr>(attr))
      note(sharding);
    else if (auto list = dyn_cast_or_null<ArrayAttr>(attr))
      for (Attribute element : list)
        if (auto sharding = dyn_cast<ShardingAttr>(element))
          note(sharding);
  };
  for (unsigned i = 0, e = function.getNumArguments(); i < e; ++i)
    collect(function.getArgAttr(i, PolymeshDialect::kShardingAttrName));
  for (unsigned i = 0, e = function.getNumResults(); i < e; ++i)
    collect(function.getResultAttr(i, PolymeshDialect::kShardingAttrName));
  for (Operation *op : bodyOps()) {
    if (auto constraint = dyn_cast<ShardingConstraintOp>(op))
      collect(constraint.getSharding());
    else if (auto reshard = dyn_cast<ReshardOp>(op))
      collect(reshard.getSharding());
    else
      collect(op->getAttr(PolymeshDialect::kShardingAttrName));
    if (auto group = dyn_cast<ShardingGroupOp>(op)) {
      int64_t id = group.getGroupIdAttr().getInt();
      SmallVector<Value> &members = groups[id];
      groupOps.try_emplace(id, op);
      if (!members.empty() &&
          members.front().getType() != group.getInput().getType()) {
        group.emitError()
            << "sharding group " << id << " has members of types "
            << members.front().getType() << " and "
            << group.getInput().getType()
            << "; the members of a group share one sharding, so they must "
               "have one type";
        hadError = true;
      }
      members.push_back(group.getInput());
    }
  }
  if (hadError)
    return;
  if (usesPriorities)
    stages.assign(written.begin(), written.end());

  for (auto [index, arg] : llvm::enumerate(function.getArguments()))
    if (auto sharding = function.getArgAttrOfType<ShardingAttr>(
            index, PolymeshDialect::kShardingAttrName))
      seedAnnotation(arg, sharding);
  Operation *terminator = nullptr;
  for (Operation *op : bodyOps()) {
    if (auto constraint = dyn_cast<ShardingConstraintOp>(op)) {
      seedAnnotation(constraint.getResult(), constraint.getSharding());
      continue;
    }
    if (auto reshard = dyn_cast<ReshardOp>(op)) {
      seedAnnotation(reshard.getResult(), reshard.getSharding());
      continue;
    }
    // A planned transfer fixes both ends: its result is its destination,
    // and its operand must be its source (finalize moves it there).
    if (auto transfer = dyn_cast<TransferOp>(op)) {
      assign(transfer.getResult(), transfer.getDestination());
      continue;
    }
    if (isFunctionTerminator(op))
      terminator = op;
    Attribute attr = op->getAttr(PolymeshDialect::kShardingAttrName);
    if (auto sharding = dyn_cast_or_null<ShardingAttr>(attr)) {
      seedAnnotation(op->getResult(0), sharding);
    } else if (auto list = dyn_cast_or_null<ArrayAttr>(attr)) {
      for (auto [result, element] : llvm::zip(op->getResults(), list))
        if (auto sharding = dyn_cast<ShardingAttr>(element))
          seedAnnotation(result, sharding);
    }
    if (attr)
      pinnedOps.insert(op);
  }
  if (!terminator)
    return;
  // A declared result sharding places the returned value when nothing else
  // does. A value returned under several declarations takes the smallest by
  // text, so that the order of the results never matters.
  llvm::MapVector<Value, std::pair<std::string, ShardingAttr>> declared;
  for (auto [index, operand] : llvm::enumerate(terminator->getOperands())) {
    auto sharding = function.getResultAttrOfType<ShardingAttr>(
        index, PolymeshDialect::kShardingAttrName);
    if (!sharding || known.count(operand))
      continue;
    std::string text = toText(sharding);
    auto [it, inserted] = declared.try_emplace(operand, text, sharding);
    if (!inserted && text < it->second.first)
      it->second = {text, sharding};
  }
  for (auto &entry : declared)
    seedAnnotation(entry.first, entry.second.second);
}

std::optional<Placement>
FunctionPropagator::makePlacement(const FactorRule &rule,
                                  FlatSymbolRefAttr meshName, FactorAxes axes) {
  MeshAttr mesh = getMesh(meshName);
  if (!mesh)
    return std::nullopt;
  legalizeFactorAxes(rule, axes, mesh);
  Placement placement;
  placement.meshName = meshName;
  placement.mesh = mesh;
  for (unsigned i = 0, e = rule.values.size(); i < e; ++i)
    placement.derived.push_back(deriveSharding(rule, i, axes, meshName, mesh));
  for (const auto &factorAxes : axes)
    for (AxisRefAttr axis : factorAxes)
      placement.shards *= axis.getSizeIn(mesh);
  placement.axes = std::move(axes);
  return placement;
}

/// Merges `from` into `into`, factor by factor: a factor takes the axes of
/// the better (lower) priority; two different proposals of one priority
/// clash.
static void mergeInto(Proposal &into, const Proposal &from, bool &clash) {
  for (unsigned f = 0, e = into.axes.size(); f < e; ++f) {
    const SmallVector<AxisRefAttr> &source = from.axes[f];
    if (source.empty())
      continue;
    SmallVector<AxisRefAttr> &target = into.axes[f];
    if (target.empty() || from.priorities[f] < into.priorities[f]) {
      target = source;
      into.priorities[f] = from.priorities[f];
    } else if (from.priorities[f] == into.priorities[f] && target != source) {
      clash = true;
    }
  }
}

static Proposal emptyProposal(const FactorRule &rule) {
  return {FactorAxes(rule.numFactors()),
          SmallVector<int64_t>(rule.numFactors(), kUnprioritized)};
}

Proposal FunctionPropagator::proposalOf(const FactorRule &rule, unsigned index,
                                        ShardingAttr sharding, MeshAttr mesh) {
  Value value = rule.tensorValues[index];
  const auto &dims = rule.values[index];
  // Dimensions of a priority this stage has not reached propose nothing.
  if (usesPriorities && stage != kUnprioritized) {
    SmallVector<DimShardingAttr> visible(sharding.getDims());
    for (unsigned d = 0; d < visible.size(); ++d)
      if (priorityOf(value, d) != kUnprioritized &&
          priorityOf(value, d) > stage)
        visible[d] = DimShardingAttr::get(sharding.getContext(), {},
                                          /*isClosed=*/true);
    sharding = ShardingAttr::get(sharding.getContext(), sharding.getMeshName(),
                                 visible, sharding.getReplicated(),
                                 sharding.getUnreduced());
  }
  Proposal proposal = emptyProposal(rule);
  proposal.axes = proposeFactorAxes(rule, index, sharding, mesh);
  for (unsigned d = 0; d < dims.size(); ++d) {
    int64_t priority = priorityOf(value, d);
    if (usesPriorities && stage != kUnprioritized && priority > stage)
      continue;
    for (unsigned factor : dims[d])
      proposal.priorities[factor] =
          std::min(proposal.priorities[factor], priority);
  }
  return proposal;
}

SmallVector<int64_t>
FunctionPropagator::derivedPriorities(const FactorRule &rule, unsigned index,
                                      const FactorAxes &axes,
                                      ArrayRef<int64_t> factorPriorities) {
  SmallVector<int64_t> priorities;
  for (const auto &factors : rule.values[index]) {
    int64_t best = kUnprioritized;
    for (unsigned factor : factors)
      if (!axes[factor].empty())
        best = std::min(best, factorPriorities[factor]);
    priorities.push_back(best);
  }
  return priorities;
}

/// `known` extended to `derived`, when they differ only by axes appended to
/// open dimensions that `known`'s replicated axes do not forbid; else null.
ShardingAttr extendOpen(ShardingAttr known, ShardingAttr derived) {
  if (known.getMeshName() != derived.getMeshName() ||
      known.getDims().size() != derived.getDims().size() ||
      known.getUnreduced().size() != derived.getUnreduced().size())
    return {};
  for (AxisRefAttr ref : known.getUnreduced())
    if (!llvm::is_contained(derived.getUnreduced(), ref))
      return {};
  SmallVector<DimShardingAttr> dims;
  bool extended = false;
  for (auto [mine, theirs] : llvm::zip(known.getDims(), derived.getDims())) {
    ArrayRef<AxisRefAttr> have = mine.getAxes(), want = theirs.getAxes();
    if (have == want) {
      dims.push_back(mine);
      continue;
    }
    if (mine.getIsClosed() || want.size() <= have.size() ||
        want.take_front(have.size()) != have)
      return {};
    for (AxisRefAttr added : want.drop_front(have.size()))
      for (AxisRefAttr forbidden : known.getReplicated())
        if (added.getName() == forbidden.getName())
          return {};
    dims.push_back(DimShardingAttr::get(known.getContext(), want,
                                        /*isClosed=*/false));
    extended = true;
  }
  if (!extended)
    return {};
  return ShardingAttr::get(known.getContext(), known.getMeshName(), dims,
                           known.getReplicated(), known.getUnreduced());
}

/// Bytes that must reach devices when a value moves from `from` to `to`:
/// per destination device, its tile minus what it already holds. Partial
/// sums count their whole tile (they must be reduced).
int64_t FunctionPropagator::moveCost(ShardingAttr from, ShardingAttr to,
                                     Type type) {
  if (isSameLayout(from, to))
    return 0;
  auto staticType = cast<RankedTensorType>(type);
  if (!staticType.hasStaticShape()) {
    // Placements are compared by the tiles they move; without a static
    // shape there are none to compare, and none to plan later.
    if (currentOp && dynamicReported.insert(currentOp).second)
      currentOp->emitError()
          << "placing this op needs to move a value of dynamic shape "
          << staticType
          << " between shardings; a static shape is needed to compute its "
             "device tiles";
    hadError = true;
    return 0;
  }
  auto silent = [&]() { return InFlightDiagnostic(); };
  MeshAttr fromMesh = getMesh(from.getMeshName());
  MeshAttr toMesh = getMesh(to.getMeshName());
  FailureOr<planner::TensorLayout> source =
      toTensorLayout(silent, from, fromMesh, staticType);
  FailureOr<planner::TensorLayout> destination =
      toTensorLayout(silent, to, toMesh, staticType);
  if (failed(source) || failed(destination))
    return std::numeric_limits<int32_t>::max();
  llvm::DenseMap<int64_t, int64_t> sourcePosition;
  for (int64_t p = 0, e = source->numDevices(); p < e; ++p)
    sourcePosition[source->mesh().deviceAt(p)] = p;
  bool reduces = !from.getUnreduced().empty() &&
                 !isSameLayout(withoutUnreduced(from), from);
  int64_t elements = 0;
  for (int64_t p = 0, e = destination->numDevices(); p < e; ++p) {
    planner::Box box = destination->boxAtPosition(p);
    int64_t need = box.numElements();
    auto it = sourcePosition.find(destination->mesh().deviceAt(p));
    if (it != sourcePosition.end() && !reduces)
      need -= box.intersect(source->boxAtPosition(it->second)).numElements();
    elements = saturatingAdd(elements, need);
  }
  return saturatingMul(elements, elementBytes(type));
}

bool FunctionPropagator::isDeviceEquivalent(ShardingAttr a, ShardingAttr b,
                                            Type type) {
  if (isSameLayout(a, b))
    return true;
  auto tensorType = cast<RankedTensorType>(type);
  if (!tensorType.hasStaticShape())
    return false;
  auto silent = [&]() { return InFlightDiagnostic(); };
  FailureOr<planner::TensorLayout> first =
      toTensorLayout(silent, a, getMesh(a.getMeshName()), tensorType);
  FailureOr<planner::TensorLayout> second =
      toTensorLayout(silent, b, getMesh(b.getMeshName()), tensorType);
  return succeeded(first) && succeeded(second) &&
         first->isDeviceEquivalent(*second);
}

void FunctionPropagator::extendValue(Value value, ShardingAttr extended) {
  // Ops already settled on the narrower sharding look again.
  known[value] = extended;
  if (Operation *producer = value.getDefiningOp())
    settled.erase(producer);
  for (Operation *user : value.getUsers())
    settled.erase(user);
  reopened = true;
}

Value FunctionPropagator::insertReshardBefore(Operation *user, Value value,
                                              ShardingAttr sharding) {
  OpBuilder builder(user);
  auto reshard = ReshardOp::create(builder, user->getLoc(), value.getType(),
                                   value, sharding);
  assign(reshard.getResult(), sharding);
  opsDirty = true;
  return reshard.getResult();
}

void FunctionPropagator::insertReshardAfter(Value result,
                                            ShardingAttr sharding) {
  OpBuilder builder(result.getContext());
  builder.setInsertionPointAfterValue(result);
  auto reshard = ReshardOp::create(builder, result.getLoc(), result.getType(),
                                   result, sharding);
  result.replaceAllUsesExcept(reshard.getResult(), reshard);
  assign(reshard.getResult(), sharding);
  opsDirty = true;
}

/// Fast path for elementwise rules: when every placed value of the
/// identity kind has one sharding (without partial sums) and every placed
/// scalar-like value is replicated on its mesh, the op is settled and the
/// unplaced values take those shardings. True when it changed anything;
/// leaves `settled` set when the op agrees.
bool FunctionPropagator::propagateElementwise(Operation *op,
                                              const FactorRule &rule) {
  ShardingAttr common;
  for (auto [index, value] : llvm::enumerate(rule.tensorValues)) {
    if (rule.isUnshardable[index])
      continue;
    ShardingAttr sharding = lookup(value);
    if (!sharding)
      continue;
    if (common && sharding != common)
      return false;
    common = sharding;
  }
  if (!common || !common.getUnreduced().empty())
    return false;
  bool changed = false;
  for (auto [index, value] : llvm::enumerate(rule.tensorValues)) {
    ShardingAttr sharding = lookup(value);
    if (!rule.isUnshardable[index]) {
      changed |= assign(value, common);
      continue;
    }
    if (sharding) {
      bool replicatedHere =
          sharding.getMeshName() == common.getMeshName() &&
          sharding.getUnreduced().empty() &&
          llvm::all_of(sharding.getDims(), [](DimShardingAttr dim) {
            return dim.getAxes().empty();
          });
      if (!replicatedHere)
        return false;
      continue;
    }
    changed |= placeReplicated(value, common.getMeshName());
  }
  settled.insert(op);
  return changed;
}

/// Forward and backward step at one op: values that nothing placed yet take
/// the sharding that the op's placed values agree on. Ops whose placed
/// values disagree are left to `resolve`.
bool FunctionPropagator::propagateOnce(Operation *op) {
  if (auto constraint = dyn_cast<ShardingConstraintOp>(op)) {
    // Backward through a constraint: its operand is computed directly in
    // the constrained sharding when nothing else placed it, or extends its
    // open dimensions to it.
    ShardingAttr target = lookup(constraint.getResult());
    ShardingAttr current = lookup(constraint.getInput());
    if (!current)
      return assign(constraint.getInput(), target);
    if (ShardingAttr extended = extendOpen(current, target)) {
      extendValue(constraint.getInput(), extended);
      return true;
    }
    return false;
  }
  // Backward through a transfer: an unplaced operand is computed in the
  // transfer's source sharding.
  if (auto transfer = dyn_cast<TransferOp>(op))
    return !lookup(transfer.getInput()) &&
           assign(transfer.getInput(), transfer.getSource());
  if (auto barrier = dyn_cast<PropagationBarrierOp>(op))
    return propagateBarrier(barrier);
  if (auto group = dyn_cast<ShardingGroupOp>(op))
    return propagateGroup(group);
  if (isControlFlow(op))
    return propagateSlots(op);
  if (isa<ReshardOp>(op) || op->hasTrait<OpTrait::IsTerminator>())
    return false;
  if (settled.contains(op))
    return false;
  const std::optional<FactorRule> &rule = ruleOf(op);
  if (!rule)
    return false;
  bool hasUnknown = false, hasKnown = false;
  for (Value value : rule->tensorValues) {
    bool isKnown = known.count(value);
    hasKnown |= isKnown && !isHidden(value);
    hasUnknown |= !isKnown;
  }
  if (!hasUnknown || !hasKnown)
    return false;
  // (With priorities the general path below weighs each value's.)
  if (rule->isIdentity && !usesPriorities && propagateElementwise(op, *rule))
    return true;
  FlatSymbolRefAttr meshName;
  Proposal merged = emptyProposal(*rule);
  bool clash = false;
  for (auto [index, value] : llvm::enumerate(rule->tensorValues)) {
    ShardingAttr sharding = lookup(value);
    if (!sharding || isHidden(value))
      continue;
    if (meshName && meshName != sharding.getMeshName())
      return false;
    meshName = sharding.getMeshName();
    MeshAttr mesh = getMesh(meshName);
    if (!mesh)
      return false;
    mergeInto(merged, proposalOf(*rule, index, sharding, mesh), clash);
  }
  if (clash)
    return false;
  std::optional<Placement> placement =
      makePlacement(*rule, meshName, std::move(merged.axes));
  if (!placement)
    return false;
  bool changed = false;
  for (auto [index, value] : llvm::enumerate(rule->tensorValues)) {
    ShardingAttr derived = placement->derived[index];
    // With priorities, a dimension that propagation leaves without axes
    // stays open, as in Shardy (where only axes propagate): a later
    // priority may still split it.
    if (usesPriorities && stage != kUnprioritized && !known.count(value)) {
      SmallVector<DimShardingAttr> dims(derived.getDims());
      for (DimShardingAttr &dim : dims)
        if (dim.getAxes().empty())
          dim = DimShardingAttr::get(derived.getContext(), {},
                                     /*isClosed=*/false);
      derived =
          ShardingAttr::get(derived.getContext(), derived.getMeshName(), dims,
                            derived.getReplicated(), derived.getUnreduced());
    }
    changed |= assignWithPriorities(
        value, derived,
        derivedPriorities(*rule, index, placement->axes, merged.priorities));
  }
  return changed;
}

/// A barrier passes a sharding across in its allowed directions only.
bool FunctionPropagator::propagateBarrier(PropagationBarrierOp barrier) {
  Value input = barrier.getInput(), result = barrier.getResult();
  ShardingAttr in = lookup(input), out = lookup(result);
  auto copy = [&](Value from, Value to) {
    SmallVector<int64_t> priorities;
    for (unsigned d = 0, e = lookup(from).getDims().size(); d < e; ++d)
      priorities.push_back(priorityOf(from, d));
    return assignWithPriorities(to, lookup(from), priorities);
  };
  if (in && !out && barrier.allowsForward())
    return copy(input, result);
  if (out && !in && barrier.allowsBackward())
    return copy(result, input);
  return false;
}

/// The members of a sharding group share one sharding: when those placed
/// agree, the others take it. Members placed differently are a conflict,
/// left to resolveGroups.
bool FunctionPropagator::propagateGroup(ShardingGroupOp group) {
  ArrayRef<Value> members = groups[group.getGroupIdAttr().getInt()];
  Value source;
  for (Value member : members) {
    ShardingAttr sharding = lookup(member);
    if (!sharding)
      continue;
    if (source && !isSameLayout(lookup(source), sharding))
      return false;
    if (!source)
      source = member;
  }
  if (!source)
    return false;
  SmallVector<int64_t> priorities;
  for (unsigned d = 0, e = lookup(source).getDims().size(); d < e; ++d)
    priorities.push_back(priorityOf(source, d));
  bool changed = false;
  for (Value member : members)
    if (member.getType() == source.getType())
      changed |= assignWithPriorities(member, lookup(source), priorities);
  return changed;
}

SmallVector<CarriedValue> FunctionPropagator::carriedSlots(Operation *op) {
  SmallVector<CarriedValue> slots = getCarriedValues(op);
  llvm::erase_if(
      slots, [&](CarriedValue &slot) { return !isTracked(slot.owners[0]); });
  return slots;
}

/// A carried value's owners share one sharding: once one of them is placed
/// the others and the unplaced feeders take it; before that, feeders that
/// agree place the owners. Partial sums are reduced before they are carried
/// (a loop body need not be linear in them).
bool FunctionPropagator::propagateSlots(Operation *op) {
  bool changed = false;
  for (CarriedValue &slot : carriedSlots(op)) {
    Value placedOwner;
    for (Value owner : slot.owners)
      if (lookup(owner)) {
        placedOwner = owner;
        break;
      }
    if (!placedOwner) {
      Value source;
      for (OpOperand *feeder : slot.feeders) {
        ShardingAttr sharding = lookup(feeder->get());
        if (!sharding || isHidden(feeder->get()))
          continue;
        if (source && !isSameLayout(lookup(source), sharding)) {
          source = Value();
          break;
        }
        if (!source)
          source = feeder->get();
      }
      if (!source)
        continue;
      for (Value owner : slot.owners)
        changed |= assign(owner, withoutUnreduced(lookup(source)));
      placedOwner = slot.owners.front();
    }
    ShardingAttr owned = lookup(placedOwner);
    for (Value owner : slot.owners)
      changed |= assign(owner, owned);
    // Inits take it now. Yields are placed by the body first, which may
    // compute them in a layout that moves fewer bytes (refineSlots then
    // weighs it); those still unplaced when propagation stalls take it in
    // resolveSlots.
    for (OpOperand *feeder : slot.feeders)
      if (feeder->getOwner() == op)
        changed |= assign(feeder->get(), owned);
  }
  return changed;
}

/// Slots whose owners are unplaced because their feeders disagree, or whose
/// owners were placed differently (by neighbours on both sides in one
/// sweep): all owners take the sharding that moves the fewest bytes over the
/// slot (then the one whose text sorts first). An owner placed otherwise
/// keeps its sharding for its uses through a reshard after it.
bool FunctionPropagator::resolveSlots(Operation *op) {
  bool changed = false;
  for (CarriedValue &slot : carriedSlots(op)) {
    SmallVector<Value> members(slot.owners.begin(), slot.owners.end());
    for (OpOperand *feeder : slot.feeders)
      members.push_back(feeder->get());
    SmallVector<ShardingAttr> candidates;
    bool ownersAgree = true;
    ShardingAttr first;
    for (Value owner : slot.owners)
      if (ShardingAttr sharding = lookup(owner)) {
        if (first && !isSameLayout(first, sharding))
          ownersAgree = false;
        first = first ? first : sharding;
      }
    if (first && ownersAgree) {
      for (OpOperand *feeder : slot.feeders)
        changed |= assign(feeder->get(), first);
      continue;
    }
    for (Value member : members)
      if (ShardingAttr sharding = lookup(member)) {
        sharding = withoutUnreduced(sharding);
        if (llvm::none_of(candidates, [&](ShardingAttr other) {
              return isSameLayout(other, sharding);
            }))
          candidates.push_back(sharding);
      }
    if (candidates.empty())
      continue;
    ShardingAttr chosen = cheapestFor(members, candidates).first;
    for (Value owner : slot.owners) {
      ShardingAttr current = lookup(owner);
      if (!current) {
        assign(owner, chosen);
      } else if (!isSameLayout(current, chosen)) {
        known[owner] = chosen;
        insertReshardAfter(owner, current);
        for (Operation *user : owner.getUsers())
          settled.erase(user);
      }
    }
    changed = true;
  }
  return changed;
}

/// Once propagation has converged, each carried value may take another
/// of its feeders' shardings: the one whose reshards (feeders moved to it,
/// the owners' uses moved back to what they were placed for) move the
/// fewest bytes, then the more sharded, then the current one. A loop whose
/// init is split over "data" and whose body yields a value split over
/// "data" and "model" carries the latter when that moves no more bytes: JAX
/// carries the more sharded value too. Returned owners follow the function
/// result unless it declares a sharding; an op the user annotated keeps
/// its shardings.
void FunctionPropagator::refineSlots() {
  SmallVector<Operation *> carriers;
  for (Operation *op : bodyOps())
    if (isControlFlow(op))
      carriers.push_back(op);
  // Uses that feed a carried value: finalization moves them to their own
  // slot's sharding (reshardFeeders), so they need no reshard here.
  llvm::DenseMap<OpOperand *, Value> ownerFed;
  for (Operation *op : carriers)
    for (CarriedValue &slot : carriedSlots(op))
      for (OpOperand *feeder : slot.feeders)
        ownerFed[feeder] = slot.owners.front();
  for (Operation *op : carriers) {
    // The user's own shardings of the op's results stay.
    if (pinnedOps.contains(op))
      continue;
    for (CarriedValue &slot : carriedSlots(op)) {
      ShardingAttr current = lookup(slot.owners.front());
      if (!current || llvm::any_of(slot.owners, [&](Value owner) {
            ShardingAttr sharding = lookup(owner);
            return !sharding || !isSameLayout(sharding, current);
          }))
        continue;
      auto isOwner = [&](Value value) {
        return llvm::is_contained(slot.owners, value);
      };
      SmallVector<ShardingAttr> candidates{current};
      for (OpOperand *feeder : slot.feeders)
        if (ShardingAttr sharding = lookup(feeder->get())) {
          sharding = withoutUnreduced(sharding);
          if (llvm::none_of(candidates, [&](ShardingAttr other) {
                return isSameLayout(other, sharding);
              }))
            candidates.push_back(sharding);
        }
      if (candidates.size() == 1)
        continue;
      Type type = slot.owners.front().getType();
      auto shardsOf = [&](ShardingAttr sharding) {
        MeshAttr mesh = getMesh(sharding.getMeshName());
        int64_t shards = 1;
        for (DimShardingAttr dim : sharding.getDims())
          for (AxisRefAttr axis : dim.getAxes())
            shards *= axis.getSizeIn(mesh);
        return shards;
      };
      auto costOf = [&](ShardingAttr candidate) {
        int64_t cost = 0;
        for (OpOperand *feeder : slot.feeders)
          if (!isOwner(feeder->get()))
            if (ShardingAttr sharding = lookup(feeder->get()))
              cost = saturatingAdd(cost, moveCost(sharding, candidate, type));
        for (Value owner : slot.owners)
          for (OpOperand &use : owner.getUses()) {
            Operation *user = use.getOwner();
            ShardingAttr wanted = current;
            if (isFunctionTerminator(user)) {
              wanted = function.getResultAttrOfType<ShardingAttr>(
                  use.getOperandNumber(), PolymeshDialect::kShardingAttrName);
              if (!wanted)
                continue;
            } else if (auto reshard = dyn_cast<ReshardOp>(user)) {
              // It moves whatever it reads to its own target.
              wanted = lookup(reshard.getResult());
              if (!wanted)
                continue;
            } else if (auto fed = ownerFed.find(&use); fed != ownerFed.end()) {
              if (isOwner(fed->second))
                continue;
              wanted = lookup(fed->second);
              if (!wanted)
                continue;
            }
            cost = saturatingAdd(cost, moveCost(candidate, wanted, type));
          }
        return cost;
      };
      ShardingAttr chosen = current;
      int64_t chosenCost = costOf(current);
      int64_t chosenShards = shardsOf(current);
      for (ShardingAttr candidate : ArrayRef(candidates).drop_front()) {
        int64_t cost = costOf(candidate);
        int64_t shards = shardsOf(candidate);
        if (cost < chosenCost ||
            (cost == chosenCost && shards > chosenShards)) {
          chosen = candidate;
          chosenCost = cost;
          chosenShards = shards;
        }
      }
      if (chosen == current)
        continue;
      // The owners' users keep what they were placed for, behind a reshard;
      // reshards, the function terminator and feeders of carried values
      // take the new one (finalization moves the last to their own slot's).
      for (Value owner : slot.owners) {
        known[owner] = chosen;
        OpBuilder builder(owner.getContext());
        builder.setInsertionPointAfterValue(owner);
        ReshardOp reshard;
        for (OpOperand &use : llvm::make_early_inc_range(owner.getUses())) {
          Operation *user = use.getOwner();
          if (isFunctionTerminator(user) || ownerFed.contains(&use) ||
              isa<ReshardOp>(user))
            continue;
          if (!reshard) {
            reshard = ReshardOp::create(builder, owner.getLoc(),
                                        owner.getType(), owner, current);
            known[reshard.getResult()] = current;
            opsDirty = true;
          }
          use.set(reshard.getResult());
        }
      }
    }
  }
}

/// An op's regions (a linalg body, say) run on every device of the op's
/// mesh with global indices, so a tensor they read from above must be whole
/// there: it is replicated on the op's mesh before the op. A dimension that
/// a loop indexes directly (an aligned capture) is split as that loop is in
/// the op's first result instead: each device reads its own tile at the
/// local index. (Control flow regions are not such: their ops are placed
/// like any other.)
void FunctionPropagator::reshardCaptured(Operation *op) {
  ShardingAttr placed;
  if (op->getNumResults() != 0 && isTracked(op->getResult(0)))
    placed = lookup(op->getResult(0));
  for (Value result : op->getResults())
    if (!placed && isTracked(result))
      placed = lookup(result);
  SmallVector<AlignedCapture> aligned = placed && isa<linalg::GenericOp>(op)
                                            ? getAlignedCaptures(op)
                                            : SmallVector<AlignedCapture>();
  llvm::SmallMapVector<Value, SmallVector<OpOperand *>, 2> captured;
  visitUsedValuesDefinedAbove(op->getRegions(), [&](OpOperand *use) {
    if (isTracked(use->get()) && lookup(use->get()))
      captured[use->get()].push_back(use);
  });
  for (auto &[value, uses] : captured) {
    ShardingAttr current = lookup(value);
    auto type = cast<RankedTensorType>(value.getType());
    ShardingAttr whole = ShardingAttr::getReplicated(
        op->getContext(), placed ? placed.getMeshName() : current.getMeshName(),
        type.getRank());
    const AlignedCapture *capture = llvm::find_if(
        aligned, [&](const AlignedCapture &c) { return c.value == value; });
    if (capture != aligned.end())
      whole = alignedSharding(op, placed, capture->loopOfDim);
    if (isDeviceEquivalent(current, whole, type))
      continue;
    Value moved = insertReshardBefore(op, value, whole);
    for (OpOperand *use : uses)
      use->set(moved);
  }
}

/// Feeders placed otherwise than their slot's owners are moved to it: an
/// init before the op, a yield before its terminator, so that each carried
/// value has one local type.
void FunctionPropagator::reshardFeeders(Operation *op) {
  for (CarriedValue &slot : carriedSlots(op)) {
    ShardingAttr owned = lookup(slot.owners.front());
    if (!owned)
      continue;
    for (OpOperand *feeder : slot.feeders) {
      Value value = feeder->get();
      ShardingAttr current = lookup(value);
      if (current && !isDeviceEquivalent(current, owned, value.getType()))
        feeder->set(insertReshardBefore(feeder->getOwner(), value, owned));
    }
  }
}

/// Places an op whose values disagree: every candidate placement is priced
/// by the bytes its reshards move; the cheapest wins, then the more sharded,
/// then the one whose text sorts first. Nothing depends on value positions.
/// One candidate per value whose sharding is known (its proposal), and one
/// per mesh for the merge of its values' proposals when they do not clash;
/// nullopt when no value is known or a mesh is missing.
std::optional<SmallVector<std::pair<FlatSymbolRefAttr, Proposal>>>
FunctionPropagator::candidatesFor(const FactorRule &rule) {
  SmallVector<std::pair<FlatSymbolRefAttr, Proposal>> candidates;
  llvm::MapVector<Attribute, std::pair<Proposal, bool>> perMesh;
  for (auto [index, value] : llvm::enumerate(rule.tensorValues)) {
    ShardingAttr sharding = lookup(value);
    if (!sharding)
      continue;
    MeshAttr mesh = getMesh(sharding.getMeshName());
    if (!mesh)
      return std::nullopt;
    Proposal proposal = proposalOf(rule, index, sharding, mesh);
    auto &[merged, clash] = perMesh
                                .try_emplace(sharding.getMeshName().getAttr(),
                                             emptyProposal(rule), false)
                                .first->second;
    mergeInto(merged, proposal, clash);
    candidates.push_back({sharding.getMeshName(), std::move(proposal)});
  }
  if (candidates.empty())
    return std::nullopt;
  for (auto &[meshAttr, entry] : perMesh)
    if (!entry.second)
      candidates.push_back(
          {FlatSymbolRefAttr::get(cast<StringAttr>(meshAttr)), entry.first});
  return candidates;
}

/// Scores `placement` of `op`: what it would move (bytes, and the best
/// priority among the dimensions it moves). Returns whether it places every
/// known value as it is.
bool FunctionPropagator::scorePlacement(Operation *op, const FactorRule &rule,
                                        Placement &placement) {
  bool consistent = true;
  for (auto [index, value] : llvm::enumerate(rule.tensorValues)) {
    ShardingAttr sharding = lookup(value);
    if (!sharding || isSameLayout(sharding, placement.derived[index]))
      continue;
    consistent = false;
    // Extending an open dimension is free: the value is computed that way.
    if (extendOpen(sharding, placement.derived[index]))
      continue;
    // Axes that a better priority put on a dimension move last (every
    // dimension counts when the value changes mesh). Splitting a dimension
    // that has no axes takes nothing a priority decided, as in Shardy,
    // where a closed empty dimension proposes nothing.
    bool otherMesh =
        sharding.getMeshName() != placement.derived[index].getMeshName();
    for (auto [d, dims] : llvm::enumerate(
             llvm::zip(sharding.getDims(), placement.derived[index].getDims())))
      if (otherMesh ||
          (!std::get<0>(dims).getAxes().empty() &&
           std::get<0>(dims).getAxes() != std::get<1>(dims).getAxes()))
        placement.movedPriority =
            std::min(placement.movedPriority, priorityOf(value, d));
    // A user-annotated op is computed as annotated: placements that would
    // move its results come last.
    if (index >= rule.numOperands && pinnedOps.contains(op))
      placement.cost = saturatingAdd(placement.cost, kPinnedPenalty);
    placement.cost = saturatingAdd(
        placement.cost,
        moveCost(sharding, placement.derived[index], value.getType()));
  }
  return consistent;
}

/// User priorities first (a placement that moves only dimensions of a worse
/// priority wins), then bytes, then more shards, then the text (so that
/// ties break the same way everywhere).
bool isBetterPlacement(const Placement &a, const Placement &b) {
  if (a.movedPriority != b.movedPriority)
    return a.movedPriority > b.movedPriority;
  if (a.cost != b.cost)
    return a.cost < b.cost;
  if (a.shards != b.shards)
    return a.shards > b.shards;
  return a.text < b.text;
}

bool FunctionPropagator::resolve(Operation *op) {
  if (isa<ShardingConstraintOp, ReshardOp, TransferOp, PropagationBarrierOp,
          ShardingGroupOp>(op) ||
      op->hasTrait<OpTrait::IsTerminator>())
    return false;
  if (isControlFlow(op))
    return resolveSlots(op);
  if (settled.contains(op))
    return false;
  currentOp = op;
  const std::optional<FactorRule> &rule = ruleOf(op);
  if (!rule)
    return resolveWithoutRule(op);
  if (rule->isIdentity && !usesPriorities && propagateElementwise(op, *rule))
    return true;
  if (settled.contains(op))
    return false;
  auto candidates = candidatesFor(*rule);
  if (!candidates)
    return false;

  std::optional<Placement> best;
  for (auto &[meshName, proposal] : *candidates) {
    std::optional<Placement> placement =
        makePlacement(*rule, meshName, proposal.axes);
    if (!placement)
      continue;
    placement->factorPriorities = proposal.priorities;
    if (scorePlacement(op, *rule, *placement)) {
      // The op is already placed: only fill in what is missing. Its values
      // never change again, so it is not looked at again.
      settled.insert(op);
      bool changed = false;
      for (auto [index, value] : llvm::enumerate(rule->tensorValues))
        changed |= assignWithPriorities(
            value, placement->derived[index],
            derivedPriorities(*rule, index, placement->axes,
                              placement->factorPriorities));
      return changed;
    }
    placement->text = placement->meshName.getValue().str();
    for (ShardingAttr derived : placement->derived)
      placement->text += toText(derived);
    if (!best || isBetterPlacement(*placement, *best))
      best = std::move(placement);
  }
  if (!best)
    return false;

  settled.insert(op);
  SmallVector<Value> values(rule->tensorValues);
  SmallVector<SmallVector<int64_t>> priorities;
  for (unsigned index = 0; index < values.size(); ++index)
    priorities.push_back(
        derivedPriorities(*rule, index, best->axes, best->factorPriorities));
  applyPlacement(op, values, rule->numOperands, best->derived,
                 /*allowExtension=*/true, priorities);
  return true;
}

/// A concatenation is computed whole along its dimension, so operands split
/// there are gathered (a reshard before it). When every operand was split
/// there by the same axes and the result is only returned, the returned
/// leaf keeps that split, as JAX's and Shardy's concatenation does: each
/// device slices its tile out of the result it computed, which moves
/// nothing. Runs once propagation has converged.
void FunctionPropagator::splitConcatLeaves() {
  SmallVector<tensor::ConcatOp> concats;
  for (Operation *op : bodyOps())
    if (auto concat = dyn_cast<tensor::ConcatOp>(op))
      concats.push_back(concat);
  for (tensor::ConcatOp concat : concats) {
    ShardingAttr result = lookup(concat.getResult());
    // Only returned, and to results that declare no sharding of their own
    // (finalization moves those to the declared one anyway).
    if (!result || !result.getUnreduced().empty() ||
        !llvm::all_of(concat->getUses(), [&](OpOperand &use) {
          return isa<func::ReturnOp>(use.getOwner()) &&
                 !function.getResultAttr(use.getOperandNumber(),
                                         PolymeshDialect::kShardingAttrName);
        }))
      continue;
    int64_t rank = concat.getResultType().getRank();
    int64_t dim = concat.getDim();
    ShardingAttr whole = result.withRank(rank);
    if (!whole.getDims()[dim].getAxes().empty())
      continue;
    // What each operand was before propagation gathered it: all split
    // along the dim by the same axes, on the result's mesh.
    SmallVector<AxisRefAttr> axes;
    bool agree = true;
    for (Value input : concat.getInputs()) {
      if (auto gather = input.getDefiningOp<ReshardOp>())
        input = gather.getInput();
      ShardingAttr sharding = lookup(input);
      agree = sharding && sharding.getMeshName() == whole.getMeshName() &&
              sharding.getUnreduced().empty();
      if (!agree)
        break;
      ArrayRef<AxisRefAttr> inputAxes =
          sharding.withRank(rank).getDims()[dim].getAxes();
      // The first operand sets the axes (there must be some); the others
      // must repeat them.
      agree = axes.empty() ? !inputAxes.empty()
                           : inputAxes == ArrayRef<AxisRefAttr>(axes);
      if (!agree)
        break;
      axes.assign(inputAxes.begin(), inputAxes.end());
    }
    if (!agree)
      continue;
    // The axes must be free in the result's sharding.
    auto used = [&](AxisRefAttr axis) {
      auto named = [&](AxisRefAttr other) {
        return other.getName() == axis.getName();
      };
      return llvm::any_of(whole.getDims(),
                          [&](DimShardingAttr d) {
                            return llvm::any_of(d.getAxes(), named);
                          }) ||
             llvm::any_of(whole.getReplicated(), named);
    };
    if (llvm::any_of(axes, used))
      continue;
    SmallVector<DimShardingAttr> dims(whole.getDims());
    dims[dim] = DimShardingAttr::get(concat.getContext(), axes,
                                     /*isClosed=*/true);
    insertReshardAfter(concat.getResult(),
                       ShardingAttr::get(concat.getContext(),
                                         whole.getMeshName(), dims,
                                         whole.getReplicated(), {}));
  }
}

/// Moves an op's values to `targets`: unplaced values take them, open
/// dimensions extend where allowed, operands that differ are resharded
/// before the op, and results that were placed otherwise keep that
/// sharding through a reshard after it.
void FunctionPropagator::applyPlacement(
    Operation *op, ArrayRef<Value> values, unsigned numOperands,
    ArrayRef<ShardingAttr> targets, bool allowExtension,
    ArrayRef<SmallVector<int64_t>> priorities) {
  // Priorities that reach a value's dimensions with the placement: the
  // better of what it had and what the placement brings.
  auto raisePriorities = [&](unsigned index, Value value) {
    if (!usesPriorities || index >= priorities.size())
      return;
    SmallVector<int64_t, 4> &mine = dimPriorities[value];
    mine.resize(priorities[index].size(), kUnprioritized);
    for (auto [have, brought] : llvm::zip(mine, priorities[index]))
      have = std::min(have, brought);
  };
  llvm::SmallDenseMap<std::pair<Value, Attribute>, Value> moved;
  // The operand each tracked operand value stands for, found before any is
  // rewired: the same value may be several operands of the op (x + x, x @ x),
  // each moved to its own layout. Values list tracked operands in operand
  // order, so the n-th occurrence of a value is its n-th use among them.
  SmallVector<OpOperand *> operandOf(numOperands, nullptr);
  for (unsigned index = 0; index < numOperands; ++index) {
    unsigned occurrence = llvm::count(values.take_front(index), values[index]);
    for (OpOperand &operand : op->getOpOperands())
      if (operand.get() == values[index] && occurrence-- == 0) {
        operandOf[index] = &operand;
        break;
      }
  }
  for (auto [index, value] : llvm::enumerate(values)) {
    ShardingAttr target = targets[index];
    ShardingAttr current = lookup(value);
    if (!current) {
      assign(value, target);
      raisePriorities(index, value);
      continue;
    }
    if (isSameLayout(current, target))
      continue;
    if (allowExtension) {
      if (ShardingAttr extended = extendOpen(current, target)) {
        extendValue(value, extended);
        raisePriorities(index, value);
        settled.insert(op);
        continue;
      }
    }
    if (index < numOperands) {
      Value &replacement = moved[{value, target}];
      if (!replacement)
        replacement = insertReshardBefore(op, value, target);
      // Only this operand moves: the same value may be another operand of
      // the op in another layout (x @ x: rows on one side, replicated on
      // the other).
      if (OpOperand *operand = operandOf[index])
        operand->set(replacement);
      else
        // An aligned capture: the reads in the op's body move.
        Value(value).replaceUsesWithIf(replacement, [&](OpOperand &use) {
          return op->isProperAncestor(use.getOwner());
        });
      continue;
    }
    known[value] = target;
    insertReshardAfter(value, current);
  }
}

/// Ops that no rule describes run replicated on one mesh: the one that
/// moves the fewest bytes, then the one whose name sorts first.
bool FunctionPropagator::resolveWithoutRule(Operation *op) {
  if (isa<PropagationBarrierOp, ShardingGroupOp>(op))
    return false;
  SmallVector<Value> values;
  for (Value value : op->getOperands())
    if (isTracked(value))
      values.push_back(value);
  unsigned numOperands = values.size();
  for (Value value : op->getResults())
    if (isTracked(value))
      values.push_back(value);
  if (values.empty())
    return false;

  std::optional<std::pair<int64_t, std::string>> best;
  for (Value value : values) {
    ShardingAttr sharding = lookup(value);
    if (!sharding)
      continue;
    FlatSymbolRefAttr meshName = sharding.getMeshName();
    int64_t cost = 0;
    bool settled = true;
    for (Value other : values) {
      ShardingAttr current = lookup(other);
      ShardingAttr target = ShardingAttr::getReplicated(
          op->getContext(), meshName,
          cast<RankedTensorType>(other.getType()).getRank());
      if (!current || !isSameLayout(current, target))
        settled = false;
      if (current)
        cost = saturatingAdd(cost, moveCost(current, target, other.getType()));
    }
    if (settled)
      return false;
    std::pair<int64_t, std::string> candidate{cost, meshName.getValue().str()};
    if (!best || candidate < *best)
      best = candidate;
  }
  if (!best)
    return false;
  auto meshName = FlatSymbolRefAttr::get(op->getContext(), best->second);
  if (warned.insert(op).second)
    op->emitWarning() << "no sharding rule for '" << op->getName()
                      << "'; computing it replicated on " << meshName;
  SmallVector<ShardingAttr> targets;
  for (Value value : values)
    targets.push_back(ShardingAttr::getReplicated(
        op->getContext(), meshName,
        cast<RankedTensorType>(value.getType()).getRank()));
  // Replicated placements are final: no open dimension to extend.
  applyPlacement(op, values, numOperands, targets, /*allowExtension=*/false);
  return true;
}

/// Values that nothing placed are replicated on the ambient mesh. Without
/// one, a value only resharded onto one mesh is replicated there; every
/// other such leaf is an error naming it.
bool FunctionPropagator::applyAmbient(bool &failedOut) {
  SmallVector<Value> unplaced;
  for (BlockArgument arg : function.getArguments())
    if (isTracked(arg) && !lookup(arg))
      unplaced.push_back(arg);
  for (Operation *op : bodyOps()) {
    for (Value result : op->getResults())
      if (isTracked(result) && !lookup(result))
        unplaced.push_back(result);
    if (isControlFlow(op))
      for (Region &region : op->getRegions())
        for (BlockArgument arg : region.getArguments())
          if (isTracked(arg) && !lookup(arg))
            unplaced.push_back(arg);
  }
  if (unplaced.empty())
    return false;

  auto ambient = function->getAttrOfType<FlatSymbolRefAttr>(
      PolymeshDialect::kAmbientMeshAttrName);
  if (!ambient)
    ambient = module->getAttrOfType<FlatSymbolRefAttr>(
        PolymeshDialect::kAmbientMeshAttrName);
  if (ambient && getMesh(ambient)) {
    for (Value value : unplaced)
      placeReplicated(value, ambient);
    return true;
  }

  // Without one, a value's uses may still name its mesh (replicated there):
  // every use a reshard onto one mesh, as Shardy treats an unannotated value
  // as replicated, so each reshard only slices; or every use a scalar read
  // by ops on one mesh. Values used otherwise stay errors: nothing says
  // which mesh holds them.
  bool placedByUses = false;
  for (Value value : unplaced) {
    FlatSymbolRefAttr meshName = meshOfReshardUses(value);
    if (!meshName)
      meshName = meshOfScalarReaders(value);
    if (meshName)
      placedByUses |= placeReplicated(value, meshName);
  }
  if (placedByUses)
    return true;

  failedOut = true;
  llvm::SmallPtrSet<Value, 8> unplacedSet(unplaced.begin(), unplaced.end());
  Operation *terminator = nullptr;
  for (Operation *op : bodyOps())
    if (isFunctionTerminator(op))
      terminator = op;
  bool reported = false;
  if (terminator) {
    for (auto [index, operand] : llvm::enumerate(terminator->getOperands())) {
      if (!unplacedSet.contains(operand))
        continue;
      InFlightDiagnostic diag = function->emitError() << "result #" << index;
      if (auto leaf = function.getResultAttrOfType<StringAttr>(
              index, PolymeshDialect::kLeafAttrName))
        diag << " (leaf \"" << leaf.getValue() << "\")";
      diag << " is not placed: nothing annotates it or the values it is "
              "computed from, and there is no 'polymesh.ambient_mesh' to "
              "default to";
      reported = true;
    }
  }
  if (!reported) {
    Value value = unplaced.front();
    InFlightDiagnostic diag =
        emitError(value.getLoc())
        << "value is not placed: nothing annotates it or the values it is "
           "computed with, and there is no 'polymesh.ambient_mesh' to "
           "default to";
    // Sorted, so that the message does not depend on use-list order.
    SmallVector<StringRef> reshardMeshes;
    for (Operation *user : value.getUsers())
      if (auto reshard = dyn_cast<ReshardOp>(user))
        reshardMeshes.push_back(reshard.getSharding().getMeshName().getValue());
    llvm::sort(reshardMeshes);
    reshardMeshes.erase(llvm::unique(reshardMeshes), reshardMeshes.end());
    if (reshardMeshes.size() > 1) {
      diag << "; its reshards go to meshes ";
      llvm::interleave(
          reshardMeshes, diag, [&](StringRef name) { diag << "@" << name; },
          " and ");
      diag << ", so no one mesh is implied";
    }
  }
  return false;
}

/// The one mesh that every use of `value` reshards it onto; null when a use
/// is not a reshard or the reshards name several meshes.
FlatSymbolRefAttr FunctionPropagator::meshOfReshardUses(Value value) {
  FlatSymbolRefAttr meshName;
  for (Operation *user : value.getUsers()) {
    auto reshard = dyn_cast<ReshardOp>(user);
    if (!reshard ||
        (meshName && reshard.getSharding().getMeshName() != meshName))
      return {};
    meshName = reshard.getSharding().getMeshName();
  }
  return meshName && getMesh(meshName) ? meshName : FlatSymbolRefAttr();
}

/// The one mesh of the placed tensor ops that read `value` through scalars
/// only: every use is a `tensor.extract`, and its scalar reaches (through
/// scalar ops) ops whose placed tensor values are all on that mesh. Null
/// when a use is anything else, no reader is placed, or readers disagree.
FlatSymbolRefAttr FunctionPropagator::meshOfScalarReaders(Value value) {
  if (value.use_empty())
    return {};
  SmallVector<Value> scalars;
  for (Operation *user : value.getUsers()) {
    if (!isa<tensor::ExtractOp>(user))
      return {};
    scalars.push_back(user->getResult(0));
  }
  FlatSymbolRefAttr meshName;
  llvm::SmallPtrSet<Operation *, 16> visited;
  // Bounded: a scalar chain longer than this is not what these ops make.
  for (size_t i = 0; i < scalars.size() && i < 256; ++i) {
    for (Operation *reader : scalars[i].getUsers()) {
      // A read inside a region (a pad's yield) is the enclosing op's.
      while (reader->getParentOp() != function.getOperation() &&
             reader->getParentOp())
        reader = reader->getParentOp();
      if (!visited.insert(reader).second)
        continue;
      bool tensorOp = false;
      for (Value result : reader->getResults()) {
        if (!isa<RankedTensorType>(result.getType())) {
          scalars.push_back(result);
          continue;
        }
        tensorOp = true;
        ShardingAttr sharding = lookup(result);
        if (!sharding)
          return {};
        if (meshName && sharding.getMeshName() != meshName)
          return {};
        meshName = sharding.getMeshName();
      }
      if (!tensorOp && reader->getNumResults() == 0 &&
          !reader->hasTrait<OpTrait::IsTerminator>())
        return {};
    }
  }
  return meshName && getMesh(meshName) ? meshName : FlatSymbolRefAttr();
}

/// An operand placed otherwise than `required` gets a reshard to it right
/// before its user.
void FunctionPropagator::placeOperand(OpOperand &operand,
                                      ShardingAttr required) {
  Value input = operand.get();
  ShardingAttr current = lookup(input);
  if (current && !isDeviceEquivalent(current, required, input.getType()))
    operand.set(insertReshardBefore(operand.getOwner(), input, required));
}

/// Ops that place or move values: a constraint or a transfer whose input
/// is placed elsewhere gets a reshard before it; barriers whose sides
/// differ become reshards to their result's sharding, the others and every
/// group disappear. Returns whether `op` was one of them.
bool FunctionPropagator::finalizePlacement(Operation *op) {
  if (auto constraint = dyn_cast<ShardingConstraintOp>(op)) {
    // Open dimensions of the constraint may have been extended.
    if (ShardingAttr result = lookup(constraint.getResult()))
      constraint.setShardingAttr(result);
    // A constraint on a value placed elsewhere moves it explicitly.
    placeOperand(constraint.getInputMutable(), constraint.getSharding());
    return true;
  }
  if (auto transfer = dyn_cast<TransferOp>(op)) {
    // The plan reads tiles of its source sharding: an operand placed
    // otherwise is moved there first.
    placeOperand(transfer.getInputMutable(), transfer.getSource());
    return true;
  }
  if (isa<ReshardOp>(op))
    return true;
  if (auto barrier = dyn_cast<PropagationBarrierOp>(op)) {
    Value input = barrier.getInput(), result = barrier.getResult();
    ShardingAttr in = lookup(input), out = lookup(result);
    Value replacement = input;
    if (in && out && !isDeviceEquivalent(in, out, input.getType()))
      replacement = insertReshardBefore(barrier, input, out);
    result.replaceAllUsesWith(replacement);
    barrier.erase();
    return true;
  }
  if (isa<ShardingGroupOp>(op)) {
    op->erase();
    return true;
  }
  return false;
}

/// Writes the resolved shardings of `op`'s tensor results on it, keeping
/// how they were written (asWritten).
LogicalResult FunctionPropagator::recordShardings(Operation *op,
                                                  StringAttr shardingName) {
  MLIRContext *context = op->getContext();
  SmallVector<Attribute> shardings;
  Attribute written = op->getAttr(shardingName);
  auto writtenList = dyn_cast_or_null<ArrayAttr>(written);
  for (Value result : op->getResults()) {
    if (!isTracked(result))
      continue;
    unsigned number = cast<OpResult>(result).getResultNumber();
    Attribute mine = !writtenList                  ? written
                     : number < writtenList.size() ? writtenList[number]
                                                   : Attribute();
    shardings.push_back(
        asWritten(lookup(result), dyn_cast_or_null<ShardingAttr>(mine)));
  }
  if (shardings.empty())
    return success();
  // Control flow may carry scalars beside tensors: a unit entry each.
  if (isControlFlow(op) && shardings.size() != op->getNumResults()) {
    shardings.clear();
    for (Value result : op->getResults())
      shardings.push_back(isTracked(result)
                              ? Attribute(lookup(result))
                              : Attribute(UnitAttr::get(context)));
  }
  if (shardings.size() != op->getNumResults())
    return op->emitError() << "cannot record shardings: the op mixes tensor "
                              "and non-tensor results";
  if (shardings.size() == 1)
    op->setAttr(shardingName, shardings.front());
  else
    op->setAttr(shardingName, ArrayAttr::get(context, shardings));
  return success();
}

/// The arguments' shardings, all attributes rebuilt at once: setting them
/// one by one copies the whole attribute array each time.
void FunctionPropagator::finalizeArguments() {
  SmallVector<DictionaryAttr> argAttrs;
  for (auto [index, arg] : llvm::enumerate(function.getArguments())) {
    NamedAttrList attrs(function.getArgAttrDict(index));
    if (ShardingAttr sharding = lookup(arg))
      attrs.set(
          PolymeshDialect::kShardingAttrName,
          asWritten(sharding, function.getArgAttrOfType<ShardingAttr>(
                                  index, PolymeshDialect::kShardingAttrName)));
    argAttrs.push_back(attrs.getDictionary(function.getContext()));
  }
  function.setAllArgAttrs(argAttrs);
}

/// The results' shardings, with a reshard before the return where the
/// value is placed otherwise. Partial sums are reduced before they leave
/// the function, unless the result declares them. A declared sharding's
/// open dimensions take the axes the returned value has there (as an
/// argument's do).
void FunctionPropagator::finalizeResults(Operation *terminator) {
  SmallVector<DictionaryAttr> resultAttrs;
  for (unsigned index = 0, e = function.getNumResults(); index < e; ++index)
    resultAttrs.push_back(function.getResultAttrDict(index));
  for (OpOperand &operand : terminator->getOpOperands()) {
    unsigned index = operand.getOperandNumber();
    Value value = operand.get();
    if (!isTracked(value))
      continue;
    ShardingAttr current = lookup(value);
    auto declared = function.getResultAttrOfType<ShardingAttr>(
        index, PolymeshDialect::kShardingAttrName);
    ShardingAttr target = declared ? declared : withoutUnreduced(current);
    if (declared)
      if (ShardingAttr extended = extendOpen(
              withoutPriorities(declared.withRank(current.getDims().size())),
              current))
        target = extended;
    if (!isDeviceEquivalent(current, target, value.getType()))
      operand.set(insertReshardBefore(terminator, value, target));
    NamedAttrList attrs(resultAttrs[index]);
    attrs.set(PolymeshDialect::kShardingAttrName, target);
    resultAttrs[index] = attrs.getDictionary(function.getContext());
  }
  function.setAllResultAttrs(resultAttrs);
}

LogicalResult FunctionPropagator::finalize() {
  // Uniqued once, not once per op.
  StringAttr shardingName = StringAttr::get(function.getContext(),
                                            PolymeshDialect::kShardingAttrName);
  Operation *terminator = nullptr;
  for (Operation *op : bodyOps()) {
    if (op->hasTrait<OpTrait::IsTerminator>()) {
      if (isFunctionTerminator(op))
        terminator = op;
      continue;
    }
    if (isControlFlow(op))
      reshardFeeders(op);
    else if (op->getNumRegions() != 0)
      reshardCaptured(op);
    if (finalizePlacement(op))
      continue;
    if (failed(recordShardings(op, shardingName)))
      return failure();
  }
  finalizeArguments();
  if (!terminator)
    return success();
  finalizeResults(terminator);
  hoistInvariantReshards();
  return success();
}

/// A reshard in a loop body of a value defined outside the loop moves the
/// same bytes on every iteration: it moves once, before the loop (out of
/// every enclosing loop it does not depend on). Reshards are pure, so
/// moving one out of a loop that runs no iteration only costs its bytes.
/// Reshards inside a branch stay there: hoisting them would move data that
/// the branch not taken never needs.
void FunctionPropagator::hoistInvariantReshards() {
  SmallVector<ReshardOp> reshards;
  function->walk([&](ReshardOp reshard) { reshards.push_back(reshard); });
  for (ReshardOp reshard : reshards) {
    Operation *target = nullptr;
    for (Operation *parent = reshard->getParentOp();
         isa_and_nonnull<scf::ForOp, scf::WhileOp>(parent) &&
         cast<LoopLikeOpInterface>(parent).isDefinedOutsideOfLoop(
             reshard.getInput());
         parent = parent->getParentOp())
      target = parent;
    if (target)
      reshard->moveBefore(target);
  }
}

/// A constant used by several ops is materialized once per user, so that
/// each use is placed where its user is instead of being moved there.
void FunctionPropagator::cloneSharedConstants() {
  // Uses may lie in nested regions: order them by a pre-order walk.
  llvm::DenseMap<Operation *, unsigned> order;
  function->walk<WalkOrder::PreOrder>(
      [&](Operation *op) { order.try_emplace(op, order.size()); });
  for (Operation *op : bodyOps()) {
    if (!op->hasTrait<OpTrait::ConstantLike>() || op->getNumResults() != 1 ||
        !isTracked(op->getResult(0)) ||
        op->hasAttr(PolymeshDialect::kShardingAttrName))
      continue;
    SmallVector<OpOperand *> uses;
    for (OpOperand &use : op->getResult(0).getUses())
      uses.push_back(&use);
    if (uses.size() < 2)
      continue;
    // Keep the first use in program order on the original.
    llvm::sort(uses, [&](OpOperand *a, OpOperand *b) {
      if (a->getOwner() != b->getOwner())
        return order.lookup(a->getOwner()) < order.lookup(b->getOwner());
      return a->getOperandNumber() < b->getOperandNumber();
    });
    for (OpOperand *use : llvm::drop_begin(uses)) {
      // A copy goes before its user, but never into the region of an op
      // other than control flow (a linalg body reads it from above).
      Operation *before = use->getOwner();
      for (Operation *parent = before->getParentOp();
           parent && parent != function.getOperation();
           parent = parent->getParentOp())
        if (!isControlFlow(parent))
          before = parent;
      OpBuilder builder(before);
      use->set(builder.clone(*op)->getResult(0));
    }
    opsDirty = true;
  }
}

bool FunctionPropagator::isPassThrough(Operation *op) {
  if (isa<ShardingConstraintOp, PropagationBarrierOp, ShardingGroupOp>(op) ||
      isControlFlow(op))
    return true;
  if (isa<ReshardOp, TransferOp>(op) || op->hasTrait<OpTrait::IsTerminator>())
    return false;
  const std::optional<FactorRule> &rule = sharedRuleOf(op);
  return rule && rule->isIdentity;
}

/// Forward and backward over `active` until no value gets a sharding;
/// settled ops drop out.
void FunctionPropagator::sweep(SmallVectorImpl<Operation *> &active) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (Operation *op : active)
      changed |= propagateOnce(op);
    for (Operation *op : llvm::reverse(active))
      changed |= propagateOnce(op);
    llvm::erase_if(active, [&](Operation *op) { return settled.contains(op); });
  }
}

/// A barrier that stopped propagation in one direction leaves that side
/// unplaced: it is replicated on the other side's mesh (the barrier stops
/// axes, not the mesh the value lives on).
bool FunctionPropagator::placeBlockedBarriers() {
  bool changed = false;
  for (Operation *op : bodyOps())
    if (auto barrier = dyn_cast<PropagationBarrierOp>(op)) {
      ShardingAttr in = lookup(barrier.getInput());
      ShardingAttr out = lookup(barrier.getResult());
      if (in && !out)
        changed |= placeReplicated(barrier.getResult(), in.getMeshName());
      else if (out && !in)
        changed |= placeReplicated(barrier.getInput(), out.getMeshName());
    }
  return changed;
}

/// Of `candidates` (not empty), the one that moves the fewest bytes when
/// every placed member of `members` moves to it, then the one whose text
/// sorts first; with that cost.
std::pair<ShardingAttr, int64_t>
FunctionPropagator::cheapestFor(ArrayRef<Value> members,
                                ArrayRef<ShardingAttr> candidates) {
  std::optional<std::pair<int64_t, std::string>> best;
  ShardingAttr chosen;
  for (ShardingAttr candidate : candidates) {
    int64_t cost = 0;
    for (Value member : members)
      if (ShardingAttr sharding = lookup(member))
        cost = saturatingAdd(cost,
                             moveCost(sharding, candidate, member.getType()));
    std::pair<int64_t, std::string> key{cost, toText(candidate)};
    if (!best || key < *best) {
      best = key;
      chosen = candidate;
    }
  }
  return {chosen, best->first};
}

/// Groups whose members were placed differently: every member takes the
/// sharding that moves the fewest bytes over the group (then the one whose
/// text sorts first), through a reshard after each member placed otherwise,
/// with a warning.
bool FunctionPropagator::resolveGroups() {
  bool changed = false;
  for (auto &[id, members] : groups) {
    SmallVector<ShardingAttr> distinct;
    for (Value member : members)
      if (ShardingAttr sharding = lookup(member))
        if (llvm::none_of(distinct, [&](ShardingAttr other) {
              return isSameLayout(other, sharding);
            }))
          distinct.push_back(sharding);
    if (distinct.size() < 2)
      continue;
    auto [chosen, cost] = cheapestFor(members, distinct);
    InFlightDiagnostic diag =
        groupOps.lookup(id)->emitWarning()
        << "sharding group " << id << ": members have " << distinct.size()
        << " different shardings; all take " << chosen
        << ", which moves the fewest bytes (" << cost << ")";
    for (Value &member : members) {
      ShardingAttr sharding = lookup(member);
      if (!sharding || isSameLayout(sharding, chosen))
        continue;
      // The member keeps its sharding; its uses (the group among them)
      // read it moved, so their ops are placed again.
      insertReshardAfter(member, chosen);
      // The reshard is now the member's only user.
      Value moved = (*member.getUsers().begin())->getResult(0);
      for (Operation *user : moved.getUsers())
        settled.erase(user);
      member = moved;
      changed = true;
    }
  }
  return changed;
}

LogicalResult FunctionPropagator::run() {
  if (function.isExternal())
    return success();
  cloneSharedConstants();
  // One entry per op and value at most: sized once, the maps never rehash
  // (about 5% of the pass at 100,000 leaves).
  size_t numOps = bodyOps().size();
  size_t numValues = function.getFunctionBody().front().getNumArguments();
  for (Operation *op : bodyOps())
    numValues += op->getNumResults();
  known.reserve(numValues);
  ruleIndex.reserve(numOps);
  settled.reserve(numOps);
  seed();
  if (hadError)
    return failure();
  // Each round either places a value or inserts a reshard that settles an
  // op for good; the bound only guards against a rule that keeps changing.
  const unsigned maxRounds = 64 + 4 * bodyOps().size();
  for (unsigned round = 0; round < maxRounds; ++round) {
    // Sweeps skip settled ops: they never change again (an extended value
    // unsettles its ops, and the next round picks them up).
    SmallVector<Operation *> active;
    for (Operation *op : bodyOps())
      if (!settled.contains(op))
        active.push_back(op);
    // The first round runs one sweep per user priority, best first: each
    // priority's shardings reach as far as they can before the next one's
    // are sources. Within each, op priorities as Shardy's: pass-through ops
    // (elementwise, constraints, barriers, groups) first, so that a dot's
    // operand takes its elementwise neighbour's sharding before the dot
    // proposes its own.
    auto sweepByOpPriority = [&]() {
      SmallVector<Operation *> passThrough;
      for (Operation *op : active)
        if (isPassThrough(op))
          passThrough.push_back(op);
      if (passThrough.size() != active.size())
        sweep(passThrough);
      sweep(active);
    };
    if (round == 0)
      for (int64_t priority : stages) {
        stage = priority;
        sweepByOpPriority();
      }
    stage = kUnprioritized;
    sweepByOpPriority();
    // Groups first: like annotations, they decide what ops then adapt to.
    if (resolveGroups())
      continue;
    bool resolved = false;
    for (Operation *op : active)
      resolved |= resolve(op);
    if (hadError)
      return failure();
    if (resolved || reopened) {
      reopened = false;
      continue;
    }
    if (placeBlockedBarriers())
      continue;
    bool failedAmbient = false;
    if (applyAmbient(failedAmbient))
      continue;
    if (failedAmbient)
      return failure();
    refineSlots();
    splitConcatLeaves();
    return finalize();
  }
  return function->emitError()
         << "sharding propagation did not converge; please report this";
}

class PolymeshPropagatePass final
    : public polymesh::impl::PolymeshPropagateBase<PolymeshPropagatePass> {
public:
  using PolymeshPropagateBase::PolymeshPropagateBase;
  void runOnOperation() final {
    ModuleOp module = getOperation();
    // Inter-procedural by specialization: each call site gets its own copy
    // of the callee before anything is propagated.
    if (failed(inlineCallsForPropagation(module, maxSpecializedOps)))
      return signalPassFailure();
    SymbolTableCollection symbols;
    bool failedAny = false;
    for (Operation &op : module.getBody()->getOperations()) {
      auto function = dyn_cast<FunctionOpInterface>(op);
      if (!function)
        continue;
      FunctionPropagator propagator(function, module, symbols);
      failedAny |= failed(propagator.run());
    }
    if (failedAny)
      return signalPassFailure();
  }
};

} // namespace
