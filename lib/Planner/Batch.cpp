//===- Batch.cpp - Reshards that repeat over mesh axes --------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Batch.h"

#include "DeviceIndex.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace polymesh::planner {

namespace {

int64_t axisStride(const Mesh &mesh, int axis) {
  int64_t stride = 1;
  for (size_t a = axis + 1; a < mesh.axes.size(); ++a)
    stride *= mesh.axes[a].size;
  return stride;
}

bool refersTo(const std::vector<AxisRef> &refs, int axis) {
  return std::any_of(refs.begin(), refs.end(),
                     [&](const AxisRef &ref) { return ref.axis == axis; });
}

/// Whether the sharding splits a dimension over (part of) `axis` or keeps
/// partial sums over it.
bool usesAxis(const Sharding &sharding, int axis) {
  for (const DimSharding &dim : sharding.dims)
    if (refersTo(dim.axes, axis))
      return true;
  return refersTo(sharding.unreduced, axis);
}

/// The mesh without `axis`: the devices of coordinate 0 on it.
Mesh dropAxis(const Mesh &mesh, int axis) {
  int64_t after = axisStride(mesh, axis);
  int64_t size = mesh.axes[axis].size;
  Mesh cell;
  cell.axes = mesh.axes;
  cell.axes.erase(cell.axes.begin() + axis);
  int64_t n = mesh.numDevices() / size;
  cell.deviceIds.reserve(n);
  for (int64_t q = 0; q < n; ++q)
    cell.deviceIds.push_back(
        mesh.deviceAt(q / after * (size * after) + q % after));
  return cell;
}

std::vector<AxisRef> renumber(std::vector<AxisRef> refs, int axis) {
  refs.erase(
      std::remove_if(refs.begin(), refs.end(),
                     [&](const AxisRef &ref) { return ref.axis == axis; }),
      refs.end());
  for (AxisRef &ref : refs)
    if (ref.axis > axis)
      --ref.axis;
  return refs;
}

/// The sharding without `axis` (which leads dimension `dim`, if any).
Sharding dropAxisRefs(const Sharding &sharding, int axis) {
  Sharding cell = sharding;
  for (DimSharding &dim : cell.dims)
    dim.axes = renumber(std::move(dim.axes), axis);
  cell.replicated = renumber(std::move(cell.replicated), axis);
  cell.unreduced = renumber(std::move(cell.unreduced), axis);
  return cell;
}

int64_t shardCount(const std::vector<AxisRef> &refs) {
  int64_t count = 1;
  for (const AxisRef &ref : refs)
    count *= ref.size;
  return count;
}

/// Whether `layout` splits `dim` first over the whole axis `axis`, into
/// slabs of `slab` elements that its tiles do not straddle.
bool leadsDim(const TensorLayout &layout, int axis, int64_t dim, int64_t slab) {
  const std::vector<AxisRef> &refs = layout.sharding().dims[dim].axes;
  if (refs.empty() || refs.front().axis != axis ||
      !refs.front().isWhole(layout.mesh()))
    return false;
  std::vector<AxisRef> rest(refs.begin() + 1, refs.end());
  return slab % shardCount(rest) == 0;
}

/// One step of makeReshardBatch: `cell` (source, destination) without the
/// axis pair of `axis`.
absl::Status dropBatchAxis(TensorLayout &cellSource,
                           TensorLayout &cellDestination, const BatchAxis &axis,
                           int64_t &size, int64_t &slab) {
  std::optional<int> a = cellSource.mesh().axisIndex(axis.source);
  std::optional<int> b = cellDestination.mesh().axisIndex(axis.destination);
  if (!a || !b)
    return absl::InvalidArgumentError(
        absl::StrCat("batch axis \"", axis.source, "\" -> \"", axis.destination,
                     "\": the ", a ? "destination" : "source",
                     " mesh has no such axis (or it is named twice)"));
  size = cellSource.mesh().axes[*a].size;
  if (cellDestination.mesh().axes[*b].size != size)
    return absl::InvalidArgumentError(
        absl::StrCat("batch axis \"", axis.source, "\" -> \"", axis.destination,
                     "\": sizes ", size, " and ",
                     cellDestination.mesh().axes[*b].size, " differ"));
  std::vector<int64_t> shape = cellSource.shape();
  slab = 0;
  if (axis.dim < -1)
    return absl::InvalidArgumentError(
        absl::StrCat("batch axis \"", axis.source, "\" -> \"", axis.destination,
                     "\": dim ", axis.dim, " is neither a dimension nor -1"));
  if (axis.dim < 0) {
    if (usesAxis(cellSource.sharding(), *a) ||
        usesAxis(cellDestination.sharding(), *b))
      return absl::InvalidArgumentError(absl::StrCat(
          "batch axis \"", axis.source, "\" -> \"", axis.destination,
          "\": a layout splits a dimension or sums partials over it"));
  } else {
    if (axis.dim >= static_cast<int64_t>(shape.size()) ||
        shape[axis.dim] % size != 0 ||
        !leadsDim(cellSource, *a, axis.dim, shape[axis.dim] / size) ||
        !leadsDim(cellDestination, *b, axis.dim, shape[axis.dim] / size))
      return absl::InvalidArgumentError(absl::StrCat(
          "batch axis \"", axis.source, "\" -> \"", axis.destination,
          "\", dim ", axis.dim,
          ": both layouts must split the dimension first over the whole "
          "axis, into slabs that no tile straddles"));
    slab = shape[axis.dim] / size;
    shape[axis.dim] = slab;
  }
  absl::StatusOr<TensorLayout> nextSource =
      TensorLayout::create(dropAxis(cellSource.mesh(), *a),
                           dropAxisRefs(cellSource.sharding(), *a), shape);
  absl::StatusOr<TensorLayout> nextDestination =
      TensorLayout::create(dropAxis(cellDestination.mesh(), *b),
                           dropAxisRefs(cellDestination.sharding(), *b), shape);
  if (!nextSource.ok())
    return nextSource.status();
  if (!nextDestination.ok())
    return nextDestination.status();
  cellSource = std::move(*nextSource);
  cellDestination = std::move(*nextDestination);
  return absl::OkStatus();
}

/// Per device of cell 0: its positions in the whole meshes (-1: not there).
struct CellDevice {
  int64_t sourcePosition = -1;
  int64_t destinationPosition = -1;
};

/// Position shifts of one cell.
struct CellShift {
  int64_t source = 0;
  int64_t destination = 0;
  std::vector<int64_t> box;
};

/// With `rank` 0, the device shifts only.
CellShift cellShift(const ReshardBatch &batch, int64_t cell, size_t rank) {
  CellShift shift;
  shift.box.assign(rank, 0);
  for (size_t i = batch.axes.size(); i-- > 0;) {
    int64_t coordinate = cell % batch.sizes[i];
    cell /= batch.sizes[i];
    shift.source += coordinate * batch.sourceStrides[i];
    shift.destination += coordinate * batch.destinationStrides[i];
    if (batch.axes[i].dim >= 0 && !shift.box.empty())
      shift.box[batch.axes[i].dim] += coordinate * batch.slabs[i];
  }
  return shift;
}

/// The cell of a whole-mesh position and its position in cell 0.
std::pair<int64_t, int64_t> cellOf(int64_t position,
                                   const std::vector<int64_t> &strides,
                                   const std::vector<int64_t> &sizes) {
  int64_t cell = 0, base = position;
  for (size_t i = 0; i < strides.size(); ++i) {
    int64_t coordinate = (position / strides[i]) % sizes[i];
    cell = cell * sizes[i] + coordinate;
    base -= coordinate * strides[i];
  }
  return {cell, base};
}

/// Whether two cells hold the same slab: they differ only on batch axes
/// that split no dimension.
bool sameSlab(const ReshardBatch &batch, int64_t a, int64_t b) {
  for (size_t i = batch.axes.size(); i-- > 0;) {
    if (batch.axes[i].dim >= 0 && a % batch.sizes[i] != b % batch.sizes[i])
      return false;
    a /= batch.sizes[i];
    b /= batch.sizes[i];
  }
  return true;
}

/// Cell 0's devices, both meshes', numbered in id order, each with its
/// positions in the whole meshes.
struct CellZero {
  DeviceIndex index;
  std::vector<CellDevice> where;

