//===- MovementRunner.h - Sharded runs of data movement ---------*- C++ -*-===//
//
// Part of Polymesh. No MLIR types in this API: tests build programs, corrupt
// tiles and check the comparison without an MLIR context.
//
//===----------------------------------------------------------------------===//
//
// A function whose body only moves data (planned transfers and sharding
// constraints) needs no partitioned code to run sharded: every value is its
// arguments' data in another layout, and the plan executor moves it. This is
// that run, on the loopback backend, and the per-device comparison with the
// unsharded reference that `polymesh-run --verify` reports
// (docs/execution.md, "The verification contract").
//
// A MovementProgram lists values in dataflow order: function arguments,
// transfers (a planner TransferPlan from an earlier value) and aliases (a
// sharding constraint: the same tiles under another name). runMovement gives
// every device its input tiles (fillTile, so they hold exactly the
// reference's inputs), runs every transfer in program order on every device
// thread through one LoopbackBackend, and returns each result's tiles;
// compareWithReference checks them against the reference's boxes bit for
// bit.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_MOVEMENTRUNNER_H
#define POLYMESH_EXECUTION_MOVEMENTRUNNER_H

#include "polymesh/Execution/HostTensor.h"
#include "polymesh/Planner/Layout.h"
#include "polymesh/Planner/TransferPlan.h"
#include "polymesh/Runtime/Runtime.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace polymesh::execution {

/// The runtime's element type for sums. i1 is one byte holding 0 or 1; it
/// is summed as u8, which is exact for partials where one member holds the
/// value and the others zeros, as makeShardedInput places them.
runtime::DataType toDataType(ElementType type);

/// A tensor distributed over devices: every device of the layout's mesh
/// holds a row-major tile whose element 0 is the global index of its box lo.
/// Tiles are either padded to localShape() (the plan executor's buffer
/// model; elements past the box, the padding of a short or empty trailing
/// tile, mean nothing) or exact, of the box's extents (the partitioned
/// program's local types). Where the layout has unreduced axes, each tile is
/// a partial sum and the value is the sum over every reduction group.
struct ShardedTensor {
  ElementType elementType;
  planner::TensorLayout layout;
  /// Per device id of the layout's mesh, its tile.
  std::map<int64_t, HostTensor> tiles;
};

/// What the devices of one reduction group hold of their box together: the
/// first member's tile for a singleton, else the sum of every member's
/// partials (as the values of `box`, [0, hi - lo) of each tile).
HostTensor groupTile(const ShardedTensor &actual,
                     const std::vector<int64_t> &group,
                     const planner::Box &box);

/// The global tensor whose tiles `tensor` holds (no unreduced axes): every
/// element from the devices whose box covers it. Errors: two devices hold
/// different bits for one element, or none holds it.
llvm::Expected<HostTensor> assembleReplicas(const ShardedTensor &tensor);

/// The shape of a device's tile in a ShardedTensor.
enum class TileShape {
  /// localShape() on every device, short tiles padded with zeros: what the
  /// plan executor reads and writes.
  Padded,
  /// The extents of the device's box (hi - lo): what partitioned code takes.
  Exact,
};

/// Argument `stream` of the fill (InputFill.h) in `layout`: every device
/// fills its own box, so the tiles hold the reference's input. With
/// unreduced axes the first device of each reduction group holds the values
/// and the others zeros: partials that sum to the input exactly, in every
/// type (adding zeros rounds nothing).
ShardedTensor makeShardedInput(ElementType type,
                               const planner::TensorLayout &layout,
                               uint32_t stream,
                               TileShape shape = TileShape::Padded);

/// One value of a movement-only program.
struct MovementValue {
  enum class Kind {
    /// Function argument `argument`, filled as stream `argument`.
    Argument,
    /// `plan` applied to value `input`, whose layout must place the same
    /// tiles as `source`.
    Transfer,
    /// Value `input` under another name (a sharding constraint): its layout
    /// must place the same tiles as `layout`.
    Alias,
  };
  Kind kind = Kind::Argument;
  ElementType elementType = ElementType::F32;
  /// Where the value lives: for a transfer, the plan's destination.
  planner::TensorLayout layout;
  int64_t argument = -1;
  int64_t input = -1;
  /// Transfers only: the plan and the layout it reads from.
  std::optional<planner::TransferPlan> plan;
  std::optional<planner::TensorLayout> source;

  // A TensorLayout has no empty state, so values are made by these.
  static MovementValue makeArgument(ElementType type,
                                    planner::TensorLayout layout,
                                    int64_t argument);
  static MovementValue makeTransfer(ElementType type, int64_t input,
                                    planner::TransferPlan plan,
                                    planner::TensorLayout source,
                                    planner::TensorLayout destination);
  static MovementValue makeAlias(ElementType type, int64_t input,
                                 planner::TensorLayout layout);
};

struct MovementProgram {
  /// In dataflow order: a value's input comes before it.
  std::vector<MovementValue> values;
  /// Per function result: the value it returns, and the layout the function
  /// declares for it (which must place the same tiles as the value's).
  std::vector<int64_t> results;
  std::vector<planner::TensorLayout> resultLayouts;
};

struct MovementRun {
  /// Per function result, its tiles in the declared layout.
  std::vector<ShardedTensor> results;
  /// Sum of the plans' bytesMoved.
  int64_t bytesMoved = 0;
  /// Devices of the backend: every device of every layout of the program.
  int64_t numDevices = 0;
  /// Wall time of the run on the device threads (thread start and join
  /// included; allocating and filling tiles happen before and are not).
  double wallMs = 0;
};

/// Runs `program` on a LoopbackBackend over every device its layouts name,
/// one thread per device. Errors: a program whose layouts do not line up
/// (an input or result in other tiles than the transfer or declaration
/// expects), a plan the executor rejects, or the backend's first error
/// (timeouts, mismatched calls), with its message.
/// Makes the backend a sharded run uses for `devices` (sorted ids); the
/// default is the loopback backend.
using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<runtime::Backend>>(
        const std::vector<int64_t> &devices)>;

llvm::Expected<MovementRun> runMovement(const MovementProgram &program,
                                        const BackendFactory &makeBackend = {});

/// The first tile of `actual` that differs from `reference`.
struct TileMismatch {
  /// The device whose tile differs; for a value with unreduced axes, the
  /// first device of the reduction group whose partials sum to another
  /// value.
  int64_t device = 0;
  /// The first differing element in global coordinates (empty when the
  /// element types or shapes differ).
  std::vector<int64_t> globalIndex;
  Mismatch mismatch;

  /// One line, e.g. "device 5: value at [2, 3]: expected 1.5 (0x3fc00000),
  /// got 1.75 (0x3fe00000)".
  std::string message() const;
};

/// Compares every device's tile of `actual` (padded or exact), its box only
/// (not the padding),
/// with the same box of `reference` (HostTensor::extractBox), bit for bit,
/// devices in ascending id order. A layout with unreduced axes is compared
/// per reduction group, as the sum of its partials in the element type.
/// Returns the first mismatch, or nothing when every tile matches.
std::optional<TileMismatch> compareWithReference(const HostTensor &reference,
                                                 const ShardedTensor &actual);

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_MOVEMENTRUNNER_H
