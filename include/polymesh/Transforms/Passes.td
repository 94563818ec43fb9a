//===- Passes.td - Polymesh passes -------------------------*- tablegen -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_TRANSFORMS_PASSES_TD
#define POLYMESH_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PolymeshPropagate : Pass<"polymesh-propagate", "mlir::ModuleOp"> {
  let summary = "Gives every tensor value and function result a sharding, "
                "keeping each leaf's mesh";
  let description = [{
    Resolves a sharding for every tensor value of every function, and for
    every function result (every *leaf* of the caller's pytree), over any
    number of meshes. Decisions follow a fixed priority:

    1. **Annotations.** Function argument and result shardings,
       `polymesh.sharding_constraint`, `polymesh.reshard` and
       `polymesh.sharding` attributes on ops are kept exactly.
    2. **Propagation through ops**, forward and backward, in rounds over the
       function in program order until nothing changes. Each op is described
       by factors: the loops of upstream's `ShardingInterface` (indexing maps
       and iterator types: linalg, tosa), identity factors for elementwise
       ops, one factor per expanded dimension for `tensor.expand_shape` /
       `tensor.collapse_shape` (an axis is split into sub-axes where it must
       straddle two dimensions). A value that nothing placed yet takes the
       sharding the op's other values imply; an open dimension (`?`) of a
       placed value may be extended by appended axes, never by axes its
       `replicated={...}` lists. A constant used by several ops is
       materialized once per use, so that each use is placed with its user.
    3. **Conflicts.** When the values of one op live on different meshes, or
       on incompatible shardings of one mesh, the op is placed where the
       fewest bytes must move (the per-device lower bound of every reshard it
       needs), ties broken by the more sharded placement and then by the
       placement's text, never by operand or result position. Explicit
       `polymesh.reshard` ops are inserted for every operand (or annotated
       result) that must move.
    4. **Ambient mesh.** Values that nothing places are replicated on
       `polymesh.ambient_mesh` (of the function, else of the module). A value
       placed on a mesh, such as a single device, is never moved there.
    5. **Errors.** Without an ambient mesh, an unplaced leaf is an error that
       names its index and `polymesh.leaf` path.

    Shardy's propagation controls are honoured:

    - **User priorities** (`{"a"}p1`; a dimension without one is `p0`):
      propagation runs one stage per written priority, best first, in which
      dimensions of a worse priority are not sources yet; where shardings
      of different priorities meet, a placement that moves only dimensions
      of the worse priority wins over one that moves fewer bytes. With
      priorities, a dimension propagation leaves without axes stays open
      (`?`), so that a later priority may still split it.
    - **Op priorities**: in every sweep, pass-through ops (elementwise ops,
      sharding constraints, barriers, groups) propagate to a fixed point
      before the others (dots, reshapes, reductions).
    - **Open declared shardings** of arguments and results take the axes
      their values have there (`{"a", ?}` may become `{"a", "b", ?}`).
    - **Sharding groups** (`polymesh.sharding_group`): all members get one
      sharding; members placed differently beforehand take the one that
      moves the fewest bytes, with a warning and a reshard after each other
      member.
    - **Barriers** (`polymesh.propagation_barrier`): shardings cross only in
      the allowed direction; a side kept unplaced is replicated on the other
      side's mesh; afterwards the barrier is its operand, or a reshard where
      the sides differ.

    Calls are propagated by specialization: before anything is placed, each
    `func.call` of a function with a body is replaced by a copy of that body
    (callees first), so each site is placed by its own operands and uses.
    The callee's argument and result shardings, and the call's own
    `polymesh.sharding`, become sharding constraints at the site. Private
    callees left without calls are erased. Recursive call graphs, callees of
    more than one block, and functions into which more than
    `max-specialized-ops` ops would be copied are refused at the call (or
    function) with a diagnostic.

    Control flow (`scf.for`, `scf.while`, `scf.if`, `scf.index_switch`):
    each carried value (a loop's region argument and result, a branch's
    result) gets one sharding, placed like any value; inits and yields in
    another layout are resharded at the boundary (before the op, before the
    terminator). Once propagation has converged, a carried value takes one
    of its feeders' shardings instead where that moves no more bytes and is
    more sharded (docs/propagation.md, section 10). A reshard directly in a
    loop body of a value defined outside the loop is hoisted before it.

    Afterwards every op with tensor results carries `polymesh.sharding` (one
    sharding, or an array with one per result), every function argument and
    result carries `polymesh.sharding`, and wherever a returned value's
    sharding differs from the declared result sharding (other than by being
    device-equivalent) a `polymesh.reshard` is inserted before the return.
    A result without a declared sharding takes its value's sharding, on its
    value's mesh; partial sums (`unreduced`) are reduced before they leave a
    function unless the result declares them. A reduction over a sharded
    dimension yields `unreduced` axes (sum reductions only).

    Ops that no rule describes are computed replicated on the placement
    chosen for them, with explicit reshards and a warning; they are never
    given a silently wrong sharding.
  }];
  let options = [
    Option<"maxSpecializedOps", "max-specialized-ops", "int64_t",
           /*default=*/"::polymesh::kDefaultMaxSpecializedOps",
           "The most ops that specializing calls may copy into one function "
           "(docs/limits.md)">,
  ];
  let dependentDialects = ["::polymesh::PolymeshDialect"];
}