  const CellDevice &of(int64_t id) const { return where[index.at(id)]; }
};

CellZero cellZeroDevices(const ReshardBatch &batch, const TensorLayout &source,
                         const TensorLayout &destination) {
  std::vector<int64_t> ids;
  for (const TensorLayout *cell : {&batch.cellSource, &batch.cellDestination})
    for (int64_t p = 0, e = cell->numDevices(); p < e; ++p)
      ids.push_back(cell->mesh().deviceAt(p));
  CellZero cellZero{DeviceIndex(std::move(ids)), {}};
  cellZero.where.resize(cellZero.index.size());
  for (int64_t p = 0, e = source.numDevices(); p < e; ++p)
    if (cellOf(p, batch.sourceStrides, batch.sizes).first == 0)
      cellZero.where[cellZero.index.at(source.mesh().deviceAt(p))]
          .sourcePosition = p;
  for (int64_t p = 0, e = destination.numDevices(); p < e; ++p)
    if (cellOf(p, batch.destinationStrides, batch.sizes).first == 0)
      cellZero.where[cellZero.index.at(destination.mesh().deviceAt(p))]
          .destinationPosition = p;
  return cellZero;
}

/// Moving a cell's devices keeps their roles: a device in both meshes of
/// cell 0 moves to one device in every cell, and no two devices of cell 0
/// move to one device of a cell.
absl::Status checkRoles(ReshardBatch &batch, const TensorLayout &source,
                        const TensorLayout &destination) {
  CellZero cellZero = cellZeroDevices(batch, source, destination);
  for (int64_t c = 1; c < batch.numCells; ++c) {
    CellShift shift = cellShift(batch, c, 0);
    for (int32_t i = 0; i < cellZero.index.size(); ++i) {
      const CellDevice &where = cellZero.where[i];
      if (where.sourcePosition >= 0 && where.destinationPosition >= 0 &&
          source.mesh().deviceAt(where.sourcePosition + shift.source) !=
              destination.mesh().deviceAt(where.destinationPosition +
                                          shift.destination))
        return absl::InvalidArgumentError(absl::StrCat(
            "device ", cellZero.index.idAt(i),
            " is in both meshes of cell 0 but the batch axes move it to two "
            "devices in cell ",
            c));
    }
  }
  std::vector<int64_t> sourceIds;
  for (int64_t p = 0, e = source.numDevices(); p < e; ++p)
    sourceIds.push_back(source.mesh().deviceAt(p));
  DeviceIndex sourceIndex(sourceIds);
  std::vector<int64_t> sourcePosition(sourceIndex.size());
  for (int64_t p = 0, e = source.numDevices(); p < e; ++p)
    sourcePosition[sourceIndex.at(sourceIds[p])] = p;
  for (int64_t p = 0, e = destination.numDevices(); p < e; ++p) {
    int64_t device = destination.mesh().deviceAt(p);
    int32_t dense = sourceIndex.at(device);
    if (dense < 0)
      continue;
    int64_t position = sourcePosition[dense];
    auto [sourceCell, sourceBase] =
        cellOf(position, batch.sourceStrides, batch.sizes);
    auto [destinationCell, destinationBase] =
        cellOf(p, batch.destinationStrides, batch.sizes);
    if (sourceCell == destinationCell &&
        source.mesh().deviceAt(sourceBase) !=
            destination.mesh().deviceAt(destinationBase))
      return absl::InvalidArgumentError(
          absl::StrCat("device ", device, " of cell ", sourceCell,
                       " stands for two devices of cell 0 (",
                       source.mesh().deviceAt(sourceBase), " and ",
                       destination.mesh().deviceAt(destinationBase), ")"));
    batch.cellsShareDevices |= sourceCell != destinationCell;
    if (sourceCell != destinationCell &&
        sameSlab(batch, sourceCell, destinationCell))
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", device, " holds source data of cell ", sourceCell,
          " that it needs in cell ", destinationCell,
          ", which a plan per cell would send instead of copying"));
  }
  if ((batch.cellSource.mesh() == batch.cellDestination.mesh()) !=
      (source.mesh() == destination.mesh()))
    return absl::InvalidArgumentError(
        "the meshes of cell 0 are equal but the whole meshes differ, so "
        "partial sums would be kept in one cell and reduced in another");
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<ReshardBatch>
makeReshardBatch(const TensorLayout &source, const TensorLayout &destination,
                 const std::vector<BatchAxis> &axes) {
  if (source.shape() != destination.shape())
    return absl::InvalidArgumentError("the layouts have different shapes");
  ReshardBatch batch{axes, {}, {}, {}, {}, 1, false, source, destination};
  for (const BatchAxis &axis : axes) {
    int64_t size = 1, slab = 0;
    if (absl::Status status = dropBatchAxis(
            batch.cellSource, batch.cellDestination, axis, size, slab);
        !status.ok())
      return status;
    batch.sizes.push_back(size);
    batch.slabs.push_back(slab);
    batch.sourceStrides.push_back(
        axisStride(source.mesh(), *source.mesh().axisIndex(axis.source)));
    batch.destinationStrides.push_back(axisStride(
        destination.mesh(), *destination.mesh().axisIndex(axis.destination)));
    batch.numCells *= size;
  }
  if (absl::Status status = checkRoles(batch, source, destination);
      !status.ok())
    return status;
  return batch;
}

