//===- PolymeshOps.td - Polymesh operations ----------------*- tablegen -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_DIALECT_POLYMESH_OPS_TD
#define POLYMESH_DIALECT_POLYMESH_OPS_TD

include "polymesh/Dialect/Polymesh/PolymeshBase.td"
include "polymesh/Dialect/Polymesh/PolymeshAttrs.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Polymesh_MeshOp : Polymesh_Op<"mesh",
    [Symbol, HasParent<"mlir::ModuleOp">]> {
  let summary = "Declares a named device mesh";
  let description = [{
    ```mlir
    polymesh.mesh @mesh1  = <["a"=2, "b"=4]>
    polymesh.mesh @stage1 = <["dp"=2, "tp"=2], device_ids=[4, 5, 6, 7]>
    polymesh.mesh @dev3   = <[], device_ids=[3]>
    ```
    Declares a mesh that shardings refer to by symbol. Any number of meshes
    may coexist, over the same, overlapping or disjoint devices.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Polymesh_MeshAttr:$mesh);
  let assemblyFormat = "$sym_name `=` $mesh attr-dict";
}

class Polymesh_ShardingOpBase<string mnemonic, list<Trait> traits = []>
    : Polymesh_Op<mnemonic, traits # [SameOperandsAndResultType,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let arguments = (ins AnyRankedTensor:$input,
                       Polymesh_ShardingAttr:$sharding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input $sharding attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Polymesh_ShardingConstraintOp
    : Polymesh_ShardingOpBase<"sharding_constraint", [Pure]> {
  let summary = "Constrains the sharding of a value";
  let description = [{
    ```mlir
    %y = polymesh.sharding_constraint %x <@mesh1, [{"a"}, {} ]> : tensor<16x16xf32>
    ```
    The result has exactly the given sharding; its closed dimensions are
    fixed, its open ones may be extended by propagation. Propagation may
    insert a `polymesh.reshard` in front of it when the operand arrives with
    another sharding.
  }];
}

def Polymesh_ReshardOp : Polymesh_ShardingOpBase<"reshard", [Pure]> {
  let summary = "Moves a value to another sharding, possibly on another mesh";
  let description = [{
    ```mlir
    %z = polymesh.reshard %y <@mesh3, [{"c"}, {} ]> : tensor<16x16xf32>
    ```
    An explicit data movement: the result holds the operand's value laid out
    with the given sharding, which may name a different mesh (other axes,
    other devices). `--polymesh-plan` turns it into device-level transfers.
  }];
}


def Polymesh_TransferOp : Polymesh_Op<"transfer", [Pure,
    SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A planned reshard: device-level box transfers";
  let description = [{
    ```mlir
    %1 = polymesh.transfer %0 <@replica0, [{}, {"tp"} ]> -> <@train, [{}, {"tp"} ]> steps [
      local_copy chunk 0 devices [0] {0 -> [0], [0, 0] : [4096, 512]},
      broadcast chunk 0 devices [0, 2, 4] {0 -> [2, 4], [0, 0] : [4096, 512]}
    ] : tensor<4096x1024xf32>
    ```
    The result is the operand moved from the `source` sharding to the
    `destination` sharding by the listed steps, in order. Each device holds
    a *source buffer* (its source tile) and a *destination buffer* (its
    destination tile); a box transfer copies a box, in global tensor
    coordinates, out of the sender's buffer into each receiver's buffer.
    `--polymesh-plan` creates these ops from `polymesh.reshard`; both the CPU
    and the CUDA lowering consume them.

    A plan of a reshard that repeats over mesh axes lists only its first
    cell, after `batch`:
    ```mlir
    %1 = polymesh.transfer %0 <@pod, [{"dp", "fsdp"}, {"tp"} ]> -> <@pod, [{"dp"}, {"tp"} ]>
        batch [#polymesh.batch_axis<"dp" -> "dp", dim = 0>,
               #polymesh.batch_axis<"tp" -> "tp", dim = 1>]
        steps [all_gather chunk 0 devices [0, 4] {0 -> [4], [0, 0] : [8, 24]} ...] : tensor<64x48xf32>
    ```
    The steps are those of cell 0, the devices at coordinate 0 of every
    batch axis, in global coordinates; cell `c` runs them on its own devices
    (moved along the batch axes) and, for an axis with `dim`, on its own slab
    of that dimension. `--polymesh-plan{batch-min-devices=N}` plans this
    way when a reshard over at least N devices repeats (docs/planner.md,
    "Batched plans"): planning and the IR cost one cell, not the pod.

    The verifier checks that the shardings fit the tensor, that every
    sender and receiver holds the buffer a transfer reads or writes and that
    the box lies inside its tile there, that steps are ordered by chunk,
    and, for plans without partial sums, that every destination device
    receives exactly as many elements as its tile holds. An empty plan is
    allowed only between device-equivalent shardings. With `batch`, it
    checks that the axes are batch axes of the reshard and the steps
    against cell 0's tiles.
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       Polymesh_ShardingAttr:$source,
                       Polymesh_ShardingAttr:$destination,
                       TypedArrayAttrBase<Polymesh_TransferStepAttr,
                                          "transfer steps">:$steps,
                       OptionalAttr<TypedArrayAttrBase<Polymesh_BatchAxisAttr,
                                          "batch axes">>:$batch);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input $source `->` $destination (`batch` $batch^)?
    `steps` custom<TransferSteps>($steps) attr-dict `:` type($result)
  }];
}