def PolymeshPrintLeaves : Pass<"polymesh-print-leaves", "mlir::ModuleOp"> {
  let summary = "Prints one row per function result: its mesh, sharding and tiles";
  let description = [{
    Prints, for every function of the module, a table with one row per
    function result (one *leaf* of the caller's pytree): its index, its
    `polymesh.leaf` path (`-` when it has none), its shape and element type,
    its mesh (symbol, axes and device ids), its sharding (as written in
    `#polymesh.sharding`, without the mesh) and the local tile shape every
    device of the mesh allocates. Results of rank 1 and 2 are followed by a
    tile map in the manner of `jax.debug.visualize_array_sharding`: one cell
    per block of the tensor, giving the block's index ranges and the ids of
    the devices that hold it. Maps of more than 64 blocks are omitted.

    It is meant to run after `--polymesh-propagate`, which gives every
    function result a `polymesh.sharding`; a result without one is reported
    as `unplaced`. A sharding that names no `polymesh.mesh` is an error. The
    pass does not change the IR, and its output depends only on the IR.

    ```sh
    polymesh-opt input.mlir --polymesh-propagate \
        --polymesh-print-leaves=output=- -o /dev/null
    ```
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"\"",
           "Where to write the table: a file path, '-' for stdout; stderr when empty">,
  ];
}


def PolymeshPlan : Pass<"polymesh-plan", "mlir::ModuleOp"> {
  let summary = "Turns every polymesh.reshard into a planned polymesh.transfer";
  let description = [{
    Plans every `polymesh.reshard` with the transfer planner (`lib/Planner`)
    and replaces it with a `polymesh.transfer` whose steps say which box of
    which device goes to which devices, and which collective carries it.
    Plans are bytes-optimal (every device receives exactly what it lacks),
    spread the sending load over source replicas, are empty between
    device-equivalent shardings, and are chunked so that no device stages
    more than `memory-limit-bytes` at once. Identical reshards are planned
    once (a thread-safe plan cache keyed by the full input).

    A reshard that cannot be planned (a dynamic shape, a mesh the planner
    rejects, a memory limit too small for one element row) is an error at
    its location; no reshard is left behind.

    Options:
    * `memory-limit-bytes=N`: staging bytes per device at once (0: no limit).
    * `stats-file=PATH`: one JSON object per reshard, no-ops included, with
      `function`, `location`, `shape`, `dtype`, `source`, `destination`,
      `bytes_moved`, `lower_bound_bytes`, `max_device_recv_bytes`,
      `max_device_send_bytes`, `peak_temp_bytes` and `steps` (a count per
      step kind). `-` writes to stdout.
    * `print-plan`: prints a readable plan of every reshard to stdout.
    * `comm-matrix=PATH`: writes an SVG heat map of the bytes each device
      sends to each other device, over all reshards of the module.
    * `batch-min-devices=N` (default 1024; 0: never): a reshard whose
      meshes have at least N devices and that repeats over mesh axes
      (`planner::findBatchAxes`: axes that both shardings split a dimension
      first over, or that neither uses) is planned for one cell and written
      with `batch` (see `polymesh.transfer`), so that planning time and IR
      grow with one cell, not with the pod. The expanded plan is the same
      kind of plan, bytes-optimal for the whole reshard.
    * `reduction-pieces` (default true): write each all-reduce and
      reduce-scatter whose transfers follow from its pieces as those pieces
      (`pieces {owner: lo : hi}...`, see `polymesh.transfer`): n numbers
      per group of n members instead of about n^2 transfers. Without a
      memory limit the planner makes them as pieces in the first place
      (`PlanOptions::symbolicReductions`), and the lowering schedules the
      collective from the pieces, so a sum over 65,536 devices never lists
      its 8.6 billion transfers anywhere. False writes every transfer out.
    * `exchange-tiles` (default true): a reshard that is an all-to-all of
      whole tiles (both shardings over one set of devices, each device
      holding its own tile in both, no dimension split by both, so every
      source tile meets every destination tile: a transpose of the
      sharding, rows over "x" to columns over "x") is planned without a
      memory limit as its local copies and one `all_to_all` step written
      as `tiles` (see `polymesh.transfer`): n ids instead of n(n-1)
      transfers, and the lowering schedules one all-to-all call per device
      from it. False lists every transfer.
  }];
  let dependentDialects = ["::polymesh::PolymeshDialect"];
  let options = [
    Option<"memoryLimitBytes", "memory-limit-bytes", "int64_t",
           /*default=*/"0",
           "Most staging bytes a device may hold at once (0: unlimited)">,
    Option<"statsFile", "stats-file", "std::string", /*default=*/"\"\"",
           "Write one JSON object per reshard to this file ('-': stdout)">,
    Option<"printPlan", "print-plan", "bool", /*default=*/"false",
           "Print a readable plan of every reshard to stdout">,
    Option<"commMatrix", "comm-matrix", "std::string", /*default=*/"\"\"",
           "Write a device x device bytes matrix as SVG to this file">,
    Option<"batchMinDevices", "batch-min-devices", "int64_t",
           /*default=*/"1024",
           "Plan one cell of reshards that repeat over mesh axes when their "
           "meshes have at least this many devices (0: never)">,
    Option<"reductionPieces", "reduction-pieces", "bool", /*default=*/"true",
           "Write reductions as their pieces where those determine their "
           "transfers (false: every transfer)">,
    Option<"exchangeTiles", "exchange-tiles", "bool", /*default=*/"true",
           "Plan all-to-alls of whole tiles as one symbolic step (false: "
           "every transfer)">,
  ];
}

def PolymeshPartition : Pass<"polymesh-partition", "mlir::ModuleOp"> {
  let summary = "Rewrites each planned global function into per-device "
                "local programs";
  let description = [{
    Runs after `--polymesh-propagate` and `--polymesh-plan`. Every function
    with a body becomes the local programs its devices run:

    * **Devices.** A function's devices are the sorted union of the device
      ids of every mesh it names; a device's *position* is its index there.
    * **Local types.** Every tensor value becomes the device's exact tile:
      the extents of its box (uneven tiles are short, not padded), and 0 in
      every dimension on a device outside the value's mesh, so ops placed on
      another mesh compute on empty tensors there: nothing to guard.
    * **Classes.** Devices whose tiles have the same extents for every value
      run the same code: each class gets one function `@<name>__part<k>`
      with static local types, the attributes `polymesh.partition_of` (the
      global function) and `polymesh.devices` (the ids that run it), and
      three leading arguments: the runtime handle (`!llvm.ptr`), the device
      id (`i64`) and the device's position (`index`), and `polymesh.meshes`
      (the meshes whose devices the positions count). Classes are numbered
      in the order of their first device. An evenly sharded program has one
      class per combination of meshes a device belongs to, whatever the
      number of devices.
    * **Devices of one process.** With `devices=...`, only the classes
      that one of those devices runs are built, and `polymesh.devices`
      lists only those of its devices: what one process of a multi-process
      run compiles (docs/multi-process.md). Classes keep the numbers they
      have over every device, so a class has one name in every process;
      the lowering then builds plan rows for these devices only.
    * **Constants.** A splat becomes a splat of the tile; any other dense
      constant is sliced (`tensor.extract_slice`) at the device's tile
      offsets, read from a table indexed by the position.
    * **Transfers.** Each planned `polymesh.transfer` moves into a private
      function marked `polymesh.plan`, stored once, and every class runs it
      as `polymesh.exchange` on its tiles. A `polymesh.sharding_constraint`
      is the identity on tiles.
    * **Partial sums.** An op whose result is unreduced computes its
      partial sum from its local tiles; its init must be zero (an init would
      otherwise be counted once per member of the reduction group).
    * **Control flow.** `scf.for`, `scf.while`, `scf.if` and
      `scf.index_switch` keep their form: region arguments and results take
      their tiles' types and the regions are partitioned in place. Every
      device runs them (the exchanges inside are collective), so their
      decisions (bounds, conditions, switch indices, and what feeds them
      through carried scalars) may read only values that every device of
      the function holds whole.
    * Every other op keeps its semantics on tiles: elementwise ops, linalg
      and tosa contractions, transposes, reductions, and reshapes, whose
      target shapes (`tensor.expand_shape`'s output shape, `tosa.reshape`'s
      shape operand) become local.

    The global functions are erased. Errors (a value without a sharding, an
    unplanned `polymesh.reshard`, calls, tensors inside other regions, a
    decision not every device holds, an op whose local form does not
    verify) name the op and fail the pass.

    Each device class runs every step of its function's plans, so the code
    the lowering emits grows with classes x steps. The module's total of
    such step copies (of the classes built) is bounded by `max-step-copies` (default 65,536, where
    the CPU lowering emits some hundred megabytes); a module over it is
    refused at the function that crosses it.
  }];
  let options = [
    Option<"maxStepCopies", "max-step-copies", "int64_t",
           /*default=*/"int64_t(1) << 16",
           "Most copies of plan steps (device classes x steps) per module">,
    ListOption<"devices", "devices", "int64_t",
               "Build only the classes these devices run (one process's "
               "devices); default: every device">,
  ];
  let dependentDialects = ["::polymesh::PolymeshDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // POLYMESH_TRANSFORMS_PASSES_TD