namespace {
/// The greedy search of findBatchAxes. With `checkEachAxis`, an axis is kept
/// only when the batch so far passes every check of makeReshardBatch; else
/// only when its layouts allow it (dropBatchAxis), and the caller checks the
/// result once.
std::vector<BatchAxis> searchBatchAxes(const TensorLayout &source,
                                       const TensorLayout &destination,
                                       bool checkEachAxis) {
  std::vector<BatchAxis> found;
  TensorLayout cellSource = source, cellDestination = destination;
  auto tryAxis = [&](BatchAxis axis) {
    if (!checkEachAxis) {
      TensorLayout nextSource = cellSource, nextDestination = cellDestination;
      int64_t size = 1, slab = 0;
      if (!dropBatchAxis(nextSource, nextDestination, axis, size, slab).ok())
        return false;
      found.push_back(std::move(axis));
      cellSource = std::move(nextSource);
      cellDestination = std::move(nextDestination);
      return true;
    }
    std::vector<BatchAxis> axes = found;
    axes.push_back(axis);
    absl::StatusOr<ReshardBatch> batch =
        makeReshardBatch(source, destination, axes);
    if (!batch.ok())
      return false;
    found = std::move(axes);
    cellSource = batch->cellSource;
    cellDestination = batch->cellDestination;
    return true;
  };
  // Dimensions first, major axis first: each factored axis uncovers the
  // next one of its dimension.
  for (bool progress = true; progress;) {
    progress = false;
    const std::vector<DimSharding> &dims = cellSource.sharding().dims;
    for (size_t d = 0; !progress && d < dims.size(); ++d) {
      const std::vector<AxisRef> &refs = dims[d].axes;
      const std::vector<AxisRef> &other =
          cellDestination.sharding().dims[d].axes;
      if (refs.empty() || other.empty() ||
          cellSource.mesh().axes[refs.front().axis].size < 2)
        continue;
      progress = tryAxis({cellSource.mesh().axes[refs.front().axis].name,
                          cellDestination.mesh().axes[other.front().axis].name,
                          static_cast<int64_t>(d)});
    }
  }
  // Then axes neither layout uses, paired by name first, else by size.
  for (bool progress = true; progress;) {
    progress = false;
    const Mesh &from = cellSource.mesh(), &to = cellDestination.mesh();
    for (size_t a = 0; !progress && a < from.axes.size(); ++a) {
      if (from.axes[a].size < 2 ||
          usesAxis(cellSource.sharding(), static_cast<int>(a)))
        continue;
      std::vector<size_t> candidates;
      for (size_t b = 0; b < to.axes.size(); ++b)
        if (to.axes[b].size == from.axes[a].size &&
            !usesAxis(cellDestination.sharding(), static_cast<int>(b)))
          candidates.push_back(b);
      std::stable_partition(
          candidates.begin(), candidates.end(),
          [&](size_t b) { return to.axes[b].name == from.axes[a].name; });
      for (size_t b : candidates)
        if ((progress = tryAxis({from.axes[a].name, to.axes[b].name, -1})))
          break;
    }
  }
  return found;
}
} // namespace