def Polymesh_ExchangeOp : Polymesh_Op<"exchange", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "One device's part of a planned transfer, on local tiles";
  let description = [{
    ```mlir
    %t = polymesh.exchange %src plan @restore__plan0
        on %rt, %device, %position : tensor<4096x512xf32> -> tensor<256x1024xf32>
    ```
    `--polymesh-partition` turns every `polymesh.transfer` of a global
    function into this op in each of the function's per-device programs. The
    operand is the calling device's source tile and the result its
    destination tile (exact tile extents: 0 where the device holds nothing).
    `plan` names a private function marked `polymesh.plan` whose body is the
    original global `polymesh.transfer`: the plan is stored once, whatever
    the number of device programs that run it, and both CPU and CUDA
    lowerings derive every device's work from it. `%rt` is the runtime handle
    of the run, `%device` the calling device's id and `%position` its index
    in the sorted device list of the partitioned function (the row of every
    per-device table).

    The op communicates, so it is not pure: every device of the plan must
    execute it, in program order with the other exchanges.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$plan,
                       AnyType:$runtime, I64:$device, Index:$position);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `plan` $plan `on` $runtime `,` $device `,` $position attr-dict
    `:` type($runtime) `,` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Polymesh_PropagationDirection : I32EnumAttr<"PropagationDirection",
    "Which way propagation may pass a barrier", [
      I32EnumAttrCase<"NONE", 0>,
      I32EnumAttrCase<"FORWARD", 1>,
      I32EnumAttrCase<"BACKWARD", 2>,
      I32EnumAttrCase<"BOTH", 3>,
    ]> {
  let cppNamespace = "::polymesh";
}

def Polymesh_PropagationBarrierOp : Polymesh_Op<"propagation_barrier",
    [Pure, SameOperandsAndResultType]> {
  let summary = "Stops sharding propagation in some directions";
  let description = [{
    ```mlir
    %y = polymesh.propagation_barrier %x allowed_direction=FORWARD : tensor<16x16xf32>
    ```
    As Shardy's `sdy.propagation_barrier`: the result is the operand, and
    `--polymesh-propagate` passes a sharding across it only in the allowed
    direction: `FORWARD` (operand to result), `BACKWARD` (result to
    operand), `BOTH` or `NONE`. The op is gone after propagation: where the
    two sides end up with different shardings it becomes a
    `polymesh.reshard` to the result's.
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       Polymesh_PropagationDirection:$allowed_direction);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `allowed_direction` `` `=` `` $allowed_direction attr-dict `:`
    type($result)
  }];
  let extraClassDeclaration = [{
    bool allowsForward() {
      return getAllowedDirection() == PropagationDirection::FORWARD ||
             getAllowedDirection() == PropagationDirection::BOTH;
    }
    bool allowsBackward() {
      return getAllowedDirection() == PropagationDirection::BACKWARD ||
             getAllowedDirection() == PropagationDirection::BOTH;
    }
  }];
}

def Polymesh_ShardingGroupOp : Polymesh_Op<"sharding_group"> {
  let summary = "Puts a value in a group whose members share one sharding";
  let description = [{
    ```mlir
    polymesh.sharding_group %x group_id=3 : tensor<16x16xf32>
    ```
    As Shardy's `sdy.sharding_group`: every value put in group `N` (anywhere
    in the function) gets the same sharding from `--polymesh-propagate`. A
    sharding that reaches one member reaches all of them. Members whose
    shardings were fixed differently before (annotations) are a conflict:
    propagation warns and gives the group the sharding that moves the fewest
    bytes, with a `polymesh.reshard` after each member that had another.
    The op has no result and is gone after propagation.
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$group_id);
  let assemblyFormat = [{
    $input `group_id` `` `=` `` $group_id attr-dict `:` type($input)
  }];
  let hasVerifier = 1;
}

#endif // POLYMESH_DIALECT_POLYMESH_OPS_TD