std::optional<ReshardBatch> findReshardBatch(const TensorLayout &source,
                                             const TensorLayout &destination) {
  // Most reshards pass the checks with every axis their layouts allow: check
  // once; else search again, checking each axis (each check is linear in
  // the devices).
  for (bool checkEachAxis : {false, true}) {
    std::vector<BatchAxis> axes =
        searchBatchAxes(source, destination, checkEachAxis);
    if (axes.empty())
      return std::nullopt;
    absl::StatusOr<ReshardBatch> batch =
        makeReshardBatch(source, destination, axes);
    if (batch.ok())
      return std::move(*batch);
  }
  return std::nullopt;
}

std::vector<BatchAxis> findBatchAxes(const TensorLayout &source,
                                     const TensorLayout &destination) {
  std::optional<ReshardBatch> batch = findReshardBatch(source, destination);
  return batch ? batch->axes : std::vector<BatchAxis>{};
}

std::optional<PlanOptions> cellPlanOptions(const ReshardBatch &batch,
                                           const PlanOptions &options) {
  PlanOptions cellOptions = options;
  if (batch.cellsShareDevices)
    cellOptions.memoryLimitBytes /= 2;
  if (options.memoryLimitBytes > 0 && cellOptions.memoryLimitBytes == 0)
    return std::nullopt;
  return cellOptions;
}

absl::StatusOr<TransferPlan> planCellReshard(const ReshardBatch &batch,
                                             int64_t elementBytes,
                                             const PlanOptions &options) {
  std::optional<PlanOptions> cellOptions = cellPlanOptions(batch, options);
  if (!cellOptions)
    return absl::InvalidArgumentError(
        "a memory limit of 1 byte cannot be halved between two cells");
  return planReshard(batch.cellSource, batch.cellDestination, elementBytes,
                     *cellOptions);
}

namespace {

/// The reduced layout of the whole reshard from cell 0's: the batch axes
/// lead the dimensions they split, the cell's axes follow, renamed to the
/// whole source mesh's indices.
absl::StatusOr<TensorLayout> expandReducedLayout(const TensorLayout &cell,
                                                 const ReshardBatch &batch,
                                                 const TensorLayout &source) {
  const Mesh &mesh = source.mesh();
  auto toWhole = [&](AxisRef ref) {
    ref.axis = *mesh.axisIndex(cell.mesh().axes[ref.axis].name);
    return ref;
  };
  Sharding sharding = source.sharding();
  for (size_t d = 0; d < sharding.dims.size(); ++d) {
    std::vector<AxisRef> axes;
    for (size_t i = 0; i < batch.axes.size(); ++i)
      if (batch.axes[i].dim == static_cast<int64_t>(d))
        axes.push_back(
            AxisRef::whole(mesh, *mesh.axisIndex(batch.axes[i].source)));
    for (const AxisRef &ref : cell.sharding().dims[d].axes)
      axes.push_back(toWhole(ref));
    sharding.dims[d].axes = std::move(axes);
  }
  sharding.unreduced.clear();
  for (const AxisRef &ref : cell.sharding().unreduced)
    sharding.unreduced.push_back(toWhole(ref));
  return TensorLayout::create(mesh, std::move(sharding), source.shape());
}

/// Steps whose kind still holds for the union of the cells' copies (a
/// permutation of permutations of different devices is one); the
/// collectives over groups stay one step per group.
bool mergesCells(StepKind kind) {
  return kind == StepKind::LocalCopy || kind == StepKind::ZeroFill ||
         kind == StepKind::SendRecv || kind == StepKind::CollectivePermute;
}

/// Moves cell 0's steps to other cells: devices by table, boxes by shift.
class CellMover {
public:
  CellMover(const ReshardBatch &batch, const TensorLayout &source,
            const TensorLayout &destination)
      : batch(batch), source(source), destination(destination),
        cellZero(cellZeroDevices(batch, source, destination)) {}

  /// Cell 0's devices, in id order.
  const DeviceIndex &cellZeroIndex() const { return cellZero.index; }

  void moveTo(int64_t cell, size_t rank) {
    shift = cellShift(batch, cell, rank);
    identity = cell == 0;
  }
  int64_t device(int64_t id) const {
    if (identity)
      return id;
    const CellDevice &where = cellZero.of(id);
    return where.sourcePosition >= 0
               ? source.mesh().deviceAt(where.sourcePosition + shift.source)
               : destination.mesh().deviceAt(where.destinationPosition +
                                             shift.destination);
  }
  Transfer transfer(const Transfer &cell) const {
    Transfer moved = cell;
    moved.srcDevice = device(cell.srcDevice);
    for (int64_t &id : moved.dstDevices)
      id = device(id);
    std::sort(moved.dstDevices.begin(), moved.dstDevices.end());
    moveBox(moved.box);
    return moved;
  }
  ReductionPieces pieces(const ReductionPieces &cell) const {
    ReductionPieces moved = cell;
    for (int64_t &id : moved.owners)
      id = device(id);
    for (Box &box : moved.pieces)
      moveBox(box);
    return moved;
  }
  /// Cell 0's exchange step moved: its members' tiles in the order of the
  /// moved members, sorted as Step::devices are.
  void exchange(const Step &cell, Step &moved) const {
    std::vector<size_t> order(cell.devices.size());
    std::vector<int64_t> members;
    for (int64_t id : cell.devices)
      members.push_back(device(id));
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return members[a] < members[b]; });
    moved.devices.clear();
    moved.exchange.emplace();
    for (size_t i : order) {
      moved.devices.push_back(members[i]);
      moved.exchange->sources.push_back(cell.exchange->sources[i]);
      moved.exchange->destinations.push_back(cell.exchange->destinations[i]);
      moveBox(moved.exchange->sources.back());
      moveBox(moved.exchange->destinations.back());
    }
  }

private:
  void moveBox(Box &box) const {
    for (size_t d = 0; d < shift.box.size(); ++d) {
      box.lo[d] += shift.box[d];
      box.hi[d] += shift.box[d];
    }
  }

  const ReshardBatch &batch;
  const TensorLayout &source, &destination;
  CellZero cellZero;
  CellShift shift;
  bool identity = true;
};

} // namespace

std::vector<std::vector<int64_t>>
cellDeviceTable(const ReshardBatch &batch, const TensorLayout &source,
                const TensorLayout &destination) {
  CellMover mover(batch, source, destination);
  const DeviceIndex &cellZero = mover.cellZeroIndex();
  std::vector<std::vector<int64_t>> table(batch.numCells);
  for (int64_t c = 0; c < batch.numCells; ++c) {
    mover.moveTo(c, 0);
    table[c].reserve(cellZero.size());
    for (int32_t i = 0; i < cellZero.size(); ++i)
      table[c].push_back(mover.device(cellZero.idAt(i)));
  }
  return table;
}

absl::StatusOr<TransferPlan>
expandBatchedPlan(const TransferPlan &cellPlan, const ReshardBatch &batch,
                  const TensorLayout &source, const TensorLayout &destination) {
  auto [transfers, receivers] = planSize(cellPlan);
  if (transfers * batch.numCells > kMaxPlanTransfers ||
      receivers * batch.numCells > kMaxPlanReceivers)
    return absl::ResourceExhaustedError(absl::StrCat(
        "the plan of ", batch.numCells, " cells of ", transfers,
        " transfers would hold ", transfers * batch.numCells, " transfers and ",
        receivers * batch.numCells, " receivers; at most ", kMaxPlanTransfers,
        " and ", kMaxPlanReceivers, " are supported (docs/limits.md)"));

  TransferPlan plan;
  plan.shape = source.shape();
  plan.elementBytes = cellPlan.elementBytes;
  plan.memoryLimitBytes = cellPlan.memoryLimitBytes;
  plan.identity = cellPlan.identity;
  plan.reducesInPlace = cellPlan.reducesInPlace;
  if (cellPlan.reducedLayout) {
    absl::StatusOr<TensorLayout> reduced =
        expandReducedLayout(*cellPlan.reducedLayout, batch, source);
    if (!reduced.ok())
      return reduced.status();
    plan.reducedLayout = std::move(*reduced);
  }
  plan.reductionLowerBoundBytes =
      cellPlan.reductionLowerBoundBytes * batch.numCells;
  plan.reshardLowerBoundBytes =
      cellPlan.reshardLowerBoundBytes * batch.numCells;
  plan.lowerBoundBytes = cellPlan.lowerBoundBytes * batch.numCells;

  CellMover mover(batch, source, destination);
  size_t rank = source.shape().size();
  for (const Step &cellStep : cellPlan.steps) {
    bool merged = mergesCells(cellStep.kind);
    for (int64_t c = 0; c < batch.numCells; ++c) {
      mover.moveTo(c, rank);
      if (!merged || c == 0)
        plan.steps.push_back({cellStep.kind, cellStep.chunk, {}, {}});
      Step &step = plan.steps.back();
      for (int64_t device : cellStep.devices)
        step.devices.push_back(mover.device(device));
      for (const Transfer &transfer : cellStep.transfers)
        step.transfers.push_back(mover.transfer(transfer));
      // A reduction never merges cells: its pieces move with its cell.
      if (cellStep.pieces)
        step.pieces = mover.pieces(*cellStep.pieces);
      // Nor does an exchange, whose tiles follow its members' order.
      if (cellStep.exchange)
        mover.exchange(cellStep, step);
      else if (!merged)
        std::sort(step.devices.begin(), step.devices.end());
    }
    if (merged) {
      // A device may be a sender in one cell and a receiver in another.
      std::vector<int64_t> &devices = plan.steps.back().devices;
      std::sort(devices.begin(), devices.end());
      devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    }
  }
  recomputePlanStats(plan);
  return plan;
}

} // namespace polymesh::planner
